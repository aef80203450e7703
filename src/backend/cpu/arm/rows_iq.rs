//! NEON row kernels of the grid i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M)
//! and the ternary types (TQ1_0, TQ2_0) against Q8_K activations, and of Q1_0 against Q8_0, shaped
//! as llama.cpp's arm kernels (ggml-cpu/arch/arm/quants.c): per 32 values the grid entries looked
//! up by index into two vectors of magnitudes, the weights' signs put on them (a multiply by ±1
//! bytes, once per block for all `R` activation rows), each 16 values dotted with the activations
//! (`ByteDot`: SMULL, or SDOT with dotprod) and multiplied by their integer scale, one float step
//! per block. Written once over the byte dot product and the number of activation rows, as
//! `rows.rs`, and instantiated per level.
//!
//! IQ1's shift (±1/8 per 32 or 8 values) joins the grid as 8·g ± 1, so a block's sum stays one
//! integer (8·Σg·x ± Σx, at most 256·9·128·15 < 2^23) and the row is divided by 8 at the end.
//! Block layouts are in `gguf/iq.rs`; the portable kernels (`portable_iq.rs`) are the reference.
#![allow(clippy::needless_range_loop)] // per-row accumulators are indexed in step with the rows

use std::arch::aarch64::*;

use super::rows::{ByteDot, Sdot, Smull, bytes_from_bits};
use super::{f16, load_s8};
use crate::backend::cpu::kernels::{BlockQ8, BlockQ8K, QuantKernels, row_kernels};
use crate::gguf::GgmlType;
use crate::gguf::iq::{
    IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_BYTES,
};

/// Eight bytes of 1, or of −1 where `negative` (an IQ1 shift).
#[inline(always)]
fn ones8(negative: bool) -> u64 {
    if negative {
        u64::MAX
    } else {
        0x0101_0101_0101_0101
    }
}

#[inline(always)]
unsafe fn u16_at(p: *const u8) -> u32 {
    unsafe { (p as *const u16).read_unaligned() as u32 }
}

#[inline(always)]
unsafe fn u32_at(p: *const u8) -> u32 {
    unsafe { (p as *const u32).read_unaligned() }
}

/// Two 8-byte entries as one vector, `a` in the low half.
#[inline(always)]
unsafe fn pair(a: u64, b: u64) -> int8x16_t {
    unsafe { vcombine_s8(vcreate_s8(a), vcreate_s8(b)) }
}

/// Four 4-byte entries (IQ3's grid) as one vector, entry 0 in the low bytes.
#[inline(always)]
unsafe fn quad(g: [u32; 4]) -> int8x16_t {
    unsafe { vreinterpretq_s8_u32(vld1q_u32(g.as_ptr())) }
}

/// Magnitudes times ±1 bytes: the signed weights (|m| < 64, so exact).
#[inline(always)]
unsafe fn signed(m: int8x16_t, signs: int8x16_t) -> int8x16_t {
    unsafe { vmulq_s8(m, signs) }
}

/// Four 7-bit sign indices of `aux` (bits 0..28, as IQ2_XXS and IQ3_XXS store them) as ±1
/// bytes: values 0..16 and 16..32.
#[inline(always)]
unsafe fn packed_signs(aux: u32) -> (int8x16_t, int8x16_t) {
    let s = |l: u32| KSIGNS_BYTES[((aux >> (7 * l)) & 127) as usize];
    unsafe { (pair(s(0), s(1)), pair(s(2), s(3))) }
}

/// 32 explicit sign bits (one per value) as ±1 bytes: −1 where set, 1 where not.
#[inline(always)]
unsafe fn explicit_signs(p: *const u8) -> (int8x16_t, int8x16_t) {
    unsafe {
        let (lo, hi) = bytes_from_bits(p);
        let one = vdupq_n_u8(1);
        (
            vreinterpretq_s8_u8(vorrq_u8(lo, one)),
            vreinterpretq_s8_u8(vorrq_u8(hi, one)),
        )
    }
}

