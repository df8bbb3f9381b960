# Shell helpers shared by the bench/*.sh scripts (sourced after scripts/env.sh).

# prepare_grid WORK NAME INPUT FORMAT: a grid at WORK/NAME made by `linea prepare` from
# INPUT, kept between runs (rebuilt when a run did not finish it).
prepare_grid() {
    [ -f "$1/$2/.done" ] && return
    rm -rf "${1:?}/$2"
    "$CARGO_TARGET_DIR/release/linea" prepare --input "$3" --format "$4" --output "$1/$2" >&2
    touch "$1/$2/.done"
}

# run_peer_sets VENV OUT [run_peers.py options...] -- DATASET:LOSS...: each set through
# bench/peers/run_peers.py with l2 = 1 and 2 interleaved repeats (A B A B), into
# OUT/<dataset>.<loss>.l2=1.jsonl, the machine's load logged before each set and at the end.
run_peer_sets() {
    local venv=$1 out=$2 options=() entry ds loss
    shift 2
    while [ "$1" != -- ]; do options+=("$1"); shift; done
    shift
    mkdir -p "$out"
    for entry in "$@"; do
        ds=${entry%%:*} loss=${entry##*:}
        echo "== $ds ($loss) $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
        nice -n 10 "$venv/bin/python" bench/peers/run_peers.py --dataset "$ds" --loss "$loss" --l2 1 \
            --linea "$CARGO_TARGET_DIR/release/linea" --out "$out/$ds.$loss.l2=1.jsonl.tmp" --repeats 2 \
            "${options[@]}"
        mv "$out/$ds.$loss.l2=1.jsonl.tmp" "$out/$ds.$loss.l2=1.jsonl"
    done
    echo "== done $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
}
