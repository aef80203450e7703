//! The F16 weight row kernels at the AVX-512 level, for F16 weights not in panels (the panel GEMM,
//! `gemm/f16.rs`, takes the rest): the one-row dot product and its 1×4 tile, sixteen values a
//! step where the AVX2 ones take eight. The two keep one order — sixteen lanes, halved to the
//! AVX2 kernels' eight, that sum, then the tail one value at a time — so the tile's sums are the
//! one-row kernel's bit for bit, as at the AVX2 level (the level's own order, not AVX2's).

use std::arch::x86_64::*;

use super::rows::{f16 as f16_at, hsum_f32};

/// The sixteen lanes of `v` summed: the upper eight onto the lower, then `hsum_f32`'s order.
#[inline(always)]
unsafe fn hsum16(v: __m512) -> f32 {
    unsafe {
        let lo = _mm512_castps512_ps256(v);
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
        hsum_f32(_mm256_add_ps(lo, hi))
    }
}

/// `sum` plus, one at a time, the products of the values `from..n` of `w` (F16) and `x`.
#[inline(always)]
fn tail(sum: f32, w: &[u8], x: &[f32], from: usize, n: usize) -> f32 {
    x[from..n]
        .iter()
        .enumerate()
        .fold(sum, |s, (d, &v)| s + f16_at(w, 2 * (from + d)) * v)
}

/// Sixteen F16 values from `w` at value `i`, as f32.
#[inline(always)]
unsafe fn load16(w: &[u8], i: usize) -> __m512 {
    unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(w.as_ptr().add(2 * i) as *const __m256i)) }
}

#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn dot_impl(w: &[u8], x: &[f32]) -> f32 {
    unsafe {
        let n = (w.len() / 2).min(x.len());
        let mut s = _mm512_setzero_ps();
        let mut i = 0;
        while i + 16 <= n {
            // The activations rounded to f16, as llama.cpp multiplies F16 weights.
            let xs = _mm512_loadu_ps(x.as_ptr().add(i));
            let xs = _mm512_cvtph_ps(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(xs));
            s = _mm512_fmadd_ps(load16(w, i), xs, s);
            i += 16;
        }
        let mut sum = hsum16(s);
        while i < n {
            sum += f16_at(w, 2 * i) * half::f16::from_f32(x[i]).to_f32();
            i += 1;
        }
        sum
    }
}

#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn dot4_impl(w: &[u8], x: [&[f32]; 4]) -> [f32; 4] {
    unsafe {
        let n = x.iter().fold(w.len() / 2, |n, r| n.min(r.len()));
        let mut s = [_mm512_setzero_ps(); 4];
        let mut i = 0;
        while i + 16 <= n {
            let h = load16(w, i);
            for t in 0..4 {
                s[t] = _mm512_fmadd_ps(h, _mm512_loadu_ps(x[t].as_ptr().add(i)), s[t]);
            }
            i += 16;
        }
        // Loops, not `array::from_fn`: a closure does not take this function's target features,
        // and one left out of line turns each sum into calls (the whole GEMM ran 1.7× slower).
        let mut out = [0f32; 4];
        for ((o, s), x) in out.iter_mut().zip(s).zip(x) {
            *o = tail(hsum16(s), w, x, i, n);
        }
        out
    }
}

// SAFETY (both): the kernel table holds these only at the AVX-512 level, which `levels`
// lists only on a CPU with AVX-512F, AVX2, FMA and F16C.

/// An F16 weight row (bytes) · `x`, the activations rounded to f16 first.
pub fn dot_f16_bytes(w: &[u8], x: &[f32]) -> f32 {
    unsafe { dot_impl(w, x) }
}

/// One F16 weight row · four activation rows already rounded to f16.
pub fn dot4_f16_bytes(w: &[u8], x: [&[f32]; 4]) -> [f32; 4] {
    unsafe { dot4_impl(w, x) }
}
