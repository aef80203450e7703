// matmul.wgsl — out = x · Wᵀ for many activation rows (prefill).
//
// `main` (any adapter): a tile of 64 weight rows × 64 activation rows per workgroup of 128, 32
// values of k a step. Each step, invocation t decodes four values of weight rows t/8, t/8 + 16, …
// (eight consecutive invocations cover one row's 32 values, so a subgroup reads four rows'
// contiguous bytes) and loads four values of activation rows likewise, as vec4s; both go into
// workgroup memory transposed ([k][row], four rows per vec4), each vec4 slot index XORed with
// (k / 4) mod 8 so that the stores of a subgroup fall in 32 different banks and its reads stay
// whole vec4s. The next step's weights and activations are loaded into registers while this
// step's products are summed. Each invocation accumulates 8 weight rows × 4 activation rows in
// f32: per k, three vec4 reads for 32 multiply-adds.
// Up to three weights of one type and width (Q/K/V) run as one dispatch over their rows, a tile
// never straddling two (`NW2`, `NW3`). `GLU_SILU` / `GLU_GELU` (with NW2): a tile holds gate rows
// g..g+31 and up rows g..g+31, which the same invocations sum, and writes act(gate) · up only.
//
// `main_sg8` (`SG8`, subgroups of exactly 8: lavapipe): one weight; see below.
// `main_coop` (`COOP`): the same tiles multiplied by cooperative matrices (tensor cores) in f16;
// `COOP_EMU` computes the same fragments in plain WGSL, for testing without them. See below.

#include "coop"
#include "common"

struct Params {
    k: u32,          // values per weight row
    n: u32,          // activation rows
    groups: u32,     // k / 16, rounded up
    row_bytes: u32,
    m0: u32, m1: u32, m2: u32,                 // rows of each weight
    stride0: u32, stride1: u32, stride2: u32,  // values per output row
    off0: u32, off1: u32, off2: u32,           // first output column written
    tiles0: u32, tiles1: u32,                  // 64-row tiles of weights 0 and 1
    trace_threads: u32,                        // TRACE: invocations in the grid
}

@group(0) @binding(0) var<uniform> p: Params;
#if XH
// (`main_coop`) The activations as the rounding pass wrote them for it, f16 (round_acts.wgsl's
// HALF), four to a load; rows a multiple of 4 long.
@group(0) @binding(1) var<storage, read> x: array<vec4<f16>>;
#else
#if X4
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
#else
@group(0) @binding(1) var<storage, read> x: array<f32>;
#endif
#endif
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

// The weight the decoders read.
var<private> sel: u32;

#if TRACE
// Each global load's word (bits 28..: 0-2 the weight, 3 x, 4 x as a vec4) and each
// workgroup-memory access (5: a word stored, 6: a vec4 read; words of wt, then of xt).
#include "trace"
#endif

