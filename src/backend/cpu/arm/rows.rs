//! NEON row kernels: one weight row in its GGML blocks against one or four activation rows, each
//! weight block unpacked to signed bytes once, multiplied with the 8-bit activations in integers,
//! and scaled once per block. Written once over the byte dot product (`ByteDot`: SMULL, or SDOT
//! with dotprod) and the number of activation rows, and instantiated per level.
#![allow(clippy::needless_range_loop)] // block kernels index several arrays with one index

use std::arch::aarch64::*;
use std::arch::asm;

use super::{f16, load_s8};
use crate::backend::cpu::kernels::{BlockQ8, BlockQ8K, QuantKernels, row_kernels};
use crate::gguf::GgmlType;
use crate::gguf::dequant::scale_min_k4;
use crate::gguf::iq::{KVALUES_IQ4NL, KVALUES_MXFP4, e8m0_half};

/// `acc + Σ a·b` over groups of signed bytes into four 32-bit lanes. How the sixteen products are
/// grouped into lanes differs between the two ways; the lane total does not.
pub(super) trait ByteDot {
    unsafe fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t;
}

pub(super) struct Smull;
pub(super) struct Sdot;

impl ByteDot for Smull {
    #[inline(always)]
    unsafe fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        unsafe {
            let lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
            let hi = vmull_high_s8(a, b);
            vpadalq_s16(vpadalq_s16(acc, lo), hi)
        }
    }
}

impl ByteDot for Sdot {
    #[inline(always)]
    unsafe fn dot(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // SAFETY: only inlined into functions compiled with `dotprod`, which `Kernels` hands out
        // after detecting it.
        unsafe {
            asm!(
                "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
                acc = inout(vreg) acc,
                a = in(vreg) a,
                b = in(vreg) b,
                options(pure, nomem, nostack, preserves_flags)
            );
        }
        acc
    }
}

/// 16 packed nibble bytes → the low nibbles (values 0..16) and the high ones (16..32).
#[inline(always)]
unsafe fn nibbles(p: *const u8) -> (uint8x16_t, uint8x16_t) {
    unsafe {
        let q = vld1q_u8(p);
        (vandq_u8(q, vdupq_n_u8(0x0F)), vshrq_n_u8(q, 4))
    }
}

/// The 32 bits at `p` → 32 bytes, 0xFF where the bit is set: (bits 0..16, bits 16..32).
#[inline(always)]
pub(super) unsafe fn bytes_from_bits(p: *const u8) -> (uint8x16_t, uint8x16_t) {
    unsafe {
        let bits = vreinterpretq_u8_u32(vdupq_n_u32((p as *const u32).read_unaligned()));
        const LO: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1];
        const HI: [u8; 16] = [2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3];
        const MASK: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
        let mask = vld1q_u8(MASK.as_ptr());
        (
            vtstq_u8(vqtbl1q_u8(bits, vld1q_u8(LO.as_ptr())), mask),
            vtstq_u8(vqtbl1q_u8(bits, vld1q_u8(HI.as_ptr())), mask),
        )
    }
}

// ---- 32-value blocks against Q8 activations --------------------------------------------------

/// A 32-block weight type: how to unpack a block into 32 signed bytes (two halves), its scale
/// (the f16 at byte 0 unless the type says otherwise), and whether it has a per-block minimum
/// (the f16 at byte 2) to add as m · Σx.
trait Block32 {
    const BYTES: usize;
    const OFFSET: bool;
    unsafe fn unpack(p: *const u8) -> (int8x16_t, int8x16_t);
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
    const OFFSET: bool = false;
    #[inline(always)]
    unsafe fn unpack(p: *const u8) -> (int8x16_t, int8x16_t) {
        unsafe {
            let (lo, hi) = nibbles(p.add(2));
            let eight = vdupq_n_s8(8);
            (
                vsubq_s8(vreinterpretq_s8_u8(lo), eight),
                vsubq_s8(vreinterpretq_s8_u8(hi), eight),
            )
        }
    }
}

impl Block32 for Q4_1 {
    const BYTES: usize = 20;
    const OFFSET: bool = true;
    #[inline(always)]
    unsafe fn unpack(p: *const u8) -> (int8x16_t, int8x16_t) {
        unsafe {
            let (lo, hi) = nibbles(p.add(4));
            (vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi))
        }
    }
}

