#!/usr/bin/env bash
# What glibc's 128 KiB mmap threshold costs two builds (issue 20, docs/benchmarks/past-the-memory-wall.md "Reused
# per-cell buffers"): SCD on one thread, each build with glibc's default and with the
# threshold forced (GLIBC_TUNABLES, which sets it in any process as `mallopt` does in a
# memory-bounded one), interleaved A B A B in one command, the load average before and
# after. Each line: seconds, peak RSS, minor page faults (repeatable under load, unlike
# the times), kernel and user time, and the model's digest (all must agree).
#
#   bench/alloc-threshold-ab.sh BIN_A BIN_B [ROUNDS] [EPOCHS] [GRID]
#       (default 3 rounds of 5 epochs on the peer table's criteo-1m grid)
#
# A benchmark, not a test: it asserts nothing.
set -euo pipefail
a="$1" b="$2"
rounds="${3:-3}"
epochs="${4:-5}"
grid="${5:-$HOME/.cache/linea/bench-work/criteo-1m/linea-prepared}"
model="$(mktemp)"
trap 'rm -f "$model"' EXIT
echo "start $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$rounds"); do
    for bin in "$a" "$b"; do
        for threshold in default 131072; do
            tunables=()
            [ "$threshold" = default ] || tunables=(GLIBC_TUNABLES=glibc.malloc.mmap_threshold=$threshold)
            out=$({ env "${tunables[@]}" /usr/bin/time -f "rss %M KB minflt %R sys %S user %U" "$bin" train \
                --data "$grid" --model "$model" --algorithm scd --threads 1 --epochs "$epochs" --quiet; } 2>&1)
            echo "r$round $bin threshold=$threshold $(grep -o 'in [0-9.]*s' <<<"$out") $(grep -o 'rss.*' <<<"$out")" \
                "$(sha256sum "$model" | cut -c1-12)"
        done
    done
done
echo "end $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
