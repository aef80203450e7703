//! The KV cache on the GPU: allocation, appends (shaders/kv.wgsl, or fused with RoPE in
//! rope.wgsl's `ROPE_KV`), a context shift's moves and re-rotations (kv_shift.wgsl), and a read-back
//! in GGML layout for tests, for f32, f16 and q8_0 caches. A q8_0 cache holds the CPU's blocks
//! (llama.cpp's quantization, each run of `rotation` values Hadamard-rotated) in a layout of its
//! own, quants then scales (shaders/q8.wgsl): its stores rotate and quantize 256-value spans of the
//! cache in workgroup memory, so they need whole rotation runs of whole blocks.

use super::WgpuBackend;
use super::buffers::{self, GpuBuffer, GpuCache, bind};
use super::pipelines as kernels;
use super::stream::grid;
use crate::backend::{CacheType, KvAppend, RopeLayout};
use crate::error::{Error, Result};

/// Values per workgroup of a q8_0 store (kv.wgsl `store_q8`, rope.wgsl `ROPE_KV`).
const Q8_SPAN: usize = 256;
/// The longest rotation the kernels apply (their Hadamard transform has eight stages).
const MAX_ROTATION: usize = 256;

impl GpuCache {
    /// The first word of a q8_0 cache's scales (after the quants, 4 to a word).
    pub(super) fn scales(&self) -> u32 {
        (self.len / 4) as u32
    }

    /// 1/√rotation, as the CPU computes it (`portable::hadamard`), so both round alike.
    pub(super) fn rot_scale(&self) -> f32 {
        1.0 / (self.rotation as f32).sqrt()
    }

    /// Values a q8_0 store must cover whole: rotation runs of whole blocks.
    fn q8_unit(&self) -> usize {
        self.rotation.max(32)
    }
}

