//! A model split between the GPU and the CPU (`-ngl`, `--n-cpu-moe`): one `Backend` over both,
//! so that every family's forward pass runs unchanged. Each weight and KV cache lives on the side
//! its `Placement` gives it (by tensor name and layer), and each op runs where its weight or cache
//! is; ops with neither (residual adds, activations, routing, RoPE) run where the last one ran.
//!
//! An activation buffer exists on both sides and knows which side holds its current values and
//! how many of them matter (what its last writer wrote): an op on the other side copies them
//! across first. So values cross once at each boundary between layers on different sides, and
//! around the routed experts of a layer whose experts are on the CPU, as llama.cpp's scheduler
//! copies them.

mod placement;
mod sides;

pub use placement::{Placement, Side};

use sides::{On, OnCpu, on_side};

use super::cpu::{CpuBackend, CpuCache, CpuWeight};
use super::wgpu::{GpuBuffer, GpuCache, GpuWeight, WgpuBackend};
use super::{
    AttentionParams, CacheType, CoreOps, DeltaNetParams, ExpertMatmulParams, GateActivation,
    KvAppend, MoeOps, MoeRouteParams, Profile, RecurrentOps, RopeLayout,
};
use crate::error::Result;
use crate::tensor::Tensor;
use std::cell::{Cell, Ref, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub struct SplitBackend {
    gpu: WgpuBackend,
    cpu: CpuBackend,
    placement: Placement,
    /// The side of the last op with a weight or cache (true: the GPU), where the next op without
    /// one runs.
    on_gpu: AtomicBool,
    /// Values copied to the GPU and to the CPU, and the copies, since profiling started.
    to_gpu: AtomicU64,
    to_cpu: AtomicU64,
    copies: AtomicU64,
    /// Bytes of the weights loaded onto each side, as the file holds them.
    gpu_weights: AtomicU64,
    cpu_weights: AtomicU64,
}

/// An activation buffer on both sides.
pub struct SplitBuffer {
    gpu: RefCell<GpuBuffer>,
    cpu: RefCell<Vec<f32>>,
    holder: Cell<Holder>,
    /// Leading values that matter: as many as the last op that wrote the buffer wrote.
    extent: Cell<usize>,
    len: usize,
}

/// Which sides hold a buffer's current values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holder {
    Both,
    Gpu,
    Cpu,
}

impl Holder {
    fn has(self, side: Side) -> bool {
        matches!(
            (self, side),
            (Holder::Both, _) | (Holder::Gpu, Side::Gpu) | (Holder::Cpu, Side::Cpu)
        )
    }
}

/// A weight on one side, with its shape (rows of `cols` values).
pub struct SplitWeight {
    on: Either<GpuWeight, CpuWeight>,
    rows: usize,
    cols: usize,
}

/// A KV cache on its layer's side.
pub struct SplitCache(Either<GpuCache, CpuCache>);

enum Either<G, C> {
    Gpu(G),
    Cpu(C),
}

impl<G, C> Either<G, C> {
    fn side(&self) -> Side {
        match self {
            Either::Gpu(_) => Side::Gpu,
            Either::Cpu(_) => Side::Cpu,
        }
    }
}

impl SplitWeight {
    fn side(&self) -> Side {
        self.on.side()
    }
}

impl SplitBackend {
    pub fn new(gpu: WgpuBackend, cpu: CpuBackend, placement: Placement) -> SplitBackend {
        SplitBackend {
            gpu,
            cpu,
            placement,
            on_gpu: AtomicBool::new(false),
            to_gpu: AtomicU64::new(0),
            to_cpu: AtomicU64::new(0),
            copies: AtomicU64::new(0),
            gpu_weights: AtomicU64::new(0),
            cpu_weights: AtomicU64::new(0),
        }
    }

    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    pub fn gpu(&self) -> &WgpuBackend {
        &self.gpu
    }

