"""An independent float64 NumPy pass of a Qwen3-VL / Qwen3.5 vision tower (an mmproj GGUF with
`clip.projector_type = qwen3vl_merger`), from PNG bytes to the image embeddings the language model
receives. It shares no code with llama.cpp or kiln: the PNG decoder, the preprocessing, the tower and
the merger are written here from the semantics below (checked by reading llama.cpp 0c1e570's
tools/mtmd and ggml-cpu, but not ported from it), with weights read by the `gguf` package.

Preprocessing (mtmd's dyn-size preprocessor): the PNG as 8-bit RGB (alpha dropped). Target size
"smart resize" with f = patch·merge: W = max(f, round(w/f)·f), H likewise; if W·H > 4096·f² then
β = sqrt(h·w/(4096·f²)), H = max(f, floor(h/β/f)·f), W likewise; elif W·H < 8·f² then β = sqrt(8·f²/(h·w)),
H = ceil(h·β/f)·f, W likewise (f32 arithmetic, as llama.cpp does it). Same size: no resampling. Else
letterboxed: s = min(W/w, H/h), the image resized to (min(ceil(w·s), W), min(ceil(h·s), H)) by Pillow's
fixed-point separable bicubic (a = −0.5, 22 fraction bits, horizontal pass then vertical, u8 between
passes), pasted centred ((W − w')/2, (H − h')/2, integer division) on black. Then x/255, (x − mean)/std.

Tower: patches of p×p (channel-major, then row, column, as Conv2d weights are laid out) through both
temporal halves of the Conv3d (`v.patch_embd.weight` and `.weight.1`, the still image fed to both),
summed. Tokens are reordered by 2×2 blocks (block row, block column, dy, dx); + `v.patch_embd.bias`;
+ the learned n×n position grid (`v.position_embd.weight`), bilinearly resized with align_corners to the
patch grid when it differs, same order. Per block: h = LN(x)·w + b; qkv = h·W + b split Q | K | V;
2-D RoPE on Q and K per head of size d with pairs (i, i + d/2): pair i < d/4 turns by y·θ^i, pair
d/4 ≤ i < d/2 by x·θ^(i − d/4), θ = 10000^(−4/d), (y, x) the patch's row and column; softmax attention
over all tokens, scale 1/sqrt(d); x += attn_out; x += ffn_down(act(ffn_up(LN(x)))) with act GELU (tanh) if
`clip.use_gelu`, SiLU if `clip.use_silu`, else quick GELU (llama.cpp's default); a deepstack layer's
output, taken in groups of 4 tokens, goes through its own LN/fc1/GELU/fc2 and is appended to the result.
After the blocks `v.post_ln`, then each 4 consecutive tokens (one 2×2 block) concatenated and
mm.2(GELU(mm.0(·))). Output: (patches/4) rows of projection_dim (times 1 + deepstack layers).

Known differences from llama.cpp's CPU arithmetic: its patch convolution goes through an F16 im2col
(pixels and kernel rounded to f16), its GELU through an f16 table, everything else in f32.
--llama-f16-conv and --gelu-table reproduce those roundings; without them this is exact f64 (GELU and
quick GELU evaluated exactly). On make_qwen35_vision.py's tower and images, against llama.cpp's
golden/llama-cpp-vision.json: exact, max |Δ| 1.6e-3 to 3.1e-3 per image (max |value| 2.2 to 2.8; the f16
im2col alone moves this pass by up to 2.9e-3, the GELU table by 1.1e-3); with both flags 2.3e-4 to
9.5e-4, half the tokens within 2e-7 (what is left: single f16 roundings landing the other way from f32
inputs). Preprocessing matches exactly: llama.cpp fed this script's 48×32 and 24×72 canvases as PNGs
gives bit-identical embeddings to the 45×29 and 20×70 originals.

--mutant NAME switches one feature off, to show a comparison that is worth something fails without it:
no-rope, rope-swap (x and y sections exchanged), no-pos-interp (nearest instead of bilinear for the
position grid), no-pos-embd, no-patch1 (second temporal kernel dropped), merge-order (row-major token
order instead of 2×2 blocks), gelu-erf (erf GELU in place of tanh GELU everywhere), no-letterbox (stretch
to the target instead of PAD_CEIL), no-deepstack (the deepstack features left out, written as zeros so the
width stays), deepstack-by-order (the k-th deepstack merger fed block k's output instead of its own block's:
blocks 0 and 1 for mergers on blocks 0 and 2). --compare FILE prints, per image, max |Δ| against another file
of this schema (e.g. llama.cpp's) and max |value|.

Deepstack (make_qwen3vl_vision.py's qwen3vl-mmproj-tiny.gguf: 3 blocks, mergers on blocks 0 and 2, rows of
64 × 3; golden/f64-qwen3vl-deepstack.json, exact): against llama.cpp's golden/llama-cpp-vision-qwen3vl.json
max |Δ| 3.3e-3, 2.5e-3, 2.0e-3, 2.3e-3 on 32×32, 48×32, 45×29, 20×70 (values reach 2.6 to 3.0; per 64-column
slice, main / block 0 / block 2: at most 3.1e-3 / 1.4e-3 / 3.3e-3); with both flags 7.8e-4, 5.8e-4, 5.8e-4,
4.9e-4. Mutants, max |Δ| against llama.cpp: no-deepstack 2.3 to 3.0 (the main 64 columns alone still match to
3.1e-3: a tower that drops the deepstack features is only caught by the other 128), deepstack-by-order 0.97
to 1.24 (only the last 64 columns move; llama.cpp fed an mmproj with that merger renamed v.deepstack.1 agrees
with this mutant to 3.2e-3), no-rope 1.7 to 2.6, rope-swap 1.5 to 1.7, no-pos-interp 1.0 to 1.7 (on the
three non-native sizes), no-patch1 2.2 to 2.4, merge-order 2.9 to 3.5, no-letterbox 1.7 and 3.0 (on the two
resized images); gelu-erf 2.1e-3 to 3.6e-3, no further from llama.cpp than the exact pass.

Output JSON: {"source", "mmproj", "images": {basename: {"nx", "ny" (after preprocessing), "nx_tokens",
"ny_tokens", "n_tokens", "n_embd", "embd" (row-major n_tokens × n_embd)}}}.

Run: target/fixtures-venv/bin/python scripts/reference/qwen3vl_f64.py \\
         tests/fixtures/made/qwen35-mmproj-tiny.gguf tests/fixtures/golden/f64-qwen3vl.json \\
         tests/fixtures/made/vision-32x32.png tests/fixtures/made/vision-48x32.png \\
         tests/fixtures/made/vision-45x29.png tests/fixtures/made/vision-20x70.png \\
         [--mutant NAME] [--gelu-table] [--llama-f16-conv] [--compare tests/fixtures/golden/llama-cpp-vision.json]
(the deepstack golden: tests/fixtures/made/qwen3vl-mmproj-tiny.gguf, tests/fixtures/golden/f64-qwen3vl-deepstack.json,
the same four images, --compare tests/fixtures/golden/llama-cpp-vision-qwen3vl.json)
"""
import json
import math
import os
import struct
import sys
import zlib

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

