#!/usr/bin/env bash
# `linea prepare` against the peers' own loading, in one run (issue 20): input MB/s per
# core of linea prepare on 1 and 2 threads, LIBLINEAR's CLI reading the same examples as
# libsvm text, and VW creating its cache from them as VW text. Repeats are interleaved
# (A B A B), and the load average is printed before and after.
#
#   bench/prepare-bench.sh [REPEATS [DATASET]]   (default 2 repeats, every dataset)
#
# Each tool reads its own format (linea: the original file; LIBLINEAR: libsvm; VW: VW
# text), written once per run by bench/peers/loading_inputs.py into a temporary folder that
# is removed at the end (the 1M-row Criteo text is ~0.8 GB for both peers together).
# What is timed:
#   linea      `linea prepare --threads T` (parse, number, compress, write the grid)
#   liblinear  `liblinear-train -s 7 -e 1e9 -B 1 -q`: read_problem, then one dual CD pass
#              (it stops after the first outer iteration) and the model written
#   vw         `vw -d FILE --cache_file C -k --passes 1 --quiet`: the cache written while
#              one online pass learns (VW has no parse-only mode); the Python entry point's
#              start-up is printed apart (a one-line input)
# Prints one line per run: dataset tool repeat input_bytes rows wall_s cpu_s MB/s MB/cpu-s.
set -euo pipefail
. "$(dirname "$0")/../scripts/env.sh"
repeats="${1:-2}"
only="${2:-}"
data="${LINEA_DATA:-$LINEA_ROOT/../shared/data}"
scaled="${LINEA_BENCH_SCALED:-$LINEA_CACHE/bench/scaled}"
VENV="$(bash "$LINEA_ROOT/bench/peers/setup.sh")"
PY="$VENV/bin/python"
build_release --test cli
work="$(mktemp -d "${TMPDIR:-/tmp}/linea-prepare-bench.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# name | input | kind for loading_inputs.py | linea prepare arguments
sets=(
    "a9a|$data/a9a/a9a.train.libsvm|libsvm|--format libsvm"
    "criteo-sample|$data/criteo-sample/train.tsv|criteo|--format criteo"
    "criteo-1m|$scaled/criteo-1000000.tsv|criteo|--format criteo"
    "protein|$data/protein-kdd2004/protein.parquet|parquet|--format parquet --label target --ignore EXAMPLE_ID,BLOCK_ID"
)

# run NAME TOOL REPEAT INPUT ROWS COMMAND...: one timed run, one line of output.
run() {
    local name=$1 tool=$2 repeat=$3 input=$4 rows=$5
    shift 5
    local bytes
    bytes=$(stat -c %s "$input")
    /usr/bin/time -f "%e %U %S" -o "$work/time" nice -n 19 "$@" >/dev/null 2>"$work/stderr" || {
        echo "$name $tool $repeat FAILED: $(tail -3 "$work/stderr")"
        return
    }
    read -r wall user sys <"$work/time"
    awk -v n="$name" -v t="$tool" -v r="$repeat" -v b="$bytes" -v rows="$rows" -v w="$wall" -v u="$user" -v s="$sys" \
        'BEGIN { c = u + s; printf "%s %s %s %d %d %.2f %.2f %.1f %.1f\n", n, t, r, b, rows, w, c, b / 1e6 / w, b / 1e6 / c }'
}

echo "# $(date -u +%FT%TZ) $(uptime)"
echo "# dataset tool repeat input_bytes rows wall_s cpu_s MB/s MB/cpu-s"
printf '1 |f a\n' >"$work/one.vw"
run startup vw-python 1 "$work/one.vw" 1 "$PY" -m vowpalwabbit -d "$work/one.vw" --cache_file "$work/one.cache" -k \
    --passes 1 --quiet -f "$work/one.model"
for entry in "${sets[@]}"; do
    IFS='|' read -r name input kind prep <<<"$entry"
    [ -z "$only" ] || [ "$only" = "$name" ] || continue
    [ -f "$input" ] || { echo "$name: $input missing, skipped"; continue; }
    "$PY" "$LINEA_ROOT/bench/peers/loading_inputs.py" "$kind" "$input" "$work/$name"
    libsvm="$work/$name.libsvm"
    [ "$kind" = libsvm ] && libsvm="$input"
    rows=$(grep -c . "$libsvm")
    for repeat in $(seq "$repeats"); do
        for threads in 1 2; do
            rm -rf "$work/grid"
            # shellcheck disable=SC2086
            run "$name" "linea-t$threads" "$repeat" "$input" "$rows" \
                "$LINEA_BIN" prepare --input "$input" --output "$work/grid" --threads "$threads" $prep
        done
        run "$name" liblinear "$repeat" "$libsvm" "$rows" \
            liblinear-train -s 7 -e 1e9 -B 1 -q "$libsvm" "$work/ll.model"
        rm -f "$work/vw.cache"
        run "$name" vw-cache "$repeat" "$work/$name.vw" "$rows" \
            "$PY" -m vowpalwabbit -d "$work/$name.vw" --cache_file "$work/vw.cache" -k --passes 1 --quiet \
            -f "$work/vw.model"
    done
    rm -rf "$work/grid" "$work/$name.libsvm" "$work/$name.vw" "$work/vw.cache"
done
echo "# $(date -u +%FT%TZ) $(uptime)"
