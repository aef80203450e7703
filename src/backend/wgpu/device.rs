//! Adapters and the device: listing every adapter (`kiln devices`), choosing one (`--backend`,
//! `--gpu N`), opening it with the adapter's real limits and the optional features kiln uses, and
//! turning wgpu's asynchronous failures (validation errors, lost devices) into a sticky error that
//! the session reports, instead of wgpu's default handler, which panics.

use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};

/// Which adapter to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdapterChoice {
    /// A discrete or integrated GPU, if there is one (`--backend auto`).
    Hardware,
    /// The best adapter of any kind, software ones included (`--backend gpu`).
    Best,
    /// The adapter at this index of `kiln devices`' list (`--gpu N`).
    Index(usize),
}

/// What `kiln devices` shows of an adapter.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AdapterSummary {
    pub index: usize,
    pub name: String,
    pub device_type: String,
    pub api: String,
    pub driver: String,
    pub max_storage_binding: u64,
    pub max_buffer: u64,
    pub workgroup_memory: u32,
    pub max_invocations: u32,
    pub storage_offset_alignment: u32,
    /// Subgroup sizes (min, max), where the adapter has subgroup operations.
    pub subgroups: Option<(u32, u32)>,
    pub shader_f16: bool,
    pub timestamps: bool,
    /// The cooperative-matrix (tensor-core) configurations wgpu offers on this adapter
    /// (`EXPERIMENTAL_COOPERATIVE_MATRIX`), as `M×N×K A→C` ("16×16×16 f16→f32": the one the
    /// prefill's `KILN_WGPU_COOP=1` takes).
    pub cooperative_matrices: Vec<String>,
    /// Whether `--backend auto` takes this adapter.
    pub auto: bool,
    /// Its largest device-local memory heap, where the API reports it (Vulkan).
    pub device_memory: Option<u64>,
    /// Its compute units (SMs, CUs), where the driver reports them (Vulkan on NVIDIA and AMD).
    pub compute_units: Option<u32>,
}

/// `KILN_WGPU_NOOP=1`: wgpu's no-op backend instead of the real ones, an adapter that records and
/// submits every dispatch but runs none (results are zeros). With it `kiln bench --backend gpu`
/// measures the host's own time per token: building dispatches, recording and submitting them,
/// which on a real GPU must hide behind the GPU's work. It has subgroups of 32 and no other
/// optional feature, and takes the kernels shaped for hardware GPUs, so that what it records is
/// what a GPU's stream records: wgpu 30's no-op adapter reports itself as a CPU whatever
/// `NoopBackendOptions::device_type` says, which would otherwise give it the software adapters'
/// variants (an activation-rounding dispatch before each mat-vec: 214 dispatches a token on the
/// 1B shape instead of 141).
fn noop() -> bool {
    std::env::var_os("KILN_WGPU_NOOP").is_some_and(|v| v == "1")
}

fn backends() -> wgpu::Backends {
    if noop() {
        wgpu::Backends::NOOP
    } else {
        wgpu::Backends::PRIMARY
    }
}

fn instance() -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = backends();
    if noop() {
        desc.backend_options.noop = wgpu::NoopBackendOptions {
            enable: true,
            limits: None,
            features: Some(wgpu::Features::SUBGROUP),
            device_type: Some(wgpu::DeviceType::DiscreteGpu),
            subgroup_min_size: Some(32),
            subgroup_max_size: Some(32),
        };
    }
    wgpu::Instance::new(desc)
}

fn adapters(instance: &wgpu::Instance) -> Vec<wgpu::Adapter> {
    pollster::block_on(instance.enumerate_adapters(backends()))
}

/// Preference among adapters: discrete, integrated, virtual, other, then CPU (software).
fn rank(t: wgpu::DeviceType) -> u32 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

fn is_hardware(t: wgpu::DeviceType) -> bool {
    matches!(
        t,
        wgpu::DeviceType::DiscreteGpu | wgpu::DeviceType::IntegratedGpu
    )
}

/// The index `auto` would take, if any.
fn auto_index(list: &[wgpu::Adapter]) -> Option<usize> {
    best_index(list, true)
}

fn best_index(list: &[wgpu::Adapter], hardware_only: bool) -> Option<usize> {
    list.iter()
        .enumerate()
        .filter(|(_, a)| !hardware_only || is_hardware(a.get_info().device_type))
        .min_by_key(|(i, a)| (rank(a.get_info().device_type), *i))
        .map(|(i, _)| i)
}

