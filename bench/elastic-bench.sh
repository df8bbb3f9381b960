#!/usr/bin/env bash
# Elastic CoCoA (Chicle's scale-in) against static K, issue 14: time to relative duality gap
# 1e-4 / 1e-5 / 1e-6, hinge loss, Chicle's lambda = 0.01 (l2 = lambda n / 2), static K in
# {1, 2, 4, 8, 16} and elastic 16 -> 1, 16 -> 2 (factor 4: 16 -> 4 -> 1 resp. 16 -> 4 -> 2).
#
#   bench/elastic-bench.sh [--quick] [elastic-bench options: --no-bias, --lambda L, --sigma K, --sigma-cap C, ...]
#
# The sets, built into $LINEA_CACHE/elastic-bench from /work/shared/data (LINEA_DATA), each
# `linea prepare`d with its format's defaults (csv, vw, criteo; the bias an extra feature):
# - higgs: higgs-sample/higgs.train.tsv (7,000 rows, 28 dense columns), every line written
#   $REPEAT times in a row (exact duplicates, so partition k still holds the k-th chunk of the
#   sample; with l2 = lambda n / 2 the minimizer is the sample's);
# - rcv1: rcv1-small/rcv1_small.vw (1,000 rows, ~47k tf-idf features), the same $RCV1_REPEAT times;
# - criteo: criteo-sample/train.tsv scaled to 7,200 * $REPEAT rows by scale-criteo (row i =
#   sample row i mod 7,200, categoricals re-hashed per replica mod 16: no duplicates;
#   bench/src/bin/scale-criteo.rs).
# Full: REPEAT=8, RCV1_REPEAT=16, 40 s of wall time at most per run; --quick: the samples as
# they are (REPEAT=1), 5 s per run.
# Clocks (bench/src/slot_clock.rs): a simulated cluster clock for every setting (each phase
# costs its slowest slot's thread CPU time; the master's thread CPU time is the aggregation;
# no network), and the real wall time for K <= 2, where the pool has one thread per slot.
# The elastic policy runs on the simulated clock. A benchmark, not a test: it asserts nothing.
# Full: about 12 minutes on 2 cores; --quick: about 1. Runs under `nice -n 10`.
set -euo pipefail
. "$(dirname "$0")/../scripts/env.sh"
. "$(dirname "$0")/lib.sh"
cd "$LINEA_ROOT"

data=${LINEA_DATA:-/work/shared/data}
quick=0
[ "${1:-}" = "--quick" ] && { quick=1; shift; }
if [ $quick = 1 ]; then
    REPEAT=1 RCV1_REPEAT=1 budget=(--wall-budget 5 --sim-budget 5)
else
    REPEAT=8 RCV1_REPEAT=16 budget=(--wall-budget 40 --sim-budget 40)
fi
build_release
bin=$CARGO_TARGET_DIR/release
work=${LINEA_CACHE:-$HOME/.cache/linea}/elastic-bench
mkdir -p "$work"

# repeat INPUT TIMES OUTPUT: every line TIMES times in a row.
repeat() {
    [ -f "$3" ] || { awk -v n="$2" '{ for (i = 0; i < n; i++) print }' "$1" > "$3.tmp" && mv "$3.tmp" "$3"; }
}
higgs=higgs-x$REPEAT rcv1=rcv1-x$RCV1_REPEAT criteo=criteo-$((7200 * REPEAT))
repeat "$data/higgs-sample/higgs.train.tsv" "$REPEAT" "$work/$higgs.tsv"
prepare_grid "$work" "$higgs" "$work/$higgs.tsv" csv
repeat "$data/rcv1-small/rcv1_small.vw" "$RCV1_REPEAT" "$work/$rcv1.vw"
prepare_grid "$work" "$rcv1" "$work/$rcv1.vw" vw
if [ ! -f "$work/$criteo.tsv" ]; then
    "$bin/scale-criteo" "$data/criteo-sample/train.tsv" $((7200 * REPEAT)) > "$work/$criteo.tsv.tmp"
    mv "$work/$criteo.tsv.tmp" "$work/$criteo.tsv"
fi
prepare_grid "$work" "$criteo" "$work/$criteo.tsv" criteo

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "before: $(uptime)"
nice -n 10 "$bin/elastic-bench" "${budget[@]}" "$@" "$higgs=$work/$higgs" "$rcv1=$work/$rcv1" "$criteo=$work/$criteo"
echo "after: $(uptime)"
