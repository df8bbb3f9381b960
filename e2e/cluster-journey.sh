#!/usr/bin/env bash
# A user's first TrainingJob, on real pods: the one-node cluster of e2e/cluster.sh (real
# kubelet, containerd, runc, CNI bridge, kube-proxy, CoreDNS), the linea image assembled
# from this checkout's release binaries, the test S3 server (s3s-fs) on the node.
#
#   - `helm install` of charts/linea as it is: the operator runs as a Pod and is Ready;
#   - raw a9a uploaded to S3 (a signed PUT), then examples/local-cluster/s3.yaml (S3 Service
#     + credentials Secret) and examples/a9a-raw-trainingjob.yaml applied as they are;
#   - the job goes Preparing -> Running -> Succeeded: a prepare pod writes the grid in the
#     cluster (condition Prepared, GridPrepared); `kubectl get tj` is captured while it
#     trains and shows at least two different (epoch, objective) pairs; `kubectl logs` of
#     the prepare pod, the master and a worker are readable; the job's events tell the story;
#   - the model in S3 has the same bytes as `linea train --workers 2` on a grid prepared on
#     this machine from the same file;
#   - pods run as uid 65532 with a read-only root filesystem, as the runtime (containerd)
#     really started them, and job pods have no service-account token;
#   - a job whose S3 credentials are wrong fails at once with a condition naming the
#     store's refusal, and leaves no pod behind;
#   - an elastic cocoa job (hinge, epoch clock) on that grid with 8 workers filling the node:
#     the master scales in 8 -> 2 -> 1; exactly the 7 released pods go and are never replaced,
#     the kept one stays to the end; one ElasticScaleIn event per decision, Scaling back to
#     Stable, `kubectl get tj` shows DESIRED falling and the GAP; the model equals `linea
#     train` with the master pod's own arguments, bit for bit;
#   - a second job on the same raw input keeps the grid (Prepared, GridReused; no
#     GridPrepared event), and on it faults (FAULTS=1, the default): a worker pod deleted
#     mid-run (SIGTERM through the kubelet), a worker's container process SIGKILLed, the
#     master's container killed, and a termination-notice taint on the node -> the job
#     still succeeds with the same bytes.
#
# Prints `cluster journey: N passed, M failed` last; exits non-zero on any failure.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$HERE/../scripts/env.sh"
ROOT="$LINEA_ROOT"
. "$HERE/control-plane/versions.sh"
# LINEA_BIN_DIR: use those binaries (host and image) instead of this checkout's build.
if [ -n "${LINEA_BIN_DIR:-}" ]; then LINEA_BIN="$LINEA_BIN_DIR/linea"; else
  build_release
  export LINEA_BIN_DIR="$CARGO_TARGET_DIR/release"
fi
DATA="$ROOT/../shared/data/a9a/a9a.train.libsvm"
NS=linea-demo
JOB=a9a
S3_PORT=9000
# The credentials examples/local-cluster/s3.yaml puts in its Secret.
export AWS_ACCESS_KEY_ID=linea-demo AWS_SECRET_ACCESS_KEY=linea-demo-secret-key AWS_REGION=us-east-1

passed=0 failed=0
WORK="$(mktemp -d "${TMPDIR:-/tmp}/linea-journey.XXXXXX")"
export LINEA_CLUSTER_DIR="$WORK/cluster"
cluster_up=0
finish() {
  local rc=$?
  set +e
  if [ "$rc" -ne 0 ] || [ "$failed" -gt 0 ]; then
    for f in kubelet containerd coredns kube-proxy; do
      [ -f "$LINEA_CLUSTER_DIR/$f.log" ] && { echo "--- $f.log"; tail -n 15 "$LINEA_CLUSTER_DIR/$f.log"; }
    done
    if [ -n "${KUBECTL:-}" ]; then
      "$KUBECTL" get pods -A -o wide 2>/dev/null
      # Why a pod is not Ready: its events and the last lines its containers wrote.
      for p in $("$KUBECTL" -n linea-system get pods -o name 2>/dev/null); do
        echo "--- $p"
        "$KUBECTL" -n linea-system describe "$p" 2>/dev/null | sed -n '/^Events:/,$p' | tail -n 12
        "$KUBECTL" -n linea-system logs "$p" --all-containers --tail=80 2>&1
        "$KUBECTL" -n linea-system logs "$p" --all-containers --previous --tail=20 2>/dev/null
      done
      echo "--- the jobs' status"
      "$KUBECTL" get tj -A -o jsonpath='{range .items[*]}{.metadata.name}: {.status}{"\n"}{end}' 2>&1
      "$KUBECTL" get events -n "$NS" --sort-by=.lastTimestamp 2>&1 | tail -n 30
    fi
  fi
  [ "$cluster_up" = 1 ] && "$HERE/cluster.sh" down >/dev/null 2>&1
  "$ROOT/scripts/s3-server.sh" stop "$WORK/s3" >/dev/null 2>&1
  rm -rf "$WORK"
  if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
  echo "cluster journey: $passed passed, $failed failed"
  [ "$failed" -eq 0 ] || exit 1
}
trap finish EXIT
. "$HERE/checks.sh"

