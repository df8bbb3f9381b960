# Sourced by e2e/operator.sh: a job's pods played by real `linea master` / `linea worker`
# processes here. There is no kubelet: the operator builds the pods, and each process runs
# with exactly its pod's arguments and environment, only addresses, paths and the secret
# files made local; the test then reports the master's end to the API server as a kubelet
# would, so the operator sees what it would see in a cluster.
#
# Uses operator.sh's k, jp, check, until_ok, job_tls, set_terminated, KUBECTL, LINEA_BIN,
# HERE and STATE (which holds the a9a grid). Keeps the running master's pid in MASTER_PID
# and every worker it starts in RUN_PIDS (both killed by operator.sh on exit).

RUN_PIDS="${RUN_PIDS:-}"

# pod_arg_list <pod>: the pod's container args as JSON.
pod_arg_list() { jp "pod/$1" '{.spec.containers[0].args}'; }

# local_args <pod> <flag>=<value>...: the pod's container args, one per line, with each
# named flag's value replaced; fails if the pod has no such flag.
local_args() {
  python3 -c 'import json, sys
args = json.loads(sys.argv[1])
for flag, value in (a.split("=", 1) for a in sys.argv[2:]):
    i = args.index(flag)
    args[i + 1] = value
print("\n".join(args))' "$(pod_arg_list "$1")" "${@:2}"
}

# has_args <pod> <args...>: the pod's args contain this exact run of arguments.
has_args() {
  python3 -c 'import json, sys
args, want = json.loads(sys.argv[1]), sys.argv[2:]
sys.exit(0 if any(args[i:i + len(want)] == want for i in range(len(args))) else 1)' "$(pod_arg_list "$1")" "${@:2}" ||
    { echo "args of $1: $(pod_arg_list "$1")"; false; }
}

# pod_env <pod>: the pod's container environment as NAME=value lines, resolved as the
# kubelet resolves it: a secretKeyRef read from its Secret (an optional key that is absent
# left out), the pod IP made 127.0.0.1.
pod_env() {
  python3 - "$KUBECTL" "$(jp "pod/$1" '{.spec.containers[0].env}')" <<'PY'
import base64, json, subprocess, sys
kubectl, env = sys.argv[1], json.loads(sys.argv[2] or "[]")
for var in env:
    source = var.get("valueFrom", {})
    if "value" in var:
        value = var["value"]
    elif source.get("fieldRef", {}).get("fieldPath") == "status.podIP":
        value = "127.0.0.1"
    elif "secretKeyRef" in source:
        ref = source["secretKeyRef"]
        data = json.loads(subprocess.run([kubectl, "-n", "ml", "get", "secret", ref["name"], "-o", "json"],
                                         check=True, capture_output=True, text=True).stdout).get("data", {})
        if ref["key"] not in data and ref.get("optional"):
            continue
        value = base64.b64decode(data[ref["key"]]).decode()
    else:
        sys.exit(f"{var['name']}: no way to resolve {var}")
    print(f"{var['name']}={value}")
PY
}

# port_free: the port the hand-run masters listen on (7070) is free: the previous master's
# listener is gone (SO_REUSEADDR as tokio binds, so connections in TIME_WAIT do not count).
port_free() { python3 -c 'import socket; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 7070))'; }

# start_master <job> [metrics address]: the job's master pod as a process listening on
# 127.0.0.1:7070 (once the previous master's port is free), with the job's TLS files read
# from its Secret. Its termination message goes to $STATE/<job>.termination, its log to
# $STATE/<job>-master.log, its arguments (one a line) to $STATE/<job>.master-args; its pid
# in MASTER_PID.
start_master() {
  local job="$1" args_text env_text args vars=()
  job_tls "$job" master "$STATE/$job-master-tls"
  job_tls "$job" client "$STATE/$job-client-tls"
  until_ok 30 port_free
  args_text="$(local_args "$job-master" --data="$STATE/grid" --model="$STATE/$job.model" \
    --checkpoint="$STATE/$job.model.checkpoint" --listen=127.0.0.1:7070 --secret-file="$STATE/$job-master-tls/token" \
    --tls-dir="$STATE/$job-master-tls" --metrics-listen="${2:-127.0.0.1:0}")"
  env_text="$(pod_env "$job-master")"
  printf '%s\n' "$args_text" >"$STATE/$job.master-args"
  mapfile -t args <<<"$args_text"
  [ -z "$env_text" ] || mapfile -t vars <<<"$env_text"
  LINEA_TERMINATION_LOG="$STATE/$job.termination" env "${vars[@]}" "$LINEA_BIN" --quiet "${args[@]}" \
    >"$STATE/$job-master.log" 2>&1 &
  MASTER_PID=$!
}

