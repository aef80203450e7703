// elementwise.wgsl — one invocation per value: residual add, bias add, per-row scaling, the gated activations of
// the feed-forward block (SiLU, GELU, gpt-oss's clamped SwiGLU), row copies (the entry point chosen by name), and with MUL_SIGMOID the
// sigmoid gate (Qwen3.5's attention output gate and shared-expert gate).

#include "common"

fn index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * 256u;
}

#if MUL_SIGMOID
struct Params {
    len: u32,         // rows × width
    width: u32,
    gate_width: u32,  // gate values per row, dividing width
    group: u32,       // width / gate_width: values under one gate value
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read> gate: array<f32>;

// x *= sigmoid(gate) of its row and group, sigmoid(v) = 1 / (1 + e^−v) as ggml.
@compute @workgroup_size(256)
fn mul_sigmoid(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i < p.len) {
        let r = i / p.width;
        let g = gate[r * p.gate_width + (i % p.width) / p.group];
        x[i] *= 1.0 / (1.0 + exp(-g));
    }
}
#else
struct Params {
    len: u32,    // values to write
    width: u32,  // bias length / row width
    src_off: u32,
    dst_off: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;


// a += b
@compute @workgroup_size(256)
fn add(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i < p.len) {
        a[i] += b[i];
    }
}

// a[r] += b for each row r
@compute @workgroup_size(256)
fn add_bias(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i < p.len) {
        a[i] += b[i % p.width];
    }
}

// a[r] *= b[r] for each row r (Mistral 3's query temperature)
@compute @workgroup_size(256)
fn scale_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i < p.len) {
        a[i] *= b[i / p.width];
    }
}

// a = silu(a) · b, as ggml: x / (1 + e^−x)
@compute @workgroup_size(256)
fn silu_mul(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i < p.len) {
        a[i] = silu(a[i]) * b[i];
    }
}

// a = gelu_tanh(a) · b, as ggml's f16 table: the input and the result rounded to f16, exact
// outside ±10.
@compute @workgroup_size(256)
fn gelu_mul(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i < p.len) {
        a[i] = gelu_f16(a[i]) * b[i];
    }
}

// a = gpt-oss's clamped SwiGLU of (a, b), as ggml's swiglu_oai: x = min(a, 7), y = clamp(b, −7, 7),
// x / (1 + e^(−1.702·x)) · (y + 1)
@compute @workgroup_size(256)
fn swiglu_oai_mul(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i < p.len) {
        let x = min(a[i], 7.0);
        let y = clamp(b[i], -7.0, 7.0);
        a[i] = x / (1.0 + exp(-1.702 * x)) * (y + 1.0);
    }
}

// a[dst_off + i] = b[src_off + i]
@compute @workgroup_size(256)
fn copy(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i < p.len) {
        a[p.dst_off + i] = b[p.src_off + i];
    }
}
#endif
