#!/usr/bin/env bash
# A real one-node Kubernetes cluster on this machine, without Docker or systemd: etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy and CoreDNS
# built from pinned Go modules (e2e/control-plane/build.sh), containerd + runc + the CNI
# bridge plugin from Debian (e2e/node/install-deps.sh), and the linea and pause images
# assembled with umoci (e2e/node/images.py) and imported into containerd.
#
#   e2e/cluster.sh up      build what is missing, start everything, wait for the node Ready
#   e2e/cluster.sh down    stop everything; remove the pods' cgroups, mounts, netns, the
#                          bridge and the iptables chains it made; restore the sysctls
#   e2e/cluster.sh env     print the env file to source (KUBECONFIG, KUBECTL, HELM, ...)
#
# State lives in LINEA_CLUSTER_DIR (default /tmp/linea-cluster). LINEA_BIN_DIR: take the
# image's binaries from there instead of building this checkout (cargo build --release).
# Needs root. Network: a
# bridge linea0 with 10.244.0.1/24 for the pods; the apiserver, kubelet and CoreDNS listen
# on 10.244.0.1 only (nothing on other interfaces), the rest on 127.0.0.1.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
CP="$HERE/control-plane"
# shellcheck source=control-plane/versions.sh
. "$CP/versions.sh"

STATE="${LINEA_CLUSTER_DIR:-/tmp/linea-cluster}"
BRIDGE=linea0
POD_CIDR=10.244.0.0/24
NODE_IP=10.244.0.1
SERVICE_CIDR=10.0.0.0/24
NODE_NAME=linea-node
TIMEOUT="${START_TIMEOUT:-120}"
# Kernel settings the kubelet, kube-proxy or this script change; recorded at `up`, put
# back at `down`.
# Paths the node writes outside the state dir: the kubelet's device-plugin dir and its
# /var/log/containers links (not configurable), libcni's result cache, the runc shims'
# state and sockets.
HOST_PATHS=(/var/lib/kubelet /var/log/containers /var/log/pods /var/lib/cni /run/containerd)
SYSCTLS=(vm.overcommit_memory kernel.panic kernel.panic_on_oops net.ipv4.ip_forward
  net.ipv4.conf.all.route_localnet net.bridge.bridge-nf-call-iptables
  net.netfilter.nf_conntrack_max net.netfilter.nf_conntrack_tcp_timeout_established
  net.netfilter.nf_conntrack_tcp_timeout_close_wait)

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { printf '[cluster] ERROR: %s\n' "$*" >&2; exit 1; }

CTRD_SOCK="$STATE/containerd/containerd.sock"
ctr_() { ctr --address "$CTRD_SOCK" -n k8s.io "$@"; }
kubectl_() { KUBECONFIG="$STATE/cp/kubeconfig" "$KUBECTL_BIN" "$@"; }

# --- helpers ------------------------------------------------------------------------------
# check_disk <dir>: refuses to start a node that would evict its pods at once. The kubelet
# (evictionHard below) evicts every pod when less than 1% of the disk is free; the images,
# the pods' scratch and the logs need about 2 GiB more. Without this check a full disk shows
# up minutes later as a Deployment that never becomes Ready (pods Evicted: DiskPressure).
check_disk() {
  local size avail need
  read -r size avail <<<"$(df -B1 --output=size,avail "$1" | tail -n 1)"
  need=$((size / 100 + 2 * 1024 * 1024 * 1024))
  [ "$avail" -ge "$need" ] ||
    die "$1 has $((avail >> 20)) MiB free; the node needs $((need >> 20)) MiB (1% of the disk, below which the kubelet evicts every pod, plus 2 GiB for images and pods). Free some space first."
}
taken=" "
pick_port() {
  local p
  for _ in $(seq 1 200); do
    p=$((20000 + (RANDOM * 32768 + RANDOM) % 12000))
    case "$taken" in *" $p "*) continue ;; esac
    if [ -z "$(ss -Htln "sport = :$p" 2>/dev/null)" ]; then taken+="$p "; echo "$p"; return 0; fi
  done
  die "no free port"
}
launch() {
  local name="$1"; shift
  setsid "$@" </dev/null >"$STATE/$name.log" 2>&1 &
  echo $! >"$STATE/$name.pid"
}
# wait_for <name> <what> <cmd...>: poll until cmd succeeds; fail early if the process died.
wait_for() {
  local name="$1" what="$2" pid deadline=$((SECONDS + TIMEOUT)); shift 2
  pid="$(cat "$STATE/$name.pid")"
  until "$@" >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then tail -n 30 "$STATE/$name.log" >&2; die "$name exited before $what"; fi
    if [ $SECONDS -ge $deadline ]; then tail -n 30 "$STATE/$name.log" >&2; die "$name not $what after ${TIMEOUT}s"; fi
    sleep 0.5 # poll interval
  done
}
# stop_pid <name> <expected exe basename>: TERM, bounded wait, KILL; only our process.
stop_pid() {
  local name="$1" exe="$2" pidf="$STATE/$1.pid" pid deadline
  [ -f "$pidf" ] || return 0
  pid="$(cat "$pidf")"
  if [ "$(basename "$(readlink "/proc/$pid/exe" 2>/dev/null || true)")" = "$exe" ]; then
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + 20))
    while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  fi
  rm -f "$pidf"
}

