#!/usr/bin/env bash
# The fuzz targets of fuzz/ (docs/fuzzing.md): libFuzzer through the libfuzzer-sys crate,
# built with the stable toolchain alone.
#
#   scripts/fuzz.sh build                  build every target (instrumented, once per change)
#   scripts/fuzz.sh list                   the targets, one a line
#   scripts/fuzz.sh run [TARGET...]        fuzz each target (default: all) for
#                                          $LINEA_FUZZ_SECONDS seconds (default 15) from its
#                                          checked-in corpus; exit 1 on the first crash,
#                                          printing the input that crashed. $LINEA_FUZZ_SEED
#                                          fixes libFuzzer's seed (scripts/test.sh uses 1, so
#                                          CI's run is reproducible); unset: a random one
#   scripts/fuzz.sh cmin TARGET DIR...     merge the inputs of DIR... into fuzz/corpus/TARGET,
#                                          keeping only those that add coverage (libFuzzer
#                                          -merge=1), so the corpus stays small
#
# The replay of the checked-in corpus is not here: it is a test of the normal build
# (fuzz/tests/corpus.rs, in `cargo test --workspace`), so CI needs no instrumented build.
#
# All targets are one binary (fuzz/src/lib.rs): linking a binary with linea's dependencies
# takes about a minute on two cores, so one link instead of one per target.
#
# Why no cargo-fuzz and no nightly: cargo-fuzz adds `-Zsanitizer=...` only for a sanitizer;
# with `--sanitizer none` it passes stable `-C` flags, which this script passes itself (the
# same list as cargo-fuzz 0.12), so CI needs neither the cargo-fuzz binary nor a nightly
# toolchain. What is lost without AddressSanitizer is its memory checking, which safe Rust
# does not need; libFuzzer still reports panics, aborts, timeouts and memory growth
# (-rss_limit_mb), and every target also refuses any single allocation over 256 MiB
# (fuzz/src/lib.rs).
#
# The build has its own target dir in the cache ($LINEA_CACHE/target-fuzz-<rustc version>)
# and profile (`fuzz` in Cargo.toml: the decoders optimised, the rest not): instrumented code
# must never mix with the normal build's. `--target` is passed so the flags reach only the
# code that runs in the fuzzer, not build scripts or proc macros.
. "$(dirname "$0")/env.sh"
cd "$LINEA_ROOT/fuzz"  # the corpus paths below are relative to it

triple="$(rustc -vV | awk '/^host:/ {print $2}')"
export CARGO_TARGET_DIR="$LINEA_CACHE/target-fuzz-$rust_version"
bin_dir="$CARGO_TARGET_DIR/$triple/fuzz"
seconds="${LINEA_FUZZ_SECONDS:-15}"

flags=(
    -Cpasses=sancov-module
    -Cllvm-args=-sanitizer-coverage-level=4
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters
    -Cllvm-args=-sanitizer-coverage-pc-table
    -Cllvm-args=-sanitizer-coverage-trace-compares
    -Cllvm-args=-sanitizer-coverage-stack-depth
    --cfg fuzzing
    -Cdebug-assertions
    -Coverflow-checks
)

# The targets, as fuzz/src/lib.rs lists them (one binary; LINEA_FUZZ_TARGET picks one).
targets() {
    sed -n 's/^    ("\([a-z_]*\)", targets::.*/\1/p' src/lib.rs
}

build() {
    echo "== building the fuzz targets (instrumented; $CARGO_TARGET_DIR)" >&2
    RUSTFLAGS="${flags[*]}" cargo build --profile fuzz --locked --target "$triple" -p linea-fuzz --features libfuzzer --bin linea-fuzz >&2
}

# libFuzzer's options for every run: a crash stops it; one input may take 10 s; the
# process may hold 2 GiB. Inputs up to 64 KiB (the seeds are smaller).
options=(-timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1)
[ -z "${LINEA_FUZZ_SEED:-}" ] || options+=(-seed="$LINEA_FUZZ_SEED")

run_one() {
    local target="$1" work
    work="$(mktemp -d)"
    mkdir -p "$work/corpus" "$work/artifacts"
    echo "== fuzz $target for ${seconds}s (corpus: fuzz/corpus/$target)"
    if ! LINEA_FUZZ_TARGET="$target" "$bin_dir/linea-fuzz" "${options[@]}" -max_total_time="$seconds" -artifact_prefix="$work/artifacts/" \
        "$work/corpus" "corpus/$target" >"$work/log" 2>&1; then
        tail -40 "$work/log"
        for crash in "$work"/artifacts/*; do
            [ -f "$crash" ] || continue
            echo "-- $target crashed on $(basename "$crash") ($(stat -c %s "$crash") bytes), base64:"
            head -c 4096 "$crash" | base64 -w 0
            echo
            mkdir -p "$LINEA_CACHE/fuzz-crashes/$target"
            cp "$crash" "$LINEA_CACHE/fuzz-crashes/$target/"
            echo "-- kept in $LINEA_CACHE/fuzz-crashes/$target/"
        done
        rm -rf "$work"
        return 1
    fi
    grep -E '^(stat::number_of_executed_units|stat::new_units_added|Done )' "$work/log" | tr '\n' ' '
    echo
    rm -rf "$work"
}

case "${1:-}" in
build) build ;;
list) targets ;;
run)
    shift
    build
    [ $# -gt 0 ] || mapfile -t all < <(targets)
    status=0
    for target in "${@:-${all[@]}}"; do
        run_one "$target" || status=1
    done
    exit $status
    ;;
cmin)
    [ $# -ge 3 ] || { echo "usage: $0 cmin TARGET DIR..." >&2; exit 2; }
    target="$2"
    shift 2
    build
    mkdir -p "corpus/$target"
    LINEA_FUZZ_TARGET="$target" "$bin_dir/linea-fuzz" "${options[@]}" -merge=1 "corpus/$target" "$@"
    ;;
*)
    sed -n '2,34p' "$0" >&2
    exit 2
    ;;
esac
