#!/usr/bin/env python3
"""Write random-weight Qwen3.5 vision towers (llama.cpp mmproj files, `clip.projector_type` = "qwen3vl_merger") at
the real model's vision shape, and a test image, for CPU speed measurements of image encoding only (scripts/
bench-vision.py): the embeddings are noise. Do not commit the output.

Layout: that of the tiny fixture tests/fixtures/make_qwen35_vision.py (what llama.cpp's clip_graph_qwen3vl,
tools/mtmd/models/qwen3vl.cpp, builds: two patch kernels summed, patch bias, a learned position grid, pre-norm
LayerNorm blocks with fused QKV and 2-D RoPE, GELU FFN, v.post_ln, then the 2×2 merger mm.0 -> GELU -> mm.2; no
deepstack, no pre_ln), at Qwen3.5's vision config: embedding_length 1152, 16 heads of 72, feed_forward_length 4304,
27 blocks, patch_size 16, image_size 768 (a 48×48 position grid, 2304 rows), spatial_merge_size 2, GELU, eps 1e-6,
image_mean = image_std = [0.5, 0.5, 0.5]; projection_dim = the text model's embedding_length (--proj-dim, default
2048: /work/bench/qwen35-mtp-shape.q4_k_m.gguf's; llama-mtmd-cli and kiln both refuse a pair whose widths differ).

NumPy shapes (GGUF ne reversed), E = 1152, F = 4304, P = projection_dim:
  v.patch_embd.weight, v.patch_embd.weight.1  [E, 3, 16, 16]
  v.patch_embd.bias [E]; v.position_embd.weight [2304, E]
  v.blk.{0..26}: ln1/ln2 .weight/.bias [E]; attn_qkv [3E, E] + [3E]; attn_out [E, E] + [E];
                 ffn_up [F, E] + [F]; ffn_down [E, F] + [E]
  v.post_ln.weight/.bias [E]; mm.0 [4E, 4E] + [4E]; mm.2 [P, 4E] + [P]
(446.6M parameters at P = 2048.)

Two files, drawn from the same seed in the same order (so the Q8_0 file is the F16 file's values quantized):
- qwen35-vision-shape.f16.gguf: every matrix F16, the patch kernels included (as llama.cpp's converter keeps them
  in an F16 conversion); norms, biases and the position grid F32 (the converter's rule for 1-D tensors and
  V_ENC_EMBD_POS).
- qwen35-vision-shape.q8_0.gguf: attn_qkv, attn_out, ffn_up, mm.0, mm.2 Q8_0 (gguf-py's quantizer, as the
  converter's); ffn_down F16, since its rows of 4304 are not a whole number of 32-value blocks (the converter's
  Q8_0 conversion falls back to F16 for it too); the rest as in the F16 file (note: a converter Q8_0 conversion
  would store the patch kernels F32; they are kept F16 here so that the two files differ only in the block
  matrices).
Weights: Gaussian, std 1/sqrt(fan_in) (patch kernels: fan_in 3·16·16); norm weights 1 ± 0.1, biases 0.02·N(0,1),
position grid 0.1·N(0,1), so activations stay finite through the 27 blocks.

Image: bench-768x512.png, 8-bit RGB (gradients, stripes, a disc, noise; stored deflate blocks as in the fixture
script): a multiple of 32 (patch × merge) on each side, so neither tool resizes it: 48×32 patches, 384 tokens.

Run (gguf 0.19, numpy): target/fixtures-venv/bin/python scripts/bench-models/make-qwen35-vision-shape.py \
    /work/bench/vision [--proj-dim 2048]
"""
import os
import sys

import numpy as np

import bench_gguf

# The test picture and PNG writer of the tiny vision fixture (one copy of both).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures"))
from make_qwen35_vision import image, png_bytes  # noqa: E402

E, HEADS, FF, LAYERS = 1152, 16, 4304, 27
IMAGE_SIZE, PATCH, MERGE = 768, 16, 2
EPS = 1e-6
SEED = 35_1152
IMAGE_W, IMAGE_H = 768, 512
# the 2-D block matrices the Q8_0 file quantizes (ffn_down is not there: 4304 % 32 != 0)
QUANTIZED = ("attn_qkv.weight", "attn_out.weight", "ffn_up.weight", "mm.0.weight", "mm.2.weight")


