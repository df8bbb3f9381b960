#!/usr/bin/env bash
# Installs what the one-node cluster (e2e/cluster.sh) needs from Debian's packages:
#
#   containerd                  container runtime with its CRI plugin (1.6.x on Debian 12)
#   runc                        OCI runtime containerd starts containers with
#   containernetworking-plugins bridge, host-local, loopback, portmap (/usr/lib/cni)
#   conntrack, iptables         kube-proxy's iptables mode and its conntrack clean-up
#   umoci                       assembles OCI images without a Docker daemon
#   gcc, libc6-dev              the pause image's small C program (static)
#
# Idempotent: does nothing (and never calls apt) when every command is already there.
# Runs `apt-get update` first when it does install. Needs root.
set -euo pipefail

log() { printf '[node-deps] %s\n' "$*" >&2; }

# command -> Debian package
declare -A PKG=(
  [containerd]=containerd [ctr]=containerd [runc]=runc [conntrack]=conntrack
  [iptables]=iptables [umoci]=umoci [gcc]=gcc
)
missing=()
for c in "${!PKG[@]}"; do command -v "$c" >/dev/null 2>&1 || missing+=("${PKG[$c]}"); done
[ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/loopback ] ||
  missing+=(containernetworking-plugins)
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || [ -n "$(find /usr/lib -name libc.a -print -quit 2>/dev/null)" ] ||
  missing+=(libc6-dev)
if [ ${#missing[@]} -eq 0 ]; then
  log "all present"
  exit 0
fi
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
[ "$(id -u)" = 0 ] || { log "ERROR: need root to install ${missing[*]}"; exit 1; }
start=$SECONDS
log "apt-get update"
DEBIAN_FRONTEND=noninteractive apt-get update -qq
log "apt-get install ${missing[*]}"
# --no-install-recommends: containerd recommends nothing the cluster needs. No service is
# started: the machine has no systemd, and e2e/cluster.sh starts containerd itself.
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
log "installed in $((SECONDS - start))s"
