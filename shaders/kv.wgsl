// kv.wgsl — KV cache append: rows of f32 keys or values stored into the cache from a row on,
// rounded to the cache's type (`F16CACHE`: pairs packed with pack2x16float into u32 words).

struct Params {
    len: u32,      // values to store (even)
    dst_off: u32,  // first value written (even)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
#if F16CACHE
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;
#else
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
#endif

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
