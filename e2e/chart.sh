#!/usr/bin/env bash
# The Helm chart (charts/linea) against a real kube-apiserver + etcd (e2e/control-plane):
#
#   - `helm lint --strict` with the default values, with the options on, and with every
#     value set (charts/linea/ci/full-values.yaml);
#   - values that break values.schema.json are refused by helm;
#   - `helm template | kubectl apply --dry-run=server` is accepted for the same three value
#     sets, in a namespace that enforces the `restricted` Pod Security Standard, without a
#     single PodSecurity warning;
#   - the NetworkPolicy that opens job masters' /metrics port (9090), as the server would
#     store it, with metricsFrom empty and set;
#   - a real `helm install` (CRD from crds/ and every object), then: the stored ClusterRole
#     holds exactly the operator's permissions and the Role exactly its Lease's, the
#     Deployment has the hardened pod spec, two replicas get a PodDisruptionBudget,
#     the generated operator key survives `helm upgrade`, and `kubectl auth can-i` as the
#     operator's ServiceAccount answers yes to every permission it needs and no to a list
#     of things it must never do;
#   - the kind demo's manifests (e2e/kind) are accepted by this server and its CRD.
#
# Prints `chart: N/M checks passed` last; exits non-zero on any failure.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
CP="$HERE/control-plane"
# shellcheck source-path=SCRIPTDIR source=control-plane/versions.sh
. "$CP/versions.sh"
CHART="$ROOT/charts/linea"
FULL_VALUES="$CHART/ci/full-values.yaml"
NS=linea-system
RELEASE=linea
SA=linea-operator          # <release>-operator, with release "linea"
AS="system:serviceaccount:$NS:$SA"
OTHER_NS=ml                # a namespace where TrainingJobs run (full-values.yaml names it)
DEMO_NS=linea-demo         # the kind demo's namespace

# What the operator may do, one rule per line: <apiGroup|core> <resource[/subresource]>
# <verbs...>. The ClusterRole must hold exactly these; each is checked with can-i.
GRANTED=(
  "linea.io trainingjobs get list watch patch update delete"
  "linea.io trainingjobs/status get patch update"
  "linea.io trainingjobs/finalizers update"
  "core pods get list watch create delete patch"
  "core services get list watch create delete patch"
  "core secrets create delete"
  "policy poddisruptionbudgets get create patch delete"
  "core nodes get list watch"
  "events.k8s.io events create patch"
)
CLUSTER_SCOPED=" nodes clusterroles clusterrolebindings namespaces "
# The Role in the release namespace: leader election on one Lease, named like the operator.
# <apiGroup> <resource[/name]> <verbs...>
LEASE_GRANTED=(
  "coordination.k8s.io leases create"
  "coordination.k8s.io leases/$SA get patch"
)
# What it must never be able to do: <verb> <resource[.group][/subresource]>.
DENIED=(
  "get secrets" "list secrets" "watch secrets" "update secrets" "patch secrets"
  "get configmaps" "list configmaps"
  "create pods/exec" "create pods/attach" "create pods/portforward" "create pods/eviction"
  "update pods" "deletecollection pods" "deletecollection services"
  "list poddisruptionbudgets.policy" "update poddisruptionbudgets.policy"
  "deletecollection poddisruptionbudgets.policy" "patch poddisruptionbudgets.policy/status"
  "delete nodes" "patch nodes" "update nodes"
  "create deployments.apps" "patch deployments.apps"
  "patch trainingjobs.kubeflow.org" "get trainingjobs.kubeflow.org"
  "get models.linea.io"
  "create trainingjobs.linea.io"
  "create events"
  "escalate clusterroles.rbac.authorization.k8s.io" "bind clusterroles.rbac.authorization.k8s.io"
  "create clusterrolebindings.rbac.authorization.k8s.io" "create roles.rbac.authorization.k8s.io"
  "impersonate serviceaccounts" "create serviceaccounts/token"
  "delete namespaces"
)