fn summary(index: usize, a: &wgpu::Adapter, auto: bool) -> AdapterSummary {
    let info = a.get_info();
    let limits = a.limits();
    let features = a.features();
    let driver = [info.driver.as_str(), info.driver_info.as_str()]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    AdapterSummary {
        index,
        name: info.name.clone(),
        device_type: format!("{:?}", info.device_type),
        api: format!("{:?}", info.backend),
        driver,
        max_storage_binding: limits.max_storage_buffer_binding_size,
        max_buffer: limits.max_buffer_size,
        workgroup_memory: limits.max_compute_workgroup_storage_size,
        max_invocations: limits.max_compute_invocations_per_workgroup,
        storage_offset_alignment: limits.min_storage_buffer_offset_alignment,
        subgroups: features
            .contains(wgpu::Features::SUBGROUP)
            .then_some((info.subgroup_min_size, info.subgroup_max_size)),
        shader_f16: features.contains(wgpu::Features::SHADER_F16),
        timestamps: features.contains(wgpu::Features::TIMESTAMP_QUERY),
        cooperative_matrices: if features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX)
        {
            a.cooperative_matrix_properties()
                .iter()
                .map(|c| {
                    format!(
                        "{}×{}×{} {:?}→{:?}",
                        c.m_size, c.n_size, c.k_size, c.ab_type, c.cr_type
                    )
                    .to_lowercase()
                })
                .collect()
        } else {
            Vec::new()
        },
        auto,
        device_memory: device_local_heap(a),
        compute_units: compute_units(a),
    }
}

/// Every adapter wgpu finds (Vulkan, Metal, DX12), in the order `--gpu N` numbers them.
pub fn list_adapters() -> Vec<AdapterSummary> {
    let list = adapters(&instance());
    let auto = auto_index(&list);
    list.iter()
        .enumerate()
        .map(|(i, a)| summary(i, a, Some(i) == auto))
        .collect()
}

/// Whether `--backend auto` would find a GPU.
pub fn hardware_adapter_present() -> bool {
    auto_index(&adapters(&instance())).is_some()
}

/// The optional features kiln uses, where the adapter has them.
#[derive(Debug, Clone, Copy)]
pub struct Capabilities {
    pub subgroups: bool,
    pub timestamps: bool,
    /// Timestamps may be written between dispatches of one compute pass
    /// (`TIMESTAMP_QUERY_INSIDE_PASSES`): a profile times the stream as it runs.
    pub timestamps_in_passes: bool,
    /// The adapter is a CPU (lavapipe, WARP) and kernels take their variants for one.
    pub software_kernels: bool,
}

/// An open device and what kiln needs to know about it.
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    pub caps: Capabilities,
    /// The largest buffer one binding may cover (the adapter's limit, a multiple of 4).
    pub max_binding: u64,
    /// The largest part of a weight matrix: `max_binding`, or less by `KILN_WGPU_MAX_BINDING`.
    pub weight_binding: u64,
    /// A cap on the device memory kiln allocates (`KILN_WGPU_MAX_MEMORY`), for tests and users
    /// sharing a GPU.
    pub max_memory: Option<u64>,
    /// The size of the adapter's largest device-local memory heap, where the API tells it
    /// (Vulkan): its VRAM, or an integrated GPU's share of system memory.
    pub device_memory: Option<u64>,
    /// Trusted kernels keep their bounds checks too (`GpuOptions::checked_shaders`).
    pub checked_shaders: bool,
    /// Matmuls take unrounded activations (`GpuOptions::f32_activations`).
    pub f32_activations: bool,
    /// K-quant mat-vecs take integer dot products on activations quantized once (unless
    /// `GpuOptions::float_matvecs`).
    pub int_dot: bool,
    /// The per-type mat-vec's shape set by hand (`GpuOptions::matvec_shape`).
    pub matvec_shape: Option<MatvecShape>,
    /// How long a read-back polls without blocking before it blocks (`GpuOptions::spin`).
    pub spin: std::time::Duration,
    /// Decode's fused epilogues are on (unless `GpuOptions::unfused`).
    pub fused: bool,
    /// Q/K/V projections of two K-quant families share one dispatch (unless
    /// `GpuOptions::unmixed`).
    pub mixed: bool,
    /// The residual add and the next input norm run in the epilogue of the mat-vec before them
    /// (unless `GpuOptions::unfused` or `GpuOptions::separate_norm`).
    pub fused_norm: bool,
    /// The decode attention's workgroups combine its splits (unless
    /// `GpuOptions::separate_reduce`).
    pub merged_reduce: bool,
    /// Keys per decode attention split set by hand (`GpuOptions::attention_keys`).
    pub attention_keys: Option<usize>,
    /// The decode attention is built for each layer's head size and group as constants (unless
    /// `GpuOptions::attention_parameters`).
    pub attention_constants: bool,
    /// The decode attention's subgroups walk keys of their own, each writing a split
    /// (`GpuOptions::attention_v2`).
    pub attention_v2: bool,
    /// Invocations of a v2 workgroup, 64 or 128 (`GpuOptions::attention_v2_invocations`).
    pub attention_v2_invocations: u32,
    /// The adapter's compute units where the driver reports them (`compute_units`), and whether
    /// the decode attention sizes its splits by them (`GpuOptions::attention_splits_by_cores`).
    pub compute_units: Option<u32>,
    pub attention_splits_by_cores: bool,
    /// How the prefill GEMM multiplies on cooperative matrices, where it does
    /// (`GpuOptions::coop`).
    pub coop: Option<Coop>,
    /// Activation rows of a cooperative GEMM tile, 64 or 128 (`GpuOptions::coop_rows`).
    pub coop_rows: u32,
    /// The prefill attention over f16 caches runs on cooperative matrices too, where the GEMM
    /// does (`coop`), unless `GpuOptions::simt_prefill_attention`.
    pub coop_attention: bool,
    /// The first failure wgpu reported asynchronously, until the session takes it.
    pub error: Arc<Mutex<Option<String>>>,
}