fn word(i: u32) -> u32 {
#if TRACE
    record((sel << 28u) | i);
#endif
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

const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 32u;

#if SG8
#else
#if COOP || COOP_EMU
#else
// [BK][16] vec4s: four consecutive weight (activation) rows per vec4, slots swizzled by `at`.
var<workgroup> wt: array<vec4<f32>, 512>;
var<workgroup> xt: array<vec4<f32>, 512>;

// The vec4 holding rows 4s..4s+3 at k offset kk of a tile.
fn at(kk: u32, s: u32) -> u32 {
    return kk * 16u + (s ^ ((kk >> 2u) & 7u));
}
#endif

// Tile `t`'s weight and first row; a row r of the tile is weight row first + r (GLU: r < 32 a
// gate row first + r, else the up row first + r - 32).
struct Tile {
    sel: u32,
    first: u32,
}

fn tile(t: u32) -> Tile {
#if GLU_SILU || GLU_GELU
    return Tile(0u, t * 32u);
#else
    if (t < p.tiles0) {
        return Tile(0u, t * BM);
    }
    if (t < p.tiles0 + p.tiles1) {
        return Tile(1u, (t - p.tiles0) * BM);
    }
    return Tile(2u, (t - p.tiles0 - p.tiles1) * BM);
#endif
}

fn rows_of(s: u32) -> u32 {
    if (s == 1u) {
        return p.m1;
    }
    if (s == 2u) {
        return p.m2;
    }
    return p.m0;
}

// Weights k..k+3 of tile row r (zeros past the matrix).
fn weight4(tl: Tile, r: u32, k: u32) -> vec4<f32> {
#if GLU_SILU || GLU_GELU
    sel = r / 32u;
    let row = tl.first + r % 32u;
#else
    sel = tl.sel;
    let row = tl.first + r;
#endif
    let g = k / 16u;
    if (row >= rows_of(sel) || g >= p.groups) {
        return vec4<f32>(0.0);
    }
    return dq4(row * p.row_bytes, g, (k / 4u) % 4u);
}

#if XH
#else
// Activations k..k+3 of activation row n (zeros past the matrix).
fn act4(n: u32, k: u32) -> vec4<f32> {
#if X4
    let live = n < p.n && k < p.k;
#if TRACE
    record(select(0xffffffffu, (4u << 28u) | (n * p.k + k), live));
#endif
    if (live) {
        return x[(n * p.k + k) / 4u];
    }
    return vec4<f32>(0.0);
#else
    var v = vec4<f32>(0.0);
    for (var c = 0u; c < 4u; c++) {
        let live = n < p.n && k + c < p.k;
#if TRACE
        record(select(0xffffffffu, (3u << 28u) | (n * p.k + k + c), live));
#endif
        if (live) {
            v[c] = x[n * p.k + k + c];
        }
    }
    return v;
#endif
}
#endif

#if TRACE
fn trace_store(tile: u32, slot: u32, c: u32) {
    record((5u << 28u) | (tile * 2048u + slot * 4u + c));
}

fn trace_read(tile: u32, slot: u32) {
    record((6u << 28u) | (tile * 2048u + slot * 4u));
}
#endif

// Outputs of tile rows r..r+3 for activation row n.
fn store4(tl: Tile, n: u32, r: u32, v: vec4<f32>) {
    if (n >= p.n) {
        return;
    }
    let s = tl.sel;
    for (var i = 0u; i < 4u; i++) {
        let row = tl.first + r + i;
        if (row < rows_of(s)) {
            if (s == 0u) {
                out0[n * p.stride0 + p.off0 + row] = v[i];
            }
#if NW2 || NW3
            if (s == 1u) {
                out1[n * p.stride1 + p.off1 + row] = v[i];
            }
#endif
#if NW3
            if (s == 2u) {
                out2[n * p.stride2 + p.off2 + row] = v[i];
            }
#endif
        }
    }
}

#if COOP || COOP_EMU
#else
@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let tl = tile(wid.x);
    let n0 = wid.y * BN;
#if TRACE
    trace_thread = flat_wg(wid, nwg) * 128u + lid;
#endif
    // The loads: rows lid/8 + 16j, values 4c..4c+3 of the step.
    let lr = lid / 8u;
    let c = lid % 8u;
    // The sums: weight rows 4tm..4tm+3 and 32+4tm..32+4tm+3, activation rows 4tn..4tn+3.
    let tm = lid % 8u;
    let tn = lid / 8u;
    var a0 = vec4<f32>(0.0);
    var a1 = vec4<f32>(0.0);
    var a2 = vec4<f32>(0.0);
    var a3 = vec4<f32>(0.0);
    var b0 = vec4<f32>(0.0);
    var b1 = vec4<f32>(0.0);
    var b2 = vec4<f32>(0.0);
    var b3 = vec4<f32>(0.0);
    // This step's loads, held in registers until stored.
    var w = array<vec4<f32>, 4>();
    var v = array<vec4<f32>, 4>();
    for (var j = 0u; j < 4u; j++) {
        w[j] = weight4(tl, lr + 16u * j, 4u * c);
        v[j] = act4(n0 + lr + 16u * j, 4u * c);
    }
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
        for (var j = 0u; j < 4u; j++) {
            let r = lr + 16u * j;
            for (var i = 0u; i < 4u; i++) {
                wt[at(4u * c + i, r / 4u)][r % 4u] = w[j][i];
                xt[at(4u * c + i, r / 4u)][r % 4u] = v[j][i];
#if TRACE
                trace_store(0u, at(4u * c + i, r / 4u), r % 4u);
                trace_store(1u, at(4u * c + i, r / 4u), r % 4u);
#endif
            }
        }
        workgroupBarrier();
        // The next step's loads go out before this step's sums.
        if (k0 + BK < p.k) {
            for (var j = 0u; j < 4u; j++) {
                w[j] = weight4(tl, lr + 16u * j, k0 + BK + 4u * c);
                v[j] = act4(n0 + lr + 16u * j, k0 + BK + 4u * c);
            }
        }
        for (var kk = 0u; kk < BK; kk++) {
            let wa = wt[at(kk, tm)];
            let wb = wt[at(kk, 8u + tm)];
            let xv = xt[at(kk, tn)];
#if TRACE
            trace_read(0u, at(kk, tm));
            trace_read(0u, at(kk, 8u + tm));
            trace_read(1u, at(kk, tn));
#endif
            a0 += wa * xv.x;
            a1 += wa * xv.y;
            a2 += wa * xv.z;
            a3 += wa * xv.w;
            b0 += wb * xv.x;
            b1 += wb * xv.y;
            b2 += wb * xv.z;
            b3 += wb * xv.w;
        }
        workgroupBarrier();
    }
    let n = n0 + 4u * tn;