passed=0 failed=0
WORK="" STATE=""
finish() {
  local rc=$?
  if [ -n "$STATE" ]; then
    if [ "$rc" -ne 0 ] || [ "$failed" -gt 0 ]; then tail -n 20 "$STATE/kube-apiserver.log" 2>/dev/null || true; fi
    "$CP/stop.sh" "$STATE" >/dev/null 2>&1 || rm -rf "$STATE"
  fi
  [ -z "$WORK" ] || rm -rf "$WORK"
  # A setup step that died counts as a failure too.
  if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
  echo "chart: $passed/$((passed + failed)) checks passed"
  [ "$failed" -eq 0 ] || exit 1
}
trap finish EXIT

. "$HERE/checks.sh"

"$CP/build.sh" etcd kubernetes helm >/dev/null
WORK="$(mktemp -d "${TMPDIR:-/tmp}/linea-chart.XXXXXX")"
# helm keeps its cache and config in WORK, not in $HOME; kubectl its discovery cache.
export HELM_CACHE_HOME="$WORK/helm/cache" HELM_CONFIG_HOME="$WORK/helm/config" HELM_DATA_HOME="$WORK/helm/data"
export KUBECACHEDIR="$WORK/kube-cache"
helm() { "$HELM_BIN" "$@"; }
# The harness builds helm without the Kubernetes version stamp, so its default for
# rendering is v1.20 (below the chart's kubeVersion); render for the server we test on.
render() { helm template "$RELEASE" "$CHART" --namespace "$NS" --kube-version "$K8S_VERSION" "$@"; }

# --- helm alone: lint and schema --------------------------------------------------------------
OPTIONS=(--set networkPolicy.enabled=true --set metrics.service.enabled=true)
check "helm lint --strict (default values)" helm lint --strict --kube-version "$K8S_VERSION" "$CHART"
check "helm lint --strict (networkPolicy + metrics Service)" \
  helm lint --strict --kube-version "$K8S_VERSION" "$CHART" "${OPTIONS[@]}"
check "helm lint --strict (every value set: ci/full-values.yaml)" \
  helm lint --strict --kube-version "$K8S_VERSION" "$CHART" -f "$FULL_VALUES"

# refused <what> <where in the values> <helm args...>: helm must refuse the values with a
# schema error that names where.
refused() {
  local what="$1" where="$2" out; shift 2
  if out="$(render "$@" 2>&1)"; then
    fail "schema refuses $what" "helm accepted it"
  elif grep -q "values don't meet the specifications of the schema" <<<"$out" && grep -qF -- "$where" <<<"$out"; then
    pass "schema refuses $what: $(grep -F -- "$where" <<<"$out" | head -n 1 | sed 's/^[- ]*//')"
  else
    fail "schema refuses $what (at $where)" "$out"
  fi
}
refused "a negative replicaCount" "'/replicaCount'" --set replicaCount=-1
refused "four replicas (one leader, at most two standbys)" "'/replicaCount'" --set replicaCount=4
refused "a string replicaCount" "'/replicaCount'" --set replicaCount=one
refused "an unknown pullPolicy" "'/image/pullPolicy'" --set image.pullPolicy=Sometimes
refused "a metrics port above 65535" "'/metrics/port'" --set metrics.port=70000
refused "a privileged metrics port" "'/metrics/port'" --set metrics.port=80
refused "a non-boolean networkPolicy.enabled" "'/networkPolicy/enabled'" --set networkPolicy.enabled=maybe
refused "an unknown top-level value" "additional properties 'replicas'" --set replicas=1
refused "an unknown nested value" "additional properties 'port'" --set networkPolicy.port=1
refused "a malformed memory limit" "'/resources/limits/memory'" --set resources.limits.memory=lots
refused "a malformed default memory limit of job workers" "'/jobDefaults/resources/worker/limits/memory'" \
  --set jobDefaults.resources.worker.limits.memory=lots
