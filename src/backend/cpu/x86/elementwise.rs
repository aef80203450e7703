//! x86 elementwise kernels (AVX2, FMA and F16C; the same at every x86 level): activation
//! quantization to 8 bits (the portable quantizers' values, llama.cpp's `quantize_row_q8_0/1/K`),
//! SiLU and softmax's exponentials with llama.cpp's `expf` lane for lane, f16 rounding, the f16
//! dot and axpy of attention over f16 caches, the F32/F16 weight-row dot products, and the delta
//! rule of Gated DeltaNet. The public functions are safe: `x86::kernels` hands them out only
//! after detecting the features.
#![allow(clippy::needless_range_loop)] // per-row accumulators are indexed in step with the rows

use std::arch::x86_64::*;

use half::f16;

use super::rows::{f16 as f16_at, hsum_f32, hsum_i32};
use crate::backend::cpu::ggml_math;
use crate::backend::cpu::kernels::{BlockQ8, BlockQ8K};

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f32_f16_impl(a: &[f32], b: &[f16]) -> f32 {
    unsafe {
        let n = a.len().min(b.len());
        let bp = b.as_ptr() as *const u16;
        let (mut s0, mut s1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut i = 0;
        while i + 16 <= n {
            let b0 = _mm256_cvtph_ps(_mm_loadu_si128(bp.add(i) as *const __m128i));
            let b1 = _mm256_cvtph_ps(_mm_loadu_si128(bp.add(i + 8) as *const __m128i));
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a.as_ptr().add(i)), b0, s0);
            s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a.as_ptr().add(i + 8)), b1, s1);
            i += 16;
        }
        let mut sum = hsum_f32(_mm256_add_ps(s0, s1));
        while i < n {
            sum += a[i] * b[i].to_f32();
            i += 1;
        }
        sum
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn axpy_f16_impl(alpha: f32, x: &[f16], y: &mut [f32]) {
    unsafe {
        let n = x.len().min(y.len());
        let xp = x.as_ptr() as *const u16;
        let a = _mm256_set1_ps(alpha);
        let mut i = 0;
        while i + 8 <= n {
            let xv = _mm256_cvtph_ps(_mm_loadu_si128(xp.add(i) as *const __m128i));
            let r = _mm256_fmadd_ps(a, xv, _mm256_loadu_ps(y.as_ptr().add(i)));
            _mm256_storeu_ps(y.as_mut_ptr().add(i), r);
            i += 8;
        }
        while i < n {
            y[i] += alpha * x[i].to_f32();
            i += 1;
        }
    }
}

/// 32 quantized values (four vectors of eight i32, each within ±127) as bytes, in order: the
/// saturating packs are exact there, and leave each 128-bit lane's halves interleaved, which the
/// permutation undoes.
#[inline(always)]
unsafe fn pack_bytes(q: &[__m256i; 4]) -> __m256i {
    unsafe {
        let bytes = _mm256_packs_epi16(
            _mm256_packs_epi32(q[0], q[1]),
            _mm256_packs_epi32(q[2], q[3]),
        );
        _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
    }
}

/// `portable::quantize_q8`, vectorized; the same values (llama.cpp's `quantize_row_q8_0/1`).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quantize_q8_impl(x: &[f32], out: &mut [BlockQ8]) {
    unsafe {
        let sign = _mm256_set1_ps(-0.0);
        for (xb, b) in x.chunks_exact(32).zip(out.iter_mut()) {
            let v: [__m256; 4] = std::array::from_fn(|i| _mm256_loadu_ps(xb.as_ptr().add(8 * i)));
            let m = v.iter().fold(_mm256_setzero_ps(), |m, &vi| {
                _mm256_max_ps(m, _mm256_andnot_ps(sign, vi))
            });
            let amax = hsum_max(m);
            let d = amax / 127.0;
            let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
            let q: [__m256i; 4] = std::array::from_fn(|i| {
                _mm256_cvtps_epi32(_mm256_round_ps::<
                    { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
                >(_mm256_mul_ps(v[i], id)))
            });
            let sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
            _mm256_storeu_si256(b.qs.as_mut_ptr() as *mut __m256i, pack_bytes(&q));
            b.d = f16::from_f32(d).to_f32();
            b.s = f16::from_f32(d * hsum_i32(sum) as f32).to_f32();
        }
    }
}