    /// Bytes copied to the GPU and to the CPU since profiling last started.
    pub fn copied_bytes(&self) -> (u64, u64) {
        (
            4 * self.to_gpu.load(Ordering::Relaxed),
            4 * self.to_cpu.load(Ordering::Relaxed),
        )
    }

    /// Run the next ops without a weight or cache on `side` too, and return it.
    fn at(&self, side: Side) -> Side {
        self.on_gpu.store(side == Side::Gpu, Ordering::Relaxed);
        side
    }

    fn current(&self) -> Side {
        if self.on_gpu.load(Ordering::Relaxed) {
            Side::Gpu
        } else {
            Side::Cpu
        }
    }

    /// Where a buffer's values are: `current` if it holds them, else the other side.
    fn holder_side(&self, b: &SplitBuffer) -> Side {
        let here = self.current();
        if b.holder.get().has(here) {
            here
        } else if here == Side::Gpu {
            Side::Cpu
        } else {
            Side::Gpu
        }
    }

    /// Make `side` hold the buffer's current values.
    fn sync(&self, b: &SplitBuffer, side: Side) {
        if b.holder.get().has(side) {
            return;
        }
        let n = b.extent.get();
        match side {
            Side::Gpu => {
                let cpu = b.cpu.borrow();
                self.gpu.upload(&mut b.gpu.borrow_mut(), &cpu[..n]);
                self.to_gpu.fetch_add(n as u64, Ordering::Relaxed);
            }
            Side::Cpu => {
                let gpu = b.gpu.borrow();
                self.gpu.download(&gpu, 0, &mut b.cpu.borrow_mut()[..n]);
                self.to_cpu.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
        self.copies.fetch_add(1, Ordering::Relaxed);
        b.holder.set(Holder::Both);
    }

    /// The buffer to read on side `S`, its values copied there first if needed.
    fn input<'a, S: On>(&self, b: &'a SplitBuffer) -> Ref<'a, <S::B as CoreOps>::Buffer> {
        self.sync(b, S::SIDE);
        S::cell(b).borrow()
    }

    /// The buffer an op on side `S` overwrites with `extent` values.
    fn output<'a, S: On>(
        &self,
        b: &'a mut SplitBuffer,
        extent: usize,
    ) -> &'a mut <S::B as CoreOps>::Buffer {
        b.holder.set(match S::SIDE {
            Side::Gpu => Holder::Gpu,
            Side::Cpu => Holder::Cpu,
        });
        b.extent.set(extent.min(b.len));
        S::cell_mut(b)
    }

    /// The buffer an op on side `S` reads and updates in place, over at least `extent` values.
    fn in_out<'a, S: On>(
        &self,
        b: &'a mut SplitBuffer,
        extent: usize,
    ) -> &'a mut <S::B as CoreOps>::Buffer {
        self.sync(b, S::SIDE);
        let extent = b.extent.get().max(extent);
        self.output::<S>(b, extent)
    }
}

impl CoreOps for SplitBackend {
    type Buffer = SplitBuffer;
    type Cache = SplitCache;
    type Weight = SplitWeight;

    fn describe(&self) -> String {
        let mib = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64 / (1u64 << 20) as f64;
        format!(
            "{} + {} ({}; {:.1} MiB of weights on the GPU, {:.1} MiB on the CPU)",
            self.gpu.describe(),
            self.cpu.describe(),
            self.placement.describe(),
            mib(&self.gpu_weights),
            mib(&self.cpu_weights),
        )
    }

    fn argmax_rows(&self, x: &SplitBuffer, len: usize, rows: usize) -> Option<Vec<u32>> {
        match self.holder_side(x) {
            Side::Gpu => self.gpu.argmax_rows(&x.gpu.borrow(), len, rows),
            Side::Cpu => self.cpu.argmax_rows(&x.cpu.borrow(), len, rows),
        }
    }

