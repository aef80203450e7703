// rope.wgsl — rotary position embedding in place, one invocation per rotated pair. The table
// holds, per row, rot_dims / 2 pairs (cos, sin) computed on the host as llama.cpp's rope cache.
// rot_dims is head_dim for full RoPE; Qwen3.5 rotates only the leading rot_dims of each head.

struct Params {
    pairs: u32,     // rows × heads × rot_dims / 2
    heads: u32,
    head_dim: u32,
    rot_dims: u32,  // leading values of each head that rotate
    neox: u32,      // 1: pairs (i, i + rot_dims/2); 0: adjacent (2i, 2i + 1)
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
