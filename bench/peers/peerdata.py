"""Dataset loading and objective evaluation shared by reference.py and run_peers.py.

Every dataset is turned into a float64 CSR matrix X whose LAST column is the
always-on bias feature (value 1), exactly like linea and LIBLINEAR `-B 1`.
The objective is linea's:

    logistic: sum_i log(1 + exp(-y_i w.x_i)) + l2 * ||w||^2 + l1 * ||w||_1   (y in {-1,+1})
    squared:  sum_i (y_i - w.x_i)^2          + l2 * ||w||^2 + l1 * ||w||_1

Featurisation per format (documented in README.md; the same rules must be used by
anything whose objective is compared with these numbers):
  libsvm   column = feature id (1-based ids, column id-1); labels > 0 -> +1, else -1
  vw       one feature per "namespace^token" (value after ':' or 1); repeated tokens add up
  criteo   linea's own featurisation (docs/data-format.md, worker/src/input/mod.rs): 13 integer
           columns I1..I13 -> one-hot "I<j>^<bucket>", bucket = floor(2 log2(1 + |v|)) written
           with a leading "-" when v < 0 (v = 0 -> bucket "0", present); 26 categorical
           columns -> "C<j>^<hash>"; empty -> no feature; all values 1
  tsv      dense, label first (higgs): column j = field j
  parquet  numeric columns dense as they are, string columns one-hot "<col>^<value>"
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

DATA_ROOT = os.environ.get("LINEA_DATA", "/work/shared/data")
# Scaled-up sets built by bench/run-benchmarks.sh with scale-criteo (see that script).
SCALED_ROOT = os.environ.get("LINEA_BENCH_SCALED",
                             os.path.join(os.environ.get("LINEA_CACHE", os.path.expanduser("~/.cache/linea")),
                                          "bench", "scaled"))


@dataclass
class Spec:
    name: str
    fmt: str                   # libsvm | vw | criteo | tsv | parquet
    train: str
    tests: dict = field(default_factory=dict)   # split name -> path
    loss: str = "logistic"     # natural loss
    label_col: str | None = None
    drop_cols: tuple = ()
    positive: object = None    # parquet: label value that is +1
    linea_format: str | None = None  # what `linea prepare --format` gets for the original file
    # linea prepares the source file itself instead of a harness-written VW copy; only for
    # formats whose featurisation above is linea's own (criteo). run_peers.py re-evaluates
    # linea's weights on this module's matrix, which checks that claim on every run.
    linea_reads_source: bool = False
    # parsed matrices cached in SCALED_ROOT/<name>.peerdata.npz (parsing 10M rows in Python
    # takes ~10 minutes; reference.py and run_peers.py both need them)
    cache: bool = False


def _p(*a):
    return os.path.join(DATA_ROOT, *a)


DATASETS = {
    "a9a": Spec("a9a", "libsvm", _p("a9a", "a9a.train.libsvm"),
                {"test": _p("a9a", "a9a.test.libsvm")}, linea_format="libsvm"),
    "w8a": Spec("w8a", "libsvm", _p("w8a", "w8a.libsvm"), linea_format="libsvm"),
    "rcv1-small": Spec("rcv1-small", "vw", _p("rcv1-small", "rcv1_small.vw"), linea_format="vw"),
    "movielens-100k": Spec("movielens-100k", "vw", _p("movielens-100k", "ratings.vw"),
                           loss="squared", linea_format="vw"),
    "criteo-sample": Spec("criteo-sample", "criteo", _p("criteo-sample", "train.tsv"),
                          {"dev": _p("criteo-sample", "dev.tsv"), "test": _p("criteo-sample", "test.tsv")},
                          linea_format="criteo"),
    # The Criteo sample scaled to 1,000,000 rows by scale-criteo (bench/src/bin/scale-criteo.rs):
    # row i = sample row i mod 7200, categoricals re-hashed with (value, replica mod 16, column).
    # dev/test = the sample's dev/test passed through scale-criteo with as many rows as they
    # have (replica 0 hashing, so their categories match replicas 0, 16, 32, ... of train).
    "criteo-1m": Spec("criteo-1m", "criteo", os.path.join(SCALED_ROOT, "criteo-1000000.tsv"),
                      {"dev": os.path.join(SCALED_ROOT, "criteo-dev.tsv"),
                       "test": os.path.join(SCALED_ROOT, "criteo-test.tsv")},
                      linea_format="criteo"),
    # The same rule to 10,000,000 rows (1,389 replicas, so each of the 16 x 7,200 distinct rows
    # occurs 86 or 87 times; the features are those of criteo-1m): rows grow 10x, d stays.
    "criteo-10m": Spec("criteo-10m", "criteo", os.path.join(SCALED_ROOT, "criteo-10000000.tsv"),
                       {"dev": os.path.join(SCALED_ROOT, "criteo-dev.tsv"),
                        "test": os.path.join(SCALED_ROOT, "criteo-test.tsv")},
                       linea_format="criteo", linea_reads_source=True, cache=True),
    "higgs-sample": Spec("higgs-sample", "tsv", _p("higgs-sample", "higgs.train.tsv"),
                         {"test": _p("higgs-sample", "higgs.test.tsv")}, linea_format="csv"),
    "adult": Spec("adult", "parquet", _p("adult", "adult.parquet"), label_col="income",
                  positive=">50K", linea_format="parquet"),
    "protein-kdd2004": Spec("protein-kdd2004", "parquet", _p("protein-kdd2004", "protein.parquet"),
                            label_col="target", drop_cols=("EXAMPLE_ID", "BLOCK_ID"), positive=1,
                            linea_format="parquet"),
}


@dataclass
class Data:
    X: sp.csr_matrix          # n x d, last column = bias (1.0)
    y_raw: np.ndarray         # labels as read (float64)
    names: list | None        # feature names for columns 0..d-2 (None for libsvm: id = col+1)

    def y(self, loss):
        if loss == "logistic":
            return np.where(self.y_raw > 0, 1.0, -1.0)
        return self.y_raw.astype(np.float64)


# ---------------------------------------------------------------- parsers (token level)

def _vw_rows(path):
    """yield (label, [(key, value), ...]) for a VW text file."""
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            parts = line.rstrip("\n").split("|")
            head = parts[0].split()
            label = float(head[0])
            feats = []
            for seg in parts[1:]:
                toks = seg.split()
                if not toks or seg[:1].isspace():
                    ns, toks = " ", toks          # default namespace
                else:
                    ns, toks = toks[0].split(":")[0], toks[1:]
                for t in toks:
                    if ":" in t:
                        k, v = t.rsplit(":", 1)
                        feats.append((ns + "^" + k, float(v)))
                    else:
                        feats.append((ns + "^" + t, 1.0))
            yield label, feats


# Bumped whenever a featurisation changes: run_peers.py wipes scratch files written under another.
FEATURISATION = "2 (criteo: linea's log2 buckets)"
_LN_2 = math.log(2.0)


def _criteo_bucket(v: int) -> str:
    """linea's `--numeric buckets`: sign(x) * floor(2 log2(1 + |x|)), computed exactly like
    worker/src/input/mod.rs (2 * ln_1p(|x|) / LN_2, floored), key "-<b>" for x < 0."""
    b = int(math.floor(2.0 * math.log1p(abs(float(v))) / _LN_2))
    return f"-{b}" if v < 0 else str(b)


def _criteo_rows(path):
    with open(path) as f:
        yield from criteo_lines(f)


def criteo_lines(f):
    """yield (label, [(key, 1.0), ...]) for Criteo TSV lines."""
    for line in f:
        if not line.strip():
            continue
        c = line.rstrip("\n").split("\t")
        c += [""] * (40 - len(c))
        feats = []
        for j in range(13):
            s = c[1 + j]
            if s != "":
                feats.append((f"I{j+1}^{_criteo_bucket(int(s))}", 1.0))
        # C1-C26, then any further columns as C27, C28, ... (criteo-gen's hashed
        # crosses), as `linea prepare --format criteo` reads them.
        for j in range(len(c) - 14):
            s = c[14 + j]
            if s != "":
                feats.append((f"C{j+1}^{s}", 1.0))
        yield float(c[0]), feats


def _build_keyed(rows_per_split, vocab=None, chunk_rows=500_000):
    """rows_per_split: list of row iterators; vocab built from the first (train) split only.
    Unknown test features are dropped (they would get weight 0 anyway). Rows are gathered in
    Python lists of at most `chunk_rows` rows and then moved into numpy arrays, so that a
    10M-row set needs about the memory of its final CSR matrix, not of 300M Python objects."""
    out = []
    build = vocab is None
    vocab = {} if build else vocab
    for si, rows in enumerate(rows_per_split):
        chunks, lengths, labels = [], [], []
        indices, vals = [], []

        def flush():
            chunks.append((np.array(indices, dtype=np.int64), np.array(vals, dtype=np.float64)))
            indices.clear()
            vals.clear()

        for label, feats in rows:
            acc = {}
            for k, v in feats:
                if si == 0 and build and k not in vocab:
                    vocab[k] = len(vocab)
                j = vocab.get(k)
                if j is not None:
                    acc[j] = acc.get(j, 0.0) + v
            indices.extend(acc.keys())
            vals.extend(acc.values())
            lengths.append(len(acc))
            labels.append(label)
            if len(lengths) % chunk_rows == 0:
                flush()
        flush()
        indptr = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        indices = np.concatenate([c[0] for c in chunks])
        vals = np.concatenate([c[1] for c in chunks])
        chunks.clear()
        out.append((indptr, indices, vals, np.array(labels, dtype=np.float64)))
    d = len(vocab)
    mats = []
    for indptr, indices, vals, labels in out:
        n = len(labels)
        X = sp.csr_matrix((vals, indices, indptr), shape=(n, d))
        mats.append((X, labels))
    names = [None] * d
    for k, j in vocab.items():
        names[j] = k
    return mats, names


def _add_bias(X):
    """X with the always-on bias as its last column, indices sorted in every row. Built by
    inserting one entry at the end of each row (no sparse hstack: at 10M rows its COO
    intermediates would need three times the matrix's memory)."""
    X = sp.csr_matrix(X).astype(np.float64, copy=False)
    X.sort_indices()
    n, d = X.shape
    ends = X.indptr[1:]
    indices = np.insert(X.indices, ends, d)
    data = np.insert(X.data, ends, 1.0)
    indptr = X.indptr + np.arange(n + 1, dtype=X.indptr.dtype)
    return sp.csr_matrix((data, indices, indptr), shape=(n, d + 1))


_CACHE = {}


def load(name: str):
    """Returns (train Data, {split: Data}); feature spaces are aligned (train vocabulary)."""
    if name in _CACHE:
        return _CACHE[name]
    s = DATASETS[name]
    if s.cache:
        _CACHE[name] = _load_cached(name, s)
        return _CACHE[name]
    _CACHE[name] = _parse(s)
    return _CACHE[name]


def _load_cached(name, s):
    path = os.path.join(SCALED_ROOT, f"{name}.peerdata.npz")
    if os.path.exists(path) and os.path.getmtime(path) > os.path.getmtime(s.train):
        z = np.load(path)
        if str(z["featurisation"]) == FEATURISATION:
            names = z["names"].tolist()
            splits = {}
            for split in z["splits"].tolist():
                X = sp.csr_matrix((z[f"{split}_data"], z[f"{split}_indices"], z[f"{split}_indptr"]),
                                  shape=tuple(z[f"{split}_shape"]))
                splits[split] = Data(X, z[f"{split}_y"], names)
            return splits.pop("train"), splits
    train, tests = _parse(s)
    arrs = {}
    for split, d in [("train", train)] + list(tests.items()):
        arrs.update({f"{split}_data": d.X.data, f"{split}_indices": d.X.indices,
                     f"{split}_indptr": d.X.indptr, f"{split}_shape": np.array(d.X.shape),
                     f"{split}_y": d.y_raw})
    tmp = path + ".tmp.npz"
    np.savez(tmp, featurisation=np.array(FEATURISATION), names=np.array(train.names),
             splits=np.array(["train"] + list(tests)), **arrs)
    os.replace(tmp, path)
    return train, tests


def _parse(s):
    paths = [s.train] + list(s.tests.values())
    if s.fmt == "libsvm":
        from sklearn.datasets import load_svmlight_files
        res = load_svmlight_files(paths, zero_based=False, dtype=np.float64)
        mats = [(res[2 * i], res[2 * i + 1]) for i in range(len(paths))]
        names = None
    elif s.fmt in ("vw", "criteo"):
        rows = _vw_rows if s.fmt == "vw" else _criteo_rows
        mats, names = _build_keyed([rows(p) for p in paths])
    elif s.fmt == "tsv":
        mats = []
        for p in paths:
            a = np.loadtxt(p, delimiter="\t", dtype=np.float64)
            mats.append((sp.csr_matrix(a[:, 1:]), a[:, 0]))
        names = [f"x{j+1}" for j in range(mats[0][0].shape[1])]
    elif s.fmt == "parquet":
        import pyarrow.parquet as pq
        t = pq.read_table(s.train).to_pydict()
        lab = t.pop(s.label_col)
        for c in s.drop_cols:
            t.pop(c, None)
        y = np.array([1.0 if v == s.positive else -1.0 for v in lab])
        rows = []
        cols = list(t.keys())
        for i in range(len(y)):
            feats = []
            for c in cols:
                v = t[c][i]
                if v is None:
                    continue
                if isinstance(v, str):
                    feats.append((f"{c}^{v}", 1.0))
                elif v != 0:
                    feats.append((c, float(v)))
            rows.append((y[i], feats))
        mats, names = _build_keyed([iter(rows)])
    else:
        raise ValueError(s.fmt)
    train = Data(_add_bias(mats[0][0]), np.asarray(mats[0][1], dtype=np.float64), names)
    tests = {}
    for (split, _), (X, y) in zip(s.tests.items(), mats[1:]):
        tests[split] = Data(_add_bias(X), np.asarray(y, dtype=np.float64), names)
    return train, tests


# ---------------------------------------------------------------- objective

def _fsum(a):
    return math.fsum(np.asarray(a, dtype=np.float64).tolist())


def objective(X, y, w, loss, l2, l1=0.0, weights=None):
    """linea's objective in float64 (compensated summation over examples); `weights` counts
    each row that many times (reference.py's deduplicated rows)."""
    w = np.asarray(w, dtype=np.float64)
    z = X @ w
    if loss == "logistic":
        data = np.logaddexp(0.0, -y * z)
    elif loss == "squared":
        data = (y - z) ** 2
    else:
        raise ValueError(loss)
    if weights is not None:
        data = weights * data
    return _fsum(data) + l2 * _fsum(w * w) + (l1 * _fsum(np.abs(w)) if l1 else 0.0)


def gradient(X, y, w, loss, l2):
    z = X @ w
    if loss == "logistic":
        s = -y * _sigmoid(-y * z)
    else:
        s = -2.0 * (y - z)
    return X.T @ s + 2.0 * l2 * w


def _sigmoid(t):
    return np.where(t >= 0, 1.0 / (1.0 + np.exp(-np.abs(t))), np.exp(-np.abs(t)) / (1.0 + np.exp(-np.abs(t))))


def effective_l2(X, y, w, loss):
    """KKT calibration: for an (approximately) optimal w of  sum loss + lam ||w||^2,
    grad(sum loss) = -2 lam w; returns the least-squares estimate of lam in linea's units."""
    z = X @ w
    s = -y * _sigmoid(-y * z) if loss == "logistic" else -2.0 * (y - z)
    g = X.T @ s
    return float(-(g @ w) / (2.0 * (w @ w)))


def auc(scores, labels):
    """ROC AUC with tie handling (labels in {-1,+1} or {0,1})."""
    pos = labels > 0
    n1, n0 = int(pos.sum()), int((~pos).sum())
    if n1 == 0 or n0 == 0:
        return float("nan")
    from scipy.stats import rankdata
    r = rankdata(scores)
    return float((r[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def test_metrics(tests, w, loss):
    out = {}
    for split, d in tests.items():
        z = d.X @ w
        y = d.y(loss)
        if loss == "logistic":
            out[split] = {"auc": auc(z, y), "logloss": _fsum(np.logaddexp(0.0, -y * z)) / len(y),
                          "n": len(y)}
        else:
            out[split] = {"rmse": math.sqrt(_fsum((y - z) ** 2) / len(y)), "n": len(y)}
    return out
