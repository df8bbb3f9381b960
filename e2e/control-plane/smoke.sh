#!/usr/bin/env bash
# Smoke test of the e2e control plane: build (cached), start, exercise the
# API (version, namespaces, RBAC, a CRD with a CEL validation rule, helm),
# stop. Prints `control plane smoke: N passed, M failed` last and exits
# non-zero on any failure.
#
# Usage: smoke.sh   (state dir: a fresh temp dir, removed at the end)
# WITH_CONTROLLER_MANAGER=1 also builds/starts kube-controller-manager and
# checks garbage collection and namespace deletion.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.sh
. "$HERE/versions.sh"

passed=0 failed=0
STATE=""

finish() {
  local rc=$?
  if [ -n "$STATE" ] && { [ "$failed" -gt 0 ] || [ "$rc" -ne 0 ]; }; then
    # Show why, while the logs still exist.
    for f in "$STATE/kube-apiserver.log" "$STATE/etcd.log"; do
      if [ -f "$f" ]; then echo "---- last lines of $f ----"; tail -n 20 "$f"; fi
    done
  fi
  if [ -n "$STATE" ]; then
    if [ -f "$STATE/.linea-control-plane" ]; then "$HERE/stop.sh" "$STATE" || true; else rm -rf "$STATE"; fi
  fi
  # A setup step that died (build, start) counts as a failure too.
  if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
  echo "control plane smoke: $passed passed, $failed failed"
  [ "$failed" -eq 0 ] || exit 1
}
trap finish EXIT

t0=$SECONDS
WITH_KCM="${WITH_CONTROLLER_MANAGER:-0}"
export WITH_CONTROLLER_MANAGER="$WITH_KCM"
if [ "$WITH_KCM" = 1 ]; then
  "$HERE/build.sh" etcd kubernetes helm kube-controller-manager >/dev/null
else
  "$HERE/build.sh" >/dev/null
fi
echo "build (cached or not) took $((SECONDS - t0))s"

STATE="$(mktemp -d "${TMPDIR:-/tmp}/linea-control-plane.XXXXXX")"
t0=$SECONDS
"$HERE/start.sh" "$STATE"
echo "control plane ready in $((SECONDS - t0))s"
# shellcheck source=/dev/null
. "$STATE/env"
# Keep kubectl's discovery cache and helm's config/cache out of $HOME.
export KUBECACHEDIR="$STATE/kube-cache"
export HELM_CACHE_HOME="$STATE/helm/cache" HELM_CONFIG_HOME="$STATE/helm/config" HELM_DATA_HOME="$STATE/helm/data"
k() { "$KUBECTL" "$@"; }

. "$HERE/../checks.sh"

# 1. client and server versions; the server is the pinned build
check_version() {
  local out; out="$(k version 2>&1)" || { echo "$out"; return 1; }
  grep -q "^Server Version: $K8S_VERSION\$" <<<"$out" || { echo "server version is not $K8S_VERSION:"; echo "$out"; return 1; }
  printf 'note: %s\n' "${out//$'\n'/$'\n'note: }"
}
check "kubectl version reports server $K8S_VERSION" check_version

# 2. namespaces the apiserver creates itself
check_ns() {
  local out; out="$(k get ns -o name)" || return 1
  if ! grep -qx namespace/default <<<"$out" || ! grep -qx namespace/kube-system <<<"$out"; then
    echo "$out"; return 1
  fi
}
check "kubectl get ns lists default and kube-system" check_ns

# 3. RBAC is enforced: the admin may do anything, a bare service account not
check_rbac() {
  local out
  out="$(k auth can-i '*' '*' --all-namespaces 2>&1 || true)"
  [ "$out" = yes ] || { echo "admin can-i '*': '$out' (want yes)"; return 1; }
  out="$(k auth can-i list pods -n smoke --as=system:serviceaccount:smoke:robot 2>&1 || true)"
  [ "$out" = no ] || { echo "service account can-i list pods: '$out' (want no)"; return 1; }
}
check "RBAC: admin allowed, service account denied" check_rbac

# 4. CRD with a CEL rule becomes Established
cat >"$STATE/crd.yaml" <<'YAML'
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: ranges.smoke.linea.dev
spec:
  group: smoke.linea.dev
  scope: Namespaced
  names: {plural: ranges, singular: range, kind: Range}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [min, max]
            properties:
              min: {type: integer}
              max: {type: integer}
            x-kubernetes-validations:
            - rule: self.min <= self.max
              message: min must be less than or equal to max
YAML
check_crd() {
  k apply -f "$STATE/crd.yaml" &&
    established ranges.smoke.linea.dev
}
check "CRD with x-kubernetes-validations applied and Established" check_crd

# range_yaml <name> <min> <max>: one Range object
range_yaml() {
  printf 'apiVersion: smoke.linea.dev/v1\nkind: Range\nmetadata: {name: %s, namespace: default}\nspec: {min: %s, max: %s}\n' "$@"
}

# 5. valid object accepted (and really stored)
check_valid() {
  range_yaml ok 1 5 | k apply -f - && k get range ok -n default
}
check "valid object (min <= max) accepted" check_valid

# 6. invalid object refused with the rule's message
check_invalid() {
  local out
  if out="$(range_yaml bad 7 5 | k apply -f - 2>&1)"; then
    echo "invalid object was accepted: $out"; return 1
  fi
  grep -q "min must be less than or equal to max" <<<"$out" || { echo "refused, but without the rule's message: $out"; return 1; }
  echo "note: $out"
}
check "invalid object (min > max) refused with the rule's message" check_invalid

# 7. helm runs and reaches the cluster
check_helm() {
  local v; v="$("$HELM" version --short 2>&1)" || { echo "'$HELM version' failed: $v"; return 1; }
  [[ "$v" == "$HELM_VERSION"* ]] || { echo "helm version '$v', want $HELM_VERSION"; return 1; }
  echo "note: helm $v"
  "$HELM" list -A
}
check "helm $HELM_VERSION runs against the cluster" check_helm

# 8. (with the controller manager) owned objects are garbage-collected and a
#    deleted namespace really goes away
check_controllers() {
  k create namespace smoke-gc || return 1
  k create configmap owner -n smoke-gc || return 1
  local uid; uid="$(k get configmap owner -n smoke-gc -o 'jsonpath={.metadata.uid}')" || return 1
  k apply -f - <<YAML || return 1
apiVersion: v1
kind: ConfigMap
metadata:
  name: owned
  namespace: smoke-gc
  ownerReferences: [{apiVersion: v1, kind: ConfigMap, name: owner, uid: "$uid"}]
YAML
  k delete configmap owner -n smoke-gc || return 1
  k wait --for=delete configmap/owned -n smoke-gc --timeout=60s || return 1
  k delete namespace smoke-gc --wait=false || return 1
  k wait --for=delete namespace/smoke-gc --timeout=60s
}
if [ "$WITH_KCM" = 1 ]; then
  check "controller manager: garbage collection and namespace deletion" check_controllers
fi

# Memory footprint after the checks (informational, for the README).
procs=(kube-apiserver etcd)
[ "$WITH_KCM" = 1 ] && procs+=(kube-controller-manager)
for p in "${procs[@]}"; do
  rss_kb="$(awk '/^VmRSS:/ {print $2}' "/proc/$(cat "$STATE/$p.pid")/status")"
  echo "info - $p RSS: $((rss_kb / 1024)) MiB"
done
