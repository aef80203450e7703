//! Row kernels: one weight row in its GGML blocks (as the file holds it) against one or four
//! activation rows, in 256-bit registers. They serve the weights that are not repacked
//! (`--no-repack`, F16/F32, expert stacks whose experts do not fill row groups) and the q8_0 KV
//! cache. Integer dot products follow llama.cpp: weight bytes made unsigned (or signed ones split
//! into magnitude and sign), one float multiply-add per block. Each kernel is written once for `R`
//! activation rows (each weight block decoded once for all of them; a row's result does not
//! depend on `R`) and, for the 32-value blocks, over the byte dot product of an `Isa` (isa.rs).
#![allow(clippy::needless_range_loop)] // per-row accumulators are indexed in step with the rows

use std::arch::x86_64::*;

use super::isa::{Avx2, Isa};
use crate::backend::cpu::kernels::{BlockQ8, BlockQ8K, Level, QuantKernels, row_kernels};
use crate::gguf::GgmlType;
use crate::gguf::dequant::{q3_k_scales, scale_min_k4};
use crate::gguf::iq::{KVALUES_IQ4NL, KVALUES_MXFP4, e8m0_half};

/// An f16 at byte `i`, converted with F16C (only reached from F16C kernels).
#[inline(always)]
pub fn f16(b: &[u8], i: usize) -> f32 {
    let bits = u16::from_le_bytes([b[i], b[i + 1]]);
    // SAFETY: callers are kernels compiled with, and dispatched after detecting, F16C.
    unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32))) }
}

#[inline(always)]
pub unsafe fn hsum_f32(v: __m256) -> f32 {
    unsafe {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }
}

#[inline(always)]
pub unsafe fn hsum_i32(v: __m256i) -> i32 {
    unsafe {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
        _mm_cvtsi128_si32(s)
    }
}

#[inline(always)]
pub(super) unsafe fn load(p: *const u8) -> __m256i {
    unsafe { _mm256_loadu_si256(p as *const __m256i) }
}

/// 16 packed nibble bytes → 32 bytes: low nibbles then high nibbles.
#[inline(always)]
unsafe fn nibbles(p: *const u8) -> __m256i {
    unsafe {
        let q = _mm_loadu_si128(p as *const __m128i);
        let lo = _mm_and_si128(q, _mm_set1_epi8(0x0F));
        let hi = _mm_and_si128(_mm_srli_epi16(q, 4), _mm_set1_epi8(0x0F));
        _mm256_set_m128i(hi, lo)
    }
}

/// 32 bits → 32 bytes, 0xFF where the bit is set (llama.cpp's `bytes_from_bits_32`).
#[inline(always)]
pub(super) unsafe fn bytes_from_bits(p: *const u8) -> __m256i {
    unsafe {
        let bits = (p as *const u32).read_unaligned();
        let shuf = _mm256_set_epi64x(
            0x0303030303030303,
            0x0202020202020202,
            0x0101010101010101,
            0x0000000000000000,
        );
        let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), shuf);
        let bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
        _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1))
    }
}

// ---- 32-value blocks against Q8 activations --------------------------------------------------

/// A 32-value block type: its 32 weights as bytes, and whether they are signed values (scaled by
/// `scale`, the f16 at byte 0 unless the type says otherwise) or unsigned codes with a minimum
/// (the f16 at byte 2, added as m · Σx).
trait Block32 {
    const BYTES: usize;
    const MIN: bool;
    unsafe fn weights(p: *const u8) -> __m256i;
    #[inline(always)]
    fn scale(wb: &[u8]) -> f32 {
        f16(wb, 0)
    }
}

struct Q4_0;
struct Q4_1;
struct Q5_0;
struct Q5_1;
struct Q8_0;
struct IQ4NL;
struct MXFP4;

impl Block32 for Q4_0 {
    const BYTES: usize = 18;
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn weights(p: *const u8) -> __m256i {
        unsafe { _mm256_sub_epi8(nibbles(p.add(2)), _mm256_set1_epi8(8)) }
    }
}