#if GLU_SILU || GLU_GELU
    // Gate rows 4tm.. in a, up rows 32+4tm.. in b: the same outputs.
    let gated = array<vec4<f32>, 4>(
        vec4<f32>(act(a0.x), act(a0.y), act(a0.z), act(a0.w)) * b0,
        vec4<f32>(act(a1.x), act(a1.y), act(a1.z), act(a1.w)) * b1,
        vec4<f32>(act(a2.x), act(a2.y), act(a2.z), act(a2.w)) * b2,
        vec4<f32>(act(a3.x), act(a3.y), act(a3.z), act(a3.w)) * b3,
    );
    let gl = Tile(0u, tl.first);
    for (var j = 0u; j < 4u; j++) {
        store4(gl, n + j, 4u * tm, gated[j]);
    }
#else
    store4(tl, n, 4u * tm, a0);
    store4(tl, n + 1u, 4u * tm, a1);
    store4(tl, n + 2u, 4u * tm, a2);
    store4(tl, n + 3u, 4u * tm, a3);
    store4(tl, n, 32u + 4u * tm, b0);
    store4(tl, n + 1u, 32u + 4u * tm, b1);
    store4(tl, n + 2u, 32u + 4u * tm, b2);
    store4(tl, n + 3u, 32u + 4u * tm, b3);
#endif
}
#else
// `main_coop`: the tile of `main` (64 weight rows × 64 activation rows, 32 values of k a step,
// up to three weights, the gated pair) multiplied by cooperative matrices: each step's weights
// and activations are stored in workgroup memory as f16 (as llama.cpp's coopmat matmul does) and
// each of four subgroups (`COOP`: {{WG}} invocations, subgroups of {{WG}} / 4) multiplies its
// quarter of the tile, 32 activation rows × 32 weight rows, as 2 × 2 fragments of 16 × 16 in f32,
// two fragment steps of 16 values of k a step. The fragments are staged in workgroup memory and
// written with the bounds and epilogue of `main`.
// `COOP_WIDE`: 128 activation rows a tile (each dequantized weight serves twice the rows), a
// quarter 64 × 32 as 4 × 2 fragments, staged and written in two halves of 32 rows a quarter.
// `COOP_EMU`: the same kernel with the fragments' loads, multiply-adds and stores written out in
// WGSL over the same workgroup memory (invocations 32q..32q+31 standing for subgroup q), so that
// an adapter without cooperative matrices (lavapipe, in CI) runs every other line of it.

// Row strides of the f16 tiles in vec4s ([row][k]: BK values and 8 of padding, rows 80 bytes
// apart, a multiple of 16 as fragment loads want, and staggered across banks; a fragment's
// offset and stride count vec4s, whose values it takes in order, as llama.cpp's coopmat GEMM
// loads its f16vec2 tiles) and of the staged outputs ([activation row][weight row]: 64 and 4,
// 272 bytes).
const XS: u32 = 10u;
const SS: u32 = 68u;
const CWG: u32 = {{WG}}u;
#if COOP_WIDE
const CBN: u32 = 128u;
#else
const CBN: u32 = 64u;
#endif
// Vec4s of the weight and of the activation tile an invocation loads a step.
const LOADS: u32 = 512u / CWG;
const XLOADS: u32 = CBN * 8u / CWG;

