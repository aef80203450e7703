//! The CPU backend: weights stay in their GGML blocks inside the file mapping; matmuls quantize the
//! activations to 8 bits once and take integer dot products against the weight blocks, rows split
//! across a spinning pool of `threads` threads (pool.rs).

mod ggml_math;
mod hybrid;
mod pool;
pub mod quant;
mod simd;

use std::cell::RefCell;

use half::f16;
use half::slice::HalfFloatSliceExt;

use self::quant::{ActFormat, BlockQ8, BlockQ8K, act_format};
use super::{
    AttentionParams, Backend, CacheType, DeltaNetParams, ExpertMatmulParams, GateActivation,
    RopeLayout,
};
use crate::error::{Error, Result};
use crate::gguf::GgmlType;
use crate::tensor::Tensor;

pub struct CpuBackend {
    pool: pool::SpinPool,
    threads: usize,
    kernels: simd::Kernels,
}

/// A weight as the CPU uses it: the mapped bytes, plus vectors decoded to f32 once.
pub struct CpuWeight {
    tensor: Tensor,
    rows: usize,
    cols: usize,
    dense: Option<Vec<f32>>,
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
            kernels: simd::Kernels::detect(),
        })
    }

    pub fn threads(&self) -> usize {
        self.threads
    }
}

thread_local! {
    static Q8_SCRATCH: RefCell<Vec<BlockQ8>> = const { RefCell::new(Vec::new()) };
    static Q8K_SCRATCH: RefCell<Vec<BlockQ8K>> = const { RefCell::new(Vec::new()) };
}

/// A key or value cache in one of the `CacheType`s.
pub enum CpuCache {
    F32(Vec<f32>),
    F16(Vec<f16>),
}

impl CpuCache {
    pub fn cache_type(&self) -> CacheType {
        match self {
            CpuCache::F32(_) => CacheType::F32,
            CpuCache::F16(_) => CacheType::F16,
        }
    }

    /// `q` prepared for dot products with this cache's rows: rounded to f16 for an f16 cache, as
    /// llama.cpp multiplies it with its f16 keys.
    fn prepare_query(&self, kernels: &simd::Kernels, q: &mut [f32]) {
        if let CpuCache::F16(_) = self {
            kernels.round_f16(q);
        }
    }

    /// `q · self[start..start + q.len()]`.
    fn dot(&self, kernels: &simd::Kernels, q: &[f32], start: usize) -> f32 {
        match self {
            CpuCache::F32(c) => {
                let k = &c[start..start + q.len()];
                kernels.dot_f32(GgmlType::F32)(f32_bytes(k), q)
            }
            CpuCache::F16(c) => kernels.dot_f32_f16(q, &c[start..start + q.len()]),
        }
    }

    /// Probabilities prepared for the sum over this cache's rows: rounded to f16 for an f16
    /// cache, as llama.cpp multiplies them with its f16 values.
    fn prepare_weights(&self, kernels: &simd::Kernels, p: &mut [f32]) {
        if let CpuCache::F16(_) = self {
            kernels.round_f16(p);
        }
    }

