// moe.wgsl — mixture-of-experts routing, expert matmuls and their weighted sum (Qwen3.5 MoE). The
// define picks the op: MOE_ROUTE (softmax over the experts, top-k, renormalized: one workgroup per
// token), EXPERT_MATVEC (llama.cpp's mul_mat_id as a mat-vec per slot, reading the stacked expert
// weight in place in its GGUF block layout, any weight type; f32 sums) or MOE_COMBINE (one
// invocation per output value).

#include "common"
#include "reduce"

#if MOE_ROUTE
struct Params {
    rows: u32,
    n_expert: u32,  // at most MAX_EXPERTS
    n_used: u32,
}

const MAX_EXPERTS: u32 = 1024u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> selected: array<f32>;
@group(0) @binding(3) var<storage, read_write> weights: array<f32>;

var<workgroup> probs: array<f32, MAX_EXPERTS>;
var<workgroup> best_v: array<f32, {{WG}}>;
var<workgroup> best_i: array<u32, {{WG}}>;

@compute @workgroup_size({{WG}})
fn route(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32 {{SG_ARGS}}) {
    {{SG_LOCALS}}
    let t = flat_wg(wid, nwg);
    if (t >= p.rows) {
        return;
    }
    let n = p.n_expert;
    let base = t * n;
    var m = -3.402823e38;
    for (var e = lid; e < n; e += {{WG}}u) {
        m = max(m, logits[base + e]);
    }
    let mx = wg_max(m, lid, sg_lane, sg_id, n_sg);
    var sum = 0.0;
    for (var e = lid; e < n; e += {{WG}}u) {
        let v = exp(logits[base + e] - mx);
        probs[e] = v;
        sum += v;
    }
    let inv = 1.0 / wg_sum(sum, lid, sg_lane, sg_id, n_sg);
    for (var e = lid; e < n; e += {{WG}}u) {
        probs[e] *= inv;
    }
    workgroupBarrier();
    // Top-k, highest first, ties to the lower index: each invocation's best, then invocation 0
    // picks among them and takes the winner out (probabilities are ≥ 0).
    let out0 = t * p.n_used;
    for (var j = 0u; j < p.n_used; j++) {
        var bv = -1.0;
        var bi = 0xffffffffu;
        for (var e = lid; e < n; e += {{WG}}u) {
            if (probs[e] > bv) {
                bv = probs[e];
                bi = e;
            }
        }
        best_v[lid] = bv;
        best_i[lid] = bi;
        workgroupBarrier();
        if (lid == 0u) {
            var v = best_v[0];
            var i = best_i[0];
            for (var l = 1u; l < {{WG}}u; l++) {
                if (best_v[l] > v || (best_v[l] == v && best_i[l] < i)) {
                    v = best_v[l];
                    i = best_i[l];
                }
            }
            selected[out0 + j] = f32(i);
            weights[out0 + j] = v;
            probs[i] = -1.0;
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        var total = 0.0;
        for (var j = 0u; j < p.n_used; j++) {
            total += weights[out0 + j];
        }
        total = max(total, 6.103515625e-5);
        for (var j = 0u; j < p.n_used; j++) {
            weights[out0 + j] /= total;
        }
    }
}
#endif

#if EXPERT_MATVEC
struct Params {
    k: u32,              // values per weight row (and per input row)
    groups: u32,         // k / 16, rounded up
    row_bytes: u32,
    expert_rows: u32,    // output values per slot
    expert_stride: u32,  // weight rows from one expert to the next
    row_offset: u32,     // first row used within an expert
    n_used: u32,         // slots per token
    per_slot: u32,       // 1: an input row per slot; 0: per token
    first_row: u32,      // first weight row held by this part of the weight
    part_rows: u32,      // rows held by this part
    rows_per_wg: u32,    // 64 / the smallest subgroup size; 1 without
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w0: array<u32>;
@group(0) @binding(3) var<storage, read> selected: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

fn word(i: u32) -> u32 {
    return w0[i];
}

#include "quants"

// Σ over the runs g = first, first + step, … of weight row `row` (of this part) times the input
// row starting at `xb`.
fn partial_dot(row: u32, xb: u32, first: u32, step: u32) -> f32 {
    let base = row * p.row_bytes;
    var acc = 0.0;
    for (var g = first; g < p.groups; g += step) {
        for (var q = 0u; q < 4u; q++) {
            let i = g * 16u + q * 4u;
            var xv = vec4<f32>(x[xb + i], x[xb + i + 1u], x[xb + i + 2u], x[xb + i + 3u]);
            if (i + 4u > p.k) {
                // Past the row: the weight is padded with zeros (see matvec.wgsl).
                xv = select(vec4<f32>(0.0), xv, vec4<u32>(i) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(p.k));
            }
            acc += dot(dq4(base, g, q), xv);
        }
    }
    return acc;
}

// The weight row (of the whole stacked weight) of output `r` of `slot`, and its input row.
fn weight_row(slot: u32, r: u32) -> u32 {
    return u32(selected[slot]) * p.expert_stride + p.row_offset + r;
}

fn input_base(slot: u32) -> u32 {
    if (p.per_slot == 1u) {
        return slot * p.k;
    }
    return (slot / p.n_used) * p.k;
}

// Grid: x over the slot's output rows, y over slots. A part of a split weight computes only the
// rows it holds.
#if SUBGROUP
@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32 {{SG_ARGS}}) {
    let slot = wid.y;
    let first = wid.x * p.rows_per_wg;
    let xb = input_base(slot);
    for (var rr = sg_id; rr < p.rows_per_wg; rr += n_sg) {
        let r = first + rr;
        if (r < p.expert_rows) {
            let g = weight_row(slot, r);
            if (g >= p.first_row && g < p.first_row + p.part_rows) {
                let t = subgroupAdd(partial_dot(g - p.first_row, xb, sg_lane, sg_size));
                if (sg_lane == 0u) {
                    out[slot * p.expert_rows + r] = t;
                }
            }
        }
    }
}
#else
@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32 {{SG_ARGS}}) {
    {{SG_LOCALS}}
    let slot = wid.y;
    let r = wid.x;
    if (r >= p.expert_rows) {
        return;
    }
    let g = weight_row(slot, r);
    if (g < p.first_row || g >= p.first_row + p.part_rows) {
        return;
    }
    let t = wg_sum(partial_dot(g - p.first_row, input_base(slot), lid, {{WG}}u), lid, sg_lane, sg_id, n_sg);
    if (lid == 0u) {
        out[slot * p.expert_rows + r] = t;
    }
}
#endif
#endif

#if MOE_COMBINE
fn index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * 256u;
}

struct Params {
    len: u32,     // rows × width
    width: u32,
    n_used: u32,  // slots per token
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> y: array<f32>;
@group(0) @binding(2) var<storage, read> weights: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

// out[t][c] = Σ_j weights[t·n + j] · y[t·n + j][c], j in order.
@compute @workgroup_size(256)
fn moe_combine(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i >= p.len) {
        return;
    }
    let t = i / p.width;
    let c = i % p.width;
    let s0 = t * p.n_used;
    var acc = y[s0 * p.width + c] * weights[s0];
    for (var j = 1u; j < p.n_used; j++) {
        acc += y[(s0 + j) * p.width + c] * weights[s0 + j];
    }
    out[i] = acc;
}
#endif
