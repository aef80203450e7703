//! The CPU's recurrent ops (`RecurrentOps`): the two halves of Qwen3.5's Gated DeltaNet blocks,
//! the short causal convolution over time and the delta-rule recurrence, each carrying its state
//! between calls. The contracts are on the trait (backend/mod.rs); the arithmetic follows
//! llama.cpp's CPU ops (`ggml_ssm_conv`, `ggml_gated_delta_net`) so results round as its do.

use std::borrow::Cow;

use super::ggml_math::{sigmoid, softplus};
use super::{CpuBackend, CpuWeight, SharedOut};
use crate::backend::{DeltaNetParams, RecurrentOps};
use crate::gguf::GgmlType;

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

/// `x / sqrt(Σx² + eps)` as llama.cpp computes it (`build_gdn_l2_norm`): an RMS norm with
/// epsilon eps/n, squares summed in f64, then scaled by 1/sqrt(n).
fn l2_normalize(x: &[f32], eps: f32, out: &mut [f32]) {
    let n = x.len() as f32;
    let sum = super::ggml_math::sum_of_squares(x);
    let mean = (sum / x.len() as f64) as f32;
    let scale = 1.0 / (mean + eps / n).sqrt();
    let post = 1.0 / n.sqrt();
    for (o, &v) in out.iter_mut().zip(x) {
        *o = (v * scale) * post;
    }
}

impl RecurrentOps for CpuBackend {
    fn conv_step(
        &self,
        x: &Vec<f32>,
        kernel: &CpuWeight,
        state: &mut Vec<f32>,
        out: &mut Vec<f32>,
        rows: usize,
        channels: usize,
    ) {
        let _span = self.profiler.span("conv_step");
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
                    (kernels.silu_mul)(o, &ONES[..n]);
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
        let _span = self.profiler.span("gated_delta_net");
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

                    (self.kernels.delta_rule)(s, &k, &q, v, [g.exp(), b, scale], &mut o);
                    for (j, &oj) in o.iter().enumerate() {
                        // SAFETY: task h alone writes columns h·d..(h+1)·d of each output row.
                        unsafe { *out_ptr.get().add(t * out_width + h * d + j) = oj };
                    }
                }
            });
    }
}

#[cfg(test)]
mod tests {
    use super::super::ggml_math;
    use super::super::portable::tests::activations;
    use super::*;
    use crate::backend::CoreOps;
    use crate::tensor::Tensor;

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
        be.conv_step(&x, &kernel, &mut state, &mut whole, rows, ch);
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
                be.conv_step(&piece.to_vec(), &kernel, &mut st, &mut o, n, ch);
                out[i * split * ch..i * split * ch + n * ch].copy_from_slice(&o);
            }
            assert_eq!(out, whole, "pieces of {split}");
            assert_eq!(st, state, "final state, pieces of {split}");
        }
    }
}
