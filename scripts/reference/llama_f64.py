import numpy as np, json, sys
from gguf import GGUFReader
from gguf.quants import dequantize
r = GGUFReader(sys.argv[1])
T = {t.name: t for t in r.tensors}
def W(name):
    t = T[name]
    a = dequantize(t.data, t.tensor_type).astype(np.float64)
    return a.reshape([int(x) for x in reversed(t.shape.tolist())]) if a.ndim > 1 or len(t.shape) > 1 else a.reshape(-1)
f = r.fields
def val(k): return f[k].parts[f[k].data[0]].tolist()[0]
L = val('llama.block_count'); H = val('llama.attention.head_count'); KV = val('llama.attention.head_count_kv')
D = val('llama.embedding_length'); hd = D // H; eps = val('llama.attention.layer_norm_rms_epsilon'); base = val('llama.rope.freq_base')
emb = W('token_embd.weight')  # [vocab, D]
layers = [{k: W(f'blk.{i}.{k}.weight') for k in ['attn_norm','attn_q','attn_k','attn_v','attn_output','ffn_norm','ffn_gate','ffn_up','ffn_down']} for i in range(L)]
onorm = W('output_norm.weight')
def rms(x, w): return x / np.sqrt((x*x).mean(-1, keepdims=True) + eps) * w
def rope(x, pos):  # x [n, heads, hd], interleaved pairs
    inv = base ** (-np.arange(0, hd, 2) / hd)
    ang = pos[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x); out[..., 0::2] = x0*c - x1*s; out[..., 1::2] = x0*s + x1*c
    return out
def forward(ids):
    x = emb[ids]; n = len(ids); pos = np.arange(n, dtype=np.float64)
    for l in layers:
        h = rms(x, l['attn_norm'])
        q = (h @ l['attn_q'].T).reshape(n, H, hd); k = (h @ l['attn_k'].T).reshape(n, KV, hd); v = (h @ l['attn_v'].T).reshape(n, KV, hd)
        q, k = rope(q, pos), rope(k, pos)
        k = np.repeat(k, H//KV, axis=1); v = np.repeat(v, H//KV, axis=1)
        sc = np.einsum('qhd,khd->hqk', q, k) / np.sqrt(hd)
        sc += np.triu(np.full((n, n), -np.inf), 1)
        p = np.exp(sc - sc.max(-1, keepdims=True)); p /= p.sum(-1, keepdims=True)
        o = np.einsum('hqk,khd->qhd', p, v).reshape(n, D)
        x = x + o @ l['attn_output'].T
        h = rms(x, l['ffn_norm'])
        g = h @ l['ffn_gate'].T; u = h @ l['ffn_up'].T
        x = x + ((g / (1 + np.exp(-g))) * u) @ l['ffn_down'].T
    return rms(x, onorm) @ emb.T
golden = json.load(open(sys.argv[2]))['models'][sys.argv[3]]
case = golden['greedy'][int(sys.argv[4])]
ids = list(case['prompt_ids']) + [s['token'] for s in case['steps']]
logits = forward(ids)
n0 = len(case['prompt_ids'])
for i, st in enumerate(case['steps']):
    lg = logits[n0 - 1 + i]
    print(f"step {i:2d} diffs", ' '.join(f"{lg[t]-v:+.3f}" for t, v in st['top5']))
