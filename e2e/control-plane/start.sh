#!/usr/bin/env bash
# Starts a loopback-only Kubernetes control plane (etcd + kube-apiserver) for
# integration tests, as root, without systemd or containers.
#
# Usage: start.sh <state-dir>
#
# Everything lives in <state-dir>: keys, token file, serving certs, etcd data,
# logs, pid files and
#   <state-dir>/kubeconfig   admin (system:masters) kubeconfig
#   <state-dir>/env          shell-sourceable KUBECONFIG, APISERVER_URL, ...
#
# Ports: ETCD_CLIENT_PORT, ETCD_PEER_PORT, APISERVER_PORT (and KCM_PORT) if
# set, else free ports picked here. START_TIMEOUT (seconds, default 90) bounds
# each wait. Binaries come from the build.sh cache (run build.sh first), or
# from KUBE_APISERVER_BIN / ETCD_BIN / KCM_BIN.
#
# APISERVER_ADDRESS (default 127.0.0.1) is the address the apiserver binds to and
# advertises; e2e/cluster.sh sets it to its pod bridge's gateway so that pods reach the
# apiserver through the `kubernetes` Service, whose endpoint is then kept by the lease
# reconciler (with 127.0.0.1 the reconciler is off: loopback is no valid endpoint).
#
# WITH_CONTROLLER_MANAGER=1 also starts kube-controller-manager (build it with
# `build.sh kube-controller-manager`): namespace deletion, garbage collection
# of owned objects, default service accounts, aggregated ClusterRoles
# (admin/edit/view) then work as in a real cluster. Off by default: plain
# apiserver tests start faster and use less memory without it.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.sh
. "$HERE/versions.sh"

log() { printf '[start] %s\n' "$*" >&2; }
die() { printf '[start] ERROR: %s\n' "$*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: $0 <state-dir>"
mkdir -p "$1"
STATE="$(cd "$1" && pwd)"
TIMEOUT="${START_TIMEOUT:-90}"

WITH_KCM="${WITH_CONTROLLER_MANAGER:-0}"
bins=("$ETCD_BIN" "$KUBE_APISERVER_BIN")
[ "$WITH_KCM" = 1 ] && bins+=("$KCM_BIN")
for b in "${bins[@]}"; do
  [ -x "$b" ] || die "$b not found; run $HERE/build.sh first (build.sh kube-controller-manager for it)"
done
command -v openssl >/dev/null || die "openssl not found (apt-get install -y openssl)"
command -v curl >/dev/null || die "curl not found (apt-get install -y curl)"

# Refuse to start twice on the same state dir (would fight over etcd data).
for p in etcd kube-apiserver kube-controller-manager; do
  if [ -f "$STATE/$p.pid" ] && kill -0 "$(cat "$STATE/$p.pid")" 2>/dev/null; then
    die "$p already running for $STATE (pid $(cat "$STATE/$p.pid")); run stop.sh first"
  fi
done
# Marker that lets stop.sh delete this directory without risking a wrong path.
touch "$STATE/.linea-control-plane"

# --- ports -------------------------------------------------------------------------
# A port counts as free when nothing listens on it on loopback (ss) and we did
# not already hand it out. Racy by nature, which is why a process that dies
# at startup is reported with its log rather than retried silently.
taken=" "
port_free() {
  case "$taken" in *" $1 "*) return 1 ;; esac
  ! ss -Htln "sport = :$1" 2>/dev/null | grep -q .
}
pick_port() {
  local p
  for _ in $(seq 1 200); do
    p=$(( 20000 + (RANDOM * 32768 + RANDOM) % 12000 ))
    if port_free "$p"; then taken+="$p "; echo "$p"; return 0; fi
  done
  die "no free loopback port found"
}
ETCD_CLIENT_PORT="${ETCD_CLIENT_PORT:-$(pick_port)}"; taken+="$ETCD_CLIENT_PORT "
ETCD_PEER_PORT="${ETCD_PEER_PORT:-$(pick_port)}"; taken+="$ETCD_PEER_PORT "
APISERVER_PORT="${APISERVER_PORT:-$(pick_port)}"; taken+="$APISERVER_PORT "
if [ "$WITH_KCM" = 1 ]; then KCM_PORT="${KCM_PORT:-$(pick_port)}"; taken+="$KCM_PORT "; fi
ETCD_URL="http://127.0.0.1:$ETCD_CLIENT_PORT"
APISERVER_ADDRESS="${APISERVER_ADDRESS:-127.0.0.1}"
APISERVER_URL="https://$APISERVER_ADDRESS:$APISERVER_PORT"
ENDPOINT_RECONCILER=none
[ "$APISERVER_ADDRESS" = 127.0.0.1 ] || ENDPOINT_RECONCILER=lease

