//! The CPU's mixture-of-experts ops (`MoeOps`): routing, the selected experts' matmuls
//! (llama.cpp's `mul_mat_id`) and the weighted sum of their outputs. The contracts are on the trait
//! (backend/mod.rs); the arithmetic follows llama.cpp's CPU ops (`ggml_soft_max`, `ggml_top_k`,
//! `ggml_mul_mat_id`) so results round as its do. The expert matmuls run on the same kernels as
//! every other matmul: the GEMM kernels where the expert stack was repacked, the row kernels
//! otherwise.

use super::kernels::{
    ActBlock, ActFormat, BlockQ8, BlockQ8K, DECODED_BLOCK, GroupCall, PackedKernel, QuantKernels,
    Tiled, TiledCall,
};
use super::matmul::{TILED_MIN_TOKENS, packed_token_block, with_decoded_scratch};
use super::{CpuBackend, CpuWeight, SharedOut, repack};
use crate::backend::{ExpertGating, ExpertMatmulParams, MoeOps, MoeRouteParams};

impl MoeOps for CpuBackend {
    fn moe_route(
        &self,
        logits: &Vec<f32>,
        selection_bias: Option<&CpuWeight>,
        p: &MoeRouteParams,
        selected: &mut Vec<f32>,
        weights: &mut Vec<f32>,
    ) {
        let _span = self.profiler.span("moe_route");
        let (n_expert, n_used) = (p.n_expert, p.n_used);
        let bias = selection_bias.map(|w| w.tensor.to_f32());
        let mut scores = vec![0.0f32; n_expert];
        let mut choice = vec![0.0f32; n_expert];
        let mut order: Vec<usize> = Vec::with_capacity(n_expert);
        for t in 0..p.rows {
            scores.copy_from_slice(&logits[t * n_expert..(t + 1) * n_expert]);
            match p.gating {
                ExpertGating::Softmax => {
                    let max = scores.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
                    let sum = (self.kernels.exp_sub)(&mut scores, max);
                    let inv = (1.0 / sum) as f32;
                    scores.iter_mut().for_each(|s| *s *= inv);
                }
                ExpertGating::Sigmoid => {
                    scores
                        .iter_mut()
                        .for_each(|s| *s = 1.0 / (1.0 + (-*s).exp()));
                }
            }
            choice.copy_from_slice(&scores);
            if let Some(bias) = &bias {
                choice.iter_mut().zip(bias).for_each(|(c, b)| *c += b);
            }
            order.clear();
            order.extend(0..n_expert);
            // Highest first; the stable sort sends ties to the lower index.
            order.sort_by(|&i, &j| choice[j].total_cmp(&choice[i]));
            let chosen = &order[..n_used];
            let divisor = if p.normalize {
                let total: f32 = chosen.iter().map(|&e| scores[e]).sum();
                total.max(6.103_515_6e-5)
            } else {
                1.0
            };
            for (j, &e) in chosen.iter().enumerate() {
                selected[t * n_used + j] = e as f32;
                let w = if p.normalize {
                    scores[e] / divisor
                } else {
                    scores[e]
                };
                weights[t * n_used + j] = if p.scale != 1.0 { w * p.scale } else { w };
            }
        }
    }

    fn expert_matmul(
        &self,
        x: &Vec<f32>,
        w: &CpuWeight,
        selected: &Vec<f32>,
        out: &mut Vec<f32>,
        p: &ExpertMatmulParams,
    ) {
        let _span = self.profiler.span("expert_matmul");
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
        match kernels.of(dtype).format() {
            ActFormat::F32 => {
                let rows = QuantKernels {
                    dot: kernels.dot_f32(dtype),
                    dot4: None,
                    dot8: None,
                    packed: None,
                    tiled: None,
                };
                self.run_expert_job(&job, x, k, &input_row, &rows)
            }
            ActFormat::Q8 => self.quantized_experts::<BlockQ8>(&job, x, k, n_inputs, &input_row),
            ActFormat::Q8K => self.quantized_experts::<BlockQ8K>(&job, x, k, n_inputs, &input_row),
        }
    }

