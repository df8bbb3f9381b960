# Sourced by e2e/operator.sh: two operator replicas and leader election on the chart's Lease,
# and the time from a node's termination notice to the drain of its worker.
#
# Uses operator.sh's k, jp, check, until_ok, STATE, CARGO_TARGET_DIR and free_port; keeps
# the leader's pid in OPERATOR_PID (what operator.sh stops and kills) and the standby's in
# STANDBY_PID.

LEASE_NS=linea-system LEASE_NAME=linea-operator
LEASE_DURATION=15 RETRY_PERIOD=2 # the operator's defaults (--lease-duration, --retry-period)
STANDBY_PID=""

lease_holder() { k -n "$LEASE_NS" get lease "$LEASE_NAME" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null; }
holder_is() { [[ "$(lease_holder)" == "$1"_* ]]; }

# start_operator <name> <log> <metrics port>: one replica as the chart runs it (its pod name
# and namespace in POD_NAME / POD_NAMESPACE, the chart's job defaults in JOB_DEFAULTS), with
# the chart's ServiceAccount; its pid in
# STARTED_PID (a child of this shell, so `wait` and `kill -0` see it exit).
start_operator() {
  KUBECONFIG="$STATE/operator.kubeconfig" LINEA_OPERATOR_KEY="e2e-operator-key-0123456789" RUST_LOG=info,kube=warn \
    LINEA_JOB_DEFAULT_RESOURCES="$JOB_DEFAULTS" \
    POD_NAME="$1" POD_NAMESPACE="$LEASE_NS" \
    "$CARGO_TARGET_DIR/release/linea-operator" --default-image linea:e2e \
    --metrics-address "127.0.0.1:$3" >>"$2" 2>&1 &
  STARTED_PID=$!
}

# metric <port> <name>: the value of an unlabelled series on that replica's /metrics.
metric() { curl -sf "http://127.0.0.1:$1/metrics" | sed -n "s/^$2 //p"; }

# The first replica leads (it created the Lease); a second one stands by.
leader_and_standby() {
  check "the first replica holds the Lease (created by it, in the release namespace)" until_ok 30 holder_is operator-a
  standby_port="$(free_port)"
  start_operator operator-b "$STATE/operator-b.log" "$standby_port"
  STANDBY_PID="$STARTED_PID"
  standing_by() { grep -q 'standing by: another replica leads' "$STATE/operator-b.log" && holder_is operator-a; }
  check "a second replica stands by while the first leads" until_ok 30 standing_by
}

# leader_failover <job>: kill -9 the leader while <job> runs; the standby takes the Lease
# within the lease duration and carries the job on with the same pods.
leader_failover() {
  local job="$1" pods_before epoch_before killed took over
  pods_before="$(k -n ml get pods -l "linea.io/job-name=$job" -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.uid} {end}')"
  epoch_before="$(jp "tj/$job" '{.status.progress.epoch}')"
  standby_idle() {
    [ "$(metric "$standby_port" linea_operator_leader)" = 0 ] &&
      [ "$(metric "$standby_port" linea_operator_reconcile_duration_seconds_count)" = 0 ] &&
      [ "$(metric "$metrics_port" linea_operator_leader)" = 1 ] ||
      { echo "standby: leader $(metric "$standby_port" linea_operator_leader), reconciles $(metric "$standby_port" linea_operator_reconcile_duration_seconds_count)"; false; }
  }
  check "the standby has reconciled nothing while the leader ran every job so far (/metrics: leader 0, 0 reconciles)" standby_idle
  kill -KILL "$OPERATOR_PID"
  killed="$(date +%s.%N)"
  wait "$OPERATOR_PID" 2>/dev/null || true
  OPERATOR_PID=""
  until_ok $((LEASE_DURATION + 4 * RETRY_PERIOD)) holder_is operator-b || true
  took="$(date +%s.%N)"
  over="$(python3 -c 'import sys; print(f"{float(sys.argv[2]) - float(sys.argv[1]):.1f}")' "$killed" "$took")"
  took_over() {
    holder_is operator-b && [ "$(k -n "$LEASE_NS" get lease "$LEASE_NAME" -o jsonpath='{.spec.leaseTransitions}')" = 1 ] &&
      grep -q 'leading: acquired the Lease' "$STATE/operator-b.log" || { echo "holder: $(lease_holder)"; false; }
    python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)' "$over" $((LEASE_DURATION + 2 * RETRY_PERIOD)) ||
      { echo "took over after $over s"; false; }
    echo "note: the standby led $over s after kill -9 of the leader (lease duration $LEASE_DURATION s, retry period $RETRY_PERIOD s)"
  }
  check "kill -9 of the leader: the standby holds the Lease within the lease duration (+ its retry period)" took_over
  OPERATOR_PID="$STANDBY_PID" STANDBY_PID="" metrics_port="$standby_port"
  job_goes_on() {
    local epoch
    epoch="$(jp "tj/$job" '{.status.progress.epoch}')"
    [ -n "$epoch" ] && [ "$epoch" -gt "$epoch_before" ] && [ "$(metric "$metrics_port" linea_operator_leader)" = 1 ] ||
      { echo "epoch $epoch (before $epoch_before)"; false; }
  }
  check "... and carries the running job on (its status advances past epoch $epoch_before)" until_ok 60 job_goes_on
  same_pods() {
    local now
    now="$(k -n ml get pods -l "linea.io/job-name=$job" -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.uid} {end}')"
    [ "$now" = "$pods_before" ] || { echo "before: $pods_before"$'\n'"after:  $now"; false; }
  }
  check "... with exactly the pods it had (same names and UIDs: none duplicated, none replaced)" same_pods
}

# notice_to_drain <log> <since (epoch seconds)> <pod>: seconds from <since> to the operator's
# "draining a worker" line for <pod> (its log's own timestamp).
notice_to_drain() {
  python3 - "$@" <<'EOF'
import datetime, re, sys
log, since, pod = sys.argv[1], float(sys.argv[2]), sys.argv[3]
for line in open(log, errors="replace"):
    if "draining a worker through the master" in line and f"pod={pod}" in line:
        stamp = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)Z", line)
        if not stamp:
            continue
        at = datetime.datetime.fromisoformat(stamp.group(1)[:26]).replace(tzinfo=datetime.timezone.utc).timestamp()
        if at >= since:
            print(f"{at - since:.3f}")
            sys.exit(0)
sys.exit(f"no drain of {pod} in {log} after {since}")
EOF
}

# The leader gives the Lease up on SIGTERM (after operator.sh stopped it).
lease_released() {
  [ -z "$(lease_holder)" ] && grep -q 'released the Lease' "$STATE/operator-b.log" ||
    { echo "holder: '$(lease_holder)'"; false; }
}

# A replica started after a release leads at once (at its first look), not after the lease
# duration: prints how long it took.
leads_at_once() {
  local started="$1" took
  until_ok "$LEASE_DURATION" holder_is operator-c || { echo "holder: $(lease_holder)"; return 1; }
  took="$(python3 -c 'import sys, time; print(f"{time.time() - float(sys.argv[1]):.1f}")' "$started")"
  python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)' "$took" "$RETRY_PERIOD" ||
    { echo "led after $took s"; return 1; }
  echo "note: led $took s after starting"
}
