//! Where a model runs: the backend `--backend` and `--gpu` choose, and on a GPU the split that
//! `-ngl` / `--n-gpu-layers`, `--cpu-moe` and `--n-cpu-moe` ask for, as llama.cpp spells them.
//! Under `-ngl auto` (the default) a GPU with a memory budget (`KILN_WGPU_MAX_MEMORY`) takes
//! as much of the model as fits it, and the rest runs on the CPU.

use std::fmt;
use std::str::FromStr;

use anyhow::Result;

use super::{BackendArgs, BackendKind};
use crate::backend::cpu::CpuBackend;
use crate::backend::split::{Placement, SplitBackend};
use crate::backend::wgpu::WgpuBackend;
use crate::model::arch::KvCacheTypes;
use crate::model::loader::ModelFile;
use crate::model::placement::{Footprint, bytes_by_side, placement};

/// `-ngl`: how many layers go to the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GpuLayers {
    /// All that fit the GPU's memory budget.
    #[default]
    Auto,
    /// Every layer and the output.
    All,
    /// The last N layers (N = layers + 1 takes the output too).
    Count(usize),
}

impl FromStr for GpuLayers {
    type Err = String;
    fn from_str(s: &str) -> Result<GpuLayers, String> {
        match s.trim() {
            "auto" => Ok(GpuLayers::Auto),
            "all" => Ok(GpuLayers::All),
            n => n
                .parse()
                .map(GpuLayers::Count)
                .map_err(|_| format!("{s:?} is not a layer count: give a number, `all` or `auto`")),
        }
    }
}

impl fmt::Display for GpuLayers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuLayers::Auto => f.write_str("auto"),
            GpuLayers::All => f.write_str("all"),
            GpuLayers::Count(n) => write!(f, "{n}"),
        }
    }
}

/// What the placement flags ask for.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct PlacementArgs {
    /// Layers on the GPU, counted from the output end as llama.cpp's -ngl (the output projection
    /// counts as one more: `all`, or the layer count + 1, puts everything there); `auto`: as many
    /// as fit the GPU's memory budget (KILN_WGPU_MAX_MEMORY); the rest runs on the CPU
    #[arg(long = "n-gpu-layers", value_name = "N", default_value_t)]
    pub n_gpu_layers: GpuLayers,

    /// Keep the routed experts of every layer in system memory (mixture-of-experts models)
    #[arg(long = "cpu-moe", conflicts_with = "n_cpu_moe")]
    pub cpu_moe: bool,

    /// Keep the routed experts of the first N layers in system memory
    #[arg(long = "n-cpu-moe", value_name = "N")]
    pub n_cpu_moe: Option<usize>,
}

impl PlacementArgs {
    /// Layers whose routed experts the flags keep on the CPU.
    fn cpu_moe_layers(&self, n_layers: usize) -> usize {
        if self.cpu_moe {
            n_layers
        } else {
            self.n_cpu_moe.unwrap_or(0)
        }
    }

    /// Whether any flag asks for part of the model on a GPU.
    pub fn asks_for_gpu(&self) -> bool {
        matches!(self.n_gpu_layers, GpuLayers::All | GpuLayers::Count(1..))
            || self.cpu_moe
            || self.n_cpu_moe.is_some()
    }
}

/// A backend for one model: wholly on the CPU or the GPU, or split between them. (Boxed: the
/// backends' states differ much in size.)
pub enum Placed {
    Cpu(Box<CpuBackend>),
    Gpu(Box<WgpuBackend>),
    Split(Box<SplitBackend>),
}

/// The context and cache a session will ask for, which `-ngl auto` must leave room for.
#[derive(Debug, Clone, Copy)]
pub struct KvNeeds {
    pub ctx: usize,
    pub types: KvCacheTypes,
}

/// The prefill chunk the sessions use, for the activation estimate.
const CHUNK_ROWS: usize = 512;

