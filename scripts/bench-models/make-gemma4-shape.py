#!/usr/bin/env python3
"""Write a random-weight Gemma 4 GGUF with the shapes of Gemma 4 26B-A4B or E2B, for CPU speed measurements only:
its text is noise. Do not commit its output.

The shapes are those of the published configs as recalled here (no config.json can be fetched on this machine):
`moe` (26B-A4B): hidden 2816, 16 query heads; local layers with 8 KV heads of 256, global layers (every sixth) with
2 KV heads of 512 and no `attn_v`; a dense MLP of 2112 and 128 experts of 704 with 8 used per token in every block;
vocabulary 262144, tied; --layers of its 30 blocks (default 12, about 5.5 GB). `e2b` (E2B): hidden 1536, 8 query
heads over 1 KV head, heads of 256 (global: 512), 35 blocks four local then one global, the last 20 sharing KV
caches with MLPs of 12288 against 6144, per-layer embeddings of 256 per block (about 3 GB). Sliding window 1024
(E2B: 512), final soft cap 30. Every matrix Q4_0 (the per-layer embeddings too), written directly as random
blocks; norms and output scales are ones, the router's input scale ones, expert scales ones. The tokenizer is a
stand-in of 262144 distinct pieces (benchmarks feed token ids).

Usage: make-gemma4-shape.py moe|e2b [--layers N] OUT.gguf
"""
import functools
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter

from random_blocks import random_q4_0
from stand_in_vocab import add_stand_in_vocab

VOCAB, LOCAL_HD, GLOBAL_HD = 262144, 256, 512
VARIANTS = {
    "moe": dict(hidden=2816, heads=16, kv=(8, 2), layers=30, period=6, ff=2112, experts=(128, 8, 704),
                window=1024, shared=0, per_layer=0, no_v_global=True),
    "e2b": dict(hidden=1536, heads=8, kv=(1, 1), layers=35, period=5, ff=6144, experts=None,
                window=512, shared=20, per_layer=256, no_v_global=False),
}

rng = np.random.default_rng(4)
q4_0 = functools.partial(random_q4_0, rng)
Q4 = GGMLQuantizationType.Q4_0


def main():
    variant, args = sys.argv[1], sys.argv[2:]
    v = VARIANTS[variant]
    layers = v["layers"] if variant == "e2b" else 12
    if args and args[0] == "--layers":
        layers, args = int(args[1]), args[2:]
    out = args[0]
    h, heads = v["hidden"], v["heads"]
    local = [(i + 1) % v["period"] != 0 for i in range(layers)]
    shared = min(v["shared"], max(layers - 2, 0))
    ff = [v["ff"] * (2 if i >= layers - shared else 1) for i in range(layers)]

    w = GGUFWriter(out, "gemma4")
    w.add_name(f"gemma-4-{variant}-shape")
    w.add_block_count(layers)
    w.add_context_length(131072)
    w.add_embedding_length(h)
    w.add_feed_forward_length(ff if shared else v["ff"])
    w.add_head_count(heads)
    w.add_head_count_kv([v["kv"][0] if l else v["kv"][1] for l in local])
    w.add_key_length(GLOBAL_HD)
    w.add_value_length(GLOBAL_HD)
    w.add_key_length_swa(LOCAL_HD)
    w.add_value_length_swa(LOCAL_HD)
    w.add_rope_dimension_count(GLOBAL_HD)
    w.add_rope_dimension_count_swa(LOCAL_HD)
    w.add_rope_freq_base(1e6)
    w.add_rope_freq_base_swa(10000.0)
    w.add_sliding_window(v["window"])
    w.add_sliding_window_pattern(local)
    if shared:
        w.add_shared_kv_layers(shared)
    w.add_embedding_length_per_layer_input(v["per_layer"])
    w.add_layer_norm_rms_eps(1e-6)
    w.add_final_logit_softcapping(30.0)
    if v["experts"]:
        n, used, eff = v["experts"]
        w.add_expert_count(n)
        w.add_expert_used_count(used)
        w.add_expert_feed_forward_length(eff)
    w.add_file_type(2)  # MOSTLY_Q4_0
    add_stand_in_vocab(w, VOCAB, "default")

    ones = lambda n: np.ones(n, dtype=np.float32)
    w.add_tensor("token_embd.weight", q4_0(VOCAB, h), raw_dtype=Q4)
    rotated = GLOBAL_HD // 2 // 4
    w.add_tensor("rope_freqs.weight",
                 np.array([1.0] * rotated + [1e30] * (GLOBAL_HD // 2 - rotated), dtype=np.float32))
    p = v["per_layer"]
    if p:
        w.add_tensor("per_layer_token_embd.weight", q4_0(VOCAB, layers * p), raw_dtype=Q4)
        w.add_tensor("per_layer_model_proj.weight", q4_0(layers * p, h), raw_dtype=Q4)
        w.add_tensor("per_layer_proj_norm.weight", ones(p))
    for i in range(layers):
        b = f"blk.{i}."
        hd, kvh = (LOCAL_HD, v["kv"][0]) if local[i] else (GLOBAL_HD, v["kv"][1])
        w.add_tensor(b + "attn_norm.weight", ones(h))
        w.add_tensor(b + "attn_q.weight", q4_0(heads * hd, h), raw_dtype=Q4)
        w.add_tensor(b + "attn_q_norm.weight", ones(hd))
        w.add_tensor(b + "attn_k.weight", q4_0(kvh * hd, h), raw_dtype=Q4)
        w.add_tensor(b + "attn_k_norm.weight", ones(hd))
        if local[i] or not v["no_v_global"]:
            w.add_tensor(b + "attn_v.weight", q4_0(kvh * hd, h), raw_dtype=Q4)
        w.add_tensor(b + "attn_output.weight", q4_0(h, heads * hd), raw_dtype=Q4)
        w.add_tensor(b + "post_attention_norm.weight", ones(h))
        w.add_tensor(b + "ffn_norm.weight", ones(h))
        w.add_tensor(b + "ffn_gate.weight", q4_0(ff[i], h), raw_dtype=Q4)
        w.add_tensor(b + "ffn_up.weight", q4_0(ff[i], h), raw_dtype=Q4)
        w.add_tensor(b + "ffn_down.weight", q4_0(h, ff[i]), raw_dtype=Q4)
        w.add_tensor(b + "post_ffw_norm.weight", ones(h))
        w.add_tensor(b + "layer_output_scale.weight", ones(1))
        if v["experts"]:
            n, used, eff = v["experts"]
            w.add_tensor(b + "post_ffw_norm_1.weight", ones(h))
            w.add_tensor(b + "pre_ffw_norm_2.weight", ones(h))
            w.add_tensor(b + "post_ffw_norm_2.weight", ones(h))
            w.add_tensor(b + "ffn_gate_inp.weight", (0.02 * rng.standard_normal((n, h))).astype(np.float32))
            w.add_tensor(b + "ffn_gate_inp.scale", ones(h))
            w.add_tensor(b + "ffn_gate_up_exps.weight", q4_0(n, 2 * eff, h), raw_dtype=Q4)
            w.add_tensor(b + "ffn_down_exps.weight", q4_0(n, h, eff), raw_dtype=Q4)
            w.add_tensor(b + "ffn_down_exps.scale", ones(n))
        if p:
            w.add_tensor(b + "inp_gate.weight", q4_0(p, h), raw_dtype=Q4)
            w.add_tensor(b + "proj.weight", q4_0(h, p), raw_dtype=Q4)
            w.add_tensor(b + "post_norm.weight", ones(h))
    w.add_tensor("output_norm.weight", ones(h))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
