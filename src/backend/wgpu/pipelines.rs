//! The pipeline cache. A pipeline is its kernel's WGSL (`wgsl.rs` assembles it from `shaders/`)
//! built for the adapter, keyed by its file, entry point and defines, built once (at load for the
//! weight and cache types the model uses) and reused; its bind-group layout follows the binding
//! list of its `Kernel`. The functions at the end name every kernel the ops dispatch: file, entry
//! point, defines and bindings.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use wgpu::util::DeviceExt;

use super::device::Gpu;
pub use super::wgsl::assemble;
use crate::backend::cpu::{ActFormat, activation_format};
use crate::backend::{CacheType, GateActivation};
use crate::error::Result;
use crate::gguf::GgmlType;
use crate::gguf::iq::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};

use Access::{Read, ReadWrite};

/// How a kernel uses one storage binding (binding 0 is always the parameter block).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    Read,
    ReadWrite,
}

/// One compute pipeline to build: a shader file's entry point under some defines.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Kernel {
    /// Name for profiles and error messages.
    pub label: &'static str,
    pub file: &'static str,
    pub entry: &'static str,
    /// Flags (value "1"); `build` adds the substitutions every kernel shares.
    pub defines: BTreeMap<&'static str, String>,
    /// Storage bindings 1.., in order.
    pub bindings: Vec<Access>,
    /// The weight type whose grid (`iq_grid`) the pipeline binds after `bindings`, read-only.
    pub grid: Option<GgmlType>,
    /// Every index the kernel computes is bounded by the sizes its op is given, which the host
    /// derives from shapes validated at load: its module is built without per-access bounds
    /// checks (`Gpu::checked_shaders` keeps them, for tests).
    pub trusted: bool,
}

