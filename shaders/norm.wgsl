// norm.wgsl — RMSNorm fused with its weight: one workgroup per row, x = x / sqrt(mean(x²) + eps) · w,
// in place, or (`INTO`) from `src` into x, which fuses a block's input copy with its norm, or
// (`ADD`) from `src + y`, written back to `src` first: a residual add fused with the next block's
// input norm. `PACKED` also writes the output as Q8_K blocks for the integer-dot mat-vecs.

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
#if ADD
@group(0) @binding(3) var<storage, read_write> src: array<f32>;
@group(0) @binding(4) var<storage, read> y: array<f32>;

// src += y, returning the sum (each value is added by the invocation that later reads it back).
fn input_first(i: u32) -> f32 {
    let v = src[i] + y[i];
    src[i] = v;
    return v;
}

fn input(i: u32) -> f32 {
    return src[i];
}
#else
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

fn input_first(i: u32) -> f32 {
    return input(i);
}
#endif

#if PACKED
// The output again as packed Q8_K blocks (pack_q8k.wgsl), for the integer-dot mat-vecs that read
// it next. Rows are whole blocks of 256.
@group(0) @binding({{PACKED_BINDING}}) var<storage, read_write> packed: array<u32>;

// Value i of the output, as the norm wrote it.
fn pack_value(i: u32) -> f32 {
    return x[i];
}

#include "pack_q8k"
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
        let v = input_first(o + i);
        s += v * v;
    }
    let total = wg_sum(s, lid, sg_lane, sg_id, n_sg);
    let scale = 1.0 / sqrt(total / f32(p.dim) + p.eps);
    for (var i = lid; i < p.dim; i += {{WG}}u) {
        x[o + i] = input(o + i) * scale * w[i];
    }
#if PACKED
    write_packed_row(o, p.dim, p.rows * p.dim / 4u, lid);
#endif
}