    fn add_expert_bias(
        &self,
        x: &mut Vec<f32>,
        bias: &CpuWeight,
        selected: &Vec<f32>,
        slots: usize,
        width: usize,
    ) {
        let _span = self.profiler.span("add_expert_bias");
        let bias = bias.dense();
        for (row, &e) in x[..slots * width].chunks_mut(width).zip(&selected[..slots]) {
            let b = &bias[e as usize * width..(e as usize + 1) * width];
            row.iter_mut().zip(b).for_each(|(v, &bv)| *v += bv);
        }
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
        let _span = self.profiler.span("moe_combine");
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
}

impl CpuBackend {
    /// An expert matmul on weights of a quantized format `A`: the inputs quantized once, then
    /// the GEMM kernels where the stack was repacked, the row kernels otherwise.
    fn quantized_experts<A: ActBlock>(
        &self,
        job: &ExpertJob,
        x: &[f32],
        k: usize,
        n_inputs: usize,
        input_row: &(dyn Fn(usize) -> usize + Sync),
    ) {
        let nb = k / A::LEN;
        let quantize = A::quantizer(&self.kernels);
        let mut q = vec![A::default(); n_inputs * nb];
        self.pool.for_each_chunk(&mut q, nb, &|r, blocks| {
            quantize(&x[r * k..(r + 1) * k], blocks)
        });
        let Some(kernels) = A::kernels(self.kernels.of(job.w.tensor.dtype)) else {
            unreachable!("a quantized format's type has its kernels")
        };
        if let Some(kernel) = kernels.packed.filter(|_| self.experts_packed(job)) {
            let xsum: Vec<i32> = if A::SUMS {
                q.iter().map(A::sum).collect()
            } else {
                Vec::new()
            };
            let gemm = ExpertGemm::Packed(kernel);
            return self.run_packed_experts(job, gemm, &q, nb, &xsum, input_row);
        }
        if let Some(tiled) = kernels
            .tiled
            .filter(|_| groups_aligned(job) && k.is_multiple_of(256))
        {
            // Experts with enough tokens take the decoded GEMM, the others the row kernels.
            let (many, few): (Vec<_>, Vec<_>) = job
                .by_expert
                .iter()
                .map(|slots| {
                    if slots.len() >= TILED_MIN_TOKENS {
                        (slots.clone(), Vec::new())
                    } else {
                        (Vec::new(), slots.clone())
                    }
                })
                .unzip();
            if many.iter().any(|s| !s.is_empty()) {
                let gemm = ExpertGemm::Tiled(tiled);
                let on = ExpertJob {
                    by_expert: &many,
                    ..*job
                };
                self.run_packed_experts(&on, gemm, &q, nb, &[], input_row);
                let rest = ExpertJob {
                    by_expert: &few,
                    ..*job
                };
                return self.run_expert_job(&rest, &q, nb, input_row, &kernels);
            }
        }
        self.run_expert_job(job, &q, nb, input_row, &kernels)
    }

