//! The CPU backend: weights stay in their GGML blocks inside the file mapping; matmuls quantize the
//! activations to 8 bits once and take integer dot products against the weight blocks, rows split
//! across a spinning pool of `threads` threads (pool.rs).

mod attention;
#[cfg(target_arch = "x86_64")]
mod gemm;
mod ggml_math;
mod moe;
#[cfg(target_arch = "aarch64")]
mod neon;
mod pool;
mod profile;
pub mod quant;
mod recurrent;
mod repack;
mod simd;

use std::cell::RefCell;

use half::f16;
use half::slice::HalfFloatSliceExt;

use self::quant::{ActFormat, BlockQ8, BlockQ8K, act_format};
use super::{AttentionParams, CacheType, CoreOps, GateActivation, RopeLayout};
use crate::error::{Error, Result};
use crate::gguf::GgmlType;
use crate::tensor::Tensor;

pub struct CpuBackend {
    pool: pool::SpinPool,
    threads: usize,
    kernels: simd::Kernels,
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
            kernels: simd::Kernels::detect(),
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

thread_local! {
    static Q8_SCRATCH: RefCell<Vec<BlockQ8>> = const { RefCell::new(Vec::new()) };
    static Q8K_SCRATCH: RefCell<Vec<BlockQ8K>> = const { RefCell::new(Vec::new()) };
    /// Σ of each Q8 block's values (the packed kernels' offset correction).
    static XSUM_SCRATCH: RefCell<Vec<i32>> = const { RefCell::new(Vec::new()) };
}

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
    fn prepare_query(&self, kernels: &simd::Kernels, q: &[f32]) -> CacheQuery {
        match self {
            CpuCache::F32(_) => CacheQuery::F32(q.to_vec()),
            CpuCache::F16(_) => {
                let mut q = q.to_vec();
                kernels.round_f16(&mut q);
                CacheQuery::F32(q)
            }
            CpuCache::Q8_0 { rotation, .. } => {
                let mut q = q.to_vec();
                rotate(&mut q, *rotation);
                let mut blocks = vec![BlockQ8::default(); q.len() / Q8_0_LEN];
                kernels.quantize_q8(&q, &mut blocks);
                CacheQuery::Q8(blocks)
            }
        }
    }