/// Workgroups over the 256-value spans of the cache that values `start..start + len` touch.
fn q8_spans(start: usize, len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    (start + len - 1) / Q8_SPAN - start / Q8_SPAN + 1
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

impl WgpuBackend {
    /// A zeroed cache (see `CoreOps::cache`), with the pipelines that write and read it built.
    pub(super) fn new_cache(&self, len: usize, ty: CacheType, rotation: usize) -> Result<GpuCache> {
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
                || !len.is_multiple_of(rotation)
                || rotation > MAX_ROTATION)
        {
            return Err(Error::Unsupported(format!(
                "a {ty} cache of {len} values cannot be stored in rotations of {rotation} on the \
                 GPU (a power of two of whole blocks, at most {MAX_ROTATION})"
            )));
        }
        let dev = buffers::create(
            &self.gpu,
            &self.memory,
            "the KV cache",
            ty.row_bytes(len) as u64,
            None,
        )?;
        // The decode attention is built for the layer's shape (`CoreOps::prepare_attention`).
        let mut kernels = vec![
            kernels::store_kernel(ty),
            kernels::attention_reduce_kernel(),
        ];
        if self.tiled_prefill_attention() {
            kernels.push(kernels::attention_prefill_kernel(ty, ty));
        }
        if self.gpu.fused && self.packs_outputs(1, 256) {
            kernels.push(kernels::attention_reduce_packed_kernel());
        }
        for k in kernels {
            self.pipelines.get(&self.gpu, &k, self.param_slot)?;
        }
        Ok(GpuCache {
            dev,
            len,
            ty,
            rotation,
            kernels: kernels::CacheKernels::default(),
        })
    }

    /// Whether values `start..start + len` of a q8_0 cache are whole rotation runs of whole
    /// blocks inside it; records an error when not.
    fn q8_range_ok(&self, cache: &GpuCache, start: usize, len: usize, op: &str) -> bool {
        let unit = cache.q8_unit();
        if start.is_multiple_of(unit) && len.is_multiple_of(unit) && start + len <= cache.len {
            return true;
        }
        self.gpu.fail(format!(
            "{op}: values {start}..{} of a q8_0 cache of {} must be whole runs of {unit}",
            start + len,
            cache.len
        ));
        false
    }

    /// Store rows into a cache (see `CoreOps::store_rows`).
    pub(super) fn store_cache_rows(
        &self,
        src: &GpuBuffer,
        dst: &mut GpuCache,
        start: usize,
        len: usize,
    ) {
        // The store kernel is trusted: it writes values start..start + len and reads len.
        if start + len > dst.len || len > src.len {
            self.gpu.fail(format!(
                "store_rows: values {start}..{} of a cache of {} from {} values",
                start + len,
                dst.len,
                src.len
            ));
            return;
        }
        let (params, groups) = match dst.ty {
            CacheType::F32 => (vec![len as u32, start as u32], len),
            CacheType::F16 => (vec![len as u32, start as u32], len / 2),
            CacheType::Q8_0 => {
                if !self.q8_range_ok(dst, start, len, "store_rows") {
                    return;
                }
                let params = vec![
                    len as u32,
                    start as u32,
                    dst.scales(),
                    dst.rotation as u32,
                    dst.rot_scale().to_bits(),
                ];
                (params, q8_spans(start, len) * Q8_SPAN)
            }
        };
        self.run_in(
            &dst.kernels.store,
            || kernels::store_kernel(dst.ty),
            &params,
            &[bind(&src.dev), bind(&dst.dev)],
            grid(groups.div_ceil(256)),
        );
    }

    /// RoPE and the KV append in one dispatch (see `CoreOps::rope_store_kv`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn rope_append(
        &self,
        q: &mut GpuBuffer,
        k: &GpuBuffer,
        v: &GpuBuffer,
        table: &GpuBuffer,
        k_cache: &mut GpuCache,
        v_cache: &mut GpuCache,
        p: &KvAppend,
    ) {
        let kv_width = p.n_kv_heads * p.head_dim;
        let q_pairs = p.rows * p.n_heads * p.rot_dims / 2;
        let kv_len = p.rows * kv_width;
        let dst_off = p.dst_row * kv_width;
        // Pairs stay inside their head, and the f32 and f16 stores take whole pairs (even heads
        // and offsets).
        if !p.rot_dims.is_multiple_of(2) || p.rot_dims > p.head_dim || !p.head_dim.is_multiple_of(2)
        {
            self.gpu.fail(format!(
                "rope_store_kv: {} rotated values of heads of {} (even numbers, at most the head)",
                p.rot_dims, p.head_dim
            ));
            return;
        }
        let sizes = [
            ("the queries", q.len, p.rows * p.n_heads * p.head_dim),
            ("the table", table.len, p.rows * p.rot_dims),
            ("the keys", k.len, kv_len),
            ("the values", v.len, kv_len),
            ("the key cache", k_cache.len, dst_off + kv_len),
            ("the value cache", v_cache.len, dst_off + kv_len),
        ];
        if !self.holds("rope_store_kv", &sizes) {
            return;
        }
        // Workgroups of 256 per cache: a 256-value span each for q8_0, else 512 values (two per
        // invocation).
        let mut groups = [0; 2];
        for (g, cache) in groups.iter_mut().zip([&*k_cache, &*v_cache]) {
            *g = match cache.ty {
                CacheType::Q8_0 => {
                    if !self.q8_range_ok(cache, dst_off, kv_len, "rope_store_kv") {
                        return;
                    }
                    q8_spans(dst_off, kv_len)
                }
                CacheType::F32 | CacheType::F16 => kv_len.div_ceil(512),
            };
        }
        let q_groups = q_pairs.div_ceil(256);
        self.run_in(
            &k_cache.kernels.rope_kv[v_cache.ty as usize],
            || kernels::rope_kv_kernel(k_cache.ty, v_cache.ty),
            &[
                q_pairs as u32,
                p.n_heads as u32,
                p.head_dim as u32,
                p.rot_dims as u32,
                (p.layout == RopeLayout::Neox) as u32,
                kv_len as u32,
                kv_width as u32,
                dst_off as u32,
                q_groups as u32,
                groups[0] as u32,
                k_cache.scales(),
                v_cache.scales(),
                (k_cache.rotation | (v_cache.rotation << 16)) as u32,
                k_cache.rot_scale().to_bits(),
                v_cache.rot_scale().to_bits(),
            ],
            &[
                bind(&q.dev),
                bind(&table.dev),
                bind(&k.dev),
                bind(&v.dev),
                bind(&k_cache.dev),
                bind(&v_cache.dev),
            ],
            grid(q_groups + groups[0] + groups[1]),
        );
    }

    /// Move cache rows (see `CoreOps::move_cache_rows`).
    pub(super) fn move_rows(
        &self,
        cache: &mut GpuCache,
        src_row: usize,
        dst_row: usize,
        rows: usize,
        width: usize,
    ) {
        match cache.ty {
            // Words per row: f32 values, or f16 pairs (rows are even).
            CacheType::F32 => self.move_units(cache, false, 0, width, src_row, dst_row, rows),
            CacheType::F16 => self.move_units(cache, false, 0, width / 2, src_row, dst_row, rows),
            // Quants (4 to a word), then the f16 scales, one per block: a row may hold an odd
            // number of them, so they move as halves.
            CacheType::Q8_0 => {
                if !width.is_multiple_of(32) {
                    self.gpu.fail(format!(
                        "move_cache_rows: rows of {width} values in a q8_0 cache (whole blocks of 32)"
                    ));
                    return;
                }
                self.move_units(cache, false, 0, width / 4, src_row, dst_row, rows);
                let first_half = 2 * cache.scales() as usize;
                self.move_units(cache, true, first_half, width / 32, src_row, dst_row, rows);
            }
        }
    }

    /// Move `rows` rows of `per_row` units (words, or halves with `halves`) from row `src_row` to
    /// row `dst_row` of the region of the cache that starts at unit `base`.
    #[allow(clippy::too_many_arguments)]
    fn move_units(
        &self,
        cache: &GpuCache,
        halves: bool,
        base: usize,
        per_row: usize,
        src_row: usize,
        dst_row: usize,
        rows: usize,
    ) {
        let gap = src_row.abs_diff(dst_row);
        if gap == 0 || rows == 0 {
            return;
        }
        // The cache's words (or halves), quants and scales together.
        let held = (cache.dev.buf.size() / if halves { 2 } else { 4 }) as usize;
        let end = base + (src_row.max(dst_row) + rows) * per_row;
        let what = if halves {
            "the cache, counted in 16-bit halves,"
        } else {
            "the cache, counted in 32-bit words,"
        };
        if !self.holds("move_cache_rows", &[(what, held, end)]) {
            return;
        }
        let k = if halves {
            kernels::kv_move_halves_kernel()
        } else {
            kernels::kv_move_kernel()
        };
        // Overlapping ranges go in pieces of at most `gap` rows, each reading rows the ones
        // before it have not written yet: from the front when moving down, the back when up.
        let mut done = 0;
        while done < rows {
            let n = gap.min(rows - done);
            let first = if dst_row < src_row {
                done
            } else {
                rows - done - n
            };
            let len = n * per_row;
            let dst = base + (dst_row + first) * per_row;
            // move_halves: an invocation per destination word.
            let threads = if halves {
                (dst + len - 1) / 2 - dst / 2 + 1
            } else {
                len
            };
            self.run(
                &k,
                &[
                    len as u32,
                    (base + (src_row + first) * per_row) as u32,
                    dst as u32,
                    0,
                    0,
                ],
                &[bind(&cache.dev)],
                grid(threads.div_ceil(256)),
            );
            done += n;
        }
    }

    /// Re-rotate cached keys by a position delta (see `CoreOps::rope_cache`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn rope_cached_keys(
        &self,
        cache: &mut GpuCache,
        table: &GpuBuffer,
        first_row: usize,
        rows: usize,
        (n_heads, head_dim, rot_dims): (usize, usize, usize),
        layout: RopeLayout,
    ) {
        let heads = rows * n_heads;
        if heads == 0 {
            return;
        }
        let k = kernels::kv_rope_kernel(cache.ty);
        let neox = (layout == RopeLayout::Neox) as u32;
        let start = first_row * n_heads * head_dim;
        // Pairs stay inside their head; an f16 cache's heads are whole words.
        if !rot_dims.is_multiple_of(2) || rot_dims > head_dim || !head_dim.is_multiple_of(2) {
            self.gpu.fail(format!(
                "rope_cache: {rot_dims} rotated values of heads of {head_dim} (even numbers, at \
                 most the head)"
            ));
            return;
        }
        let sizes = [
            ("the cache", cache.len, start + heads * head_dim),
            ("the table", table.len, rot_dims),
        ];
        if !self.holds("rope_cache", &sizes) {
            return;
        }
        if cache.ty != CacheType::Q8_0 {
            self.run(
                &k,
                &[
                    heads as u32,
                    start as u32,
                    0,
                    head_dim as u32,
                    neox,
                    0,
                    0,
                    0,
                    0,
                    rot_dims as u32,
                ],
                &[bind(&cache.dev), bind(&table.dev)],
                grid(heads.div_ceil(256)),
            );
            return;
        }
        // A workgroup per span of whole heads, rotation runs and scale words (64 values).
        let span = head_dim / gcd(head_dim, 64) * 64;
        let len = heads * head_dim;
        if !head_dim.is_multiple_of(cache.rotation) || span > 512 {
            self.gpu.fail(format!(
                "rope_cache: heads of {head_dim} values in a q8_0 cache stored in rotations of {} \
                 (the GPU re-rotates heads of up to 256 values, multiples of the rotation)",
                cache.rotation
            ));
            return;
        }
        let spans = (start + len - 1) / span - start / span + 1;
        self.run(
            &k,
            &[
                len as u32,
                start as u32,
                0,
                head_dim as u32,
                neox,
                cache.scales(),
                cache.rotation as u32,
                cache.rot_scale().to_bits(),
                span as u32,
                rot_dims as u32,
            ],
            &[bind(&cache.dev), bind(&table.dev)],
            grid(spans),
        );
    }

    /// What `cache` holds, in GGML's layout: f32 or f16 values, or 34-byte Q8_0 blocks (scale,
    /// then 32 quants) of values stored rotated, as the CPU backend holds them. For tests and
    /// debugging: it waits for the GPU.
    pub fn cache_bytes(&self, cache: &GpuCache) -> Result<Vec<u8>> {
        let bytes = cache.ty.row_bytes(cache.len);
        let read = (bytes as u64).next_multiple_of(4);
        let raw = self
            .stream()
            .read(&self.gpu, &cache.dev.buf, 0, read)
            .ok_or_else(|| {
                Error::Unsupported("cannot read the KV cache back from the GPU".into())
            })?;
        if let Some(e) = self.gpu.take_error() {
            return Err(Error::Unsupported(e));
        }
        Ok(match cache.ty {
            CacheType::F32 | CacheType::F16 => raw[..bytes].to_vec(),
            CacheType::Q8_0 => {
                let (quants, scales) = raw.split_at(cache.len);
                let mut out = Vec::with_capacity(bytes);
                for (b, q) in quants.chunks_exact(32).enumerate() {
                    out.extend_from_slice(&scales[2 * b..2 * b + 2]);
                    out.extend_from_slice(q);
                }
                out
            }
        })
    }
}
