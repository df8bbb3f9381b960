#!/usr/bin/env bash
# SCD sweep throughput in non-zeros per second per thread, on the Criteo sample scaled up
# by bench/src/bin/scale-criteo.rs (see its header for exactly how): the bare sweep and
# whole epochs (`--full`), each beside this machine's rate of streaming the same cells.
# Instructions per non-zero (load-independent): run scd-sweep under
# `valgrind --tool=callgrind` (see bench/src/bin/scd-sweep.rs).
#
#   bench/scd-throughput.sh [ROWS]     (default 2,000,000 rows, about 69M non-zeros)
#
# A benchmark, not a test: it prints figures, it asserts nothing.
. "$(dirname "$0")/../scripts/env.sh"
rows="${1:-2000000}"
work="${LINEA_BENCH_WORK:-$LINEA_CACHE/bench/criteo-$rows}"
data="${LINEA_DATA:-$LINEA_ROOT/../shared/data}"
bin="$CARGO_TARGET_DIR/release"

build_release
mkdir -p "$work"
if [ ! -f "$work/grid/manifest.json" ]; then
    "$bin/scale-criteo" "$data/criteo-sample/train.tsv" "$rows" > "$work/criteo.tsv"
    "$bin/linea" prepare --input "$work/criteo.tsv" --format criteo --output "$work/grid" --rows-per-shard 65536
    rm -f "$work/criteo.tsv"
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
for threads in 1 "$(nproc)"; do
    "$bin/scd-sweep" "$work/grid" "$threads" 3
    "$bin/scd-sweep" "$work/grid" "$threads" 3 --full
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
