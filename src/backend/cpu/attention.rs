//! Attention on the CPU, flash-attention style: the keys and values of each KV head are taken in
//! chunks of fixed absolute positions (32 KB of f32 each), every query of the head's group is
//! scored against a chunk at once, and a running softmax (the chunk's maximum, sum and weighted
//! values, rescaled as the maximum grows) folds the chunks together, so no score row is ever as
//! long as the context. Prefill runs in parallel over (KV head, block of query rows); generation,
//! one query row, over (KV head, chunk), the chunks' partial softmaxes combined afterwards in
//! order. A query's chunks are combined in the same order whichever way the work was split, so a
//! row gets the same bits in prefill and in generation.
//!
//! Where the level has them (x86: `x86/attention.rs`) the kernels read f32 and f16 caches in
//! place, converting f16 as they load it; elsewhere `CpuCache::read_f32` converts a chunk at a
//! time into scratch. Cache types with their own arithmetic keep the per-row path through
//! `CpuCache`'s `dot`/`axpy` (`attention_rows`). As llama.cpp multiplies: with an f16 key cache
//! queries are rounded to f16, and with an f16 value cache the normalized softmax weights are,
//! which needs the whole row's softmax before any value is weighed: that cache takes two passes
//! over the chunks (`exact.rs`).

#![allow(clippy::needless_range_loop)] // register tiles are indexed in step with their inputs

use std::cell::RefCell;

use super::kernels::{AttentionKernels, CacheRows, Kernels};
use super::{CpuBackend, CpuCache, f32_bytes, ggml_math};
use crate::backend::AttentionParams;
use crate::gguf::GgmlType;

/// Keys per chunk for head dimension `hd`: a chunk's keys (or values) as f32 take at most 32 KB.
fn chunk_len(hd: usize) -> usize {
    ((8192 / hd.max(1)).clamp(16, 256)) / 16 * 16
}

impl CpuCache {
    /// Whether attention may read this cache as f32 blocks (`read_f32`).
    fn f32_blocks(&self) -> bool {
        match self {
            CpuCache::F32(_) | CpuCache::F16(_) => true,
            CpuCache::Q8_0 { .. } => false,
        }
    }

    /// Whether the values are f16, so the other operand is rounded to f16 (as llama.cpp does).
    fn is_f16(&self) -> bool {
        matches!(self, CpuCache::F16(_))
    }

    /// `n` rows of `len` values from row `first` (rows `width` values apart, starting at value
    /// `offset` of each) into `out`, as f32.
    fn read_f32(
        &self,
        first: usize,
        n: usize,
        width: usize,
        offset: usize,
        len: usize,
        out: &mut [f32],
    ) {
        for (r, o) in out.chunks_exact_mut(len).take(n).enumerate() {
            self.read((first + r) * width + offset, o);
        }
    }
}

/// The shape of one attention call, and its prepared inputs.
struct Call<'a> {
    p: &'a AttentionParams,
    /// One logit per query head joining the softmax (gpt-oss).
    sinks: Option<&'a [f32]>,
    k: &'a CpuCache,
    v: &'a CpuCache,
    kernels: &'a Kernels,
    q: &'a [f32],
    /// Query heads per KV head.
    group: usize,
    /// Keys per chunk.
    chunk: usize,
}

/// One chunk's softmax over the queries of a task: each query's maximum score and sum of
/// weights, and its weighted sum of values (`queries × head_dim`).
struct ChunkResult<'a> {
    max: &'a [f32],
    sum: &'a [f64],
    acc: &'a [f32],
}

/// Scratch of one task, reused across tasks on a thread.
#[derive(Default)]
struct Scratch {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    s: Vec<f32>,
    acc: Vec<f32>,
    max: Vec<f32>,
    sum: Vec<f64>,
}

impl Scratch {
    /// Room for `nc` chunks' weights (the f16 value cache's two passes keep them all) of `nq`
    /// queries, and one chunk's keys, values and weighted values.
    fn size(&mut self, nq: usize, nc: usize, chunk: usize, hd: usize) {
        self.k.resize(chunk * hd, 0.0);
        self.v.resize(chunk * hd, 0.0);
        self.s.resize(nc * nq * chunk, 0.0);
        self.acc.resize(nq * hd, 0.0);
        self.max.resize(nc * nq, 0.0);
        self.sum.resize(nc * nq, 0.0);
    }
}

