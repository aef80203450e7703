#!/usr/bin/env python3
"""Write a random-weight qwen35moe GGUF whose layers are sized like a 35B-A3B-class Qwen3.5 MoE (hidden 2048,
experts of 512 with 8 used per token plus a shared expert of 512, 16/2 attention heads of 256, DeltaNet 16 key and
32 value heads of 128; sizes chosen by us, not copied from a released config) but with 8 blocks and 128 experts
(per-token work as with more), for CPU speed measurements only: its text is noise. Do not commit its output.

Template: qwen35moe-tiny.gguf (same keys, same tensor names). Every tensor's shape
is derived from *what each dimension means* (by tensor name); the formula is first
checked against the template's own parameters so it reproduces the template's
shapes exactly, then evaluated with the target parameters.

Usage: make-qwen35moe-shape.py [TEMPLATE] [OUT.f16.gguf]
Then: llama-quantize OUT.f16.gguf OUT.q4_k_m.gguf Q4_K_M
"""
import re
import sys
import os

import numpy as np
import gguf
from gguf import GGUFReader, GGUFWriter, GGUFValueType, GGMLQuantizationType

HERE = os.path.dirname(os.path.abspath(__file__))
template = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "../../tests/fixtures/models/qwen35moe-tiny.gguf")
out_path = sys.argv[2] if len(sys.argv) > 2 else "qwen35moe-shape.f16.gguf"
ARCH = "qwen35moe"

# Parameters that determine every shape.  "tmpl" must reproduce the template.
TMPL = dict(n_embd=40, n_head=4, n_head_kv=2, head_dim=32, n_rot=8, sections=[2, 1, 1, 0],
            ssm_k_heads=2, ssm_v_heads=4, ssm_k_dim=16, ssm_v_dim=16, conv_kernel=4,
            n_expert=8, n_expert_used=2, n_ff_exp=32, n_ff_shexp=64, n_vocab=49152)
TARGET = dict(n_embd=2048, n_head=16, n_head_kv=2, head_dim=256, n_rot=64, sections=[11, 11, 10, 0],
              ssm_k_heads=16, ssm_v_heads=32, ssm_k_dim=128, ssm_v_dim=128, conv_kernel=4,
              n_expert=128, n_expert_used=8, n_ff_exp=512, n_ff_shexp=512, n_vocab=49152)


def shape_of(suffix, p):
    """GGUF ne order (ne0 = contiguous dim first)."""
    E = p["n_embd"]
    qk = p["ssm_k_heads"] * p["ssm_k_dim"]          # DeltaNet q and k width each
    vv = p["ssm_v_heads"] * p["ssm_v_dim"]          # DeltaNet value width (= ssm.inner_size)
    conv_ch = 2 * qk + vv                            # conv runs over [q, k, v]
    table = {
        "token_embd.weight": [E, p["n_vocab"]],
        "output.weight": [E, p["n_vocab"]],
        "output_norm.weight": [E],
        "attn_norm.weight": [E],
        "post_attention_norm.weight": [E],
        # Gated DeltaNet
        "attn_qkv.weight": [E, conv_ch],
        "attn_gate.weight": [E, vv],                 # z (output gate)
        "ssm_conv1d.weight": [p["conv_kernel"], conv_ch],
        "ssm_a": [p["ssm_v_heads"]],
        "ssm_dt.bias": [p["ssm_v_heads"]],
        "ssm_alpha.weight": [E, p["ssm_v_heads"]],
        "ssm_beta.weight": [E, p["ssm_v_heads"]],
        "ssm_norm.weight": [p["ssm_v_dim"]],
        "ssm_out.weight": [vv, E],
        # gated full attention (q projection carries the output gate: x2)
        "attn_q.weight": [E, 2 * p["n_head"] * p["head_dim"]],
        "attn_k.weight": [E, p["n_head_kv"] * p["head_dim"]],
        "attn_v.weight": [E, p["n_head_kv"] * p["head_dim"]],
        "attn_q_norm.weight": [p["head_dim"]],
        "attn_k_norm.weight": [p["head_dim"]],
        "attn_output.weight": [p["n_head"] * p["head_dim"], E],
        # MoE
        "ffn_gate_inp.weight": [E, p["n_expert"]],
        "ffn_gate_exps.weight": [E, p["n_ff_exp"], p["n_expert"]],
        "ffn_up_exps.weight": [E, p["n_ff_exp"], p["n_expert"]],
        "ffn_down_exps.weight": [p["n_ff_exp"], E, p["n_expert"]],
        "ffn_gate_inp_shexp.weight": [E, 1],
        "ffn_gate_shexp.weight": [E, p["n_ff_shexp"]],
        "ffn_up_shexp.weight": [E, p["n_ff_shexp"]],
        "ffn_down_shexp.weight": [p["n_ff_shexp"], E],
    }
    return table[suffix]


