// matvec_rows.wgsl — what the decode mat-vec kernels share (matvec.wgsl, matvec_blocks.wgsl): their
// parameters and bindings, which weight row and output each of a workgroup's row slots is (up to
// three weights of one type and width as one dispatch, the gated pair, an expert slot), and the
// writing of the sums. The including kernel defines `WG` and `ROWS`. A grid `z` deep runs `z`
// input rows (each `k` values after the last) against the same weight rows, their outputs `os*`
// values apart: a verify pass of a few rows, where the tiled GEMM would compute a whole tile.

struct Params {
    k: u32,          // values per weight row: x's length
    row_bytes: u32,  // bytes per weight row
    m0: u32, m1: u32, m2: u32,  // rows of each weight
    rows: u32,       // m0 + m1 + m2
    off0: u32, off1: u32, off2: u32,  // first output index each weight writes
    trace_threads: u32,  // TRACE: invocations in the grid
    // EXPERT only:
    expert_rows: u32,    // output values per slot
    expert_stride: u32,  // weight rows from one expert to the next
    row_offset: u32,     // first row used within an expert
    n_used: u32,         // slots per token
    per_slot: u32,       // 1: an input row per slot; 0: one per token
    first_row: u32,      // first weight row held by this part of the weight
    part_rows: u32,      // rows held by this part
    os0: u32, os1: u32, os2: u32,  // output values per input row of each weight (grids of z > 1)
    // ROPE_KV only:
    head_dim: u32,
    rot_dims: u32,   // leading values of each head that rotate
    kv_dst: u32,     // first cache value the step's keys and values go to
    // MIXED only (matvec_blocks.wgsl):
    row_bytes1: u32, // bytes per row of the weights of the second type
    // NORM_ADD only:
    norm_eps: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
#if X4
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
#else
#if IDOT
// Packed Q8_K blocks: every input row's quants four to a word, then every block's d (f32 bits).
@group(0) @binding(1) var<storage, read> x: array<u32>;
#else
@group(0) @binding(1) var<storage, read> x: array<f32>;
#endif
#endif
// W2: weights read 8 bytes at a time (rows of whole 8-byte units; matvec_blocks.wgsl's K-quants).
#if W2
alias Unit = vec2<u32>;
#else
alias Unit = u32;
#endif
@group(0) @binding(2) var<storage, read> w0: array<Unit>;
@group(0) @binding(3) var<storage, read_write> out0: array<f32>;
#if NW2 || NW3
@group(0) @binding(4) var<storage, read> w1: array<Unit>;
@group(0) @binding(5) var<storage, read_write> out1: array<f32>;
#endif
#if NW3
@group(0) @binding(6) var<storage, read> w2: array<Unit>;
@group(0) @binding(7) var<storage, read_write> out2: array<f32>;
#endif
#if EXPERT
@group(0) @binding(4) var<storage, read> selected: array<f32>;

// The slot this workgroup serves.
var<private> expert_slot: u32;
#endif
// Where the workgroup's input row starts in x, and which input row of the grid it is.
var<private> x_first: u32;
var<private> row_in: u32;

#if TRACE
#include "trace"
#endif

#if ROPE_KV
// The decode step's Q/K/V projections with RoPE and the KV append as their epilogue
// (`CoreOps::qkv_rope_store`): weight `sel` is the query (ROLE 0), the key (1) or the value (2)
// projection; a query pair is rotated and written, a key pair rotated and a value pair stored
// straight into their caches (f32, or f16 pairs packed into words: K_F16, V_F16), as rope.wgsl's
// ROPE_KV does after a plain mat-vec. Adjacent pairs (2i, 2i + 1) only, so a workgroup's even
// row count keeps both of a pair in its slots; one input row.
@group(0) @binding({{TABLE_BINDING}}) var<storage, read> table: array<f32>;
#if K_F16
@group(0) @binding({{K_CACHE_BINDING}}) var<storage, read_write> k_cache: array<u32>;
#else
@group(0) @binding({{K_CACHE_BINDING}}) var<storage, read_write> k_cache: array<f32>;
#endif
#if V_F16
@group(0) @binding({{V_CACHE_BINDING}}) var<storage, read_write> v_cache: array<u32>;
#else
@group(0) @binding({{V_CACHE_BINDING}}) var<storage, read_write> v_cache: array<f32>;
#endif

fn role(sel: u32) -> u32 {
    if (sel == 1u) {
        return {{ROLE1}}u;
    }
    if (sel == 2u) {
        return {{ROLE2}}u;
    }
    return {{ROLE0}}u;
}

// Row pair (a, b) of one weight, its sums t0 and t1.
fn rope_store(a: Slot, b: Slot, t0: f32, t1: f32) {
    let r = role(a.sel);
    var v0 = t0;
    var v1 = t1;
    let d = a.row % p.head_dim;
    if (r != 2u && d < p.rot_dims) {
        // Pair d / 2 of the row's table: cos at 2i = d, sin after it.
        let c = table[d];
        let s = table[d + 1u];
        v0 = t0 * c - t1 * s;
        v1 = t0 * s + t1 * c;
    }
    let e = p.kv_dst + a.row;
    if (r == 0u) {
        store(a, v0);
        store(b, v1);
    } else if (r == 1u) {
#if K_F16
        k_cache[e / 2u] = pack2x16float(vec2<f32>(v0, v1));
#else
        k_cache[e] = v0;
        k_cache[e + 1u] = v1;
#endif
    } else {
#if V_F16
        v_cache[e / 2u] = pack2x16float(vec2<f32>(v0, v1));
#else
        v_cache[e] = v0;
        v_cache[e + 1u] = v1;
#endif
    }
}
#endif

#if GLU_PACK
// The gated activation quantized where it is made, as packed Q8_K blocks for the integer-dot
// mat-vec that reads it next (the down projection), so no dispatch quantizes it again: each
// workgroup adds its outputs to its block's count, and the one that completes a block (256
// outputs) quantizes it as round_acts.wgsl's PACKED variant does, bit for bit, and sets the count
// back to 0 for the next dispatch. storageBarrier is a device-scope acquire-release fence (naga's
// SPIR-V), so the outputs other workgroups wrote before their count are visible to the last one
// after it reads the count (CUDA's threadfence reduction). One input row; m0 whole blocks.
@group(0) @binding(6) var<storage, read_write> packed: array<u32>;
@group(0) @binding(7) var<storage, read_write> block_count: array<atomic<u32>>;
var<workgroup> completes: u32;
var<workgroup> pack_max: array<f32, {{WG}}>;

fn pack_gated_block(g: u32, lid: u32) {
    storageBarrier();
    let first = g * (ROWS / 2u);
    let blk = first / 256u;
    if (lid == 0u) {
        var done = 0u;
        if (first < p.m0) {
            let mine = min(ROWS / 2u, p.m0 - first);
            done = select(0u, 1u, atomicAdd(&block_count[blk], mine) + mine == 256u);
        }
        completes = done;
    }
    if (workgroupUniformLoad(&completes) == 0u) {
        return;
    }
    storageBarrier();
    let base = p.off0 + 256u * blk;
    var m = 0.0;
    for (var i = lid; i < 64u; i += {{WG}}u) {
        let a = abs(vec4<f32>(out0[base + 4u * i], out0[base + 4u * i + 1u], out0[base + 4u * i + 2u],
            out0[base + 4u * i + 3u]));
        m = max(m, max(max(a.x, a.y), max(a.z, a.w)));
    }
    pack_max[lid] = m;
    workgroupBarrier();
    var amax = 0.0;
    for (var i = 0u; i < min({{WG}}u, 64u); i++) {
        amax = max(amax, pack_max[i]);
    }
    for (var i = lid; i < 64u; i += {{WG}}u) {
        let v = vec4<f32>(out0[base + 4u * i], out0[base + 4u * i + 1u], out0[base + 4u * i + 2u],
            out0[base + 4u * i + 3u]);
        packed[64u * blk + i] = pack4xI8(q8_k_quants(v, amax));
    }
    if (lid == 0u) {
        packed[p.m0 / 4u + blk] = bitcast<u32>(q8_k_d(amax));
        atomicStore(&block_count[blk], 0u);
    }
}
#endif

#if NORM_ADD
// The residual add and the next block's input norm as the epilogue of the projection that
// feeds the residual stream (`WgpuBackend::fused_norm`): the workgroup that completes the row
// (counting rows with an atomic, as GLU_PACK counts blocks) adds it into the residual stream
// `resid` and writes rms_norm(resid) · norm_w into `normed`, and again as packed Q8_K blocks, as
// norm.wgsl's ADD and PACKED variants do after it, bit for bit: its sum of squares takes the
// order of their workgroup of 256 (`NORM_LANES`), each invocation standing for NORM_LANES / WG
// of those, and each invocation reads back only what it wrote. It reads no value that another
// workgroup of the dispatch wrote but out0's, which no workgroup reads before (so none can be in
// a cache from before they were written). One input row, one weight of m0 rows (whole blocks of
// 256).
@group(0) @binding(4) var<storage, read_write> resid: array<f32>;
@group(0) @binding(5) var<storage, read> norm_w: array<f32>;
@group(0) @binding(6) var<storage, read_write> normed: array<f32>;
@group(0) @binding(7) var<storage, read_write> norm_count: array<atomic<u32>>;
@group(0) @binding(8) var<storage, read_write> packed: array<u32>;
const NORM_LANES: u32 = {{NORM_LANES}}u;
const NORM_SPREAD: u32 = NORM_LANES / {{WG}}u;
var<workgroup> norm_completes: u32;
var<workgroup> norm_sums: array<f32, NORM_LANES>;

fn pack_value(i: u32) -> f32 {
    return normed[i];
}

#include "pack_q8k"

// The sum of `parts` (lane lid + j · WG's partial sum of squares in parts[j]) over the
// NORM_LANES lanes, added up as reduce.wgsl's wg_sum adds a workgroup of NORM_LANES.
fn norm_total(parts: array<f32, NORM_SPREAD>, lid: u32, sg_lane: u32, sg_id: u32, n_sg: u32) -> f32 {
#if SUBGROUP
    // Lane lid + j · WG is lane sg_lane of subgroup j · n_sg + sg_id of the wider workgroup.
    for (var j = 0u; j < NORM_SPREAD; j++) {
        let s = subgroupAdd(parts[j]);
        if (sg_lane == 0u) {
            norm_sums[j * n_sg + sg_id] = s;
        }
    }
    workgroupBarrier();
    var t = 0.0;
    for (var i = 0u; i < NORM_SPREAD * n_sg; i++) {
        t += norm_sums[i];
    }
    return t;
#else
    for (var j = 0u; j < NORM_SPREAD; j++) {
        norm_sums[lid + j * {{WG}}u] = parts[j];
    }
    workgroupBarrier();
    for (var h = NORM_LANES / 2u; h > 0u; h >>= 1u) {
        for (var j = 0u; j < NORM_SPREAD; j++) {
            let v = lid + j * {{WG}}u;
            if (v < h) {
                norm_sums[v] += norm_sums[v + h];
            }
        }
        workgroupBarrier();
    }
    return norm_sums[0];
#endif
}

// After the workgroup wrote its sums: if they complete the row, the residual add and the norm.
fn norm_tail(g: u32, lid: u32, sg_lane: u32, sg_id: u32, n_sg: u32) {
    storageBarrier();
    if (lid == 0u) {
        var done = 0u;
        if (g * ROWS < p.m0) {
            let mine = min(ROWS, p.m0 - g * ROWS);
            done = select(0u, 1u, atomicAdd(&norm_count[0], mine) + mine == p.m0);
        }
        norm_completes = done;
    }
    if (workgroupUniformLoad(&norm_completes) == 0u) {
        return;
    }
    storageBarrier();
    let dim = p.m0;
    var parts: array<f32, NORM_SPREAD>;
    for (var j = 0u; j < NORM_SPREAD; j++) {
        var s = 0.0;
        for (var i = lid + j * {{WG}}u; i < dim; i += NORM_LANES) {
            let v = resid[i] + out0[p.off0 + i];
            resid[i] = v;
            s += v * v;
        }
        parts[j] = s;
    }
    let total = norm_total(parts, lid, sg_lane, sg_id, n_sg);
    let scale = 1.0 / sqrt(total / f32(dim) + p.norm_eps);
    // The same values of i as the loop above, in another order: each reads what it wrote.
    for (var i = lid; i < dim; i += {{WG}}u) {
        normed[i] = resid[i] * scale * norm_w[i];
    }
    write_packed_row(0u, dim, dim / 4u, lid);
    if (lid == 0u) {
        atomicStore(&norm_count[0], 0u);
    }
}
#endif

// Row slot s of workgroup g: which weight, which row of its buffer, which output value, and
// whether there is such a row.
struct Slot {
    sel: u32,
    row: u32,
    out: u32,
    live: bool,
}

fn slot(g: u32, s: u32) -> Slot {
#if GLU_SILU || GLU_GELU
    // Slots 2i and 2i + 1: gate row o and up row o of output o = g · ROWS / 2 + i.
    let o = g * (ROWS / 2u) + s / 2u;
    return Slot(s & 1u, o, p.off0 + o, o < p.m0);
#else
#if EXPERT
    let r = g * ROWS + s;
    let wr = u32(selected[expert_slot]) * p.expert_stride + p.row_offset + r;
    let live = r < p.expert_rows && wr >= p.first_row && wr < p.first_row + p.part_rows;
    return Slot(0u, select(0u, wr - p.first_row, live), expert_slot * p.expert_rows + r, live);
#else
    var row = g * ROWS + s;
    let live = row < p.rows;
    var sel = 0u;
    if (row >= p.m0) {
        row -= p.m0;
        sel = 1u;
        if (row >= p.m1) {
            row -= p.m1;
            sel = 2u;
        }
    }
    var out = p.off0 + row;
    if (sel == 1u) {
        out = p.off1 + row;
    } else if (sel == 2u) {
        out = p.off2 + row;
    }
    return Slot(sel, row, out, live);
#endif
#endif
}

fn weight_words(sel: u32) -> u32 {
#if NW2 || NW3
    if (sel == 1u) {
        return arrayLength(&w1);
    }
#endif
#if NW3
    if (sel == 2u) {
        return arrayLength(&w2);
    }
#endif
    return arrayLength(&w0);
}

#if W2
// Word i of weight `sel`.
fn load(sel: u32, i: u32) -> u32 {
    return load_unit(sel, i / 2u)[i & 1u];
}

fn load_unit(sel: u32, i: u32) -> vec2<u32> {
#else
fn load(sel: u32, i: u32) -> u32 {
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

// Workgroup `wid`'s row group, after setting up its slot (EXPERT).
fn row_group(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
#if EXPERT
    expert_slot = wid.y;
    var token_row = wid.y;
    if (p.per_slot == 0u) {
        token_row = wid.y / p.n_used;
    }
    x_first = token_row * p.k;
    return wid.x;
#else
    row_in = wid.z;
    x_first = wid.z * p.k;
    return flat_wg(wid, nwg);
#endif
}

fn store(sl: Slot, t: f32) {
    if (sl.sel == 0u) {
        out0[sl.out + row_in * p.os0] = t;
    }
#if NW2 || NW3
    if (sl.sel == 1u) {
        out1[sl.out + row_in * p.os1] = t;
    }
#endif
#if NW3
    if (sl.sel == 2u) {
        out2[sl.out + row_in * p.os2] = t;
    }
#endif
}

// The workgroup's sums, one per row slot, written to their outputs.
fn finish(g: u32, t: vec4<f32>) {
#if GLU_SILU || GLU_GELU
    for (var i = 0u; i < ROWS / 2u; i++) {
        let o = g * (ROWS / 2u) + i;
        if (o < p.m0) {
            out0[p.off0 + o + row_in * p.os0] = act(t[2u * i]) * t[2u * i + 1u];
        }
    }
#else
#if ROPE_KV
    // Every weight's rows are even, so a live even slot's partner is live and of its weight.
    for (var s = 0u; s < ROWS; s += 2u) {
        let a = slot(g, s);
        if (a.live) {
            rope_store(a, slot(g, s + 1u), t[s], t[s + 1u]);
        }
    }
#else
    for (var s = 0u; s < ROWS; s++) {
        let sl = slot(g, s);
        if (sl.live) {
            store(sl, t[s]);
        }
    }
#endif
#endif
}

#if DIRECT
#else
var<workgroup> sums: array<vec4<f32>, {{WG}}>;

// The sums of the workgroup's invocations (`acc`: one per row slot), added up and written.
fn finish_workgroup(g: u32, acc: vec4<f32>, lid: u32, sg_lane: u32, sg_id: u32, n_sg: u32) {
#if SUBGROUP
    let t = subgroupAdd(acc);
    if (sg_lane == 0u) {
        sums[sg_id] = t;
    }
    workgroupBarrier();
    if (lid == 0u) {
        var total = vec4<f32>(0.0);
        for (var i = 0u; i < n_sg; i++) {
            total += sums[i];
        }
        finish(g, total);
    }
#else
    sums[lid] = acc;
    workgroupBarrier();
    for (var h = WG / 2u; h > 0u; h >>= 1u) {
        if (lid < h) {
            sums[lid] += sums[lid + h];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        finish(g, sums[0]);
    }
#endif
}
#endif