/// Where `chunk_weights` writes one chunk's softmax: a row of the chunk's length per query, and
/// per query the chunk's maximum score and Σ exp(score − maximum).
struct Weights<'a> {
    s: &'a mut [f32],
    max: &'a mut [f32],
    sum: &'a mut [f64],
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
    /// A generation step's split over chunks, on the thread that makes the call: its buffers grow
    /// with the context and are kept, so a step does not allocate and zero them again (every
    /// value is written before it is read).
    static SPLIT: RefCell<SplitBuffers> = RefCell::new(SplitBuffers::default());
}

/// Per (KV head, chunk): the columns its queries see; per (KV head, chunk, query of the group):
/// the chunk's maximum, sum, weights (f16 value caches), their factors and the weighted values.
#[derive(Default)]
struct SplitBuffers {
    cols: Vec<(usize, usize)>,
    max: Vec<f32>,
    sum: Vec<f64>,
    weights: Vec<f32>,
    factors: Vec<f32>,
    acc: Vec<f32>,
}

/// The first `n` values of `v`, grown to hold them (new values are `T::default()`).
fn at_least<T: Clone + Default>(v: &mut Vec<T>, n: usize) -> &mut [T] {
    if v.len() < n {
        v.resize(n, T::default());
    }
    &mut v[..n]
}

/// The running softmax of one query: the largest score so far, Σ exp(score − max), and
/// Σ exp(score − max) · value.
struct Running<'a> {
    max: f32,
    sum: f64,
    acc: &'a mut [f32],
}

impl Running<'_> {
    /// Fold in a chunk whose maximum is `max`, weight sum `sum` and weighted values `acc`.
    fn combine(&mut self, max: f32, sum: f64, acc: &[f32]) {
        if max == f32::NEG_INFINITY {
            return;
        }
        if max <= self.max {
            let b = ggml_math::expf(max - self.max);
            self.sum += sum * b as f64;
            self.acc.iter_mut().zip(acc).for_each(|(a, &c)| *a += c * b);
        } else {
            let a = if self.max == f32::NEG_INFINITY {
                0.0
            } else {
                ggml_math::expf(self.max - max)
            };
            self.sum = self.sum * a as f64 + sum;
            self.acc
                .iter_mut()
                .zip(acc)
                .for_each(|(x, &c)| *x = *x * a + c);
            self.max = max;
        }
    }

    /// The attention output: the weighted values over the weight sum, with the head's sink (a
    /// logit whose value is zero) in the sum where the model has one.
    fn finish(&mut self, sink: Option<f32>, out: &mut [f32]) {
        if let Some(s) = sink {
            self.add_sink(s);
        }
        let inv = if self.sum > 0.0 {
            (1.0 / self.sum) as f32
        } else {
            0.0
        };
        out.iter_mut()
            .zip(&*self.acc)
            .for_each(|(o, &a)| *o = a * inv);
    }
}

impl Running<'_> {
    /// Fold in a sink: a score `s` of weight exp(s − max) whose value is zero.
    fn add_sink(&mut self, s: f32) {
        if s <= self.max {
            self.sum += ggml_math::expf(s - self.max) as f64;
        } else {
            let a = if self.max == f32::NEG_INFINITY {
                0.0
            } else {
                ggml_math::expf(self.max - s)
            };
            self.sum = self.sum * a as f64 + 1.0;
            self.acc.iter_mut().for_each(|x| *x *= a);
            self.max = s;
        }
    }
}

