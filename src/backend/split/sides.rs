//! The two sides of a split backend as one trait, so that each op's body is written once for both
//! (`on_side!`): the side's backend, its half of a buffer, and the weight or cache it holds.

use super::{Either, SplitBackend, SplitBuffer, SplitCache, SplitWeight};
use crate::backend::cpu::{CpuBackend, CpuCache, CpuWeight};
use crate::backend::wgpu::{GpuBuffer, GpuCache, GpuWeight, WgpuBackend};
use crate::backend::{Backend, CoreOps};
use std::cell::RefCell;

/// One side of the split, so that an op's body is written once for both (`on_side!`).
pub(super) trait On {
    type B: Backend;
    const SIDE: super::Side;
    fn backend(s: &SplitBackend) -> &Self::B;
    fn cell(b: &SplitBuffer) -> &RefCell<<Self::B as CoreOps>::Buffer>;
    fn cell_mut(b: &mut SplitBuffer) -> &mut <Self::B as CoreOps>::Buffer;
    fn weight(w: &SplitWeight) -> &<Self::B as CoreOps>::Weight;
    fn cache(c: &SplitCache) -> &<Self::B as CoreOps>::Cache;
    fn cache_mut(c: &mut SplitCache) -> &mut <Self::B as CoreOps>::Cache;
}

// The op runs on the side of its weight or cache, so finding it elsewhere is a bug in this file.
const MISPLACED: &str = "a split op's weight or cache is on the side the op runs on";

pub(super) struct OnGpu;
pub(super) struct OnCpu;

impl On for OnGpu {
    type B = WgpuBackend;
    const SIDE: super::Side = super::Side::Gpu;
    fn backend(s: &SplitBackend) -> &WgpuBackend {
        &s.gpu
    }
    fn cell(b: &SplitBuffer) -> &RefCell<GpuBuffer> {
        &b.gpu
    }
    fn cell_mut(b: &mut SplitBuffer) -> &mut GpuBuffer {
        b.gpu.get_mut()
    }
    fn weight(w: &SplitWeight) -> &GpuWeight {
        match &w.on {
            Either::Gpu(w) => w,
            Either::Cpu(_) => unreachable!("{MISPLACED}"),
        }
    }
    fn cache(c: &SplitCache) -> &GpuCache {
        match &c.0 {
            Either::Gpu(c) => c,
            Either::Cpu(_) => unreachable!("{MISPLACED}"),
        }
    }
    fn cache_mut(c: &mut SplitCache) -> &mut GpuCache {
        match &mut c.0 {
            Either::Gpu(c) => c,
            Either::Cpu(_) => unreachable!("{MISPLACED}"),
        }
    }
}

impl On for OnCpu {
    type B = CpuBackend;
    const SIDE: super::Side = super::Side::Cpu;
    fn backend(s: &SplitBackend) -> &CpuBackend {
        &s.cpu
    }
    fn cell(b: &SplitBuffer) -> &RefCell<Vec<f32>> {
        &b.cpu
    }
    fn cell_mut(b: &mut SplitBuffer) -> &mut Vec<f32> {
        b.cpu.get_mut()
    }
    fn weight(w: &SplitWeight) -> &CpuWeight {
        match &w.on {
            Either::Cpu(w) => w,
            Either::Gpu(_) => unreachable!("{MISPLACED}"),
        }
    }
    fn cache(c: &SplitCache) -> &CpuCache {
        match &c.0 {
            Either::Cpu(c) => c,
            Either::Gpu(_) => unreachable!("{MISPLACED}"),
        }
    }
    fn cache_mut(c: &mut SplitCache) -> &mut CpuCache {
        match &mut c.0 {
            Either::Cpu(c) => c,
            Either::Gpu(_) => unreachable!("{MISPLACED}"),
        }
    }
}

/// `on_side!(side, S => body)`: `body` with `S` the `On` of `side`.
macro_rules! on_side {
    ($side:expr, $S:ident => $body:expr) => {
        match $side {
            $crate::backend::split::Side::Gpu => {
                type $S = $crate::backend::split::sides::OnGpu;
                $body
            }
            $crate::backend::split::Side::Cpu => {
                type $S = $crate::backend::split::sides::OnCpu;
                $body
            }
        }
    };
}
pub(super) use on_side;
