// matvec_blocks.wgsl — the decode mat-vec for the types GPUs run most (Q4_0, Q8_0, Q4_K, Q5_K,
// Q6_K), shaped as llama.cpp's Vulkan mul_mat_vec_*: each weight word is loaded straight into
// registers by the invocation that uses it, with no staging through workgroup memory.
//
// Sixteen invocations take 256 values of a row (a K-quant superblock, eight legacy blocks), 16
// values each (Q4_K/Q5_K: 8 bytes of one 32-byte group of nibbles, two sub-blocks; Q6_K: 4
// positions of each quarter of one half; Q4_0/Q8_0: half a block), so the 16 read the quants as
// adjacent words and the scales as the same few words. A workgroup of WG invocations takes WG / 16
// such runs of each of its ROWS rows a step, x's 16 values loaded once a step for all the rows.
// x is rounded as the CPU's Q8_K or Q8_0 blocks leave it (ROUND_Q8K, ROUND_Q8_0:
// round_acts.wgsl bit for bit): each invocation's largest |x| goes to workgroup memory, and the
// `GROUP` invocations of an activation block give its maximum after one barrier a step. The sums
// are added up over the workgroup at the end (matvec_rows.wgsl), as in matvec.wgsl, whose row
// slots (fused weights, the gated pair) this kernel shares. Rows are a whole number of 256 values.
//
// IDOT (Q4_K, Q5_K, Q6_K): x arrives quantized once as packed Q8_K blocks (round_acts.wgsl's
// PACKED variant), so there is no rounding and no barrier in the loop; each part's weights are
// taken as bytes and multiplied by x's with dot4I8Packed, its sub-block sums scaled as integers,
// one or two int→float conversions per 16 weights (llama.cpp's mul_mat_vecq).
// The per-invocation sums are exact integers as the CPU's; only the float sums after differ.
// GLU_PACK: the gated activation is also written as packed Q8_K blocks (matvec_rows.wgsl);
// NORM_ADD: the sums go into the residual stream, and the next block's input norm follows
// (matvec_rows.wgsl).

#include "common"
#include "matvec_rows"

const WG: u32 = {{WG}}u;
const ROWS: u32 = {{ROWS}}u;
const PER_STEP: u32 = WG / 16u;  // runs of 256 values of a row a step
const RUN_BYTES: u32 = {{RUN_BYTES}}u;  // a run's bytes in a row

#if ROUND_Q8K || ROUND_Q8_0
// Each invocation's largest |x| this step, in two halves used by turns (one barrier a step).
var<workgroup> part_max: array<f32, {{PART_WORDS}}>;
#endif
#if ROUND_Q8K
const GROUP: u32 = 16u;  // invocations that share an activation block

fn round4(v: vec4<f32>, amax: f32) -> vec4<f32> {
    return q8_k_values(v, amax);
}
#endif
#if ROUND_Q8_0
const GROUP: u32 = 2u;

fn round4(v: vec4<f32>, amax: f32) -> vec4<f32> {
    return q8_0_values(v, amax);
}
#endif

// Word i of weight `sel`, and (W2) its 8-byte unit i, as the decoders load them (recorded in
// the TRACE variant; the trace lines invocations up by the order of their records, so a traced
// shape has every row and run live).
fn wload(sel: u32, i: u32) -> u32 {
#if TRACE
    record((sel << 28u) | i);
#endif
    return load(sel, i);
}

#if W2
fn wload_unit(sel: u32, i: u32) -> vec2<u32> {
#if TRACE
    record((7u << 28u) | (2u * i));
#endif
    return load_unit(sel, i);
}
#endif

// Four bytes of weight `sel` at byte `b`, a multiple of 2 (Q6_K's 210-byte blocks leave every
// other block 2-aligned).
fn u32_at2(sel: u32, b: u32) -> u32 {
    let lo = wload(sel, b >> 2u);
    if ((b & 2u) == 0u) {
#if TRACE
        record(0xffffffffu);  // the load the other alignment makes
#endif
        return lo;
    }
    return (lo >> 16u) | (wload(sel, (b >> 2u) + 1u) << 16u);
}

fn nibbles(w: u32, shift: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(w) >> vec4<u32>(shift, shift + 8u, shift + 16u, shift + 24u)) & vec4<u32>(0xfu));
}

// Each type splits its part of a run in two: `fetch` loads the part's weight words (issued
// before the step's barrier, so that their latency overlaps x's), `part_dot` multiplies them
// by x0..x3 (the part's 16 values of x).
struct Words {
    a: vec4<u32>,
    b: vec4<u32>,
}