# --- the cluster ----------------------------------------------------------------------------
cluster_up=1
"$HERE/cluster.sh" up
. "$LINEA_CLUSTER_DIR/env"
k() { "$KUBECTL" "$@"; }
export KUBECACHEDIR="$WORK/kube-cache"
export HELM_CACHE_HOME="$WORK/helm/cache" HELM_CONFIG_HOME="$WORK/helm/config" HELM_DATA_HOME="$WORK/helm/data"
# until_ok <seconds> <command...>: polls until the command succeeds (state, not time).
until_ok() {
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || { "$@" 2>&1 | tail -n 5; return 1; }
    sleep 0.5 # poll interval
  done
}
jp() { k -n "$NS" get "$1" -o "jsonpath=$2" 2>/dev/null; }
check "the node is Ready: a real kubelet $K8S_VERSION on containerd" bash -c \
  "'$KUBECTL' get node '$LINEA_NODE_NAME' -o jsonpath='{.status.nodeInfo.kubeletVersion} {.status.nodeInfo.containerRuntimeVersion}' | grep -Eq '^$K8S_VERSION containerd://1\\.'"

# --- storage: s3s-fs on the node, raw a9a uploaded -----------------------------------------------
S3_HOST="$LINEA_NODE_IP" "$ROOT/scripts/s3-server.sh" start "$WORK/s3" "$S3_PORT" >/dev/null
mkdir -p "$WORK/s3/raw" "$WORK/s3/data" "$WORK/s3/models" # the buckets
RAW_KEY="$(sed -n 's#^    uri: s3://raw/\(.*\)$#\1#p' "$ROOT/examples/a9a-raw-trainingjob.yaml")"
# A real S3 PUT, signed with the credentials the server checks (SigV4, as any client).
upload() {
  curl -sSf --aws-sigv4 "aws:amz:$AWS_REGION:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
    -H "x-amz-content-sha256: $(sha256sum "$DATA" | cut -d' ' -f1)" \
    -T "$DATA" "http://$LINEA_NODE_IP:$S3_PORT/raw/$RAW_KEY"
}
uploaded() { upload && cmp "$DATA" "$WORK/s3/raw/$RAW_KEY"; }
check "raw a9a uploaded to s3://raw/$RAW_KEY (a signed PUT)" uploaded
# The reference: the same preparation and training on this machine, with the job's K and
# parameters, from the same file.
workers="$(sed -n 's/^    replicas: \([0-9]*\)$/\1/p' "$ROOT/examples/a9a-raw-trainingjob.yaml")"
epochs="$(sed -n 's/^      epochs: \([0-9]*\)$/\1/p' "$ROOT/examples/a9a-raw-trainingjob.yaml")"
l2="$(sed -n 's/^      l2: \([0-9.]*\)$/\1/p' "$ROOT/examples/a9a-raw-trainingjob.yaml")"
"$LINEA_BIN" --quiet prepare --input "$DATA" --format libsvm --output "$WORK/reference-grid" >/dev/null
# SCD named: the job's master runs SCD by default, `linea train` would choose its algorithm.
"$LINEA_BIN" --quiet train --data "$WORK/reference-grid" --model "$WORK/reference.model" --workers "$workers" \
  --algorithm scd --loss logistic --l2 "$l2" --epochs "$epochs" --tolerance 0 >/dev/null

# --- the operator, from the chart ----------------------------------------------------------------
k create namespace linea-system >/dev/null
k label namespace linea-system pod-security.kubernetes.io/enforce=restricted >/dev/null
check "helm install charts/linea (the locally assembled $LINEA_IMAGE)" \
  "$HELM" install linea "$ROOT/charts/linea" --namespace linea-system
check "the operator runs as a Pod and becomes Ready" \
  k -n linea-system rollout status deployment/linea-operator --timeout=180s
op_pod="$(k -n linea-system get pods -l app.kubernetes.io/component=operator -o jsonpath='{.items[0].metadata.name}')"
check "... on node $LINEA_NODE_NAME, image $LINEA_IMAGE, 0 restarts" bash -c \
  "[ \"\$('$KUBECTL' -n linea-system get pod '$op_pod' -o jsonpath='{.spec.nodeName} {.status.containerStatuses[0].image} {.status.containerStatuses[0].restartCount}')\" = '$LINEA_NODE_NAME $LINEA_IMAGE 0' ]"