impl Block32 for Q4_1 {
    const BYTES: usize = 20;
    const MIN: bool = true;
    #[inline(always)]
    unsafe fn weights(p: *const u8) -> __m256i {
        unsafe { nibbles(p.add(4)) }
    }
}

impl Block32 for Q5_0 {
    const BYTES: usize = 22;
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn weights(p: *const u8) -> __m256i {
        unsafe {
            // 0xF0 where the fifth bit is clear: the byte becomes nibble − 16.
            let hi = _mm256_andnot_si256(bytes_from_bits(p.add(2)), _mm256_set1_epi8(0xF0u8 as i8));
            _mm256_or_si256(nibbles(p.add(6)), hi)
        }
    }
}

impl Block32 for Q5_1 {
    const BYTES: usize = 24;
    const MIN: bool = true;
    #[inline(always)]
    unsafe fn weights(p: *const u8) -> __m256i {
        unsafe {
            let hi = _mm256_and_si256(bytes_from_bits(p.add(4)), _mm256_set1_epi8(0x10));
            _mm256_or_si256(nibbles(p.add(8)), hi)
        }
    }
}

impl Block32 for Q8_0 {
    const BYTES: usize = 34;
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn weights(p: *const u8) -> __m256i {
        unsafe { load(p.add(2)) }
    }
}

/// Σ over blocks of d_w·d_x·(weights · activations) (+ m_w·s_x for types with a minimum), for `R`
/// activation rows. Even and odd blocks accumulate apart (two dependency chains) and are summed at
/// the end the same way for every `R`.
#[inline(always)]
unsafe fn blocks32<V: Isa<I = __m256i>, T: Block32, const R: usize>(
    w: &[u8],
    x: [&[BlockQ8]; R],
) -> [f32; R] {
    unsafe {
        let n = w.len() / T::BYTES;
        assert!(
            x.iter().all(|row| row.len() >= n),
            "activations shorter than the weights"
        );
        let mut even = [_mm256_setzero_ps(); R];
        let mut odd = [_mm256_setzero_ps(); R];
        let mut m_even = [0.0f32; R];
        let mut m_odd = [0.0f32; R];
        // A macro, not a closure: closures are not compiled with the target features.
        macro_rules! block {
            ($b:expr, $acc:ident, $m:ident) => {{
                let b: usize = $b;
                let wb = &w[b * T::BYTES..];
                let wv = T::weights(wb.as_ptr());
                let dw = T::scale(wb);
                let mw = if T::MIN { f16(wb, 2) } else { 0.0 };
                // Signed weights: |w| · (x with w's sign), exact and within `maddubs`' range.
                let aw = if T::MIN { wv } else { _mm256_sign_epi8(wv, wv) };
                for k in 0..R {
                    // SAFETY: b < n (asserted above).
                    let xb = x[k].get_unchecked(b);
                    let xs = load(xb.qs.as_ptr() as *const u8);
                    let xs = if T::MIN { xs } else { _mm256_sign_epi8(xs, wv) };
                    let i = V::dot_vec(_mm256_setzero_si256(), aw, xs);
                    if T::MIN {
                        $m[k] += mw * xb.s;
                    }
                    $acc[k] =
                        _mm256_fmadd_ps(_mm256_set1_ps(dw * xb.d), _mm256_cvtepi32_ps(i), $acc[k]);
                }
            }};
        }
        for b in (0..n - n % 2).step_by(2) {
            block!(b, even, m_even);
            block!(b + 1, odd, m_odd);
        }
        if n % 2 == 1 {
            block!(n - 1, even, m_even);
        }
        let mut out = [0.0f32; R];
        for k in 0..R {
            out[k] = hsum_f32(_mm256_add_ps(even[k], odd[k]));
            if T::MIN {
                out[k] += m_even[k] + m_odd[k];
            }
        }
        out
    }
}

