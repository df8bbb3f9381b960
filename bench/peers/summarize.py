#!/usr/bin/env python3
"""Summarise bench/peers/results/*.jsonl into the peers table of docs/benchmarks/peers.md and plots.

    $VENV/bin/python bench/peers/summarize.py [--results DIR] [--doc FILE] [--plots DIR]

With the canonical results (bench/peers/results) it writes docs/benchmarks/peers.md and
the plots beside it in docs/benchmarks/; with any other --results, RESULTS/tables.md and RESULTS/plots/ unless told
otherwise, so a scratch run never rewrites the published table.

Writes (1) the markdown between `<!-- peers-table:begin -->` and `<!-- peers-table:end -->` in
--doc (the rest of the file is left alone), (2) one plot per results file,
`<plots>/<dataset>.<loss>.svg`: relative suboptimality (objective - reference) / reference on a
log scale against seconds (log scale), every tool, ladder tools as one point per rung (median
over repeats), linea as its per-epoch trace (first repeat). Prints the table to stdout too.

Only runs whose objective is comparable are timed; "never reached" means no run of that tool
ended within the threshold. Ratio = linea's time to 1e-6 / the best comparable peer's time to
1e-6 (any thread count): < 1 means linea wins.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BEGIN, END = "<!-- peers-table:begin -->", "<!-- peers-table:end -->"
THR = ("0.001", "0.0001", "1e-06")
ORDER = ["linea", "linea-scd", "linea-cocoa", "linea-lbfgs", "linea-hybrid", "linea-lbfgs-newton",
         "linea-hybrid-newton", "linea-ipm", "liblinear", "liblinear-dual", "liblinear-cli", "snapml", "snapml-epoch",
         "sklearn-lbfgs", "sklearn-newton-cholesky", "sklearn-ridge-cg", "sklearn-ridge-cholesky",
         "vw-bfgs", "vw-bfgs-curve", "vw-sgd", "spark"]
TIME_BASIS = {"liblinear-cli": "wall", "vw-bfgs": "wall", "vw-bfgs-curve": "wall", "vw-sgd": "wall", "linea": "trace", "linea-scd": "trace", "linea-cocoa": "trace", "linea-cocoa-h2": "trace", "linea-cocoa-every": "trace", "linea-cocoa-stop": "trace",
              "linea-lbfgs": "trace", "linea-hybrid": "trace", "linea-ipm": "trace",
              "linea-lbfgs-newton": "trace", "linea-hybrid-newton": "trace"}


def load(path):
    hdr, runs, sums = None, [], []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            k = r.get("kind")
            if k == "header":
                hdr, runs, sums = r, [], []      # a file holds one harness invocation; keep the last
            elif k == "run":
                runs.append(r)
            elif k == "summary":
                sums.append(r)
    return hdr, runs, sums


def fmt_t(v):
    if isinstance(v, str) or v is None:
        return "never reached"
    s = v["seconds_median"]
    return f"{s:.3f}" if s < 10 else f"{s:.1f}"


def fmt_mb(kb):
    return "—" if not kb else f"{kb / 1024:.0f} MB"


def fmt_rate(x):
    return "—" if not x else f"{x / 1e6:.1f} M"


def nnz_of(hdr):
    try:
        with open(os.path.join(HERE, "references.json")) as f:
            refs = json.load(f)
        return refs[f"{hdr['dataset']}|{hdr['loss']}|{hdr['l2']:g}"]["nnz"]
    except (OSError, KeyError):
        return None


def one_pass_rate(tool, runs, nnz):
    """non-zeros per second per thread for one pass over the data, where measurable:
    linea = the first epoch of its trace (a full SCD epoch incl. the objective pass and the
    coarse correction); snapml-epoch = fit time of max_iter=1. Median over repeats."""
    if not nnz:
        return None
    vals = []
    for r in runs:
        if tool.startswith("linea") and r.get("trace") and len(r["trace"]) > 1:
            dt = r["trace"][1][1] - r["trace"][0][1]
            if dt > 0:
                vals.append(nnz / dt / r["threads"])
        elif tool == "snapml-epoch" and r.get("fit_seconds"):
            vals.append(nnz / r["fit_seconds"] / r["threads"])
    return statistics.median(vals) if vals else None


def test_metric(runs, loss):
    """Test metric of the run closest to the optimum: 'AUC a / log loss b' or 'RMSE c'."""
    good = [r for r in runs if r.get("rel_error") is not None and r.get("test")]
    if not good:
        return "—"
    r = min(good, key=lambda r: r["rel_error"])
    split = "test" if "test" in r["test"] else sorted(r["test"])[0]
    m = r["test"][split]
    if "auc" in m:
        return f"{m['auc']:.4f} / {m['logloss']:.4f}"
    return f"RMSE {m['rmse']:.4f}"


def rows_for(path):
    hdr, runs, sums = load(path)
    if hdr is None or not sums:
        return None
    nnz = nnz_of(hdr)
    by = {}
    for r in runs:
        if "error" not in r:
            by.setdefault((r["tool"], r["threads"]), []).append(r)
    rows = []
    for s in sums:
        key = (s["tool"], s["threads"])
        rs = by.get(key, [])
        comparable = s.get("objective_comparable", True)
        peak = max(((r.get("peak_rss_kb_incl_jvm") or r.get("peak_rss_kb") or 0) for r in rs), default=0)
        rows.append({
            "tool": s["tool"], "threads": s["threads"], "comparable": comparable,
            "note": s.get("comparability_note", ""), "reached": s["reached"],
            "best": s.get("best_rel_error") if not s["tool"].startswith("linea") else min(
                (r["rel_error"] for r in rs if r.get("rel_error") is not None), default=None),
            "peak_kb": peak, "rate": one_pass_rate(s["tool"], rs, nnz),
            "metric": test_metric(rs, hdr["loss"]), "runs": rs,
        })
    rows.sort(key=lambda r: (ORDER.index(r["tool"]) if r["tool"] in ORDER else 99, r["threads"]))
    return hdr, nnz, rows


def t6(row):
    v = row["reached"].get("1e-06")
    return None if isinstance(v, str) or v is None else v["seconds_median"]


def cocoa_verdict(cocoa, dual):
    """CoCoA K=1 (SDCA) against its own family, LIBLINEAR's dual coordinate descent."""
    if t6(cocoa) is None:
        return "**CoCoA never reached 1e-6**"
    if dual is None:
        return "liblinear-dual did not reach 1e-6"
    q = t6(cocoa) / t6(dual)
    return f"{q:.2f} vs liblinear-dual (1 thr) — " + ("**CoCoA loses**" if q > 1 else "**CoCoA wins**")


