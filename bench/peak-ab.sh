#!/usr/bin/env bash
# Peak resident memory and time of two builds on the same `linea train` run, interleaved
# A B A B in one command, the load average before and after (issue 20,
# docs/benchmarks/cocoa-criteo-1m.md). Each line: the round, the build, the whole process's wall
# time, the training time linea reports, the peak RSS (`/usr/bin/time`'s %M: the largest
# resident set, which the peer harness reports too), kernel and user time, and the model's
# digest (both builds must agree when a change keeps the model's bytes).
#
#   bench/peak-ab.sh BIN_A BIN_B ROUNDS GRID TRAIN_ARGUMENTS...
#   e.g. bench/peak-ab.sh main/linea branch/linea 2 ~/.cache/linea/bench-work/criteo-1m/linea-prepared \
#            --algorithm auto --threads 2
#
# A benchmark, not a test: it asserts nothing.
set -euo pipefail
a="$1" b="$2" rounds="$3" grid="$4"
shift 4
model="$(mktemp)"
trap 'rm -f "$model"' EXIT
echo "start $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg), train $*"
for round in $(seq 1 "$rounds"); do
    for bin in "$a" "$b"; do
        out=$({ /usr/bin/time -f "wall %e s rss %M KB sys %S user %U" "$bin" train \
            --data "$grid" --model "$model" "$@" --quiet; } 2>&1)
        echo "r$round $bin $(grep -o 'with [a-z-]*' <<<"$out" | head -1) $(grep -o ' in [0-9.]*s' <<<"$out")" \
            "$(grep -o 'wall.*' <<<"$out") $(sha256sum "$model" | cut -c1-12)"
    done
done
echo "end $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
