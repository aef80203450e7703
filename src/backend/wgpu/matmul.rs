//! Matmuls on the GPU: one activation row as a mat-vec (shaders/matvec.wgsl), more rows as the
//! tiled GEMM (shaders/matmul.wgsl), except a few rows on a software adapter, which run the
//! mat-vec once per row in one dispatch (a verify pass's rows would cost a whole tile there).
//! Either way the weights of one input (Q/K/V, gate/up) run as one dispatch where they share a
//! type and width, and the gate/up pair writes only its gated activation (on a software adapter
//! the GEMM takes its lavapipe variant, one weight at a time).
//! A weight split into parts runs a dispatch per part.

use super::buffers::{GpuBuffer, GpuWeight, Matrix, bind};
use super::device::Coop;
use super::pipelines::{self as kernels, ActRounding, BlocksShape, Kernel, MatvecLayout};
use super::stream::{Bindings, ParamWords, bindings, grid};
use super::{Packed, PackedIn, WgpuBackend};
use crate::backend::{CoreOps, GateActivation};

/// Activation rows up to which a matmul runs as mat-vec on a software adapter (more take the
/// tiled kernel, whose tiles of 128 rows a CPU computes whole). On lavapipe, Gemma 3 270M in
/// Q4_K_M, a verify pass of 2 rows cost 11.6 decode steps with the tiled kernel.
const SOFTWARE_MATVEC_MAX_ROWS: usize = 8;

/// Storage buffers the gate/up mat-vec binds when it also packs its output: x, two weights, two
/// outputs, the packed blocks and their counts.
const GATED_PACKING_BUFFERS: u32 = 7;

/// The kind of kernel that reads a matmul's activations (`WgpuBackend::weight_input`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reader {
    Tiled,
    Matvec,
    /// The experts' mat-vec (matvec.wgsl's EXPERT variant).
    Expert,
}

impl WgpuBackend {
    /// The first `values` activations of `x` as a weight of `m`'s type takes them, for a kernel
    /// of the kind `reader`: rounded as the CPU rounds them (`activation_format`: Q8_0 or Q8_K
    /// blocks; f16 or bf16 values) into the backend's scratch buffer by shaders/round_acts.wgsl,
    /// or `x` itself for f32 weights (and with `GpuOptions::f32_activations`), and for a mat-vec
    /// that rounds x itself (`kernel_rounding`); quantized to packed Q8_K blocks for an
    /// integer-dot mat-vec (`int_dot`); as f16 for the GEMM on cooperative matrices
    /// (`half_input`). A matmul binds the result before its next call rounds into
    /// the same buffer; the stream runs dispatches in order. The rounding is one dispatch per
    /// matmul input, as llama.cpp's Vulkan `quantize_q8_1` before its integer-dot mat-vecs.
    pub(super) fn weight_input(
        &self,
        x: &GpuBuffer,
        m: &Matrix,
        values: usize,
        reader: Reader,
    ) -> Option<(wgpu::Buffer, u64)> {
        if !self.holds("matmul", &[("the input", x.len, values)]) {
            return None;
        }
        if reader == Reader::Matvec && self.int_dot(m) {
            let words = values / 4 + values / 256;
            let recorded = self.stream().recorded;
            let mut scratch = self.scratch.lock().unwrap_or_else(|p| p.into_inner());
            let current = scratch
                .packed
                .filter(|p| p.input == (x.dev.id, values) && p.at.is_none_or(|at| at == recorded));
            if let Some(current) = current {
                drop(scratch);
                return match current.held {
                    PackedIn::Rounded => self.scratch_buffer(|s| &mut s.rounded, words),
                    PackedIn::Gated => self.scratch_buffer(|s| &mut s.gated_packed, words),
                    PackedIn::Normed => self.scratch_buffer(|s| &mut s.normed_packed, words),
                };
            }
            scratch.packed = scratch.sharing_packed.then_some(Packed {
                input: (x.dev.id, values),
                held: PackedIn::Rounded,
                at: None,
            });
            drop(scratch);
            let (buf, id) = self.scratch_buffer(|s| &mut s.rounded, words)?;
            self.run_in(
                &self.fixed.quantize_q8k,
                kernels::quantize_q8k_kernel,
                &[values as u32, ActRounding::Q8K.mode()],
                &[bind(&x.dev), (&buf, id)],
                grid(values / 256),
            );
            return Some((buf, id));
        }
        if self.gpu.f32_activations
            || (reader != Reader::Tiled && self.kernel_rounding(m).is_some())
        {
            return Some((x.dev.buf.clone(), x.dev.id));
        }
        let Some(rounding) = ActRounding::of(m.dtype) else {
            return Some((x.dev.buf.clone(), x.dev.id));
        };
        let half = reader == Reader::Tiled && self.half_input(m);
        let words = if half { values.div_ceil(2) } else { values };
        let (buf, id) = self.scratch_buffer(|s| &mut s.rounded, words)?;
        self.scratch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .packed = None;
        let (slot, kernel): (_, fn() -> Kernel) = if half {
            (&self.fixed.round_acts_half, kernels::round_acts_half_kernel)
        } else {
            (&self.fixed.round_acts, kernels::round_acts_kernel)
        };
        self.run_in(
            slot,
            kernel,
            &[values as u32, rounding.mode()],
            &[bind(&x.dev), (&buf, id)],
            grid(values.div_ceil(256)),
        );
        Some((buf, id))
    }

