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
