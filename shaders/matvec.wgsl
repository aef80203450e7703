// matvec.wgsl — out = W · x for one activation row (decode), shaped for a GPU's memory system.
// On GPUs, Q4_0, Q8_0, Q4_K, Q5_K and Q6_K take matvec_blocks.wgsl instead (with it the 1B shape
// in Q4_K_M decodes 1.43× as fast on an H200); every other type, the experts' mat-vec and the
// direct layout (software adapters with subgroups) take this one. What both share (parameters,
// bindings, row slots) is in matvec_rows.wgsl.
//
// A workgroup computes `ROWS` weight rows and walks them in spans of `SPAN` values. Each span
// is staged twice over:
// 1. The raw bytes of each row's span are copied into workgroup memory as whole aligned 128-byte
//    lines (the rows' one range where they follow each other and fit one span): invocation i loads word i of the lines, so every subgroup-wide load reads one line
//    whole, whatever the block type (18-, 34-, 110- or 210-byte blocks included) and however
//    rows fall against lines. The block decoders (quants.wgsl) then read the tile, not the
//    buffer: `word(i)` maps a weight word to its place in the tile.
// 2. Invocation i takes runs i, i + WG, … of 16 values of the span, each with its four vec4s of
//    x, for all `ROWS` rows: the decoder's per-run work (a block's scales) is shared by the
//    run's four calls. (Four values an invocation a step, consecutive invocations reading
//    consecutive vec4s of x, ran about 5 % slower on an H200 at decode, 230 against 241
//    tokens/s with two rows a workgroup: x is a few KiB that every workgroup reads, from L1, so
//    its lines count for less than the decoders' arithmetic.)
// Each invocation keeps one f32 sum per row (a vec4: ROWS ≤ 4), summed over the workgroup at
// the end (subgroupAdd and workgroup memory, or a tree). One row per workgroup (two for the
// gated pair) ran fastest on an H200: 266 tokens/s on the 1B shape against 241-251 with two
// and 205 with four. The loads do not depend on the adapter's subgroup width, so a trace
// (`TRACE`, see src/backend/wgpu/trace.rs) measures them on any adapter.
//
// Up to three weights of one type and width (Q/K/V, gate/up) run as one dispatch over their
// concatenated rows (`NW2`, `NW3`), each writing its own output. `GLU_SILU` / `GLU_GELU` (with
// NW2, ROWS 2): workgroup g computes gate row g and up row g and writes out0[g] = act(gate · x) ·
// (up · x), the feed-forward's gated activation as the epilogue (out1 is not written).
// `EXPERT`: llama.cpp's mul_mat_id for one activation row per slot (a token's chosen experts):
// workgroup (x, y) computes rows ROWS·x.. of slot y's expert, reading the stacked expert weight
// in place (`selected` holds each slot's expert; a part of a split weight computes the rows it
// holds), the input row being the slot's own or its token's.
// `ROUND_Q8_0`, `ROUND_Q8K`, `ROUND_F16`, `ROUND_BF16` (staged): x is rounded as the weight
// type's CPU dot product takes it (shaders/round_acts.wgsl, bit for bit) as it is read, instead
// of by a dispatch of its own before the mat-vec. The largest magnitude of each run of x is
// found while the span is staged (and, for Q8_K, of each 256), in workgroup memory read after
// the staging barrier: a Q8_0 block is two runs, a Q8_K block sixteen.
// `X4`: x is read as vec4s (k a multiple of 4); otherwise as four scalars, zeros past k (a float
// weight whose width is not a multiple of 16 is padded with zeros on the device).
//
// `DIRECT` (software adapters such as lavapipe, with subgroups): no staging. There loads cost
// the same whatever their pattern and every workgroup-memory access is a per-lane loop, so
// each subgroup takes whole rows (`ROWS` per workgroup: one per subgroup of the smallest size)
// and its lanes stride over a row's runs of 16 values, decoding the buffer in place.

#include "common"
#include "matvec_rows"

const WG: u32 = {{WG}}u;
const ROWS: u32 = {{ROWS}}u;
const SPAN: u32 = {{SPAN}}u;           // a multiple of 256 and of 4 · WG
const TILE_ROW: u32 = {{TILE_ROW}}u;   // words: the aligned lines a span of a row can touch
const BLOCK_LEN: u32 = {{BLOCK_LEN}}u;
const BLOCK_BYTES: u32 = {{BLOCK_BYTES}}u;

