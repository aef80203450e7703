//! NEON with SDOT behind `F32Isa` and `Isa` (`cpu/isa.rs`), for the GEMM kernels over repacked
//! weights (`cpu/gemm/`): four rows per 128-bit register, so a group of 16 rows is four quarters.
//! SDOT sums each row's four byte products into its own 32-bit lane, which is what the kernels
//! need; plain NEON's widening multiplies do not keep rows apart, so only the dotprod level has
//! the GEMM.
//!
//! Every method is `#[inline(always)]` and unsafe: it runs SDOT, so it is only correct inside a
//! function compiled with `dotprod` (and called after detecting it).
#![allow(clippy::missing_safety_doc)] // the module doc states the one rule

use std::arch::aarch64::*;

use super::load_f16x4;
use super::rows::{ByteDot, Sdot};
use crate::backend::cpu::isa::{F32Isa, Isa};

#[derive(Clone, Copy)]
pub struct NeonDot;

#[inline(always)]
unsafe fn bytes(v: int32x4_t) -> int8x16_t {
    unsafe { vreinterpretq_s8_s32(v) }
}

/// Four bytes at `p`, in the low lanes of a vector.
#[inline(always)]
unsafe fn four_bytes(p: *const u8) -> uint8x8_t {
    unsafe { vreinterpret_u8_u32(vdup_n_u32((p as *const u32).read_unaligned())) }
}

impl F32Isa for NeonDot {
    const LANES: usize = 4;
    type F = float32x4_t;

    #[inline(always)]
    unsafe fn fzero() -> float32x4_t {
        unsafe { vdupq_n_f32(0.0) }
    }
    #[inline(always)]
    unsafe fn fsplat(x: f32) -> float32x4_t {
        unsafe { vdupq_n_f32(x) }
    }
    #[inline(always)]
    unsafe fn loadf(p: *const f32) -> float32x4_t {
        unsafe { vld1q_f32(p) }
    }
    #[inline(always)]
    unsafe fn f16s(p: *const u8) -> float32x4_t {
        unsafe { load_f16x4(p) }
    }
    #[inline(always)]
    unsafe fn mul(a: float32x4_t, b: float32x4_t) -> float32x4_t {
        unsafe { vmulq_f32(a, b) }
    }
    #[inline(always)]
    unsafe fn fmadd(a: float32x4_t, b: float32x4_t, c: float32x4_t) -> float32x4_t {
        unsafe { vfmaq_f32(c, a, b) }
    }
    #[inline(always)]
    unsafe fn fnmadd(a: float32x4_t, b: float32x4_t, c: float32x4_t) -> float32x4_t {
        unsafe { vfmsq_f32(c, a, b) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: float32x4_t) {
        unsafe { vst1q_f32(p, v) }
    }
}

impl Isa for NeonDot {
    const I8_OFFSET: i32 = 0;
    const WIDE_DOT: bool = true;
    const DOT_U8: bool = false;
    type I = int32x4_t;