    /// `out += a · self[start..start + out.len()]`.
    fn axpy(&self, kernels: &simd::Kernels, a: f32, start: usize, out: &mut [f32]) {
        match self {
            CpuCache::F32(c) => {
                let v = &c[start..start + out.len()];
                out.iter_mut().zip(v).for_each(|(o, &v)| *o += a * v);
            }
            CpuCache::F16(c) => kernels.axpy_f16(a, &c[start..start + out.len()], out),
        }
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

/// The dot-product kernels of one matmul: one weight row against one activation row, and, where
/// one exists, against four.
struct RowKernels<A> {
    one: fn(&[u8], &[A]) -> f32,
    four: Option<simd::Dot4<A>>,
}

/// Activation rows per tile: a tile of quantized activations stays in cache while each weight row
/// of a chunk is multiplied against it.
const ROW_TILE: usize = 16;

impl CpuBackend {
    /// Weight rows per parallel task.
    fn row_chunk(&self, m: usize, rows: usize) -> usize {
        let tasks = self.threads * if rows == 1 { 4 } else { 8 };
        m.div_ceil(tasks)
            .clamp(1, 256)
            .next_multiple_of(4)
            .min(m.max(1))
    }

    /// For each job, `out[i·m + r] = dot(W row r, activation row i)`; the rows of all jobs are
    /// split across the pool in one parallel pass (one fork-join for Q, K and V together). Within a
    /// task, activation rows go in tiles that stay in cache while each weight row of the task's
    /// chunk passes over them, four rows at a time where a four-row kernel exists.
    fn run_jobs<A: Sync>(&self, jobs: &[Job<A>], rows: usize, acts: &[A], act_stride: usize) {
        let total: usize = jobs.iter().map(|j| j.w.rows).sum();
        let chunk = self.row_chunk(total, rows);
        let tasks: Vec<(usize, usize, usize)> = jobs
            .iter()
            .enumerate()
            .flat_map(|(ji, j)| {
                (0..j.w.rows)
                    .step_by(chunk)
                    .map(move |r0| (ji, r0, (r0 + chunk).min(j.w.rows)))
            })
            .collect();
        let act = |i: usize| &acts[i * act_stride..(i + 1) * act_stride];
        self.pool.run(tasks.len(), &|t| {
            let (ji, r0, r1) = tasks[t];
            let Job { w, out, kernels } = &jobs[ji];
            let m = w.rows;
            // SAFETY: each (i, r) of a job's output is written by exactly one task (r is in this
            // task's chunk) and i·m + r < rows·m ≤ that output's length.
            let put = |i: usize, r: usize, v: f32| unsafe { *out.get().add(i * m + r) = v };
            for t0 in (0..rows).step_by(ROW_TILE) {
                let t1 = (t0 + ROW_TILE).min(rows);
                for r in r0..r1 {
                    let wrow = w.row(r);
                    let mut i = t0;
                    if let Some(dot4) = kernels.four {
                        while i + 4 <= t1 {
                            let v = dot4(wrow, [act(i), act(i + 1), act(i + 2), act(i + 3)]);
                            for (k, &vk) in v.iter().enumerate() {
                                put(i + k, r, vk);
                            }
                            i += 4;
                        }
                    }
                    for i in i..t1 {
                        put(i, r, (kernels.one)(wrow, act(i)));
                    }
                }
            }
        });
    }

    /// Matmuls of one input by weights that take the same activation format: the input is
    /// quantized once and all the weights' rows run in one parallel pass.
    fn matmul_group(&self, x: &[f32], ws: &[&CpuWeight], rows: usize, outs: &mut [&mut Vec<f32>]) {
        let k = ws[0].cols;
        let x = &x[..rows * k];
        let kernels = &self.kernels;
        let outs: Vec<SharedOut> = ws
            .iter()
            .zip(outs.iter_mut())
            .map(|(w, o)| SharedOut(o[..rows * w.rows].as_mut_ptr()))
            .collect();
        match act_format(ws[0].tensor.dtype) {
            ActFormat::F32 => {
                let jobs = jobs(ws, &outs, |t| RowKernels {
                    one: kernels.dot_f32(t),
                    four: None,
                });
                self.run_jobs(&jobs, rows, x, k);
            }
            ActFormat::Q8 => Q8_SCRATCH.with(|s| {
                let mut s = s.borrow_mut();
                let nb = k / 32;
                s.resize(rows * nb, BlockQ8::default());
                self.pool.for_each_chunk(&mut s[..], nb, &|r, q| {
                    kernels.quantize_q8(&x[r * k..(r + 1) * k], q)
                });
                let jobs = jobs(ws, &outs, |t| RowKernels {
                    one: kernels.dot_q8(t),
                    four: kernels.dot_q8_x4(t),
                });
                self.run_jobs(&jobs, rows, &s, nb);
            }),
            ActFormat::Q8K => Q8K_SCRATCH.with(|s| {
                let mut s = s.borrow_mut();
                let nb = k / 256;
                s.resize(rows * nb, BlockQ8K::default());
                self.pool.for_each_chunk(&mut s[..], nb, &|r, q| {
                    kernels.quantize_q8k(&x[r * k..(r + 1) * k], q)
                });
                let jobs = jobs(ws, &outs, |t| RowKernels {
                    one: kernels.dot_q8k(t),
                    four: kernels.dot_q8k_x4(t),
                });
                self.run_jobs(&jobs, rows, &s, nb);
            }),
        }
    }
}

/// The jobs of one pass: each weight with its output and the kernels for its type.
fn jobs<'a, A>(
    ws: &[&'a CpuWeight],
    outs: &[SharedOut],
    row_kernels: impl Fn(GgmlType) -> RowKernels<A>,
) -> Vec<Job<'a, A>> {
    ws.iter()
        .zip(outs)
        .map(|(&w, &out)| Job {
            w,
            out,
            kernels: row_kernels(w.tensor.dtype),
        })
        .collect()
}

/// One weight's share of a matmul pass: its rows, where they go, and the kernels for its type.
struct Job<'a, A> {
    w: &'a CpuWeight,
    out: SharedOut,
    kernels: RowKernels<A>,
}