def label(hdr):
    return f"{hdr['dataset']} ({hdr['loss']}, l2={hdr['l2']:g}; n={hdr['n']:,}, d={hdr['d_including_bias']:,})"


def best_peer(rows, threads=None):
    """The comparable peer run fastest to 1e-6 with at most `threads` threads (None: any): a
    peer given two cores may run on one, so two-thread linea meets the best of either."""
    peers = [r for r in rows if not r["tool"].startswith("linea") and r["comparable"] and t6(r) is not None
             and (threads is None or r["threads"] <= threads)]
    return min(peers, key=t6) if peers else None


def against(linea_time, best):
    """linea's time to 1e-6 over the best peer's, with the verdict."""
    if linea_time is None:
        return "**linea never reached 1e-6**"
    if best is None:
        return "no peer reached 1e-6"
    q = linea_time / t6(best)
    return f"{q:.2f} vs {best['tool']} ({best['threads']} thr) — " + ("**linea loses**" if q > 1 else "**linea wins**")


def dataset_section(hdr, nnz, rows, plot_rel):
    dual = next((r for r in rows if r["tool"] == "liblinear-dual" and r["threads"] == 1 and t6(r) is not None), None)
    best = best_peer(rows)
    out = [f"#### {label(hdr)}", ""]
    if nnz:
        out[0] += f", {nnz:,} non-zeros"
    out += ["| tool | threads | time to 1e-3 | 1e-4 | 1e-6 | best rel. error | one pass: nnz/s/core | peak memory | test AUC / log loss | linea / best peer (1e-6) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if r["tool"] == "snapml-epoch":
            cells = ["(1 epoch only)"] * 3
        elif not r["comparable"]:
            cells = ["different objective"] + [
                fmt_t(r["reached"].get(t)) if not isinstance(r["reached"].get(t), str) else "never reached"
                for t in THR[1:]]
            cells = ["not comparable"] * 3
        else:
            cells = [fmt_t(r["reached"].get(t)) for t in THR]
        ratio = ""
        if r["tool"] == "linea":
            ratio = against(t6(r), best_peer(rows, r["threads"]))
        elif r["tool"] == "linea-cocoa":
            ratio = cocoa_verdict(r, dual)
        be = "—" if r["best"] is None or r["tool"] == "snapml-epoch" else f"{r['best']:.1e}"
        name = r["tool"] + (f" ({TIME_BASIS[r['tool']]} time)" if r["tool"] in TIME_BASIS else "")
        out.append(f"| {name} | {r['threads']} | " + " | ".join(cells) +
                   f" | {be} | {fmt_rate(r['rate'])} | {fmt_mb(r['peak_kb'])} | {r['metric']} | {ratio} |")
    notes = sorted({(r["tool"], r["note"]) for r in rows if not r["comparable"] and r["note"]})
    for tool, note in notes:
        out.append(f"\n{tool}: {note}.")
    if plot_rel:
        out += ["", f"![time vs suboptimality, {hdr['dataset']}]({plot_rel})"]
    out.append("")
    return out, best


def plot(hdr, rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 4.8))
    ax.set_prop_cycle(color=plt.get_cmap("tab20").colors)
    floor = 1e-16
    for r in rows:
        if r["tool"] == "snapml-epoch":
            continue
        lab = f"{r['tool']} ({r['threads']} thr)" + ("" if r["comparable"] else " [other objective]")
        ls = "-" if r["comparable"] else ":"
        if r["tool"].startswith("linea"):
            rep1 = [x for x in r["runs"] if x.get("repeat") == 1 and x.get("trace")]
            if not rep1:
                continue
            ref = hdr["reference"]
            pts = [(s, max((o - ref) / ref, floor)) for _, s, o in rep1[0]["trace"] if s > 0]
            if pts:
                ax.plot(*zip(*pts), ls, lw=2.2, label=lab, zorder=5,
                        color="black" if r["threads"] == 1 else "crimson")
            continue
        by = {}
        for x in r["runs"]:
            if x.get("rel_error") is None:
                continue
            t = x.get("fit_seconds", x.get("wall_seconds"))
            by.setdefault(json.dumps(x["budget"]), []).append((t, x["rel_error"]))
        pts = sorted((statistics.median(t for t, _ in v), max(statistics.median(e for _, e in v), floor))
                     for v in by.values())
        if pts:
            ax.plot(*zip(*pts), ls, marker="o", ms=3.5, lw=1.2, label=lab)
    for th in (1e-3, 1e-4, 1e-6):
        ax.axhline(th, color="grey", lw=0.6, ls="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("seconds (fit / trace time; CLI tools: process wall time)")
    ax.set_ylabel("(objective - optimum) / optimum")
    ax.set_title(label(hdr), fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.grid(True, which="major", lw=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    canonical = os.path.join(HERE, "results")
    ap.add_argument("--results", default=canonical)
    ap.add_argument("--doc", help="default: docs/benchmarks/peers.md for the canonical results, "
                    "else RESULTS/tables.md (a scratch run never rewrites the published table)")
    ap.add_argument("--plots", help="default: docs/benchmarks for the canonical results, else RESULTS/plots")
    ap.add_argument("--command", default="bench/run-benchmarks.sh",
                    help="the command named in the generated text")
    a = ap.parse_args()
    published = os.path.realpath(a.results) == os.path.realpath(canonical)
    a.doc = a.doc or (os.path.join(REPO, "docs", "benchmarks", "peers.md") if published else os.path.join(a.results, "tables.md"))
    a.plots = a.plots or (os.path.join(REPO, "docs", "benchmarks") if published else os.path.join(a.results, "plots"))
    if not os.path.exists(a.doc):
        with open(a.doc, "w") as f:
            f.write(f"{BEGIN}\n{END}\n")
    os.makedirs(a.plots, exist_ok=True)
    files = sorted(glob.glob(os.path.join(a.results, "*.jsonl")))
    order = ["a9a", "w8a", "rcv1-small", "criteo-sample", "higgs-sample", "adult", "protein-kdd2004",
             "movielens-100k", "criteo-1m", "criteo-10m"]
    files.sort(key=lambda p: next((i for i, d in enumerate(order) if os.path.basename(p).startswith(d + ".")), 99))
    overview = ["| dataset | linea 1 thread | best peer, 1 thread | linea / peer | linea 2 threads | best peer, 1 or 2 threads | linea / peer | verdict | peak memory linea / best peer | test AUC (or RMSE) linea / best peer |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    cocoa_overview = ["| dataset | linea CoCoA K=1, 1e-6 | liblinear-dual 1 thread, 1e-6 | CoCoA / liblinear-dual |",
                      "| --- | --- | --- | --- |"]
    detail = []
    for p in files:
        res = rows_for(p)
        if res is None:
            continue
        hdr, nnz, rows = res
        stem = os.path.basename(p)[:-len(".jsonl")]
        stem = re.sub(r"\.l2=.*$", "", stem)
        svg = os.path.join(a.plots, f"{stem}.svg")
        plot(hdr, rows, svg)
        rel = os.path.relpath(svg, os.path.dirname(os.path.abspath(a.doc)))
        sec, best = dataset_section(hdr, nnz, rows, rel)
        detail += sec
        lin = {r["threads"]: r for r in rows if r["tool"] == "linea"}
        cell = lambda t: "never reached" if t is None else f"{t:.3f}"  # noqa: E731
        # Per thread count: linea on k threads against the best peer on at most k.
        cells, ratios = [], []
        for k in (1, 2):
            lt, peer = (t6(lin[k]) if k in lin else None), best_peer(rows, k)
            q = lt / t6(peer) if lt is not None and peer is not None else None
            ratios.append(q)
            cells += [cell(lt), "none reached" if peer is None else f"{peer['tool']} ({peer['threads']} thr) {t6(peer):.3f}",
                      "—" if q is None else f"**{q:.2f}**"]
        got = [q for q in ratios if q is not None]
        if best is None:
            verdict = "no peer reached 1e-6"
        elif len(got) < 2:
            verdict = "**linea never reached 1e-6**" if not got else "**linea reached 1e-6 on one thread count**"
        else:
            verdict = "**linea wins**" if max(got) <= 1 else ("**linea loses**" if min(got) > 1 else "**mixed**")
        cocoa = next((r for r in rows if r["tool"] == "linea-cocoa"), None)
        dual = next((r for r in rows if r["tool"] == "liblinear-dual" and r["threads"] == 1), None)
        if cocoa is not None:
            cocoa_overview.append(f"| {hdr['dataset']} ({hdr['loss']}) | {cell(t6(cocoa))} | "
                                  f"{cell(t6(dual)) if dual else 'not run'} | "
                                  f"{cocoa_verdict(cocoa, dual if dual and t6(dual) is not None else None)} |")
        lmem = max((r["peak_kb"] for r in lin.values()), default=0)
        lmet = next((r["metric"] for r in lin.values()), "—").split(" / ")[0]
        overview.append(f"| {hdr['dataset']} ({hdr['loss']}) | " + " | ".join(cells) + f" | {verdict} | "
                        f"{fmt_mb(lmem)} / {fmt_mb(best['peak_kb']) if best else '—'} | "
                        f"{lmet} / {best['metric'].split(' / ')[0] if best else '—'} |")
    block = [BEGIN, "<!-- generated by bench/peers/summarize.py from bench/peers/results/*.jsonl; do not edit by hand -->", "",
             "Overview (seconds to reach the reference optimum within 1e-6 relative; linea / peer = linea's "
             "time on that many threads over the fastest comparable peer's on at most as many; > 1 means "
             "linea is slower; the verdict is a win when linea is at most the peer on both):", ""] + overview + (
             ["", "CoCoA+ with one slot (SDCA, `linea train --algorithm cocoa --slots 1`) against the same "
              "family of method, LIBLINEAR's dual coordinate descent, single-threaded both:", ""] + cocoa_overview
             if len(cocoa_overview) > 2 else []) + [
             "", "Per dataset (times in seconds; \"never reached\" = no run ended within the threshold, so it "
             "is not timed; AUC / log loss on the test split for the run closest to the optimum; "
             "peak memory = the largest peak RSS over that tool's runs):", ""] + detail + [END]
    text = "\n".join(block)
    print(text)
    with open(a.doc) as f:
        doc = f.read()
    if BEGIN in doc and END in doc:
        doc = doc[:doc.index(BEGIN)] + text + doc[doc.index(END) + len(END):]
    else:
        doc = doc.rstrip("\n") + "\n\n" + text + "\n"
    tmp = a.doc + ".tmp"
    with open(tmp, "w") as f:
        f.write(doc)
    os.replace(tmp, a.doc)


if __name__ == "__main__":
    main()
