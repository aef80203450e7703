// round_acts.wgsl — the activations a weight matrix multiplies, rounded as the CPU backend (and
// llama.cpp's, its `vec_dot_type`) rounds them before its dot products: quantized types take
// Q8_0 blocks of 32 values or Q8_K blocks of 256, half-precision weights f16 or bf16 values. The
// rounded values d·q are written as f32, so every weight kernel reads them as it reads any
// activations (the PACKED variant writes Q8_K blocks as integers instead). In recurrent models
// the rounding is visible in the logits (the Qwen3.5 MoE tiny model in MXFP4 lands several units
// from llama.cpp without it), so the GPU rounds as the CPU does. The HALF variant writes them as
// f16 for the GEMM on cooperative matrices, which multiplies f16 tiles.
//

#if HALF
enable f16;
#endif
#include "common"

struct Params {
    len: u32,   // values, whole blocks
    mode: u32,  // 0: Q8_0, 1: Q8_K, 2: f16, 3: bf16
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
#if PACKED
// Q8_K blocks for the integer-dot mat-vecs (matvec_blocks.wgsl's IDOT): the quants of all `len`
// values packed four to a word (pack4xI8), then each block's d (f32 bits). Q8_K only.
@group(0) @binding(2) var<storage, read_write> y: array<u32>;
#else
#if HALF
// The rounded values as f16, clamped to its range as matmul.wgsl's `half4` rounds its tiles (the
// GEMM's XH variant reads them): one less conversion per tile a value enters, and half the bytes.
// len is a multiple of 4.
@group(0) @binding(2) var<storage, read_write> y: array<vec4<f16>>;
#else
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
#endif
#endif

// A workgroup takes 256 values, four per invocation: a Q8_K block, or eight Q8_0 blocks of eight
// invocations each. Each block's largest magnitude is found in workgroup memory, so no value is
// read twice from the buffer and no invocation walks a block alone (a block per invocation was
// latency-bound: ~70 µs for 2048 values on an H200).
//
// Q8_0, as llama.cpp's quantize_row_q8_0 and the CPU's `quantize_q8`: d = f16(amax / 127), each
// value round_half_even(x · 127/amax) (WGSL's round() rounds half to even).
// Q8_K, as quantize_row_q8_K_ref and the CPU's `quantize_q8k`: the value of largest magnitude
// (the first, on ties) sets iscale = −127/max; q = min(round_half_even(iscale · x), 127),
// d = 1/iscale. Which of two values of equal magnitude and opposite signs sets it does not
// change d·q (both flip sign), so the magnitude alone is taken: iscale = −127/amax.

var<workgroup> block_max: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let e = (flat_wg(wid, nwg) * 64u + lid) * 4u;
    var v = vec4<f32>(0.0);
    for (var c = 0u; c < 4u; c++) {
        if (e + c < p.len) {
            v[c] = x[e + c];
        }
    }
#if PACKED
    // A workgroup is one block; len is whole blocks, so the barrier is uniform.
    let a = abs(v);
    block_max[lid] = max(max(a.x, a.y), max(a.z, a.w));
    workgroupBarrier();
    var amax = 0.0;
    for (var i = 0u; i < 64u; i++) {
        amax = max(amax, block_max[i]);
    }
    let q = q8_k_quants(v, amax);
    let d = q8_k_d(amax);
    if (e < p.len) {
        y[e / 4u] = pack4xI8(q);
        if (lid == 0u) {
            y[p.len / 4u + flat_wg(wid, nwg)] = bitcast<u32>(d);
        }
    }
#else
    var r = v;
    switch (p.mode) {
        case 0u, 1u: {
            let a = abs(v);
            block_max[lid] = max(max(a.x, a.y), max(a.z, a.w));
            workgroupBarrier();
            let lanes = select(64u, 8u, p.mode == 0u);
            let first = lid / lanes * lanes;
            var amax = 0.0;
            for (var i = 0u; i < lanes; i++) {
                amax = max(amax, block_max[first + i]);
            }
            if (p.mode == 0u) {
                r = q8_0_values(v, amax);
            } else {
                r = q8_k_values(v, amax);
            }
        }
        case 2u: {
            r = f16_values(v);
        }
        default: {
            r = bf16_values(v);
        }
    }
#if HALF
    if (e < p.len) {
        y[e / 4u] = vec4<f16>(clamp(r, vec4<f32>(-65504.0), vec4<f32>(65504.0)));
    }
#else
    for (var c = 0u; c < 4u; c++) {
        if (e + c < p.len) {
            y[e + c] = r[c];
        }
    }
#endif
#endif
}