    fn set_profiling(&self, on: bool) {
        self.gpu.set_profiling(on);
        self.cpu.set_profiling(on);
        if on {
            for c in [&self.to_gpu, &self.to_cpu, &self.copies] {
                c.store(0, Ordering::Relaxed);
            }
        }
    }

    fn profile(&self) -> Option<Profile> {
        let mut p = self.gpu.profile().unwrap_or_default();
        if let Some(cpu) = self.cpu.profile() {
            p.ops.extend(cpu.ops.into_iter().map(|mut op| {
                op.name = on_cpu(op.name);
                op
            }));
            p.counters.extend(cpu.counters);
        }
        let (to_gpu, to_cpu) = self.copied_bytes();
        p.counters.push(("bytes copied to the GPU", to_gpu));
        p.counters.push(("bytes copied to the CPU", to_cpu));
        p.counters.push((
            "copies between GPU and CPU",
            self.copies.load(Ordering::Relaxed),
        ));
        Some(p)
    }

    fn take_error(&self) -> Option<crate::error::Error> {
        self.gpu.take_error().or_else(|| self.cpu.take_error())
    }

    fn weight(&self, t: &Tensor) -> Result<SplitWeight> {
        let on = match self.placement.tensor(&t.name, false) {
            Side::Gpu => Either::Gpu(self.gpu.weight(t)?),
            Side::Cpu => Either::Cpu(self.cpu.weight(t)?),
        };
        Ok(self.shaped(on, t))
    }

    fn embedding_table(&self, t: &Tensor) -> Result<SplitWeight> {
        let on = match self.placement.tensor(&t.name, true) {
            Side::Gpu => Either::Gpu(self.gpu.embedding_table(t)?),
            Side::Cpu => Either::Cpu(self.cpu.embedding_table(t)?),
        };
        Ok(self.shaped(on, t))
    }

    fn buffer(&self, len: usize) -> Result<SplitBuffer> {
        Ok(SplitBuffer {
            gpu: RefCell::new(self.gpu.buffer(len)?),
            cpu: RefCell::new(self.cpu.buffer(len)?),
            holder: Cell::new(Holder::Both),
            extent: Cell::new(len),
            len,
        })
    }

    fn upload(&self, dst: &mut SplitBuffer, src: &[f32]) {
        self.cpu.upload(self.output::<OnCpu>(dst, src.len()), src);
    }

    fn download(&self, src: &SplitBuffer, offset: usize, out: &mut [f32]) {
        match self.holder_side(src) {
            Side::Gpu => self.gpu.download(&src.gpu.borrow(), offset, out),
            Side::Cpu => self.cpu.download(&src.cpu.borrow(), offset, out),
        }
    }

    fn embed(&self, table: &SplitWeight, ids: &[u32], scale: f32, out: &mut SplitBuffer) {
        on_side!(self.at(table.side()), S => {
            let out = self.output::<S>(out, ids.len() * table.cols);
            S::backend(self).embed(S::weight(table), ids, scale, out)
        })
    }

    fn rms_norm(&self, x: &mut SplitBuffer, w: &SplitWeight, rows: usize, eps: f32) {
        on_side!(self.at(w.side()), S => {
            let x = self.in_out::<S>(x, rows * w.cols);
            S::backend(self).rms_norm(x, S::weight(w), rows, eps)
        })
    }

    fn rms_norm_into(
        &self,
        x: &SplitBuffer,
        w: &SplitWeight,
        rows: usize,
        width: usize,
        eps: f32,
        out: &mut SplitBuffer,
    ) {
        on_side!(self.at(w.side()), S => {
            let x = self.input::<S>(x);
            let out = self.output::<S>(out, rows * width);
            S::backend(self).rms_norm_into(&x, S::weight(w), rows, width, eps, out)
        })
    }