/// 16 packed nibble bytes → 32 signed bytes through a 16-level table (`pshufb` in each half).
#[inline(always)]
unsafe fn nibble_levels(p: *const u8, levels: &[i8; 16]) -> __m256i {
    unsafe {
        let table = _mm256_broadcastsi128_si256(_mm_loadu_si128(levels.as_ptr() as *const __m128i));
        _mm256_shuffle_epi8(table, nibbles(p))
    }
}

impl Block32 for IQ4NL {
    const BYTES: usize = 18;
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn weights(p: *const u8) -> __m256i {
        unsafe { nibble_levels(p.add(2), &KVALUES_IQ4NL) }
    }
}

impl Block32 for MXFP4 {
    const BYTES: usize = 17;
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn weights(p: *const u8) -> __m256i {
        unsafe { nibble_levels(p.add(1), &KVALUES_MXFP4) }
    }
    #[inline(always)]
    fn scale(wb: &[u8]) -> f32 {
        e8m0_half(wb[0])
    }
}

// ---- K-quants against Q8_K activations --------------------------------------------------------

/// A K-quant: 256 values as eight 32-value groups of unsigned codes, each group's products
/// scaled by a pair of i16 scales (values 0..16 of the group by the low one, 16..32 by the high
/// one), and the block's float scales and integer offset (its minimums, or the bias its codes are
/// stored with) applied to the integer sum by `finish`.
trait KQuant {
    const BYTES: usize;
    /// The block's group scales, decoded once for all activation rows.
    type Scales;
    /// The scales, and each activation row's offset from the activations' per-16 sums, in one
    /// pass over the block's scale bytes.
    unsafe fn scales<const R: usize>(wb: &[u8], x: [&BlockQ8K; R]) -> (Self::Scales, [i32; R]);
    /// The unsigned codes of values 32j..32j + 32.
    unsafe fn codes(wb: *const u8, j: usize) -> __m256i;
    /// Group j's scale pair.
    unsafe fn scale(s: &Self::Scales, j: usize) -> __m256i;
    /// The block's contribution, from Σ_j scale_j · (codes_j · activations) and the offset.
    fn finish(wb: &[u8], xb: &BlockQ8K, sum: i32, offset: i32) -> f32;
}

struct Q2K;
struct Q3K;
struct Q4K;
struct Q5K;
struct Q6K;

/// Group j's scales as an i16 pair vector: (s0 for the low 16 bytes, s1 for the high 16).
#[inline(always)]
unsafe fn scale_pair(s0: i16, s1: i16) -> __m256i {
    unsafe { _mm256_set_m128i(_mm_set1_epi16(s1), _mm_set1_epi16(s0)) }
}

/// Bits 2g..2g + 2 of each of the 32 bytes at `p`.
#[inline(always)]
unsafe fn two_bits(p: *const u8, g: usize) -> __m256i {
    unsafe {
        let q = load(p);
        let q = match g {
            0 => q,
            1 => _mm256_srli_epi16(q, 2),
            2 => _mm256_srli_epi16(q, 4),
            _ => _mm256_srli_epi16(q, 6),
        };
        _mm256_and_si256(q, _mm256_set1_epi8(3))
    }
}

/// The low (j even) or high (j odd) nibbles of the 32 bytes of Q4_K/Q5_K line j / 2.
#[inline(always)]
unsafe fn nibble_line(qs: *const u8, j: usize) -> __m256i {
    unsafe {
        let q = load(qs.add(32 * (j / 2)));
        let q = if j.is_multiple_of(2) {
            q
        } else {
            _mm256_srli_epi16(q, 4)
        };
        _mm256_and_si256(q, _mm256_set1_epi8(0x0F))
    }
}