# --- credentials ---------------------------------------------------------------
# Service-account token signing key pair (kept across restarts of the same
# state dir so that previously issued tokens stay valid).
if [ ! -f "$STATE/sa.key" ]; then
  openssl genrsa -out "$STATE/sa.key" 2048 2>/dev/null
  openssl rsa -in "$STATE/sa.key" -pubout -out "$STATE/sa.pub" 2>/dev/null
fi
# Static bearer token for the admin user, in group system:masters (which RBAC
# always allows); other identities are then subject to RBAC via --as.
if [ ! -f "$STATE/tokens.csv" ]; then
  printf '%s,linea-admin,linea-admin,"system:masters"\n' "$(openssl rand -hex 32)" >"$STATE/tokens.csv"
fi
chmod 600 "$STATE/sa.key" "$STATE/tokens.csv"
ADMIN_TOKEN="$(cut -d, -f1 "$STATE/tokens.csv")"

# --- helpers -------------------------------------------------------------------------
# launch <name> <cmd...>: run detached in its own session (so it outlives this
# script and the caller's process group), stdin closed, output to <name>.log.
launched=()
launch() {
  local name="$1"; shift
  setsid "$@" </dev/null >"$STATE/$name.log" 2>&1 &
  echo $! >"$STATE/$name.pid"
  launched+=("$!")
}
# If startup fails half-way, do not leave an orphaned etcd behind: stop what
# this run launched (bounded wait, then SIGKILL). Logs stay for debugging;
# stop.sh <state-dir> removes the rest.
ready=0
cleanup_on_failure() {
  [ "$ready" = 1 ] && return 0
  local pid deadline
  for pid in "${launched[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  deadline=$((SECONDS + 10))
  for pid in "${launched[@]}"; do
    while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  rm -f "$STATE/etcd.pid" "$STATE/kube-apiserver.pid" "$STATE/kube-controller-manager.pid"
}
trap cleanup_on_failure EXIT
# wait_for <name> <what> <cmd...>: poll <cmd> until it succeeds, the process
# dies, or the deadline passes. The sleep is only the polling interval.
wait_for() {
  local name="$1" what="$2"; shift 2
  local pid deadline=$((SECONDS + TIMEOUT))
  pid="$(cat "$STATE/$name.pid")"
  until "$@" >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 30 "$STATE/$name.log" >&2 || true
      die "$name exited before becoming $what (log: $STATE/$name.log)"
    fi
    if [ $SECONDS -ge $deadline ]; then
      tail -n 30 "$STATE/$name.log" >&2 || true
      die "$name not $what after ${TIMEOUT}s (log: $STATE/$name.log)"
    fi
    sleep 0.2
  done
}

# --- etcd ------------------------------------------------------------------------------
# Single member, plain HTTP bound to 127.0.0.1 only. --unsafe-no-fsync: test
# data is disposable and fsync dominates latency on shared disks.
log "etcd $ETCD_VERSION on $ETCD_URL"
launch etcd "$ETCD_BIN" \
  --name=linea-e2e \
  --data-dir="$STATE/etcd-data" \
  --listen-client-urls="$ETCD_URL" \
  --advertise-client-urls="$ETCD_URL" \
  --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster="linea-e2e=http://127.0.0.1:$ETCD_PEER_PORT" \
  --unsafe-no-fsync \
  --log-level=warn
wait_for etcd healthy curl -fsS --max-time 2 "$ETCD_URL/health"

