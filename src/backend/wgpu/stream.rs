//! The command stream. Ops record dispatches and copies here instead of submitting them; the stream
//! encodes them into one command encoder and compute pass and submits them in chunks (so the GPU
//! starts while the host records the rest of the forward pass), and at a readback. After a
//! readback, the first chunk is `FIRST_CHUNK` dispatches and each next one twice the last, up to
//! `CHUNK` (as llama.cpp's Vulkan backend starts with small submits): the GPU, idle while the host
//! reads a token's result back, starts on the next one after a few dispatches, not 64.
//!
//! Each dispatch's parameters take one slot of a uniform arena (a dynamic offset), written with
//! one `write_buffer` per submit; host data (token ids, RoPE tables) goes through a staging arena
//! the same way and is copied in stream order. Bind groups are built once per (pipeline, buffers)
//! and reused: buffers never move, so a decode step builds none. Each pipeline keeps its own
//! list, searched from the entry after the last one used: a decode step dispatches in the same
//! order every token, so the first entry looked at is the one wanted and nothing is hashed. While
//! profiling, the stream runs as it otherwise does, one pass, with a timestamp between dispatches
//! where the adapter writes timestamps inside passes; else each dispatch gets its own pass with
//! timestamp writes where the adapter has timestamp queries; elsewhere its own submit, timed on
//! the host from submit to completion.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::device::Gpu;
use super::pipelines::Pipeline;
use crate::backend::{OpTime, Profile};

/// Dispatches per submit, at most.
pub const CHUNK: usize = 64;
/// Dispatches in the first submit after a readback.
pub const FIRST_CHUNK: usize = 8;

enum Cmd {
    Dispatch {
        pipeline: Arc<Pipeline>,
        bind_group: wgpu::BindGroup,
        slot: u32,
        groups: [u32; 3],
    },
    /// Copy from the staging arena.
    Upload {
        staging_offset: u64,
        dst: wgpu::Buffer,
        dst_offset: u64,
        size: u64,
    },
    Copy {
        src: wgpu::Buffer,
        src_offset: u64,
        dst: wgpu::Buffer,
        dst_offset: u64,
        size: u64,
    },
}

struct Timing {
    queries: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    read: wgpu::Buffer,
    period_ns: f64,
}

pub struct Stream {
    cmds: Vec<Cmd>,
    dispatches_pending: usize,
    /// Dispatches that fill the current chunk.
    chunk: usize,
    params: Vec<u8>,
    staging: Vec<u8>,
    param_slot: u64,
    param_buf: wgpu::Buffer,
    staging_buf: Option<wgpu::Buffer>,
    readback: Option<wgpu::Buffer>,
    /// By pipeline id: its bind groups.
    bind_groups: Vec<BindGroups>,
    pub dispatches: u64,
    /// Commands recorded since the stream began (never reset): equal at two moments, nothing
    /// was written in between.
    pub recorded: u64,
    pub submits: u64,
    pub readbacks: u64,
    profiling: bool,
    timing: Option<Timing>,
    op_times: Vec<OpTime>,
    /// When the last submit went out (host-side timing without timestamp queries).
    submitted_at: Option<Instant>,
    /// With timestamps inside passes: the GPU's time from the first dispatch of each submit to
    /// its last, summed.
    gpu_span: Duration,
    /// Host time spent building, recording and submitting dispatches, and waiting for reads.
    host: Duration,
    read_wait: Duration,
}

/// Storage bindings a kernel may have, at most.
const MAX_BINDINGS: usize = 12;

/// A dispatch's parameter words, built on the stack (a decode step records ~130 dispatches, and
/// the heap's allocations for their small vectors took ~8 % of its host time).
pub type ParamWords = arrayvec::ArrayVec<u32, 32>;

/// A dispatch's storage buffers, built on the stack.
pub type Bindings<'a> = arrayvec::ArrayVec<(&'a wgpu::Buffer, u64), MAX_BINDINGS>;

