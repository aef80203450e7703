#!/usr/bin/env python3
"""Write a random-weight dense qwen35 GGUF at a 2B-class shape (hidden 2048, 24 blocks,
full attention every 4th, FFN 6144, tied embeddings; sizes chosen by us, not copied from a released config), for
CPU speed measurements only: its text is noise. Do not commit its output.

Template: qwen35-tiny.gguf (same keys, same tensor names per block kind). Every tensor's
shape is derived from *what each dimension means* (by tensor name); the formula is first
checked against the template's own parameters so it reproduces the template's shapes
exactly, then evaluated with the target parameters.

The block count changes (template 8 -> target 24), so the per-block tensor lists are
taken from the template by block kind (Gated DeltaNet vs full attention, as given by
full_attention_interval) -- checked to be identical for every template block of that
kind -- and replayed for each target block. attention.recurrent_layers is regenerated.

Usage: make-qwen35-shape.py [TEMPLATE] [OUT.f16.gguf]
Then: llama-quantize OUT.f16.gguf OUT.q4_k_m.gguf Q4_K_M
"""
import re
import sys
import os

import numpy as np
from gguf import GGUFReader, GGUFWriter, GGUFValueType

HERE = os.path.dirname(os.path.abspath(__file__))
template = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "../../tests/fixtures/models/qwen35-tiny.gguf")
out_path = sys.argv[2] if len(sys.argv) > 2 else "qwen35-shape.f16.gguf"
ARCH = "qwen35"

# Parameters that determine every shape.  TMPL must reproduce the template.
TMPL = dict(n_embd=64, n_layer=8, n_head=4, n_head_kv=2, head_dim=32, n_rot=8, sections=[2, 1, 1, 0],
            ssm_k_heads=2, ssm_v_heads=4, ssm_k_dim=16, ssm_v_dim=16, conv_kernel=4,
            n_ff=128, n_vocab=49152)
TARGET = dict(n_embd=2048, n_layer=24, n_head=8, n_head_kv=2, head_dim=256, n_rot=64, sections=[11, 11, 10, 0],
              ssm_k_heads=16, ssm_v_heads=16, ssm_k_dim=128, ssm_v_dim=128, conv_kernel=4,
              n_ff=6144, n_vocab=49152)


def shape_of(suffix, p):
    """GGUF ne order (ne0 = contiguous dim first)."""
    E = p["n_embd"]
    qk = p["ssm_k_heads"] * p["ssm_k_dim"]          # DeltaNet q and k width each
    vv = p["ssm_v_heads"] * p["ssm_v_dim"]          # DeltaNet value width (= ssm.inner_size)
    conv_ch = 2 * qk + vv                            # conv runs over [q, k, v]
    table = {
        "token_embd.weight": [E, p["n_vocab"]],      # tied: also the LM head
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
        # dense SwiGLU FFN
        "ffn_gate.weight": [E, p["n_ff"]],
        "ffn_up.weight": [E, p["n_ff"]],
        "ffn_down.weight": [p["n_ff"], E],
    }
    return table[suffix]


def split_name(name):
    m = re.match(r"blk\.(\d+)\.(.*)", name)
    return (int(m.group(1)), m.group(2)) if m else (None, name)


# tensors that stay F32 (besides every 1-D tensor): llama.cpp / the converter keep these F32
F32_2D = {"ssm_conv1d.weight"}


def recurrent_layers(n_layer, interval):
    return [(i + 1) % interval != 0 for i in range(n_layer)]


def metadata_overrides(p, interval):
    a = ARCH
    return {
        "general.name": "qwen35-shape",
        "general.size_label": "shape",
        "general.file_type": 1,  # MOSTLY_F16
        f"{a}.block_count": p["n_layer"],
        f"{a}.embedding_length": p["n_embd"],
        f"{a}.feed_forward_length": p["n_ff"],
        f"{a}.attention.head_count": p["n_head"],
        f"{a}.attention.head_count_kv": p["n_head_kv"],
        f"{a}.attention.key_length": p["head_dim"],
        f"{a}.attention.value_length": p["head_dim"],
        f"{a}.attention.recurrent_layers": recurrent_layers(p["n_layer"], interval),
        f"{a}.rope.dimension_count": p["n_rot"],
        f"{a}.rope.dimension_sections": p["sections"],
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
    interval = int(r.fields[f"{ARCH}.full_attention_interval"].contents())
    assert "output.weight" not in [t.name for t in r.tensors]  # tied embeddings

    # 1) the shape formula must reproduce the template exactly, and the template's
    #    metadata must equal what metadata_overrides() would write for TMPL.
    for t in r.tensors:
        want = shape_of(split_name(t.name)[1], TMPL)
        got = [int(x) for x in t.shape]
        assert want == got, (t.name, want, got)
    for k, v in metadata_overrides(TMPL, interval).items():
        if k.startswith("general."):
            continue
        got = r.fields[k].contents()
        assert got == v, (k, got, v)

    # per-block tensor list by block kind; every template block of a kind must match
    kinds = {}      # is_recurrent -> [suffix, ...] in template order
    blocks = {}
    head, tail = [], []
    for t in r.tensors:
        il, suf = split_name(t.name)
        if il is None:
            (tail if blocks else head).append(t.name)
        else:
            blocks.setdefault(il, []).append(suf)
    rec_t = recurrent_layers(TMPL["n_layer"], interval)
    assert sorted(blocks) == list(range(TMPL["n_layer"]))
    for il, sufs in blocks.items():
        kinds.setdefault(rec_t[il], sufs)
        assert kinds[rec_t[il]] == sufs, (il, sufs, kinds[rec_t[il]])
    assert set(kinds) == {True, False}

    names = list(head)
    rec = recurrent_layers(TARGET["n_layer"], interval)
    for il in range(TARGET["n_layer"]):
        names += [f"blk.{il}.{s}" for s in kinds[rec[il]]]
    names += tail

    # 2) metadata: copy every key, override the shape keys
    over = metadata_overrides(TARGET, interval)
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

    # 3) tensor infos
    plan = []
    for name in names:
        suf = split_name(name)[1]
        ne = shape_of(suf, TARGET)
        f32 = len(ne) == 1 or suf in F32_2D
        dt = np.float32 if f32 else np.float16
        n = int(np.prod(ne))
        w.add_tensor_info(name, list(reversed(ne)), np.dtype(dt), n * np.dtype(dt).itemsize)
        plan.append((name, suf, ne, dt))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()

    # 4) weights, streamed one tensor at a time
    rng = np.random.default_rng(1235)
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
        else:
            a = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(dt)
        assert a.dtype == dt and a.shape == shape
        w.write_tensor_data(a)
        total += a.size
        print(f"{name:40s} {str(ne):28s} {np.dtype(dt).name}", flush=True)
        del a
    w.close()
    print(f"wrote {out_path}: {len(plan)} tensors, {total} params ({total/1e9:.3f} B)", flush=True)


if __name__ == "__main__":
    main()