    #[inline(always)]
    unsafe fn zero() -> int32x4_t {
        unsafe { vdupq_n_s32(0) }
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> int32x4_t {
        unsafe { vreinterpretq_s32_u8(vld1q_u8(p)) }
    }
    #[inline(always)]
    unsafe fn and8(v: int32x4_t, c: i8) -> int32x4_t {
        unsafe { vreinterpretq_s32_s8(vandq_s8(bytes(v), vdupq_n_s8(c))) }
    }
    #[inline(always)]
    unsafe fn or(a: int32x4_t, b: int32x4_t) -> int32x4_t {
        unsafe { vorrq_s32(a, b) }
    }
    #[inline(always)]
    unsafe fn srl16<const N: u32>(v: int32x4_t) -> int32x4_t {
        unsafe {
            let shift = vdupq_n_s16(-(N as i16));
            vreinterpretq_s32_u16(vshlq_u16(vreinterpretq_u16_s32(v), shift))
        }
    }
    #[inline(always)]
    unsafe fn or_where(v: int32x4_t, mask: u64, c: i8) -> int32x4_t {
        unsafe {
            // Bit 4r + i of the mask selects byte 4r + i: the low mask byte for bytes 0-7, the
            // high one for 8-15, each tested against its byte's bit.
            const BITS: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
            let m = vcombine_u8(vdup_n_u8(mask as u8), vdup_n_u8((mask >> 8) as u8));
            let set = vtstq_u8(m, vld1q_u8(BITS.as_ptr()));
            let add = vandq_u8(set, vdupq_n_u8(c as u8));
            vorrq_s32(v, vreinterpretq_s32_u8(add))
        }
    }
    #[inline(always)]
    unsafe fn dot(acc: int32x4_t, u: int32x4_t, x: i32) -> int32x4_t {
        unsafe { Sdot::dot(acc, bytes(u), vreinterpretq_s8_s32(vdupq_n_s32(x))) }
    }
    #[inline(always)]
    unsafe fn dot_i8(acc: int32x4_t, w: int32x4_t, x: i32) -> int32x4_t {
        unsafe { Self::dot(acc, w, x) }
    }
    #[inline(always)]
    unsafe fn madd16(acc: int32x4_t, a: int32x4_t, x: i32) -> int32x4_t {
        unsafe { Self::madd16_by(acc, a, vdupq_n_s32(x)) }
    }
    #[inline(always)]
    unsafe fn madd16_by(acc: int32x4_t, a: int32x4_t, b: int32x4_t) -> int32x4_t {
        unsafe {
            let (a, b) = (vreinterpretq_s16_s32(a), vreinterpretq_s16_s32(b));
            let lo = vmull_s16(vget_low_s16(a), vget_low_s16(b));
            let hi = vmull_high_s16(a, b);
            vaddq_s32(acc, vpaddq_s32(lo, hi))
        }
    }
    #[inline(always)]
    unsafe fn dot16(acc: int32x4_t, u: int32x4_t, x: i32) -> int32x4_t {
        unsafe {
            let (u, x) = (bytes(u), vreinterpretq_s8_s32(vdupq_n_s32(x)));
            let lo = vmull_s8(vget_low_s8(u), vget_low_s8(x));
            let hi = vmull_high_s8(u, x);
            let sums = vpaddq_s16(lo, hi);
            vreinterpretq_s32_s16(vqaddq_s16(vreinterpretq_s16_s32(acc), sums))
        }
    }
    #[inline(always)]
    unsafe fn mul_add(acc: int32x4_t, a: int32x4_t, b: int32x4_t) -> int32x4_t {
        unsafe { vmlaq_s32(acc, a, b) }
    }
    #[inline(always)]
    unsafe fn add(a: int32x4_t, b: int32x4_t) -> int32x4_t {
        unsafe { vaddq_s32(a, b) }
    }
    #[inline(always)]
    unsafe fn sub(a: int32x4_t, b: int32x4_t) -> int32x4_t {
        unsafe { vsubq_s32(a, b) }
    }
    #[inline(always)]
    unsafe fn sub_splat(a: int32x4_t, x: i32) -> int32x4_t {
        unsafe { vsubq_s32(a, vdupq_n_s32(x)) }
    }
    #[inline(always)]
    unsafe fn and32(a: int32x4_t, x: i32) -> int32x4_t {
        unsafe { vandq_s32(a, vdupq_n_s32(x)) }
    }
    #[inline(always)]
    unsafe fn shl32<const N: u32>(v: int32x4_t) -> int32x4_t {
        unsafe { vshlq_s32(v, vdupq_n_s32(N as i32)) }
    }
    #[inline(always)]
    unsafe fn srl32<const N: u32>(v: int32x4_t) -> int32x4_t {
        unsafe {
            let shift = vdupq_n_s32(-(N as i32));
            vreinterpretq_s32_u32(vshlq_u32(vreinterpretq_u32_s32(v), shift))
        }
    }
    #[inline(always)]
    unsafe fn sra32<const N: u32>(v: int32x4_t) -> int32x4_t {
        unsafe { vshlq_s32(v, vdupq_n_s32(-(N as i32))) }
    }
    #[inline(always)]
    unsafe fn u8s(p: *const u8) -> int32x4_t {
        unsafe { vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(vmovl_u8(four_bytes(p))))) }
    }
    #[inline(always)]
    unsafe fn u8_pairs(p: *const u8) -> int32x4_t {
        unsafe { vreinterpretq_s32_u16(vmovl_u8(vld1_u8(p))) }
    }
    #[inline(always)]
    unsafe fn i8s(p: *const u8) -> int32x4_t {
        unsafe {
            let b = vreinterpret_s8_u8(four_bytes(p));
            vmovl_s16(vget_low_s16(vmovl_s8(b)))
        }
    }
    #[inline(always)]
    unsafe fn cvt(v: int32x4_t) -> float32x4_t {
        unsafe { vcvtq_f32_s32(v) }
    }
    #[inline(always)]
    unsafe fn levels(v: int32x4_t, levels: &[i8; 16]) -> int32x4_t {
        unsafe {
            let table = vld1q_s8(levels.as_ptr());
            vreinterpretq_s32_s8(vqtbl1q_s8(table, vreinterpretq_u8_s32(v)))
        }
    }
    #[inline(always)]
    unsafe fn e8m0_halves(p: *const u8) -> float32x4_t {
        unsafe {
            // ggml's 2^(e − 128): e − 1 in the exponent field, or for e = 0 and 1 the subnormals
            // 2^−128 and 2^−127 (0x0020_0000 shifted by e).
            let e = vreinterpretq_u32_s32(Self::u8s(p));
            let normal = vshlq_n_u32::<23>(vsubq_u32(e, vdupq_n_u32(1)));
            let small = vshlq_u32(vdupq_n_u32(0x0020_0000), vreinterpretq_s32_u32(e));
            let is_normal = vcgtq_u32(e, vdupq_n_u32(1));
            vreinterpretq_f32_u32(vbslq_u32(is_normal, normal, small))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The E8M0 conversion gives ggml's value for each of the 256 bytes (the subnormals of 0 and
    /// 1 included).
    #[test]
    fn e8m0_exponents_convert_as_ggml() {
        let bytes: Vec<u8> = (0..=255).collect();
        for chunk in bytes.chunks(4) {
            let mut got = [0f32; 4];
            // SAFETY: the conversion and the store are base NEON, which every aarch64 CPU has.
            unsafe { NeonDot::store(got.as_mut_ptr(), NeonDot::e8m0_halves(chunk.as_ptr())) };
            for (&e, g) in chunk.iter().zip(got) {
                let want = crate::gguf::iq::e8m0_half(e);
                assert_eq!(g.to_bits(), want.to_bits(), "exponent byte {e}");
            }
        }
    }
}
