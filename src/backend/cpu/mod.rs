//! The CPU backend: weights stay in their GGML blocks inside the file mapping (or are repacked at
//! load for the GEMM kernels); matmuls quantize the activations to 8 bits once and take integer
//! dot products against the weight blocks, rows split across a spinning pool of `threads` threads.
//!
//! The parts: `kernels.rs` is the table of kernels for the instruction-set level this CPU runs,
//! filled by `x86/`, `arm/` or `portable.rs`; `matmul.rs` schedules matmul passes over the pool
//! (`pool.rs`), `attention.rs` attention over the KV cache (`cache.rs`), `recurrent.rs` and
//! `moe.rs` the ops of DeltaNet and expert layers; `repack.rs` is the interleaved weight layout
//! of the GEMM kernels (`gemm/`), which are written once against the SIMD interface of `isa.rs`.
//! This file holds the backend itself and its core ops.

#[cfg(target_arch = "aarch64")]
mod arm;
mod attention;
mod cache;
mod gemm;
pub mod ggml_math;
mod isa;
mod kernels;
mod matmul;
mod moe;
mod pool;
mod portable;
mod portable_iq;
mod profile;
mod recurrent;
mod repack;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use self::cache::CpuCache;
pub use self::kernels::ActFormat;
use self::kernels::Kernels;
use self::matmul::matmul_name;
use super::{AttentionParams, CacheType, CoreOps, GateActivation, RopeLayout};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// The activations a weight of type `t` is multiplied with (llama.cpp's `vec_dot_type`): the
/// same at every level, so the GPU backend rounds its activations to match.
pub fn activation_format(t: crate::gguf::GgmlType) -> ActFormat {
    portable::type_kernels(t).format()
}

/// The kernels of the best level this CPU runs.
fn detect_kernels() -> Kernels {
    #[cfg(target_arch = "x86_64")]
    if let Some(level) = x86::detect() {
        // SAFETY: `detect` returns only a level this CPU has.
        return unsafe { x86::kernels(level) };
    }
    #[cfg(target_arch = "aarch64")]
    if let Some(level) = arm::detect() {
        // SAFETY: `detect` returns only a level this CPU has.
        return unsafe { arm::kernels(level) };
    }
    portable::kernels()
}

pub struct CpuBackend {
    pool: pool::SpinPool,
    threads: usize,
    kernels: Kernels,
    profiler: profile::Profiler,
    /// Whether matrices are repacked at load where the CPU has packed kernels.
    repack: bool,
}

/// A weight as the CPU uses it: the mapped bytes, plus vectors decoded to f32 once, or, where the
/// CPU has kernels for it, the matrix repacked (`repack.rs`), its mapped bytes then left unread.
pub struct CpuWeight {
    tensor: Tensor,
    rows: usize,
    cols: usize,
    dense: Option<Vec<f32>>,
    packed: Option<repack::Packed>,
}

impl CpuWeight {
    fn row(&self, r: usize) -> &[u8] {
        let rb = self.tensor.row_bytes();
        &self.tensor.bytes()[r * rb..(r + 1) * rb]
    }

    fn dense(&self) -> &[f32] {
        self.dense
            .as_deref()
            .expect("vector weights are decoded at upload")
    }
}

impl CpuBackend {
    /// A backend running on `threads` workers (0: one per core).
    pub fn new(threads: usize) -> Result<CpuBackend> {
        let threads = if threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            threads
        };
        let pool = pool::SpinPool::new(threads)
            .map_err(|e| Error::Unsupported(format!("cannot start {threads} threads: {e}")))?;
        Ok(CpuBackend {
            pool,
            threads,
            kernels: detect_kernels(),
            profiler: profile::Profiler::default(),
            repack: true,
        })
    }

    /// This backend with weights left as the file holds them (`false`): loading only maps them,
    /// so it starts sooner and experts no token uses are never read, but matmuls run on the
    /// slower row kernels (llama.cpp's `--no-repack`).
    pub fn with_repacking(mut self, on: bool) -> CpuBackend {
        self.repack = on;
        self
    }

    pub fn threads(&self) -> usize {
        self.threads
    }
}

/// Rotate one head by the (cos, sin) pairs `cs` (RoPE), its dimensions paired as `layout` says.
fn rotate_head(head: &mut [f32], cs: &[f32], layout: RopeLayout) {
    let half = head.len() / 2;
    for i in 0..half {
        let (c, s) = (cs[2 * i], cs[2 * i + 1]);
        let (a, b) = match layout {
            RopeLayout::Interleaved => (2 * i, 2 * i + 1),
            RopeLayout::Neox => (i, i + half),
        };
        let (x0, x1) = (head[a], head[b]);
        head[a] = x0 * c - x1 * s;
        head[b] = x0 * s + x1 * c;
    }
}

