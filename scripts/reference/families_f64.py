"""An independent float64 NumPy forward pass of a `smollm3`, `gemma2` or `llama` GGUF (written from the
architectures as the golden README states them, sharing no code with llama.cpp or kiln),
teacher-forced on a golden file's paths; prints per prompt and overall the largest |Δ| from
llama.cpp's top-5 logits and how often the argmax agrees.

usage: python3 families_f64.py MODEL GOLDEN NAME [--f16-head] [--gelu-table] [--mutant WHAT]
                               [--window N --write-golden OUT]
--f16-head rounds the LM head's input to f16 (llama.cpp's F16 mat-vec does); --gelu-table takes
GELU from llama.cpp's f16 table (input and output rounded to f16); --mutant switches a feature off
(nope, attn-cap, final-cap, window) to see the comparison fail. --window N gives a `llama` file
Mistral v0.1's sliding window on every layer (a query sees itself and the N − 1 tokens before it,
as Hugging Face's Mistral does and llama.cpp does not); --write-golden OUT then writes this pass's
own greedy runs from the golden's prompts, in the goldens' format, as the reference."""
import json
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

args = sys.argv[1:]
model, golden_path, name = args[:3]
f16_head, gelu_table = "--f16-head" in args, "--gelu-table" in args
mutant = args[args.index("--mutant") + 1] if "--mutant" in args else None
llama_window = int(args[args.index("--window") + 1]) if "--window" in args else None
write_golden = args[args.index("--write-golden") + 1] if "--write-golden" in args else None

r = GGUFReader(model)
T = {t.name: t for t in r.tensors}


def W(n):
    t = T[n]
    a = dequantize(t.data, t.tensor_type).astype(np.float64)
    return a.reshape([int(x) for x in reversed(t.shape.tolist())]) if len(t.shape) > 1 else a.reshape(-1)


f = r.fields
arch = bytes(f["general.architecture"].parts[-1]).decode()


def val(k, default=None):
    k = f"{arch}.{k}"
    return f[k].parts[f[k].data[0]].tolist()[0] if k in f else default


L, H, KV = val("block_count"), val("attention.head_count"), val("attention.head_count_kv")
D, hd, eps = val("embedding_length"), val("attention.key_length"), val("attention.layer_norm_rms_epsilon")
base = val("rope.freq_base", 10000.0)
gemma = arch == "gemma2"
names = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"]
if gemma:
    names += ["post_attention_norm", "post_ffw_norm"]