/// A grid i-quant's grid: the CPU's table (gguf/iq_tables.rs), of 8-value (u64) or 4-value (u32)
/// entries.
#[derive(Clone, Copy)]
enum IqGrid {
    Wide(&'static [u64]),
    Narrow(&'static [u32]),
}

impl IqGrid {
    /// As the WGSL decoders read it: a byte per value, so a u64 entry i is words 2i (values
    /// 0..3) and 2i + 1 (4..7).
    fn bytes(self) -> Vec<u8> {
        match self {
            IqGrid::Wide(g) => g.iter().flat_map(|v| v.to_le_bytes()).collect(),
            IqGrid::Narrow(g) => g.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }
}

/// The grid the decoders of `t` read, if it is a grid i-quant.
fn iq_grid(t: GgmlType) -> Option<IqGrid> {
    Some(match t {
        GgmlType::IQ2_XXS => IqGrid::Wide(&IQ2XXS_GRID),
        GgmlType::IQ2_XS => IqGrid::Wide(&IQ2XS_GRID),
        GgmlType::IQ2_S => IqGrid::Wide(&IQ2S_GRID),
        GgmlType::IQ3_XXS => IqGrid::Narrow(&IQ3XXS_GRID),
        GgmlType::IQ3_S => IqGrid::Narrow(&IQ3S_GRID),
        GgmlType::IQ1_S | GgmlType::IQ1_M => IqGrid::Wide(&IQ1S_GRID),
        _ => return None,
    })
}

impl Kernel {
    pub fn new(label: &'static str, file: &'static str, bindings: &[Access]) -> Kernel {
        Kernel {
            label,
            file,
            entry: "main",
            defines: BTreeMap::new(),
            bindings: bindings.to_vec(),
            grid: None,
            trusted: false,
        }
    }

    /// Mark the kernel as audited for unchecked indexing (see `trusted`).
    pub fn trusted(mut self) -> Kernel {
        self.trusted = true;
        self
    }

    pub fn entry(mut self, entry: &'static str) -> Kernel {
        self.entry = entry;
        self
    }

    /// Invocations per workgroup (`{{WG}}`; 64 unless set).
    pub fn workgroup(mut self, size: u32) -> Kernel {
        self.defines.insert("WG", size.to_string());
        self
    }

    pub fn flag(mut self, name: &'static str) -> Kernel {
        self.defines.insert(name, "1".into());
        self
    }

    /// A kernel that decodes weights of type `t`: its decoder's define, and its grid if it has one.
    pub fn weights(mut self, t: GgmlType) -> Kernel {
        self.grid = iq_grid(t).map(|_| t);
        self.flag(t.name())
    }

    /// The variant that records its loads' addresses in one more binding (see `trace.rs`).
    #[cfg(test)]
    pub fn traced(mut self) -> Kernel {
        self.bindings.push(Access::ReadWrite);
        self.defines
            .insert("TRACE_BINDING", self.bindings.len().to_string());
        self.flag("TRACE")
    }
}

/// A built pipeline and its bind-group layout.
pub struct Pipeline {
    pub label: &'static str,
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
    /// Distinguishes layouts in the bind-group cache.
    pub id: u64,
    /// The grid the kernel reads (`Kernel::grid`), bound after the dispatch's buffers.
    pub grid: Option<wgpu::Buffer>,
}

/// A kernel's pipeline, looked up once and then held where it is dispatched from (a weight, or
/// the backend's table of fixed kernels): recording a dispatch builds no `Kernel` and hashes
/// nothing.
#[derive(Default)]
pub struct KernelSlot(OnceLock<Arc<Pipeline>>);

impl KernelSlot {
    pub fn get(&self) -> Option<&Arc<Pipeline>> {
        self.0.get()
    }

    pub fn fill(&self, p: Arc<Pipeline>) -> &Arc<Pipeline> {
        self.0.get_or_init(|| p)
    }
}

/// The kernels a weight matrix is dispatched with, held by the matrix.
#[derive(Default)]
pub struct MatrixKernels {
    /// Mat-vec over this matrix and 0-2 more of its type and width.
    pub matvec: [KernelSlot; 3],
    /// Gate/up mat-vec with SiLU and with GELU as its epilogue.
    pub gated: [KernelSlot; 2],
    /// The tiled kernel over this matrix and 0-2 more, and gated.
    pub matmul: [KernelSlot; 3],
    pub matmul_gated: [KernelSlot; 2],
    pub embed: KernelSlot,
    pub expert: KernelSlot,
}

/// The kernels a KV cache is dispatched with, held by the cache; those that read a key and a
/// value cache are held by the key cache, by the value cache's type.
#[derive(Default)]
pub struct CacheKernels {
    pub store: KernelSlot,
    pub attention: [KernelSlot; 3],
    pub attention_prefill: [KernelSlot; 3],
    pub rope_kv: [KernelSlot; 3],
}

/// The kernels that do not depend on a weight's or a cache's type, held by the backend.
#[derive(Default)]
pub struct FixedKernels {
    pub rms_norm: KernelSlot,
    pub rms_norm_into: KernelSlot,
    pub add_rms_norm: KernelSlot,
    /// The norms writing packed Q8_K blocks too (`WgpuBackend::packed_norm_output`).
    pub rms_norm_packed: KernelSlot,
    pub rms_norm_into_packed: KernelSlot,
    pub add_rms_norm_packed: KernelSlot,
    pub rope: KernelSlot,
    pub argmax: KernelSlot,
    pub mul_sigmoid: KernelSlot,
    pub add: KernelSlot,
    pub add_bias: KernelSlot,
    pub scale_rows: KernelSlot,
    pub copy: KernelSlot,
    pub silu_mul: KernelSlot,
    pub gelu_mul: KernelSlot,
    pub swiglu_oai_mul: KernelSlot,
    pub add_expert_bias: KernelSlot,
    pub moe_route: KernelSlot,
    pub moe_combine: KernelSlot,
    pub attention_reduce: KernelSlot,
    pub round_acts: KernelSlot,
    pub quantize_q8k: KernelSlot,
}

/// Pipelines built so far, by kernel.
#[derive(Default)]
pub struct Pipelines {
    built: Mutex<HashMap<Kernel, Arc<Pipeline>>>,
}

impl Pipelines {
    /// The pipeline of `kernel`, built on first use.
    pub fn get(&self, gpu: &Gpu, kernel: &Kernel, param_slot: u64) -> Result<Arc<Pipeline>> {
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = built.get(kernel) {
            return Ok(p.clone());
        }
        let id = built.len() as u64 + 1;
        let p = Arc::new(build(gpu, kernel, param_slot, id)?);
        built.insert(kernel.clone(), p.clone());
        Ok(p)
    }
}

/// The defines a kernel is assembled with: its own, and those every kernel shares, by whether the
/// adapter has subgroup operations.
pub(super) fn defines(k: &Kernel, subgroups: bool) -> BTreeMap<&'static str, String> {
    let mut defines = k.defines.clone();
    defines.entry("WG").or_insert_with(|| "64".into());
    if k.grid.is_some() {
        defines.insert("GRID_BINDING", (k.bindings.len() + 1).to_string());
    }
    if subgroups {
        defines.insert("SUBGROUP", "1".into());
        defines.insert(
            "SG_ARGS",
            ", @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(subgroup_id) sg_id: u32, \
             @builtin(num_subgroups) n_sg: u32, @builtin(subgroup_size) sg_size: u32"
                .into(),
        );
        defines.insert("SG_LOCALS", String::new());
    } else {
        defines.insert("SG_ARGS", String::new());
        defines.insert(
            "SG_LOCALS",
            "let sg_lane = 0u; let sg_id = 0u; let n_sg = 1u; let sg_size = 1u;".into(),
        );
    }
    defines
}

fn build(gpu: &Gpu, k: &Kernel, param_slot: u64, id: u64) -> Result<Pipeline> {
    let source = assemble(k.file, &defines(k, gpu.caps.subgroups))?;
    let what = format!("the {} kernel", k.label);
    gpu.checked(&what, || {
        let desc = wgpu::ShaderModuleDescriptor {
            label: Some(k.label),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        };
        let module = if k.trusted && !gpu.checked_shaders {
            // SAFETY: a trusted kernel's every buffer and array index is bounded by its op's
            // sizes (audited per kernel: see the `.trusted()` calls below and the shaders' own
            // notes), and its loops are bounded by them too.
            unsafe {
                gpu.device
                    .create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked())
            }
        } else {
            gpu.device.create_shader_module(desc)
        };
        let mut entries = vec![wgpu::BindGroupLayoutEntry {
            binding: 0,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Uniform,
                has_dynamic_offset: true,
                min_binding_size: std::num::NonZeroU64::new(param_slot),
            },
            count: None,
        }];
        let grid_access = k.grid.map(|_| Access::Read);
        for (i, a) in k.bindings.iter().chain(&grid_access).enumerate() {
            entries.push(wgpu::BindGroupLayoutEntry {
                binding: i as u32 + 1,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage {
                        read_only: *a == Access::Read,
                    },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            });
        }
        let layout = gpu
            .device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some(k.label),
                entries: &entries,
            });
        let pipeline_layout = gpu
            .device
            .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some(k.label),
                bind_group_layouts: &[Some(&layout)],
                immediate_size: 0,
            });
        let pipeline = gpu
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(k.label),
                layout: Some(&pipeline_layout),
                module: &module,
                entry_point: Some(k.entry),
                compilation_options: wgpu::PipelineCompilationOptions::default(),
                cache: None,
            });
        let grid = k.grid.and_then(iq_grid).map(|grid| {
            gpu.device
                .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                    label: Some("iq grid"),
                    contents: &grid.bytes(),
                    usage: wgpu::BufferUsages::STORAGE,
                })
        });
        Pipeline {
            label: k.label,
            pipeline,
            layout,
            id,
            grid,
        }
    })
}