# --- up -----------------------------------------------------------------------------------
up() {
  [ "$(id -u)" = 0 ] || die "needs root (containerd, cgroups, network namespaces)"
  [ ! -f "$STATE/.linea-cluster" ] || die "$STATE holds a cluster already; run '$0 down' first"
  # (Output captured before grep: with pipefail, `cmd | grep -q` can fail on SIGPIPE.)
  if grep -qE "^(10\.244\.0\.|10\.0\.0\.)" <<<"$(ip -4 route show)" || ip link show "$BRIDGE" >/dev/null 2>&1; then
    die "$POD_CIDR or $SERVICE_CIDR is routed here already, or $BRIDGE exists (another cluster?)"
  fi
  check_disk "$(dirname "$STATE")"
  local start=$SECONDS
  "$HERE/node/install-deps.sh"
  "$CP/build.sh" kubernetes node coredns etcd helm >/dev/null
  # The image's binaries: this checkout's release build (or LINEA_BIN_DIR, if set).
  local bin_dir="${LINEA_BIN_DIR:-}"
  if [ -z "$bin_dir" ]; then
    . "$ROOT/scripts/env.sh"
    build_release
    bin_dir="$CARGO_TARGET_DIR/release"
  fi

  mkdir -p "$STATE"
  touch "$STATE/.linea-cluster"
  up_done=0
  trap '[ "$up_done" = 1 ] || { log "up failed; cleaning up (logs: ${KEEP:-$STATE/*.log})"; keep_logs; down || true; }' EXIT
  local s
  for s in "${SYSCTLS[@]}"; do
    v="$(sysctl -n "$s" 2>/dev/null)" && printf '%s=%s\n' "$s" "$v"
  done >"$STATE/sysctl.saved"
  ls /run/netns 2>/dev/null | sort >"$STATE/netns.before" || true
  # Fixed paths outside the state dir that the kubelet, containerd's shims and libcni use
  # whatever they are told: those that do not exist yet are removed again by `down`.
  for s in "${HOST_PATHS[@]}"; do [ -e "$s" ] || echo "$s"; done >"$STATE/host-paths.created"

  # Pod network: one bridge, the node's address as the pods' gateway. Pods reach the host
  # (apiserver, S3, DNS) at NODE_IP, so no masquerading is set up.
  ip link add "$BRIDGE" type bridge
  ip addr add "$NODE_IP/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1

  log "control plane (etcd, kube-apiserver on $NODE_IP, kube-controller-manager)"
  APISERVER_ADDRESS="$NODE_IP" WITH_CONTROLLER_MANAGER=1 "$CP/start.sh" "$STATE/cp"
  local kubeconfig="$STATE/cp/kubeconfig"

  log "containerd $(containerd --version | awk '{print $3}')"
  mkdir -p "$STATE/containerd" "$STATE/cni/net.d" "$STATE/cni/ipam"
  cat >"$STATE/containerd/config.toml" <<EOF
version = 2
root = "$STATE/containerd/root"
state = "$STATE/containerd/state"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$CTRD_SOCK"
[ttrpc]
  address = "$CTRD_SOCK.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  # The pause image assembled by e2e/node/images.py; nothing is ever pulled.
  sandbox_image = "$(python3 "$HERE/node/images.py" pause-name)"
  # No CAP_SYS_RESOURCE here: containers may only raise their oom_score_adj.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni/net.d"
EOF
  cat >"$STATE/cni/net.d/10-linea.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "linea",
  "plugins": [{
    "type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {"type": "host-local", "dataDir": "$STATE/cni/ipam",
             "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP"}]],
             "routes": [{"dst": "0.0.0.0/0"}]}
  }]
}
EOF
  launch containerd containerd --config "$STATE/containerd/config.toml"
  wait_for containerd "serving" ctr --address "$CTRD_SOCK" version

  log "images"
  local out name
  while read -r out name; do
    case "$name" in
      *pause*) ctr_ images import --base-name "${name%:*}" "$out" >/dev/null ;;
      *) ctr_ images import --base-name "${name%:*}" "$out" >/dev/null ;;
    esac
    grep -qx "$name" <<<"$(ctr_ images ls -q)" || die "image $name not imported"
    log "  $name"
  done < <(python3 "$HERE/node/images.py" build "$STATE/images" "$bin_dir")

  log "CoreDNS $COREDNS_VERSION on $NODE_IP:53"
  local dns_ready_port
  dns_ready_port="$(pick_port)"
  cat >"$STATE/Corefile" <<EOF