# The runtime's view of a container: the OCI spec containerd gave runc.
# runtime_spec <namespace> <pod>: uid, read-only root, and the mount points, one per line,
# and the resources the pod's spec gave its container (read now: a finished job's workers
# are deleted before the checks read this).
runtime_spec() {
  local id spec
  id="$(k -n "$1" get pod "$2" -o jsonpath='{.status.containerStatuses[0].containerID}')"
  spec="$(ctr --address "$CONTAINERD_ADDRESS" -n k8s.io containers info "${id#containerd://}" |
    python3 -c 'import json,sys; s=json.load(sys.stdin)["Spec"]; print("uid", s["process"]["user"]["uid"]); print("gid", s["process"]["user"]["gid"]); print("readonly", s["root"].get("readonly", False)); print("args", " ".join(s["process"]["args"])); [print("mount", m["destination"]) for m in s["mounts"]]; r=s.get("linux", {}).get("resources", {}); print("cpu", r.get("cpu", {}).get("quota"), r.get("cpu", {}).get("period")); print("memory", r.get("memory", {}).get("limit"))')" || return 1
  printf '%s\n' "$spec"
  k -n "$1" get pod "$2" -o jsonpath='resources {.spec.containers[0].resources.limits.cpu}/{.spec.containers[0].resources.limits.memory}/{.spec.containers[0].resources.requests.cpu}{"\n"}'
}
runtime_spec linea-system "$op_pod" >"$WORK/operator.spec"
check "the operator container runs as 65532 with a read-only root filesystem (containerd's spec)" bash -c \
  "grep -qx 'uid 65532' '$WORK/operator.spec' && grep -qx 'readonly True' '$WORK/operator.spec'"
# In-cluster clients (the operator) reach the apiserver through the kubernetes Service; its
# endpoint must be the node, where the apiserver listens. That the operator really does is
# shown below by the objects and events it creates for the job.
check "the kubernetes Service's endpoint is the apiserver on the node ($LINEA_NODE_IP)" bash -c \
  "[ \"\$('$KUBECTL' -n default get endpointslices -l kubernetes.io/service-name=kubernetes -o jsonpath='{.items[0].endpoints[0].addresses[0]}')\" = '$LINEA_NODE_IP' ]"

# --- the user's job: raw data in, model out -------------------------------------------------------
k apply -f "$ROOT/examples/local-cluster/s3.yaml" >/dev/null
k apply -f "$ROOT/examples/a9a-raw-trainingjob.yaml" >/dev/null
# Watch it: phase, progress and `kubectl get tj` every poll, until it finishes (bounded).
: >"$WORK/get-tj"
phases="" deadline=$((SECONDS + 900)) master_log="" worker_log="" prepare_log=""
while :; do
  phase="$(jp "tj/$JOB" '{.status.phase}')"
  case " $phases " in *" $phase "*) ;; *) phases="$phases $phase" ;; esac
  [ -s "$WORK/prepare.spec" ] || runtime_spec "$NS" "$JOB-prepare" >"$WORK/prepare.spec" 2>/dev/null || true
  if [ "$phase" = Running ]; then
    progress="$(jp "tj/$JOB" '{.status.progress.epoch} {.status.progress.objective}')"
    # Only captures that report both an epoch and an objective count.
    if [[ "$progress" =~ ^[0-9]+\ [0-9] ]] && ! grep -qxF -- "$progress" "$WORK/progress" 2>/dev/null; then
      echo "$progress" >>"$WORK/progress"
      k -n "$NS" get tj "$JOB" >>"$WORK/get-tj"
    fi
    [ -n "$prepare_log" ] || prepare_log="$(k -n "$NS" logs "$JOB-prepare" 2>/dev/null | head -c 2000 || true)"
    [ -n "$master_log" ] || master_log="$(k -n "$NS" logs "$JOB-master" 2>/dev/null | head -c 2000 || true)"
    [ -n "$worker_log" ] || worker_log="$(k -n "$NS" logs "$JOB-worker-0" 2>/dev/null | head -c 2000 || true)"
    [ -s "$WORK/worker.spec" ] || runtime_spec "$NS" "$JOB-worker-0" >"$WORK/worker.spec" 2>/dev/null || true
    [ -s "$WORK/master.spec" ] || runtime_spec "$NS" "$JOB-master" >"$WORK/master.spec" 2>/dev/null || true
  fi
  case "$phase" in Succeeded | Failed) break ;; esac
  [ "$SECONDS" -lt "$deadline" ] || break
  sleep 1 # poll interval
done
check "the job went Preparing -> Running -> $phase (phases seen:$phases)" bash -c \
  "[ '$phase' = Succeeded ] && [[ '$phases' == *Preparing*Running* ]]"
rows="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["rows"])' "$WORK/reference-grid/manifest.json")"
prepared="$(jp "tj/$JOB" '{.status.conditions[?(@.type=="Prepared")].reason}: {.status.conditions[?(@.type=="Prepared")].message}')"
check "the grid was prepared in the cluster: Prepared=True ($prepared)" bash -c \
  "[ \"\$('$KUBECTL' -n '$NS' get tj '$JOB' -o jsonpath='{.status.conditions[?(@.type==\"Prepared\")].status}')\" = True ] && [[ '$prepared' == GridPrepared:*' $rows rows'* ]]"
