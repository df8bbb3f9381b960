#!/usr/bin/env bash
# CoCoA K=1 (`linea train`'s `auto` on criteo-1m) against Snap ML to a relative error of
# 1e-6, interleaved A B A B in one command with the load before and after (issue 20,
# docs/benchmarks/cocoa-criteo-1m.md). For each round and thread count (1, 2): each linea
# build given, to a certified relative duality gap of 1e-6, timed from its trace at the
# first epoch whose objective is within 1e-6 of the reference (as the peer table times it),
# with its peak RSS; then Snap ML at tol 1e-4 (the rung of the peer table's ladder that
# reaches 1e-6), its fit time, epochs and error.
#
#   bench/cocoa-vs-snapml.sh ROUNDS LINEA_BIN...
#
# Needs the peer table's criteo-1m work directory (bench/run-benchmarks.sh makes it): its
# prepared grid and data.npz. A benchmark, not a test: it asserts nothing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
rounds="$1"
shift
work="${LINEA_CACHE:-$HOME/.cache/linea}/bench-work/criteo-1m"
reference=119839.81156874163   # bench/peers/references.json, criteo-1m logistic l2=1
venv="$(bash "$here/peers/setup.sh")"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
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
hit = [(e, s) for e, s, o, *_ in rows if o and (float(o) - ref) / ref <= 1e-6]
e, s = hit[0] if hit else ("-", "nan")
print(f"1e-6 at epoch {e} {float(s):.2f} s; stopped after epoch {rows[-1][0]} {float(rows[-1][1]):.2f} s ({rows[-1][-1]})", end="")
PY
            echo ", peak $(cat "$scratch/rss") KB"
        done
        /usr/bin/time -f "%M" -o "$scratch/rss" "$venv/bin/python" "$here/peers/snapml_fit.py" \
            "$work/data.npz" "$reference" "$threads" 1e-4 | sed "s|^|r$round t$threads snapml: |" | tr -d '\n'
        echo ", peak $(cat "$scratch/rss") KB"
    done
done
echo "end $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
