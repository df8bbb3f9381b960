#!/usr/bin/env bash
# Builds linea and runs the main job on one machine with a local folder as storage:
# a9a (UCI Adult) from ../shared/data, prepared into a grid, trained (logistic loss, l2 = 1)
# with the algorithm `linea train` chooses from the data (--algorithm auto: CoCoA with one slot,
# SDCA, on a9a; it prints which and why), evaluated on the held-out test file, with a
# convergence plot.
. "$(dirname "$0")/env.sh"

data="${LINEA_DATA:-$LINEA_ROOT/../shared/data}"
work="${1:-$LINEA_ROOT/demo}"
mkdir -p "$work"

# The binary is built exactly as `scripts/test.sh` builds it (`build_release`, env.sh: the
# workspace's features unified with its dev-dependencies', so nothing is compiled twice).
# `--test cli` adds one small test binary. Quiet: cargo prints only warnings and errors, not
# the test executables it built.
echo "== building linea (release, cached in $CARGO_TARGET_DIR; a first build takes minutes)"
build_release --test cli

echo "== linea prepare: a9a.train.libsvm -> $work/a9a-grid"
"$LINEA_BIN" prepare --input "$data/a9a/a9a.train.libsvm" --format libsvm --output "$work/a9a-grid"

echo "== linea train: logistic loss, l2 = 1, the algorithm chosen from the data"
"$LINEA_BIN" train --data "$work/a9a-grid" --model "$work/a9a.model" --loss logistic --l2 1 \
    --plot "$work/a9a-convergence.svg" --trace "$work/a9a-trace.csv"

echo "== linea eval on the held-out a9a.test.libsvm"
"$LINEA_BIN" eval --model "$work/a9a.model" --data "$data/a9a/a9a.test.libsvm"

echo "== done: model $work/a9a.model, plot $work/a9a-convergence.svg"
