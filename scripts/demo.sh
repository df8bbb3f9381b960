#!/usr/bin/env bash
# Builds linea and runs the main job on one machine with a local folder as storage:
# a9a (UCI Adult) from ../shared/data, prepared into a grid, trained with SCD (logistic
# loss, l2 = 1), evaluated on the held-out test file, with a convergence plot.
. "$(dirname "$0")/env.sh"

data="${LINEA_DATA:-$LINEA_ROOT/../shared/data}"
work="${1:-$LINEA_ROOT/demo}"
mkdir -p "$work"

echo "== building linea (cargo build --release; cached in $CARGO_TARGET_DIR)"
(cd "$LINEA_ROOT" && cargo build --release --locked --bin linea)

echo "== linea prepare: a9a.train.libsvm -> $work/a9a-grid"
"$LINEA_BIN" prepare --input "$data/a9a/a9a.train.libsvm" --format libsvm --output "$work/a9a-grid"

echo "== linea train: SCD, logistic loss, l2 = 1"
"$LINEA_BIN" train --data "$work/a9a-grid" --model "$work/a9a.model" --loss logistic --l2 1 \
    --plot "$work/a9a-convergence.svg" --trace "$work/a9a-trace.csv"

echo "== linea eval on the held-out a9a.test.libsvm"
"$LINEA_BIN" eval --model "$work/a9a.model" --data "$data/a9a/a9a.test.libsvm"

echo "== done: model $work/a9a.model, plot $work/a9a-convergence.svg"