impl Call<'_> {
    fn hd(&self) -> usize {
        self.p.head_dim
    }

    /// The keys query row `i` sees: [lo, last].
    fn key_range(&self, i: usize) -> (usize, usize) {
        let pos = self.p.start_pos + i;
        (
            self.p.window.map_or(0, |w| (pos + 1).saturating_sub(w)),
            self.p.last_key(i),
        )
    }

    /// The queries of rows `rows` for KV head `kvh` (row-major: row, then head of the group),
    /// rounded to f16 against an f16 key cache.
    fn load_queries(&self, kvh: usize, rows: std::ops::Range<usize>, out: &mut Vec<f32>) {
        let (hd, g) = (self.hd(), self.group);
        let q_width = self.p.n_heads * hd;
        out.clear();
        for i in rows {
            let start = i * q_width + kvh * g * hd;
            out.extend_from_slice(&self.q[start..start + g * hd]);
        }
        if self.k.is_f16() {
            (self.kernels.round_f16)(out);
        }
    }

    /// Chunk `ci` of KV head `kvh` against the queries `q` of rows `rows`: each query's
    /// exp(score − the chunk's maximum) over the keys it sees in `w.s` (a row of the chunk's
    /// length per query, zero elsewhere), the maxima and sums in `w.max` and `w.sum`. `k` is
    /// scratch for keys read out of the cache. Returns the columns any query sees.
    fn chunk_weights(
        &self,
        q: &[f32],
        k: &mut Vec<f32>,
        kvh: usize,
        rows: std::ops::Range<usize>,
        ci: usize,
        w: Weights,
    ) -> std::ops::Range<usize> {
        let (hd, g, c) = (self.hd(), self.group, self.chunk);
        let kv_width = self.p.n_kv_heads * hd;
        let last = self.p.last_key(rows.end - 1) + 1; // one past the last key any of the rows sees
        let c0 = ci * c;
        let n = (c0 + c).min(last) - c0;
        let nq = rows.len() * g;
        k.resize(c * hd, 0.0);
        if let Some(kernels) = self.in_place() {
            self.scores_in_place(kernels, q, k, kvh, c0, n, nq, w.s);
        } else {
            let n16 = n.next_multiple_of(16);
            self.k.read_f32(c0, n, kv_width, kvh * hd, hd, k);
            k[n * hd..n16 * hd].fill(0.0);
            scores(self.kernels, q, nq, hd, &k[..n16 * hd], w.s, c);
        }
        let (mut lo_all, mut hi_all) = (n, 0);
        for (qi, s) in w.s.chunks_exact_mut(c).take(nq).enumerate() {
            let (lo, pos) = self.key_range(rows.start + qi / g);
            let a = lo.max(c0).min(c0 + n) - c0;
            let b = (pos + 1).min(c0 + n).saturating_sub(c0);
            if a >= b {
                s[..n].fill(0.0);
                w.max[qi] = f32::NEG_INFINITY;
                w.sum[qi] = 0.0;
                continue;
            }
            let valid = &mut s[a..b];
            match self.p.softcap {
                None => valid.iter_mut().for_each(|x| *x *= self.p.scale),
                Some(_) => valid.iter_mut().for_each(|x| *x = self.p.score(*x)),
            }
            let m = valid.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            w.sum[qi] = (self.kernels.exp_sub)(valid, m);
            w.max[qi] = m;
            s[..a].fill(0.0);
            s[b..n].fill(0.0);
            (lo_all, hi_all) = (lo_all.min(a), hi_all.max(b));
        }
        lo_all..hi_all.max(lo_all)
    }

    /// `acc` (a row of `hd` per query) = Σ over columns `cols` of the weights `p` (a row of the
    /// chunk's length per query) · the values of KV head `kvh` at positions `c0 + column`.
    #[allow(clippy::too_many_arguments)]
    fn chunk_values(
        &self,
        v_scratch: &mut Vec<f32>,
        p: &[f32],
        kvh: usize,
        c0: usize,
        cols: std::ops::Range<usize>,
        nq: usize,
        acc: &mut [f32],
    ) {
        let hd = self.hd();
        let n = cols.len();
        if n == 0 {
            acc[..nq * hd].fill(0.0);
        } else if let Some(kernels) = self.in_place() {
            let (rows, available) = self.rows_at(self.v, kvh, c0 + cols.start);
            assert!(n <= available, "attention reads past the value cache");
            let p = &p[cols.start..];
            // SAFETY: `rows` holds `n` rows (the kernels' level was detected).
            unsafe { (kernels.accumulate)(hd, p, self.chunk, nq, rows, n, acc) };
        } else {
            let kv_width = self.p.n_kv_heads * hd;
            v_scratch.resize(n * hd, 0.0);
            self.v
                .read_f32(c0 + cols.start, n, kv_width, kvh * hd, hd, v_scratch);
            let p = &p[cols.start..];
            accumulate(p, self.chunk, nq, v_scratch, n, hd, acc);
        }
    }

    /// One chunk's softmax and weighted values (`chunk_weights`, then `chunk_values`).
    fn chunk<'s>(
        &self,
        sc: &'s mut Scratch,
        kvh: usize,
        rows: std::ops::Range<usize>,
        ci: usize,
    ) -> ChunkResult<'s> {
        let nq = rows.len() * self.group;
        sc.size(nq, 1, self.chunk, self.hd());
        let Scratch {
            q,
            k,
            v,
            s,
            acc,
            max,
            sum,
        } = sc;
        let w = Weights { s, max, sum };
        let cols = self.chunk_weights(q, k, kvh, rows, ci, w);
        self.chunk_values(v, s, kvh, ci * self.chunk, cols, nq, acc);
        ChunkResult {
            max: &sc.max[..nq],
            sum: &sc.sum[..nq],
            acc: &sc.acc[..nq * self.hd()],
        }
    }

    /// The kernels that read this call's keys and values in place in the caches (f32 or f16,
    /// converted as loaded), if the level has them; otherwise each chunk is copied into f32
    /// first.
    fn in_place(&self) -> Option<AttentionKernels> {
        self.kernels.attention.filter(|k| k.takes(self.hd()))
    }

    /// The rows of KV head `kvh` from position `c0` as the kernels read them in place, and how
    /// many rows the cache holds from there.
    fn rows_at(&self, cache: &CpuCache, kvh: usize, c0: usize) -> (CacheRows, usize) {
        let kv_width = self.p.n_kv_heads * self.hd();
        let start = c0 * kv_width + kvh * self.hd();
        let (rows, len) = match cache {
            CpuCache::F32(c) => (CacheRows::F32(c[start..].as_ptr(), kv_width), c.len()),
            CpuCache::F16(c) => (
                CacheRows::F16(c[start..].as_ptr() as *const u16, kv_width),
                c.len(),
            ),
            CpuCache::Q8_0 { .. } => unreachable!("q8_0 caches take the per-row path"),
        };
        // Rows whose `hd` values lie within the cache.
        (rows, (len - start + kv_width - self.hd()) / kv_width)
    }

    /// `sc.s` for the `n` keys of chunk `c0` of KV head `kvh`, read in place (the last partial
    /// group of 16 keys through a zero-padded copy).
    #[allow(clippy::too_many_arguments)]
    fn scores_in_place(
        &self,
        kernels: AttentionKernels,
        q: &[f32],
        k: &mut [f32],
        kvh: usize,
        c0: usize,
        n: usize,
        nq: usize,
        s: &mut [f32],
    ) {
        let (hd, c) = (self.hd(), self.chunk);
        let (rows, available) = self.rows_at(self.k, kvh, c0);
        assert!(n <= available, "attention reads past the key cache");
        let full = n / 16 * 16;
        // SAFETY: `rows` holds `n` ≥ `full` rows (the kernels' level was detected).
        unsafe { (kernels.scores)(hd, q, nq, rows, full, s, c) };
        if full < n {
            let kv_width = self.p.n_kv_heads * hd;
            self.k
                .read_f32(c0 + full, n - full, kv_width, kvh * hd, hd, k);
            k[(n - full) * hd..16 * hd].fill(0.0);
            let tail = CacheRows::F32(k.as_ptr(), hd);
            // SAFETY: as above; the copy holds 16 rows.
            unsafe { (kernels.scores)(hd, q, nq, tail, 16, &mut s[full..], c) };
        }
    }

    /// The chunks rows `rows` see, in order.
    fn chunks(&self, rows: &std::ops::Range<usize>) -> std::ops::Range<usize> {
        let lo = self.key_range(rows.start).0;
        let hi = self.key_range(rows.end - 1).1;
        lo / self.chunk..hi / self.chunk + 1
    }
}