/// `portable::quantize_q8k`, vectorized; the same values (llama.cpp's `quantize_row_q8_K`).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quantize_q8k_impl(x: &[f32], out: &mut [BlockQ8K]) {
    unsafe {
        let sign = _mm256_set1_ps(-0.0);
        for (xb, b) in x.chunks_exact(256).zip(out.iter_mut()) {
            let p = xb.as_ptr();
            let mut m = _mm256_setzero_ps();
            for i in 0..32 {
                m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(p.add(8 * i))));
            }
            let amax = hsum_max(m);
            if amax == 0.0 {
                *b = BlockQ8K::default();
                continue;
            }
            // The first value of that magnitude: its sign decides the scale's.
            let max = xb.iter().copied().find(|v| v.abs() == amax).unwrap_or(amax);
            let iscale = -127.0 / max;
            let is = _mm256_set1_ps(iscale);
            let quantize = |i: usize| {
                let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                    _mm256_mul_ps(_mm256_loadu_ps(p.add(8 * i)), is),
                );
                _mm256_min_epi32(_mm256_cvtps_epi32(r), _mm256_set1_epi32(127))
            };
            // Per group of 16 values, its two halves of 8 added lane by lane (summed across the
            // lanes below, eight groups at a time).
            let mut halves = [_mm256_setzero_si256(); 16];
            for g in 0..8 {
                // 32 values: groups 2g and 2g + 1.
                let q: [__m256i; 4] = std::array::from_fn(|k| quantize(4 * g + k));
                halves[2 * g] = _mm256_add_epi32(q[0], q[1]);
                halves[2 * g + 1] = _mm256_add_epi32(q[2], q[3]);
                let bytes = pack_bytes(&q);
                _mm256_storeu_si256(b.qs.as_mut_ptr().add(32 * g) as *mut __m256i, bytes);
            }
            let sums = |v: &[__m256i]| {
                let a: [__m256i; 4] =
                    std::array::from_fn(|k| _mm256_hadd_epi32(v[2 * k], v[2 * k + 1]));
                let (lo, hi) = (_mm256_hadd_epi32(a[0], a[1]), _mm256_hadd_epi32(a[2], a[3]));
                _mm256_add_epi32(
                    _mm256_permute2x128_si256::<0x20>(lo, hi),
                    _mm256_permute2x128_si256::<0x31>(lo, hi),
                )
            };
            let (s0, s1) = (sums(&halves[..8]), sums(&halves[8..]));
            // Each sum fits: 16 · 127 < 2^15.
            let packed = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(s0, s1));
            _mm256_storeu_si256(b.bsums.as_mut_ptr() as *mut __m256i, packed);
            b.sum_pairs();
            b.d = 1.0 / iscale;
        }
    }
}

#[inline(always)]
unsafe fn hsum_max(v: __m256) -> f32 {
    unsafe {
        let s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_max_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }
}

pub fn quantize_q8(x: &[f32], out: &mut [BlockQ8]) {
    // SAFETY: handed out by `Kernels` only after AVX2, FMA and F16C were detected.
    unsafe { quantize_q8_impl(x, out) }
}

pub fn quantize_q8k(x: &[f32], out: &mut [BlockQ8K]) {
    // SAFETY: as above.
    unsafe { quantize_q8k_impl(x, out) }
}