def suffix_of(name):
    m = re.match(r"blk\.\d+\.(.*)", name)
    return m.group(1) if m else name


# tensors that stay F32 (besides every 1-D tensor): llama.cpp / the converter keep these F32
F32_2D = {"ssm_conv1d.weight", "ffn_gate_inp.weight", "ffn_gate_inp_shexp.weight"}


def metadata_overrides(p):
    a = ARCH
    return {
        "general.name": "qwen35moe-shape",
        "general.size_label": "shape",
        "general.file_type": 1,  # MOSTLY_F16
        f"{a}.embedding_length": p["n_embd"],
        f"{a}.attention.head_count": p["n_head"],
        f"{a}.attention.head_count_kv": p["n_head_kv"],
        f"{a}.attention.key_length": p["head_dim"],
        f"{a}.attention.value_length": p["head_dim"],
        f"{a}.rope.dimension_count": p["n_rot"],
        f"{a}.rope.dimension_sections": p["sections"],
        f"{a}.expert_count": p["n_expert"],
        f"{a}.expert_used_count": p["n_expert_used"],
        f"{a}.expert_feed_forward_length": p["n_ff_exp"],
        f"{a}.expert_shared_feed_forward_length": p["n_ff_shexp"],
        f"{a}.ssm.conv_kernel": p["conv_kernel"],
        f"{a}.ssm.state_size": p["ssm_k_dim"],          # = key = value head dim
        f"{a}.ssm.group_count": p["ssm_k_heads"],
        f"{a}.ssm.time_step_rank": p["ssm_v_heads"],
        f"{a}.ssm.inner_size": p["ssm_v_heads"] * p["ssm_v_dim"],
    }


def main():
    assert TARGET["ssm_k_dim"] == TARGET["ssm_v_dim"]
    r = GGUFReader(template)
    assert r.fields["general.architecture"].contents() == ARCH

    # 1) the shape formula must reproduce the template exactly, and the template's
    #    metadata must equal what metadata_overrides() would write for TMPL.
    for t in r.tensors:
        want = shape_of(suffix_of(t.name), TMPL)
        got = [int(x) for x in t.shape]
        assert want == got, (t.name, want, got)
    for k, v in metadata_overrides(TMPL).items():
        if k.startswith("general."):
            continue
        got = r.fields[k].contents()
        assert got == v, (k, got, v)

    # 2) metadata: copy every key, override the shape keys
    over = metadata_overrides(TARGET)
    w = GGUFWriter(out_path, ARCH)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == GGUFValueType.ARRAY else None
        val = over.get(name, f.contents())
        w.add_key_value(name, val, vtype, sub_type=sub)
    missing = set(over) - set(r.fields)
    assert not missing, missing

    # 3) tensor infos (same names, same order as the template)
    plan = []
    for t in r.tensors:
        suf = suffix_of(t.name)
        ne = shape_of(suf, TARGET)
        f32 = len(ne) == 1 or suf in F32_2D
        dt = np.float32 if f32 else np.float16
        n = int(np.prod(ne))
        w.add_tensor_info(t.name, list(reversed(ne)), np.dtype(dt), n * np.dtype(dt).itemsize)
        plan.append((t.name, suf, ne, dt))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()

    # 4) weights, streamed one tensor at a time
    rng = np.random.default_rng(1234)
    total = 0
    for name, suf, ne, dt in plan:
        shape = tuple(reversed(ne))
        if suf.endswith("norm.weight"):
            a = np.ones(shape, dtype=np.float32)
        elif suf == "ssm_a":
            # -exp(A_log), A log-spaced over the value heads (as in the template)
            a = -np.exp(np.linspace(np.log(0.02), np.log(4.0), ne[0])).astype(np.float32)
        elif suf == "ssm_dt.bias":
            a = rng.uniform(-3.0, 1.0, size=shape).astype(np.float32)
        elif len(shape) == 3:
            a = np.empty(shape, dtype=dt)
            for e in range(shape[0]):  # per expert, to keep peak memory low
                a[e] = (rng.standard_normal(shape[1:], dtype=np.float32) * 0.02).astype(dt)
        else:
            a = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(dt)
        assert a.dtype == dt and a.shape == shape
        w.write_tensor_data(a)
        total += a.size
        print(f"{name:40s} {str(ne):28s} {np.dtype(dt).name}", flush=True)
        del a
    w.close()
    print(f"wrote {out_path}: {total/1e9:.3f} B params", flush=True)


if __name__ == "__main__":
    main()
