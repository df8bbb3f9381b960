#!/usr/bin/env bash
# Runs every test: formatting, the Rust suites (unit, reference, end to end on the shared
# datasets, CRD drift), and the control-plane tests against a real kube-apiserver + etcd.
. "$(dirname "$0")/env.sh"
cd "$LINEA_ROOT"

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== Debian packages the tests compare against (LIBLINEAR's command line tools)"
scripts/debian-packages.sh liblinear-tools

echo "== cargo test (release: the suites train on real data)"
cargo test --release --locked --workspace

# Every fuzz target briefly, from its checked-in corpus (docs/fuzzing.md): a separate,
# instrumented build, cached like the rest. LINEA_FUZZ_SECONDS sets the time per target;
# 0 skips the step. A fixed seed keeps CI's run reproducible; longer runs use random ones.
fuzz_seconds="${LINEA_FUZZ_SECONDS:-5}"
if [ "$fuzz_seconds" != 0 ]; then
    echo "== fuzz: each target for ${fuzz_seconds}s (scripts/fuzz.sh run)"
    LINEA_FUZZ_SECONDS="$fuzz_seconds" LINEA_FUZZ_SEED="${LINEA_FUZZ_SEED:-1}" scripts/fuzz.sh run
fi

if [ -x e2e/run.sh ]; then
    echo "== control plane: e2e/run.sh"
    e2e/run.sh
fi
