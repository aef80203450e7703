// matmul.wgsl — out = x · Wᵀ for many activation rows (prefill): a tile of 64 weight rows × 64
// activation rows per workgroup of 256. Each step decodes a 64 × 32 slab of weights into workgroup
// memory once for all 64 rows (and loads 64 × 32 activations); each invocation then accumulates a
// 4 × 4 block of outputs in f32, reading both operands as vec4s.

#include "common"

struct Params {
    k: u32,          // values per weight row
    n: u32,          // activation rows
    groups: u32,     // k / 16, rounded up
    row_bytes: u32,
    m: u32,          // weight rows
    stride: u32,     // values per output row
    off: u32,        // first output column written
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w0: array<u32>;
@group(0) @binding(3) var<storage, read_write> out0: array<f32>;

fn word(i: u32) -> u32 {
    return w0[i];
}

#include "quants"

const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 32u;

// [BK][BM / 4] and [BK][BN / 4]: four consecutive weight rows (activation rows) per vec4.
var<workgroup> ws: array<vec4<f32>, 512>;
var<workgroup> xs: array<vec4<f32>, 512>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let m0 = wid.x * BM;
    let n0 = wid.y * BN;
    let tm = lid % 16u; // weight rows 4tm..4tm+3
    let tn = lid / 16u; // activation rows 4tn..4tn+3
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
        // Weights: invocations 0..127 each decode one run of 16 values (row lid / 2), 4 at a time.
        if (lid < 128u) {
            let r = lid >> 1u;
            let h = lid & 1u;
            let g = k0 / 16u + h;
            let live = m0 + r < p.m && g < p.groups;
            for (var q = 0u; q < 4u; q++) {
                var y = vec4<f32>(0.0);
                if (live) {
                    y = dq4((m0 + r) * p.row_bytes, g, q);
                }
                let kk = h * 16u + 4u * q;
                let c = r & 3u;
                let o = kk * 16u + (r >> 2u);
                ws[o][c] = y.x;
                ws[o + 16u][c] = y.y;
                ws[o + 32u][c] = y.z;
                ws[o + 48u][c] = y.w;
            }
        }
        // Activations: 64 rows × 32 values, eight per invocation.
        for (var e = lid; e < BN * BK; e += 256u) {
            let c = e % BK;
            let rr = e / BK;
            var v = 0.0;
            if (n0 + rr < p.n && k0 + c < p.k) {
                v = x[(n0 + rr) * p.k + k0 + c];
            }
            xs[c * 16u + (rr >> 2u)][rr & 3u] = v;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk++) {
            let a = ws[kk * 16u + tm];
            let b = xs[kk * 16u + tn];
            acc0 += a * b.x;
            acc1 += a * b.y;
            acc2 += a * b.z;
            acc3 += a * b.w;
        }
        workgroupBarrier();
    }
    let m = m0 + 4u * tm;
    let n = n0 + 4u * tn;
    for (var i = 0u; i < 4u; i++) {
        if (m + i < p.m) {
            if (n < p.n) {
                out0[n * p.stride + p.off + m + i] = acc0[i];
            }
            if (n + 1u < p.n) {
                out0[(n + 1u) * p.stride + p.off + m + i] = acc1[i];
            }
            if (n + 2u < p.n) {
                out0[(n + 2u) * p.stride + p.off + m + i] = acc2[i];
            }
            if (n + 3u < p.n) {
                out0[(n + 3u) * p.stride + p.off + m + i] = acc3[i];
            }
        }
    }
}
