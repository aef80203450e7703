#!/usr/bin/env python3
"""Writes llama31-8b-shape.f16.gguf into OUTDIR: a random-weight GGUF with Llama-3.1-8B's shapes (llama, hidden
4096, 32 layers, 32/8 heads of 128, ffn 14336, vocab 128256, separate output matrix), for speed measurements only.
To be quick on the GPU machine it draws one random matrix per tensor shape and writes it for every layer: the
file still holds 8 B values at their own offsets, so nothing is served from a cache that a real model would miss.
The tokenizer is copied from llama3-vocab.gguf beside this script, with the fixtures' copy_tokenizer
(tests/fixtures/tiny_gguf.py; prepare.sh puts both in .dev/ beside it).
Then: llama-quantize llama31-8b-shape.f16.gguf llama31-8b-shape.q4_k_m.gguf Q4_K_M
usage: make-8b.py OUTDIR"""
import os
import sys

import numpy as np
from gguf import GGUFValueType, GGUFWriter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, "..", "..", "tests", "fixtures"))  # run from the repository
from tiny_gguf import copy_tokenizer  # noqa: E402
HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 4096, 32, 32, 8, 128, 14336, 128256
U32, F32 = GGUFValueType.UINT32, GGUFValueType.FLOAT32
rng = np.random.default_rng(0)


def random(shape):
    return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)


def main(out):
    arch = "llama"
    w = GGUFWriter(os.path.join(out, "llama31-8b-shape.f16.gguf"), arch)
    for key, value, kind in [
        ("block_count", LAYERS, U32), ("context_length", 131072, U32), ("embedding_length", HIDDEN, U32),
        ("feed_forward_length", FFN, U32), ("attention.head_count", HEADS, U32),
        ("attention.head_count_kv", KV_HEADS, U32), ("rope.freq_base", 5e5, F32),
        ("attention.layer_norm_rms_epsilon", 1e-5, F32), ("rope.dimension_count", HEAD_DIM, U32),
        ("vocab_size", VOCAB, U32),
    ]:
        w.add_key_value(f"{arch}.{key}", value, kind)
    w.add_key_value("general.file_type", 1, U32)
    copy_tokenizer(w, os.path.join(HERE, "llama3-vocab.gguf"))
    ones = np.ones(HIDDEN, np.float32)
    shared = {}
    for shape in [(HEADS * HEAD_DIM, HIDDEN), (KV_HEADS * HEAD_DIM, HIDDEN), (HIDDEN, HEADS * HEAD_DIM),
                  (FFN, HIDDEN), (HIDDEN, FFN)]:
        shared.setdefault(shape, random(shape))
    w.add_tensor("token_embd.weight", random((VOCAB, HIDDEN)))
    w.add_tensor("output_norm.weight", ones)
    w.add_tensor("output.weight", random((VOCAB, HIDDEN)))
    for i in range(LAYERS):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", ones)
        w.add_tensor(b + "attn_q.weight", shared[(HEADS * HEAD_DIM, HIDDEN)])
        w.add_tensor(b + "attn_k.weight", shared[(KV_HEADS * HEAD_DIM, HIDDEN)])
        w.add_tensor(b + "attn_v.weight", shared[(KV_HEADS * HEAD_DIM, HIDDEN)])
        w.add_tensor(b + "attn_output.weight", shared[(HIDDEN, HEADS * HEAD_DIM)])
        w.add_tensor(b + "ffn_norm.weight", ones)
        w.add_tensor(b + "ffn_gate.weight", shared[(FFN, HIDDEN)])
        w.add_tensor(b + "ffn_up.weight", shared[(FFN, HIDDEN)])
        w.add_tensor(b + "ffn_down.weight", shared[(HIDDEN, FFN)])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main(sys.argv[1])