/// The environment variable `name` as `parse` reads it (trimmed): None where it is unset, a usage
/// error that names it and what was `expected` where `parse` rejects it.
fn env_parsed<T>(
    name: &str,
    expected: &str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Result<Option<T>> {
    match std::env::var(name) {
        Err(_) => Ok(None),
        Ok(v) => parse(v.trim())
            .map(Some)
            .ok_or_else(|| Error::Usage(format!("{name}={v}: expected {expected}"))),
    }
}

fn env_bytes(name: &str) -> Result<Option<u64>> {
    env_parsed(name, "a number of bytes ≥ 16", |v| {
        v.parse::<u64>().ok().filter(|&n| n >= 16)
    })
}

/// The per-type decode mat-vec's shape (matvec_blocks.wgsl), set by hand to measure one against
/// another: invocations a workgroup and rows a workgroup, plain and gated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatvecShape {
    pub wg: u32,
    pub rows: usize,
    pub gated_rows: usize,
}

impl MatvecShape {
    /// `WG,ROWS,GATED_ROWS`, as `KILN_WGPU_MATVEC` takes it.
    fn parse(text: &str) -> Option<MatvecShape> {
        let n: Vec<u32> = text
            .split(',')
            .map(|v| v.trim().parse().ok())
            .collect::<Option<_>>()?;
        let &[wg, rows, gated_rows] = n.as_slice() else {
            return None;
        };
        let fits = wg % 32 == 0
            && (32..=256).contains(&wg)
            && (1..=4).contains(&rows)
            && matches!(gated_rows, 2 | 4);
        fits.then_some(MatvecShape {
            wg,
            rows: rows as usize,
            gated_rows: gated_rows as usize,
        })
    }
}

/// Whether the prefill GEMM multiplies f16 tiles on cooperative matrices (`KILN_WGPU_COOP`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CoopChoice {
    /// The SIMT GEMM (the default until a GPU run measures the cooperative one).
    #[default]
    Off,
    /// Cooperative matrices where the adapter offers f16 16×16×16 into f32 with one subgroup
    /// size (`1`); the SIMT GEMM elsewhere.
    On,
    /// The cooperative GEMM with its fragment operations emulated in WGSL, on any adapter with
    /// f16 shaders (`emulate`): for testing it where there are no cooperative matrices.
    Emulate,
}

/// How the prefill GEMM multiplies on cooperative matrices (`Gpu::coop`): with subgroups of
/// `subgroup` invocations, or emulated in plain WGSL (for testing where there are none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coop {
    Hardware { subgroup: u32 },
    Emulated,
}

impl Coop {
    /// Invocations of a cooperative kernel's workgroup: four subgroups, or the 128 invocations
    /// that stand for them in the emulated build.
    pub fn invocations(self) -> u32 {
        match self {
            Coop::Hardware { subgroup } => 4 * subgroup,
            Coop::Emulated => 128,
        }
    }
}

