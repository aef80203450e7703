#!/usr/bin/env python3
"""The medians of run.sh's alternating rounds: for each shape's file of `round N llama: PP ± SD TG ± SD
name: PP ± SD TG ± SD ...` lines (t/s of pp512 then tg128, as setup.sh's kb and lb print them), each tool's
median t/s and the median, lowest and highest of its per-round ratio to llama.cpp in the same round.
usage: summarize.py LABEL FILE [LABEL FILE ...]"""
import re
import statistics
import sys

ENTRY = re.compile(r"(\S+): ((?:\s*[0-9.]+ ± [0-9.]+)*)")


def rounds(path):
    """Each round's {tool: (pp512, tg128)}, a tool's value None where its run printed nothing."""
    out = []
    for line in open(path, encoding="utf-8", errors="replace"):
        if not line.startswith("round "):
            continue
        tools = {}
        for name, values in ENTRY.findall(line):
            nums = [float(v) for v in re.findall(r"([0-9.]+) ±", values)]
            tools[name] = (nums + [None, None])[:2]
        out.append(tools)
    return out


def spread(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    return f"{statistics.median(xs):.2f}× ({min(xs):.2f}-{max(xs):.2f}, {len(xs)} rounds)"


def summary(label, path):
    rs = rounds(path)
    print(f"== {label}: medians of {len(rs)} rounds, ratios to llama.cpp per round")
    names = [n for n in (rs[0] if rs else {}) if n != "llama"]
    print("| tool | pp512 t/s | pp512 ratio | tg128 t/s | tg128 ratio |")
    print("|---|---|---|---|---|")
    for name in ["llama"] + names:
        cells = []
        for i in range(2):
            vals = [r.get(name, [None, None])[i] for r in rs]
            got = [v for v in vals if v is not None]
            cells.append(f"{statistics.median(got):.1f}" if got else "-")
            if name == "llama":
                cells.append("1")
            else:
                ratios = [
                    r[name][i] / r["llama"][i]
                    for r in rs
                    if r.get(name, [None, None])[i] and r.get("llama", [None, None])[i]
                ]
                cells.append(spread(ratios))
        print(f"| {name} | {' | '.join(cells)} |")


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or len(args) % 2:
        sys.exit(__doc__)
    for label, path in zip(args[::2], args[1::2]):
        summary(label, path)
