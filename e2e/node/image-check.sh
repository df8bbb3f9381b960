#!/usr/bin/env bash
# The image that e2e/cluster.sh assembles with umoci is the Dockerfile's runtime image:
#
#   - its file list and config (user, entrypoint, cmd, labels, env) equal what the
#     Dockerfile's last stage and its distroless base hold (e2e/node/images.py expected);
#   - every shared library the two binaries need (ldd) is in it;
#   - it has no shell, as distroless has none;
#   - it works on its own: both binaries start from the unpacked root filesystem (chroot),
#     as uid/gid 65532, with the image's own loader and libc;
#   - the pause image holds one static /pause that runs as 65535.
#
# Usage: image-check.sh [BIN_DIR] (default: this checkout's release build, built first).
# Prints `image check: N passed, M failed` last.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIN_DIR="${1:-}"
if [ -z "$BIN_DIR" ]; then
  . "$HERE/../../scripts/env.sh"
  build_release
  BIN_DIR="$CARGO_TARGET_DIR/release"
fi
passed=0 failed=0
WORK="$(mktemp -d "${TMPDIR:-/tmp}/linea-image-check.XXXXXX")"
finish() {
  local rc=$?
  rm -rf "$WORK"
  if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
  echo "image check: $passed passed, $failed failed"
  [ "$failed" -eq 0 ] || exit 1
}
trap finish EXIT
. "$HERE/../checks.sh"

python3 "$HERE/images.py" build "$WORK/out" "$BIN_DIR" >/dev/null
python3 "$HERE/images.py" expected "$BIN_DIR" >"$WORK/expected"
python3 "$HERE/images.py" actual "$WORK/out/linea.oci.tar" >"$WORK/actual"
check "the assembled image holds exactly the Dockerfile runtime stage's files and config ($(wc -l <"$WORK/expected") lines)" \
  diff "$WORK/expected" "$WORK/actual"
check "... which names the two binaries, nonroot 65532 and the CA bundle" bash -c "
  grep -qx 'file /usr/local/bin/linea' '$WORK/actual' && grep -qx 'file /usr/local/bin/linea-operator' '$WORK/actual' &&
  grep -qx 'user 65532:65532' '$WORK/actual' && grep -qx 'file /etc/ssl/certs/ca-certificates.crt' '$WORK/actual'"

# The root filesystem as a container would see it.
mkdir -p "$WORK/oci"
tar -xf "$WORK/out/linea.oci.tar" -C "$WORK/oci"
umoci unpack --image "$WORK/oci:$(umoci ls --layout "$WORK/oci" | head -n 1)" "$WORK/bundle" >/dev/null
rootfs="$WORK/bundle/rootfs"
libs_present() {
  local lib missing=0
  for lib in $(ldd "$BIN_DIR/linea" "$BIN_DIR/linea-operator" | awk '/=>/ {print $1} /ld-linux/ {print $1}' | sort -u); do
    case "$lib" in
      /*) [ -e "$rootfs$lib" ] || { echo "missing $lib"; missing=1; } ;;
      *) [ -e "$rootfs/usr/lib/x86_64-linux-gnu/$lib" ] || { echo "missing $lib"; missing=1; } ;;
    esac
  done
  return "$missing"
}
check "every library the binaries link (ldd) is in the image" libs_present
check "no shell in the image (as distroless)" bash -c "[ ! -e '$rootfs/bin/sh' ] && [ ! -e '$rootfs/usr/bin/sh' ]"
check "linea runs from the image alone, as 65532 (chroot)" bash -c \
  "chroot --userspec=65532:65532 '$rootfs' /usr/local/bin/linea --version"
check "linea-operator runs from the image alone, as 65532 (chroot)" bash -c \
  "chroot --userspec=65532:65532 '$rootfs' /usr/local/bin/linea-operator --help >/dev/null"

mkdir -p "$WORK/pause-oci"
tar -xf "$WORK/out/pause.oci.tar" -C "$WORK/pause-oci"
umoci unpack --image "$WORK/pause-oci:$(umoci ls --layout "$WORK/pause-oci" | head -n 1)" "$WORK/pause-bundle" >/dev/null
pause_image_ok() {
  local root="$WORK/pause-bundle/rootfs" files
  files="$(cd "$root" && find . -type f)"
  [ "$files" = ./pause ] || { echo "files: $files"; return 1; }
  if ldd "$root/pause" >/dev/null 2>&1; then echo "/pause is dynamically linked"; return 1; fi
  python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); sys.exit(0 if c["process"]["user"]["uid"]==65535 else 1)' \
    "$WORK/pause-bundle/config.json" || { echo "pause does not run as 65535"; return 1; }
}
check "the pause image is one static /pause, run as 65535" pause_image_ok
