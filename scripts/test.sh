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

if [ -x e2e/run.sh ]; then
    echo "== control plane: e2e/run.sh"
    e2e/run.sh
fi