check "... by a prepare pod that exited 0 with its summary as termination message" bash -c \
  "'$KUBECTL' -n '$NS' get pod '$JOB-prepare' -o jsonpath='{.status.phase} {.status.containerStatuses[0].state.terminated.message}' | grep -q '^Succeeded .*\"reused\":false'"
distinct() { [ "$(cut -d' ' -f1 "$WORK/progress" | sort -u | wc -l)" -ge 2 ] && [ "$(cut -d' ' -f2 "$WORK/progress" | sort -u | wc -l)" -ge 2 ]; }
check "kubectl get tj showed the epoch and objective moving ($(wc -l <"$WORK/progress" 2>/dev/null || echo 0) captures)" distinct
sed 's/^/       /' "$WORK/get-tj" | head -n 8
check "kubectl logs of the prepare pod is readable" test -n "$prepare_log"
check "kubectl logs of the master is readable" test -n "$master_log"
check "kubectl logs of a worker is readable" test -n "$worker_log"
printf '%s\n' "$prepare_log" | head -n 2 | sed 's/^/       prepare: /'
printf '%s\n' "$master_log" | head -n 3 | sed 's/^/       master: /'
printf '%s\n' "$worker_log" | head -n 3 | sed 's/^/       worker: /'
check "the model in S3 has the same bytes as linea prepare + linea train --workers $workers here" \
  cmp "$WORK/s3/models/a9a.model" "$WORK/reference.model"
events() { k -n "$NS" get events --field-selector "involvedObject.name=$1" -o jsonpath='{.items[*].reason}'; }
story="$(events "$JOB" | tr ' ' '\n' | sort -u | tr '\n' ' ')"
check "events tell the story ($story)" bash -c \
  "r='$story'; [[ \$r == *Preparing* ]] && [[ \$r == *GridPrepared* ]] && [[ \$r == *ResourcesCreated* ]] && [[ \$r == *Training* ]] && [[ \$r == *MaxEpochsReached* || \$r == *Converged* ]]"
for role in prepare master worker; do
  check "the $role container ran as 65532, read-only root, no service-account token (containerd's spec)" bash -c \
    "grep -qx 'uid 65532' '$WORK/$role.spec' && grep -qx 'readonly True' '$WORK/$role.spec' &&
     ! grep -q 'kubernetes.io/serviceaccount' '$WORK/$role.spec'"
done
# Default resources (the chart's jobDefaults.resources): the example names requests and a
# memory limit but no CPU limit; its pods ran with the chart's default CPU limit beside their
# own values, and the runtime enforced both (the CPU quota and memory limit runc was given).
defaults="$(k -n linea-system get deployment linea-operator -o jsonpath='{.spec.template.spec.containers[0].env[?(@.name=="LINEA_JOB_DEFAULT_RESOURCES")].value}')"
for role in prepare master worker; do
  default_cpu="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]]["limits"]["cpu"])' "$defaults" "$([ $role = worker ] && echo worker || echo master)")"
  check "the $role pod has the chart's default CPU limit ($default_cpu) and the job's own memory limit, enforced by runc" bash -c \
    "grep -qx 'resources $default_cpu/512Mi/100m' '$WORK/$role.spec' &&
     grep -qx \"cpu \$(($default_cpu * 100000)) 100000\" '$WORK/$role.spec' && grep -qx 'memory 536870912' '$WORK/$role.spec'"
done
# Mutual TLS in real pods: both ran with the job's Secret mounted and --tls-dir there (no
# way to ask for --insecure); the job's progress above came from the operator's TLS calls to
# the master, and the workers could only train through it with the job's certificates.
for role in master worker; do
  check "the $role container ran with --tls-dir on its mounted job Secret, not --insecure (containerd's spec)" bash -c \
    "grep -q '^args .* --tls-dir /var/run/linea/secret' '$WORK/$role.spec' && ! grep -q -- '--insecure' '$WORK/$role.spec' &&
     grep -qx 'mount /var/run/linea/secret' '$WORK/$role.spec'"
done
own_ca() { grep -q 'per-run CA' <<<"$master_log"; }
check "... and the master used the job's certificates, not a CA of its own" eval '! own_ca'

# --- wrong S3 credentials ------------------------------------------------------------------------
# The prepared-grid example (the grid is the one the job above wrote), with a Secret whose
# secret key is wrong and every pod cleaned when it ends.
DJ=a9a-denied
k -n "$NS" create secret generic s3-wrong-credentials --from-literal=AWS_ACCESS_KEY_ID="$AWS_ACCESS_KEY_ID" \
  --from-literal=AWS_SECRET_ACCESS_KEY=not-the-secret-key >/dev/null
sed -e "s/^  name: $JOB\$/  name: $DJ/" -e "s#s3://models/a9a.model#s3://models/$DJ.model#" \
  -e "s/credentialsSecretName: s3-credentials/credentialsSecretName: s3-wrong-credentials/" \
  -e "s/^    backoffLimit: 3\$/    backoffLimit: 3\n    cleanPodPolicy: All/" "$ROOT/examples/a9a-trainingjob.yaml" >"$WORK/denied.yaml"