MUTANTS = ["no-rope", "rope-swap", "no-pos-interp", "no-pos-embd", "no-patch1", "merge-order", "gelu-erf",
           "no-letterbox", "no-deepstack", "deepstack-by-order"]


# ---------------------------------------------------------------- PNG (8-bit, non-interlaced)

def decode_png(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG")
    pos, idat, ihdr, plte = 8, [], None, None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"PLTE":
            plte = np.frombuffer(body, np.uint8).reshape(-1, 3)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    w, h, depth, ctype, _comp, _filt, interlace = ihdr
    if depth != 8 or interlace != 0:
        raise ValueError(f"{path}: only 8-bit non-interlaced PNGs (depth {depth}, interlace {interlace})")
    chans = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[ctype]
    raw = zlib.decompress(b"".join(idat))
    stride = w * chans
    out = np.zeros((h, stride), np.uint8)
    prev = bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - chans] if i >= chans else 0
            b = prev[i]
            c = prev[i - chans] if i >= chans else 0
            if f == 0:
                pred = 0
            elif f == 1:
                pred = a
            elif f == 2:
                pred = b
            elif f == 3:
                pred = (a + b) >> 1
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            else:
                raise ValueError(f"{path}: bad filter {f}")
            line[i] = (line[i] + pred) & 0xFF
        out[y] = np.frombuffer(bytes(line), np.uint8)
        prev = line
    px = out.reshape(h, w, chans)
    if ctype == 3:
        return plte[px[..., 0]]
    if ctype in (0, 4):
        return np.repeat(px[..., :1], 3, axis=2)
    return px[..., :3].copy()  # RGB, or RGBA with alpha dropped (as stb_image's 3-channel load does)


