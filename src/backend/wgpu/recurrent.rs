//! The recurrent ops (`RecurrentOps`) on the GPU: the two halves of Qwen3.5's Gated DeltaNet
//! blocks, the short causal convolution (shaders/conv.wgsl) and the delta-rule recurrence
//! (shaders/delta_net.wgsl). The contracts are on the trait (backend/mod.rs), the reference is the
//! CPU's (backend/cpu/recurrent.rs). The recurrent state is an ordinary activation buffer, so the
//! session's checkpoints copy it on the device (`copy_rows`).

use super::WgpuBackend;
use super::buffers::{self, GpuBuffer, GpuWeight, bind};
use super::pipelines as kernels;
use super::stream::grid;
use crate::backend::{DeltaNetParams, RecurrentOps};
use crate::error::Result;
use crate::gguf::GgmlType;
use crate::tensor::Tensor;

/// The widest DeltaNet head: the kernel keeps a column of the state (this many values) per
/// invocation.
const MAX_DELTA_NET_HEAD: usize = 256;

/// A convolution's taps (`ssm_conv1d`: rows of K = 4 F32 values) are kept as f32 values, as a
/// vector is: `conv_step` reads them directly, and the matmul kernels (rows of 16 values and
/// more) never see them.
pub fn is_conv_taps(t: &Tensor) -> bool {
    t.dims.len() == 2 && t.dtype == GgmlType::F32 && t.row_len() < 16
}

impl WgpuBackend {
    pub(super) fn upload_taps(&self, t: &Tensor) -> Result<GpuWeight> {
        let mut flat = t.clone();
        flat.dims = vec![t.dims.iter().product()];
        buffers::upload_weight(&self.gpu, &self.memory, &flat)
    }
}

impl RecurrentOps for WgpuBackend {
    fn conv_step(
        &self,
        x: &GpuBuffer,
        kernel: &GpuWeight,
        state: &mut GpuBuffer,
        out: &mut GpuBuffer,
        rows: usize,
        channels: usize,
    ) {
        let Some((taps, len)) = self.vector(kernel, "conv_step") else {
            return;
        };
        let k = len / channels.max(1);
        if k == 0 || k * channels != len {
            self.gpu.fail(format!(
                "conv_step: {len} taps do not make a kernel for {channels} channels"
            ));
            return;
        }
        let sizes = [
            ("x", x.len, rows * channels),
            ("the state", state.len, (k - 1) * channels),
            ("out", out.len, rows * channels),
        ];
        if !self.holds("conv_step", &sizes) {
            return;
        }
        let params = [rows as u32, channels as u32, k as u32];
        let buffers = [bind(&x.dev), bind(taps), bind(&state.dev), bind(&out.dev)];
        self.run(
            &kernels::conv_kernel("conv_step"),
            &params,
            &buffers,
            grid((rows * channels).div_ceil(256)),
        );
        self.run(
            &kernels::conv_kernel("conv_state"),
            &params,
            &buffers,
            grid(channels.div_ceil(256)),
        );
    }

    fn gated_delta_net(
        &self,
        qkv: &GpuBuffer,
        alpha: &GpuBuffer,
        beta: &GpuBuffer,
        a: &GpuWeight,
        dt_bias: &GpuWeight,
        state: &mut GpuBuffer,
        out: &mut GpuBuffer,
        p: &DeltaNetParams,
    ) {
        let (Some((a, a_len)), Some((dt_bias, dt_bias_len))) = (
            self.vector(a, "gated_delta_net"),
            self.vector(dt_bias, "gated_delta_net"),
        ) else {
            return;
        };
        let d = p.head_dim;
        if d == 0 || d > MAX_DELTA_NET_HEAD {
            self.gpu.fail(format!(
                "Gated DeltaNet heads of {d} values: the GPU kernel takes up to {MAX_DELTA_NET_HEAD}"
            ));
            return;
        }
        if p.n_k_heads == 0 {
            self.gpu
                .fail("Gated DeltaNet: no key heads for the value heads to share".into());
            return;
        }
        let qkv_width = (2 * p.n_k_heads + p.n_v_heads) * d;
        let (rows, n_v) = (p.rows, p.n_v_heads);
        let sizes = [
            ("qkv", qkv.len, rows * qkv_width),
            ("alpha", alpha.len, rows * n_v),
            ("beta", beta.len, rows * n_v),
            ("A", a_len, n_v),
            ("dt_bias", dt_bias_len, n_v),
            ("the state", state.len, n_v * d * d),
            ("out", out.len, rows * n_v * d),
        ];
        if !self.holds("gated_delta_net", &sizes) {
            return;
        }
        self.run(
            &kernels::delta_net_kernel(d),
            &[
                p.rows as u32,
                p.n_k_heads as u32,
                p.n_v_heads as u32,
                qkv_width as u32,
                p.eps.to_bits(),
            ],
            &[
                bind(&qkv.dev),
                bind(&alpha.dev),
                bind(&beta.dev),
                bind(a),
                bind(dt_bias),
                bind(&state.dev),
                bind(&out.dev),
            ],
            [p.n_v_heads as u32, d.div_ceil(64) as u32, 1],
        );
    }
}
