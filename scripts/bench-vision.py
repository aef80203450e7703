#!/usr/bin/env python3
"""Image encoding on the CPU, kiln against llama.cpp: the time each takes to run a projector's vision tower over one
image, 2 threads each, in ROUNDS rounds that run both tools per projector in alternating order (round r: kiln first
when r is even). kiln's time is `timings.image_encode_ms` of `kiln run --format json` (the image's decoding and
preprocessing included, a few ms); llama.cpp's is the "mtmd batch encoding done in N ms" line of `llama-mtmd-cli`
(the tower alone; preprocessing comes before it), run with its defaults: flash attention `auto`, which on the CPU
turns it on for the vision tower (LLAMA_ARGS="-fa off" times it without; kiln's tower has none). Both then decode
one token, untimed. Prints each round's times, then per projector the median ratio kiln / llama.cpp with its range.
Inputs: scripts/bench-models/make-qwen35-vision-shape.py (random Qwen3.5-shaped towers, a 768×512 image: 384
tokens) and a text model whose width is the projectors' projection_dim; or make-gemma3-vision-shape.py (Gemma 3's
SigLIP-400M towers, its text model and an 896×896 image: 4096 patches, 256 tokens), given as TEXT_MODEL, MMPROJ and
IMAGE (its docstring has the line). Run nothing else meanwhile.

usage: scripts/bench-vision.py   (env only)
env:   LLAMA_BIN (folder with llama-mtmd-cli), KILN (target/release/kiln),
       TEXT_MODEL (/work/bench/qwen35-mtp-shape.q4_k_m.gguf),
       MMPROJ (comma-separated; /work/bench/vision/qwen35-vision-shape.f16.gguf,.../qwen35-vision-shape.q8_0.gguf),
       IMAGE (/work/bench/vision/bench-768x512.png), ROUNDS (8),
       LLAMA_ARGS, KILN_ARGS (extra arguments, split on spaces, e.g. LLAMA_ARGS="-fa off")
Run:   LLAMA_BIN=/tmp/lcpp/L/vendor/llama.cpp/build/bin scripts/bench-vision.py
"""
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = "/work/bench"
KILN = os.environ.get("KILN", os.path.join(ROOT, "target/release/kiln"))
LLAMA_BIN = os.environ.get("LLAMA_BIN", "")
TEXT_MODEL = os.environ.get("TEXT_MODEL", os.path.join(BENCH, "qwen35-mtp-shape.q4_k_m.gguf"))
MMPROJ = [p for p in os.environ.get("MMPROJ", ",".join(
    os.path.join(BENCH, "vision", f"qwen35-vision-shape.{t}.gguf") for t in ("f16", "q8_0"))).split(",") if p]
IMAGE = os.environ.get("IMAGE", os.path.join(BENCH, "vision/bench-768x512.png"))
ROUNDS = int(os.environ.get("ROUNDS", "8"))
LLAMA_ARGS = os.environ.get("LLAMA_ARGS", "").split()
KILN_ARGS = os.environ.get("KILN_ARGS", "").split()
PROMPT = "describe"


def run(args):
    out = subprocess.run(args, capture_output=True, text=True, errors="replace")
    if out.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({out.returncode}):\n{out.stderr[-4000:]}")
    return out


def kiln(mmproj):
    out = run([KILN, "run", "-m", TEXT_MODEL, "--mmproj", mmproj, "--image", IMAGE, "-n", "1", "-t", "2",
               "--format", "json", *KILN_ARGS, PROMPT])
    return float(json.loads(out.stdout)["timings"]["image_encode_ms"])


def llama(mmproj):
    out = run([os.path.join(LLAMA_BIN, "llama-mtmd-cli"), "-m", TEXT_MODEL, "--mmproj", mmproj, "--image", IMAGE,
               "-p", PROMPT, "-n", "1", "-t", "2", *LLAMA_ARGS])
    times = re.findall(r"mtmd batch encoding done in (\d+) ms", out.stdout + out.stderr)
    if len(times) != 1:
        sys.exit(f"llama-mtmd-cli: expected one 'mtmd batch encoding done' line, found {len(times)}")
    return float(times[0])


def name(mmproj):
    return os.path.basename(mmproj).removesuffix(".gguf")


def main():
    if not LLAMA_BIN:
        sys.exit("set LLAMA_BIN to the folder holding llama-mtmd-cli")
    tools = [("kiln", kiln), ("llama", llama)]
    ms = {(m, t): [] for m in MMPROJ for t, _ in tools}
    for r in range(ROUNDS):
        for m in MMPROJ:
            for t, f in tools if r % 2 == 0 else tools[::-1]:
                ms[(m, t)].append(f(m))
        print(f"round {r}: " + "; ".join(
            f"{name(m)} kiln {ms[(m, 'kiln')][-1]:.0f} ms, llama {ms[(m, 'llama')][-1]:.0f} ms" for m in MMPROJ),
            flush=True)
    for m in MMPROJ:
        k, l = ms[(m, "kiln")], ms[(m, "llama")]
        rs = [a / b for a, b in zip(k, l)]
        print(f"{name(m)}: kiln median {statistics.median(k):.0f} ms, llama.cpp median {statistics.median(l):.0f} ms; "
              f"kiln / llama.cpp {statistics.median(rs):.2f}x ({min(rs):.2f}-{max(rs):.2f})")


if __name__ == "__main__":
    main()