/// `buffers` and then `more`, as one dispatch's bindings.
pub fn bindings<'a>(
    buffers: &[(&'a wgpu::Buffer, u64)],
    more: &[(&'a wgpu::Buffer, u64)],
) -> Bindings<'a> {
    buffers.iter().chain(more).copied().collect()
}

/// The bind groups of one pipeline, by the ids of the buffers they bind.
#[derive(Default)]
struct BindGroups {
    entries: Vec<([u64; MAX_BINDINGS], wgpu::BindGroup)>,
    /// Where the next search starts: after the entry found last.
    next: usize,
}

impl BindGroups {
    fn find(&mut self, ids: &[u64; MAX_BINDINGS]) -> Option<&wgpu::BindGroup> {
        let n = self.entries.len();
        let at = (0..n)
            .map(|i| (self.next + i) % n)
            .find(|&i| self.entries[i].0 == *ids)?;
        self.next = at + 1;
        Some(&self.entries[at].1)
    }
}

/// A grid of `n` workgroups, spilling from x into y past the 65535 limit.
pub fn grid(n: usize) -> [u32; 3] {
    let x = n.min(65535);
    [x as u32, n.div_ceil(x.max(1)) as u32, 1]
}

/// A parameter block's words as the bytes a dispatch uploads.
pub fn words(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Bytes of one parameter slot: the device's uniform offset alignment, at least 128 (the largest
/// parameter block, the expert mat-vec's, takes 68).
pub fn param_slot(gpu: &Gpu) -> u64 {
    (gpu.limits.min_uniform_buffer_offset_alignment as u64).max(128)
}

impl Stream {
    pub fn new(gpu: &Gpu) -> Stream {
        let param_slot = param_slot(gpu);
        let param_buf = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("kiln params"),
            size: param_slot * CHUNK as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Stream {
            cmds: Vec::new(),
            dispatches_pending: 0,
            chunk: FIRST_CHUNK,
            params: Vec::new(),
            staging: Vec::new(),
            param_slot,
            param_buf,
            staging_buf: None,
            readback: None,
            bind_groups: Vec::new(),
            dispatches: 0,
            recorded: 0,
            submits: 0,
            readbacks: 0,
            profiling: false,
            timing: None,
            op_times: Vec::new(),
            submitted_at: None,
            gpu_span: Duration::ZERO,
            host: Duration::ZERO,
            read_wait: Duration::ZERO,
        }
    }

    /// Record a dispatch of `pipeline` over `groups` workgroups with parameters `params` and the
    /// storage `buffers` (bindings 1..).
    pub fn dispatch(
        &mut self,
        gpu: &Gpu,
        pipeline: &Arc<Pipeline>,
        params: &[u32],
        buffers: &[(&wgpu::Buffer, u64)],
        groups: [u32; 3],
    ) {
        if groups.contains(&0) {
            return;
        }
        // Profiling without timestamp queries, each dispatch goes out alone, timed on the host
        // (`flush`) when the next comes, so that it can be taken back (`retract_last`) until then.
        if self.host_timed() && self.dispatches_pending > 0 {
            self.flush(gpu);
        }
        // The host's time is counted only for a profile: two clock reads a dispatch took 4 % of
        // a decode step's host time on the test VM.
        let (started, waited) = (self.profiling.then(Instant::now), self.read_wait);
        // A full chunk goes out when the next dispatch comes, not with its last one, for the
        // same reason.
        if self.dispatches_pending >= self.chunk {
            self.flush(gpu);
            self.chunk = (2 * self.chunk).min(CHUNK);
        }
        if buffers.len() > MAX_BINDINGS {
            gpu.fail(format!(
                "{} binds more than {MAX_BINDINGS} buffers",
                pipeline.label
            ));
            return;
        }
        let mut ids = [u64::MAX; MAX_BINDINGS];
        for (id, (_, b)) in ids.iter_mut().zip(buffers) {
            *id = *b;
        }
        let index = pipeline.id as usize;
        if self.bind_groups.len() <= index {
            self.bind_groups.resize_with(index + 1, BindGroups::default);
        }
        let groups_of = &mut self.bind_groups[index];
        let bind_group = match groups_of.find(&ids) {
            Some(b) => b.clone(),
            None => {
                let b = create_bind_group(gpu, pipeline, &self.param_buf, self.param_slot, buffers);
                groups_of.entries.push((ids, b.clone()));
                b
            }
        };
        let slot = self.dispatches_pending as u32;
        self.params
            .resize(slot as usize * self.param_slot as usize, 0);
        for w in params {
            self.params.extend_from_slice(&w.to_le_bytes());
        }
        // Measurement only (KILN_WGPU_REPEAT=label): the dispatches of one kernel run twice, so
        // that the time a token gains is that kernel's real cost in the stream.
        static REPEAT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
        let repeat = REPEAT.get_or_init(|| std::env::var("KILN_WGPU_REPEAT").ok());
        if repeat.as_deref() == Some(pipeline.label) {
            self.cmds.push(Cmd::Dispatch {
                pipeline: pipeline.clone(),
                bind_group: bind_group.clone(),
                slot,
                groups,
            });
        }
        self.cmds.push(Cmd::Dispatch {
            pipeline: pipeline.clone(),
            bind_group,
            slot,
            groups,
        });
        self.dispatches_pending += 1;
        self.dispatches += 1;
        self.recorded += 1;
        if let Some(started) = started {
            self.host += started.elapsed().saturating_sub(self.read_wait - waited);
        }
    }

    /// Whether dispatches are timed on the host, one a submit: profiling without timestamp
    /// queries.
    fn host_timed(&self) -> bool {
        self.profiling && self.timing.is_none()
    }

    /// Wait for the device to finish what was submitted; the time since the submit goes to
    /// `label`. Includes the submit's own overhead: the best a host can tell without timestamps.
    fn wait_and_time(&mut self, gpu: &Gpu, label: &'static str) {
        let Some(start) = self.submitted_at.take() else {
            return;
        };
        if let Err(e) = gpu.device.poll(wgpu::PollType::wait_indefinitely()) {
            gpu.fail(format!("waiting for the GPU failed: {e}"));
            return;
        }
        self.add_time(label, start.elapsed());
    }

    fn add_time(&mut self, label: &'static str, time: Duration) {
        match self.op_times.iter_mut().find(|o| o.name == label) {
            Some(o) => {
                o.calls += 1;
                o.time += time;
            }
            None => self.op_times.push(OpTime {
                name: label,
                calls: 1,
                time,
            }),
        }
    }

    /// Take back the last dispatch, where nothing was recorded after it (the stream's `recorded`
    /// still equals `recorded`) and it has not gone out, so that the caller records in its place
    /// one that does its work and more (`WgpuBackend::fused_norm`). Whether it did.
    pub fn retract_last(&mut self, recorded: u64) -> bool {
        if self.recorded != recorded || self.dispatches_pending == 0 {
            return false;
        }
        let Some(&Cmd::Dispatch { slot, .. }) = self.cmds.last() else {
            return false;
        };
        // Both copies where KILN_WGPU_REPEAT runs it twice.
        while matches!(self.cmds.last(), Some(Cmd::Dispatch { slot: s, .. }) if *s == slot) {
            self.cmds.pop();
        }
        self.params
            .truncate(slot as usize * self.param_slot as usize);
        self.dispatches_pending -= 1;
        self.dispatches = self.dispatches.saturating_sub(1);
        true
    }

    /// Record a copy of host bytes into `dst` at `dst_offset`, in stream order.
    pub fn upload(&mut self, dst: &wgpu::Buffer, dst_offset: u64, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let staging_offset = self.staging.len() as u64;
        self.staging.extend_from_slice(data);
        self.staging
            .resize(self.staging.len().next_multiple_of(4), 0);
        self.recorded += 1;
        self.cmds.push(Cmd::Upload {
            staging_offset,
            dst: dst.clone(),
            dst_offset,
            size: (data.len() as u64).next_multiple_of(4),
        });
    }

    /// Record a device-side copy.
    pub fn copy(
        &mut self,
        src: &wgpu::Buffer,
        src_offset: u64,
        dst: &wgpu::Buffer,
        dst_offset: u64,
        size: u64,
    ) {
        if size == 0 {
            return;
        }
        self.recorded += 1;
        self.cmds.push(Cmd::Copy {
            src: src.clone(),
            src_offset,
            dst: dst.clone(),
            dst_offset,
            size,
        });
    }

    /// Forget the bind groups of dropped buffers.
    pub fn purge(&mut self, dead: &mut Vec<u64>) {
        if !dead.is_empty() {
            for list in &mut self.bind_groups {
                list.entries
                    .retain(|(ids, _)| !ids.iter().any(|id| dead.contains(id)));
                list.next = 0;
            }
            dead.clear();
        }
    }

    /// Encode and submit everything recorded.
    pub fn flush(&mut self, gpu: &Gpu) {
        if self.cmds.is_empty() {
            return;
        }
        if !self.params.is_empty() {
            gpu.queue.write_buffer(&self.param_buf, 0, &self.params);
        }
        if !self.staging.is_empty() {
            let need = self.staging.len() as u64;
            if self.staging_buf.as_ref().is_none_or(|b| b.size() < need) {
                self.staging_buf = Some(gpu.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("kiln staging"),
                    size: need.next_power_of_two().max(4096),
                    usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                }));
            }
            if let Some(b) = &self.staging_buf {
                gpu.queue.write_buffer(b, 0, &self.staging);
            }
        }
        let timed = self.profiling && self.timing.is_some();
        // Timestamps between the dispatches of one pass (`Capabilities::timestamps_in_passes`):
        // each written when all work before it is done (Vulkan's bottom of pipe), so a
        // dispatch's time is from its predecessor's end to its own, as the stream runs it.
        let in_pass = timed && gpu.caps.timestamps_in_passes;
        let mut labels: Vec<&'static str> = Vec::new();
        let mut encoder = gpu
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("kiln"),
            });
        let mut pass: Option<wgpu::ComputePass<'static>> = None;
        let mut last_label = None;
        for cmd in self.cmds.drain(..) {
            match cmd {
                Cmd::Dispatch {
                    pipeline,
                    bind_group,
                    slot,
                    groups,
                } => {
                    last_label = Some(pipeline.label);
                    if timed && !in_pass {
                        drop(pass.take());
                        let t = self
                            .timing
                            .as_ref()
                            .map(|t| wgpu::ComputePassTimestampWrites {
                                query_set: &t.queries,
                                beginning_of_pass_write_index: Some(2 * labels.len() as u32),
                                end_of_pass_write_index: Some(2 * labels.len() as u32 + 1),
                            });
                        labels.push(pipeline.label);
                        pass = Some(
                            encoder
                                .begin_compute_pass(&wgpu::ComputePassDescriptor {
                                    label: None,
                                    timestamp_writes: t,
                                })
                                .forget_lifetime(),
                        );
                    }
                    let p = pass.get_or_insert_with(|| {
                        encoder
                            .begin_compute_pass(&wgpu::ComputePassDescriptor::default())
                            .forget_lifetime()
                    });
                    let stamp = match &self.timing {
                        Some(t) if in_pass => {
                            let i = 2 * labels.len() as u32;
                            labels.push(pipeline.label);
                            Some((&t.queries, i))
                        }
                        _ => None,
                    };
                    if let Some((queries, i)) = stamp {
                        p.write_timestamp(queries, i);
                    }
                    p.set_pipeline(&pipeline.pipeline);
                    p.set_bind_group(0, &bind_group, &[slot * self.param_slot as u32]);
                    p.dispatch_workgroups(groups[0], groups[1], groups[2]);
                    if let Some((queries, i)) = stamp {
                        p.write_timestamp(queries, i + 1);
                    }
                }
                Cmd::Upload {
                    staging_offset,
                    dst,
                    dst_offset,
                    size,
                } => {
                    pass = None;
                    if let Some(s) = &self.staging_buf {
                        encoder.copy_buffer_to_buffer(s, staging_offset, &dst, dst_offset, size);
                    }
                }
                Cmd::Copy {
                    src,
                    src_offset,
                    dst,
                    dst_offset,
                    size,
                } => {
                    pass = None;
                    encoder.copy_buffer_to_buffer(&src, src_offset, &dst, dst_offset, size);
                }
            }
        }
        drop(pass);
        if timed
            && !labels.is_empty()
            && let Some(t) = &self.timing
        {
            let n = 2 * labels.len() as u32;
            encoder.resolve_query_set(&t.queries, 0..n, &t.resolve, 0);
            encoder.copy_buffer_to_buffer(&t.resolve, 0, &t.read, 0, n as u64 * 8);
        }
        gpu.queue.submit([encoder.finish()]);
        self.submitted_at = Some(Instant::now());
        self.submits += 1;
        self.params.clear();
        self.staging.clear();
        self.dispatches_pending = 0;
        if timed && !labels.is_empty() {
            self.collect_times(gpu, &labels, in_pass);
        }
        // Timed on the host, a submit holds one dispatch (`dispatch`).
        if let Some(label) = last_label.filter(|_| self.host_timed()) {
            self.wait_and_time(gpu, label);
        }
    }

    fn collect_times(&mut self, gpu: &Gpu, labels: &[&'static str], in_pass: bool) {
        let Some(t) = &self.timing else { return };
        let period_ns = t.period_ns;
        let started = Instant::now();
        let bytes = map_read(gpu, &t.read, labels.len() as u64 * 16, |b| b.to_vec());
        self.read_wait += started.elapsed();
        let Some(bytes) = bytes else {
            return;
        };
        // Each timed dispatch on stderr, in order (`KILN_PROFILE_DISPATCHES=1`).
        let dump = std::env::var_os("KILN_PROFILE_DISPATCHES").is_some();
        let at =
            |k: usize| u64::from_le_bytes(bytes[k * 8..k * 8 + 8].try_into().unwrap_or([0; 8]));
        if in_pass {
            let ticks = at(2 * labels.len() - 1).saturating_sub(at(0));
            self.gpu_span += Duration::from_nanos((ticks as f64 * period_ns) as u64);
        }
        for (i, label) in labels.iter().enumerate() {
            let ticks = at(2 * i + 1).saturating_sub(at(2 * i));
            let time = Duration::from_nanos((ticks as f64 * period_ns) as u64);
            if dump {
                eprintln!("dispatch {label} {:.1} µs", time.as_secs_f64() * 1e6);
            }
            self.add_time(label, time);
        }
    }

    /// Submit what is recorded, then copy `size` bytes of `src` from `offset` to the host.
    pub fn read(
        &mut self,
        gpu: &Gpu,
        src: &wgpu::Buffer,
        offset: u64,
        size: u64,
    ) -> Option<Vec<u8>> {
        self.read_with(gpu, src, offset, size, |bytes| bytes.to_vec())
    }

    /// `read`, handing the bytes to `take` where they are mapped instead of copying them out
    /// first (a token's logits are half a megabyte on a 128k vocabulary).
    pub fn read_with<R>(
        &mut self,
        gpu: &Gpu,
        src: &wgpu::Buffer,
        offset: u64,
        size: u64,
        take: impl FnOnce(&[u8]) -> R,
    ) -> Option<R> {
        let size4 = size.next_multiple_of(4);
        if self.readback.as_ref().is_none_or(|b| b.size() < size4) {
            self.readback = Some(gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("kiln readback"),
                size: size4.next_power_of_two().max(4096),
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }));
        }
        let rb = self.readback.clone()?;
        let (started, waited) = (Instant::now(), self.read_wait);
        self.copy(src, offset, &rb, 0, size4);
        self.flush(gpu);
        self.chunk = FIRST_CHUNK;
        self.readbacks += 1;
        let submitted = Instant::now();
        self.host += (submitted - started).saturating_sub(self.read_wait - waited);
        let taken = map_read(gpu, &rb, size4, |bytes| take(&bytes[..size as usize]));
        self.read_wait += submitted.elapsed();
        taken
    }

    pub fn set_profiling(&mut self, gpu: &Gpu, on: bool) {
        self.profiling = on;
        self.dispatches = 0;
        self.submits = 0;
        self.readbacks = 0;
        self.host = Duration::ZERO;
        self.read_wait = Duration::ZERO;
        self.gpu_span = Duration::ZERO;
        self.op_times.clear();
        if on && gpu.caps.timestamps && self.timing.is_none() {
            let n = 2 * CHUNK as u64;
            self.timing = Some(Timing {
                queries: gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
                    label: Some("kiln timestamps"),
                    ty: wgpu::QueryType::Timestamp,
                    count: n as u32,
                }),
                resolve: gpu.device.create_buffer(&wgpu::BufferDescriptor {
                    label: None,
                    size: n * 8,
                    usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                    mapped_at_creation: false,
                }),
                read: gpu.device.create_buffer(&wgpu::BufferDescriptor {
                    label: None,
                    size: n * 8,
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                }),
                period_ns: gpu.queue.get_timestamp_period() as f64,
            });
        }
    }

    pub fn profile(&self) -> Option<Profile> {
        if !self.profiling {
            return None;
        }
        let mut counters = vec![
            ("dispatches", self.dispatches),
            ("submits", self.submits),
            ("readbacks", self.readbacks),
            (
                "host µs (recording, submitting)",
                self.host.as_micros() as u64,
            ),
            (
                "host µs waiting for reads",
                self.read_wait.as_micros() as u64,
            ),
        ];
        if !self.gpu_span.is_zero() {
            counters.push((
                "GPU µs from each submit's first dispatch to its last",
                self.gpu_span.as_micros() as u64,
            ));
        }
        Some(Profile {
            ops: self.op_times.clone(),
            counters,
        })
    }
}

