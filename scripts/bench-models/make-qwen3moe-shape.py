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
import sys

from gguf import LlamaFileType

from bench_gguf import BenchFile, layers_and_out

HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 2048, 32, 4, 128
EXPERTS, USED, EXPERT_FF, VOCAB = 128, 8, 768, 151936


def main():
    layers, out = layers_and_out(sys.argv[1:], 24)
    f = BenchFile(out, "qwen3moe", 30)
    f.header("qwen3-30b-a3b-shape", LlamaFileType.MOSTLY_Q4_0, VOCAB, "qwen2",
             block_count=layers, context_length=40960, embedding_length=HIDDEN, feed_forward_length=6144,
             head_count=HEADS, head_count_kv=KV_HEADS, key_length=HEAD_DIM, value_length=HEAD_DIM,
             rope_dimension_count=HEAD_DIM, rope_freq_base=1e6, layer_norm_rms_eps=1e-6,
             expert_count=EXPERTS, expert_used_count=USED, expert_feed_forward_length=EXPERT_FF)

    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    f.q4_0("token_embd.weight", VOCAB, HIDDEN)
    for i in range(layers):
        b = f"blk.{i}."
        f.ones(b + "attn_norm.weight", HIDDEN)
        f.q4_0(b + "attn_q.weight", q, HIDDEN)
        f.q4_0(b + "attn_k.weight", kv, HIDDEN)
        f.q4_0(b + "attn_v.weight", kv, HIDDEN)
        f.ones(b + "attn_q_norm.weight", HEAD_DIM)
        f.ones(b + "attn_k_norm.weight", HEAD_DIM)
        f.q4_0(b + "attn_output.weight", HIDDEN, q)
        f.ones(b + "ffn_norm.weight", HIDDEN)
        f.gaussian(b + "ffn_gate_inp.weight", EXPERTS, HIDDEN)
        f.q4_0(b + "ffn_gate_exps.weight", EXPERTS, EXPERT_FF, HIDDEN)
        f.q4_0(b + "ffn_up_exps.weight", EXPERTS, EXPERT_FF, HIDDEN)
        f.q4_0(b + "ffn_down_exps.weight", EXPERTS, HIDDEN, EXPERT_FF)
    f.ones("output_norm.weight", HIDDEN)
    f.q4_0("output.weight", VOCAB, HIDDEN)
    f.write()


if __name__ == "__main__":
    main()