impl CpuBackend {
    /// Causal attention (see `Backend::attention`).
    pub(super) fn attention_impl(
        &self,
        q: &[f32],
        k: &CpuCache,
        v: &CpuCache,
        out: &mut [f32],
        p: &AttentionParams,
        sinks: Option<&[f32]>,
    ) {
        if !(k.f32_blocks() && v.f32_blocks()) {
            return self.attention_rows(q, k, v, out, p, sinks);
        }
        if Self::takes_wide(p, k, v, sinks) {
            return self.attention_wide(q, k, v, out, p);
        }
        let hd = p.head_dim;
        let call = Call {
            p,
            sinks,
            k,
            v,
            kernels: &self.kernels,
            q,
            group: p.n_heads / p.n_kv_heads,
            chunk: chunk_len(hd),
        };
        let q_width = p.n_heads * hd;
        let out = &mut out[..p.rows * q_width];
        let chunks = call.chunks(&(0..p.rows));
        if p.rows == 1 && chunks.len() > 1 {
            if !v.is_f16() {
                return self.attention_split(&call, chunks, out);
            }
            // The f16 value cache's split waits for the pool twice; with two KV heads a thread
            // or more, a task per head (below) keeps the threads as busy with one wait (1B
            // shape, 4096 keys, 2 threads: tokens 7 % faster than split, 6 rounds).
            if p.n_kv_heads < 2 * self.threads() {
                return self.attention_split_exact(&call, chunks, out);
            }
        }
        // Blocks of query rows: about 32 queries (rows × heads of a group) each, the longest
        // (last) rows first so the pool ends balanced.
        let g = call.group;
        let block = (32 / g).clamp(1, p.rows);
        let blocks = p.rows.div_ceil(block);
        let shared = Shared(out.as_mut_ptr());
        self.pool.run(p.n_kv_heads * blocks, &|t| {
            let (kvh, b) = (t % p.n_kv_heads, blocks - 1 - t / p.n_kv_heads);
            let rows = b * block..((b + 1) * block).min(p.rows);
            SCRATCH.with(|sc| {
                let mut sc = sc.borrow_mut();
                let sc = &mut *sc;
                call.load_queries(kvh, rows.clone(), &mut sc.q);
                let nq = rows.len() * g;
                // Query qi's output: its (row, head) of `out`.
                let output = |qi: usize| {
                    let (i, h) = (rows.start + qi / g, kvh * g + qi % g);
                    // SAFETY: each (row, head) of the output belongs to exactly one task.
                    unsafe {
                        std::slice::from_raw_parts_mut(shared.get().add(i * q_width + h * hd), hd)
                    }
                };
                let mut acc = vec![0f32; nq * hd];
                if call.v.is_f16() {
                    call.exact_rows(sc, kvh, rows.clone(), &mut acc);
                    for (qi, a) in acc.chunks_exact(hd).enumerate() {
                        output(qi).copy_from_slice(a);
                    }
                    return;
                }
                let mut state: Vec<(f32, f64)> = vec![(f32::NEG_INFINITY, 0.0); nq];
                for ci in call.chunks(&rows) {
                    let r = call.chunk(sc, kvh, rows.clone(), ci);
                    for (qi, (st, a)) in state.iter_mut().zip(acc.chunks_exact_mut(hd)).enumerate()
                    {
                        let mut run = Running {
                            max: st.0,
                            sum: st.1,
                            acc: a,
                        };
                        run.combine(r.max[qi], r.sum[qi], &r.acc[qi * hd..(qi + 1) * hd]);
                        *st = (run.max, run.sum);
                    }
                }
                for (qi, (st, a)) in state.iter().zip(acc.chunks_exact_mut(hd)).enumerate() {
                    let h = kvh * g + qi % g;
                    Running {
                        max: st.0,
                        sum: st.1,
                        acc: a,
                    }
                    .finish(call.sinks.map(|s| s[h]), output(qi));
                }
            });
        });
    }