impl KQuant for Q4K {
    const BYTES: usize = 144;
    /// The eight sub-block scales.
    type Scales = [u8; 8];
    #[inline(always)]
    unsafe fn scales<const R: usize>(wb: &[u8], x: [&BlockQ8K; R]) -> ([u8; 8], [i32; R]) {
        let mut sc = [0u8; 8];
        let mut mins = [0i32; R];
        for (j, s) in sc.iter_mut().enumerate() {
            let (a, m) = scale_min_k4(j, &wb[4..16]);
            *s = a;
            for k in 0..R {
                let bsums = &x[k].bsums;
                mins[k] += m as i32 * (bsums[2 * j] as i32 + bsums[2 * j + 1] as i32);
            }
        }
        (sc, mins)
    }
    #[inline(always)]
    unsafe fn codes(wb: *const u8, j: usize) -> __m256i {
        unsafe { nibble_line(wb.add(16), j) }
    }
    #[inline(always)]
    unsafe fn scale(s: &[u8; 8], j: usize) -> __m256i {
        unsafe { _mm256_set1_epi16(s[j] as i16) }
    }
    #[inline(always)]
    fn finish(wb: &[u8], xb: &BlockQ8K, sum: i32, mins: i32) -> f32 {
        xb.d * (f16(wb, 0) * sum as f32 - f16(wb, 2) * mins as f32)
    }
}

impl KQuant for Q5K {
    const BYTES: usize = 176;
    type Scales = [u8; 8];
    #[inline(always)]
    unsafe fn scales<const R: usize>(wb: &[u8], x: [&BlockQ8K; R]) -> ([u8; 8], [i32; R]) {
        unsafe { Q4K::scales(wb, x) }
    }
    #[inline(always)]
    unsafe fn codes(wb: *const u8, j: usize) -> __m256i {
        unsafe {
            let low = nibble_line(wb.add(48), j);
            // Bit j of each qh byte is the fifth bit of this group's value.
            let qh = load(wb.add(16));
            let bit = _mm256_and_si256(qh, _mm256_set1_epi8(1i8 << j));
            let high = _mm256_and_si256(
                _mm256_cmpeq_epi8(bit, _mm256_set1_epi8(1i8 << j)),
                _mm256_set1_epi8(0x10),
            );
            _mm256_or_si256(low, high)
        }
    }
    #[inline(always)]
    unsafe fn scale(s: &[u8; 8], j: usize) -> __m256i {
        unsafe { Q4K::scale(s, j) }
    }
    #[inline(always)]
    fn finish(wb: &[u8], xb: &BlockQ8K, sum: i32, mins: i32) -> f32 {
        Q4K::finish(wb, xb, sum, mins)
    }
}

impl KQuant for Q6K {
    const BYTES: usize = 210;
    /// The sixteen signed scales, widened.
    type Scales = [i16; 16];
    #[inline(always)]
    unsafe fn scales<const R: usize>(wb: &[u8], x: [&BlockQ8K; R]) -> ([i16; 16], [i32; R]) {
        let sc: [i16; 16] = std::array::from_fn(|i| wb[192 + i] as i8 as i16);
        // The stored values are u − 32.
        let offsets = x.map(|xb| {
            let mut offset = 0i32;
            for (g, &bs) in xb.bsums.iter().enumerate() {
                offset += sc[g] as i32 * bs as i32;
            }
            offset
        });
        (sc, offsets)
    }
    #[inline(always)]
    unsafe fn codes(wb: *const u8, j: usize) -> __m256i {
        unsafe {
            // Half n of the block (128 values): group g's low nibbles from ql (lines 0 and 1,
            // low then high nibbles), its top two bits from qh (bits 2g..2g + 2).
            let (n, g) = (j / 4, j % 4);
            let ql = load(wb.add(64 * n + 32 * (g % 2)));
            let low = if g < 2 { ql } else { _mm256_srli_epi16(ql, 4) };
            let high = two_bits(wb.add(128 + 32 * n), g);
            _mm256_or_si256(
                _mm256_and_si256(low, _mm256_set1_epi8(0x0F)),
                _mm256_slli_epi16(high, 4),
            )
        }
    }
    #[inline(always)]
    unsafe fn scale(s: &Self::Scales, j: usize) -> __m256i {
        unsafe { scale_pair(s[2 * j], s[2 * j + 1]) }
    }
    #[inline(always)]
    fn finish(wb: &[u8], xb: &BlockQ8K, sum: i32, offset: i32) -> f32 {
        f16(wb, 208) * xb.d * (sum - 32 * offset) as f32
    }
}

