// norm.wgsl — RMSNorm fused with its weight: one workgroup per row, x = x / sqrt(mean(x²) + eps) · w,
// in place, or (`INTO`) from `src` into x, which fuses a block's input copy with its norm.

#include "common"
#include "reduce"

struct Params {
    rows: u32,
    dim: u32,
    eps: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
#if INTO
@group(0) @binding(3) var<storage, read> src: array<f32>;

fn input(i: u32) -> f32 {
    return src[i];
}
#else
fn input(i: u32) -> f32 {
    return x[i];
}
#endif

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32 {{SG_ARGS}}) {
    {{SG_LOCALS}}
    let row = flat_wg(wid, nwg);
    if (row >= p.rows) {
        return;
    }
    let o = row * p.dim;
    var s = 0.0;
    for (var i = lid; i < p.dim; i += {{WG}}u) {
        let v = input(o + i);
        s += v * v;
    }
    let total = wg_sum(s, lid, sg_lane, sg_id, n_sg);
    let scale = 1.0 / sqrt(total / f32(p.dim) + p.eps);
    for (var i = lid; i < p.dim; i += {{WG}}u) {
        x[o + i] = input(o + i) * scale * w[i];
    }
}
