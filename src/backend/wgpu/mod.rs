//! The wgpu backend (Vulkan, Metal, DX12): the `Backend` ops as WGSL compute kernels on buffers
//! that stay on the device. How a call becomes GPU work:
//! 1. `ops.rs` implements each core op (with `matmul.rs` and `attention.rs` for the two largest,
//!    `cache.rs` the KV cache's;
//!    `recurrent.rs` and `moe.rs` the ops of Qwen3.5's DeltaNet blocks and of mixture-of-experts
//!    layers): it picks the kernel variant (`pipelines.rs`: the
//!    shader in `shaders/`, assembled by `wgsl.rs` for the weight type, cache type and adapter
//!    features), packs
//!    the op's sizes into a parameter block and records a dispatch.
//! 2. `stream.rs` collects the dispatches of a forward pass into one encoder and compute pass,
//!    submitting every few dozen, and reads back only what the host asks for (the logits, or the
//!    argmax of greedy decoding).
//! 3. `buffers.rs` owns device memory: weights uploaded once in their GGUF block layout (split by
//!    rows above the binding limit), f32 activations, f32, f16 or q8_0 KV caches.
//! 4. `device.rs` lists and opens adapters and turns wgpu's asynchronous errors into a sticky
//!    error the session reports (`Backend::take_error`).
//!
//! Adding an op: a kernel in the shader file of its family (or a new file, listed in
//! `wgsl::SOURCES`), a function in `pipelines.rs` naming its `Kernel` (file, entry point,
//! defines, bindings), and a few lines in `ops.rs` (or its family's file) recording it.

mod attention;
mod buffers;
mod cache;
mod device;
mod fused_norm;
mod kernels;
mod matmul;
mod moe;
mod ops;
mod pipelines;
mod qkv;
mod recurrent;
#[cfg(test)]
mod shader_checks;
mod stream;
#[cfg(test)]
mod trace;
mod wgsl;

use std::sync::{Arc, Mutex};

pub use buffers::{GpuBuffer, GpuCache, GpuWeight};
pub use device::{
    AdapterChoice, AdapterSummary, CoopChoice, GpuOptions, MatvecShape, hardware_adapter_present,
    list_adapters,
};
pub use stream::{CHUNK as DISPATCHES_PER_SUBMIT, FIRST_CHUNK as FIRST_SUBMIT};

use self::buffers::Memory;
use self::device::Gpu;
use self::pipelines::{FixedKernels, Pipelines};
use self::stream::Stream;
use crate::error::{Error, Result};

/// Buffers the backend keeps for itself, grown on demand.
#[derive(Default)]
struct Scratch {
    /// Token ids of `embed`.
    ids: Option<GpuBuffer>,
    /// Per-split partial results of decode attention.
    partials: Option<GpuBuffer>,
    /// The index `argmax` writes.
    argmax: Option<GpuBuffer>,
    /// Activations rounded for a matmul (`WgpuBackend::weight_input`).
    rounded: Option<GpuBuffer>,
    /// The gated activation's packed Q8_K blocks, written by the gate/up mat-vec beside its input
    /// (which `rounded` may hold), and a completion count per block (`with_gated_packing`).
    gated_packed: Option<GpuBuffer>,
    block_counts: Option<GpuBuffer>,
    /// The packed Q8_K blocks of a norm fused into the mat-vec before it, and its completion
    /// count (`WgpuBackend::fused_norm`): apart from `rounded`, which that mat-vec may read.
    normed_packed: Option<GpuBuffer>,
    norm_count: Option<GpuBuffer>,
    /// Whose packed Q8_K blocks `rounded` (or `gated_packed`, `normed_packed`) holds, while they
    /// are current (`WgpuBackend::weight_input`).
    packed: Option<Packed>,
    /// The last mat-vec that a residual add and norm may take as their epilogue, while nothing
    /// was recorded after it (`WgpuBackend::fused_norm`).
    projection: Option<fused_norm::Projection>,
    /// Inside one `matmul_many`, whose mat-vecs read x and write only their outputs.
    sharing_packed: bool,
}