/// A 256-value block type whose group of 32 values decodes to signed bytes (|w| < 64, two
/// vectors of 16 in activation order) with an integer scale per 16 values.
trait GridQuant {
    const BYTES: usize;
    /// The fixed fraction of the scales, applied once to the row.
    const FACTOR: f32;
    /// Whether the two 16-value halves of a group have their own scales (else both take the
    /// first, and the halves share one multiply).
    const SPLIT: bool;
    /// The block's float scale: the f16 at its start unless the type says otherwise.
    fn d(wb: &[u8]) -> f32 {
        f16(wb, 0)
    }
    /// Values 32j..32j + 32 of the block at `p`: (weights 0..16, weights 16..32, scales).
    unsafe fn group(p: *const u8, j: usize) -> (int8x16_t, int8x16_t, [i32; 2]);
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
    const SPLIT: bool = false;
    #[inline(always)]
    unsafe fn group(p: *const u8, j: usize) -> (int8x16_t, int8x16_t, [i32; 2]) {
        unsafe {
            let q = p.add(2 + 8 * j);
            let aux = u32_at(q.add(4));
            let g = |l: usize| IQ2XXS_GRID[*q.add(l) as usize];
            let (s0, s1) = packed_signs(aux);
            let ls = 2 * (aux >> 28) as i32 + 1;
            (
                signed(pair(g(0), g(1)), s0),
                signed(pair(g(2), g(3)), s1),
                [ls, ls],
            )
        }
    }
}

impl GridQuant for IQ2XS {
    const BYTES: usize = 74;
    const FACTOR: f32 = 0.125;
    const SPLIT: bool = true;
    #[inline(always)]
    unsafe fn group(p: *const u8, j: usize) -> (int8x16_t, int8x16_t, [i32; 2]) {
        unsafe {
            // Each u16: a 9-bit grid index and a 7-bit sign index.
            let q = |l: usize| u16_at(p.add(2 + 8 * j + 2 * l));
            let g = |l: usize| IQ2XS_GRID[(q(l) & 511) as usize];
            let s = |l: usize| KSIGNS_BYTES[(q(l) >> 9) as usize];
            let sc = *p.add(66 + j) as i32;
            (
                signed(pair(g(0), g(1)), pair(s(0), s(1))),
                signed(pair(g(2), g(3)), pair(s(2), s(3))),
                [2 * (sc & 15) + 1, 2 * (sc >> 4) + 1],
            )
        }
    }
}

impl GridQuant for IQ2S {
    const BYTES: usize = 82;
    const FACTOR: f32 = 0.125;
    const SPLIT: bool = true;
    #[inline(always)]
    unsafe fn group(p: *const u8, j: usize) -> (int8x16_t, int8x16_t, [i32; 2]) {
        unsafe {
            // Entry l's two high index bits are bits 2l, 2l + 1 of `h`.
            let h = *p.add(66 + j) as usize;
            let g =
                |l: usize| IQ2S_GRID[*p.add(2 + 4 * j + l) as usize | ((h << (8 - 2 * l)) & 0x300)];
            let (s0, s1) = explicit_signs(p.add(34 + 4 * j));
            let sc = *p.add(74 + j) as i32;
            (
                signed(pair(g(0), g(1)), s0),
                signed(pair(g(2), g(3)), s1),
                [2 * (sc & 15) + 1, 2 * (sc >> 4) + 1],
            )
        }
    }
}

impl GridQuant for IQ3XXS {
    const BYTES: usize = 98;
    const FACTOR: f32 = 0.25;
    const SPLIT: bool = false;
    #[inline(always)]
    unsafe fn group(p: *const u8, j: usize) -> (int8x16_t, int8x16_t, [i32; 2]) {
        unsafe {
            let q = p.add(2 + 8 * j);
            let g = |e: usize| IQ3XXS_GRID[*q.add(e) as usize];
            let aux = u32_at(p.add(66 + 4 * j));
            let (s0, s1) = packed_signs(aux);
            let ls = 2 * (aux >> 28) as i32 + 1;
            (
                signed(quad([g(0), g(1), g(2), g(3)]), s0),
                signed(quad([g(4), g(5), g(6), g(7)]), s1),
                [ls, ls],
            )
        }
    }
}

impl GridQuant for IQ3S {
    const BYTES: usize = 110;
    const FACTOR: f32 = 1.0;
    const SPLIT: bool = false;
    #[inline(always)]
    unsafe fn group(p: *const u8, j: usize) -> (int8x16_t, int8x16_t, [i32; 2]) {
        unsafe {
            let h = *p.add(66 + j) as usize;
            // Entry e's ninth index bit is bit e of `h`.
            let g = |e: usize| IQ3S_GRID[*p.add(2 + 8 * j + e) as usize | ((h >> e) & 1) << 8];
            let (s0, s1) = explicit_signs(p.add(74 + 4 * j));
            let ls = 2 * ((*p.add(106 + j / 2) >> (4 * (j % 2))) & 15) as i32 + 1;
            (
                signed(quad([g(0), g(1), g(2), g(3)]), s0),
                signed(quad([g(4), g(5), g(6), g(7)]), s1),
                [ls, ls],
            )
        }
    }
}

