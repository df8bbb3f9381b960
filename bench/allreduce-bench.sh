#!/usr/bin/env bash
# One allreduce against vector length and worker count: the tree allreduce (up and down a
# binary tree of workers in pipelined chunks) against the master-centred range aggregation,
# with simulated in-process workers serving the real Peer service over loopback TLS
# (bench/src/bin/allreduce-bench.rs says what is real and what is simulated).
#
#   bench/allreduce-bench.sh [--lengths 1000,10000,...] [--workers 2,4,...,64] [--repeats 3]
#                            [--max-cells 64000000]
#
# A benchmark, not a test: it prints a markdown table and the load before and after.
# Several minutes on 2 cores at the defaults; everything runs under `nice -n 10`.
. "$(dirname "$0")/../scripts/env.sh"
cd "$LINEA_ROOT"
build_release
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); before: $(uptime)"
nice -n 10 "$CARGO_TARGET_DIR/release/allreduce-bench" "$@"
echo "after: $(uptime)"
