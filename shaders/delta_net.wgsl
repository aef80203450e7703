// delta_net.wgsl — the Gated DeltaNet recurrence (Backend::gated_delta_net) over a whole batch of
// tokens in one dispatch: one workgroup per (value head, 64 columns of its state), looping over the
// tokens in order. Invocation j keeps column j of the head's d × d state S (row j of the stored,
// transposed layout) in private memory for the whole batch; the columns are independent given
// q and k, which the workgroup loads and L2-normalizes once per token in workgroup memory. f32
// throughout. `{{D}}` is the head width (a pipeline per width: it sizes the private state).

#include "common"
#include "reduce"

struct Params {
    rows: u32,       // tokens
    n_k: u32,        // key (and query) heads
    n_v: u32,        // value heads
    qkv_width: u32,  // values per qkv row: 2·n_k·d + n_v·d
    eps: f32,        // of the L2 normalization
}

const D: u32 = {{D}}u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;
@group(0) @binding(2) var<storage, read> alpha: array<f32>;
@group(0) @binding(3) var<storage, read> beta: array<f32>;
@group(0) @binding(4) var<storage, read> ssm_a: array<f32>;
@group(0) @binding(5) var<storage, read> dt_bias: array<f32>;
@group(0) @binding(6) var<storage, read_write> state: array<f32>;
@group(0) @binding(7) var<storage, read_write> out: array<f32>;

var<workgroup> qs: array<f32, D>;
var<workgroup> ks: array<f32, D>;

// llama.cpp's softplus: v above 20, else ln(1 + e^v).
fn softplus(v: f32) -> f32 {
    if (v > 20.0) {
        return v;
    }
    return log(1.0 + exp(v));
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32 {{SG_ARGS}}) {
    {{SG_LOCALS}}
    let h = wid.x;
    let j = wid.y * {{WG}}u + lid;
    let live = j < D;
    let kh = h % p.n_k;
    let base = h * D * D + j * D;
    var s: array<f32, D>;
    if (live) {
        for (var i = 0u; i < D; i++) {
            s[i] = state[base + i];
        }
    }
    let n = f32(D);
    // x / sqrt(Σx² + eps) as llama.cpp: an RMS norm with epsilon eps/n, then 1/sqrt(n).
    let post = 1.0 / sqrt(n);
    let out_scale = 1.0 / sqrt(n);
    for (var t = 0u; t < p.rows; t++) {
        let row = t * p.qkv_width;
        var sq = 0.0;
        var sk = 0.0;
        for (var i = lid; i < D; i += {{WG}}u) {
            let qv = qkv[row + kh * D + i];
            let kv = qkv[row + (p.n_k + kh) * D + i];
            qs[i] = qv;
            ks[i] = kv;
            sq += qv * qv;
            sk += kv * kv;
        }
        // The sums' barriers also publish qs and ks.
        let q_scale = 1.0 / sqrt(wg_sum(sq, lid, sg_lane, sg_id, n_sg) / n + p.eps / n);
        let k_scale = 1.0 / sqrt(wg_sum(sk, lid, sg_lane, sg_id, n_sg) / n + p.eps / n);
        if (live) {
            let g = ssm_a[h] * softplus(alpha[t * p.n_v + h] + dt_bias[h]);
            let b = 1.0 / (1.0 + exp(-beta[t * p.n_v + h]));
            let decay = exp(g);
            // δ = β (v[j] − S[:, j]·k); S[:, j] += k δ; out[j] = S[:, j]·q / sqrt(d).
            var sk_dot = 0.0;
            for (var i = 0u; i < D; i++) {
                s[i] *= decay;
                sk_dot += s[i] * ((ks[i] * k_scale) * post);
            }
            let delta = (qkv[row + (2u * p.n_k + h) * D + j] - sk_dot) * b;
            var o = 0.0;
            for (var i = 0u; i < D; i++) {
                s[i] += ((ks[i] * k_scale) * post) * delta;
                o += s[i] * ((qs[i] * q_scale) * post);
            }
            out[t * p.n_v * D + h * D + j] = o * out_scale;
        }
        // Every invocation is done with this token's q and k before the next overwrites them.
        workgroupBarrier();
    }
    if (live) {
        for (var i = 0u; i < D; i++) {
            state[base + i] = s[i];
        }
    }
}