var<workgroup> xs: array<vec4<f16>, CBN * XS>; // [CBN][XS]: activations
var<workgroup> ws: array<vec4<f16>, BM * XS>;  // [BM][XS]: weights
var<workgroup> stage: array<f32, 4352>; // [64][SS]: outputs (of half the rows, COOP_WIDE)

// f16 as the tiles hold it, clamped to its range (round_acts.wgsl's HALF writes the same).
fn half4(v: vec4<f32>) -> vec4<f16> {
    return vec4<f16>(clamp(v, vec4<f32>(-65504.0), vec4<f32>(65504.0)));
}

// Activations k..k+3 of activation row n as the tile holds them (zeros past the matrix).
fn act_half(n: u32, k: u32) -> vec4<f16> {
#if XH
    if (n < p.n && k < p.k) {
        return x[(n * p.k + k) / 4u];
    }
    return vec4<f16>(0.0);
#else
    return half4(act4(n, k));
#endif
}

#if COOP_EMU
// Value i of a tile (i counts f16 values).
fn xs_at(i: u32) -> f32 {
    return f32(xs[i / 4u][i % 4u]);
}

fn ws_at(i: u32) -> f32 {
    return f32(ws[i / 4u][i % 4u]);
}
#endif

#if COOP_EMU
// c + A · B for the A fragment at xs[a] (row-major, stride XS) and the B fragment at ws[b]
// (column-major: column j is weight row j), as coopMultiplyAdd of coopLoadT and coopLoad (a, b
// and XS count vec4s).
fn mma(a: u32, b: u32, c: Frag, l: u32) -> Frag {
    var r = c;
    let col = 4u * (b + (l % 16u) * XS);
    for (var t = 0u; t < 8u; t++) {
        let row = 4u * (a + (2u * t + l / 16u) * XS);
        var s = 0.0;
        for (var kk = 0u; kk < 16u; kk++) {
            s += xs_at(row + kk) * ws_at(col + kk);
        }
        r[t] += s;
    }
    return r;
}

#endif

// Output of tile row r for activation row n.
fn store1(tl: Tile, n: u32, r: u32, v: f32) {
    let row = tl.first + r;
    let s = tl.sel;
    if (n >= p.n || row >= rows_of(s)) {
        return;
    }
    if (s == 0u) {
        out0[n * p.stride0 + p.off0 + row] = v;
    }
#if NW2 || NW3
    if (s == 1u) {
        out1[n * p.stride1 + p.off1 + row] = v;
    }
#endif
#if NW3
    if (s == 2u) {
        out2[n * p.stride2 + p.off2 + row] = v;
    }
#endif
}

// Writes the staged outputs of half `h` of the tile's activation rows (COOP_WIDE; else all of
// them, h = 0): stage row s holds the tile's activation row (s / 32) · CBN / 2 + 32h + s % 32.
// Consecutive invocations write consecutive outputs of an activation row.
fn write_stage(tl: Tile, n0: u32, lid: u32, h: u32) {
#if GLU_SILU || GLU_GELU
    // Gate rows in the tile's weight rows 0..31, the up rows of the same outputs in 32..63.
    let gl = Tile(0u, tl.first);
    for (var e = lid; e < 64u * 32u; e += CWG) {
        let s = e / 32u;
        let m = e % 32u;
        let n = n0 + (s / 32u) * (CBN / 2u) + 32u * h + s % 32u;
        store1(gl, n, m, act(stage[s * SS + m]) * stage[s * SS + 32u + m]);
    }
#else
    for (var e = lid; e < 64u * BM; e += CWG) {
        let s = e / BM;
        let m = e % BM;
        let n = n0 + (s / 32u) * (CBN / 2u) + 32u * h + s % 32u;
        store1(tl, n, m, stage[s * SS + m]);
    }
#endif
}