.:53 {
    bind $NODE_IP
    ready 127.0.0.1:$dns_ready_port
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $kubeconfig linea-e2e
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
}
EOF
  launch coredns "$COREDNS_BIN" -conf "$STATE/Corefile"

  log "kube-scheduler"
  local sched_port proxy_health proxy_metrics kubelet_port
  sched_port="$(pick_port)"
  mkdir -p "$STATE/scheduler-pki"
  launch kube-scheduler "$SCHEDULER_BIN" --kubeconfig="$kubeconfig" \
    --authentication-kubeconfig="$kubeconfig" --authorization-kubeconfig="$kubeconfig" \
    --authentication-skip-lookup=true --bind-address=127.0.0.1 --secure-port="$sched_port" \
    --cert-dir="$STATE/scheduler-pki" --leader-elect=false --profiling=false

  log "kube-proxy (iptables)"
  proxy_health="$(pick_port)" proxy_metrics="$(pick_port)"
  cat >"$STATE/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$kubeconfig"}
hostnameOverride: $NODE_NAME
mode: iptables
clusterCIDR: $POD_CIDR
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:$proxy_health
metricsBindAddress: 127.0.0.1:$proxy_metrics
# Leave the machine's conntrack table size and timeouts alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
# No NodePorts on 127.0.0.1 (that would need route_localnet) and none on eth0.
iptables: {localhostNodePorts: false}
nodePortAddresses: ["$POD_CIDR"]
EOF
  launch kube-proxy "$KUBE_PROXY_BIN" --config="$STATE/kube-proxy.yaml"

  log "kubelet (node $NODE_NAME at $NODE_IP)"
  kubelet_port="$(pick_port)"
  mkdir -p "$STATE/kubelet"
  cat >"$STATE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine mounts cgroup v1 controllers (hybrid); kubelet 1.35 refuses v1 unless told.
failCgroupV1: false
# No systemd here.
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$CTRD_SOCK
address: $NODE_IP
port: $kubelet_port
readOnlyPort: 0
healthzPort: 0
# The apiserver has no kubelet client certificate; kubectl logs/exec reach the kubelet
# anonymously. Acceptable for a disposable test node that listens on the pod bridge only.
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
clusterDomain: cluster.local
clusterDNS: [$NODE_IP]
resolvConf: ""
# Images are imported, never pulled: the kubelet must never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# The disk is shared with other work; evict only when it is really full.
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
failSwapOn: false
# Container logs in the state dir (/var/log/containers only gets links, removed by down).
podLogsDir: $STATE/pod-logs
makeIPTablesUtilChains: false
serializeImagePulls: false
EOF
  launch kubelet "$KUBELET_BIN" --config="$STATE/kubelet.yaml" --kubeconfig="$kubeconfig" \
    --root-dir="$STATE/kubelet" --cert-dir="$STATE/kubelet/pki" \
    --hostname-override="$NODE_NAME" --node-ip="$NODE_IP"
  wait_for kubelet "Ready" kubectl_ wait --for=condition=Ready --timeout=2s "node/$NODE_NAME"
  wait_for coredns "ready" curl -fsS --max-time 2 "http://127.0.0.1:$dns_ready_port/ready"
  wait_for kube-proxy "healthy" curl -fsS --max-time 2 "http://127.0.0.1:$proxy_health/healthz"

  cat "$STATE/cp/env" >"$STATE/env"
  cat >>"$STATE/env" <<EOF
export LINEA_NODE_IP='$NODE_IP'
export LINEA_NODE_NAME='$NODE_NAME'
export LINEA_IMAGE='$(python3 "$HERE/node/images.py" name)'
export CONTAINERD_ADDRESS='$CTRD_SOCK'
EOF
  up_done=1
  log "ready in $((SECONDS - start))s: . $STATE/env"
}