/// Bytes of workgroup memory the cooperative GEMM takes with tiles of `rows` activation rows:
/// f16 tiles of 64 weight rows and of the activation rows, 40 values each, and 64 × 68 f32
/// staged outputs (32 KiB with 128 rows, wgpu's default limit).
fn coop_workgroup_bytes(rows: u32) -> u32 {
    (64 + rows) * 40 * 2 + 64 * 68 * 4
}

/// Settings of a device beyond the adapter's own; the environment's by default.
#[derive(Debug, Clone, Copy, Default)]
pub struct GpuOptions {
    /// Bytes one binding may cover at most, below the adapter's limit (`KILN_WGPU_MAX_BINDING`):
    /// tests use it to make weights split.
    pub max_binding: Option<u64>,
    /// Bytes of device memory kiln may allocate (`KILN_WGPU_MAX_MEMORY`).
    pub max_memory: Option<u64>,
    /// Use the workgroup-memory reductions even where the adapter has subgroup operations
    /// (`KILN_WGPU_NO_SUBGROUPS=1`), so tests cover both variants on one adapter.
    pub no_subgroups: bool,
    /// Use the kernels shaped for hardware GPUs even on a software adapter, which otherwise gets
    /// variants that suit a CPU (`KILN_WGPU_HARDWARE_KERNELS=1`), so tests run both there.
    pub hardware_kernels: bool,
    /// Build every shader module with wgpu's per-access bounds checks, trusted kernels too
    /// (`KILN_WGPU_CHECKED=1`): CI runs the GPU op tests both ways.
    pub checked_shaders: bool,
    /// Multiply weights by the activations as they are, without the CPU's rounding (Q8 blocks,
    /// f16) before each matmul (`KILN_WGPU_F32_ACTIVATIONS=1`): prefill and decode then differ
    /// only in the order of float sums, as the session-property tests need (the rounding turns
    /// last-bit differences into whole 8-bit steps), and a matmul saves a dispatch.
    pub f32_activations: bool,
    /// The Q4_K, Q5_K and Q6_K decode mat-vecs convert each weight to a float and round x in
    /// every workgroup (`KILN_WGPU_INT_DOT=0`), instead of multiplying the weights' integers by
    /// activations quantized once to Q8_K blocks with packed 4×8-bit integer dot products. The
    /// integer dot products are the default: on an H200 they took tg128 from 0.54× to 0.59× of
    /// llama.cpp's Vulkan build on the 1B Llama shape and from 0.49× to 0.63× on the 8B (#46).
    pub float_matvecs: bool,
    /// The per-type mat-vec's shape instead of the measured default (`KILN_WGPU_MATVEC=WG,ROWS,
    /// GATED_ROWS`: WG a multiple of 32 up to 256, ROWS 1-4, GATED_ROWS 2 or 4), so that one GPU
    /// run measures several.
    pub matvec_shape: Option<MatvecShape>,
    /// Keys per workgroup of the decode attention, whose key range is split across workgroups
    /// (`KILN_WGPU_ATTN_KEYS=N`, 1-4096), instead of the default (8 on a GPU, 128 on a software
    /// adapter), so that one GPU run measures several.
    pub attention_keys: Option<usize>,
    /// Decode records the dispatches that the fused kernels save (`KILN_WGPU_FUSE=0`): RoPE and
    /// the KV append after the Q/K/V mat-vecs instead of in their epilogue, and the attention's
    /// output quantized for the integer-dot mat-vec by a dispatch of its own instead of by the
    /// reduce, and the gated activation's by a dispatch of its own instead of by the gate/up
    /// mat-vec. For measuring the fusions on a GPU.
    pub unfused: bool,
    /// The residual add and the next block's input norm run as a dispatch of their own
    /// (`KILN_WGPU_FUSE_NORM=0`) instead of in the epilogue of the per-type mat-vec that makes
    /// the block's output (the attention's output projection, the down projection), whose last
    /// workgroup to finish normalizes the row. For measuring on a GPU.
    pub separate_norm: bool,
    /// Q/K/V projections of two K-quant families (a Q4_K_M file's Q4_K query and key with a Q6_K
    /// value) run as two dispatches (`KILN_WGPU_MIX=0`) instead of one whose workgroups branch on
    /// their weight's type. For measuring the mixed kernel on a GPU.
    pub unmixed: bool,
    /// A decode row's attention splits are combined (and its output packed) by a dispatch of
    /// their own (`KILN_WGPU_ATTN_REDUCE=1`) instead of by the attention's workgroup that finishes
    /// the last split of each block of the output. For measuring on a GPU.
    pub separate_reduce: bool,
    /// A read-back (a decode step's logits or argmax) polls the device without blocking for up
    /// to this many microseconds before it blocks (`KILN_WGPU_SPIN_US=N`, 0-10000; default 0:
    /// block at once), for measuring whether a blocking wait's wake-up costs a token time on a
    /// GPU. The spin holds a core meanwhile.
    pub spin_us: u64,
    /// Whether the prefill GEMM runs on cooperative matrices (`KILN_WGPU_COOP=0|1|emulate`).
    pub coop: CoopChoice,
    /// Activation rows of a cooperative GEMM tile (`KILN_WGPU_COOP_ROWS=64|128`; 64 unless set):
    /// 128 dequantizes each weight once for twice the rows, in half as many workgroups. For
    /// measuring on a GPU.
    pub coop_rows: Option<u32>,
    /// The prefill attention keeps its SIMT kernel where the GEMM runs on cooperative matrices
    /// (`KILN_WGPU_COOP_ATTN=0`), instead of flash attention on them over f16 caches. For
    /// measuring the two apart on a GPU.
    pub simt_prefill_attention: bool,
    /// The decode attention reads its head size and GQA group from its parameters
    /// (`KILN_WGPU_ATTN_CONST=0`) instead of being built for each layer's as constants, which
    /// let the compiler unroll its loops over heads and dimensions and keep its per-head sums in
    /// registers. For measuring on a GPU.
    pub attention_parameters: bool,
    /// The decode attention v2 (`KILN_WGPU_ATTN_V2=1`; attention.wgsl `main_v2`): each subgroup
    /// of a workgroup walks keys of its own with its heads' softmax in registers, no barrier and
    /// no workgroup memory, its part combined as a split of its own; where the caches are f32 or
    /// f16, the subgroups have one size of 4 to 32 and the kernel is built for the layer's shape.
    /// For measuring on a GPU.
    pub attention_v2: bool,
    /// Invocations of a v2 workgroup (`KILN_WGPU_ATTN_V2_WG=64|128`; 64 unless set): 128 puts
    /// twice the subgroups on a split's keys, as llama.cpp's decode flash attention does. For
    /// measuring on a GPU.
    pub attention_v2_invocations: Option<u32>,
    /// The decode attention splits a row's keys into as many workgroups as make two per compute
    /// unit of the adapter (`KILN_WGPU_ATTN_SPLITS=cores`, where the driver reports them: Vulkan on
    /// NVIDIA and AMD), as llama.cpp's Vulkan flash attention does, instead of 8 keys a split. For
    /// measuring on a GPU.
    pub attention_splits_by_cores: bool,
}