k apply -f "$WORK/denied.yaml" >/dev/null
failed_job() { [ "$(jp "tj/$DJ" '{.status.phase}')" = Failed ]; }
check "a job with a wrong S3 secret key fails" until_ok 300 failed_job
why="$(jp "tj/$DJ" '{.status.conditions[?(@.type=="Failed")].reason}: {.status.conditions[?(@.type=="Failed")].message}')"
check "... at once (no restart), with a condition naming the store's refusal ($(printf '%s' "$why" | head -c 300))" bash -c \
  "[ \"\$('$KUBECTL' -n '$NS' get tj '$DJ' -o jsonpath='{.status.restarts}')\" = 0 ] &&
   printf '%s' \"\$1\" | grep -q '^DatasetError: ' && printf '%s' \"\$1\" | grep -Eq 'SignatureDoesNotMatch|InvalidAccessKeyId|AccessDenied|access denied'" _ "$why"
check "... and a warning event saying so" bash -c \
  "'$KUBECTL' -n '$NS' get events --field-selector involvedObject.name=$DJ,type=Warning -o jsonpath='{.items[*].reason}' | grep -q DatasetError"
no_pods() { [ -z "$(k -n "$NS" get pods -l "linea.io/job-name=$DJ" -o name 2>/dev/null)" ]; }
check "... and leaves no pod behind (cleanPodPolicy All)" until_ok 120 no_pods

# --- elastic CoCoA on real pods (issue 14) ----------------------------------------------------
# The grid the first job wrote, hinge-loss CoCoA with elastic scale-in on the epoch clock (so
# the decisions, and the model, are reproducible): 8 workers sharing the node's free CPU fill
# the 2-core node; the master waits for all 8, then scales in 8 -> 2 -> 1; exactly
# the 7 released workers' pods go and are never replaced, the kept one stays (same UID) until
# the job ends, one event per decision, and the model equals `linea train` with the master's
# own arguments on the reference grid.
EJ=a9a-elastic EW=8
t_elastic=$SECONDS
# free_cpu: the node's allocatable CPU less what its live pods request, in millicores.
free_cpu() {
  k get pods -A --field-selector=spec.nodeName="$LINEA_NODE_NAME",status.phase!=Succeeded,status.phase!=Failed -o json |
    python3 -c 'import json, sys
def milli(q):
    return int(q[:-1]) if q.endswith("m") else int(float(q) * 1000)
used = sum(milli(c.get("resources", {}).get("requests", {}).get("cpu", "0")) for p in json.load(sys.stdin)["items"] for c in p["spec"]["containers"])
print(milli(sys.argv[1]) - used)' "$(k get node "$LINEA_NODE_NAME" -o jsonpath='{.status.allocatable.cpu}')"
}
# Each worker requests an equal share of what the node has free beside the master's 100m, so
# the 8 fill it whatever else runs there (the operator, CoreDNS, pods of earlier jobs).
FREE_CPU="$(free_cpu)"
WCPU="$(( (FREE_CPU - 100) / EW ))"
cat >"$WORK/elastic.yaml" <<YAML
apiVersion: linea.io/v1alpha1
kind: TrainingJob
metadata:
  name: $EJ
  namespace: $NS
spec:
  datasetUri: s3://data/a9a/grid
  modelUri: s3://models/$EJ.model
  storage:
    endpoint: http://s3.$NS.svc:9000
    region: us-east-1
    forcePathStyle: true
    credentialsSecretName: s3-credentials
  algorithm:
    cocoa:
      loss: hinge
      l2: ${ELASTIC_L2:-1}
      gapTolerance: ${ELASTIC_GAP:-1e-5}
      maxEpochs: 100000
  elastic: {enabled: true, minReplicas: 1, factor: 4, clock: epochs}
  workers:
    replicas: $EW
    threads: 1
    resources:
      requests: {cpu: ${WCPU}m, memory: 128Mi}
      limits: {memory: 512Mi}
  master:
    resources:
      requests: {cpu: 100m, memory: 128Mi}
      limits: {memory: 512Mi}
  runPolicy:
    cleanPodPolicy: None
  imagePullPolicy: IfNotPresent
YAML
check "$EW workers at ${WCPU}m CPU each (and the master's 100m) fill the node's free ${FREE_CPU}m: at least 100m each, less than one more worker left" \
  test "$WCPU" -ge 100 -a "$(( FREE_CPU - 100 - EW * WCPU ))" -lt "$WCPU"