# A failed `up` is cleaned up at once; its logs are kept in a sibling directory.
keep_logs() {
  KEEP="$STATE.failed-logs"
  rm -rf "$KEEP"; mkdir -p "$KEEP"
  cp "$STATE"/*.log "$STATE"/cp/*.log "$KEEP/" 2>/dev/null || true
}

# --- down ---------------------------------------------------------------------------------
# Every step tolerates a half-started cluster, so `down` also cleans up after a failed `up`.
down() {
  [ -d "$STATE" ] || { log "$STATE does not exist, nothing to stop"; return 0; }
  [ -f "$STATE/.linea-cluster" ] || die "$STATE was not made by $0; refusing to touch it"
  local start=$SECONDS pid

  # No new pods: stop the controllers and the scheduler, then let the kubelet stop every pod
  # (CNI DEL tears down each pod's network), bounded.
  stop_pid kube-scheduler kube-scheduler
  [ -f "$STATE/cp/kube-controller-manager.pid" ] &&
    STATE="$STATE/cp" stop_pid kube-controller-manager kube-controller-manager
  if [ -f "$STATE/kubelet.pid" ] && kill -0 "$(cat "$STATE/kubelet.pid")" 2>/dev/null; then
    kubectl_ delete pods --all --all-namespaces --grace-period=5 --wait=false >/dev/null 2>&1 || true
    local deadline=$((SECONDS + 60))
    while [ -n "$(ctr_ tasks ls -q 2>/dev/null)" ] && [ $SECONDS -lt $deadline ]; do sleep 0.5; done
  fi
  stop_pid kubelet kubelet
  stop_pid kube-proxy kube-proxy
  stop_pid coredns coredns

  # Whatever the kubelet left: kill and delete the containers through containerd.
  if [ -S "$CTRD_SOCK" ]; then
    local t
    for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true; done
    for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "$t" >/dev/null 2>&1 || true; done
    for t in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers delete "$t" >/dev/null 2>&1 || true; done
  fi
  stop_pid containerd containerd
  # The runc shims of this containerd (they outlive it by design).
  for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $CTRD_SOCK" || true); do
    kill -KILL "$pid" 2>/dev/null || true
  done

  [ -d "$STATE/cp" ] && "$CP/stop.sh" "$STATE/cp" || true

  # Mounts under the state dir (sandbox shm, overlay rootfs, kubelet volumes), deepest first.
  local m
  for m in $(awk -v s="$STATE/" 'index($2, s) == 1 {print $2}' /proc/self/mounts | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done
  # Network namespaces that appeared while the cluster ran (CRI names them cni-*).
  if [ -f "$STATE/netns.before" ]; then
    for m in $(ls /run/netns 2>/dev/null | grep '^cni-' | sort | comm -13 "$STATE/netns.before" - || true); do
      ip netns delete "$m" 2>/dev/null || true
    done
  fi
  ip link del "$BRIDGE" 2>/dev/null || true
  # Outside the state dir: our log links, our libcni results, then what `up` created.
  for m in /var/log/containers/*.log; do
    case "$(readlink "$m" 2>/dev/null)" in "$STATE"/*) rm -f "$m" ;; esac
  done
  rm -f /var/lib/cni/results/linea-* 2>/dev/null || true
  if [ -f "$STATE/host-paths.created" ]; then
    while IFS= read -r m; do
      case "$m" in /var/lib/kubelet | /var/log/containers | /var/log/pods | /var/lib/cni | /run/containerd) rm -rf "$m" ;; esac
    done <"$STATE/host-paths.created"
  fi
  # The pods' cgroups (cgroupfs driver: kubepods/ in every v1 hierarchy), deepest first.
  for m in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/unified/kubepods; do
    [ -d "$m" ] && find "$m" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  clean_iptables
  if [ -f "$STATE/sysctl.saved" ]; then
    while IFS= read -r line; do sysctl -qw "$line" 2>/dev/null || log "could not restore $line"; done <"$STATE/sysctl.saved"
  fi
  if [ -n "$(awk -v s="$STATE/" 'index($2, s) == 1' /proc/self/mounts)" ]; then
    die "mounts remain under $STATE; not removing it"
  fi
  rm -rf "$STATE"
  log "down in $((SECONDS - start))s"
}

# kube-proxy's own clean-up, then any KUBE-*/CNI-* chain left in any table, with the rules
# in other chains that jump to them. Chains of anyone else are not touched.
clean_iptables() {
  command -v iptables >/dev/null || return 0
  [ -x "$KUBE_PROXY_BIN" ] && "$KUBE_PROXY_BIN" --cleanup >/dev/null 2>&1 || true
  local table chain rule
  for table in filter nat mangle raw; do
    iptables -t "$table" -S 2>/dev/null | grep -E '^-A .* -j (KUBE|CNI)-' | while IFS= read -r rule; do
      # shellcheck disable=SC2086  # the rule is re-split into iptables arguments
      eval "iptables -t $table ${rule/-A/-D}" 2>/dev/null || true
    done || true
    for chain in $(iptables -t "$table" -S 2>/dev/null | awk '/^-N (KUBE|CNI)-/ {print $2}'); do
      iptables -t "$table" -F "$chain" 2>/dev/null || true
    done
    for chain in $(iptables -t "$table" -S 2>/dev/null | awk '/^-N (KUBE|CNI)-/ {print $2}'); do
      iptables -t "$table" -X "$chain" 2>/dev/null || true
    done
  done
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  env) cat "$STATE/env" ;;
  *) sed -n '2,15p' "$0" >&2; exit 2 ;;
esac
