//! x86 attention kernels: the scores of a block of queries against keys, and the weighted sum of
//! values, reading an f32 or f16 cache in place (f16 converted as it is loaded, exactly), for heads
//! of any whole number of vectors up to 256 values. Written once over `F32Isa` (isa.rs) and
//! instantiated for AVX-512 and AVX2; the driver is `cpu/attention.rs`.
#![allow(clippy::needless_range_loop)] // register tiles are indexed in step with their inputs

use std::arch::x86_64::*;

use super::isa::{Avx2, Avx512, F32Isa};
use crate::backend::cpu::kernels::{AttentionKernels, CacheRows};

/// Rows of keys or values read in place.
trait Rows: Copy {
    /// Values `LANES·c .. LANES·(c + 1)` of row `j`, as f32.
    unsafe fn load<V: F32Isa>(self, j: usize, c: usize) -> V::F;
}

#[derive(Clone, Copy)]
struct F32Rows(*const f32, usize);

#[derive(Clone, Copy)]
struct F16Rows(*const u16, usize);

impl Rows for F32Rows {
    #[inline(always)]
    unsafe fn load<V: F32Isa>(self, j: usize, c: usize) -> V::F {
        unsafe { V::loadf(self.0.add(j * self.1 + V::LANES * c)) }
    }
}

impl Rows for F16Rows {
    #[inline(always)]
    unsafe fn load<V: F32Isa>(self, j: usize, c: usize) -> V::F {
        unsafe { V::f16s(self.0.add(j * self.1 + V::LANES * c) as *const u8) }
    }
}

/// Lane sums of `LANES` vectors as one vector, for the scores of `LANES` keys at once.
trait KeySums: F32Isa {
    /// Registers the accumulating tiles of `accumulate` may take.
    const ACC_REGS: usize;
    /// The key (from the first of the block) whose products accumulate in `parts[p]`.
    fn key_of_part(p: usize) -> usize;
    /// Lane `key_of_part(p)` holds the sum of `parts[p]`'s lanes (the first `LANES` parts).
    unsafe fn sum_parts(parts: &[Self::F; 16]) -> Self::F;
}

/// 128-bit lanes 0, 1 from `a` and 2, 3 from `b`, each the sum of that lane and the lane two
/// over.
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

impl KeySums for Avx512 {
    const ACC_REGS: usize = 16;

    fn key_of_part(p: usize) -> usize {
        4 * (p % 4) + p / 4
    }

    /// Lane 4L + q holds the sum of `parts[4q + L]`.
    #[inline(always)]
    unsafe fn sum_parts(r: &[__m512; 16]) -> __m512 {
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
}

impl KeySums for Avx2<false> {
    const ACC_REGS: usize = 8;

    fn key_of_part(p: usize) -> usize {
        p
    }