    /// One query row over many chunks: tasks per (KV head, chunk), then each head's chunks
    /// combined in order.
    fn attention_split(&self, call: &Call, chunks: std::ops::Range<usize>, out: &mut [f32]) {
        let (p, g, hd) = (call.p, call.group, call.hd());
        let nc = chunks.len();
        let slots = p.n_kv_heads * nc * g;
        SPLIT.with(|b| {
            let b = &mut *b.borrow_mut();
            let maxes = at_least(&mut b.max, slots);
            let sums = at_least(&mut b.sum, slots);
            let accs = at_least(&mut b.acc, slots * hd);
            let ptrs = (
                Shared(maxes.as_mut_ptr()),
                Shared(sums.as_mut_ptr()),
                Shared(accs.as_mut_ptr()),
            );
            self.pool.run(p.n_kv_heads * nc, &|t| {
                let (kvh, c) = (t / nc, t % nc);
                SCRATCH.with(|sc| {
                    let mut sc = sc.borrow_mut();
                    let sc = &mut *sc;
                    call.load_queries(kvh, 0..1, &mut sc.q);
                    let r = call.chunk(sc, kvh, 0..1, chunks.start + c);
                    let slot = (kvh * nc + c) * g;
                    // SAFETY: slots slot..slot + g belong to this task alone.
                    unsafe {
                        std::ptr::copy_nonoverlapping(r.max.as_ptr(), ptrs.0.get().add(slot), g);
                        std::ptr::copy_nonoverlapping(r.sum.as_ptr(), ptrs.1.get().add(slot), g);
                        std::ptr::copy_nonoverlapping(
                            r.acc.as_ptr(),
                            ptrs.2.get().add(slot * hd),
                            g * hd,
                        );
                    }
                });
            });
            let mut acc = vec![0f32; hd];
            for kvh in 0..p.n_kv_heads {
                for qi in 0..g {
                    acc.fill(0.0);
                    let mut run = Running {
                        max: f32::NEG_INFINITY,
                        sum: 0.0,
                        acc: &mut acc,
                    };
                    for c in 0..nc {
                        let slot = (kvh * nc + c) * g + qi;
                        run.combine(maxes[slot], sums[slot], &accs[slot * hd..(slot + 1) * hd]);
                    }
                    let h = kvh * g + qi;
                    run.finish(call.sinks.map(|s| s[h]), &mut out[h * hd..(h + 1) * hd]);
                }
            }
        });
    }
}

