//! The GPU side of the operations that hybrid recurrent and mixture-of-experts models (Qwen3.5)
//! add to the `Backend` trait: partial RoPE, sigmoid gates, the DeltaNet convolution step and
//! recurrence, expert routing, expert matmuls and their weighted sum. The contracts are on the
//! trait (backend/mod.rs), the reference is the CPU's (backend/cpu/hybrid.rs); the kernels are in
//! shaders/hybrid.wgsl, delta_net.wgsl and moe.wgsl. The recurrent state is an ordinary activation
//! buffer, so the session's checkpoints copy it on the device (`copy_rows_from`).

use super::WgpuBackend;
use super::buffers::{self, GpuBuffer, GpuWeight};
use super::ops::{bind, grid};
use super::pipelines::{Access, Kernel};
use crate::backend::{DeltaNetParams, ExpertMatmulParams, RopeLayout};
use crate::error::Result;
use crate::gguf::GgmlType;
use crate::tensor::Tensor;

use Access::{Read, ReadWrite};

/// The widest DeltaNet head: the kernel keeps a column of the state (this many values) per
/// invocation.
const MAX_DELTA_NET_HEAD: usize = 256;
/// Most experts `moe_route` takes (its probabilities live in workgroup memory).
const MAX_EXPERTS: usize = 1024;

/// A kernel of shaders/hybrid.wgsl: the op's define and entry point share its name.
fn small_kernel(op: &'static str, define: &'static str, bindings: &[Access]) -> Kernel {
    Kernel::new(op, "hybrid", bindings).entry(op).flag(define)
}

fn expert_kernel(t: GgmlType) -> Kernel {
    Kernel::new("expert_matvec", "moe", &[Read, Read, Read, ReadWrite])
        .flag("EXPERT_MATVEC")
        .flag(t.name())
}

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

    /// Build ahead the expert mat-vec of a stacked expert weight of type `t`.
    pub(super) fn prepare_experts(&self, t: GgmlType) -> Result<()> {
        self.pipelines
            .get(&self.gpu, &expert_kernel(t), self.param_slot)
            .map(|_| ())
    }

    /// RoPE over the leading `rot_dims` values of each head (all of them for full RoPE).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn gpu_rope_partial(
        &self,
        x: &mut GpuBuffer,
        table: &GpuBuffer,
        rows: usize,
        n_heads: usize,
        head_dim: usize,
        rot_dims: usize,
        layout: RopeLayout,
    ) {
        let pairs = rows * n_heads * rot_dims / 2;
        let k = Kernel::new("rope", "rope", &[ReadWrite, Read]);
        self.run(
            &k,
            &[
                pairs as u32,
                n_heads as u32,
                head_dim as u32,
                rot_dims as u32,
                (layout == RopeLayout::Neox) as u32,
            ],
            &[bind(&x.dev), bind(&table.dev)],
            grid(pairs.div_ceil(256)),
        );
    }

    pub(super) fn gpu_mul_sigmoid(
        &self,
        x: &mut GpuBuffer,
        gate: &GpuBuffer,
        rows: usize,
        width: usize,
        gate_width: usize,
    ) {
        if gate_width == 0 || !width.is_multiple_of(gate_width) {
            self.gpu.fail(format!(
                "mul_sigmoid: {gate_width} gate values do not divide a row of {width}"
            ));
            return;
        }
        let len = rows * width;
        let k = small_kernel("mul_sigmoid", "MUL_SIGMOID", &[ReadWrite, Read]);
        self.run(
            &k,
            &[
                len as u32,
                width as u32,
                gate_width as u32,
                (width / gate_width) as u32,
            ],
            &[bind(&x.dev), bind(&gate.dev)],
            grid(len.div_ceil(256)),
        );
    }

    pub(super) fn gpu_conv_step(
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
        let params = [rows as u32, channels as u32, k as u32];
        let buffers = [bind(&x.dev), bind(taps), bind(&state.dev), bind(&out.dev)];
        let bindings = [Read, Read, ReadWrite, ReadWrite];
        self.run(
            &small_kernel("conv_step", "CONV_STEP", &bindings),
            &params,
            &buffers,
            grid((rows * channels).div_ceil(256)),
        );
        self.run(
            &small_kernel("conv_state", "CONV_STEP", &bindings),
            &params,
            &buffers,
            grid(channels.div_ceil(256)),
        );
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn gpu_gated_delta_net(
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
        let (Some((a, _)), Some((dt_bias, _))) = (
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
        let mut k = Kernel::new(
            "gated_delta_net",
            "delta_net",
            &[Read, Read, Read, Read, Read, ReadWrite, ReadWrite],
        );
        k.defines.insert("D", d.to_string());
        let qkv_width = (2 * p.n_k_heads + p.n_v_heads) * d;
        self.run(
            &k,
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

    pub(super) fn gpu_moe_route(
        &self,
        logits: &GpuBuffer,
        rows: usize,
        n_expert: usize,
        n_used: usize,
        selected: &mut GpuBuffer,
        weights: &mut GpuBuffer,
    ) {
        if n_expert > MAX_EXPERTS || n_used == 0 || n_used > n_expert {
            self.gpu.fail(format!(
                "moe_route: {n_used} of {n_expert} experts (the GPU kernel takes up to {MAX_EXPERTS})"
            ));
            return;
        }
        let k = Kernel::new("moe_route", "moe", &[Read, ReadWrite, ReadWrite])
            .entry("route")
            .flag("MOE_ROUTE");
        self.run(
            &k,
            &[rows as u32, n_expert as u32, n_used as u32],
            &[bind(&logits.dev), bind(&selected.dev), bind(&weights.dev)],
            grid(rows),
        );
    }

    pub(super) fn gpu_expert_matmul(
        &self,
        x: &GpuBuffer,
        w: &GpuWeight,
        selected: &GpuBuffer,
        out: &mut GpuBuffer,
        p: &ExpertMatmulParams,
    ) {
        let Some(m) = self.matrix(w, "expert_matmul") else {
            return;
        };
        let slots = p.rows * p.n_used;
        if slots > 65535 {
            self.gpu.fail(format!(
                "expert_matmul: {slots} expert slots in one call, more than one grid dimension holds"
            ));
            return;
        }
        let rows_per_wg = self.matvec_rows_per_wg();
        for part in &m.parts {
            let params = [
                m.cols as u32,
                m.cols.div_ceil(16) as u32,
                m.row_bytes as u32,
                p.expert_rows as u32,
                p.expert_stride as u32,
                p.row_offset as u32,
                p.n_used as u32,
                p.per_slot_input as u32,
                part.first_row as u32,
                part.rows as u32,
                rows_per_wg as u32,
            ];
            self.run(
                &expert_kernel(m.dtype),
                &params,
                &[
                    bind(&x.dev),
                    bind(&part.dev),
                    bind(&selected.dev),
                    bind(&out.dev),
                ],
                [p.expert_rows.div_ceil(rows_per_wg) as u32, slots as u32, 1],
            );
        }
    }

    pub(super) fn gpu_moe_combine(
        &self,
        y: &GpuBuffer,
        weights: &GpuBuffer,
        rows: usize,
        n_used: usize,
        width: usize,
        out: &mut GpuBuffer,
    ) {
        let len = rows * width;
        let k = small_kernel("moe_combine", "MOE_COMBINE", &[Read, Read, ReadWrite]);
        self.run(
            &k,
            &[len as u32, width as u32, n_used as u32],
            &[bind(&y.dev), bind(&weights.dev), bind(&out.dev)],
            grid(len.div_ceil(256)),
        );
    }
}
