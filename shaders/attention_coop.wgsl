// attention_coop.wgsl — the prefill attention on cooperative matrices (tensor cores), spliced into
// attention.wgsl (`PREFILL_COOP`, beside `PREFILL`, whose Params, bindings, masks and scores it
// shares): flash attention over f16 key and value caches, as llama.cpp's coopmat1 flash
// attention (`flash_attn_cm1.comp`) does it. A workgroup of four subgroups (`COOP`: four times
// the subgroup size) per (query head, 16 query rows), over tiles of 64 keys:
// - scores S = Q·Kᵀ (16 × 64) in f32 fragments, subgroup g taking keys 16g..16g+15, over the head
//   in chunks of 64 values of the keys staged in workgroup memory as f16 (the queries rounded to
//   f16 once, as `prefill` rounds them against an f16 key cache);
// - the online softmax in f32, WG / 16 invocations a row, its maximum shared through workgroup
//   memory, each invocation's part of the row's sum kept apart until the end; P rounded to f16;
// - O += P·V per chunk of 64 value dimensions, subgroup g taking dimensions 16g.. of the chunk,
//   its fragment staged and added, after the rescale, into each invocation's sums in registers
//   (a fragment's elements cannot be scaled by row: its layout is the hardware's).
// `COOP_EMU`: the same kernel with the fragments' loads, multiply-adds and stores written out in
// WGSL over the same workgroup memory (invocations 32g..32g+31 standing for subgroup g), so that
// an adapter without cooperative matrices (lavapipe, in CI) runs every other line of it.
// Needs HEAD_DIM (a constant: the kernel is built for the layer's shape) a multiple of 64, ≤ 256.

const CWG: u32 = {{WG}}u;
const HD: u32 = {{HEAD_DIM}};
// Head chunks of 64 values, and the row strides of the f16 queries, the staged keys or values
// ([key][value], in vec4s: a fragment's offset and stride there count vec4s, whose values it takes
// in order) and the probabilities, and of the staged f32 fragments: each a multiple of 16 bytes,
// as fragment loads want, and staggered across banks.
const NCH: u32 = HD / 64u;
const QS: u32 = HD + 8u;
const KS: u32 = 18u;
const PS: u32 = 72u;
const SS: u32 = 68u;
// The softmax's invocations per row and keys per invocation; the outputs of a chunk (16 rows ×
// 64 values) an invocation sums.
const RL: u32 = CWG / 16u;
const KPL: u32 = 64u / RL;
const OPER: u32 = 1024u / CWG;

var<workgroup> qs: array<f16, 16u * QS>;   // [16][QS]: the block's queries
var<workgroup> kvs: array<vec4<f16>, 64u * KS>; // [64][KS]: a chunk of the tile's keys, then values
var<workgroup> ps: array<f16, 16u * PS>;   // [16][PS]: the tile's probabilities
var<workgroup> stage: array<f32, 16u * SS>; // [16][SS]: the scores, then a chunk's P·V
var<workgroup> cmax: array<f32, CWG>;       // the invocations' row maxima, then row sums
var<workgroup> calpha: array<f32, 16>;      // each row's rescale this tile
var<workgroup> cl: array<f32, 16>;          // each row's denominator

// Stages values 64c..64c+63 of keys (or `values`) t0..t0+63 into kvs, as the f16 cache holds
// them, four a load (kv_stride, ko and 64c are multiples of 64); positions at or past `kend`
// repeat the last one, whose scores are masked (and probabilities 0).
fn stage_chunk(values: bool, t0: u32, kend: u32, ko: u32, c: u32, lid: u32) {
    for (var w = lid; w < 64u * 16u; w += CWG) {
        let key = w / 16u;
        let quad = w % 16u;
        let e = (min(t0 + key, kend - 1u) * p.kv_stride + ko + 64u * c) / 4u + quad;
        if (values) {
            kvs[key * KS + quad] = vc[e];
        } else {
            kvs[key * KS + quad] = kc[e];
        }
    }
}

