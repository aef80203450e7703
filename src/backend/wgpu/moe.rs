//! The mixture-of-experts ops (`MoeOps`) on the GPU: routing, the selected experts' mat-vecs
//! reading the stacked weight in place, and their weighted sum (shaders/moe.wgsl). The contracts
//! are on the trait (backend/mod.rs), the reference is the CPU's (backend/cpu/moe.rs).

use super::WgpuBackend;
use super::buffers::{GpuBuffer, GpuWeight, Matrix, bind};
use super::matmul::Reader;
use super::pipelines as kernels;
use super::stream::grid;
use crate::backend::{CoreOps, ExpertGating, ExpertMatmulParams, MoeOps, MoeRouteParams};
use crate::error::Result;

/// Most experts `moe_route` takes (its probabilities live in workgroup memory).
const MAX_EXPERTS: usize = 1024;

impl WgpuBackend {
    fn expert_kernel_of(&self, m: &Matrix) -> kernels::Kernel {
        kernels::expert_kernel(
            m.dtype,
            m.cols.is_multiple_of(4),
            self.matvec_layout(),
            self.kernel_rounding(m),
        )
    }

    /// Build ahead the expert mat-vec of a stacked expert weight.
    pub(super) fn prepare_experts(&self, m: &Matrix) -> Result<()> {
        if self
            .pipeline_in(&m.kernels.expert, || self.expert_kernel_of(m))
            .is_none()
            && let Some(e) = self.take_error()
        {
            return Err(e);
        }
        Ok(())
    }
}

impl MoeOps for WgpuBackend {
    fn moe_route(
        &self,
        logits: &GpuBuffer,
        selection_bias: Option<&GpuWeight>,
        p: &MoeRouteParams,
        selected: &mut GpuBuffer,
        weights: &mut GpuBuffer,
    ) {
        let (n_expert, n_used) = (p.n_expert, p.n_used);
        if n_expert > MAX_EXPERTS || n_used == 0 || n_used > n_expert {
            self.gpu.fail(format!(
                "moe_route: {n_used} of {n_expert} experts (the GPU kernel takes up to {MAX_EXPERTS})"
            ));
            return;
        }
        // Without a bias the binding is filled by any buffer (the logits), never read.
        let bias_dev = match selection_bias {
            Some(w) => match self.vector(w, "moe_route selection bias") {
                Some((dev, len)) if len >= n_expert => dev,
                Some((_, len)) => {
                    self.gpu.fail(format!(
                        "moe_route: a selection bias of {len} values for {n_expert} experts"
                    ));
                    return;
                }
                None => return,
            },
            None => &logits.dev,
        };
        let sizes = [
            ("the logits", logits.len, p.rows * n_expert),
            ("selected", selected.len, p.rows * n_used),
            ("weights", weights.len, p.rows * n_used),
        ];
        if !self.holds("moe_route", &sizes) {
            return;
        }
        let gating = match p.gating {
            ExpertGating::Softmax => 0,
            ExpertGating::Sigmoid => 1,
        };
        self.run_in(
            &self.fixed.moe_route,
            kernels::moe_route_kernel,
            &[
                p.rows as u32,
                n_expert as u32,
                n_used as u32,
                gating,
                selection_bias.is_some() as u32,
                p.normalize as u32,
                p.scale.to_bits(),
            ],
            &[
                bind(&logits.dev),
                bind(bias_dev),
                bind(&selected.dev),
                bind(&weights.dev),
            ],
            grid(p.rows),
        );
    }

    fn expert_matmul(
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
        // The kernel reads a slot's expert rows only inside the weight part it binds, whatever
        // `selected` holds.
        let sizes = [
            ("selected", selected.len, slots),
            ("out", out.len, slots * p.expert_rows),
        ];
        if !self.holds("expert_matmul", &sizes) {
            return;
        }
        let per_wg = self.matvec_layout().rows();
        let inputs = if p.per_slot_input { slots } else { p.rows };
        let Some((input, input_id)) = self.weight_input(x, m, inputs * m.cols, Reader::Expert)
        else {
            return;
        };
        for part in &m.parts {
            let mut params = vec![m.cols as u32, m.row_bytes as u32];
            // The mat-vec's own weights, outputs and trace words: unused by its EXPERT variant.
            params.extend([0; 8]);
            params.extend([
                p.expert_rows as u32,
                p.expert_stride as u32,
                p.row_offset as u32,
                p.n_used as u32,
                p.per_slot_input as u32,
                part.first_row as u32,
                part.rows as u32,
            ]);
            self.run_in(
                &m.kernels.expert,
                || self.expert_kernel_of(m),
                &params,
                &[
                    (&input, input_id),
                    bind(&part.dev),
                    bind(&out.dev),
                    bind(&selected.dev),
                ],
                [p.expert_rows.div_ceil(per_wg) as u32, slots as u32, 1],
            );
        }
    }

    fn add_expert_bias(
        &self,
        x: &mut GpuBuffer,
        bias: &GpuWeight,
        selected: &GpuBuffer,
        slots: usize,
        width: usize,
    ) {
        let Some((dev, bias_len)) = self.vector(bias, "add_expert_bias") else {
            return;
        };
        let len = slots * width;
        let sizes = [("x", x.len, len), ("selected", selected.len, slots)];
        if width == 0 || !self.holds("add_expert_bias", &sizes) {
            return;
        }
        // A slot whose expert has no bias row (past `experts`) is left as it is.
        let experts = bias_len / width;
        self.run_in(
            &self.fixed.add_expert_bias,
            kernels::add_expert_bias_kernel,
            &[len as u32, width as u32, experts as u32],
            &[bind(&x.dev), bind(dev), bind(&selected.dev)],
            grid(len.div_ceil(256)),
        );
    }

    fn moe_combine(
        &self,
        y: &GpuBuffer,
        weights: &GpuBuffer,
        rows: usize,
        n_used: usize,
        width: usize,
        out: &mut GpuBuffer,
    ) {
        let len = rows * width;
        let sizes = [
            ("y", y.len, rows * n_used * width),
            ("weights", weights.len, rows * n_used),
            ("out", out.len, len),
        ];
        if n_used == 0 {
            self.gpu
                .fail("moe_combine: no expert slots per token".into());
            return;
        }
        if !self.holds("moe_combine", &sizes) {
            return;
        }
        self.run_in(
            &self.fixed.moe_combine,
            kernels::moe_combine_kernel,
            &[len as u32, width as u32, n_used as u32],
            &[bind(&y.dev), bind(&weights.dev), bind(&out.dev)],
            grid(len.div_ceil(256)),
        );
    }
}
