# Sourced by the other scripts: where linea keeps what is expensive to rebuild.
#
# Builds are cached outside the repository, keyed by the toolchain version, so a fresh
# clone (CI) reuses them and a toolchain upgrade never mixes artefacts.
set -euo pipefail

LINEA_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export LINEA_ROOT
export LINEA_CACHE="${LINEA_CACHE:-$HOME/.cache/linea}"

if ! command -v cargo >/dev/null 2>&1; then
    [ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
fi
if ! command -v cargo >/dev/null 2>&1; then
    echo "linea needs a Rust toolchain (cargo) of 1.90 or newer on PATH; none was found." >&2
    exit 1
fi

rust_version="$(rustc --version | awk '{print $2}')"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$LINEA_CACHE/target-rust-$rust_version}"
export LINEA_BIN="$CARGO_TARGET_DIR/release/linea"

# build_release [CARGO TEST OPTIONS]: the release binaries (linea, crdgen, the bench tools)
# built exactly as scripts/test.sh's `cargo test --release --workspace` builds them. Every
# script builds through this, so a benchmark or e2e run after the tests (or the tests after
# it) compiles nothing twice: `cargo build -p linea-worker` resolves features without the
# dev-dependencies and recompiles some 300 crates into a second copy. Extra options narrow
# it (`--test cli` builds `linea` and one small test binary).
build_release() {
    (cd "$LINEA_ROOT" && nice -n 10 cargo test --release --locked -q --workspace --no-run "$@") >&2
}
