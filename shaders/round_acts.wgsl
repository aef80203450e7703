// round_acts.wgsl — the activations a weight matrix multiplies, rounded as the CPU backend (and
// llama.cpp's, its `vec_dot_type`) rounds them before its dot products: quantized types take
// Q8_0 blocks of 32 values or Q8_K blocks of 256, half-precision weights f16 or bf16 values. The
// rounded values d·q are written as f32, so every weight kernel reads them as it reads any
// activations. In recurrent models the rounding is visible in the logits (the Qwen3.5 MoE tiny
// model in MXFP4 lands several units from llama.cpp without it), so the GPU rounds as the CPU does.
//
// One invocation per Q8 block (its values read three times: maximum, quantize, write), per value
// for f16 and bf16.

#include "common"

struct Params {
    len: u32,   // values, whole blocks
    mode: u32,  // 0: Q8_0, 1: Q8_K, 2: f16, 3: bf16
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

// llama.cpp's quantize_row_q8_0 as the CPU's `quantize_q8`: d = f16(amax / 127), each value
// round_half_even(x · 127/amax) (WGSL's round() rounds half to even).
fn q8_0(start: u32) {
    var amax = 0.0;
    for (var i = 0u; i < 32u; i++) {
        amax = max(amax, abs(x[start + i]));
    }
    let d = round_f16(amax / 127.0);
    var id = 0.0;
    if (amax != 0.0) {
        id = 127.0 / amax;
    }
    for (var i = 0u; i < 32u; i++) {
        y[start + i] = d * round(x[start + i] * id);
    }
}

// llama.cpp's quantize_row_q8_K_ref as the CPU's `quantize_q8k`: the value of largest magnitude
// (the first, on ties) sets iscale = −127/max; q = min(round_half_even(iscale · x), 127),
// d = 1/iscale.
fn q8_k(start: u32) {
    var amax = 0.0;
    var mx = 0.0;
    for (var i = 0u; i < 256u; i++) {
        let v = x[start + i];
        if (abs(v) > amax) {
            amax = abs(v);
            mx = v;
        }
    }
    if (amax == 0.0) {
        for (var i = 0u; i < 256u; i++) {
            y[start + i] = 0.0;
        }
        return;
    }
    let iscale = -127.0 / mx;
    let d = 1.0 / iscale;
    for (var i = 0u; i < 256u; i++) {
        y[start + i] = d * min(round(iscale * x[start + i]), 127.0);
    }
}

// Round to nearest even bf16 (NaN kept a NaN).
fn round_bf16(v: f32) -> f32 {
    let b = bitcast<u32>(v);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return v;
    }
    return bitcast<f32>((b + 0x7fffu + ((b >> 16u) & 1u)) & 0xffff0000u);
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_wg(wid, nwg) * 64u + lid;
    switch (p.mode) {
        case 0u: {
            if (i < p.len / 32u) {
                q8_0(32u * i);
            }
        }
        case 1u: {
            if (i < p.len / 256u) {
                q8_k(256u * i);
            }
        }
        case 2u: {
            if (i < p.len) {
                y[i] = round_f16(x[i]);
            }
        }
        default: {
            if (i < p.len) {
                y[i] = round_bf16(x[i]);
            }
        }
    }
}
