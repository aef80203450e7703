//! Row kernels of the grid i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) and the
//! ternary types (TQ1_0, TQ2_0) against Q8_K activations, and of Q1_0 against Q8_0, in 256-bit
//! registers, shaped as llama.cpp's AVX2 kernels (ggml-cpu/arch/x86/quants.c): per 32 values the
//! grid entries looked up by index into one register of magnitudes, the weights' signs moved onto
//! the activations (`sign_epi8`), `maddubs` pairs scaled in `madd16_by`, one float multiply-add
//! per block. Each weight block is decoded once for all `R` activation rows.
//!
//! IQ1's shift (±1/8 per 32 or 8 values) joins the grid as 8·g ± 1, so a block's sum stays one
//! integer (8·Σg·x ± Σx, at most 256·9·127·15 < 2^24) and the row is divided by 8 at the end.
//! Block layouts are in `gguf/iq.rs`; the portable kernels (`portable_iq.rs`) are the reference.
#![allow(clippy::needless_range_loop)] // per-row accumulators are indexed in step with the rows

use std::arch::x86_64::*;

use super::isa::{Avx2, Isa};
use super::rows::{bytes_from_bits, f16, hsum_f32, hsum_i32, load};
use crate::backend::cpu::kernels::{
    BlockQ8, BlockQ8K, DECODED_BLOCK, QuantKernels, TileDecode, row_kernels,
};
use crate::gguf::GgmlType;
use crate::gguf::iq::{
    IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_BYTES,
};

#[inline(always)]
unsafe fn u16_at(p: *const u8) -> u32 {
    unsafe { (p as *const u16).read_unaligned() as u32 }
}

/// The f16 at `p`.
#[inline(always)]
unsafe fn f16_ptr(p: *const u8) -> f32 {
    unsafe { f16(&[*p, *p.add(1)], 0) }
}

#[inline(always)]
unsafe fn u32_at(p: *const u8) -> u32 {
    unsafe { (p as *const u32).read_unaligned() }
}

/// Four 8-byte grid entries as one register, entry 0 in the low bytes.
#[inline(always)]
unsafe fn grid4(g: [u64; 4]) -> __m256i {
    unsafe { _mm256_set_epi64x(g[3] as i64, g[2] as i64, g[1] as i64, g[0] as i64) }
}

/// Four 7-bit sign indices of `aux` (bits 0..28, as IQ2_XXS and IQ3_XXS store them) as bytes.
#[inline(always)]
unsafe fn packed_signs(aux: u32) -> __m256i {
    let s = |l: u32| KSIGNS_BYTES[((aux >> (7 * l)) & 127) as usize];
    unsafe { grid4([s(0), s(1), s(2), s(3)]) }
}

/// 32 explicit sign bits (one per value) as bytes: −1 where set, 1 where not.
#[inline(always)]
unsafe fn explicit_signs(p: *const u8) -> __m256i {
    unsafe { _mm256_or_si256(bytes_from_bits(p), _mm256_set1_epi8(1)) }
}

/// One i16 scale (or multiplier) for all 32 values.
#[inline(always)]
unsafe fn scale32(ls: u32) -> __m256i {
    unsafe { _mm256_set1_epi16(ls as i16) }
}

/// The i16 scales (or multipliers) of values 0..16 (`lo`) and 16..32 (`hi`).
#[inline(always)]
unsafe fn scale16(lo: u32, hi: u32) -> __m256i {
    unsafe { _mm256_set_m128i(_mm_set1_epi16(hi as i16), _mm_set1_epi16(lo as i16)) }
}

/// Signed weights `w` as the (magnitude, sign) pair a group returns.
#[inline(always)]
unsafe fn signed(w: __m256i) -> (__m256i, __m256i) {
    unsafe { (_mm256_sign_epi8(w, w), w) }
}

