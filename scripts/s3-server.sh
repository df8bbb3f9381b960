#!/usr/bin/env bash
# A real S3 server on loopback for the storage tests: s3s-fs (the s3s project's S3 server
# over a local folder), built from crates.io at a pinned version with the same Rust
# toolchain as linea and cached under $LINEA_CACHE/s3s-fs-<version>, so a fresh machine
# (CI) builds it once and later runs reuse it.
#
#   scripts/s3-server.sh install              build if missing; print the binary's path
#   scripts/s3-server.sh run ROOT PORT        run in the foreground (exec), data under ROOT;
#                                             PORT 0: the kernel picks one, and with
#                                             RUST_LOG=s3s_fs=info the server prints
#                                             "server is running at http://127.0.0.1:N"
#   scripts/s3-server.sh start ROOT PORT      run in the background; wait until it answers
#   scripts/s3-server.sh stop ROOT            stop the server started for ROOT
#
# S3_HOST (default 127.0.0.1) is the address it listens on; e2e/cluster-journey.sh sets
# the one-node cluster's bridge address so that pods reach it.
# Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (the server then checks
# every request's SigV4 signature); without them it accepts anonymous requests.
# Why s3s-fs and not MinIO: it builds with cargo alone in a few minutes on two cores (MinIO
# is a far larger Go build), and it implements what linea relies on: SigV4 authentication,
# path-style addressing, multipart upload and CRC32C checksums.
. "$(dirname "$0")/env.sh"

S3S_FS_VERSION=0.14.1
dir="$LINEA_CACHE/s3s-fs-$S3S_FS_VERSION"
bin="$dir/bin/s3s-fs"

install() {
    mkdir -p "$LINEA_CACHE"
    # One build at a time: test binaries and people may ask at once.
    exec 9>"$dir.lock"
    flock 9
    if [ ! -x "$bin" ]; then
        echo "== building s3s-fs $S3S_FS_VERSION into $dir (once per machine)" >&2
        # A private target dir: the build must not fight linea's over the cache lock, and
        # the finished binary is all that is kept.
        rm -rf "$dir.partial"
        CARGO_TARGET_DIR="$dir/target" cargo install s3s-fs --version "$S3S_FS_VERSION" \
            --features binary --locked --root "$dir.partial" >&2
        rm -rf "$dir/target"
        mkdir -p "$dir/bin"
        mv "$dir.partial/bin/s3s-fs" "$bin"
        rm -rf "$dir.partial"
    fi
    flock -u 9
    exec 9>&-
    echo "$bin"
}

args() {
    local root="$1" port="$2"
    mkdir -p "$root"
    set -- --host "${S3_HOST:-127.0.0.1}" --port "$port"
    if [ -n "${AWS_ACCESS_KEY_ID:-}" ]; then
        set -- "$@" --access-key "$AWS_ACCESS_KEY_ID" --secret-key "${AWS_SECRET_ACCESS_KEY:-}"
    fi
    printf '%s\n' "$@" "$root"
}

case "${1:-}" in
install) install ;;
run)
    [ $# -eq 3 ] || { echo "usage: $0 run ROOT PORT" >&2; exit 2; }
    install >/dev/null
    mapfile -t a < <(args "$2" "$3")
    exec "$bin" "${a[@]}"
    ;;
start)
    [ $# -eq 3 ] || { echo "usage: $0 start ROOT PORT" >&2; exit 2; }
    install >/dev/null
    mapfile -t a < <(args "$2" "$3")
    "$bin" "${a[@]}" >"$2.log" 2>&1 &
    echo $! >"$2.pid"
    for _ in $(seq 1 600); do
        if (exec 3<>"/dev/tcp/${S3_HOST:-127.0.0.1}/$3") 2>/dev/null; then
            echo "s3s-fs listening on http://${S3_HOST:-127.0.0.1}:$3 (pid $(cat "$2.pid"), data in $2)"
            exit 0
        fi
        kill -0 "$(cat "$2.pid")" 2>/dev/null || { echo "s3s-fs exited; see $2.log" >&2; exit 1; }
        sleep 0.1 # polling interval, not a wait for something to happen
    done
    echo "s3s-fs did not answer on port $3 within 60s; see $2.log" >&2
    exit 1
    ;;
stop)
    [ $# -eq 2 ] || { echo "usage: $0 stop ROOT" >&2; exit 2; }
    [ -f "$2.pid" ] && kill "$(cat "$2.pid")" 2>/dev/null || true
    rm -f "$2.pid"
    ;;
*)
    sed -n '2,21p' "$0" >&2
    exit 2
    ;;
esac