#if DIRECT
#else
var<workgroup> tile: array<u32, {{TILE_WORDS}}>;  // ROWS × TILE_ROW
#endif
#if ROUND_Q8_0 || ROUND_Q8K
// Per run of 16 values of the span: the largest |x|; then (Q8_K) per 256.
var<workgroup> run_max: array<f32, {{RUN_WORDS}}>;
var<workgroup> block_max: array<f32, {{BLOCK_WORDS}}>;
#endif

#if DIRECT
// The weight the decoders read.
var<private> cur_sel: u32;

fn word(i: u32) -> u32 {
    return load(cur_sel, i);
}
#else
// The tile region the decoders read: tile[tile_at] holds weight word tile_first.
var<private> tile_at: u32;
var<private> tile_first: u32;

fn word(i: u32) -> u32 {
    return tile[tile_at + i - tile_first];
}
#endif

#include "quants"

// Byte offset of value v (a multiple of the block length) within a row.
fn value_bytes(v: u32) -> u32 {
    return v / BLOCK_LEN * BLOCK_BYTES;
}

// The first weight word staged for a span starting at byte `b` of its row `row`.
fn first_word(row: u32, b: u32) -> u32 {
    return (row * p.row_bytes + b) / 128u * 32u;
}

// x[e..e + 4]; zeros where `live` is false or past k.
fn x4(e: u32, live: bool) -> vec4<f32> {
    let at = x_first + e;
#if X4
#if TRACE
    record(select(0xffffffffu, (4u << 28u) | at, live));
#endif
    if (live) {
        return x[at / 4u];
    }
    return vec4<f32>(0.0);
#else
    var v = vec4<f32>(0.0);
    for (var c = 0u; c < 4u; c++) {
        let ok = live && e + c < p.k;
#if TRACE
        record(select(0xffffffffu, (3u << 28u) | (at + c), ok));
#endif
        if (ok) {
            v[c] = x[at + c];
        }
    }
    return v;
#endif
}

// x's values as the weight type's blocks leave them (round_acts.wgsl): the values of run `run`
// of the span, by the maxima staged with the span.
#if ROUND_Q8_0
fn round_x(v: vec4<f32>, run: u32) -> vec4<f32> {
    let r = min(run, SPAN / 16u - 1u);
    return q8_0_values(v, max(run_max[r & ~1u], run_max[r | 1u]));
}
#endif
#if ROUND_Q8K
fn round_x(v: vec4<f32>, run: u32) -> vec4<f32> {
    return q8_k_values(v, block_max[min(run, SPAN / 16u - 1u) / 16u]);
}
#endif
#if ROUND_F16
fn round_x(v: vec4<f32>, run: u32) -> vec4<f32> {
    return f16_values(v);
}
#endif
#if ROUND_BF16
fn round_x(v: vec4<f32>, run: u32) -> vec4<f32> {
    return bf16_values(v);
}
#endif
#if ROUND_Q8_0 || ROUND_Q8K || ROUND_F16 || ROUND_BF16
#else
fn round_x(v: vec4<f32>, run: u32) -> vec4<f32> {
    return v;
}
#endif