// ---- The kernels, by op ----

// Kernels that read weights take the type's name (`GgmlType::name`) as the define that selects
// its block decoder in quants.wgsl.

/// How the decode mat-vec reads its weights (matvec.wgsl).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatvecLayout {
    /// Each span of a row (of the gate and up rows, gated) staged in workgroup memory as whole
    /// lines, a run of 16 values an invocation a step (GPUs).
    Staged,
    /// In place, one row per subgroup, `rows` rows per workgroup (software adapters).
    Direct { rows: usize },
}

impl MatvecLayout {
    /// Weight rows per workgroup.
    pub fn rows(self) -> usize {
        match self {
            MatvecLayout::Staged => 1,
            MatvecLayout::Direct { rows } => rows,
        }
    }
}

/// How a weight type's dot products round the activations they take (the CPU's
/// `activation_format`): by shaders/round_acts.wgsl before a kernel, or by the mat-vec itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActRounding {
    Q8_0 = 0,
    Q8K = 1,
    F16 = 2,
    BF16 = 3,
}

impl ActRounding {
    /// None: the activations are taken as they are (f32 weights).
    pub fn of(t: GgmlType) -> Option<ActRounding> {
        match (t, activation_format(t)) {
            (GgmlType::F16, _) => Some(ActRounding::F16),
            (GgmlType::BF16, _) => Some(ActRounding::BF16),
            (_, ActFormat::F32) => None,
            (_, ActFormat::Q8) => Some(ActRounding::Q8_0),
            (_, ActFormat::Q8K) => Some(ActRounding::Q8K),
        }
    }

