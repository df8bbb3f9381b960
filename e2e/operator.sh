#!/usr/bin/env bash
# The operator against a real kube-apiserver + etcd (e2e/control-plane). There is no
# kubelet here, so pods never run by themselves: the test plays the kubelet by writing pod
# status (phase Running / Failed / Succeeded) and checks what the operator does about it.
#
# The chart is installed and the operator runs with its ServiceAccount's token, so the
# chart's least-privilege RBAC is proven sufficient, not only checked with can-i.
#
# Two controllers of kube-controller-manager run beside the API server, nothing else: the
# disruption controller (it computes what a PodDisruptionBudget allows, which the Eviction
# API enforces) and the resource-quota controller (a ResourceQuota admits nothing until it
# has counted the namespace).
#
# Checks: a TrainingJob gets exactly its master Pod, Service, PodDisruptionBudget, auth Secret
# and worker Pods, all owned by it; the Eviction API refuses to evict the running master
# (its budget) and evicts a worker, which is replaced without counting; conditions and `kubectl get tj` follow the pods; `kubectl scale tj` adds
# and removes workers under a Scaling condition; a failed worker is replaced; a failing
# master is retried up to backoffLimit, then the job is Failed with BackoffLimitExceeded;
# preemption does not count; events are recorded; deleting a job removes everything
# (finalizer); TTL deletes a finished job; progress comes from a real `linea master`'s
# status RPC; a worker on a node with a termination notice is drained through that master
# and exits 0; /metrics has reconciles and the jobs' progress. Then what a platform team
# needs: admission refuses huge replica counts, bad names and unimplemented algorithms;
# `kubectl explain` shows defaults; a foreign Service or PodDisruptionBudget with a job's
# name is left untouched and named in the job's condition and an event; a Secret with the
# old fixed name `<job>-auth` is neither used nor touched (the job's Secret has a generated
# name); a ResourceQuota smaller than a job blocks it with the server's message until the
# quota is raised; a crash-looping worker backs off with events and counts; an unschedulable
# master shows in the conditions at once; `image` is immutable; a one-epoch run of a real
# master ends with epoch 1 from its termination message; a real master's exit 2 fails the
# job as DatasetError; SIGTERM stops the operator while it creates a 1000-worker job.
# Last, a cocoa job: its pods' arguments, run to Succeeded by real master and worker processes,
# its duality gap polled, then final in status.progress and the GAP column of `kubectl get tj`.
# Then an elastic cocoa job (issue 14): SCD with elastic refused; 8 real worker processes
# named like its pods, the master scales in 8 -> 2 -> 1, exactly the released pods are deleted
# once they exited (the others stay), status.elastic / workers.desired / Scaling follow, one
# ElasticScaleIn event per decision of the master (and none repeated by an operator restarted
# mid-run), and the model equals `linea train` with the same settings.
# Then a hybrid job (allreduce: tree) and an IPM job (issue 15), 2 real workers each: every
# field of their block in the master's args, Converged / MaxEpochsReached (IPM's epoch
# budget), the objective and the gradient certificate as the gap in status.progress and
# `kubectl get tj`, an event, and
# the model equal to `linea train --workers 2`. The processes of all these jobs are started
# by e2e/hand-run.sh from their pods' arguments and environment.
# The cocoa master pod has its metrics port (9090, `metrics`) and scrape annotations, and its
# hand-run master's /metrics agrees with `linea status`. Last, no secret anywhere: every
# pod, Event, TrainingJob, operator log and command line, and every hand-run process's log
# is searched for every job token, the operator key, the S3 keys and any private key.
# Throughout, two operator replicas run (e2e/operator-leader.sh): only the Lease holder
# reconciles; kill -9 of it while a job trains hands the job to the standby within the lease
# duration with the same pods; the new leader drains a worker within a second of its node's
# termination taint (measured from the taint to the drain call); SIGTERM gives the Lease up
# and the next replica leads at once.
# Prints `operator e2e: N passed, M failed` last; exits non-zero on failure.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$HERE/../scripts/env.sh"
CP="$HERE/control-plane"
. "$CP/versions.sh"

passed=0 failed=0
STATE="" OPERATOR_PID="" STANDBY_PID="" MASTER_PID="" WORKER_PID="" OTHER_WORKER_PID="" RUN_PIDS=""
finish() {
  local rc=$?
  for pid in "$OPERATOR_PID" "$STANDBY_PID" "$MASTER_PID" "$WORKER_PID" "$OTHER_WORKER_PID" $RUN_PIDS; do [ -n "$pid" ] && kill "$pid" 2>/dev/null; done || true
  if [ -n "$STATE" ]; then
    if [ "$rc" -ne 0 ] || [ "$failed" -gt 0 ]; then tail -n 30 "$STATE"/operator*.log 2>/dev/null || true; fi
    "$CP/stop.sh" "$STATE" >/dev/null 2>&1 || rm -rf "$STATE"
  fi
  if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
  echo "operator e2e: $passed passed, $failed failed"
  [ "$failed" -eq 0 ] || exit 1
}
trap finish EXIT

. "$HERE/checks.sh"
. "$HERE/operator-leader.sh"
. "$HERE/hand-run.sh"