impl CpuBackend {
    /// Attention one (query row, head) at a time through the cache's `dot` and `axpy`: for
    /// cache types that `attention.rs` does not read in blocks.
    pub(super) fn attention_rows(
        &self,
        q: &[f32],
        k_cache: &CpuCache,
        v_cache: &CpuCache,
        out: &mut [f32],
        p: &AttentionParams,
        sinks: Option<&[f32]>,
    ) {
        let hd = p.head_dim;
        let q_width = p.n_heads * hd;
        let kv_width = p.n_kv_heads * hd;
        let group = p.n_heads / p.n_kv_heads;
        let kernels = &self.kernels;
        let out = &mut out[..p.rows * q_width];
        self.pool.for_each_chunk(out, hd, &|task, o| {
            let (i, h) = (task / p.n_heads, task % p.n_heads);
            let pos = p.start_pos + i;
            let lo = p.window.map_or(0, |w| (pos + 1).saturating_sub(w));
            let last = p.last_key(i);
            let kvh = h / group;
            let qh = k_cache.prepare_query(
                kernels,
                &q[i * q_width + h * hd..i * q_width + (h + 1) * hd],
            );
            let mut scores: Vec<f32> = (lo..=last)
                .map(|j| p.score(k_cache.dot(kernels, &qh, j * kv_width + kvh * hd)))
                .collect();
            let sink = sinks.map(|s| s[h]);
            let max = scores
                .iter()
                .chain(&sink)
                .fold(f32::NEG_INFINITY, |m, &s| m.max(s));
            let mut total = (kernels.exp_sub)(&mut scores, max);
            if let Some(s) = sink {
                total += ggml_math::expf(s - max) as f64;
            }
            let inv = (1.0 / total) as f32;
            scores.iter_mut().for_each(|s| *s *= inv);
            v_cache.prepare_weights(kernels, &mut scores);
            o.fill(0.0);
            for (j, &pj) in (lo..=last).zip(&scores) {
                v_cache.axpy(kernels, pj, j * kv_width + kvh * hd, o);
            }
            v_cache.finish_output(o);
        });
    }
}

/// A pointer tasks may share to write disjoint parts of one buffer.
#[derive(Clone, Copy)]
struct Shared<T>(*mut T);

unsafe impl<T> Send for Shared<T> {}
unsafe impl<T> Sync for Shared<T> {}

impl<T> Shared<T> {
    /// Through a method, so closures capture the wrapper rather than the raw pointer.
    fn get(self) -> *mut T {
        self.0
    }
}

/// `s[qi·stride + j] = q_qi · k_j` for the `nq` queries (rows of `q`) and keys (rows of `k`; a
/// multiple of 16 of them), each row `hd` values.
fn scores(
    kernels: &Kernels,
    q: &[f32],
    nq: usize,
    hd: usize,
    k: &[f32],
    s: &mut [f32],
    stride: usize,
) {
    let dot = kernels.dot_f32(GgmlType::F32);
    for qi in 0..nq {
        let qr = &q[qi * hd..(qi + 1) * hd];
        for (j, kr) in k.chunks_exact(hd).enumerate() {
            s[qi * stride + j] = dot(f32_bytes(kr), qr);
        }
    }
}

/// `acc[qi] = Σ_j p[qi·stride + j] · v_j` over the `n` value rows of `v` (`hd` values each).
fn accumulate(
    p: &[f32],
    stride: usize,
    nq: usize,
    v: &[f32],
    n: usize,
    hd: usize,
    acc: &mut [f32],
) {
    for (qi, a) in acc.chunks_exact_mut(hd).take(nq).enumerate() {
        a.fill(0.0);
        for (j, vr) in v.chunks_exact(hd).take(n).enumerate() {
            let pj = p[qi * stride + j];
            a.iter_mut().zip(vr).for_each(|(x, &y)| *x += pj * y);
        }
    }
}

mod exact;
#[cfg(test)]
mod tests;
mod wide;