impl GpuOptions {
    pub fn from_env() -> Result<GpuOptions> {
        Ok(GpuOptions {
            max_binding: env_bytes("KILN_WGPU_MAX_BINDING")?,
            max_memory: env_bytes("KILN_WGPU_MAX_MEMORY")?,
            no_subgroups: std::env::var_os("KILN_WGPU_NO_SUBGROUPS").is_some_and(|v| v == "1"),
            hardware_kernels: std::env::var_os("KILN_WGPU_HARDWARE_KERNELS")
                .is_some_and(|v| v == "1"),
            checked_shaders: std::env::var_os("KILN_WGPU_CHECKED").is_some_and(|v| v == "1"),
            f32_activations: std::env::var_os("KILN_WGPU_F32_ACTIVATIONS")
                .is_some_and(|v| v == "1"),
            float_matvecs: std::env::var_os("KILN_WGPU_INT_DOT").is_some_and(|v| v == "0"),
            unfused: std::env::var_os("KILN_WGPU_FUSE").is_some_and(|v| v == "0"),
            unmixed: std::env::var_os("KILN_WGPU_MIX").is_some_and(|v| v == "0"),
            separate_norm: std::env::var_os("KILN_WGPU_FUSE_NORM").is_some_and(|v| v == "0"),
            separate_reduce: std::env::var_os("KILN_WGPU_ATTN_REDUCE").is_some_and(|v| v == "1"),
            attention_parameters: std::env::var_os("KILN_WGPU_ATTN_CONST")
                .is_some_and(|v| v == "0"),
            attention_v2: std::env::var_os("KILN_WGPU_ATTN_V2").is_some_and(|v| v == "1"),
            attention_splits_by_cores: env_parsed("KILN_WGPU_ATTN_SPLITS", "cores", |v| {
                (v == "cores").then_some(true)
            })?
            .unwrap_or(false),
            attention_v2_invocations: env_parsed(
                "KILN_WGPU_ATTN_V2_WG",
                "64 or 128",
                |v| match v {
                    "64" => Some(64),
                    "128" => Some(128),
                    _ => None,
                },
            )?,
            simt_prefill_attention: std::env::var_os("KILN_WGPU_COOP_ATTN")
                .is_some_and(|v| v == "0"),
            spin_us: env_parsed(
                "KILN_WGPU_SPIN_US",
                "a number of microseconds from 0 to 10000",
                |v| v.parse::<u64>().ok().filter(|n| *n <= 10_000),
            )?
            .unwrap_or(0),
            coop: env_parsed("KILN_WGPU_COOP", "0, 1 or emulate", |v| match v {
                "0" => Some(CoopChoice::Off),
                "1" => Some(CoopChoice::On),
                "emulate" => Some(CoopChoice::Emulate),
                _ => None,
            })?
            .unwrap_or_default(),
            coop_rows: env_parsed("KILN_WGPU_COOP_ROWS", "64 or 128", |v| match v {
                "64" => Some(64),
                "128" => Some(128),
                _ => None,
            })?,
            attention_keys: env_parsed(
                "KILN_WGPU_ATTN_KEYS",
                "a number of keys from 1 to 4096",
                |v| v.parse::<usize>().ok().filter(|n| (1..=4096).contains(n)),
            )?,
            matvec_shape: env_parsed(
                "KILN_WGPU_MATVEC",
                "WG,ROWS,GATED_ROWS (WG a multiple of 32 up to 256, ROWS 1-4, GATED_ROWS 2 or 4)",
                MatvecShape::parse,
            )?,
        })
    }
}