refused "an unknown role in the job defaults" "additional properties 'workers'" \
  --set jobDefaults.resources.workers.limits.cpu=1
# The job defaults reach the operator as one JSON value, a user's change included.
job_defaults_rendered() {
  local value
  value="$(render --set jobDefaults.resources.worker.limits.memory=16Gi --set jobDefaults.resources.master.requests.cpu=1 \
    --show-only templates/deployment.yaml | grep -A1 -- '- name: LINEA_JOB_DEFAULT_RESOURCES$' | sed -n 's/^ *value: //p')" || return 1
  # A double-quoted YAML scalar (helm's quote) decodes as a JSON string.
  python3 -c 'import json, sys
d = json.loads(json.loads(sys.argv[1]))
assert d["worker"]["limits"]["memory"] == "16Gi" and d["worker"]["limits"]["cpu"] == "4", d
assert d["master"]["requests"]["cpu"] in (1, "1") and d["master"]["limits"]["memory"] == "4Gi", d' "$value" &&
    echo "note: $value"
}
check "jobDefaults.resources rendered into the operator's LINEA_JOB_DEFAULT_RESOURCES (with --set changes)" job_defaults_rendered
refused "the job-pod label on the operator pod" "'/podLabels'" \
  --set 'podLabels.app\.kubernetes\.io/managed-by=linea-operator'
refused "serviceAccount.create=false without a name" "'/serviceAccount/name'" --set serviceAccount.create=false
refused "extraEnv overriding the operator key" "'/operator/extraEnv/0'" \
  --set 'operator.extraEnv[0].name=LINEA_OPERATOR_KEY,operator.extraEnv[0].value=short'

# --- a real API server ------------------------------------------------------------------------
STATE="$WORK/control-plane"
"$CP/start.sh" "$STATE" >/dev/null
# shellcheck source=/dev/null
. "$STATE/env"
k() { "$KUBECTL" "$@"; }

# The release namespace enforces (and warns about) the restricted Pod Security Standard,
# so the operator's pod template must meet it; so does the demo namespace (MinIO).
for ns in "$NS" "$DEMO_NS"; do
  k create namespace "$ns" >/dev/null
  k label namespace "$ns" pod-security.kubernetes.io/enforce=restricted \
    pod-security.kubernetes.io/warn=restricted pod-security.kubernetes.io/audit=restricted >/dev/null
done
k create namespace "$OTHER_NS" >/dev/null

# dry_run <name> <expected objects, space-separated> <helm args...>: the rendered chart is
# accepted by the server, draws no warning, and holds exactly the expected objects.
dry_run() {
  local name="$1" want="$2" out got; shift 2
  if ! out="$(render "$@" 2>&1 | k apply --dry-run=server -f - 2>&1)"; then
    fail "$name" "$out"; return
  fi
  if grep -qi "warning" <<<"$out"; then fail "$name: no warnings" "$out"; return; fi
  got="$(sed -n 's/^\([^ ]*\) created (server dry run)$/\1/p' <<<"$out" | sort | tr '\n' ' ')"
  want="$(tr ' ' '\n' <<<"$want" | sed '/^$/d' | sort | tr '\n' ' ')"
  if [ "$got" = "$want" ]; then pass "$name: $(wc -w <<<"$got") objects, no warnings"; else
    fail "$name" "objects: $got"$'\n'"expected: $want"$'\n'"$out"; fi
}
BASE="serviceaccount/linea-operator secret/linea-operator-key clusterrole.rbac.authorization.k8s.io/linea-operator
  clusterrolebinding.rbac.authorization.k8s.io/linea-operator deployment.apps/linea-operator
  role.rbac.authorization.k8s.io/linea-operator rolebinding.rbac.authorization.k8s.io/linea-operator"
dry_run "helm template | kubectl apply --dry-run=server (default values)" "$BASE"
dry_run "helm template | kubectl apply --dry-run=server (2 replicas: a PodDisruptionBudget)" \
  "$BASE poddisruptionbudget.policy/linea-operator" --set replicaCount=2
