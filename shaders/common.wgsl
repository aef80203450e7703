// common.wgsl — shared helpers spliced into every kernel (see src/backend/wgpu/pipelines.rs for the
// #include / #if / {{NAME}} preprocessing).
//
// Grids: a dispatch larger than 65535 workgroups in x spills into y; `flat_wg` recovers the linear
// workgroup index. The check against the real count is uniform across a workgroup, so an early
// return on it does not break barrier uniformity.

fn flat_wg(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.x + wid.y * nwg.x;
}

// f32 rounded to the nearest f16 and back (an f16 KV cache's query and probabilities, GELU's table).
fn round_f16(x: f32) -> f32 {
    return unpack2x16float(pack2x16float(vec2<f32>(x, 0.0))).x;
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
