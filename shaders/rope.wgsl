// rope.wgsl — rotary position embedding in place, one invocation per rotated pair. The table
// holds, per row, rot_dims / 2 pairs (cos, sin) computed on the host as llama.cpp's rope cache.
// rot_dims is head_dim for full RoPE; Qwen3.5 rotates only the leading rot_dims of each head.
//
// `ROPE_KV` (Backend::rope_store_kv): a step's RoPE and KV-cache append in one dispatch. The first
// `pairs` invocations rotate the queries (x) in place as above; each of the rest takes two adjacent
// key and value elements (one u32 word of an f16 cache), rotates the keys from their unrotated
// partners (the keys buffer is only read) and stores both into the caches from dst_off on.
// `K_F16` / `V_F16`: that cache holds f16 pairs packed with pack2x16float.

struct Params {
    pairs: u32,     // rows × heads × rot_dims / 2
    heads: u32,
    head_dim: u32,
    rot_dims: u32,  // leading values of each head that rotate
    neox: u32,      // 1: pairs (i, i + rot_dims/2); 0: adjacent (2i, 2i + 1)
    // ROPE_KV only:
    kv_words: u32,  // rows × kv width / 2
    kv_width: u32,  // key (and value) heads × head_dim
    dst_off: u32,   // first cache value written (even)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read> table: array<f32>;
#if ROPE_KV
@group(0) @binding(3) var<storage, read> k: array<f32>;
@group(0) @binding(4) var<storage, read> v: array<f32>;
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

// Key and value elements 2w and 2w + 1 into the caches.
fn store_kv(w: u32) {
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
#endif

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = gid.x + gid.y * nwg.x * 256u;
    if (t < p.pairs) {
        rope_pair(t);
        return;
    }
#if ROPE_KV
    if (t - p.pairs < p.kv_words) {
        store_kv(t - p.pairs);
    }
#endif
}