dry_run "helm template | kubectl apply --dry-run=server (networkPolicy + metrics Service)" \
  "$BASE service/linea-operator-metrics networkpolicy.networking.k8s.io/linea-operator
   networkpolicy.networking.k8s.io/linea-jobs networkpolicy.networking.k8s.io/linea-job-metrics" "${OPTIONS[@]}"
# No key Secret (an existing one is named); ml-linea-jobs is in two namespaces.
dry_run "helm template | kubectl apply --dry-run=server (every value set)" \
  "serviceaccount/linea-controller clusterrole.rbac.authorization.k8s.io/ml-linea-operator
   clusterrolebinding.rbac.authorization.k8s.io/ml-linea-operator deployment.apps/ml-linea-operator
   role.rbac.authorization.k8s.io/ml-linea-operator rolebinding.rbac.authorization.k8s.io/ml-linea-operator
   poddisruptionbudget.policy/ml-linea-operator
   service/ml-linea-operator-metrics networkpolicy.networking.k8s.io/ml-linea-operator
   networkpolicy.networking.k8s.io/ml-linea-jobs networkpolicy.networking.k8s.io/ml-linea-jobs
   networkpolicy.networking.k8s.io/ml-linea-job-metrics networkpolicy.networking.k8s.io/ml-linea-job-metrics" \
  -f "$FULL_VALUES"

# The job masters' own /metrics (port 9090, the operator's MASTER_METRICS_PORT): one policy
# per job namespace that selects masters only and opens that port only, to metricsFrom (all
# sources when it is empty). Read back from the server (dry run), so it is what would be stored.
check_master_metrics_policy() {
  local out
  out="$(render "$@" --show-only templates/networkpolicy.yaml | k apply --dry-run=server -o json -f -)" || return 1
  python3 -c '
import json, sys
values, want_ns, want_from = sys.stdin.read(), sys.argv[1].split(","), json.loads(sys.argv[2])
decoder, items, at = json.JSONDecoder(), [], 0
while at < len(values.strip()):
    obj, end = decoder.raw_decode(values.strip(), at)
    items.extend(obj.get("items", [obj]) if obj.get("kind") == "List" else [obj])
    at = end
    while at < len(values.strip()) and values.strip()[at].isspace():
        at += 1
policies = [p for p in items if p["metadata"]["name"].endswith("-job-metrics")]
got_ns = sorted(p["metadata"]["namespace"] for p in policies)
if got_ns != sorted(want_ns):
    sys.exit(f"job-metrics policies in {got_ns}, want {want_ns}")
rule = {"ports": [{"port": 9090, "protocol": "TCP"}]}
if want_from:
    rule["from"] = want_from
for p in policies:
    spec = p["spec"]
    selector = spec["podSelector"]["matchLabels"]
    if selector != {"app.kubernetes.io/managed-by": "linea-operator", "linea.io/role": "master"}:
        sys.exit(f"selector {selector}")
    if spec["policyTypes"] != ["Ingress"] or spec["ingress"] != [rule]:
        sys.exit("%s: %s" % (p["metadata"]["namespace"], spec))
' "$NS_LIST" "$FROM" <<<"$out"
}
NS_LIST="$NS" FROM='[]' check "NetworkPolicy: job masters' metrics port 9090 open to any source (metricsFrom empty), masters only" \
  check_master_metrics_policy "${OPTIONS[@]}"
NS_LIST="linea-system,$OTHER_NS" \
  FROM='[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}},{"ipBlock":{"cidr":"10.0.0.0/8"}}]' \
  check "NetworkPolicy: job masters' metrics port 9090 open to metricsFrom only, in every job namespace" \
  check_master_metrics_policy -f "$FULL_VALUES"

# --- helm install for real ---------------------------------------------------------------------
if out="$(helm install "$RELEASE" "$CHART" --namespace "$NS" 2>&1)"; then
  pass "helm install $RELEASE (namespace $NS)"