/// A 256-value block type whose group of 32 values decodes to byte magnitudes (< 64, so a
/// `maddubs` pair stays within i16), a register whose byte signs are the weights' signs, and the
/// i16 scale of each 16 values.
trait GridQuant {
    const BYTES: usize;
    /// The fixed fraction of the scales, applied once to the row.
    const FACTOR: f32;
    /// Nonzero for types whose groups return unsigned codes c (magnitudes, no signs) standing
    /// for c − OFFSET: the products skip `sign_epi8` and the block subtracts OFFSET·Σx from the
    /// activations' sums (the ternary types, as llama.cpp's kernels).
    const OFFSET: i32 = 0;
    /// The block's float scale: the f16 at its start unless the type says otherwise.
    #[inline(always)]
    unsafe fn d(p: *const u8) -> f32 {
        unsafe { f16_ptr(p) }
    }
    /// What a block's groups share, decoded once per block (IQ1_M: its sixteen scales).
    #[inline(always)]
    unsafe fn block(_p: *const u8) -> __m256i {
        unsafe { _mm256_setzero_si256() }
    }
    /// Values 32j..32j + 32 of the block at `p` (`block`: what `block` gave): (magnitudes, signs,
    /// scales).
    unsafe fn group(p: *const u8, block: __m256i, j: usize) -> (__m256i, __m256i, __m256i);
}

struct IQ2XXS;
struct IQ2XS;
struct IQ2S;
struct IQ3XXS;
struct IQ3S;
struct IQ1S;
struct IQ1M;
struct TQ1;
struct TQ2;

impl GridQuant for IQ2XXS {
    const BYTES: usize = 66;
    const FACTOR: f32 = 0.125;
    #[inline(always)]
    unsafe fn group(p: *const u8, _block: __m256i, j: usize) -> (__m256i, __m256i, __m256i) {
        unsafe {
            let q = p.add(2 + 8 * j);
            let aux = u32_at(q.add(4));
            let g = |l: usize| IQ2XXS_GRID[*q.add(l) as usize];
            let magnitudes = grid4([g(0), g(1), g(2), g(3)]);
            (magnitudes, packed_signs(aux), scale32(2 * (aux >> 28) + 1))
        }
    }
}

impl GridQuant for IQ2XS {
    const BYTES: usize = 74;
    const FACTOR: f32 = 0.125;
    #[inline(always)]
    unsafe fn group(p: *const u8, _block: __m256i, j: usize) -> (__m256i, __m256i, __m256i) {
        unsafe {
            let q = |l: usize| u16_at(p.add(2 + 8 * j + 2 * l));
            let g = |l: usize| IQ2XS_GRID[(q(l) & 511) as usize];
            let s = |l: usize| KSIGNS_BYTES[(q(l) >> 9) as usize];
            let sc = *p.add(66 + j) as u32;
            (
                grid4([g(0), g(1), g(2), g(3)]),
                grid4([s(0), s(1), s(2), s(3)]),
                scale16(2 * (sc & 15) + 1, 2 * (sc >> 4) + 1),
            )
        }
    }
}

impl GridQuant for IQ2S {
    const BYTES: usize = 82;
    const FACTOR: f32 = 0.125;
    #[inline(always)]
    unsafe fn group(p: *const u8, _block: __m256i, j: usize) -> (__m256i, __m256i, __m256i) {
        unsafe {
            let h = *p.add(66 + j) as usize;
            let g =
                |l: usize| IQ2S_GRID[*p.add(2 + 4 * j + l) as usize | ((h << (8 - 2 * l)) & 0x300)];
            let sc = *p.add(74 + j) as u32;
            (
                grid4([g(0), g(1), g(2), g(3)]),
                explicit_signs(p.add(34 + 4 * j)),
                scale16(2 * (sc & 15) + 1, 2 * (sc >> 4) + 1),
            )
        }
    }
}

impl GridQuant for IQ3XXS {
    const BYTES: usize = 98;
    const FACTOR: f32 = 0.25;
    #[inline(always)]
    unsafe fn group(p: *const u8, _block: __m256i, j: usize) -> (__m256i, __m256i, __m256i) {
        unsafe {
            let q = p.add(2 + 8 * j);
            let g = |e: usize| IQ3XXS_GRID[*q.add(e) as usize] as i32;
            let magnitudes = _mm256_set_epi32(g(7), g(6), g(5), g(4), g(3), g(2), g(1), g(0));
            let aux = u32_at(p.add(66 + 4 * j));
            (magnitudes, packed_signs(aux), scale32(2 * (aux >> 28) + 1))
        }
    }
}

