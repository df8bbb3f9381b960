"""Criteo TSV (criteo-gen's, with its crosses) on stdin -> LIBSVM text on stdout, streaming.

The peers' input for bench/beyond-memory.sh: the same features as `linea prepare --format
criteo` (peerdata.criteo_lines: linea's log2 buckets for I1-I13, one-hot C1-C26 and the
crosses C27...), numbered in order of first appearance, labels -1/+1; the bias is the
trainer's (LIBLINEAR's -B 1). Prints rows, non-zeros and features to stderr. Holds only
the vocabulary in memory (about 150 bytes per feature in Python)."""
import sys

from peerdata import criteo_lines


def main():
    vocab = {}
    rows = nnz = 0
    out = sys.stdout
    for label, feats in criteo_lines(sys.stdin):
        idx = sorted({vocab.setdefault(k, len(vocab) + 1) for k, _ in feats})
        out.write(("+1 " if label > 0 else "-1 ") + " ".join(f"{j}:1" for j in idx) + "\n")
        rows += 1
        nnz += len(idx)
    print(f"criteo_libsvm: {rows} rows, {nnz} non-zeros, {len(vocab)} features", file=sys.stderr)


if __name__ == "__main__":
    main()
