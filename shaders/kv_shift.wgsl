// kv_shift.wgsl — context shift on a KV cache: `move_rows` copies words (f32 values, or f16 pairs
// packed in u32) down or up the cache, `rope_rows` rotates cached keys further by one RoPE
// position delta (table: head_dim / 2 pairs (cos, sin)), one invocation per head, rounding the
// result to the cache's type (`F16CACHE`).

struct Params {
    len: u32,      // move_rows: words to copy; rope_rows: heads to rotate
    src_off: u32,  // move_rows: first word read; rope_rows: first value of the first head
    dst_off: u32,  // move_rows: first word written
    head_dim: u32,
    neox: u32,     // 1: halves (i, i + d/2); 0: adjacent (2i, 2i + 1)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> cache: array<u32>;
@group(0) @binding(2) var<storage, read> table: array<f32>;

fn index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * 256u;
}

// The host splits an overlapping move into dispatches whose source and destination are disjoint.
@compute @workgroup_size(256)
fn move_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i < p.len) {
        cache[p.dst_off + i] = cache[p.src_off + i];
    }
}

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
    let half = p.head_dim / 2u;
    let base = p.src_off + h * p.head_dim;
    for (var i = 0u; i < half; i++) {
        var a: u32;
        var b: u32;
        if (p.neox == 1u) {
            a = base + i;
            b = base + i + half;
        } else {
            a = base + 2u * i;
            b = a + 1u;
        }
        let c = table[2u * i];
        let s = table[2u * i + 1u];
        let x0 = load_value(a);
        let x1 = load_value(b);
        store_value(a, x0 * c - x1 * s);
        store_value(b, x0 * s + x1 * c);
    }
}
