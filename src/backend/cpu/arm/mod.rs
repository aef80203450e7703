//! The aarch64 kernels, as llama.cpp's `ggml-cpu/arch/arm`: NEON, which every aarch64 CPU has,
//! and NEON with the dotprod extension (SDOT, four byte products summed into each 32-bit lane),
//! which most since the Cortex-A76 and every Apple core have. The row kernels over weights as the
//! file holds them (`rows.rs`; `rows_iq.rs` for the grid i-quants, the ternary types and Q1_0),
//! the GEMM kernels over repacked weights with SDOT (`gemm.rs`, `isa.rs`: the kernels of
//! `cpu/gemm/`) and the elementwise kernels (`elementwise.rs`); here, which level this CPU runs,
//! the kernel table of each, and the few conversions they share. Each level is tested against the portable
//! kernels (CI runs those tests under qemu, on a CPU with dotprod and one without).
//!
//! Stable Rust has no intrinsics for SDOT or for f16 ↔ f32 vector conversion, so those few
//! instructions are inline assembly (FCVTL/FCVTN are base ARMv8; SDOT only runs in functions
//! compiled with, and dispatched after detecting, `dotprod`).

mod elementwise;
mod gemm;
mod isa;
mod rows;
mod rows_iq;

use std::arch::aarch64::*;
use std::arch::asm;

use super::kernels::{Kernels, Level, TypeKernels};
use super::portable;
use crate::gguf::GgmlType;

/// The levels this CPU has, lowest first.
pub fn levels() -> Vec<Level> {
    let mut v = vec![Level::Neon];
    if std::arch::is_aarch64_feature_detected!("dotprod") {
        v.push(Level::NeonDot);
    }
    v
}

/// The best level this CPU runs (`KILN_NO_SIMD`: none, the portable kernels).
pub fn detect() -> Option<Level> {
    if std::env::var_os("KILN_NO_SIMD").is_some() {
        return None;
    }
    levels().pop()
}

/// The kernel table of `level`: the portable one with every kernel this level has put in.
///
/// # Safety
/// The CPU must have `level` (`levels` lists it): the table's safe function pointers run its
/// instructions.
pub unsafe fn kernels(level: Level) -> Kernels {
    let dotprod = level == Level::NeonDot;
    let mut k = portable::kernels();
    k.level = level;
    for t in GgmlType::ALL {
        let i = t as usize;
        if let Some(q8) = rows::q8_row_kernels(t, dotprod).or(rows_iq::q8_row_kernels(t, dotprod)) {
            k.types[i] = TypeKernels::Q8(q8);
        } else if let Some(q8k) =
            rows::q8k_row_kernels(t, dotprod).or(rows_iq::q8k_row_kernels(t, dotprod))
        {
            k.types[i] = TypeKernels::Q8K(q8k);
        } else if t == GgmlType::F32 {
            k.types[i] = TypeKernels::F32(elementwise::dot_f32_bytes);
        } else if t == GgmlType::F16 {
            k.types[i] = TypeKernels::F32(elementwise::dot_f16_weights);
        }
        // The GEMM, also for types whose rows stay on the portable kernels (Q2_K, Q3_K).
        match &mut k.types[i] {
            TypeKernels::Q8(q8) => q8.packed = gemm::q8_kernel(level, t),
            TypeKernels::Q8K(q8k) => q8k.packed = gemm::q8k_kernel(level, t),
            _ => {}
        }
    }
    k.quantize_q8 = elementwise::quantize_q8;
    k.quantize_q8k = elementwise::quantize_q8k;
    k.silu_mul = elementwise::silu_mul;
    k.exp_sub = elementwise::exp_sub;
    k.round_f16 = elementwise::round_f16;
    k.dot_f32_f16 = elementwise::dot_f32_f16;
    k.axpy_f16 = elementwise::axpy_f16;
    k.axpy_q8_0 = elementwise::axpy_q8_0;
    k.delta_rule = |s, kk, q, v, dbs, out| {
        portable::delta_rule_with(elementwise::dot_f32_bytes, s, kk, q, v, dbs, out)
    };
    k
}

/// The f16 at byte `i` of `b`, converted by the FPU (FCVT).
#[inline(always)]
pub fn f16(b: &[u8], i: usize) -> f32 {
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
pub unsafe fn load_f16x4(p: *const u8) -> float32x4_t {
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
pub unsafe fn round_f16x4(x: float32x4_t) -> float32x4_t {
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
pub unsafe fn load_s8(p: *const u8) -> int8x16_t {
    unsafe { vreinterpretq_s8_u8(vld1q_u8(p)) }
}
