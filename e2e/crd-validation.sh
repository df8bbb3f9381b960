#!/usr/bin/env bash
# The TrainingJob CRD against a real kube-apiserver + etcd (e2e/control-plane):
# the generated CRD installs and becomes Established, every valid fixture in
# crds/tests/fixtures is stored, every invalid one is refused with the message
# its `# expect:` header names, and updates to immutable fields are refused.
# Prints `crd validation: N passed, M failed` last; exits non-zero on failure.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
CP="$HERE/control-plane"
. "$CP/versions.sh"
FIXTURES="$ROOT/crds/tests/fixtures"

passed=0 failed=0
STATE=""
finish() {
  local rc=$?
  if [ -n "$STATE" ]; then
    if [ "$rc" -ne 0 ] || [ "$failed" -gt 0 ]; then tail -n 20 "$STATE/kube-apiserver.log" 2>/dev/null || true; fi
    "$CP/stop.sh" "$STATE" >/dev/null 2>&1 || rm -rf "$STATE"
  fi
  if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
  echo "crd validation: $passed passed, $failed failed"
  [ "$failed" -eq 0 ] || exit 1
}
trap finish EXIT

"$CP/build.sh" etcd kubernetes >/dev/null
STATE="$(mktemp -d "${TMPDIR:-/tmp}/linea-crd.XXXXXX")"
rmdir "$STATE"
"$CP/start.sh" "$STATE" >/dev/null
. "$STATE/env"
export KUBECACHEDIR="$STATE/kube-cache"
k() { "$KUBECTL" "$@"; }

. "$HERE/checks.sh"

if out="$(k apply -f "$ROOT/crds/trainingjob.crd.yaml" 2>&1 && established trainingjobs.linea.io 2>&1)"; then
  pass "CRD trainingjobs.linea.io installs and is Established"
else
  fail "CRD installs" "$out"; exit 1
fi

# Namespaces the fixtures name.
for ns in $(sed -n 's/^  namespace: *//p' "$FIXTURES"/*.yaml | sort -u); do
  k create namespace "$ns" >/dev/null
done

# document <file> <n>: the n-th YAML document (1-based) of a fixture
document() { awk -v want="$2" 'BEGIN{n=1} /^---$/{n++; next} n==want' "$1"; }
expect() { sed -n 's/^# expect: //p' "$1" | head -n 1; }

for f in "$FIXTURES"/*.yaml; do
  name="$(basename "$f" .yaml)"
  case "$name" in
    valid-*)
      if out="$(k create -f "$f" 2>&1)"; then pass "$name accepted"; else fail "$name accepted" "$out"; fi ;;
    invalid-*)
      want="$(expect "$f")"
      if out="$(k create -f "$f" 2>&1)"; then
        fail "$name refused" "accepted: $out"
      elif grep -qF -- "$want" <<<"$out"; then
        pass "$name refused: $(grep -oF -- "$want" <<<"$out" | head -n 1)"
      else
        fail "$name refused with '$want'" "$out"
      fi ;;
    update-valid-*)
      if out="$(document "$f" 1 | k create -f - 2>&1 && document "$f" 2 | k replace -f - 2>&1)"; then
        pass "$name: update accepted"
      else
        fail "$name: update accepted" "$out"
      fi ;;
    update-invalid-*)
      want="$(expect "$f")"
      if ! out="$(document "$f" 1 | k create -f - 2>&1)"; then
        fail "$name: first version accepted" "$out"
      elif out="$(document "$f" 2 | k replace -f - 2>&1)"; then
        fail "$name: update refused" "accepted: $out"
      elif grep -qF -- "$want" <<<"$out"; then
        pass "$name: update refused: $want"
      else
        fail "$name: update refused with '$want'" "$out"
      fi ;;
  esac
done

# The printer columns `kubectl get tj` shows.
if out="$(k get tj -A 2>&1)" && head -n 1 <<<"$out" | grep -q "PHASE"; then
  pass "kubectl get tj shows the printer columns: $(head -n 1 <<<"$out" | tr -s ' ')"
else
  fail "kubectl get tj shows the printer columns" "$out"
fi
