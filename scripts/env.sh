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
