//! The CPU's KV cache: f32, f16 or GGML Q8_0 rows (the last stored Hadamard-rotated, as
//! llama.cpp's quantized caches are). Attention reaches its rows only through `prepare_query`/`dot`
//! (keys) and `prepare_weights`/`axpy` (values), or reads f32/f16 rows in place
//! (`attention.rs`), so each type keeps its own representation and arithmetic.

use half::f16;
use half::slice::HalfFloatSliceExt;

use super::kernels::{BlockQ8, Kernels};
use super::{f32_bytes, portable};
use crate::backend::CacheType;
use crate::error::{Error, Result};
use crate::gguf::GgmlType;

/// A key or value cache in one of the `CacheType`s. Attention reaches its rows only through
/// `prepare_query`/`dot` (keys) and `prepare_weights`/`axpy` (values), so each type keeps its own
/// representation and arithmetic.
pub enum CpuCache {
    F32(Vec<f32>),
    F16(Vec<f16>),
    /// GGML Q8_0 blocks (f16 scale, 32 signed bytes), 32 values per 34 bytes, each run of
    /// `rotation` values stored Hadamard-rotated (see `Backend::cache`; 1: not rotated).
    Q8_0 {
        blocks: Vec<u8>,
        rotation: usize,
    },
}

/// A query row prepared for dot products with a key cache's rows.
pub enum CacheQuery {
    /// f32 values (rounded to f16 for an f16 cache).
    F32(Vec<f32>),
    /// 8-bit blocks, for integer dot products with Q8_0 keys.
    Q8(Vec<BlockQ8>),
}

/// Bytes of a Q8_0 block and values in it.
const Q8_0_BYTES: usize = 34;
const Q8_0_LEN: usize = 32;

/// The bytes of Q8_0 values `start..start + len` (both multiples of 32).
fn q8_0_range(start: usize, len: usize) -> std::ops::Range<usize> {
    start / Q8_0_LEN * Q8_0_BYTES..(start + len) / Q8_0_LEN * Q8_0_BYTES
}

impl CpuCache {
    /// A zeroed cache of `len` values of type `ty`, stored in rotations of `rotation` values (see
    /// `CoreOps::cache`).
    pub fn zeroed(len: usize, ty: CacheType, rotation: usize) -> Result<CpuCache> {
        if !len.is_multiple_of(ty.block_len()) {
            return Err(Error::Unsupported(format!(
                "a {ty} cache holds whole blocks of {} values, not {len}",
                ty.block_len()
            )));
        }
        let rotation = rotation.max(1);
        if rotation > 1
            && (ty.block_len() == 1
                || !rotation.is_power_of_two()
                || !rotation.is_multiple_of(ty.block_len())
                || !len.is_multiple_of(rotation))
        {
            return Err(Error::Unsupported(format!(
                "a {ty} cache of {len} values cannot be stored in rotations of {rotation}"
            )));
        }
        let too_large = || {
            Error::Unsupported(format!(
                "cannot allocate {} MiB for the KV cache",
                ty.row_bytes(len) / (1 << 20)
            ))
        };
        fn filled<T: Clone>(len: usize, zero: T) -> Option<Vec<T>> {
            let mut v = Vec::new();
            v.try_reserve_exact(len).ok()?;
            v.resize(len, zero);
            Some(v)
        }
        Ok(match ty {
            CacheType::F32 => CpuCache::F32(filled(len, 0.0).ok_or_else(too_large)?),
            CacheType::F16 => CpuCache::F16(filled(len, f16::ZERO).ok_or_else(too_large)?),
            CacheType::Q8_0 => CpuCache::Q8_0 {
                blocks: filled(ty.row_bytes(len), 0).ok_or_else(too_large)?,
                rotation,
            },
        })
    }

    pub fn cache_type(&self) -> CacheType {
        match self {
            CpuCache::F32(_) => CacheType::F32,
            CpuCache::F16(_) => CacheType::F16,
            CpuCache::Q8_0 { .. } => CacheType::Q8_0,
        }
    }

    /// `q` prepared for dot products with this cache's rows, as llama.cpp multiplies it with its
    /// keys: rounded to f16 for an f16 cache, rotated as the keys are and quantized to 8 bits
    /// for a Q8_0 one.
    pub(super) fn prepare_query(&self, kernels: &Kernels, q: &[f32]) -> CacheQuery {
        match self {
            CpuCache::F32(_) => CacheQuery::F32(q.to_vec()),
            CpuCache::F16(_) => {
                let mut q = q.to_vec();
                (kernels.round_f16)(&mut q);
                CacheQuery::F32(q)
            }
            CpuCache::Q8_0 { rotation, .. } => {
                let mut q = q.to_vec();
                rotate(&mut q, *rotation);
                let mut blocks = vec![BlockQ8::default(); q.len() / Q8_0_LEN];
                (kernels.quantize_q8)(&q, &mut blocks);
                CacheQuery::Q8(blocks)
            }
        }
    }

