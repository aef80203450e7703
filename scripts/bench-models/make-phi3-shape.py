#!/usr/bin/env python3
"""Write a random-weight Phi-3 GGUF with Phi-4-mini's shapes, for CPU speed measurements only: its text is noise.
Do not commit its output.

Phi-4-mini's dimensions (hidden 3072 = 24 query heads of 128, 8 KV heads, RoPE over 96 of each head's 128 dims with
LongRoPE factors for an original context of 4096, FFN 8192, 32 blocks, vocabulary 200064, the LM head tied to the
embeddings), the Q/K/V and gate/up projections stored fused as the converter writes them. Every matrix Q4_0 (about
2.2 GB), written directly as random blocks (sane scales). Norms are ones. The tokenizer is a stand-in of 200064
distinct pieces with a few merges (benchmarks feed token ids).

Usage: make-phi3-shape.py [--layers N] OUT.gguf
"""
import functools
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter

from random_blocks import random_q4_0
from stand_in_vocab import add_stand_in_vocab

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, ROPE_DIMS, FF, VOCAB = 3072, 24, 8, 128, 96, 8192, 200064

rng = np.random.default_rng(4)


q4_0 = functools.partial(random_q4_0, rng)


def main():
    args = sys.argv[1:]
    layers = 32
    if args and args[0] == "--layers":
        layers, args = int(args[1]), args[2:]
    out = args[0]
    w = GGUFWriter(out, "phi3")
    w.add_name("phi-4-mini-shape")
    w.add_block_count(layers)
    w.add_context_length(131072)
    w.add_rope_scaling_orig_ctx_len(4096)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(ROPE_DIMS)
    w.add_rope_freq_base(10000.0)
    w.add_rope_scaling_attn_factors(1.19)
    w.add_file_type(2)  # MOSTLY_Q4_0
    add_stand_in_vocab(w, VOCAB, "gpt-4o")

    Q4 = GGMLQuantizationType.Q4_0
    ones = lambda n: np.ones(n, dtype=np.float32)
    pairs = ROPE_DIMS // 2
    w.add_tensor("token_embd.weight", q4_0(VOCAB, HIDDEN), raw_dtype=Q4)
    w.add_tensor("rope_factors_short.weight", np.ones(pairs, dtype=np.float32))
    w.add_tensor("rope_factors_long.weight", np.geomspace(1.0, 40.0, pairs).astype(np.float32))
    qkv = HEADS * HEAD_DIM + 2 * KV_HEADS * HEAD_DIM
    for i in range(layers):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", ones(HIDDEN))
        w.add_tensor(b + "attn_qkv.weight", q4_0(qkv, HIDDEN), raw_dtype=Q4)
        w.add_tensor(b + "attn_output.weight", q4_0(HIDDEN, HEADS * HEAD_DIM), raw_dtype=Q4)
        w.add_tensor(b + "ffn_norm.weight", ones(HIDDEN))
        w.add_tensor(b + "ffn_up.weight", q4_0(2 * FF, HIDDEN), raw_dtype=Q4)
        w.add_tensor(b + "ffn_down.weight", q4_0(HIDDEN, FF), raw_dtype=Q4)
    w.add_tensor("output_norm.weight", ones(HIDDEN))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