k apply -f "$WORK/elastic.yaml" >/dev/null
# worker_uids: "<name> <uid>" of the job's worker pods, one per line, sorted.
worker_uids() {
  k -n "$NS" get pods -l "linea.io/job-name=$EJ,linea.io/role=worker" \
    -o jsonpath='{range .items[*]}{.metadata.name} {.metadata.uid}{"\n"}{end}' | sort
}
# All the job's worker pods exist and are bound to the node (some may have run and ended by
# now: a scale-in can come before the last one starts).
all_on_node() {
  [ "$(k -n "$NS" get pods -l "linea.io/job-name=$EJ,linea.io/role=worker" \
    -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | grep -cx "$LINEA_NODE_NAME")" = "$EW" ]
}
check "an elastic cocoa job gets its $EW worker pods, all on the node" until_ok 120 all_on_node
worker_uids >"$WORK/elastic-start"
# Watch to the end: the worker pods at every poll (a pod whose UID changed was replaced),
# and `kubectl get tj` whenever it changes.
: >"$WORK/elastic-get-tj"; : >"$WORK/elastic-polls"
deadline=$((SECONDS + 600)) last_tj=""
while :; do
  phase="$(jp "tj/$EJ" '{.status.phase}')"
  worker_uids | tr '\n' ';' >>"$WORK/elastic-polls"; echo >>"$WORK/elastic-polls"
  tj="$(k -n "$NS" get tj "$EJ" --no-headers 2>/dev/null | awk '{print $4, $5, ($8 == "<none>")}')"
  if [ "$tj" != "$last_tj" ]; then last_tj="$tj"; k -n "$NS" get tj "$EJ" >>"$WORK/elastic-get-tj"; fi
  case "$phase" in Succeeded | Failed) break ;; esac
  [ "$SECONDS" -lt "$deadline" ] || break
  sleep 1 # poll interval
done
check "the elastic job Succeeded ($phase)" test "$phase" = Succeeded
released="$(jp "tj/$EJ" '{.status.elastic.released[*]}' | tr ' ' '\n' | sort)"
kept="$(cut -d' ' -f1 "$WORK/elastic-start" | grep -vxF -f <(printf '%s\n' "$released") || true)"
echo "       released: $(echo $released); kept: $(echo $kept)"
check "the master scaled in 8 -> 2 -> 1: two decisions in status.elastic.decisions" bash -c \
  "[ \"\$('$KUBECTL' -n '$NS' get tj '$EJ' -o jsonpath='{.status.elastic.decisions[*].from}/{.status.elastic.decisions[*].to}')\" = '8 2/2 1' ]"
check "... which released 7 of its worker pods and kept 1" test "$(wc -w <<<"$released")/$(wc -w <<<"$kept")" = 7/1
# Every poll saw only the pods of the start, each with its first UID: none was replaced.
never_replaced() {
  python3 - "$WORK/elastic-start" "$WORK/elastic-polls" <<'PY'
import sys
start = dict(l.split() for l in open(sys.argv[1]) if l.strip())
for n, poll in enumerate(open(sys.argv[2])):
    for entry in filter(None, poll.strip().split(";")):
        name, uid = entry.split()
        if start.get(name) != uid:
            sys.exit(f"poll {n}: {name} {uid} is not a pod of the start ({start.get(name)})")
PY
}
check "no worker pod was ever replaced or added ($(wc -l <"$WORK/elastic-polls") polls)" never_replaced
gone_after() { # the released pods are absent at the end and were absent before the job ended
  local last; last="$(grep -v '^$' "$WORK/elastic-polls" | tail -n 2 | head -n 1)"
  for name in $released; do
    [[ "$last" != *"$name "* ]] || { echo "$name still there before the end"; return 1; }
    [ -z "$(k -n "$NS" get pod "$name" -o name 2>/dev/null)" ] || { echo "$name exists"; return 1; }
  done
}
check "exactly the released pods went before the job ended, and did not come back" gone_after
stayed() { # the kept pod was at every poll, and at the end it is the same pod, exited 0, never restarted
  local name="$kept" uid
  uid="$(grep "^$name " "$WORK/elastic-start" | cut -d' ' -f2)"
  [ "$(grep -c "$name $uid;" "$WORK/elastic-polls")" = "$(wc -l <"$WORK/elastic-polls")" ] &&
    [ "$(jp "pod/$name" '{.metadata.uid} {.status.phase} {.status.containerStatuses[0].restartCount}')" = "$uid Succeeded 0" ]
}
check "the kept worker ($kept) stayed until the job ended: the same pod, exit 0, no restart" until_ok 60 stayed
scale_ins="$(k -n "$NS" get events --field-selector "involvedObject.name=$EJ,reason=ElasticScaleIn" \
  --sort-by=.eventTime -o jsonpath='{range .items[*]}{.message}{"\n"}{end}')"
