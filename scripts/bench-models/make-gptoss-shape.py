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

from gguf import LlamaFileType, RopeScalingType

from bench_gguf import BenchFile, layers_and_out

HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 2880, 64, 8, 64
EXPERTS, USED, EXPERT_FF, VOCAB = 32, 4, 2880, 201088


def main():
    layers, out = layers_and_out(sys.argv[1:], 12)
    f = BenchFile(out, "gpt-oss", 20)
    f.header("gpt-oss-20b-shape", LlamaFileType.MOSTLY_MXFP4_MOE, VOCAB, "gpt-4o",
             block_count=layers, context_length=131072, embedding_length=HIDDEN, feed_forward_length=EXPERT_FF,
             head_count=HEADS, head_count_kv=KV_HEADS, key_length=HEAD_DIM, value_length=HEAD_DIM,
             rope_dimension_count=HEAD_DIM, rope_freq_base=150000.0, rope_scaling_type=RopeScalingType.YARN,
             rope_scaling_factor=32.0, rope_scaling_orig_ctx_len=4096, layer_norm_rms_eps=1e-5, sliding_window=128,
             expert_count=EXPERTS, expert_used_count=USED, expert_feed_forward_length=EXPERT_FF)

    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    f.q8_0("token_embd.weight", VOCAB, HIDDEN)
    for i in range(layers):
        b = f"blk.{i}."
        f.ones(b + "attn_norm.weight", HIDDEN)
        f.q8_0(b + "attn_q.weight", q, HIDDEN)
        f.zeros(b + "attn_q.bias", q)
        f.q8_0(b + "attn_k.weight", kv, HIDDEN)
        f.zeros(b + "attn_k.bias", kv)
        f.q8_0(b + "attn_v.weight", kv, HIDDEN)
        f.zeros(b + "attn_v.bias", kv)
        f.q8_0(b + "attn_output.weight", HIDDEN, q)
        f.zeros(b + "attn_output.bias", HIDDEN)
        f.zeros(b + "attn_sinks.weight", HEADS)
        f.ones(b + "post_attention_norm.weight", HIDDEN)
        f.gaussian(b + "ffn_gate_inp.weight", EXPERTS, HIDDEN)
        f.zeros(b + "ffn_gate_inp.bias", EXPERTS)
        f.mxfp4(b + "ffn_gate_exps.weight", EXPERTS, EXPERT_FF, HIDDEN)
        f.zeros(b + "ffn_gate_exps.bias", EXPERTS, EXPERT_FF)
        f.mxfp4(b + "ffn_up_exps.weight", EXPERTS, EXPERT_FF, HIDDEN)
        f.zeros(b + "ffn_up_exps.bias", EXPERTS, EXPERT_FF)
        f.mxfp4(b + "ffn_down_exps.weight", EXPERTS, HIDDEN, EXPERT_FF)
        f.zeros(b + "ffn_down_exps.bias", EXPERTS, HIDDEN)
    f.ones("output_norm.weight", HIDDEN)
    f.q8_0("output.weight", VOCAB, HIDDEN)
    f.write()


if __name__ == "__main__":
    main()