impl KQuant for Q2K {
    const BYTES: usize = 84;
    /// The sixteen 4-bit scales (low nibbles) and minimums (high nibbles).
    type Scales = [u8; 16];
    #[inline(always)]
    unsafe fn scales<const R: usize>(wb: &[u8], x: [&BlockQ8K; R]) -> ([u8; 16], [i32; R]) {
        let sc: [u8; 16] = std::array::from_fn(|i| wb[i]);
        let sum_min = x.map(|xb| {
            let mut sum_min = 0i32;
            for (j, &s) in sc.iter().enumerate() {
                sum_min += (s >> 4) as i32 * xb.bsums[j] as i32;
            }
            sum_min
        });
        (sc, sum_min)
    }
    #[inline(always)]
    unsafe fn codes(wb: *const u8, j: usize) -> __m256i {
        unsafe { two_bits(wb.add(16 + 32 * (j / 4)), j % 4) }
    }
    #[inline(always)]
    unsafe fn scale(s: &Self::Scales, j: usize) -> __m256i {
        unsafe { scale_pair((s[2 * j] & 0xF) as i16, (s[2 * j + 1] & 0xF) as i16) }
    }
    #[inline(always)]
    fn finish(wb: &[u8], xb: &BlockQ8K, sum: i32, sum_min: i32) -> f32 {
        let (d, dmin) = (f16(wb, 80) * xb.d, f16(wb, 82) * xb.d);
        d * sum as f32 - dmin * sum_min as f32
    }
}

impl KQuant for Q3K {
    const BYTES: usize = 110;
    type Scales = [i8; 16];
    #[inline(always)]
    unsafe fn scales<const R: usize>(wb: &[u8], x: [&BlockQ8K; R]) -> ([i8; 16], [i32; R]) {
        let sc = q3_k_scales(&wb[96..108]);
        // The stored values are u − 4.
        let offsets = x.map(|xb| {
            let mut offset = 0i32;
            for (j, &s) in sc.iter().enumerate() {
                offset += s as i32 * xb.bsums[j] as i32;
            }
            offset
        });
        (sc, offsets)
    }
    #[inline(always)]
    unsafe fn codes(wb: *const u8, j: usize) -> __m256i {
        unsafe {
            // Codes u = low two bits | the hmask bit << 2; weights are u − 4.
            let (n, g) = (j / 4, j % 4);
            let low = two_bits(wb.add(32 + 32 * n), g);
            let m = _mm256_set1_epi8((1u8 << (4 * n + g)) as i8);
            let set = _mm256_cmpeq_epi8(_mm256_and_si256(load(wb), m), m);
            _mm256_or_si256(low, _mm256_and_si256(set, _mm256_set1_epi8(4)))
        }
    }
    #[inline(always)]
    unsafe fn scale(s: &Self::Scales, j: usize) -> __m256i {
        unsafe { scale_pair(s[2 * j] as i16, s[2 * j + 1] as i16) }
    }
    #[inline(always)]
    fn finish(wb: &[u8], xb: &BlockQ8K, sum: i32, offset: i32) -> f32 {
        f16(wb, 108) * xb.d * (sum - 4 * offset) as f32
    }
}

