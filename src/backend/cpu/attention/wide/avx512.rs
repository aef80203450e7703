//! The wide attention's register tiles at the AVX-512 level (../wide.rs), in intrinsics: scores of
//! up to 6 queries by 32 keys (12 vectors of sums) and weighted values of up to 4 queries by 64
//! values (16 vectors), or by 8 (a head size of odd eights' last 8), where the portable tiles
//! compiled for AVX-512 keep 6 and 8 vectors and spend as many instructions on addresses and
//! register moves as on products. Each sum is taken
//! in the portable tiles' order — one fused multiply-add per key value or key, in order, then
//! the scale — so the results are theirs, bit for bit.

use std::arch::x86_64::*;

use super::TILE_KEYS;

/// `s[r][j0..j0 + 16·P] = (q_r · k_j) · scale` for `R` queries of `hd` values and `P` panels of
/// 16 keys from `j0` (`kt` from the first panel: value c of a panel's keys at `16·c`, panels
/// `16·hd` apart).
///
/// # Safety
/// The CPU has AVX-512F; `kt` holds `P` whole panels; every query holds `hd` values and every
/// score line `j0 + 16·P`.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn score_tile<const R: usize, const P: usize>(
    q: &[&[f32]; R],
    kt: &[f32],
    j0: usize,
    scale: f32,
    s: &mut [&mut [f32]; R],
) {
    unsafe {
        let hd = q[0].len();
        debug_assert!(kt.len() >= P * TILE_KEYS * hd);
        let mut acc = [[_mm512_setzero_ps(); P]; R];
        let k = kt.as_ptr();
        for c in 0..hd {
            let mut keys = [_mm512_setzero_ps(); P];
            for (p, key) in keys.iter_mut().enumerate() {
                *key = _mm512_loadu_ps(k.add(p * TILE_KEYS * hd + c * TILE_KEYS));
            }
            for r in 0..R {
                let qv = _mm512_set1_ps(*q[r].get_unchecked(c));
                for p in 0..P {
                    acc[r][p] = _mm512_fmadd_ps(qv, keys[p], acc[r][p]);
                }
            }
        }
        let scale = _mm512_set1_ps(scale);
        for r in 0..R {
            for p in 0..P {
                let at = s[r].as_mut_ptr().add(j0 + p * TILE_KEYS);
                _mm512_storeu_ps(at, _mm512_mul_ps(acc[r][p], scale));
            }
        }
    }
}

/// `o[r][c0..c0 + w] += Σ_{j in keys} p[r][j] · v_j[c0..c0 + w]` for `R` queries, where
/// `w = 16·V`, or with `V` = 0 the 8 values of a head size of odd eights' last 8 (one tile of
/// 64 + 8 values, each weight broadcast once for both, measured slower than the two apart).
///
/// # Safety
/// The CPU has AVX-512F; every `v(j)` and `o[r]` holds `c0 + w` values, every `p[r]` the keys'
/// weights.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn value_tile<'v, const R: usize, const V: usize>(
    p: &[&mut [f32]; R],
    v: &impl Fn(usize) -> &'v [f32],
    keys: std::ops::Range<usize>,
    c0: usize,
    o: &mut [&mut [f32]; R],
) {
    unsafe {
        let half = V == 0;
        let mut acc = [[_mm512_setzero_ps(); V]; R];
        let mut acc8 = [_mm256_setzero_ps(); R];
        for r in 0..R {
            let at = o[r].as_ptr().add(c0);
            for (x, a) in acc[r].iter_mut().enumerate() {
                *a = _mm512_loadu_ps(at.add(16 * x));
            }
            if half {
                acc8[r] = _mm256_loadu_ps(at.add(16 * V));
            }
        }
        for j in keys {
            let row = v(j).as_ptr().add(c0);
            let mut vals = [_mm512_setzero_ps(); V];
            for (x, val) in vals.iter_mut().enumerate() {
                *val = _mm512_loadu_ps(row.add(16 * x));
            }
            let val8 = if half {
                _mm256_loadu_ps(row.add(16 * V))
            } else {
                _mm256_setzero_ps()
            };
            for r in 0..R {
                let w = _mm512_set1_ps(*p[r].get_unchecked(j));
                for x in 0..V {
                    acc[r][x] = _mm512_fmadd_ps(w, vals[x], acc[r][x]);
                }
                if half {
                    acc8[r] = _mm256_fmadd_ps(_mm512_castps512_ps256(w), val8, acc8[r]);
                }
            }
        }
        for r in 0..R {
            let at = o[r].as_mut_ptr().add(c0);
            for (x, a) in acc[r].iter().enumerate() {
                _mm512_storeu_ps(at.add(16 * x), *a);
            }
            if half {
                _mm256_storeu_ps(at.add(16 * V), acc8[r]);
            }
        }
    }
}
