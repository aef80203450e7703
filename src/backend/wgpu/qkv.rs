//! A decode step's Q/K/V projections with RoPE and the KV append as their epilogue
//! (`CoreOps::qkv_rope_store`): the per-type mat-vecs (shaders/matvec_blocks.wgsl) whose
//! workgroups own both rows of each rotated pair rotate the query and key pairs and write the
//! keys and values straight into their caches, so no `rope_kv` dispatch follows (16 fewer a token
//! on a 16-layer model). Weights of one type and width share a dispatch, as in `matmul_many`.
//! Where this does not apply (prefill, rotate-half pairs, q8_0 caches, other weight types, a
//! shape with an odd row count a workgroup), nothing is recorded and the model runs the two ops.

use arrayvec::ArrayVec;

use super::WgpuBackend;
use super::buffers::{GpuBuffer, GpuCache, GpuWeight, Matrix, bind};
use super::matmul::Reader;
use super::pipelines as kernels;
use super::stream::Bindings;
use crate::backend::{CacheType, KvAppend, RopeLayout};
use crate::gguf::GgmlType;

/// Storage buffers the epilogue's widest dispatch binds: x, three weights and outputs, the RoPE
/// table and the two caches.
const EPILOGUE_STORAGE_BUFFERS: u32 = 10;

