#!/usr/bin/env python3
"""Medians and ratios of a bench/vs_*.sh results.tsv (rows: model, round, who, metric, value).
Ratios are against llama.cpp's median for the same (model, metric), or, without llama.cpp rows,
against the first pagoda binary given. Rows of metric "bound%" are listed, not summarized.
usage: summary.py RESULTS.tsv [PAGODA_BIN...]"""
import collections
import statistics
import sys

rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
vals = collections.defaultdict(list)
for name, r, who, what, v in rows:
    vals[(name, what, who)].append(v)
print("model\tmetric\twho\tmedian\t[rounds]\tratio")
for (name, what, who), vs in sorted(vals.items()):
    if what == "bound%":
        print(f"{name}\t{what}\t{who}\t-\t[{' '.join(vs)}]\t-")
        continue
    med = statistics.median(float(x) for x in vs)
    base = vals.get((name, what, "llama.cpp"))
    if not base:  # no llama.cpp: against the first pagoda binary given
        firsts = [f"pagoda:{b}" for b in sys.argv[2:] if (name, what, f"pagoda:{b}") in vals]
        base = vals[(name, what, firsts[0])] if firsts and firsts[0] != who else None
    ratio = med / statistics.median(float(x) for x in base) if base and who != "llama.cpp" else None
    print(f"{name}\t{what}\t{who}\t{med:.2f}\t[{' '.join(vs)}]\t" + (f"{ratio:.2f}x" if ratio else "-"))