# start_workers <job> <index>...: those worker pods as processes (each one's hostname its
# pod's name, as in a pod), which reach the master on 127.0.0.1 and name it by its Service.
# Every command line is read first (a pod's args and env take kubectl calls), then all start
# at once, as pods that run together: a master does not wait for its workers, and a run of a
# second would otherwise be over before a worker started later joined. Logs in
# $STATE/<job>-worker-<index>.log; pids in STARTED_WORKERS, in the order given (and in RUN_PIDS).
start_workers() {
  local job="$1" index pod args_text env_text args vars
  shift
  for index in "$@"; do
    pod="$job-worker-$index"
    args_text="$(local_args "$pod" --master=127.0.0.1:7070 --listen=127.0.0.1:0 \
      --secret-file="$STATE/$job-client-tls/token" --tls-dir="$STATE/$job-client-tls")"
    env_text="$(pod_env "$pod")"
    printf '%s\n' "$args_text" >"$STATE/$pod.args"
    printf '%s' "$env_text" >"$STATE/$pod.env"
  done
  STARTED_WORKERS=()
  for index in "$@"; do
    pod="$job-worker-$index"
    mapfile -t args <"$STATE/$pod.args"
    mapfile -t vars <"$STATE/$pod.env"
    HOSTNAME="$pod" env "${vars[@]}" "$LINEA_BIN" "${args[@]}" --master-name "$job-master.ml.svc" --threads 1 \
      >"$STATE/$pod.log" 2>&1 &
    STARTED_WORKERS+=($!)
    RUN_PIDS="$RUN_PIDS $!"
  done
}

# master_pod_running <job>: what the kubelet reports once the master runs, with the pod IP
# the operator polls the master's status at (127.0.0.1: the hand-run master).
master_pod_running() {
  k -n ml patch pod "$1-master" --subresource=status --type=merge \
    -p '{"status":{"phase":"Running","podIP":"127.0.0.1","podIPs":[{"ip":"127.0.0.1"}]}}' >/dev/null
}

master_done() { ! kill -0 "$MASTER_PID" 2>/dev/null; }

# master_finished <algorithm> <job> <what its summary says> <condition>: checks that the
# hand-run master runs to the end and exits 0 with a termination message (the summary `s`
# of the model it wrote) that meets the Python condition; then reports its pod Succeeded
# with that message, as the kubelet would.
master_finished() {
  local job="$2" rc=0
  check "the $1 master runs to the end" until_ok 600 master_done
  wait "$MASTER_PID" || rc=$?
  check "... exits 0 and its termination message $3" python3 -c '
import json, sys
rc, path, condition = sys.argv[1:]
s = json.load(open(path))
sys.exit(0 if rc == "0" and eval(f"({condition})") else f"rc {rc}, {s}")' "$rc" "$STATE/$job.termination" "$4"
  set_terminated "$job-master" Succeeded 0 Completed "$(cat "$STATE/$job.termination")"
}

# listed <job> <condition>: `kubectl get tj <job>` with its default columns, as a user sees
# it, read by the header's column positions into `row` (column -> text; "" when the cell is
# empty or <none>) for a Python condition that also sees `progress` (the job's
# status.progress). The table is shown as a note.
listed() {
  k -n ml get tj "$1" >"$STATE/$1.get"
  python3 -c '
import json, sys
header, line = open(sys.argv[1]).read().splitlines()[:2]
starts = [i for i, c in enumerate(header) if c != " " and (i == 0 or header[i - 1] == " ")]
row = {name: line[a:b].strip() for name, a, b in zip(header.split(), starts, starts[1:] + [None])}
row = {name: "" if text == "<none>" else text for name, text in row.items()}
progress = json.loads(sys.argv[2] or "{}")
sys.exit(0 if eval(f"({sys.argv[3]})") else f"{row} vs status.progress {progress}")' \
    "$STATE/$1.get" "$(jp "tj/$1" '{.status.progress}')" "$2" || return 1
  sed 's/^/note: /' "$STATE/$1.get"
}

# exited <pid>...: none of these processes runs any more.
exited() {
  local pid
  for pid in "$@"; do ! kill -0 "$pid" 2>/dev/null || return 1; done
}

# train_reference <job> <linea train options...>: `linea train` with the job's hand-run
# master's own arguments (e2e/train_args.py) and these options, writing
# $STATE/<job>-reference.model; what it says is shown if it fails.
train_reference() {
  local job="$1" out master_args train_args
  shift
  mapfile -t master_args <"$STATE/$job.master-args"
  mapfile -t train_args < <(python3 "$HERE/train_args.py" --model "$STATE/$job-reference.model" -- "${master_args[@]}")
  out="$("$LINEA_BIN" --quiet "${train_args[@]}" "$@" 2>&1)" || { echo "linea ${train_args[*]} $*: $out"; return 1; }
}
