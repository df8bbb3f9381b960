"""Writes the libsvm and VW text that LIBLINEAR's and VW's loading is timed on in
bench/prepare-bench.sh: the same examples and non-zeros as linea reads from the original.

    python loading_inputs.py KIND INPUT OUT_PREFIX     (KIND: libsvm | criteo | parquet)

Writes OUT_PREFIX.libsvm (not for libsvm input: LIBLINEAR reads the original) and
OUT_PREFIX.vw (streaming: a 1M-row Criteo TSV never sits in
memory). Criteo: label, I1-I13 bucketed as linea does (floor(2 log2(1 + |v|)), "-" for
v < 0), C1-C26 as they are, empty fields absent; libsvm indices number "column^value" in
first-seen order; VW has one namespace per column. Parquet (protein): the label column
`target`, EXAMPLE_ID and BLOCK_ID dropped, every other column dense (zeros absent).
"""
import math
import sys


def criteo(path, out):
    index = {}
    with open(path) as f, open(out + ".libsvm", "w") as ls, open(out + ".vw", "w") as vw:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            label = fields[0]
            keys = []
            for j, v in enumerate(fields[1:14], 1):
                if v:
                    x = float(v)
                    b = math.floor(2 * math.log1p(abs(x)) / math.log(2))
                    keys.append((f"I{j}", ("-" if x < 0 else "") + str(b)))
            for j, v in enumerate(fields[14:40], 1):
                if v:
                    keys.append((f"C{j}", v))
            ids = sorted(index.setdefault(f"{c}^{k}", len(index) + 1) for c, k in keys)
            ls.write(label + "".join(f" {i}:1" for i in ids) + "\n")
            vw.write(("1" if label == "1" else "-1") + "".join(f" |{c} {k}" for c, k in keys) + "\n")


def libsvm(path, out):
    with open(path) as f, open(out + ".vw", "w") as vw:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            label = "1" if float(parts[0]) > 0 else "-1"
            vw.write(label + " |f " + " ".join(parts[1:]) + "\n")


def parquet(path, out):
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    names = [n for n in table.column_names if n not in ("target", "EXAMPLE_ID", "BLOCK_ID")]
    label = table.column("target").to_pylist()
    columns = [table.column(n).to_pylist() for n in names]
    with open(out + ".libsvm", "w") as ls, open(out + ".vw", "w") as vw:
        for i, y in enumerate(label):
            feats = [(j + 1, c[i]) for j, c in enumerate(columns) if c[i] not in (None, 0)]
            body = "".join(f" {j}:{v!r}" for j, v in feats)
            ls.write(f"{int(y)}{body}\n")
            vw.write(("1" if y else "-1") + " |d" + body + "\n")


if __name__ == "__main__":
    kind, path, out = sys.argv[1:4]
    {"criteo": criteo, "libsvm": libsvm, "parquet": parquet}[kind](path, out)
