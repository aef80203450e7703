// common.wgsl — shared helpers spliced into every kernel (see src/backend/wgpu/pipelines.rs for the
// #include / #if / {{NAME}} preprocessing).
//
// Grids: a dispatch larger than 65535 workgroups in x spills into y; `flat_wg` recovers the linear
// workgroup index. The check against the real count is uniform across a workgroup, so an early
// return on it does not break barrier uniformity.

fn flat_wg(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.x + wid.y * nwg.x;
}

// f32 → f16 bits, rounded to nearest even as the CPU's `half` crate does (pack2x16float leaves
// the rounding of an inexact value to the driver).
fn f16_bits(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    let sign = (b >> 16u) & 0x8000u;
    let a = b & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return sign | 0x7e00u; // NaN
    }
    if (a >= 0x47800000u) {
        return sign | 0x7c00u; // 65536 and beyond: infinity
    }
    if (a >= 0x38800000u) {
        // Normal: rebias the exponent (127 → 15), round off 13 mantissa bits; a carry moves into
        // the exponent (up to infinity) as it should.
        let m = a - 0x38000000u;
        return sign | ((m + 0xfffu + ((m >> 13u) & 1u)) >> 13u);
    }
    // Subnormal (or zero): units of 2^-24, exact scaling then round() (ties to even); 1024 units
    // are the smallest normal, whose bits they equal.
    return sign | u32(round(bitcast<f32>(a) * 16777216.0));
}

// f32 rounded to the nearest f16 (ties to even) and back, as the CPU's `half` rounds: an f16 KV
// cache's query and probabilities, GELU's table, the activations of F16 weights.
fn round_f16(x: f32) -> f32 {
    return unpack2x16float(f16_bits(x)).x;
}

// Four values rounded to f16, and to bf16 (`round_bf16` below).
fn f16_values(v: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(round_f16(v.x), round_f16(v.y), round_f16(v.z), round_f16(v.w));
}

fn bf16_values(v: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(round_bf16(v.x), round_bf16(v.y), round_bf16(v.z), round_bf16(v.w));
}

// Values as a Q8_0 block of largest magnitude `amax` leaves them (llama.cpp's quantize_row_q8_0):
// d = f16(amax / 127), d · round_half_even(x · 127 / amax).
fn q8_0_values(v: vec4<f32>, amax: f32) -> vec4<f32> {
    let d = round_f16(amax / 127.0);
    var id = 0.0;
    if (amax != 0.0) {
        id = 127.0 / amax;
    }
    return d * round(v * id);
}

// Values as a Q8_K block of largest magnitude `amax` leaves them (quantize_row_q8_K_ref):
// iscale = −127 / amax, d = 1 / iscale, d · min(round_half_even(iscale · x), 127).
fn q8_k_values(v: vec4<f32>, amax: f32) -> vec4<f32> {
    if (amax == 0.0) {
        return vec4<f32>(0.0);
    }
    let iscale = -127.0 / amax;
    let d = 1.0 / iscale;
    return d * min(round(iscale * v), vec4<f32>(127.0));
}

// The same block's quants q and its d (0 for a block of zeros), for the integer-dot mat-vecs
// (round_acts.wgsl's and norm.wgsl's PACKED variants); q8_k_values keeps its float arithmetic,
// which the mat-vecs that round x per step would otherwise pay two conversions a value for.
fn q8_k_quants(v: vec4<f32>, amax: f32) -> vec4<i32> {
    if (amax == 0.0) {
        return vec4<i32>(0);
    }
    return vec4<i32>(min(round((-127.0 / amax) * v), vec4<f32>(127.0)));
}

fn q8_k_d(amax: f32) -> f32 {
    if (amax == 0.0) {
        return 0.0;
    }
    return 1.0 / (-127.0 / amax);
}

// Round to nearest even bf16 (NaN kept a NaN).
fn round_bf16(v: f32) -> f32 {
    let b = bitcast<u32>(v);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return v;
    }
    return bitcast<f32>((b + 0x7fffu + ((b >> 16u) & 1u)) & 0xffff0000u);
}

// The gated activations of the feed-forward block, as ggml evaluates them: SiLU x / (1 + e^−x),
// and GELU-tanh from its f16 table (the input and the result rounded to f16, exact outside ±10).
fn silu(x: f32) -> f32 {
    return x / (1.0 + exp(-x));
}

fn gelu_f16(x: f32) -> f32 {
    if (x <= -10.0) {
        return 0.0;
    }
    if (x >= 10.0) {
        return x;
    }
    let h = round_f16(x);
    return round_f16(0.5 * h * (1.0 + tanh(0.7978846 * h * (1.0 + 0.044715 * h * h))));
}

// The gated kernels' activation (`GLU_SILU`, `GLU_GELU`: the matmuls' gate/up epilogue).
#if GLU_SILU
fn act(g: f32) -> f32 {
    return silu(g);
}
#endif
#if GLU_GELU
fn act(g: f32) -> f32 {
    return gelu_f16(g);
}
#endif