/// The bind group of `pipeline` with the parameter arena at binding 0 and `buffers` after it.
fn create_bind_group(
    gpu: &Gpu,
    pipeline: &Pipeline,
    param_buf: &wgpu::Buffer,
    slot_size: u64,
    buffers: &[(&wgpu::Buffer, u64)],
) -> wgpu::BindGroup {
    let mut entries = vec![wgpu::BindGroupEntry {
        binding: 0,
        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: param_buf,
            offset: 0,
            size: std::num::NonZeroU64::new(slot_size),
        }),
    }];
    let grid = pipeline.grid.as_ref();
    for (i, b) in buffers.iter().map(|(b, _)| *b).chain(grid).enumerate() {
        entries.push(wgpu::BindGroupEntry {
            binding: i as u32 + 1,
            resource: b.as_entire_binding(),
        });
    }
    gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some(pipeline.label),
        layout: &pipeline.layout,
        entries: &entries,
    })
}

/// Map `size` bytes of a MAP_READ buffer, wait, and copy them out. None when the device failed
/// (the failure is recorded for the session).
fn map_read<R>(
    gpu: &Gpu,
    buf: &wgpu::Buffer,
    size: u64,
    take: impl FnOnce(&[u8]) -> R,
) -> Option<R> {
    let (tx, rx) = std::sync::mpsc::channel();
    buf.map_async(wgpu::MapMode::Read, 0..size, move |r| {
        let _ = tx.send(r);
    });
    // Polls without blocking first, for up to `Gpu::spin` (a blocking wait's wake-up may cost
    // more than the wait); the map's callback runs inside a poll once the copy is done.
    let spun = Instant::now();
    let mut mapped = None;
    while mapped.is_none() && spun.elapsed() < gpu.spin {
        if let Err(e) = gpu.device.poll(wgpu::PollType::Poll) {
            gpu.fail(format!("waiting for the GPU failed: {e}"));
            return None;
        }
        mapped = rx.try_recv().ok();
        std::hint::spin_loop();
    }
    if mapped.is_none()
        && let Err(e) = gpu.device.poll(wgpu::PollType::wait_indefinitely())
    {
        gpu.fail(format!("waiting for the GPU failed: {e}"));
        return None;
    }
    match mapped.map_or_else(|| rx.recv(), Ok) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            gpu.fail(format!("reading back from the GPU failed: {e}"));
            return None;
        }
        Err(_) => {
            gpu.fail("reading back from the GPU failed: the map request was dropped".into());
            return None;
        }
    }
    let out = match buf.slice(0..size).get_mapped_range() {
        Ok(view) => take(&view),
        Err(e) => {
            gpu.fail(format!("reading back from the GPU failed: {e}"));
            return None;
        }
    };
    buf.unmap();
    Some(out)
}
