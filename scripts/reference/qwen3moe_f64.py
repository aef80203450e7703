"""An independent float64 forward pass of a `qwen3moe` GGUF (written from Hugging Face's Qwen3-MoE
modelling code and the converter's storage conventions, no llama.cpp code), to cross-check
llama.cpp's goldens and to show what the MoE details are worth.

Per block: x += o_proj(attn(rope(rms(q)·q_norm), rope(rms(k)·k_norm), v)) with NEOX RoPE (pairs i,
i + d/2), causal GQA (query head h reads KV head h // (heads / kv_heads)), scale 1/sqrt(head_dim); then
x += Σ_top-k w_e · down_e(SiLU(gate_e·h) ⊙ up_e·h) with h = rms(x)·ffn_norm, p = softmax(router·h),
the top k = expert_used_count by p, w = p / Σ_top-k p. Then rms(x)·output_norm and the LM head.

For each greedy case of the golden file, teacher-forced on llama.cpp's tokens, it prints the largest
|Δ| between its logits and llama.cpp's top-5, whether the argmax agrees, and the smallest gap between
the k-th and (k+1)-th router probability anywhere on the path (the routing's safety margin against
rounding); then the same comparison for two wrong routings (top-1 only; top-k weights not
renormalized), which an oracle worth the name must reject.

Run: python3 scripts/reference/qwen3moe_f64.py tests/fixtures/made/qwen3moe-tiny.gguf \
         tests/fixtures/golden/llama-cpp-qwen3moe.json
"""
import json
import sys

import numpy as np
from gguf import GGUFReader


def load(path):
    r = GGUFReader(path)
    arch = r.fields["general.architecture"].contents()

    def key(k):
        return r.fields[f"{arch}.{k}"].contents()

    cfg = {
        "layers": key("block_count"),
        "heads": key("attention.head_count"),
        "kv_heads": key("attention.head_count_kv"),
        "head_dim": key("attention.key_length"),
        "eps": key("attention.layer_norm_rms_epsilon"),
        "base": key("rope.freq_base"),
        "used": key("expert_used_count"),
    }
    weights = {t.name: np.array(t.data, dtype=np.float64) for t in r.tensors}
    return cfg, weights


def rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def forward(cfg, W, ids, rows, routing="renormalized"):
    """Logits at positions `rows` of the sequence `ids`, and the smallest k-th/(k+1)-th router gap."""
    T, H, KV, d = len(ids), cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    eps, k = cfg["eps"], cfg["used"]
    half = d // 2
    inv = cfg["base"] ** (-np.arange(half) * 2.0 / d)
    ang = np.arange(T)[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rope(v):
        a, b = v[..., :half], v[..., half:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], -1)

    mask = np.triu(np.full((T, T), -np.inf), 1)
    x = W["token_embd.weight"][ids]
    gap = np.inf
    for i in range(cfg["layers"]):
        b = lambda n: W[f"blk.{i}.{n}.weight"]  # noqa: E731
        h = rms(x, b("attn_norm"), eps)
        q = rms((h @ b("attn_q").T).reshape(T, H, d), b("attn_q_norm"), eps)
        kk = rms((h @ b("attn_k").T).reshape(T, KV, d), b("attn_k_norm"), eps)
        v = (h @ b("attn_v").T).reshape(T, KV, d)
        q, kk = rope(q), rope(kk)
        out = np.empty((T, H, d))
        for hh in range(H):
            g = hh // (H // KV)
            s = softmax(q[:, hh] @ kk[:, g].T / np.sqrt(d) + mask)
            out[:, hh] = s @ v[:, g]
        x = x + out.reshape(T, H * d) @ b("attn_output").T

        h = rms(x, b("ffn_norm"), eps)
        p = softmax(h @ b("ffn_gate_inp").T)
        order = np.argsort(-p, axis=1, kind="stable")
        ps = np.take_along_axis(p, order, 1)
        gap = min(gap, float((ps[:, k - 1] - ps[:, k]).min()))
        used = 1 if routing == "top1" else k
        top = order[:, :used]
        w = np.take_along_axis(p, top, 1)
        if routing != "not renormalized":
            w = w / w.sum(1, keepdims=True)
        y = np.zeros_like(x)
        gate, up, down = b("ffn_gate_exps"), b("ffn_up_exps"), b("ffn_down_exps")
        for j in range(used):
            for e in np.unique(top[:, j]):
                t = top[:, j] == e
                a = h[t] @ gate[e].T
                z = (a / (1 + np.exp(-a))) * (h[t] @ up[e].T)
                y[t] += w[t, j : j + 1] * (z @ down[e].T)
        x = x + y
    return rms(x[rows], W["output_norm.weight"], eps) @ W["output.weight"].T, gap


def compare(cfg, W, golden, routing):
    worst, agree, steps, gap = 0.0, 0, 0, np.inf
    for case in golden["greedy"]:
        prompt, st = case["prompt_ids"], case["steps"]
        ids = prompt + [s["token"] for s in st[:-1]]
        rows = np.arange(len(prompt) - 1, len(prompt) - 1 + len(st))
        logits, g = forward(cfg, W, ids, rows, routing)
        gap = min(gap, g)
        for s, l in zip(st, logits):
            worst = max(worst, max(abs(l[i] - v) for i, v in s["top5"]))
            agree += int(np.argmax(l) == s["token"])
            steps += 1
    return worst, agree, steps, gap


def main(model, golden_file):
    cfg, W = load(model)
    name = model.split("/")[-1]
    golden = json.load(open(golden_file))["models"][name]
    for routing in ["renormalized", "top1", "not renormalized"]:
        worst, agree, steps, gap = compare(cfg, W, golden, routing)
        print(
            f"{name}, routing {routing}: max |Δ| vs llama.cpp top-5 {worst:.2e}, "
            f"argmax equal {agree}/{steps}, smallest k-th/(k+1)-th router gap {gap:.2e}"
        )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
