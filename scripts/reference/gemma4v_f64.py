"""An independent float64 NumPy pass of a Gemma 4 vision tower (an mmproj GGUF with `clip.projector_type =
gemma4v`), from PNG bytes to the image embeddings the language model receives. Like gemma3v_f64.py it borrows
qwen3vl_f64.py's PNG decoder, smart resize and Pillow bicubic letterbox (Gemma 4 resizes as Qwen does), and
shares no code with llama.cpp or kiln: the tower is written here from the semantics below, checked by reading
llama.cpp 0c1e570's tools/mtmd (models/gemma4v.cpp, clip.cpp's build_vit / build_ffn / build_attn and the
clamp loading) but not ported from it.

Preprocessing: f = patch·k (k = `clip.vision.projector.scale_factor`, else 3); the image resized, aspect kept,
to whole f×f tokens between 70 and 1120 of them (qwen3vl_f64.py's smart size, bicubic, letterboxed); then
(x/255 − mean)/std, mapped to 2v − 1.

Tower: p×p patches (channel, row, column) times `v.patch_embd.weight`, no bias; plus, from
`v.position_embd.weight` (two tables: columns, then rows), the column table's row at the patch's column and
the row table's at its row. Each linear map W is "clippable": its input clamped to [`.input_min`,
`.input_max`] and its output to [`.output_min`, `.output_max`] where the file has those one-number tensors.
Per block (every norm an RMSNorm, eps the tower's): h = norm(x)·ln1; Q, K, V = h·W (no biases); Q and K
normed per head with `attn_q_norm` / `attn_k_norm`, V per head without a weight; a 2-D NEOX RoPE of base 100:
the first half of each head (d/2 dims, pairs (i, i + d/4)) turned by the patch's column, the second half by
its row, θ_i = 100^(−2i/(d/2)); softmax attention with scale 1; attn_out; norm·`attn_post_norm`; x += that;
then GELU_tanh(norm(x)·ln2·W_gate) · (norm(x)·ln2·W_up) through ffn_down, norm·`ffn_post_norm`, x += that,
and x times the block's `out_scale`. Then the k×k average pool of the patch grid (tokens row-major) times
sqrt(width), (x − `v.std_bias`)·`v.std_scale`, an RMSNorm without weight, and `mm.input_projection`.

Known differences from llama.cpp's CPU arithmetic: the F16 im2col of the patch convolution and GELU through
an f16 table (--llama-f16-conv, --gelu-table reproduce them); else exact f64.

--mutant NAME switches one feature off: no-rope, rope-swap (row and column exchanged), no-pos-embd,
no-clamp, no-v-norm, no-out-scale, no-std (the standardization), gelu-erf.

Output JSON as qwen3vl_f64.py's; nx_tokens is the token count and ny_tokens 1, as llama.cpp reports them.

Run: target/fixtures-venv/bin/python scripts/reference/gemma4v_f64.py \\
         tests/fixtures/made/gemma4-mmproj-tiny.gguf tests/fixtures/golden/f64-gemma4v.json \\
         tests/fixtures/made/vision-32x32.png tests/fixtures/made/vision-48x32.png \\
         tests/fixtures/made/vision-45x29.png tests/fixtures/made/vision-20x70.png \\
         [--mutant NAME] [--gelu-table] [--llama-f16-conv] [--compare tests/fixtures/golden/llama-cpp-vision-gemma4.json]
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen3vl_f64 import (  # noqa: E402
    decode_png, f16, make_act, parse_args, preprocess, read_mmproj, tower_hparams, write_result,
)

MUTANTS = ["no-rope", "rope-swap", "no-pos-embd", "no-clamp", "no-v-norm", "no-out-scale", "no-std", "gelu-erf"]


def load(path):
    W, key, types = read_mmproj(path, "gemma4v")
    hp = tower_hparams(key, types, k=key("clip.vision.projector.scale_factor", 3))

    def linear(name):
        def bound(suffix, default):
            v = W(f"{name}.{suffix}")
            return default if v is None else float(v.reshape(-1)[0])
        return dict(w=W(f"{name}.weight"), imin=bound("input_min", -np.inf), imax=bound("input_max", np.inf),
                    omin=bound("output_min", -np.inf), omax=bound("output_max", np.inf))

    g = dict(kern=W("v.patch_embd.weight"), pos=W("v.position_embd.weight"),
             std_bias=W("v.std_bias"), std_scale=W("v.std_scale"), proj=linear("mm.input_projection"))
    g["layers"] = []
    for i in range(hp["L"]):
        b = f"v.blk.{i}"
        lw = {n: linear(f"{b}.{n}") for n in ["attn_q", "attn_k", "attn_v", "attn_out", "ffn_gate", "ffn_up",
                                              "ffn_down"]}
        for n in ["ln1", "ln2", "attn_q_norm", "attn_k_norm", "attn_post_norm", "ffn_post_norm", "out_scale"]:
            lw[n] = W(f"{b}.{n}.weight")
        g["layers"].append(lw)
    return hp, g


def rms(x, w, eps):
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return y * w if w is not None else y


def apply(m, x, clamp=True):
    if clamp:
        x = np.clip(x, m["imin"], m["imax"])
    y = x @ m["w"].T
    return np.clip(y, m["omin"], m["omax"]) if clamp else y


def neox(x, pos, base):
    """NEOX RoPE over all of x's last axis (pairs (i, i + n/2)) by the positions `pos` (one per row)."""
    n = x.shape[-1]
    theta = base ** (-2.0 * np.arange(n // 2) / n)
    ang = pos[:, None, None] * theta[None, None, :]
    c, s = np.cos(ang), np.sin(ang)
    a, b = x[..., :n // 2], x[..., n // 2:]
    return np.concatenate([a * c - b * s, a * s + b * c], -1)


def encode(hp, g, img, mutant=None, gelu_table=False, f16_conv=False):
    """img (Hpx, Wpx, 3) normalized -> (n_tokens, projection_dim)."""
    p, E, H, d, eps, k = hp["p"], hp["E"], hp["H"], hp["d"], hp["eps"], hp["k"]
    Hpx, Wpx = img.shape[:2]
    ny, nx = Hpx // p, Wpx // p
    act = make_act("gelu", mutant, gelu_table)
    clamp = mutant != "no-clamp"
    img = 2.0 * img - 1.0
    patches = img.transpose(2, 0, 1).reshape(3, ny, p, nx, p).transpose(1, 3, 0, 2, 4).reshape(ny * nx, 3 * p * p)
    kern = g["kern"].reshape(E, -1)
    if f16_conv:
        patches, kern = f16(patches), f16(kern)
    x = patches @ kern.T
    N = x.shape[0]
    cols = np.arange(N) % nx
    rows = np.arange(N) // nx
    if mutant != "no-pos-embd":
        x = x + g["pos"][0][cols] + g["pos"][1][rows]
    first, second = (rows, cols) if mutant == "rope-swap" else (cols, rows)

    def turn(t):
        if mutant == "no-rope":
            return t
        return np.concatenate([neox(t[..., :d // 2], first.astype(np.float64), 100.0),
                               neox(t[..., d // 2:], second.astype(np.float64), 100.0)], -1)

    for lw in g["layers"]:
        h = rms(x, lw["ln1"], eps)
        q, kk, v = (apply(lw[n], h, clamp).reshape(N, H, d) for n in ("attn_q", "attn_k", "attn_v"))
        q, kk = turn(rms(q, lw["attn_q_norm"], eps)), turn(rms(kk, lw["attn_k_norm"], eps))
        if mutant != "no-v-norm":
            v = rms(v, None, eps)
        sc = np.einsum("qhd,khd->hqk", q, kk)
        pr = np.exp(sc - sc.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        o = apply(lw["attn_out"], np.einsum("hqk,khd->qhd", pr, v).reshape(N, E), clamp)
        x = x + rms(o, lw["attn_post_norm"], eps)
        h = rms(x, lw["ln2"], eps)
        ff = act(apply(lw["ffn_gate"], h, clamp)) * apply(lw["ffn_up"], h, clamp)
        x = x + rms(apply(lw["ffn_down"], ff, clamp), lw["ffn_post_norm"], eps)
        if mutant != "no-out-scale":
            x = x * lw["out_scale"].reshape(-1)[0]
    my, mx = ny // k, nx // k
    x = x.reshape(my, k, mx, k, E).mean(axis=(1, 3)).reshape(my * mx, E) * np.sqrt(E)
    if mutant != "no-std":
        x = (x - g["std_bias"]) * g["std_scale"]
    return apply(g["proj"], rms(x, None, eps), clamp)


def main():
    a = parse_args(__doc__, MUTANTS)
    hp, g = load(a["mmproj"])
    f = hp["p"] * hp["k"]
    print(f"{os.path.basename(a['mmproj'])}: n_embd {hp['E']}, heads {hp['H']}×{hp['d']}, layers {hp['L']}, "
          f"patch {hp['p']}, pool {hp['k']}, eps {hp['eps']}, tensor types {hp['types']}")
    res = {}
    for path in a["images"]:
        img = preprocess(decode_png(path), f, 70 * f * f, 1120 * f * f, hp["mean"], hp["std"])
        y = encode(hp, g, img, a["mutant"], a["gelu_table"], a["f16_conv"])
        Hpx, Wpx = img.shape[:2]
        res[os.path.basename(path)] = dict(
            nx=Wpx, ny=Hpx, nx_tokens=y.shape[0], ny_tokens=1, n_tokens=y.shape[0], n_embd=y.shape[1],
            embd=[float(v) for v in y.reshape(-1)])
        print(f"  {os.path.basename(path)}: {Wpx}x{Hpx} px -> {y.shape[0]} tokens x {y.shape[1]}")
    write_result(a, "scripts/reference/gemma4v_f64.py: independent float64 NumPy pass of the gemma4v vision "
                    "tower (exact GELU, f64 throughout)", res)


if __name__ == "__main__":
    main()
