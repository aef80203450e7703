//! The x86 instantiations of the GEMM kernels (`cpu/gemm/`): AVX-512 VNNI, 16 rows per register
//! and tiles of 8 tokens; AVX2 (with AVX-VNNI where present), tiles of 4 tokens as two halves of 8
//! rows, or one token as pairs of registers (`Avx2Pair`). And the GEMM over rows decoded on the fly
//! (`decoded.rs`), which only x86 has.

use super::isa::{Avx2, Avx2Pair, Avx512};
use crate::backend::cpu::gemm::f16::{PanelCall, PanelGemm, run_panels};
use crate::backend::cpu::gemm::{self, Instantiate, Kernel, run_group};
use crate::backend::cpu::kernels::{ActBlock, BlockQ8, BlockQ8K, GroupCall, Level, PackedKernel};
use crate::gguf::GgmlType;

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn group_avx512<A: ActBlock, K: Kernel<A>>(c: &GroupCall<A>) {
    unsafe { run_group::<Avx512, A, K, 8>(c) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_avx2<A: ActBlock, K: Kernel<A>>(c: &GroupCall<A>) {
    unsafe {
        if c.tokens.len() == 1 {
            run_group::<Avx2Pair<false>, A, K, 1>(c)
        } else {
            run_group::<Avx2<false>, A, K, 4>(c)
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn group_avxvnni<A: ActBlock, K: Kernel<A>>(c: &GroupCall<A>) {
    unsafe {
        if c.tokens.len() == 1 {
            run_group::<Avx2Pair<true>, A, K, 1>(c)
        } else {
            run_group::<Avx2<true>, A, K, 4>(c)
        }
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn panels_avx512(c: &PanelCall) {
    // 2 × 12 sums of the 32 registers; 8 chains for one token.
    unsafe { run_panels::<Avx512, 2, 12, 8>(c) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn panels_avx2(c: &PanelCall) {
    // 2 × 6 sums of the 16 registers (a group of 16 rows by 6 tokens).
    unsafe { run_panels::<Avx2<false>, 2, 6, 8>(c) }
}

/// `x`'s tokens (rows of `k` values, at most `width` of them) rounded to f16 into one tile of
/// the panel GEMM's activations (`PanelCall::x`): value `col` of token t at `dst[col·width + t]`.
/// Four columns of four tokens at a time, transposed in registers.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_acts_impl(x: &[f32], k: usize, width: usize, dst: &mut [f32]) {
    use std::arch::x86_64::*;
    unsafe {
        let n = x.len() / k;
        assert!(n <= width && dst.len() >= width * k);
        // A macro, not a closure: a closure's intrinsics take this function's features only
        // where it is inlined.
        macro_rules! rounded4 {
            ($p:expr) => {
                _mm_cvtph_ps(_mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_loadu_ps($p)))
            };
        }
        let (quads, cols4) = (n / 4 * 4, k / 4 * 4);
        for t0 in (0..quads).step_by(4) {
            let src = x.as_ptr().add(t0 * k);
            for col in (0..cols4).step_by(4) {
                let r = [
                    rounded4!(src.add(col)),
                    rounded4!(src.add(k + col)),
                    rounded4!(src.add(2 * k + col)),
                    rounded4!(src.add(3 * k + col)),
                ];
                // Rows t0..t0 + 4 of columns col..col + 4, as columns of those rows.
                let (a, b) = (_mm_unpacklo_ps(r[0], r[1]), _mm_unpacklo_ps(r[2], r[3]));
                let (c, d) = (_mm_unpackhi_ps(r[0], r[1]), _mm_unpackhi_ps(r[2], r[3]));
                let out = dst.as_mut_ptr().add(col * width + t0);
                _mm_storeu_ps(out, _mm_movelh_ps(a, b));
                _mm_storeu_ps(out.add(width), _mm_movehl_ps(b, a));
                _mm_storeu_ps(out.add(2 * width), _mm_movelh_ps(c, d));
                _mm_storeu_ps(out.add(3 * width), _mm_movehl_ps(d, c));
            }
        }
        // The columns past the last four, and the tokens past the last four, one at a time.
        let rounded = |v: f32| half::f16::from_f32(v).to_f32();
        for t in 0..n {
            let from = if t < quads { cols4 } else { 0 };
            for col in from..k {
                dst[col * width + t] = rounded(x[t * k + col]);
            }
        }
    }
}

fn tile_acts(x: &[f32], k: usize, width: usize, dst: &mut [f32]) {
    // SAFETY: the kernel table holds this only at levels that have AVX2, FMA and F16C.
    unsafe { tile_acts_impl(x, k, width, dst) }
}

/// The F16 GEMM over panels at `level`, where there is one.
pub fn f16_panel_kernel(level: Level) -> Option<PanelGemm> {
    let (run, width): (unsafe fn(&PanelCall), usize) = match level {
        Level::Avx512Vnni => (panels_avx512, 12),
        Level::AvxVnni | Level::Avx2 => (panels_avx2, 6),
        Level::Portable => return None,
    };
    Some(PanelGemm {
        run,
        width,
        tile: tile_acts,
    })
}

struct X86;

impl Instantiate for X86 {
    fn group<A: ActBlock, K: Kernel<A>>(level: Level) -> Option<PackedKernel<A>> {
        Some(match level {
            Level::Avx512Vnni => group_avx512::<A, K>,
            Level::AvxVnni => group_avxvnni::<A, K>,
            Level::Avx2 => group_avx2::<A, K>,
            Level::Portable => return None,
        })
    }
}

/// The GEMM kernel of a 256-value block type at `level`, where there is one.
pub fn q8k_kernel(level: Level, t: GgmlType) -> Option<PackedKernel<BlockQ8K>> {
    gemm::q8k_kernel::<X86>(level, t)
}

/// The GEMM kernel of a 32-value block type (and Q1_0) at `level`, where there is one.
pub fn q8_kernel(level: Level, t: GgmlType) -> Option<PackedKernel<BlockQ8>> {
    gemm::q8_kernel::<X86>(level, t)
}

mod decoded;

pub use decoded::decoded_kernel;

#[cfg(test)]
mod tests;
