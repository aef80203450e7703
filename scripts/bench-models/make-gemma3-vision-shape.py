#!/usr/bin/env python3
"""Write random-weight Gemma 3 vision towers (llama.cpp mmproj files, `clip.projector_type` = "gemma3") at the real
models' SigLIP-400M shape, a one-block Gemma 3 text model of the matching width, and a test image, for CPU speed
measurements of image encoding only (scripts/bench-vision.py): the embeddings are noise. Do not commit the output.

Layout: that of the tiny fixture tests/fixtures/make_gemma3_vision.py (what llama.cpp's clip_graph_siglip,
tools/mtmd/models/siglip.cpp, builds for gemma3: the patch convolution with its bias, a learned position embedding
per patch, pre-norm LayerNorm blocks with separate Q, K and V (each with a bias), GELU FFN, v.post_ln, then 4×4
average pooling, the soft-embedding RMSNorm and the input projection), at Gemma 3's vision config:
embedding_length 1152, 16 heads of 72, feed_forward_length 4304, 27 blocks, patch_size 14, image_size 896 (64×64
patches, 4096 rows, pooled to 256 tokens), eps 1e-6, image_mean = image_std = [0.5, 0.5, 0.5]; projection_dim 2560
(Gemma 3 4B's width).

NumPy shapes (GGUF ne reversed), E = 1152, F = 4304, P = 2560:
  v.patch_embd.weight [E, 3, 14, 14]; v.patch_embd.bias [E]; v.position_embd.weight [4096, E]
  v.blk.{0..26}: ln1/ln2 .weight/.bias [E]; attn_q/attn_k/attn_v/attn_out [E, E] + [E];
                 ffn_up [F, E] + [F]; ffn_down [E, F] + [E]
  v.post_ln.weight/.bias [E]; mm.soft_emb_norm.weight [E]; mm.input_projection.weight [E, P]
(419.8M parameters.)

Two projector files from the same seed in the same order (so the Q8_0 file is the F16 file's values quantized):
- gemma3-vision-shape.f16.gguf: every matrix F16, the patch kernel included; norms, biases and the position
  embedding F32.
- gemma3-vision-shape.q8_0.gguf: attn_q/k/v, attn_out, ffn_up and the input projection Q8_0; ffn_down F16, since
  its rows of 4304 are not a whole number of 32-value blocks; the rest as in the F16 file.
Weights: Gaussian, std 1/sqrt(fan_in); norm weights 1 ± 0.1, biases 0.02·N(0,1), positions 0.1·N(0,1).

The text model, gemma3-text-shape.gguf: Gemma 3's layer at width 2560 (8 query heads and 4 KV heads of 256, FFN
10240) with one block, F16, the vocabulary and chat template of tests/fixtures/models/qwen35moe-tiny.gguf (as the
tiny fixture's): both tools need a text model of the projector's width, and its size does not enter the encode.

Image: bench-896x896.png, 8-bit RGB (the fixture's picture), at the tower's native size, so neither tool resizes it.

Run (gguf 0.19, numpy): target/fixtures-venv/bin/python scripts/bench-models/make-gemma3-vision-shape.py \
    /work/bench/vision
then: TEXT_MODEL=/work/bench/vision/gemma3-text-shape.gguf IMAGE=/work/bench/vision/bench-896x896.png \
    MMPROJ=/work/bench/vision/gemma3-vision-shape.f16.gguf,/work/bench/vision/gemma3-vision-shape.q8_0.gguf \
    LLAMA_BIN=... scripts/bench-vision.py
"""
import os
import sys

import numpy as np

import bench_gguf
from bench_gguf import BenchFile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "fixtures"))
import tiny_gguf  # noqa: E402
from make_qwen35_vision import image, png_bytes  # noqa: E402

E, HEADS, FF, LAYERS = 1152, 16, 4304, 27
IMAGE_SIZE, PATCH, POOL = 896, 14, 4
PROJ = 2560
EPS = 1e-6
SEED = 3_1152
QUANTIZED = ("attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_out.weight", "ffn_up.weight",
             "mm.input_projection.weight")
# The text model.
T_HEADS, T_KV_HEADS, T_HEAD_DIM, T_FF = 8, 4, 256, 10240
VOCAB_FROM = os.path.join(HERE, "..", "..", "tests", "fixtures", "models", "qwen35moe-tiny.gguf")