/// Open the adapter `choice` picks. `Ok(None)`: there is no such adapter (the caller decides
/// whether that is an error).
pub fn open(choice: AdapterChoice, options: GpuOptions) -> Result<Option<Gpu>> {
    let instance = instance();
    let list = adapters(&instance);
    let index = match choice {
        AdapterChoice::Hardware => auto_index(&list),
        AdapterChoice::Best => best_index(&list, false),
        AdapterChoice::Index(i) => {
            if i >= list.len() {
                let names: Vec<String> = list
                    .iter()
                    .enumerate()
                    .map(|(i, a)| format!("{i}: {}", a.get_info().name))
                    .collect();
                return Err(Error::Usage(format!(
                    "there is no GPU adapter {i}: {} (see kiln devices)",
                    if names.is_empty() {
                        "none was found".to_string()
                    } else {
                        format!("the adapters are {}", names.join(", "))
                    }
                )));
            }
            Some(i)
        }
    };
    let Some(index) = index else { return Ok(None) };
    let adapter = &list[index];
    let info = adapter.get_info();
    // Every Vulkan, Metal and DX12 driver packs f16 in f32 shaders; lavapipe only where the CPU
    // converts f16 (F16C). Without it the first kernel would fail naga's validation.
    if !adapter
        .get_downlevel_capabilities()
        .flags
        .contains(wgpu::DownlevelFlags::SHADER_F16_IN_F32)
    {
        return Err(Error::Unsupported(format!(
            "the GPU {} cannot convert between f16 and f32 in shaders (pack2x16float), which \
             kiln's kernels use for f16 weights and caches; use --backend cpu",
            info.name
        )));
    }
    let device_memory = device_local_heap(adapter);
    let limits = adapter.limits();
    let available = adapter.features();
    // The kernels compute in f32 (f16 only as storage, through pack2x16float); SHADER_F16 and
    // cooperative matrices only for the cooperative GEMM, where it is asked for.
    let mut wanted = wgpu::Features::SUBGROUP
        | wgpu::Features::TIMESTAMP_QUERY
        | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES;
    let coop = coop_of(adapter, &info, &limits, options);
    let coop_rows = options.coop_rows.unwrap_or(64);
    match coop {
        Some(Coop::Hardware { .. }) => {
            wanted |= wgpu::Features::SHADER_F16 | wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX
        }
        Some(Coop::Emulated) => wanted |= wgpu::Features::SHADER_F16,
        None => {}
    }
    let features = available & wanted;
    let experimental_features = if features.intersects(wgpu::Features::all_experimental_mask()) {
        // SAFETY: the one experimental feature is cooperative matrices, asked for only with
        // KILN_WGPU_COOP=1; its kernel is validated by naga (shader_checks) and its every other
        // line runs in CI through the emulated build.
        unsafe { wgpu::ExperimentalFeatures::enabled() }
    } else {
        wgpu::ExperimentalFeatures::disabled()
    };
    let caps = Capabilities {
        subgroups: features.contains(wgpu::Features::SUBGROUP) && !options.no_subgroups,
        timestamps: features.contains(wgpu::Features::TIMESTAMP_QUERY),
        timestamps_in_passes: features.contains(
            wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES,
        ),
        software_kernels: info.device_type == wgpu::DeviceType::Cpu
            && !options.hardware_kernels
            && !noop(),
    };
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("kiln"),
        required_features: features,
        required_limits: limits.clone(),
        experimental_features,
        memory_hints: wgpu::MemoryHints::Performance,
        trace: wgpu::Trace::Off,
    }))
    .map_err(|e| Error::Unsupported(format!("cannot open the GPU {}: {e}", info.name)))?;

    let error: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let sink = error.clone();
    device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
        let mut slot = sink.lock().unwrap_or_else(|p| p.into_inner());
        slot.get_or_insert_with(|| format!("GPU error: {e}"));
    }));
    let sink = error.clone();
    device.set_device_lost_callback(move |reason, message| {
        if reason != wgpu::DeviceLostReason::Destroyed {
            let mut slot = sink.lock().unwrap_or_else(|p| p.into_inner());
            slot.get_or_insert_with(|| format!("the GPU device was lost ({reason:?}): {message}"));
        }
    });

    let adapter_max = limits
        .max_storage_buffer_binding_size
        .min(limits.max_buffer_size);
    let max_binding = adapter_max / 4 * 4;
    let weight_binding = options
        .max_binding
        .map_or(max_binding, |n| n.min(max_binding) / 4 * 4);
    Ok(Some(Gpu {
        device,
        queue,
        info,
        limits,
        caps,
        max_binding,
        weight_binding,
        max_memory: options.max_memory,
        device_memory,
        checked_shaders: options.checked_shaders,
        f32_activations: options.f32_activations,
        int_dot: !options.float_matvecs,
        matvec_shape: options.matvec_shape,
        spin: std::time::Duration::from_micros(options.spin_us),
        fused: !options.unfused,
        mixed: !options.unmixed,
        fused_norm: !options.unfused && !options.separate_norm,
        merged_reduce: !options.separate_reduce,
        attention_keys: options.attention_keys,
        attention_constants: !options.attention_parameters,
        attention_v2: options.attention_v2,
        attention_v2_invocations: options.attention_v2_invocations.unwrap_or(64),
        compute_units: compute_units(adapter),
        attention_splits_by_cores: options.attention_splits_by_cores,
        coop,
        coop_rows,
        coop_attention: coop.is_some() && !options.simt_prefill_attention,
        error,
    }))
}