#if Q4_0 || Q8_0
// Half t % 2 of block t / 2: 16 consecutive values.
fn part_value_legacy(t: u32, q: u32) -> u32 {
    return 16u * t + 4u * q;
}

// The part's 16 quants (Q4_0: 16 bytes of nibbles, read a half of each) and the block's scale.
fn fetch_legacy(sel: u32, b: u32, t: u32) -> Words {
#if Q4_0
    let blk = b + 18u * (t >> 1u);
    let q = blk + 2u;
#else
    let blk = b + 34u * (t >> 1u);
    let q = blk + 2u + 16u * (t & 1u);
#endif
    let d = (wload(sel, blk >> 2u) >> ((blk & 2u) * 8u)) & 0xffffu;
    return Words(vec4<u32>(u32_at2(sel, q), u32_at2(sel, q + 4u), u32_at2(sel, q + 8u), u32_at2(sel, q + 12u)),
        vec4<u32>(d, 0u, 0u, 0u));
}
#endif

#if Q4_0
fn part_dot_legacy(w: Words, t: u32, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>) -> f32 {
    let sh = 4u * (t & 1u);  // the low nibbles are values 0-15, the high ones 16-31
    let v = dot(nibbles(w.a.x, sh) - 8.0, x0) + dot(nibbles(w.a.y, sh) - 8.0, x1)
        + dot(nibbles(w.a.z, sh) - 8.0, x2) + dot(nibbles(w.a.w, sh) - 8.0, x3);
    return unpack2x16float(w.b.x).x * v;
}
#endif

#if Q8_0
fn ibytes4(w: u32) -> vec4<f32> {
    return vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(w) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u));
}

fn part_dot_legacy(w: Words, t: u32, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>) -> f32 {
    let v = dot(ibytes4(w.a.x), x0) + dot(ibytes4(w.a.y), x1) + dot(ibytes4(w.a.z), x2) + dot(ibytes4(w.a.w), x3);
    return unpack2x16float(w.b.x).x * v;
}
#endif

#if Q4_K || Q5_K
// Value index (within its superblock) of the first of x's vec4 `q` (< 4) for part `t` (< 16):
// group t / 4, bytes 8 (t % 4) .. of it, the low nibbles (q < 2) then the high ones.
fn part_value_k45(t: u32, q: u32) -> u32 {
    return 64u * (t >> 2u) + 8u * (t & 3u) + 32u * (q >> 1u) + 4u * (q & 1u);
}

// The (scale, min) pair j of a block from its three scale words.
fn scale_min_int(s: vec4<u32>, j: u32) -> vec2<i32> {
    let sh = 8u * (j & 3u);
    if (j < 4u) {
        return vec2<i32>(i32((s.y >> sh) & 63u), i32((s.z >> sh) & 63u));
    }
    let sc = ((s.w >> sh) & 0xfu) | ((((s.y >> sh) >> 6u) & 3u) << 4u);
    let m = (((s.w >> sh) >> 4u) & 0xfu) | ((((s.z >> sh) >> 6u) & 3u) << 4u);
    return vec2<i32>(i32(sc), i32(m));
}

fn scale_min(s: vec4<u32>, j: u32) -> vec2<f32> {
    return vec2<f32>(scale_min_int(s, j));
}

// a: d and dmin, then the three scale words; b: the part's 8 bytes of nibbles, then (Q5_K) its
// 8 bytes of fifth bits. 144- and 176-byte blocks are read 8 bytes at a time (W2).
fn fetch_k45(sel: u32, b: u32, t: u32) -> Words {
    let u = b >> 3u;
    let a = vec4<u32>(wload_unit(sel, u), wload_unit(sel, u + 1u));
#if Q4_K
    let q = wload_unit(sel, u + 2u + 4u * (t >> 2u) + (t & 3u));
    return Words(a, vec4<u32>(q, 0u, 0u));
#else
    let q = wload_unit(sel, u + 6u + 4u * (t >> 2u) + (t & 3u));
    let h = wload_unit(sel, u + 2u + (t & 3u));
    return Words(a, vec4<u32>(q, h));
#endif
}

// Bit j of each byte of w.
fn bits(w: u32, j: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(w) >> vec4<u32>(j, j + 8u, j + 16u, j + 24u)) & vec4<u32>(1u));
}

