// matvec.wgsl — out = x · Wᵀ for one activation row (decode). With subgroup operations each
// subgroup takes whole weight rows (`rows_per_wg` per workgroup), its invocations striding over a
// row's 16-value runs, summed with subgroupAdd: no barriers, no workgroup memory. Without, one
// workgroup per row, reduced in workgroup memory. f32 sums throughout. Up to
// three weights of one type and width (Q/K/V, gate/up) run as one dispatch over their concatenated
// rows (`{{NW}}` weights), each writing its own output. `GLU_SILU` / `GLU_GELU` (with NW2): the
// gate and up rows i are computed together and out0[i] = act(gate · x) · (up · x), the
// feed-forward's gated activation in the mat-vec's epilogue (out1 is not written).

#include "common"
#include "reduce"

struct Params {
    k: u32,          // values per weight row
    n: u32,          // activation rows (1)
    groups: u32,     // k / 16, rounded up
    row_bytes: u32,  // bytes per weight row
    m0: u32, m1: u32, m2: u32,        // rows of each weight
    total: u32,                       // m0 + m1 + m2
    stride0: u32, stride1: u32, stride2: u32,  // values per output row
    off0: u32, off1: u32, off2: u32,           // first output column written
    rows_per_wg: u32,                          // 64 / the smallest subgroup size; 1 without
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w0: array<u32>;
@group(0) @binding(3) var<storage, read_write> out0: array<f32>;
#if NW2 || NW3
@group(0) @binding(4) var<storage, read> w1: array<u32>;
@group(0) @binding(5) var<storage, read_write> out1: array<f32>;
#endif
#if NW3
@group(0) @binding(6) var<storage, read> w2: array<u32>;
@group(0) @binding(7) var<storage, read_write> out2: array<f32>;
#endif

var<private> sel: u32;

fn word(i: u32) -> u32 {
#if NW2 || NW3
    if (sel == 1u) {
        return w1[i];
    }
#endif
#if NW3
    if (sel == 2u) {
        return w2[i];
    }
#endif
    return w0[i];
}

#include "quants"

// Weight row r of the concatenated rows: select its weight and return its row within it.
fn locate(r: u32) -> u32 {
    var row = r;
    sel = 0u;
    if (row >= p.m0) {
        row -= p.m0;
        sel = 1u;
        if (row >= p.m1) {
            row -= p.m1;
            sel = 2u;
        }
    }
    return row;
}

// x[i..i + 4], zeros past the row (a float weight of a width not a multiple of 16 is padded with
// zeros to whole runs; the activations past it need not be finite).
fn x4(i: u32) -> vec4<f32> {
    let v = vec4<f32>(x[i], x[i + 1u], x[i + 2u], x[i + 3u]);
    if (i + 4u <= p.k) {
        return v;
    }
    return select(vec4<f32>(0.0), v, vec4<u32>(i) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(p.k));
}

// Σ over the runs g = first, first + step, … of weight row `row` times x.
fn partial_dot(row: u32, first: u32, step: u32) -> f32 {
    let base = row * p.row_bytes;
    var acc = 0.0;
    for (var g = first; g < p.groups; g += step) {
        for (var q = 0u; q < 4u; q++) {
            let xo = g * 16u + q * 4u;
            acc += dot(dq4(base, g, q), x4(xo));
        }
    }
    return acc;
}

fn store(row: u32, t: f32) {
    if (sel == 0u) {
        out0[p.off0 + row] = t;
    }
#if NW2 || NW3
    if (sel == 1u) {
        out1[p.off1 + row] = t;
    }
#endif
#if NW3
    if (sel == 2u) {
        out2[p.off2 + row] = t;
    }
#endif
}

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

#if SUBGROUP
#if GLU_SILU || GLU_GELU
@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32 {{SG_ARGS}}) {
    let first = flat_wg(wid, nwg) * p.rows_per_wg;
    for (var rr = sg_id; rr < p.rows_per_wg; rr += n_sg) {
        let r = first + rr;
        if (r < p.m0) {
            sel = 0u;
            let g = subgroupAdd(partial_dot(r, sg_lane, sg_size));
            sel = 1u;
            let u = subgroupAdd(partial_dot(r, sg_lane, sg_size));
            if (sg_lane == 0u) {
                out0[p.off0 + r] = act(g) * u;
            }
        }
    }
}
#else
@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32 {{SG_ARGS}}) {
    let first = flat_wg(wid, nwg) * p.rows_per_wg;
    for (var rr = sg_id; rr < p.rows_per_wg; rr += n_sg) {
        let r = first + rr;
        if (r < p.total) {
            let row = locate(r);
            let t = subgroupAdd(partial_dot(row, sg_lane, sg_size));
            if (sg_lane == 0u) {
                store(row, t);
            }
        }
    }
}
#endif
#else
#if GLU_SILU || GLU_GELU
@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32 {{SG_ARGS}}) {
    {{SG_LOCALS}}
    let r = flat_wg(wid, nwg);
    if (r >= p.m0) {
        return;
    }
    sel = 0u;
    let g = wg_sum(partial_dot(r, lid, {{WG}}u), lid, sg_lane, sg_id, n_sg);
    sel = 1u;
    let u = wg_sum(partial_dot(r, lid, {{WG}}u), lid, sg_lane, sg_id, n_sg);
    if (lid == 0u) {
        out0[p.off0 + r] = act(g) * u;
    }
}
#else
@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32 {{SG_ARGS}}) {
    {{SG_LOCALS}}
    let r = flat_wg(wid, nwg);
    if (r >= p.total) {
        return;
    }
    let row = locate(r);
    let t = wg_sum(partial_dot(row, lid, {{WG}}u), lid, sg_lane, sg_id, n_sg);
    if (lid == 0u) {
        store(row, t);
    }
}
#endif
#endif
