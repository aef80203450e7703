//! `kiln devices`: every GPU adapter wgpu finds (Vulkan, Metal, DX12) with the limits and features
//! kiln uses, numbered as `--gpu N` takes them, and which one `--backend auto` would choose.

use std::process::ExitCode;

use anyhow::Result;

use super::OutputFormat;
use crate::backend::wgpu::list_adapters;

#[derive(clap::Args, Debug)]
pub struct DevicesArgs {
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    pub format: OutputFormat,
}

fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes >> 20)
}

pub fn run(args: DevicesArgs) -> Result<ExitCode> {
    let adapters = list_adapters();
    if args.format == OutputFormat::Json {
        println!("{}", serde_json::to_string_pretty(&adapters)?);
        return Ok(ExitCode::SUCCESS);
    }
    if adapters.is_empty() {
        println!("no GPU adapter found: kiln runs on the CPU");
        println!(
            "(on Linux without a GPU, Mesa's lavapipe provides a software Vulkan adapter: mesa-vulkan-drivers)"
        );
        return Ok(ExitCode::SUCCESS);
    }
    for a in &adapters {
        let auto = if a.auto { "  ← --backend auto" } else { "" };
        println!(
            "{}: {} ({}, {}){auto}",
            a.index, a.name, a.device_type, a.api
        );
        if !a.driver.is_empty() {
            println!("   driver: {}", a.driver);
        }
        if let Some(m) = a.device_memory {
            println!(
                "   memory: {} (device-local heap)",
                super::placement::size(m)
            );
        }
        if let Some(n) = a.compute_units {
            println!("   compute units: {n}");
        }
        println!(
            "   limits: storage binding {}, buffer {}, workgroup memory {} KiB, {} invocations, offset alignment {} B",
            mib(a.max_storage_binding),
            mib(a.max_buffer),
            a.workgroup_memory / 1024,
            a.max_invocations,
            a.storage_offset_alignment
        );
        let mut features = Vec::new();
        if let Some((lo, hi)) = a.subgroups {
            features.push(if lo == hi {
                format!("subgroups ({lo})")
            } else {
                format!("subgroups ({lo}-{hi})")
            });
        }
        if a.shader_f16 {
            features.push("shader-f16".into());
        }
        if a.timestamps {
            features.push("timestamp queries".into());
        }
        if !a.cooperative_matrices.is_empty() {
            features.push(format!(
                "cooperative matrices ({})",
                a.cooperative_matrices.join(", ")
            ));
        }
        println!(
            "   features: {}",
            if features.is_empty() {
                "none".into()
            } else {
                features.join(", ")
            }
        );
    }
    if !adapters.iter().any(|a| a.auto) {
        println!(
            "--backend auto takes the CPU backend: there is no discrete or integrated GPU \
             (a software adapter runs only with --backend gpu)"
        );
    }
    Ok(ExitCode::SUCCESS)
}
