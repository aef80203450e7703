//! The CPU side of the operations that hybrid recurrent and mixture-of-experts models add to the
//! `Backend` trait (Qwen3.5): partial RoPE, sigmoid gates, the DeltaNet convolution step and
//! recurrence, expert routing, expert matmuls and their weighted sum. The contracts are on the
//! trait (backend/mod.rs); the arithmetic follows llama.cpp's CPU ops (`ggml_ssm_conv`,
//! `ggml_gated_delta_net`, `ggml_soft_max`, `ggml_top_k`, `ggml_mul_mat_id`) so results round as
//! llama.cpp's do. The expert matmuls run on the same kernels as every other matmul: the packed
//! GEMM kernels where the expert stack was repacked (x86-64), the SIMD row dot products otherwise.

use std::borrow::Cow;

use super::quant::{ActFormat, BlockQ8, BlockQ8K, act_format};
use super::{CpuBackend, CpuWeight, SharedOut, simd};
#[cfg(target_arch = "x86_64")]
use super::{gemm, repack};
use crate::backend::{DeltaNetParams, ExpertMatmulParams, RopeLayout};
use crate::gguf::GgmlType;

/// RoPE over the first `rot_dims` values of each head. (The same rotation as `rope`, whose
/// body could become a call of this one with `rot_dims == head_dim`.)
pub(super) fn rope(
    x: &mut [f32],
    table: &[f32],
    rows: usize,
    n_heads: usize,
    head_dim: usize,
    rot_dims: usize,
    layout: RopeLayout,
) {
    let half = rot_dims / 2;
    let width = n_heads * head_dim;
    for (r, row) in x[..rows * width].chunks_mut(width).enumerate() {
        let cs = &table[r * rot_dims..(r + 1) * rot_dims];
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

/// llama.cpp's `ggml_vec_sigmoid_f32`: 1 / (1 + expf(−v)) with the C library's expf.
fn sigmoid(v: f32) -> f32 {
    1.0 / (1.0 + (-v).exp())
}

/// llama.cpp's softplus: v above 20, else ln(1 + e^v).
fn softplus(v: f32) -> f32 {
    if v > 20.0 { v } else { (1.0 + v.exp()).ln() }
}

pub(super) fn mul_sigmoid(
    x: &mut [f32],
    gate: &[f32],
    rows: usize,
    width: usize,
    gate_width: usize,
) {
    let group = width / gate_width;
    for (row, g) in x[..rows * width]
        .chunks_mut(width)
        .zip(gate.chunks(gate_width))
    {
        for (xs, &gv) in row.chunks_mut(group).zip(g) {
            let s = sigmoid(gv);
            xs.iter_mut().for_each(|v| *v *= s);
        }
    }
}

/// An F32 weight's values without copying where the bytes are aligned (they are in a GGUF
/// mapping), decoded otherwise.
fn f32_values(w: &CpuWeight) -> Cow<'_, [f32]> {
    let bytes = w.tensor.bytes();
    if w.tensor.dtype == GgmlType::F32 {
        // SAFETY: every bit pattern is a valid f32; align_to only yields the aligned middle.
        let (pre, mid, post) = unsafe { bytes.align_to::<f32>() };
        if pre.is_empty() && post.is_empty() && cfg!(target_endian = "little") {
            return Cow::Borrowed(mid);
        }
    }
    Cow::Owned(w.tensor.to_f32())
}

impl CpuBackend {
    pub(super) fn conv(
        &self,
        x: &[f32],
        kernel: &CpuWeight,
        state: &mut [f32],
        out: &mut [f32],
        rows: usize,
        channels: usize,
    ) {
        let k = kernel.cols;
        let hist = k - 1;
        let taps = f32_values(kernel);
        let st: &[f32] = state;
        // Row i of (state ++ x).
        let inp = |i: usize| -> &[f32] {
            if i < hist {
                &st[i * channels..(i + 1) * channels]
            } else {
                &x[(i - hist) * channels..(i - hist + 1) * channels]
            }
        };
        // Tasks over blocks of channels, every row each, so one token spreads over the threads
        // too; each task lays its taps out by time, so the inner loop runs over contiguous
        // channels.
        const CHANNELS_PER_TASK: usize = 256;
        const ONES: [f32; CHANNELS_PER_TASK] = [1.0; CHANNELS_PER_TASK];
        let kernels = &self.kernels;
        let out_ptr = SharedOut(out[..rows * channels].as_mut_ptr());
        self.pool
            .run(channels.div_ceil(CHANNELS_PER_TASK), &|task| {
                let c0 = task * CHANNELS_PER_TASK;
                let n = CHANNELS_PER_TASK.min(channels - c0);
                let mut by_tap = vec![0.0f32; k * n];
                for c in 0..n {
                    for j in 0..k {
                        by_tap[j * n + c] = taps[(c0 + c) * k + j];
                    }
                }
                for t in 0..rows {
                    // SAFETY: this task alone writes channels c0..c0 + n of each row.
                    let o = unsafe {
                        std::slice::from_raw_parts_mut(out_ptr.get().add(t * channels + c0), n)
                    };
                    o.fill(0.0);
                    for j in 0..k {
                        let w = &by_tap[j * n..(j + 1) * n];
                        for ((ov, &iv), &wv) in o.iter_mut().zip(&inp(t + j)[c0..c0 + n]).zip(w) {
                            *ov += iv * wv;
                        }
                    }
                    // The SIMD SiLU-times-up with up = 1 (exact): the scalar `expf` is slow where
                    // the build has no FMA instruction to inline.
                    kernels.silu_mul(o, &ONES[..n]);
                }
            });
        // The new state: the last K−1 rows of (state ++ x).
        if rows >= hist {
            state[..hist * channels].copy_from_slice(&x[(rows - hist) * channels..rows * channels]);
        } else {
            state.copy_within(rows * channels..hist * channels, 0);
            state[(hist - rows) * channels..hist * channels].copy_from_slice(&x[..rows * channels]);
        }
    }
}

/// `x / sqrt(Σx² + eps)` as llama.cpp computes it (`build_gdn_l2_norm`): an RMS norm with
/// epsilon eps/n, squares summed in f64, then scaled by 1/sqrt(n).
fn l2_normalize(x: &[f32], eps: f32, out: &mut [f32]) {
    let n = x.len() as f32;
    let sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    let mean = (sum / x.len() as f64) as f32;
    let scale = 1.0 / (mean + eps / n).sqrt();
    let post = 1.0 / n.sqrt();
    for (o, &v) in out.iter_mut().zip(x) {
        *o = (v * scale) * post;
    }
}

impl CpuBackend {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn delta_net(
        &self,
        qkv: &[f32],
        alpha: &[f32],
        beta: &[f32],
        a: &CpuWeight,
        dt_bias: &CpuWeight,
        state: &mut [f32],
        out: &mut [f32],
        p: &DeltaNetParams,
    ) {
        let d = p.head_dim;
        let (n_k, n_v) = (p.n_k_heads, p.n_v_heads);
        let qkv_width = 2 * n_k * d + n_v * d;
        let out_width = n_v * d;
        let (a, dt_bias) = (a.dense(), dt_bias.dense());
        let scale = 1.0 / (d as f32).sqrt();
        let out_ptr = SharedOut(out[..p.rows * out_width].as_mut_ptr());
        // One task per value head: heads are independent across the whole batch.
        self.pool
            .for_each_chunk(&mut state[..n_v * d * d], d * d, &|h, s| {
                let kh = h % n_k;
                let (mut q, mut k, mut o) = (vec![0.0; d], vec![0.0; d], vec![0.0; d]);
                for t in 0..p.rows {
                    let row = &qkv[t * qkv_width..(t + 1) * qkv_width];
                    l2_normalize(&row[kh * d..(kh + 1) * d], p.eps, &mut q);
                    l2_normalize(&row[(n_k + kh) * d..(n_k + kh + 1) * d], p.eps, &mut k);
                    let v = &row[(2 * n_k + h) * d..(2 * n_k + h + 1) * d];
                    let g = softplus(alpha[t * n_v + h] + dt_bias[h]) * a[h];
                    let b = sigmoid(beta[t * n_v + h]);

                    self.kernels
                        .delta_rule(s, &k, &q, v, g.exp(), b, scale, &mut o);
                    for (j, &oj) in o.iter().enumerate() {
                        // SAFETY: task h alone writes columns h·d..(h+1)·d of each output row.
                        unsafe { *out_ptr.get().add(t * out_width + h * d + j) = oj };
                    }
                }
            });
    }

    pub(super) fn route(
        &self,
        logits: &[f32],
        rows: usize,
        n_expert: usize,
        n_used: usize,
        selected: &mut [f32],
        weights: &mut [f32],
    ) {
        let mut probs = vec![0.0f32; n_expert];
        let mut order: Vec<usize> = Vec::with_capacity(n_expert);
        for t in 0..rows {
            probs.copy_from_slice(&logits[t * n_expert..(t + 1) * n_expert]);
            let max = probs.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            let sum = self.kernels.exp_sub(&mut probs, max);
            let inv = (1.0 / sum) as f32;
            probs.iter_mut().for_each(|p| *p *= inv);
            order.clear();
            order.extend(0..n_expert);
            // Highest probability first; the stable sort sends ties to the lower index.
            order.sort_by(|&i, &j| probs[j].total_cmp(&probs[i]));
            let chosen = &order[..n_used];
            let total: f32 = chosen.iter().map(|&e| probs[e]).sum();
            let total = total.max(6.103_515_6e-5);
            for (j, &e) in chosen.iter().enumerate() {
                selected[t * n_used + j] = e as f32;
                weights[t * n_used + j] = probs[e] / total;
            }
        }
    }

    pub(super) fn expert_matmul_cpu(
        &self,
        x: &[f32],
        w: &CpuWeight,
        selected: &[f32],
        out: &mut [f32],
        p: &ExpertMatmulParams,
    ) {
        let slots = p.rows * p.n_used;
        let k = w.cols;
        let n_expert = w.rows / p.expert_stride.max(1);
        // The slots routed to each expert.
        let mut by_expert: Vec<Vec<usize>> = vec![Vec::new(); n_expert];
        for (s, &e) in selected[..slots].iter().enumerate() {
            by_expert[e as usize].push(s);
        }
        let input_row = |s: usize| if p.per_slot_input { s } else { s / p.n_used };
        let n_inputs = if p.per_slot_input { slots } else { p.rows };
        let x = &x[..n_inputs * k];
        let out = SharedOut(out[..slots * p.expert_rows].as_mut_ptr());
        let kernels = &self.kernels;
        let dtype = w.tensor.dtype;
        let job = ExpertJob {
            w,
            by_expert: &by_expert,
            out,
            p,
        };
        match act_format(dtype) {
            ActFormat::F32 => {
                self.run_expert_job(&job, x, k, &input_row, kernels.dot_f32(dtype), None)
            }
            ActFormat::Q8 => {
                let nb = k / 32;
                let mut q = vec![BlockQ8::default(); n_inputs * nb];
                self.pool.for_each_chunk(&mut q, nb, &|r, blocks| {
                    kernels.quantize_q8(&x[r * k..(r + 1) * k], blocks)
                });
                #[cfg(target_arch = "x86_64")]
                if let Some(kernel) = self.packed_expert_kernel(&job, gemm::q8_kernel) {
                    let xsum: Vec<i32> = q
                        .iter()
                        .map(|b| b.qs.iter().map(|&v| v as i32).sum())
                        .collect();
                    return self.run_packed_experts(&job, kernel, &q, nb, &xsum, &input_row);
                }
                self.run_expert_job(
                    &job,
                    &q,
                    nb,
                    &input_row,
                    kernels.dot_q8(dtype),
                    kernels.dot_q8_x4(dtype),
                )
            }
            ActFormat::Q8K => {
                let nb = k / 256;
                let mut q = vec![BlockQ8K::default(); n_inputs * nb];
                self.pool.for_each_chunk(&mut q, nb, &|r, blocks| {
                    kernels.quantize_q8k(&x[r * k..(r + 1) * k], blocks)
                });
                #[cfg(target_arch = "x86_64")]
                if let Some(kernel) = self.packed_expert_kernel(&job, gemm::q8k_kernel) {
                    return self.run_packed_experts(&job, kernel, &q, nb, &[], &input_row);
                }
                self.run_expert_job(
                    &job,
                    &q,
                    nb,
                    &input_row,
                    kernels.dot_q8k(dtype),
                    kernels.dot_q8k_x4(dtype),
                )
            }
        }
    }

    /// Split the used experts' rows across the pool; each task multiplies a chunk of one
    /// expert's rows by every activation routed to that expert, four at a time where a
    /// four-row kernel exists.
    fn run_expert_job<A: Sync>(
        &self,
        job: &ExpertJob,
        acts: &[A],
        act_stride: usize,
        input_row: &(dyn Fn(usize) -> usize + Sync),
        one: fn(&[u8], &[A]) -> f32,
        four: Option<simd::Dot4<A>>,
    ) {
        let p = job.p;
        let used: Vec<usize> = (0..job.by_expert.len())
            .filter(|&e| !job.by_expert[e].is_empty())
            .collect();
        let total = used.len() * p.expert_rows;
        let chunk = total
            .div_ceil(self.threads * 8)
            .clamp(1, 256)
            .next_multiple_of(4)
            .min(p.expert_rows.max(1));
        let tasks: Vec<(usize, usize, usize)> = used
            .iter()
            .flat_map(|&e| {
                (0..p.expert_rows)
                    .step_by(chunk)
                    .map(move |r0| (e, r0, (r0 + chunk).min(p.expert_rows)))
            })
            .collect();
        let act = |s: usize| {
            let i = input_row(s);
            &acts[i * act_stride..(i + 1) * act_stride]
        };
        let m = p.expert_rows;
        self.pool.run(tasks.len(), &|ti| {
            let (e, r0, r1) = tasks[ti];
            let slots = &job.by_expert[e];
            // SAFETY: slot s's row r of the output is written by the one task that holds
            // (expert of s, r), and s·m + r < slots·m.
            let put = |s: usize, r: usize, v: f32| unsafe { *job.out.get().add(s * m + r) = v };
            for r in r0..r1 {
                let wrow = job.w.row(e * p.expert_stride + p.row_offset + r);
                let mut i = 0;
                if let Some(dot4) = four {
                    while i + 4 <= slots.len() {
                        let s4 = [slots[i], slots[i + 1], slots[i + 2], slots[i + 3]];
                        let v = dot4(wrow, s4.map(act));
                        for (s, vs) in s4.into_iter().zip(v) {
                            put(s, r, vs);
                        }
                        i += 4;
                    }
                }
                for &s in &slots[i..] {
                    put(s, r, one(wrow, act(s)));
                }
            }
        });
    }
}

impl CpuBackend {
    /// The packed kernel for an expert matmul, when its stack was repacked and each expert's
    /// rows in use start and end on row-group boundaries.
    #[cfg(target_arch = "x86_64")]
    fn packed_expert_kernel<A>(
        &self,
        job: &ExpertJob,
        kernel_for: fn(gemm::GemmIsa, GgmlType) -> Option<gemm::GroupKernel<A>>,
    ) -> Option<gemm::GroupKernel<A>> {
        let p = job.p;
        let aligned = [p.expert_rows, p.expert_stride, p.row_offset]
            .iter()
            .all(|v| v.is_multiple_of(repack::ROWS));
        job.w.packed.as_ref()?;
        if !aligned {
            return None;
        }
        kernel_for(self.kernels.gemm_isa()?, job.w.tensor.dtype)
    }

    /// An expert matmul on the packed kernels: the activations of each expert's slots gathered
    /// side by side, so each expert's row groups run as a small GEMM over its tokens (prefill)
    /// or one token (generation), each weight line read once; results are scattered back to
    /// the slots. `xsum` holds each Q8 block's sum (empty for Q8_K activations).
    #[cfg(target_arch = "x86_64")]
    fn run_packed_experts<A: Sync + Copy>(
        &self,
        job: &ExpertJob,
        kernel: gemm::GroupKernel<A>,
        acts: &[A],
        stride: usize,
        xsum: &[i32],
        input_row: &(dyn Fn(usize) -> usize + Sync),
    ) {
        let p = job.p;
        let m = p.expert_rows;
        let Some(packed) = job.w.packed.as_ref() else {
            unreachable!("packed_expert_kernel checked the weight is packed")
        };
        // Slots in expert order: expert `e`'s are `order[first[i]..first[i + 1]]`.
        let used: Vec<usize> = (0..job.by_expert.len())
            .filter(|&e| !job.by_expert[e].is_empty())
            .collect();
        let order: Vec<usize> = used
            .iter()
            .flat_map(|&e| job.by_expert[e].iter().copied())
            .collect();
        let mut first = vec![0];
        for &e in &used {
            first.push(first[first.len() - 1] + job.by_expert[e].len());
        }
        fn gather<T: Copy>(src: &[T], width: usize, rows: impl Iterator<Item = usize>) -> Vec<T> {
            rows.flat_map(|i| &src[i * width..(i + 1) * width])
                .copied()
                .collect()
        }
        let inputs = || order.iter().map(|&s| input_row(s));
        let x = gather(acts, stride, inputs());
        let xsum = if xsum.is_empty() {
            Vec::new()
        } else {
            gather(xsum, stride, inputs())
        };
        let mut y = vec![0.0f32; order.len() * m];
        let y_out = SharedOut(y.as_mut_ptr());

        // Tasks: a run of one expert's row groups over a block of its tokens whose activations
        // fit in the L2 cache, about four tasks per thread.
        let token_block = super::packed_token_block::<A>(stride);
        let groups = m / repack::ROWS;
        let chunk = (used.len() * groups)
            .div_ceil(self.threads * 4)
            .clamp(1, groups.max(1));
        let mut tasks = Vec::new();
        for ui in 0..used.len() {
            let n = first[ui + 1] - first[ui];
            for t0 in (0..n).step_by(token_block) {
                for g0 in (0..groups).step_by(chunk) {
                    tasks.push((
                        ui,
                        t0..(t0 + token_block).min(n),
                        g0..(g0 + chunk).min(groups),
                    ));
                }
            }
        }
        self.pool.run(tasks.len(), &|i| {
            let (ui, tokens, local_groups) = tasks[i].clone();
            let slots = first[ui]..first[ui + 1];
            let group0 = (used[ui] * p.expert_stride + p.row_offset) / repack::ROWS;
            for g in local_groups {
                let call = gemm::GroupCall {
                    p: packed,
                    group: group0 + g,
                    x: &x[slots.start * stride..slots.end * stride],
                    stride,
                    xsum: if xsum.is_empty() {
                        &[]
                    } else {
                        &xsum[slots.start * stride..slots.end * stride]
                    },
                    tokens: tokens.clone(),
                    // In bounds: `y` holds `m` values for each slot of `order`.
                    out: unsafe { y_out.get().add(slots.start * m + g * repack::ROWS) },
                    m,
                };
                // SAFETY: the ISA was detected (packed_expert_kernel); the group lies in the
                // packed stack (the expert's rows are within its block and group-aligned), the
                // tokens within the expert's slots, and each (group, token) is written by this
                // task alone.
                unsafe { kernel(&call) }
            }
        });
        let out = job.out.get();
        for (i, &s) in order.iter().enumerate() {
            // SAFETY: `out` holds `m` values for each of the call's slots, `s` among them.
            let dst = unsafe { std::slice::from_raw_parts_mut(out.add(s * m), m) };
            dst.copy_from_slice(&y[i * m..(i + 1) * m]);
        }
    }
}

/// One expert matmul: the weight, which slots each expert serves, and where results go.
struct ExpertJob<'a> {
    w: &'a CpuWeight,
    by_expert: &'a [Vec<usize>],
    out: SharedOut,
    p: &'a ExpertMatmulParams,
}

