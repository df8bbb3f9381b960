#!/usr/bin/env bash
# Past the memory wall (issue 20): genuinely new Criteo rows from criteo-gen
# (bench/src/criteo_gen.rs), prepared into a grid on disk, trained by `linea train
# --workers 1 --cache-mb` so the worker's cell cache holds only part of the grid, with every
# trainer (linea and the peers alike) under one memory cap: `memcap` (bench/src/memcap.rs)
# sums the resident memory of a command's whole process tree and kills the tree above the
# cap, which simulates a machine of CAP_MB (docs/benchmarks/past-the-memory-wall.md, "Past the memory wall").
#
#   bench/beyond-memory.sh [ROWS] [CACHE_MB] [CROSSES] [CAP_MB]
#       (default 1,000,000 rows, 16 MiB, 2 crosses, a cap of 256 MiB; CAP_MB 0: no cap)
#
# A small version runs in minutes: `bench/beyond-memory.sh 100000 4 2 128`. With 8 crosses
# the feature count grows about as fast as the rows, and linea's memory with it: ~112 bytes
# per feature for master and worker together (344 before branch mem20d; docs/benchmarks/past-the-memory-wall.md,
# "Bytes per feature"), so at 1M rows (2.1M features) it needs 387 MiB against LIBLINEAR's
# 659 MiB of feature_nodes: `bench/beyond-memory.sh 1000000 16 8 512`. Prints the
# generated rows' column statistics against the sample's, the grid's size, the memory
# LIBLINEAR needs (16 bytes per feature_node: each non-zero, the bias and the row's
# terminator), then
#  - linea SCD to --tolerance 1e-13 under the cap: its peak memory (master and worker
#    together) and its seconds to 1e-4 and 1e-6 of f*;
#  - the optimum f*: the lowest final objective of SCD, CoCoA (one worker, SDCA) to a
#    duality gap of 1e-10 and L-BFGS (uncapped: they establish f*, they are not the run
#    measured), with CoCoA's gap as a certificate: f* >= CoCoA's objective - its gap;
#  - each peer (LIBLINEAR's CLI, Snap ML, VW --bfgs; LINEA_BENCH_PEERS picks) under the cap
#    on the full set and, when it fails there, on halved prefixes of it down to one that it
#    holds, then once between: what it did (its last error line) and its peak memory.
# At full scale (50M rows: docs/benchmarks/fifty-million-rows.md) the
# knobs below keep it to hours: LINEA_BENCH_PREPARE_THREADS=2 (the default 1 fits a small
# cap), LINEA_BENCH_LBFGS_EPOCHS=0 (no L-BFGS cross-check; CoCoA's gap certifies f*), and
# LINEA_BENCH_LADDER=0 (each peer on the full set only), LINEA_BENCH_SCD_STOP=1e-6 (SCD
# stopped once within that of CoCoA's objective) and LINEA_BENCH_AUTO=1 (also the algorithm
# `linea train` picks by itself, capped like SCD).
# Keeps the grid and the LIBSVM text under LINEA_BENCH_WORK; the TSV is deleted once
# prepared. A benchmark, not a test: it asserts nothing.
. "$(dirname "$0")/../scripts/env.sh"
rows="${1:-1000000}"
cache_mb="${2:-16}"
crosses="${3:-2}"
cap_mb="${4:-256}"
work="${LINEA_BENCH_WORK:-$LINEA_CACHE/bench/criteo-gen-$rows-x$crosses}"
data="${LINEA_DATA:-$LINEA_ROOT/../shared/data}"
peers="${LINEA_BENCH_PEERS:-liblinear,snapml,vw}"
lbfgs_epochs="${LINEA_BENCH_LBFGS_EPOCHS:-1000}"
# SCD's own stop; its times to 1e-4 and 1e-6 of f* need only that it passes 1e-6.
scd_epochs="${LINEA_BENCH_SCD_EPOCHS:-400}"
scd_tolerance="${LINEA_BENCH_SCD_TOLERANCE:-1e-13}"
cocoa_gap="${LINEA_BENCH_COCOA_GAP:-1e-10}"
prepare_threads="${LINEA_BENCH_PREPARE_THREADS:-1}"
ladder="${LINEA_BENCH_LADDER:-1}"
scd_stop="${LINEA_BENCH_SCD_STOP:-}"
auto="${LINEA_BENCH_AUTO:-0}"
bin="$CARGO_TARGET_DIR/release"
load() { cut -d' ' -f1-3 /proc/loadavg; }
capped=(--cap-mb "$cap_mb")
[ "$cap_mb" = 0 ] && capped=()

# LINEA_BENCH_SKIP_BUILD=1: the release binaries are known to be this commit's already (a
# workspace build of the tests may take half an hour on a loaded machine).
[ "${LINEA_BENCH_SKIP_BUILD:-0}" = 1 ] || build_release
venv=$(bash "$LINEA_ROOT/bench/peers/setup.sh")
mkdir -p "$work"
echo "== $(date -u +%T) statistics, load $(load)"
"$bin/criteo-gen" --sample "$data/criteo-sample/train.tsv" --stats "$((rows < 1000000 ? rows : 1000000))" \
    --crosses "$crosses" > "$work/stats.md" || echo "a statistic is off: see $work/stats.md"
