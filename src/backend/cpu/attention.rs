//! Attention on the CPU, flash-attention style: the keys and values of each KV head are taken in
//! chunks of fixed absolute positions (32 KB of f32 each), every query of the head's group is
//! scored against a chunk at once, and a running softmax (the chunk's maximum, sum and weighted
//! values, rescaled as the maximum grows) folds the chunks together, so no score row is ever as
//! long as the context. Prefill runs in parallel over (KV head, block of query rows); generation,
//! one query row, over (KV head, chunk), the chunks' partial softmaxes combined afterwards in
//! order. A query's chunks are combined in the same order whichever way the work was split, so a
//! row gets the same bits in prefill and in generation.
//!
//! On x86 (AVX-512, or AVX2 with FMA and F16C) the kernels read f32 and f16 caches in place,
//! converting f16 as they load it (SmolLM2 generating at 4k tokens of context: 66-81 t/s with
//! AVX-512 against ~49 when each chunk was first converted into a copy; 64-73 against 42-48 with
//! AVX2); elsewhere `CpuCache::read_f32` converts a chunk at a time into scratch. Cache types
//! with their own arithmetic keep the per-row path through `CpuCache`'s `dot`/`axpy`
//! (`attention_rows`). As llama.cpp multiplies: with an f16
//! key cache queries are rounded to f16, with an f16 value cache the softmax weights are.

#![allow(clippy::needless_range_loop)] // register tiles are indexed in step with their inputs

use std::cell::RefCell;

use super::{CpuBackend, CpuCache, f32_bytes, ggml_math, simd};
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
/// The kernels that read a cache in place: AVX-512 or AVX2 on x86, none elsewhere.
#[cfg(target_arch = "x86_64")]
type InPlace = x86::Isa;
#[cfg(not(target_arch = "x86_64"))]
enum InPlace {}