/// How the prefill GEMM multiplies on cooperative matrices on `adapter`, as `options` ask: on
/// them where wgpu offers f16 16×16×16 fragments into f32, subgroups have one size (so a
/// workgroup of four is four subgroups) and the tiles fit; emulated where f16 shaders and the
/// tiles fit; else None (the SIMT GEMM).
fn coop_of(
    adapter: &wgpu::Adapter,
    info: &wgpu::AdapterInfo,
    limits: &wgpu::Limits,
    options: GpuOptions,
) -> Option<Coop> {
    use wgpu::CooperativeScalarType::{F16, F32};
    let features = adapter.features();
    let rows = options.coop_rows.unwrap_or(64);
    let fits = |coop: &Coop| {
        let invocations = coop.invocations();
        features.contains(wgpu::Features::SHADER_F16)
            && limits.max_compute_workgroup_storage_size >= coop_workgroup_bytes(rows)
            && limits.max_compute_invocations_per_workgroup >= invocations
            && limits.max_compute_workgroup_size_x >= invocations
    };
    match options.coop {
        CoopChoice::Off => None,
        CoopChoice::Emulate => Some(Coop::Emulated).filter(fits),
        CoopChoice::On => {
            let subgroup = info.subgroup_min_size;
            let offered = features.contains(
                wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SUBGROUP,
            ) && !options.no_subgroups
                && subgroup == info.subgroup_max_size
                && (8..=128).contains(&subgroup)
                && adapter.cooperative_matrix_properties().iter().any(|c| {
                    (c.m_size, c.n_size, c.k_size, c.ab_type, c.cr_type) == (16, 16, 16, F16, F32)
                });
            Some(Coop::Hardware { subgroup }).filter(|c| offered && fits(c))
        }
    }
}