impl Block32 for Q5_0 {
    const BYTES: usize = 22;
    const OFFSET: bool = false;
    #[inline(always)]
    unsafe fn unpack(p: *const u8) -> (int8x16_t, int8x16_t) {
        unsafe {
            let (lo, hi) = nibbles(p.add(6));
            let (set_lo, set_hi) = bytes_from_bits(p.add(2));
            // 0xF0 where the fifth bit is clear: the byte becomes nibble − 16.
            let f0 = vdupq_n_u8(0xF0);
            (
                vreinterpretq_s8_u8(vorrq_u8(lo, vbicq_u8(f0, set_lo))),
                vreinterpretq_s8_u8(vorrq_u8(hi, vbicq_u8(f0, set_hi))),
            )
        }
    }
}

impl Block32 for Q5_1 {
    const BYTES: usize = 24;
    const OFFSET: bool = true;
    #[inline(always)]
    unsafe fn unpack(p: *const u8) -> (int8x16_t, int8x16_t) {
        unsafe {
            let (lo, hi) = nibbles(p.add(8));
            let (set_lo, set_hi) = bytes_from_bits(p.add(4));
            let b4 = vdupq_n_u8(0x10);
            (
                vreinterpretq_s8_u8(vorrq_u8(lo, vandq_u8(set_lo, b4))),
                vreinterpretq_s8_u8(vorrq_u8(hi, vandq_u8(set_hi, b4))),
            )
        }
    }
}

impl Block32 for Q8_0 {
    const BYTES: usize = 34;
    const OFFSET: bool = false;
    #[inline(always)]
    unsafe fn unpack(p: *const u8) -> (int8x16_t, int8x16_t) {
        unsafe { (load_s8(p.add(2)), load_s8(p.add(18))) }
    }
}

/// 16 packed nibble bytes through a 16-level signed table (TBL): the low nibbles' levels (values
/// 0..16) and the high ones' (16..32).
#[inline(always)]
unsafe fn nibble_levels(p: *const u8, levels: &[i8; 16]) -> (int8x16_t, int8x16_t) {
    unsafe {
        let (lo, hi) = nibbles(p);
        let table = vld1q_s8(levels.as_ptr());
        (vqtbl1q_s8(table, lo), vqtbl1q_s8(table, hi))
    }
}

impl Block32 for IQ4NL {
    const BYTES: usize = 18;
    const OFFSET: bool = false;
    #[inline(always)]
    unsafe fn unpack(p: *const u8) -> (int8x16_t, int8x16_t) {
        unsafe { nibble_levels(p.add(2), &KVALUES_IQ4NL) }
    }
}

impl Block32 for MXFP4 {
    const BYTES: usize = 17;
    const OFFSET: bool = false;
    #[inline(always)]
    unsafe fn unpack(p: *const u8) -> (int8x16_t, int8x16_t) {
        unsafe { nibble_levels(p.add(1), &KVALUES_MXFP4) }
    }
    #[inline(always)]
    fn scale(wb: &[u8]) -> f32 {
        e8m0_half(wb[0])
    }
}

/// One block's contribution to a row's accumulators: the lanes of (weights · activations), times
/// d_w·d_x, added to `acc`; the minimum's share m_w·s_x added to `m`.
#[inline(always)]
unsafe fn block32<D: ByteDot, T: Block32>(
    w: (int8x16_t, int8x16_t),
    dw: f32,
    mw: f32,
    xb: &BlockQ8,
    acc: &mut float32x4_t,
    m: &mut f32,
) {
    unsafe {
        let xp = xb.qs.as_ptr() as *const u8;
        let i = D::dot(vdupq_n_s32(0), w.0, load_s8(xp));
        let i = D::dot(i, w.1, load_s8(xp.add(16)));
        *acc = vfmaq_n_f32(*acc, vcvtq_f32_s32(i), dw * xb.d);
        if T::OFFSET {
            *m += mw * xb.s;
        }
    }
}

