#!/usr/bin/env python3
"""Write a random-weight Qwen3.5 GGUF at a real model's size, for CPU speed measurements only: its text
is noise. Do not commit its output.

- dense (default): qwen35 at a 2B-class shape (hidden 2048, 24 blocks, full attention every 4th,
  FFN 6144, tied embeddings);
- --moe: qwen35moe whose layers are sized like a 35B-A3B-class model (hidden 2048, experts of 512
  with 8 used per token plus a shared expert of 512, 16/2 attention heads of 256, DeltaNet 16 key
  and 32 value heads of 128) but with 8 blocks and 128 experts (per-token work as with more).
Sizes are chosen by us, not copied from a released config.

Template: the tiny fixture of the same architecture (same keys, same tensor names per block kind).
Every tensor's shape is derived from *what each dimension means* (by tensor name); the formula is
first checked against the template's own parameters so it reproduces the template's shapes
exactly, then evaluated with the target parameters. Where the block count changes (dense: 8 ->
24), the per-block tensor lists are taken from the template by block kind (Gated DeltaNet vs full
attention, as given by full_attention_interval) -- checked to be identical for every template
block of that kind -- and replayed for each target block; attention.recurrent_layers is
regenerated.

--mtp (dense only): one multi-token-prediction block after the trunk (`nextn_predict_layers` = 1): a gated
full-attention block with the trunk's FFN, `nextn.eh_proj` [2·hidden → hidden], `nextn.enorm`,
`nextn.hnorm` and `nextn.shared_head_norm`, as Qwen3.5 files converted with their MTP weights carry, for
`--spec-type draft-mtp` measurements (with `--spec-synth-rates`: random weights draft noise).

Usage: make-qwen35-shape.py [--moe] [--mtp] [TEMPLATE] [OUT.f16.gguf]
Then: llama-quantize OUT.f16.gguf OUT.q4_k_m.gguf Q4_K_M
"""
import functools
import re
import sys
import os

import numpy as np
from gguf import GGUFReader, GGUFValueType

from bench_gguf import BenchFile

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "../../tests/fixtures/models")

# Parameters that determine every shape (shared by both variants, then per variant). "tmpl" must
# reproduce the template.
SHARED_TMPL = dict(n_head_kv=2, head_dim=32, n_rot=8, sections=[2, 1, 1, 0], ssm_k_heads=2, ssm_v_heads=4,
                   ssm_k_dim=16, ssm_v_dim=16, conv_kernel=4, n_vocab=49152)
SHARED_TARGET = dict(n_embd=2048, n_head_kv=2, head_dim=256, n_rot=64, sections=[11, 11, 10, 0],
                     ssm_k_heads=16, ssm_k_dim=128, ssm_v_dim=128, conv_kernel=4, n_vocab=49152)
VARIANTS = {
    "dense": dict(
        arch="qwen35", template="qwen35-tiny.gguf", out="qwen35-shape.f16.gguf", seed=1235,
        tmpl=dict(SHARED_TMPL, n_embd=64, n_layer=8, n_head=4, n_ff=128),
        target=dict(SHARED_TARGET, n_layer=24, n_head=8, ssm_v_heads=16, n_ff=6144),
    ),
    "moe": dict(
        arch="qwen35moe", template="qwen35moe-tiny.gguf", out="qwen35moe-shape.f16.gguf", seed=1234,
        tmpl=dict(SHARED_TMPL, n_embd=40, n_layer=8, n_head=4, n_expert=8, n_expert_used=2, n_ff_exp=32,
                  n_ff_shexp=64),
        target=dict(SHARED_TARGET, n_layer=8, n_head=16, ssm_v_heads=32, n_expert=128, n_expert_used=8,
                    n_ff_exp=512, n_ff_shexp=512),
    ),
}


def shape_of(suffix, p):
    """GGUF ne order (ne0 = contiguous dim first)."""
    E = p["n_embd"]
    qk = p["ssm_k_heads"] * p["ssm_k_dim"]          # DeltaNet q and k width each
    vv = p["ssm_v_heads"] * p["ssm_v_dim"]          # DeltaNet value width (= ssm.inner_size)
    conv_ch = 2 * qk + vv                            # conv runs over [q, k, v]
    table = {
        "token_embd.weight": [E, p["n_vocab"]],      # dense: tied, also the LM head
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
        # the multi-token-prediction block's own tensors (--mtp)
        "nextn.eh_proj.weight": [2 * E, E],
        "nextn.enorm.weight": [E],
        "nextn.hnorm.weight": [E],
        "nextn.shared_head_norm.weight": [E],
    }
    if "n_ff" in p:  # dense SwiGLU FFN
        table.update({
            "ffn_gate.weight": [E, p["n_ff"]],
            "ffn_up.weight": [E, p["n_ff"]],
            "ffn_down.weight": [p["n_ff"], E],
        })
    else:  # MoE
        table.update({
            "ffn_gate_inp.weight": [E, p["n_expert"]],
            "ffn_gate_exps.weight": [E, p["n_ff_exp"], p["n_expert"]],
            "ffn_up_exps.weight": [E, p["n_ff_exp"], p["n_expert"]],
            "ffn_down_exps.weight": [p["n_ff_exp"], E, p["n_expert"]],
            "ffn_gate_inp_shexp.weight": [E, 1],
            "ffn_gate_shexp.weight": [E, p["n_ff_shexp"]],
            "ffn_up_shexp.weight": [E, p["n_ff_shexp"]],
            "ffn_down_shexp.weight": [p["n_ff_shexp"], E],
        })
    return table[suffix]


def split_name(name):
    m = re.match(r"blk\.(\d+)\.(.*)", name)
    return (int(m.group(1)), m.group(2)) if m else (None, name)


