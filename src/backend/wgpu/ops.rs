//! The core ops (`CoreOps`) on the GPU: for each, the kernel variant, its parameter block (u32 words,
//! f32 as bits, in the order of the shader's `Params`), its buffers and its grid.

use std::sync::Arc;
use std::time::Instant;

use super::buffers::{self, DeviceBuf, GpuBuffer, GpuCache, GpuWeight, Matrix, bind};
use super::device::Coop;
use super::pipelines::{self as kernels, Kernel, KernelSlot, Pipeline};
use super::stream::{bindings, grid, words};
use super::{Scratch, WgpuBackend};
use crate::backend::{
    AttentionParams, CacheType, CoreOps, GateActivation, KvAppend, Profile, RopeLayout,
};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

impl WgpuBackend {
    /// The pipeline of `k`; on failure the error is recorded for the session and None returned.
    fn pipeline(&self, k: &Kernel) -> Option<Arc<Pipeline>> {
        match self.pipelines.get(&self.gpu, k, self.param_slot) {
            Ok(p) => Some(p),
            Err(e) => {
                self.gpu.fail(e.to_string());
                None
            }
        }
    }

    pub(super) fn run(
        &self,
        k: &Kernel,
        params: &[u32],
        buffers: &[(&wgpu::Buffer, u64)],
        groups: [u32; 3],
    ) {
        if let Some(p) = self.pipeline(k) {
            self.stream()
                .dispatch(&self.gpu, &p, params, buffers, groups);
        }
    }

