#!/usr/bin/env bash
# linea's memory per feature (issue 20, docs/benchmarks/past-the-memory-wall.md "Bytes per feature"): the same
# criteo-gen rows (seed 1) with 2 crosses and with 8, so the two grids differ mostly in
# their feature count, each trained by `linea train --workers 1 --cache-mb 16` (master and
# worker processes, cells read through a 16 MiB cache) under memcap, which reports the
# whole job's peak and each process's. The difference of the peaks over the difference of
# the feature counts is the memory per feature. With MASSIF=1 each run is repeated under
# valgrind's massif (heap only; minutes) and the peak snapshot of every process is
# printed as a flat table of linea's allocation sites (bench/massif_sites.py).
#
#   [MASSIF=1] bench/bytes-per-feature.sh [ROWS] [EPOCHS]    (default 200,000 rows, 6 epochs)
#
# A benchmark, not a test: it prints figures, it asserts nothing.
. "$(dirname "$0")/../scripts/env.sh"
rows="${1:-200000}"
epochs="${2:-6}"
work="${LINEA_BENCH_WORK:-$LINEA_CACHE/bench/bytes-per-feature-$rows}"
data="${LINEA_DATA:-$LINEA_ROOT/../shared/data}"
bin="$CARGO_TARGET_DIR/release"

build_release
mkdir -p "$work"
features() { grep -o '"features": *[0-9]*' "$1/manifest.json" | grep -o '[0-9]*$' | paste -sd+ | bc; }
declare -A count peak
for crosses in 2 8; do
    grid="$work/grid-x$crosses"
    if [ ! -f "$grid/manifest.json" ]; then
        "$bin/criteo-gen" --sample "$data/criteo-sample/train.tsv" --rows "$rows" --crosses "$crosses" |
            "$bin/linea" prepare --quiet --input /dev/stdin --format criteo --output "$grid" --threads 1
    fi
    count[$crosses]=$(features "$grid")
    echo "== $crosses crosses: ${count[$crosses]} features, load $(cut -d' ' -f1-3 /proc/loadavg)"
    "$bin/memcap" --name "x$crosses" -- "$bin/linea" train --quiet --data "$grid" --model "$work/x$crosses.model" \
        --algorithm scd --workers 1 --threads 2 --cache-mb 16 --epochs "$epochs" >/dev/null 2> "$work/x$crosses.mem"
    cat "$work/x$crosses.mem"
    peak[$crosses]=$(grep -o 'peak sum of VmRSS [0-9.]*' "$work/x$crosses.mem" | grep -o '[0-9.]*$')
    if [ "${MASSIF:-0}" = 1 ]; then
        rm -f "$work"/massif.x"$crosses".*
        valgrind --tool=massif --trace-children=yes --massif-out-file="$work/massif.x$crosses.%p" --threshold=0.5 \
            "$bin/linea" train --quiet --data "$grid" --model "$work/x$crosses.model" --algorithm scd --workers 1 \
            --threads 2 --cache-mb 16 --epochs "$epochs" >/dev/null 2>&1
        for f in "$work"/massif.x"$crosses".*; do
            head -2 "$f" | tail -1 | cut -c1-60
            python3 "$LINEA_ROOT/bench/massif_sites.py" "$f"
        done
    fi
done
awk -v a="${peak[8]}" -v b="${peak[2]}" -v f="${count[8]}" -v g="${count[2]}" 'BEGIN {
    printf "memory per feature: %.0f bytes (peak sum of VmRSS, %d - %d features)\n", (a - b) * 1048576 / (f - g), f, g }'
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