impl GridQuant for IQ3S {
    const BYTES: usize = 110;
    const FACTOR: f32 = 1.0;
    #[inline(always)]
    unsafe fn group(p: *const u8, _block: __m256i, j: usize) -> (__m256i, __m256i, __m256i) {
        unsafe {
            let h = *p.add(66 + j) as usize;
            // Entry e's ninth index bit is bit e of `h`.
            let g = |e: usize| IQ3S_GRID[*p.add(2 + 8 * j + e) as usize | ((h >> e) & 1) << 8];
            let magnitudes = _mm256_set_epi32(
                g(7) as i32,
                g(6) as i32,
                g(5) as i32,
                g(4) as i32,
                g(3) as i32,
                g(2) as i32,
                g(1) as i32,
                g(0) as i32,
            );
            let sc = (*p.add(106 + j / 2) >> (4 * (j % 2))) as u32 & 15;
            (
                magnitudes,
                explicit_signs(p.add(74 + 4 * j)),
                scale32(2 * sc + 1),
            )
        }
    }
}

/// IQ1's weights 8·g + shift for every grid entry g and shift: entry i (< 2048) with shift +1,
/// entry 2048 + i with −1. The shift's sign bit becomes bit 11 of the index, so a lookup yields
/// eight finished weights (IQ1_M's index and sign bits sit side by side in its `qh` nibbles).
static IQ1S_GRID8: [u64; 4096] = {
    let mut t = [0u64; 4096];
    let mut i = 0;
    while i < 4096 {
        let shift: i8 = if i < 2048 { 1 } else { -1 };
        let mut j = 0;
        while j < 8 {
            let g = (IQ1S_GRID[i % 2048] >> (8 * j)) as u8 as i8;
            t[i] |= ((g * 8 + shift) as u8 as u64) << (8 * j);
            j += 1;
        }
        i += 1;
    }
    t
};

impl GridQuant for IQ1S {
    const BYTES: usize = 50;
    const FACTOR: f32 = 0.125;
    #[inline(always)]
    unsafe fn group(p: *const u8, _block: __m256i, j: usize) -> (__m256i, __m256i, __m256i) {
        unsafe {
            let qh = u16_at(p.add(34 + 2 * j)) as usize;
            // The table's +1 half, then −2 where the shift is negative (bit 15): one shift for all
            // 32 values, so one add beats doubling the table's reach.
            let g =
                |l: usize| IQ1S_GRID8[*p.add(2 + 4 * j + l) as usize | ((qh >> (3 * l)) & 7) << 8];
            let minus_two =
                _mm256_set1_epi64x(-((qh >> 15) as i64) & 0xFEFE_FEFE_FEFE_FEFE_u64 as i64);
            let (m, s) = signed(_mm256_add_epi8(grid4([g(0), g(1), g(2), g(3)]), minus_two));
            (m, s, scale32(2 * ((qh as u32 >> 12) & 7) + 1))
        }
    }
}

/// Eight IQ1_M scales (two 16-bit scale words, four 3-bit scales each at bits 0, 3, 6, 9) as
/// 2·ls + 1 in i32 lanes. (A function, not a closure: closures are not compiled with the
/// kernel's target features.)
#[inline(always)]
unsafe fn iq1m_scales(words: u32) -> __m256i {
    unsafe {
        let shifts = _mm256_setr_epi32(0, 3, 6, 9, 16, 19, 22, 25);
        let v = _mm256_srlv_epi32(_mm256_set1_epi32(words as i32), shifts);
        let v = _mm256_and_si256(v, _mm256_set1_epi32(7));
        _mm256_add_epi32(_mm256_add_epi32(v, v), _mm256_set1_epi32(1))
    }
}