/// An IQ1 half-group's grid entries (−1, 0, 1 as bytes) with its shifts (±1 bytes): 8·g + shift.
#[inline(always)]
unsafe fn iq1_weights(grid: int8x16_t, shift: int8x16_t) -> int8x16_t {
    unsafe { vaddq_s8(vshlq_n_s8::<3>(grid), shift) }
}

impl GridQuant for IQ1S {
    const BYTES: usize = 50;
    const FACTOR: f32 = 0.125;
    const SPLIT: bool = false;
    #[inline(always)]
    unsafe fn group(p: *const u8, j: usize) -> (int8x16_t, int8x16_t, [i32; 2]) {
        unsafe {
            // Three index bits per entry, then three scale bits and the shift's sign.
            let qh = u16_at(p.add(34 + 2 * j)) as usize;
            let g =
                |l: usize| IQ1S_GRID[*p.add(2 + 4 * j + l) as usize | ((qh >> (3 * l)) & 7) << 8];
            let shift = vreinterpretq_s8_u64(vdupq_n_u64(ones8(qh & 0x8000 != 0)));
            let ls = 2 * ((qh >> 12) & 7) as i32 + 1;
            (
                iq1_weights(pair(g(0), g(1)), shift),
                iq1_weights(pair(g(2), g(3)), shift),
                [ls, ls],
            )
        }
    }
}

impl GridQuant for IQ1M {
    const BYTES: usize = 56;
    const FACTOR: f32 = 0.125;
    const SPLIT: bool = true;
    /// The f16 whose four nibbles top the four scale words.
    fn d(wb: &[u8]) -> f32 {
        let sc = |i: usize| u16::from_le_bytes([wb[48 + 2 * i], wb[49 + 2 * i]]);
        let bits =
            (sc(0) >> 12) | ((sc(1) >> 8) & 0x00f0) | ((sc(2) >> 4) & 0x0f00) | (sc(3) & 0xf000);
        f16(&bits.to_le_bytes(), 0)
    }
    #[inline(always)]
    unsafe fn group(p: *const u8, j: usize) -> (int8x16_t, int8x16_t, [i32; 2]) {
        unsafe {
            // Per two entries a byte: (3 index bits, shift sign) for each.
            let h = [*p.add(32 + 2 * j) as usize, *p.add(33 + 2 * j) as usize];
            let g = |l: usize| {
                IQ1S_GRID[*p.add(4 * j + l) as usize | ((h[l / 2] << (8 - 4 * (l % 2))) & 0x700)]
            };
            let shift = |h: usize| {
                vreinterpretq_s8_u64(vcombine_u64(
                    vcreate_u64(ones8(h & 0x08 != 0)),
                    vcreate_u64(ones8(h & 0x80 != 0)),
                ))
            };
            let sc = u16_at(p.add(48 + 2 * (j / 2))) >> (6 * (j % 2));
            (
                iq1_weights(pair(g(0), g(1)), shift(h[0])),
                iq1_weights(pair(g(2), g(3)), shift(h[1])),
                [2 * (sc & 7) as i32 + 1, 2 * ((sc >> 3) & 7) as i32 + 1],
            )
        }
    }
}

/// Bytes `v` (each < 243, a base-3 fraction) times the lane's power of three, as trits: the top
/// trit of (v·3^n mod 256)·3 / 256, minus 1 (`ggml`'s TQ1_0 unpacking). (m + m/2)/2/64, each
/// step floored, is ⌊3m/256⌋ without widening (llama.cpp's arm kernel).
#[inline(always)]
unsafe fn trits(v: uint8x16_t, pow3: uint8x16_t) -> int8x16_t {
    unsafe {
        let m = vmulq_u8(v, pow3);
        let t = vshrq_n_u8::<6>(vhaddq_u8(m, vshrq_n_u8::<1>(m)));
        vsubq_s8(vreinterpretq_s8_u8(t), vdupq_n_s8(1))
    }
}

