//! aarch64 kernels: NEON, which every aarch64 CPU has, and NEON with the dotprod extension (SDOT,
//! four byte products summed into each 32-bit lane), which most since the Cortex-A76 and every
//! Apple core have. `simd::Kernels` picks one at run time; each is tested against the portable
//! kernels in quant.rs (CI runs those tests under qemu). The same block types, activation formats
//! and four-row variants as the x86 kernels: weight blocks are unpacked to signed bytes, multiplied
//! with the 8-bit activations in integers, and scaled once per block.
//!
//! Stable Rust has no intrinsics for SDOT or for f16 ↔ f32 vector conversion, so those few
//! instructions are inline assembly (FCVTL/FCVTN are base ARMv8; SDOT only runs in functions
//! compiled with, and dispatched after detecting, `dotprod`).
#![allow(clippy::needless_range_loop)] // block kernels index several arrays with one index

use std::arch::aarch64::*;
use std::arch::asm;

use super::ggml_math::EXPF_CONSTANTS;
use super::quant::{BlockQ8, BlockQ8K};
use super::simd::{Dot4, DotF32, DotQ8, DotQ8K};
use crate::gguf::GgmlType;
use crate::gguf::dequant::scale_min_k4;

/// Which byte dot product the integer kernels use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// Widening multiplies (SMULL) and pairwise adds.
    Neon,
    /// SDOT.
    DotProd,
}

/// `acc + Σ a·b` over groups of signed bytes into four 32-bit lanes. How the sixteen products are
/// grouped into lanes differs between the two ways; the lane total does not.
trait ByteDot {
    unsafe fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t;
}

struct Smull;
struct Sdot;

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