tail -1 "$work/stats.md"
if [ ! -f "$work/grid/.done" ]; then
    # A file, though prepare also reads a pipe: the peers' LIBSVM text is made from it too.
    echo "== $(date -u +%T) generate $rows rows, load $(load)"
    "$bin/memcap" --name generate -- "$bin/criteo-gen" --sample "$data/criteo-sample/train.tsv" \
        --rows "$rows" --crosses "$crosses" > "$work/gen.tsv"
    ls -l "$work/gen.tsv"
    echo "== $(date -u +%T) prepare, load $(load)"
    rm -rf "$work/grid"
    # Under the cap too, by default with one thread: two parse in parallel with twice the
    # buffers (1M rows, 2 crosses: 148 MiB with one thread, above 256 MiB with two).
    "$bin/memcap" --name prepare "${capped[@]}" -- "$bin/linea" prepare --quiet --input "$work/gen.tsv" \
        --format criteo --output "$work/grid" --threads "$prepare_threads"
    if [ -n "$peers" ]; then
        echo "== $(date -u +%T) the peers' LIBSVM text, load $(load)"
        (cd "$LINEA_ROOT/bench/peers" && "$venv/bin/python" criteo_libsvm.py < "$work/gen.tsv" > "$work/gen.svm" \
            2> "$work/svm.log")
        cat "$work/svm.log"
    fi
    rm -f "$work/gen.tsv"
    touch "$work/grid/.done"
fi
du -sh "$work/grid"
nnz=$(grep -o '"nnz": *[0-9]*' "$work/grid/manifest.json" | head -1 | grep -o '[0-9]*$' || true)
# The grid's non-zeros count the bias; LIBLINEAR adds a terminator per row.
[ -n "$nnz" ] && echo "LIBLINEAR's feature_nodes: $(((nnz + rows) * 16 / 1048576)) MiB (nnz $nnz with the bias)"

# linea NAME CAP ALGORITHM OPTIONS...: a bounded-cache run under memcap, its trace at
# $work/NAME.csv and memcap's line at $work/NAME.mem.
linea() {
    local name=$1 cap=$2 algorithm=$3
    shift 3
    local limit=()
    [ "$cap" = capped ] && limit=("${capped[@]}")
    echo "== $(date -u +%T) $name ($algorithm $*), load $(load)"
    rm -f "$work/$name.csv" # a last run's trace is not this one's
    "$bin/memcap" --name "$name" "${limit[@]}" -- "$bin/linea" train --quiet --data "$work/grid" \
        --model "$work/$name.model" --algorithm "$algorithm" --workers 1 --threads 2 \
        --cache-mb "$cache_mb" --trace "$work/$name.csv" "$@" 2> >(tee "$work/$name.mem" >&2) ||
        echo "   $name ended with exit $? (137: killed above the cap)"
    echo "   load after $(load)"
}

last() { awk -F, -v c="$2" 'FNR > 1 && $c != "" {v = $c} END {printf "%.17g", v}' "$work/$1.csv"; }

# stop_within NAME RELATIVE PID: SIGTERM to run NAME's master (it ends after the epoch it is
# in, writing its model) once its trace's objective is within RELATIVE of CoCoA's last one,
# while PID (the run's background job) lives: SCD's times to 1e-4 and 1e-6 of f* need only
# that it gets there, which at 50M rows is an hour before --tolerance would stop it. Polls
# the trace, which grows an epoch at a time.
stop_within() {
    local target
    target=$(awk -v f="$(last cocoa 3)" -v r="$2" 'BEGIN {printf "%.17g", f * (1 + r)}')
    while kill -0 "$3" 2> /dev/null; do
        if [ -f "$work/$1.csv" ] && awk -F, -v t="$target" 'FNR > 1 && $3 != "" {v = $3; n++}
                END {exit !(n && v <= t)}' "$work/$1.csv"; then
            echo "   $1 within $2 of CoCoA's objective: stopping it after this epoch"
            # The master only: memcap's command line holds the same words.
            for pid in $(pgrep -f -- "--model $work/$1.model"); do
                [ "$(cat "/proc/$pid/comm" 2> /dev/null)" = linea ] && kill -TERM "$pid"
            done
            return
        fi
        sleep 5
    done
}

# CoCoA first: its certified objective is what SCD is stopped against.
linea cocoa uncapped cocoa --epochs 400 --gap-tolerance "$cocoa_gap"
linea scd capped scd --epochs "$scd_epochs" --tolerance "$scd_tolerance" &
scd_job=$!
[ -n "$scd_stop" ] && stop_within scd "$scd_stop" "$scd_job"
wait "$scd_job"
runs="cocoa scd"
if [ "$auto" = 1 ]; then
    linea auto capped auto
    runs="$runs auto"
