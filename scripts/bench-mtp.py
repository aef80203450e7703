#!/usr/bin/env python3
"""draft-mtp at a synthetic acceptance, kiln against llama.cpp (issue #44's MTP figure): greedy generation of
128 tokens after a short raw prompt on a Qwen3.5-shaped file with an MTP block (scripts/bench-models/
make-qwen35-shape.py --mtp, then llama-quantize ... Q4_K_M), both with `--spec-type draft-mtp
--spec-draft-n-max 3 --spec-synth-rates 0.8,0.6,0.4` (random weights draft noise, so acceptance is forced), in
ROUNDS rounds that alternate which tool runs first. kiln's rate is `decode_tokens_per_s` of `kiln run --format
json`; llama.cpp's is `timings.predicted_per_second` of a `/completion` request to `llama-server` started with the
same flags (llama.cpp 0c1e570 takes `--spec-synth-rates` in its server and CLI only), kept running between rounds
(idle while kiln runs). kiln without speculation runs too, for the gain. Prints per-configuration medians, the
median ratio of each round's pair with its range, and each tool's drafted and kept tokens (the forced acceptance
should come out alike). Run nothing else meanwhile.

usage: scripts/bench-mtp.py MODEL [ROUNDS]   (default 8)
env:   KILN (target/release/kiln), LLAMA_BIN (folder with llama-server), RATES (0.8,0.6,0.4), PORT (8091)
"""
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KILN = os.environ.get("KILN", os.path.join(ROOT, "target/release/kiln"))
LLAMA_BIN = os.environ.get("LLAMA_BIN", "")
RATES = os.environ.get("RATES", "0.8,0.6,0.4")
PORT = int(os.environ.get("PORT", "8091"))
PROMPT = "The history of the lighthouse begins with fires lit on hills above harbours, and"
N = 128
SPEC = ["--spec-type", "draft-mtp", "--spec-draft-n-max", str(len(RATES.split(","))), "--spec-synth-rates", RATES]


def kiln(model, spec):
    args = [KILN, "run", "-m", model, "--raw", "-n", str(N), "--temp", "0", "-t", "2", "-c", "512",
            "--format", "json"]
    out = subprocess.run(args + (SPEC if spec else []) + [PROMPT], capture_output=True, text=True, check=True)
    reply = json.loads(out.stdout)
    # Random weights: an end of text is unlikely (kiln has no --ignore-eos), but a short run is no measure.
    assert reply["completion_tokens"] == N, reply["finish_reason"]
    t = reply["timings"]
    return t["decode_tokens_per_s"], (t.get("draft_accepted", 0), t.get("draft_tokens", 0))


def llama():
    body = json.dumps({"prompt": PROMPT, "n_predict": N, "temperature": 0, "ignore_eos": True,
                       "cache_prompt": False}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{PORT}/completion", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        reply = json.load(r)
    t = reply["timings"]
    return t["predicted_per_second"], (t["draft_n_accepted"], t["draft_n"])


def bench_parallel():
    """scripts/bench-parallel.py as a module (its name has a hyphen), for its `wait_ready`."""
    spec = importlib.util.spec_from_file_location("bench_parallel", os.path.join(ROOT, "scripts/bench-parallel.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    if len(sys.argv) < 2 or not LLAMA_BIN:
        sys.exit(__doc__)
    model, rounds = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 8
    server = subprocess.Popen([os.path.join(LLAMA_BIN, "llama-server"), "-m", model, "-t", "2", "-tb", "2",
                               "-c", "512", "-np", "1", "--port", str(PORT), "--no-warmup", *SPEC],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        bench_parallel().wait_ready(PORT, server)
        llama()  # warm-up
        rows, kept = [], {"kiln": [0, 0], "llama.cpp": [0, 0]}
        for r in range(rounds):
            if r % 2 == 0:
                (l, la), (k, ka) = llama(), kiln(model, True)
            else:
                (k, ka), (l, la) = kiln(model, True), llama()
            plain = kiln(model, False)[0]
            rows.append((k, l, plain))
            for name, (a, d) in (("kiln", ka), ("llama.cpp", la)):
                kept[name][0] += a
                kept[name][1] += d
            print(f"round {r + 1}: kiln draft-mtp {k:.2f} t/s ({ka[0]}/{ka[1]} drafts kept), llama.cpp draft-mtp "
                  f"{l:.2f} ({la[0]}/{la[1]}), kiln plain {plain:.2f}", flush=True)
    finally:
        server.terminate()
        server.wait()

    def summary(name, values):
        print(f"{name}: median {statistics.median(values):.3f} (range {min(values):.3f}-{max(values):.3f})")

    summary("kiln draft-mtp t/s", [k for k, _, _ in rows])
    summary("llama.cpp draft-mtp t/s", [l for _, l, _ in rows])
    summary("kiln plain t/s", [p for _, _, p in rows])
    summary("kiln / llama.cpp, both draft-mtp", [k / l for k, l, _ in rows])
    summary("kiln draft-mtp / kiln plain", [k / p for k, _, p in rows])
    for name, (a, d) in kept.items():
        print(f"{name}: {a} of {d} drafted tokens kept ({100 * a / max(d, 1):.0f} %)")


if __name__ == "__main__":
    main()