/// The f16 at byte `i` of `b`, converted by the FPU (FCVT).
#[inline(always)]
fn f16(b: &[u8], i: usize) -> f32 {
    let bits = u16::from_le_bytes([b[i], b[i + 1]]);
    let out: f32;
    // SAFETY: FCVT from half to single precision is base ARMv8 floating point.
    unsafe {
        asm!(
            "fcvt {out:s}, {h:h}",
            out = lateout(vreg) out,
            h = in(vreg) bits as i16,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    out
}

/// Four f16 values (eight bytes at `p`) as f32 (FCVTL).
#[inline(always)]
unsafe fn load_f16x4(p: *const u8) -> float32x4_t {
    unsafe {
        let h = vreinterpret_u16_u8(vld1_u8(p));
        let out: float32x4_t;
        asm!(
            "fcvtl {out:v}.4s, {h:v}.4h",
            out = lateout(vreg) out,
            h = in(vreg) h,
            options(pure, nomem, nostack, preserves_flags)
        );
        out
    }
}

/// Four f32 rounded to f16, to nearest even (FCVTN), and back.
#[inline(always)]
unsafe fn round_f16x4(x: float32x4_t) -> float32x4_t {
    unsafe {
        let out: float32x4_t;
        asm!(
            "fcvtn {t:v}.4h, {x:v}.4s",
            "fcvtl {out:v}.4s, {t:v}.4h",
            x = in(vreg) x,
            t = out(vreg) _,
            out = lateout(vreg) out,
            options(pure, nomem, nostack, preserves_flags)
        );
        out
    }
}

#[inline(always)]
unsafe fn load_s8(p: *const u8) -> int8x16_t {
    unsafe { vreinterpretq_s8_u8(vld1q_u8(p)) }
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
unsafe fn bytes_from_bits(p: *const u8) -> (uint8x16_t, uint8x16_t) {
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

/// A 32-block weight type: how to unpack a block into 32 signed bytes (two halves), and whether
/// it has a per-block minimum (the f16 at byte 2) to add as m · Σx.
trait Block32 {
    const BYTES: usize;
    const OFFSET: bool;
    unsafe fn unpack(p: *const u8) -> (int8x16_t, int8x16_t);
}

struct Q4_0;
struct Q4_1;
struct Q5_0;
struct Q5_1;
struct Q8_0;

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

/// A weight row of 32-blocks · Q8 activations. Even and odd blocks accumulate apart (two
/// dependency chains), summed at the end exactly as the four-row version sums.
#[inline(always)]
unsafe fn blocks32<D: ByteDot, T: Block32>(w: &[u8], x: &[BlockQ8]) -> f32 {
    unsafe { blocks32_x4::<D, T, 1>(w, [x])[0] }
}

/// `blocks32` against `R` activation rows at once: each weight block is unpacked once.
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
                let dw = f16(wb, 0);
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

/// `blocks_k` for one activation row.
#[inline(always)]
unsafe fn blocks_k1<D: ByteDot, T: BlockK>(w: &[u8], x: &[BlockQ8K]) -> f32 {
    unsafe { blocks_k::<D, T, 1>(w, [x])[0] }
}

/// The kernel set for one byte dot product, compiled with `$features`, with safe wrappers: the
/// module's functions are handed out only by `Kernels` after it detected those features.
macro_rules! kernel_set {
    ($module:ident, $features:literal, $dot:ty) => {
        pub mod $module {
            use super::*;

            macro_rules! one_row {
                ($name:ident, $body:expr, $x:ty) => {
                    pub fn $name(w: &[u8], x: &[$x]) -> f32 {
                        #[target_feature(enable = $features)]
                        unsafe fn imp(w: &[u8], x: &[$x]) -> f32 {
                            unsafe { $body(w, x) }
                        }
                        // SAFETY: see the kernel set's comment.
                        unsafe { imp(w, x) }
                    }
                };
            }
            macro_rules! four_rows {
                ($name:ident, $body:expr, $x:ty) => {
                    pub fn $name(w: &[u8], x: [&[$x]; 4]) -> [f32; 4] {
                        #[target_feature(enable = $features)]
                        unsafe fn imp(w: &[u8], x: [&[$x]; 4]) -> [f32; 4] {
                            unsafe { $body(w, x) }
                        }
                        // SAFETY: see the kernel set's comment.
                        unsafe { imp(w, x) }
                    }
                };
            }
            one_row!(q4_0, blocks32::<$dot, Q4_0>, BlockQ8);
            one_row!(q4_1, blocks32::<$dot, Q4_1>, BlockQ8);
            one_row!(q5_0, blocks32::<$dot, Q5_0>, BlockQ8);
            one_row!(q5_1, blocks32::<$dot, Q5_1>, BlockQ8);
            one_row!(q8_0, blocks32::<$dot, Q8_0>, BlockQ8);
            four_rows!(q4_0_x4, blocks32_x4::<$dot, Q4_0, 4>, BlockQ8);
            four_rows!(q4_1_x4, blocks32_x4::<$dot, Q4_1, 4>, BlockQ8);
            four_rows!(q5_0_x4, blocks32_x4::<$dot, Q5_0, 4>, BlockQ8);
            four_rows!(q5_1_x4, blocks32_x4::<$dot, Q5_1, 4>, BlockQ8);
            four_rows!(q8_0_x4, blocks32_x4::<$dot, Q8_0, 4>, BlockQ8);
            one_row!(q4_k, blocks_k1::<$dot, Q4K>, BlockQ8K);
            one_row!(q5_k, blocks_k1::<$dot, Q5K>, BlockQ8K);
            one_row!(q6_k, blocks_k1::<$dot, Q6K>, BlockQ8K);
            four_rows!(q4_k_x4, blocks_k::<$dot, Q4K, 4>, BlockQ8K);
            four_rows!(q5_k_x4, blocks_k::<$dot, Q5K, 4>, BlockQ8K);
            four_rows!(q6_k_x4, blocks_k::<$dot, Q6K, 4>, BlockQ8K);
        }
    };
}

kernel_set!(smull, "neon", Smull);
kernel_set!(sdot, "neon,dotprod", Sdot);

/// The dot product of a 32-block weight row with Q8 activations, where there is a NEON one.
pub fn dot_q8(isa: Isa, t: GgmlType) -> Option<DotQ8> {
    Some(match (isa, t) {
        (Isa::Neon, GgmlType::Q4_0) => smull::q4_0,
        (Isa::Neon, GgmlType::Q4_1) => smull::q4_1,
        (Isa::Neon, GgmlType::Q5_0) => smull::q5_0,
        (Isa::Neon, GgmlType::Q5_1) => smull::q5_1,
        (Isa::Neon, GgmlType::Q8_0) => smull::q8_0,
        (Isa::DotProd, GgmlType::Q4_0) => sdot::q4_0,
        (Isa::DotProd, GgmlType::Q4_1) => sdot::q4_1,
        (Isa::DotProd, GgmlType::Q5_0) => sdot::q5_0,
        (Isa::DotProd, GgmlType::Q5_1) => sdot::q5_1,
        (Isa::DotProd, GgmlType::Q8_0) => sdot::q8_0,
        _ => return None,
    })
}

/// The four-row version of `dot_q8`.
pub fn dot_q8_x4(isa: Isa, t: GgmlType) -> Option<Dot4<BlockQ8>> {
    Some(match (isa, t) {
        (Isa::Neon, GgmlType::Q4_0) => smull::q4_0_x4,
        (Isa::Neon, GgmlType::Q4_1) => smull::q4_1_x4,
        (Isa::Neon, GgmlType::Q5_0) => smull::q5_0_x4,
        (Isa::Neon, GgmlType::Q5_1) => smull::q5_1_x4,
        (Isa::Neon, GgmlType::Q8_0) => smull::q8_0_x4,
        (Isa::DotProd, GgmlType::Q4_0) => sdot::q4_0_x4,
        (Isa::DotProd, GgmlType::Q4_1) => sdot::q4_1_x4,
        (Isa::DotProd, GgmlType::Q5_0) => sdot::q5_0_x4,
        (Isa::DotProd, GgmlType::Q5_1) => sdot::q5_1_x4,
        (Isa::DotProd, GgmlType::Q8_0) => sdot::q8_0_x4,
        _ => return None,
    })
}

/// The dot product of a K-quant weight row with Q8_K activations, where there is a NEON one.
pub fn dot_q8k(isa: Isa, t: GgmlType) -> Option<DotQ8K> {
    Some(match (isa, t) {
        (Isa::Neon, GgmlType::Q4_K) => smull::q4_k,
        (Isa::Neon, GgmlType::Q5_K) => smull::q5_k,
        (Isa::Neon, GgmlType::Q6_K) => smull::q6_k,
        (Isa::DotProd, GgmlType::Q4_K) => sdot::q4_k,
        (Isa::DotProd, GgmlType::Q5_K) => sdot::q5_k,
        (Isa::DotProd, GgmlType::Q6_K) => sdot::q6_k,
        _ => return None,
    })
}

/// The four-row version of `dot_q8k`.
pub fn dot_q8k_x4(isa: Isa, t: GgmlType) -> Option<Dot4<BlockQ8K>> {
    Some(match (isa, t) {
        (Isa::Neon, GgmlType::Q4_K) => smull::q4_k_x4,
        (Isa::Neon, GgmlType::Q5_K) => smull::q5_k_x4,
        (Isa::Neon, GgmlType::Q6_K) => smull::q6_k_x4,
        (Isa::DotProd, GgmlType::Q4_K) => sdot::q4_k_x4,
        (Isa::DotProd, GgmlType::Q5_K) => sdot::q5_k_x4,
        (Isa::DotProd, GgmlType::Q6_K) => sdot::q6_k_x4,
        _ => return None,
    })
}

/// The dot product of an unquantized weight row with f32 activations (F32 and F16 weights).
pub fn dot_f32(t: GgmlType) -> Option<DotF32> {
    match t {
        GgmlType::F32 => Some(dot_f32_bytes),
        GgmlType::F16 => Some(dot_f16_bytes),
        _ => None,
    }
}

/// f32 weights stored as little-endian bytes (possibly unaligned) · f32 activations.
fn dot_f32_bytes(w: &[u8], x: &[f32]) -> f32 {
    let n = (w.len() / 4).min(x.len());
    // SAFETY: every load reads 16 bytes inside `w` and four values inside `x` (i + 8 ≤ n).
    unsafe {
        let (mut s0, mut s1) = (vdupq_n_f32(0.0), vdupq_n_f32(0.0));
        let mut i = 0;
        while i + 8 <= n {
            let w0 = vreinterpretq_f32_u8(vld1q_u8(w.as_ptr().add(4 * i)));
            let w1 = vreinterpretq_f32_u8(vld1q_u8(w.as_ptr().add(4 * i + 16)));
            s0 = vfmaq_f32(s0, w0, vld1q_f32(x.as_ptr().add(i)));
            s1 = vfmaq_f32(s1, w1, vld1q_f32(x.as_ptr().add(i + 4)));
            i += 8;
        }
        let mut sum = vaddvq_f32(vaddq_f32(s0, s1));
        for j in i..n {
            let b = &w[4 * j..4 * j + 4];
            sum += f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * x[j];
        }
        sum
    }
}

/// f16 weights stored as little-endian bytes · f32 activations.
fn dot_f16_bytes(w: &[u8], x: &[f32]) -> f32 {
    let n = (w.len() / 2).min(x.len());
    // SAFETY: every load reads 8 bytes inside `w` and four values inside `x` (i + 8 ≤ n).
    unsafe {
        let (mut s0, mut s1) = (vdupq_n_f32(0.0), vdupq_n_f32(0.0));
        let mut i = 0;
        while i + 8 <= n {
            let w0 = load_f16x4(w.as_ptr().add(2 * i));
            let w1 = load_f16x4(w.as_ptr().add(2 * i + 8));
            s0 = vfmaq_f32(s0, w0, vld1q_f32(x.as_ptr().add(i)));
            s1 = vfmaq_f32(s1, w1, vld1q_f32(x.as_ptr().add(i + 4)));
            i += 8;
        }
        let mut sum = vaddvq_f32(vaddq_f32(s0, s1));
        for j in i..n {
            sum += f16(w, 2 * j) * x[j];
        }
        sum
    }
}

/// Σ a·b with b in f16 (attention scores against the key cache).
pub fn dot_f32_f16(a: &[f32], b: &[half::f16]) -> f32 {
    let n = a.len().min(b.len());
    // SAFETY: f16 is two bytes; `dot_f16_bytes` reads only the first n of them.
    let bytes = unsafe { std::slice::from_raw_parts(b.as_ptr() as *const u8, 2 * n) };
    dot_f16_bytes(bytes, &a[..n])
}

/// y += a·x with x in f16 (attention output from the value cache).
pub fn axpy_f16(alpha: f32, x: &[half::f16], y: &mut [f32]) {
    let n = x.len().min(y.len());
    let xp = x.as_ptr() as *const u8;
    // SAFETY: each step reads 8 bytes of `x` and writes four values of `y` below n.
    unsafe {
        let mut i = 0;
        while i + 4 <= n {
            let yv = vld1q_f32(y.as_ptr().add(i));
            vst1q_f32(
                y.as_mut_ptr().add(i),
                vfmaq_n_f32(yv, load_f16x4(xp.add(2 * i)), alpha),
            );
            i += 4;
        }
        for j in i..n {
            y[j] += alpha * x[j].to_f32();
        }
    }
}

/// y += a·x with x a row of Q8_0 blocks, each value expanded to d·q first.
pub fn axpy_q8_0(alpha: f32, x: &[u8], y: &mut [f32]) {
    for (xb, yb) in x.chunks_exact(34).zip(y.chunks_exact_mut(32)) {
        // SAFETY: the block holds 32 bytes after its scale and `yb` 32 values.
        unsafe {
            let d = vdupq_n_f32(f16(xb, 0));
            let q = [load_s8(xb.as_ptr().add(2)), load_s8(xb.as_ptr().add(18))];
            for (h, &qh) in q.iter().enumerate() {
                let wide = [vmovl_s8(vget_low_s8(qh)), vmovl_high_s8(qh)];
                for (k, &w16) in wide.iter().enumerate() {
                    let words = [vmovl_s16(vget_low_s16(w16)), vmovl_high_s16(w16)];
                    for (l, &w32) in words.iter().enumerate() {
                        let p = yb.as_mut_ptr().add(16 * h + 8 * k + 4 * l);
                        let v = vmulq_f32(d, vcvtq_f32_s32(w32));
                        vst1q_f32(p, vfmaq_n_f32(vld1q_f32(p), v, alpha));
                    }
                }
            }
        }
    }
}

/// Round each value to the nearest f16 (kept as f32).
pub fn round_f16(x: &mut [f32]) {
    let n = x.len();
    let mut i = 0;
    // SAFETY: each step reads and writes four values below n.
    unsafe {
        while i + 4 <= n {
            let p = x.as_mut_ptr().add(i);
            vst1q_f32(p, round_f16x4(vld1q_f32(p)));
            i += 4;
        }
    }
    for v in &mut x[i..] {
        *v = half::f16::from_f32(*v).to_f32();
    }
}

/// `quant::quantize_q8`, vectorized; the same values.
pub fn quantize_q8(x: &[f32], out: &mut [BlockQ8]) {
    for (xb, b) in x.chunks_exact(32).zip(out.iter_mut()) {
        // SAFETY: `xb` holds 32 values, read four at a time.
        unsafe {
            let v: [float32x4_t; 8] = std::array::from_fn(|i| vld1q_f32(xb.as_ptr().add(4 * i)));
            let m = v
                .iter()
                .fold(vdupq_n_f32(0.0), |m, &vi| vmaxq_f32(m, vabsq_f32(vi)));
            let amax = vmaxvq_f32(m);
            let d = amax / 127.0;
            let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
            let mut sum = vdupq_n_s32(0);
            let mut q = [0i32; 32];
            for (i, &vi) in v.iter().enumerate() {
                let qi = vcvtnq_s32_f32(vmulq_n_f32(vi, id));
                sum = vaddq_s32(sum, qi);
                vst1q_s32(q.as_mut_ptr().add(4 * i), qi);
            }
            for (dst, &v) in b.qs.iter_mut().zip(&q) {
                *dst = v as i8;
            }
            b.d = half::f16::from_f32(d).to_f32();
            b.s = half::f16::from_f32(d * vaddvq_s32(sum) as f32).to_f32();
        }
    }
}

/// `quant::quantize_q8k`, vectorized; the same values.
pub fn quantize_q8k(x: &[f32], out: &mut [BlockQ8K]) {
    for (xb, b) in x.chunks_exact(256).zip(out.iter_mut()) {
        let (max, amax) = super::quant::signed_absmax(xb);
        if amax == 0.0 {
            *b = BlockQ8K::default();
            continue;
        }
        let iscale = -127.0 / max;
        // SAFETY: `xb` holds 256 values, read four at a time.
        unsafe {
            let mut q = [0i32; 16];
            for g in 0..16 {
                let mut sum = vdupq_n_s32(0);
                for i in 0..4 {
                    let v = vld1q_f32(xb.as_ptr().add(16 * g + 4 * i));
                    let qi = vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(v, iscale)), vdupq_n_s32(127));
                    sum = vaddq_s32(sum, qi);
                    vst1q_s32(q.as_mut_ptr().add(4 * i), qi);
                }
                for (dst, &v) in b.qs[16 * g..16 * g + 16].iter_mut().zip(&q) {
                    *dst = v as i8;
                }
                b.bsums[g] = vaddvq_s32(sum) as i16;
            }
        }
        b.d = 1.0 / iscale;
    }
}

/// llama.cpp's `expf`, four lanes at a time: the same fused operations as the scalar
/// `ggml_math::expf`, lane for lane.
#[inline(always)]
unsafe fn expf4(x: float32x4_t) -> float32x4_t {
    unsafe {
        let c = |i: usize| vdupq_n_f32(f32::from_bits(EXPF_CONSTANTS[i]));
        let r = c(0);
        let z = vfmaq_f32(r, x, c(1));
        let n = vsubq_f32(z, r);
        let b = vfmsq_f32(vfmsq_f32(x, n, c(3)), n, c(2));
        let u = vmulq_f32(b, b);
        let j = vfmaq_f32(
            vfmaq_f32(vdupq_n_f32(1.0), c(8), b),
            vfmaq_f32(vfmaq_f32(c(7), c(6), b), vfmaq_f32(c(5), c(4), b), u),
            u,
        );
        // scalef(j, n) as j · 2^(n>>1) · 2^(n − (n>>1)), with |n| ≤ 192 clamped.
        let ni = vcvtnq_s32_f32(vmaxq_f32(
            vminq_f32(n, vdupq_n_f32(192.0)),
            vdupq_n_f32(-192.0),
        ));
        let h = vshrq_n_s32(ni, 1);
        let pow2 =
            |e: int32x4_t| vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(e, vdupq_n_s32(127)), 23));
        let res = vmulq_f32(vmulq_f32(j, pow2(h)), pow2(vsubq_s32(ni, h)));
        // |n| > 192: 0 below, infinity above.
        let big = vcagtq_f32(n, vdupq_n_f32(192.0));
        let alt = vreinterpretq_f32_u32(vandq_u32(
            vcgtq_f32(n, vdupq_n_f32(0.0)),
            vreinterpretq_u32_f32(vdupq_n_f32(f32::INFINITY)),
        ));
        vbslq_f32(big, alt, res)
    }
}

