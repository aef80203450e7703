//! The residual add and the next block's input norm as the epilogue of the decode mat-vec
//! before them (the attention's output projection, the down projection): `matmul_part` keeps
//! its last single-weight mat-vec as a `Projection`, and `add_rms_norm_into` on that mat-vec's
//! output takes it back from the stream and records it again with the norm
//! (`kernels::with_norm_add`, matvec_rows.wgsl `NORM_ADD`), one dispatch fewer for the same
//! arithmetic. `KILN_WGPU_FUSE_NORM=0` keeps the norms as dispatches of their own.

use std::sync::Arc;

use super::buffers::{GpuBuffer, Matrix, bind};
use super::pipelines::{self as kernels, ActRounding, BlocksShape, MatrixKernels};
use super::stream::ParamWords;
use super::{PackedIn, WgpuBackend};
use crate::gguf::GgmlType;

/// Storage buffers the mat-vec with the norm as its epilogue binds: x, the weight, its output,
/// the residual stream, the norm's weight, its output, the completion count and the packed
/// blocks.
const NORM_ADD_BUFFERS: u32 = 8;

/// The index of `norm_eps` in matvec_rows.wgsl's parameters.
const NORM_EPS_WORD: usize = 24;

/// A recorded per-type mat-vec over one weight (`matmul_part`), as `fused_norm` records it again
/// with the norm after it as its epilogue.
pub(super) struct Projection {
    /// The stream's `recorded` just after it.
    at: u64,
    /// Its output buffer's id, and the output's values (the weight's rows).
    out: u64,
    values: usize,
    params: ParamWords,
    groups: [u32; 3],
    /// Its input (packed Q8_K blocks, or x itself where the kernel rounds it) and weight.
    input: (wgpu::Buffer, u64),
    weight: (wgpu::Buffer, u64),
    /// The weight's kernels, whose `matvec_norm` slot holds the fused variant, and what that
    /// kernel is built for: the weight's type, the mat-vec's shape and how it takes x
    /// (`WgpuBackend::blocks_input`).
    kernels: Arc<MatrixKernels>,
    dtype: GgmlType,
    shape: BlocksShape,
    input_form: (Option<ActRounding>, bool),
}

impl WgpuBackend {
    /// After a mat-vec over `m` (a `matmul_part` of `rows` rows, its call and `buffers`: input,
    /// weight, output), recorded after the stream's `before`th command: it as a `Projection`,
    /// where the residual add and norm that may follow could run as its epilogue (`fused_norm`);
    /// else none.
    pub(super) fn keep_projection(
        &self,
        m: &Matrix,
        rows: usize,
        before: u64,
        (params, groups): (ParamWords, [u32; 3]),
        buffers: &[(&wgpu::Buffer, u64); 3],
        out: &GpuBuffer,
    ) {
        // Workgroups of 64, 128 or 256: whole Q8_K blocks a pass, each invocation standing
        // for a whole number of the norm's 256 (`kernels::with_norm_add`).
        let fits = |shape: &BlocksShape| {
            shape.wg.is_multiple_of(64) && kernels::NORM_WG.is_multiple_of(shape.wg)
        };
        let applies = self.gpu.fused_norm
            && rows == 1
            && m.parts.len() == 1
            && self.packs_outputs(1, m.rows)
            && self.gpu.limits.max_storage_buffers_per_shader_stage >= NORM_ADD_BUFFERS;
        let shape = self.blocks_matvec(m, false).filter(|s| applies && fits(s));
        let at = self.stream().recorded;
        let projection = shape.filter(|_| at == before + 1).map(|shape| Projection {
            at,
            out: out.dev.id,
            values: m.rows,
            params,
            groups,
            input: (buffers[0].0.clone(), buffers[0].1),
            weight: (buffers[1].0.clone(), buffers[1].1),
            kernels: m.kernels.clone(),
            dtype: m.dtype,
            shape,
            input_form: self.blocks_input(m),
        });
        self.scratch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .projection = projection;
    }

    /// `CoreOps::add_rms_norm_into` for one row of `width` values (`x += y`, then `out =
    /// rms_norm(x) · w`, `w` the norm's weight) as the epilogue of the mat-vec that made `y`,
    /// where that mat-vec is the last thing recorded (`keep_projection`): it is taken back and
    /// recorded again as `kernels::with_norm_add`, whose workgroup that completes the row adds
    /// it into `x` and writes the norm and its packed Q8_K blocks. One dispatch fewer, the same
    /// arithmetic. Whether it did; if not, nothing was recorded.
    pub(super) fn fused_norm(
        &self,
        (x, y): (&GpuBuffer, &GpuBuffer),
        w: (&wgpu::Buffer, u64),
        width: usize,
        eps: f32,
        out: &GpuBuffer,
    ) -> bool {
        let taken = self
            .scratch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .projection
            .take();
        let Some(p) = taken.filter(|p| p.out == y.dev.id && p.values == width) else {
            return false;
        };
        let (rounding, int_dot) = p.input_form;
        let made = || {
            kernels::with_norm_add(kernels::matvec_blocks_kernel(
                p.dtype, 1, None, rounding, int_dot, p.shape,
            ))
        };
        let Some(pipeline) = self.pipeline_in(&p.kernels.matvec_norm, made) else {
            return false;
        };
        let packed = self.scratch_buffer(|s| &mut s.normed_packed, width / 4 + width / 256);
        let count = self.scratch_buffer(|s| &mut s.norm_count, 1);
        let (Some((packed, packed_id)), Some((count, count_id))) = (packed, count) else {
            return false;
        };
        // A mat-vec cannot write what it reads: not the next blocks over a fused norm's it
        // reads, nor (one that takes x as floats) a norm into its own x.
        if [packed_id, x.dev.id, y.dev.id, out.dev.id].contains(&p.input.1) {
            return false;
        }
        let mut params = p.params.clone();
        while params.len() < NORM_EPS_WORD {
            params.push(0);
        }
        params.push(eps.to_bits());
        let buffers = [
            (&p.input.0, p.input.1),
            (&p.weight.0, p.weight.1),
            bind(&y.dev),
            bind(&x.dev),
            w,
            bind(&out.dev),
            (&count, count_id),
            (&packed, packed_id),
        ];
        {
            let mut stream = self.stream();
            if !stream.retract_last(p.at) {
                return false;
            }
            stream.dispatch(&self.gpu, pipeline, &params, &buffers, p.groups);
        }
        self.mark_packed(out, width, PackedIn::Normed);
        true
    }
}