    fn add_rms_norm_into(
        &self,
        x: &mut SplitBuffer,
        y: &SplitBuffer,
        w: &SplitWeight,
        rows: usize,
        width: usize,
        eps: f32,
        out: &mut SplitBuffer,
    ) {
        on_side!(self.at(w.side()), S => {
            let y = self.input::<S>(y);
            let x = self.in_out::<S>(x, rows * width);
            let out = self.output::<S>(out, rows * width);
            S::backend(self).add_rms_norm_into(x, &y, S::weight(w), rows, width, eps, out)
        })
    }

    fn matmul(&self, x: &SplitBuffer, w: &SplitWeight, rows: usize, out: &mut SplitBuffer) {
        on_side!(self.at(w.side()), S => {
            let x = self.input::<S>(x);
            let out = self.output::<S>(out, rows * w.rows);
            S::backend(self).matmul(&x, S::weight(w), rows, out)
        })
    }

    fn matmul_many(
        &self,
        x: &SplitBuffer,
        ws: &[&SplitWeight],
        rows: usize,
        outs: &mut [&mut SplitBuffer],
    ) {
        let Some(side) = same_side(ws) else {
            for (w, out) in ws.iter().zip(outs.iter_mut()) {
                self.matmul(x, w, rows, out);
            }
            return;
        };
        on_side!(self.at(side), S => {
            let x = self.input::<S>(x);
            let weights: Vec<_> = ws.iter().map(|w| S::weight(w)).collect();
            let mut outs: Vec<_> = outs
                .iter_mut()
                .zip(ws)
                .map(|(out, w)| self.output::<S>(out, rows * w.rows))
                .collect();
            S::backend(self).matmul_many(&x, &weights, rows, &mut outs)
        })
    }

    fn matmul_gated(
        &self,
        x: &SplitBuffer,
        gate: &SplitWeight,
        up: &SplitWeight,
        rows: usize,
        width: usize,
        act: GateActivation,
        gate_out: &mut SplitBuffer,
        up_out: &mut SplitBuffer,
    ) {
        let Some(side) = same_side(&[gate, up]) else {
            self.matmul(x, gate, rows, gate_out);
            self.matmul(x, up, rows, up_out);
            return self.gated_activation(gate_out, up_out, rows * width, act);
        };
        on_side!(self.at(side), S => {
            let x = self.input::<S>(x);
            let gate_out = self.output::<S>(gate_out, rows * width);
            let up_out = self.output::<S>(up_out, rows * width);
            S::backend(self).matmul_gated(
                &x, S::weight(gate), S::weight(up), rows, width, act, gate_out, up_out,
            )
        })
    }

    fn add_bias(&self, x: &mut SplitBuffer, b: &SplitWeight, rows: usize) {
        on_side!(self.at(b.side()), S => {
            let x = self.in_out::<S>(x, rows * b.cols);
            S::backend(self).add_bias(x, S::weight(b), rows)
        })
    }

    fn scale_rows(&self, x: &mut SplitBuffer, scales: &SplitBuffer, rows: usize, width: usize) {
        on_side!(self.current(), S => {
            let scales = self.input::<S>(scales);
            let x = self.in_out::<S>(x, rows * width);
            S::backend(self).scale_rows(x, &scales, rows, width)
        })
    }

    fn rope_partial(
        &self,
        x: &mut SplitBuffer,
        table: &SplitBuffer,
        rows: usize,
        n_heads: usize,
        head_dim: usize,
        rot_dims: usize,
        layout: RopeLayout,
    ) {
        on_side!(self.current(), S => {
            let table = self.input::<S>(table);
            let x = self.in_out::<S>(x, rows * n_heads * head_dim);
            S::backend(self).rope_partial(x, &table, rows, n_heads, head_dim, rot_dims, layout)
        })
    }

    fn cache(&self, len: usize, ty: CacheType, rotation: usize) -> Result<SplitCache> {
        self.cache_on(self.current(), len, ty, rotation)
    }

    fn layer_cache(
        &self,
        layer: usize,
        len: usize,
        ty: CacheType,
        rotation: usize,
    ) -> Result<SplitCache> {
        self.cache_on(self.placement.layer(layer), len, ty, rotation)
    }

