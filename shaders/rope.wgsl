// rope.wgsl — rotary position embedding in place, one invocation per rotated pair. The table
// holds, per row, head_dim / 2 pairs (cos, sin) computed on the host as llama.cpp's rope cache.

struct Params {
    pairs: u32,     // rows × heads × head_dim / 2
    heads: u32,
    head_dim: u32,
    neox: u32,      // 1: halves (i, i + d/2); 0: adjacent (2i, 2i + 1)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read> table: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = gid.x + gid.y * nwg.x * 256u;
    if (t >= p.pairs) {
        return;
    }
    let half = p.head_dim / 2u;
    let i = t % half;
    let head = t / half; // row × heads + h
    let row = head / p.heads;
    let c = table[row * p.head_dim + 2u * i];
    let s = table[row * p.head_dim + 2u * i + 1u];
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
