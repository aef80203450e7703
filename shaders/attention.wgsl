// attention.wgsl — causal multi-head attention with GQA and an optional sliding window, against an
// f32 or f16 KV cache (`K_F16`, `V_F16`). One workgroup of 64 per (head, query row, split): keys in
// tiles of 64, one key's q·k per invocation, an online softmax in f32, each invocation owning
// head_dim / 64 output dimensions. Decode splits the key range over several workgroups, each
// writing (max, sum, unnormalized output) for `reduce` to combine; with one split the result is
// written directly. As llama.cpp: with an f16 key cache q is rounded to f16.

#include "common"
#include "reduce"

struct Params {
    start_pos: u32,
    rows: u32,
    n_heads: u32,
    group: u32,      // query heads per KV head
    head_dim: u32,
    kv_stride: u32,  // values per cached position (KV heads × head_dim)
    q_stride: u32,   // values per query row (heads × head_dim)
    window: u32,     // 0: none
    splits: u32,
    chunk: u32,      // keys per split
    scale: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
#if K_F16
@group(0) @binding(2) var<storage, read> kc: array<u32>;
#else
@group(0) @binding(2) var<storage, read> kc: array<f32>;
#endif
#if V_F16
@group(0) @binding(3) var<storage, read> vc: array<u32>;
#else
@group(0) @binding(3) var<storage, read> vc: array<f32>;
#endif
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<storage, read_write> part: array<f32>;

const HD_MAX: u32 = 256u;
const NEG: f32 = -1.0e30;

var<workgroup> qs: array<f32, HD_MAX>;
var<workgroup> ps: array<f32, 64>;

// Two consecutive cached values (e even).
fn k_pair(e: u32) -> vec2<f32> {
#if K_F16
    return unpack2x16float(kc[e / 2u]);
#else
    return vec2<f32>(kc[e], kc[e + 1u]);
#endif
}

fn v_at(e: u32) -> f32 {
#if V_F16
    let w = vc[e / 2u];
    return unpack2x16float(w)[e & 1u];
#else
    return vc[e];
#endif
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32 {{SG_ARGS}}) {
    {{SG_LOCALS}}
    let h = wid.x;
    let i = wid.y;
    let s = wid.z;
    let hd = p.head_dim;
    let pos = p.start_pos + i;
    var lo = 0u;
    if (p.window > 0u && pos + 1u > p.window) {
        lo = pos + 1u - p.window;
    }
    let kbeg = lo + s * p.chunk;
    let kend = min(kbeg + p.chunk, pos + 1u);
    let kvh = h / p.group;
    let qo = i * p.q_stride + h * hd;
    for (var d = lid; d < hd; d += 64u) {
#if K_F16
        qs[d] = round_f16(q[qo + d]);
#else
        qs[d] = q[qo + d];
#endif
    }
    workgroupBarrier();

    var m = NEG;
    var l = 0.0;
    var acc: array<f32, 4>;
    let ko = kvh * hd;
    for (var t0 = kbeg; t0 < kend; t0 += 64u) {
        let j = t0 + lid;
        var sc = NEG;
        if (j < kend) {
            let e = j * p.kv_stride + ko;
            var dot = 0.0;
            for (var d = 0u; d < hd; d += 2u) {
                let kv = k_pair(e + d);
                dot += qs[d] * kv.x + qs[d + 1u] * kv.y;
            }
            sc = dot * p.scale;
        }
        let m_new = max(m, wg_max(sc, lid, sg_lane, sg_id, n_sg));
        var pj = 0.0;
        if (j < kend) {
            pj = exp(sc - m_new);
        }
        ps[lid] = pj;
        let tsum = wg_sum(pj, lid, sg_lane, sg_id, n_sg);
        let f = exp(m - m_new);
        l = l * f + tsum;
        m = m_new;
        let cnt = min(64u, kend - t0);
        for (var r = 0u; r < 4u; r++) {
            let d = lid + r * 64u;
            if (d < hd) {
                var a = acc[r] * f;
                for (var jj = 0u; jj < cnt; jj++) {
                    a += ps[jj] * v_at((t0 + jj) * p.kv_stride + ko + d);
                }
                acc[r] = a;
            }
        }
        workgroupBarrier();
    }

    if (p.splits == 1u) {
        for (var r = 0u; r < 4u; r++) {
            let d = lid + r * 64u;
            if (d < hd) {
                out[qo + d] = acc[r] / l;
            }
        }
    } else {
        let po = ((i * p.n_heads + h) * p.splits + s) * (hd + 2u);
        if (lid == 0u) {
            part[po] = m;
            part[po + 1u] = l;
        }
        for (var r = 0u; r < 4u; r++) {
            let d = lid + r * 64u;
            if (d < hd) {
                part[po + 2u + d] = acc[r];
            }
        }
    }
}

// Combine the splits of each (head, query row): rescale each by e^(m_s − m) and normalize.
@compute @workgroup_size(64)
fn reduce(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let i = wid.y;
    let hd = p.head_dim;
    let base = (i * p.n_heads + h) * p.splits * (hd + 2u);
    var mx = NEG;
    for (var s = 0u; s < p.splits; s++) {
        mx = max(mx, part[base + s * (hd + 2u)]);
    }
    var l = 0.0;
    for (var s = 0u; s < p.splits; s++) {
        let po = base + s * (hd + 2u);
        l += part[po + 1u] * exp(part[po] - mx);
    }
    let qo = i * p.q_stride + h * hd;
    for (var d = lid; d < hd; d += 64u) {
        var a = 0.0;
        for (var s = 0u; s < p.splits; s++) {
            let po = base + s * (hd + 2u);
            a += part[po + 2u + d] * exp(part[po] - mx);
        }
        out[qo + d] = a / l;
    }
}
