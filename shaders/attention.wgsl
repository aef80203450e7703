// attention.wgsl — causal multi-head attention with GQA and an optional sliding window, against an
// f32, f16 or q8_0 KV cache (`K_F16`, `V_F16`, `K_Q8`, `V_Q8`). One workgroup of 64 per (head,
// query row, split): keys in tiles of 64, one key's q·k per invocation, an online softmax in f32,
// each invocation owning head_dim / 64 output dimensions. Decode splits the key range over several
// workgroups, each writing (max, sum, unnormalized output) for `reduce` to combine; with one split
// the result is written directly. `PREFILL`: the tiled prefill kernel (below). As llama.cpp (and
// the CPU backend): with an f16 key cache q is rounded to f16; with a q8_0 one q is rotated as the
// keys are and quantized to 8 bits, and q·k is taken block by block in integers (dot4I8Packed)
// times the two scales; q8_0 values are expanded as they are read, and the output rotated back
// (q8.wgsl).

#include "common"
#include "reduce"
#if K_Q8 || V_Q8
#include "q8"
#endif

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
    k_scales: u32,    // q8_0: first word of the scales, per cache
    v_scales: u32,
    rots: u32,        // q8_0: the key cache's rotation | the value cache's << 16 (1: none)
    k_rot_scale: f32, // their 1/√rotation
    v_rot_scale: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
#if K_F16 || K_Q8
@group(0) @binding(2) var<storage, read> kc: array<u32>;
#else
@group(0) @binding(2) var<storage, read> kc: array<f32>;
#endif
#if V_F16 || V_Q8
@group(0) @binding(3) var<storage, read> vc: array<u32>;
#else
@group(0) @binding(3) var<storage, read> vc: array<f32>;
#endif
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<storage, read_write> part: array<f32>;

const HD_MAX: u32 = 256u;
const NEG: f32 = -1.0e30;

#if K_Q8
// The scale of block b of the key cache.
fn k_scale(b: u32) -> f32 {
    return unpack2x16float(kc[p.k_scales + b / 2u])[b % 2u];
}
#else
// Two consecutive cached keys (e even).
fn k_pair(e: u32) -> vec2<f32> {
#if K_F16
    return unpack2x16float(kc[e / 2u]);
#else
    return vec2<f32>(kc[e], kc[e + 1u]);
#endif
}
#endif

#if V_Q8
fn v_scale(b: u32) -> f32 {
    return unpack2x16float(vc[p.v_scales + b / 2u])[b % 2u];
}
#endif

fn v_at(e: u32) -> f32 {
#if V_Q8
    return f32(unpack4xI8(vc[e / 4u])[e % 4u]) * v_scale(e / 32u);
#else
#if V_F16
    let w = vc[e / 2u];
    return unpack2x16float(w)[e & 1u];
#else
    return vc[e];
#endif
#endif
}

// Two consecutive cached values (e even).
fn v_pair(e: u32) -> vec2<f32> {
#if V_Q8
    let q = unpack4xI8(vc[e / 4u]);
    return vec2<f32>(f32(q[e % 4u]), f32(q[e % 4u + 1u])) * v_scale(e / 32u);
#else
#if V_F16
    return unpack2x16float(vc[e / 2u]);
#else
    return vec2<f32>(vc[e], vc[e + 1u]);
#endif
#endif
}

#if PREFILL
// Prefill, tiled: a workgroup of 64 per (head, block of 16 query rows), over tiles of 64 keys.
// Scores: each invocation computes 4 rows × 4 keys; softmax: 4 invocations per row; output:
// each invocation accumulates 4 rows × (head_dim / 16) dimensions. Every cached value read serves
// several rows, which is what costs on any adapter (on lavapipe each read is a per-lane loop).
// Needs head_dim a multiple of 32, at most 256.
const BQ: u32 = 16u;
const BKEYS: u32 = 64u;