    /// Lane i holds the sum of `parts[i]`.
    #[inline(always)]
    unsafe fn sum_parts(r: &[__m256; 16]) -> __m256 {
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
}

/// `s[qi·stride + j] = q_qi · k_j` for the `nq` queries and `n` keys (a multiple of `LANES`),
/// heads of `hd` values: `LANES` keys at a time, each summed in a register of its own.
#[inline(always)]
unsafe fn scores<V: KeySums, R: Rows>(
    hd: usize,
    q: &[f32],
    nq: usize,
    k: R,
    n: usize,
    s: &mut [f32],
    stride: usize,
) {
    unsafe {
        let nv = hd / V::LANES;
        assert!(q.len() >= nq * hd && n.is_multiple_of(V::LANES));
        assert!(nq == 0 || s.len() >= (nq - 1) * stride + n);
        for qi in 0..nq {
            let qp = q.as_ptr().add(qi * hd);
            for j0 in (0..n).step_by(V::LANES) {
                let mut part = [V::fzero(); 16];
                let q0 = V::loadf(qp);
                for p in 0..V::LANES {
                    part[p] = V::mul(k.load::<V>(j0 + V::key_of_part(p), 0), q0);
                }
                for c in 1..nv {
                    let qc = V::loadf(qp.add(V::LANES * c));
                    for p in 0..V::LANES {
                        part[p] = V::fmadd(k.load::<V>(j0 + V::key_of_part(p), c), qc, part[p]);
                    }
                }
                V::store(s.as_mut_ptr().add(qi * stride + j0), V::sum_parts(&part));
            }
        }
    }
}

/// AVX2's `scores`: three queries by four keys at a time (twelve sums, each key load feeding three
/// and each query load four; 16 registers), the queries left over by `scores`. Each score is
/// summed as `scores` sums it (vector lanes over the head, then the same pairwise reduction), so
/// the bits are the same.
#[inline(always)]
unsafe fn scores_avx2_tiled<R: Rows>(
    hd: usize,
    q: &[f32],
    nq: usize,
    k: R,
    n: usize,
    s: &mut [f32],
    stride: usize,
) {
    type V = Avx2<false>;
    unsafe {
        let nv = hd / 8;
        assert!(q.len() >= nq * hd && n.is_multiple_of(8));
        assert!(nq == 0 || s.len() >= (nq - 1) * stride + n);
        let mut qi = 0;
        while qi + 3 <= nq {
            let qp: [*const f32; 3] = std::array::from_fn(|t| q.as_ptr().add((qi + t) * hd));
            for j0 in (0..n).step_by(4) {
                let mut part = [[_mm256_setzero_ps(); 4]; 3];
                let qv: [__m256; 3] = std::array::from_fn(|t| _mm256_loadu_ps(qp[t]));
                for p in 0..4 {
                    let kv = k.load::<V>(j0 + p, 0);
                    for t in 0..3 {
                        part[t][p] = _mm256_mul_ps(kv, qv[t]);
                    }
                }
                for c in 1..nv {
                    let qv: [__m256; 3] =
                        std::array::from_fn(|t| _mm256_loadu_ps(qp[t].add(8 * c)));
                    for p in 0..4 {
                        let kv = k.load::<V>(j0 + p, c);
                        for t in 0..3 {
                            part[t][p] = _mm256_fmadd_ps(kv, qv[t], part[t][p]);
                        }
                    }
                }
                for t in 0..3 {
                    // As `sum_parts`: lane p is (p₀+p₁ + p₂+p₃) + (p₄+p₅ + p₆+p₇).
                    let [r0, r1, r2, r3] = part[t];
                    let u = _mm256_hadd_ps(_mm256_hadd_ps(r0, r1), _mm256_hadd_ps(r2, r3));
                    let sum = _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps::<1>(u));
                    _mm_storeu_ps(s.as_mut_ptr().add((qi + t) * stride + j0), sum);
                }
            }
            qi += 3;
        }
        let rest = &q[qi * hd..];
        let from = (qi * stride).min(s.len());
        let out = &mut s[from..];
        scores::<V, R>(hd, rest, nq - qi, k, n, out, stride);
    }
}

/// `acc[qi] = Σ_j p[qi·stride + j] · v_j` over `n` value rows of `hd` values, in tiles of `T`
/// queries × `C` registers of columns (`T·C` accumulators kept in registers).
#[inline(always)]
unsafe fn accumulate<V: F32Isa, R: Rows, const T: usize, const C: usize>(
    hd: usize,
    p: &[f32],
    stride: usize,
    nq: usize,
    v: R,
    n: usize,
    acc: &mut [f32],
) {
    unsafe {
        assert!(acc.len() >= nq * hd);
        assert!(nq == 0 || n == 0 || p.len() >= (nq - 1) * stride + n);
        let blocks = hd / (V::LANES * C);
        let mut q0 = 0;
        while q0 < nq {
            let t = T.min(nq - q0);
            for b in 0..blocks {
                let mut a = [[V::fzero(); C]; T];
                for j in 0..n {
                    let mut row = [V::fzero(); C];
                    for c in 0..C {
                        row[c] = v.load::<V>(j, b * C + c);
                    }
                    for r in 0..T {
                        // Rows past t repeat the last one; their sums are not stored.
                        let w = V::fsplat(*p.get_unchecked((q0 + r.min(t - 1)) * stride + j));
                        for c in 0..C {
                            a[r][c] = V::fmadd(w, row[c], a[r][c]);
                        }
                    }
                }
                for r in 0..t {
                    for c in 0..C {
                        let out = acc.as_mut_ptr().add((q0 + r) * hd + V::LANES * (b * C + c));
                        V::store(out, a[r][c]);
                    }
                }
            }
            q0 += t;
        }
    }
}

/// `accumulate` with the widest tile of `ACC_REGS` accumulators: a whole row of columns where it
/// fits (then `ACC_REGS / columns` queries at once), else `ACC_REGS` columns for one query; heads
/// of other lengths (72 = 9 AVX2 vectors in the vision towers, 96 in Phi-3) in blocks of 4, 3, 2
/// or 1 vectors for 2, 3, 4 or 4 queries at once: few enough registers that nothing spills (4 × 3
/// spilled and ran a third slower).
#[inline(always)]
unsafe fn accumulate_tiled<V: KeySums, R: Rows>(
    hd: usize,
    p: &[f32],
    stride: usize,
    nq: usize,
    v: R,
    n: usize,
    acc: &mut [f32],
) {
    unsafe {
        let vectors = hd / V::LANES;
        let columns = vectors.min(V::ACC_REGS);
        match (V::ACC_REGS / columns, columns) {
            (4, 4) if vectors == 4 => accumulate::<V, R, 4, 4>(hd, p, stride, nq, v, n, acc),
            (2, 8) if vectors == 8 => accumulate::<V, R, 2, 8>(hd, p, stride, nq, v, n, acc),
            (1, 16) if vectors == 16 => accumulate::<V, R, 1, 16>(hd, p, stride, nq, v, n, acc),
            (1, 8) if vectors.is_multiple_of(8) => {
                accumulate::<V, R, 1, 8>(hd, p, stride, nq, v, n, acc)
            }
            _ if vectors.is_multiple_of(4) => {
                accumulate::<V, R, 2, 4>(hd, p, stride, nq, v, n, acc)
            }
            _ if vectors.is_multiple_of(3) => {
                accumulate::<V, R, 3, 3>(hd, p, stride, nq, v, n, acc)
            }
            _ if vectors.is_multiple_of(2) => {
                accumulate::<V, R, 4, 2>(hd, p, stride, nq, v, n, acc)
            }
            _ => accumulate::<V, R, 4, 1>(hd, p, stride, nq, v, n, acc),
        }
    }
}

macro_rules! instantiate {
    ($scores:ident, $accumulate:ident, $isa:ty, $features:literal, $scores_impl:path) => {
        #[target_feature(enable = $features)]
        unsafe fn $scores(
            hd: usize,
            q: &[f32],
            nq: usize,
            k: CacheRows,
            n: usize,
            s: &mut [f32],
            stride: usize,
        ) {
            unsafe {
                match k {
                    CacheRows::F32(p, w) => $scores_impl(hd, q, nq, F32Rows(p, w), n, s, stride),
                    CacheRows::F16(p, w) => $scores_impl(hd, q, nq, F16Rows(p, w), n, s, stride),
                }
            }
        }

        #[target_feature(enable = $features)]
        unsafe fn $accumulate(
            hd: usize,
            p: &[f32],
            stride: usize,
            nq: usize,
            v: CacheRows,
            n: usize,
            acc: &mut [f32],
        ) {
            unsafe {
                match v {
                    CacheRows::F32(ptr, w) => {
                        accumulate_tiled::<$isa, _>(hd, p, stride, nq, F32Rows(ptr, w), n, acc)
                    }
                    CacheRows::F16(ptr, w) => {
                        accumulate_tiled::<$isa, _>(hd, p, stride, nq, F16Rows(ptr, w), n, acc)
                    }
                }
            }
        }
    };
}

instantiate!(
    scores_avx512,
    accumulate_avx512,
    Avx512,
    "avx512f,avx2,fma,f16c",
    scores::<Avx512, _>
);
instantiate!(
    scores_avx2,
    accumulate_avx2,
    Avx2<false>,
    "avx2,fma,f16c",
    scores_avx2_tiled
);

/// The AVX-512 kernels.
pub const AVX512: AttentionKernels = AttentionKernels {
    scores: scores_avx512,
    accumulate: accumulate_avx512,
    lanes: 16,
};

/// The AVX2 kernels.
pub const AVX2: AttentionKernels = AttentionKernels {
    scores: scores_avx2,
    accumulate: accumulate_avx2,
    lanes: 8,
};
