// rope_kv.wgsl — a step's RoPE and KV-cache append in one dispatch (Backend::rope_store_kv): the
// first q_pairs invocations rotate the queries in place, one pair each, as rope.wgsl does; each
// of the rest takes two adjacent key and value elements (one u32 word of an f16 cache), rotates
// the keys from their unrotated partners (the keys buffer is only read) and stores both into the
// caches from dst_off on. `K_F16` / `V_F16`: that cache holds f16 pairs packed with
// pack2x16float. The rotations are rope.wgsl's expressions, element by element.

#include "common"

struct Params {
    q_pairs: u32,   // rows × query heads × rot_dims / 2
    kv_words: u32,  // rows × kv width / 2
    q_heads: u32,
    kv_width: u32,  // key (and value) heads × head_dim
    head_dim: u32,
    rot_dims: u32,  // leading values of each head that rotate
    neox: u32,      // 1: pairs (i, i + rot_dims/2); 0: adjacent (2i, 2i + 1)
    dst_off: u32,   // first cache value written (even)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read> table: array<f32>;
#if K_F16
@group(0) @binding(5) var<storage, read_write> k_cache: array<u32>;
#else
@group(0) @binding(5) var<storage, read_write> k_cache: array<f32>;
#endif
#if V_F16
@group(0) @binding(6) var<storage, read_write> v_cache: array<u32>;
#else
@group(0) @binding(6) var<storage, read_write> v_cache: array<f32>;
#endif

// Query pair t rotated in place.
fn rope_query(t: u32) {
    let half = p.rot_dims / 2u;
    let i = t % half;
    let head = t / half; // row × heads + h
    let row = head / p.q_heads;
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
    let x0 = q[a];
    let x1 = q[b];
    q[a] = x0 * c - x1 * s;
    q[b] = x0 * s + x1 * c;
}

// Key element e rotated (from its partner in the unrotated keys), or as it is past rot_dims.
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

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = gid.x + gid.y * nwg.x * 256u;
    if (t < p.q_pairs) {
        rope_query(t);
        return;
    }
    let w = t - p.q_pairs;
    if (w >= p.kv_words) {
        return;
    }
    let e = 2u * w;
    let k0 = rotated_key(e);
    let k1 = rotated_key(e + 1u);
#if K_F16
    k_cache[p.dst_off / 2u + w] = pack2x16float(vec2<f32>(k0, k1));
#else
    k_cache[p.dst_off + e] = k0;
    k_cache[p.dst_off + e + 1u] = k1;
#endif
#if V_F16
    v_cache[p.dst_off / 2u + w] = pack2x16float(vec2<f32>(v[e], v[e + 1u]));
#else
    v_cache[p.dst_off + e] = v[e];
    v_cache[p.dst_off + e + 1u] = v[e + 1u];
#endif
}