/// A weight row of 32-blocks · `R` Q8 activation rows, each weight block unpacked once. Even and
/// odd blocks accumulate apart (two dependency chains), summed at the end the same way for every
/// `R`, so a row's result does not depend on how many rows were batched with it.
#[inline(always)]
unsafe fn blocks32_x4<D: ByteDot, T: Block32, const R: usize>(
    w: &[u8],
    x: [&[BlockQ8]; R],
) -> [f32; R] {
    unsafe {
        let n = (w.len() / T::BYTES).min(x.iter().map(|r| r.len()).min().unwrap_or(0));
        let (mut even, mut odd) = ([vdupq_n_f32(0.0); R], [vdupq_n_f32(0.0); R]);
        let (mut m_even, mut m_odd) = ([0.0f32; R], [0.0f32; R]);
        macro_rules! block {
            ($b:expr, $acc:ident, $m:ident) => {{
                let b: usize = $b;
                let wb = &w[b * T::BYTES..(b + 1) * T::BYTES];
                let unpacked = T::unpack(wb.as_ptr());
                let dw = T::scale(wb);
                let mw = if T::OFFSET { f16(wb, 2) } else { 0.0 };
                for k in 0..R {
                    block32::<D, T>(unpacked, dw, mw, &x[k][b], &mut $acc[k], &mut $m[k]);
                }
            }};
        }
        let mut b = 0;
        while b + 2 <= n {
            block!(b, even, m_even);
            block!(b + 1, odd, m_odd);
            b += 2;
        }
        if b < n {
            block!(b, even, m_even);
        }
        let mut out = [0.0f32; R];
        for k in 0..R {
            out[k] = vaddvq_f32(vaddq_f32(even[k], odd[k])) + (m_even[k] + m_odd[k]);
        }
        out
    }
}

// ---- K-quants against Q8_K activations --------------------------------------------------------

/// A K-quant weight type: 256 values unpacked into sixteen vectors of sixteen signed bytes (in
/// activation order), each with one integer scale, plus the block's float scales.
trait BlockK {
    const BYTES: usize;
    /// The unpacked values, their scales (one per 16 values), and Σ min·(activation sums) for
    /// the types with minimums.
    unsafe fn unpack(wb: &[u8]) -> ([int8x16_t; 16], [i32; 16]);
    /// d·Σ(scaled products) − dmin·mins, exactly as the portable kernel combines them.
    fn combine(wb: &[u8], xb: &BlockQ8K, sum: i32) -> f32;
}

struct Q4K;
struct Q5K;
struct Q6K;

/// The sub-block scales of a Q4_K/Q5_K block, one per 16 values (each 32-value scale twice).
#[inline(always)]
fn k4_scales(wb: &[u8]) -> [i32; 16] {
    let mut sc = [0i32; 16];
    for j in 0..8 {
        let s = scale_min_k4(j, &wb[4..16]).0 as i32;
        sc[2 * j] = s;
        sc[2 * j + 1] = s;
    }
    sc
}

/// Σ min_j · (activation sum of sub-block j) of a Q4_K/Q5_K block.
#[inline(always)]
fn k4_mins(wb: &[u8], xb: &BlockQ8K) -> i32 {
    (0..8)
        .map(|j| {
            let m = scale_min_k4(j, &wb[4..16]).1 as i32;
            m * (xb.bsums[2 * j] as i32 + xb.bsums[2 * j + 1] as i32)
        })
        .sum()
}

impl BlockK for Q4K {
    const BYTES: usize = 144;
    #[inline(always)]
    unsafe fn unpack(wb: &[u8]) -> ([int8x16_t; 16], [i32; 16]) {
        unsafe {
            let qs = wb.as_ptr().add(16);
            let mut v = [vdupq_n_s8(0); 16];
            for j in 0..4 {
                let (lo0, hi0) = nibbles(qs.add(32 * j));
                let (lo1, hi1) = nibbles(qs.add(32 * j + 16));
                v[4 * j] = vreinterpretq_s8_u8(lo0);
                v[4 * j + 1] = vreinterpretq_s8_u8(lo1);
                v[4 * j + 2] = vreinterpretq_s8_u8(hi0);
                v[4 * j + 3] = vreinterpretq_s8_u8(hi1);
            }
            (v, k4_scales(wb))
        }
    }
    #[inline(always)]
    fn combine(wb: &[u8], xb: &BlockQ8K, sum: i32) -> f32 {
        let d = f16(wb, 0) * xb.d;
        let dmin = f16(wb, 2) * xb.d;
        d * sum as f32 - dmin * k4_mins(wb, xb) as f32
    }
}

impl BlockK for Q5K {
    const BYTES: usize = 176;
    #[inline(always)]
    unsafe fn unpack(wb: &[u8]) -> ([int8x16_t; 16], [i32; 16]) {
        unsafe {
            let qh = [vld1q_u8(wb.as_ptr().add(16)), vld1q_u8(wb.as_ptr().add(32))];
            let qs = wb.as_ptr().add(48);
            let b4 = vdupq_n_u8(0x10);
            // Bit s of each qh byte is the fifth bit of sub-block s's value.
            let high = |half: usize, s: usize| vandq_u8(vtstq_u8(qh[half], vdupq_n_u8(1 << s)), b4);
            let mut v = [vdupq_n_s8(0); 16];
            for j in 0..4 {
                let (lo0, hi0) = nibbles(qs.add(32 * j));
                let (lo1, hi1) = nibbles(qs.add(32 * j + 16));
                v[4 * j] = vreinterpretq_s8_u8(vorrq_u8(lo0, high(0, 2 * j)));
                v[4 * j + 1] = vreinterpretq_s8_u8(vorrq_u8(lo1, high(1, 2 * j)));
                v[4 * j + 2] = vreinterpretq_s8_u8(vorrq_u8(hi0, high(0, 2 * j + 1)));
                v[4 * j + 3] = vreinterpretq_s8_u8(vorrq_u8(hi1, high(1, 2 * j + 1)));
            }
            (v, k4_scales(wb))
        }
    }
    #[inline(always)]
    fn combine(wb: &[u8], xb: &BlockQ8K, sum: i32) -> f32 {
        Q4K::combine(wb, xb, sum)
    }
}

