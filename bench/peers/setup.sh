#!/usr/bin/env bash
# Creates (or reuses) the peer-tool venv for linea's benchmark harness and prints its path.
#   venv: ${LINEA_CACHE:-$HOME/.cache/linea}/bench-venv-<12 hex of sha256(requirements.txt)>
# Also makes sure Debian's LIBLINEAR command-line tools (liblinear-train), GNU time and a Java
# runtime (for pyspark) are present. Progress goes to stderr; the only stdout line is the venv path.
# Usage:  VENV=$(bash bench/peers/setup.sh) && "$VENV/bin/python" bench/peers/run_peers.py ...
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
req="$here/requirements.txt"
cache="${LINEA_CACHE:-$HOME/.cache/linea}"
hash="$(sha256sum "$req" | cut -c1-12)"
venv="$cache/bench-venv-$hash"
py="${PYTHON:-python3}"
log() { echo "[peers/setup] $*" >&2; }

# One setup at a time: a second run (another benchmark started meanwhile) would delete the
# venv the first is installing, and apt-get refuses a second dpkg lock. It waits here instead.
mkdir -p "$cache"
exec 9>"$cache/bench-venv.lock"
flock 9

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else return 1; fi; }

apt_install() {   # apt_install PKG... ; runs apt-get update once if the first try fails
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get install -y -q "$@" >&2 || { as_root apt-get update -q >&2 && as_root apt-get install -y -q "$@" >&2; }
}

if ! command -v liblinear-train >/dev/null 2>&1; then
  log "installing Debian liblinear-tools (liblinear-train)"
  apt_install liblinear-tools || log "WARNING: could not install liblinear-tools; the liblinear-cli peer will be skipped"
fi
if [ ! -x /usr/bin/time ]; then
  log "installing GNU time (peak-RSS measurement)"
  apt_install time || log "WARNING: no /usr/bin/time; peak RSS falls back to wait4 (inflated by the harness's size)"
fi
if ! command -v java >/dev/null 2>&1; then
  log "installing a Java runtime for pyspark"
  apt_install openjdk-17-jre-headless || log "WARNING: no java; the spark peer will be skipped"
fi

if [ -f "$venv/.complete" ]; then
  log "reusing $venv"
  echo "$venv"
  exit 0
fi

log "creating $venv (~25 s with a warm pip cache, ~2 min without: liblinear-official and pyspark build from sdist)"
mkdir -p "$cache"
# venvs are not relocatable, so build in place; .complete marks a finished install
# (an interrupted one is rebuilt from scratch on the next run).
rm -rf "$venv"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req" >&2
"$venv/bin/python" - <<'PY' >&2
import numpy, scipy, sklearn, pyarrow, matplotlib, vowpalwabbit, snapml, pyspark
from liblinear import liblinearutil
print("[peers/setup] imports ok: numpy", numpy.__version__, "scipy", scipy.__version__,
      "sklearn", sklearn.__version__, "pyspark", pyspark.__version__)
PY
touch "$venv/.complete"
log "done"
echo "$venv"
