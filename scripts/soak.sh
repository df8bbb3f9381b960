#!/usr/bin/env bash
# The chaos soak (worker/tests/chaos_soak.rs; docs/robustness.md): a distributed SCD run on S3
# with 6 worker processes, disturbed at seeded random moments (SIGTERM and kill -9 of
# workers, kill -9 and restart of the master, new workers, S3 faults through the test proxy);
# every run's model must be the undisturbed run's bytes. Prints faults by kind and runs.
#
#   scripts/soak.sh                 # the CI budget: 100,000 rows, one round, each of the 10 kinds once
#   LINEA_SOAK_ROWS=1000000 LINEA_SOAK_SECONDS=1500 LINEA_SOAK_EVENTS=20 scripts/soak.sh
#
# The input is the Criteo sample scaled up by scale-criteo (bench/src/bin/scale-criteo.rs), the
# same file the benchmarks build: $LINEA_CACHE/bench/scaled/criteo-ROWS.tsv, built if missing.
# Other settings (LINEA_SOAK_ROUNDS, _SECONDS, _EVENTS, _SEED, _WORKERS, _TIMEOUT) pass through
# to the test; see its header. LINEA_SOAK_ROUNDS=0 skips the soak.
. "$(dirname "$0")/env.sh"
cd "$LINEA_ROOT"

if [ "${LINEA_SOAK_ROUNDS:-1}" = 0 ] && [ "${LINEA_SOAK_SECONDS:-0}" = 0 ]; then
    echo "chaos soak skipped (LINEA_SOAK_ROUNDS=0)"
    exit 0
fi
rows="${LINEA_SOAK_ROWS:-100000}"
scaled="${LINEA_BENCH_SCALED:-$LINEA_CACHE/bench/scaled}"
data="${LINEA_DATA:-$LINEA_ROOT/../shared/data}"
input="$scaled/criteo-$rows.tsv"
if [ ! -s "$input" ]; then
    cargo test --release --locked --workspace --no-run --test scale_criteo
    mkdir -p "$scaled"
    "$CARGO_TARGET_DIR/release/scale-criteo" "$data/criteo-sample/train.tsv" "$rows" > "$input.tmp"
    mv "$input.tmp" "$input"
fi
LINEA_SOAK_INPUT="$input" cargo test --release --locked --workspace --test chaos_soak -- --ignored --nocapture