impl BlockK for Q6K {
    const BYTES: usize = 210;
    #[inline(always)]
    unsafe fn unpack(wb: &[u8]) -> ([int8x16_t; 16], [i32; 16]) {
        unsafe {
            let m4 = vdupq_n_u8(0x0F);
            let m2 = vdupq_n_u8(0x03);
            let thirty_two = vdupq_n_s8(32);
            let mut v = [vdupq_n_s8(0); 16];
            for n in 0..2 {
                let ql = wb.as_ptr().add(64 * n);
                let qh = wb.as_ptr().add(128 + 32 * n);
                let l: [uint8x16_t; 4] = std::array::from_fn(|i| vld1q_u8(ql.add(16 * i)));
                let h = [vld1q_u8(qh), vld1q_u8(qh.add(16))];
                // Two bits of qh on top of a nibble of ql: values 0..64, stored as u − 32.
                let six = |low: uint8x16_t, high: uint8x16_t| {
                    let u = vorrq_u8(low, vshlq_n_u8(vandq_u8(high, m2), 4));
                    vsubq_s8(vreinterpretq_s8_u8(u), thirty_two)
                };
                let o = 8 * n;
                v[o] = six(vandq_u8(l[0], m4), h[0]);
                v[o + 1] = six(vandq_u8(l[1], m4), h[1]);
                v[o + 2] = six(vandq_u8(l[2], m4), vshrq_n_u8(h[0], 2));
                v[o + 3] = six(vandq_u8(l[3], m4), vshrq_n_u8(h[1], 2));
                v[o + 4] = six(vshrq_n_u8(l[0], 4), vshrq_n_u8(h[0], 4));
                v[o + 5] = six(vshrq_n_u8(l[1], 4), vshrq_n_u8(h[1], 4));
                v[o + 6] = six(vshrq_n_u8(l[2], 4), vshrq_n_u8(h[0], 6));
                v[o + 7] = six(vshrq_n_u8(l[3], 4), vshrq_n_u8(h[1], 6));
            }
            let sc = std::array::from_fn(|i| wb[192 + i] as i8 as i32);
            (v, sc)
        }
    }
    #[inline(always)]
    fn combine(wb: &[u8], xb: &BlockQ8K, sum: i32) -> f32 {
        f16(wb, 208) * xb.d * sum as f32
    }
}

struct IQ4XS;

impl BlockK for IQ4XS {
    const BYTES: usize = 136;
    #[inline(always)]
    unsafe fn unpack(wb: &[u8]) -> ([int8x16_t; 16], [i32; 16]) {
        unsafe {
            let mut v = [vdupq_n_s8(0); 16];
            let mut sc = [0i32; 16];
            let high = u16::from_le_bytes([wb[2], wb[3]]) as i32;
            for j in 0..8 {
                (v[2 * j], v[2 * j + 1]) =
                    nibble_levels(wb.as_ptr().add(8 + 16 * j), &KVALUES_IQ4NL);
                let low = (wb[4 + j / 2] >> (4 * (j % 2))) as i32 & 0xF;
                let ls = (low | ((high >> (2 * j)) & 3) << 4) - 32;
                (sc[2 * j], sc[2 * j + 1]) = (ls, ls);
            }
            (v, sc)
        }
    }
    /// One float step per block, as the x86 kernel (the portable one scales each 32 values in
    /// float; the integer sums are the same).
    #[inline(always)]
    fn combine(wb: &[u8], xb: &BlockQ8K, sum: i32) -> f32 {
        f16(wb, 0) * xb.d * sum as f32
    }
}