struct Call<'a> {
    p: &'a AttentionParams,
    k: &'a CpuCache,
    v: &'a CpuCache,
    kernels: &'a simd::Kernels,
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

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
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

    /// The attention output: the weighted values over the weight sum.
    fn finish(&self, out: &mut [f32]) {
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

impl Call<'_> {
    fn hd(&self) -> usize {
        self.p.head_dim
    }

    /// The keys query row `i` sees: [lo, pos].
    fn key_range(&self, i: usize) -> (usize, usize) {
        let pos = self.p.start_pos + i;
        (
            self.p.window.map_or(0, |w| (pos + 1).saturating_sub(w)),
            pos,
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
            self.kernels.round_f16(out);
        }
    }

    /// Chunk `ci` of KV head `kvh` against the queries of rows `rows` (in `sc.q`).
    fn chunk<'s>(
        &self,
        sc: &'s mut Scratch,
        kvh: usize,
        rows: std::ops::Range<usize>,
        ci: usize,
    ) -> ChunkResult<'s> {
        let (hd, g, c) = (self.hd(), self.group, self.chunk);
        let kv_width = self.p.n_kv_heads * hd;
        let last = self.p.start_pos + rows.end; // one past the last key any of the rows sees
        let c0 = ci * c;
        let n = (c0 + c).min(last) - c0;
        let n16 = n.next_multiple_of(16);
        let nq = rows.len() * g;
        sc.k.resize(c * hd, 0.0);
        sc.v.resize(c * hd, 0.0);
        sc.s.resize(nq * c, 0.0);
        sc.acc.resize(nq * hd, 0.0);
        sc.max.resize(nq, 0.0);
        sc.sum.resize(nq, 0.0);
        let in_place = self.in_place();
        if let Some(isa) = in_place {
            #[cfg(target_arch = "x86_64")]
            self.scores_in_place(isa, sc, kvh, c0, n, nq);
            #[cfg(not(target_arch = "x86_64"))]
            match isa {}
        } else {
            self.k.read_f32(c0, n, kv_width, kvh * hd, hd, &mut sc.k);
            self.v.read_f32(c0, n, kv_width, kvh * hd, hd, &mut sc.v);
            sc.k[n * hd..n16 * hd].fill(0.0);
            scores(self.kernels, &sc.q, nq, hd, &sc.k[..n16 * hd], &mut sc.s, c);
        }
        // Per query: the chunk's keys it sees, softmax weights over them, zero elsewhere.
        let (mut lo_all, mut hi_all) = (n, 0);
        for (qi, s) in sc.s.chunks_exact_mut(c).take(nq).enumerate() {
            let (lo, pos) = self.key_range(rows.start + qi / g);
            let a = lo.max(c0).min(c0 + n) - c0;
            let b = (pos + 1).min(c0 + n).saturating_sub(c0);
            if a >= b {
                s[..n].fill(0.0);
                sc.max[qi] = f32::NEG_INFINITY;
                sc.sum[qi] = 0.0;
                continue;
            }
            let valid = &mut s[a..b];
            valid.iter_mut().for_each(|x| *x *= self.p.scale);
            let m = valid.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            sc.sum[qi] = self.kernels.exp_sub(valid, m);
            if self.v.is_f16() {
                self.kernels.round_f16(valid);
            }
            sc.max[qi] = m;
            s[..a].fill(0.0);
            s[b..n].fill(0.0);
            (lo_all, hi_all) = (lo_all.min(a), hi_all.max(b));
        }
        if let (true, Some(isa)) = (lo_all < hi_all, in_place) {
            #[cfg(target_arch = "x86_64")]
            self.accumulate_in_place(isa, sc, kvh, c0, lo_all..hi_all, nq);
            #[cfg(not(target_arch = "x86_64"))]
            match isa {}
        } else if lo_all < hi_all {
            accumulate(
                &sc.s[lo_all..],
                c,
                nq,
                &sc.v[lo_all * hd..hi_all * hd],
                hi_all - lo_all,
                hd,
                &mut sc.acc,
            );
        } else {
            sc.acc.fill(0.0);
        }
        ChunkResult {
            max: &sc.max[..nq],
            sum: &sc.sum[..nq],
            acc: &sc.acc[..nq * hd],
        }
    }

    /// The x86 kernels that read this call's keys and values in place in the caches (f32 or
    /// f16, converted as loaded), if any; otherwise each chunk is copied into f32 first.
    fn in_place(&self) -> Option<InPlace> {
        #[cfg(target_arch = "x86_64")]
        if matches!(self.hd(), 64 | 128 | 256) {
            return self.kernels.gemm_isa().map(|isa| match isa {
                super::gemm::GemmIsa::Avx512Vnni => x86::Isa::Avx512,
                super::gemm::GemmIsa::AvxVnni | super::gemm::GemmIsa::Avx2 => x86::Isa::Avx2,
            });
        }
        None
    }

    /// The keys of KV head `kvh` from position `c0` as the x86 kernels read them in place, and
    /// how many rows the cache holds from there.
    #[cfg(target_arch = "x86_64")]
    fn rows_at(&self, cache: &CpuCache, kvh: usize, c0: usize) -> (x86::AnyRows, usize) {
        let kv_width = self.p.n_kv_heads * self.hd();
        let start = c0 * kv_width + kvh * self.hd();
        let (rows, len) = match cache {
            CpuCache::F32(c) => (
                x86::AnyRows::F32(x86::F32Rows(c[start..].as_ptr(), kv_width)),
                c.len(),
            ),
            CpuCache::F16(c) => (
                x86::AnyRows::F16(x86::F16Rows(c[start..].as_ptr() as *const u16, kv_width)),
                c.len(),
            ),
            CpuCache::Q8_0 { .. } => unreachable!("q8_0 caches take the per-row path"),
        };
        // Rows whose `hd` values lie within the cache.
        (rows, (len - start + kv_width - self.hd()) / kv_width)
    }

    /// `sc.s` for the `n` keys of chunk `c0` of KV head `kvh`, read in place (the last partial
    /// group of 16 keys through a zero-padded copy).
    #[cfg(target_arch = "x86_64")]
    fn scores_in_place(
        &self,
        isa: InPlace,
        sc: &mut Scratch,
        kvh: usize,
        c0: usize,
        n: usize,
        nq: usize,
    ) {
        let (hd, c) = (self.hd(), self.chunk);
        let (rows, available) = self.rows_at(self.k, kvh, c0);
        assert!(n <= available, "attention reads past the key cache");
        let full = n / 16 * 16;
        // SAFETY: the CPU has `isa` (`in_place`); `rows` holds `n` ≥ `full` rows.
        unsafe { x86::scores_any(isa, hd, &sc.q, nq, rows, full, &mut sc.s, c) };
        if full < n {
            let kv_width = self.p.n_kv_heads * hd;
            self.k
                .read_f32(c0 + full, n - full, kv_width, kvh * hd, hd, &mut sc.k);
            sc.k[(n - full) * hd..16 * hd].fill(0.0);
            let tail = x86::AnyRows::F32(x86::F32Rows(sc.k.as_ptr(), hd));
            // SAFETY: as above; the copy holds 16 rows.
            unsafe { x86::scores_any(isa, hd, &sc.q, nq, tail, 16, &mut sc.s[full..], c) };
        }
    }

    /// `sc.acc` from the weights in columns `cols` of `sc.s` and the values of KV head `kvh` at
    /// positions `c0 + cols`, read in place.
    #[cfg(target_arch = "x86_64")]
    fn accumulate_in_place(
        &self,
        isa: InPlace,
        sc: &mut Scratch,
        kvh: usize,
        c0: usize,
        cols: std::ops::Range<usize>,
        nq: usize,
    ) {
        let n = cols.len();
        let (rows, available) = self.rows_at(self.v, kvh, c0 + cols.start);
        assert!(n <= available, "attention reads past the value cache");
        // SAFETY: the CPU has `isa` (`in_place`); `rows` holds `n` rows.
        unsafe {
            x86::accumulate_any(
                isa,
                self.hd(),
                &sc.s[cols.start..],
                self.chunk,
                nq,
                rows,
                n,
                &mut sc.acc,
            )
        };
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
    ) {
        if !(k.f32_blocks() && v.f32_blocks()) {
            return self.attention_rows(q, k, v, out, p);
        }
        let hd = p.head_dim;
        let call = Call {
            p,
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
            return self.attention_split(&call, chunks, out);
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
                let mut acc = vec![0f32; nq * hd];
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
                    let (i, h) = (rows.start + qi / g, kvh * g + qi % g);
                    // SAFETY: each (row, head) of the output belongs to exactly one task.
                    let o = unsafe {
                        std::slice::from_raw_parts_mut(shared.get().add(i * q_width + h * hd), hd)
                    };
                    Running {
                        max: st.0,
                        sum: st.1,
                        acc: a,
                    }
                    .finish(o);
                }
            });
        });
    }

    /// One query row over many chunks: tasks per (KV head, chunk), then each head's chunks
    /// combined in order.
    fn attention_split(&self, call: &Call, chunks: std::ops::Range<usize>, out: &mut [f32]) {
        let (p, g, hd) = (call.p, call.group, call.hd());
        let nc = chunks.len();
        // Per (KV head, chunk, query of the group): max, sum and weighted values.
        let slots = p.n_kv_heads * nc * g;
        let mut maxes = vec![0f32; slots];
        let mut sums = vec![0f64; slots];
        let mut accs = vec![0f32; slots * hd];
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
                run.finish(&mut out[h * hd..(h + 1) * hd]);
            }
        }
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
    kernels: &simd::Kernels,
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