layers = [{k: W(f"blk.{i}.{k}.weight") for k in names} for i in range(L)]
emb, onorm = W("token_embd.weight"), W("output_norm.weight")
head = W("output.weight") if "output.weight" in T else emb
if gemma:
    swa = val("attention.sliding_window", 4096)
    attn_cap = val("attn_logit_softcapping", 50.0)
    final_cap = val("final_logit_softcapping", 30.0)
    scale = 1 / np.sqrt(D // H if L == 46 else hd)
else:
    scale = 1 / np.sqrt(hd)


def rms(x, w):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope(x, pos):
    inv = base ** (-np.arange(0, hd, 2) / hd)
    ang = pos[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    if gemma:  # NEOX: pairs (i, i + hd/2)
        x0, x1 = x[..., : hd // 2], x[..., hd // 2:]
        return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], -1)
    x0, x1 = x[..., 0::2], x[..., 1::2]  # interleaved pairs (2i, 2i + 1): the converter permuted Q/K
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = x0 * c - x1 * s, x0 * s + x1 * c
    return out


def gelu(x):
    if gelu_table:
        x16 = x.astype(np.float16).astype(np.float64)
        g = (0.5 * x16 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x16 + 0.044715 * x16 ** 3)))).astype(np.float16)
        return np.where(x <= -10, 0.0, np.where(x >= 10, x, g.astype(np.float64)))
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def forward(ids, last_only=False):
    n = len(ids)
    x = emb[ids] * (np.sqrt(D) if gemma else 1.0)
    pos = np.arange(n, dtype=np.float64)
    qi, ki = np.arange(n)[:, None], np.arange(n)[None, :]
    for i, l in enumerate(layers):
        h = rms(x, l["attn_norm"])
        q = (h @ l["attn_q"].T).reshape(n, H, hd)
        k = (h @ l["attn_k"].T).reshape(n, KV, hd)
        v = (h @ l["attn_v"].T).reshape(n, KV, hd)
        nope = arch == "smollm3" and (i + 1) % 4 == 0 and mutant != "nope"
        if not nope:
            q, k = rope(q, pos), rope(k, pos)
        k, v = np.repeat(k, H // KV, axis=1), np.repeat(v, H // KV, axis=1)
        sc = np.einsum("qhd,khd->hqk", q, k) * scale
        mask = ki > qi
        if gemma:
            if mutant != "attn-cap":
                sc = attn_cap * np.tanh(sc / attn_cap)
            if i % 2 == 0 and mutant != "window":
                mask |= (qi - ki) >= swa
        if llama_window is not None:
            mask |= (qi - ki) >= llama_window
        sc = np.where(mask[None], -np.inf, sc)
        p = np.exp(sc - sc.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        o = np.einsum("hqk,khd->qhd", p, v).reshape(n, H * hd) @ l["attn_output"].T
        x = x + (rms(o, l["post_attention_norm"]) if gemma else o)
        h = rms(x, l["ffn_norm"])
        g, u = h @ l["ffn_gate"].T, h @ l["ffn_up"].T
        a = gelu(g) if gemma else g / (1 + np.exp(-g))
        o = (a * u) @ l["ffn_down"].T
        x = x + (rms(o, l["post_ffw_norm"]) if gemma else o)
    h = rms(x, onorm)
    if last_only:
        h = h[-1:]
    if f16_head:
        h = h.astype(np.float16).astype(np.float64)
    logits = h @ head.T
    if gemma and mutant != "final-cap":
        logits = final_cap * np.tanh(logits / final_cap)
    return logits


golden = json.load(open(golden_path))["models"][name]
if write_golden:
    # This pass's own greedy runs: per step the argmax, the top five and the top-two margin.
    entry = {k: golden[k] for k in ["add_bos", "bos", "eos"]}
    entry["greedy"] = []
    for case in golden["greedy"]:
        ids = list(case["prompt_ids"])
        steps = []
        for _ in range(len(case["steps"])):
            lg = forward(ids, last_only=True)[-1]
            top = np.argsort(-lg, kind="stable")[:5]
            steps.append({"token": int(top[0]), "top5": [[int(t), float(lg[t])] for t in top],
                          "margin": float(lg[top[0]] - lg[top[1]])})
            ids.append(int(top[0]))
        entry["greedy"].append({"prompt": case["prompt"], "prompt_ids": case["prompt_ids"], "steps": steps})
        print(f"{case['prompt'][:24]!r:28} {len(steps)} steps", file=sys.stderr)
    out = {"generator": f"scripts/reference/families_f64.py {' '.join(args)} (float64 NumPy)",
           "models": {name: entry}}
    with open(write_golden, "w") as fh:
        fh.write(json.dumps(out) + "\n")
    sys.exit(0)
worst, agree, steps = 0.0, 0, 0
for case in golden["greedy"]:
    ids = list(case["prompt_ids"]) + [s["token"] for s in case["steps"]]
    logits = forward(ids)
    n0, cw = len(case["prompt_ids"]), 0.0
    for i, st in enumerate(case["steps"]):
        lg = logits[n0 - 1 + i]
        cw = max(cw, max(abs(lg[t] - v) for t, v in st["top5"]))
        agree += int(np.argmax(lg)) == st["token"]
        steps += 1
    worst = max(worst, cw)
    print(f"{case['prompt'][:24]!r:28} worst |Δ| {cw:.2e}")
print(f"{name}: worst |Δ| {worst:.2e} over {steps} steps, argmax equal at {agree}/{steps}")
