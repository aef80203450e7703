//! Attention on the GPU (shaders/attention.wgsl): the tiled prefill kernel, 16 query rows per
//! workgroup, where the adapter has the workgroup memory; otherwise the GQA-folded kernel, a
//! workgroup per (KV head, row) for up to 8 of its query heads (each key and value row read once
//! for them), and for one decode row the key range split across workgroups and reduced after.
//! Every pair of cache types (f32, f16, q8_0) has its variant. Where the prefill GEMM runs on
//! cooperative matrices (`KILN_WGPU_COOP`), so does the prefill attention over f16 caches: flash
//! attention on f16 fragments (attention_coop.wgsl), 16 query rows per workgroup as the tiled one.

use super::WgpuBackend;
use super::buffers::{DeviceBuf, GpuBuffer, GpuCache, GpuWeight, bind};
use super::device::Coop;
use super::pipelines::{self as kernels, Kernel, KernelSlot};
use super::stream::bindings;
use crate::backend::{AttentionParams, CacheType};

/// The widest attention head the kernels take (8 values per invocation of 64; Gemma 4's global
/// heads are 512 wide).
const MAX_HEAD_DIM: usize = 512;
/// The widest head the tiled prefill kernel takes (wider ones prefill through the GQA-folded one).
const MAX_TILED_HEAD_DIM: usize = 256;

/// Query heads per workgroup of the GQA-folded attention (attention.wgsl `heads_per_group`): 8,
/// or 4 for heads wider than 256.
fn heads_per_group(head_dim: usize) -> usize {
    if head_dim > 256 { 4 } else { 8 }
}

/// Storage buffers the decode attention binds when it reduces and packs its output itself: q,
/// the two caches, the output, the partials, the sinks, the packed blocks and their counts.
const ATTENTION_PACKING_BUFFERS: u32 = 8;

/// The most splits of a decode row's keys sized by compute units (`Gpu::attention_splits_by_cores`):
/// two workgroups a unit of the largest GPUs' 200 or so, over one KV head.
const MAX_CORE_SPLITS: usize = 512;

/// Splits of a decode row's `span` keys that give two workgroups to each of `units` compute units
/// where a split takes `groups` workgroups, at least a key each (`Gpu::attention_splits_by_cores`).
fn core_splits(units: u32, groups: usize, span: usize) -> usize {
    (2 * units as usize / groups.max(1)).clamp(1, span.clamp(1, MAX_CORE_SPLITS))
}

