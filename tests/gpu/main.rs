//! The GPU backend: per-op parity with the CPU, whole models against the goldens, the device argmax and profile, and the
//! GPU from the command line. They run on any wgpu adapter (Mesa's lavapipe included) and skip, saying why, where there
//! is none; `KILN_REQUIRE_GPU=1` makes that a failure.

#[path = "../common/mod.rs"]
mod common;

mod cli_gpu;
mod cli_split;
mod gpu_models;
mod gpu_ops;
mod gpu_profile;
mod gpu_vision;
mod split_models;
