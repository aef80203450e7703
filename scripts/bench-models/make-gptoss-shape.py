#!/usr/bin/env python3
"""Write a random-weight gpt-oss GGUF with gpt-oss-20b's shapes, for CPU speed measurements only: its text is
noise. Do not commit its output.

gpt-oss-20b's dimensions (hidden 2880, 64 query and 8 KV heads of 64, 32 experts of width 2880 with 4 used per
token, a window of 128 on alternate layers, YaRN ×32 from 4096, vocabulary 201088) with --layers of its 24
blocks (default 12: the file is about 6.7 GB, so that kiln's repacked experts and the page cache fit this
machine's 24 GiB together; per-token work per layer is the real model's). The experts are MXFP4 and every other
matrix Q8_0, as in the released MXFP4 GGUF; their blocks are written directly as random bytes (sane Q8_0 scales,
E8M0 exponents from 2^-9 to 2^-5), with no F16 intermediate. Norms are ones; biases and sinks zeros. The
tokenizer is a stand-in of 201088 distinct pieces with a few merges (benchmarks feed token ids).

Usage: make-gptoss-shape.py [--layers N] OUT.gguf
"""
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, RopeScalingType

from stand_in_vocab import add_stand_in_vocab

HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 2880, 64, 8, 64
EXPERTS, USED, EXPERT_FF, VOCAB = 32, 4, 2880, 201088

rng = np.random.default_rng(20)


def q8_0(rows, cols):
    """Random Q8_0 blocks for a [rows, cols] matrix (NumPy order)."""
    nb = cols // 32
    blocks = np.empty((rows, nb, 34), dtype=np.uint8)
    blocks[:, :, :2] = np.full((rows, nb, 1), np.float16(0.002)).view(np.uint8)
    blocks[:, :, 2:] = rng.integers(-127, 128, (rows, nb, 32), dtype=np.int8).view(np.uint8)
    return blocks.reshape(rows, nb * 34)


def mxfp4(experts, rows, cols):
    """Random MXFP4 blocks for [experts, rows, cols] (NumPy order)."""
    nb = cols // 32
    blocks = rng.integers(0, 256, (experts, rows, nb, 17), dtype=np.uint8)
    blocks[..., 0] = rng.integers(118, 123, (experts, rows, nb), dtype=np.uint8)
    return blocks.reshape(experts, rows, nb * 17)


def main():
    args = sys.argv[1:]
    layers = 12
    if args and args[0] == "--layers":
        layers, args = int(args[1]), args[2:]
    out = args[0]
    w = GGUFWriter(out, "gpt-oss")
    w.add_name("gpt-oss-20b-shape")
    w.add_block_count(layers)
    w.add_context_length(131072)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(EXPERT_FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(150000.0)
    w.add_rope_scaling_type(RopeScalingType.YARN)
    w.add_rope_scaling_factor(32.0)
    w.add_rope_scaling_orig_ctx_len(4096)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_sliding_window(128)
    w.add_expert_count(EXPERTS)
    w.add_expert_used_count(USED)
    w.add_expert_feed_forward_length(EXPERT_FF)
    w.add_file_type(38)  # MOSTLY_MXFP4_MOE
    add_stand_in_vocab(w, VOCAB, "gpt-4o")

    Q8, MX = GGMLQuantizationType.Q8_0, GGMLQuantizationType.MXFP4
    ones = lambda n: np.ones(n, dtype=np.float32)
    zeros = lambda *s: np.zeros(s, dtype=np.float32)
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    w.add_tensor("token_embd.weight", q8_0(VOCAB, HIDDEN), raw_dtype=Q8)
    for i in range(layers):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", ones(HIDDEN))
        w.add_tensor(b + "attn_q.weight", q8_0(q, HIDDEN), raw_dtype=Q8)
        w.add_tensor(b + "attn_q.bias", zeros(q))
        w.add_tensor(b + "attn_k.weight", q8_0(kv, HIDDEN), raw_dtype=Q8)
        w.add_tensor(b + "attn_k.bias", zeros(kv))
        w.add_tensor(b + "attn_v.weight", q8_0(kv, HIDDEN), raw_dtype=Q8)
        w.add_tensor(b + "attn_v.bias", zeros(kv))
        w.add_tensor(b + "attn_output.weight", q8_0(HIDDEN, q), raw_dtype=Q8)
        w.add_tensor(b + "attn_output.bias", zeros(HIDDEN))
        w.add_tensor(b + "attn_sinks.weight", zeros(HEADS))
        w.add_tensor(b + "post_attention_norm.weight", ones(HIDDEN))
        w.add_tensor(b + "ffn_gate_inp.weight", (0.02 * rng.standard_normal((EXPERTS, HIDDEN))).astype(np.float32))
        w.add_tensor(b + "ffn_gate_inp.bias", zeros(EXPERTS))
        w.add_tensor(b + "ffn_gate_exps.weight", mxfp4(EXPERTS, EXPERT_FF, HIDDEN), raw_dtype=MX)
        w.add_tensor(b + "ffn_gate_exps.bias", zeros(EXPERTS, EXPERT_FF))
        w.add_tensor(b + "ffn_up_exps.weight", mxfp4(EXPERTS, EXPERT_FF, HIDDEN), raw_dtype=MX)
        w.add_tensor(b + "ffn_up_exps.bias", zeros(EXPERTS, EXPERT_FF))
        w.add_tensor(b + "ffn_down_exps.weight", mxfp4(EXPERTS, HIDDEN, EXPERT_FF), raw_dtype=MX)
        w.add_tensor(b + "ffn_down_exps.bias", zeros(EXPERTS, HIDDEN))
    w.add_tensor("output_norm.weight", ones(HIDDEN))
    w.add_tensor("output.weight", q8_0(VOCAB, HIDDEN), raw_dtype=Q8)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
