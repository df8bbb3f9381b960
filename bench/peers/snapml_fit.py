"""Snap ML's dual logistic regression on a peer-harness data.npz, one fit per tolerance:
the fit's seconds, its epochs (n_iter_) and the objective's relative error against the
reference (bench/cocoa-vs-snapml.sh; the same call as run_peers.py's `snapml` tool).

    python snapml_fit.py NPZ REFERENCE THREADS TOL... [--verbose]
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import peerdata as pdt  # noqa: E402
from run_peers import load_npz  # noqa: E402
from snapml import LogisticRegression  # noqa: E402


def main():
    args = [a for a in sys.argv[1:] if a != "--verbose"]
    npz, ref, threads, tols = args[0], float(args[1]), int(args[2]), [float(t) for t in args[3:]]
    train = load_npz(npz)["train"]
    X, y = train.X, train.y("logistic")
    for tol in tols:
        m = LogisticRegression(regularizer=2.0, fit_intercept=False, dual=True, tol=tol, max_iter=1000000,
                               n_jobs=threads, verbose="--verbose" in sys.argv)
        start = time.perf_counter()
        m.fit(X, y)
        fit = time.perf_counter() - start
        w = np.ravel(m.coef_).astype(np.float64)
        if m.classes_[-1] < 0:
            w = -w
        obj = pdt.objective(X, y, w, "logistic", 1.0, 0.0)
        print(json.dumps(dict(threads=threads, tol=tol, fit_seconds=round(fit, 3), epochs=int(m.n_iter_),
                              rel_error=(obj - ref) / ref)), flush=True)


if __name__ == "__main__":
    main()
