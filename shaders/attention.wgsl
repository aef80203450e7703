// attention.wgsl — causal (or, for an image span, bidirectional) multi-head attention with GQA, an optional sliding window and an optional
// soft cap of the scores (Gemma 2), against an f32, f16 or q8_0 KV cache (`K_F16`, `V_F16`, `K_Q8`,
// `V_Q8`). `PREFILL`: the tiled prefill kernel, a workgroup per (head, 16 query rows). Otherwise `main`, a workgroup per (KV head, query
// row, split) for the query heads of that KV head (GQA-folded), keys in tiles of 64 with an online
// softmax in f32; decode splits the key range over several workgroups, each writing (max, sum,
// unnormalized output) for `reduce` to combine; with one split the result is written directly.
// The details above each kernel. As llama.cpp (and the CPU backend): with an f16 key cache q is
// rounded to f16; with a q8_0 one q is rotated as the keys are and quantized to 8 bits, and q·k
// is taken block by block in integers (dot4I8Packed in `main`; sums of integers in f32, exact, in
// the tiled prefill) times the two scales; q8_0 values are expanded as they are read, and the
// output rotated back (q8.wgsl). `PREFILL_COOP`: the prefill on cooperative matrices, over f16
// caches (attention_coop.wgsl).

#include "coop"
#include "common"
#if K_Q8 || V_Q8
#include "q8"
#endif

struct Params {
    start_pos: u32,
    rows: u32,
    n_heads: u32,
    group: u32,      // query heads per KV head (the GROUP define: this, or a constant)
    head_dim: u32,   // (the HEAD_DIM define: this, or a constant)
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
    softcap: f32,     // scores become softcap · tanh(score / softcap); 0: no cap (Gemma 2: 50)
    has_sinks: u32,   // 1: `sinks` holds a logit per query head joining its softmax (gpt-oss)
    causal: u32,      // 0: every row also sees the call's later rows (an image Gemma 3 sees whole)
}

// One past the last key query row i of this call sees.
fn key_end(i: u32) -> u32 {
    if (p.causal == 0u) {
        return p.start_pos + p.rows;
    }
    return p.start_pos + i + 1u;
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
#if PREFILL_COOP
// The f16 caches as attention_coop.wgsl stages them, four values a load.
@group(0) @binding(2) var<storage, read> kc: array<vec4<f16>>;
@group(0) @binding(3) var<storage, read> vc: array<vec4<f16>>;
#else
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
#endif
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<storage, read_write> part: array<f32>;
@group(0) @binding(6) var<storage, read> sinks: array<f32>;

const NEG: f32 = -1.0e30;

// A softmax's denominator for query head h whose scores have maximum m and weight sum l: with a
// sink, its weight e^(sink − m) joins (a key whose value is zero).
fn with_sink(l: f32, m: f32, h: u32) -> f32 {
    if (p.has_sinks == 0u) {
        return l;
    }
    return l + exp(sinks[h] - m);
}

// A score as the softmax takes it: q·k times the scale, soft-capped where the model caps. tanh as
// (1 − e^(−2|x|)) / (1 + e^(−2|x|)), which cannot overflow; its error is a few ulps of the cap.
fn score(d: f32) -> f32 {
    let s = d * p.scale;
    if (p.softcap <= 0.0) {
        return s;
    }
    let t = exp(-2.0 * abs(s / p.softcap));
    return p.softcap * sign(s) * (1.0 - t) / (1.0 + t);
}

// The caches' readers (not attention_coop.wgsl's, which stages them whole).
#if PREFILL_COOP
#else
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
#endif

#if PREFILL
#if PREFILL_COOP
#include "attention_coop"
#else
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
    let hd = {{HEAD_DIM}};
    return vec4<f32>(hx[r0 * hd + o], hx[(r0 + 1u) * hd + o], hx[(r0 + 2u) * hd + o],
                     hx[(r0 + 3u) * hd + o]);
}