    fn prepare_attention(
        &self,
        k: &SplitCache,
        v: &SplitCache,
        head_dim: usize,
        n_heads: usize,
        n_kv_heads: usize,
    ) {
        if let (Either::Gpu(k), Either::Gpu(v)) = (&k.0, &v.0) {
            self.gpu
                .prepare_attention(k, v, head_dim, n_heads, n_kv_heads);
        }
    }

    fn store_rows(
        &self,
        src: &SplitBuffer,
        dst: &mut SplitCache,
        dst_row: usize,
        rows: usize,
        width: usize,
    ) {
        on_side!(self.at(dst.0.side()), S => {
            let src = self.input::<S>(src);
            S::backend(self).store_rows(&src, S::cache_mut(dst), dst_row, rows, width)
        })
    }

    fn rope_store_kv(
        &self,
        q: &mut SplitBuffer,
        k: &mut SplitBuffer,
        v: &SplitBuffer,
        table: &SplitBuffer,
        k_cache: &mut SplitCache,
        v_cache: &mut SplitCache,
        p: &KvAppend,
    ) {
        on_side!(self.at(k_cache.0.side()), S => {
            let v = self.input::<S>(v);
            let table = self.input::<S>(table);
            let q = self.in_out::<S>(q, p.rows * p.n_heads * p.head_dim);
            let k = self.in_out::<S>(k, p.rows * p.n_kv_heads * p.head_dim);
            let (kc, vc) = (S::cache_mut(k_cache), S::cache_mut(v_cache));
            S::backend(self).rope_store_kv(q, k, &v, &table, kc, vc, p)
        })
    }

    fn qkv_rope_store(
        &self,
        x: &SplitBuffer,
        ws: [&SplitWeight; 3],
        qkv: [&mut SplitBuffer; 3],
        table: &SplitBuffer,
        k_cache: &mut SplitCache,
        v_cache: &mut SplitCache,
        p: &KvAppend,
    ) -> bool {
        // Fused only where the projections and the caches are on one side.
        let side = k_cache.0.side();
        if same_side(&ws) != Some(side) || v_cache.0.side() != side {
            return false;
        }
        on_side!(self.at(side), S => {
            let x = self.input::<S>(x);
            let table = self.input::<S>(table);
            let [q, k, v] = qkv;
            let kv_len = p.rows * p.n_kv_heads * p.head_dim;
            let q = self.output::<S>(q, p.rows * p.n_heads * p.head_dim);
            let k = self.output::<S>(k, kv_len);
            let v = self.output::<S>(v, kv_len);
            let ws = ws.map(S::weight);
            let (kc, vc) = (S::cache_mut(k_cache), S::cache_mut(v_cache));
            S::backend(self).qkv_rope_store(&x, ws, [q, k, v], &table, kc, vc, p)
        })
    }

    fn move_cache_rows(
        &self,
        cache: &mut SplitCache,
        src_row: usize,
        dst_row: usize,
        rows: usize,
        width: usize,
    ) {
        on_side!(self.at(cache.0.side()), S => {
            S::backend(self).move_cache_rows(S::cache_mut(cache), src_row, dst_row, rows, width)
        })
    }

    fn rope_cache(
        &self,
        cache: &mut SplitCache,
        table: &SplitBuffer,
        first_row: usize,
        rows: usize,
        n_heads: usize,
        head_dim: usize,
        rot_dims: usize,
        layout: RopeLayout,
    ) {
        on_side!(self.at(cache.0.side()), S => {
            let table = self.input::<S>(table);
            let cache = S::cache_mut(cache);
            S::backend(self).rope_cache(
                cache, &table, first_row, rows, n_heads, head_dim, rot_dims, layout,
            )
        })
    }