else
  fail "helm install $RELEASE" "$out"; exit 1
fi
check "CRD trainingjobs.linea.io from charts/linea/crds is Established" \
  established trainingjobs.linea.io

# The ClusterRole as stored, one "group resource verb" line per permission, against
# GRANTED: nothing missing, nothing extra.
expected_rules() {
  local line group res verb verbs
  for line in "${GRANTED[@]}"; do
    read -r group res verbs <<<"$line"
    for verb in $verbs; do echo "$group $res $verb"; done
  done | sort
}
stored_rules() {
  # shellcheck disable=SC2016  # a Go template, not shell
  k get clusterrole "$SA" -o go-template='{{range .rules}}{{$r := .}}{{range .apiGroups}}{{$g := .}}{{range $r.resources}}{{$res := .}}{{range $r.verbs}}{{if eq $g ""}}core{{else}}{{$g}}{{end}} {{$res}} {{.}}{{"\n"}}{{end}}{{end}}{{end}}{{if .nonResourceURLs}}nonResourceURLs {{.nonResourceURLs}}{{"\n"}}{{end}}{{end}}' | sort
}
check_rules() {
  local want got
  want="$(expected_rules)"
  got="$(stored_rules)" || return 1
  [ "$want" = "$got" ] || { diff <(echo "$want") <(echo "$got") | sed 's/^</missing:/; s/^>/extra:  /' | grep -v '^[0-9]'; return 1; }
}
check "ClusterRole $SA holds exactly the $(expected_rules | wc -l) permissions of the operator" check_rules
# The Role as stored: "group resource[/name] verb" lines against LEASE_GRANTED.
check_lease_rules() {
  local want got line group res verb verbs
  want="$(for line in "${LEASE_GRANTED[@]}"; do
    read -r group res verbs <<<"$line"
    for verb in $verbs; do echo "$group $res $verb"; done
  done | sort)"
  # shellcheck disable=SC2016  # a Go template, not shell
  got="$(k -n "$NS" get role "$SA" -o go-template='{{range .rules}}{{$r := .}}{{range .apiGroups}}{{$g := .}}{{range $r.resources}}{{$res := .}}{{range $r.verbs}}{{$v := .}}{{if $r.resourceNames}}{{range $r.resourceNames}}{{$g}} {{$res}}/{{.}} {{$v}}{{"\n"}}{{end}}{{else}}{{$g}} {{$res}} {{$v}}{{"\n"}}{{end}}{{end}}{{end}}{{end}}{{end}}' | sort)" || return 1
  [ "$want" = "$got" ] || { diff <(echo "$want") <(echo "$got") | sed 's/^</missing:/; s/^>/extra:  /' | grep -v '^[0-9]'; return 1; }
}
check "Role $SA (namespace $NS) holds exactly the Lease permissions of leader election" check_lease_rules