fn part_dot_k45(w: Words, t: u32, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>) -> f32 {
    let c = t >> 2u;
    let dm = unpack2x16float(w.a.x);
    let lo = scale_min(w.a, 2u * c);
    let hi = scale_min(w.a, 2u * c + 1u);
#if Q4_K
    let dot_lo = dot(nibbles(w.b.x, 0u), x0) + dot(nibbles(w.b.y, 0u), x1);
    let dot_hi = dot(nibbles(w.b.x, 4u), x2) + dot(nibbles(w.b.y, 4u), x3);
#else
    // Each nibble with its fifth bit: bit j of the high-bit bytes for sub-block j.
    let dot_lo = dot(nibbles(w.b.x, 0u) + 16.0 * bits(w.b.z, 2u * c), x0)
        + dot(nibbles(w.b.y, 0u) + 16.0 * bits(w.b.w, 2u * c), x1);
    let dot_hi = dot(nibbles(w.b.x, 4u) + 16.0 * bits(w.b.z, 2u * c + 1u), x2)
        + dot(nibbles(w.b.y, 4u) + 16.0 * bits(w.b.w, 2u * c + 1u), x3);
#endif
    let one = vec4<f32>(1.0);
    let sum_lo = dot(x0 + x1, one);
    let sum_hi = dot(x2 + x3, one);
    return dm.x * (lo.x * dot_lo + hi.x * dot_hi) - dm.y * (lo.y * sum_lo + hi.y * sum_hi);
}
#endif

#if IDOT
#if Q4_K || Q5_K
// part_dot on packed Q8_K quants (xq: the part's 16, as x0..x3), without x's d: both sub-blocks'
// integer sums scaled and added as integers, two conversions a part. Q5_K's fifth bits join
// their nibbles as bit 4 of each byte.
fn part_idot_k45(w: Words, t: u32, xq: vec4<u32>) -> f32 {
    let c = t >> 2u;
    let dm = unpack2x16float(w.a.x);
    let lo = scale_min_int(w.a, 2u * c);
    let hi = scale_min_int(w.a, 2u * c + 1u);
    let m4 = 0x0f0f0f0fu;
#if Q4_K
    let q0 = w.b.x & m4;
    let q1 = w.b.y & m4;
    let q2 = (w.b.x >> 4u) & m4;
    let q3 = (w.b.y >> 4u) & m4;
#else
    let q0 = (w.b.x & m4) | (((w.b.z >> (2u * c)) & 0x01010101u) << 4u);
    let q1 = (w.b.y & m4) | (((w.b.w >> (2u * c)) & 0x01010101u) << 4u);
    let q2 = ((w.b.x >> 4u) & m4) | (((w.b.z >> (2u * c + 1u)) & 0x01010101u) << 4u);
    let q3 = ((w.b.y >> 4u) & m4) | (((w.b.w >> (2u * c + 1u)) & 0x01010101u) << 4u);
#endif
    let ones = 0x01010101u;
    let q = lo.x * (dot4I8Packed(q0, xq.x) + dot4I8Packed(q1, xq.y))
        + hi.x * (dot4I8Packed(q2, xq.z) + dot4I8Packed(q3, xq.w));
    let m = lo.y * (dot4I8Packed(ones, xq.x) + dot4I8Packed(ones, xq.y))
        + hi.y * (dot4I8Packed(ones, xq.z) + dot4I8Packed(ones, xq.w));
    return dm.x * f32(q) - dm.y * f32(m);
}
#endif
#endif

#if Q6_K
// Half t / 8 of the superblock, positions 4 (t % 8) .. of its quarter q.
fn part_value_q6k(t: u32, q: u32) -> u32 {
    return 128u * (t >> 3u) + 32u * q + 4u * (t & 7u);
}

fn sext8(v: u32) -> f32 {
    return f32((i32(v << 24u)) >> 24u);
}

// a: the low nibbles of quarters 0 and 2, of 1 and 3, the high bits, the half's first four
// scales; b: its last four, the block's d.
fn fetch_q6k(sel: u32, b: u32, t: u32) -> Words {
    let h = t >> 3u;
    let i0 = 4u * (t & 7u);
    let a = vec4<u32>(u32_at2(sel, b + 64u * h + i0), u32_at2(sel, b + 64u * h + 32u + i0),
        u32_at2(sel, b + 128u + 32u * h + i0), u32_at2(sel, b + 192u + 8u * h));
    let d = (wload(sel, (b + 208u) >> 2u) >> (((b + 208u) & 2u) * 8u)) & 0xffffu;
    return Words(a, vec4<u32>(u32_at2(sel, b + 196u + 8u * h), d, 0u, 0u));
}

