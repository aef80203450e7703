//! The pipeline cache. A pipeline is its kernel's WGSL (`wgsl.rs` assembles it from `shaders/`)
//! built for the adapter, keyed by its file, entry point and defines, built once (at load for the
//! weight and cache types the model uses) and reused; its bind-group layout follows the binding
//! list of its `Kernel`. `kernels/` names every kernel the ops dispatch (re-exported here).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use wgpu::util::DeviceExt;

use super::device::Gpu;
pub use super::kernels::*;
pub use super::wgsl::assemble;
use crate::error::Result;
use crate::gguf::GgmlType;
use crate::gguf::iq::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};

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
    /// wgpu fills the kernel's workgroup memory with zeros before it runs (its default): off for
    /// kernels audited to read no workgroup memory that the workgroup did not write first
    /// (`fills_workgroup_memory`); `Gpu::checked_shaders` keeps it on for every kernel.
    pub zero_init: bool,
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
            zero_init: true,
        }
    }

    /// Mark the kernel as audited: every workgroup-memory value it reads was written by the
    /// workgroup first (before a barrier), so wgpu's zero-fill, a loop and a barrier at the start
    /// of every workgroup, is skipped.
    pub fn fills_workgroup_memory(mut self) -> Kernel {
        self.zero_init = false;
        self
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
    /// The same, also writing the gated activation as packed Q8_K blocks (`with_gated_packing`).
    pub gated_packed: [KernelSlot; 2],
    /// The tiled kernel over this matrix and 0-2 more, and gated.
    pub matmul: [KernelSlot; 3],
    pub matmul_gated: [KernelSlot; 2],
    pub embed: KernelSlot,
    pub expert: KernelSlot,
    /// The mat-vec with the residual add and the next input norm as its epilogue
    /// (`kernels::with_norm_add`).
    pub matvec_norm: KernelSlot,
    /// The mat-vec with RoPE and the KV append as its epilogue, led by this matrix (`qkv.rs`),
    /// by the cache types: 2 · (keys f16) + (values f16).
    pub matvec_rope_kv: [KernelSlot; 4],
    /// The same with the weights after this one's group of another K-quant family
    /// (`kernels::blocks_mix`: a Q4_K query and key with a Q6_K value).
    pub matvec_rope_kv_mixed: [KernelSlot; 4],
}

/// The kernels a KV cache is dispatched with, held by the cache; those that read a key and a
/// value cache are held by the key cache, by the value cache's type.
#[derive(Default)]
pub struct CacheKernels {
    pub store: KernelSlot,
    pub attention: [KernelSlot; 3],
    /// The decode attention reducing its splits and packing its output (`attention_packing_kernel`).
    pub attention_packing: [KernelSlot; 3],
    pub attention_prefill: [KernelSlot; 3],
    /// The prefill attention on cooperative matrices (f16 caches; `attention_prefill_coop_kernel`),
    /// built for `attention_shape`.
    pub attention_prefill_coop: KernelSlot,
    pub rope_kv: [KernelSlot; 3],
    /// The head size and group `attention` and `attention_packing` were built for, as constants
    /// (`Gpu::attention_constants`): a cache serves one layer's shape.
    pub attention_shape: OnceLock<(usize, usize)>,
}

/// The kernels that do not depend on a weight's or a cache's type, held by the backend.
#[derive(Default)]
pub struct FixedKernels {
    pub rms_norm: KernelSlot,
    pub rms_norm_into: KernelSlot,
    pub add_rms_norm: KernelSlot,
    /// The norms writing packed Q8_K blocks too (`WgpuBackend::packed_output`).
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
    pub attention_reduce_packed: KernelSlot,
    pub round_acts: KernelSlot,
    pub round_acts_half: KernelSlot,
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
    // The attention's head size and group: its parameters', unless built for constants.
    defines
        .entry("HEAD_DIM")
        .or_insert_with(|| "p.head_dim".into());
    defines.entry("GROUP").or_insert_with(|| "p.group".into());
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
            // SAFETY: a trusted kernel's every buffer and array index is bounded by the sizes
            // its op checks before it dispatches (`WgpuBackend::holds` and the ops' own checks;
            // audited per kernel beside its `.trusted()` in kernels/ and in the shaders' notes),
            // and its loops are bounded by them too.
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
                compilation_options: wgpu::PipelineCompilationOptions {
                    zero_initialize_workgroup_memory: k.zero_init || gpu.checked_shaders,
                    ..Default::default()
                },
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