/// gate[i] = silu(gate[i]) · up[i], with llama.cpp's `expf`.
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    let n = gate.len().min(up.len());
    let mut i = 0;
    // SAFETY: each step reads and writes four values below n.
    unsafe {
        while i + 4 <= n {
            let x = vld1q_f32(gate.as_ptr().add(i));
            let e = expf4(vnegq_f32(x));
            let s = vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.0), e));
            vst1q_f32(
                gate.as_mut_ptr().add(i),
                vmulq_f32(s, vld1q_f32(up.as_ptr().add(i))),
            );
            i += 4;
        }
    }
    for k in i..n {
        gate[k] = super::ggml_math::silu(gate[k]) * up[k];
    }
}

/// x[i] = expf(x[i] − max) with llama.cpp's `expf`; returns Σ in f64.
pub fn exp_sub(x: &mut [f32], max: f32) -> f64 {
    let n = x.len();
    let mut sum = 0.0f64;
    let mut i = 0;
    // SAFETY: each step reads and writes four values below n.
    unsafe {
        let m = vdupq_n_f32(max);
        while i + 4 <= n {
            let p = x.as_mut_ptr().add(i);
            let e = expf4(vsubq_f32(vld1q_f32(p), m));
            vst1q_f32(p, e);
            sum += vaddvq_f32(e) as f64;
            i += 4;
        }
    }
    for v in &mut x[i..] {
        *v = super::ggml_math::expf(*v - max);
        sum += *v as f64;
    }
    sum
}