/// The bindings every attention kernel takes, in attention.wgsl's order: the queries, the two
/// caches, the output, the decode splits' partials, the sinks.
fn attention_bindings<'a>(
    q: &'a GpuBuffer,
    (k, v): (&'a GpuCache, &'a GpuCache),
    out: &'a GpuBuffer,
    partials: &'a (wgpu::Buffer, u64),
    sinks: &'a DeviceBuf,
) -> [(&'a wgpu::Buffer, u64); 6] {
    [
        bind(&q.dev),
        bind(&k.dev),
        bind(&v.dev),
        bind(&out.dev),
        (&partials.0, partials.1),
        bind(sinks),
    ]
}

/// Query rows per workgroup of the tiled prefill attention.
const PREFILL_ATTENTION_ROWS: usize = 16;
/// Workgroup memory the tiled prefill attention needs (16 query rows of up to 256 values, a tile
/// of 16 × 64 scores, and a few reductions), with room to spare.
const PREFILL_ATTENTION_SHARED: u32 = 24 << 10;

/// Workgroup memory the prefill attention on cooperative matrices takes for heads of `head_dim`
/// in workgroups of `invocations` (attention_coop.wgsl: the f16 queries, staged keys or values and
/// probabilities; the f32 staged fragments, the invocations' maxima, two values a row).
fn coop_prefill_attention_bytes(head_dim: usize, invocations: u32) -> u32 {
    let halves = 16 * (head_dim as u32 + 8) + 64 * 72 + 16 * 72;
    halves * 2 + (16 * 68 + invocations + 32) * 4
}

impl WgpuBackend {
    /// How the prefill attention of `p` runs on cooperative matrices (attention_coop.wgsl), where
    /// it does: where the GEMM does (`Gpu::coop_attention`), over f16 caches, for heads of a
    /// multiple of 64 values up to 256 that the adapter's workgroup memory holds.
    fn coop_prefill_attention(
        &self,
        k: CacheType,
        v: CacheType,
        p: &AttentionParams,
    ) -> Option<Coop> {
        let coop = self.gpu.coop.filter(|_| self.gpu.coop_attention)?;
        let fits = self.gpu.limits.max_compute_workgroup_storage_size
            >= coop_prefill_attention_bytes(p.head_dim, coop.invocations());
        let applies = p.rows > 1
            && k == CacheType::F16
            && v == CacheType::F16
            && p.head_dim.is_multiple_of(64)
            && p.head_dim <= MAX_TILED_HEAD_DIM;
        (applies && fits).then_some(coop)
    }

    /// Workgroups of the GQA-folded attention per query row and split: one per (KV head, up to
    /// `heads_per_group` of its query heads).
    fn decode_attention_groups(&self, p: &AttentionParams) -> usize {
        p.n_kv_heads * (p.n_heads / p.n_kv_heads).div_ceil(heads_per_group(p.head_dim))
    }

    /// Whether the GQA-folded kernel sums its 8-lane partials with subgroup shuffles: subgroups
    /// of at least 8 keep each key's lanes in one.
    fn attention_lanes(&self) -> bool {
        self.gpu.caps.subgroups && self.gpu.info.subgroup_min_size >= 8
    }

    /// The decode attention over caches of types `k` and `v` (`packing`: the variant that also
    /// combines its splits and packs its output), built for `shape` (head size, group) where
    /// `Gpu::attention_constants` says so; for one query row (`decode`) v2 where it applies.
    fn decode_attention_kernel(
        &self,
        k: CacheType,
        v: CacheType,
        packing: bool,
        shape: (usize, usize),
        decode: bool,
    ) -> Kernel {
        let lanes = self.attention_lanes();
        let kernel = if packing {
            kernels::attention_packing_kernel(k, v, lanes)
        } else {
            kernels::attention_kernel(k, v, lanes)
        };
        if !self.gpu.attention_constants {
            return kernel;
        }
        let kernel = kernels::with_attention_shape(kernel, shape);
        match self.attention_v2_registers(k, v, shape).filter(|_| decode) {
            Some(registers) => {
                let subgroup = self.gpu.info.subgroup_min_size as usize;
                let invocations = self.gpu.attention_v2_invocations;
                kernels::with_attention_v2(kernel, invocations, subgroup, registers)
            }
            None => kernel,
        }
    }

    /// Where the decode attention over caches of types `k` and `v` runs as v2
    /// (`GpuOptions::attention_v2`) for `shape` (head size, group): a lane's query pairs per head
    /// and the heads a workgroup takes, their product (the lane's sums, as many again of query
    /// values) at most 32 pairs.
    fn attention_v2_registers(
        &self,
        k: CacheType,
        v: CacheType,
        (head_dim, group): (usize, usize),
    ) -> Option<(usize, usize)> {
        let info = &self.gpu.info;
        let subgroup = info.subgroup_min_size as usize;
        let applies = self.gpu.attention_v2
            && self.gpu.attention_constants
            && self.gpu.caps.subgroups
            && info.subgroup_max_size == info.subgroup_min_size
            && subgroup.is_power_of_two()
            && (4..=32).contains(&subgroup)
            && ![k, v].contains(&CacheType::Q8_0);
        let pairs = (head_dim / 2).div_ceil(subgroup.max(1));
        let heads = group.min(heads_per_group(head_dim));
        (applies && pairs * heads <= 32).then_some((pairs, heads))
    }

    /// Whether `k`'s kernel slots hold the decode attention for `shape` (the first shape asked
    /// for, where the kernel is built for it; every shape where it reads parameters).
    fn attention_slots_fit(&self, k: &GpuCache, shape: (usize, usize)) -> bool {
        !self.gpu.attention_constants || *k.kernels.attention_shape.get_or_init(|| shape) == shape
    }

    /// Whether a decode row's attention output of `width` values (heads of `head_dim`) is written
    /// as packed Q8_K blocks too, for the integer-dot mat-vec that reads it next.
    fn attention_packs_output(&self, head_dim: usize, width: usize) -> bool {
        self.gpu.fused && head_dim.is_multiple_of(4) && self.packs_outputs(1, width)
    }

    /// Whether the decode attention's workgroups combine its splits themselves (and pack the
    /// output), rather than a reduce dispatch after.
    fn attention_merges_reduce(&self) -> bool {
        self.gpu.merged_reduce
            && self.gpu.limits.max_storage_buffers_per_shader_stage >= ATTENTION_PACKING_BUFFERS
    }

    /// Build the decode attention for a layer's caches and shape (head size, group), whose output
    /// rows are `width` values (`CoreOps::prepare_attention`): the kernel `attend` takes, and the
    /// one that also combines its splits and packs its output where decode takes that.
    pub(super) fn build_attention(
        &self,
        k: &GpuCache,
        v: &GpuCache,
        shape: (usize, usize),
        width: usize,
    ) {
        if !self.attention_slots_fit(k, shape) {
            return;
        }
        self.pipeline_in(&k.kernels.attention[v.ty as usize], || {
            self.decode_attention_kernel(k.ty, v.ty, false, shape, true)
        });
        if self.attention_packs_output(shape.0, width) && self.attention_merges_reduce() {
            self.pipeline_in(&k.kernels.attention_packing[v.ty as usize], || {
                self.decode_attention_kernel(k.ty, v.ty, true, shape, true)
            });
        }
    }

    /// Whether the adapter has the workgroup memory the tiled prefill attention needs.
    pub(super) fn tiled_prefill_attention(&self) -> bool {
        self.gpu.limits.max_compute_workgroup_storage_size >= PREFILL_ATTENTION_SHARED
    }

    /// attention.wgsl's `Params`.
    fn attention_params(
        &self,
        p: &AttentionParams,
        k: &GpuCache,
        v: &GpuCache,
        splits: usize,
        chunk: usize,
        sinks: bool,
    ) -> [u32; 19] {
        [
            p.start_pos as u32,
            p.rows as u32,
            p.n_heads as u32,
            (p.n_heads / p.n_kv_heads) as u32,
            p.head_dim as u32,
            (p.n_kv_heads * p.head_dim) as u32,
            (p.n_heads * p.head_dim) as u32,
            p.window.unwrap_or(0) as u32,
            splits as u32,
            chunk as u32,
            p.scale.to_bits(),
            k.scales(),
            v.scales(),
            (k.rotation | (v.rotation << 16)) as u32,
            k.rot_scale().to_bits(),
            v.rot_scale().to_bits(),
            p.softcap.unwrap_or(0.0).to_bits(),
            sinks as u32,
            p.causal as u32,
        ]
    }

    /// Attention, causal or over a whole call (see `CoreOps::attention`).
    pub(super) fn attend(
        &self,
        q: &GpuBuffer,
        k_cache: &GpuCache,
        v_cache: &GpuCache,
        out: &mut GpuBuffer,
        p: &AttentionParams,
        sinks: Option<&GpuWeight>,
    ) {
        let hd = p.head_dim;
        // Without sinks the binding is filled by any buffer (the queries), never read.
        let sinks_dev = match sinks {
            Some(w) => match self.vector(w, "attention sinks") {
                Some((dev, len)) if len >= p.n_heads => dev,
                Some((_, len)) => {
                    self.gpu.fail(format!(
                        "attention: {len} sinks for {} query heads",
                        p.n_heads
                    ));
                    return;
                }
                None => return,
            },
            None => &q.dev,
        };
        if p.n_kv_heads == 0 || !p.n_heads.is_multiple_of(p.n_kv_heads) {
            self.gpu.fail(format!(
                "attention: {} query heads do not share {} KV heads evenly",
                p.n_heads, p.n_kv_heads
            ));
            return;
        }
        if hd > MAX_HEAD_DIM || !hd.is_multiple_of(2) {
            self.gpu.fail(format!(
                "attention heads of {hd} values: the GPU kernel takes even sizes up to {MAX_HEAD_DIM}"
            ));
            return;
        }
        // The kernels are trusted (built without bounds checks): their every index is bounded by
        // these sizes (see `kernels::attention_kernel`).
        let q_len = p.rows * p.n_heads * hd;
        let kv_len = (p.start_pos + p.rows) * p.n_kv_heads * hd;
        if q.len < q_len || out.len < q_len || k_cache.len < kv_len || v_cache.len < kv_len {
            self.gpu.fail(format!(
                "attention of {} rows from position {} ({} query and {} KV heads of {hd}): \
                 queries of {} values, output {}, caches {} and {}; it needs {q_len} and {kv_len}",
                p.rows,
                p.start_pos,
                p.n_heads,
                p.n_kv_heads,
                q.len,
                out.len,
                k_cache.len,
                v_cache.len
            ));
            return;
        }
        // A q8_0 cache's rotation runs lie within a head.
        for c in [k_cache, v_cache] {
            if c.ty == CacheType::Q8_0 && !hd.is_multiple_of(c.rotation.max(32)) {
                self.gpu.fail(format!(
                    "attention heads of {hd} values against a q8_0 cache stored in rotations of {}",
                    c.rotation
                ));
                return;
            }
        }
        // Prefill in blocks of 16 query rows a workgroup: on cooperative matrices, or tiled.
        let coop = self.coop_prefill_attention(k_cache.ty, v_cache.ty, p);
        let tiled = p.rows > 1
            && hd.is_multiple_of(32)
            && hd <= MAX_TILED_HEAD_DIM
            && self.tiled_prefill_attention();
        if coop.is_some() || tiled {
            let params = self.attention_params(p, k_cache, v_cache, 1, 1 << 30, sinks.is_some());
            let Some(partials) = self.scratch_buffer(|s| &mut s.partials, 1) else {
                return;
            };
            let buffers = attention_bindings(q, (k_cache, v_cache), out, &partials, sinks_dev);
            let grid = [
                p.n_heads as u32,
                p.rows.div_ceil(PREFILL_ATTENTION_ROWS) as u32,
                1,
            ];
            let (kt, vt) = (k_cache.ty, v_cache.ty);
            let Some(coop) = coop else {
                let slot = &k_cache.kernels.attention_prefill[vt as usize];
                let make = || kernels::attention_prefill_kernel(kt, vt);
                self.run_in(slot, make, &params, &buffers, grid);
                return;
            };
            let shape = (hd, p.n_heads / p.n_kv_heads);
            let make = || kernels::attention_prefill_coop_kernel(coop, shape);
            // Built for the layer's shape (even where the decode attention reads its
            // parameters): held by the cache where that is the cache's.
            if *k_cache.kernels.attention_shape.get_or_init(|| shape) == shape {
                let slot = &k_cache.kernels.attention_prefill_coop;
                self.run_in(slot, make, &params, &buffers, grid);
            } else {
                self.run(&make(), &params, &buffers, grid);
            }
            return;
        }
        // Decode splits the key range across workgroups; prefill has a workgroup per row already.
        let (splits, chunk) = if p.rows == 1 {
            let pos = p.start_pos;
            let lo = p.window.map_or(0, |w| (pos + 1).saturating_sub(w));
            let span = pos + 1 - lo;
            // On a GPU a workgroup's keys are a chain of dependent loads: short chunks (8 keys,
            // one key slot of the kernel) over many workgroups (up to 64 splits per KV head) keep
            // its latency short and the GPU full; a software adapter has few cores to fill and
            // pays per workgroup. On an H200 (tg128, 8B and 1B Llama shapes, 2026-11-30) 8 keys
            // gave 147 and 459 t/s, 16 keys 138 and 439, 32 keys 121 and 398, 64 keys 104 and
            // 349. `KILN_WGPU_ATTN_KEYS` sets the chunk by hand, for measuring others.
            let (keys, max_splits) = if self.gpu.caps.software_kernels {
                (128, 16)
            } else {
                (8, 64)
            };
            let keys = self.gpu.attention_keys.unwrap_or(keys);
            let splits = match self.gpu.compute_units {
                // Two workgroups a compute unit (`KILN_WGPU_ATTN_SPLITS=cores`), as llama.cpp's
                // Vulkan flash attention splits its keys, at least a key each.
                Some(units) if self.gpu.attention_splits_by_cores => {
                    core_splits(units, self.decode_attention_groups(p), span)
                }
                _ => span.div_ceil(keys).clamp(1, max_splits),
            };
            (splits, span.div_ceil(splits))
        } else {
            (1, 1 << 30)
        };
        // Each workgroup's part is one split, or with v2 (a decode row only: several rows' parts
        // would take rows × heads × subgroups × head_dim values) one a subgroup.
        let shape = (hd, p.n_heads / p.n_kv_heads);
        let (kt, vt) = (k_cache.ty, v_cache.ty);
        let v2_shape = self.attention_v2_registers(kt, vt, shape).is_some();
        let v2 = v2_shape && p.rows == 1;
        let parts = splits
            * if v2 {
                (self.gpu.attention_v2_invocations / self.gpu.info.subgroup_min_size) as usize
            } else {
                1
            };
        // A decode row's output goes to a mat-vec next: as integer-dot mat-vecs read it, it is
        // written as packed Q8_K blocks too, and no dispatch quantizes it again; by the attention
        // itself (the workgroup that completes a block, which reduces the block's parts, one
        // split's too), else by the reduce (where there are several splits).
        let width = p.n_heads * hd;
        let packs = p.rows == 1 && self.attention_packs_output(hd, width);
        let packs_itself = packs && self.attention_merges_reduce();
        let part_len = if parts > 1 || packs_itself {
            p.rows * p.n_heads * parts * (hd + 2)
        } else {
            1
        };
        let Some(partials) = self.scratch_buffer(|s| &mut s.partials, part_len) else {
            return;
        };
        let params = self.attention_params(p, k_cache, v_cache, parts, chunk, sinks.is_some());
        let buffers = attention_bindings(q, (k_cache, v_cache), out, &partials, sinks_dev);
        let groups = self.decode_attention_groups(p);
        let grid = [groups as u32, p.rows as u32, splits as u32];
        let packed = (packs && (parts > 1 || packs_itself))
            .then(|| self.packed_output(1, width))
            .flatten();
        // The decode kernel (built for this layer's head size and group unless
        // `GpuOptions::attention_parameters`), held by the cache; a cache of another shape (none
        // today: a cache is a layer's), or several rows where the cache holds v2, look their
        // pipeline up instead.
        let in_slots = self.attention_slots_fit(k_cache, shape) && v2 == v2_shape;
        let run = |slot: &KernelSlot, packing: bool, buffers: &[(&wgpu::Buffer, u64)]| {
            let make = || self.decode_attention_kernel(kt, vt, packing, shape, v2);
            if in_slots {
                self.run_in(slot, make, &params, buffers, grid);
            } else {
                self.run(&make(), &params, buffers, grid);
            }
        };
        if let Some((packed, packed_id)) = &packed
            && packs_itself
            && let Some((counts, counts_id)) =
                self.scratch_buffer(|s| &mut s.block_counts, width / 256)
        {
            let with_packed = bindings(&buffers, &[(packed, *packed_id), (&counts, counts_id)]);
            run(
                &k_cache.kernels.attention_packing[vt as usize],
                true,
                &with_packed,
            );
            self.packed_written(out, width);
            return;
        }
        run(&k_cache.kernels.attention[vt as usize], false, &buffers);
        if parts == 1 {
            return;
        }
        if let Some((packed, packed_id)) = &packed {
            let with_packed = bindings(&buffers, &[(packed, *packed_id)]);
            self.run_in(
                &self.fixed.attention_reduce_packed,
                kernels::attention_reduce_packed_kernel,
                &params,
                &with_packed,
                [(width / 256) as u32, 1, 1],
            );
            self.packed_written(out, width);
        } else {
            self.run_in(
                &self.fixed.attention_reduce,
                kernels::attention_reduce_kernel,
                &params,
                &buffers,
                [p.n_heads as u32, p.rows as u32, 1],
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::core_splits;

    /// Two workgroups a compute unit, as llama.cpp's Vulkan flash attention: an H200's 132 SMs
    /// over the 8 workgroups a split of the 1B and 8B Llama shapes takes (8 KV heads) give 33
    /// splits; never more than the keys, nor fewer than one, nor more than MAX_CORE_SPLITS.
    #[test]
    fn core_splits_give_two_workgroups_a_unit() {
        assert_eq!(core_splits(132, 8, 128), 33);
        assert_eq!(core_splits(132, 8, 10), 10);
        assert_eq!(core_splits(132, 64, 1000), 4);
        assert_eq!(core_splits(4, 64, 100), 1);
        assert_eq!(core_splits(4096, 1, 100_000), 512);
        assert_eq!(core_splits(132, 0, 0), 1);
    }
}
