#!/usr/bin/env bash
# Builds the binaries of a real Kubernetes control plane for integration
# tests, from Go modules only (no container images, no release tarballs):
#
#   kube-apiserver, kubectl  k8s.io/kubernetes  $K8S_VERSION
#   etcd                     go.etcd.io/etcd    $ETCD_VERSION
#   helm                     helm.sh/helm/v3    $HELM_VERSION
#   kubelet, kube-scheduler, kube-proxy, kube-controller-manager
#                            k8s.io/kubernetes  $K8S_VERSION   (tool "node")
#   coredns                  github.com/coredns/coredns $COREDNS_VERSION
#
# Results land in ${LINEA_CACHE:-$HOME/.cache/linea}/e2e/<tool>-<version>/.
# A tool whose directory carries a .complete stamp is not rebuilt, and when
# every requested tool is cached the script exits before touching the Go
# toolchain, so a warm run takes well under a second.
#
# Usage: build.sh [etcd|kubernetes|helm|kube-controller-manager|node|coredns ...]
#   default: etcd kubernetes helm. kube-controller-manager (same k8s version)
#   is optional, for tests that need controllers (see README.md); node and
#   coredns are what the one-node cluster of e2e/cluster.sh runs.
# Prints the cache directories on success, progress lines on stderr.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.sh
. "$HERE/versions.sh"

log() { printf '[build] %s\n' "$*" >&2; }
die() { printf '[build] ERROR: %s\n' "$*" >&2; exit 1; }

is_built() { [ -f "$1/.complete" ]; }

# --- what is wanted, what is missing ---------------------------------------
tools=("$@")
[ ${#tools[@]} -gt 0 ] || tools=(etcd kubernetes helm)
missing=()
for t in "${tools[@]}"; do
  case "$t" in
    kubernetes) is_built "$KUBE_APISERVER_DIR" && is_built "$KUBECTL_DIR" || missing+=(kubernetes) ;;
    kube-controller-manager) is_built "$KCM_DIR" || missing+=(kube-controller-manager) ;;
    etcd)       is_built "$ETCD_DIR" || missing+=(etcd) ;;
    helm)       is_built "$HELM_DIR" || missing+=(helm) ;;
    node) is_built "$KUBELET_DIR" && is_built "$SCHEDULER_DIR" && is_built "$KUBE_PROXY_DIR" &&
            is_built "$KCM_DIR" || missing+=(node) ;;
    coredns)    is_built "$COREDNS_DIR" || missing+=(coredns) ;;
    *) die "unknown tool '$t' (expected: etcd kubernetes helm kube-controller-manager node coredns)" ;;
  esac
done

print_dirs() {
  for t in "${tools[@]}"; do
    case "$t" in
      kubernetes) echo "$KUBE_APISERVER_DIR"; echo "$KUBECTL_DIR" ;;
      kube-controller-manager) echo "$KCM_DIR" ;;
      etcd) echo "$ETCD_DIR" ;;
      helm) echo "$HELM_DIR" ;;
      node) echo "$KUBELET_DIR"; echo "$SCHEDULER_DIR"; echo "$KUBE_PROXY_DIR"; echo "$KCM_DIR" ;;
      coredns) echo "$COREDNS_DIR" ;;
    esac
  done
}

