#!/usr/bin/env bash
# The bytes of the SCD models linea trains on every shared dataset, as SHA-256 digests: run
# it before and after a change to the engine's arithmetic and diff the two outputs. A change
# that claims "the same bytes" must print the same lines. SCD is named (`--algorithm scd`):
# `linea train`'s default chooses the algorithm from the data.
#
#   bench/model-hashes.sh [--cocoa|--linear] [OUT_DIR]     (default $LINEA_CACHE/model-hashes; about 1 min here)
#
# Each set is prepared as the tests prepare it, then trained twice: with the defaults
# (the stopping rule decides) and with `--tolerance 0 --epochs 40` (a fixed, longer run
# that reaches the rounding floor), on 1 and 2 threads (which must agree). Prints
# `dataset run digest epochs`.
#
# --cocoa: CoCoA's models instead (l2 = 1): `k1`, one slot to a relative gap of 1e-6 (the
# one-slot path, docs/algorithms.md "One slot"), and `k3`, three slots for a fixed 15
# epochs (`--gap-tolerance 0`), each on 1 and 2 threads; not adult and protein-kdd2004,
# where no dual coordinate method converges (docs/benchmarks/cocoa-k1-against-liblinear.md, issue 13).
#
# --linear: the batch family's models instead (l2 = 1, at most 200 epochs each, without the
# certified stop, `--gap-tolerance 0`, so the digests follow the iterates alone): `lbfgs`,
# `hybrid` (K = 4 slots; 1 on rcv1-small, which has one grain of rows) and `ipm` (K as the
# hybrid, 10 epochs), each on 1 and 2 threads, plus a9a with squared loss (`a9a-squared`),
# the case that made the hybrid's warm start diverge (docs/algorithms.md, the hybrid); and
# the truncated Newton batch solver, alone (`newton`) and after the hybrid's warm start
# (`hybrid-newton`), at most 200 iterations each.
set -euo pipefail
. "$(dirname "$0")/../scripts/env.sh"
data="${LINEA_DATA:-$LINEA_ROOT/../shared/data}"
cocoa=false
linear=false
case "${1:-}" in
    --cocoa) cocoa=true && shift ;;
    --linear) linear=true && shift ;;
esac
out="${1:-$LINEA_CACHE/model-hashes}"
mkdir -p "$out"

# name | input | loss | prepare arguments
sets=(
    "a9a|a9a/a9a.train.libsvm|logistic|--format libsvm"
    "w8a|w8a/w8a.libsvm|logistic|--format libsvm"
    "rcv1-small|rcv1-small/rcv1_small.vw|logistic|--format vw"
    "criteo-sample|criteo-sample/train.tsv|logistic|--format criteo"
    "higgs-sample|higgs-sample/higgs.train.tsv|logistic|--format csv"
    "adult|adult/adult.parquet|logistic|--format parquet --label income --positive >50K"
    "protein-kdd2004|protein-kdd2004/protein.parquet|logistic|--format parquet --label target --ignore EXAMPLE_ID,BLOCK_ID"
    "movielens-100k|movielens-100k/ratings.vw|squared|--format vw"
)
$linear && sets+=("a9a-squared|a9a/a9a.train.libsvm|squared|--format libsvm")
for entry in "${sets[@]}"; do
    IFS='|' read -r name input loss prep <<<"$entry"
    if $cocoa && { [ "$name" = adult ] || [ "$name" = protein-kdd2004 ]; }; then
        continue
    fi
    grid="$out/$name.grid"
    if [ ! -f "$grid/manifest.json" ]; then
        # shellcheck disable=SC2086
        "$LINEA_BIN" prepare --input "$data/$input" --output "$grid" $prep >/dev/null
    fi
    runs=(default long)
    $cocoa && runs=(k1 k3)
    $linear && runs=(lbfgs hybrid ipm newton hybrid-newton)
    slots=4
    [ "$name" = rcv1-small ] && slots=1
    for run in "${runs[@]}"; do
        case "$run" in
            default) extra=(--algorithm scd) ;;
            long) extra=(--algorithm scd --tolerance 0 --epochs 40) ;;
            k1) extra=(--algorithm cocoa --slots 1 --gap-tolerance 1e-6) ;;
            k3) extra=(--algorithm cocoa --slots 3 --gap-tolerance 0 --epochs 15) ;;
            lbfgs) extra=(--algorithm lbfgs --epochs 200 --gap-tolerance 0) ;;
            hybrid) extra=(--algorithm hybrid --slots "$slots" --epochs 200 --gap-tolerance 0) ;;
            ipm) extra=(--algorithm ipm --slots "$slots" --epochs 10 --gap-tolerance 0) ;;
            newton) extra=(--algorithm lbfgs --batch-solver newton --epochs 200 --gap-tolerance 0) ;;
            hybrid-newton) extra=(--algorithm hybrid --slots "$slots" --batch-solver newton --epochs 200 --gap-tolerance 0) ;;
        esac
        for threads in 1 2; do
            model="$out/$name.$run.t$threads.model"
            "$LINEA_BIN" train --data "$grid" --model "$model" --loss "$loss" --l2 1 --threads "$threads" \
                "${extra[@]}" --trace "$out/$name.$run.t$threads.csv" >/dev/null 2>&1
            epochs=$(($(wc -l <"$out/$name.$run.t$threads.csv") - 1))
            echo "$name $run t$threads $(sha256sum "$model" | cut -c1-16) $epochs"
        done
    done
done
