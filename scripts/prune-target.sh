#!/usr/bin/env bash
# Removes the test and binary executables of earlier builds from the cached target dir.
#
# Cargo names each executable after a hash of its crate's metadata (dependency versions,
# features), so a changed Cargo.lock leaves the old test binaries (~150 MB each, ~20 of
# them per build) beside the new ones, and the cache outside the repo grows with every
# dependency change: 10 GB of them had piled up in the CI's target dir. This keeps exactly
# the executables the current workspace builds (as `cargo test --no-run` lists them); the
# dependencies' libraries are left alone (they are shared and cheap to keep).
. "$(dirname "$0")/env.sh"
cd "$LINEA_ROOT"

deps="$CARGO_TARGET_DIR/release/deps"
[ -d "$deps" ] || exit 0
current="$(cargo test --release --locked --workspace --no-run --message-format=json -q 2>/dev/null |
    python3 -c '
import json, os, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(os.path.basename(m["executable"]))
')"
[ -n "$current" ] || { echo "prune-target: cargo listed no executables; nothing removed" >&2; exit 0; }
freed=0 removed=0
for f in "$deps"/*; do
    name="${f##*/}"
    # Executables only: no extension (libraries and proc macros have one), the exec bit set.
    case "$name" in *.*) continue ;; esac
    [ -f "$f" ] && [ -x "$f" ] || continue
    # A binary's deps/ file is hard-linked to its copy in release/ (cargo lists only that one).
    [ "$(stat -c %h "$f")" -gt 1 ] && continue
    grep -qxF "$name" <<<"$current" && continue
    freed=$((freed + $(stat -c %s "$f")))
    removed=$((removed + 1))
    rm -f "$f" "$f.d"
done
echo "prune-target: removed $removed executables of earlier builds ($((freed >> 20)) MiB) from $deps"