@compute @workgroup_size({{WG}})
fn main_coop(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32
#if COOP
             , @builtin(subgroup_id) sg: u32
#endif
             ) {
    let tl = tile(wid.x);
    let n0 = wid.y * CBN;
#if COOP
    let quarter = sg;
#else
    let quarter = lid / 32u;
    let lane = lid % 32u;
#endif
    // This subgroup's quarter: activation rows qn · CBN / 2.., weight rows 32qm.. of the tile;
    // fragment cij holds its activation rows 16i.. and weight rows 16j...
    let qn = quarter / 2u;
    let qm = quarter % 2u;
#if COOP
    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
#if COOP_WIDE
    var c20 = coop_mat16x16<f32, C>();
    var c21 = coop_mat16x16<f32, C>();
    var c30 = coop_mat16x16<f32, C>();
    var c31 = coop_mat16x16<f32, C>();
#endif
#else
    var c00 = Frag();
    var c01 = Frag();
    var c10 = Frag();
    var c11 = Frag();
#if COOP_WIDE
    var c20 = Frag();
    var c21 = Frag();
    var c30 = Frag();
    var c31 = Frag();
#endif
#endif
    // This step's loads, held in registers as f16 until stored: vec4 e = lid + CWG j of each
    // tile is row e / 8, values 4(e % 8).. of the step (eight invocations read a row's 32
    // values), stored whole at the tile's vec4 (e / 8) XS + e % 8.
    var w = array<vec4<f16>, LOADS>();
    var v = array<vec4<f16>, XLOADS>();
    for (var j = 0u; j < LOADS; j++) {
        let e = lid + CWG * j;
        w[j] = half4(weight4(tl, e / 8u, 4u * (e % 8u)));
    }
    for (var j = 0u; j < XLOADS; j++) {
        let e = lid + CWG * j;
        v[j] = act_half(n0 + e / 8u, 4u * (e % 8u));
    }
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
        for (var j = 0u; j < LOADS; j++) {
            let e = lid + CWG * j;
            ws[(e / 8u) * XS + e % 8u] = w[j];
        }
        for (var j = 0u; j < XLOADS; j++) {
            let e = lid + CWG * j;
            xs[(e / 8u) * XS + e % 8u] = v[j];
        }
        workgroupBarrier();
        // The next step's loads go out before this step's products.
        if (k0 + BK < p.k) {
            for (var j = 0u; j < LOADS; j++) {
                let e = lid + CWG * j;
                w[j] = half4(weight4(tl, e / 8u, k0 + BK + 4u * (e % 8u)));
            }
            for (var j = 0u; j < XLOADS; j++) {
                let e = lid + CWG * j;
                v[j] = act_half(n0 + e / 8u, k0 + BK + 4u * (e % 8u));
            }
        }
        for (var kk = 0u; kk < BK; kk += 16u) {
            let a0 = qn * (CBN / 2u) * XS + kk / 4u;
            let a1 = a0 + 16u * XS;
            let b0 = qm * 32u * XS + kk / 4u;
            let b1 = b0 + 16u * XS;
#if COOP
            let fb0 = coopLoad<coop_mat16x16<f16, B>>(&ws[b0], XS);
            let fb1 = coopLoad<coop_mat16x16<f16, B>>(&ws[b1], XS);
            let fa0 = coopLoadT<coop_mat16x16<f16, A>>(&xs[a0], XS);
            let fa1 = coopLoadT<coop_mat16x16<f16, A>>(&xs[a1], XS);
            c00 = coopMultiplyAdd(fa0, fb0, c00);
            c01 = coopMultiplyAdd(fa0, fb1, c01);
            c10 = coopMultiplyAdd(fa1, fb0, c10);
            c11 = coopMultiplyAdd(fa1, fb1, c11);
#if COOP_WIDE
            let fa2 = coopLoadT<coop_mat16x16<f16, A>>(&xs[a0 + 32u * XS], XS);
            let fa3 = coopLoadT<coop_mat16x16<f16, A>>(&xs[a0 + 48u * XS], XS);
            c20 = coopMultiplyAdd(fa2, fb0, c20);
            c21 = coopMultiplyAdd(fa2, fb1, c21);
            c30 = coopMultiplyAdd(fa3, fb0, c30);
            c31 = coopMultiplyAdd(fa3, fb1, c31);
#endif
#else
            c00 = mma(a0, b0, c00, lane);
            c01 = mma(a0, b1, c01, lane);
            c10 = mma(a1, b0, c10, lane);
            c11 = mma(a1, b1, c11, lane);
#if COOP_WIDE
            c20 = mma(a0 + 32u * XS, b0, c20, lane);
            c21 = mma(a0 + 32u * XS, b1, c21, lane);
            c30 = mma(a0 + 48u * XS, b0, c30, lane);
            c31 = mma(a0 + 48u * XS, b1, c31, lane);
#endif
#endif
        }
        workgroupBarrier();
    }
    // The stage holds 32 activation rows of each quarter at a time: rows 32qn.. of it.
    let s00 = qn * 32u * SS + qm * 32u;
    let s01 = s00 + 16u;
    let s10 = s00 + 16u * SS;
    let s11 = s10 + 16u;