fn part_dot_q6k(w: Words, t: u32, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>) -> f32 {
    let is = 8u * ((t & 7u) >> 2u);  // this run's scale of a pair, as a shift
    let high = vec4<u32>(w.a.z) >> vec4<u32>(0u, 8u, 16u, 24u);
    let v0 = nibbles(w.a.x, 0u) + 16.0 * vec4<f32>(high & vec4<u32>(3u)) - 32.0;
    let v1 = nibbles(w.a.y, 0u) + 16.0 * vec4<f32>((high >> vec4<u32>(2u)) & vec4<u32>(3u)) - 32.0;
    let v2 = nibbles(w.a.x, 4u) + 16.0 * vec4<f32>((high >> vec4<u32>(4u)) & vec4<u32>(3u)) - 32.0;
    let v3 = nibbles(w.a.y, 4u) + 16.0 * vec4<f32>((high >> vec4<u32>(6u)) & vec4<u32>(3u)) - 32.0;
    let sa = w.a.w;
    let sb = w.b.x;
    return unpack2x16float(w.b.y).x * (sext8((sa >> is) & 0xffu) * dot(v0, x0)
        + sext8((sa >> (16u + is)) & 0xffu) * dot(v1, x1) + sext8((sb >> is) & 0xffu) * dot(v2, x2)
        + sext8((sb >> (16u + is)) & 0xffu) * dot(v3, x3));
}
#endif

#if IDOT
#if Q6_K
// part_dot on packed Q8_K quants, without x's d: each quarter's 6-bit values joined as bytes
// (0..63), their offset of 32 taken off through x's sum, the four scaled sums added as integers
// and converted once.
fn part_idot_q6k(w: Words, t: u32, xq: vec4<u32>) -> f32 {
    let is = 8u * ((t & 7u) >> 2u);
    let m4 = 0x0f0f0f0fu;
    let m2 = 0x03030303u;
    let h = w.a.z;
    let v0 = (w.a.x & m4) | ((h & m2) << 4u);
    let v1 = (w.a.y & m4) | (((h >> 2u) & m2) << 4u);
    let v2 = ((w.a.x >> 4u) & m4) | (((h >> 4u) & m2) << 4u);
    let v3 = ((w.a.y >> 4u) & m4) | (((h >> 6u) & m2) << 4u);
    let k32 = 0x20202020u;
    let sa = bitcast<i32>(w.a.w);
    let sb = bitcast<i32>(w.b.x);
    let q = extractBits(sa, is, 8u) * (dot4I8Packed(v0, xq.x) - dot4I8Packed(k32, xq.x))
        + extractBits(sa, 16u + is, 8u) * (dot4I8Packed(v1, xq.y) - dot4I8Packed(k32, xq.y))
        + extractBits(sb, is, 8u) * (dot4I8Packed(v2, xq.z) - dot4I8Packed(k32, xq.z))
        + extractBits(sb, 16u + is, 8u) * (dot4I8Packed(v3, xq.w) - dot4I8Packed(k32, xq.w));
    return unpack2x16float(w.b.y).x * f32(q);
}
#endif
#endif

// The decoder of weight `sel`: the kernel's type's (DEC0: legacy, k45 or q6k), or with MIXED (the
// Q/K/V epilogue's weights of two K-quant families, integer dot products only) DEC1 for weights
// SECOND on, whose rows are RUN_BYTES1 a run and `p.row_bytes1` a row. A workgroup's rows are all
// of one weight, so every branch on the type is uniform.
fn second_type(sel: u32) -> bool {
#if MIXED
    return sel >= {{SECOND}}u;
#else
    return false;
#endif
}

fn part_value(sel: u32, t: u32, q: u32) -> u32 {
#if MIXED
    if (second_type(sel)) {
        return part_value_{{DEC1}}(t, q);
    }
#endif
    return part_value_{{DEC0}}(t, q);
}

// Where run `blk` of row `row` of weight `sel` starts.
fn run_start(sel: u32, row: u32, blk: u32) -> u32 {
#if MIXED
    if (second_type(sel)) {
        return row * p.row_bytes1 + blk * {{RUN_BYTES1}}u;
    }
#endif
    return row * p.row_bytes + blk * RUN_BYTES;
}