    /// The pipeline held in `slot`, built from `make` the first time.
    pub(super) fn pipeline_in<'a>(
        &self,
        slot: &'a KernelSlot,
        make: impl FnOnce() -> Kernel,
    ) -> Option<&'a Arc<Pipeline>> {
        if let Some(p) = slot.get() {
            return Some(p);
        }
        Some(slot.fill(self.pipeline(&make())?))
    }

    /// `run` with the pipeline held in `slot` (the hot path: no `Kernel` is built).
    pub(super) fn run_in(
        &self,
        slot: &KernelSlot,
        make: impl FnOnce() -> Kernel,
        params: &[u32],
        buffers: &[(&wgpu::Buffer, u64)],
        groups: [u32; 3],
    ) {
        if let Some(p) = self.pipeline_in(slot, make) {
            self.stream()
                .dispatch(&self.gpu, p, params, buffers, groups);
        }
    }

    /// A backend-owned buffer of at least `len` values, grown as needed.
    pub(super) fn scratch_buffer(
        &self,
        pick: impl Fn(&mut Scratch) -> &mut Option<GpuBuffer>,
        len: usize,
    ) -> Option<(wgpu::Buffer, u64)> {
        let mut s = self.scratch.lock().unwrap_or_else(|p| p.into_inner());
        let slot = pick(&mut s);
        if slot.as_ref().is_none_or(|b| b.len < len) {
            match self.buffer(len.next_power_of_two().max(64)) {
                Ok(b) => *slot = Some(b),
                Err(e) => {
                    self.gpu.fail(e.to_string());
                    return None;
                }
            }
        }
        slot.as_ref().map(|b| (b.dev.buf.clone(), b.dev.id))
    }

    /// The buffer and length of a vector weight (a norm's or a bias); a matrix is a failure.
    pub(super) fn vector<'a>(
        &self,
        w: &'a GpuWeight,
        op: &str,
    ) -> Option<(&'a buffers::DeviceBuf, usize)> {
        match w {
            GpuWeight::Vector { dev, len } => Some((dev, *len)),
            GpuWeight::Matrix(_) => {
                self.gpu
                    .fail(format!("{op}: expected a vector weight, got a matrix"));
                None
            }
        }
    }

    pub(super) fn matrix<'a>(&self, w: &'a GpuWeight, op: &str) -> Option<&'a Matrix> {
        let m = w.matrix();
        if m.is_none() {
            self.gpu
                .fail(format!("{op}: expected a weight matrix, got a vector"));
        }
        m
    }

    /// Whether every buffer an op binds holds the values its kernel indexes: `needs` lists, per
    /// buffer, its name, the values it holds and the values the op reaches. Kernels run trusted
    /// (no bounds checks in the shader), so each op asks this before it dispatches; a short
    /// buffer is an error naming it, not a read or write past its end.
    pub(super) fn holds(&self, op: &str, needs: &[(&str, usize, usize)]) -> bool {
        let short: Vec<String> = needs
            .iter()
            .filter(|(_, held, needed)| held < needed)
            .map(|(what, held, needed)| {
                format!("{held} values in {what} where {needed} are needed")
            })
            .collect();
        if short.is_empty() {
            return true;
        }
        self.gpu.fail(format!("{op}: {}", short.join("; ")));
        false
    }

    /// Build ahead the pipelines a weight of type `t` will use.
    fn prepare_matrix(&self, m: &Matrix) -> Result<()> {
        let mut ready = (1..=3).all(|n| {
            self.pipeline_in(&m.kernels.matvec[n - 1], || {
                self.matvec_kernel_of(m, n, None)
            })
            .is_some()
        });
        ready &= self
            .pipeline_in(&m.kernels.matmul[0], || self.matmul_kernel_of(m, 1, None))
            .is_some();
        ready &= self
            .pipeline_in(&m.kernels.embed, || kernels::embed_kernel(m.dtype))
            .is_some();
        match (ready, self.take_error()) {
            (false, Some(e)) => Err(e),
            _ => Ok(()),
        }
    }

    /// A norm of `rows` rows of `len` values into `out` over `buffers`, from the kernel
    /// `kernel(packed)` held in `slots` (plain, packed): packed, its output is also written as Q8_K
    /// blocks for the integer-dot mat-vecs after it (`packed_output`), one binding more.
    fn run_norm(
        &self,
        slots: (&KernelSlot, &KernelSlot),
        kernel: impl Fn(bool) -> Kernel,
        buffers: &[(&wgpu::Buffer, u64)],
        (rows, len): (usize, usize),
        eps: f32,
        out: &GpuBuffer,
    ) {
        let params = [rows as u32, len as u32, eps.to_bits()];
        let Some((packed, packed_id)) = self.packed_output(rows, len) else {
            self.run_in(slots.0, || kernel(false), &params, buffers, grid(rows));
            return;
        };
        let with_packed = bindings(buffers, &[(&packed, packed_id)]);
        self.run_in(slots.1, || kernel(true), &params, &with_packed, grid(rows));
        self.packed_written(out, rows * len);
    }

    fn elementwise(
        &self,
        (slot, entry): (&KernelSlot, &'static str),
        a: &GpuBuffer,
        b: &DeviceBuf,
        params: [u32; 4],
    ) {
        let groups = grid((params[0] as usize).div_ceil(256));
        self.run_in(
            slot,
            || kernels::elementwise_kernel(entry),
            &params,
            &[bind(&a.dev), bind(b)],
            groups,
        );
    }

    /// The device's copy bandwidth in GB/s (bytes read plus bytes written per second): the best
    /// of several copies of a buffer as large as one binding allows, up to 256 MiB.
    pub fn measure_bandwidth(&self) -> Result<f64> {
        let bytes = (self.gpu.max_binding.min(256 << 20) / 2) / 16 * 16;
        let len = (bytes / 4) as usize;
        let src = self.buffer(len)?;
        let dst = self.buffer(len)?;
        let k = kernels::bandwidth_kernel();
        let n = bytes / 16;
        let groups = grid((n as usize).div_ceil(256));
        let mut best = f64::MAX;
        for rep in 0..6 {
            let start = Instant::now();
            for _ in 0..4 {
                self.run(&k, &[n as u32], &[bind(&dst.dev), bind(&src.dev)], groups);
            }
            let mut one = [0f32; 1];
            self.download(&dst, 0, &mut one);
            if rep > 0 {
                best = best.min(start.elapsed().as_secs_f64() / 4.0);
            }
        }
        if let Some(e) = self.take_error() {
            return Err(e);
        }
        Ok(2.0 * bytes as f64 / best / 1e9)
    }
}