def tensors(proj_dim):
    """(name, NumPy shape, kind) in file order; kind: 'matrix' (std 1/sqrt(fan_in) over the trailing dims),
    'norm', 'bias' or 'pos'."""
    t = [("v.patch_embd.weight", (E, 3, PATCH, PATCH), "matrix"),
         ("v.patch_embd.weight.1", (E, 3, PATCH, PATCH), "matrix"),
         ("v.patch_embd.bias", (E,), "bias"),
         ("v.position_embd.weight", ((IMAGE_SIZE // PATCH) ** 2, E), "pos")]
    for il in range(LAYERS):
        b = f"v.blk.{il}"
        t += [(f"{b}.ln1.weight", (E,), "norm"), (f"{b}.ln1.bias", (E,), "bias"),
              (f"{b}.attn_qkv.weight", (3 * E, E), "matrix"), (f"{b}.attn_qkv.bias", (3 * E,), "bias"),
              (f"{b}.attn_out.weight", (E, E), "matrix"), (f"{b}.attn_out.bias", (E,), "bias"),
              (f"{b}.ln2.weight", (E,), "norm"), (f"{b}.ln2.bias", (E,), "bias"),
              (f"{b}.ffn_up.weight", (FF, E), "matrix"), (f"{b}.ffn_up.bias", (FF,), "bias"),
              (f"{b}.ffn_down.weight", (E, FF), "matrix"), (f"{b}.ffn_down.bias", (E,), "bias")]
    merged = E * MERGE * MERGE
    t += [("v.post_ln.weight", (E,), "norm"), ("v.post_ln.bias", (E,), "bias"),
          ("mm.0.weight", (merged, merged), "matrix"), ("mm.0.bias", (merged,), "bias"),
          ("mm.2.weight", (proj_dim, merged), "matrix"), ("mm.2.bias", (proj_dim,), "bias")]
    return t


def draw(rng, shape, kind):
    if kind == "matrix":
        return (rng.standard_normal(shape, dtype=np.float32) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)
    if kind == "norm":
        return (1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
    if kind == "bias":
        return (0.02 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
    assert kind == "pos", kind
    return (0.1 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)


def write_mmproj(path, proj_dim, q8):
    keys = [("embedding_length", E), ("attention.head_count", HEADS), ("feed_forward_length", FF),
            ("block_count", LAYERS), ("projection_dim", proj_dim), ("attention.layer_norm_epsilon", EPS),
            ("image_size", IMAGE_SIZE), ("patch_size", PATCH), ("spatial_merge_size", MERGE)]
    bench_gguf.write_mmproj(path, "qwen35-vision-shape", "qwen3vl_merger", SEED, q8, keys,
                            tensors(proj_dim), draw, QUANTIZED)


def main():
    args = sys.argv[1:]
    proj_dim = 2048
    if "--proj-dim" in args:
        i = args.index("--proj-dim")
        proj_dim = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 1:
        sys.exit(__doc__)
    out_dir = args[0]
    os.makedirs(out_dir, exist_ok=True)
    write_mmproj(os.path.join(out_dir, "qwen35-vision-shape.f16.gguf"), proj_dim, q8=False)
    write_mmproj(os.path.join(out_dir, "qwen35-vision-shape.q8_0.gguf"), proj_dim, q8=True)
    png = os.path.join(out_dir, f"bench-{IMAGE_W}x{IMAGE_H}.png")
    with open(png, "wb") as f:
        f.write(png_bytes(image(IMAGE_W, IMAGE_H)))
    print(f"wrote {png}: {IMAGE_W}x{IMAGE_H}, {IMAGE_W // PATCH}x{IMAGE_H // PATCH} patches, "
          f"{(IMAGE_W // PATCH) * (IMAGE_H // PATCH) // MERGE**2} tokens", flush=True)


if __name__ == "__main__":
    main()
