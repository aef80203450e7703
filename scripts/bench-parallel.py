#!/usr/bin/env python3
"""Continuous batching, kiln against llama.cpp (issue #47's throughput figures). Two servers on 127.0.0.1,
each with 2 threads: `kiln serve --parallel 8 -c CTX` and `llama-server -np 8 -c 8*CTX` (llama-server's -c
is the total of its slots). In ROUNDS rounds, alternating which server goes first, each gets one greedy
/v1/completions request alone, then 8 at once (different prompts); a rate is the generated tokens
(`usage.completion_tokens`) over the wall time of the whole set. Then `kiln run --batch` on 64 requests, with
--parallel 1 (one at a time, as before continuous batching) and --parallel 8, alternating. Prints every
round, per-configuration medians and the median ratios with their range. Run nothing else meanwhile.
Without LLAMA_SERVER only the `kiln run --batch` part runs (it compares kiln with itself).

usage: scripts/bench-parallel.py [ROUNDS]   (default 8)
env:   KILN (target/release/kiln), LLAMA_SERVER (path to llama-server), MODEL (a 1B-shape GGUF, e.g. from
       ../shared/tools/make-bench-models.py), TOKENS (generated per server request, 64), BATCH_TOKENS (per
       batch request, 16), CTX (per slot, 512)
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KILN = os.environ.get("KILN", os.path.join(ROOT, "target/release/kiln"))
LLAMA_SERVER = os.environ.get("LLAMA_SERVER", "")
MODEL = os.environ.get("MODEL", "")
TOKENS = int(os.environ.get("TOKENS", "64"))
BATCH_TOKENS = int(os.environ.get("BATCH_TOKENS", "16"))
CTX = int(os.environ.get("CTX", "512"))
SEQS = 8
PROMPTS = [
    "Once upon a time", "The history of the city begins", "In the laboratory, the scientists",
    "The recipe calls for", "On the first day of spring", "The committee met to discuss",
    "Far beyond the mountains", "The engine started with",
]


def post(port, prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": TOKENS, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)["usage"]["completion_tokens"]


def rate(port, n):
    """Generated tokens per second over n requests sent at once."""
    counts = [0] * n

    def one(i):
        counts[i] = post(port, PROMPTS[i % len(PROMPTS)])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.time() - t0)


def wait_ready(port, proc):
    for _ in range(600):
        if proc.poll() is not None:
            sys.exit(f"a server on port {port} exited")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            time.sleep(0.5)
    sys.exit(f"the server on port {port} did not come up")


def batch_time(path, parallel):
    t0 = time.time()
    subprocess.run([KILN, "run", "-m", MODEL, "-t", "2", "-c", str(CTX), "--parallel", str(parallel),
                    "--batch", path], check=True, capture_output=True)
    return time.time() - t0


def main(rounds):
    if not MODEL:
        sys.exit("set MODEL (a GGUF), and LLAMA_SERVER (llama-server's path) for the server part")
    if LLAMA_SERVER:
        servers(rounds)
    batch(rounds)


def servers(rounds):
    kiln = subprocess.Popen([KILN, "serve", "-m", MODEL, "-t", "2", "--parallel", str(SEQS), "-c", str(CTX),
                             "--port", "18471"], stderr=subprocess.DEVNULL)
    llama = subprocess.Popen([LLAMA_SERVER, "-m", MODEL, "-t", "2", "-np", str(SEQS), "-c", str(SEQS * CTX),
                              "--port", "18472"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(18471, kiln)
        wait_ready(18472, llama)
        servers = {"kiln": 18471, "llama": 18472}
        rates = {f"{s} {n}": [] for s in servers for n in (1, SEQS)}
        for s, port in servers.items():  # warm-up
            rate(port, SEQS)
        for r in range(rounds):
            order = list(servers) if r % 2 == 0 else list(servers)[::-1]
            for s in order:
                for n in (1, SEQS):
                    rates[f"{s} {n}"].append(rate(servers[s], n))
            print(f"round {r}: " + ", ".join(f"{k} {v[-1]:.1f} t/s" for k, v in rates.items()), flush=True)
    finally:
        kiln.terminate()
        llama.terminate()
        kiln.wait()
        llama.wait()
    for k, v in rates.items():
        print(f"{k}: median {statistics.median(v):.1f} t/s")
    ratios = [(f"kiln {SEQS}", "kiln 1"), (f"llama {SEQS}", "llama 1"), (f"kiln {SEQS}", f"llama {SEQS}"),
              ("kiln 1", "llama 1")]
    for a, b in ratios:
        rs = [x / y for x, y in zip(rates[a], rates[b])]
        print(f"{a} / {b}: {statistics.median(rs):.2f}x ({min(rs):.2f}-{max(rs):.2f})")


def batch(rounds):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for i in range(64):
            f.write(json.dumps({"id": i, "prompt": PROMPTS[i % len(PROMPTS)] + f" (part {i})",
                                "max_tokens": BATCH_TOKENS, "temperature": 0}) + "\n")
    times = {1: [], SEQS: []}
    for r in range(rounds):
        for p in (1, SEQS) if r % 2 == 0 else (SEQS, 1):
            times[p].append(batch_time(f.name, p))
        print(f"batch round {r}: --parallel 1 {times[1][-1]:.1f} s, --parallel {SEQS} {times[SEQS][-1]:.1f} s",
              flush=True)
    os.unlink(f.name)
    rs = [a / b for a, b in zip(times[1], times[SEQS])]
    print(f"kiln run --batch, 64 requests: --parallel 1 median {statistics.median(times[1]):.1f} s, "
          f"--parallel {SEQS} {statistics.median(times[SEQS]):.1f} s: {statistics.median(rs):.2f}x faster "
          f"({min(rs):.2f}-{max(rs):.2f})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8)