#if COOP_EMU
// (Frag and frag_store: coop.wgsl.)
// Value i of kvs (i counts f16 values).
fn kv_at(i: u32) -> f32 {
    return f32(kvs[i / 4u][i % 4u]);
}

// c + A · B with A the queries' fragment at qs[a] (row-major) and B the keys' at kvs[b]
// (column-major: column j is key j; b and KS count vec4s), as coopMultiplyAdd of coopLoadT and
// coopLoad.
fn mma_qk(a: u32, b: u32, c: Frag, l: u32) -> Frag {
    var r = c;
    let col = 4u * (b + (l % 16u) * KS);
    for (var t = 0u; t < 8u; t++) {
        let row = a + (2u * t + l / 16u) * QS;
        var s = 0.0;
        for (var x = 0u; x < 16u; x++) {
            s += f32(qs[row + x]) * kv_at(col + x);
        }
        r[t] += s;
    }
    return r;
}

// c + A · B with A the probabilities' fragment at ps[a] (row-major) and B the values' at kvs[b]
// (row-major: row x is key x; b and KS count vec4s), as coopMultiplyAdd of two coopLoadT.
fn mma_pv(a: u32, b: u32, c: Frag, l: u32) -> Frag {
    var r = c;
    let col = 4u * b + l % 16u;
    for (var t = 0u; t < 8u; t++) {
        let row = a + (2u * t + l / 16u) * PS;
        var s = 0.0;
        for (var x = 0u; x < 16u; x++) {
            s += f32(ps[row + x]) * kv_at(col + 4u * x * KS);
        }
        r[t] += s;
    }
    return r;
}
#endif