/// The backend for `file`, and the line that says where its parts went when it is split or
/// when `-ngl auto` moved anything off the GPU.
pub fn place(
    file: &ModelFile,
    args: &BackendArgs,
    kv: KvNeeds,
) -> Result<(Placed, Option<String>)> {
    let cpu = CpuBackend::new(args.threads.unwrap_or(0))?.with_repacking(!args.no_repack);
    let gpu = super::choose_gpu(args.backend, args.gpu)?;
    if gpu.is_none() && args.backend == BackendKind::Cpu && args.placement.asks_for_gpu() {
        anyhow::bail!(
            "-ngl, --cpu-moe and --n-cpu-moe place parts of the model on a GPU, but \
             --backend cpu asks for the CPU alone"
        );
    }
    place_on(file, gpu, cpu, &args.placement, kv)
}

/// `place` with the GPU (None: none) and the CPU backend already made.
pub fn place_on(
    file: &ModelFile,
    gpu: Option<WgpuBackend>,
    cpu: CpuBackend,
    flags: &PlacementArgs,
    kv: KvNeeds,
) -> Result<(Placed, Option<String>)> {
    let Some(gpu) = gpu else {
        return Ok((Placed::Cpu(Box::new(cpu)), None));
    };
    let (chosen, fitted) = plan(file, flags, kv, gpu.memory_budget());
    let line = describe(file, &chosen);
    if chosen.all_gpu() {
        return Ok((Placed::Gpu(Box::new(gpu)), None));
    }
    if chosen.all_cpu() {
        return Ok((Placed::Cpu(Box::new(cpu)), fitted.then_some(line)));
    }
    Ok((
        Placed::Split(Box::new(SplitBackend::new(gpu, cpu, chosen))),
        Some(line),
    ))
}

/// The placement the flags ask for on a GPU whose memory is capped at `cap` bytes (when it is),
/// and whether `-ngl auto` fitted it to the cap.
pub fn plan(
    file: &ModelFile,
    flags: &PlacementArgs,
    kv: KvNeeds,
    cap: Option<u64>,
) -> (Placement, bool) {
    let c = &file.config;
    let n = c.n_layers;
    let cpu_moe = flags.cpu_moe_layers(n);
    match (flags.n_gpu_layers, cap) {
        (GpuLayers::Count(k), _) => (placement(c, k, cpu_moe), false),
        (GpuLayers::Auto, Some(budget)) => {
            let row_bytes =
                |width| (kv.types.k.row_bytes(width) + kv.types.v.row_bytes(width)) as u64;
            let footprint = Footprint::of(file, kv.ctx, row_bytes, CHUNK_ROWS);
            (footprint.fit(budget, cpu_moe), true)
        }
        (GpuLayers::All | GpuLayers::Auto, _) => (placement(c, n + 1, cpu_moe), false),
    }
}

/// What went where, with the bytes of weights on each side, in one line.
pub fn describe(file: &ModelFile, p: &Placement) -> String {
    let (gpu_bytes, cpu_bytes) = bytes_by_side(file, p);
    format!(
        "placement: {} ({} of weights on the GPU, {} on the CPU)",
        p.describe(),
        size(gpu_bytes),
        size(cpu_bytes)
    )
}

/// Bytes in MiB, or GiB from 1 GiB up.
pub fn size(bytes: u64) -> String {
    let mib = bytes as f64 / (1u64 << 20) as f64;
    if mib < 1024.0 {
        format!("{mib:.1} MiB")
    } else {
        format!("{:.2} GiB", mib / 1024.0)
    }
}

#[cfg(test)]
mod tests {
    use super::GpuLayers;

    #[test]
    fn gpu_layers_parse_as_llama_cpp_spells_them() {
        assert_eq!("auto".parse(), Ok(GpuLayers::Auto));
        assert_eq!("all".parse(), Ok(GpuLayers::All));
        assert_eq!("99".parse(), Ok(GpuLayers::Count(99)));
        assert!("-1".parse::<GpuLayers>().is_err());
        assert!("some".parse::<GpuLayers>().is_err());
    }
}
