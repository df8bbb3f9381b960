#!/usr/bin/env bash
# The distributed runtime's master under load: work-item throughput, per-phase barrier
# overhead and aggregation traffic for 1 to 64 workers, with the real master and simulated
# workers speaking its gRPC protocol over loopback (bench/src/bin/runtime-bench.rs).
#
#   bench/runtime-bench.sh [--quick] [--insecure] [--workers 1,2,4,8,16,32,64] [--threads 1,8]
#                          [--only throughput,barrier,aggregation,balance]
#
# A benchmark, not a test: it prints markdown tables, it asserts nothing. About a minute
# on 2 cores; everything runs under `nice -n 10`.
. "$(dirname "$0")/../scripts/env.sh"
cd "$LINEA_ROOT"
build_release
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load average $(cut -d' ' -f1-3 /proc/loadavg)"
nice -n 10 "$CARGO_TARGET_DIR/release/runtime-bench" "$@"
