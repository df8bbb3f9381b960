"""Snap ML on a LIBSVM file, as bench/beyond-memory.sh runs it under a memory cap.

    python snapml_libsvm.py FILE L2 TOL

Loads FILE with scikit-learn's load_svmlight_file (a float64 CSR: 12 bytes per non-zero
plus the parser's buffers), appends the always-on bias column (peerdata._add_bias, as the
harness does), and fits run_peers.py's `snapml` tool (dual, regularizer 2 * l2, no
intercept, both cores): linea's objective sum log(1 + exp(-y w.x)) + l2 |w|^2. Prints rows,
non-zeros, load and fit seconds."""
import sys
import time

import numpy as np
from sklearn.datasets import load_svmlight_file
from snapml import LogisticRegression

from peerdata import _add_bias


def main():
    path, l2, tol = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    t0 = time.perf_counter()
    X, y = load_svmlight_file(path, dtype=np.float64)
    X = _add_bias(X)
    t1 = time.perf_counter()
    model = LogisticRegression(regularizer=2.0 * l2, fit_intercept=False, dual=True, tol=tol,
                               max_iter=1000000, n_jobs=2)
    model.fit(X, y)
    t2 = time.perf_counter()
    print(f"snapml: {X.shape[0]} rows, {X.nnz} non-zeros, load {t1 - t0:.1f} s, fit {t2 - t1:.1f} s")


if __name__ == "__main__":
    main()