impl WgpuBackend {
    /// `CoreOps::qkv_rope_store`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fused_qkv_rope_store(
        &self,
        x: &GpuBuffer,
        ws: [&GpuWeight; 3],
        outs: [&mut GpuBuffer; 3],
        table: &GpuBuffer,
        k_cache: &mut GpuCache,
        v_cache: &mut GpuCache,
        p: &KvAppend,
    ) -> bool {
        let kv_width = p.n_kv_heads * p.head_dim;
        let dst_off = p.dst_row * kv_width;
        let [Some(wq), Some(wk), Some(wv)] = ws.map(|w| w.matrix()) else {
            return false;
        };
        let ms = [wq, wk, wv];
        let applies = self.gpu.fused
            && p.rows == 1
            && p.layout == RopeLayout::Interleaved
            && p.rot_dims.is_multiple_of(2)
            && p.rot_dims <= p.head_dim
            && table.len >= p.rot_dims
            && [&*k_cache, &*v_cache]
                .iter()
                .all(|c| c.ty != CacheType::Q8_0 && dst_off + kv_width <= c.len)
            && wq.rows == p.n_heads * p.head_dim
            && outs[0].len >= wq.rows
            && outs[1..].iter().all(|o| o.len >= kv_width)
            && [wk, wv].iter().all(|m| m.rows == kv_width)
            && self.gpu.limits.max_storage_buffers_per_shader_stage >= EPILOGUE_STORAGE_BUFFERS
            && ms.iter().all(|m| {
                m.parts.len() == 1
                    && m.cols == wq.cols
                    && self
                        .blocks_matvec(m, false)
                        .is_some_and(|s| s.rows.is_multiple_of(2))
            });
        if !applies {
            return false;
        }
        // Consecutive projections of one type and row width share a dispatch.
        let key = |m: &Matrix| (m.dtype, m.row_bytes);
        let mut groups: ArrayVec<ArrayVec<usize, 3>, 3> = ArrayVec::new();
        for (i, m) in ms.iter().enumerate() {
            match groups.last_mut() {
                Some(g) if key(ms[g[0]]) == key(m) => g.push(i),
                _ => groups.push([i].into_iter().collect()),
            }
        }
        let [q, k, v] = outs;
        let outs = [&*q, &*k, &*v];
        if let Some(second) = self.mixed_group(&ms, &groups) {
            self.rope_store_group(
                x,
                &ms,
                &[0, 1, 2],
                outs,
                table,
                (k_cache, v_cache),
                p,
                Some(second),
            );
            return true;
        }
        // Packed activations made for the first group serve the next.
        self.share_packed(true);
        for roles in &groups {
            self.rope_store_group(x, &ms, roles, outs, table, (k_cache, v_cache), p, None);
        }
        self.share_packed(false);
        true
    }

    /// Where the projections fall in two groups of K-quants that one integer-dot dispatch can
    /// take (`kernels::blocks_mix`: a Q4_K_M file's Q4_K query and key with its Q6_K value): the
    /// second group's first weight (its type and index), unless the fusions are off. Each
    /// workgroup's rows must all be of one weight, so the first group's rows are a whole number
    /// of workgroups.
    fn mixed_group(
        &self,
        ms: &[&Matrix; 3],
        groups: &[ArrayVec<usize, 3>],
    ) -> Option<(GgmlType, usize)> {
        let [a, b] = groups else {
            return None;
        };
        let (first, second) = (ms[a[0]], ms[b[0]]);
        let shape = self.blocks_matvec(first, false)?;
        let rows_before: usize = a.iter().map(|&i| ms[i].rows).sum();
        let mixes = self.gpu.fused
            && self.gpu.mixed
            && self.int_dot(first)
            && self.int_dot(second)
            && kernels::blocks_mix(first.dtype, second.dtype)
            && self.blocks_matvec(second, false) == Some(shape)
            && rows_before.is_multiple_of(shape.rows);
        mixes.then_some((second.dtype, a.len()))
    }

    /// One dispatch of the projections `roles` (indices into `ms`: 0 query, 1 key, 2 value).
    #[allow(clippy::too_many_arguments)]
    fn rope_store_group(
        &self,
        x: &GpuBuffer,
        ms: &[&Matrix; 3],
        roles: &[usize],
        outs: [&GpuBuffer; 3],
        table: &GpuBuffer,
        (k_cache, v_cache): (&GpuCache, &GpuCache),
        p: &KvAppend,
        second: Option<(GgmlType, usize)>,
    ) {
        let first = ms[roles[0]];
        let Some(shape) = self.blocks_matvec(first, false) else {
            return;
        };
        let Some((input, input_id)) = self.weight_input(x, first, first.cols, Reader::Matvec)
        else {
            return;
        };
        let mut buffers = Bindings::new();
        buffers.push((&input, input_id));
        let mut rows = [0; 3];
        for (slot, &r) in roles.iter().enumerate() {
            buffers.push(bind(&ms[r].parts[0].dev));
            buffers.push(bind(&outs[r].dev));
            rows[slot] = ms[r].rows;
        }
        buffers.extend([bind(&table.dev), bind(&k_cache.dev), bind(&v_cache.dev)]);
        let (mut params, groups) = self.matvec_call_rows(first, rows, [0; 3], None, 1, [0; 3]);
        // Past the trace word: the expert fields and the row strides (unused here), then the
        // epilogue's.
        params.extend([0; 10]);
        params.extend([
            p.head_dim as u32,
            p.rot_dims as u32,
            (p.dst_row * p.n_kv_heads * p.head_dim) as u32,
        ]);
        if let Some((_, at)) = second {
            params.push(ms[roles[at]].row_bytes as u32);
        }
        let int_dot = self.int_dot(first);
        let caches = (k_cache.ty, v_cache.ty);
        let slot =
            2 * (k_cache.ty == CacheType::F16) as usize + (v_cache.ty == CacheType::F16) as usize;
        let slots = match second {
            Some(_) => &first.kernels.matvec_rope_kv_mixed,
            None => &first.kernels.matvec_rope_kv,
        };
        self.run_in(
            &slots[slot],
            || {
                kernels::matvec_rope_kv_kernel(
                    first.dtype,
                    roles,
                    self.kernel_rounding(first).filter(|_| !int_dot),
                    int_dot,
                    shape,
                    caches,
                    second,
                )
            },
            &params,
            &buffers,
            groups,
        );
    }
}
