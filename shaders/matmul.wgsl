// matmul.wgsl — out = x · Wᵀ for many activation rows (prefill): a tile of 64 weight rows × 32
// activation rows per workgroup of 256; each step decodes a 64 × 32 slab of weights into workgroup
// memory once for all 32 rows and each invocation accumulates 4 × 2 outputs in f32.

#include "common"

struct Params {
    k: u32,          // values per weight row
    n: u32,          // activation rows
    groups: u32,     // k / 16
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
const BN: u32 = 32u;
const BK: u32 = 32u;

var<workgroup> ws: array<f32, 2048>; // [BK][BM]
var<workgroup> xs: array<f32, 1024>; // [BK][BN]

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let m0 = wid.x * BM;
    let n0 = wid.y * BN;
    let tm = lid % 16u;
    let tn = lid / 16u;
    // Rows tm, tm + 16, tm + 32, tm + 48 of activation rows tn and tn + 16.
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
        // Weights: invocations 0..127 each decode one run of 16 values (row lid / 2).
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
                let o = (h * 16u + 4u * q) * BM + r;
                ws[o] = y.x;
                ws[o + BM] = y.y;
                ws[o + 2u * BM] = y.z;
                ws[o + 3u * BM] = y.w;
            }
        }
        // Activations: 32 rows × 32 values, four per invocation.
        for (var e = lid; e < BN * BK; e += 256u) {
            let c = e % BK;
            let rr = e / BK;
            var v = 0.0;
            if (n0 + rr < p.n && k0 + c < p.k) {
                v = x[(n0 + rr) * p.k + k0 + c];
            }
            xs[c * BN + rr] = v;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk++) {
            let a = vec4<f32>(ws[kk * BM + tm], ws[kk * BM + tm + 16u], ws[kk * BM + tm + 32u],
                              ws[kk * BM + tm + 48u]);
            acc0 += a * xs[kk * BN + tn];
            acc1 += a * xs[kk * BN + tn + 16u];
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let m = m0 + tm + i * 16u;
        if (m < p.m) {
            if (n0 + tn < p.n) {
                out0[(n0 + tn) * p.stride + p.off + m] = acc0[i];
            }
            if (n0 + tn + 16u < p.n) {
                out0[(n0 + tn + 16u) * p.stride + p.off + m] = acc1[i];
            }
        }
    }
}