# ---------------------------------------------------------------- preprocessing

def smart_size(w, h, f, min_px, max_px):
    f32 = np.float32

    def rnd(x):  # std::round on a float: half away from zero
        q = f32(x) / f32(f)
        return int(math.floor(float(q) + 0.5)) * f

    def flo(x):
        return int(math.floor(float(f32(x) / f32(f)))) * f

    def cei(x):
        return int(math.ceil(float(f32(x) / f32(f)))) * f

    wb, hb = max(f, rnd(w)), max(f, rnd(h))
    if wb * hb > max_px:
        beta = np.sqrt(f32(h) * f32(w) / f32(max_px), dtype=f32)
        hb, wb = max(f, flo(f32(h) / beta)), max(f, flo(f32(w) / beta))
    elif wb * hb < min_px:
        beta = np.sqrt(f32(min_px) / (f32(h) * f32(w)), dtype=f32)
        hb, wb = cei(f32(h) * beta), cei(f32(w) * beta)
    return wb, hb


def bicubic_filter(x):
    x, a = abs(x), -0.5
    if x < 1.0:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    if x < 2.0:
        return (((x - 5) * x + 8) * x - 4) * a
    return 0.0


def triangle_filter(x):
    return max(0.0, 1.0 - abs(x))


# Pillow's filters: (function, support). Qwen and Gemma 4 resize bicubic (a = -0.5), Gemma 3 bilinear.
BICUBIC = (bicubic_filter, 2.0)
BILINEAR = (triangle_filter, 1.0)


def pillow_weights(in_size, out_size, kernel=BICUBIC):
    """Pillow's coefficients for `kernel` as 22-bit fixed point: (xmin, weights) per output."""
    filt, filter_support = kernel
    scale = in_size / out_size
    fs = max(scale, 1.0)
    support = filter_support * fs
    res = []
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size)
        ws = [filt((x + xmin - center + 0.5) / fs) for x in range(xmax - xmin)]
        tot = sum(ws)
        ws = [wv / tot if tot != 0.0 else wv for wv in ws]
        res.append((xmin, [int(wv * (1 << 22) + (-0.5 if wv < 0 else 0.5)) for wv in ws]))
    return res


def pillow_pass(img, out_size, axis, kernel=BICUBIC):
    """Resample u8 `img` (h, w, 3) along axis 1 (horizontal) or 0 (vertical), fixed point."""
    src = np.moveaxis(img.astype(np.int64), axis, 0)
    out = np.empty((out_size,) + src.shape[1:], np.int64)
    for i, (xmin, ws) in enumerate(pillow_weights(src.shape[0], out_size, kernel)):
        acc = np.full(src.shape[1:], 1 << 21, np.int64)
        for k, wv in enumerate(ws):
            acc += src[xmin + k] * wv
        out[i] = np.clip(acc >> 22, 0, 255)
    return np.moveaxis(out, 0, axis).astype(np.uint8)


def pillow_resize(img, w, h, kernel=BICUBIC):
    if w != img.shape[1]:
        img = pillow_pass(img, w, 1, kernel)
    if h != img.shape[0]:
        img = pillow_pass(img, h, 0, kernel)
    return img


