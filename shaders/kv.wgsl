// kv.wgsl — KV cache append: rows of f32 keys or values stored into the cache from a row on,
// rounded to the cache's type: f32, f16 pairs packed with pack2x16float into u32 words
// (`F16CACHE`), or q8_0 blocks (`Q8CACHE`, entry `store_q8`; layout and arithmetic in q8.wgsl).

struct Params {
    len: u32,        // values to store (even; q8_0: whole rotation runs of whole blocks)
    dst_off: u32,    // first value written (even; q8_0: as len)
    // Q8CACHE only:
    scales: u32,     // first word of the scales
    rot: u32,        // rotation (1: none)
    rot_scale: f32,  // its 1/√rot
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
#if F16CACHE || Q8CACHE
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;
#else
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
#endif

#if Q8CACHE
#include "q8"

var<workgroup> hx: array<f32, 256>;
var<workgroup> q8_d: array<f32, 8>;
var<workgroup> q8_id: array<f32, 8>;

// One workgroup per 256-value span of the cache, spans aligned to 256 so that each holds whole
// rotation runs (≤ 256) and whole scale words; values outside the store are left as they are.
@compute @workgroup_size(256)
fn store_q8(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let base = (p.dst_off / 256u + wid.x + wid.y * nwg.x) * 256u;
    let lo = p.dst_off;
    let hi = p.dst_off + p.len;
    let g = base + lid;
    var x = 0.0;
    if (g >= lo && g < hi) {
        x = src[g - lo];
    }
    hx[lid] = x;
    q8_prepare(p.rot, p.rot_scale, 256u, lid, 256u);
    let gw = base + 4u * lid;
    if (lid < 64u && gw >= lo && gw < hi) {
        dst[gw / 4u] = q8_word(lid);
    }
    let gs = base + 64u * lid;
    if (lid < 4u && gs + 64u > lo && gs < hi) {
        let i = p.scales + gs / 64u;
        dst[i] = q8_scale_word(lid, dst[i], gs, lo, hi);
    }
}
#else
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = gid.x + gid.y * nwg.x * 256u;
#if F16CACHE
    if (2u * t < p.len) {
        dst[p.dst_off / 2u + t] = pack2x16float(vec2<f32>(src[2u * t], src[2u * t + 1u]));
    }
#else
    if (t < p.len) {
        dst[p.dst_off + t] = src[t];
    }
#endif
}
#endif
