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
import sys

from gguf import ExpertGatingFuncType, LlamaFileType

from bench_gguf import BenchFile, layers_and_out

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, ROPE_DIMS = 4096, 96, 8, 128, 64
DENSE_FF, EXPERTS, USED, EXPERT_FF, VOCAB = 10944, 128, 8, 1408, 151552


def main():
    layers, out = layers_and_out(sys.argv[1:], 6)
    f = BenchFile(out, "glm4moe", 45)
    f.header("glm-4.5-air-shape", LlamaFileType.MOSTLY_Q4_0, VOCAB, "glm4",
             block_count=layers, context_length=131072, embedding_length=HIDDEN, feed_forward_length=DENSE_FF,
             head_count=HEADS, head_count_kv=KV_HEADS, key_length=HEAD_DIM, value_length=HEAD_DIM,
             rope_dimension_count=ROPE_DIMS, rope_freq_base=1e6, layer_norm_rms_eps=1e-5,
             expert_count=EXPERTS, expert_used_count=USED, expert_feed_forward_length=EXPERT_FF,
             expert_shared_count=1, leading_dense_block_count=1, expert_gating_func=ExpertGatingFuncType.SIGMOID,
             expert_weights_scale=1.0, expert_weights_norm=True)

    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    f.q4_0("token_embd.weight", VOCAB, HIDDEN)
    for i in range(layers):
        b = f"blk.{i}."
        f.ones(b + "attn_norm.weight", HIDDEN)
        f.q4_0(b + "attn_q.weight", q, HIDDEN)
        f.q4_0(b + "attn_k.weight", kv, HIDDEN)
        f.q4_0(b + "attn_v.weight", kv, HIDDEN)
        f.gaussian(b + "attn_q.bias", q)
        f.gaussian(b + "attn_k.bias", kv)
        f.gaussian(b + "attn_v.bias", kv)
        f.q4_0(b + "attn_output.weight", HIDDEN, q)
        f.ones(b + "post_attention_norm.weight", HIDDEN)
        if i == 0:
            f.q4_0(b + "ffn_gate.weight", DENSE_FF, HIDDEN)
            f.q4_0(b + "ffn_up.weight", DENSE_FF, HIDDEN)
            f.q4_0(b + "ffn_down.weight", HIDDEN, DENSE_FF)
            continue
        f.gaussian(b + "ffn_gate_inp.weight", EXPERTS, HIDDEN)
        f.gaussian(b + "exp_probs_b.bias", EXPERTS)
        f.q4_0(b + "ffn_gate_exps.weight", EXPERTS, EXPERT_FF, HIDDEN)
        f.q4_0(b + "ffn_up_exps.weight", EXPERTS, EXPERT_FF, HIDDEN)
        f.q4_0(b + "ffn_down_exps.weight", EXPERTS, HIDDEN, EXPERT_FF)
        f.q4_0(b + "ffn_gate_shexp.weight", EXPERT_FF, HIDDEN)
        f.q4_0(b + "ffn_up_shexp.weight", EXPERT_FF, HIDDEN)
        f.q4_0(b + "ffn_down_shexp.weight", HIDDEN, EXPERT_FF)
    f.ones("output_norm.weight", HIDDEN)
    f.q4_0("output.weight", VOCAB, HIDDEN)
    f.write()


if __name__ == "__main__":
    main()