@compute @workgroup_size(64)
fn prefill(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let i0 = wid.y * BQ;
    let hd = {{HEAD_DIM}};
    let ko = (h / {{GROUP}}) * hd;
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
    let kend = key_end(i0 + nrows - 1u);
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
                var ok = r < nrows && j < kend && j < key_end(i0 + r);
                if (p.window > 0u && j + p.window <= pos) {
                    ok = false;
                }
                var v = NEG;
                if (ok) {
                    v = score(sv[rr]);
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
        tl[mr] = with_sink(l_run, m_run, h);
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
#endif
#else
// The query heads of workgroup x (of a decode grid): KV head `kv`, and `n` of its group's query
// heads from `h0` (up to `gmax`: a larger group takes several workgroups); heads of a group are
// consecutive in the query row.
struct Heads {
    kv: u32,
    h0: u32,
    n: u32,
}

fn heads_of(x: u32, gmax: u32) -> Heads {
    let chunks = ({{GROUP}} + gmax - 1u) / gmax;
    let kv = x / chunks;
    let c0 = (x % chunks) * gmax;
    return Heads(kv, kv * {{GROUP}} + c0, min(gmax, {{GROUP}} - c0));
}

// The keys [x, y) that split s of query row i reads: its chunk of the row's window.
fn split_keys(i: u32, s: u32) -> vec2<u32> {
    let pos = p.start_pos + i;
    var lo = 0u;
    if (p.window > 0u && pos + 1u > p.window) {
        lo = pos + 1u - p.window;
    }
    let kbeg = lo + s * p.chunk;
    return vec2<u32>(kbeg, min(kbeg + p.chunk, key_end(i)));
}

// Query heads per workgroup: 8, or 4 past heads of 256 values.
const GMAX: u32 = 8u;

fn heads_per_group() -> u32 {
    return select(GMAX, GMAX / 2u, {{HEAD_DIM}} > 256u);
}

#if V2
// Decode attention v2 (`GpuOptions::attention_v2`; f32 and f16 caches, built for the layer's
// shape and the adapter's one subgroup size SG): the workgroups of `main` (per KV head, query
// row and split, for up to 8 of its query heads; of WG invocations, 64 or 128,
// `KILN_WGPU_ATTN_V2_WG`), but each of their NSG subgroups
// walks keys of its own (kbeg + subgroup, then every NSG-th) with no barrier: a lane holds RP
// pairs of each head's query and sums (dimensions 2(lane + SG·r) and the next), a key's q·k is
// one subgroup sum, and each head's online softmax runs in registers, uniform across the
// subgroup. So a key's and a value's loads wait on nothing before them, and nothing waits on
// workgroup memory. Each subgroup writes its (maximum, sum, unnormalized output) as a split of
// its own, split s · NSG + subgroup of `p.splits` = NSG × the workgroups', which `reduce` (or
// FUSED_REDUCE's blocks) combines as any splits.
const SG: u32 = {{SG}}u;
const NSG: u32 = {{WG}}u / SG;
const RP: u32 = {{RP}}u;  // query pairs per lane and head: ⌈head_dim / 2 / SG⌉
const NQ: u32 = {{NQ}}u;  // most heads a workgroup takes: the group, at most 8 (4 past 256)

@compute @workgroup_size({{WG}})
fn main_v2(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32 {{SG_ARGS}}) {
    {{SG_LOCALS}}
    let heads = heads_of(wid.x, heads_per_group());
    let kvh = heads.kv;
    let h0 = heads.h0;
    let nh = heads.n;
    let i = wid.y;
    let hd = {{HEAD_DIM}};
    let half = hd / 2u;
    let keys = split_keys(i, wid.z);
    let kbeg = keys.x;
    let kend = keys.y;
    // The lane's query pairs (rounded to f16 against an f16 key cache, as `main`), zeros past
    // the head and the workgroup's heads.
    let qo = i * p.q_stride + h0 * hd;
    var qv: array<vec2<f32>, {{NQRP}}>;
    var acc: array<vec2<f32>, {{NQRP}}>;
    var m_run: array<f32, NQ>;
    var l_run: array<f32, NQ>;
    for (var qh = 0u; qh < NQ; qh++) {
        m_run[qh] = NEG;
        for (var r = 0u; r < RP; r++) {
            let pr = sg_lane + SG * r;
            var x = vec2<f32>(0.0);
            if (qh < nh && pr < half) {
                let e = qo + qh * hd + 2u * pr;
                x = vec2<f32>(q[e], q[e + 1u]);
#if K_F16
                x = vec2<f32>(round_f16(x.x), round_f16(x.y));
#endif
            }
            qv[qh * RP + r] = x;
        }
    }
    let ko = kvh * hd;
    for (var j = kbeg + sg_id; j < kend; j += NSG) {
        // The key's and the value's pairs first: neither waits on the scores.
        let e0 = j * p.kv_stride + ko;
        var kp: array<vec2<f32>, RP>;
        var vp: array<vec2<f32>, RP>;
        for (var r = 0u; r < RP; r++) {
            let pr = sg_lane + SG * r;
            if (pr < half) {
                kp[r] = k_pair(e0 + 2u * pr);
                vp[r] = v_pair(e0 + 2u * pr);
            }
        }
        for (var qh = 0u; qh < NQ; qh++) {
            if (qh < nh) {
                var d = 0.0;
                for (var r = 0u; r < RP; r++) {
                    d += dot(qv[qh * RP + r], kp[r]);
                }
                let sc = score(subgroupAdd(d));
                let m_new = max(m_run[qh], sc);
                let alpha = exp(m_run[qh] - m_new);
                let pj = exp(sc - m_new);
                l_run[qh] = l_run[qh] * alpha + pj;
                m_run[qh] = m_new;
                for (var r = 0u; r < RP; r++) {
                    acc[qh * RP + r] = acc[qh * RP + r] * alpha + pj * vp[r];
                }
            }
        }
    }
    // The subgroup's part (a subgroup without keys writes a maximum of NEG and a sum of 0, which
    // the reduce weighs at 0).
    let s = wid.z * NSG + sg_id;
    for (var qh = 0u; qh < NQ; qh++) {
        if (qh < nh) {
            let po = ((i * p.n_heads + h0 + qh) * p.splits + s) * (hd + 2u);
            if (sg_lane == 0u) {
                part[po] = m_run[qh];
                part[po + 1u] = l_run[qh];
            }
            for (var r = 0u; r < RP; r++) {
                let pr = sg_lane + SG * r;
                if (pr < half) {
                    part[po + 2u + 2u * pr] = acc[qh * RP + r].x;
                    part[po + 3u + 2u * pr] = acc[qh * RP + r].y;
                }
            }
        }
    }
#if FUSED_REDUCE
    reduce_completed(h0, nh, i, lid, NSG);
#endif
}
#else
// Decode (and prefill where the tiled kernel cannot run), GQA-folded: one workgroup of 64 per
// (KV head, query row, split) for up to GMAX of the KV head's query heads (a larger group takes
// several workgroups), so each key and value row is read once for all of them, as llama.cpp's
// Vulkan flash attention does for decode. Keys in tiles of 64, 8 at a time: 8 lanes per key, lane
// l reading words l, l + 8, … of the key row (consecutive lanes, consecutive words), its partial
// q·k for every head summed over the 8 lanes (subgroup shuffles with `SG_LANES`, else workgroup
// memory); an online softmax per head, 8 invocations per head over the tile; then each invocation
// accumulates dimensions lid, lid + 64, … of every head over the tile's values (consecutive lanes,
// consecutive values). Heads of up to 256 values take 8 query heads per workgroup; wider ones (up
// to 512: Gemma 4's global layers) take 4, so that the queries and sums fit the same memory.
// Dimensions per invocation (of 64) per head: times `heads_per_group`, at most 32, the
// invocation's accumulators.
fn dims_per_lane() -> u32 {
    return ({{HEAD_DIM}} + 63u) / 64u;
}
const TILE: u32 = 64u;

// [heads][head_dim]: the queries; then, for q8_0 values, the output being rotated back.
var<workgroup> hx: array<f32, 2048>;
var<workgroup> ss: array<f32, 512>;   // [heads][TILE]: scores, then probabilities
var<workgroup> talpha: array<f32, 8>; // per head: this tile's rescaling of the sums so far
var<workgroup> tm: array<f32, 8>;     // per head, at the end: the maximum score and the weight sum
var<workgroup> tl: array<f32, 8>;
#if K_Q8 || V_Q8
var<workgroup> q8_d: array<f32, 64>;
var<workgroup> q8_id: array<f32, 64>;
#endif
#if K_Q8
// [heads][head_dim / 4]: the queries' quants, packed as the cache's.
var<workgroup> qw: array<u32, 512>;
#endif

#if SG_LANES
// The sum (maximum) of x over the 8 invocations whose subgroup-based index differs from this
// one's in the low three bits; each gets the same result.
fn lanes_sum(x: f32) -> f32 {
    let a = x + subgroupShuffleXor(x, 1u);
    let b = a + subgroupShuffleXor(a, 2u);
    return b + subgroupShuffleXor(b, 4u);
}

fn lanes_max(x: f32) -> f32 {
    let a = max(x, subgroupShuffleXor(x, 1u));
    let b = max(a, subgroupShuffleXor(a, 2u));
    return max(b, subgroupShuffleXor(b, 4u));
}
#else
// Partial dot products (or a softmax's maxima and sums) of 8 lanes, summed in workgroup memory.
var<workgroup> lanes: array<f32, 512>;
#endif

// Lane l8's share of q_h · k for the first nh heads of the workgroup (words l8, l8 + 8, … of the
// key row at cache value e).
fn k_partial(e: u32, l8: u32, nh: u32) -> array<f32, 8> {
    var part: array<f32, 8>;
    let hd = {{HEAD_DIM}};
#if K_Q8
    for (var w = l8; w < hd / 4u; w += 8u) {
        let kw = kc[e / 4u + w];
        let dk = k_scale(e / 32u + w / 8u);
        for (var qh = 0u; qh < GMAX; qh++) {
            if (qh < nh) {
                let dq = q8_d[qh * hd / 32u + w / 8u];
                part[qh] += dk * dq * f32(dot4I8Packed(kw, qw[qh * hd / 4u + w]));
            }
        }
    }
#else
#if K_F16
    for (var w = l8; w < hd / 2u; w += 8u) {
        let k = unpack2x16float(kc[e / 2u + w]);
        for (var qh = 0u; qh < GMAX; qh++) {
            if (qh < nh) {
                part[qh] += hx[qh * hd + 2u * w] * k.x + hx[qh * hd + 2u * w + 1u] * k.y;
            }
        }
    }
#else
    for (var w = l8; w < hd; w += 8u) {
        let k = kc[e + w];
        for (var qh = 0u; qh < GMAX; qh++) {
            if (qh < nh) {
                part[qh] += hx[qh * hd + w] * k;
            }
        }
    }
#endif
#endif
    return part;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32 {{SG_ARGS}}) {
    {{SG_LOCALS}}
#if SG_LANES
    // Lanes are grouped by subgroup invocation, so that shuffles stay within a key's 8.
    let v = sg_id * sg_size + sg_lane;
#else
    let v = lid;
#endif
    let ks = v / 8u;  // scores: the key slot (of 8); softmax: the head
    let l8 = v % 8u;  // the lane within it
    let nr = dims_per_lane();
    let heads = heads_of(wid.x, heads_per_group());
    let kvh = heads.kv;
    let h0 = heads.h0;
    let nh = heads.n;
    let i = wid.y;
    let s = wid.z;
    let hd = {{HEAD_DIM}};
    let keys = split_keys(i, s);
    let kbeg = keys.x;
    let kend = keys.y;
    let qo = i * p.q_stride + h0 * hd;
    for (var e = lid; e < nh * hd; e += 64u) {
#if K_F16
        hx[e] = round_f16(q[qo + e]);
#else
        hx[e] = q[qo + e];
#endif
    }
#if K_Q8
    q8_prepare(p.rots & 0xffffu, p.k_rot_scale, nh * hd, lid, 64u);
    for (var w = lid; w < nh * hd / 4u; w += 64u) {
        qw[w] = q8_word(w);
    }
#endif
    workgroupBarrier();

    // The softmax of head ks, kept alike by its 8 invocations.
    var m_run = NEG;
    var l_run = 0.0;
    // [head][r]: dimension lid + 64 r of each head's weighted sum of values.
    var acc: array<f32, 32>;
    let ko = kvh * hd;
    for (var t0 = kbeg; t0 < kend; t0 += TILE) {
        // Key slots of 8 the tile fills (a decode split is often 16 keys, not 64): the score
        // and softmax loops stop there.
        let cnt = min(TILE, kend - t0);
        let filled = (cnt + 7u) / 8u * 8u;
        for (var kp = 0u; kp < filled / 8u; kp++) {
            let jt = kp * 8u + ks;
            let j = t0 + jt;
            var pd: array<f32, 8>;
            if (j < kend) {
                pd = k_partial(j * p.kv_stride + ko, l8, nh);
            }
#if SG_LANES
            for (var qh = 0u; qh < nh; qh++) {
                let d = lanes_sum(pd[qh]);
                if (qh == l8) {
                    ss[qh * TILE + jt] = select(NEG, score(d), j < kend);
                }
            }
#else
            for (var qh = 0u; qh < GMAX; qh++) {
                lanes[(ks * 8u + qh) * 8u + l8] = pd[qh];
            }
            workgroupBarrier();
            // Now key slot ks, head l8.
            var d = 0.0;
            for (var x = 0u; x < 8u; x++) {
                d += lanes[(ks * 8u + l8) * 8u + x];
            }
            if (l8 < nh) {
                ss[l8 * TILE + jt] = select(NEG, score(d), j < kend);
            }
            workgroupBarrier();
#endif
        }
        workgroupBarrier();

        // Softmax: head ks, keys l8, l8 + 8, … of the tile.
        var mx = NEG;
        if (ks < nh) {
            for (var x = 0u; x < filled; x += 8u) {
                mx = max(mx, ss[ks * TILE + l8 + x]);
            }
        }
#if SG_LANES
        mx = lanes_max(mx);
#else
        lanes[v] = mx;
        workgroupBarrier();
        for (var x = 0u; x < 8u; x++) {
            mx = max(mx, lanes[ks * 8u + x]);
        }
#endif
        let m_new = max(m_run, mx);
        var ps = 0.0;
        if (ks < nh) {
            for (var x = 0u; x < filled; x += 8u) {
                let at = ks * TILE + l8 + x;
                let pj = exp(ss[at] - m_new);
                ss[at] = pj;
                ps += pj;
            }
        }
#if SG_LANES
        ps = lanes_sum(ps);
#else
        lanes[64u + v] = ps;
        workgroupBarrier();
        ps = 0.0;
        for (var x = 0u; x < 8u; x++) {
            ps += lanes[64u + ks * 8u + x];
        }
#endif
        let alpha = exp(m_run - m_new);
        l_run = l_run * alpha + ps;
        m_run = m_new;
        if (l8 == 0u && ks < nh) {
            talpha[ks] = alpha;
        }
        workgroupBarrier();

        for (var r = 0u; r < nr; r++) {
            let d = lid + r * 64u;
            if (d < hd) {
                for (var qh = 0u; qh < GMAX; qh++) {
                    if (qh < nh) {
                        acc[qh * nr + r] *= talpha[qh];
                    }
                }
                // Four values loaded before they are summed, so their loads overlap.
                for (var j0 = 0u; j0 < cnt; j0 += 4u) {
                    var xs = vec4<f32>(0.0);
                    for (var u = 0u; u < 4u; u++) {
                        if (j0 + u < cnt) {
                            xs[u] = v_at((t0 + j0 + u) * p.kv_stride + ko + d);
                        }
                    }
                    for (var u = 0u; u < 4u; u++) {
                        if (j0 + u < cnt) {
                            for (var qh = 0u; qh < GMAX; qh++) {
                                if (qh < nh) {
                                    acc[qh * nr + r] += ss[qh * TILE + j0 + u] * xs[u];
                                }
                            }
                        }
                    }
                }
            }
        }
        workgroupBarrier();
    }

#if V_Q8
    // The sums are in the values' rotated basis: rotate them back (a linear map, so a split's
    // part may be rotated before the reduce).
    for (var qh = 0u; qh < nh; qh++) {
        for (var r = 0u; r < nr; r++) {
            let d = lid + r * 64u;
            if (d < hd) {
                hx[qh * hd + d] = acc[qh * nr + r];
            }
        }
    }
    hadamard(p.rots >> 16u, p.v_rot_scale, nh * hd, lid, 64u);
    for (var qh = 0u; qh < nh; qh++) {
        for (var r = 0u; r < nr; r++) {
            let d = lid + r * 64u;
            if (d < hd) {
                acc[qh * nr + r] = hx[qh * hd + d];
            }
        }
    }
#endif
    // One split normalizes here and writes the output; several write their parts and leave
    // the sink to the reduce, as one does with FUSED_REDUCE, whose reduce also packs the output
    // (the same arithmetic: one part's weight is e^0 = 1).
#if FUSED_REDUCE
    let alone = false;
#else
    let alone = p.splits == 1u;
#endif
    if (l8 == 0u && ks < nh) {
        tm[ks] = m_run;
        tl[ks] = select(l_run, with_sink(l_run, m_run, h0 + ks), alone);
    }
    workgroupBarrier();

    for (var qh = 0u; qh < nh; qh++) {
        let po = ((i * p.n_heads + h0 + qh) * p.splits + s) * (hd + 2u);
        if (!alone && lid == 0u) {
            part[po] = tm[qh];
            part[po + 1u] = tl[qh];
        }
        for (var r = 0u; r < nr; r++) {
            let d = lid + r * 64u;
            if (d < hd) {
                if (alone) {
                    out[qo + qh * hd + d] = acc[qh * nr + r] / tl[qh];
                } else {
                    part[po + 2u + d] = acc[qh * nr + r];
                }
            }
        }
    }
#if FUSED_REDUCE
    reduce_completed(h0, nh, i, lid, 1u);
#endif
}

#endif

// Combine the splits of each (head, query row): rescale each by e^(m_s − m) and normalize.
@compute @workgroup_size(64)
fn reduce(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let i = wid.y;
    let hd = {{HEAD_DIM}};
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
    l = with_sink(l, mx, h);
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

#if PACKED
// `reduce` for a decode row whose output an integer-dot mat-vec reads next, fused with the
// quantization that mat-vec would otherwise dispatch (round_acts.wgsl's PACKED): a workgroup per
// Q8_K block of 256 output values (whole heads, or whole blocks of a head), four values an
// invocation, written as `reduce` writes them and again as the block's packed quants, every
// row's quants four to a word, then every block's d. q_stride is whole blocks, head_dim a
// multiple of 4, so an invocation's four values share a head and every invocation is live.
// FUSED_REDUCE: `main` itself runs it for each block its splits complete (below).
@group(0) @binding(7) var<storage, read_write> packed: array<u32>;
var<workgroup> block_max: array<f32, 64>;

// Block `b` of query row `i`, reduced and packed by the workgroup's first 64 invocations (the
// rest of main_v2's wider workgroups only keep the barrier).
fn reduce_block(b: u32, i: u32, lid: u32) {
    let hd = {{HEAD_DIM}};
    let e = b * 256u + 4u * lid;
    let o = i * p.q_stride + e;
    var v = vec4<f32>(0.0);
    if (lid < 64u) {
        let h = e / hd;
        let d = e % hd;
        let base = (i * p.n_heads + h) * p.splits * (hd + 2u);
        var mx = NEG;
        for (var s = 0u; s < p.splits; s++) {
            mx = max(mx, part[base + s * (hd + 2u)]);
        }
        var l = 0.0;
        var a = vec4<f32>(0.0);
        for (var s = 0u; s < p.splits; s++) {
            let po = base + s * (hd + 2u);
            let w = exp(part[po] - mx);
            l += part[po + 1u] * w;
            for (var c = 0u; c < 4u; c++) {
                a[c] += part[po + 2u + d + c] * w;
            }
        }
        l = with_sink(l, mx, h);
        v = a / l;
        for (var c = 0u; c < 4u; c++) {
            out[o + c] = v[c];
        }
        let av = abs(v);
        block_max[lid] = max(max(av.x, av.y), max(av.z, av.w));
    }
    workgroupBarrier();
    if (lid < 64u) {
        var amax = 0.0;
        for (var j = 0u; j < 64u; j++) {
            amax = max(amax, block_max[j]);
        }
        packed[o / 4u] = pack4xI8(q8_k_quants(v, amax));
        if (lid == 0u) {
            packed[p.rows * p.q_stride / 4u + o / 256u] = bitcast<u32>(q8_k_d(amax));
        }
    }
}

@compute @workgroup_size(64)
fn reduce_packed(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    reduce_block(wid.x, wid.y, lid);
}
#endif
#if FUSED_REDUCE
// The reduce without a dispatch of its own: each of `main`'s workgroups adds the values its
// splits wrote to their blocks' counts, and the one that completes a block (256 values × the
// splits) reduces and packs it, then sets the count back to 0 for the next dispatch, as
// matvec_rows.wgsl's GLU_PACK (storageBarrier: device-scope fences around the count).
@group(0) @binding(8) var<storage, read_write> block_count: array<atomic<u32>>;
var<workgroup> completed: array<u32, 16>;  // blocks this workgroup completed (at most 9)
var<workgroup> n_completed: u32;

// After `main` wrote the parts of heads h0..h0 + nh of query row i, `parts` splits of them
// (`main_v2`: one a subgroup).
fn reduce_completed(h0: u32, nh: u32, i: u32, lid: u32, parts: u32) {
    storageBarrier();
    let per_row = p.q_stride / 256u;
    if (lid == 0u) {
        let lo = h0 * {{HEAD_DIM}};
        let hi = (h0 + nh) * {{HEAD_DIM}};
        var n = 0u;
        for (var b = lo / 256u; b * 256u < hi; b++) {
            let mine = (min(hi, (b + 1u) * 256u) - max(lo, b * 256u)) * parts;
            let g = i * per_row + b;
            if (atomicAdd(&block_count[g], mine) + mine == 256u * p.splits) {
                completed[n] = g;
                n++;
            }
        }
        n_completed = n;
    }
    let n = workgroupUniformLoad(&n_completed);
    if (n == 0u) {
        return;
    }
    storageBarrier();
    for (var c = 0u; c < n; c++) {
        let g = completed[c];
        reduce_block(g % per_row, g / per_row, lid);
        if (lid == 0u) {
            atomicStore(&block_count[g], 0u);
        }
        workgroupBarrier();
    }
}
#endif
#endif