/// llama.cpp's `expf`, eight lanes at a time: the same operations as the scalar
/// `ggml_math::expf`, lane for lane.
#[inline(always)]
unsafe fn expf8(x: __m256) -> __m256 {
    unsafe {
        use ggml_math::EXPF_CONSTANTS as C;
        let c = |i: usize| _mm256_set1_ps(f32::from_bits(C[i]));
        let r = c(0);
        let z = _mm256_fmadd_ps(x, c(1), r);
        let n = _mm256_sub_ps(z, r);
        let b = _mm256_fnmadd_ps(n, c(2), _mm256_fnmadd_ps(n, c(3), x));
        let u = _mm256_mul_ps(b, b);
        let j = _mm256_fmadd_ps(
            _mm256_fmadd_ps(
                _mm256_fmadd_ps(c(4), b, c(5)),
                u,
                _mm256_fmadd_ps(c(6), b, c(7)),
            ),
            u,
            _mm256_fmadd_ps(c(8), b, _mm256_set1_ps(1.0)),
        );
        // scalef(j, n) as j · 2^(n>>1) · 2^(n − (n>>1)), with |n| ≤ 192 clamped.
        let big = _mm256_cmp_ps(
            _mm256_andnot_ps(_mm256_set1_ps(-0.0), n),
            _mm256_set1_ps(192.0),
            _CMP_GT_OQ,
        );
        let ni = _mm256_cvtps_epi32(_mm256_max_ps(
            _mm256_min_ps(n, _mm256_set1_ps(192.0)),
            _mm256_set1_ps(-192.0),
        ));
        let h = _mm256_srai_epi32(ni, 1);
        let pow2 = |e: __m256i| {
            _mm256_castsi256_ps(_mm256_slli_epi32(
                _mm256_add_epi32(e, _mm256_set1_epi32(127)),
                23,
            ))
        };
        let res = _mm256_mul_ps(_mm256_mul_ps(j, pow2(h)), pow2(_mm256_sub_epi32(ni, h)));
        // |n| > 192: 0 below, infinity above.
        let alt = _mm256_and_ps(
            _mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_GT_OQ),
            _mm256_set1_ps(f32::INFINITY),
        );
        _mm256_blendv_ps(res, alt, big)
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn silu_mul_impl(gate: &mut [f32], up: &[f32]) {
    unsafe {
        let n = gate.len().min(up.len());
        let one = _mm256_set1_ps(1.0);
        let mut i = 0;
        while i + 8 <= n {
            let x = _mm256_loadu_ps(gate.as_ptr().add(i));
            let e = expf8(_mm256_sub_ps(_mm256_setzero_ps(), x));
            let s = _mm256_div_ps(x, _mm256_add_ps(one, e));
            _mm256_storeu_ps(
                gate.as_mut_ptr().add(i),
                _mm256_mul_ps(s, _mm256_loadu_ps(up.as_ptr().add(i))),
            );
            i += 8;
        }
        for k in i..n {
            gate[k] = ggml_math::silu(gate[k]) * up[k];
        }
    }
}

/// `expf8` on sixteen lanes, operation for operation, so it equals `ggml_math::expf` bit for bit
/// also where the result is subnormal (AVX-512's own `scalef` rounds those once; the split
/// power of two, twice).
#[inline(always)]
unsafe fn expf16(x: __m512) -> __m512 {
    unsafe {
        use ggml_math::EXPF_CONSTANTS as C;
        let c = |i: usize| _mm512_set1_ps(f32::from_bits(C[i]));
        let r = c(0);
        let z = _mm512_fmadd_ps(x, c(1), r);
        let n = _mm512_sub_ps(z, r);
        let b = _mm512_fnmadd_ps(n, c(2), _mm512_fnmadd_ps(n, c(3), x));
        let u = _mm512_mul_ps(b, b);
        let j = _mm512_fmadd_ps(
            _mm512_fmadd_ps(
                _mm512_fmadd_ps(c(4), b, c(5)),
                u,
                _mm512_fmadd_ps(c(6), b, c(7)),
            ),
            u,
            _mm512_fmadd_ps(c(8), b, _mm512_set1_ps(1.0)),
        );
        let big = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(_mm512_abs_ps(n), _mm512_set1_ps(192.0));
        let ni = _mm512_cvtps_epi32(_mm512_max_ps(
            _mm512_min_ps(n, _mm512_set1_ps(192.0)),
            _mm512_set1_ps(-192.0),
        ));
        let h = _mm512_srai_epi32::<1>(ni);
        let pow2 = |e: __m512i| {
            _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(
                e,
                _mm512_set1_epi32(127),
            )))
        };
        let res = _mm512_mul_ps(_mm512_mul_ps(j, pow2(h)), pow2(_mm512_sub_epi32(ni, h)));
        let positive = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(n, _mm512_setzero_ps());
        let alt = _mm512_maskz_mov_ps(positive, _mm512_set1_ps(f32::INFINITY));
        _mm512_mask_blend_ps(big, res, alt)
    }
}