def fit(rgb, tw, th, letterbox=True, kernel=BICUBIC):
    """`rgb` on a tw × th canvas: as it is at that size; else stretched, or letterboxed (PAD_CEIL: scaled by
    min(tw/w, th/h) in f32, sides rounded up and capped, pasted centred on black)."""
    h, w = rgb.shape[:2]
    if (tw, th) == (w, h):
        return rgb
    if not letterbox:
        return pillow_resize(rgb, tw, th, kernel)
    f32 = np.float32
    s = min(f32(tw) / f32(w), f32(th) / f32(h))
    nw, nh = min(int(math.ceil(f32(w) * s)), tw), min(int(math.ceil(f32(h) * s)), th)
    canvas = np.zeros((th, tw, 3), np.uint8)
    ox, oy = (tw - nw) // 2, (th - nh) // 2
    canvas[oy:oy + nh, ox:ox + nw] = pillow_resize(rgb, nw, nh, kernel)
    return canvas


def normalize(canvas, mean, std):
    x = canvas.astype(np.float64) / 255.0
    return (x - mean) / std  # (H, W, 3)


def preprocess(rgb, f, min_px, max_px, mean, std, letterbox=True):
    h, w = rgb.shape[:2]
    tw, th = smart_size(w, h, f, min_px, max_px)
    return normalize(fit(rgb, tw, th, letterbox), mean, std)


# ---------------------------------------------------------------- model

def read_mmproj(path, projector):
    """An mmproj file's tensors and keys: W(name) as float64 in NumPy order (reversed ne; None when absent),
    key(name, default), and the tensor types, after checking its projector type."""
    r = GGUFReader(path)
    T = {t.name: t for t in r.tensors}
    F = r.fields

    def W(n):
        if n not in T:
            return None
        t = T[n]
        a = dequantize(t.data, t.tensor_type).astype(np.float64)
        return a.reshape([int(x) for x in reversed(t.shape.tolist())])  # numpy shape = reversed ne

    def key(k, default=None):
        return F[k].contents() if k in F else default

    proj = key("clip.projector_type") or key("clip.vision.projector_type")
    if proj != projector:
        raise ValueError(f"projector type {proj!r}, not {projector}")
    return W, key, sorted({t.tensor_type.name for t in r.tensors})


def tower_hparams(key, types, **extra):
    """What every vision tower reads from its mmproj keys (width, heads, blocks, epsilon, patch
    size, the pixel mean and std), with the projector's own keys in `extra`; `d` is the head size."""
    hp = dict(
        E=key("clip.vision.embedding_length"), H=key("clip.vision.attention.head_count"),
        L=key("clip.vision.block_count"), eps=key("clip.vision.attention.layer_norm_epsilon"),
        p=key("clip.vision.patch_size"),
        mean=np.array(key("clip.vision.image_mean"), np.float64)[:3],
        std=np.array(key("clip.vision.image_std"), np.float64)[:3],
        types=types, **extra,
    )
    hp["d"] = hp["E"] // hp["H"]
    return hp