// [BQ][head_dim]: the queries (a q8_0 key cache's: their quants, as f32), then for q8_0 values
// the output being rotated back.
var<workgroup> hx: array<f32, 4096>;
var<workgroup> ts: array<f32, 1024>;   // [BQ][BKEYS]: scores, then probabilities
var<workgroup> tmax: array<f32, 64>;
var<workgroup> tsum: array<f32, 64>;
var<workgroup> talpha: array<f32, 16>;
var<workgroup> tl: array<f32, 16>;
#if K_Q8 || V_Q8
var<workgroup> q8_d: array<f32, 128>;
var<workgroup> q8_id: array<f32, 128>;
#endif

// Four rows' query values at offset o of a row (hx[row · head_dim + o]).
fn q4(r0: u32, o: u32) -> vec4<f32> {
    let hd = p.head_dim;
    return vec4<f32>(hx[r0 * hd + o], hx[(r0 + 1u) * hd + o], hx[(r0 + 2u) * hd + o],
                     hx[(r0 + 3u) * hd + o]);
}

@compute @workgroup_size(64)
fn prefill(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let i0 = wid.y * BQ;
    let hd = p.head_dim;
    let ko = (h / p.group) * hd;
    let nrows = min(BQ, p.rows - i0);
    for (var e = lid; e < BQ * hd; e += 64u) {
        let r = e / hd;
        var v = 0.0;
        if (r < nrows) {
            v = q[(i0 + r) * p.q_stride + h * hd + e % hd];
#if K_F16
            v = round_f16(v);
#endif
        }
        hx[e] = v;
    }
#if K_Q8
    // Each row's query rotated as the keys are and quantized (its quants kept as f32 integers).
    q8_prepare(p.rots & 0xffffu, p.k_rot_scale, BQ * hd, lid, 64u);
    for (var e = lid; e < BQ * hd; e += 64u) {
        hx[e] = round(hx[e] * q8_id[e / 32u]);
    }
#endif
    let first = p.start_pos + i0;
    var kbeg = 0u;
    if (p.window > 0u && first + 1u > p.window) {
        kbeg = first + 1u - p.window;
    }
    let kend = first + nrows;
    // Scores and output: rows 4g..4g+3 of the block; keys c, c+16, c+32, c+48 of the tile;
    // dimensions 2c, 2c+1 (+32 each step).
    let g = lid / 16u;
    let c = lid % 16u;
    let r0 = 4u * g;
    // Softmax: row lid / 4, a quarter of the tile each.
    let mr = lid / 4u;
    let mq = lid % 4u;
    var m_run = NEG;
    var l_run = 0.0;
    var acc_a: array<vec4<f32>, 8>;
    var acc_b: array<vec4<f32>, 8>;
    workgroupBarrier();

    for (var t0 = kbeg; t0 < kend; t0 += BKEYS) {
        var s0 = vec4<f32>(0.0);
        var s1 = vec4<f32>(0.0);
        var s2 = vec4<f32>(0.0);
        var s3 = vec4<f32>(0.0);
        let e0 = min(t0 + c, kend - 1u) * p.kv_stride + ko;
        let e1 = min(t0 + c + 16u, kend - 1u) * p.kv_stride + ko;
        let e2 = min(t0 + c + 32u, kend - 1u) * p.kv_stride + ko;
        let e3 = min(t0 + c + 48u, kend - 1u) * p.kv_stride + ko;
#if K_Q8
        // Block by block: the 32 products of a block summed exactly (integers in f32), times
        // the key's scale and each row's.
        let nb = hd / 32u;
        for (var b = 0u; b < nb; b++) {
            var i0 = vec4<f32>(0.0);
            var i1 = vec4<f32>(0.0);
            var i2 = vec4<f32>(0.0);
            var i3 = vec4<f32>(0.0);
            for (var w = 8u * b; w < 8u * b + 8u; w++) {
                let k0 = vec4<f32>(unpack4xI8(kc[e0 / 4u + w]));
                let k1 = vec4<f32>(unpack4xI8(kc[e1 / 4u + w]));
                let k2 = vec4<f32>(unpack4xI8(kc[e2 / 4u + w]));
                let k3 = vec4<f32>(unpack4xI8(kc[e3 / 4u + w]));
                for (var x = 0u; x < 4u; x++) {
                    let qv = q4(r0, 4u * w + x);
                    i0 += qv * k0[x];
                    i1 += qv * k1[x];
                    i2 += qv * k2[x];
                    i3 += qv * k3[x];
                }
            }
            let dq = vec4<f32>(q8_d[r0 * nb + b], q8_d[(r0 + 1u) * nb + b],
                               q8_d[(r0 + 2u) * nb + b], q8_d[(r0 + 3u) * nb + b]);
            s0 += k_scale(e0 / 32u + b) * dq * i0;
            s1 += k_scale(e1 / 32u + b) * dq * i1;
            s2 += k_scale(e2 / 32u + b) * dq * i2;
            s3 += k_scale(e3 / 32u + b) * dq * i3;
        }
#else
        for (var d = 0u; d < hd; d += 2u) {
            let qx = q4(r0, d);
            let qy = q4(r0, d + 1u);
            let k0 = k_pair(e0 + d);
            let k1 = k_pair(e1 + d);
            let k2 = k_pair(e2 + d);
            let k3 = k_pair(e3 + d);
            s0 += qx * k0.x + qy * k0.y;
            s1 += qx * k1.x + qy * k1.y;
            s2 += qx * k2.x + qy * k2.y;
            s3 += qx * k3.x + qy * k3.y;
        }
#endif
        for (var u = 0u; u < 4u; u++) {
            var sv = s0;
            if (u == 1u) {
                sv = s1;
            } else if (u == 2u) {
                sv = s2;
            } else if (u == 3u) {
                sv = s3;
            }
            let j = t0 + c + 16u * u;
            for (var rr = 0u; rr < 4u; rr++) {
                let r = r0 + rr;
                let pos = first + r;
                var ok = r < nrows && j < kend && j <= pos;
                if (p.window > 0u && j + p.window <= pos) {
                    ok = false;
                }
                var v = NEG;
                if (ok) {
                    v = sv[rr] * p.scale;
                }
                ts[r * BKEYS + c + 16u * u] = v;
            }
        }
        workgroupBarrier();

        var lmax = NEG;
        for (var jj = 0u; jj < 16u; jj++) {
            lmax = max(lmax, ts[mr * BKEYS + mq * 16u + jj]);
        }
        tmax[lid] = lmax;
        workgroupBarrier();
        let row_max = max(max(tmax[mr * 4u], tmax[mr * 4u + 1u]),
                          max(tmax[mr * 4u + 2u], tmax[mr * 4u + 3u]));
        let m_new = max(m_run, row_max);
        var lsum = 0.0;
        for (var jj = 0u; jj < 16u; jj++) {
            let at = mr * BKEYS + mq * 16u + jj;
            let s = ts[at];
            var pj = 0.0;
            if (s > 0.5 * NEG) {
                pj = exp(s - m_new);
            }
            ts[at] = pj;
            lsum += pj;
        }
        tsum[lid] = lsum;
        workgroupBarrier();
        let alpha = exp(m_run - m_new);
        l_run = l_run * alpha + (tsum[mr * 4u] + tsum[mr * 4u + 1u]) + (tsum[mr * 4u + 2u] + tsum[mr * 4u + 3u]);
        m_run = m_new;
        if (mq == 0u) {
            talpha[mr] = alpha;
        }
        workgroupBarrier();

        let f = vec4<f32>(talpha[r0], talpha[r0 + 1u], talpha[r0 + 2u], talpha[r0 + 3u]);
        for (var t = 0u; t < 8u; t++) {
            acc_a[t] *= f;
            acc_b[t] *= f;
        }
        let cnt = min(BKEYS, kend - t0);
        for (var jj = 0u; jj < cnt; jj++) {
            let pv = vec4<f32>(ts[r0 * BKEYS + jj], ts[(r0 + 1u) * BKEYS + jj],
                               ts[(r0 + 2u) * BKEYS + jj], ts[(r0 + 3u) * BKEYS + jj]);
            let e = (t0 + jj) * p.kv_stride + ko + 2u * c;
            for (var t = 0u; t < 8u; t++) {
                if (32u * t < hd) {
                    let vv = v_pair(e + 32u * t);
                    acc_a[t] += pv * vv.x;
                    acc_b[t] += pv * vv.y;
                }
            }
        }
        workgroupBarrier();
    }

    if (mq == 0u) {
        tl[mr] = l_run;
    }
    workgroupBarrier();
#if V_Q8
    // The sums are in the values' rotated basis: normalized into hx, rotated back, written.
    for (var rr = 0u; rr < 4u; rr++) {
        let r = r0 + rr;
        let o = r * hd + 2u * c;
        let inv = select(0.0, 1.0 / tl[r], r < nrows);
        for (var t = 0u; t < 8u; t++) {
            if (32u * t < hd) {
                hx[o + 32u * t] = acc_a[t][rr] * inv;
                hx[o + 32u * t + 1u] = acc_b[t][rr] * inv;
            }
        }
    }
    hadamard(p.rots >> 16u, p.v_rot_scale, BQ * hd, lid, 64u);
    for (var e = lid; e < nrows * hd; e += 64u) {
        out[(i0 + e / hd) * p.q_stride + h * hd + e % hd] = hx[e];
    }
#else
    for (var rr = 0u; rr < 4u; rr++) {
        let r = r0 + rr;
        if (r < nrows) {
            let o = (i0 + r) * p.q_stride + h * hd + 2u * c;
            let inv = 1.0 / tl[r];
            for (var t = 0u; t < 8u; t++) {
                if (32u * t < hd) {
                    out[o + 32u * t] = acc_a[t][rr] * inv;
                    out[o + 32u * t + 1u] = acc_b[t][rr] * inv;
                }
            }
        }
    }
#endif
}
#else
// The query head (then, for q8_0 values, the output being rotated back).
var<workgroup> hx: array<f32, HD_MAX>;
var<workgroup> ps: array<f32, 64>;
#if K_Q8 || V_Q8
var<workgroup> q8_d: array<f32, 8>;
var<workgroup> q8_id: array<f32, 8>;
#endif
#if K_Q8
// The query's quants, packed as the cache's.
var<workgroup> qw: array<u32, 64>;
#endif