# The Deployment as stored: the hardened pod spec and the operator's command line.
check_deployment() {
  local want got
  want="$(cat <<EOF
strategy=RollingUpdate replicas=1 serviceAccountName=$SA
runAsNonRoot=true runAsUser=65532 runAsGroup=65532 fsGroup=65532 seccomp=RuntimeDefault
image=ghcr.io/linea/linea:0.1.0 command=[linea-operator]
args=[--metrics-address 0.0.0.0:8080 --default-image ghcr.io/linea/linea:0.1.0 --lease-name linea-operator]
env POD_NAMESPACE=metadata.namespace
env POD_NAME=metadata.name
env RUST_LOG=info,kube=warn
env LINEA_OPERATOR_KEY=secret:linea-operator-key/operator-key
env LINEA_JOB_DEFAULT_RESOURCES={"master":{"limits":{"cpu":"2","memory":"4Gi"},"requests":{"cpu":"250m","memory":"512Mi"}},"worker":{"limits":{"cpu":"4","memory":"8Gi"},"requests":{"cpu":"500m","memory":"1Gi"}}}
port metrics=8080/TCP
liveness=/healthz@metrics readiness=/readyz@metrics
allowPrivilegeEscalation=false readOnlyRootFilesystem=true privileged=false drop=[ALL]
mount tmp=/tmp
volume tmp emptyDir=true
EOF
)"
  # shellcheck disable=SC2016  # a Go template, not shell
  got="$(k -n "$NS" get deployment "$SA" -o go-template='strategy={{.spec.strategy.type}} replicas={{.spec.replicas}} {{with .spec.template.spec}}serviceAccountName={{.serviceAccountName}}
{{with .securityContext}}runAsNonRoot={{.runAsNonRoot}} runAsUser={{.runAsUser}} runAsGroup={{.runAsGroup}} fsGroup={{.fsGroup}} seccomp={{.seccompProfile.type}}{{end}}
{{range .containers}}image={{.image}} command={{.command}}
args={{.args}}
{{range .env}}env {{.name}}={{with .valueFrom}}{{with .fieldRef}}{{.fieldPath}}{{end}}{{with .secretKeyRef}}secret:{{.name}}/{{.key}}{{end}}{{else}}{{.value}}{{end}}
{{end}}{{range .ports}}port {{.name}}={{.containerPort}}/{{.protocol}}
{{end}}liveness={{.livenessProbe.httpGet.path}}@{{.livenessProbe.httpGet.port}} readiness={{.readinessProbe.httpGet.path}}@{{.readinessProbe.httpGet.port}}
{{with .securityContext}}allowPrivilegeEscalation={{.allowPrivilegeEscalation}} readOnlyRootFilesystem={{.readOnlyRootFilesystem}} privileged={{.privileged}} drop={{.capabilities.drop}}{{end}}
{{range .volumeMounts}}mount {{.name}}={{.mountPath}}
{{end}}{{end}}{{range .volumes}}volume {{.name}} emptyDir={{if .emptyDir}}true{{else}}false{{end}}
{{end}}{{end}}')" || return 1
  [ "$want" = "$got" ] || { diff <(echo "$want") <(echo "$got"); return 1; }
}
check "Deployment $SA: non-root, read-only root, no capabilities, /tmp emptyDir, probes, args" check_deployment

# The operator key: generated on install, at least 16 bytes, unchanged by an upgrade (a new
# key would lock running jobs' workers out of their masters).
operator_key() { k -n "$NS" get secret "$SA-key" -o go-template='{{index .data "operator-key" | base64decode}}'; }
check_key_kept() {
  local before after out
  before="$(operator_key)" || return 1
  [ "${#before}" -ge 16 ] || { echo "key of ${#before} bytes"; return 1; }
  out="$(helm upgrade "$RELEASE" "$CHART" --namespace "$NS" --set operator.logLevel=debug 2>&1)" || { echo "$out"; return 1; }
  after="$(operator_key)" || return 1
  [ "$before" = "$after" ] || { echo "helm upgrade replaced the operator key"; return 1; }
  echo "note: ${#after}-byte key"
}
check "operator key Secret $SA-key generated on install and kept by helm upgrade" check_key_kept

# Two replicas: a budget that lets a drain evict one at a time, and the replicas preferring
# different nodes.
check_two_replicas() {
  local out got
  out="$(helm upgrade "$RELEASE" "$CHART" --namespace "$NS" --reuse-values --set replicaCount=2 2>&1)" || { echo "$out"; return 1; }
  got="$(k -n "$NS" get pdb "$SA" -o jsonpath='{.spec.maxUnavailable}/{.spec.selector.matchLabels.app\.kubernetes\.io/name}')" || return 1
  [ "$got" = 1/linea ] || { echo "budget: $got"; return 1; }
  got="$(k -n "$NS" get deployment "$SA" -o jsonpath='{.spec.replicas}/{.spec.template.spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.topologyKey}')"
  [ "$got" = 2/kubernetes.io/hostname ] || { echo "deployment: $got"; return 1; }
  out="$(helm upgrade "$RELEASE" "$CHART" --namespace "$NS" --reuse-values --set replicaCount=1 2>&1)" || { echo "$out"; return 1; }
  ! k -n "$NS" get pdb "$SA" >/dev/null 2>&1 || { echo "the budget stayed with one replica"; return 1; }
}
check "replicaCount=2: a PodDisruptionBudget (maxUnavailable 1) and spreading over nodes; gone again at 1" check_two_replicas