    /// Whether the tiled kernel over `m` takes its activations as f16 (`weight_input` rounds
    /// them into f16 for it): the GEMM on cooperative matrices, which multiplies f16 tiles,
    /// where rows are a multiple of 4 long and a rounding pass runs anyway. The tile takes each
    /// activation as it is instead of converting it once per weight tile of 64 rows (40 times in
    /// the 1B Llama shape's fused query and key projections), and reads half the bytes.
    fn half_input(&self, m: &Matrix) -> bool {
        self.coop_for(m.dtype).is_some()
            && m.cols.is_multiple_of(4)
            && !self.gpu.f32_activations
            && ActRounding::of(m.dtype).is_some()
    }

    /// Whether `m`'s decode mat-vec takes integer dot products on packed Q8_K activations
    /// (unless `GpuOptions::float_matvecs`): the per-type kernel's K-quants.
    pub(super) fn int_dot(&self, m: &Matrix) -> bool {
        use crate::gguf::GgmlType::{Q4_K, Q5_K, Q6_K};
        self.gpu.int_dot
            && !self.gpu.f32_activations
            && matches!(m.dtype, Q4_K | Q5_K | Q6_K)
            && self.blocks_matvec(m, false).is_some()
    }

    /// Which kernel a matmul of `rows` activation rows runs.
    fn reader(&self, rows: usize) -> Reader {
        if self.runs_matvec(rows) {
            Reader::Matvec
        } else {
            Reader::Tiled
        }
    }

    /// How `m`'s mat-vec kernels round x as they read it: the staged layout (GPUs) does; the
    /// direct one (software adapters) leaves it to `weight_input`'s dispatch (None).
    pub(super) fn kernel_rounding(&self, m: &Matrix) -> Option<ActRounding> {
        if self.matvec_layout() == MatvecLayout::Staged && !self.gpu.f32_activations {
            ActRounding::of(m.dtype)
        } else {
            None
        }
    }

    /// Whether a matmul of `rows` activation rows runs as mat-vecs.
    fn runs_matvec(&self, rows: usize) -> bool {
        rows == 1 || (self.gpu.caps.software_kernels && rows <= SOFTWARE_MATVEC_MAX_ROWS)
    }