# --- kube-apiserver ----------------------------------------------------------------
# Serving certificate: self-generated into --cert-dir (a CA plus a cert for
# 127.0.0.1/localhost; apiserver.crt holds both, so it doubles as the CA
# bundle in the kubeconfig).
# --advertise-address=127.0.0.1 keeps the apiserver from picking a host
# interface; loopback is not a valid Endpoints address, so the endpoint
# reconciler for the in-cluster "kubernetes" Service is turned off (no pods
# run here to use it anyway).
# Kubelets (e2e/cluster.sh) are reached at their InternalIP: node names do not resolve here.
# Admission: the default plugin set (NamespaceLifecycle, ServiceAccount,
# ValidatingAdmissionPolicy, ResourceQuota, ...), nothing added or removed.
log "kube-apiserver $K8S_VERSION on $APISERVER_URL"
mkdir -p "$STATE/pki"
launch kube-apiserver "$KUBE_APISERVER_BIN" \
  --bind-address="$APISERVER_ADDRESS" \
  --advertise-address="$APISERVER_ADDRESS" \
  --secure-port="$APISERVER_PORT" \
  --cert-dir="$STATE/pki" \
  --etcd-servers="$ETCD_URL" \
  --service-cluster-ip-range=10.0.0.0/24 \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$STATE/sa.pub" \
  --service-account-signing-key-file="$STATE/sa.key" \
  --token-auth-file="$STATE/tokens.csv" \
  --authorization-mode=Node,RBAC \
  --endpoint-reconciler-type="$ENDPOINT_RECONCILER" \
  --allow-privileged=true \
  --kubelet-preferred-address-types=InternalIP,Hostname \
  --profiling=false
# /readyz only succeeds once etcd is reachable, the RBAC bootstrap roles are
# in place and all post-start hooks (CRD/aggregation controllers) are done.
wait_for kube-apiserver ready \
  curl -fsS --max-time 2 --cacert "$STATE/pki/apiserver.crt" \
    -H "Authorization: Bearer $ADMIN_TOKEN" "$APISERVER_URL/readyz"

# --- outputs ---------------------------------------------------------------------------
cat >"$STATE/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: linea-e2e
  cluster:
    server: $APISERVER_URL
    certificate-authority: $STATE/pki/apiserver.crt
users:
- name: linea-admin
  user:
    token: $ADMIN_TOKEN
contexts:
- name: linea-e2e
  context:
    cluster: linea-e2e
    user: linea-admin
current-context: linea-e2e
EOF
chmod 600 "$STATE/kubeconfig"

# --- kube-controller-manager (optional) -----------------------------------------
# Runs as the admin user through the kubeconfig above; it is the only
# instance, so no leader election. It signs service-account tokens with the
# same key the apiserver verifies, and hands out the apiserver's CA bundle.
# --authentication-skip-lookup: no client CA is configured, so the apiserver
# publishes no extension-apiserver-authentication ConfigMap to look up (the
# lookup would only log errors in a loop).
if [ "$WITH_KCM" = 1 ]; then
  log "kube-controller-manager $K8S_VERSION on https://127.0.0.1:$KCM_PORT"
  mkdir -p "$STATE/kcm-pki"
  launch kube-controller-manager "$KCM_BIN" \
    --kubeconfig="$STATE/kubeconfig" \
    --authentication-kubeconfig="$STATE/kubeconfig" \
    --authorization-kubeconfig="$STATE/kubeconfig" \
    --authentication-skip-lookup=true \
    --bind-address=127.0.0.1 \
    --secure-port="$KCM_PORT" \
    --cert-dir="$STATE/kcm-pki" \
    --leader-elect=false \
    --service-account-private-key-file="$STATE/sa.key" \
    --root-ca-file="$STATE/pki/apiserver.crt" \
    --profiling=false
  # /healthz (always allowed without credentials) says the controllers are
  # running; the "default" service account of namespace default shows the
  # service-account controller has done its first sync, which tests that
  # create pods or tokens right away rely on.
  wait_for kube-controller-manager healthy \
    curl -fsS --max-time 2 -k "https://127.0.0.1:$KCM_PORT/healthz"
  wait_for kube-controller-manager "done with its first sync" \
    curl -fsS --max-time 2 --cacert "$STATE/pki/apiserver.crt" -H "Authorization: Bearer $ADMIN_TOKEN" \
      "$APISERVER_URL/api/v1/namespaces/default/serviceaccounts/default"
fi

cat >"$STATE/env" <<EOF
export KUBECONFIG='$STATE/kubeconfig'
export APISERVER_URL='$APISERVER_URL'
export ETCD_ENDPOINT='$ETCD_URL'
export KUBECTL='$KUBECTL_BIN'
export HELM='$HELM_BIN'
EOF
ready=1
log "ready: KUBECONFIG=$STATE/kubeconfig (apiserver pid $(cat "$STATE/kube-apiserver.pid"), etcd pid $(cat "$STATE/etcd.pid")$(
  [ "$WITH_KCM" = 1 ] && echo ", controller-manager pid $(cat "$STATE/kube-controller-manager.pid")"))"
