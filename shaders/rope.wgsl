// rope.wgsl — rotary position embedding in place, one invocation per rotated pair. The table
// holds, per row, rot_dims / 2 pairs (cos, sin) computed on the host as llama.cpp's rope cache.
// rot_dims is head_dim for full RoPE; Qwen3.5 rotates only the leading rot_dims of each head.
//
// `ROPE_KV` (Backend::rope_store_kv): a step's RoPE and KV-cache append in one dispatch, in three
// runs of workgroups: the first `q_groups` rotate the queries (x) in place as above; the next
// `k_groups` store the keys, rotated from their unrotated partners (the keys buffer is only read);
// the rest store the values. An f32 or f16 cache takes two adjacent elements per invocation (one
// u32 word of an f16 cache: `K_F16` / `V_F16`, pairs packed with pack2x16float); a q8_0 cache
// (`K_Q8` / `V_Q8`, see q8.wgsl) one 256-value span of the cache per workgroup, rotated and
// quantized there as kv.wgsl's `store_q8` does.

#include "common"

struct Params {
    pairs: u32,     // rows × heads × rot_dims / 2
    heads: u32,
    head_dim: u32,
    rot_dims: u32,  // leading values of each head that rotate
    neox: u32,      // 1: pairs (i, i + rot_dims/2); 0: adjacent (2i, 2i + 1)
    // ROPE_KV only:
    kv_len: u32,    // rows × kv width
    kv_width: u32,  // key (and value) heads × head_dim
    dst_off: u32,   // first cache value written (even; q8_0: whole rotation runs of whole blocks)
    q_groups: u32,  // workgroups rotating queries
    k_groups: u32,  // workgroups storing keys
    k_scales: u32,  // q8_0: first word of the scales, per cache
    v_scales: u32,
    rots: u32,      // q8_0: the key cache's rotation | the value cache's << 16 (1: none)
    k_rot_scale: f32, // their 1/√rotation
    v_rot_scale: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read> table: array<f32>;
#if ROPE_KV
@group(0) @binding(3) var<storage, read> k: array<f32>;
@group(0) @binding(4) var<storage, read> v: array<f32>;
#if K_F16 || K_Q8
@group(0) @binding(5) var<storage, read_write> k_cache: array<u32>;
#else
@group(0) @binding(5) var<storage, read_write> k_cache: array<f32>;
#endif
#if V_F16 || V_Q8
@group(0) @binding(6) var<storage, read_write> v_cache: array<u32>;
#else
@group(0) @binding(6) var<storage, read_write> v_cache: array<f32>;
#endif
#endif

// Pair t of x rotated in place.
fn rope_pair(t: u32) {
    let half = p.rot_dims / 2u;
    let i = t % half;
    let head = t / half; // row × heads + h
    let row = head / p.heads;
    let c = table[row * p.rot_dims + 2u * i];
    let s = table[row * p.rot_dims + 2u * i + 1u];
    let base = head * p.head_dim;
    var a: u32;
    var b: u32;
    if (p.neox == 1u) {
        a = base + i;
        b = base + i + half;
    } else {
        a = base + 2u * i;
        b = a + 1u;
    }
    let x0 = x[a];
    let x1 = x[b];
    x[a] = x0 * c - x1 * s;
    x[b] = x0 * s + x1 * c;
}

#if ROPE_KV
// Key element e rotated (from its partner in the unrotated keys), or as it is past rot_dims:
// rope_pair's expressions, element by element.
fn rotated_key(e: u32) -> f32 {
    let row = e / p.kv_width;
    let d = (e % p.kv_width) % p.head_dim;
    if (d >= p.rot_dims) {
        return k[e];
    }
    let half = p.rot_dims / 2u;
    var i: u32;
    var first: bool; // e is the first of its pair
    var partner: u32;
    if (p.neox == 1u) {
        first = d < half;
        i = select(d - half, d, first);
        partner = select(e - half, e + half, first);
    } else {
        first = d % 2u == 0u;
        i = d / 2u;
        partner = select(e - 1u, e + 1u, first);
    }
    let c = table[row * p.rot_dims + 2u * i];
    let s = table[row * p.rot_dims + 2u * i + 1u];
    if (first) {
        return k[e] * c - k[partner] * s;
    }
    return k[partner] * s + k[e] * c;
}

#if K_Q8 || V_Q8
#include "q8"

var<workgroup> hx: array<f32, 256>;
var<workgroup> q8_d: array<f32, 8>;
var<workgroup> q8_id: array<f32, 8>;

// Span `span` (of 256 values, from the one holding dst_off) of this step's keys (or values) into
// hx, rotated and its blocks' scales computed; zeros outside the store. Returns the span's
// first cache value.
fn q8_span(span: u32, lid: u32, keys: bool) -> u32 {
    let base = (p.dst_off / 256u + span) * 256u;
    let g = base + lid;
    var x = 0.0;
    if (g >= p.dst_off && g < p.dst_off + p.kv_len) {
        if (keys) {
            x = rotated_key(g - p.dst_off);
        } else {
            x = v[g - p.dst_off];
        }
    }
    hx[lid] = x;
    let rot = select(p.rots >> 16u, p.rots & 0xffffu, keys);
    q8_prepare(rot, select(p.v_rot_scale, p.k_rot_scale, keys), 256u, lid, 256u);
    return base;
}
#endif

// The keys of workgroup `wg` of theirs into the key cache.
fn store_k(wg: u32, lid: u32) {
#if K_Q8
    let base = q8_span(wg, lid, true);
    let lo = p.dst_off;
    let hi = p.dst_off + p.kv_len;
    let gw = base + 4u * lid;
    if (lid < 64u && gw >= lo && gw < hi) {
        k_cache[gw / 4u] = q8_word(lid);
    }
    let gs = base + 64u * lid;
    if (lid < 4u && gs + 64u > lo && gs < hi) {
        let i = p.k_scales + gs / 64u;
        k_cache[i] = q8_scale_word(lid, k_cache[i], gs, lo, hi);
    }
#else
    let w = wg * 256u + lid;
    if (2u * w < p.kv_len) {
        let e = 2u * w;
        let k0 = rotated_key(e);
        let k1 = rotated_key(e + 1u);
#if K_F16
        k_cache[p.dst_off / 2u + w] = pack2x16float(vec2<f32>(k0, k1));
#else
        k_cache[p.dst_off + e] = k0;
        k_cache[p.dst_off + e + 1u] = k1;
#endif
    }
#endif
}

// The values of workgroup `wg` of theirs into the value cache.
fn store_v(wg: u32, lid: u32) {
#if V_Q8
    let base = q8_span(wg, lid, false);
    let lo = p.dst_off;
    let hi = p.dst_off + p.kv_len;
    let gw = base + 4u * lid;
    if (lid < 64u && gw >= lo && gw < hi) {
        v_cache[gw / 4u] = q8_word(lid);
    }
    let gs = base + 64u * lid;
    if (lid < 4u && gs + 64u > lo && gs < hi) {
        let i = p.v_scales + gs / 64u;
        v_cache[i] = q8_scale_word(lid, v_cache[i], gs, lo, hi);
    }
#else
    let w = wg * 256u + lid;
    if (2u * w < p.kv_len) {
        let e = 2u * w;
#if V_F16
        v_cache[p.dst_off / 2u + w] = pack2x16float(vec2<f32>(v[e], v[e + 1u]));
#else
        v_cache[p.dst_off + e] = v[e];
        v_cache[p.dst_off + e + 1u] = v[e + 1u];
#endif
    }
#endif
}

// Branches on the workgroup only (uniform), so the q8_0 stores' barriers are reached by all.
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let wg = wid.x + wid.y * nwg.x; // flat_wg, inline: naga takes a call's result as non-uniform
    if (wg < p.q_groups) {
        let t = wg * 256u + lid;
        if (t < p.pairs) {
            rope_pair(t);
        }
    } else if (wg < p.q_groups + p.k_groups) {
        store_k(wg - p.q_groups, lid);
    } else {
        store_v(wg - p.q_groups - p.k_groups, lid);
    }
}
#else
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = gid.x + gid.y * nwg.x * 256u;
    if (t < p.pairs) {
        rope_pair(t);
    }
}
#endif