/// Σ over the sixteen 16-value groups of scale · (weights · activations), in integers.
#[inline(always)]
unsafe fn k_sum<D: ByteDot>(v: &[int8x16_t; 16], sc: &[i32; 16], xq: &[i8; 256]) -> i32 {
    unsafe {
        let xp = xq.as_ptr() as *const u8;
        let mut acc = vdupq_n_s32(0);
        for g in 0..16 {
            let p = D::dot(vdupq_n_s32(0), v[g], load_s8(xp.add(16 * g)));
            acc = vmlaq_n_s32(acc, p, sc[g]);
        }
        vaddvq_s32(acc)
    }
}

/// A K-quant weight row · `R` Q8_K activation rows: each weight block is unpacked once. Integer
/// sums are exact and the float combination is the portable kernel's, so each row's result does
/// not depend on how rows were batched.
#[inline(always)]
unsafe fn blocks_k<D: ByteDot, T: BlockK, const R: usize>(
    w: &[u8],
    x: [&[BlockQ8K]; R],
) -> [f32; R] {
    unsafe {
        let mut total = [0.0f32; R];
        for (b, wb) in w.chunks_exact(T::BYTES).enumerate() {
            let (v, sc) = T::unpack(wb);
            for k in 0..R {
                let xb = &x[k][b];
                total[k] += T::combine(wb, xb, k_sum::<D>(&v, &sc, &xb.qs));
            }
        }
        total
    }
}

// ---- Instantiation per level -----------------------------------------------------------------

#[target_feature(enable = "neon")]
unsafe fn blocks32_smull<T: Block32, const R: usize>(w: &[u8], x: [&[BlockQ8]; R]) -> [f32; R] {
    unsafe { blocks32_x4::<Smull, T, R>(w, x) }
}

#[target_feature(enable = "neon,dotprod")]
unsafe fn blocks32_sdot<T: Block32, const R: usize>(w: &[u8], x: [&[BlockQ8]; R]) -> [f32; R] {
    unsafe { blocks32_x4::<Sdot, T, R>(w, x) }
}

#[target_feature(enable = "neon")]
unsafe fn blocks_k_smull<T: BlockK, const R: usize>(w: &[u8], x: [&[BlockQ8K]; R]) -> [f32; R] {
    unsafe { blocks_k::<Smull, T, R>(w, x) }
}

#[target_feature(enable = "neon,dotprod")]
unsafe fn blocks_k_sdot<T: BlockK, const R: usize>(w: &[u8], x: [&[BlockQ8K]; R]) -> [f32; R] {
    unsafe { blocks_k::<Sdot, T, R>(w, x) }
}

/// The row kernels of a 32-value block type (SDOT where `dotprod`). Sound to hand out because
/// `arm::kernels` does so only for levels the CPU was detected to have.
fn q8_rows<T: Block32>(dotprod: bool) -> QuantKernels<BlockQ8> {
    if dotprod {
        row_kernels!(blocks32_sdot, T)
    } else {
        row_kernels!(blocks32_smull, T)
    }
}

fn q8k_rows<T: BlockK>(dotprod: bool) -> QuantKernels<BlockQ8K> {
    if dotprod {
        row_kernels!(blocks_k_sdot, T)
    } else {
        row_kernels!(blocks_k_smull, T)
    }
}

/// The row kernels of a 32-value block type, where there are NEON ones (SDOT where `dotprod`).
pub fn q8_row_kernels(t: GgmlType, dotprod: bool) -> Option<QuantKernels<BlockQ8>> {
    Some(match t {
        GgmlType::Q4_0 => q8_rows::<Q4_0>(dotprod),
        GgmlType::Q4_1 => q8_rows::<Q4_1>(dotprod),
        GgmlType::Q5_0 => q8_rows::<Q5_0>(dotprod),
        GgmlType::Q5_1 => q8_rows::<Q5_1>(dotprod),
        GgmlType::Q8_0 => q8_rows::<Q8_0>(dotprod),
        GgmlType::IQ4_NL => q8_rows::<IQ4NL>(dotprod),
        GgmlType::MXFP4 => q8_rows::<MXFP4>(dotprod),
        _ => return None,
    })
}

/// The row kernels of a K-quant, where there are NEON ones.
pub fn q8k_row_kernels(t: GgmlType, dotprod: bool) -> Option<QuantKernels<BlockQ8K>> {
    Some(match t {
        GgmlType::Q4_K => q8k_rows::<Q4K>(dotprod),
        GgmlType::IQ4_XS => q8k_rows::<IQ4XS>(dotprod),
        GgmlType::Q5_K => q8k_rows::<Q5K>(dotprod),
        GgmlType::Q6_K => q8k_rows::<Q6K>(dotprod),
        _ => return None,
    })
}
