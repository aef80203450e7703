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
import json
import math
import os
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen3vl_f64 import decode_png, f16, layer_norm, lin, make_act  # noqa: E402

MUTANTS = ["no-pos-embd", "no-pool", "no-soft-norm", "gelu-erf", "no-letterbox"]


def bilinear_weights(in_size, out_size):
    """Pillow's bilinear coefficients as 22-bit fixed point: (xmin, weights) per output."""
    scale = in_size / out_size
    fs = max(scale, 1.0)
    support = 1.0 * fs
    res = []
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size)
        ws = [max(0.0, 1.0 - abs((x + xmin - center + 0.5) / fs)) for x in range(xmax - xmin)]
        tot = sum(ws)
        ws = [wv / tot if tot != 0.0 else wv for wv in ws]
        res.append((xmin, [int(wv * (1 << 22) + (-0.5 if wv < 0 else 0.5)) for wv in ws]))
    return res


def bilinear_pass(img, out_size, axis):
    src = np.moveaxis(img.astype(np.int64), axis, 0)
    out = np.empty((out_size,) + src.shape[1:], np.int64)
    for i, (xmin, ws) in enumerate(bilinear_weights(src.shape[0], out_size)):
        acc = np.full(src.shape[1:], 1 << 21, np.int64)
        for k, wv in enumerate(ws):
            acc += src[xmin + k] * wv
        out[i] = np.clip(acc >> 22, 0, 255)
    return np.moveaxis(out, 0, axis).astype(np.uint8)


def bilinear(img, w, h):
    if w != img.shape[1]:
        img = bilinear_pass(img, w, 1)
    if h != img.shape[0]:
        img = bilinear_pass(img, h, 0)
    return img


def preprocess(rgb, size, mean, std, letterbox=True):
    h, w = rgb.shape[:2]
    if (w, h) == (size, size):
        canvas = rgb
    elif not letterbox:
        canvas = bilinear(rgb, size, size)
    else:
        f32 = np.float32
        s = min(f32(size) / f32(w), f32(size) / f32(h))
        nw, nh = min(int(math.ceil(f32(w) * s)), size), min(int(math.ceil(f32(h) * s)), size)
        canvas = np.zeros((size, size, 3), np.uint8)
        ox, oy = (size - nw) // 2, (size - nh) // 2
        canvas[oy:oy + nh, ox:ox + nw] = bilinear(rgb, nw, nh)
    x = canvas.astype(np.float64) / 255.0
    return (x - mean) / std


def load(path):
    r = GGUFReader(path)
    T = {t.name: t for t in r.tensors}
    F = r.fields

    def W(n):
        if n not in T:
            return None
        t = T[n]
        a = dequantize(t.data, t.tensor_type).astype(np.float64)
        return a.reshape([int(x) for x in reversed(t.shape.tolist())])

    def key(k, default=None):
        return F[k].contents() if k in F else default

    proj = key("clip.projector_type") or key("clip.vision.projector_type")
    if proj != "gemma3":
        raise ValueError(f"projector type {proj!r}, not gemma3")
    hp = dict(
        E=key("clip.vision.embedding_length"), H=key("clip.vision.attention.head_count"),
        L=key("clip.vision.block_count"), eps=key("clip.vision.attention.layer_norm_epsilon"),
        p=key("clip.vision.patch_size"), size=key("clip.vision.image_size"),
        k=key("clip.vision.projector.scale_factor", 4),
        mean=np.array(key("clip.vision.image_mean"), np.float64)[:3],
        std=np.array(key("clip.vision.image_std"), np.float64)[:3],
        types=sorted({t.tensor_type.name for t in r.tensors}),
    )
    hp["d"] = hp["E"] // hp["H"]
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
    args = sys.argv[1:]
    opts = {}
    for flag in ["--mutant", "--compare"]:
        if flag in args:
            i = args.index(flag)
            opts[flag] = args[i + 1]
            del args[i:i + 2]
    gelu_table = "--gelu-table" in args
    f16_conv = "--llama-f16-conv" in args
    args = [a for a in args if a not in ("--gelu-table", "--llama-f16-conv")]
    if len(args) < 3:
        sys.exit(__doc__)
    mmproj, out_path, images = args[0], args[1], args[2:]
    mutant = opts.get("--mutant")
    if mutant is not None and mutant not in MUTANTS:
        sys.exit(f"unknown mutant {mutant!r}; one of {', '.join(MUTANTS)}")
    hp, g = load(mmproj)
    print(f"{os.path.basename(mmproj)}: n_embd {hp['E']}, heads {hp['H']}×{hp['d']}, layers {hp['L']}, "
          f"patch {hp['p']}, image {hp['size']}, pool {hp['k']}, eps {hp['eps']}, tensor types {hp['types']}")
    res = {}
    for path in images:
        img = preprocess(decode_png(path), hp["size"], hp["mean"], hp["std"], letterbox=(mutant != "no-letterbox"))
        y = encode(hp, g, img, mutant, gelu_table, f16_conv)
        res[os.path.basename(path)] = dict(
            nx=hp["size"], ny=hp["size"], nx_tokens=y.shape[0], ny_tokens=1, n_tokens=y.shape[0],
            n_embd=y.shape[1], embd=[float(v) for v in y.reshape(-1)])
        print(f"  {os.path.basename(path)}: -> {y.shape[0]} tokens x {y.shape[1]}")
    settings = [s for s in [f"mutant {mutant}" if mutant else None, "f16 GELU table" if gelu_table else None,
                            "f16 im2col" if f16_conv else None] if s]
    out = {"source": "scripts/reference/gemma3v_f64.py: independent float64 NumPy pass of the gemma3 vision "
                     "tower (exact GELU, f64 throughout)" + (f"; {', '.join(settings)}" if settings else ""),
           "mmproj": os.path.basename(mmproj), "images": res}
    with open(out_path, "w") as fh:
        json.dump(out, fh)
        fh.write("\n")
    if "--compare" in opts:
        other = json.load(open(opts["--compare"]))["images"]
        for name, r in res.items():
            a, b = np.array(r["embd"]), np.array(other[name]["embd"], np.float64)
            if a.shape != b.shape:
                print(f"  {name}: shapes differ: {a.shape} vs {b.shape}")
                continue
            print(f"  {name}: max |Δ| {np.abs(a - b).max():.3e} (max |value| {np.abs(b).max():.3f})")


if __name__ == "__main__":
    main()