    /// round_acts.wgsl's `mode`.
    pub fn mode(self) -> u32 {
        self as u32
    }

    fn define(self) -> &'static str {
        match self {
            ActRounding::Q8_0 => "ROUND_Q8_0",
            ActRounding::Q8K => "ROUND_Q8K",
            ActRounding::F16 => "ROUND_F16",
            ActRounding::BF16 => "ROUND_BF16",
        }
    }
}

/// The decode mat-vec over `n_weights` weights of type `t` (matvec.wgsl); `x4`: the activation
/// row is read as vec4s (its length a multiple of 4); `rounding`: x rounded by the kernel as it
/// reads it (staged layout, subgroups of 8 to 64 lanes).
pub fn matvec_kernel(
    t: GgmlType,
    n_weights: usize,
    x4: bool,
    layout: MatvecLayout,
    rounding: Option<ActRounding>,
) -> Kernel {
    matvec_of_rows(t, n_weights, x4, layout, rounding, layout.rows())
}

/// `matvec_kernel` with `rows` weight rows a workgroup.
fn matvec_of_rows(
    t: GgmlType,
    n_weights: usize,
    x4: bool,
    layout: MatvecLayout,
    rounding: Option<ActRounding>,
    rows: usize,
) -> Kernel {
    let mut k = over_weights("matvec", "matvec", t, n_weights);
    // Values staged per row and step: a kilobyte of weights or a little more, in whole
    // superblocks (Q8_K blocks of x).
    let span = (1024 * t.block_len())
        .div_ceil(t.block_bytes())
        .next_multiple_of(256);
    let span_bytes = span / t.block_len() * t.block_bytes();
    // A span starting anywhere in a line touches at most this many 128-byte lines.
    let tile_row = (span_bytes + 127).div_ceil(128) * 32;
    for (name, value) in [
        ("ROWS", rows),
        ("SPAN", span),
        ("TILE_ROW", tile_row),
        ("TILE_WORDS", rows * tile_row),
        ("BLOCK_LEN", t.block_len()),
        ("BLOCK_BYTES", t.block_bytes()),
        ("RUN_WORDS", span / 16),
        ("BLOCK_WORDS", span / 256),
    ] {
        k.defines.insert(name, value.to_string());
    }
    if let Some(r) = rounding {
        k = k.flag(r.define());
    }
    if x4 {
        k = k.flag("X4");
    }
    if layout != MatvecLayout::Staged {
        k = k.flag("DIRECT");
    }
    k
}

/// A kernel of `file` over `n_weights` (1-3) weights of type `t` that share its input and run as
/// one dispatch: bindings x, then a weight and its output per weight; `NW2`/`NW3` say how many.
fn over_weights(label: &'static str, file: &'static str, t: GgmlType, n_weights: usize) -> Kernel {
    let mut bindings = vec![Read];
    for _ in 0..n_weights {
        bindings.extend([Read, ReadWrite]);
    }
    let k = Kernel::new(label, file, &bindings).weights(t).trusted();
    match n_weights {
        2 => k.flag("NW2"),
        3 => k.flag("NW3"),
        _ => k,
    }
}

