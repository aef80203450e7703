import numpy as np, json, sys
from gguf import GGUFReader
from gguf.quants import dequantize
r = GGUFReader(sys.argv[1])
T = {t.name: t for t in r.tensors}
def W(name):
    t = T[name]
    a = dequantize(t.data, t.tensor_type).astype(np.float64)
    return a.reshape([int(x) for x in reversed(t.shape.tolist())]) if len(t.shape) > 1 else a.reshape(-1)
f = r.fields
def val(k): return f[k].parts[f[k].data[0]].tolist()[0]
L = val('gemma3.block_count'); H = val('gemma3.attention.head_count'); KV = val('gemma3.attention.head_count_kv')
D = val('gemma3.embedding_length'); hd = val('gemma3.attention.key_length'); eps = val('gemma3.attention.layer_norm_rms_epsilon')
base = val('gemma3.rope.freq_base'); swa = val('gemma3.attention.sliding_window')
emb = W('token_embd.weight')
names = ['attn_norm','attn_q','attn_k','attn_v','attn_output','attn_q_norm','attn_k_norm','post_attention_norm','ffn_norm','ffn_gate','ffn_up','ffn_down','post_ffw_norm']
layers = [{k: W(f'blk.{i}.{k}.weight') for k in names} for i in range(L)]
onorm = W('output_norm.weight')
def rms(x, w): return x / np.sqrt((x*x).mean(-1, keepdims=True) + eps) * w
def rope(x, pos, b):
    half = hd // 2
    inv = b ** (-np.arange(0, hd, 2) / hd)
    ang = pos[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x0, x1 = x[..., :half], x[..., half:]
    return np.concatenate([x0*c - x1*s, x0*s + x1*c], -1)
def gelu(x): return 0.5*x*(1+np.tanh(np.sqrt(2/np.pi)*(x+0.044715*x**3)))
def forward(ids):
    x = emb[ids] * np.sqrt(D); n = len(ids); pos = np.arange(n, dtype=np.float64)
    for i, l in enumerate(layers):
        local = i % 6 < 5
        h = rms(x, l['attn_norm'])
        q = (h @ l['attn_q'].T).reshape(n, H, hd); k = (h @ l['attn_k'].T).reshape(n, KV, hd); v = (h @ l['attn_v'].T).reshape(n, KV, hd)
        q = rms(q, l['attn_q_norm']); k = rms(k, l['attn_k_norm'])
        b = 10000.0 if local else base
        q, k = rope(q, pos, b), rope(k, pos, b)
        k = np.repeat(k, H//KV, axis=1); v = np.repeat(v, H//KV, axis=1)
        sc = np.einsum('qhd,khd->hqk', q, k) / np.sqrt(hd)
        qi, ki = np.arange(n)[:, None], np.arange(n)[None, :]
        mask = ki > qi
        if local: mask |= (qi - ki) >= swa
        sc = np.where(mask[None], -np.inf, sc)
        p = np.exp(sc - sc.max(-1, keepdims=True)); p /= p.sum(-1, keepdims=True)
        o = np.einsum('hqk,khd->qhd', p, v).reshape(n, H*hd)
        x = x + rms(o @ l['attn_output'].T, l['post_attention_norm'])
        h = rms(x, l['ffn_norm'])
        g = h @ l['ffn_gate'].T; u = h @ l['ffn_up'].T
        x = x + rms((gelu(g) * u) @ l['ffn_down'].T, l['post_ffw_norm'])
    return rms(x, onorm) @ emb.T
golden = json.load(open(sys.argv[2]))['models'][sys.argv[3]]
case = golden['greedy'][int(sys.argv[4])]
ids = list(case['prompt_ids']) + [s['token'] for s in case['steps']]
logits = forward(ids)
n0 = len(case['prompt_ids'])
for i, st in enumerate(case['steps']):
    lg = logits[n0 - 1 + i]
    print(f"step {i:2d} diffs", ' '.join(f"{lg[t]-v:+.3f}" for t, v in st['top5']))