/// `silu_mul_impl` sixteen lanes at a time. (1B shape, Q5_K_M, 2 threads, pp128: the gated
/// activation 34–41 → 30–33 µs a token; what is left is mostly memory traffic.)
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn silu_mul_avx512_impl(gate: &mut [f32], up: &[f32]) {
    unsafe {
        let n = gate.len().min(up.len());
        let one = _mm512_set1_ps(1.0);
        let mut i = 0;
        while i + 16 <= n {
            let x = _mm512_loadu_ps(gate.as_ptr().add(i));
            let e = expf16(_mm512_sub_ps(_mm512_setzero_ps(), x));
            let s = _mm512_div_ps(x, _mm512_add_ps(one, e));
            _mm512_storeu_ps(
                gate.as_mut_ptr().add(i),
                _mm512_mul_ps(s, _mm512_loadu_ps(up.as_ptr().add(i))),
            );
            i += 16;
        }
        silu_mul_impl(&mut gate[i..n], &up[i..n]);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn exp_sub_impl(x: &mut [f32], max: f32) -> f64 {
    unsafe { exp_sub_from(x, max, 0, 0.0) }
}

/// `exp_sub` at the AVX-512 level: sixteen exponentials at a time, summed as two eights in
/// order, so the sum is `exp_sub_impl`'s bit for bit.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn exp_sub_avx512_impl(x: &mut [f32], max: f32) -> f64 {
    unsafe {
        let n = x.len();
        let m = _mm512_set1_ps(max);
        let mut sum = 0.0f64;
        let mut i = 0;
        while i + 16 <= n {
            let e = expf16(_mm512_sub_ps(_mm512_loadu_ps(x.as_ptr().add(i)), m));
            _mm512_storeu_ps(x.as_mut_ptr().add(i), e);
            let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(e)));
            sum += hsum_f32(_mm512_castps512_ps256(e)) as f64;
            sum += hsum_f32(hi) as f64;
            i += 16;
        }
        exp_sub_from(x, max, i, sum)
    }
}

/// `exp_sub` of `x[from..]`, its sum added on to `sum` in order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn exp_sub_from(x: &mut [f32], max: f32, from: usize, mut sum: f64) -> f64 {
    unsafe {
        let n = x.len();
        let m = _mm256_set1_ps(max);
        let mut i = from;
        while i + 8 <= n {
            let e = expf8(_mm256_sub_ps(_mm256_loadu_ps(x.as_ptr().add(i)), m));
            _mm256_storeu_ps(x.as_mut_ptr().add(i), e);
            sum += hsum_f32(e) as f64;
            i += 8;
        }
        for v in &mut x[i..] {
            *v = ggml_math::expf(*v - max);
            sum += *v as f64;
        }
        sum
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn round_f16_impl(x: &mut [f32]) {
    unsafe {
        let n = x.len();
        let mut i = 0;
        while i + 8 <= n {
            let h =
                _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(x.as_ptr().add(i)));
            _mm256_storeu_ps(x.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
            i += 8;
        }
        for v in &mut x[i..] {
            *v = f16::from_f32(*v).to_f32();
        }
    }
}

pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    // SAFETY: handed out by `Kernels` only after AVX2, FMA and F16C were detected.
    unsafe { silu_mul_impl(gate, up) }
}