    /// `q · self[start..start + len]` for a query of `len` values.
    pub(super) fn dot(&self, kernels: &Kernels, q: &CacheQuery, start: usize) -> f32 {
        match (self, q) {
            (CpuCache::F32(c), CacheQuery::F32(q)) => {
                let k = &c[start..start + q.len()];
                kernels.dot_f32(GgmlType::F32)(f32_bytes(k), q)
            }
            (CpuCache::F16(c), CacheQuery::F32(q)) => {
                (kernels.dot_f32_f16)(q, &c[start..start + q.len()])
            }
            (CpuCache::Q8_0 { blocks, .. }, CacheQuery::Q8(q)) => {
                let k = &blocks[q8_0_range(start, q.len() * Q8_0_LEN)];
                kernels.dot_q8(GgmlType::Q8_0)(k, q)
            }
            _ => unreachable!("a query is prepared by the cache it is used with"),
        }
    }

    /// Probabilities prepared for the sum over this cache's rows: rounded to f16 for an f16
    /// cache, as llama.cpp multiplies them with its f16 values.
    pub(super) fn prepare_weights(&self, kernels: &Kernels, p: &mut [f32]) {
        if let CpuCache::F16(_) = self {
            (kernels.round_f16)(p);
        }
    }

    /// `out += a · self[start..start + out.len()]` (in the cache's rotated basis: `finish_output`
    /// rotates the sum back).
    pub(super) fn axpy(&self, kernels: &Kernels, a: f32, start: usize, out: &mut [f32]) {
        match self {
            CpuCache::F32(c) => {
                let v = &c[start..start + out.len()];
                out.iter_mut().zip(v).for_each(|(o, &v)| *o += a * v);
            }
            CpuCache::F16(c) => (kernels.axpy_f16)(a, &c[start..start + out.len()], out),
            CpuCache::Q8_0 { blocks, .. } => {
                (kernels.axpy_q8_0)(a, &blocks[q8_0_range(start, out.len())], out)
            }
        }
    }

    /// Finish a sum of `axpy`s: rotate it back if the values are stored rotated.
    pub(super) fn finish_output(&self, out: &mut [f32]) {
        if let CpuCache::Q8_0 { rotation, .. } = self {
            rotate(out, *rotation);
        }
    }

    /// Write `src` at value `start`, rounded to the cache's type (a Q8_0 cache rotates it and
    /// quantizes it as llama.cpp's x86 `quantize_row_q8_0` does).
    pub(super) fn store(&mut self, kernels: &Kernels, src: &[f32], start: usize) {
        match self {
            CpuCache::F32(d) => d[start..start + src.len()].copy_from_slice(src),
            CpuCache::F16(d) => d[start..start + src.len()].convert_from_f32_slice(src),
            CpuCache::Q8_0 { blocks, rotation } => {
                let dst = &mut blocks[q8_0_range(start, src.len())];
                let run = (*rotation).max(Q8_0_LEN);
                let mut x = vec![0.0f32; run];
                for (src, dst) in src
                    .chunks_exact(run)
                    .zip(dst.chunks_exact_mut(run / 32 * 34))
                {
                    x.copy_from_slice(src);
                    rotate(&mut x, *rotation);
                    let mut q = [BlockQ8::default(); 1];
                    for (xb, out) in x.chunks_exact(Q8_0_LEN).zip(dst.chunks_exact_mut(34)) {
                        (kernels.quantize_q8)(xb, &mut q);
                        portable::pack_q8_0(&q[0], out);
                    }
                }
            }
        }
    }

    /// Values `start..start + out.len()` as f32 (rotated back): what the cache holds, as the ops
    /// that read it see it.
    pub fn read(&self, start: usize, out: &mut [f32]) {
        match self {
            CpuCache::F32(c) => out.copy_from_slice(&c[start..start + out.len()]),
            CpuCache::F16(c) => c[start..start + out.len()].convert_to_f32_slice(out),
            CpuCache::Q8_0 { blocks, rotation } => {
                let blocks = &blocks[q8_0_range(start, out.len())];
                crate::gguf::dequant::dequantize(GgmlType::Q8_0, blocks, out);
                rotate(out, *rotation);
            }
        }
    }

    /// Copy values `src..src + len` to `dst..dst + len` (the ranges may overlap).
    pub(super) fn copy_within(&mut self, src: usize, dst: usize, len: usize) {
        match self {
            CpuCache::F32(c) => c.copy_within(src..src + len, dst),
            CpuCache::F16(c) => c.copy_within(src..src + len, dst),
            CpuCache::Q8_0 { blocks, .. } => {
                blocks.copy_within(q8_0_range(src, len), q8_0_range(dst, len).start)
            }
        }
    }
}

/// Multiply each run of `rotation` values by the Hadamard matrix (nothing for 1).
fn rotate(x: &mut [f32], rotation: usize) {
    if rotation > 1 {
        portable::hadamard(x, rotation);
    }
}