fi
if [ "$lbfgs_epochs" != 0 ]; then
    linea lbfgs uncapped lbfgs --epochs "$lbfgs_epochs" --tolerance 0 --gradient-tolerance 1e-12
    runs="$runs lbfgs"
fi
fstar=$(for r in $runs; do last "$r" 3; echo; done | sort -g | head -1)
lower=$(awk -v f="$(last cocoa 3)" -v g="$(last cocoa 4)" 'BEGIN {printf "%.17g", f - g}')
echo "optimum f* = $fstar (the lowest final objective); CoCoA's gap certifies f* >= $lower,"
awk -v f="$fstar" -v l="$lower" 'BEGIN {printf "   so f* is within %.2e of the optimum (relative)\n", (f - l) / f}'
for r in $runs; do
    awk -F, -v f="$fstar" -v n="$r" 'FNR > 1 && $3 != "" {last = $3; e = $1; s = $2} END {
        printf "%s: %d epochs in %.1f s, objective %.12g, %.2e above f*\n", n, e, s, last, (last - f) / f}' \
        "$work/$r.csv"
done
# Times to 1e-4 and 1e-6 of f*, on each run's own clock (its trace's seconds).
for r in $runs; do
    awk -F, -v f="$fstar" -v n="$r" 'FNR > 1 && $3 != "" {
            q = ($3 - f) / f
            if (!t4 && q <= 1e-4) { t4 = $2; e4 = $1 }
            if (!t6 && q <= 1e-6) { t6 = $2; e6 = $1 }
        } END {
            printf "%s: to 1e-4 of f*: %s s (epoch %d), to 1e-6: %s s (epoch %d)\n",
                n, t4 ? t4 : "never", e4, t6 ? t6 : "never", e6
        }' "$work/$r.csv"
    tail -1 "$work/$r.mem"
done

# peer NAME FILE: one peer on one LIBSVM file under the cap; memcap's line and the peer's
# last line of errors at $work/peer-NAME.log.
peer() {
    local name=$1 file=$2 d bits
    case $name in
        liblinear) set -- liblinear-train -s 7 -c 0.5 -e 0.01 -B 1 -q "$file" "$work/liblinear.model" ;;
        snapml) set -- "$venv/bin/python" "$LINEA_ROOT/bench/peers/snapml_libsvm.py" "$file" 1 1e-3 ;;
        vw)
            d=$(grep -o '[0-9]* features' "$work/svm.log" | grep -o '^[0-9]*')
            bits=$(awk -v d="$d" 'BEGIN {b = 10; while (2 ^ (b - 1) < d) b++; print b}')
            rm -f "$work/vw.cache"
            set -- sh -c "sed 's/ / | /' '$file' | '$venv/bin/python' -m vowpalwabbit -d /dev/stdin --bfgs --termination 0 \
                --passes 5 -c --cache_file '$work/vw.cache' -k --holdout_off --loss_function logistic \
                --noconstant --l2 2 -b $bits -f '$work/vw.model' --predict_only_model --quiet" ;;
    esac
    "$bin/memcap" --name "$name" "${capped[@]}" -- "$@" > "$work/peer-$name.log" 2>&1
}

for p in ${peers//,/ }; do
    [ -f "$work/gen.svm" ] || { echo "no $work/gen.svm: prepare the grid again to run the peers"; break; }
    ok=0 bad= n=$rows
    while :; do
        echo "== $(date -u +%T) $p on $n rows, load $(load)"
        if [ "$n" = "$rows" ]; then f="$work/gen.svm"; else head -n "$n" "$work/gen.svm" > "$work/part.svm"; f="$work/part.svm"; fi
        rc=0
        peer "$p" "$f" || rc=$?
        result=held
        [ "$rc" = 137 ] && result=failed
        [ "$rc" != 0 ] && [ "$rc" != 137 ] && { echo "   $p failed (exit $rc), not for memory: see $work/peer-$p.log"; break; }
        { grep -v '^memcap' "$work/peer-$p.log" || true; } | tail -1 | sed 's/^/   /'
        { grep '^memcap' "$work/peer-$p.log" || true; } | sed 's/^/   /'
        if [ "$result" = held ]; then ok=$n; else bad=$n; fi
        [ "$ok" = "$rows" ] && break
        [ "$ladder" = 0 ] && break
        if [ "$ok" = 0 ]; then n=$((n / 2)); [ "$n" -lt 1000 ] && break; continue; fi
        # One step between the largest size held and the smallest that failed.
        [ "$n" = "$ok" ] && [ $((bad - ok)) -gt $((rows / 8)) ] && { n=$(((ok + bad) / 2)); continue; }
        break
    done
    echo "$p: held $ok of $rows rows under the cap${bad:+ (failed at $bad)}"
done
rm -f "$work/part.svm" "$work/vw.cache"
echo "== $(date -u +%T) done, load $(load)"