#if COOP
    coopStoreT(c00, &stage[s00], SS);
    coopStoreT(c01, &stage[s01], SS);
    coopStoreT(c10, &stage[s10], SS);
    coopStoreT(c11, &stage[s11], SS);
#else
    frag_store(c00, s00, lane);
    frag_store(c01, s01, lane);
    frag_store(c10, s10, lane);
    frag_store(c11, s11, lane);
#endif
    workgroupBarrier();
    write_stage(tl, n0, lid, 0u);
#if COOP_WIDE
    // Every invocation has read the first half before the second overwrites it.
    workgroupBarrier();
#if COOP
    coopStoreT(c20, &stage[s00], SS);
    coopStoreT(c21, &stage[s01], SS);
    coopStoreT(c30, &stage[s10], SS);
    coopStoreT(c31, &stage[s11], SS);
#else
    frag_store(c20, s00, lane);
    frag_store(c21, s01, lane);
    frag_store(c30, s10, lane);
    frag_store(c31, s11, lane);
#endif
    workgroupBarrier();
    write_stage(tl, n0, lid, 1u);
#endif
}
#endif
#endif

#if SG8
// For adapters whose subgroups are exactly 8 wide (lavapipe): a tile of 64 weight rows × 128
// activation rows per workgroup of 64. Lane l of subgroup s accumulates weight rows 4l..4l+3 and
// 32+4l..32+4l+3 against activation rows 16s..16s+15: per step of k it reads two vec4s of weights
// and two activation values, and takes the other fourteen from its subgroup's lanes by
// subgroupBroadcast (a register move there, where every workgroup-memory read is a per-lane loop).
var<workgroup> wsg: array<vec4<f32>, 512>;  // [BK][16]: four consecutive weight rows per vec4
var<workgroup> xsg: array<f32, 4096>;       // [BK][128]

fn store_rows(n: u32, m: u32, v: vec4<f32>) {
    if (n < p.n) {
        let o = n * p.stride0 + p.off0 + m;
        for (var i = 0u; i < 4u; i++) {
            if (m + i < p.m0) {
                out0[o + i] = v[i];
            }
        }
    }
}

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
    let live = m0 + lid < p.m0;
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
    store_rows(n + 0u, ma, acca0);
    store_rows(n + 1u, ma, acca1);
    store_rows(n + 2u, ma, acca2);
    store_rows(n + 3u, ma, acca3);
    store_rows(n + 4u, ma, acca4);
    store_rows(n + 5u, ma, acca5);
    store_rows(n + 6u, ma, acca6);
    store_rows(n + 7u, ma, acca7);
    store_rows(n + 8u, ma, acca8);
    store_rows(n + 9u, ma, acca9);
    store_rows(n + 10u, ma, acca10);
    store_rows(n + 11u, ma, acca11);
    store_rows(n + 12u, ma, acca12);
    store_rows(n + 13u, ma, acca13);
    store_rows(n + 14u, ma, acca14);
    store_rows(n + 15u, ma, acca15);
    store_rows(n + 0u, mb, accb0);
    store_rows(n + 1u, mb, accb1);
    store_rows(n + 2u, mb, accb2);
    store_rows(n + 3u, mb, accb3);
    store_rows(n + 4u, mb, accb4);
    store_rows(n + 5u, mb, accb5);
    store_rows(n + 6u, mb, accb6);
    store_rows(n + 7u, mb, accb7);
    store_rows(n + 8u, mb, accb8);
    store_rows(n + 9u, mb, accb9);
    store_rows(n + 10u, mb, accb10);
    store_rows(n + 11u, mb, accb11);
    store_rows(n + 12u, mb, accb12);
    store_rows(n + 13u, mb, accb13);
    store_rows(n + 14u, mb, accb14);
    store_rows(n + 15u, mb, accb15);
}
#endif