    /// `q · self[start..start + len]` for a query of `len` values.
    fn dot(&self, kernels: &simd::Kernels, q: &CacheQuery, start: usize) -> f32 {
        match (self, q) {
            (CpuCache::F32(c), CacheQuery::F32(q)) => {
                let k = &c[start..start + q.len()];
                kernels.dot_f32(GgmlType::F32)(f32_bytes(k), q)
            }
            (CpuCache::F16(c), CacheQuery::F32(q)) => {
                kernels.dot_f32_f16(q, &c[start..start + q.len()])
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
    fn prepare_weights(&self, kernels: &simd::Kernels, p: &mut [f32]) {
        if let CpuCache::F16(_) = self {
            kernels.round_f16(p);
        }
    }

    /// `out += a · self[start..start + out.len()]` (in the cache's rotated basis: `finish_output`
    /// rotates the sum back).
    fn axpy(&self, kernels: &simd::Kernels, a: f32, start: usize, out: &mut [f32]) {
        match self {
            CpuCache::F32(c) => {
                let v = &c[start..start + out.len()];
                out.iter_mut().zip(v).for_each(|(o, &v)| *o += a * v);
            }
            CpuCache::F16(c) => kernels.axpy_f16(a, &c[start..start + out.len()], out),
            CpuCache::Q8_0 { blocks, .. } => {
                kernels.axpy_q8_0(a, &blocks[q8_0_range(start, out.len())], out)
            }
        }
    }

    /// Finish a sum of `axpy`s: rotate it back if the values are stored rotated.
    fn finish_output(&self, out: &mut [f32]) {
        if let CpuCache::Q8_0 { rotation, .. } = self {
            rotate(out, *rotation);
        }
    }

    /// Write `src` at value `start`, rounded to the cache's type (a Q8_0 cache rotates it and
    /// quantizes it as llama.cpp's x86 `quantize_row_q8_0` does).
    fn store(&mut self, kernels: &simd::Kernels, src: &[f32], start: usize) {
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
                        kernels.quantize_q8(xb, &mut q);
                        quant::pack_q8_0(&q[0], out);
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
    fn copy_within(&mut self, src: usize, dst: usize, len: usize) {
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
        quant::hadamard(x, rotation);
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

/// Tokens per block of a packed matmul: as many as keep their activations (`stride` blocks of
/// `A` each) within 256 KB of the L2 cache, a multiple of the AVX-512 tile of 8.
#[cfg(target_arch = "x86_64")]
fn packed_token_block<A>(stride: usize) -> usize {
    const L2_BUDGET: usize = 256 << 10;
    (L2_BUDGET / (stride * std::mem::size_of::<A>()).max(1))
        .next_multiple_of(8)
        .max(8)
}

/// The profile name of a matmul by the weight's role, from its tensor name.
fn matmul_name(w: &CpuWeight) -> &'static str {
    let name = w.tensor.name.as_str();
    [
        ("attn_q.weight", "matmul attn_qkv"),
        ("attn_output.weight", "matmul attn_output"),
        ("ffn_gate.weight", "matmul ffn_gate_up"),
        ("ffn_down.weight", "matmul ffn_down"),
        ("output.weight", "matmul output"),
        ("token_embd.weight", "matmul output"),
    ]
    .iter()
    .find(|(suffix, _)| name.ends_with(suffix))
    .map_or("matmul other", |&(_, op)| op)
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

/// Bytes of weights a generation thread streams between checks for its share of a matmul pass
/// (`SpinPool::run_split`).
const STREAM_PIECE: usize = 64 << 10;

/// Where each of several item lists starts when they are numbered as one.
fn list_starts(lens: impl Iterator<Item = usize>) -> Vec<usize> {
    lens.scan(0, |at, len| {
        let start = *at;
        *at += len;
        Some(start)
    })
    .collect()
}

/// The list (index into `starts`) and the index within it of item `item` of the joined lists.
fn locate(starts: &[usize], item: usize) -> (usize, usize) {
    let list = starts.partition_point(|&s| s <= item) - 1;
    (list, item - starts[list])
}

impl CpuBackend {
    /// Weight rows per parallel task of a matmul over several activation rows.
    fn row_chunk(&self, m: usize) -> usize {
        m.div_ceil(self.threads * 8)
            .clamp(1, 256)
            .next_multiple_of(4)
            .min(m.max(1))
    }

    /// For each job, `out[i·m + r] = dot(W row r, activation row i)`; the rows of all jobs are
    /// split across the pool in one parallel pass (one fork-join for Q, K and V together); one
    /// activation row streams them in per-thread shares (`run_split`). Within a task of several
    /// rows, activation rows go in tiles that stay in cache while each weight row of the task's
    /// chunk passes over them, four rows at a time where a four-row kernel exists.
    fn run_jobs<A: Sync>(&self, jobs: &[Job<A>], rows: usize, acts: &[A], act_stride: usize) {
        let total: usize = jobs.iter().map(|j| j.w.rows).sum();
        let act = |i: usize| &acts[i * act_stride..(i + 1) * act_stride];
        if rows == 1 {
            // Streamed like the packed matmuls (`run_packed`).
            let starts = list_starts(jobs.iter().map(|j| j.w.rows));
            let largest = jobs.iter().map(|j| j.w.tensor.row_bytes()).max();
            let grain = (STREAM_PIECE / largest.unwrap_or(1).max(1)).max(1);
            self.pool.run_split(total, grain, &|items| {
                for item in items {
                    let (ji, r) = locate(&starts, item);
                    let Job { w, out, kernels } = &jobs[ji];
                    let v = (kernels.one)(w.row(r), act(0));
                    // SAFETY: each row r of a job's output is written once (its item is taken
                    // once), and r < m, the output's length for one activation row.
                    unsafe { *out.get().add(r) = v };
                }
            });
            return;
        }
        let chunk = self.row_chunk(total);
        let tasks: Vec<(usize, usize, usize)> = jobs
            .iter()
            .enumerate()
            .flat_map(|(ji, j)| {
                (0..j.w.rows)
                    .step_by(chunk)
                    .map(move |r0| (ji, r0, (r0 + chunk).min(j.w.rows)))
            })
            .collect();
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

    /// Whether weights of type `t` are repacked at load (the CPU has packed kernels for it).
    fn packs(&self, t: GgmlType) -> bool {
        #[cfg(target_arch = "x86_64")]
        if self.repack
            && let Some(isa) = self.kernels.gemm_isa()
        {
            return gemm::q8k_kernel(isa, t).is_some() || gemm::q8_kernel(isa, t).is_some();
        }
        let _ = t;
        false
    }

    /// Matmuls of one input by weights that take the same activation format: the input is
    /// quantized once and all the weights' rows run in one parallel pass (two when some weights
    /// are repacked and some are not).
    fn matmul_group(&self, x: &[f32], ws: &[&CpuWeight], rows: usize, outs: &mut [&mut Vec<f32>]) {
        let k = ws[0].cols;
        let x = &x[..rows * k];
        let kernels = &self.kernels;
        let outs: Vec<SharedOut> = ws
            .iter()
            .zip(outs.iter_mut())
            .map(|(w, o)| SharedOut(o[..rows * w.rows].as_mut_ptr()))
            .collect();
        let (packed, plain): (Vec<_>, Vec<_>) = ws
            .iter()
            .copied()
            .zip(outs)
            .partition(|(w, _)| w.packed.is_some());
        let (plain_ws, plain_outs): (Vec<&CpuWeight>, Vec<SharedOut>) = plain.into_iter().unzip();
        match act_format(ws[0].tensor.dtype) {
            ActFormat::F32 => {
                let jobs = jobs(&plain_ws, &plain_outs, |t| RowKernels {
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
                #[cfg(target_arch = "x86_64")]
                if !packed.is_empty() {
                    XSUM_SCRATCH.with(|xs| {
                        let mut xs = xs.borrow_mut();
                        xs.resize(rows * nb, 0);
                        let q = &s[..];
                        self.pool.for_each_chunk(&mut xs[..], nb, &|r, sums| {
                            for (sum, b) in sums.iter_mut().zip(&q[r * nb..]) {
                                *sum = b.qs.iter().map(|&v| v as i32).sum();
                            }
                        });
                        self.run_packed(&packed, gemm::q8_kernel, rows, &s, nb, &xs);
                    });
                }
                let jobs = jobs(&plain_ws, &plain_outs, |t| RowKernels {
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
                #[cfg(target_arch = "x86_64")]
                if !packed.is_empty() {
                    self.run_packed(&packed, gemm::q8k_kernel, rows, &s, nb, &[]);
                }
                let jobs = jobs(&plain_ws, &plain_outs, |t| RowKernels {
                    one: kernels.dot_q8k(t),
                    four: kernels.dot_q8k_x4(t),
                });
                self.run_jobs(&jobs, rows, &s, nb);
            }),
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = packed;
    }

    /// The repacked weights' share of a matmul pass, every (group, token) written once: for one
    /// token, the groups of all weights streamed in per-thread shares (`run_split`); for more,
    /// tasks of a few row groups each over blocks of tokens whose activations stay in L2.
    #[cfg(target_arch = "x86_64")]
    fn run_packed<A: Sync>(
        &self,
        jobs: &[(&CpuWeight, SharedOut)],
        kernel_for: fn(gemm::GemmIsa, GgmlType) -> Option<gemm::GroupKernel<A>>,
        rows: usize,
        acts: &[A],
        stride: usize,
        xsum: &[i32],
    ) {
        let Some(isa) = self.kernels.gemm_isa() else {
            unreachable!("weights are packed only where packed kernels run")
        };
        let kernels: Vec<gemm::GroupKernel<A>> = jobs
            .iter()
            .map(|(w, _)| kernel_for(isa, w.tensor.dtype).expect("packed kernel for a packed type"))
            .collect();
        let token_block = packed_token_block::<A>(stride);
        let token_blocks = rows.div_ceil(token_block);
        let groups: usize = jobs.iter().map(|(w, _)| w.rows / repack::ROWS).sum();
        let call = |ji: usize, group: usize, tokens: std::ops::Range<usize>| {
            let (w, out) = &jobs[ji];
            let p = w.packed.as_ref().expect("packed job");
            let call = gemm::GroupCall {
                p,
                group,
                x: acts,
                stride,
                xsum,
                tokens,
                // In bounds: the output holds `rows × w.rows` values.
                out: unsafe { out.get().add(group * repack::ROWS) },
                m: w.rows,
            };
            // SAFETY: `isa` was detected on this CPU; the call covers rows of one group and
            // tokens within `rows`, whose outputs no other call writes, and the activations
            // hold `rows × stride` blocks.
            unsafe { kernels[ji](&call) }
        };
        if rows == 1 {
            // One token reads each weight byte once, at memory speed: each thread streams a
            // contiguous share of all the weights' groups, in pieces of ~64 KB so that the
            // threads finish together (fixed tasks of ~2 MiB left one thread waiting ~4 ms of
            // a 1B model's 25 ms token; a task start costs a stream restart, so pieces must
            // not be many separate tasks).
            let starts = list_starts(jobs.iter().map(|(w, _)| w.rows / repack::ROWS));
            let largest = jobs
                .iter()
                .filter_map(|(w, _)| w.packed.as_ref().map(|p| p.group_bytes))
                .max()
                .unwrap_or(1);
            self.pool
                .run_split(groups, (STREAM_PIECE / largest).max(1), &|items| {
                    for item in items {
                        let (ji, group) = locate(&starts, item);
                        call(ji, group, 0..1);
                    }
                });
            return;
        }
        // Prefill is bound by arithmetic, not by a stream: two tasks per thread for balance.
        let chunk = groups.div_ceil(self.threads * 2).max(1);
        let mut tasks = Vec::new();
        for tb in 0..token_blocks {
            for (ji, (w, _)) in jobs.iter().enumerate() {
                let n = w.rows / repack::ROWS;
                tasks.extend(
                    (0..n)
                        .step_by(chunk)
                        .map(|g0| (tb, ji, g0, (g0 + chunk).min(n))),
                );
            }
        }
        self.pool.run(tasks.len(), &|i| {
            let (tb, ji, g0, g1) = tasks[i];
            let tokens = tb * token_block..((tb + 1) * token_block).min(rows);
            for group in g0..g1 {
                call(ji, group, tokens.clone());
            }
        });
    }
}

impl CpuBackend {
    /// Attention one (query row, head) at a time through the cache's `dot` and `axpy`: for
    /// cache types that `attention.rs` does not read in blocks.
    fn attention_rows(
        &self,
        q: &[f32],
        k_cache: &CpuCache,
        v_cache: &CpuCache,
        out: &mut [f32],
        p: &AttentionParams,
    ) {
        let hd = p.head_dim;
        let q_width = p.n_heads * hd;
        let kv_width = p.n_kv_heads * hd;
        let group = p.n_heads / p.n_kv_heads;
        let kernels = &self.kernels;
        let out = &mut out[..p.rows * q_width];
        self.pool.for_each_chunk(out, hd, &|task, o| {
            let (i, h) = (task / p.n_heads, task % p.n_heads);
            let pos = p.start_pos + i;
            let lo = p.window.map_or(0, |w| (pos + 1).saturating_sub(w));
            let kvh = h / group;
            let qh = k_cache.prepare_query(
                kernels,
                &q[i * q_width + h * hd..i * q_width + (h + 1) * hd],
            );
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
            v_cache.finish_output(o);
        });
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
        let packed = if matrix && self.packs(t.dtype) {
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
        let _span = self.profiler.span("add_bias");
        let b = b.dense();
        for row in x[..rows * b.len()].chunks_mut(b.len()) {
            row.iter_mut().zip(b).for_each(|(v, &bv)| *v += bv);
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
        fn zeroed<T: Clone>(len: usize, zero: T) -> Option<Vec<T>> {
            let mut v = Vec::new();
            v.try_reserve_exact(len).ok()?;
            v.resize(len, zero);
            Some(v)
        }
        Ok(match ty {
            CacheType::F32 => CpuCache::F32(zeroed(len, 0.0).ok_or_else(too_large)?),
            CacheType::F16 => CpuCache::F16(zeroed(len, f16::ZERO).ok_or_else(too_large)?),
            CacheType::Q8_0 => CpuCache::Q8_0 {
                blocks: zeroed(ty.row_bytes(len), 0).ok_or_else(too_large)?,
                rotation,
            },
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
        layout: RopeLayout,
    ) {
        let width = n_heads * head_dim;
        let cs = &table[..head_dim];
        let mut row = vec![0.0f32; width];
        for r in first_row..first_row + rows {
            cache.read(r * width, &mut row);
            for head in row.chunks_mut(head_dim) {
                rotate_head(head, cs, layout);
            }
            cache.store(&self.kernels, &row, r * width);
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
        let _span = self.profiler.span("copy_rows");
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
        let _span = self.profiler.span("attention");
        self.attention_impl(q, k_cache, v_cache, out, p);
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
    use super::quant::tests::{activations, random_row};
    use super::*;

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
