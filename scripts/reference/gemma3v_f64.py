"""An independent float64 NumPy pass of a Gemma 3 vision tower (an mmproj GGUF with `clip.projector_type =
gemma3`), from PNG bytes to the image embeddings the language model receives. Like qwen3vl_f64.py (whose PNG
decoder, Pillow resampler, LayerNorm and GELU it borrows) it shares no code with llama.cpp or kiln: the tower
is written here from the semantics below, checked by reading llama.cpp 0c1e570's tools/mtmd (clip.cpp's
build_vit, models/siglip.cpp, mtmd-image.cpp's fixed-size preprocessor) but not ported from it.

Preprocessing: the PNG as 8-bit RGB, letterboxed into the native image_size square: s = min(S/w, S/h) in
f32, the image resized to (min(ceil(w·s), S), min(ceil(h·s), S)) by Pillow's fixed-point separable
**bilinear** filter (triangle of support 1 scaled by the downscale factor, 22 fraction bits, horizontal then
vertical, u8 between passes), pasted at ((S − w')/2, (S − h')/2) on black; the native size itself is not
resampled. Then x/255, (x − mean)/std.

Tower (SigLIP): p×p patches (channel, row, column, as Conv2d weights) times `v.patch_embd.weight`, plus
`v.patch_embd.bias` and the learned `v.position_embd.weight` (one row per patch, row-major). Per block:
h = LN(x); Q, K, V each h·W + b; softmax attention over all patches, scale 1/sqrt(d); x += attn_out;
x += ffn_down(GELU_tanh(ffn_up(LN(x)))). Then `v.post_ln`; the patch grid average-pooled k×k
(k = `clip.vision.projector.scale_factor`, else 4; tokens row-major); RMSNorm (eps the tower's) times
`mm.soft_emb_norm.weight`; and the input projection x·W with W = `mm.input_projection.weight` as stored
(n_embd × projection_dim, used untransposed: llama.cpp multiplies by its transpose's transpose).

Known differences from llama.cpp's CPU arithmetic: the F16 im2col of the patch convolution and GELU through
an f16 table (--llama-f16-conv, --gelu-table reproduce them); else exact f64.

--mutant NAME switches one feature off, to show the comparison is worth something: no-pos-embd, no-pool
(the first token of each k×k block instead of the mean), no-soft-norm, gelu-erf, no-letterbox (stretch).

Output JSON as qwen3vl_f64.py's: {"source", "mmproj", "images": {basename: {"nx", "ny", "nx_tokens",
"ny_tokens", "n_tokens", "n_embd", "embd"}}}; nx_tokens is the token count and ny_tokens 1, as llama.cpp
reports Gemma 3's images (a run of tokens).

Run: target/fixtures-venv/bin/python scripts/reference/gemma3v_f64.py \\
         tests/fixtures/made/gemma3-mmproj-tiny.gguf tests/fixtures/golden/f64-gemma3v.json \\
         tests/fixtures/made/vision-32x32.png tests/fixtures/made/vision-48x32.png \\
         tests/fixtures/made/vision-45x29.png tests/fixtures/made/vision-20x70.png \\
         [--mutant NAME] [--gelu-table] [--llama-f16-conv] [--compare tests/fixtures/golden/llama-cpp-vision-gemma3.json]
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen3vl_f64 import (BILINEAR, decode_png, f16, fit, layer_norm, lin, make_act, normalize,  # noqa: E402
                         parse_args, read_mmproj, tower_hparams, write_result)

MUTANTS = ["no-pos-embd", "no-pool", "no-soft-norm", "gelu-erf", "no-letterbox"]


def load(path):
    W, key, types = read_mmproj(path, "gemma3")
    hp = tower_hparams(
        key, types, size=key("clip.vision.image_size"), k=key("clip.vision.projector.scale_factor", 4)
    )
    g = dict(kern=W("v.patch_embd.weight"), pb=W("v.patch_embd.bias"), pos=W("v.position_embd.weight"),
             post_w=W("v.post_ln.weight"), post_b=W("v.post_ln.bias"),
             soft=W("mm.soft_emb_norm.weight"), proj=W("mm.input_projection.weight"))
    names = ["ln1", "attn_q", "attn_k", "attn_v", "attn_out", "ln2", "ffn_up", "ffn_down"]
    g["layers"] = [{n: (W(f"v.blk.{i}.{n}.weight"), W(f"v.blk.{i}.{n}.bias")) for n in names}
                   for i in range(hp["L"])]
    return hp, g


def encode(hp, g, img, mutant=None, gelu_table=False, f16_conv=False):
    """img (S, S, 3) normalized -> (n_tokens, projection_dim)."""
    p, E, H, d, eps, k = hp["p"], hp["E"], hp["H"], hp["d"], hp["eps"], hp["k"]
    n = img.shape[0] // p
    act = make_act("gelu", mutant, gelu_table)
    patches = img.transpose(2, 0, 1).reshape(3, n, p, n, p).transpose(1, 3, 0, 2, 4).reshape(n * n, 3 * p * p)
    kern = g["kern"].reshape(E, -1)
    if f16_conv:
        patches, kern = f16(patches), f16(kern)
    x = patches @ kern.T + g["pb"]
    if mutant != "no-pos-embd":
        x = x + g["pos"].reshape(n * n, E)
    N = x.shape[0]
    for lw in g["layers"]:
        h = layer_norm(x, *lw["ln1"], eps)
        q, kk, v = (lin(h, *lw[name]).reshape(N, H, d) for name in ("attn_q", "attn_k", "attn_v"))
        sc = np.einsum("qhd,khd->hqk", q, kk) / np.sqrt(d)
        pr = np.exp(sc - sc.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        x = x + lin(np.einsum("hqk,khd->qhd", pr, v).reshape(N, E), *lw["attn_out"])
        h = layer_norm(x, *lw["ln2"], eps)
        x = x + lin(act(lin(h, *lw["ffn_up"])), *lw["ffn_down"])
    x = layer_norm(x, g["post_w"], g["post_b"], eps)
    m = n // k
    blocks = x.reshape(m, k, m, k, E)
    x = blocks[:, 0, :, 0, :] if mutant == "no-pool" else blocks.mean(axis=(1, 3))
    x = x.reshape(m * m, E)
    if mutant != "no-soft-norm":
        x = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g["soft"]
    return x @ g["proj"]


def main():
    a = parse_args(__doc__, MUTANTS)
    hp, g = load(a["mmproj"])
    print(f"{os.path.basename(a['mmproj'])}: n_embd {hp['E']}, heads {hp['H']}×{hp['d']}, layers {hp['L']}, "
          f"patch {hp['p']}, image {hp['size']}, pool {hp['k']}, eps {hp['eps']}, tensor types {hp['types']}")
    res = {}
    for path in a["images"]:
        canvas = fit(decode_png(path), hp["size"], hp["size"], a["mutant"] != "no-letterbox", BILINEAR)
        y = encode(hp, g, normalize(canvas, hp["mean"], hp["std"]), a["mutant"], a["gelu_table"], a["f16_conv"])
        res[os.path.basename(path)] = dict(
            nx=hp["size"], ny=hp["size"], nx_tokens=y.shape[0], ny_tokens=1, n_tokens=y.shape[0],
            n_embd=y.shape[1], embd=[float(v) for v in y.reshape(-1)])
        print(f"  {os.path.basename(path)}: -> {y.shape[0]} tokens x {y.shape[1]}")
    write_result(a, "scripts/reference/gemma3v_f64.py: independent float64 NumPy pass of the gemma3 vision "
                    "tower (exact GELU, f64 throughout)", res)


if __name__ == "__main__":
    main()