impl GridQuant for TQ1 {
    const BYTES: usize = 54;
    const FACTOR: f32 = 1.0;
    const SPLIT: bool = false;
    fn d(wb: &[u8]) -> f32 {
        f16(wb, 52)
    }
    #[inline(always)]
    unsafe fn group(p: *const u8, j: usize) -> (int8x16_t, int8x16_t, [i32; 2]) {
        const POW3: [u8; 5] = [1, 3, 9, 27, 81];
        unsafe {
            // Values 0..160: bytes 0..32, five trits each; 160..240: bytes 32..48, sixteen
            // values per trit; 240..256: the four bytes at 48, four values per trit.
            let pow = |n: usize| vdupq_n_u8(POW3[n]);
            let mid = vld1q_u8(p.add(32));
            let (lo, hi) = match j {
                0..5 => (
                    trits(vld1q_u8(p), pow(j)),
                    trits(vld1q_u8(p.add(16)), pow(j)),
                ),
                5 => (trits(mid, pow(0)), trits(mid, pow(1))),
                6 => (trits(mid, pow(2)), trits(mid, pow(3))),
                _ => {
                    const QH_POW: [u8; 16] = [1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27];
                    let qh = vreinterpretq_u8_u32(vdupq_n_u32(u32_at(p.add(48))));
                    (trits(mid, pow(4)), trits(qh, vld1q_u8(QH_POW.as_ptr())))
                }
            };
            (lo, hi, [1, 1])
        }
    }
}

impl GridQuant for TQ2 {
    const BYTES: usize = 66;
    const FACTOR: f32 = 1.0;
    const SPLIT: bool = false;
    fn d(wb: &[u8]) -> f32 {
        f16(wb, 64)
    }
    #[inline(always)]
    unsafe fn group(p: *const u8, j: usize) -> (int8x16_t, int8x16_t, [i32; 2]) {
        unsafe {
            // Values 128h + 32l + k: bits 2l of byte 32h + k, stored as value + 1.
            let q = p.add(32 * (j / 4));
            let shift = vdupq_n_s8(-2 * (j % 4) as i8);
            let codes = |v: uint8x16_t| {
                let c = vandq_u8(vshlq_u8(v, shift), vdupq_n_u8(3));
                vsubq_s8(vreinterpretq_s8_u8(c), vdupq_n_s8(1))
            };
            (codes(vld1q_u8(q)), codes(vld1q_u8(q.add(16))), [1, 1])
        }
    }
}

/// A grid-quant weight row · `R` Q8_K activation rows: each weight group decoded once, its sums
/// exact in integers, one float step per block, the same for every `R` (so a row's result does
/// not depend on how many rows were batched with it).
#[inline(always)]
unsafe fn grid_rows<D: ByteDot, T: GridQuant, const R: usize>(
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
            let p = wb.as_ptr();
            // SAFETY: b < n (asserted above).
            let xb = x.map(|row| row.get_unchecked(b));
            let mut acc = [vdupq_n_s32(0); R];
            for j in 0..8 {
                let (lo, hi, sc) = T::group(p, j);
                for k in 0..R {
                    let xp = xb[k].qs.as_ptr().add(32 * j) as *const u8;
                    let (xl, xh) = (load_s8(xp), load_s8(xp.add(16)));
                    let zero = vdupq_n_s32(0);
                    acc[k] = if T::SPLIT {
                        let a = vmlaq_n_s32(acc[k], D::dot(zero, lo, xl), sc[0]);
                        vmlaq_n_s32(a, D::dot(zero, hi, xh), sc[1])
                    } else {
                        vmlaq_n_s32(acc[k], D::dot(D::dot(zero, lo, xl), hi, xh), sc[0])
                    };
                }
            }
            let d = T::d(wb);
            for k in 0..R {
                total[k] += d * xb[k].d * vaddvq_s32(acc[k]) as f32;
            }
        }
        total.map(|t| T::FACTOR * t)
    }
}