    fn attention(
        &self,
        q: &SplitBuffer,
        k_cache: &SplitCache,
        v_cache: &SplitCache,
        out: &mut SplitBuffer,
        p: &AttentionParams,
        sinks: Option<&SplitWeight>,
    ) {
        on_side!(self.at(k_cache.0.side()), S => {
            let q = self.input::<S>(q);
            let out = self.output::<S>(out, p.rows * p.n_heads * p.head_dim);
            let sinks = sinks.map(S::weight);
            S::backend(self).attention(&q, S::cache(k_cache), S::cache(v_cache), out, p, sinks)
        })
    }

    fn gated_activation(
        &self,
        gate: &mut SplitBuffer,
        up: &SplitBuffer,
        len: usize,
        act: GateActivation,
    ) {
        on_side!(self.current(), S => {
            let up = self.input::<S>(up);
            S::backend(self).gated_activation(self.in_out::<S>(gate, len), &up, len, act)
        })
    }

    fn add(&self, x: &mut SplitBuffer, y: &SplitBuffer, len: usize) {
        on_side!(self.current(), S => {
            let y = self.input::<S>(y);
            S::backend(self).add(self.in_out::<S>(x, len), &y, len)
        })
    }

    fn copy_rows(
        &self,
        src: &SplitBuffer,
        src_row: usize,
        dst: &mut SplitBuffer,
        dst_row: usize,
        rows: usize,
        width: usize,
    ) {
        // Where the rows are: taking one row of a prefill's activations copies one row across.
        // Rows written after the start of `dst` keep the ones before them.
        on_side!(self.holder_side(src), S => {
            let src = self.input::<S>(src);
            let end = (dst_row + rows) * width;
            let dst = if dst_row == 0 {
                self.output::<S>(dst, end)
            } else {
                self.in_out::<S>(dst, end)
            };
            S::backend(self).copy_rows(&src, src_row, dst, dst_row, rows, width)
        })
    }

    fn mul_sigmoid(
        &self,
        x: &mut SplitBuffer,
        gate: &SplitBuffer,
        rows: usize,
        width: usize,
        gate_width: usize,
    ) {
        on_side!(self.current(), S => {
            let gate = self.input::<S>(gate);
            let x = self.in_out::<S>(x, rows * width);
            S::backend(self).mul_sigmoid(x, &gate, rows, width, gate_width)
        })
    }
}

impl SplitBackend {
    /// A weight made on one side, with `t`'s shape, counted on that side.
    fn shaped(&self, on: Either<GpuWeight, CpuWeight>, t: &Tensor) -> SplitWeight {
        let bytes = match on.side() {
            Side::Gpu => &self.gpu_weights,
            Side::Cpu => &self.cpu_weights,
        };
        bytes.fetch_add(t.bytes().len() as u64, Ordering::Relaxed);
        SplitWeight {
            on,
            cols: t.dims.first().copied().unwrap_or(1),
            rows: t.dims.iter().skip(1).product(),
        }
    }

    fn cache_on(
        &self,
        side: Side,
        len: usize,
        ty: CacheType,
        rotation: usize,
    ) -> Result<SplitCache> {
        Ok(SplitCache(match side {
            Side::Gpu => Either::Gpu(self.gpu.cache(len, ty, rotation)?),
            Side::Cpu => Either::Cpu(self.cpu.cache(len, ty, rotation)?),
        }))
    }
}