if [ ${#missing[@]} -eq 0 ]; then
  # Fast path: no `go` invocation at all.
  log "cached: ${tools[*]} (under $E2E_CACHE)"
  print_dirs
  exit 0
fi

# --- Go environment ----------------------------------------------------------
command -v go >/dev/null 2>&1 || die "go not found on PATH (need Go >= 1.26 for helm $HELM_VERSION)"
# Caches live under $LINEA_CACHE (see versions.sh) so they can be kept or
# wiped together with the binaries. -modcacherw keeps the module cache
# deletable with plain rm -rf. GOTOOLCHAIN=local: never try to download a
# different Go toolchain; fail instead if the local one is too old.
export GOCACHE="$GO_BUILD_CACHE" GOMODCACHE="$GO_MOD_CACHE" GOTOOLCHAIN=local
export GOFLAGS="-modcacherw -buildvcs=false"
# Static, libc-independent binaries, as upstream releases them.
export CGO_ENABLED=0
mkdir -p "$GOCACHE" "$GOMODCACHE" "$WRAPPER_ROOT" "$E2E_CACHE/logs"
log "go: $(go version | cut -d' ' -f3-) GOCACHE=$GOCACHE GOMODCACHE=$GOMODCACHE"

# run <log-file> <description> <cmd...>: runs a step at low priority (the
# machine is shared), keeps the noisy Go output in a log file and shows its
# tail if the step fails.
run() {
  local logf="$1" desc="$2"; shift 2
  log "  $desc"
  if ! nice -n 10 "$@" >>"$logf" 2>&1; then
    printf '[build] ---- last lines of %s ----\n' "$logf" >&2
    tail -n 40 "$logf" >&2 || true
    die "$desc failed (command: $*)"
  fi
}

# publish <dest-dir> <file...>: move the binaries into a fresh sibling dir,
# stamp it, then rename it into place so a crash never leaves a directory that
# looks complete but is not.
publish() {
  local dest="$1"; shift
  local tmp="$dest.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  mv "$@" "$tmp/"
  printf 'built %s with %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(go version)" >"$tmp/.complete"
  rm -rf "$dest"
  mv "$tmp" "$dest"
}

# --- kubernetes: kube-apiserver, kubectl (+ kube-controller-manager) ----------
# k8s.io/kubernetes is not meant to be a dependency: its go.mod requires every
# staging module (k8s.io/api, client-go, ...) at v0.0.0 and points them at
# ./staging/src via replace directives, which are ignored outside its own
# repo. The wrapper module re-creates those replaces against the published
# v0.<minor>.<patch> tags. The list is derived from kubernetes' own go.mod:
# every k8s.io module that is both required at v0.0.0 and replaced with a
# ./staging path (modules replaced but never required, like the samples,
# are left out: they are not in the module graph and are not all published).
# build_kubernetes <cmd...>: builds k8s.io/kubernetes/cmd/<cmd> for each cmd
# and publishes it to $E2E_CACHE/<cmd>-$K8S_VERSION.
build_kubernetes() {
  local cmds=("$@") pkgs=() getpkgs=() c
  for c in "${cmds[@]}"; do
    pkgs+=("k8s.io/kubernetes/cmd/$c")
    getpkgs+=("k8s.io/kubernetes/cmd/$c@$K8S_VERSION")
  done
  local start=$SECONDS
  # The wrapper dir and log are named after the command set, so two builds of
  # different commands (say the control plane and the node) never share one.
  local set="${cmds[*]}"; set="${set// /+}"
  local wdir="$WRAPPER_ROOT/kubernetes-$K8S_VERSION-$set"
  local logf="$E2E_CACHE/logs/kubernetes-$K8S_VERSION-$set.log"
  local out="$wdir/bin"
  : >"$logf"
  log "kubernetes $K8S_VERSION (staging modules $K8S_STAGING_VERSION): ${cmds[*]}"
  rm -rf "$wdir"; mkdir -p "$wdir"

  run "$logf" "download k8s.io/kubernetes@$K8S_VERSION" \
    go mod download -json "k8s.io/kubernetes@$K8S_VERSION"
  local upstream_mod
  upstream_mod="$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p' "$logf" | tail -n 1)"
  [ -f "$upstream_mod" ] || die "could not locate go.mod of k8s.io/kubernetes@$K8S_VERSION (see $logf)"

  local staging
  staging="$(awk '
    /^require[ \t]*\(/ { inreq = 1; next }
    inreq && /^\)/     { inreq = 0; next }
    inreq && $1 ~ /^k8s\.io\// && $2 == "v0.0.0" { req[$1] = 1 }
    $2 == "=>" && $3 ~ /^\.\/staging\/src\// && ($1 in req) { print $1 }
  ' "$upstream_mod")"
  [ -n "$staging" ] || die "found no staging modules in $upstream_mod"
  log "  $(echo "$staging" | wc -l) staging modules -> $K8S_STAGING_VERSION"

  {
    echo "// Generated by e2e/control-plane/build.sh; do not edit."
    echo "module linea.local/e2e/kubernetes-build"
    echo
    # Same language version and GODEBUG defaults as upstream's own build.
    awk '$1 == "go" || $1 == "godebug" { print }' "$upstream_mod"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    for m in $staging; do printf '\t%s => %s %s\n' "$m" "$m" "$K8S_STAGING_VERSION"; done
    echo ")"
  } >"$wdir/go.mod"

  # go get with an explicit @version (a bare package would mean @upgrade)
  # fills in the requirements and go.sum for exactly these commands.
  (cd "$wdir" && run "$logf" "resolve module graph (go get)" go get "${getpkgs[@]}")

  # Version stamping as in kubernetes' hack/lib/version.sh, so that
  # `kubectl version` and the apiserver's /version report the real version.
  local minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  local ldflags="-s -w" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done

  mkdir -p "$out"
  (cd "$wdir" && run "$logf" "go build ${cmds[*]} (slow on a cold cache)" \
    go build -trimpath -ldflags "$ldflags" -o "$out/" "${pkgs[@]}")

  for c in "${cmds[@]}"; do
    publish "$E2E_CACHE/$c-$K8S_VERSION" "$out/$c"
  done
  log "kubernetes $K8S_VERSION done in $((SECONDS - start))s"
}

# --- etcd ------------------------------------------------------------------------
# go.etcd.io/etcd/server/v3 carries replace directives in its go.mod, so
# `go install ...@version` refuses it; a two-line main in a wrapper module that
# calls etcdmain.Main is exactly what upstream's server/main.go does.
build_etcd() {
  local start=$SECONDS
  local wdir="$WRAPPER_ROOT/etcd-$ETCD_VERSION"
  local logf="$E2E_CACHE/logs/etcd-$ETCD_VERSION.log"
  : >"$logf"
  log "etcd $ETCD_VERSION"
  rm -rf "$wdir"; mkdir -p "$wdir"
  cat >"$wdir/main.go" <<'GO'
// Generated by e2e/control-plane/build.sh; do not edit.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  (cd "$wdir" &&
    run "$logf" "create wrapper module" go mod init linea.local/e2e/etcd-build &&
    run "$logf" "resolve module graph (go get)" go get "go.etcd.io/etcd/server/v3/etcdmain@$ETCD_VERSION" &&
    run "$logf" "go build etcd" go build -trimpath -ldflags "-s -w" -o "$wdir/bin/etcd" .)
  publish "$ETCD_DIR" "$wdir/bin/etcd"
  log "etcd $ETCD_VERSION done in $((SECONDS - start))s"
}

# --- helm ------------------------------------------------------------------------
build_helm() {
  local start=$SECONDS
  local logf="$E2E_CACHE/logs/helm-$HELM_VERSION.log"
  local gobin="$WRAPPER_ROOT/helm-$HELM_VERSION/bin"
  : >"$logf"
  log "helm $HELM_VERSION"
  rm -rf "$gobin"; mkdir -p "$gobin"
  # helm's Makefile stamps the version the same way; without it
  # `helm version` reports only the minor line.
  (export GOBIN="$gobin"
    run "$logf" "go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION" \
      go install -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
        "helm.sh/helm/v3/cmd/helm@$HELM_VERSION")
  publish "$HELM_DIR" "$gobin/helm"
  log "helm $HELM_VERSION done in $((SECONDS - start))s"
}

# --- coredns ----------------------------------------------------------------------
# The cluster DNS of e2e/cluster.sh. CoreDNS's own main links every plugin it
# ships (clouds, etcd, dnstap, ...); this wrapper sets the directive list to the
# few the cluster's Corefile uses, in CoreDNS's plugin.cfg order, and imports
# only those, which is CoreDNS's documented way to build a trimmed server.
build_coredns() {
  local start=$SECONDS
  local wdir="$WRAPPER_ROOT/coredns-$COREDNS_VERSION"
  local logf="$E2E_CACHE/logs/coredns-$COREDNS_VERSION.log"
  : >"$logf"
  log "coredns $COREDNS_VERSION"
  rm -rf "$wdir"; mkdir -p "$wdir"
  cat >"$wdir/main.go" <<'GO'
// Generated by e2e/control-plane/build.sh; do not edit.
// CoreDNS with only the plugins of e2e/cluster.sh's Corefile.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

// Order matters: it is the order of CoreDNS's plugin.cfg.
var directives = []string{"bind", "ready", "health", "errors", "cache", "kubernetes"}

func init() { dnsserver.Directives = directives }

func main() { coremain.Run() }
GO
  (cd "$wdir" &&
    run "$logf" "create wrapper module" go mod init linea.local/e2e/coredns-build &&
    run "$logf" "resolve module graph (go get)" go get "github.com/coredns/coredns@$COREDNS_VERSION" &&
    run "$logf" "go mod tidy" go mod tidy &&
    run "$logf" "go build coredns" go build -trimpath -ldflags "-s -w" -o "$wdir/bin/coredns" .)
  publish "$COREDNS_DIR" "$wdir/bin/coredns"
  log "coredns $COREDNS_VERSION done in $((SECONDS - start))s"
}

total_start=$SECONDS
# All missing kubernetes commands go into one `go build` (shared packages are
# compiled once); the other tools are built in the order asked for.
kube_cmds=()
for t in "${missing[@]}"; do
  case "$t" in
    kubernetes) kube_cmds+=(kube-apiserver kubectl) ;;
    kube-controller-manager) kube_cmds+=(kube-controller-manager) ;;
    node) kube_cmds+=(kubelet kube-scheduler kube-proxy kube-controller-manager) ;;
  esac
done
# node and kube-controller-manager may both ask for the controller manager.
mapfile -t kube_cmds < <(printf '%s\n' "${kube_cmds[@]}" | awk 'NF && !seen[$0]++')
for t in "${missing[@]}"; do
  case "$t" in
    kubernetes|kube-controller-manager|node)
      if [ ${#kube_cmds[@]} -gt 0 ]; then build_kubernetes "${kube_cmds[@]}"; kube_cmds=(); fi ;;
    *) "build_$t" ;;
  esac
done
log "built ${missing[*]} in $((SECONDS - total_start))s"
print_dirs
