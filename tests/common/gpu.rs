//! The GPU for the GPU tests: the best wgpu adapter, software ones (lavapipe) included. Without
//! one the tests skip and say why, unless `KILN_REQUIRE_GPU=1` (CI), where that is a failure.

use kiln::backend::wgpu::{AdapterChoice, GpuOptions, WgpuBackend};

pub fn gpu_with(options: GpuOptions) -> Option<WgpuBackend> {
    let found = WgpuBackend::open(AdapterChoice::Best, options);
    match found {
        Ok(Some(b)) => Some(b),
        other => {
            let why = match other {
                Err(e) => e.to_string(),
                _ => "no Vulkan, Metal or DX12 adapter".to_string(),
            };
            if std::env::var_os("KILN_REQUIRE_GPU").is_some_and(|v| v == "1") {
                panic!("KILN_REQUIRE_GPU=1 but there is no usable GPU adapter: {why}");
            }
            eprintln!(
                "skipped: {why} (install mesa-vulkan-drivers for lavapipe, or set KILN_REQUIRE_GPU=1 to fail)"
            );
            None
        }
    }
}

pub fn gpu() -> Option<WgpuBackend> {
    gpu_with(GpuOptions::default())
}

/// The adapter as `gpu()` opens it and, where that is a software adapter (which gets kernel
/// variants suited to a CPU), again with the kernels hardware GPUs get, so both are tested.
pub fn gpu_kernel_variants() -> Vec<WgpuBackend> {
    let Some(g) = gpu() else { return Vec::new() };
    let mut all = Vec::new();
    if g.is_software() {
        let hardware = GpuOptions {
            hardware_kernels: true,
            ..GpuOptions::default()
        };
        all.extend(gpu_with(hardware));
    }
    all.insert(0, g);
    all
}

/// The adapter with the kernels hardware GPUs get and their integer-dot K-quant mat-vecs
/// (`GpuOptions::int_dot`), the variant a switch keeps off by default.
pub fn gpu_int_dot() -> Option<WgpuBackend> {
    gpu_with(GpuOptions {
        hardware_kernels: true,
        int_dot: true,
        ..GpuOptions::default()
    })
}

/// `gpu_kernel_variants` and `gpu_int_dot`: what the weight kernels' tests run on.
pub fn gpu_matmul_variants() -> Vec<WgpuBackend> {
    let mut all = gpu_kernel_variants();
    if !all.is_empty() {
        all.extend(gpu_int_dot());
    }
    all
}