/// The x86 kernels (AVX-512, and AVX2 with FMA and F16C), for head dimensions 64, 128 and 256.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Which of the kernels to run.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub enum Isa {
        Avx512,
        Avx2,
    }

    /// 128-bit lanes 0, 1 from `a` and 2, 3 from `b`, each the sum of that lane and the lane
    /// two over.
    #[inline(always)]
    unsafe fn fold_pair(a: __m512, b: __m512) -> __m512 {
        unsafe {
            _mm512_add_ps(
                _mm512_shuffle_f32x4::<0b01_00_01_00>(a, b),
                _mm512_shuffle_f32x4::<0b11_10_11_10>(a, b),
            )
        }
    }

    /// Two `fold_pair` results folded again: lanes 0, 1 from `a` and 2, 3 from `b`.
    #[inline(always)]
    unsafe fn fold_quad(a: __m512, b: __m512) -> __m512 {
        unsafe {
            _mm512_add_ps(
                _mm512_shuffle_f32x4::<0b10_00_10_00>(a, b),
                _mm512_shuffle_f32x4::<0b11_01_11_01>(a, b),
            )
        }
    }

    /// The sums of 16 vectors' lanes, as one vector: lane 4L + q holds the sum of `r[4q + L]`.
    #[inline(always)]
    unsafe fn reduce16(r: [__m512; 16]) -> __m512 {
        unsafe {
            let mut t = [_mm512_setzero_ps(); 8];
            for i in 0..8 {
                t[i] = fold_pair(r[2 * i], r[2 * i + 1]);
            }
            // u[i]: 128-bit lane L holds four partial sums of r[4i + L].
            let mut u = [_mm512_setzero_ps(); 4];
            for i in 0..4 {
                u[i] = fold_quad(t[2 * i], t[2 * i + 1]);
            }
            let v01 = _mm512_add_ps(
                _mm512_unpacklo_ps(u[0], u[1]),
                _mm512_unpackhi_ps(u[0], u[1]),
            );
            let v23 = _mm512_add_ps(
                _mm512_unpacklo_ps(u[2], u[3]),
                _mm512_unpackhi_ps(u[2], u[3]),
            );
            let lo = _mm512_castpd_ps(_mm512_unpacklo_pd(
                _mm512_castps_pd(v01),
                _mm512_castps_pd(v23),
            ));
            let hi = _mm512_castpd_ps(_mm512_unpackhi_pd(
                _mm512_castps_pd(v01),
                _mm512_castps_pd(v23),
            ));
            _mm512_add_ps(lo, hi)
        }
    }

    /// Rows to read: keys or values, in a scratch buffer or in place in the cache.
    pub trait Rows: Copy {
        /// Values 16c..16c + 16 of row `j`, as f32 (AVX-512F).
        unsafe fn load(self, j: usize, c: usize) -> __m512;
        /// Values 8c..8c + 8 of row `j`, as f32 (AVX, F16C).
        unsafe fn load8(self, j: usize, c: usize) -> __m256;
    }

    /// f32 rows, row j at `ptr + j · stride`.
    #[derive(Clone, Copy)]
    pub struct F32Rows(pub *const f32, pub usize);

    /// f16 rows (their bits), row j at `ptr + j · stride`: converted as they are loaded (the
    /// conversion is exact, so the sums are those of f32 copies).
    #[derive(Clone, Copy)]
    pub struct F16Rows(pub *const u16, pub usize);

    impl Rows for F32Rows {
        #[inline(always)]
        unsafe fn load(self, j: usize, c: usize) -> __m512 {
            unsafe { _mm512_loadu_ps(self.0.add(j * self.1 + 16 * c)) }
        }

        #[inline(always)]
        unsafe fn load8(self, j: usize, c: usize) -> __m256 {
            unsafe { _mm256_loadu_ps(self.0.add(j * self.1 + 8 * c)) }
        }
    }

    impl Rows for F16Rows {
        #[inline(always)]
        unsafe fn load(self, j: usize, c: usize) -> __m512 {
            unsafe {
                let h = _mm256_loadu_si256(self.0.add(j * self.1 + 16 * c) as *const __m256i);
                _mm512_cvtph_ps(h)
            }
        }

        #[inline(always)]
        unsafe fn load8(self, j: usize, c: usize) -> __m256 {
            unsafe {
                let h = _mm_loadu_si128(self.0.add(j * self.1 + 8 * c) as *const __m128i);
                _mm256_cvtph_ps(h)
            }
        }
    }

    /// Rows of either kind.
    #[derive(Clone, Copy)]
    pub enum AnyRows {
        F32(F32Rows),
        F16(F16Rows),
    }

    /// `scores` for head dimension `hd` (64, 128 or 256) with the kernels of `isa`. Unsafe: the
    /// CPU must have `isa`, and `k` must hold `n` rows (a multiple of 16).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn scores_any(
        isa: Isa,
        hd: usize,
        q: &[f32],
        nq: usize,
        k: AnyRows,
        n: usize,
        s: &mut [f32],
        stride: usize,
    ) {
        unsafe {
            match k {
                AnyRows::F32(k) => scores_rows(isa, hd, q, nq, k, n, s, stride),
                AnyRows::F16(k) => scores_rows(isa, hd, q, nq, k, n, s, stride),
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    unsafe fn scores_rows<R: Rows>(
        isa: Isa,
        hd: usize,
        q: &[f32],
        nq: usize,
        k: R,
        n: usize,
        s: &mut [f32],
        stride: usize,
    ) {
        unsafe {
            match (isa, hd) {
                (Isa::Avx512, 64) => scores::<4, R>(q, nq, k, n, s, stride),
                (Isa::Avx512, 128) => scores::<8, R>(q, nq, k, n, s, stride),
                (Isa::Avx512, 256) => scores::<16, R>(q, nq, k, n, s, stride),
                (Isa::Avx2, 64 | 128 | 256) => scores_avx2(hd / 8, q, nq, k, n, s, stride),
                _ => unreachable!("head dimension {hd} has no x86 kernel"),
            }
        }
    }

    /// `accumulate` for head dimension `hd` (64, 128 or 256) with the kernels of `isa`. Unsafe:
    /// the CPU must have `isa`, and `v` must hold `n` rows.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn accumulate_any(
        isa: Isa,
        hd: usize,
        p: &[f32],
        stride: usize,
        nq: usize,
        v: AnyRows,
        n: usize,
        acc: &mut [f32],
    ) {
        unsafe {
            match v {
                AnyRows::F32(v) => accumulate_rows(isa, hd, p, stride, nq, v, n, acc),
                AnyRows::F16(v) => accumulate_rows(isa, hd, p, stride, nq, v, n, acc),
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    unsafe fn accumulate_rows<R: Rows>(
        isa: Isa,
        hd: usize,
        p: &[f32],
        stride: usize,
        nq: usize,
        v: R,
        n: usize,
        acc: &mut [f32],
    ) {
        unsafe {
            match (isa, hd) {
                (Isa::Avx512, 64) => accumulate::<4, 4, R>(p, stride, nq, v, n, acc),
                (Isa::Avx512, 128) => accumulate::<8, 2, R>(p, stride, nq, v, n, acc),
                (Isa::Avx512, 256) => accumulate::<16, 1, R>(p, stride, nq, v, n, acc),
                (Isa::Avx2, 64 | 128 | 256) => accumulate_avx2(hd / 64, p, stride, nq, v, n, acc),
                _ => unreachable!("head dimension {hd} has no x86 kernel"),
            }
        }
    }

    /// `s[qi·stride + j] = q_qi · k_j` for the `nq` queries and `n` keys (a multiple of 16).
    /// Unsafe: the CPU must have AVX-512F, and `k` must hold `n` rows.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn scores<const NV: usize, R: Rows>(
        q: &[f32],
        nq: usize,
        k: R,
        n: usize,
        s: &mut [f32],
        stride: usize,
    ) {
        unsafe {
            let hd = 16 * NV;
            assert!(q.len() >= nq * hd && n.is_multiple_of(16));
            assert!(nq == 0 || s.len() >= (nq - 1) * stride + n);
            for qi in 0..nq {
                let qp = q.as_ptr().add(qi * hd);
                let mut qr = [_mm512_setzero_ps(); NV];
                for c in 0..NV {
                    qr[c] = _mm512_loadu_ps(qp.add(16 * c));
                }
                for j0 in (0..n).step_by(16) {
                    let mut part = [_mm512_setzero_ps(); 16];
                    for i in 0..16 {
                        // Key 4L + q goes to part[4q + L], so reduce16 returns keys in order.
                        let key = j0 + 4 * (i % 4) + i / 4;
                        let mut a = _mm512_mul_ps(k.load(key, 0), qr[0]);
                        for c in 1..NV {
                            a = _mm512_fmadd_ps(k.load(key, c), qr[c], a);
                        }
                        part[i] = a;
                    }
                    _mm512_storeu_ps(s.as_mut_ptr().add(qi * stride + j0), reduce16(part));
                }
            }
        }
    }

    /// `acc[qi] = Σ_j p[qi·stride + j] · v_j` over `n` value rows. Unsafe: the CPU must have
    /// AVX-512F, and `v` must hold `n` rows.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn accumulate<const NV: usize, const T: usize, R: Rows>(
        p: &[f32],
        stride: usize,
        nq: usize,
        v: R,
        n: usize,
        acc: &mut [f32],
    ) {
        unsafe {
            let hd = 16 * NV;
            assert!(acc.len() >= nq * hd);
            assert!(nq == 0 || n == 0 || p.len() >= (nq - 1) * stride + n);
            let mut q0 = 0;
            while q0 < nq {
                let t = T.min(nq - q0);
                let mut a = [[_mm512_setzero_ps(); NV]; T];
                for j in 0..n {
                    let mut row = [_mm512_setzero_ps(); NV];
                    for c in 0..NV {
                        row[c] = v.load(j, c);
                    }
                    for r in 0..T {
                        // Rows past t repeat the last one; their sums are not stored.
                        let w = _mm512_set1_ps(*p.get_unchecked((q0 + r.min(t - 1)) * stride + j));
                        for c in 0..NV {
                            a[r][c] = _mm512_fmadd_ps(w, row[c], a[r][c]);
                        }
                    }
                }
                for r in 0..t {
                    for c in 0..NV {
                        _mm512_storeu_ps(acc.as_mut_ptr().add((q0 + r) * hd + 16 * c), a[r][c]);
                    }
                }
                q0 += t;
            }
        }
    }

    /// The sums of 8 vectors' lanes, as one vector: lane i holds the sum of `r[i]`.
    #[inline(always)]
    unsafe fn reduce8(r: [__m256; 8]) -> __m256 {
        unsafe {
            // After two rounds of pairwise sums, u0's low half holds partial sums of r[0..4] over
            // their low halves and its high half those over their high halves; u1 likewise r[4..8].
            let u0 = _mm256_hadd_ps(_mm256_hadd_ps(r[0], r[1]), _mm256_hadd_ps(r[2], r[3]));
            let u1 = _mm256_hadd_ps(_mm256_hadd_ps(r[4], r[5]), _mm256_hadd_ps(r[6], r[7]));
            _mm256_add_ps(
                _mm256_permute2f128_ps::<0x20>(u0, u1),
                _mm256_permute2f128_ps::<0x31>(u0, u1),
            )
        }
    }

    /// `scores` with AVX2 for rows of `nv` 8-value vectors: eight keys at a time, each summed in
    /// a register of its own. Unsafe: the CPU must have AVX2, FMA and F16C, and `k` must hold
    /// `n` rows.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn scores_avx2<R: Rows>(
        nv: usize,
        q: &[f32],
        nq: usize,
        k: R,
        n: usize,
        s: &mut [f32],
        stride: usize,
    ) {
        unsafe {
            let hd = 8 * nv;
            assert!(q.len() >= nq * hd && n.is_multiple_of(8));
            assert!(nq == 0 || s.len() >= (nq - 1) * stride + n);
            for qi in 0..nq {
                let qp = q.as_ptr().add(qi * hd);
                for j0 in (0..n).step_by(8) {
                    let mut part = [_mm256_setzero_ps(); 8];
                    for c in 0..nv {
                        let qc = _mm256_loadu_ps(qp.add(8 * c));
                        for i in 0..8 {
                            part[i] = _mm256_fmadd_ps(k.load8(j0 + i, c), qc, part[i]);
                        }
                    }
                    _mm256_storeu_ps(s.as_mut_ptr().add(qi * stride + j0), reduce8(part));
                }
            }
        }
    }

    /// `accumulate` with AVX2, 64 columns (eight registers) at a time over `blocks` of them.
    /// Unsafe: the CPU must have AVX2, FMA and F16C, and `v` must hold `n` rows.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn accumulate_avx2<R: Rows>(
        blocks: usize,
        p: &[f32],
        stride: usize,
        nq: usize,
        v: R,
        n: usize,
        acc: &mut [f32],
    ) {
        unsafe {
            let hd = 64 * blocks;
            assert!(acc.len() >= nq * hd);
            assert!(nq == 0 || n == 0 || p.len() >= (nq - 1) * stride + n);
            for qi in 0..nq {
                for b in 0..blocks {
                    let mut a = [_mm256_setzero_ps(); 8];
                    for j in 0..n {
                        let w = _mm256_set1_ps(*p.get_unchecked(qi * stride + j));
                        for c in 0..8 {
                            a[c] = _mm256_fmadd_ps(w, v.load8(j, 8 * b + c), a[c]);
                        }
                    }
                    for c in 0..8 {
                        let out = acc.as_mut_ptr().add(qi * hd + 64 * b + 8 * c);
                        _mm256_storeu_ps(out, a[c]);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::quant::tests::activations;
    use super::*;
    use crate::backend::{CacheType, CoreOps};

    /// A cache of `ty` holding `n` rows of `width` pseudo-random values.
    fn filled(b: &CpuBackend, ty: CacheType, n: usize, width: usize, seed: u64) -> CpuCache {
        let mut c = b.cache(n * width, ty, 1).unwrap();
        let src = activations(n * width, seed);
        b.store_rows(&src, &mut c, 0, n, width);
        c
    }

    /// The chunked attention agrees with the one-row-at-a-time path on every head size, cache
    /// type, window and split, and a row gets the same bits in prefill and in generation.
    #[test]
    fn chunked_attention_matches_the_per_row_path() {
        let b = CpuBackend::new(2).unwrap();
        check_chunked_attention(&b, "detected kernels");
        // Where the CPU has AVX-512, the AVX2 kernels too.
        #[cfg(target_arch = "x86_64")]
        if let Some(kernels) = b.kernels.without_avx512() {
            let mut avx2 = CpuBackend::new(2).unwrap();
            avx2.kernels = kernels;
            check_chunked_attention(&avx2, "AVX2 kernels");
        }
    }

    fn check_chunked_attention(b: &CpuBackend, isa: &str) {
        // (head_dim, heads, kv heads, window)
        let shapes = [
            (64, 8, 2, None),
            (128, 6, 2, Some(70)),
            (256, 4, 1, None),
            (48, 3, 3, Some(200)),
        ];
        for (hd, nh, nkv, window) in shapes {
            // (q8_0 takes the per-row path itself, and only for heads of whole blocks)
            for ty in CacheType::ALL
                .into_iter()
                .filter(|ty| hd % ty.block_len() == 0)
            {
                let (start, rows) = (300, 37);
                let n = start + rows;
                let kv_width = nkv * hd;
                let k = filled(b, ty, n, kv_width, 1 + hd as u64);
                let v = filled(b, ty, n, kv_width, 2 + hd as u64);
                let q = activations(rows * nh * hd, 3);
                let p = AttentionParams {
                    start_pos: start,
                    rows,
                    n_heads: nh,
                    n_kv_heads: nkv,
                    head_dim: hd,
                    scale: 1.0 / (hd as f32).sqrt(),
                    window,
                };
                let mut want = vec![0f32; rows * nh * hd];
                let mut got = vec![0f32; rows * nh * hd];
                b.attention_rows(&q, &k, &v, &mut want, &p);
                b.attention_impl(&q, &k, &v, &mut got, &p);
                let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    // f16 caches: the softmax weights are rounded to f16 relative to each
                    // chunk's maximum rather than after normalizing.
                    let tol = if ty == CacheType::F16 { 2e-3 } else { 1e-5 };
                    assert!(
                        (g - w).abs() <= tol * scale,
                        "{isa}: hd {hd} {ty:?} value {i}: {g} vs {w}"
                    );
                }
                // The last row alone (generation: split over chunks) equals its prefill row.
                let last = rows - 1;
                let one = AttentionParams {
                    start_pos: start + last,
                    rows: 1,
                    ..p
                };
                let mut alone = vec![0f32; nh * hd];
                b.attention_impl(&q[last * nh * hd..], &k, &v, &mut alone, &one);
                let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&alone),
                    bits(&got[last * nh * hd..]),
                    "{isa}: hd {hd} {ty:?}: generation and prefill differ"
                );
            }
        }
    }
}