/// A K-quant weight row · `R` Q8_K activation rows: Σ_j scale_j · (codes_j · activations) in
/// integers (`maddubs` pairs within i16: codes < 64; `madd16_by` scales them exactly), each
/// block's scales and codes decoded once.
#[inline(always)]
unsafe fn kquant<V: Isa<I = __m256i>, T: KQuant, const R: usize>(
    w: &[u8],
    x: [&[BlockQ8K]; R],
) -> [f32; R] {
    unsafe {
        let n = w.len() / T::BYTES;
        assert!(
            x.iter().all(|row| row.len() >= n),
            "activations shorter than the weights"
        );
        let mut total = [0.0f32; R];
        for (b, wb) in w.chunks_exact(T::BYTES).enumerate() {
            // SAFETY: b < n (asserted above). Unchecked: a bounds check here measurably slows
            // the one-token kernel.
            let xb = x.map(|row| row.get_unchecked(b));
            let (scales, offsets) = T::scales(wb, xb);
            let mut acc = [_mm256_setzero_si256(); R];
            for j in 0..8 {
                let u = T::codes(wb.as_ptr(), j);
                let sc = T::scale(&scales, j);
                for k in 0..R {
                    let xs = load(xb[k].qs.as_ptr().add(32 * j) as *const u8);
                    let p16 = _mm256_maddubs_epi16(u, xs);
                    acc[k] = V::madd16_by(acc[k], p16, sc);
                }
            }
            for k in 0..R {
                total[k] += T::finish(wb, xb[k], hsum_i32(acc[k]), offsets[k]);
            }
        }
        total
    }
}

/// An IQ4_XS weight row · `R` Q8_K activation rows, as llama.cpp's AVX2 kernel: per 32 values
/// the 16-level table through `pshufb`, signed products summed in pairs (|w| · x with w's sign:
/// |w| ≤ 127 keeps a pair within i16) and scaled by the 6-bit scale − 32 in `madd16_by`.
#[inline(always)]
unsafe fn iq4_xs<V: Isa<I = __m256i>, const R: usize>(w: &[u8], x: [&[BlockQ8K]; R]) -> [f32; R] {
    const BYTES: usize = 136;
    unsafe {
        let n = w.len() / BYTES;
        assert!(
            x.iter().all(|row| row.len() >= n),
            "activations shorter than the weights"
        );
        let mut total = [_mm256_setzero_ps(); R];
        for (b, wb) in w.chunks_exact(BYTES).enumerate() {
            // SAFETY: b < n (asserted above).
            let xb = x.map(|row| row.get_unchecked(b));
            let mut high = u16::from_le_bytes([wb[2], wb[3]]);
            let mut acc = [_mm256_setzero_si256(); R];
            for j in 0..8 {
                let low = (wb[4 + j / 2] >> (4 * (j % 2))) as i16 & 0xF;
                let scale = _mm256_set1_epi16((low | ((high << 4) & 0x30) as i16) - 32);
                high >>= 2;
                let q = nibble_levels(wb.as_ptr().add(8 + 16 * j), &KVALUES_IQ4NL);
                let aq = _mm256_sign_epi8(q, q);
                for k in 0..R {
                    let xs = load(xb[k].qs.as_ptr().add(32 * j) as *const u8);
                    let p16 = _mm256_maddubs_epi16(aq, _mm256_sign_epi8(xs, q));
                    acc[k] = V::madd16_by(acc[k], p16, scale);
                }
            }
            let d = f16(wb, 0);
            for k in 0..R {
                total[k] = _mm256_fmadd_ps(
                    _mm256_set1_ps(d * xb[k].d),
                    _mm256_cvtepi32_ps(acc[k]),
                    total[k],
                );
            }
        }
        total.map(|t| hsum_f32(t))
    }
}