pub(super) fn moe_combine(
    y: &[f32],
    weights: &[f32],
    rows: usize,
    n_used: usize,
    width: usize,
    out: &mut [f32],
) {
    for (t, o) in out[..rows * width].chunks_mut(width).enumerate() {
        for j in 0..n_used {
            let s = t * n_used + j;
            let wj = weights[s];
            let ys = &y[s * width..(s + 1) * width];
            if j == 0 {
                o.iter_mut().zip(ys).for_each(|(ov, &yv)| *ov = yv * wj);
            } else {
                o.iter_mut().zip(ys).for_each(|(ov, &yv)| *ov += yv * wj);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use crate::backend::cpu::ggml_math;
    use crate::backend::cpu::quant::tests::{activations, random_row};
    use crate::tensor::Tensor;

    /// Every slot of an expert matmul equals the plain matmul of its input row by its expert's
    /// rows (cut out of the stacked weight), for unquantized, 32-block and 256-block types, with
    /// shared and per-slot inputs, and a fused gate/up layout (stride and offset); on the row
    /// kernels (24 rows per expert) and, where the CPU has them, on the packed kernels (32 rows,
    /// with AVX-512 and AVX2), over more tokens per expert than one token block holds.
    #[test]
    fn expert_matmul_equals_a_matmul_per_expert() {
        let be = CpuBackend::new(2).unwrap();
        check_expert_matmuls(&be, "detected kernels");
        #[cfg(target_arch = "x86_64")]
        if let Some(kernels) = be.kernels.without_avx512() {
            let mut avx2 = CpuBackend::new(2).unwrap();
            avx2.kernels = kernels;
            check_expert_matmuls(&avx2, "AVX2 kernels");
        }
    }

    fn check_expert_matmuls(be: &CpuBackend, label: &str) {
        let (k_in, n_exp, n_used) = (512, 4, 2);
        for (stride, tokens) in [(24, 9), (32, 9), (32, 1200)] {
            for t in [
                GgmlType::F32,
                GgmlType::F16,
                GgmlType::Q8_0,
                GgmlType::Q4_0,
                GgmlType::Q4_K,
                GgmlType::Q6_K,
            ] {
                check_expert_matmul(be, t, k_in, stride, n_exp, tokens, n_used, label);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn check_expert_matmul(
        be: &CpuBackend,
        t: GgmlType,
        k_in: usize,
        stride: usize,
        n_exp: usize,
        tokens: usize,
        n_used: usize,
        label: &str,
    ) {
        let bytes: Vec<u8> = (0..n_exp * stride)
            .flat_map(|r| random_row(t, k_in, r as u64 + 7))
            .collect();
        let stacked = Tensor::from_bytes("exps", t, vec![k_in, stride, n_exp], bytes);
        let w = be.weight(&stacked).unwrap();
        assert_eq!(
            w.packed.is_some(),
            be.packs(t) && stride.is_multiple_of(16),
            "{t}: repacked when groups fit the experts"
        );
        // Token t uses experts (t + 2j) mod 4: every expert serves at least four slots.
        let selected: Vec<f32> = (0..tokens * n_used)
            .map(|s| ((s / n_used + 2 * (s % n_used)) % n_exp) as f32)
            .collect();
        for per_slot_input in [false, true] {
            for (expert_rows, row_offset) in [(stride, 0), (stride / 2, stride / 2)] {
                let n_in = if per_slot_input {
                    tokens * n_used
                } else {
                    tokens
                };
                let x = activations(n_in * k_in, 5);
                let p = ExpertMatmulParams {
                    rows: tokens,
                    n_used,
                    per_slot_input,
                    expert_rows,
                    expert_stride: stride,
                    row_offset,
                };
                let mut out = vec![0.0; tokens * n_used * expert_rows];
                be.expert_matmul(&x, &w, &selected, &mut out, &p);
                let experts: Vec<CpuWeight> = (0..n_exp)
                    .map(|e| {
                        let first = e * stride + row_offset;
                        let rows: Vec<usize> = (first..first + expert_rows).collect();
                        be.weight(&stacked.gather_rows("e", &rows)).unwrap()
                    })
                    .collect();
                for (s, &e) in selected.iter().enumerate() {
                    let i = if per_slot_input { s } else { s / n_used };
                    let xi = x[i * k_in..(i + 1) * k_in].to_vec();
                    let mut want = vec![0.0; expert_rows];
                    be.matmul(&xi, &experts[e as usize], 1, &mut want);
                    let got = &out[s * expert_rows..(s + 1) * expert_rows];
                    for (g, w) in got.iter().zip(&want) {
                        assert!(
                            (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                            "{label} {t} stride {stride}, slot {s} of {tokens} tokens \
                             (per-slot {per_slot_input}, offset {row_offset}): {g} vs {w}"
                        );
                    }
                }
            }
        }
    }

    /// Partial RoPE over all dims is `rope`; over fewer, it rotates (i, i + rot/2) pairs of the
    /// leading dims by the table and leaves the rest as they were.
    #[test]
    fn partial_rope_rotates_only_the_leading_dims() {
        let be = CpuBackend::new(1).unwrap();
        let (rows, heads, hd, rot) = (3, 2, 8, 4);
        let x = activations(rows * heads * hd, 11);
        let table = activations(rows * hd, 12);
        for layout in [RopeLayout::Neox, RopeLayout::Interleaved] {
            let (mut a, mut b) = (x.clone(), x.clone());
            be.rope(&mut a, &table, rows, heads, hd, layout);
            be.rope_partial(&mut b, &table, rows, heads, hd, hd, layout);
            assert_eq!(a, b);
        }
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

    /// Routing: softmax, top-k highest first, ties to the lower index, weights summing to 1.
    #[test]
    fn routing_picks_the_top_experts_and_renormalizes() {
        let be = CpuBackend::new(1).unwrap();
        let logits = vec![
            0.5, 2.0, -1.0, 2.0, 1.0, /* row 2 */ 3.0, 0.0, 0.0, 0.0, 0.0,
        ];
        let (mut sel, mut w) = (vec![0.0; 6], vec![0.0; 6]);
        be.moe_route(&logits, 2, 5, 3, &mut sel, &mut w);
        assert_eq!(&sel[..3], &[1.0, 3.0, 4.0]);
        assert_eq!(&sel[3..5], &[0.0, 1.0]);
        let e = |v: f32| v.exp();
        let (a, b) = (e(2.0), e(1.0));
        assert!((w[0] - a / (2.0 * a + b)).abs() < 1e-6 && (w[2] - b / (2.0 * a + b)).abs() < 1e-6);
        assert!((w[3..].iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }

    /// The convolution step run token by token, or over a batch shorter or longer than the
    /// state, gives the batched result and the same final state.
    #[test]
    fn conv_step_carries_its_state_across_calls() {
        let (k, ch, rows) = (4, 300, 37); // two channel blocks, the second partial
        let taps = activations(k * ch, 3);
        let be = CpuBackend::new(2).unwrap();
        let kernel = be
            .weight(&Tensor::from_f32("conv", vec![k, ch], &taps))
            .unwrap();
        let x = activations(rows * ch, 4);
        let mut state = vec![0.0; (k - 1) * ch];
        let mut whole = vec![0.0; rows * ch];
        be.conv(&x, &kernel, &mut state, &mut whole, rows, ch);
        // Reference: the definition, with zeros before the first token.
        for t in 0..rows {
            for c in 0..ch {
                let mut acc = 0.0f32;
                for j in 0..k {
                    let src = t as isize + j as isize - (k as isize - 1);
                    if src >= 0 {
                        acc += x[src as usize * ch + c] * taps[c * k + j];
                    }
                }
                let want = ggml_math::silu(acc);
                assert!((whole[t * ch + c] - want).abs() < 1e-6);
            }
        }
        for split in [1, 2, 5, 20] {
            let mut st = vec![0.0; (k - 1) * ch];
            let mut out = vec![0.0; rows * ch];
            for (i, piece) in x.chunks(split * ch).enumerate() {
                let n = piece.len() / ch;
                let mut o = vec![0.0; n * ch];
                be.conv(piece, &kernel, &mut st, &mut o, n, ch);
                out[i * split * ch..i * split * ch + n * ch].copy_from_slice(&o);
            }
            assert_eq!(out, whole, "pieces of {split}");
            assert_eq!(st, state, "final state, pieces of {split}");
        }
    }
}