/// The bytes of an f32 slice, for the kernels that read weight rows as bytes.
fn f32_bytes(x: &[f32]) -> &[u8] {
    // SAFETY: any f32 is four initialized bytes, u8 has alignment 1, and the length is exact.
    unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<u8>(), std::mem::size_of_val(x)) }
}

/// A pointer that pool tasks may share to write disjoint parts of one output.
#[derive(Clone, Copy)]
struct SharedOut(*mut f32);

unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// Through a method, so closures capture the Send wrapper rather than the raw pointer.
    fn get(self) -> *mut f32 {
        self.0
    }
}

impl CoreOps for CpuBackend {
    type Buffer = Vec<f32>;
    type Cache = CpuCache;
    type Weight = CpuWeight;

    fn describe(&self) -> String {
        let packing = if self.repack {
            ""
        } else {
            ", weights not repacked"
        };
        format!(
            "CPU ({}, {} threads{packing})",
            self.kernels.name(),
            self.threads
        )
    }

    fn set_profiling(&self, on: bool) {
        self.profiler.set(on);
        self.pool.reset_stats(on);
    }

    fn profile(&self) -> Option<super::Profile> {
        Some(self.profiler.profile(vec![
            ("parallel jobs", self.pool.jobs()),
            ("thread wait at job ends (µs)", self.pool.idle_us()),
        ]))
    }

    fn weight(&self, t: &Tensor) -> Result<CpuWeight> {
        let cols = t.row_len();
        let rows = t.n_rows();
        let dense = (t.dims.len() == 1).then(|| t.to_f32());
        // Packed a slice of groups at a time, each slice's mapped pages dropped behind it, so
        // the file's pages and the packed copy are never both resident for more than a slice.
        let group_src = t.row_bytes() * repack::ROWS;
        // A stack of expert matrices (3-D) is repacked as one matrix when no row group straddles
        // two experts; expert matmuls then run on the packed kernels too (moe.rs).
        let matrix =
            t.dims.len() == 2 || (t.dims.len() == 3 && t.dims[1].is_multiple_of(repack::ROWS));
        // F16 stacks of experts stay as they are: the expert passes have no panel kernel.
        let panels_only_2d = t.dtype != crate::gguf::GgmlType::F16 || t.dims.len() == 2;
        let packed = if matrix && panels_only_2d && self.packs(t.dtype) {
            repack::pack(t.dtype, t.bytes(), rows, cols, &|out, group_bytes, f| {
                let per_slice = ((8 << 20) / group_bytes).max(1);
                for (i, slice) in out.chunks_mut(per_slice * group_bytes).enumerate() {
                    let g0 = i * per_slice;
                    self.pool
                        .for_each_chunk(slice, group_bytes, &|g, out| f(g0 + g, out));
                    let g1 = g0 + slice.len() / group_bytes;
                    t.release_pages(g0 * group_src..g1 * group_src);
                }
            })
        } else {
            None
        };
        Ok(CpuWeight {
            tensor: t.clone(),
            rows,
            cols,
            dense,
            packed,
        })
    }

    fn embedding_table(&self, t: &Tensor) -> Result<CpuWeight> {
        // Not repacked: a lookup reads only its rows, so most of the table never becomes resident.
        Ok(CpuWeight {
            tensor: t.clone(),
            rows: t.n_rows(),
            cols: t.row_len(),
            dense: None,
            packed: None,
        })
    }

    fn buffer(&self, len: usize) -> Result<Vec<f32>> {
        let mut v = Vec::new();
        v.try_reserve_exact(len).map_err(|_| {
            Error::Unsupported(format!(
                "cannot allocate {} MiB of memory",
                len * 4 / (1 << 20)
            ))
        })?;
        v.resize(len, 0.0);
        Ok(v)
    }

    fn upload(&self, dst: &mut Vec<f32>, src: &[f32]) {
        dst[..src.len()].copy_from_slice(src);
    }

    fn download(&self, src: &Vec<f32>, offset: usize, out: &mut [f32]) {
        out.copy_from_slice(&src[offset..offset + out.len()]);
    }