printf '%s\n' "$scale_ins" | sed 's/^/       event: /'
check "one ElasticScaleIn event per decision: 8 -> 2, then 2 -> 1, each naming its released pods" bash -c \
  "[ \"\$(wc -l <<<\"\$1\")\" = 2 ] && [[ \"\$(sed -n 1p <<<\"\$1\")\" == *': 8 -> 2; released '* ]] &&
   [[ \"\$(sed -n 2p <<<\"\$1\")\" == *': 2 -> 1; released '* ]]" _ "$scale_ins"
scaling="$(jp "tj/$EJ" '{.status.conditions[?(@.type=="Scaling")].status} {.status.conditions[?(@.type=="Scaling")].reason}: {.status.conditions[?(@.type=="Scaling")].message}')"
check "Scaling went ElasticScaleIn -> Stable ($scaling), with a Stable event" bash -c \
  "[[ '$scaling' == 'False Stable: 1 workers ready after an elastic scale-in' ]] &&
   '$KUBECTL' -n '$NS' get events --field-selector involvedObject.name=$EJ,reason=Stable -o jsonpath='{.items[*].message}' | grep -q 'after an elastic scale-in'"
sed 's/^/       /' "$WORK/elastic-get-tj" | head -n 12
shows_scale_in() {
  python3 - "$WORK/elastic-get-tj" <<'PY'
import sys
# kubectl's table is fixed-width and leaves empty cells blank: cut each row at its header's
# column starts (splitting on blanks would shift the cells after an empty one).
rows, starts = [], []
for line in open(sys.argv[1]):
    line = line.rstrip("\n")
    if line.startswith("NAME"):
        names, starts, pos = line.split(), [], 0
        for n in names:
            pos = line.index(n, pos)
            starts.append(pos)
            pos += len(n)
        continue
    if starts:
        ends = starts[1:] + [None]
        rows.append({n: line[a:b].strip() for n, a, b in zip(names, starts, ends)})
ok = any(r.get("DESIRED") == "8" for r in rows)
ok = ok and any(r.get("DESIRED") not in (None, "", "8") and r.get("GAP", "") not in ("", "<none>") for r in rows)
sys.exit(0 if ok else "no capture with DESIRED 8 and one with DESIRED below 8 and a GAP")
PY
}
check "kubectl get tj showed the workers (DESIRED 8, then fewer) and the duality GAP" shows_scale_in
# The reference: `linea train` with the master pod's own arguments, on the reference grid.
k -n "$NS" get pod "$EJ-master" -o jsonpath='{.spec.containers[0].args}' >"$WORK/elastic-master-args.json"
mapfile -t master_args < <(python3 -c 'import json, sys; print("\n".join(json.load(open(sys.argv[1]))))' \
  "$WORK/elastic-master-args.json")
mapfile -t train_args < <(python3 "$HERE/train_args.py" --data "$WORK/reference-grid" \
  --model "$WORK/elastic-reference.model" -- "${master_args[@]}")
check "linea train runs with the master pod's own arguments (what it says is shown if not)" \
  "$LINEA_BIN" --quiet "${train_args[@]}" --threads 2
check "the elastic job's model equals linea train with the same settings, bit for bit" \
  cmp "$WORK/s3/models/$EJ.model" "$WORK/elastic-reference.model"
echo "       note: the elastic section took $((SECONDS - t_elastic)) s"

# --- a second job on the same raw input keeps the grid ------------------------------------------
FJ=a9a-faults
# The same job under another name, its pods held to a tenth of a core each so that it
# trains long enough for four faults in a row; same data and parameters, so the same model.
sed -e "s/^  name: $JOB\$/  name: $FJ/" -e "s#s3://models/a9a.model#s3://models/$FJ.model#" \
  -e "s/^      limits:\$/      limits:\n        cpu: ${FAULT_CPU:-100m}/" "$ROOT/examples/a9a-raw-trainingjob.yaml" >"$WORK/faults.yaml"
k apply -f "$WORK/faults.yaml" >/dev/null
prepared_fj() { [ "$(jp "tj/$FJ" '{.status.conditions[?(@.type=="Prepared")].status}')" = True ]; }
until_ok 300 prepared_fj || true
check "a second job on the same raw object keeps the grid: Prepared=True (GridReused)" bash -c \
  "[ \"\$('$KUBECTL' -n '$NS' get tj '$FJ' -o jsonpath='{.status.conditions[?(@.type==\"Prepared\")].reason}')\" = GridReused ]"
check "... its events say GridReused and never GridPrepared ($(events "$FJ" | tr ' ' '\n' | sort -u | tr '\n' ' '))" bash -c \
  "r=\"\$('$KUBECTL' -n '$NS' get events --field-selector involvedObject.name=$FJ -o jsonpath='{.items[*].reason}')\"; [[ \$r == *GridReused* ]] && [[ \$r != *GridPrepared* ]]"
check "... and its prepare pod wrote nothing (termination message reused:true)" bash -c \
  "'$KUBECTL' -n '$NS' get pod '$FJ-prepare' -o jsonpath='{.status.containerStatuses[0].state.terminated.message}' | grep -q '\"reused\":true'"

# --- faults on real pods (the second job) ----------------------------------------------------------
[ "${FAULTS:-1}" = 1 ] || exit 0

uid_of() { jp "pod/$1" '{.metadata.uid}'; }
running() { [ "$(jp "pod/$1" '{.status.phase}')" = Running ]; }
epoch() { jp "tj/$FJ" '{.status.progress.epoch}'; }
# past_epoch <n>: the job reports training beyond epoch n (progress polled by the operator).
past_epoch() { local e; e="$(epoch)"; [ -n "$e" ] && [ "$e" -gt "$1" ]; }
not_finished() { case "$(jp "tj/$FJ" '{.status.phase}')" in Succeeded | Failed) return 1 ;; esac; }
# replaced_and_running <pod> <old uid>: a new pod of that name runs.
replaced_and_running() { local u; u="$(uid_of "$1")"; [ -n "$u" ] && [ "$u" != "$2" ] && running "$1"; }
# container_pid <pod>: the host pid of the pod's container, from containerd.
container_pid() {
  local id
  id="$(jp "pod/$1" '{.status.containerStatuses[0].containerID}')"
  ctr --address "$CONTAINERD_ADDRESS" -n k8s.io tasks ls | awk -v id="${id#containerd://}" '$1 == id {print $2}'
}
until_ok 300 past_epoch 1 || true

old="$(uid_of "$FJ-worker-1")" e0="$(epoch)"
k -n "$NS" delete pod "$FJ-worker-1" --wait=false >/dev/null
check "kubectl delete pod $FJ-worker-1 mid-run (epoch $e0): a new worker runs" until_ok 180 replaced_and_running "$FJ-worker-1" "$old"

old="$(uid_of "$FJ-worker-0")" pid="$(container_pid "$FJ-worker-0")"
check "SIGKILL of worker-0's container process (host pid $pid): a new worker runs" bash -c \
  "[ -n '$pid' ] && kill -KILL '$pid'"
check "... replaced" until_ok 180 replaced_and_running "$FJ-worker-0" "$old"

# SIGTERM of the master (what a pod deletion, a drain or a node shutdown sends): it stops
# cleanly with its last iteration checkpointed and exits 143; the operator starts a new one
# at once without counting a failure, and the waiting workers train on with it.
restarts0="$(jp "tj/$FJ" '{.status.restarts}')"
old="$(uid_of "$FJ-master")" pid="$(container_pid "$FJ-master")" e1="$(epoch)"
check "SIGTERM of the master's container process (host pid $pid, epoch $e1)" bash -c "[ -n '$pid' ] && kill -TERM '$pid'"
master_back() { until_ok 240 replaced_and_running "$FJ-master" "$old" && until_ok 240 past_epoch "$e1"; }
check "... a new master runs and training goes on past epoch $e1" master_back
stopped_event() {
  k -n "$NS" get events --field-selector "involvedObject.name=$FJ,reason=MasterRestarting" -o jsonpath='{.items[*].message}' |
    grep -o 'master stopped on SIGTERM ([^;]*exit code 143[^;]*; [^;]*checkpoint[^;]*' | head -n 1 | sed 's/^/note: /' | grep .
}
check "... the operator's event: the master stopped on SIGTERM (exit code 143) with its checkpoint" until_ok 60 stopped_event
check "... not counted as a restart (restarts $restarts0)" \
  test "$(jp "tj/$FJ" '{.status.restarts}')" = "${restarts0:-0}"

restarts0="$(jp "tj/$FJ" '{.status.restarts}')"
old="$(uid_of "$FJ-master")" pid="$(container_pid "$FJ-master")" e1="$(epoch)"
check "SIGKILL of the master's container process (host pid $pid, epoch $e1)" bash -c "[ -n '$pid' ] && kill -KILL '$pid'"
check "... a new master runs and training goes on past epoch $e1" master_back
check "... counted as a restart ($restarts0 -> $(jp "tj/$FJ" '{.status.restarts}'))" bash -c \
  "[ \"\$('$KUBECTL' -n '$NS' get tj '$FJ' -o jsonpath='{.status.restarts}')\" -gt '${restarts0:-0}' ]"

old="$(uid_of "$FJ-worker-0")"
k taint node "$LINEA_NODE_NAME" aws-node-termination-handler/spot-itn=true:NoSchedule >/dev/null
draining() { [ "$(jp "tj/$FJ" '{.status.conditions[?(@.type=="Draining")].reason}')" = NodeTerminating ]; }
check "a termination-notice taint on the node: the job reports Draining (NodeTerminating)" until_ok 120 draining
worker_left() { [ "$(uid_of "$FJ-worker-0")" != "$old" ]; }
check "... the worker there is drained and goes" until_ok 180 worker_left
k taint node "$LINEA_NODE_NAME" aws-node-termination-handler/spot-itn- >/dev/null
check "taint removed: a replacement worker runs" until_ok 180 running "$FJ-worker-0"

done_ok() { [ "$(jp "tj/$FJ" '{.status.phase}')" = Succeeded ]; }
check "after the faults the job Succeeded" until_ok 900 done_ok
check "... with the same model bytes as linea train --workers $workers here" \
  cmp "$WORK/s3/models/$FJ.model" "$WORK/reference.model"
# The operator's rules: a failed master counts against backoffLimit; a master stopped by
# SIGTERM, replaced workers and a drain do not.
check "... restarts exactly 1 (the master's SIGKILL; its SIGTERM, worker faults and the drain not counted)" \
  test "$(jp "tj/$FJ" '{.status.restarts}')" = 1
