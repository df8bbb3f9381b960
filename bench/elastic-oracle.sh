#!/usr/bin/env bash
# Elastic CoCoA's best case in hindsight (issue 14): every switch point of a single scale-in
# (16, 8, 4 -> 1, 2) and of 16 -> 4 -> 1, forced through the policy's own merge, against the
# best static K and Chicle's rule, on the simulated cluster clock (bench/src/bin/elastic-oracle.rs).
# If the fastest schedule in hindsight is below the issue's 2.5x, no scale-in policy reaches it.
#
#   bench/elastic-oracle.sh            # about 25 minutes on 2 cores
#
# The sets, generated into $LINEA_CACHE/elastic-bench with new rows (docs/benchmarks/elastic-cocoa.md,
# "Generated sets with distinct rows"): criteo-g150k (criteo-gen, 150,000 rows, no crosses)
# and higgs-g200k (resample tsv, 200,000 rows), both seed 1.
set -euo pipefail
. "$(dirname "$0")/../scripts/env.sh"
. "$(dirname "$0")/lib.sh"
cd "$LINEA_ROOT"

data=${LINEA_DATA:-/work/shared/data}
build_release
bin=$CARGO_TARGET_DIR/release
work=${LINEA_CACHE:-$HOME/.cache/linea}/elastic-bench
mkdir -p "$work"
if [ ! -f "$work/criteo-g150k.tsv" ]; then
    "$bin/criteo-gen" --sample "$data/criteo-sample/train.tsv" --rows 150000 --seed 1 --crosses 0 > "$work/criteo-g150k.tsv.tmp"
    mv "$work/criteo-g150k.tsv.tmp" "$work/criteo-g150k.tsv"
fi
prepare_grid "$work" criteo-g150k "$work/criteo-g150k.tsv" criteo
if [ ! -f "$work/higgs-g200k.tsv" ]; then
    "$bin/resample" tsv "$data/higgs-sample/higgs.train.tsv" 200000 1 > "$work/higgs-g200k.tsv.tmp"
    mv "$work/higgs-g200k.tsv.tmp" "$work/higgs-g200k.tsv"
fi
prepare_grid "$work" higgs-g200k "$work/higgs-g200k.tsv" csv

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "before: $(uptime)"
nice -n 10 "$bin/elastic-oracle" "$@" "criteo-g150k=$work/criteo-g150k" "higgs-g200k=$work/higgs-g200k"
echo "after: $(uptime)"
