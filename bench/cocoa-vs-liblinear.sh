#!/usr/bin/env bash
# CoCoA+ with one slot (SDCA) against LIBLINEAR's dual coordinate descent, the same family
# of method, on every shared dataset: A B A B (2 repeats), single-threaded both, time to
# reach the reference optimum within 1e-3 / 1e-4 / 1e-6 (docs/benchmarks/cocoa-k1-against-liblinear.md, issue 13).
# CoCoA runs to a certified relative duality gap of 1e-6 twice: with its gap schedule
# (linea-cocoa, the default) and computing the gap after every epoch (linea-cocoa-every);
# linea-cocoa-stop runs it to its own stop over a ladder of gap tolerances (1e-2 .. 1e-6) and
# is timed as LIBLINEAR's -e ladder is: the fastest rung whose final model is within 1e-6.
#
#   bench/cocoa-vs-liblinear.sh [--h2] [DATASET:LOSS ...]
#
# --h2 runs CoCoA with 2 local passes per epoch (linea-cocoa-h2: with one slot, H only says
# how often the duality gap is certified) against LIBLINEAR, into results-cocoa-h2/.
#
# Results: bench/peers/results-cocoa[-h2]/<dataset>.<loss>.l2=1.jsonl (read by
# bench/peers/summarize.py --results bench/peers/results-cocoa, which prints the table).
set -euo pipefail
. "$(dirname "$0")/../scripts/env.sh"
. "$(dirname "$0")/lib.sh"
cd "$LINEA_ROOT"

tool=linea-cocoa,linea-cocoa-every,linea-cocoa-stop out=bench/peers/results-cocoa
if [ "${1:-}" = --h2 ]; then
    tool=linea-cocoa-h2 out=bench/peers/results-cocoa-h2
    shift
fi
sets=("$@")
[ ${#sets[@]} -gt 0 ] || sets=(a9a:logistic w8a:logistic rcv1-small:logistic criteo-sample:logistic
    higgs-sample:logistic adult:logistic protein-kdd2004:logistic movielens-100k:squared)

VENV="$(bash bench/peers/setup.sh)"
build_release --test cli
run_peer_sets "$VENV" "$out" --tools "liblinear-dual,$tool" --linea-tolerance 1e-10 \
    --linea-epochs 3000 --max-seconds 60 --timeout 300 -- "${sets[@]}"
