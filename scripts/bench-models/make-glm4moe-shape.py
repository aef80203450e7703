#!/usr/bin/env python3
"""Write a random-weight GLM-4.5 MoE GGUF with GLM-4.5-Air's shapes, for CPU speed measurements only: its text is
noise. Do not commit its output.

GLM-4.5-Air's dimensions (hidden 4096, 96 query and 8 KV heads of 128 with Q/K/V biases, RoPE over 64 of each
head's dims, base 1e6; a dense first block of width 10944, then 128 experts of width 1408 with 8 used per token plus
one shared expert of 1408, sigmoid routing with a selection bias, weights renormalized; vocabulary 151552) with
--layers of its 46 blocks (default 6: the dense one and five expert blocks, about 7 GB, so that kiln's repacked
experts and the page cache fit this machine's 24 GiB together; per-token work per layer is the real model's).
Every matrix Q4_0 but the router (F32), written directly as random blocks (sane scales). Norms are ones. The
tokenizer is a stand-in of 151552 distinct pieces with a few merges (benchmarks feed token ids).

Usage: make-glm4moe-shape.py [--layers N] OUT.gguf
"""
import functools
import sys

import numpy as np
from gguf import ExpertGatingFuncType, GGMLQuantizationType, GGUFWriter

from random_blocks import random_q4_0
from stand_in_vocab import add_stand_in_vocab

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, ROPE_DIMS = 4096, 96, 8, 128, 64
DENSE_FF, EXPERTS, USED, EXPERT_FF, VOCAB = 10944, 128, 8, 1408, 151552

rng = np.random.default_rng(45)


q4_0 = functools.partial(random_q4_0, rng)


def main():
    args = sys.argv[1:]
    layers = 6
    if args and args[0] == "--layers":
        layers, args = int(args[1]), args[2:]
    out = args[0]
    w = GGUFWriter(out, "glm4moe")
    w.add_name("glm-4.5-air-shape")
    w.add_block_count(layers)
    w.add_context_length(131072)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(DENSE_FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_dimension_count(ROPE_DIMS)
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_expert_count(EXPERTS)
    w.add_expert_used_count(USED)
    w.add_expert_feed_forward_length(EXPERT_FF)
    w.add_expert_shared_count(1)
    w.add_leading_dense_block_count(1)
    w.add_expert_gating_func(ExpertGatingFuncType.SIGMOID)
    w.add_expert_weights_scale(1.0)
    w.add_expert_weights_norm(True)
    w.add_file_type(2)  # MOSTLY_Q4_0
    add_stand_in_vocab(w, VOCAB, "glm4")

    Q4 = GGMLQuantizationType.Q4_0
    ones = lambda n: np.ones(n, dtype=np.float32)
    small = lambda *s: (0.02 * rng.standard_normal(s)).astype(np.float32)
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    w.add_tensor("token_embd.weight", q4_0(VOCAB, HIDDEN), raw_dtype=Q4)
    for i in range(layers):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", ones(HIDDEN))
        w.add_tensor(b + "attn_q.weight", q4_0(q, HIDDEN), raw_dtype=Q4)
        w.add_tensor(b + "attn_k.weight", q4_0(kv, HIDDEN), raw_dtype=Q4)
        w.add_tensor(b + "attn_v.weight", q4_0(kv, HIDDEN), raw_dtype=Q4)
        w.add_tensor(b + "attn_q.bias", small(q))
        w.add_tensor(b + "attn_k.bias", small(kv))
        w.add_tensor(b + "attn_v.bias", small(kv))
        w.add_tensor(b + "attn_output.weight", q4_0(HIDDEN, q), raw_dtype=Q4)
        w.add_tensor(b + "post_attention_norm.weight", ones(HIDDEN))
        if i == 0:
            w.add_tensor(b + "ffn_gate.weight", q4_0(DENSE_FF, HIDDEN), raw_dtype=Q4)
            w.add_tensor(b + "ffn_up.weight", q4_0(DENSE_FF, HIDDEN), raw_dtype=Q4)
            w.add_tensor(b + "ffn_down.weight", q4_0(HIDDEN, DENSE_FF), raw_dtype=Q4)
            continue
        w.add_tensor(b + "ffn_gate_inp.weight", small(EXPERTS, HIDDEN))
        w.add_tensor(b + "exp_probs_b.bias", small(EXPERTS))
        w.add_tensor(b + "ffn_gate_exps.weight", q4_0(EXPERTS, EXPERT_FF, HIDDEN), raw_dtype=Q4)
        w.add_tensor(b + "ffn_up_exps.weight", q4_0(EXPERTS, EXPERT_FF, HIDDEN), raw_dtype=Q4)
        w.add_tensor(b + "ffn_down_exps.weight", q4_0(EXPERTS, HIDDEN, EXPERT_FF), raw_dtype=Q4)
        w.add_tensor(b + "ffn_gate_shexp.weight", q4_0(EXPERT_FF, HIDDEN), raw_dtype=Q4)
        w.add_tensor(b + "ffn_up_shexp.weight", q4_0(EXPERT_FF, HIDDEN), raw_dtype=Q4)
        w.add_tensor(b + "ffn_down_shexp.weight", q4_0(HIDDEN, EXPERT_FF), raw_dtype=Q4)
    w.add_tensor("output_norm.weight", ones(HIDDEN))
    w.add_tensor("output.weight", q4_0(VOCAB, HIDDEN), raw_dtype=Q4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