pub fn silu_mul_avx512(gate: &mut [f32], up: &[f32]) {
    // SAFETY: handed out by `Kernels` only at the AVX-512 VNNI level.
    unsafe { silu_mul_avx512_impl(gate, up) }
}

pub fn delta_rule(
    s: &mut [f32],
    k: &[f32],
    q: &[f32],
    v: &[f32],
    decay_beta_scale: [f32; 3],
    out: &mut [f32],
) {
    let d = k.len();
    assert!(q.len() == d && s.len() == v.len() * d && out.len() >= v.len());
    let mut j = 0;
    // SAFETY: AVX2, FMA and F16C were detected (as above); rows j..j + R lie in `s`.
    unsafe {
        while j + 4 <= v.len() {
            delta_rule_rows::<4>(s, k, q, v, decay_beta_scale, out, j);
            j += 4;
        }
        while j < v.len() {
            delta_rule_rows::<1>(s, k, q, v, decay_beta_scale, out, j);
            j += 1;
        }
    }
}

/// Rows j..j + R of `Kernels::delta_rule`, side by side so their dot products' dependency
/// chains overlap. Per row, the arithmetic of the scalar steps: `x *= decay`, the 8-lane FMA
/// dot of `dot_f32_bytes_impl` (tail added after the horizontal sum), `x += k·δ` unfused.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::needless_range_loop)] // the rows' accumulators and the tails index alike
unsafe fn delta_rule_rows<const R: usize>(
    s: &mut [f32],
    k: &[f32],
    q: &[f32],
    v: &[f32],
    [decay, beta, scale]: [f32; 3],
    out: &mut [f32],
    j: usize,
) {
    unsafe {
        let d = k.len();
        let n8 = d / 8 * 8;
        let base = s.as_mut_ptr().add(j * d);
        let row = |r: usize| base.add(r * d);
        let dv = _mm256_set1_ps(decay);
        let mut acc = [_mm256_setzero_ps(); R];
        let mut i = 0;
        while i < n8 {
            let kv = _mm256_loadu_ps(k.as_ptr().add(i));
            for r in 0..R {
                let x = _mm256_mul_ps(_mm256_loadu_ps(row(r).add(i)), dv);
                _mm256_storeu_ps(row(r).add(i), x);
                acc[r] = _mm256_fmadd_ps(x, kv, acc[r]);
            }
            i += 8;
        }
        let mut delta = [0.0f32; R];
        for r in 0..R {
            let mut dot = hsum_f32(acc[r]);
            for i in n8..d {
                let x = row(r).add(i);
                *x *= decay;
                dot += *x * k[i];
            }
            delta[r] = (v[j + r] - dot) * beta;
            acc[r] = _mm256_setzero_ps();
        }
        let mut i = 0;
        while i < n8 {
            let kv = _mm256_loadu_ps(k.as_ptr().add(i));
            let qv = _mm256_loadu_ps(q.as_ptr().add(i));
            for r in 0..R {
                let x = _mm256_loadu_ps(row(r).add(i));
                let x = _mm256_add_ps(x, _mm256_mul_ps(kv, _mm256_set1_ps(delta[r])));
                _mm256_storeu_ps(row(r).add(i), x);
                acc[r] = _mm256_fmadd_ps(x, qv, acc[r]);
            }
            i += 8;
        }
        for r in 0..R {
            let mut dot = hsum_f32(acc[r]);
            for i in n8..d {
                let x = row(r).add(i);
                *x += k[i] * delta[r];
                dot += *x * q[i];
            }
            out[j + r] = dot * scale;
        }
    }
}

pub fn exp_sub(x: &mut [f32], max: f32) -> f64 {
    // SAFETY: as above.
    unsafe { exp_sub_impl(x, max) }
}

