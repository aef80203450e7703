#!/usr/bin/env python3
"""Write a random-weight Qwen3 MoE GGUF with Qwen3-30B-A3B's shapes, for CPU speed measurements only: its text
is noise. Do not commit its output.

Qwen3-30B-A3B's dimensions (hidden 2048, 32 query and 4 KV heads of 128 with QK-norm, 128 experts of width 768
with 8 used per token, vocabulary 151936, RoPE base 1e6) with --layers of its 48 blocks (default 24, half: about
8.7 GB, so that kiln's repacked experts and the page cache fit this machine's 24 GiB together; per-token work per
layer is the real model's). Every matrix Q4_0 but the router (F32), written directly as random blocks (sane
scales), with no F16 intermediate. Norms are ones. The tokenizer is a stand-in of 151936 distinct pieces with a
few merges (benchmarks feed token ids).

Usage: make-qwen3moe-shape.py [--layers N] OUT.gguf
"""
import functools
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter

from random_blocks import random_q4_0
from stand_in_vocab import add_stand_in_vocab

HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 2048, 32, 4, 128
EXPERTS, USED, EXPERT_FF, VOCAB = 128, 8, 768, 151936

rng = np.random.default_rng(30)


q4_0 = functools.partial(random_q4_0, rng)


def main():
    args = sys.argv[1:]
    layers = 24
    if args and args[0] == "--layers":
        layers, args = int(args[1]), args[2:]
    out = args[0]
    w = GGUFWriter(out, "qwen3moe")
    w.add_name("qwen3-30b-a3b-shape")
    w.add_block_count(layers)
    w.add_context_length(40960)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(6144)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(EXPERTS)
    w.add_expert_used_count(USED)
    w.add_expert_feed_forward_length(EXPERT_FF)
    w.add_file_type(2)  # MOSTLY_Q4_0
    add_stand_in_vocab(w, VOCAB, "qwen2")

    Q4 = GGMLQuantizationType.Q4_0
    ones = lambda n: np.ones(n, dtype=np.float32)
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    w.add_tensor("token_embd.weight", q4_0(VOCAB, HIDDEN), raw_dtype=Q4)
    for i in range(layers):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", ones(HIDDEN))
        w.add_tensor(b + "attn_q.weight", q4_0(q, HIDDEN), raw_dtype=Q4)
        w.add_tensor(b + "attn_k.weight", q4_0(kv, HIDDEN), raw_dtype=Q4)
        w.add_tensor(b + "attn_v.weight", q4_0(kv, HIDDEN), raw_dtype=Q4)
        w.add_tensor(b + "attn_q_norm.weight", ones(HEAD_DIM))
        w.add_tensor(b + "attn_k_norm.weight", ones(HEAD_DIM))
        w.add_tensor(b + "attn_output.weight", q4_0(HIDDEN, q), raw_dtype=Q4)
        w.add_tensor(b + "ffn_norm.weight", ones(HIDDEN))
        w.add_tensor(b + "ffn_gate_inp.weight", (0.02 * rng.standard_normal((EXPERTS, HIDDEN))).astype(np.float32))
        w.add_tensor(b + "ffn_gate_exps.weight", q4_0(EXPERTS, EXPERT_FF, HIDDEN), raw_dtype=Q4)
        w.add_tensor(b + "ffn_up_exps.weight", q4_0(EXPERTS, EXPERT_FF, HIDDEN), raw_dtype=Q4)
        w.add_tensor(b + "ffn_down_exps.weight", q4_0(EXPERTS, HIDDEN, EXPERT_FF), raw_dtype=Q4)
    w.add_tensor("output_norm.weight", ones(HIDDEN))
    w.add_tensor("output.weight", q4_0(VOCAB, HIDDEN), raw_dtype=Q4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