/// The gate and up mat-vecs of a feed-forward with its gated activation as their epilogue.
pub fn matvec_gated_kernel(
    t: GgmlType,
    act: GateActivation,
    x4: bool,
    layout: MatvecLayout,
    rounding: Option<ActRounding>,
) -> Kernel {
    // Staged, a workgroup computes one output from its gate row and its up row.
    let rows = match layout {
        MatvecLayout::Staged => 2,
        MatvecLayout::Direct { rows } => rows,
    };
    with_activation(matvec_of_rows(t, 2, x4, layout, rounding, rows), act)
}

/// `k` as a gated kernel: its gate/up epilogue applies `act` (common.wgsl).
fn with_activation(k: Kernel, act: GateActivation) -> Kernel {
    match act {
        GateActivation::Silu => k.flag("GLU_SILU"),
        GateActivation::GeluTanh => k.flag("GLU_GELU"),
        GateActivation::SwigluOai => unreachable!("gated_matmuls runs SwigluOai unfused"),
    }
}

/// Whether the per-type mat-vec (matvec_blocks.wgsl) reads weights of type `t`, `k` values wide.
pub fn blocks_matvec_reads(t: GgmlType, k: usize) -> bool {
    use GgmlType::*;
    matches!(t, Q4_0 | Q8_0 | Q4_K | Q5_K | Q6_K) && k.is_multiple_of(256)
}

/// The per-type decode mat-vec (matvec_blocks.wgsl) over `n_weights` weights of type `t`, `rows`
/// rows (at most 4) a workgroup of `wg` invocations (a multiple of 16, up to 256); with `gate`,
/// gate and up writing the gated activation, `rows / 2` outputs a workgroup. `int_dot`: x comes
/// as packed Q8_K blocks (`quantize_q8k_kernel`) and the K-quants take integer dot products.
pub fn matvec_blocks_kernel(
    t: GgmlType,
    n_weights: usize,
    gate: Option<GateActivation>,
    rounding: Option<ActRounding>,
    int_dot: bool,
    wg: u32,
    rows: usize,
) -> Kernel {
    let k = over_weights("matvec", "matvec_blocks", t, n_weights).workgroup(wg);
    let mut k = if int_dot {
        k.flag("IDOT")
    } else {
        k.flag("X4")
    };
    k.defines.insert("ROWS", rows.to_string());
    let run_bytes = 256 / t.block_len() * t.block_bytes();
    k.defines.insert("RUN_BYTES", run_bytes.to_string());
    k.defines.insert("PART_WORDS", (2 * wg).to_string());
    if let Some(r) = rounding {
        k = k.flag(r.define());
    }
    if matches!(t, GgmlType::Q4_K | GgmlType::Q5_K) {
        k = k.flag("W2");
    }
    match gate {
        Some(act) => with_activation(k, act),
        None => k,
    }
}

/// The tiled prefill kernel over `n_weights` weights of type `t` (`gated`: gate and up, writing
/// the gated activation); `x4`: activations read as vec4s (rows a multiple of 4); `sg8`: the
/// variant for lavapipe, one weight.
pub fn matmul_kernel(
    t: GgmlType,
    n_weights: usize,
    gated: Option<GateActivation>,
    x4: bool,
    sg8: bool,
) -> Kernel {
    let k = over_weights("matmul", "matmul", t, n_weights);
    if sg8 {
        return k.flag("SG8").entry("main_sg8");
    }
    let k = if x4 { k.flag("X4") } else { k };
    match gated {
        Some(act) => with_activation(k, act),
        None => k,
    }
}

pub fn embed_kernel(t: GgmlType) -> Kernel {
    Kernel::new("embed", "embed", &[Read, Read, ReadWrite])
        .weights(t)
        .trusted()
}

pub fn elementwise_kernel(entry: &'static str) -> Kernel {
    Kernel::new(entry, "elementwise", &[ReadWrite, Read])
        .entry(entry)
        .trusted()
}