build_release
"$CP/build.sh" etcd kubernetes kube-controller-manager >/dev/null
STATE="$(mktemp -d "${TMPDIR:-/tmp}/linea-operator.XXXXXX")"
rmdir "$STATE"
"$CP/start.sh" "$STATE" >/dev/null
. "$STATE/env"
export KUBECACHEDIR="$STATE/kube-cache"
k() { "$KUBECTL" "$@"; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# The disruption and resource-quota controllers only (as start.sh starts the controller
# manager, with --controllers): no garbage collector, no node lifecycle, so what this test
# sees deleted the operator deleted. Its pid file is where stop.sh finds it.
kcm_port="$(free_port)"
mkdir -p "$STATE/kcm-pki"
setsid "$KCM_BIN" --kubeconfig="$KUBECONFIG" --authentication-kubeconfig="$KUBECONFIG" \
  --authorization-kubeconfig="$KUBECONFIG" --authentication-skip-lookup=true --bind-address=127.0.0.1 \
  --secure-port="$kcm_port" --cert-dir="$STATE/kcm-pki" --leader-elect=false --profiling=false \
  --controllers=disruption,resourcequota </dev/null >"$STATE/kube-controller-manager.log" 2>&1 &
echo $! >"$STATE/kube-controller-manager.pid"
kcm_healthy() { curl -fsS --max-time 2 -k "https://127.0.0.1:$kcm_port/healthz"; }

export HELM_CACHE_HOME="$STATE/helm/cache" HELM_CONFIG_HOME="$STATE/helm/config" HELM_DATA_HOME="$STATE/helm/data"
k create namespace linea-system >/dev/null
"$HELM" install linea "$LINEA_ROOT/charts/linea" --namespace linea-system >/dev/null
established trainingjobs.linea.io
# No controller-manager runs here to create namespaces' default ServiceAccount.
k create namespace ml >/dev/null
k -n ml create serviceaccount default >/dev/null

# The operator runs as the chart's ServiceAccount, with exactly the chart's RBAC: a token
# of that account, in a kubeconfig of its own.
cp "$KUBECONFIG" "$STATE/operator.kubeconfig"
token="$(k -n linea-system create token linea-operator --duration=2h)"
KUBECONFIG="$STATE/operator.kubeconfig" k config set-credentials linea-operator --token="$token" >/dev/null
KUBECONFIG="$STATE/operator.kubeconfig" k config set-context --current --user=linea-operator >/dev/null
check "the operator's kubeconfig is the chart's ServiceAccount" bash -c \
  "KUBECONFIG='$STATE/operator.kubeconfig' '$KUBECTL' auth whoami -o jsonpath='{.status.userInfo.username}' | grep -qx system:serviceaccount:linea-system:linea-operator"

# The job pods' default resources, as the chart's Deployment passes them (jobDefaults.resources).
JOB_DEFAULTS="$(k -n linea-system get deployment linea-operator -o jsonpath='{.spec.template.spec.containers[0].env[?(@.name=="LINEA_JOB_DEFAULT_RESOURCES")].value}')"
check "the chart passes the job pods' default resources to the operator ($JOB_DEFAULTS)" \
  python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert all(d[r][k][q] for r in ("master","worker") for k in ("requests","limits") for q in ("cpu","memory"))' "$JOB_DEFAULTS"
# A malformed default is the operator's start-up error, naming the value, before it does anything.
bad_default_refused() {
  local out
  if out="$(LINEA_OPERATOR_KEY=e2e-operator-key-0123456789 LINEA_JOB_DEFAULT_RESOURCES='{"worker":{"limits":{"memory":"2GB"}}}' \
    KUBECONFIG=/nonexistent timeout 20 "$CARGO_TARGET_DIR/release/linea-operator" --default-image linea:e2e 2>&1)"; then
    echo "started: $out"; return 1
  fi
  grep -qF 'worker.limits.memory: "2GB" is not a Kubernetes quantity' <<<"$out" && echo "note: $out" || { echo "$out"; false; }
}
check "a malformed default quantity stops the operator at start-up with the value named" bad_default_refused

metrics_port="$(free_port)"
start_operator operator-a "$STATE/operator.log" "$metrics_port"
OPERATOR_PID="$STARTED_PID"

# until <seconds> <command...>: polls the API until the command succeeds (state, not time).
until_ok() {
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || { "$@" 2>&1 | tail -n 5; return 1; }
    sleep 0.2 # poll interval
  done
}
check "kube-controller-manager (disruption and resource-quota controllers) is up" until_ok 60 kcm_healthy
leader_and_standby
jp() { k -n ml get "$1" -o "jsonpath=$2" 2>/dev/null; }
equals() { [ "$(jp "$1" "$2")" = "$3" ]; }
# set_pod_phase <pod> <phase> [reason]: what a kubelet would report.
set_pod_phase() {
  local status="{\"phase\":\"$2\",\"conditions\":[{\"type\":\"Ready\",\"status\":\"$([ "$2" = Running ] && echo True || echo False)\"}]"
  [ -n "${3:-}" ] && status="$status,\"reason\":\"$3\""
  [ "${3:-}" = Preempted ] && status="{\"phase\":\"$2\",\"conditions\":[{\"type\":\"DisruptionTarget\",\"status\":\"True\",\"reason\":\"PreemptionByScheduler\"}]"
  k -n ml patch pod "$1" --subresource=status --type=merge -p "{\"status\":$status}}" >/dev/null
}

cat >"$STATE/ads.yaml" <<'EOF'
apiVersion: linea.io/v1alpha1
kind: TrainingJob
metadata: {name: ads, namespace: ml}
spec:
  datasetUri: s3://data/ads/grid
  modelUri: s3://models/ads.model
  algorithm: {scd: {l2: 1}}
  workers: {replicas: 2, preemptible: true}
  runPolicy: {backoffLimit: 1}
EOF
k apply -f "$STATE/ads.yaml" >/dev/null

objects() { k -n ml get pods,services,poddisruptionbudgets -l linea.io/job-name=ads -o name | sort | tr '\n' ' '; }
exactly_the_job_objects() {
  [ "$(objects)" = "pod/ads-master pod/ads-worker-0 pod/ads-worker-1 poddisruptionbudget.policy/ads-master service/ads-master " ] || { objects; false; }
}
check "a TrainingJob gets exactly its master pod, service, disruption budget and workers" until_ok 60 exactly_the_job_objects
secret="$(jp tj/ads '{.status.authSecretName}')"
check "its auth Secret has a generated name, recorded with its UID in the status, and the pods mount it" bash -c "
  [[ '$secret' =~ ^ads-auth-[a-z0-9]{5}\$ ]] || { echo 'secret: $secret'; exit 1; }
  [ \"\$('$KUBECTL' -n ml get secret '$secret' -o jsonpath='{.metadata.uid}')\" = \"\$('$KUBECTL' -n ml get tj ads -o jsonpath='{.status.authSecretUid}')\" ] || exit 1
  for p in ads-master ads-worker-0 ads-worker-1; do
    [ \"\$('$KUBECTL' -n ml get pod \$p -o jsonpath='{.spec.volumes[?(@.name==\"job-secret\")].secret.secretName}')\" = '$secret' ] || { echo \$p; exit 1; }
  done"
# job_tls <job> <master|client> <dir>: what the job's master or worker pods mount from its
# Secret (token, ca.crt and that role's pair), read with kubectl into a private folder for
# the processes this test starts by hand in the pods' place.
job_tls() {
  local secret key
  secret="$(jp "tj/$1" '{.status.authSecretName}')"
  [ -n "$secret" ] || { echo "tj/$1 has no auth Secret in its status" >&2; return 1; }
  (umask 077 && mkdir -p "$3")
  for key in token ca.crt "$2.crt" "$2.key"; do
    (umask 077 && k -n ml get secret "$secret" -o "jsonpath={.data.${key//./\\.}}" | base64 -d >"$3/$key")
    [ -s "$3/$key" ] || { echo "secret $secret has no $key" >&2; return 1; }
  done
}
secret_keys() { k -n ml get secret "$secret" -o go-template='{{range $k, $v := .data}}{{$k}} {{end}}'; }
check "the job's Secret holds the token and the TLS files (ca.crt, master.crt/key, client.crt/key)" \
  test "$(secret_keys)" = "ca.crt client.crt client.key master.crt master.key token "
job_tls ads master "$STATE/ads-master-tls"
job_tls ads client "$STATE/ads-client-tls"
master_sans() {
  local sans
  sans="$(openssl x509 -noout -ext subjectAltName -in "$STATE/ads-master-tls/master.crt" | tail -n +2 | tr -d ' ')"
  [ "$sans" = "DNS:ads-master,DNS:ads-master.ml,DNS:ads-master.ml.svc,DNS:ads-master.ml.svc.cluster.local" ] ||
    { echo "SANs: $sans"; false; }
}
check "the master certificate's names are the master Service's DNS names" master_sans
check "... and it and the member certificate are signed by the job CA" bash -c "
  openssl verify -CAfile '$STATE/ads-master-tls/ca.crt' '$STATE/ads-master-tls/master.crt' '$STATE/ads-client-tls/client.crt'"
pods_mount_their_tls() {
  local p items args want
  for p in ads-master ads-worker-0 ads-worker-1; do
    want="token ca.crt client.crt client.key"
    [ "$p" = ads-master ] && want="token ca.crt master.crt master.key"
    items="$(jp "pod/$p" '{.spec.volumes[?(@.name=="job-secret")].secret.items[*].key}')"
    [ "$items" = "$want" ] || { echo "$p mounts: $items"; return 1; }
    args="$(jp "pod/$p" '{.spec.containers[0].args}')"
    grep -q '"--tls-dir","/var/run/linea/secret"' <<<"$args" && ! grep -q -- '--insecure' <<<"$args" ||
      { echo "$p args: $args"; return 1; }
  done
}
check "the master mounts token, CA and its own pair, workers the member pair; all run with --tls-dir, none --insecure" \
  pods_mount_their_tls
check "every object is owned by the job (controller reference)" bash -c "
  for o in pod/ads-master pod/ads-worker-0 pod/ads-worker-1 service/ads-master poddisruptionbudget/ads-master secret/$secret; do
    [ \"\$('$KUBECTL' -n ml get \$o -o jsonpath='{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}/{.metadata.ownerReferences[0].controller}')\" = TrainingJob/ads/true ] || { echo \$o; exit 1; }
  done"
check "pods run non-root with a read-only root filesystem" \
  test "$(jp pod/ads-master '{.spec.securityContext.runAsNonRoot}/{.spec.containers[0].securityContext.readOnlyRootFilesystem}')" = "true/true"
check "the master trains the job's data, checkpointing next to the model" bash -c \
  "'$KUBECTL' -n ml get pod ads-master -o jsonpath='{.spec.containers[0].args}' | grep -q 's3://models/ads.model.checkpoint'"
check "the job is Pending with Created=True" until_ok 30 equals tj/ads '{.status.phase}/{.status.conditions[?(@.type=="Created")].status}' "Pending/True"

set_pod_phase ads-master Running
for w in 0 1; do set_pod_phase "ads-worker-$w" Running; done
check "a running master makes the job Running" until_ok 30 equals tj/ads '{.status.phase}/{.status.conditions[?(@.type=="Running")].status}' "Running/True"
check "kubectl get tj shows phase, algorithm and workers" bash -c \
  "'$KUBECTL' -n ml get tj ads --no-headers | grep -Eq '^ads +Running +scd +2 +2 '"

# The master's PodDisruptionBudget, as the disruption controller sees it: of the job's three
# running pods it covers exactly one, the master, and allows no disruption of it.
budget_settled() {
  equals pdb/ads-master '{.spec.minAvailable}/{.spec.selector.matchLabels}' \
    '1/{"linea.io/job-name":"ads","linea.io/role":"master"}' &&
    [ "$(jp pdb/ads-master '{.status.observedGeneration}')" = "$(jp pdb/ads-master '{.metadata.generation}')" ] &&
    equals pdb/ads-master '{.status.expectedPods}/{.status.currentHealthy}/{.status.disruptionsAllowed}' 1/1/0 ||
    { echo "budget: $(jp pdb/ads-master '{.spec}') $(jp pdb/ads-master '{.status}')"; false; }
}
check "the master's PodDisruptionBudget covers the master alone and allows no disruption" until_ok 60 budget_settled
# evict <pod>: what `kubectl drain` does for each pod (the Eviction API); prints the answer.
evict() {
  printf '{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"%s","namespace":"ml"}}' "$1" |
    k create --raw "/api/v1/namespaces/ml/pods/$1/eviction" -f - 2>&1
}
master_uid="$(jp pod/ads-master '{.metadata.uid}')"
eviction_refused() {
  local out
  if out="$(evict ads-master)"; then echo "evicted: $out"; return 1; fi
  grep -q 'TooManyRequests' <<<"$out" && grep -q 'disruption budget' <<<"$out" || { echo "$out"; return 1; }
  echo "note: $out"
}
check "a drain's eviction of the running master is refused (429, its disruption budget)" eviction_refused
check "... and the master is still the same pod" equals pod/ads-master '{.metadata.uid}' "$master_uid"
worker_uid="$(jp pod/ads-worker-0 '{.metadata.uid}')"
check "a worker's eviction is allowed" evict ads-worker-0
replaced_uncounted() {
  local uid
  uid="$(jp pod/ads-worker-0 '{.metadata.uid}')"
  [ -n "$uid" ] && [ "$uid" != "$worker_uid" ] && equals tj/ads '{.status.workers.failed}' 0
}
check "... the evicted worker is replaced, not counted as a failure" until_ok 30 replaced_uncounted
set_pod_phase ads-worker-0 Running

# `kubectl scale` goes through the scale subresource to spec.workers.replicas.
scaling_is() {
  equals tj/ads '{.status.conditions[?(@.type=="Scaling")].status}/{.status.conditions[?(@.type=="Scaling")].reason}' "$1"
}
third_worker_requested() { scaling_is True/ReplicasChanged && equals pod/ads-worker-2 '{.metadata.name}' ads-worker-2; }
three_ready() { scaling_is False/Stable && equals tj/ads '{.status.workers.ready}' 3; }
back_to_two() { ! k -n ml get pod ads-worker-2 && scaling_is False/Stable && equals tj/ads '{.status.workers.desired}' 2; }
k -n ml scale tj ads --replicas 3 >/dev/null
check "kubectl scale tj: Scaling=True (ReplicasChanged) and a third worker" until_ok 30 third_worker_requested
set_pod_phase ads-worker-2 Running
check "... Scaling=False (Stable) once 3 workers are ready" until_ok 30 three_ready
k -n ml scale tj ads --replicas 2 >/dev/null
check "scaling back to 2 removes the third worker and settles" until_ok 30 back_to_two

old_uid="$(jp pod/ads-worker-1 '{.metadata.uid}')"
set_pod_phase ads-worker-1 Failed Preempted
check "a preempted worker is replaced" until_ok 30 bash -c \
  "[ -n \"\$('$KUBECTL' -n ml get pod ads-worker-1 -o jsonpath='{.metadata.uid}')\" ] && [ \"\$('$KUBECTL' -n ml get pod ads-worker-1 -o jsonpath='{.metadata.uid}')\" != '$old_uid' ]"

old_uid="$(jp pod/ads-master '{.metadata.uid}')"
set_pod_phase ads-master Failed Preempted
check "a preempted master is replaced without counting against backoffLimit" until_ok 30 bash -c \
  "uid=\$('$KUBECTL' -n ml get pod ads-master -o jsonpath='{.metadata.uid}'); [ -n \"\$uid\" ] && [ \"\$uid\" != '$old_uid' ] && [ \"\$('$KUBECTL' -n ml get tj ads -o jsonpath='{.status.restarts}')\" = 0 ]"

old_uid="$(jp pod/ads-master '{.metadata.uid}')"
set_pod_phase ads-master Failed Error
check "a failed master is retried (restarts 1, phase Restarting, new pod)" until_ok 30 bash -c \
  "uid=\$('$KUBECTL' -n ml get pod ads-master -o jsonpath='{.metadata.uid}'); [ \"\$('$KUBECTL' -n ml get tj ads -o jsonpath='{.status.restarts}')\" = 1 ] && [ -n \"\$uid\" ] && [ \"\$uid\" != '$old_uid' ]"
set_pod_phase ads-master Failed Error
check "past backoffLimit the job is Failed with BackoffLimitExceeded" until_ok 30 equals tj/ads \
  '{.status.phase}/{.status.conditions[?(@.type=="Failed")].reason}' "Failed/BackoffLimitExceeded"
check "a failed job's running pods are cleaned up" until_ok 30 bash -c \
  "[ -z \"\$('$KUBECTL' -n ml get pods -l linea.io/role=worker -o name)\" ]"
check "events record the transitions" until_ok 30 bash -c \
  "'$KUBECTL' -n ml get events --field-selector involvedObject.name=ads -o jsonpath='{.items[*].reason}' | tr ' ' '\n' | sort -u | grep -c -E '^(ResourcesCreated|Training|MasterRestarting|BackoffLimitExceeded)$' | grep -qx 4"

k -n ml delete tj ads --wait=false >/dev/null
check "deleting a job removes its pods, service, disruption budget and secret, then the job" until_ok 60 bash -c \
  "[ -z \"\$('$KUBECTL' -n ml get pods,services,poddisruptionbudgets,secrets -l linea.io/job-name=ads -o name)\" ] && ! '$KUBECTL' -n ml get tj ads"

sed -e 's/name: ads,/name: quick,/' -e 's/backoffLimit: 1}/backoffLimit: 1, ttlSecondsAfterFinished: 0}/' "$STATE/ads.yaml" | k apply -f - >/dev/null
until_ok 60 equals pod/quick-master '{.metadata.name}' quick-master
set_pod_phase quick-master Running
until_ok 30 equals tj/quick '{.status.phase}' Running
set_pod_phase quick-master Succeeded
check "a succeeded job with ttlSecondsAfterFinished 0 is deleted with its objects" until_ok 60 bash -c \
  "! '$KUBECTL' -n ml get tj quick && [ -z \"\$('$KUBECTL' -n ml get pods,services -l linea.io/job-name=quick -o name)\" ]"

# Progress from a real master: `linea master` and a worker run here on loopback with what
# their pods mount from the job's Secret (its token is the HMAC of the job's uid under the
# operator key, as the operator computes it; TLS files made from the same key), and the
# master pod reports 127.0.0.1 as its IP. The operator calls it over TLS, expecting the
# Service's name; the processes reach 127.0.0.1, so they name the master with --master-name.
# It trains CoCoA (hinge, gap tolerance 0), which runs until it is stopped: SCD with
# tolerance 0 ends once its objective stops changing (94 epochs, 4 s on a9a), and the leader
# failover and the drain below need a job that goes on.
"$LINEA_BIN" --quiet prepare --input "$LINEA_ROOT/../shared/data/a9a/a9a.train.libsvm" --format libsvm \
  --output "$STATE/grid" --rows-per-shard 4096 >/dev/null
sed -e 's/name: ads,/name: poll,/' "$STATE/ads.yaml" | k apply -f - >/dev/null
until_ok 60 equals pod/poll-master '{.metadata.name}' poll-master
uid="$(jp tj/poll '{.metadata.uid}')"
token="$(python3 -c 'import hmac,hashlib,sys; print(hmac.new(sys.argv[1].encode(), sys.argv[2].encode(), hashlib.sha256).hexdigest())' e2e-operator-key-0123456789 "$uid")"
job_tls poll master "$STATE/poll-master-tls"
job_tls poll client "$STATE/poll-client-tls"
check "the job's Secret token is the operator's HMAC of the job's uid" test "$(cat "$STATE/poll-master-tls/token")" = "$token"
# as_member <job> [port]: the flags of a worker or `linea status` of the job run here, as
# its worker pods have them (the member pair), its master on 127.0.0.1 (port 7070).
as_member() {
  echo --master "127.0.0.1:${2:-7070}" --master-name "$1-master.ml.svc" --tls-dir "$STATE/$1-client-tls" \
    --secret-file "$STATE/$1-client-tls/token"
}
"$LINEA_BIN" --quiet master --data "$STATE/grid" --model "$STATE/poll.model" --listen 127.0.0.1:7070 \
  --algorithm cocoa --loss hinge --slots 2 --epochs 1000000 --gap-tolerance 0 \
  --tls-dir "$STATE/poll-master-tls" --secret-file "$STATE/poll-master-tls/token" >"$STATE/master.log" 2>&1 &
MASTER_PID=$!
# This worker plays poll-worker-0 (the operator reaches it at the pod IP and port 7071);
# a second one takes its shards when it is drained.
"$LINEA_BIN" worker $(as_member poll) --threads 1 --listen 127.0.0.1:7071 >"$STATE/poll-worker-0.log" 2>&1 &
WORKER_PID=$!
"$LINEA_BIN" worker $(as_member poll) --threads 1 >"$STATE/poll-worker-1.log" 2>&1 &
OTHER_WORKER_PID=$!
master_at_epoch_2() { "$LINEA_BIN" status $(as_member poll) | grep -Eq '"epoch": ([2-9]|[1-9][0-9]+),'; }
check "a worker and linea status reach the master over TLS with the job's member certificate" until_ok 60 master_at_epoch_2
refused_without_job_cert() {
  local out
  ! out="$("$LINEA_BIN" status --master 127.0.0.1:7070 --secret-file "$STATE/poll-client-tls/token" --tls-dir "$STATE/ads-client-tls" --master-name poll-master.ml.svc 2>&1)" &&
    grep -Eiq 'tls|certificate' <<<"$out" || { echo "$out"; false; }
  ! out="$("$LINEA_BIN" status --master 127.0.0.1:7070 --secret-file "$STATE/poll-client-tls/token" --insecure 2>&1)" || { echo "$out"; false; }
}
check "... and another job's certificate or plain text is refused" refused_without_job_cert
k -n ml patch pod poll-master --subresource=status --type=merge \
  -p '{"status":{"phase":"Running","podIP":"127.0.0.1","podIPs":[{"ip":"127.0.0.1"}]}}' >/dev/null
progress_from_master() {
  local epoch ready
  epoch="$(jp tj/poll '{.status.progress.epoch}')" ready="$(jp tj/poll '{.status.workers.ready}')"
  [ -n "$epoch" ] && [ "$epoch" -ge 2 ] && [ "$ready" = 2 ] && [ -n "$(jp tj/poll '{.status.progress.objective}')" ] ||
    { echo "status: $(jp tj/poll '{.status}')"; false; }
}
check "progress (epoch, objective, ready workers) is polled from the master's status RPC" until_ok 60 progress_from_master
leader_failover poll

# A spot node gets its interruption notice: the operator asks the master to drain the
# worker there, which hands its shards over and exits 0 before the node goes.
echo '{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "spot-1"}}' | k create -f - >/dev/null
echo '{"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "poll-worker-0"},
  "target": {"apiVersion": "v1", "kind": "Node", "name": "spot-1"}}' |
  k create --raw /api/v1/namespaces/ml/pods/poll-worker-0/binding -f - >/dev/null
k -n ml patch pod poll-worker-0 --subresource=status --type=merge \
  -p '{"status":{"phase":"Running","podIP":"127.0.0.1","podIPs":[{"ip":"127.0.0.1"}]}}' >/dev/null
noticed="$(date +%s.%N)"
k taint node spot-1 aws-node-termination-handler/spot-itn=true:NoSchedule >/dev/null
drain_logged() { notice_to_drain "$STATE/operator-b.log" "$noticed" poll-worker-0; }
until_ok 10 drain_logged || true
drain_within_a_second() {
  local took
  took="$(drain_logged)" || return 1
  python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) < 1.0 else 1)' "$took" || { echo "took $took s"; return 1; }
  echo "note: ${took} s from the taint command to the drain call (an upper bound: kubectl's own start-up included)"
}
check "the termination notice is acted on within 1 s (node watch: taint -> drain call)" drain_within_a_second
worker_exited() { ! kill -0 "$WORKER_PID" 2>/dev/null; }
check "a worker on a node with a termination notice is drained and exits" until_ok 60 worker_exited
echo "       note: $(python3 -c 'import sys, time; print(f"{time.time() - float(sys.argv[1]):.1f}")' "$noticed") s from the taint to the worker's exit, its shards handed over (0.2 s polls)"
worker_rc=0
wait "$WORKER_PID" || worker_rc=$?
check "... with exit code 0" test "$worker_rc" = 0
master_runs_on() { kill -0 "$MASTER_PID" 2>/dev/null || { echo "the master ended: $(tail -n 3 "$STATE/master.log")"; false; }; }
check "... while the master trains on (the drain handed its shards over; the job did not end)" master_runs_on
draining_reported() {
  [ "$(jp tj/poll '{.status.conditions[?(@.type=="Draining")].reason}')" = NodeTerminating ] &&
    k -n ml get events --field-selector involvedObject.name=poll -o jsonpath='{.items[*].reason}' | grep -q NodeTerminating
}
check "the job reports Draining (NodeTerminating) and an event" until_ok 30 draining_reported
kill "$MASTER_PID" "$OTHER_WORKER_PID" 2>/dev/null || true
# SIGTERM stops the master cleanly (exit 143) within seconds; its port is free again after.
wait "$MASTER_PID" 2>/dev/null || true

curl -sf "http://127.0.0.1:$metrics_port/metrics" >"$STATE/metrics.txt" || true
check "/metrics reports reconciles" grep -q '^linea_operator_reconcile_duration_seconds_count [1-9]' "$STATE/metrics.txt"
check "/metrics has the polled job's progress (epoch >= 2, objective)" bash -c \
  "grep -Eq '^linea_operator_job_epoch\{namespace=\"ml\",name=\"poll\"\} ([2-9]|[1-9][0-9]+)\$' '$STATE/metrics.txt' &&
   grep -Eq '^linea_operator_job_objective\{namespace=\"ml\",name=\"poll\"\} [0-9]' '$STATE/metrics.txt'"
check "... and none of the deleted jobs' series" bash -c "! grep -E 'name=\"(ads|quick)\"' '$STATE/metrics.txt'"

# ---- What a platform team needs (issue 16): bounded, never touches what isn't its own,
# always says what is wrong.
job_yaml() { # job_yaml <name> [extra spec lines...]: a minimal SCD job
  local name="$1"; shift
  printf 'apiVersion: linea.io/v1alpha1\nkind: TrainingJob\nmetadata: {name: %s, namespace: ml}\nspec:\n  datasetUri: s3://data/ads/grid\n  modelUri: s3://models/%s.model\n' "$name" "$name"
  for line in "$@"; do printf '  %s\n' "$line"; done
}
refused_with() { # refused_with <message> <yaml>: the API server refuses it, saying <message>
  local out
  if out="$(printf '%s\n' "$2" | k create -f - 2>&1)"; then echo "accepted: $out"; return 1; fi
  grep -qF -- "$1" <<<"$out" || { echo "$out"; return 1; }
}
check "a huge replica count is refused at admission" refused_with "should be less than or equal to 1000" \
  "$(job_yaml huge-typo 'workers: {replicas: 100000}')"
check "a name too long for the job's Service is refused at admission" refused_with "metadata.name must be at most 56 characters" \
  "$(job_yaml a-training-job-whose-name-is-far-too-long-for-its-service)"
check "a name that is not a DNS-1035 label is refused at admission" refused_with "metadata.name must be at most 56 characters" \
  "$(job_yaml rcv1.v2)"
explains_default() { # explains_default <field> <text>: `kubectl explain` says the default
  k explain "tj.$1" | tr -s ' \n' ' ' | grep -qF -- "$2" || { k explain "tj.$1"; false; }
}
explained_defaults() {
  explains_default spec.runPolicy.backoffLimit '(default 3)' &&
    explains_default spec.runPolicy.workerFailureLimit '(default 10)'
}
check "kubectl explain shows the defaults (runPolicy.backoffLimit, workerFailureLimit)" explained_defaults
check "a loss the algorithm cannot train is refused with a message (hybrid + hinge)" refused_with "hybrid.loss hinge is not supported" \
  "$(job_yaml hybrid 'algorithm: {hybrid: {loss: hinge}}')"

# A Service and a PodDisruptionBudget with the names jobs would use, and a Secret with the
# name jobs used to get (`<job>-auth`), made by someone else.
k -n ml create service clusterip fs-master --tcp=80:8080 >/dev/null
k -n ml create poddisruptionbudget fpdb-master --selector=app=theirs --min-available=1 >/dev/null
k -n ml create secret generic fsec-auth --from-literal=token=theirs >/dev/null
for j in fs fpdb fsec; do job_yaml "$j" | k apply -f - >/dev/null; done
conflict_named() { # conflict_named <job> <object>
  equals tj/"$1" '{.status.conditions[?(@.type=="Created")].status}/{.status.conditions[?(@.type=="Created")].reason}' False/ResourceConflict &&
    jp tj/"$1" '{.status.conditions[?(@.type=="Created")].message}' | grep -qF "$2" &&
    k -n ml get events --field-selector "involvedObject.name=$1,reason=ResourceConflict" -o name | grep -q . ||
    { echo "status: $(jp tj/"$1" '{.status}')"; false; }
}
check "a foreign Service is named in the job's condition and an event" until_ok 30 conflict_named fs "service ml/fs-master"
check "a foreign PodDisruptionBudget is named in the job's condition and an event" until_ok 30 conflict_named fpdb "poddisruptionbudget ml/fpdb-master"
check "... and neither job created a pod" test -z "$(k -n ml get pods -l 'linea.io/job-name in (fs,fpdb)' -o name)"
check "the foreign Service is untouched (selector, labels, owners)" test \
  "$(jp service/fs-master '{.spec.selector.app}/{.metadata.labels.linea\.io/job-name}/{.metadata.ownerReferences}')" = "fs-master//"
check "the foreign PodDisruptionBudget is untouched (selector, labels, owners)" test \
  "$(jp pdb/fpdb-master '{.spec.selector.matchLabels.app}/{.metadata.labels.linea\.io/job-name}/{.metadata.ownerReferences}')" = "theirs//"
own_secret_mounted() {
  local name
  name="$(jp tj/fsec '{.status.authSecretName}')"
  [[ "$name" =~ ^fsec-auth-[a-z0-9]{5}$ ]] &&
    equals pod/fsec-master '{.spec.volumes[?(@.name=="job-secret")].secret.secretName}' "$name" ||
    { echo "status: $(jp tj/fsec '{.status}')"; false; }
}
check "a Secret named <job>-auth made by someone else is not used: the job mounts its own, generated" until_ok 30 own_secret_mounted
k -n ml delete tj fs fpdb fsec --wait=false >/dev/null
gone() { ! k -n ml get tj "$1"; }
until_ok 30 gone fs; until_ok 30 gone fpdb; until_ok 30 gone fsec
check "deleting the jobs leaves the foreign Service, PodDisruptionBudget and Secret in place" bash -c \
  "'$KUBECTL' -n ml get service fs-master >/dev/null && '$KUBECTL' -n ml get pdb fpdb-master >/dev/null &&
   [ \"\$('$KUBECTL' -n ml get secret fsec-auth -o jsonpath='{.data.token}' | base64 -d)/\$('$KUBECTL' -n ml get secret fsec-auth -o jsonpath='{.metadata.ownerReferences}')\" = theirs/ ]"

# A ResourceQuota smaller than a job (real admission, real quota controller): the job says
# it is blocked with the server's message, keeps what it created, and goes on by itself
# once the quota is raised.
k create namespace tight >/dev/null
k -n tight create serviceaccount default >/dev/null
k -n tight create quota pods --hard=pods=2 >/dev/null
tq() { k -n tight get "$1" -o "jsonpath=$2" 2>/dev/null; }
until_ok 60 bash -c "[ \"\$('$KUBECTL' -n tight get quota pods -o jsonpath='{.status.hard.pods}')\" = 2 ]"
job_yaml squeezed 'workers: {replicas: 3}' | sed 's/namespace: ml/namespace: tight/' | k apply -f - >/dev/null
tight_pods() { k -n tight get pods -l linea.io/job-name=squeezed -o name | sort | tr '\n' ' '; }
quota_refused() {
  [ "$(tq tj/squeezed '{.status.conditions[?(@.type=="Blocked")].status}/{.status.conditions[?(@.type=="Blocked")].reason}')" = True/PodCreationRefused ] &&
    tq tj/squeezed '{.status.conditions[?(@.type=="Blocked")].message}' | grep -q 'creating pod squeezed-worker-1 was refused: .*exceeded quota: pods' &&
    [ "$(tq tj/squeezed '{.status.workers.desired}/{.status.phase}')" = 3/Pending ] &&
    [ "$(tight_pods)" = "pod/squeezed-master pod/squeezed-worker-0 " ] &&
    k -n tight get events --field-selector involvedObject.name=squeezed,reason=PodCreationRefused -o jsonpath='{.items[*].message}' | grep -q 'exceeded quota' ||
    { echo "pods: $(tight_pods) status: $(tq tj/squeezed '{.status}')"; false; }
}
check "a ResourceQuota refusal: Blocked (PodCreationRefused) with the server's message, an event, the pods made so far kept" until_ok 60 quota_refused
k -n tight patch quota pods --type=merge -p '{"spec":{"hard":{"pods":"10"}}}' >/dev/null
quota_raised() {
  [ "$(tight_pods)" = "pod/squeezed-master pod/squeezed-worker-0 pod/squeezed-worker-1 pod/squeezed-worker-2 " ] &&
    [ "$(tq tj/squeezed '{.status.conditions[?(@.type=="Blocked")].status}')" = False ] &&
    kill -0 "$OPERATOR_PID" || { echo "pods: $(tight_pods) status: $(tq tj/squeezed '{.status}')"; false; }
}
check "... raising the quota lets the job go on, with the same operator process" until_ok 120 quota_raised

# Default requests and limits: a ResourceQuota on limits and requests of CPU and memory (real
# admission) refuses a pod that names none, in the API server's words; every pod of a job
# whose spec names no resources is admitted, with the chart's defaults; what a job names wins.
k create namespace limited >/dev/null
k -n limited create serviceaccount default >/dev/null
k -n limited create quota compute --hard=limits.cpu=40,limits.memory=80Gi,requests.cpu=20,requests.memory=40Gi >/dev/null
lq() { k -n limited get "$1" -o "jsonpath=$2" 2>/dev/null; }
until_ok 60 bash -c "[ -n \"\$('$KUBECTL' -n limited get quota compute -o jsonpath='{.status.used}')\" ]"
bare_refused() {
  local out
  if out="$(k -n limited run bare --image=linea:e2e --restart=Never 2>&1)"; then
    echo "admitted: $out"; k -n limited delete pod bare >/dev/null; return 1
  fi
  grep -q 'forbidden: failed quota: compute: must specify limits.cpu for: bare; limits.memory for: bare' <<<"$out" &&
    echo "note: $out" || { echo "$out"; false; }
}
check "a pod with no resources is refused by the namespace's ResourceQuota on limits" bare_refused
job_yaml plain 'workers: {replicas: 2}' | sed 's/namespace: ml/namespace: limited/' | k apply -f - >/dev/null
job_yaml sized 'workers: {replicas: 1, resources: {requests: {cpu: 100m}, limits: {memory: 1Gi}}}' |
  sed 's/namespace: ml/namespace: limited/' | k apply -f - >/dev/null
# resources_are <pod> <requests cpu/memory> <limits cpu/memory>
resources_are() {
  local got
  got="$(lq "pod/$1" '{.spec.containers[0].resources.requests.cpu}/{.spec.containers[0].resources.requests.memory} {.spec.containers[0].resources.limits.cpu}/{.spec.containers[0].resources.limits.memory}')"
  [ "$got" = "$2 $3" ] || { echo "$1: $got, expected $2 $3"; false; }
}
defaults_of() { python3 -c 'import json,sys; r=json.loads(sys.argv[1])[sys.argv[2]]; q,l=r["requests"],r["limits"]; print(q["cpu"]+"/"+q["memory"]+" "+l["cpu"]+"/"+l["memory"])' "$JOB_DEFAULTS" "$1"; }
read -r worker_requests worker_limits <<<"$(defaults_of worker)"
read -r master_requests master_limits <<<"$(defaults_of master)"
defaults_admitted() {
  resources_are plain-master "$master_requests" "$master_limits" &&
    resources_are plain-worker-0 "$worker_requests" "$worker_limits" &&
    resources_are plain-worker-1 "$worker_requests" "$worker_limits" &&
    [ "$(lq tj/plain '{.status.conditions[?(@.type=="Blocked")].status}')" != True ] ||
    { echo "status: $(lq tj/plain '{.status}')"; false; }
}
check "a job that names no resources: its master and workers admitted under that quota, with the defaults (master $master_requests $master_limits, workers $worker_requests $worker_limits)" \
  until_ok 60 defaults_admitted
sized_admitted() {
  # The job's own CPU request and memory limit, the default CPU limit; no memory request
  # from the defaults (the API server makes it the job's limit).
  resources_are sized-worker-0 "100m/1Gi" "${worker_limits%/*}/1Gi" &&
    [ "$(lq pod/sized-worker-0 '{.spec.containers[0].args}' | grep -c '"--cache-mb","512"')" = 1 ]
}
check "... and what a job names wins, resource by resource (worker: its own 100m and 1Gi, the default CPU limit, a 512 MiB cache)" \
  until_ok 60 sized_admitted
k -n limited delete tj plain sized --wait=false >/dev/null

# set_terminated <pod> <phase> <exit code> <reason> [message]: a kubelet's report of a
# container that ended now.
set_terminated() {
  local body
  body="$(python3 -c 'import json,sys,datetime
phase, code, reason, message = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
term = {"exitCode": code, "reason": reason, "finishedAt": now, "startedAt": now}
if message: term["message"] = message
print(json.dumps({"status": {"phase": phase, "containerStatuses": [{"name": "c", "image": "linea:e2e", "imageID": "",
  "ready": False, "restartCount": 0, "state": {"terminated": term}}]}}))' "$2" "$3" "$4" "${5:-}")"
  k -n ml patch pod "$1" --subresource=status --type=merge -p "$body" >/dev/null
}

# A worker that keeps failing: replaced with backoff, counted, events say why.
job_yaml crash 'workers: {replicas: 1}' 'runPolicy: {workerFailureLimit: 5}' | k apply -f - >/dev/null
until_ok 60 equals pod/crash-worker-0 '{.metadata.name}' crash-worker-0
set_pod_phase crash-master Running
first_uid="$(jp pod/crash-worker-0 '{.metadata.uid}')"
set_terminated crash-worker-0 Failed 137 OOMKilled
replaced_once() {
  uid="$(jp pod/crash-worker-0 '{.metadata.uid}')"
  [ -n "$uid" ] && [ "$uid" != "$first_uid" ] && equals tj/crash '{.status.workers.failed}' 1 &&
    k -n ml get events --field-selector involvedObject.name=crash,reason=WorkerFailed -o jsonpath='{.items[*].message}' | grep -q 'crash-worker-0 failed: OOMKilled (exit code 137)'
}
check "a failed worker is replaced, counted (workers.failed 1) and an event says OOMKilled" until_ok 30 replaced_once
second_uid="$(jp pod/crash-worker-0 '{.metadata.uid}')"
set_terminated crash-worker-0 Failed 1 Error "error: s3://data/ads/grid: connection refused"
held_back() {
  equals tj/crash '{.status.conditions[?(@.type=="Blocked")].reason}' Backoff &&
    jp tj/crash '{.status.conditions[?(@.type=="Blocked")].message}' | grep -q 'connection refused.*backoff 10 s'
}
check "its next failure is held back: Blocked (Backoff) with the termination message" until_ok 30 held_back
check "... while the failed pod is kept for inspection" equals pod/crash-worker-0 '{.metadata.uid}' "$second_uid"
replaced_twice() {
  uid="$(jp pod/crash-worker-0 '{.metadata.uid}')"
  [ -n "$uid" ] && [ "$uid" != "$second_uid" ] && equals tj/crash '{.status.workers.failed}' 2 &&
    jp tj/crash '{.status.workers.lastFailure}' | grep -q 'connection refused'
}
check "... and replaced after the backoff, counted (workers.failed 2, lastFailure)" until_ok 40 replaced_twice

# A master the scheduler cannot place: said in the conditions by the next reconcile.
job_yaml stuck | k apply -f - >/dev/null
until_ok 60 equals pod/stuck-master '{.metadata.name}' stuck-master
k -n ml patch pod stuck-master --subresource=status --type=merge -p '{"status":{"phase":"Pending","conditions":[{"type":"PodScheduled","status":"False","reason":"Unschedulable","message":"0/3 nodes are available: 3 Insufficient memory."}]}}' >/dev/null
unschedulable_shown() {
  equals tj/stuck '{.status.conditions[?(@.type=="Running")].reason}/{.status.conditions[?(@.type=="Blocked")].reason}' PodUnschedulable/PodUnschedulable &&
    jp tj/stuck '{.status.conditions[?(@.type=="Blocked")].message}' | grep -q 'stuck-master: Unschedulable: 0/3 nodes are available'
}
check "an unschedulable master shows up in Running and Blocked at once" until_ok 10 unschedulable_shown

check "image is immutable under a running job" bash -c \
  "! out=\$('$KUBECTL' -n ml patch tj stuck --type=merge -p '{\"spec\":{\"image\":\"linea:other\"}}' 2>&1) && grep -q 'are immutable' <<<\"\$out\""

# A one-epoch run, shorter than any poll: the final status comes from the real master's
# termination message (the model header it wrote), not from a poll.
job_yaml once 'algorithm: {scd: {epochs: 1}}' | k apply -f - >/dev/null
until_ok 60 equals pod/once-master '{.metadata.name}' once-master
uid="$(jp tj/once '{.metadata.uid}')"
job_tls once master "$STATE/once-master-tls"
job_tls once client "$STATE/once-client-tls"
LINEA_TERMINATION_LOG="$STATE/once.termination" "$LINEA_BIN" --quiet master --data "$STATE/grid" --model "$STATE/once.model" \
  --listen 127.0.0.1:7072 --epochs 1 --tls-dir "$STATE/once-master-tls" --secret-file "$STATE/once-master-tls/token" \
  >"$STATE/once-master.log" 2>&1 &
MASTER_PID=$!
"$LINEA_BIN" worker $(as_member once 7072) --threads 1 >"$STATE/once-worker.log" 2>&1 &
WORKER_PID=$!
until_ok 120 master_done
check "the linea master wrote its final epoch count to its termination message" grep -q '"epochs":1' "$STATE/once.termination"
set_terminated once-master Succeeded 0 Completed "$(cat "$STATE/once.termination")"
one_epoch() {
  equals tj/once '{.status.phase}/{.status.conditions[?(@.type=="Succeeded")].reason}/{.status.progress.epoch}' Succeeded/MaxEpochsReached/1 &&
    equals tj/once '{.status.modelUri}' s3://models/once.model || { echo "status: $(jp tj/once '{.status}')"; false; }
}
check "a one-epoch run ends MaxEpochsReached with epoch 1 and its modelUri" until_ok 30 one_epoch

# A master that cannot read its data exits 2 with the error as its termination message: the
# job fails at once as DatasetError, without burning its backoffLimit.
job_yaml baddata | k apply -f - >/dev/null
until_ok 60 equals pod/baddata-master '{.metadata.name}' baddata-master
rc=0
job_tls baddata master "$STATE/baddata-master-tls"
LINEA_TERMINATION_LOG="$STATE/baddata.termination" "$LINEA_BIN" --quiet master --data "$STATE/no-such-grid" \
  --model "$STATE/baddata.model" --listen 127.0.0.1:7073 --tls-dir "$STATE/baddata-master-tls" \
  --secret-file "$STATE/baddata-master-tls/token" >/dev/null 2>&1 || rc=$?
check "linea exits 2 on missing data and writes the error to its termination message" bash -c \
  "[ $rc = 2 ] && grep -q '^error: ' '$STATE/baddata.termination'"
set_terminated baddata-master Failed "$rc" Error "$(cat "$STATE/baddata.termination")"
dataset_error() {
  equals tj/baddata '{.status.phase}/{.status.conditions[?(@.type=="Failed")].reason}/{.status.restarts}' Failed/DatasetError/0 &&
    jp tj/baddata '{.status.conditions[?(@.type=="Failed")].message}' | grep -q 'no-such-grid'
}
check "... and the job fails as DatasetError with that message, no restart" until_ok 30 dataset_error

# Bounded work and a prompt stop: a 1000-worker job is created in batches with its status
# written along the way, and SIGTERM stops the operator while it is still creating pods.
job_yaml wide 'workers: {replicas: 1000}' | k apply -f - >/dev/null
wide_pods() { k -n ml get pods -l linea.io/job-name=wide -o name | wc -l; }
status_while_creating() { equals tj/wide '{.status.workers.desired}' 1000 && [ "$(wide_pods)" -ge 40 ] && [ "$(wide_pods)" -lt 1001 ]; }
check "a 1000-worker job has its status written while its pods are still being created" until_ok 60 status_while_creating
kill -TERM "$OPERATOR_PID"
stop_started=$SECONDS
operator_stopped() { ! kill -0 "$OPERATOR_PID" 2>/dev/null; }
check "SIGTERM stops the operator within 10 s while it is creating pods" until_ok 10 operator_stopped
check "... and it gave the Lease up on its way out (no holder)" lease_released
echo "       note: stopped after $((SECONDS - stop_started)) s with $(wide_pods) of 1001 pods created"
check "... having created only part of the job (it stopped, not finished)" test "$(wide_pods)" -lt 1001

# ---- A CoCoA job run to the end by real `linea master` / `linea worker` processes (issue
# 13): the operator builds its pods, the processes run with exactly the pods' arguments and
# environment (only addresses, paths and the secret file made local: e2e/hand-run.sh), the
# gap the master polls and the one it stopped at reach the status and `kubectl get tj`.
# The operator was stopped above; a 1000-worker job would keep a new one busy, so it goes
# first (no garbage collector runs here, so its finalizer is lifted by hand).
k -n ml patch tj wide --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null
k -n ml delete tj wide --wait=false >/dev/null
started="$(date +%s.%N)"
start_operator operator-c "$STATE/operator.log" "$metrics_port"
OPERATOR_PID="$STARTED_PID"
check "a replica started after the release leads at once, not after the lease duration" leads_at_once "$started"
COCOA_GAP=1e-4
# Its storage credentials come from a Secret (the pods get secretKeyRefs); the processes run
# here get the same variables, so the secret grep at the end would see them leak.
S3_ACCESS_KEY=e2e-s3-access-key-0a1b2c S3_SECRET_KEY=e2e-s3-secret-key-9f8e7d6c5b4a
k -n ml create secret generic s3-creds --from-literal=AWS_ACCESS_KEY_ID="$S3_ACCESS_KEY" \
  --from-literal=AWS_SECRET_ACCESS_KEY="$S3_SECRET_KEY" >/dev/null
job_yaml svm "algorithm: {cocoa: {loss: logistic, l2: 1, localPasses: 1, gapTolerance: $COCOA_GAP, maxEpochs: 5000, seed: 3}}" \
  'workers: {replicas: 2}' "storage: {endpoint: 'http://127.0.0.1:1', credentialsSecretName: s3-creds}" | k apply -f - >/dev/null
# two_worker_objects <job>: the job has exactly its master pod, its Service and 2 workers.
two_worker_objects() {
  [ "$(k -n ml get pods,services -l "linea.io/job-name=$1" -o name | sort | tr '\n' ' ')" = \
    "pod/$1-master pod/$1-worker-0 pod/$1-worker-1 service/$1-master " ]
}
check "a cocoa TrainingJob is accepted and gets its master pod, service and 2 workers" until_ok 60 two_worker_objects svm
svm_master_args() {
  has_args svm-master master --data s3://data/ads/grid --model s3://models/svm.model &&
    has_args svm-master --algorithm cocoa --loss logistic --l2 1 --local-passes 1 --gap-tolerance 0.0001 \
      --epochs 5000 --seed 3 --slots 2
}
check "the master pod runs linea master --algorithm cocoa with the job's loss, l2, gap tolerance and one slot per worker" svm_master_args
svm_worker_args() { for w in 0 1; do has_args "svm-worker-$w" worker --master svm-master.ml.svc:7070 || return 1; done; }
check "the worker pods run linea worker against the master's Service" svm_worker_args
s3_from_secret() {
  local p
  for p in svm-master svm-worker-0 svm-worker-1; do
    equals "pod/$p" '{.spec.containers[0].env[?(@.name=="AWS_SECRET_ACCESS_KEY")].valueFrom.secretKeyRef.name}/{.spec.containers[0].env[?(@.name=="AWS_SECRET_ACCESS_KEY")].value}' \
      s3-creds/ || { echo "$p env: $(jp "pod/$p" '{.spec.containers[0].env}')"; return 1; }
  done
}
check "its pods take the S3 keys from the s3-creds Secret (secretKeyRef), never as a value" s3_from_secret
master_metrics_port() {
  equals pod/svm-master '{.spec.containers[0].ports[?(@.name=="metrics")].containerPort}' 9090 &&
    has_args svm-master --metrics-listen 0.0.0.0:9090 &&
    equals pod/svm-master '{.metadata.annotations.prometheus\.io/scrape}/{.metadata.annotations.prometheus\.io/port}/{.metadata.annotations.prometheus\.io/path}' \
      true/9090//metrics || { echo "master pod: $(jp pod/svm-master '{.metadata.annotations} {.spec.containers[0].ports}')"; false; }
}
check "the master pod serves its metrics on containerPort 'metrics' (9090) with prometheus.io scrape annotations" \
  master_metrics_port

svm_metrics="127.0.0.1:$(free_port)"
start_master svm "$svm_metrics"
start_workers svm 0
WORKER_PID=${STARTED_WORKERS[0]}
svm_epoch_2() { "$LINEA_BIN" status $(as_member svm) | grep -Eq '"epoch": ([2-9]|[1-9][0-9]+),'; }
until_ok 60 svm_epoch_2
# The master's own /metrics (the pod's --metrics-listen, made local): its epoch lies between
# two `linea status` calls around the scrape, and a cocoa run exports its duality gap.
status_epoch() { "$LINEA_BIN" status $(as_member svm) | python3 -c 'import json, sys; print(json.load(sys.stdin)["epoch"])'; }
master_metrics_agree() {
  local before scraped after
  before="$(status_epoch)" && scraped="$(curl -sf "http://$svm_metrics/metrics")" && after="$(status_epoch)" || return 1
  python3 -c 'import sys
before, text, after = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
samples = dict(l.rsplit(" ", 1) for l in text.splitlines() if l and not l.startswith("#"))
epoch = float(samples["linea_master_epoch"])
ok = before <= epoch <= after and float(samples["linea_master_duality_gap{kind=\"relative\"}"]) > 0 \
  and samples["linea_master_phase{phase=\"training\"}"] == "1" and float(samples["linea_master_workers{state=\"active\"}"]) >= 1
sys.exit(0 if ok else f"status epochs {before}..{after}, metrics:\n{text}")' "$before" "$scraped" "$after" &&
    echo "note: epoch $before <= $(sed -n 's/^linea_master_epoch //p' <<<"$scraped") <= $after"
}
check "the master serves /metrics on the pod's --metrics-listen port: epoch between two linea status calls, the gap" \
  master_metrics_agree
master_pod_running svm
gap_polled() { [ -n "$(jp tj/svm '{.status.progress.dualityGap}')" ] || { echo "status: $(jp tj/svm '{.status}')"; false; }; }
check "the gap the running cocoa master reports is polled into status.progress.dualityGap" until_ok 30 gap_polled
# The second worker joins mid-run: the two slots are now served by two processes.
start_workers svm 1
OTHER_WORKER_PID=${STARTED_WORKERS[0]}
master_finished cocoa svm "has a gap at most $COCOA_GAP" "0 <= s['dualityGap'] <= $COCOA_GAP"
svm_succeeded() {
  equals tj/svm '{.status.phase}/{.status.conditions[?(@.type=="Succeeded")].reason}' Succeeded/Converged &&
    python3 -c 'import sys; sys.exit(0 if 0 <= float(sys.argv[1]) <= float(sys.argv[2]) else 1)' \
      "$(jp tj/svm '{.status.progress.dualityGap}')" "$COCOA_GAP" || { echo "status: $(jp tj/svm '{.status}')"; false; }
}
check "the job is Succeeded (Converged) with status.progress.dualityGap at most $COCOA_GAP" until_ok 30 svm_succeeded
check "kubectl get tj shows the gap in its GAP column" listed svm \
  'list(row)[:3] == ["NAME", "PHASE", "ALGORITHM"] and [row["NAME"], row["PHASE"], row["ALGORITHM"]] == ["svm", "Succeeded", "cocoa"]
and abs(float(row["GAP"]) - progress["dualityGap"]) <= 1e-6 * progress["dualityGap"]'
check "both workers are released and exit" until_ok 30 exited "$WORKER_PID" "$OTHER_WORKER_PID"

# ---- Elastic CoCoA (issue 14): the master scales in, the operator follows.
check "elastic with SCD is refused at admission" refused_with "elastic.enabled needs algorithm.cocoa" \
  "$(job_yaml elastic-scd 'elastic: {enabled: true}')"
job_yaml shrink "algorithm: {cocoa: {loss: hinge, gapTolerance: 1e-6, maxEpochs: 100000}}" 'workers: {replicas: 8}' \
  'elastic: {enabled: true, minReplicas: 1, factor: 4, clock: epochs}' | k apply -f - >/dev/null
shrink_pods() { k -n ml get pods -l linea.io/job-name=shrink -o name | sort | tr '\n' ' '; }
SHRINK_WORKERS="0 1 2 3 4 5 6 7"
shrink_started() {
  [ "$(shrink_pods)" = "pod/shrink-master $(for w in $SHRINK_WORKERS; do printf 'pod/shrink-worker-%s ' "$w"; done)" ]
}
check "an elastic cocoa job gets its master and 8 workers" until_ok 60 shrink_started
check "its master runs with 8 slots and the elastic policy's flags" has_args shrink-master --slots 8 --elastic \
  --elastic-min-slots 1 --elastic-factor 4 --elastic-window 2 --elastic-threshold 1.25 --elastic-clock epochs
start_master shrink
# Each worker process plays one pod: its id starts with its hostname, as in a pod.
declare -A SHRINK_PID
start_workers shrink $SHRINK_WORKERS
for w in $SHRINK_WORKERS; do SHRINK_PID[$w]=${STARTED_WORKERS[$w]}; done
master_pod_running shrink
for w in $SHRINK_WORKERS; do set_pod_phase "shrink-worker-$w" Running; done
released_seven() { [ "$(jp tj/shrink '{.status.elastic.released[*]}' | wc -w)" = 7 ] || { echo "status: $(jp tj/shrink '{.status}')"; false; }; }
check "the master scales in 8 -> 2 -> 1 and the operator records the 7 released pods in status.elastic.released" \
  until_ok 180 released_seven
released="$(jp tj/shrink '{.status.elastic.released[*]}')"
kept=""
for w in $SHRINK_WORKERS; do grep -qw "shrink-worker-$w" <<<"$released" || kept="$kept shrink-worker-$w"; done
kept="${kept# }"
check "exactly one pod is kept, and the released ones are all distinct pods of the job" \
  test "$(wc -w <<<"$kept")/$(tr ' ' '\n' <<<"$released" | sort -u | grep -c shrink-worker-)" = 1/7
echo "       released: $released; kept: $kept"
released_exited_0() {
  local name rc
  for name in $released; do
    rc=0; wait "${SHRINK_PID[${name##*-}]}" || rc=$?
    [ "$rc" = 0 ] || { echo "$name exited $rc"; return 1; }
  done
}
check "the released worker processes exit 0 by themselves" released_exited_0
check "the kept worker still runs" kill -0 "${SHRINK_PID[${kept##*-}]}"
check "while their pods still run, no pod was deleted" shrink_started
for name in $released; do set_terminated "$name" Succeeded 0 Completed; done
exactly_released_gone() {
  [ "$(shrink_pods)" = "pod/shrink-master pod/$kept " ] || { echo "pods: $(shrink_pods)"; false; }
}
check "exactly the released pods are deleted once they exited, and not replaced" until_ok 30 exactly_released_gone
# scale_in_events: the job's ElasticScaleIn events, one message per line, oldest first.
scale_in_events() {
  k -n ml get events --field-selector involvedObject.name=shrink,reason=ElasticScaleIn \
    --sort-by=.eventTime -o jsonpath='{range .items[*]}{.message}{"\n"}{end}'
}
# One event per decision of the master, whether both fell into one poll or not: 8 -> 2 with
# the six pods it released, then 2 -> 1 with the seventh; the status lists both, numbered.
one_event_per_decision() {
  local reason message events
  reason="$(jp tj/shrink '{.status.conditions[?(@.type=="Scaling")].reason}')"
  message="$(jp tj/shrink '{.status.conditions[?(@.type=="Scaling")].message}')"
  events="$(scale_in_events)"
  { [ "$reason" = ElasticScaleIn ] && grep -q "2 -> 1" <<<"$message" ||
    { [ "$reason" = Stable ] && grep -q "after an elastic scale-in" <<<"$message"; }; } &&
    [ "$(wc -l <<<"$events")" = 2 ] &&
    [ "$(grep -c ': 8 -> 2; released shrink-worker-.*, .*, .*, .*, .*, shrink-worker-[0-9]$' <<<"$events")" = 1 ] &&
    [ "$(grep -c ': 2 -> 1; released shrink-worker-[0-9]$' <<<"$events")" = 1 ] &&
    equals tj/shrink '{.status.elastic.decisions[*].number}' "1 2" &&
    equals tj/shrink '{.status.elastic.decisions[*].to}' "2 1" &&
    equals tj/shrink '{.status.workers.desired}' 1 ||
    { echo "Scaling $reason: $message; events: $events; decisions $(jp tj/shrink '{.status.elastic.decisions}')"; false; }
}
check "Scaling (ElasticScaleIn, then Stable), exactly one event per decision (8 -> 2, 2 -> 1) naming its pods, workers.desired 1" \
  until_ok 30 one_event_per_decision
scale_in_events | sed 's/^/       /'
# The 7 pods the two decisions name are the 7 released.
decision_pods="$(jp tj/shrink '{.status.elastic.decisions[*].released[*]}' | tr ' ' '\n' | sort | tr '\n' ' ')"
check "the decisions name exactly the 7 released pods" \
  test "$decision_pods" = "$(tr ' ' '\n' <<<"$released" | sort | tr '\n' ' ')"
# An operator restart while the master still reports both decisions: the new replica reads
# what was reported from the status and repeats nothing (checked once the job is finished,
# which only the new replica can have seen).
kill -TERM "$OPERATOR_PID"
check "the operator stops (SIGTERM) while the elastic job trains" until_ok 10 operator_stopped
start_operator operator-d "$STATE/operator.log" "$metrics_port"
OPERATOR_PID="$STARTED_PID"
check "... and a new replica leads" until_ok 30 holder_is operator-d
master_finished elastic shrink "has its epochs and objective" "s['epochs'] >= 1 and s['objective'] > 0"
check "the elastic job is Succeeded" until_ok 30 equals tj/shrink '{.status.phase}' Succeeded
check "... and the restarted operator repeated no decision: still exactly 2 ElasticScaleIn events" \
  test "$(scale_in_events | wc -l)" = 2
# The same settings in one process: `linea train` with the master's own arguments.
check "linea train runs with the master's own arguments (what it says is shown if not)" train_reference shrink --threads 2
check "the elastic job's model equals linea train with the same settings, bit for bit" \
  cmp "$STATE/shrink.model" "$STATE/shrink-reference.model"

# ---- A hybrid and an IPM job run to the end the same way (issue 15), each with 2 workers:
# the hybrid sums over the spanning tree of its workers (allreduce: tree), IPM by linea's
# default range aggregation. Neither has a dual; their gap is the gradient bound
# |g|^2/(4 l2) (docs/algorithms.md), which the hybrid job stops on (gapTolerance). What a
# user looks at is checked: the master pod's arguments (every field of the block), the
# master's exit and termination message, the phase, condition reason, progress and event,
# `kubectl get tj` — and the model, the bytes `linea train --workers 2` writes with the same
# settings. Their runs last about a second, shorter than a poll: the operator's call of the
# master's status is checked while the master waits for its workers.
# has_flags <pod> <flag> <value>...: the pod's args pass each flag with this value.
has_flags() {
  local pod="$1"
  shift
  while [ $# -gt 0 ]; do has_args "$pod" "$1" "$2" || return 1; shift 2; done
}
polled_before_workers() {
  equals "tj/$1" '{.status.phase}/{.status.progress.epoch}/{.status.workers.ready}' Running/0/0 &&
    [ -z "$(jp "tj/$1" '{.status.progress.dualityGap}')" ] || { echo "status: $(jp "tj/$1" '{.status}')"; false; }
}
# ended_as <job> <reason>: Succeeded for that reason, with the master's final epochs,
# objective and gap in status.progress.
ended_as() {
  equals "tj/$1" '{.status.phase}/{.status.conditions[?(@.type=="Succeeded")].reason}' "Succeeded/$2" &&
    python3 -c 'import json, sys
progress, s = json.loads(sys.argv[1]), json.load(open(sys.argv[2]))
ok = progress["epoch"] == s["epochs"] and abs(progress["objective"] - s["objective"]) <= 1e-12 * s["objective"]
ok = ok and abs(progress["dualityGap"] - s["dualityGap"]) <= 1e-12 * s["dualityGap"]
sys.exit(0 if ok else 1)' "$(jp "tj/$1" '{.status.progress}')" "$STATE/$1.termination" ||
    { echo "status: $(jp "tj/$1" '{.status}')"; false; }
}
# event_says <job> <reason>: an event of that reason says where the model went, after how
# many epochs (the master's), with which objective.
event_says() {
  local epochs
  epochs="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["epochs"])' "$STATE/$1.termination")"
  k -n ml get events --field-selector "involvedObject.name=$1,reason=$2" -o jsonpath='{.items[*].message}' |
    grep -q "model written to s3://models/$1.model after $epochs epochs, objective [0-9]" ||
    { k -n ml get events --field-selector "involvedObject.name=$1" -o jsonpath='{range .items[*]}{.reason}: {.message}{"\n"}{end}'; false; }
}
# took_part <job>: both worker processes ran work items for the master that released them.
took_part() { grep -Eq 'done: [1-9][0-9]* items' "$STATE/$1-worker-0.log" && grep -Eq 'done: [1-9][0-9]* items' "$STATE/$1-worker-1.log"; }
# run_batch_job <algorithm> <job> <reason> <condition>: the job's pods, played by real
# processes, to Succeeded for <reason>, its master's termination message `s` meeting the
# condition.
run_batch_job() {
  local algorithm="$1" job="$2" reason="$3"
  start_master "$job"
  master_pod_running "$job"
  check "the operator calls the waiting $algorithm master's status over TLS: Running, epoch 0, no gap" \
    until_ok 30 polled_before_workers "$job"
  start_workers "$job" 0 1
  master_finished "$algorithm" "$job" "has its epochs, objective and gradient bound" \
    "($4) and s['objective'] > 0 and s['dualityGap'] > 0"
  check "the $algorithm job is Succeeded ($reason): the master's epochs, objective and gap in status.progress" \
    until_ok 30 ended_as "$job" "$reason"
  check "... and a $reason event says where the model went, after how many epochs, with which objective" \
    until_ok 30 event_says "$job" "$reason"
  check "kubectl get tj shows its phase, algorithm, epoch, objective and gap" listed "$job" \
    "row['NAME'] == '$job' and row['PHASE'] == 'Succeeded' and row['ALGORITHM'] == '$algorithm'
     and int(row['EPOCH']) == progress['epoch'] and abs(float(row['OBJECTIVE']) - progress['objective']) <= 1e-6 * progress['objective']
     and abs(float(row['GAP']) - progress['dualityGap']) <= 1e-6 * progress['dualityGap']"
  check "both workers are released and exit" until_ok 30 exited "${STARTED_WORKERS[@]}"
  check "... (both ran work items)" took_part "$job"
  check "linea train --workers 2 runs with the master's own arguments" train_reference "$job" --workers 2 --threads 2
  check "the $algorithm job's model equals linea train --workers 2 with the same settings, bit for bit" \
    cmp "$STATE/$job.model" "$STATE/$job-reference.model"
}

job_yaml hyb 'algorithm: {hybrid: {loss: logistic, l2: 1, memory: 7, maxEpochs: 500, tolerance: 1e-7, gradientTolerance: 1e-6,
    gapTolerance: 1e-4, lbfgsPrecondition: diagonal, lbfgsPreconditionRefresh: 5, sgdRate: 0.25, seed: 7, allreduce: tree}}' \
  'workers: {replicas: 2}' | k apply -f - >/dev/null
check "a hybrid TrainingJob is accepted and gets its master pod, service and 2 workers" until_ok 60 two_worker_objects hyb
check "the master pod runs linea master --algorithm hybrid with every field of the job's block and one slot per worker" \
  has_flags hyb-master --algorithm hybrid --loss logistic --l2 1 --memory 7 --epochs 500 --tolerance 0.0000001 \
  --gradient-tolerance 0.000001 --gap-tolerance 0.0001 --lbfgs-precondition diagonal --lbfgs-precondition-refresh 5 --sgd-rate 0.25 --seed 7 \
  --allreduce tree --slots 2
run_batch_job hybrid hyb Converged "s['epochs'] < 500 and s['dualityGap'] <= 1e-4"
check "its allreduce ran over a spanning tree of both worker processes (the master's log)" \
  grep -q 'allreduce tree rebuilt.* workers=2 ' "$STATE/hyb-master.log"

job_yaml ipm 'algorithm: {ipm: {loss: logistic, l2: 1, mixing: examples, maxEpochs: 40, tolerance: 1e-9, sgdRate: 0.25, seed: 5}}' \
  'workers: {replicas: 2}' | k apply -f - >/dev/null
check "an ipm TrainingJob is accepted and gets its master pod, service and 2 workers" until_ok 60 two_worker_objects ipm
check "the master pod runs linea master --algorithm ipm with every field of the job's block (allreduce: ranges, the default)" \
  has_flags ipm-master --algorithm ipm --loss logistic --l2 1 --mixing examples --epochs 40 --tolerance 0.000000001 \
  --sgd-rate 0.25 --seed 5 --allreduce ranges --slots 2
# Mixtures do not converge to the regularized optimum: a run that used its epoch budget says so.
run_batch_job ipm ipm MaxEpochsReached "s['epochs'] == 40"
check "its allreduce ran as the range aggregation (no tree in the master's log)" \
  bash -c "! grep -q 'allreduce tree' '$STATE/ipm-master.log'"

# ---- No secret outside its Secret (issue 18). Everything a user of the cluster or of this
# machine can read is searched for every secret this run made or used: the token of every job
# that left an event (the HMAC of its uid under the operator key, computed here as the
# operator does), the token files read from the jobs' Secrets, the operator key, the S3 keys
# of the s3-creds Secret, and every private key (the PEM lines of the job keys read from the
# Secrets, and any "PRIVATE KEY" header). Searched: every pod object (args, env, annotations,
# status), every Event, every TrainingJob (spec and status), the operator replicas' logs and
# command lines, and the logs and termination messages of the masters and workers run here.
# Env values must come from secretKeyRef / fieldRef: a literal value is allowed only for the
# storage settings that are no secret.
k get pods -A -o json >"$STATE/all-pods.json"
k get events -A -o json >"$STATE/all-events.json"
k get trainingjobs -A -o json >"$STATE/all-trainingjobs.json"
for pid in "$OPERATOR_PID" "$STANDBY_PID"; do
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" >"$STATE/operator-$pid.cmdline"
done
secret_files=("$STATE"/*-tls/token "$STATE"/*-tls/*.key)
searched=("$STATE"/all-pods.json "$STATE"/all-events.json "$STATE"/all-trainingjobs.json "$STATE"/operator*.log
  "$STATE"/operator-*.cmdline "$STATE"/master.log "$STATE"/poll-*.log "$STATE"/once-*.log "$STATE"/svm-*.log
  "$STATE"/shrink-*.log "$STATE"/hyb-*.log "$STATE"/ipm-*.log "$STATE"/*.termination)
no_secret_anywhere() {
  python3 - "$STATE/all-events.json" "$STATE/all-pods.json" e2e-operator-key-0123456789 "$S3_ACCESS_KEY" "$S3_SECRET_KEY" \
    "${#secret_files[@]}" "${secret_files[@]}" "${searched[@]}" <<'PY'
import hashlib, hmac, json, os, sys
events, pods, operator_key, access_key, secret_key, count = sys.argv[1:7]
files, searched = sys.argv[7:7 + int(count)], [p for p in sys.argv[7 + int(count):] if os.path.exists(p)]
uids = {e["involvedObject"].get("uid") for e in json.load(open(events))["items"]
        if e["involvedObject"].get("kind") == "TrainingJob"} - {None}
secrets = {f"token of job {uid}": hmac.new(operator_key.encode(), uid.encode(), hashlib.sha256).hexdigest() for uid in uids}
secrets.update({"the operator key": operator_key, "the S3 access key": access_key, "the S3 secret key": secret_key})
for f in files:
    text = open(f).read().strip()
    if "PRIVATE KEY" in text:
        for i, line in enumerate(l for l in text.splitlines() if not l.startswith("-----")):
            secrets[f"line {i} of {f}"] = line
    else:
        secrets[f] = text
secrets["a PEM private key header"] = "PRIVATE KEY"
problems = []
for path in searched:
    text = open(path, errors="replace").read()
    problems += [f"{name} in {path}" for name, value in secrets.items() if len(value) >= 11 and value in text]
literal_ok = {"AWS_ENDPOINT_URL", "AWS_REGION", "LINEA_S3_PATH_STYLE"}
for pod in json.load(open(pods))["items"]:
    for c in pod["spec"].get("containers", []) + pod["spec"].get("initContainers", []):
        for e in c.get("env", []):
            source = e.get("valueFrom", {})
            if "value" in e and e["name"] not in literal_ok or source and not ({"secretKeyRef", "fieldRef"} & source.keys()):
                problems.append(f"pod {pod['metadata']['name']}: env {e['name']} is {e}")
if len(uids) < 5 or not any("once" in f for f in files):
    problems.append(f"too little to search for: {len(uids)} job uids, files {files}")
print(f"note: {len(secrets)} secrets ({len(uids)} job tokens) searched for in {len(searched)} files: none found"
      if not problems else "\n".join(problems))
sys.exit(1 if problems else 0)
PY
}
check "no job token, operator key, S3 key or private key in any pod, event, TrainingJob, or log, nor in a command line" \
  no_secret_anywhere