    fn host_values<'a>(&self, b: &'a Vec<f32>) -> Option<&'a [f32]> {
        Some(b)
    }

    fn host_values_mut<'a>(&self, b: &'a mut Vec<f32>) -> Option<&'a mut [f32]> {
        Some(b)
    }

    fn embed(&self, table: &CpuWeight, ids: &[u32], scale: f32, out: &mut Vec<f32>) {
        let _span = self.profiler.span("embed");
        let dim = table.cols;
        let mut bytes = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            let row = &mut out[i * dim..(i + 1) * dim];
            match &table.packed {
                Some(p) => {
                    bytes.resize(table.tensor.row_bytes(), 0);
                    repack::unpack_row(p, id as usize, &mut bytes);
                    crate::gguf::dequant::dequantize(table.tensor.dtype, &bytes, row);
                }
                None => table.tensor.row_to_f32(id as usize, row),
            }
            if scale != 1.0 {
                row.iter_mut().for_each(|v| *v *= scale);
            }
        }
    }

    fn rms_norm(&self, x: &mut Vec<f32>, w: &CpuWeight, rows: usize, eps: f32) {
        let _span = self.profiler.span("rms_norm");
        let w = w.dense();
        let dim = w.len();
        // llama.cpp's arithmetic: squares in f32 summed in f64, mean and scale in f32.
        let norm = |row: &mut [f32]| {
            let sum = ggml_math::sum_of_squares(row);
            let mean = (sum / dim as f64) as f32;
            let scale = 1.0 / (mean + eps).sqrt();
            for (v, &g) in row.iter_mut().zip(w) {
                *v = *v * scale * g;
            }
        };
        let x = &mut x[..rows * dim];
        if rows * dim >= 1 << 16 {
            self.pool.for_each_chunk(x, dim, &|_, row| norm(row));
        } else {
            x.chunks_mut(dim).for_each(norm);
        }
    }

    fn matmul(&self, x: &Vec<f32>, w: &CpuWeight, rows: usize, out: &mut Vec<f32>) {
        let _span = self.profiler.span(matmul_name(w));
        self.matmul_group(x, &[w], rows, &mut [out]);
    }

    fn matmul_many(
        &self,
        x: &Vec<f32>,
        ws: &[&CpuWeight],
        rows: usize,
        outs: &mut [&mut Vec<f32>],
    ) {
        let _span = self.profiler.span(matmul_name(ws[0]));
        // One pass per activation format (weights of one layer usually share it).
        let mut pending: Vec<(&CpuWeight, &mut Vec<f32>)> = ws
            .iter()
            .copied()
            .zip(outs.iter_mut().map(|o| &mut **o))
            .collect();
        while let Some(&(first, _)) = pending.first() {
            let format = |w: &CpuWeight| self.kernels.of(w.tensor.dtype).format();
            let first = format(first);
            let (group, rest): (Vec<_>, Vec<_>) =
                pending.into_iter().partition(|(w, _)| format(w) == first);
            let (gw, mut go): (Vec<&CpuWeight>, Vec<&mut Vec<f32>>) = group.into_iter().unzip();
            self.matmul_group(x, &gw, rows, &mut go);
            pending = rest;
        }
    }

    fn add_bias(&self, x: &mut Vec<f32>, b: &CpuWeight, rows: usize) {
        let _span = self.profiler.span("add_bias");
        let b = b.dense();
        for row in x[..rows * b.len()].chunks_mut(b.len()) {
            row.iter_mut().zip(b).for_each(|(v, &bv)| *v += bv);
        }
    }

    fn scale_rows(&self, x: &mut Vec<f32>, scales: &Vec<f32>, rows: usize, width: usize) {
        let _span = self.profiler.span("scale_rows");
        for (row, &f) in x[..rows * width].chunks_mut(width).zip(scales) {
            row.iter_mut().for_each(|v| *v *= f);
        }
    }

    fn rope_partial(
        &self,
        x: &mut Vec<f32>,
        table: &Vec<f32>,
        rows: usize,
        n_heads: usize,
        head_dim: usize,
        rot_dims: usize,
        layout: RopeLayout,
    ) {
        let _span = self.profiler.span("rope");
        let width = n_heads * head_dim;
        for (r, row) in x[..rows * width].chunks_mut(width).enumerate() {
            let cs = &table[r * rot_dims..(r + 1) * rot_dims];
            for head in row.chunks_mut(head_dim) {
                rotate_head(&mut head[..rot_dims], cs, layout);
            }
        }
    }

    fn cache(&self, len: usize, ty: CacheType, rotation: usize) -> Result<CpuCache> {
        CpuCache::zeroed(len, ty, rotation)
    }

    fn store_rows(
        &self,
        src: &Vec<f32>,
        dst: &mut CpuCache,
        dst_row: usize,
        rows: usize,
        width: usize,
    ) {
        let _span = self.profiler.span("store_rows");
        dst.store(&self.kernels, &src[..rows * width], dst_row * width);
    }

    fn move_cache_rows(
        &self,
        cache: &mut CpuCache,
        src_row: usize,
        dst_row: usize,
        rows: usize,
        width: usize,
    ) {
        cache.copy_within(src_row * width, dst_row * width, rows * width);
    }

    fn rope_cache(
        &self,
        cache: &mut CpuCache,
        table: &Vec<f32>,
        first_row: usize,
        rows: usize,
        n_heads: usize,
        head_dim: usize,
        rot_dims: usize,
        layout: RopeLayout,
    ) {
        let width = n_heads * head_dim;
        let cs = &table[..rot_dims];
        let mut row = vec![0.0f32; width];
        for r in first_row..first_row + rows {
            cache.read(r * width, &mut row);
            for head in row.chunks_mut(head_dim) {
                rotate_head(&mut head[..rot_dims], cs, layout);
            }
            cache.store(&self.kernels, &row, r * width);
        }
    }

    fn copy_rows(
        &self,
        src: &Vec<f32>,
        src_row: usize,
        dst: &mut Vec<f32>,
        dst_row: usize,
        rows: usize,
        width: usize,
    ) {
        let _span = self.profiler.span("copy_rows");
        dst[dst_row * width..(dst_row + rows) * width]
            .copy_from_slice(&src[src_row * width..(src_row + rows) * width]);
    }

    fn attention(
        &self,
        q: &Vec<f32>,
        k_cache: &CpuCache,
        v_cache: &CpuCache,
        out: &mut Vec<f32>,
        p: &AttentionParams,
        sinks: Option<&CpuWeight>,
    ) {
        let _span = self.profiler.span("attention");
        self.attention_impl(q, k_cache, v_cache, out, p, sinks.map(CpuWeight::dense));
    }

    fn gated_activation(
        &self,
        gate: &mut Vec<f32>,
        up: &Vec<f32>,
        len: usize,
        act: GateActivation,
    ) {
        let _span = self.profiler.span("gated_activation");
        let kernels = &self.kernels;
        let apply = |g: &mut [f32], u: &[f32]| match act {
            GateActivation::Silu => (kernels.silu_mul)(g, u),
            GateActivation::GeluTanh => {
                ggml_math::gelu_slice(g);
                for (gv, &uv) in g.iter_mut().zip(u) {
                    *gv *= uv;
                }
            }
            GateActivation::SwigluOai => {
                let (alpha, limit) = (GateActivation::OAI_ALPHA, GateActivation::OAI_LIMIT);
                for (gv, &uv) in g.iter_mut().zip(u) {
                    let x = gv.min(limit);
                    let y = uv.clamp(-limit, limit);
                    *gv = x / (1.0 + ggml_math::expf(alpha * -x)) * (y + 1.0);
                }
            }
        };
        let (g, u) = (&mut gate[..len], &up[..len]);
        if len >= 1 << 15 {
            const CHUNK: usize = 1 << 12;
            self.pool.for_each_chunk(g, CHUNK, &|i, g| {
                apply(g, &u[i * CHUNK..i * CHUNK + g.len()])
            });
        } else {
            apply(g, u);
        }
    }

    fn add(&self, x: &mut Vec<f32>, y: &Vec<f32>, len: usize) {
        let _span = self.profiler.span("add");
        x[..len]
            .iter_mut()
            .zip(&y[..len])
            .for_each(|(a, &b)| *a += b);
    }

    fn mul_sigmoid(
        &self,
        x: &mut Vec<f32>,
        gate: &Vec<f32>,
        rows: usize,
        width: usize,
        gate_width: usize,
    ) {
        let _span = self.profiler.span("mul_sigmoid");
        let group = width / gate_width;
        for (row, g) in x[..rows * width]
            .chunks_mut(width)
            .zip(gate.chunks(gate_width))
        {
            for (xs, &gv) in row.chunks_mut(group).zip(g) {
                let s = ggml_math::sigmoid(gv);
                xs.iter_mut().for_each(|v| *v *= s);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::portable::tests::{activations, random_row};
    use super::*;
    use crate::gguf::GgmlType;

    /// With repacking off, weights stay as the file holds them and matmuls, on the row kernels,
    /// agree with the repacked backend's (within the seeds' 1e-4 relative).
    #[test]
    fn a_backend_without_repacking_keeps_the_file_layout_and_agrees() {
        let packing = CpuBackend::new(2).unwrap();
        let plain = CpuBackend::new(2).unwrap().with_repacking(false);
        assert!(plain.describe().contains("not repacked"));
        let (rows, k, tokens) = (64, 512, 5);
        for t in [
            GgmlType::Q4_0,
            GgmlType::Q8_0,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
            GgmlType::F16,
        ] {
            let bytes: Vec<u8> = (0..rows)
                .flat_map(|r| random_row(t, k, r as u64 + 3))
                .collect();
            let tensor = Tensor::from_bytes("w", t, vec![k, rows], bytes);
            let (a, b) = (
                packing.weight(&tensor).unwrap(),
                plain.weight(&tensor).unwrap(),
            );
            assert_eq!(a.packed.is_some(), packing.packs(t), "{t}");
            assert!(b.packed.is_none(), "{t} left as mapped");
            let x = activations(tokens * k, 9);
            let (mut ya, mut yb) = (vec![0.0; tokens * rows], vec![0.0; tokens * rows]);
            packing.matmul(&x, &a, tokens, &mut ya);
            plain.matmul(&x, &b, tokens, &mut yb);
            for (p, q) in ya.iter().zip(&yb) {
                assert!((p - q).abs() <= 1e-4 * (1.0 + q.abs()), "{t}: {p} vs {q}");
            }
        }
    }

    /// F16 and F32 weights over many tokens (the F16 GEMM's 3×4 tiles, activations rounded once)
    /// give each token the bits it gets alone, at every level, tails shorter than a vector
    /// included: 25 rows by 13 tokens leave a row and a token past the tiles; 100 by 70 (K =
    /// 2,051) span two of the GEMM's task blocks each way, the second with rows and tokens past
    /// its tiles.
    #[test]
    fn unquantized_matmuls_over_many_tokens_equal_one_token_at_a_time() {
        for kernels in crate::backend::cpu::kernels::tests::every_level() {
            let mut cpu = CpuBackend::new(2).unwrap();
            cpu.kernels = kernels;
            unquantized_matmuls_agree(&cpu);
        }
    }

    fn unquantized_matmuls_agree(cpu: &CpuBackend) {
        for (rows, tokens, k) in [(25, 13, 64), (25, 13, 75), (100, 70, 2051), (96, 70, 2051)] {
            for t in [GgmlType::F16, GgmlType::F32] {
                let bytes: Vec<u8> = (0..rows)
                    .flat_map(|r| random_row(t, k, r as u64 + 11))
                    .collect();
                let w = cpu
                    .weight(&Tensor::from_bytes("w", t, vec![k, rows], bytes))
                    .unwrap();
                let x = activations(tokens * k, 5);
                let mut all = vec![0.0; tokens * rows];
                cpu.matmul(&x, &w, tokens, &mut all);
                for i in 0..tokens {
                    let mut one = vec![0.0; rows];
                    cpu.matmul(&x[i * k..(i + 1) * k].to_vec(), &w, 1, &mut one);
                    assert_eq!(
                        &all[i * rows..(i + 1) * rows],
                        &one[..],
                        "{}: {t} k={k} token {i}",
                        cpu.kernels.name()
                    );
                }
            }
        }
    }

    /// Partial RoPE rotates (i, i + rot/2) pairs of the leading dims by the table and leaves the
    /// rest as they were.
    #[test]
    fn partial_rope_rotates_only_the_leading_dims() {
        let be = CpuBackend::new(1).unwrap();
        let (rows, heads, hd, rot) = (3, 2, 8, 4);
        let x = activations(rows * heads * hd, 11);
        let small = activations(rows * rot, 13);
        let mut p = x.clone();
        be.rope_partial(&mut p, &small, rows, heads, hd, rot, RopeLayout::Neox);
        for r in 0..rows {
            for h in 0..heads {
                let o = (r * heads + h) * hd;
                assert_eq!(&p[o + rot..o + hd], &x[o + rot..o + hd], "tail untouched");
                for i in 0..rot / 2 {
                    let (c, s) = (small[r * rot + 2 * i], small[r * rot + 2 * i + 1]);
                    let (x0, x1) = (x[o + i], x[o + i + rot / 2]);
                    assert_eq!(p[o + i], x0 * c - x1 * s);
                    assert_eq!(p[o + i + rot / 2], x0 * s + x1 * c);
                }
            }
        }
    }
}