/// `kernel` with the defines that select how it reads or writes a key cache of type `k` and a
/// value cache of type `v` (`K_F16`, `K_Q8`, `V_F16`, `V_Q8`; f32 has none).
fn with_caches(mut kernel: Kernel, k: CacheType, v: CacheType) -> Kernel {
    for (ty, f16, q8) in [(k, "K_F16", "K_Q8"), (v, "V_F16", "V_Q8")] {
        match ty {
            CacheType::F32 => {}
            CacheType::F16 => kernel = kernel.flag(f16),
            CacheType::Q8_0 => kernel = kernel.flag(q8),
        }
    }
    kernel
}

pub fn store_kernel(ty: CacheType) -> Kernel {
    let k = Kernel::new("kv_store", "kv", &[Read, ReadWrite]);
    match ty {
        CacheType::F32 => k,
        CacheType::F16 => k.flag("F16CACHE"),
        CacheType::Q8_0 => k.flag("Q8CACHE").entry("store_q8"),
    }
}

/// The GQA-folded attention (attention.wgsl `main`); `lanes`: its 8-lane sums by subgroup
/// shuffles (`SG_LANES`, for subgroups of at least 8), else in workgroup memory.
pub fn attention_kernel(k: CacheType, v: CacheType, lanes: bool) -> Kernel {
    let kernel = Kernel::new(
        "attention",
        "attention",
        &[Read, Read, Read, ReadWrite, ReadWrite, Read],
    );
    let kernel = if lanes {
        kernel.flag("SG_LANES")
    } else {
        kernel
    };
    with_caches(kernel, k, v)
}

/// The reduce of split decode attention (attention.wgsl `reduce`; it reads no cache, so one
/// variant serves every cache type).
pub fn attention_reduce_kernel() -> Kernel {
    Kernel::new(
        "attention_reduce",
        "attention",
        &[Read, Read, Read, ReadWrite, ReadWrite, Read],
    )
    .entry("reduce")
}

/// The tiled prefill attention (attention.wgsl `prefill`): 16 query rows per workgroup.
pub fn attention_prefill_kernel(k: CacheType, v: CacheType) -> Kernel {
    let kernel = Kernel::new(
        "attention_prefill",
        "attention",
        &[Read, Read, Read, ReadWrite, ReadWrite, Read],
    )
    .entry("prefill")
    .flag("PREFILL");
    with_caches(kernel, k, v)
}

/// A kernel whose define and entry point share the op's name, in shader file `file`.
fn op_kernel(
    file: &'static str,
    op: &'static str,
    define: &'static str,
    bindings: &[Access],
) -> Kernel {
    Kernel::new(op, file, bindings).entry(op).flag(define)
}

pub fn mul_sigmoid_kernel() -> Kernel {
    op_kernel(
        "elementwise",
        "mul_sigmoid",
        "MUL_SIGMOID",
        &[ReadWrite, Read],
    )
}

/// The convolution step (`conv_step`) or the state update after it (`conv_state`).
pub fn conv_kernel(entry: &'static str) -> Kernel {
    Kernel::new(entry, "conv", &[Read, Read, ReadWrite, ReadWrite]).entry(entry)
}

pub fn moe_combine_kernel() -> Kernel {
    op_kernel(
        "moe",
        "moe_combine",
        "MOE_COMBINE",
        &[Read, Read, ReadWrite],
    )
}

pub fn round_acts_kernel() -> Kernel {
    Kernel::new("round_acts", "round_acts", &[Read, ReadWrite])
}

/// Activations quantized to packed Q8_K blocks, the integer-dot mat-vecs' input.
pub fn quantize_q8k_kernel() -> Kernel {
    Kernel::new("quantize_q8k", "round_acts", &[Read, ReadWrite]).flag("PACKED")
}

pub fn add_expert_bias_kernel() -> Kernel {
    op_kernel(
        "moe",
        "add_expert_bias",
        "ADD_EXPERT_BIAS",
        &[ReadWrite, Read, Read],
    )
}

pub fn moe_route_kernel() -> Kernel {
    Kernel::new("moe_route", "moe", &[Read, Read, ReadWrite, ReadWrite])
        .entry("route")
        .flag("MOE_ROUTE")
}