def tensors():
    """(name, NumPy shape, kind) in file order; kind: 'matrix' (std 1/sqrt(fan_in)), 'projection' (the input
    projection, stored [E, P] and multiplied from the right: fan_in E), 'norm', 'bias' or 'pos'."""
    t = [("v.patch_embd.weight", (E, 3, PATCH, PATCH), "matrix"),
         ("v.patch_embd.bias", (E,), "bias"),
         ("v.position_embd.weight", ((IMAGE_SIZE // PATCH) ** 2, E), "pos")]
    for il in range(LAYERS):
        b = f"v.blk.{il}"
        t += [(f"{b}.ln1.weight", (E,), "norm"), (f"{b}.ln1.bias", (E,), "bias")]
        for part in ("q", "k", "v"):
            t += [(f"{b}.attn_{part}.weight", (E, E), "matrix"), (f"{b}.attn_{part}.bias", (E,), "bias")]
        t += [(f"{b}.attn_out.weight", (E, E), "matrix"), (f"{b}.attn_out.bias", (E,), "bias"),
              (f"{b}.ln2.weight", (E,), "norm"), (f"{b}.ln2.bias", (E,), "bias"),
              (f"{b}.ffn_up.weight", (FF, E), "matrix"), (f"{b}.ffn_up.bias", (FF,), "bias"),
              (f"{b}.ffn_down.weight", (E, FF), "matrix"), (f"{b}.ffn_down.bias", (E,), "bias")]
    t += [("v.post_ln.weight", (E,), "norm"), ("v.post_ln.bias", (E,), "bias"),
          ("mm.soft_emb_norm.weight", (E,), "norm"),
          ("mm.input_projection.weight", (E, PROJ), "projection")]
    return t


def draw(rng, shape, kind):
    if kind == "matrix":
        return (rng.standard_normal(shape, dtype=np.float32) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)
    if kind == "projection":
        return (rng.standard_normal(shape, dtype=np.float32) / np.sqrt(shape[0])).astype(np.float32)
    if kind == "norm":
        return (1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
    if kind == "bias":
        return (0.02 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
    assert kind == "pos", kind
    return (0.1 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)


def write_mmproj(path, q8):
    keys = [("embedding_length", E), ("attention.head_count", HEADS), ("feed_forward_length", FF),
            ("block_count", LAYERS), ("projection_dim", PROJ), ("attention.layer_norm_epsilon", EPS),
            ("image_size", IMAGE_SIZE), ("patch_size", PATCH), ("projector.scale_factor", POOL)]
    bench_gguf.write_mmproj(path, "gemma3-vision-shape", "gemma3", SEED, q8, keys, tensors(), draw,
                            QUANTIZED)


def write_text_model(path):
    f = BenchFile(path, "gemma3", SEED + 1)
    w = f.w
    w.add_type("model")
    w.add_name("gemma3-text-shape")
    w.add_context_length(8192)
    w.add_embedding_length(PROJ)
    w.add_block_count(1)
    w.add_feed_forward_length(T_FF)
    w.add_head_count(T_HEADS)
    w.add_head_count_kv(T_KV_HEADS)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_key_length(T_HEAD_DIM)
    w.add_value_length(T_HEAD_DIM)
    w.add_rope_freq_base(1e6)
    w.add_float32("gemma3.rope.freq_base_swa", 10000.0)
    w.add_sliding_window(1024)
    w.add_file_type(1)
    vocab = tiny_gguf.copy_tokenizer(w, vocab_from=VOCAB_FROM)
    f16 = lambda name, *shape: f.add(name, shape, np.float16, lambda: (
        f.rng.standard_normal(shape, dtype=np.float32) / np.sqrt(shape[-1])).astype(np.float16))
    norm = lambda name, n: f.add(name, (n,), np.float32, lambda: (
        1.0 + 0.1 * f.rng.standard_normal(n, dtype=np.float32)).astype(np.float32))
    f16("token_embd.weight", vocab, PROJ)
    q, kv = T_HEADS * T_HEAD_DIM, T_KV_HEADS * T_HEAD_DIM
    norm("blk.0.attn_norm.weight", PROJ)
    f16("blk.0.attn_q.weight", q, PROJ)
    f16("blk.0.attn_k.weight", kv, PROJ)
    f16("blk.0.attn_v.weight", kv, PROJ)
    norm("blk.0.attn_q_norm.weight", T_HEAD_DIM)
    norm("blk.0.attn_k_norm.weight", T_HEAD_DIM)
    f16("blk.0.attn_output.weight", PROJ, q)
    norm("blk.0.post_attention_norm.weight", PROJ)
    norm("blk.0.ffn_norm.weight", PROJ)
    f16("blk.0.ffn_gate.weight", T_FF, PROJ)
    f16("blk.0.ffn_up.weight", T_FF, PROJ)
    f16("blk.0.ffn_down.weight", PROJ, T_FF)
    norm("blk.0.post_ffw_norm.weight", PROJ)
    norm("output_norm.weight", PROJ)
    f.write()
    print(f"wrote {path}", flush=True)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    write_mmproj(os.path.join(out_dir, "gemma3-vision-shape.f16.gguf"), q8=False)
    write_mmproj(os.path.join(out_dir, "gemma3-vision-shape.q8_0.gguf"), q8=True)
    write_text_model(os.path.join(out_dir, "gemma3-text-shape.gguf"))
    png = os.path.join(out_dir, f"bench-{IMAGE_SIZE}x{IMAGE_SIZE}.png")
    with open(png, "wb") as out:
        out.write(png_bytes(image(IMAGE_SIZE, IMAGE_SIZE)))
    print(f"wrote {png}", flush=True)


if __name__ == "__main__":
    main()
