#!/usr/bin/env bash
# CoCoA K=1 (`linea train`'s `auto` on the Criteo scale-ups) against Snap ML to a relative
# error of 1e-6, interleaved A B A B in one command with the load before and after (issue
# 20, docs/benchmarks/cocoa-criteo-1m.md). For each round and thread count (1, 2): each
# linea build given, to a certified relative duality gap of 1e-6, timed from its trace at
# the first epoch whose objective is within 1e-3, 1e-4 and 1e-6 of the reference (as the
# peer table times it), with its peak RSS; then Snap ML at tol 1e-4 (the rung of the peer
# table's ladder that reaches 1e-6 on criteo-1m), its fit time, epochs and error.
#
#   bench/cocoa-vs-snapml.sh ROUNDS LINEA_BIN...
#   LINEA_BENCH_SET=criteo-10m bench/cocoa-vs-snapml.sh ROUNDS LINEA_BIN...
#
# Reads the set's work directory of the peer table (bench/run-benchmarks.sh makes it): its
# prepared grid (`linea-prepared`) and, for Snap ML, the harness's matrix (`data.npz`); where
# that matrix was not kept (criteo-10m's is 4 GB), Snap ML is left out and the script says
# so. The reference optimum comes from bench/peers/references.json. A benchmark, not a test:
# it asserts nothing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
rounds="$1"
shift
set_name="${LINEA_BENCH_SET:-criteo-1m}"
work="${LINEA_CACHE:-$HOME/.cache/linea}/bench-work/$set_name"
reference="$(python3 -c 'import json, sys; print(repr(json.load(open(sys.argv[1]))[sys.argv[2] + "|logistic|1"]["objective"]))' \
    "$here/peers/references.json" "$set_name")"
venv="$(bash "$here/peers/setup.sh")"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
echo "$set_name: reference $reference; grid $work/linea-prepared"
echo "start $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$rounds"); do
    for threads in 1 2; do
        for bin in "$@"; do
            /usr/bin/time -f "%M" -o "$scratch/rss" "$bin" train --data "$work/linea-prepared" \
                --model "$scratch/model" --l2 1 --threads "$threads" --gap-tolerance 1e-6 \
                --trace "$scratch/trace.csv" --quiet >/dev/null
            python3 - "$scratch/trace.csv" "$reference" <<'PY' | sed "s|^|r$round t$threads $bin: |"
import sys
rows = [l.strip().split(",") for l in open(sys.argv[1]).readlines()[1:] if l.strip()]
ref = float(sys.argv[2])
for threshold in (1e-3, 1e-4, 1e-6):
    hit = [(e, s) for e, s, o, *_ in rows if o and (float(o) - ref) / ref <= threshold]
    e, s = hit[0] if hit else ("-", "nan")
    print(f"{threshold:g} at epoch {e} {float(s):.2f} s; ", end="")
print(f"stopped after epoch {rows[-1][0]} {float(rows[-1][1]):.2f} s ({rows[-1][-1]})", end="")
PY
            echo ", peak $(cat "$scratch/rss") KB"
        done
        if [ ! -f "$work/data.npz" ]; then
            echo "r$round t$threads snapml: not run ($work/data.npz not kept)"
            continue
        fi
        /usr/bin/time -f "%M" -o "$scratch/rss" "$venv/bin/python" "$here/peers/snapml_fit.py" \
            "$work/data.npz" "$reference" "$threads" 1e-4 | sed "s|^|r$round t$threads snapml: |" | tr -d '\n'
        echo ", peak $(cat "$scratch/rss") KB"
    done
done
echo "end $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