@compute @workgroup_size({{WG}})
fn prefill_coop(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32
#if COOP
                , @builtin(subgroup_id) g: u32
#endif
                ) {
#if COOP_EMU
    let g = lid / 32u;
    let lane = lid % 32u;
#endif
    let h = wid.x;
    let i0 = wid.y * 16u;
    let ko = (h / {{GROUP}}) * HD;
    let nrows = min(16u, p.rows - i0);
    for (var e = lid; e < 16u * HD; e += CWG) {
        let r = e / HD;
        var v = 0.0;
        if (r < nrows) {
            v = q[(i0 + r) * p.q_stride + h * HD + e % HD];
        }
        qs[r * QS + e % HD] = f16(clamp(v, -65504.0, 65504.0));
    }
    let first = p.start_pos + i0;
    var kbeg = 0u;
    if (p.window > 0u && first + 1u > p.window) {
        kbeg = first + 1u - p.window;
    }
    let kend = key_end(i0 + nrows - 1u);
    // The softmax's row and keys of each tile, and the running maximum and this invocation's part
    // of the row's sum (every invocation of a row holds the same maximum).
    let sr = lid / RL;
    let k0 = (lid % RL) * KPL;
    let row_end = key_end(i0 + sr);
    var m_run = NEG;
    var l_part = 0.0;
    // Outputs (row e / 64, value 64c + e % 64 for e = lid + CWG j) of each chunk c.
    var o: array<f32, NCH * OPER>;

    for (var t0 = kbeg; t0 < kend; t0 += 64u) {
#if COOP
        var s = coop_mat16x16<f32, C>();
#else
        var s = Frag();
#endif
        for (var c = 0u; c < NCH; c++) {
            stage_chunk(false, t0, kend, ko, c, lid);
            workgroupBarrier();
            for (var kk = 0u; kk < 64u; kk += 16u) {
#if COOP
                let fq = coopLoadT<coop_mat16x16<f16, A>>(&qs[64u * c + kk], QS);
                let fk = coopLoad<coop_mat16x16<f16, B>>(&kvs[16u * g * KS + kk / 4u], KS);
                s = coopMultiplyAdd(fq, fk, s);
#else
                s = mma_qk(64u * c + kk, 16u * g * KS + kk / 4u, s, lane);
#endif
            }
            // Every subgroup has read this chunk before the next overwrites it.
            workgroupBarrier();
        }
#if COOP
        coopStoreT(s, &stage[16u * g], SS);
#else
        frag_store(s, 16u * g, lane);
#endif
        workgroupBarrier();

        // The row's masked scores, its maximum over the tile, the probabilities in f16.
        let pos = first + sr;
        var sc: array<f32, KPL>;
        var lmax = NEG;
        for (var j = 0u; j < KPL; j++) {
            let kj = t0 + k0 + j;
            var ok = sr < nrows && kj < row_end;
            if (p.window > 0u && kj + p.window <= pos) {
                ok = false;
            }
            var v = NEG;
            if (ok) {
                v = score(stage[sr * SS + k0 + j]);
            }
            sc[j] = v;
            lmax = max(lmax, v);
        }
        cmax[lid] = lmax;
        workgroupBarrier();
        var row_max = NEG;
        for (var j = 0u; j < RL; j++) {
            row_max = max(row_max, cmax[sr * RL + j]);
        }
        let m_new = max(m_run, row_max);
        let alpha = exp(m_run - m_new);
        var lsum = 0.0;
        for (var j = 0u; j < KPL; j++) {
            var pj = f16(0.0);
            if (sc[j] > 0.5 * NEG) {
                pj = f16(exp(sc[j] - m_new));
            }
            ps[sr * PS + k0 + j] = pj;
            // The sum of the probabilities as the product takes them, so that they sum to 1.
            lsum += f32(pj);
        }
        l_part = l_part * alpha + lsum;
        m_run = m_new;
        if (k0 == 0u) {
            calpha[sr] = alpha;
        }

        for (var c = 0u; c < NCH; c++) {
            stage_chunk(true, t0, kend, ko, c, lid);
            workgroupBarrier();
#if COOP
            var f = coop_mat16x16<f32, C>();
            for (var kk = 0u; kk < 64u; kk += 16u) {
                let fp = coopLoadT<coop_mat16x16<f16, A>>(&ps[kk], PS);
                let fv = coopLoadT<coop_mat16x16<f16, B>>(&kvs[kk * KS + 4u * g], KS);
                f = coopMultiplyAdd(fp, fv, f);
            }
            coopStoreT(f, &stage[16u * g], SS);
#else
            var f = Frag();
            for (var kk = 0u; kk < 64u; kk += 16u) {
                f = mma_pv(kk, kk * KS + 4u * g, f, lane);
            }
            frag_store(f, 16u * g, lane);
#endif
            workgroupBarrier();
            for (var j = 0u; j < OPER; j++) {
                let e = lid + CWG * j;
                let r = e / 64u;
                o[c * OPER + j] = o[c * OPER + j] * calpha[r] + stage[r * SS + e % 64u];
            }
            // (The next chunk's or tile's stores into kvs and stage follow a barrier past these
            // reads: the next stage_chunk's, or the scores' chunks'.)
        }
    }

    // Each row's denominator: its invocations' parts summed (every read of cmax and calpha above
    // precedes the last tile's barriers).
    cmax[lid] = l_part;
    workgroupBarrier();
    if (k0 == 0u) {
        var l = 0.0;
        for (var j = 0u; j < RL; j++) {
            l += cmax[sr * RL + j];
        }
        cl[sr] = with_sink(l, m_run, h);
    }
    workgroupBarrier();
    for (var c = 0u; c < NCH; c++) {
        for (var j = 0u; j < OPER; j++) {
            let e = lid + CWG * j;
            let r = e / 64u;
            if (r < nrows) {
                out[(i0 + r) * p.q_stride + h * HD + 64u * c + e % 64u] = o[c * OPER + j] / cl[r];
            }
        }
    }
}