# tensors that stay F32 (besides every 1-D tensor): llama.cpp / the converter keep these F32
F32_2D = {"ssm_conv1d.weight", "ffn_gate_inp.weight", "ffn_gate_inp_shexp.weight"}


def recurrent_layers(n_layer, interval):
    return [(i + 1) % interval != 0 for i in range(n_layer)]


def metadata_overrides(arch, p, interval):
    a = arch
    over = {
        "general.name": f"{arch}-shape",
        "general.size_label": "shape",
        "general.file_type": 1,  # MOSTLY_F16
        f"{a}.embedding_length": p["n_embd"],
        f"{a}.attention.head_count": p["n_head"],
        f"{a}.attention.head_count_kv": p["n_head_kv"],
        f"{a}.attention.key_length": p["head_dim"],
        f"{a}.attention.value_length": p["head_dim"],
        f"{a}.rope.dimension_count": p["n_rot"],
        f"{a}.rope.dimension_sections": p["sections"],
        f"{a}.ssm.conv_kernel": p["conv_kernel"],
        f"{a}.ssm.state_size": p["ssm_k_dim"],          # = key = value head dim
        f"{a}.ssm.group_count": p["ssm_k_heads"],
        f"{a}.ssm.time_step_rank": p["ssm_v_heads"],
        f"{a}.ssm.inner_size": p["ssm_v_heads"] * p["ssm_v_dim"],
    }
    if "n_ff" in p:
        over.update({
            f"{a}.block_count": p["n_layer"],
            f"{a}.feed_forward_length": p["n_ff"],
            f"{a}.attention.recurrent_layers": recurrent_layers(p["n_layer"], interval),
        })
    else:
        over.update({
            f"{a}.expert_count": p["n_expert"],
            f"{a}.expert_used_count": p["n_expert_used"],
            f"{a}.expert_feed_forward_length": p["n_ff_exp"],
            f"{a}.expert_shared_feed_forward_length": p["n_ff_shexp"],
        })
    return over


def weights(rng, name, suf, ne, dt):
    """The values of tensor `name` (GGUF shape `ne`, type `dt`)."""
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
    print(f"{name:40s} {str(ne):28s} {np.dtype(dt).name}", flush=True)
    return a


def main():
    args = sys.argv[1:]
    variant = VARIANTS["moe" if "--moe" in args else "dense"]
    mtp = "--mtp" in args
    assert not (mtp and "--moe" in args), "--mtp is for the dense shape"
    args = [x for x in args if x not in ("--moe", "--mtp")]
    template = args[0] if len(args) > 0 else os.path.join(FIXTURES, variant["template"])
    out_path = args[1] if len(args) > 1 else variant["out"]
    arch, tmpl, target = variant["arch"], variant["tmpl"], variant["target"]
    assert target["ssm_k_dim"] == target["ssm_v_dim"]
    r = GGUFReader(template)
    assert r.fields["general.architecture"].contents() == arch
    interval = int(r.fields[f"{arch}.full_attention_interval"].contents())
    tensor_names = [t.name for t in r.tensors]
    assert ("output.weight" in tensor_names) == ("n_ff" not in tmpl)  # dense: tied embeddings

    # 1) the shape formula must reproduce the template exactly, and the template's
    #    metadata must equal what metadata_overrides() would write for tmpl.
    for t in r.tensors:
        want = shape_of(split_name(t.name)[1], tmpl)
        got = [int(x) for x in t.shape]
        assert want == got, (t.name, want, got)
    for k, v in metadata_overrides(arch, tmpl, interval).items():
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
    rec_t = recurrent_layers(tmpl["n_layer"], interval)
    assert sorted(blocks) == list(range(tmpl["n_layer"]))
    for il, sufs in blocks.items():
        kinds.setdefault(rec_t[il], sufs)
        assert kinds[rec_t[il]] == sufs, (il, sufs, kinds[rec_t[il]])
    assert set(kinds) == {True, False}

    names = list(head)
    rec = recurrent_layers(target["n_layer"], interval)
    for il in range(target["n_layer"]):
        names += [f"blk.{il}.{s}" for s in kinds[rec[il]]]
    if mtp:
        il = target["n_layer"]
        nextn = ["nextn.eh_proj.weight", "nextn.enorm.weight", "nextn.hnorm.weight", "nextn.shared_head_norm.weight"]
        names += [f"blk.{il}.{s}" for s in kinds[False] + nextn]
    names += tail

    # 2) metadata: copy every key, override the shape keys
    over = metadata_overrides(arch, target, interval)
    if mtp:
        over[f"{arch}.block_count"] = target["n_layer"] + 1
        over[f"{arch}.attention.recurrent_layers"] = recurrent_layers(target["n_layer"], interval) + [False]
        over[f"{arch}.nextn_predict_layers"] = 1
    f = BenchFile(out_path, arch, variant["seed"])
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        val = over.get(name, field.contents())
        f.w.add_key_value(name, val, vtype, sub_type=sub)
    missing = set(over) - set(r.fields)
    if mtp:
        missing.discard(f"{arch}.nextn_predict_layers")
        f.w.add_uint32(f"{arch}.nextn_predict_layers", 1)
    assert not missing, missing

    # 3) tensors, each drawn as it is written
    total = 0
    for name in names:
        suf = split_name(name)[1]
        ne = shape_of(suf, target)
        dt = np.float32 if len(ne) == 1 or suf in F32_2D else np.float16
        f.add(name, tuple(reversed(ne)), dt, functools.partial(weights, f.rng, name, suf, ne, dt))
        total += int(np.prod(ne))
    f.write()
    print(f"wrote {out_path}: {len(names)} tensors, {total} params ({total/1e9:.3f} B)", flush=True)


if __name__ == "__main__":
    main()
