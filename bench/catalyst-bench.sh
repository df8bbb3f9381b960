#!/usr/bin/env bash
# Catalyst-accelerated CoCoA against plain CoCoA (issue 13): epochs and seconds to relative
# duality gap 1e-4 and 1e-6, K in {1, 2, 4, 8}, on a9a, w8a and rcv1-small (l2 = 1, linea's
# objective sum loss + l2 |w|^2), logistic and hinge loss, in process on 2 threads.
#
#   bench/catalyst-bench.sh [BUDGET_SECONDS] [MODES]
#
# BUDGET_SECONDS (default 60) caps each run's wall time; MODES (default plain,auto) is a
# comma list of plain, auto (the default kappa) and numbers (a fixed kappa). Builds with the
# workspace's test feature set (`cargo test --workspace --no-run`), so it reuses a test build.
# A benchmark, not a test: it asserts nothing. Runs under `nice -n 10`.
set -euo pipefail
. "$(dirname "$0")/../scripts/env.sh"
. "$(dirname "$0")/lib.sh"
cd "$LINEA_ROOT"

data=${LINEA_DATA:-/work/shared/data}
budget=${1:-60}
modes=${2:-plain,auto}
build_release
bin=$CARGO_TARGET_DIR/release
work=${LINEA_CACHE:-$HOME/.cache/linea}/catalyst-bench
mkdir -p "$work"

prepare_grid "$work" a9a "$data/a9a/a9a.train.libsvm" libsvm
prepare_grid "$work" w8a "$data/w8a/w8a.libsvm" libsvm
prepare_grid "$work" rcv1-small "$data/rcv1-small/rcv1_small.vw" vw

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
for loss in logistic hinge; do
    echo "before $loss: $(uptime)"
    nice -n 10 "$bin/catalyst-bench" --loss "$loss" --l2 1 --slots 1,2,4,8 --modes "$modes" \
        --wall-budget "$budget" a9a="$work/a9a" w8a="$work/w8a" rcv1-small="$work/rcv1-small"
    echo "after $loss: $(uptime)"
done
