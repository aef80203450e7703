//! The x86-64 kernels, as llama.cpp's `ggml-cpu/arch/x86`: the instruction sets as one interface
//! (`isa.rs`), the GEMM kernels over repacked weights (`gemm.rs`, instantiating `cpu/gemm/`), the
//! row kernels over weights as the file holds them (`rows.rs`; `rows_iq.rs` for the grid i-quants
//! and ternary types), attention (`attention.rs`), the elementwise kernels (`elementwise.rs`) and
//! the F16 weights' dot products at the AVX-512 level (`f16_avx512.rs`),
//! each written once and instantiated per level; and here, which level this CPU runs and the
//! kernel table of each level.

mod attention;
mod elementwise;
mod f16_avx512;
mod gemm;
mod isa;
mod rows;
mod rows_iq;

use super::kernels::{Kernels, Level, Tiled, TypeKernels};
use super::portable;
use crate::gguf::GgmlType;

/// Whether the CPU has the features of `level`.
fn has(level: Level) -> bool {
    let avx2 = is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c");
    match level {
        Level::Portable => true,
        Level::Avx2 => avx2,
        Level::AvxVnni => avx2 && is_x86_feature_detected!("avxvnni"),
        Level::Avx512Vnni => {
            avx2 && is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512dq")
                && is_x86_feature_detected!("avx512vnni")
        }
    }
}

/// The SIMD levels this CPU has, lowest first.
pub fn levels() -> Vec<Level> {
    [Level::Avx2, Level::AvxVnni, Level::Avx512Vnni]
        .into_iter()
        .filter(|&l| has(l))
        .collect()
}

/// The best level this CPU runs, if it has AVX2: `KILN_NO_SIMD` asks for none (the portable
/// kernels), `KILN_NO_AVX512` for the AVX2 ones on a CPU with AVX-512 (to measure or test them).
pub fn detect() -> Option<Level> {
    if std::env::var_os("KILN_NO_SIMD").is_some() {
        return None;
    }
    let no_avx512 = std::env::var_os("KILN_NO_AVX512").is_some();
    levels()
        .into_iter()
        .rfind(|&l| !(no_avx512 && l == Level::Avx512Vnni))
}

/// The kernel table of `level`: the portable one with every kernel this level has put in.
///
/// # Safety
/// The CPU must have `level` (`levels` lists it): the table's safe function pointers run its
/// instructions.
pub unsafe fn kernels(level: Level) -> Kernels {
    let vnni = rows::rows_use_vnni(level);
    let avx512 = level == Level::Avx512Vnni;
    let mut k = portable::kernels();
    k.level = level;
    for t in GgmlType::ALL {
        let i = t as usize;
        k.types[i] = match (
            rows::q8_row_kernels(t, vnni).or(rows_iq::q8_row_kernels(t, vnni)),
            rows::q8k_row_kernels(t, vnni).or(rows_iq::q8k_row_kernels(t, vnni)),
        ) {
            (Some(mut q8), _) => {
                q8.packed = gemm::q8_kernel(level, t);
                TypeKernels::Q8(q8)
            }
            (_, Some(mut q8k)) => {
                q8k.packed = gemm::q8k_kernel(level, t);
                q8k.tiled = rows_iq::tile_decoder(t)
                    .zip(gemm::decoded_kernel(level))
                    .map(|((decode, factor), gemm)| Tiled {
                        decode,
                        factor,
                        gemm,
                    });
                TypeKernels::Q8K(q8k)
            }
            _ => match t {
                GgmlType::F32 => TypeKernels::F32(elementwise::dot_f32_bytes),
                GgmlType::F16 if avx512 => TypeKernels::F32(f16_avx512::dot_f16_bytes),
                GgmlType::F16 => TypeKernels::F32(elementwise::dot_f16_bytes),
                _ => k.types[i],
            },
        };
    }
    k.quantize_q8 = elementwise::quantize_q8;
    k.quantize_q8k = elementwise::quantize_q8k;
    k.silu_mul = if avx512 {
        elementwise::silu_mul_avx512
    } else {
        elementwise::silu_mul
    };
    k.exp_sub = if avx512 {
        elementwise::exp_sub_avx512
    } else {
        elementwise::exp_sub
    };
    k.round_f16 = elementwise::round_f16;
    // The one-row F16 kernel above and this tile sum in one order per level (so the tile's bits
    // are the one-row kernel's).
    if avx512 {
        k.dot4_f16 = Some(f16_avx512::dot4_f16_bytes);
    } else {
        k.dot4_f16 = Some(elementwise::dot4_f16_bytes);
    }
    k.f16_panels = gemm::f16_panel_kernel(level);
    k.dot_f32_f16 = elementwise::dot_f32_f16;
    k.axpy_f16 = elementwise::axpy_f16;
    k.delta_rule = elementwise::delta_rule;
    k.attention = Some(if avx512 {
        attention::AVX512
    } else {
        attention::AVX2
    });
    k
}