/// A Q1_0 weight row (128 values per block, one bit each: +1 where set, −1 where not) · `R` Q8_0
/// activation rows: each 32-value activation block's signed sum scaled by its `d`, the four
/// summed in f32 and scaled by the weight's, as the portable kernel.
#[inline(always)]
unsafe fn q1_0_rows<D: ByteDot, const R: usize>(w: &[u8], x: [&[BlockQ8]; R]) -> [f32; R] {
    const BYTES: usize = 18;
    unsafe {
        let n = w.len() / BYTES;
        assert!(
            x.iter().all(|row| row.len() >= 4 * n),
            "activations shorter than the weights"
        );
        let one = vdupq_n_u8(1);
        let mut total = [0.0f32; R];
        for (b, wb) in w.chunks_exact(BYTES).enumerate() {
            let mut acc = [0.0f32; R];
            for q in 0..4 {
                let (lo, hi) = bytes_from_bits(wb.as_ptr().add(2 + 4 * q));
                // 1 | !set: +1 where the bit is set, −1 (0xFF) where clear.
                let (lo, hi) = (
                    vreinterpretq_s8_u8(vornq_u8(one, lo)),
                    vreinterpretq_s8_u8(vornq_u8(one, hi)),
                );
                for k in 0..R {
                    // SAFETY: 4b + q < 4n (asserted above).
                    let xb = x[k].get_unchecked(4 * b + q);
                    let xp = xb.qs.as_ptr() as *const u8;
                    let i = D::dot(vdupq_n_s32(0), lo, load_s8(xp));
                    let i = D::dot(i, hi, load_s8(xp.add(16)));
                    acc[k] += xb.d * vaddvq_s32(i) as f32;
                }
            }
            let d = f16(wb, 0);
            for k in 0..R {
                total[k] += d * acc[k];
            }
        }
        total
    }
}

// ---- Instantiation per level -----------------------------------------------------------------

#[target_feature(enable = "neon")]
unsafe fn grid_smull<T: GridQuant, const R: usize>(w: &[u8], x: [&[BlockQ8K]; R]) -> [f32; R] {
    unsafe { grid_rows::<Smull, T, R>(w, x) }
}

#[target_feature(enable = "neon,dotprod")]
unsafe fn grid_sdot<T: GridQuant, const R: usize>(w: &[u8], x: [&[BlockQ8K]; R]) -> [f32; R] {
    unsafe { grid_rows::<Sdot, T, R>(w, x) }
}

#[target_feature(enable = "neon")]
unsafe fn q1_0_smull<const R: usize>(w: &[u8], x: [&[BlockQ8]; R]) -> [f32; R] {
    unsafe { q1_0_rows::<Smull, R>(w, x) }
}

#[target_feature(enable = "neon,dotprod")]
unsafe fn q1_0_sdot<const R: usize>(w: &[u8], x: [&[BlockQ8]; R]) -> [f32; R] {
    unsafe { q1_0_rows::<Sdot, R>(w, x) }
}

/// The row kernels of a grid type (SDOT where `dotprod`). Sound to hand out because
/// `arm::kernels` does so only for levels the CPU was detected to have.
fn grid<T: GridQuant>(dotprod: bool) -> QuantKernels<BlockQ8K> {
    if dotprod {
        row_kernels!(grid_sdot, T, 8)
    } else {
        row_kernels!(grid_smull, T, 8)
    }
}

/// The row kernels of a grid i-quant or ternary type (Q8_K activations), SDOT where `dotprod`.
pub fn q8k_row_kernels(t: GgmlType, dotprod: bool) -> Option<QuantKernels<BlockQ8K>> {
    Some(match t {
        GgmlType::IQ2_XXS => grid::<IQ2XXS>(dotprod),
        GgmlType::IQ2_XS => grid::<IQ2XS>(dotprod),
        GgmlType::IQ2_S => grid::<IQ2S>(dotprod),
        GgmlType::IQ3_XXS => grid::<IQ3XXS>(dotprod),
        GgmlType::IQ3_S => grid::<IQ3S>(dotprod),
        GgmlType::IQ1_S => grid::<IQ1S>(dotprod),
        GgmlType::IQ1_M => grid::<IQ1M>(dotprod),
        GgmlType::TQ1_0 => grid::<TQ1>(dotprod),
        GgmlType::TQ2_0 => grid::<TQ2>(dotprod),
        _ => return None,
    })
}

/// The row kernels of Q1_0 (Q8_0 activations), as `q8k_row_kernels`.
pub fn q8_row_kernels(t: GgmlType, dotprod: bool) -> Option<QuantKernels<BlockQ8>> {
    match t {
        // SAFETY (both arms): handed out only for levels this CPU has.
        GgmlType::Q1_0 if dotprod => Some(row_kernels!(q1_0_sdot)),
        GgmlType::Q1_0 => Some(row_kernels!(q1_0_smull)),
        _ => None,
    }
}
