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
import sys

from gguf import LlamaFileType

from bench_gguf import BenchFile, layers_and_out

VOCAB, LOCAL_HD, GLOBAL_HD = 262144, 256, 512
VARIANTS = {
    "moe": dict(hidden=2816, heads=16, kv=(8, 2), layers=30, period=6, ff=2112, experts=(128, 8, 704),
                window=1024, shared=0, per_layer=0, no_v_global=True),
    "e2b": dict(hidden=1536, heads=8, kv=(1, 1), layers=35, period=5, ff=6144, experts=None,
                window=512, shared=20, per_layer=256, no_v_global=False),
}


def main():
    variant = sys.argv[1]
    v = VARIANTS[variant]
    layers, out = layers_and_out(sys.argv[2:], v["layers"] if variant == "e2b" else 12)
    h, heads, p = v["hidden"], v["heads"], v["per_layer"]
    n, used, eff = v["experts"] or (None, None, None)
    local = [(i + 1) % v["period"] != 0 for i in range(layers)]
    shared = min(v["shared"], max(layers - 2, 0))
    ff = [v["ff"] * (2 if i >= layers - shared else 1) for i in range(layers)]

    f = BenchFile(out, "gemma4", 4)
    f.header(f"gemma-4-{variant}-shape", LlamaFileType.MOSTLY_Q4_0, VOCAB, "default",
             block_count=layers, context_length=131072, embedding_length=h,
             feed_forward_length=ff if shared else v["ff"], head_count=heads,
             head_count_kv=[v["kv"][0] if l else v["kv"][1] for l in local],
             key_length=GLOBAL_HD, value_length=GLOBAL_HD, key_length_swa=LOCAL_HD, value_length_swa=LOCAL_HD,
             rope_dimension_count=GLOBAL_HD, rope_dimension_count_swa=LOCAL_HD,
             rope_freq_base=1e6, rope_freq_base_swa=10000.0, sliding_window=v["window"],
             sliding_window_pattern=local, shared_kv_layers=shared or None, embedding_length_per_layer_input=p,
             layer_norm_rms_eps=1e-6, final_logit_softcapping=30.0,
             expert_count=n, expert_used_count=used, expert_feed_forward_length=eff)

    f.q4_0("token_embd.weight", VOCAB, h)
    rotated = GLOBAL_HD // 2 // 4
    f.f32("rope_freqs.weight", [1.0] * rotated + [1e30] * (GLOBAL_HD // 2 - rotated))
    if p:
        f.q4_0("per_layer_token_embd.weight", VOCAB, layers * p)
        f.q4_0("per_layer_model_proj.weight", layers * p, h)
        f.ones("per_layer_proj_norm.weight", p)
    for i in range(layers):
        b = f"blk.{i}."
        hd, kvh = (LOCAL_HD, v["kv"][0]) if local[i] else (GLOBAL_HD, v["kv"][1])
        f.ones(b + "attn_norm.weight", h)
        f.q4_0(b + "attn_q.weight", heads * hd, h)
        f.ones(b + "attn_q_norm.weight", hd)
        f.q4_0(b + "attn_k.weight", kvh * hd, h)
        f.ones(b + "attn_k_norm.weight", hd)
        if local[i] or not v["no_v_global"]:
            f.q4_0(b + "attn_v.weight", kvh * hd, h)
        f.q4_0(b + "attn_output.weight", h, heads * hd)
        f.ones(b + "post_attention_norm.weight", h)
        f.ones(b + "ffn_norm.weight", h)
        f.q4_0(b + "ffn_gate.weight", ff[i], h)
        f.q4_0(b + "ffn_up.weight", ff[i], h)
        f.q4_0(b + "ffn_down.weight", h, ff[i])
        f.ones(b + "post_ffw_norm.weight", h)
        f.ones(b + "layer_output_scale.weight", 1)
        if n:
            f.ones(b + "post_ffw_norm_1.weight", h)
            f.ones(b + "pre_ffw_norm_2.weight", h)
            f.ones(b + "post_ffw_norm_2.weight", h)
            f.gaussian(b + "ffn_gate_inp.weight", n, h)
            f.ones(b + "ffn_gate_inp.scale", h)
            f.q4_0(b + "ffn_gate_up_exps.weight", n, 2 * eff, h)
            f.q4_0(b + "ffn_down_exps.weight", n, h, eff)
            f.ones(b + "ffn_down_exps.scale", n)
        if p:
            f.q4_0(b + "inp_gate.weight", p, h)
            f.q4_0(b + "proj.weight", h, p)
            f.ones(b + "post_norm.weight", h)
    f.ones("output_norm.weight", h)
    f.write()


if __name__ == "__main__":
    main()
