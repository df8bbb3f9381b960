"""One LIBLINEAR fit as the harness's liblinear-dual tool makes it, for callgrind.

    valgrind --tool=callgrind --toggle-collect='*train*' \
        "$VENV/bin/python" bench/peers/liblinear_fit.py DATASET EPS [verbose]

Loads $LINEA_CACHE/bench-work/DATASET/data.npz (written by run_peers.py), drops the
harness's bias column and fits `-s 7 -c 0.5 -e EPS -B 1` (logistic loss, l2 = 1) through
the Python binding, so the instructions counted are LIBLINEAR's `train` on the problem the
timed runs use (docs/benchmarks/cocoa-k1-against-liblinear.md, "Less work per epoch outside the arithmetic").
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_peers as rp  # noqa: E402

dataset, eps = sys.argv[1], sys.argv[2]
cache = os.environ.get("LINEA_CACHE", os.path.expanduser("~/.cache/linea"))
data = rp.load_npz(os.path.join(cache, "bench-work", dataset, "data.npz"))
train = data["train"]
from liblinear import liblinearutil as ll  # noqa: E402

problem = ll.problem(train.y("logistic").tolist(), train.X[:, :-1])
problem.set_bias(1.0)
ll.train(problem, ll.parameter(f"-s 7 -c 0.5 -e {eps} -B 1" + ("" if len(sys.argv) > 3 else " -q")))
