//! Kernel dispatch by CPU features detected at run time: x86 AVX2 versions of the hot dot products,
//! portable versions (quant.rs) for everything else.

use super::quant::{self, BlockQ8, BlockQ8K};
use crate::gguf::GgmlType;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

pub struct Kernels {
    level: Level,
}

impl Kernels {
    pub fn detect() -> Kernels {
        #[cfg(target_arch = "x86_64")]
        if std::env::var_os("KILN_NO_SIMD").is_none()
            && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
        {
            return Kernels { level: Level::Avx2 };
        }
        Kernels {
            level: Level::Portable,
        }
    }

    pub fn name(&self) -> &'static str {
        match self.level {
            Level::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            Level::Avx2 => "AVX2",
        }
    }

    pub fn quantize_q8(&self, x: &[f32], out: &mut [BlockQ8]) {
        quant::quantize_q8(x, out)
    }

    pub fn dot_f32(&self, t: GgmlType, w: &[u8], x: &[f32]) -> f32 {
        quant::dot_f32(t, w, x)
    }

    pub fn dot_q8(&self, t: GgmlType, w: &[u8], x: &[BlockQ8]) -> f32 {
        quant::dot_q8(t, w, x)
    }

    pub fn dot_q8k(&self, t: GgmlType, w: &[u8], x: &[BlockQ8K]) -> f32 {
        quant::dot_q8k(t, w, x)
    }

    /// Σ a·b over f32 slices.
    pub fn dot_f32_f32(&self, a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    /// y += a·x.
    pub fn axpy(&self, a: f32, x: &[f32], y: &mut [f32]) {
        y.iter_mut().zip(x).for_each(|(yv, &xv)| *yv += a * xv);
    }
}
