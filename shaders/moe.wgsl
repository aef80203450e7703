// moe.wgsl — mixture-of-experts routing and the weighted sum of the experts' outputs. The define
// picks the op: MOE_ROUTE (softmax or sigmoid scores, top-k by score plus an optional selection
// bias, renormalized and scaled: one workgroup per token), MOE_COMBINE (one invocation per output
// value) or ADD_EXPERT_BIAS (each slot's expert's bias, gpt-oss; one invocation per value). The expert matmuls are
// matvec.wgsl's EXPERT variant.

#include "common"
#include "reduce"

#if MOE_ROUTE
struct Params {
    rows: u32,
    n_expert: u32,  // at most MAX_EXPERTS
    n_used: u32,
    gating: u32,    // 0: softmax over the experts, 1: each logit's sigmoid
    has_bias: u32,  // the selection bias is bound (it moves the choice, not the weights)
    normalize: u32, // the chosen scores divided by their sum
    scale: f32,     // then times this
}

const MAX_EXPERTS: u32 = 1024u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read> selection_bias: array<f32>;
@group(0) @binding(3) var<storage, read_write> selected: array<f32>;
@group(0) @binding(4) var<storage, read_write> weights: array<f32>;

var<workgroup> scores: array<f32, MAX_EXPERTS>;
var<workgroup> taken: array<u32, MAX_EXPERTS>;
var<workgroup> best_v: array<f32, {{WG}}>;
var<workgroup> best_i: array<u32, {{WG}}>;

fn choice(e: u32) -> f32 {
    if (p.has_bias != 0u) {
        return scores[e] + selection_bias[e];
    }
    return scores[e];
}

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
    if (p.gating == 0u) {
        var m = -3.402823e38;
        for (var e = lid; e < n; e += {{WG}}u) {
            m = max(m, logits[base + e]);
        }
        let mx = wg_max(m, lid, sg_lane, sg_id, n_sg);
        var sum = 0.0;
        for (var e = lid; e < n; e += {{WG}}u) {
            let v = exp(logits[base + e] - mx);
            scores[e] = v;
            sum += v;
        }
        let inv = 1.0 / wg_sum(sum, lid, sg_lane, sg_id, n_sg);
        for (var e = lid; e < n; e += {{WG}}u) {
            scores[e] *= inv;
            taken[e] = 0u;
        }
    } else {
        for (var e = lid; e < n; e += {{WG}}u) {
            scores[e] = 1.0 / (1.0 + exp(-logits[base + e]));
            taken[e] = 0u;
        }
    }
    workgroupBarrier();
    // Top-k, highest first, ties to the lower index: each invocation's best among the experts
    // not yet taken, then invocation 0 picks among them and marks the winner taken.
    let out0 = t * p.n_used;
    for (var j = 0u; j < p.n_used; j++) {
        var bv = -3.402823e38;
        var bi = 0xffffffffu;
        for (var e = lid; e < n; e += {{WG}}u) {
            let v = choice(e);
            if (taken[e] == 0u && (bi == 0xffffffffu || v > bv)) {
                bv = v;
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
                let li = best_i[l];
                if (li != 0xffffffffu
                    && (i == 0xffffffffu || best_v[l] > v || (best_v[l] == v && li < i))) {
                    v = best_v[l];
                    i = li;
                }
            }
            i = min(i, n - 1u);
            selected[out0 + j] = f32(i);
            weights[out0 + j] = scores[i];
            taken[i] = 1u;
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        var divisor = 1.0;
        if (p.normalize != 0u) {
            var total = 0.0;
            for (var j = 0u; j < p.n_used; j++) {
                total += weights[out0 + j];
            }
            divisor = max(total, 6.103515625e-5);
        }
        for (var j = 0u; j < p.n_used; j++) {
            var w = weights[out0 + j];
            if (p.normalize != 0u) {
                w = w / divisor;
            }
            weights[out0 + j] = w * p.scale;
        }
    }
}
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

#if ADD_EXPERT_BIAS
struct Params {
    len: u32,      // slots × width
    width: u32,
    experts: u32,  // bias rows
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read> bias: array<f32>;      // one row per expert
@group(0) @binding(3) var<storage, read> selected: array<f32>;  // the slot's expert

@compute @workgroup_size(256)
fn add_expert_bias(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= p.len) {
        return;
    }
    let e = u32(selected[i / p.width]);
    if (e < p.experts) {
        x[i] += bias[e * p.width + i % p.width];
    }
}
#endif