impl Backend for CpuBackend {
    type Buffer = Vec<f32>;
    type Cache = CpuCache;
    type Weight = CpuWeight;

    fn describe(&self) -> String {
        format!("CPU ({}, {} threads)", self.kernels.name(), self.threads)
    }

    fn weight(&self, t: &Tensor) -> Result<CpuWeight> {
        let cols = t.row_len();
        let rows = t.n_rows();
        let dense = (t.dims.len() == 1).then(|| t.to_f32());
        Ok(CpuWeight {
            tensor: t.clone(),
            rows,
            cols,
            dense,
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

    fn embed(&self, table: &CpuWeight, ids: &[u32], scale: f32, out: &mut Vec<f32>) {
        let dim = table.cols;
        for (i, &id) in ids.iter().enumerate() {
            let row = &mut out[i * dim..(i + 1) * dim];
            table.tensor.row_to_f32(id as usize, row);
            if scale != 1.0 {
                row.iter_mut().for_each(|v| *v *= scale);
            }
        }
    }

    fn rms_norm(&self, x: &mut Vec<f32>, w: &CpuWeight, rows: usize, eps: f32) {
        let w = w.dense();
        let dim = w.len();
        // llama.cpp's arithmetic: squares in f32 summed in f64, mean and scale in f32.
        let norm = |row: &mut [f32]| {
            let sum: f64 = row.iter().map(|&v| (v * v) as f64).sum();
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
        self.matmul_group(x, &[w], rows, &mut [out]);
    }

    fn matmul_many(
        &self,
        x: &Vec<f32>,
        ws: &[&CpuWeight],
        rows: usize,
        outs: &mut [&mut Vec<f32>],
    ) {
        // One pass per activation format (weights of one layer usually share it).
        let mut pending: Vec<(&CpuWeight, &mut Vec<f32>)> = ws
            .iter()
            .copied()
            .zip(outs.iter_mut().map(|o| &mut **o))
            .collect();
        while let Some(&(first, _)) = pending.first() {
            let format = act_format(first.tensor.dtype);
            let (group, rest): (Vec<_>, Vec<_>) = pending
                .into_iter()
                .partition(|(w, _)| act_format(w.tensor.dtype) == format);
            let (gw, mut go): (Vec<&CpuWeight>, Vec<&mut Vec<f32>>) = group.into_iter().unzip();
            self.matmul_group(x, &gw, rows, &mut go);
            pending = rest;
        }
    }

    fn add_bias(&self, x: &mut Vec<f32>, b: &CpuWeight, rows: usize) {
        let b = b.dense();
        for row in x[..rows * b.len()].chunks_mut(b.len()) {
            row.iter_mut().zip(b).for_each(|(v, &bv)| *v += bv);
        }
    }

    fn rope(
        &self,
        x: &mut Vec<f32>,
        table: &Vec<f32>,
        rows: usize,
        n_heads: usize,
        head_dim: usize,
        layout: RopeLayout,
    ) {
        let half = head_dim / 2;
        let width = n_heads * head_dim;
        for (r, row) in x[..rows * width].chunks_mut(width).enumerate() {
            let cs = &table[r * head_dim..(r + 1) * head_dim];
            for head in row.chunks_mut(head_dim) {
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
        }
    }

    fn cache(&self, len: usize, ty: CacheType) -> Result<CpuCache> {
        let too_large = || {
            Error::Unsupported(format!(
                "cannot allocate {} MiB for the KV cache",
                ty.row_bytes(len) / (1 << 20)
            ))
        };
        Ok(match ty {
            CacheType::F32 => {
                let mut v = Vec::new();
                v.try_reserve_exact(len).map_err(|_| too_large())?;
                v.resize(len, 0.0);
                CpuCache::F32(v)
            }
            CacheType::F16 => {
                let mut v = Vec::new();
                v.try_reserve_exact(len).map_err(|_| too_large())?;
                v.resize(len, f16::ZERO);
                CpuCache::F16(v)
            }
        })
    }

    fn store_rows(
        &self,
        src: &Vec<f32>,
        dst: &mut CpuCache,
        dst_row: usize,
        rows: usize,
        width: usize,
    ) {
        let (src, range) = (
            &src[..rows * width],
            dst_row * width..(dst_row + rows) * width,
        );
        match dst {
            CpuCache::F32(d) => d[range].copy_from_slice(src),
            CpuCache::F16(d) => d[range].convert_from_f32_slice(src),
        }
    }

    fn copy_rows_from(
        &self,
        src: &Vec<f32>,
        src_row: usize,
        dst: &mut Vec<f32>,
        rows: usize,
        width: usize,
    ) {
        dst[..rows * width].copy_from_slice(&src[src_row * width..(src_row + rows) * width]);
    }

    fn attention(
        &self,
        q: &Vec<f32>,
        k_cache: &CpuCache,
        v_cache: &CpuCache,
        out: &mut Vec<f32>,
        p: &AttentionParams,
    ) {
        let hd = p.head_dim;
        let q_width = p.n_heads * hd;
        let kv_width = p.n_kv_heads * hd;
        let group = p.n_heads / p.n_kv_heads;
        let kernels = &self.kernels;
        let out = &mut out[..p.rows * q_width];
        {
            self.pool.for_each_chunk(out, hd, &|task, o| {
                let (i, h) = (task / p.n_heads, task % p.n_heads);
                let pos = p.start_pos + i;
                let lo = p.window.map_or(0, |w| (pos + 1).saturating_sub(w));
                let kvh = h / group;
                let mut qh = q[i * q_width + h * hd..i * q_width + (h + 1) * hd].to_vec();
                k_cache.prepare_query(kernels, &mut qh);
                let mut scores: Vec<f32> = (lo..=pos)
                    .map(|j| k_cache.dot(kernels, &qh, j * kv_width + kvh * hd) * p.scale)
                    .collect();
                let max = scores.iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
                let total = kernels.exp_sub(&mut scores, max);
                let inv = (1.0 / total) as f32;
                scores.iter_mut().for_each(|s| *s *= inv);
                v_cache.prepare_weights(kernels, &mut scores);
                o.fill(0.0);
                for (j, &pj) in (lo..=pos).zip(&scores) {
                    v_cache.axpy(kernels, pj, j * kv_width + kvh * hd, o);
                }
            });
        }
    }

    fn gated_activation(
        &self,
        gate: &mut Vec<f32>,
        up: &Vec<f32>,
        len: usize,
        act: GateActivation,
    ) {
        let kernels = &self.kernels;
        let apply = |g: &mut [f32], u: &[f32]| match act {
            GateActivation::Silu => kernels.silu_mul(g, u),
            GateActivation::GeluTanh => {
                for (gv, &uv) in g.iter_mut().zip(u) {
                    *gv = ggml_math::gelu(*gv) * uv;
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
        x[..len]
            .iter_mut()
            .zip(&y[..len])
            .for_each(|(a, &b)| *a += b);
    }

    // Hybrid recurrent and mixture-of-experts models: the code is in hybrid.rs.

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
        hybrid::rope(x, table, rows, n_heads, head_dim, rot_dims, layout);
    }

    fn mul_sigmoid(
        &self,
        x: &mut Vec<f32>,
        gate: &Vec<f32>,
        rows: usize,
        width: usize,
        gate_width: usize,
    ) {
        hybrid::mul_sigmoid(x, gate, rows, width, gate_width);
    }

    fn conv_step(
        &self,
        x: &Vec<f32>,
        kernel: &CpuWeight,
        state: &mut Vec<f32>,
        out: &mut Vec<f32>,
        rows: usize,
        channels: usize,
    ) {
        self.conv(x, kernel, state, out, rows, channels);
    }

    fn gated_delta_net(
        &self,
        qkv: &Vec<f32>,
        alpha: &Vec<f32>,
        beta: &Vec<f32>,
        a: &CpuWeight,
        dt_bias: &CpuWeight,
        state: &mut Vec<f32>,
        out: &mut Vec<f32>,
        p: &DeltaNetParams,
    ) {
        self.delta_net(qkv, alpha, beta, a, dt_bias, state, out, p);
    }

    fn moe_route(
        &self,
        logits: &Vec<f32>,
        rows: usize,
        n_expert: usize,
        n_used: usize,
        selected: &mut Vec<f32>,
        weights: &mut Vec<f32>,
    ) {
        self.route(logits, rows, n_expert, n_used, selected, weights);
    }

    fn expert_matmul(
        &self,
        x: &Vec<f32>,
        w: &CpuWeight,
        selected: &Vec<f32>,
        out: &mut Vec<f32>,
        p: &ExpertMatmulParams,
    ) {
        self.expert_matmul_cpu(x, w, selected, out, p);
    }

    fn moe_combine(
        &self,
        y: &Vec<f32>,
        weights: &Vec<f32>,
        rows: usize,
        n_used: usize,
        width: usize,
        out: &mut Vec<f32>,
    ) {
        hybrid::moe_combine(y, weights, rows, n_used, width, out);
    }
}
