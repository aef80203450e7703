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

#if SG8
// For adapters whose subgroups are exactly 8 wide (lavapipe): a tile of 64 weight rows × 128
// activation rows per workgroup of 64. Lane l of subgroup s accumulates weight rows 4l..4l+3 and
// 32+4l..32+4l+3 against activation rows 16s..16s+15: per step of k it reads two vec4s of weights
// and two activation values, and takes the other fourteen from its subgroup's lanes by
// subgroupBroadcast (a register move there, where every workgroup-memory read is a per-lane loop).
var<workgroup> wsg: array<vec4<f32>, 512>;  // [BK][16]: four consecutive weight rows per vec4
var<workgroup> xsg: array<f32, 4096>;       // [BK][128]

@compute @workgroup_size(64)
fn main_sg8(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
            @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_id) sg: u32) {
    let m0 = wid.x * BM;
    let n0 = wid.y * 128u;
    var acca0 = vec4<f32>(0.0);
    var acca1 = vec4<f32>(0.0);
    var acca2 = vec4<f32>(0.0);
    var acca3 = vec4<f32>(0.0);
    var acca4 = vec4<f32>(0.0);
    var acca5 = vec4<f32>(0.0);
    var acca6 = vec4<f32>(0.0);
    var acca7 = vec4<f32>(0.0);
    var acca8 = vec4<f32>(0.0);
    var acca9 = vec4<f32>(0.0);
    var acca10 = vec4<f32>(0.0);
    var acca11 = vec4<f32>(0.0);
    var acca12 = vec4<f32>(0.0);
    var acca13 = vec4<f32>(0.0);
    var acca14 = vec4<f32>(0.0);
    var acca15 = vec4<f32>(0.0);
    var accb0 = vec4<f32>(0.0);
    var accb1 = vec4<f32>(0.0);
    var accb2 = vec4<f32>(0.0);
    var accb3 = vec4<f32>(0.0);
    var accb4 = vec4<f32>(0.0);
    var accb5 = vec4<f32>(0.0);
    var accb6 = vec4<f32>(0.0);
    var accb7 = vec4<f32>(0.0);
    var accb8 = vec4<f32>(0.0);
    var accb9 = vec4<f32>(0.0);
    var accb10 = vec4<f32>(0.0);
    var accb11 = vec4<f32>(0.0);
    var accb12 = vec4<f32>(0.0);
    var accb13 = vec4<f32>(0.0);
    var accb14 = vec4<f32>(0.0);
    var accb15 = vec4<f32>(0.0);
    let live = m0 + lid < p.m;
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
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
                wsg[o][c] = y.x;
                wsg[o + 16u][c] = y.y;
                wsg[o + 32u][c] = y.z;
                wsg[o + 48u][c] = y.w;
            }
        }
        for (var e = lid; e < 128u * BK; e += 64u) {
            let c = e % BK;
            let rr = e / BK;
            var v = 0.0;
            if (n0 + rr < p.n && k0 + c < p.k) {
                v = x[(n0 + rr) * p.k + k0 + c];
            }
            xsg[c * 128u + rr] = v;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk++) {
            let a = wsg[kk * 16u + lane];
            let b = wsg[kk * 16u + 8u + lane];
            let x0 = xsg[kk * 128u + 16u * sg + lane];
            let x1 = xsg[kk * 128u + 16u * sg + 8u + lane];
            let v0 = subgroupBroadcast(x0, 0u);
            let v1 = subgroupBroadcast(x0, 1u);
            let v2 = subgroupBroadcast(x0, 2u);
            let v3 = subgroupBroadcast(x0, 3u);
            let v4 = subgroupBroadcast(x0, 4u);
            let v5 = subgroupBroadcast(x0, 5u);
            let v6 = subgroupBroadcast(x0, 6u);
            let v7 = subgroupBroadcast(x0, 7u);
            let v8 = subgroupBroadcast(x1, 0u);
            let v9 = subgroupBroadcast(x1, 1u);
            let v10 = subgroupBroadcast(x1, 2u);
            let v11 = subgroupBroadcast(x1, 3u);
            let v12 = subgroupBroadcast(x1, 4u);
            let v13 = subgroupBroadcast(x1, 5u);
            let v14 = subgroupBroadcast(x1, 6u);
            let v15 = subgroupBroadcast(x1, 7u);
            acca0 += a * v0;
            acca1 += a * v1;
            acca2 += a * v2;
            acca3 += a * v3;
            acca4 += a * v4;
            acca5 += a * v5;
            acca6 += a * v6;
            acca7 += a * v7;
            acca8 += a * v8;
            acca9 += a * v9;
            acca10 += a * v10;
            acca11 += a * v11;
            acca12 += a * v12;
            acca13 += a * v13;
            acca14 += a * v14;
            acca15 += a * v15;
            accb0 += b * v0;
            accb1 += b * v1;
            accb2 += b * v2;
            accb3 += b * v3;
            accb4 += b * v4;
            accb5 += b * v5;
            accb6 += b * v6;
            accb7 += b * v7;
            accb8 += b * v8;
            accb9 += b * v9;
            accb10 += b * v10;
            accb11 += b * v11;
            accb12 += b * v12;
            accb13 += b * v13;
            accb14 += b * v14;
            accb15 += b * v15;
        }
        workgroupBarrier();
    }
    let ma = m0 + 4u * lane;
    let mb = ma + 32u;
    let n = n0 + 16u * sg;
    store4(n + 0u, ma, acca0);
    store4(n + 1u, ma, acca1);
    store4(n + 2u, ma, acca2);
    store4(n + 3u, ma, acca3);
    store4(n + 4u, ma, acca4);
    store4(n + 5u, ma, acca5);
    store4(n + 6u, ma, acca6);
    store4(n + 7u, ma, acca7);
    store4(n + 8u, ma, acca8);
    store4(n + 9u, ma, acca9);
    store4(n + 10u, ma, acca10);
    store4(n + 11u, ma, acca11);
    store4(n + 12u, ma, acca12);
    store4(n + 13u, ma, acca13);
    store4(n + 14u, ma, acca14);
    store4(n + 15u, ma, acca15);
    store4(n + 0u, mb, accb0);
    store4(n + 1u, mb, accb1);
    store4(n + 2u, mb, accb2);
    store4(n + 3u, mb, accb3);
    store4(n + 4u, mb, accb4);
    store4(n + 5u, mb, accb5);
    store4(n + 6u, mb, accb6);
    store4(n + 7u, mb, accb7);
    store4(n + 8u, mb, accb8);
    store4(n + 9u, mb, accb9);
    store4(n + 10u, mb, accb10);
    store4(n + 11u, mb, accb11);
    store4(n + 12u, mb, accb12);
    store4(n + 13u, mb, accb13);
    store4(n + 14u, mb, accb14);
    store4(n + 15u, mb, accb15);
}
#endif