    /// Split the used experts' rows across the pool; each task multiplies a chunk of one
    /// expert's rows by every activation routed to that expert, eight or four at a time where
    /// such kernels exist.
    fn run_expert_job<A: Sync>(
        &self,
        job: &ExpertJob,
        acts: &[A],
        act_stride: usize,
        input_row: &(dyn Fn(usize) -> usize + Sync),
        kernels: &QuantKernels<A>,
    ) {
        let (one, four, eight) = (kernels.dot, kernels.dot4, kernels.dot8);
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
                if let Some(dot8) = eight {
                    while i + 8 <= slots.len() {
                        let s8: [usize; 8] = std::array::from_fn(|k| slots[i + k]);
                        let v = dot8(wrow, s8.map(act));
                        for (s, vs) in s8.into_iter().zip(v) {
                            put(s, r, vs);
                        }
                        i += 8;
                    }
                }
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
    /// Whether an expert matmul can run on the GEMM kernels: its stack was repacked and each
    /// expert's rows in use start and end on row-group boundaries.
    fn experts_packed(&self, job: &ExpertJob) -> bool {
        job.w.packed.is_some() && groups_aligned(job)
    }

    /// An expert matmul on the GEMM kernels (packed, or decoded on the fly): the activations of each expert's slots gathered
    /// side by side, so each expert's row groups run as a small GEMM over its tokens (prefill)
    /// or one token (generation), each weight line read once; results are scattered back to
    /// the slots. `xsum` holds each Q8 block's sum (empty for Q8_K activations).
    fn run_packed_experts<A: Sync + Copy>(
        &self,
        job: &ExpertJob,
        gemm: ExpertGemm<A>,
        acts: &[A],
        stride: usize,
        xsum: &[i32],
        input_row: &(dyn Fn(usize) -> usize + Sync),
    ) {
        let p = job.p;
        let m = p.expert_rows;
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
        let groups = m / repack::ROWS;
        let chunk = (used.len() * groups)
            .div_ceil(self.threads * 4)
            .clamp(1, groups.max(1));
        let mut tasks = Vec::new();
        for ui in 0..used.len() {
            let n = first[ui + 1] - first[ui];
            let token_block = packed_token_block::<A>(stride, n);
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
            let x = &x[slots.start * stride..slots.end * stride];
            for g in local_groups {
                // In bounds: `y` holds `m` values for each slot of `order`.
                let out = unsafe { y_out.get().add(slots.start * m + g * repack::ROWS) };
                match gemm {
                    ExpertGemm::Packed(kernel) => {
                        let Some(packed) = job.w.packed.as_ref() else {
                            unreachable!("experts_packed checked the weight is packed")
                        };
                        let call = GroupCall {
                            p: packed,
                            group: group0 + g,
                            x,
                            stride,
                            xsum: if xsum.is_empty() {
                                &[]
                            } else {
                                &xsum[slots.start * stride..slots.end * stride]
                            },
                            tokens: tokens.clone(),
                            out,
                            m,
                        };
                        // SAFETY: the kernel's level was detected; the group lies in the
                        // packed stack (the expert's rows are within its block and
                        // group-aligned), the tokens within the expert's slots, and each
                        // (group, token) is written by this task alone.
                        unsafe { kernel(&call) }
                    }
                    ExpertGemm::Tiled(tiled) => {
                        let first_row = (group0 + g) * repack::ROWS;
                        let rows: [&[u8]; 16] = std::array::from_fn(|r| job.w.row(first_row + r));
                        let blocks = job.w.cols / 256;
                        with_decoded_scratch(blocks * DECODED_BLOCK, |buf| {
                            // SAFETY: the rows are whole blocks of the decoder's type and the
                            // buffer holds one decoded block each.
                            unsafe { (tiled.decode)(&rows, buf) };
                            let call = TiledCall {
                                decoded: buf,
                                blocks,
                                factor: tiled.factor,
                                x,
                                stride,
                                tokens: tokens.clone(),
                                out,
                                m,
                            };
                            // SAFETY: the call covers this task's group and tokens, as for
                            // the packed kernels.
                            unsafe { (tiled.gemm)(&call) }
                        });
                    }
                }
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

/// The GEMM an expert matmul runs on: over the repacked stack, or over rows decoded per group.
#[derive(Clone, Copy)]
enum ExpertGemm<A> {
    Packed(PackedKernel<A>),
    Tiled(Tiled<A>),
}

/// Whether each expert's rows in use start and end on row-group boundaries.
fn groups_aligned(job: &ExpertJob) -> bool {
    let p = job.p;
    [p.expert_rows, p.expert_stride, p.row_offset]
        .iter()
        .all(|v| v.is_multiple_of(repack::ROWS))
}

/// One expert matmul: the weight, which slots each expert serves, and where results go.
#[derive(Clone, Copy)]
struct ExpertJob<'a> {
    w: &'a CpuWeight,
    by_expert: &'a [Vec<usize>],
    out: SharedOut,
    p: &'a ExpertMatmulParams,
}

#[cfg(test)]
mod tests {
    use super::super::kernels::tests::every_level;
    use super::super::portable::tests::{activations, random_row};
    use super::*;
    use crate::backend::CoreOps;
    use crate::gguf::GgmlType;
    use crate::tensor::Tensor;

    /// Every slot of an expert matmul equals the plain matmul of its input row by its expert's
    /// rows (cut out of the stacked weight), for unquantized, 32-block and 256-block types, with
    /// shared and per-slot inputs, and a fused gate/up layout (stride and offset); on the row
    /// kernels (24 rows per expert) and, at every level with a GEMM, on the packed kernels (32
    /// rows) over 20 tokens per expert (the GEMMs' token tiles and their remainder); the grid and
    /// ternary types on the decoded GEMM where an expert has enough tokens. (A case of 1,200
    /// tokens, 600 an expert, was meant to reach a second token block, but that block now holds
    /// 768 KB of activations, 1,300 such tokens: it only cost 90 % of this test's time and most
    /// of CI's aarch64 step.)
    #[test]
    fn expert_matmul_equals_a_matmul_per_expert() {
        for kernels in every_level() {
            let mut be = CpuBackend::new(2).unwrap();
            let level = kernels.name();
            be.kernels = kernels;
            check_expert_matmuls(&be, level);
        }
    }

    fn check_expert_matmuls(be: &CpuBackend, label: &str) {
        let (k_in, n_exp, n_used) = (512, 4, 2);
        let every_type = [
            GgmlType::F32,
            GgmlType::F16,
            GgmlType::Q8_0,
            GgmlType::Q4_0,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
            GgmlType::IQ2_XXS,
            GgmlType::TQ2_0,
            GgmlType::Q1_0,
        ];
        for (stride, tokens) in [(24, 9), (32, 9), (32, 40)] {
            for t in every_type {
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
            // F16 stacks stay as mapped: the expert passes have no panel kernel.
            be.packs(t) && stride.is_multiple_of(16) && t != GgmlType::F16,
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

    fn softmax_route(rows: usize, n_expert: usize, n_used: usize) -> MoeRouteParams {
        MoeRouteParams {
            rows,
            n_expert,
            n_used,
            gating: ExpertGating::Softmax,
            normalize: true,
            scale: 1.0,
        }
    }

    /// Sigmoid routing (GLM-4.5): the bias moves the choice but not the weights, which are the
    /// chosen sigmoids, renormalized or not, then scaled.
    #[test]
    fn sigmoid_routing_chooses_by_biased_score_and_weighs_by_the_unbiased_one() {
        let be = CpuBackend::new(1).unwrap();
        let logits = vec![1.0, 0.0, -1.0, 2.0];
        let bias = be
            .weight(&Tensor::from_f32("b", vec![4], &[0.0, 0.0, 5.0, 0.0]))
            .unwrap();
        let sig = |x: f32| 1.0 / (1.0 + (-x).exp());
        for normalize in [false, true] {
            let p = MoeRouteParams {
                gating: ExpertGating::Sigmoid,
                normalize,
                scale: 2.5,
                ..softmax_route(1, 4, 2)
            };
            let (mut sel, mut w) = (vec![0.0; 2], vec![0.0; 2]);
            be.moe_route(&logits, Some(&bias), &p, &mut sel, &mut w);
            assert_eq!(sel, [2.0, 3.0]);
            let (a, b) = (sig(-1.0), sig(2.0));
            let total = if normalize { a + b } else { 1.0 };
            assert!((w[0] - 2.5 * a / total).abs() < 1e-6, "{w:?}");
            assert!((w[1] - 2.5 * b / total).abs() < 1e-6, "{w:?}");
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
        be.moe_route(&logits, None, &softmax_route(2, 5, 3), &mut sel, &mut w);
        assert_eq!(&sel[..3], &[1.0, 3.0, 4.0]);
        assert_eq!(&sel[3..5], &[0.0, 1.0]);
        let e = |v: f32| v.exp();
        let (a, b) = (e(2.0), e(1.0));
        assert!((w[0] - a / (2.0 * a + b)).abs() < 1e-6 && (w[2] - b / (2.0 * a + b)).abs() < 1e-6);
        assert!((w[3..].iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }
}
