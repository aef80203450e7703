#!/usr/bin/env python3
"""N-gram speculative decoding, kiln (llama.cpp's two types and its own ngram-edit) against llama.cpp (issue
#44's n-gram figures): greedy generation of 256 tokens from scripts/bench-prompts/rename-variable.txt (a
303-token Python function to copy with one variable renamed; raw prompt, no chat template), quote.txt (a
handbook section to quote in full) and prose.txt (free prose), in ROUNDS rounds that run every configuration
in alternating order. kiln's rate is `decode_tokens_per_s` of `kiln run --format json`; llama.cpp's with
speculation is the "decoded ... speed" of `llama-speculative-simple`, and without it `llama-bench -n 256 -d 303`
(llama-speculative-simple refuses `--spec-type none`). Prints per-configuration medians and the median ratio of
each round's pair, with its range. Run nothing else meanwhile.

usage: scripts/bench-ngram.py [ROUNDS]   (default 8)
env:   KILN (target/release/kiln), LLAMA_BIN (folder with llama-speculative-simple and llama-bench),
       MODEL (models/qwen2.5-coder-0.5b.gguf), LLAMA_SPEC (llama.cpp's n-gram type to compare, ngram-mod),
       ONLY (comma-separated words: only the configurations whose names hold one, e.g. "quote")
"""
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KILN = os.environ.get("KILN", os.path.join(ROOT, "target/release/kiln"))
LLAMA_BIN = os.environ.get("LLAMA_BIN", "")
MODEL = os.environ.get("MODEL", os.path.join(ROOT, "models/qwen2.5-coder-0.5b.gguf"))
LLAMA_SPEC = os.environ.get("LLAMA_SPEC", "ngram-mod")
PROMPTS = os.path.join(ROOT, "scripts/bench-prompts")
CODE, PROSE = os.path.join(PROMPTS, "rename-variable.txt"), os.path.join(PROMPTS, "prose.txt")
QUOTE = os.path.join(PROMPTS, "quote.txt")
ONLY = [w for w in os.environ.get("ONLY", "").split(",") if w]
COMMON = ["-n", "256", "--temp", "0", "-t", "2", "-c", "1024"]


def kiln(path, spec):
    args = [KILN, "run", "-m", MODEL, "--raw", *COMMON, "--format", "json"]
    if spec:
        args += ["--spec-type", spec]
    out = subprocess.run(args + [open(path).read()], capture_output=True, text=True, check=True).stdout
    return json.loads(out)["timings"]["decode_tokens_per_s"]


def llama(path, spec):
    out = subprocess.run([os.path.join(LLAMA_BIN, "llama-speculative-simple"), "-m", MODEL, "--spec-type", spec,
                          "-f", path, *COMMON], capture_output=True, text=True, check=True)
    log = out.stdout + out.stderr
    return float(re.search(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+)", log).group(1))


def llama_plain():
    out = subprocess.run([os.path.join(LLAMA_BIN, "llama-bench"), "-m", MODEL, "-p", "0", "-n", "256", "-d", "303",
                          "-t", "2", "-r", "1", "-o", "json"], capture_output=True, text=True, check=True).stdout
    return json.loads(out)[0]["avg_ts"]


CONFIGS = {
    "kiln code plain": lambda: kiln(CODE, None),
    "kiln code ngram-simple": lambda: kiln(CODE, "ngram-simple"),
    "kiln code ngram-map-k": lambda: kiln(CODE, "ngram-map-k"),
    "kiln code ngram-edit": lambda: kiln(CODE, "ngram-edit"),
    "llama code plain": llama_plain,
    f"llama code {LLAMA_SPEC}": lambda: llama(CODE, LLAMA_SPEC),
    "kiln quote plain": lambda: kiln(QUOTE, None),
    "kiln quote ngram-simple": lambda: kiln(QUOTE, "ngram-simple"),
    "kiln quote ngram-edit": lambda: kiln(QUOTE, "ngram-edit"),
    f"llama quote {LLAMA_SPEC}": lambda: llama(QUOTE, LLAMA_SPEC),
    "kiln prose plain": lambda: kiln(PROSE, None),
    "kiln prose ngram-simple": lambda: kiln(PROSE, "ngram-simple"),
    "kiln prose ngram-edit": lambda: kiln(PROSE, "ngram-edit"),
}
RATIOS = [("kiln code ngram-simple", "kiln code plain"), ("kiln code ngram-map-k", "kiln code plain"),
          ("kiln code ngram-edit", "kiln code plain"), ("kiln code ngram-simple", f"llama code {LLAMA_SPEC}"),
          ("kiln code ngram-edit", f"llama code {LLAMA_SPEC}"), ("kiln code plain", "llama code plain"),
          (f"llama code {LLAMA_SPEC}", "llama code plain"), ("kiln prose ngram-simple", "kiln prose plain"),
          ("kiln quote ngram-simple", "kiln quote plain"), ("kiln quote ngram-edit", "kiln quote plain"),
          ("kiln quote ngram-edit", f"llama quote {LLAMA_SPEC}"), ("kiln prose ngram-edit", "kiln prose plain")]


def main(rounds):
    if not LLAMA_BIN:
        sys.exit("set LLAMA_BIN to the folder holding llama-speculative-simple and llama-bench")
    names = [n for n in CONFIGS if not ONLY or any(w in n for w in ONLY)]
    rates = {n: [] for n in names}
    for r in range(rounds):
        for n in names if r % 2 == 0 else names[::-1]:
            rates[n].append(CONFIGS[n]())
        print(f"round {r}: " + ", ".join(f"{n} {rates[n][-1]:.1f}" for n in names), flush=True)
    for n in names:
        print(f"{n}: median {statistics.median(rates[n]):.1f} t/s")
    for a, b in RATIOS:
        if a not in names or b not in names:
            continue
        rs = [x / y for x, y in zip(rates[a], rates[b])]
        print(f"{a} / {b}: {statistics.median(rs):.2f}x ({min(rs):.2f}-{max(rs):.2f})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8)