/// The expert mat-vec (llama.cpp's mul_mat_id, one activation row per slot) over a stacked
/// expert weight of type `t`: matvec.wgsl's `EXPERT` variant.
pub fn expert_kernel(
    t: GgmlType,
    x4: bool,
    layout: MatvecLayout,
    rounding: Option<ActRounding>,
) -> Kernel {
    let mut k = matvec_kernel(t, 1, x4, layout, rounding);
    k.label = "expert_matvec";
    k.bindings.push(Read);
    k.flag("EXPERT")
}

/// A norm's workgroup: a decode row (2-8 K values) in a few passes, not 32-128 dependent ones.
const NORM_WG: u32 = 256;

pub fn rms_norm_kernel(into: bool, packed: bool) -> Kernel {
    let k = if into {
        Kernel::new("rms_norm", "norm", &[ReadWrite, Read, Read]).flag("INTO")
    } else {
        Kernel::new("rms_norm", "norm", &[ReadWrite, Read])
    };
    with_packed_output(k.workgroup(NORM_WG).trusted(), packed)
}

/// A residual add fused with the next block's input norm.
pub fn add_rms_norm_kernel(packed: bool) -> Kernel {
    let k = Kernel::new("add_rms_norm", "norm", &[ReadWrite, Read, ReadWrite, Read])
        .flag("ADD")
        .workgroup(NORM_WG)
        .trusted();
    with_packed_output(k, packed)
}

/// `packed`: the norm also writes packed Q8_K blocks, to one more binding.
fn with_packed_output(mut k: Kernel, packed: bool) -> Kernel {
    if packed {
        k.bindings.push(ReadWrite);
        let binding = k.bindings.len().to_string();
        k.defines.insert("PACKED_BINDING", binding);
        k = k.flag("PACKED");
    }
    k
}

pub fn rope_kernel() -> Kernel {
    Kernel::new("rope", "rope", &[ReadWrite, Read]).trusted()
}

/// RoPE of a step's queries and keys with the keys' and values' append to caches of types `k`
/// and `v`, in one dispatch.
pub fn rope_kv_kernel(k: CacheType, v: CacheType) -> Kernel {
    let kernel = Kernel::new(
        "rope_kv",
        "rope",
        &[ReadWrite, Read, Read, Read, ReadWrite, ReadWrite],
    )
    .flag("ROPE_KV");
    with_caches(kernel, k, v)
}

pub fn argmax_kernel() -> Kernel {
    Kernel::new("argmax", "argmax", &[Read, ReadWrite]).trusted()
}

/// The copy `kiln bench` measures the device's bandwidth with.
pub fn bandwidth_kernel() -> Kernel {
    Kernel::new("copy_bandwidth", "bench", &[ReadWrite, Read])
}

/// Cache rows moved within the cache (a context shift): whole words.
pub fn kv_move_kernel() -> Kernel {
    Kernel::new("kv_move", "kv_shift", &[ReadWrite]).entry("move_rows")
}

/// 16-bit halves moved within the cache (a q8_0 cache's scales, in a context shift).
pub fn kv_move_halves_kernel() -> Kernel {
    Kernel::new("kv_move", "kv_shift", &[ReadWrite])
        .entry("move_halves")
        .flag("HALVES")
}

/// Cached keys re-rotated by a position delta (a context shift).
pub fn kv_rope_kernel(ty: CacheType) -> Kernel {
    let k = Kernel::new("kv_rope", "kv_shift", &[ReadWrite, Read]);
    match ty {
        CacheType::F32 => k.entry("rope_rows"),
        CacheType::F16 => k.entry("rope_rows").flag("F16CACHE"),
        CacheType::Q8_0 => k.entry("rope_q8").flag("Q8CACHE"),
    }
}

/// The Gated DeltaNet recurrence for heads of `d` values (a pipeline per width: it sizes the
/// state each invocation keeps).
pub fn delta_net_kernel(d: usize) -> Kernel {
    let mut k = Kernel::new(
        "gated_delta_net",
        "delta_net",
        &[Read, Read, Read, Read, Read, ReadWrite, ReadWrite],
    );
    k.defines.insert("D", d.to_string());
    k
}