/// Values of a row one workgroup of the device's argmax scans (at most).
const ARGMAX_CHUNK: usize = 2048;

impl CoreOps for WgpuBackend {
    type Buffer = GpuBuffer;
    type Cache = GpuCache;
    type Weight = GpuWeight;

    fn describe(&self) -> String {
        let info = &self.gpu.info;
        let mut extras = Vec::new();
        if self.gpu.caps.subgroups {
            extras.push(format!(
                "subgroups {}-{}",
                info.subgroup_min_size, info.subgroup_max_size
            ));
        }
        if self.is_software() {
            extras.push("software".into());
            if !self.gpu.caps.software_kernels {
                extras.push("hardware kernels".into());
            }
        }
        if self.gpu.int_dot {
            extras.push("integer-dot mat-vecs".into());
        }
        let tiles = match self.gpu.coop_rows {
            64 => String::new(),
            rows => format!(" in tiles of {rows} rows"),
        };
        let attention = if self.gpu.coop_attention {
            " and attention"
        } else {
            ""
        };
        match self.gpu.coop {
            Some(Coop::Hardware { .. }) => {
                extras.push(format!("cooperative-matrix prefill{tiles}{attention}"))
            }
            Some(Coop::Emulated) => extras.push(format!(
                "cooperative-matrix prefill{tiles}{attention}, emulated"
            )),
            None => {}
        }
        let extras = if extras.is_empty() {
            String::new()
        } else {
            format!(", {}", extras.join(", "))
        };
        format!("GPU ({}, {:?}{extras})", info.name, info.backend)
    }

    fn set_profiling(&self, on: bool) {
        self.stream().set_profiling(&self.gpu, on);
    }

    fn profile(&self) -> Option<Profile> {
        self.stream().profile()
    }

    fn argmax_rows(&self, x: &GpuBuffer, len: usize, rows: usize) -> Option<Vec<u32>> {
        if rows == 0 || rows * len > x.len {
            return None;
        }
        // Workgroups of 2048 values (8 an invocation), at most 256 a row.
        let chunks = len.div_ceil(ARGMAX_CHUNK).clamp(1, 256);
        let chunk = len.div_ceil(chunks);
        let (res, id) = self.scratch_buffer(|s| &mut s.argmax, 2 * rows * chunks)?;
        self.run_in(
            &self.fixed.argmax,
            kernels::argmax_kernel,
            &[len as u32, chunk as u32, chunks as u32],
            &[bind(&x.dev), (&res, id)],
            [chunks as u32, rows as u32, 1],
        );
        let words = 2 * rows * chunks;
        let best = self
            .stream()
            .read_with(&self.gpu, &res, 0, 4 * words as u64, |b| {
                let word = |i: usize| {
                    u32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
                };
                // Per row, the best of its chunks; chunks run in index order, so a later one wins
                // only with a larger value (the first index on ties, as within a chunk).
                (0..rows)
                    .map(|r| {
                        let mut best = (f32::MIN, u32::MAX);
                        for c in 0..chunks {
                            let at = 2 * (r * chunks + c);
                            let (v, i) = (f32::from_bits(word(at)), word(at + 1));
                            if i < len as u32 && (best.1 == u32::MAX || v > best.0) {
                                best = (v, i);
                            }
                        }
                        best.1
                    })
                    .collect::<Vec<u32>>()
            })?;
        // An index past the end means no value compared greater than -3.4e38 (all NaN or -inf):
        // let the caller decide from the values.
        best.iter().all(|&i| i < len as u32).then_some(best)
    }

    fn take_error(&self) -> Option<Error> {
        self.gpu.take_error().map(Error::Unsupported)
    }