impl GridQuant for IQ1M {
    const BYTES: usize = 56;
    const FACTOR: f32 = 0.125;
    unsafe fn d(p: *const u8) -> f32 {
        let sc = |i: usize| unsafe { u16_at(p.add(48 + 2 * i)) as u16 };
        let bits =
            (sc(0) >> 12) | ((sc(1) >> 8) & 0x00f0) | ((sc(2) >> 4) & 0x0f00) | (sc(3) & 0xf000);
        f16(&bits.to_le_bytes(), 0)
    }
    /// The sixteen 3-bit scales, s = 2j + half in word s / 4 at bit 3·(s % 4), as 2·ls + 1 bytes
    /// in order, in both 128-bit lanes (each group takes its two by `pshufb`).
    #[inline(always)]
    unsafe fn block(p: *const u8) -> __m256i {
        unsafe {
            let words = (p.add(48) as *const u64).read_unaligned();
            // Packing works per 128-bit lane: 64-bit chunks (s 0-3, 8-11, 4-7, 12-15) reordered.
            let packed =
                _mm256_packus_epi32(iq1m_scales(words as u32), iq1m_scales((words >> 32) as u32));
            let ordered = _mm256_permute4x64_epi64::<0b11_01_10_00>(packed);
            let bytes = _mm_packus_epi16(
                _mm256_castsi256_si128(ordered),
                _mm256_extracti128_si256::<1>(ordered),
            );
            _mm256_broadcastsi128_si256(bytes)
        }
    }
    #[inline(always)]
    unsafe fn group(p: *const u8, block: __m256i, j: usize) -> (__m256i, __m256i, __m256i) {
        unsafe {
            let h = [*p.add(32 + 2 * j) as usize, *p.add(33 + 2 * j) as usize];
            // Each nibble of `h` is three index bits and, above them, the shift's sign: bit 11
            // of the index.
            let g = |l: usize| {
                IQ1S_GRID8[*p.add(4 * j + l) as usize | ((h[l / 2] << (8 - 4 * (l % 2))) & 0xF00)]
            };
            let (m, s) = signed(grid4([g(0), g(1), g(2), g(3)]));
            // Scale bytes 2j (values 0..16) and 2j + 1 (16..32), each widened to i16.
            let pick = |s: usize| _mm_set1_epi16((0x8000 | s) as i16);
            let scales = _mm256_shuffle_epi8(block, _mm256_set_m128i(pick(2 * j + 1), pick(2 * j)));
            (m, s, scales)
        }
    }
}

/// Bytes `v` (each < 243, a base-3 fraction) times the 16-bit lane's power of three, as trit
/// codes 0..2: the top trit of (v·3^n mod 256)·3 / 256 (`ggml`'s TQ1_0 unpacking, per byte).
#[inline(always)]
unsafe fn trits(v: __m256i, pow3: __m256i) -> __m256i {
    unsafe {
        let low = _mm256_set1_epi16(0xFF);
        let even = _mm256_and_si256(_mm256_mullo_epi16(v, pow3), low);
        let odd = _mm256_and_si256(_mm256_mullo_epi16(_mm256_srli_epi16(v, 8), pow3), low);
        let three = _mm256_set1_epi16(3);
        let even = _mm256_srli_epi16(_mm256_mullo_epi16(even, three), 8);
        let odd = _mm256_srli_epi16(_mm256_mullo_epi16(odd, three), 8);
        _mm256_or_si256(even, _mm256_slli_epi16(odd, 8))
    }
}

impl GridQuant for TQ1 {
    const BYTES: usize = 54;
    const FACTOR: f32 = 1.0;
    const OFFSET: i32 = 1;
    unsafe fn d(p: *const u8) -> f32 {
        unsafe { f16_ptr(p.add(52)) }
    }
    #[inline(always)]
    unsafe fn group(p: *const u8, _block: __m256i, j: usize) -> (__m256i, __m256i, __m256i) {
        const POW3: [u32; 5] = [1, 3, 9, 27, 81];
        unsafe {
            // Values 0..160: bytes 0..32, five trits each; 160..240: bytes 32..48, sixteen
            // values per trit; 240..256: the four bytes at 48, four values per trit.
            let mid = _mm256_broadcastsi128_si256(_mm_loadu_si128(p.add(32) as *const __m128i));
            let w = match j {
                0..5 => trits(load(p), scale32(POW3[j])),
                5 => trits(mid, scale16(POW3[0], POW3[1])),
                6 => trits(mid, scale16(POW3[2], POW3[3])),
                _ => {
                    let qh = _mm_set1_epi32(u32_at(p.add(48)) as i32);
                    let pow =
                        _mm256_set_epi16(27, 27, 9, 9, 3, 3, 1, 1, 81, 81, 81, 81, 81, 81, 81, 81);
                    trits(_mm256_set_m128i(qh, _mm256_castsi256_si128(mid)), pow)
                }
            };
            (w, w, scale32(1))
        }
    }
}