/// An input (buffer id, values) quantized to packed Q8_K blocks, by a norm that also wrote it or
/// for an integer-dot mat-vec.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Packed {
    input: (u64, usize),
    /// Which buffer holds them.
    held: PackedIn,
    /// Current while the stream has recorded this many commands (nothing written since), or
    /// (None) until the `matmul_many` span that made them ends.
    at: Option<u64>,
}

/// The scratch buffer that holds an input's packed Q8_K blocks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PackedIn {
    /// `Scratch::rounded`: a norm's, the attention's or `weight_input`'s.
    Rounded,
    /// `Scratch::gated_packed`: the gate/up mat-vec's.
    Gated,
    /// `Scratch::normed_packed`: a norm fused into a mat-vec's.
    Normed,
}

pub struct WgpuBackend {
    gpu: Gpu,
    memory: Arc<Memory>,
    pipelines: Pipelines,
    stream: Mutex<Stream>,
    scratch: Mutex<Scratch>,
    fixed: FixedKernels,
    param_slot: u64,
}

impl WgpuBackend {
    /// Open the adapter `choice` picks, with the environment's options; an error when there is
    /// none.
    pub fn new(choice: AdapterChoice) -> Result<WgpuBackend> {
        match Self::open(choice, GpuOptions::from_env()?)? {
            Some(b) => Ok(b),
            None => Err(Error::Unsupported(match choice {
                AdapterChoice::Hardware => {
                    "no GPU adapter was found (kiln devices lists what wgpu sees)".into()
                }
                _ => "no GPU adapter was found: wgpu sees no Vulkan, Metal or DX12 device \
                      (on Linux without a GPU, Mesa's lavapipe provides one: mesa-vulkan-drivers); \
                      use --backend cpu"
                    .into(),
            })),
        }
    }

    /// Open the adapter `choice` picks; `Ok(None)` when there is none.
    pub fn open(choice: AdapterChoice, options: GpuOptions) -> Result<Option<WgpuBackend>> {
        let Some(gpu) = device::open(choice, options)? else {
            return Ok(None);
        };
        let param_slot = stream::param_slot(&gpu);
        Ok(Some(WgpuBackend {
            stream: Mutex::new(Stream::new(&gpu)),
            gpu,
            memory: Arc::new(Memory::default()),
            pipelines: Pipelines::default(),
            scratch: Mutex::new(Scratch::default()),
            fixed: FixedKernels::default(),
            param_slot,
        }))
    }

    /// The adapter's name.
    pub fn adapter_name(&self) -> &str {
        &self.gpu.info.name
    }

    /// Whether the adapter is a CPU (software) one such as lavapipe.
    pub fn is_software(&self) -> bool {
        self.gpu.info.device_type == wgpu::DeviceType::Cpu
    }

    /// Bytes of device memory kiln may hold (`KILN_WGPU_MAX_MEMORY`), when capped.
    pub fn memory_cap(&self) -> Option<u64> {
        self.gpu.max_memory
    }

    /// Bytes of device memory a model may take: the cap, else nine tenths of the adapter's
    /// device-local heap where the API reports it (the rest for the driver, the display and
    /// other programs); None when neither is known.
    pub fn memory_budget(&self) -> Option<u64> {
        self.gpu
            .max_memory
            .or(self.gpu.device_memory.map(|m| m / 10 * 9))
    }

    /// The size of the adapter's largest device-local memory heap, where the API reports it.
    pub fn device_memory(&self) -> Option<u64> {
        self.gpu.device_memory
    }

    /// Bytes of device memory kiln holds now.
    pub fn allocated_bytes(&self) -> u64 {
        self.memory
            .allocated
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn stream(&self) -> std::sync::MutexGuard<'_, Stream> {
        let mut s = self.stream.lock().unwrap_or_else(|p| p.into_inner());
        // A drop racing this load is purged at the next call; buffer ids are never reused.
        if self
            .memory
            .any_dead
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            let mut dead = self.memory.dead.lock().unwrap_or_else(|p| p.into_inner());
            s.purge(&mut dead);
            self.memory
                .any_dead
                .store(false, std::sync::atomic::Ordering::Relaxed);
        }
        s
    }
}
