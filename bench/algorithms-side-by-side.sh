#!/usr/bin/env bash
# linea's algorithms side by side on the same sets (issue 15): SCD, CoCoA+ K=1, L-BFGS
# (Hall et al.'s distributed gradient), the AllReduce paper's hybrid (K=4) and iterative
# parameter mixtures (K=4), L-BFGS and the hybrid with truncated Newton as their batch
# solver (--batch-solver newton), with Vowpal Wabbit's --bfgs and LIBLINEAR's Newton (-s 0 /
# -s 11, the method --batch-solver newton follows) next to them. A B A B (2 interleaved
# repeats), one thread each (SCD also on all cores); time to reach the reference optimum
# within 1e-3 / 1e-4 / 1e-6, and each algorithm's first pass in non-zeros (features) per
# second per core.
#
#   bench/algorithms-side-by-side.sh [DATASET:LOSS ...]      (default: a9a and w8a, logistic)
#
# Results: bench/peers/results-algorithms/<dataset>.<loss>.l2=1.jsonl, and the tables in
# bench/peers/results-algorithms/tables.md and plots/ (bench/peers/summarize.py over those files);
# docs/benchmarks/algorithms-side-by-side.md quotes them with the machine's load.
set -euo pipefail
. "$(dirname "$0")/../scripts/env.sh"
. "$(dirname "$0")/lib.sh"
cd "$LINEA_ROOT"

sets=("$@")
[ ${#sets[@]} -gt 0 ] || sets=(a9a:logistic w8a:logistic)

VENV="$(bash bench/peers/setup.sh)"
# The `linea` that `cargo test --workspace` builds (the same feature resolution: no rebuild).
build_release --test cli
out=bench/peers/results-algorithms
run_peer_sets "$VENV" "$out" --tools linea-scd,linea-cocoa,linea-lbfgs,linea-hybrid,linea-lbfgs-newton,linea-hybrid-newton,linea-ipm,vw-bfgs,liblinear \
    --linea-tolerance 1e-10 --linea-epochs 1000 --max-seconds 60 --timeout 300 -- "${sets[@]}"
: > "$out/tables.md"
"$VENV/bin/python" bench/peers/summarize.py --results "$out" --doc "$out/tables.md" --plots "$out/plots" \
    --command bench/algorithms-side-by-side.sh >/dev/null
echo "tables: $out/tables.md" >&2