pub fn exp_sub_avx512(x: &mut [f32], max: f32) -> f64 {
    // SAFETY: handed out by `Kernels` only at the AVX-512 VNNI level.
    unsafe { exp_sub_avx512_impl(x, max) }
}

pub fn round_f16(x: &mut [f32]) {
    // SAFETY: as above.
    unsafe { round_f16_impl(x) }
}

/// f32 weights stored as little-endian bytes (possibly unaligned) · f32 activations.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f32_bytes_impl(w: &[u8], x: &[f32]) -> f32 {
    unsafe {
        let n = (w.len() / 4).min(x.len());
        let mut s = _mm256_setzero_ps();
        let mut i = 0;
        while i + 8 <= n {
            let wv = _mm256_loadu_ps(w.as_ptr().add(4 * i) as *const f32);
            s = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x.as_ptr().add(i)), s);
            i += 8;
        }
        let mut sum = hsum_f32(s);
        while i < n {
            let b = &w[4 * i..4 * i + 4];
            sum += f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * x[i];
            i += 1;
        }
        sum
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f16_bytes_impl(w: &[u8], x: &[f32]) -> f32 {
    unsafe {
        let n = (w.len() / 2).min(x.len());
        let mut s = _mm256_setzero_ps();
        let mut i = 0;
        while i + 8 <= n {
            let h = _mm_loadu_si128(w.as_ptr().add(2 * i) as *const __m128i);
            // The activations rounded to f16, as llama.cpp multiplies F16 weights.
            let xs = _mm256_loadu_ps(x.as_ptr().add(i));
            let xs = _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(xs));
            s = _mm256_fmadd_ps(_mm256_cvtph_ps(h), xs, s);
            i += 8;
        }
        let mut sum = hsum_f32(s);
        while i < n {
            sum += f16_at(w, 2 * i) * half::f16::from_f32(x[i]).to_f32();
            i += 1;
        }
        sum
    }
}

/// `dot_f16_bytes` of one weight row with four activation rows whose values are f16 already
/// (`round_f16`): the weights are converted once, and each row's sum is taken in the one-row
/// kernel's order (its rounding of the activations changes nothing on such values), so the bits
/// are that kernel's.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot4_f16_bytes_impl(w: &[u8], x: [&[f32]; 4]) -> [f32; 4] {
    unsafe {
        let n = x.iter().fold(w.len() / 2, |n, r| n.min(r.len()));
        let mut s = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 8 <= n {
            let h = _mm256_cvtph_ps(_mm_loadu_si128(w.as_ptr().add(2 * i) as *const __m128i));
            for t in 0..4 {
                let xs = _mm256_loadu_ps(x[t].as_ptr().add(i));
                s[t] = _mm256_fmadd_ps(h, xs, s[t]);
            }
            i += 8;
        }
        let mut out = [0f32; 4];
        for t in 0..4 {
            let mut sum = hsum_f32(s[t]);
            for j in i..n {
                sum += f16_at(w, 2 * j) * x[t][j];
            }
            out[t] = sum;
        }
        out
    }
}

pub fn dot4_f16_bytes(w: &[u8], x: [&[f32]; 4]) -> [f32; 4] {
    // SAFETY: as above.
    unsafe { dot4_f16_bytes_impl(w, x) }
}

pub fn axpy_f16(a: f32, x: &[f16], y: &mut [f32]) {
    // SAFETY: as above.
    unsafe { axpy_f16_impl(a, x, y) }
}

pub fn dot_f32_f16(a: &[f32], b: &[f16]) -> f32 {
    // SAFETY: as above.
    unsafe { dot_f32_f16_impl(a, b) }
}

pub fn dot_f32_bytes(w: &[u8], x: &[f32]) -> f32 {
    // SAFETY: as above.
    unsafe { dot_f32_bytes_impl(w, x) }
}

pub fn dot_f16_bytes(w: &[u8], x: &[f32]) -> f32 {
    // SAFETY: as above.
    unsafe { dot_f16_bytes_impl(w, x) }
}