impl GridQuant for TQ2 {
    const BYTES: usize = 66;
    const FACTOR: f32 = 1.0;
    const OFFSET: i32 = 1;
    unsafe fn d(p: *const u8) -> f32 {
        unsafe { f16_ptr(p.add(64)) }
    }
    #[inline(always)]
    unsafe fn group(p: *const u8, _block: __m256i, j: usize) -> (__m256i, __m256i, __m256i) {
        unsafe {
            // Values 128h + 32l + k: bits 2l of byte 32h + k.
            let bytes = load(p.add(32 * (j / 4)));
            let codes = _mm256_srl_epi16(bytes, _mm_cvtsi32_si128(2 * (j % 4) as i32));
            let codes = _mm256_and_si256(codes, _mm256_set1_epi8(3));
            (codes, codes, scale32(1))
        }
    }
}

/// A grid-quant weight row · `R` Q8_K activation rows.
#[inline(always)]
unsafe fn grid_rows<V: Isa<I = __m256i>, T: GridQuant, const R: usize>(
    w: &[u8],
    x: [&[BlockQ8K]; R],
) -> [f32; R] {
    unsafe {
        let n = w.len() / T::BYTES;
        assert!(
            x.iter().all(|row| row.len() >= n),
            "activations shorter than the weights"
        );
        let ones = _mm256_set1_epi16(1);
        let mut total = [0f32; R];
        for b in 0..n {
            let p = w.as_ptr().add(b * T::BYTES);
            // SAFETY: b < n (asserted above).
            let xb = x.map(|row| row.get_unchecked(b));
            let mut acc = [_mm256_setzero_si256(); R];
            let shared = T::block(p);
            for j in 0..8 {
                let (magnitudes, signs, scales) = T::group(p, shared, j);
                for k in 0..R {
                    let xs = load(xb[k].qs.as_ptr().add(32 * j) as *const u8);
                    if T::OFFSET == 0 {
                        let p16 = _mm256_maddubs_epi16(magnitudes, _mm256_sign_epi8(xs, signs));
                        acc[k] = V::madd16_by(acc[k], p16, scales);
                    } else {
                        // Codes < 4 and one scale: a block's pair sums stay within i16
                        // (8 · 2 · 3 · 127), so they add in 16 bits.
                        acc[k] = _mm256_add_epi16(acc[k], _mm256_maddubs_epi16(magnitudes, xs));
                    }
                }
            }
            let d = T::d(p);
            for k in 0..R {
                if T::OFFSET != 0 {
                    // − OFFSET·Σx from the activations' per-16 sums (|Σ| ≤ 16 · 127), then to i32.
                    let bsums = load(xb[k].bsums.as_ptr() as *const u8);
                    let offset = _mm256_mullo_epi16(bsums, _mm256_set1_epi16(T::OFFSET as i16));
                    acc[k] = _mm256_madd_epi16(_mm256_sub_epi16(acc[k], offset), ones);
                }
                // The block's exact integer sum, then one float step per block: the decoded GEMM
                // of a prefill (gemm/decoded.rs) takes the same steps, so prefill and generation
                // give a row the same bits.
                total[k] = (d * xb[k].d).mul_add(hsum_i32(acc[k]) as f32, total[k]);
            }
        }
        total.map(|t| T::FACTOR * t)
    }
}

