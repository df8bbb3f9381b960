#!/usr/bin/env bash
# Stops the control plane started by start.sh <state-dir> and removes the
# state dir. KEEP_LOGS=1 keeps <state-dir>/*.log (everything else is removed).
#
# Usage: stop.sh <state-dir>
# STOP_TIMEOUT (seconds, default 20) bounds the graceful shutdown of each
# process before it is killed.
set -euo pipefail

log() { printf '[stop] %s\n' "$*" >&2; }
die() { printf '[stop] ERROR: %s\n' "$*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: $0 <state-dir>"
[ -d "$1" ] || { log "$1 does not exist, nothing to stop"; exit 0; }
STATE="$(cd "$1" && pwd)"
# Only ever delete a directory that start.sh created.
[ -f "$STATE/.linea-control-plane" ] || die "$STATE was not created by start.sh; refusing to touch it"
TIMEOUT="${STOP_TIMEOUT:-20}"

# stop_one <name>: SIGTERM, wait (bounded) for exit, then SIGKILL. The pid is
# only signalled if it still runs the expected binary (guards against a pid
# that was reused after the process died on its own).
stop_one() {
  local name="$1" pidf="$STATE/$1.pid" pid exe deadline
  [ -f "$pidf" ] || return 0
  pid="$(cat "$pidf")"
  exe="$(readlink "/proc/$pid/exe" 2>/dev/null || true)"
  if [ "${exe##*/}" != "$name" ]; then
    log "$name (pid $pid) not running"
    rm -f "$pidf"; return 0
  fi
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + TIMEOUT))
  while kill -0 "$pid" 2>/dev/null; do
    if [ $SECONDS -ge $deadline ]; then
      log "$name did not exit within ${TIMEOUT}s, sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.1
  done
  rm -f "$pidf"
}

# Clients before servers: the controller manager, then the apiserver (so it
# does not spend its shutdown retrying a dead etcd), then etcd.
stop_one kube-controller-manager
stop_one kube-apiserver
stop_one etcd

if [ "${KEEP_LOGS:-0}" = 1 ]; then
  find "$STATE" -mindepth 1 -maxdepth 1 ! -name '*.log' -exec rm -rf {} +
  log "removed state, kept logs in $STATE"
else
  rm -rf "$STATE"
  log "removed $STATE"
fi
