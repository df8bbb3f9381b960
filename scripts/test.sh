#!/usr/bin/env bash
# Runs every test: formatting, the Rust suites (unit, reference, end to end on the shared
# datasets, CRD drift), and the control-plane tests against a real kube-apiserver + etcd.
. "$(dirname "$0")/env.sh"
cd "$LINEA_ROOT"

echo "== cargo fmt --check"
cargo fmt --all -- --check

# The fuzz crate is outside the workspace and has its own lock file; a dependency added to
# the workspace must reach it too. Checked here, before the long builds, not at the fuzz step.
echo "== fuzz/Cargo.lock agrees with the workspace"
(cd fuzz && cargo metadata --locked --format-version 1 >/dev/null) ||
    { echo "fuzz/Cargo.lock is stale: run (cd fuzz && cargo metadata --format-version 1 >/dev/null) and commit it" >&2; exit 1; }

# Every target, tests and benches included; a lint is an error. A checking build of its own
# (metadata only): about 4 minutes with empty caches, seconds when warm.
echo "== cargo clippy"
cargo clippy --release --locked --workspace --all-targets -- -D warnings

echo "== Debian packages the tests compare against (LIBLINEAR's command line tools)"
scripts/debian-packages.sh liblinear-tools

echo "== cargo test (release: the suites train on real data)"
cargo test --release --locked --workspace

# The cache outside the repo keeps only this build's executables (see the script).
scripts/prune-target.sh

# The chaos soak (docs/robustness.md): with the CI budget by default (100,000 rows, one
# disturbed run with each of the 10 fault kinds once: about 2 minutes on 2 cores); the
# LINEA_SOAK_* variables ask for a longer one, LINEA_SOAK_ROUNDS=0 skips it.
echo "== chaos soak (scripts/soak.sh)"
scripts/soak.sh

# The fuzz targets (docs/fuzzing.md), a separate instrumented build cached like the rest:
# by default every target over its checked-in corpus once (deterministic); with
# LINEA_FUZZ_SECONDS=N, a search of N seconds per target from that corpus instead.
if [ "${LINEA_FUZZ_SECONDS:-0}" = 0 ]; then
    echo "== fuzz: every target over its checked-in corpus (scripts/fuzz.sh replay)"
    scripts/fuzz.sh replay
else
    echo "== fuzz: each target for ${LINEA_FUZZ_SECONDS}s (scripts/fuzz.sh run)"
    LINEA_FUZZ_SEED="${LINEA_FUZZ_SEED:-1}" scripts/fuzz.sh run
fi

if [ -x e2e/run.sh ]; then
    echo "== control plane: e2e/run.sh"
    e2e/run.sh
fi