    pub(super) fn matmul_part(&self, x: &GpuBuffer, m: &Matrix, rows: usize, out: &GpuBuffer) {
        if !self.holds("matmul", &[("the output", out.len, rows * m.rows)]) {
            return;
        }
        let Some((input, input_id)) = self.weight_input(x, m, rows * m.cols, self.reader(rows))
        else {
            return;
        };
        for part in &m.parts {
            let buffers = [(&input, input_id), bind(&part.dev), bind(&out.dev)];
            if self.runs_matvec(rows) {
                let (params, groups) = self.matvec_call_rows(
                    m,
                    [part.rows, 0, 0],
                    [part.first_row, 0, 0],
                    None,
                    rows,
                    [m.rows, 0, 0],
                );
                let before = self.stream().recorded;
                self.run_in(
                    &m.kernels.matvec[0],
                    || self.matvec_kernel_of(m, 1, None),
                    &params,
                    &buffers,
                    groups,
                );
                self.keep_projection(m, rows, before, (params, groups), &buffers, out);
            } else {
                let (params, groups) = self.matmul_call(
                    m,
                    rows,
                    [part.rows, 0, 0],
                    [m.rows, 0, 0],
                    [part.first_row, 0, 0],
                    None,
                );
                self.run_in(
                    &m.kernels.matmul[0],
                    || self.matmul_kernel_of(m, 1, None),
                    &params,
                    &buffers,
                    groups,
                );
            }
        }
    }

    /// How the decode mat-vec reads weights: staged in whole lines on a GPU; in place, a row per
    /// subgroup, on a software adapter with subgroups.
    pub(super) fn matvec_layout(&self) -> MatvecLayout {
        let caps = &self.gpu.caps;
        if caps.software_kernels && caps.subgroups {
            MatvecLayout::Direct {
                rows: (64 / self.gpu.info.subgroup_min_size.max(1) as usize).max(1),
            }
        } else {
            MatvecLayout::Staged
        }
    }

    /// The workgroup size and rows a workgroup of `m`'s per-type mat-vec (matvec_blocks.wgsl),
    /// where it runs (`gated`: the gate and up rows of the outputs a workgroup computes): None
    /// for the other types, which are staged, and for the direct layout (software adapters with
    /// subgroups).
    ///
    /// Measured on an H200, the 1B Llama shape in Q4_K_M, tokens/s at tg128 (single runs, so a
    /// ranking within a few percent): 64 invocations and 2 rows 378-388, 128 and 2 rows 383-385,
    /// 128 and 4 rows 379-386, 128 and 1 row 368-372, 256 and 2 rows 346, 32 and 2 rows 348; rows
    /// of 4096 values or more (the down projection) on 256 invocations 383-388 against 128 on
    /// 384; the gated pair with two outputs a workgroup 366-371 against 352-364 with one. With the
    /// integer-dot kernels (2026-11-30, `scripts/gpu-device/sweep.sh`, tg128 on the 8B and 1B
    /// shapes): this default 137.5 and 439, 256 invocations for every width 136.5 and 425. The
    /// other shapes ran only in a variant (since removed) that issued the loads of two steps
    /// before their arithmetic, which cost the default shape 6-7 % (129.2 and 393): (WG, rows,
    /// gated rows) 128,2,4 136.1 and 429; 64,2,4 133.7 and 420; 128,4,4 115.7 and 354; 256,4,4
    /// 105.6 and 302. So 128,2,4 may beat the default without it: the next GPU run measures it.
    ///
    /// `KILN_WGPU_MATVEC` (`Gpu::matvec_shape`) sets the shape by hand, for measuring others.
    pub(super) fn blocks_matvec(&self, m: &Matrix, gated: bool) -> Option<BlocksShape> {
        if self.matvec_layout() != MatvecLayout::Staged
            || !kernels::blocks_matvec_reads(m.dtype, m.cols)
        {
            return None;
        }
        Some(match self.gpu.matvec_shape {
            Some(s) => BlocksShape {
                wg: s.wg,
                rows: if gated { s.gated_rows } else { s.rows },
            },
            None => BlocksShape {
                wg: if m.cols >= 4096 { 256 } else { 64 },
                rows: if gated { 4 } else { 2 },
            },
        })
    }

    /// Whether the prefill matmul takes its variant for subgroups of exactly 8 (lavapipe), which
    /// shares activations between lanes instead of reading them from workgroup memory per lane.
    pub(super) fn matmul_sg8(&self) -> bool {
        let info = &self.gpu.info;
        self.gpu.coop.is_none()
            && self.gpu.caps.software_kernels
            && self.gpu.caps.subgroups
            && info.subgroup_min_size == 8
            && info.subgroup_max_size == 8
            && self.gpu.limits.max_compute_workgroup_storage_size >= 24 << 10
    }