def load(path):
    W, key, types = read_mmproj(path, "qwen3vl_merger")
    hp = tower_hparams(
        key, types, merge=key("clip.vision.spatial_merge_size", 2),
        act="gelu" if key("clip.use_gelu", False) else ("silu" if key("clip.use_silu", False) else "gelu_quick"),
    )
    hp["d"] = key("clip.vision.attention.head_dim", hp["E"] // hp["H"])
    assert hp["merge"] == 2, "llama.cpp's qwen3vl graph hard-codes a 2×2 merge"
    assert hp["d"] * hp["H"] == hp["E"] and hp["d"] % 4 == 0
    g = dict(k0=W("v.patch_embd.weight"), k1=W("v.patch_embd.weight.1"), pb=W("v.patch_embd.bias"),
             pos=W("v.position_embd.weight"), pre_w=W("v.pre_ln.weight"), pre_b=W("v.pre_ln.bias"),
             post_w=W("v.post_ln.weight"), post_b=W("v.post_ln.bias"),
             m0w=W("mm.0.weight"), m0b=W("mm.0.bias"), m2w=W("mm.2.weight"), m2b=W("mm.2.bias"))
    names = ["ln1", "attn_qkv", "attn_out", "ln2", "ffn_up", "ffn_down"]
    g["layers"] = []
    for i in range(hp["L"]):
        lw = {}
        for n in names:
            lw[n + ".w"], lw[n + ".b"] = W(f"v.blk.{i}.{n}.weight"), W(f"v.blk.{i}.{n}.bias")
        for n in ["norm", "fc1", "fc2"]:
            lw["ds_" + n + ".w"], lw["ds_" + n + ".b"] = W(f"v.deepstack.{i}.{n}.weight"), W(f"v.deepstack.{i}.{n}.bias")
        g["layers"].append(lw)
    return hp, g


def f16(x):
    return np.asarray(x, np.float64).astype(np.float16).astype(np.float64)


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * x * (1 + 0.044715 * x * x)))


def gelu_erf(x):
    from math import erf
    return 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))


def gelu_quick(x):
    return x / (1 + np.exp(-1.702 * x))


def make_act(name, mutant, table):
    base = {"gelu": gelu_tanh, "gelu_quick": gelu_quick, "silu": lambda x: x / (1 + np.exp(-x))}[name]
    if name == "gelu" and mutant == "gelu-erf":
        base = gelu_erf
    if not table or name == "silu":
        return base

    def tab(x):  # ggml's f16 tables: input rounded to f16, output stored as f16; |x| >= 10 exact
        y = f16(base(f16(x)))
        if name == "gelu":
            y = np.where(x <= -10, 0.0, np.where(x >= 10, x, y))
        return y
    return tab


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    xc = x - mu
    y = xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


def lin(x, w, b):
    y = x @ w.T
    return y + b if b is not None else y


def resize_grid(grid, oh, ow, nearest=False):
    """(n, n, E) -> (oh, ow, E): bilinear with align_corners (ggml_interpolate), or nearest."""
    ih, iw = grid.shape[:2]
    if (ih, iw) == (oh, ow):
        return grid

    def coords(o, i):
        if nearest:
            idx = np.floor(np.arange(o) * i / o).astype(int)
            return idx, idx, np.zeros(o)
        s = np.arange(o) * ((i - 1) / (o - 1)) if o > 1 and i > 1 else np.arange(o) * (i / o)
        i0 = np.clip(np.floor(s).astype(int), 0, i - 1)
        i1 = np.clip(i0 + 1, 0, i - 1)
        return i0, i1, np.clip(s - i0, 0.0, 1.0)

    y0, y1, dy = coords(oh, ih)
    x0, x1, dx = coords(ow, iw)
    dy, dx = dy[:, None, None], dx[None, :, None]
    a, b = grid[y0][:, x0], grid[y0][:, x1]
    c, d = grid[y1][:, x0], grid[y1][:, x1]
    return a * (1 - dx) * (1 - dy) + b * dx * (1 - dy) + c * (1 - dx) * dy + d * dx * dy


def rope(x, ys, xs, d, mutant):
    """x (N, H, d); pairs (i, i + d/2); i < d/4 by y·θ^i, else by x·θ^(i - d/4); θ = 10000^(-4/d)."""
    if mutant == "no-rope":
        return x
    if mutant == "rope-swap":
        ys, xs = xs, ys
    q = d // 4
    inv = 10000.0 ** (-4.0 * np.arange(q) / d)
    ang = np.concatenate([ys[:, None] * inv[None], xs[:, None] * inv[None]], 1)  # (N, d/2)
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x0, x1 = x[..., :d // 2], x[..., d // 2:]
    return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], -1)


