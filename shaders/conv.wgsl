// conv.wgsl — the short causal convolution of a Gated DeltaNet block (Backend's `conv_step`): one
// invocation per (token, channel) for the outputs, then one per channel to carry the state. The
// contract and the CPU reference are in src/backend/mod.rs and src/backend/cpu/recurrent.rs.

#include "common"

fn index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * 256u;
}

struct Params {
    rows: u32,      // tokens
    channels: u32,
    taps: u32,      // K: the state holds K − 1 rows
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> kernel: array<f32>;
@group(0) @binding(3) var<storage, read_write> state: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

// Row i of (state ++ x), channel c.
fn input(i: u32, c: u32) -> f32 {
    let hist = p.taps - 1u;
    if (i < hist) {
        return state[i * p.channels + c];
    }
    return x[(i - hist) * p.channels + c];
}

// One invocation per (token, channel): silu(Σ_j kernel[c][j] · inp[t + j][c]), summed in j order.
@compute @workgroup_size(256)
fn conv_step(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i >= p.rows * p.channels) {
        return;
    }
    let t = i / p.channels;
    let c = i % p.channels;
    var acc = 0.0;
    for (var j = 0u; j < p.taps; j++) {
        acc += input(t + j, c) * kernel[c * p.taps + j];
    }
    out[i] = acc / (1.0 + exp(-acc));
}

// After conv_step, one invocation per channel: the state becomes the last K − 1 rows of
// (state ++ x). In ascending order each read lies at or past the row written, so it works in
// place when the batch is shorter than the state.
@compute @workgroup_size(256)
fn conv_state(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let c = index(gid, nwg);
    if (c >= p.channels) {
        return;
    }
    for (var i = 0u; i + 1u < p.taps; i++) {
        state[i * p.channels + c] = input(p.rows + i, c);
    }
}
