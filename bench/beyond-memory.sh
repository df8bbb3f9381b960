#!/usr/bin/env bash
# Past the memory wall (issue 20): genuinely new Criteo rows from criteo-gen
# (bench/src/criteo_gen.rs), prepared into a grid on disk, trained by `linea train
# --workers 1 --cache-mb` so the worker's cell cache holds only part of the grid; the
# optimum is established by a long SCD run and cross-checked by L-BFGS on the same grid.
#
#   bench/beyond-memory.sh [ROWS] [CACHE_MB] [CROSSES]   (default 50,000,000 rows, 2048 MiB, 8)
#
# Small versions run in minutes: `bench/beyond-memory.sh 1000000 64`. Prints the generated
# rows' column statistics against the sample's (first min(ROWS, 1M) rows), the grid's size,
# the memory LIBLINEAR would need (16 bytes per feature_node: each non-zero, the bias and
# the row's terminator), and per run its peak RSS, seconds per epoch and the seconds to
# 1e-4 and 1e-6 of the optimum. A benchmark, not a test: it asserts nothing.
. "$(dirname "$0")/../scripts/env.sh"
rows="${1:-50000000}"
cache_mb="${2:-2048}"
crosses="${3:-8}"
work="${LINEA_BENCH_WORK:-$LINEA_CACHE/bench/criteo-gen-$rows-x$crosses}"
data="${LINEA_DATA:-$LINEA_ROOT/../shared/data}"
bin="$CARGO_TARGET_DIR/release"
load() { cut -d' ' -f1-3 /proc/loadavg; }

build_release
mkdir -p "$work"
echo "== $(date -u +%T) statistics, load $(load)"
"$bin/criteo-gen" --sample "$data/criteo-sample/train.tsv" --stats "$((rows < 1000000 ? rows : 1000000))" \
    --crosses "$crosses" > "$work/stats.md" || echo "a statistic is off: see $work/stats.md"
tail -1 "$work/stats.md"
if [ ! -f "$work/grid/manifest.json" ]; then
    echo "== $(date -u +%T) generate $rows rows, load $(load)"
    /usr/bin/time -f "generate: %e s, peak RSS %M KB" \
        "$bin/criteo-gen" --sample "$data/criteo-sample/train.tsv" --rows "$rows" --crosses "$crosses" > "$work/gen.tsv"
    ls -l "$work/gen.tsv"
    echo "== $(date -u +%T) prepare, load $(load)"
    /usr/bin/time -f "prepare: %e s, peak RSS %M KB" \
        "$bin/linea" prepare --quiet --input "$work/gen.tsv" --format criteo --output "$work/grid" --threads 2
    rm -f "$work/gen.tsv"
fi
du -sh "$work/grid"
"$bin/linea" inspect --data "$work/grid" 2>/dev/null | head -20 || true
nnz=$(grep -o '"nnz": *[0-9]*' "$work/grid/manifest.json" | head -1 | grep -o '[0-9]*$' || true)
[ -n "$nnz" ] && echo "LIBLINEAR's feature_nodes: $(( (nnz + 2 * rows) * 16 / 1048576 )) MiB (nnz $nnz)"

# run NAME ALGORITHM EPOCHS TOLERANCE: a bounded-cache run, its trace at $work/NAME.csv.
run() {
    echo "== $(date -u +%T) $1 ($2, at most $3 epochs), load $(load)"
    /usr/bin/time -f "$1: %e s, peak RSS %M KB (the larger of the master and its waited-for worker)" \
        "$bin/linea" train --quiet --data "$work/grid" --model "$work/$1.model" --algorithm "$2" \
        --epochs "$3" --tolerance "$4" --workers 1 --threads 2 --cache-mb "$cache_mb" --trace "$work/$1.csv" \
        2> >(tee "$work/$1.time" >&2)
    echo "   load after $(load)"
}

run reference-scd scd 400 1e-13
run reference-lbfgs lbfgs 300 0
fstar=$(awk -F, 'FNR > 1 {if (min == "" || $3 < min) min = $3} END {printf "%.17g", min}' \
    "$work/reference-scd.csv" "$work/reference-lbfgs.csv")
echo "optimum f* = $fstar (the lower of the two references' last objectives)"
for ref in reference-scd reference-lbfgs; do
    awk -F, -v f="$fstar" -v n="$ref" 'FNR > 1 {last = $3; e = $1} END {printf "%s: %d epochs, objective %.12g, relative to f* %.2e\n", n, e, last, (last - f) / f}' "$work/$ref.csv"
done
# Times to 1e-4 and 1e-6 of f*, on the SCD run's own clock (its trace's seconds).
awk -F, -v f="$fstar" 'FNR > 1 {
        r = ($3 - f) / f
        if (!t4 && r <= 1e-4) t4 = $2
        if (!t6 && r <= 1e-6) t6 = $2
        e = $1; s = $2
    } END {
        printf "scd: %d epochs in %.1f s (%.2f s per epoch); to 1e-4: %s s, to 1e-6: %s s\n",
            e, s, s / e, t4 ? t4 : "never", t6 ? t6 : "never"
    }' "$work/reference-scd.csv"
echo "== $(date -u +%T) done, load $(load)"