def encode(hp, g, img, mutant=None, gelu_table=False, f16_conv=False):
    """img (Hpx, Wpx, 3) normalized -> (n_tokens, out_dim)."""
    p, E, H, d, eps = hp["p"], hp["E"], hp["H"], hp["d"], hp["eps"]
    Hpx, Wpx = img.shape[:2]
    ny, nx = Hpx // p, Wpx // p
    assert ny % 2 == 0 and nx % 2 == 0
    act = make_act(hp["act"], mutant, gelu_table)
    gelu = make_act("gelu", mutant, gelu_table)

    # patch embedding: rows of (channel, ky, kx), as the Conv2d kernel (E, 3, p, p) flattens
    patches = img.transpose(2, 0, 1).reshape(3, ny, p, nx, p).transpose(1, 3, 0, 2, 4).reshape(ny * nx, 3 * p * p)
    kern = [g["k0"]] + ([] if mutant == "no-patch1" else [g["k1"]])
    if f16_conv:
        patches, kern = f16(patches), [f16(k) for k in kern]
    emb = sum(patches @ k.reshape(E, -1).T for k in kern).reshape(ny, nx, E)

    n = int(round(math.sqrt(g["pos"].shape[0])))
    pos = resize_grid(g["pos"].reshape(n, n, E), ny, nx, nearest=(mutant == "no-pos-interp"))
    yy, xx = np.meshgrid(np.arange(ny, dtype=np.float64), np.arange(nx, dtype=np.float64), indexing="ij")

    if mutant == "merge-order":
        def order(a):
            return a.reshape(ny * nx, *a.shape[2:])
    else:
        def order(a):  # (ny, nx, ...) -> tokens in (block row, block col, dy, dx) order
            return a.reshape(ny // 2, 2, nx // 2, 2, *a.shape[2:]).swapaxes(1, 2).reshape(ny * nx, *a.shape[2:])

    x = order(emb) + g["pb"]
    if mutant != "no-pos-embd":
        x = x + order(pos)
    ys, xs = order(yy), order(xx)
    N = x.shape[0]
    if g["pre_w"] is not None:
        x = layer_norm(x, g["pre_w"], g["pre_b"], eps)

    # The deepstack mergers by the block whose output they read: their own block, or, as the mutant
    # deepstack-by-order, the k-th merger after block k (blocks 0 and 1 for mergers on blocks 0 and 2).
    ds_blocks = [i for i, lw in enumerate(g["layers"]) if lw["ds_fc1.w"] is not None]
    ds_at = {(k if mutant == "deepstack-by-order" else i): g["layers"][i] for k, i in enumerate(ds_blocks)}
    deep = []
    for il, lw in enumerate(g["layers"]):
        h = layer_norm(x, lw["ln1.w"], lw["ln1.b"], eps)
        qkv = lin(h, lw["attn_qkv.w"], lw["attn_qkv.b"])
        q, k, v = (qkv[:, i * E:(i + 1) * E].reshape(N, H, d) for i in range(3))
        q, k = rope(q, ys, xs, d, mutant), rope(k, ys, xs, d, mutant)
        sc = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(d)
        pr = np.exp(sc - sc.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        o = np.einsum("hqk,khd->qhd", pr, v).reshape(N, E)
        x = x + lin(o, lw["attn_out.w"], lw["attn_out.b"])
        h = layer_norm(x, lw["ln2.w"], lw["ln2.b"], eps)
        x = x + lin(act(lin(h, lw["ffn_up.w"], lw["ffn_up.b"])), lw["ffn_down.w"], lw["ffn_down.b"])
        if il in ds_at:
            dw = ds_at[il]
            f = layer_norm(x.reshape(N // 4, 4 * E), dw["ds_norm.w"], dw["ds_norm.b"], eps)
            deep.append(lin(gelu(lin(f, dw["ds_fc1.w"], dw["ds_fc1.b"])), dw["ds_fc2.w"], dw["ds_fc2.b"]))
    if mutant == "no-deepstack":  # the deepstack features left out (as zeros, so the width stays comparable)
        deep = [np.zeros_like(d) for d in deep]

    if g["post_w"] is not None:
        x = layer_norm(x, g["post_w"], g["post_b"], eps)
    y = lin(gelu(lin(x.reshape(N // 4, 4 * E), g["m0w"], g["m0b"])), g["m2w"], g["m2b"])
    return np.concatenate([y] + deep, 1) if deep else y


def parse_args(doc, mutants):
    """MMPROJ OUT IMAGE... [--mutant NAME] [--gelu-table] [--llama-f16-conv] [--compare FILE], as a dict."""
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
        sys.exit(doc)
    mutant = opts.get("--mutant")
    if mutant is not None and mutant not in mutants:
        sys.exit(f"unknown mutant {mutant!r}; one of {', '.join(mutants)}")
    return dict(mmproj=args[0], out=args[1], images=args[2:], mutant=mutant, gelu_table=gelu_table,
                f16_conv=f16_conv, compare=opts.get("--compare"))


def write_result(a, source, res):
    """Write `res` (per image) as the golden schema, `source` naming the tower, then, with --compare, print
    each image's max |Δ| against the other file."""
    settings = [s for s in [f"mutant {a['mutant']}" if a["mutant"] else None,
                            "f16 GELU table" if a["gelu_table"] else None,
                            "f16 im2col" if a["f16_conv"] else None] if s]
    out = {"source": source + (f"; {', '.join(settings)}" if settings else ""),
           "mmproj": os.path.basename(a["mmproj"]), "images": res}
    with open(a["out"], "w") as fh:
        json.dump(out, fh)
        fh.write("\n")

    if a["compare"]:
        other = json.load(open(a["compare"]))["images"]
        for name, r in res.items():
            if name not in other:
                print(f"  {name}: not in {a['compare']}")
                continue
            o = other[name]
            x, y = np.array(r["embd"]), np.array(o["embd"], np.float64)
            grid = (r["nx_tokens"], r["ny_tokens"], r["n_tokens"], r["n_embd"])
            if x.shape != y.shape or grid != tuple(o.get(k) for k in ("nx_tokens", "ny_tokens", "n_tokens", "n_embd")):
                print(f"  {name}: shapes differ: tokens {r['nx_tokens']}x{r['ny_tokens']} ({r['n_tokens']}x{r['n_embd']}) vs "
                      f"{o.get('nx_tokens')}x{o.get('ny_tokens')} ({o.get('n_tokens')}x{o.get('n_embd')})")
                continue
            print(f"  {name}: max |Δ| {np.abs(x - y).max():.3e}, max |value| {np.abs(y).max():.3e}")


def main():
    a = parse_args(__doc__, MUTANTS)
    mutant, gelu_table, f16_conv = a["mutant"], a["gelu_table"], a["f16_conv"]
    mmproj = a["mmproj"]
    hp, g = load(mmproj)
    f = hp["p"] * hp["merge"]
    min_px, max_px = 8 * f * f, 4096 * f * f  # llama.cpp's fixed Qwen-VL token limits (8, 4096)
    print(f"{os.path.basename(mmproj)}: n_embd {hp['E']}, heads {hp['H']}×{hp['d']}, layers {hp['L']}, "
          f"patch {hp['p']}, eps {hp['eps']}, block act {hp['act']}, tensor types {hp['types']}")
    res = {}
    for path in a["images"]:
        img = preprocess(decode_png(path), f, min_px, max_px, hp["mean"], hp["std"],
                         letterbox=(mutant != "no-letterbox"))
        y = encode(hp, g, img, mutant, gelu_table, f16_conv)
        Hpx, Wpx = img.shape[:2]
        res[os.path.basename(path)] = dict(
            nx=Wpx, ny=Hpx, nx_tokens=Wpx // f, ny_tokens=Hpx // f, n_tokens=y.shape[0], n_embd=y.shape[1],
            embd=[float(v) for v in y.reshape(-1)])
        print(f"  {os.path.basename(path)}: {Wpx}x{Hpx} px -> {y.shape[0]} tokens x {y.shape[1]}")
    write_result(a, "scripts/reference/qwen3vl_f64.py: independent float64 NumPy pass of the qwen3vl_merger "
                    "vision tower (exact GELU, f64 throughout)", res)


if __name__ == "__main__":
    main()