#if DIRECT
// Σ over the runs of row `row` of weight `sel` from run `lane` on, `step` apart, times x.
fn row_dot(sel: u32, row: u32, lane: u32, step: u32) -> f32 {
    cur_sel = sel;
    let base = row * p.row_bytes;
    var acc = 0.0;
    for (var g = lane; g < (p.k + 15u) / 16u; g += step) {
        for (var q = 0u; q < 4u; q++) {
            let e = g * 16u + q * 4u;
            acc += dot(dq4(base, g, q), x4(e, e < p.k));
        }
    }
    return acc;
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32 {{SG_ARGS}}) {
    let g = row_group(wid, nwg);
    for (var s = sg_id; s < ROWS; s += n_sg) {
#if GLU_SILU || GLU_GELU
        let o = g * ROWS + s;
        if (o < p.m0) {
            let a = subgroupAdd(row_dot(0u, o, sg_lane, sg_size));
            let u = subgroupAdd(row_dot(1u, o, sg_lane, sg_size));
            if (sg_lane == 0u) {
                out0[p.off0 + o + row_in * p.os0] = act(a) * u;
            }
        }
#else
        let sl = slot(g, s);
        if (sl.live) {
            let t = subgroupAdd(row_dot(sl.sel, sl.row, sg_lane, sg_size));
            if (sg_lane == 0u) {
                store(sl, t);
            }
        }
#endif
    }
}
#else
@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32 {{SG_ARGS}}) {
    {{SG_LOCALS}}
    let g = row_group(wid, nwg);
#if TRACE
    trace_thread = g * WG + lid;
#endif
    var acc = vec4<f32>(0.0);
    for (var v0 = 0u; v0 < p.k; v0 += SPAN) {
        let b0 = value_bytes(v0);
        let b1 = min(value_bytes(v0 + SPAN), p.row_bytes);
        // 1. The rows' bytes b0..b1, as whole lines, into the tile. Rows that follow each other
        // in one buffer and fit one span are one byte range, staged once (the line two rows share
        // is loaded once).
        let head = slot(g, 0u);
        let tail = slot(g, ROWS - 1u);
        let merged = p.k <= SPAN && head.live && tail.live && head.sel == tail.sel
            && tail.row == head.row + ROWS - 1u;
        let regions = select(ROWS, 1u, merged);
        let region_words = select(TILE_ROW, ROWS * TILE_ROW, merged);
        for (var s = 0u; s < regions; s++) {
            let sl = slot(g, s);
            let first = first_word(sl.row, b0);
            let last_row = select(sl.row, tail.row, merged);
            let end = min((last_row * p.row_bytes + b1 + 127u) / 128u * 32u, weight_words(sl.sel));
            for (var i0 = 0u; i0 < region_words; i0 += WG) {
                let i = i0 + lid;
                let wanted = sl.live && i < region_words && first + i < end;
#if TRACE
                record(select(0xffffffffu, (sl.sel << 28u) | (first + i), wanted));
#endif
                if (i < region_words) {
                    var w = 0u;
                    if (wanted) {
                        w = load(sl.sel, first + i);
                    }
                    tile[s * TILE_ROW + i] = w;
                }
            }
        }
#if ROUND_Q8_0 || ROUND_Q8K
        for (var r0 = 0u; r0 < SPAN / 16u; r0 += WG) {
            let run = r0 + lid;
            if (run < SPAN / 16u) {
                let e = v0 + 16u * run;
                var m = 0.0;
                for (var c = 0u; c < 4u; c++) {
                    let a = abs(x4(e + 4u * c, e < p.k));
                    m = max(m, max(max(a.x, a.y), max(a.z, a.w)));
                }
                run_max[run] = m;
            }
        }
#endif
#if ROUND_Q8K
        workgroupBarrier();
        for (var b = lid; b < SPAN / 256u; b += WG) {
            var m = 0.0;
            for (var i = 0u; i < 16u; i++) {
                m = max(m, run_max[16u * b + i]);
            }
            block_max[b] = m;
        }
#endif
        workgroupBarrier();
        // 2. A run of 16 values a step, for every row: the decoders' per-run work (a block's
        // scales) is the same for the run's four calls.
        for (var r0 = 0u; r0 < SPAN / 16u; r0 += WG) {
            let run = r0 + lid;
            let e = v0 + 16u * run;
            let live = run < SPAN / 16u && e < p.k;
            let x0 = round_x(x4(e, live), run);
            let x1 = round_x(x4(e + 4u, live), run);
            let x2 = round_x(x4(e + 8u, live), run);
            let x3 = round_x(x4(e + 12u, live), run);
            if (live) {
                for (var s = 0u; s < ROWS; s++) {
                    let sl = slot(g, s);
                    tile_at = select(s * TILE_ROW, 0u, merged);
                    tile_first = select(first_word(sl.row, b0), first_word(head.row, b0), merged);
                    let rb = sl.row * p.row_bytes;
                    let r = e / 16u;
                    acc[s] += dot(dq4(rb, r, 0u), x0) + dot(dq4(rb, r, 1u), x1)
                        + dot(dq4(rb, r, 2u), x2) + dot(dq4(rb, r, 3u), x3);
                }
            }
        }
        workgroupBarrier();
    }
    finish_workgroup(g, acc, lid, sg_lane, sg_id, n_sg);
}
#endif