    /// `CoreOps::matmul_many`.
    pub(super) fn matvec_many(
        &self,
        x: &GpuBuffer,
        ws: &[&GpuWeight],
        rows: usize,
        outs: &mut [&mut GpuBuffer],
    ) {
        // Weights that share a type and width (and are not split) run as one dispatch: Q/K/V
        // of a Q4_K_M file whose V is Q6_K as two, Q and K together.
        let can_fuse = self.runs_matvec(rows) || !self.matmul_sg8();
        let key = |w: &GpuWeight| {
            w.matrix()
                .filter(|m| can_fuse && m.parts.len() == 1)
                .map(|m| (m.dtype, m.cols, m.row_bytes))
        };
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for (i, w) in ws.iter().enumerate() {
            let found = key(w).and_then(|k| {
                groups
                    .iter()
                    .position(|g| g.len() < 3 && key(ws[g[0]]) == Some(k))
            });
            match found {
                Some(g) => groups[g].push(i),
                None => groups.push(vec![i]),
            }
        }
        // The groups' mat-vecs read x and write only their outputs, so packed Q8_K blocks made
        // for one group serve the next.
        self.share_packed(true);
        for group in groups {
            match group[..] {
                [i] => self.matmul(x, ws[i], rows, outs[i]),
                _ => {
                    let ms: Vec<&Matrix> = group.iter().filter_map(|&i| ws[i].matrix()).collect();
                    let bufs: Vec<&GpuBuffer> = group.iter().map(|&i| &*outs[i]).collect();
                    self.fused_matmuls(x, &ms, rows, &bufs);
                }
            }
        }
        self.share_packed(false);
    }

    /// Start (or end) a span in which `weight_input` quantizes an input to packed blocks once:
    /// blocks current at its start (a norm's) stay current through it, none after it.
    pub(super) fn share_packed(&self, on: bool) {
        let recorded = self.stream().recorded;
        let mut scratch = self.scratch.lock().unwrap_or_else(|p| p.into_inner());
        scratch.sharing_packed = on;
        scratch.packed = match scratch.packed {
            Some(p) if on && p.at == Some(recorded) => Some(Packed { at: None, ..p }),
            _ => None,
        };
    }

    /// Where a kernel that makes `rows` rows of `width` values (a norm, the decode attention's
    /// reduce) writes them a second time, as packed Q8_K blocks, for the integer-dot mat-vecs that
    /// read them next (`GpuOptions::int_dot`, decode): the scratch buffer `weight_input` would
    /// quantize into.
    pub(super) fn packed_output(&self, rows: usize, width: usize) -> Option<(wgpu::Buffer, u64)> {
        if !self.packs_outputs(rows, width) {
            return None;
        }
        self.scratch_buffer(|s| &mut s.rounded, width / 4 + width / 256)
    }

    /// Whether kernels that make `rows` rows of `width` values write them as packed Q8_K blocks
    /// too (`packed_output`).
    pub(super) fn packs_outputs(&self, rows: usize, width: usize) -> bool {
        self.gpu.int_dot
            && !self.gpu.f32_activations
            && rows == 1
            && width.is_multiple_of(256)
            && self.matvec_layout() == MatvecLayout::Staged
    }

    /// After a kernel wrote `out`'s `values` as packed blocks too (`packed_output`): they are
    /// current until anything else is recorded.
    pub(super) fn packed_written(&self, out: &GpuBuffer, values: usize) {
        self.mark_packed(out, values, PackedIn::Rounded);
    }

    /// `out`'s `values` are current as packed blocks in the scratch buffer `held` names, until
    /// anything else is recorded.
    pub(super) fn mark_packed(&self, out: &GpuBuffer, values: usize, held: PackedIn) {
        let recorded = self.stream().recorded;
        self.scratch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .packed = Some(Packed {
            input: (out.dev.id, values),
            held,
            at: Some(recorded),
        });
    }