fn fetch(sel: u32, b: u32, t: u32) -> Words {
#if MIXED
    if (second_type(sel)) {
        return fetch_{{DEC1}}(sel, b, t);
    }
#endif
    return fetch_{{DEC0}}(sel, b, t);
}

#if IDOT
fn part_idot(sel: u32, w: Words, t: u32, xq: vec4<u32>) -> f32 {
#if MIXED
    if (second_type(sel)) {
        return part_idot_{{DEC1}}(w, t, xq);
    }
#endif
    return part_idot_{{DEC0}}(w, t, xq);
}
#else
fn part_dot(w: Words, t: u32, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>) -> f32 {
    return part_dot_{{DEC0}}(w, t, x0, x1, x2, x3);
}
#endif

#if IDOT
// The packed quants of x[e..e + 4] (e a multiple of 4).
fn xword(e: u32) -> u32 {
#if TRACE
    record((4u << 28u) | e);
#endif
    return x[(x_first + e) / 4u];
}
#else
// x[e..e + 4] (e a multiple of 4).
fn xload(e: u32) -> vec4<f32> {
#if TRACE
    record((4u << 28u) | e);
#endif
    return x[(x_first + e) / 4u];
}
#endif

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32 {{SG_ARGS}}) {
    {{SG_LOCALS}}
    let g = row_group(wid, nwg);
#if TRACE
    trace_thread = g * WG + lid;
#endif
    let t = lid & 15u;
    let blocks = p.k / 256u;
    var acc = vec4<f32>(0.0);
    var turn = 0u;
    var words: array<Words, ROWS>;
    // The weight of the workgroup's rows (MIXED: all of one type).
    let sel0 = slot(g, 0u).sel;
#if IDOT
    // Where this input row's block scales start: after every input row's quants.
    let x_scales = nwg.z * (p.k / 4u) + x_first / 256u;
#endif
    for (var b0 = 0u; b0 < blocks; b0 += PER_STEP) {
        let blk = b0 + lid / 16u;
        let live = blk < blocks;
        for (var s = 0u; s < ROWS; s++) {
            let sl = slot(g, s);
            if (live && sl.live) {
                words[s] = fetch(sl.sel, run_start(sl.sel, sl.row, blk), t);
            }
        }
#if IDOT
        var xq = vec4<u32>(0u);
        var xd = 0.0;
        if (live) {
            let first = 256u * blk;
            xq = vec4<u32>(xword(first + part_value(sel0, t, 0u)), xword(first + part_value(sel0, t, 1u)),
                xword(first + part_value(sel0, t, 2u)), xword(first + part_value(sel0, t, 3u)));
            xd = bitcast<f32>(x[x_scales + blk]);
            for (var s = 0u; s < ROWS; s++) {
                if (slot(g, s).live) {
                    acc[s] += xd * part_idot(sel0, words[s], t, xq);
                }
            }
        }
#else
        var x0 = vec4<f32>(0.0);
        var x1 = vec4<f32>(0.0);
        var x2 = vec4<f32>(0.0);
        var x3 = vec4<f32>(0.0);
        if (live) {
            let first = 256u * blk;
            x0 = xload(first + part_value(sel0, t, 0u));
            x1 = xload(first + part_value(sel0, t, 1u));
            x2 = xload(first + part_value(sel0, t, 2u));
            x3 = xload(first + part_value(sel0, t, 3u));
        }
#if ROUND_Q8K || ROUND_Q8_0
        let a = max(max(abs(x0), abs(x1)), max(abs(x2), abs(x3)));
        part_max[turn + lid] = max(max(a.x, a.y), max(a.z, a.w));
        workgroupBarrier();
        var amax = 0.0;
        let first = turn + (lid & ~(GROUP - 1u));
        for (var i = 0u; i < GROUP; i++) {
            amax = max(amax, part_max[first + i]);
        }
        x0 = round4(x0, amax);
        x1 = round4(x1, amax);
        x2 = round4(x2, amax);
        x3 = round4(x3, amax);
        turn = WG - turn;
#endif
        if (live) {
            for (var s = 0u; s < ROWS; s++) {
                if (slot(g, s).live) {
                    acc[s] += part_dot(words[s], t, x0, x1, x2, x3);
                }
            }
        }
#endif
    }
    finish_workgroup(g, acc, lid, sg_lane, sg_id, n_sg);
#if GLU_PACK
    pack_gated_block(g, lid);
#endif
#if NORM_ADD
    norm_tail(g, lid, sg_lane, sg_id, n_sg);
#endif
}