    fn weight(&self, t: &Tensor) -> Result<GpuWeight> {
        if super::recurrent::is_conv_taps(t) {
            return self.upload_taps(t);
        }
        let w = buffers::upload_weight(&self.gpu, &self.memory, t)?;
        if let Some(m) = w.matrix() {
            self.prepare_matrix(m)?;
            if t.dims.len() == 3 {
                self.prepare_experts(m)?;
            }
        }
        Ok(w)
    }

    fn buffer(&self, len: usize) -> Result<GpuBuffer> {
        let dev = buffers::create(
            &self.gpu,
            &self.memory,
            "an activation buffer",
            len as u64 * 4,
            None,
        )?;
        Ok(GpuBuffer { dev, len })
    }

    fn upload(&self, dst: &mut GpuBuffer, src: &[f32]) {
        let bytes: Vec<u8> = src.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.stream().upload(&dst.dev.buf, 0, &bytes);
    }

    fn download(&self, src: &GpuBuffer, offset: usize, out: &mut [f32]) {
        let read = self.stream().read_with(
            &self.gpu,
            &src.dev.buf,
            offset as u64 * 4,
            out.len() as u64 * 4,
            |b| {
                for (o, c) in out.iter_mut().zip(b.chunks_exact(4)) {
                    *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
            },
        );
        if read.is_none() {
            out.fill(0.0);
        }
    }

    fn embed(&self, table: &GpuWeight, ids: &[u32], scale: f32, out: &mut GpuBuffer) {
        let Some(m) = self.matrix(table, "embed") else {
            return;
        };
        let Some((ids_buf, ids_id)) = self.scratch_buffer(|s| &mut s.ids, ids.len()) else {
            return;
        };
        self.stream().upload(&ids_buf, 0, &words(ids));
        // Ids past the table are skipped by the kernel (each part checks its rows).
        if !self.holds("embed", &[("out", out.len, ids.len() * m.cols)]) {
            return;
        }
        let groups = m.cols.div_ceil(16);
        for part in &m.parts {
            let params = [
                ids.len() as u32,
                groups as u32,
                m.row_bytes as u32,
                part.first_row as u32,
                part.rows as u32,
                scale.to_bits(),
                m.cols as u32,
            ];
            self.run_in(
                &m.kernels.embed,
                || kernels::embed_kernel(m.dtype),
                &params,
                &[(&ids_buf, ids_id), bind(&part.dev), bind(&out.dev)],
                [groups.div_ceil(64) as u32, ids.len() as u32, 1],
            );
        }
    }

    fn rms_norm(&self, x: &mut GpuBuffer, w: &GpuWeight, rows: usize, eps: f32) {
        let Some((dev, len)) = self.vector(w, "rms_norm") else {
            return;
        };
        if !self.holds("rms_norm", &[("x", x.len, rows * len)]) {
            return;
        }
        let f = &self.fixed;
        self.run_norm(
            (&f.rms_norm, &f.rms_norm_packed),
            |packed| kernels::rms_norm_kernel(false, packed),
            &[bind(&x.dev), bind(dev)],
            (rows, len),
            eps,
            x,
        );
    }

    fn rms_norm_into(
        &self,
        x: &GpuBuffer,
        w: &GpuWeight,
        rows: usize,
        width: usize,
        eps: f32,
        out: &mut GpuBuffer,
    ) {
        let Some((dev, len)) = self.vector(w, "rms_norm") else {
            return;
        };
        debug_assert_eq!(len, width);
        let n = rows * len;
        if !self.holds("rms_norm_into", &[("x", x.len, n), ("out", out.len, n)]) {
            return;
        }
        let f = &self.fixed;
        self.run_norm(
            (&f.rms_norm_into, &f.rms_norm_into_packed),
            |packed| kernels::rms_norm_kernel(true, packed),
            &[bind(&out.dev), bind(dev), bind(&x.dev)],
            (rows, len),
            eps,
            out,
        );
    }

    fn add_rms_norm_into(
        &self,
        x: &mut GpuBuffer,
        y: &GpuBuffer,
        w: &GpuWeight,
        rows: usize,
        width: usize,
        eps: f32,
        out: &mut GpuBuffer,
    ) {
        let Some((dev, len)) = self.vector(w, "rms_norm") else {
            return;
        };
        debug_assert_eq!(len, width);
        let n = rows * len;
        let sizes = [("x", x.len, n), ("y", y.len, n), ("out", out.len, n)];
        if !self.holds("add_rms_norm_into", &sizes) {
            return;
        }
        if rows == 1 && self.fused_norm((x, y), bind(dev), len, eps, out) {
            return;
        }
        let f = &self.fixed;
        self.run_norm(
            (&f.add_rms_norm, &f.add_rms_norm_packed),
            kernels::add_rms_norm_kernel,
            &[bind(&out.dev), bind(dev), bind(&x.dev), bind(&y.dev)],
            (rows, len),
            eps,
            out,
        );
    }

    fn matmul(&self, x: &GpuBuffer, w: &GpuWeight, rows: usize, out: &mut GpuBuffer) {
        if let Some(m) = self.matrix(w, "matmul") {
            self.matmul_part(x, m, rows, out);
        }
    }

    fn matmul_many(
        &self,
        x: &GpuBuffer,
        ws: &[&GpuWeight],
        rows: usize,
        outs: &mut [&mut GpuBuffer],
    ) {
        self.matvec_many(x, ws, rows, outs);
    }

    fn matmul_gated(
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
        self.gated_matmuls(x, gate, up, rows, width, act, gate_out, up_out);
    }

    fn add_bias(&self, x: &mut GpuBuffer, b: &GpuWeight, rows: usize) {
        let Some((dev, len)) = self.vector(b, "add_bias") else {
            return;
        };
        if !self.holds("add_bias", &[("x", x.len, rows * len)]) {
            return;
        }
        self.elementwise(
            (&self.fixed.add_bias, "add_bias"),
            x,
            dev,
            [(rows * len) as u32, len as u32, 0, 0],
        );
    }

    fn scale_rows(&self, x: &mut GpuBuffer, scales: &GpuBuffer, rows: usize, width: usize) {
        let sizes = [("x", x.len, rows * width), ("scales", scales.len, rows)];
        if !self.holds("scale_rows", &sizes) {
            return;
        }
        self.elementwise(
            (&self.fixed.scale_rows, "scale_rows"),
            x,
            &scales.dev,
            [(rows * width) as u32, width as u32, 0, 0],
        );
    }

    fn cache(&self, len: usize, ty: CacheType, rotation: usize) -> Result<GpuCache> {
        self.new_cache(len, ty, rotation)
    }

    fn prepare_attention(
        &self,
        k: &GpuCache,
        v: &GpuCache,
        head_dim: usize,
        n_heads: usize,
        n_kv_heads: usize,
    ) {
        if n_kv_heads > 0 && n_heads.is_multiple_of(n_kv_heads) {
            let shape = (head_dim, n_heads / n_kv_heads);
            self.build_attention(k, v, shape, n_heads * head_dim);
        }
    }

    fn store_rows(
        &self,
        src: &GpuBuffer,
        dst: &mut GpuCache,
        dst_row: usize,
        rows: usize,
        width: usize,
    ) {
        self.store_cache_rows(src, dst, dst_row * width, rows * width);
    }

    fn rope_store_kv(
        &self,
        q: &mut GpuBuffer,
        k: &mut GpuBuffer,
        v: &GpuBuffer,
        table: &GpuBuffer,
        k_cache: &mut GpuCache,
        v_cache: &mut GpuCache,
        p: &KvAppend,
    ) {
        self.rope_append(q, k, v, table, k_cache, v_cache, p);
    }

    fn qkv_rope_store(
        &self,
        x: &GpuBuffer,
        ws: [&GpuWeight; 3],
        qkv: [&mut GpuBuffer; 3],
        table: &GpuBuffer,
        k_cache: &mut GpuCache,
        v_cache: &mut GpuCache,
        p: &KvAppend,
    ) -> bool {
        self.fused_qkv_rope_store(x, ws, qkv, table, k_cache, v_cache, p)
    }

    fn move_cache_rows(
        &self,
        cache: &mut GpuCache,
        src_row: usize,
        dst_row: usize,
        rows: usize,
        width: usize,
    ) {
        self.move_rows(cache, src_row, dst_row, rows, width);
    }

    fn rope_cache(
        &self,
        cache: &mut GpuCache,
        table: &GpuBuffer,
        first_row: usize,
        rows: usize,
        n_heads: usize,
        head_dim: usize,
        rot_dims: usize,
        layout: RopeLayout,
    ) {
        let heads = (n_heads, head_dim, rot_dims);
        self.rope_cached_keys(cache, table, first_row, rows, heads, layout);
    }

    fn attention(
        &self,
        q: &GpuBuffer,
        k_cache: &GpuCache,
        v_cache: &GpuCache,
        out: &mut GpuBuffer,
        p: &AttentionParams,
        sinks: Option<&GpuWeight>,
    ) {
        self.attend(q, k_cache, v_cache, out, p, sinks);
    }

    fn gated_activation(
        &self,
        gate: &mut GpuBuffer,
        up: &GpuBuffer,
        len: usize,
        act: GateActivation,
    ) {
        let entry = match act {
            GateActivation::Silu => (&self.fixed.silu_mul, "silu_mul"),
            GateActivation::GeluTanh => (&self.fixed.gelu_mul, "gelu_mul"),
            GateActivation::SwigluOai => (&self.fixed.swiglu_oai_mul, "swiglu_oai_mul"),
        };
        if !self.holds(
            "gated_activation",
            &[("gate", gate.len, len), ("up", up.len, len)],
        ) {
            return;
        }
        self.elementwise(entry, gate, &up.dev, [len as u32, 0, 0, 0]);
    }

    fn add(&self, x: &mut GpuBuffer, y: &GpuBuffer, len: usize) {
        if !self.holds("add", &[("x", x.len, len), ("y", y.len, len)]) {
            return;
        }
        self.elementwise((&self.fixed.add, "add"), x, &y.dev, [len as u32, 0, 0, 0]);
    }

    fn copy_rows(
        &self,
        src: &GpuBuffer,
        src_row: usize,
        dst: &mut GpuBuffer,
        dst_row: usize,
        rows: usize,
        width: usize,
    ) {
        if rows * width == 0 {
            return;
        }
        let sizes = [
            ("the source", src.len, (src_row + rows) * width),
            ("the destination", dst.len, (dst_row + rows) * width),
        ];
        if !self.holds("copy_rows", &sizes) {
            return;
        }
        self.elementwise(
            (&self.fixed.copy, "copy"),
            dst,
            &src.dev,
            [
                (rows * width) as u32,
                0,
                (src_row * width) as u32,
                (dst_row * width) as u32,
            ],
        );
    }

    fn rope_partial(
        &self,
        x: &mut GpuBuffer,
        table: &GpuBuffer,
        rows: usize,
        n_heads: usize,
        head_dim: usize,
        rot_dims: usize,
        layout: RopeLayout,
    ) {
        // Pairs stay inside their head: rot_dims even and at most head_dim.
        if !rot_dims.is_multiple_of(2) || rot_dims > head_dim {
            self.gpu.fail(format!(
                "rope: {rot_dims} rotated values of heads of {head_dim} (an even number, at most the head)"
            ));
            return;
        }
        let sizes = [
            ("x", x.len, rows * n_heads * head_dim),
            ("the table", table.len, rows * rot_dims),
        ];
        if !self.holds("rope", &sizes) {
            return;
        }
        let pairs = rows * n_heads * rot_dims / 2;
        self.run_in(
            &self.fixed.rope,
            kernels::rope_kernel,
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

    fn mul_sigmoid(
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
        let sizes = [("x", x.len, len), ("the gate", gate.len, rows * gate_width)];
        if !self.holds("mul_sigmoid", &sizes) {
            return;
        }
        self.run_in(
            &self.fixed.mul_sigmoid,
            kernels::mul_sigmoid_kernel,
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
}