    /// Where the gate/up mat-vec over `g` for one row writes its gated activation (`width`
    /// values) as packed Q8_K blocks too (`kernels::with_gated_packing`), with the blocks'
    /// completion counts: where that mat-vec takes integer dot products (a K-quant gate, whose
    /// down projection's mat-vec then reads the blocks; one of another type quantizes its input
    /// afresh and the blocks go unread), unless the fusions are off.
    fn gated_packing(
        &self,
        g: &Matrix,
        width: usize,
    ) -> Option<((wgpu::Buffer, u64), (wgpu::Buffer, u64))> {
        let applies = self.gpu.fused
            && self.int_dot(g)
            && self.packs_outputs(1, width)
            && self.gpu.limits.max_storage_buffers_per_shader_stage >= GATED_PACKING_BUFFERS;
        if !applies {
            return None;
        }
        let packed = self.scratch_buffer(|s| &mut s.gated_packed, width / 4 + width / 256)?;
        // New buffers start zeroed (wgpu's guarantee), and each dispatch leaves its counts at 0.
        let counts = self.scratch_buffer(|s| &mut s.block_counts, width / 256)?;
        Some((packed, counts))
    }

    /// Two or three matrices of one type and width, each in one part, over the same input.
    fn fused_matmuls(&self, x: &GpuBuffer, ms: &[&Matrix], rows: usize, outs: &[&GpuBuffer]) {
        let rows_of = |i: usize| ms.get(i).map_or(0, |m| m.rows);
        let each = [rows_of(0), rows_of(1), rows_of(2)];
        let mut outputs = [("an output", 0, 0); 3];
        for ((o, m), out) in outputs.iter_mut().zip(ms).zip(outs) {
            *o = ("an output", out.len, rows * m.rows);
        }
        if !self.holds("matmul_many", &outputs) {
            return;
        }
        let Some((input, input_id)) =
            self.weight_input(x, ms[0], rows * ms[0].cols, self.reader(rows))
        else {
            return;
        };
        let mut buffers = Bindings::new();
        buffers.push((&input, input_id));
        for (m, out) in ms.iter().zip(outs) {
            buffers.push(bind(&m.parts[0].dev));
            buffers.push(bind(&out.dev));
        }
        let n = ms.len();
        if self.runs_matvec(rows) {
            let (params, groups) = self.matvec_call_rows(ms[0], each, [0; 3], None, rows, each);
            self.run_in(
                &ms[0].kernels.matvec[n - 1],
                || self.matvec_kernel_of(ms[0], n, None),
                &params,
                &buffers,
                groups,
            );
        } else {
            let (params, groups) = self.matmul_call(ms[0], rows, each, each, [0; 3], None);
            self.run_in(
                &ms[0].kernels.matmul[n - 1],
                || self.matmul_kernel_of(ms[0], n, None),
                &params,
                &buffers,
                groups,
            );
        }
    }

