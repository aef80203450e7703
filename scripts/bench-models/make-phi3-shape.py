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
import sys

import numpy as np
from gguf import LlamaFileType

from bench_gguf import BenchFile, layers_and_out

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, ROPE_DIMS, FF, VOCAB = 3072, 24, 8, 128, 96, 8192, 200064


def main():
    layers, out = layers_and_out(sys.argv[1:], 32)
    f = BenchFile(out, "phi3", 4)
    f.header("phi-4-mini-shape", LlamaFileType.MOSTLY_Q4_0, VOCAB, "gpt-4o",
             block_count=layers, context_length=131072, rope_scaling_orig_ctx_len=4096, embedding_length=HIDDEN,
             feed_forward_length=FF, head_count=HEADS, head_count_kv=KV_HEADS, layer_norm_rms_eps=1e-5,
             rope_dimension_count=ROPE_DIMS, rope_freq_base=10000.0, rope_scaling_attn_factors=1.19)

    pairs = ROPE_DIMS // 2
    f.q4_0("token_embd.weight", VOCAB, HIDDEN)
    f.ones("rope_factors_short.weight", pairs)
    f.f32("rope_factors_long.weight", np.geomspace(1.0, 40.0, pairs))
    qkv = HEADS * HEAD_DIM + 2 * KV_HEADS * HEAD_DIM
    for i in range(layers):
        b = f"blk.{i}."
        f.ones(b + "attn_norm.weight", HIDDEN)
        f.q4_0(b + "attn_qkv.weight", qkv, HIDDEN)
        f.q4_0(b + "attn_output.weight", HIDDEN, HEADS * HEAD_DIM)
        f.ones(b + "ffn_norm.weight", HIDDEN)
        f.q4_0(b + "ffn_up.weight", 2 * FF, HIDDEN)
        f.q4_0(b + "ffn_down.weight", HIDDEN, FF)
    f.ones("output_norm.weight", HIDDEN)
    f.write()


if __name__ == "__main__":
    main()
