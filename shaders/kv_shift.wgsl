// kv_shift.wgsl — context shift on a KV cache: `move_rows` copies words (f32 values, f16 pairs or
// q8_0 quants, packed in u32) down or up the cache; `move_halves` (`HALVES`) copies 16-bit halves
// (a q8_0 cache's f16 scales: a row may hold an odd number of blocks); `rope_rows` rotates cached
// keys further by one RoPE position delta (table: rot_dims / 2 pairs (cos, sin)), one invocation
// per head, rounding the result to the cache's type (`F16CACHE`); `rope_q8` (`Q8CACHE`) does it
// on a q8_0 cache, as the CPU does: one workgroup per span of whole heads, expanded, rotated back
// from the cache's Hadamard rotation, RoPE'd, then rotated and quantized again (q8.wgsl).

struct Params {
    len: u32,      // move_rows: words to copy; move_halves: halves; rope_rows: heads; rope_q8: values
    src_off: u32,  // move_*: first word (half) read; rope_*: first value of the first head
    dst_off: u32,  // move_*: first word (half) written
    head_dim: u32,
    neox: u32,     // 1: halves (i, i + d/2); 0: adjacent (2i, 2i + 1)
    // rope_q8 only:
    scales: u32,   // first word of the scales
    rot: u32,      // the cache's rotation (1: none)
    rot_scale: f32, // its 1/√rot
    span: u32,     // values per workgroup: a multiple of 64 and of head_dim, at most 512
    // rope_*:
    rot_dims: u32, // the leading dims of each head that RoPE rotates (partial RoPE: < head_dim)
}

@group(0) @binding(0) var<uniform> p: Params;
#if HALVES
// Atomics: a word may hold a half this dispatch writes and one it reads.
@group(0) @binding(1) var<storage, read_write> cache: array<atomic<u32>>;
#else
@group(0) @binding(1) var<storage, read_write> cache: array<u32>;
#endif
@group(0) @binding(2) var<storage, read> table: array<f32>;

fn index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * 256u;
}

#if HALVES
// One invocation per destination word; the host splits an overlapping move into dispatches whose
// source and destination halves are disjoint. A word may still hold one half of each: the
// atomics change only the half written, so a reader of the other sees it whole.
@compute @workgroup_size(256)
fn move_halves(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = p.dst_off / 2u + index(gid, nwg);
    let end = p.dst_off + p.len;
    for (var k = 0u; k < 2u; k++) {
        let h = 2u * w + k;
        if (h >= p.dst_off && h < end) {
            let s = h - p.dst_off + p.src_off;
            let v = (atomicLoad(&cache[s / 2u]) >> (16u * (s % 2u))) & 0xffffu;
            atomicAnd(&cache[w], ~(0xffffu << (16u * k)));
            atomicOr(&cache[w], v << (16u * k));
        }
    }
}
#else
// The host splits an overlapping move into dispatches whose source and destination are disjoint.
@compute @workgroup_size(256)
fn move_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i < p.len) {
        cache[p.dst_off + i] = cache[p.src_off + i];
    }
}

// The indices of the pair of RoPE pair i in a head from value `base`.
fn pair_at(base: u32, i: u32) -> vec2<u32> {
    if (p.neox == 1u) {
        return vec2<u32>(base + i, base + i + p.rot_dims / 2u);
    }
    return vec2<u32>(base + 2u * i, base + 2u * i + 1u);
}

#if Q8CACHE
#include "q8"

var<workgroup> hx: array<f32, 512>;
var<workgroup> q8_d: array<f32, 16>;
var<workgroup> q8_id: array<f32, 16>;

// Span of `p.span` values (aligned to it: whole heads, rotation runs and scale words), the values
// outside the rows rotated left as they are.
@compute @workgroup_size(256)
fn rope_q8(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let n = p.span;
    let base = (p.src_off / n + wid.x + wid.y * nwg.x) * n;
    let lo = p.src_off;
    let hi = p.src_off + p.len;
    for (var t = lid; t < n; t += 256u) {
        let g = base + t;
        var x = 0.0;
        if (g >= lo && g < hi) {
            let q = unpack4xI8(cache[g / 4u])[g % 4u];
            x = f32(q) * unpack2x16float(cache[p.scales + g / 64u])[(g / 32u) % 2u];
        }
        hx[t] = x;
    }
    hadamard(p.rot, p.rot_scale, n, lid, 256u);
    let half = p.rot_dims / 2u;
    for (var t = lid; t < n / p.head_dim * half; t += 256u) {
        let i = t % half;
        let ab = pair_at((t / half) * p.head_dim, i);
        let c = table[2u * i];
        let s = table[2u * i + 1u];
        let x0 = hx[ab.x];
        let x1 = hx[ab.y];
        hx[ab.x] = x0 * c - x1 * s;
        hx[ab.y] = x0 * s + x1 * c;
    }
    q8_prepare(p.rot, p.rot_scale, n, lid, 256u);
    for (var w = lid; w < n / 4u; w += 256u) {
        let g = base + 4u * w;
        if (g >= lo && g < hi) {
            cache[g / 4u] = q8_word(w);
        }
    }
    for (var w = lid; w < n / 64u; w += 256u) {
        let g = base + 64u * w;
        if (g + 64u > lo && g < hi) {
            let i = p.scales + g / 64u;
            cache[i] = q8_scale_word(w, cache[i], g, lo, hi);
        }
    }
}
#else
fn load_value(i: u32) -> f32 {
#if F16CACHE
    return unpack2x16float(cache[i / 2u])[i % 2u];
#else
    return bitcast<f32>(cache[i]);
#endif
}

fn store_value(i: u32, v: f32) {
#if F16CACHE
    var pair = unpack2x16float(cache[i / 2u]);
    pair[i % 2u] = v;
    cache[i / 2u] = pack2x16float(pair);
#else
    cache[i] = bitcast<u32>(v);
#endif
}

// One head per invocation, so no two invocations touch the same packed word (heads are even).
@compute @workgroup_size(256)
fn rope_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let h = index(gid, nwg);
    if (h >= p.len) {
        return;
    }
    let base = p.src_off + h * p.head_dim;
    for (var i = 0u; i < p.rot_dims / 2u; i++) {
        let ab = pair_at(base, i);
        let c = table[2u * i];
        let s = table[2u * i + 1u];
        let x0 = load_value(ab.x);
        let x1 = load_value(ab.y);
        store_value(ab.x, x0 * c - x1 * s);
        store_value(ab.y, x0 * s + x1 * c);
    }
}
#endif
#endif