// q · (the key at cache value e), the query in hx (qw, q8_d for a q8_0 cache).
fn k_dot(e: u32) -> f32 {
    var dot = 0.0;
#if K_Q8
    for (var b = 0u; b < p.head_dim / 32u; b++) {
        var s = 0;
        for (var w = 0u; w < 8u; w++) {
            s += dot4I8Packed(kc[e / 4u + 8u * b + w], qw[8u * b + w]);
        }
        dot += k_scale(e / 32u + b) * q8_d[b] * f32(s);
    }
#else
    for (var d = 0u; d < p.head_dim; d += 2u) {
        let kv = k_pair(e + d);
        dot += hx[d] * kv.x + hx[d + 1u] * kv.y;
    }
#endif
    return dot;
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
        hx[d] = round_f16(q[qo + d]);
#else
        hx[d] = q[qo + d];
#endif
    }
#if K_Q8
    q8_prepare(p.rots & 0xffffu, p.k_rot_scale, hd, lid, 64u);
    for (var w = lid; w < hd / 4u; w += 64u) {
        qw[w] = q8_word(w);
    }
#endif
    workgroupBarrier();

    var m = NEG;
    var l = 0.0;
    var acc: array<f32, 4>;
    let ko = kvh * hd;
    for (var t0 = kbeg; t0 < kend; t0 += 64u) {
        let j = t0 + lid;
        var sc = NEG;
        if (j < kend) {
            sc = k_dot(j * p.kv_stride + ko) * p.scale;
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

#if V_Q8
    // The sum is in the values' rotated basis: rotate it back (a linear map, so a split's part
    // may be rotated before the reduce).
    for (var r = 0u; r < 4u; r++) {
        let d = lid + r * 64u;
        if (d < hd) {
            hx[d] = acc[r];
        }
    }
    hadamard(p.rots >> 16u, p.v_rot_scale, hd, lid, 64u);
    for (var r = 0u; r < 4u; r++) {
        let d = lid + r * 64u;
        if (d < hd) {
            acc[r] = hx[d];
        }
    }
#endif

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
#endif