/// The size of `adapter`'s largest device-local memory heap, read from Vulkan (wgpu reports no
/// memory sizes); None for other APIs.
#[cfg(not(target_arch = "wasm32"))]
fn device_local_heap(adapter: &wgpu::Adapter) -> Option<u64> {
    // SAFETY: the raw handles serve one read-only query while the adapter (and its instance)
    // lives, and are not kept.
    let hal = unsafe { adapter.as_hal::<wgpu::hal::api::Vulkan>() }?;
    let instance = hal.shared_instance().raw_instance();
    // SAFETY: a valid physical device of this instance.
    let props =
        unsafe { instance.get_physical_device_memory_properties(hal.raw_physical_device()) };
    props
        .memory_heaps_as_slice()
        .iter()
        .filter(|h| h.flags.contains(ash::vk::MemoryHeapFlags::DEVICE_LOCAL))
        .map(|h| h.size)
        .max()
}

#[cfg(target_arch = "wasm32")]
fn device_local_heap(_adapter: &wgpu::Adapter) -> Option<u64> {
    None
}

/// The adapter's compute units (NVIDIA's SMs, AMD's CUs), read from Vulkan where the driver
/// reports them (`VK_NV_shader_sm_builtins`, `VK_AMD_shader_core_properties`, as llama.cpp's
/// Vulkan backend reads them to size its decode attention's splits); None elsewhere (wgpu reports
/// no such count).
#[cfg(not(target_arch = "wasm32"))]
fn compute_units(adapter: &wgpu::Adapter) -> Option<u32> {
    use ash::vk;
    // SAFETY: as `device_local_heap`: the raw handles serve read-only queries while the adapter
    // lives, and are not kept.
    let hal = unsafe { adapter.as_hal::<wgpu::hal::api::Vulkan>() }?;
    let shared = hal.shared_instance();
    if shared.instance_api_version() < vk::API_VERSION_1_1 {
        return None;
    }
    let caps = hal.physical_device_capabilities();
    let instance = shared.raw_instance();
    let device = hal.raw_physical_device();
    if caps.supports_extension(vk::NV_SHADER_SM_BUILTINS_NAME) {
        let mut sm = vk::PhysicalDeviceShaderSMBuiltinsPropertiesNV::default();
        let mut props = vk::PhysicalDeviceProperties2::default().push_next(&mut sm);
        // SAFETY: a valid physical device of this (Vulkan 1.1) instance, whose driver lists the
        // extension of the chained structure.
        unsafe { instance.get_physical_device_properties2(device, &mut props) };
        return Some(sm.shader_sm_count).filter(|&n| n > 0);
    }
    if caps.supports_extension(vk::AMD_SHADER_CORE_PROPERTIES_NAME) {
        let mut core = vk::PhysicalDeviceShaderCorePropertiesAMD::default();
        let mut props = vk::PhysicalDeviceProperties2::default().push_next(&mut core);
        // SAFETY: as above.
        unsafe { instance.get_physical_device_properties2(device, &mut props) };
        let units = core
            .shader_engine_count
            .saturating_mul(core.shader_arrays_per_engine_count)
            .saturating_mul(core.compute_units_per_shader_array);
        return Some(units).filter(|&n| n > 0);
    }
    None
}

#[cfg(target_arch = "wasm32")]
fn compute_units(_adapter: &wgpu::Adapter) -> Option<u32> {
    None
}

impl Gpu {
    /// Record a failure unless one is already recorded.
    pub fn fail(&self, message: String) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        slot.get_or_insert(message);
    }

    pub fn take_error(&self) -> Option<String> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Run `f`, turning validation and out-of-memory errors it raises into an `Err`.
    pub fn checked<T>(&self, what: &str, f: impl FnOnce() -> T) -> Result<T> {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let value = f();
        let v = pollster::block_on(validation.pop());
        let o = pollster::block_on(oom.pop());
        match (o, v) {
            (Some(e), _) => Err(Error::Unsupported(format!(
                "the GPU ({}) ran out of memory for {what}: {e}; keep layers on the CPU (-ngl with fewer layers) or use --backend cpu",
                self.info.name
            ))),
            (None, Some(e)) => Err(Error::Unsupported(format!("GPU error in {what}: {e}"))),
            (None, None) => Ok(value),
        }
    }
}
