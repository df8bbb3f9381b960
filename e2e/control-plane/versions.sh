# shellcheck shell=bash disable=SC2034  # variables are used by the scripts sourcing this
# Sourced by build.sh / start.sh / smoke.sh: the single place where the
# control-plane tool versions and cache paths are pinned.
#
# Versions are the newest of each line that the Go module proxy serves here
# (checked 2026-11-22): k8s.io/kubernetes v1.35.8 (v1.35.9+ not available),
# go.etcd.io/etcd/server/v3 v3.6.16, helm.sh/helm/v3 v3.21.4.
K8S_VERSION="${K8S_VERSION:-v1.35.8}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
HELM_VERSION="${HELM_VERSION:-v3.21.4}"
# Cluster DNS of the one-node cluster (e2e/cluster.sh): CoreDNS built from its Go module
# with only the plugins that cluster uses (build.sh writes the wrapper main).
COREDNS_VERSION="${COREDNS_VERSION:-v1.15.0}"

# Published staging modules (k8s.io/api, k8s.io/client-go, ...) are tagged
# v0.<minor>.<patch> for kubernetes v1.<minor>.<patch>.
K8S_STAGING_VERSION="v0.${K8S_VERSION#v1.}"

LINEA_CACHE="${LINEA_CACHE:-$HOME/.cache/linea}"
E2E_CACHE="$LINEA_CACHE/e2e"

# One directory per tool+version; a directory only counts as built when its
# .complete stamp exists (written last, after an atomic rename).
KUBE_APISERVER_DIR="$E2E_CACHE/kube-apiserver-$K8S_VERSION"
KUBECTL_DIR="$E2E_CACHE/kubectl-$K8S_VERSION"
KCM_DIR="$E2E_CACHE/kube-controller-manager-$K8S_VERSION"   # optional
# The node of e2e/cluster.sh (build.sh node): kubelet, scheduler, kube-proxy (and the
# controller manager above), plus CoreDNS.
KUBELET_DIR="$E2E_CACHE/kubelet-$K8S_VERSION"
SCHEDULER_DIR="$E2E_CACHE/kube-scheduler-$K8S_VERSION"
KUBE_PROXY_DIR="$E2E_CACHE/kube-proxy-$K8S_VERSION"
COREDNS_DIR="$E2E_CACHE/coredns-$COREDNS_VERSION"
ETCD_DIR="$E2E_CACHE/etcd-$ETCD_VERSION"
HELM_DIR="$E2E_CACHE/helm-$HELM_VERSION"

KUBE_APISERVER_BIN="${KUBE_APISERVER_BIN:-$KUBE_APISERVER_DIR/kube-apiserver}"
KUBECTL_BIN="${KUBECTL_BIN:-$KUBECTL_DIR/kubectl}"
KCM_BIN="${KCM_BIN:-$KCM_DIR/kube-controller-manager}"
ETCD_BIN="${ETCD_BIN:-$ETCD_DIR/etcd}"
HELM_BIN="${HELM_BIN:-$HELM_DIR/helm}"
KUBELET_BIN="${KUBELET_BIN:-$KUBELET_DIR/kubelet}"
SCHEDULER_BIN="${SCHEDULER_BIN:-$SCHEDULER_DIR/kube-scheduler}"
KUBE_PROXY_BIN="${KUBE_PROXY_BIN:-$KUBE_PROXY_DIR/kube-proxy}"
COREDNS_BIN="${COREDNS_BIN:-$COREDNS_DIR/coredns}"

# Go caches live under the same root so the whole thing can be wiped or
# persisted (e.g. by CI) as one directory, independent of ~/go.
GO_BUILD_CACHE="$LINEA_CACHE/go/build"
GO_MOD_CACHE="$LINEA_CACHE/go/mod"
# Wrapper modules (generated go.mod/main.go) are kept here, never in the repo.
WRAPPER_ROOT="$E2E_CACHE/src"