/// A CPU op's name in a profile beside the GPU's ops of the same name: "matmul (CPU)". Each name
/// is made once (the op names are a small fixed set).
fn on_cpu(name: &'static str) -> &'static str {
    static NAMES: std::sync::Mutex<Vec<(&str, &str)>> = std::sync::Mutex::new(Vec::new());
    let mut names = NAMES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(&(_, named)) = names.iter().find(|(op, _)| *op == name) {
        return named;
    }
    let named: &'static str = Box::leak(format!("{name} (CPU)").into_boxed_str());
    names.push((name, named));
    named
}

/// The side all of `ws` are on, if they agree.
fn same_side(ws: &[&SplitWeight]) -> Option<Side> {
    let side = ws.first()?.side();
    ws.iter().all(|w| w.side() == side).then_some(side)
}

impl RecurrentOps for SplitBackend {
    fn conv_step(
        &self,
        x: &SplitBuffer,
        kernel: &SplitWeight,
        state: &mut SplitBuffer,
        out: &mut SplitBuffer,
        rows: usize,
        channels: usize,
    ) {
        on_side!(self.at(kernel.side()), S => {
            let x = self.input::<S>(x);
            let state = self.in_out::<S>(state, 0);
            let out = self.output::<S>(out, rows * channels);
            S::backend(self).conv_step(&x, S::weight(kernel), state, out, rows, channels)
        })
    }

    fn gated_delta_net(
        &self,
        qkv: &SplitBuffer,
        alpha: &SplitBuffer,
        beta: &SplitBuffer,
        a: &SplitWeight,
        dt_bias: &SplitWeight,
        state: &mut SplitBuffer,
        out: &mut SplitBuffer,
        p: &DeltaNetParams,
    ) {
        on_side!(self.at(a.side()), S => {
            let (qkv, alpha, beta) =
                (self.input::<S>(qkv), self.input::<S>(alpha), self.input::<S>(beta));
            let state = self.in_out::<S>(state, 0);
            let out = self.output::<S>(out, p.rows * p.n_v_heads * p.head_dim);
            let (a, dt_bias) = (S::weight(a), S::weight(dt_bias));
            S::backend(self).gated_delta_net(&qkv, &alpha, &beta, a, dt_bias, state, out, p)
        })
    }
}

impl MoeOps for SplitBackend {
    fn moe_route(
        &self,
        logits: &SplitBuffer,
        selection_bias: Option<&SplitWeight>,
        p: &MoeRouteParams,
        selected: &mut SplitBuffer,
        weights: &mut SplitBuffer,
    ) {
        let side = selection_bias.map_or(self.current(), |b| self.at(b.side()));
        on_side!(side, S => {
            let logits = self.input::<S>(logits);
            let selected = self.output::<S>(selected, p.rows * p.n_used);
            let weights = self.output::<S>(weights, p.rows * p.n_used);
            let bias = selection_bias.map(S::weight);
            S::backend(self).moe_route(&logits, bias, p, selected, weights)
        })
    }

    fn expert_matmul(
        &self,
        x: &SplitBuffer,
        w: &SplitWeight,
        selected: &SplitBuffer,
        out: &mut SplitBuffer,
        p: &ExpertMatmulParams,
    ) {
        on_side!(self.at(w.side()), S => {
            let (x, selected) = (self.input::<S>(x), self.input::<S>(selected));
            let out = self.output::<S>(out, p.rows * p.n_used * p.expert_rows);
            S::backend(self).expert_matmul(&x, S::weight(w), &selected, out, p)
        })
    }

    fn add_expert_bias(
        &self,
        x: &mut SplitBuffer,
        bias: &SplitWeight,
        selected: &SplitBuffer,
        slots: usize,
        width: usize,
    ) {
        on_side!(self.at(bias.side()), S => {
            let selected = self.input::<S>(selected);
            let x = self.in_out::<S>(x, slots * width);
            S::backend(self).add_expert_bias(x, S::weight(bias), &selected, slots, width)
        })
    }

    fn moe_combine(
        &self,
        y: &SplitBuffer,
        weights: &SplitBuffer,
        rows: usize,
        n_used: usize,
        width: usize,
        out: &mut SplitBuffer,
    ) {
        on_side!(self.current(), S => {
            let (y, weights) = (self.input::<S>(y), self.input::<S>(weights));
            let out = self.output::<S>(out, rows * width);
            S::backend(self).moe_combine(&y, &weights, rows, n_used, width, out)
        })
    }
}