    /// `CoreOps::matmul_gated`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn gated_matmuls(
        &self,
        x: &GpuBuffer,
        gate: &GpuWeight,
        up: &GpuWeight,
        rows: usize,
        width: usize,
        act: GateActivation,
        gate_out: &mut GpuBuffer,
        up_out: &mut GpuBuffer,
    ) {
        // The fused epilogues know SiLU and GELU; gpt-oss's clamped SwiGLU runs after.
        let fused = match (gate.matrix(), up.matrix()) {
            _ if act == GateActivation::SwigluOai => false,
            (Some(g), Some(u)) => {
                (self.runs_matvec(rows) || !self.matmul_sg8())
                    && g.parts.len() == 1
                    && u.parts.len() == 1
                    && (g.dtype, g.cols, g.row_bytes, g.rows)
                        == (u.dtype, u.cols, u.row_bytes, u.rows)
                    && g.rows == width
            }
            _ => false,
        };
        if !fused {
            self.matmul_many(x, &[gate, up], rows, &mut [&mut *gate_out, &mut *up_out]);
            self.gated_activation(gate_out, up_out, rows * width, act);
            return;
        }
        let (Some(g), Some(u)) = (gate.matrix(), up.matrix()) else {
            return;
        };
        let sizes = [
            ("the gate's output", gate_out.len, rows * width),
            ("the up output", up_out.len, rows * width),
        ];
        if !self.holds("matmul_gated", &sizes) {
            return;
        }
        let Some((input, input_id)) = self.weight_input(x, g, rows * g.cols, self.reader(rows))
        else {
            return;
        };
        let buffers = [
            (&input, input_id),
            bind(&g.parts[0].dev),
            bind(&gate_out.dev),
            bind(&u.parts[0].dev),
            bind(&up_out.dev),
        ];
        let each = [g.rows, g.rows, 0];
        if self.runs_matvec(rows) {
            let (params, groups) =
                self.matvec_call_rows(g, each, [0; 3], Some(act), rows, [width, 0, 0]);
            let packing = (rows == 1).then(|| self.gated_packing(g, width)).flatten();
            if let Some(((packed, packed_id), (counts, counts_id))) = &packing {
                let with_packed = bindings(&buffers, &[(packed, *packed_id), (counts, *counts_id)]);
                self.run_in(
                    &g.kernels.gated_packed[act as usize],
                    || kernels::with_gated_packing(self.matvec_kernel_of(g, 2, Some(act))),
                    &params,
                    &with_packed,
                    groups,
                );
                self.mark_packed(gate_out, width, PackedIn::Gated);
                return;
            }
            self.run_in(
                &g.kernels.gated[act as usize],
                || self.matvec_kernel_of(g, 2, Some(act)),
                &params,
                &buffers,
                groups,
            );
        } else {
            let (params, groups) = self.matmul_call(g, rows, each, each, [0; 3], Some(act));
            self.run_in(
                &g.kernels.matmul_gated[act as usize],
                || self.matmul_kernel_of(g, 2, Some(act)),
                &params,
                &buffers,
                groups,
            );
        }
    }

    /// The mat-vec kernel over `m` and `n_weights - 1` more weights of its type and width; with
    /// `gated`, weights 0 and 1 are a feed-forward's gate and up and only the gated activation is
    /// written.
    pub(super) fn matvec_kernel_of(
        &self,
        m: &Matrix,
        n_weights: usize,
        gated: Option<GateActivation>,
    ) -> Kernel {
        if let Some(shape) = self.blocks_matvec(m, gated.is_some()) {
            let (rounding, int_dot) = self.blocks_input(m);
            return kernels::matvec_blocks_kernel(
                m.dtype, n_weights, gated, rounding, int_dot, shape,
            );
        }
        let x4 = m.cols.is_multiple_of(4);
        match gated {
            Some(act) => kernels::matvec_gated_kernel(
                m.dtype,
                act,
                x4,
                self.matvec_layout(),
                self.kernel_rounding(m),
            ),
            None => kernels::matvec_kernel(
                m.dtype,
                n_weights,
                x4,
                self.matvec_layout(),
                self.kernel_rounding(m),
            ),
        }
    }

    /// How the per-type mat-vec over `m` takes x: rounding it itself (as `kernel_rounding`), or
    /// (true) as packed Q8_K blocks for integer dot products.
    pub(super) fn blocks_input(&self, m: &Matrix) -> (Option<ActRounding>, bool) {
        let int_dot = self.int_dot(m);
        (self.kernel_rounding(m).filter(|_| !int_dot), int_dot)
    }

    /// The parameters and grid of a mat-vec over weights of `m`'s type and width with `rows`
    /// rows each, whose outputs start at `offsets` (`gated`: as for `matvec_kernel_of`), for
    /// `inputs` activation rows, each weight's outputs for a row `strides` values after the last
    /// row's.
    pub(super) fn matvec_call_rows(
        &self,
        m: &Matrix,
        rows: [usize; 3],
        offsets: [usize; 3],
        gated: Option<GateActivation>,
        inputs: usize,
        strides: [usize; 3],
    ) -> (ParamWords, [u32; 3]) {
        let total: usize = rows.iter().sum();
        let blocks = self.blocks_matvec(m, gated.is_some());
        let per_wg = blocks.map_or(self.matvec_layout().rows(), |s| s.rows);
        let workgroups = match (gated, self.matvec_layout()) {
            // A gate row and an up row per output: one output a workgroup staged, rows / 2 in
            // the per-type kernel.
            (Some(_), MatvecLayout::Staged) => rows[0].div_ceil(blocks.map_or(1, |s| s.rows / 2)),
            (Some(_), MatvecLayout::Direct { .. }) => rows[0].div_ceil(per_wg),
            (None, _) => total.div_ceil(per_wg),
        };
        let mut params = ParamWords::new();
        params.extend([m.cols as u32, m.row_bytes as u32]);
        params.extend(rows.iter().map(|&r| r as u32));
        params.push(total as u32);
        params.extend(offsets.iter().map(|&o| o as u32));
        // The trace's invocation count (TRACE variants only; the last word, where trace.rs sets it).
        params.push(0);
        if inputs > 1 {
            // The expert fields (EXPERT variants only), then the output strides.
            params.extend([0; 7]);
            params.extend(strides.map(|s| s as u32));
        }
        let mut groups = grid(workgroups);
        groups[2] = inputs as u32;
        (params, groups)
    }

    /// How the tiled kernel over weights of type `t` multiplies on cooperative matrices, where
    /// it does: `matmul_kernel_of` and `matmul_call`'s grid ask the same question.
    fn coop_for(&self, t: crate::gguf::GgmlType) -> Option<Coop> {
        self.gpu.coop.filter(|_| kernels::coop_reads(t))
    }

    /// The tiled kernel over `m` and `n_weights - 1` more weights of its type and width (`gated`:
    /// as for `matvec_kernel_of`); on a software adapter with subgroups of 8, its variant for
    /// one weight.
    pub(super) fn matmul_kernel_of(
        &self,
        m: &Matrix,
        n_weights: usize,
        gated: Option<GateActivation>,
    ) -> Kernel {
        let x4 = m.cols.is_multiple_of(4);
        if let Some(coop) = self.coop_for(m.dtype) {
            let input = (self.gpu.coop_rows, self.half_input(m));
            return kernels::matmul_coop_kernel(m.dtype, n_weights, gated, x4, coop, input);
        }
        kernels::matmul_kernel(m.dtype, n_weights, gated, x4, self.matmul_sg8())
    }

    /// The parameters and grid of the tiled kernel for `n` activation rows over weights of
    /// `m`'s type and width with `rows` rows each, whose outputs have `strides` values per row
    /// and start at `offsets`.
    pub(super) fn matmul_call(
        &self,
        m: &Matrix,
        n: usize,
        rows: [usize; 3],
        strides: [usize; 3],
        offsets: [usize; 3],
        gated: Option<GateActivation>,
    ) -> (Vec<u32>, [u32; 3]) {
        let tiles = rows.map(|r| r.div_ceil(64));
        // Activation rows a tile: the cooperative GEMM's, else 64 (128 in `main_sg8`).
        let tile_rows = match self.coop_for(m.dtype) {
            Some(_) => self.gpu.coop_rows as usize,
            None if self.matmul_sg8() => 128,
            None => 64,
        };
        let groups = if self.matmul_sg8() {
            [tiles[0] as u32, n.div_ceil(tile_rows) as u32, 1]
        } else if gated.is_some() {
            // A tile of 32 gate rows and the 32 up rows of the same outputs.
            [rows[0].div_ceil(32) as u32, n.div_ceil(tile_rows) as u32, 1]
        } else {
            [
                tiles.iter().sum::<usize>() as u32,
                n.div_ceil(tile_rows) as u32,
                1,
            ]
        };
        let mut params = vec![
            m.cols as u32,
            n as u32,
            m.cols.div_ceil(16) as u32,
            m.row_bytes as u32,
        ];
        params.extend(rows.map(|r| r as u32));
        params.extend(strides.map(|r| r as u32));
        params.extend(offsets.map(|r| r as u32));
        params.extend([tiles[0] as u32, tiles[1] as u32]);
        // The trace's invocation count (TRACE variants only).
        params.push(0);
        (params, groups)
    }
}
