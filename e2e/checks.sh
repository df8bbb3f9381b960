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
