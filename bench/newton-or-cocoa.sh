#!/usr/bin/env bash
# Where `--algorithm auto` hands many rows per weight to truncated Newton rather than CoCoA
# K=1 (engine/src/choice.rs, COCOA_NNZ_PER_FEATURE and NEWTON_MAX_FEATURES): the two side by
# side, A B A B (2 repeats), one thread, on shared sets at the l2 values that move them across
# the rule's density (non-zeros per feature and unit of l2), time to 1e-3 / 1e-4 / 1e-6 of
# each (set, l2)'s reference optimum (bench/peers/reference.py computes and caches it).
#
#   bench/newton-or-cocoa.sh [DATASET:LOSS:L2 ...]
#
# Default: a9a and w8a at l2 1 .. 0.1, movielens-100k (squared) at 0.1 and 0.03, rcv1-small
# at 0.0005. Results: bench/peers/results-newton-or-cocoa/<set>.<loss>.l2=<l2>.jsonl and the
# summaries on stderr; docs/benchmarks/choosing-the-algorithm.md quotes them.
set -euo pipefail
. "$(dirname "$0")/../scripts/env.sh"
cd "$LINEA_ROOT"

problems=("$@")
if [ ${#problems[@]} -eq 0 ]; then
    for l2 in 1 0.7 0.5 0.4 0.3 0.2 0.1; do problems+=("a9a:logistic:$l2" "w8a:logistic:$l2"); done
    problems+=(movielens-100k:squared:0.1 movielens-100k:squared:0.03 rcv1-small:logistic:0.0005)
fi

VENV="$(bash bench/peers/setup.sh)"
build_release --test cli
out=bench/peers/results-newton-or-cocoa
mkdir -p "$out"
for problem in "${problems[@]}"; do
    IFS=: read -r ds loss l2 <<< "$problem"
    echo "== $ds $loss l2=$l2 $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    nice -n 10 "$VENV/bin/python" bench/peers/run_peers.py --dataset "$ds" --loss "$loss" --l2 "$l2" \
        --tools linea-cocoa,linea-lbfgs-newton --threads 1 --repeats 2 --linea "$CARGO_TARGET_DIR/release/linea" \
        --linea-tolerance 1e-10 --linea-epochs 1000 --max-seconds 60 --timeout 300 \
        --out "$out/$ds.$loss.l2=$l2.jsonl.tmp" 2>&1 | sed -n '/# summary/,$p' >&2
    mv "$out/$ds.$loss.l2=$l2.jsonl.tmp" "$out/$ds.$loss.l2=$l2.jsonl"
done
echo "== done $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
