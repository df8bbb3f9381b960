#!/usr/bin/env bash
# Installs the Debian packages named on the command line that are not installed yet.
# Idempotent: does nothing (and touches no network) when all are present; runs
# `apt-get update` only when something is missing. Usage: scripts/debian-packages.sh PKG...
set -euo pipefail

missing=()
for pkg in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo "$@"
    else echo "debian-packages: need root to install ${missing[*]}" >&2; return 1
    fi
}

echo "debian-packages: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
as_root apt-get update -q >&2
as_root apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
