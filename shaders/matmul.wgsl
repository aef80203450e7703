// matmul.wgsl — out = x · Wᵀ for many activation rows (prefill): a tile of 64 weight rows × 64
// activation rows per workgroup of 64. Each step decodes a 64 × 32 slab of weights into workgroup
// memory once for all 64 rows (and loads 64 × 32 activations); each invocation then accumulates an
// 8 × 8 block of outputs in f32 (weight rows 4t..4t+3 and 32+4t..32+4t+3 of the tile, likewise
// for activation rows), reading both operands as vec4s. Eight by eight keeps the workgroup-memory
// reads per multiply-add low: on a software adapter (lavapipe) each read is a per-lane loop, and
// they, not the arithmetic, set the speed.

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
const BN: u32 = 64u;
const BK: u32 = 32u;

// [BK][BM / 4] and [BK][BN / 4]: four consecutive weight rows (activation rows) per vec4.
var<workgroup> ws: array<vec4<f32>, 512>;
var<workgroup> xs: array<vec4<f32>, 512>;

fn store4(n: u32, m: u32, v: vec4<f32>) {
    if (n < p.n) {
        let o = n * p.stride + p.off + m;
        for (var i = 0u; i < 4u; i++) {
            if (m + i < p.m) {
                out0[o + i] = v[i];
            }
        }
    }
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let m0 = wid.x * BM;
    let n0 = wid.y * BN;
    let tm = lid % 8u; // weight rows 4tm..4tm+3 and 32+4tm..32+4tm+3
    let tn = lid / 8u; // activation rows likewise
    // acc_ab_j: weight rows of half a, activation row j of half b.
    var acc000 = vec4<f32>(0.0);
    var acc001 = vec4<f32>(0.0);
    var acc002 = vec4<f32>(0.0);
    var acc003 = vec4<f32>(0.0);
    var acc010 = vec4<f32>(0.0);
    var acc011 = vec4<f32>(0.0);
    var acc012 = vec4<f32>(0.0);
    var acc013 = vec4<f32>(0.0);
    var acc100 = vec4<f32>(0.0);
    var acc101 = vec4<f32>(0.0);
    var acc102 = vec4<f32>(0.0);
    var acc103 = vec4<f32>(0.0);
    var acc110 = vec4<f32>(0.0);
    var acc111 = vec4<f32>(0.0);
    var acc112 = vec4<f32>(0.0);
    var acc113 = vec4<f32>(0.0);
    let live = m0 + lid < p.m;
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
        // Weights: invocation lid decodes row lid's two runs of 16 values, 4 at a time.
        for (var h = 0u; h < 2u; h++) {
            let g = k0 / 16u + h;
            for (var q = 0u; q < 4u; q++) {
                var y = vec4<f32>(0.0);
                if (live && g < p.groups) {
                    y = dq4((m0 + lid) * p.row_bytes, g, q);
                }
                let kk = h * 16u + 4u * q;
                let c = lid & 3u;
                let o = kk * 16u + (lid >> 2u);
                ws[o][c] = y.x;
                ws[o + 16u][c] = y.y;
                ws[o + 32u][c] = y.z;
                ws[o + 48u][c] = y.w;
            }
        }
        // Activations: 64 rows × 32 values, 32 per invocation.
        for (var e = lid; e < BN * BK; e += 64u) {
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
            let a0 = ws[kk * 16u + tm];
            let a1 = ws[kk * 16u + 8u + tm];
            let b0 = xs[kk * 16u + tn];
            let b1 = xs[kk * 16u + 8u + tn];
            acc000 += a0 * b0.x;
            acc001 += a0 * b0.y;
            acc002 += a0 * b0.z;
            acc003 += a0 * b0.w;
            acc010 += a0 * b1.x;
            acc011 += a0 * b1.y;
            acc012 += a0 * b1.z;
            acc013 += a0 * b1.w;
            acc100 += a1 * b0.x;
            acc101 += a1 * b0.y;
            acc102 += a1 * b0.z;
            acc103 += a1 * b0.w;
            acc110 += a1 * b1.x;
            acc111 += a1 * b1.y;
            acc112 += a1 * b1.z;
            acc113 += a1 * b1.w;
        }
        workgroupBarrier();
    }
    let ma = m0 + 4u * tm;
    let mb = ma + 32u;
    let na = n0 + 4u * tn;
    let nb = na + 32u;
    store4(na, ma, acc000);
    store4(na + 1u, ma, acc001);
    store4(na + 2u, ma, acc002);
    store4(na + 3u, ma, acc003);
    store4(nb, ma, acc010);
    store4(nb + 1u, ma, acc011);
    store4(nb + 2u, ma, acc012);
    store4(nb + 3u, ma, acc013);
    store4(na, mb, acc100);
    store4(na + 1u, mb, acc101);
    store4(na + 2u, mb, acc102);
    store4(na + 3u, mb, acc103);
    store4(nb, mb, acc110);
    store4(nb + 1u, mb, acc111);
    store4(nb + 2u, mb, acc112);
    store4(nb + 3u, mb, acc113);
}
