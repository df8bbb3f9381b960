#!/usr/bin/env bash
# Runs every test: formatting, the Rust suites (unit, reference, end to end on the shared
# datasets, CRD drift), and the control-plane tests against a real kube-apiserver + etcd.
. "$(dirname "$0")/env.sh"
cd "$LINEA_ROOT"

# Each phase's header says how long the run has taken so far: the CI budget (60 minutes on a
# fresh machine, e2e/control-plane/README.md) is read from these.
phase() { printf '== %s (at %dm%02ds)\n' "$1" $((SECONDS / 60)) $((SECONDS % 60)); }

phase "cargo fmt --check"
cargo fmt --all -- --check

# Every target, tests and benches included; a lint is an error. A checking build of its own
# (metadata only): about 4 minutes with empty caches, seconds when warm.
phase "cargo clippy"
cargo clippy --release --locked --workspace --all-targets -- -D warnings

phase "Debian packages the tests compare against (LIBLINEAR's command line tools)"
scripts/debian-packages.sh liblinear-tools

phase "cargo test (release: the suites train on real data)"
cargo test --release --locked --workspace

# The cache outside the repo keeps only this build's executables (see the script).
scripts/prune-target.sh

# The chaos soak (docs/robustness.md): with the CI budget by default (100,000 rows, one
# disturbed run with each of the 10 fault kinds once: about 2 minutes on 2 cores); the
# LINEA_SOAK_* variables ask for a longer one, LINEA_SOAK_ROUNDS=0 skips it.
phase "chaos soak (scripts/soak.sh)"
scripts/soak.sh

# The fuzz targets (docs/fuzzing.md): `cargo test` above replayed every target over its
# checked-in corpus (fuzz/tests/corpus.rs); with LINEA_FUZZ_SECONDS=N, a search of N seconds
# per target from that corpus too, in an instrumented build of its own (cached like the rest).
if [ "${LINEA_FUZZ_SECONDS:-0}" != 0 ]; then
    phase "fuzz: each target for ${LINEA_FUZZ_SECONDS}s (scripts/fuzz.sh run)"
    LINEA_FUZZ_SEED="${LINEA_FUZZ_SEED:-1}" scripts/fuzz.sh run
fi

if [ -x e2e/run.sh ]; then
    phase "control plane: e2e/run.sh"
    e2e/run.sh
fi
phase "all passed"