// ---- Instantiation per instruction set --------------------------------------------------------

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn blocks32_avx2<T: Block32, const R: usize>(w: &[u8], x: [&[BlockQ8]; R]) -> [f32; R] {
    unsafe { blocks32::<Avx2<false>, T, R>(w, x) }
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn blocks32_vnni<T: Block32, const R: usize>(w: &[u8], x: [&[BlockQ8]; R]) -> [f32; R] {
    unsafe { blocks32::<Avx2<true>, T, R>(w, x) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn kquant_avx2<T: KQuant, const R: usize>(w: &[u8], x: [&[BlockQ8K]; R]) -> [f32; R] {
    unsafe { kquant::<Avx2<false>, T, R>(w, x) }
}

/// The same, compiled with AVX-VNNI (the compiler may fuse a `vpmaddwd` and its add).
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn kquant_vnni<T: KQuant, const R: usize>(w: &[u8], x: [&[BlockQ8K]; R]) -> [f32; R] {
    unsafe { kquant::<Avx2<true>, T, R>(w, x) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_xs_avx2<const R: usize>(w: &[u8], x: [&[BlockQ8K]; R]) -> [f32; R] {
    unsafe { iq4_xs::<Avx2<false>, R>(w, x) }
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn iq4_xs_vnni<const R: usize>(w: &[u8], x: [&[BlockQ8K]; R]) -> [f32; R] {
    unsafe { iq4_xs::<Avx2<true>, R>(w, x) }
}

/// The row kernels of a 32-value block type (AVX-VNNI's byte dot product where `vnni`). Sound
/// to hand out because `x86::kernels` does so only for levels the CPU was detected to have.
fn q8_rows<T: Block32>(vnni: bool) -> QuantKernels<BlockQ8> {
    if vnni {
        row_kernels!(blocks32_vnni, T)
    } else {
        row_kernels!(blocks32_avx2, T)
    }
}

fn q8k_rows<T: KQuant>(vnni: bool) -> QuantKernels<BlockQ8K> {
    if vnni {
        row_kernels!(kquant_vnni, T)
    } else {
        row_kernels!(kquant_avx2, T)
    }
}

/// The row kernels of a 32-value block type, where there are x86 ones. `vnni`: use AVX-VNNI.
pub fn q8_row_kernels(t: GgmlType, vnni: bool) -> Option<QuantKernels<BlockQ8>> {
    Some(match t {
        GgmlType::Q4_0 => q8_rows::<Q4_0>(vnni),
        GgmlType::Q4_1 => q8_rows::<Q4_1>(vnni),
        GgmlType::Q5_0 => q8_rows::<Q5_0>(vnni),
        GgmlType::Q5_1 => q8_rows::<Q5_1>(vnni),
        GgmlType::Q8_0 => q8_rows::<Q8_0>(vnni),
        GgmlType::IQ4_NL => q8_rows::<IQ4NL>(vnni),
        GgmlType::MXFP4 => q8_rows::<MXFP4>(vnni),
        _ => return None,
    })
}

/// The row kernels of a K-quant, where there are x86 ones. `vnni`: compiled with AVX-VNNI.
pub fn q8k_row_kernels(t: GgmlType, vnni: bool) -> Option<QuantKernels<BlockQ8K>> {
    Some(match t {
        GgmlType::Q2_K => q8k_rows::<Q2K>(vnni),
        GgmlType::Q3_K => q8k_rows::<Q3K>(vnni),
        GgmlType::Q4_K => q8k_rows::<Q4K>(vnni),
        GgmlType::Q5_K => q8k_rows::<Q5K>(vnni),
        GgmlType::Q6_K => q8k_rows::<Q6K>(vnni),
        // SAFETY (both arms): as for `q8k_rows`, handed out only for levels this CPU has.
        GgmlType::IQ4_XS if vnni => row_kernels!(iq4_xs_vnni),
        GgmlType::IQ4_XS => row_kernels!(iq4_xs_avx2),
        _ => return None,
    })
}

/// Whether the row kernels at `level` use AVX-VNNI (at the AVX-512 level: where the CPU has it).
pub fn rows_use_vnni(level: Level) -> bool {
    match level {
        Level::AvxVnni => true,
        Level::Avx512Vnni => is_x86_feature_detected!("avxvnni"),
        _ => false,
    }
}
