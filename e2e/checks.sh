# Sourced by the e2e scripts: counting checks the same way everywhere.
# The sourcing script sets passed=0 failed=0 and prints the totals at exit.

pass() { passed=$((passed + 1)); echo "ok   - $1"; }
fail() { failed=$((failed + 1)); echo "FAIL - $1"; printf '%s\n' "$2" | sed 's/^/       /'; }
# check <name> <cmd...>: runs one check, records the outcome and keeps going. The
# command's output is shown when it fails; lines it marks "note: " always.
check() {
  local name="$1" out; shift
  if out="$("$@" 2>&1)"; then
    pass "$name"; printf '%s\n' "$out" | sed -n 's/^note: /       /p'
  else
    fail "$name" "$out"
  fi
}

# established <crd name>: waits (at most 60 s) until the CRD's Established condition is
# True. Not `kubectl wait --for=condition=Established`: when it reads the CRD while the API
# server still has `status.conditions: null` it fails at once instead of waiting (seen in
# CI: ".status.conditions accessor error: <nil> is of the type <nil>").
established() {
  local crd="$1" deadline=$((SECONDS + 60)) state
  while :; do
    state="$(k get "crd/$crd" -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}' 2>&1)" || true
    [ "$state" = True ] && return 0
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "crd/$crd not Established within 60 s: ${state:-no condition yet}"
      return 1
    fi
    sleep 0.2 # a poll interval: the condition is read again
  done
}