# --- the operator's permissions, asked as its ServiceAccount ------------------------------------
# can_i <want yes|no> <verb> <resource[.group][/subresource]> [--all-namespaces]
can_i() {
  local want="$1" verb="$2" res="$3" scope="${4:-}" args got base
  base="${res%%/*}"
  args=("$verb" "$base" "--as=$AS")
  [ "$res" = "$base" ] || args+=("--subresource=${res#*/}")
  if [ -n "$scope" ]; then
    args+=("$scope"); scope=" (all namespaces)"
  elif [[ "$CLUSTER_SCOPED" != *" ${base%%.*} "* ]]; then
    args+=(-n "$OTHER_NS")
  fi
  # stdout is the answer; stderr may warn about a resource type the server does not know.
  got="$(k auth can-i "${args[@]}" 2>/dev/null)" || true
  if [ "$got" = "$want" ]; then
    pass "can-i $verb $res$scope: $got"
  else
    fail "can-i $verb $res$scope: want $want" "got '$got' ($(k auth can-i "${args[@]}" 2>&1 || true))"
  fi
}
for line in "${GRANTED[@]}"; do
  read -r group res verbs <<<"$line"
  base="${res%%/*}" sub=""
  [ "$res" = "$base" ] || sub="/${res#*/}"
  [ "$group" = core ] || base="$base.$group"
  for verb in $verbs; do can_i yes "$verb" "$base$sub"; done
done
# The operator watches across namespaces.
for res in trainingjobs.linea.io pods services; do
  for verb in list watch; do can_i yes "$verb" "$res" --all-namespaces; done
done
for line in "${DENIED[@]}"; do
  read -r verb res <<<"$line"
  can_i no "$verb" "$res"
done
# The Lease: its own, in the release namespace, and nothing else of leases.
# can_i_lease <want yes|no> <verb> <leases[/name]> <namespace>
can_i_lease() {
  local got
  got="$(k auth can-i "$2" "${3/leases/leases.coordination.k8s.io}" -n "$4" "--as=$AS" 2>/dev/null)" || true
  if [ "$got" = "$1" ]; then pass "can-i $2 $3 -n $4: $got"; else fail "can-i $2 $3 -n $4: want $1" "got '$got'"; fi
}
can_i_lease yes create leases "$NS"
for verb in get patch; do can_i_lease yes "$verb" "leases/$SA" "$NS"; done
for verb in update delete; do can_i_lease no "$verb" "leases/$SA" "$NS"; done
for verb in get patch; do can_i_lease no "$verb" leases/kube-scheduler "$NS"; done
for verb in list watch deletecollection; do can_i_lease no "$verb" leases "$NS"; done
can_i_lease no create leases "$OTHER_NS"
can_i_lease no get "leases/$SA" "$OTHER_NS"
can_i_lease no patch leases/kube-controller-manager kube-system
can_i no '*' '*' --all-namespaces

# --- the kind demo's manifests (e2e/kind), on this server ---------------------------------------
check_demo() {
  local out
  out="$(k apply --dry-run=server -f "$HERE/kind/example-trainingjob.yaml" -f "$HERE/kind/minio.yaml" 2>&1)" || { echo "$out"; return 1; }
  if grep -qi "warning" <<<"$out"; then echo "$out"; return 1; fi
}
check "e2e/kind example TrainingJob and MinIO accepted (server dry-run, restricted PSS, no warnings)" check_demo