/// A Q1_0 weight row (128 values per block, one bit each: +1 where set, −1 where not) · `R` Q8_0
/// activation rows: each 32-value activation block's sum of signed values scaled by its `d`.
#[inline(always)]
unsafe fn q1_0_rows<V: Isa<I = __m256i>, const R: usize>(w: &[u8], x: [&[BlockQ8]; R]) -> [f32; R] {
    const BYTES: usize = 18;
    unsafe {
        let n = w.len() / BYTES;
        assert!(
            x.iter().all(|row| row.len() >= 4 * n),
            "activations shorter than the weights"
        );
        let (ones8, ones16) = (_mm256_set1_epi8(1), _mm256_set1_epi16(1));
        let mut total = [_mm256_setzero_ps(); R];
        for b in 0..n {
            let p = w.as_ptr().add(b * BYTES);
            let mut acc = [_mm256_setzero_ps(); R];
            for q in 0..4 {
                // −1 where the bit is clear, +1 where set.
                let signs = _mm256_or_si256(
                    _mm256_xor_si256(bytes_from_bits(p.add(2 + 4 * q)), _mm256_set1_epi8(-1)),
                    ones8,
                );
                for k in 0..R {
                    // SAFETY: 4b + q < 4n (asserted above).
                    let xb = x[k].get_unchecked(4 * b + q);
                    let xs = load(xb.qs.as_ptr() as *const u8);
                    let p16 = _mm256_maddubs_epi16(ones8, _mm256_sign_epi8(xs, signs));
                    let sum = V::madd16_by(_mm256_setzero_si256(), p16, ones16);
                    acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(xb.d), _mm256_cvtepi32_ps(sum), acc[k]);
                }
            }
            let d = f16_ptr(p);
            for k in 0..R {
                total[k] = _mm256_fmadd_ps(_mm256_set1_ps(d), acc[k], total[k]);
            }
        }
        total.map(|t| hsum_f32(t))
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn grid_avx2<T: GridQuant, const R: usize>(w: &[u8], x: [&[BlockQ8K]; R]) -> [f32; R] {
    unsafe { grid_rows::<Avx2<false>, T, R>(w, x) }
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn grid_vnni<T: GridQuant, const R: usize>(w: &[u8], x: [&[BlockQ8K]; R]) -> [f32; R] {
    unsafe { grid_rows::<Avx2<true>, T, R>(w, x) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q1_0_avx2<const R: usize>(w: &[u8], x: [&[BlockQ8]; R]) -> [f32; R] {
    unsafe { q1_0_rows::<Avx2<false>, R>(w, x) }
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn q1_0_vnni<const R: usize>(w: &[u8], x: [&[BlockQ8]; R]) -> [f32; R] {
    unsafe { q1_0_rows::<Avx2<true>, R>(w, x) }
}

/// `rows` (whole blocks of `T`) as `DECODED_BLOCK`s (kernels.rs): each block's values as signed
/// bytes (the grid entries with their signs; the ternary types' codes less their offset), the
/// scale of each 16 values and the block's float scale, per row; the lines the GEMM reads are the
/// rows' values four at a time, row after row.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn decode_tile<T: GridQuant>(rows: &[&[u8]; 16], out: &mut [u8]) {
    unsafe {
        let n = rows[0].len() / T::BYTES;
        assert!(
            rows.iter().all(|r| r.len() == n * T::BYTES) && out.len() >= n * DECODED_BLOCK,
            "decoded rows of unequal length or too little room"
        );
        let mut values = [[0u32; 64]; 16];
        for b in 0..n {
            let o = out.as_mut_ptr().add(b * DECODED_BLOCK);
            let scales = o.add(4096) as *mut i32;
            let ds = o.add(4096 + 1024) as *mut f32;
            for (r, row) in rows.iter().enumerate() {
                let p = row.as_ptr().add(b * T::BYTES);
                let shared = T::block(p);
                for j in 0..8 {
                    let (magnitudes, signs, scale) = T::group(p, shared, j);
                    let w = if T::OFFSET == 0 {
                        _mm256_sign_epi8(magnitudes, signs)
                    } else {
                        _mm256_sub_epi8(magnitudes, _mm256_set1_epi8(T::OFFSET as i8))
                    };
                    _mm256_storeu_si256(values[r].as_mut_ptr().add(8 * j) as *mut __m256i, w);
                    let (lo, hi) = if T::OFFSET == 0 {
                        let lanes: [i16; 16] = std::mem::transmute(scale);
                        (lanes[0] as i32, lanes[8] as i32)
                    } else {
                        (1, 1)
                    };
                    *scales.add(2 * j * 16 + r) = lo;
                    *scales.add((2 * j + 1) * 16 + r) = hi;
                }
                *ds.add(r) = T::d(p);
            }
            // Line q holds word q of each row: the 16 × 64 words transposed in 8 × 8 tiles.
            let lines = o as *mut u32;
            for half in 0..2 {
                for c in 0..8 {
                    let tile = std::array::from_fn(|i| {
                        load(values[8 * half + i].as_ptr().add(8 * c) as *const u8)
                    });
                    for (k, column) in transpose8(tile).into_iter().enumerate() {
                        let at = lines.add(16 * (8 * c + k) + 8 * half);
                        _mm256_storeu_si256(at as *mut __m256i, column);
                    }
                }
            }
        }
    }
}

/// The 8 × 8 matrix of 32-bit words whose rows are `r` transposed: word i of result k is word k
/// of `r[i]`.
#[inline(always)]
unsafe fn transpose8(r: [__m256i; 8]) -> [__m256i; 8] {
    unsafe {
        // Within each 128-bit lane: pairs of rows interleaved, then quads.
        let t: [__m256i; 8] = std::array::from_fn(|i| {
            let (a, b) = (r[2 * (i / 2)], r[2 * (i / 2) + 1]);
            if i % 2 == 0 {
                _mm256_unpacklo_epi32(a, b)
            } else {
                _mm256_unpackhi_epi32(a, b)
            }
        });
        // u[4h + k]: words k and k + 4 of rows 4h..4h + 4, in the low and high lane.
        let u: [__m256i; 8] = std::array::from_fn(|i| {
            let (h, k) = (i / 4, i % 4);
            let (a, b) = (t[4 * h + k / 2], t[4 * h + 2 + k / 2]);
            if k % 2 == 0 {
                _mm256_unpacklo_epi64(a, b)
            } else {
                _mm256_unpackhi_epi64(a, b)
            }
        });
        std::array::from_fn(|k| {
            if k < 4 {
                _mm256_permute2x128_si256::<0x20>(u[k], u[4 + k])
            } else {
                _mm256_permute2x128_si256::<0x31>(u[k - 4], u[k])
            }
        })
    }
}

/// The decoder of a grid i-quant or ternary type for the decoded GEMM, with its fixed factor.
pub fn tile_decoder(t: GgmlType) -> Option<(TileDecode, f32)> {
    fn of<T: GridQuant>() -> (TileDecode, f32) {
        (decode_tile::<T>, T::FACTOR)
    }
    Some(match t {
        GgmlType::IQ2_XXS => of::<IQ2XXS>(),
        GgmlType::IQ2_XS => of::<IQ2XS>(),
        GgmlType::IQ2_S => of::<IQ2S>(),
        GgmlType::IQ3_XXS => of::<IQ3XXS>(),
        GgmlType::IQ3_S => of::<IQ3S>(),
        GgmlType::IQ1_S => of::<IQ1S>(),
        GgmlType::IQ1_M => of::<IQ1M>(),
        GgmlType::TQ1_0 => of::<TQ1>(),
        GgmlType::TQ2_0 => of::<TQ2>(),
        _ => return None,
    })
}

fn grid<T: GridQuant>(vnni: bool) -> QuantKernels<BlockQ8K> {
    if vnni {
        row_kernels!(grid_vnni, T, 8)
    } else {
        row_kernels!(grid_avx2, T, 8)
    }
}

/// The row kernels of a grid i-quant or ternary type (Q8_K activations). `vnni`: compiled with
/// AVX-VNNI. Sound to hand out because `x86::kernels` does so only for levels the CPU has.
pub fn q8k_row_kernels(t: GgmlType, vnni: bool) -> Option<QuantKernels<BlockQ8K>> {
    Some(match t {
        GgmlType::IQ2_XXS => grid::<IQ2XXS>(vnni),
        GgmlType::IQ2_XS => grid::<IQ2XS>(vnni),
        GgmlType::IQ2_S => grid::<IQ2S>(vnni),
        GgmlType::IQ3_XXS => grid::<IQ3XXS>(vnni),
        GgmlType::IQ3_S => grid::<IQ3S>(vnni),
        GgmlType::IQ1_S => grid::<IQ1S>(vnni),
        GgmlType::IQ1_M => grid::<IQ1M>(vnni),
        GgmlType::TQ1_0 => grid::<TQ1>(vnni),
        GgmlType::TQ2_0 => grid::<TQ2>(vnni),
        _ => return None,
    })
}

/// The row kernels of Q1_0 (Q8_0 activations), as `q8k_row_kernels`.
pub fn q8_row_kernels(t: GgmlType, vnni: bool) -> Option<QuantKernels<BlockQ8>> {
    match t {
        // SAFETY (both arms): handed out only for levels this CPU has.
        GgmlType::Q1_0 if vnni => Some(row_kernels!(q1_0_vnni)),
        GgmlType::Q1_0 => Some(row_kernels!(q1_0_avx2)),
        _ => None,
    }
}
