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

/// The adapter with the kernels hardware GPUs get, whose K-quant decode mat-vecs take integer
/// dot products (on a software adapter, which otherwise gets other kernels, too).
pub fn gpu_int_dot() -> Option<WgpuBackend> {
    gpu_with(GpuOptions {
        hardware_kernels: true,
        ..GpuOptions::default()
    })
}

/// The kernels hardware GPUs get with the float K-quant mat-vecs that `KILN_WGPU_INT_DOT=0`
/// keeps (`GpuOptions::float_matvecs`).
pub fn gpu_float_matvecs() -> Option<WgpuBackend> {
    gpu_with(GpuOptions {
        hardware_kernels: true,
        float_matvecs: true,
        ..GpuOptions::default()
    })
}

/// `gpu_kernel_variants` and `gpu_float_matvecs`: what the weight kernels' tests run on.
pub fn gpu_matmul_variants() -> Vec<WgpuBackend> {
    let mut all = gpu_kernel_variants();
    if !all.is_empty() {
        all.extend(gpu_float_matvecs());
    }
    all
}
