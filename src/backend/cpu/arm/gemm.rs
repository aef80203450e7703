//! The aarch64 instantiation of the GEMM kernels over repacked weights (`cpu/gemm/`): NEON with
//! SDOT, four rows per register, tiles of 4 tokens (one when generating). Plain NEON has none
//! (see `isa.rs`): there the weights stay as the file holds them, on the row kernels.

use super::isa::NeonDot;
use crate::backend::cpu::gemm::{self, Instantiate, Kernel, run_group};
use crate::backend::cpu::kernels::{ActBlock, BlockQ8, BlockQ8K, GroupCall, Level, PackedKernel};
use crate::gguf::GgmlType;

#[target_feature(enable = "neon,dotprod")]
unsafe fn group_dot<A: ActBlock, K: Kernel<A>>(c: &GroupCall<A>) {
    // One token takes the one-token tile inside `run_group`; there is no separate shape for it.
    unsafe { run_group::<NeonDot, A, K, 4>(c) }
}

struct Arm;

impl Instantiate for Arm {
    fn group<A: ActBlock, K: Kernel<A>>(level: Level) -> Option<PackedKernel<A>> {
        match level {
            Level::NeonDot => Some(group_dot::<A, K>),
            _ => None,
        }
    }
}

/// The GEMM kernel of a 256-value block type at `level`, where there is one.
pub fn q8k_kernel(level: Level, t: GgmlType) -> Option<PackedKernel<BlockQ8K>> {
    gemm::q8k_kernel::<Arm>(level, t)
}

/// The GEMM kernel of a 32-value block type (and Q1_0) at `level`, where there is one.
pub fn q8_kernel(level: Level, t: GgmlType) -> Option<PackedKernel<BlockQ8>> {
    gemm::q8_kernel::<Arm>(level, t)
}
