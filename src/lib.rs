//! kiln: run large language models locally from GGUF files or Hugging Face directories.
//!
//! The data flow: file → mmap → tensor views (`gguf`, `tensor`, `model::loader`) → `ModelConfig` +
//! weights handed to a backend (`backend`) → `model::Session` (prefill, decode, KV cache) → logits
//! → `sampler` → token → incremental detokenizer → text.
//!
//! The module map, in layers from the bottom (a module imports only from its own layer and those
//! below; `scripts/check-structure.py` checks it in CI, and that no two files import each other in
//! a circle):
//! - `error`: the error type every layer returns.
//! - `gguf`: the GGUF file (header, metadata, tensor infos), GGML block types and their reference
//!   dequantization.
//! - `tensor`: views of weights in the mapping (name, type, shape, bytes).
//! - `backend`: the ops a forward pass needs, as the `Backend` trait in parts (`CoreOps`,
//!   `RecurrentOps`, `MoeOps`); `backend::cpu` (a kernel table per instruction-set level, filled
//!   from `cpu/x86`, `cpu/arm` or `cpu/portable.rs`; matmul scheduling, attention, the KV cache, a
//!   spinning thread pool) and `backend::wgpu` (device, buffers, pipelines with every kernel's
//!   descriptor, the command stream, the ops over `shaders/`).
//! - `sampler`: the sampling chain, its RNG, and constrained output (llguidance over the token
//!   byte table).
//! - `vision`: images in: multimodal projector (mmproj) files, image decoding and preprocessing,
//!   and the vision towers that turn an image into embeddings for the text model.
//! - `model`: configuration (`model::config`, with the readers of GGUF keys and config.json), the
//!   families (`model::arch`: one file per family with its hyperparameters, tensors and layer,
//!   listed once in `arch::FAMILIES`), loading, weights, tokenizer, chat templates, sessions,
//!   generation and conversations.
//! - `hub`: models by Hugging Face name, downloaded into the standard cache.
//! - `cli`: one file per subcommand, the shared flags and the dispatch in `cli/mod.rs`.

pub mod backend;
#[cfg(feature = "gpu")]
pub mod cli;
pub mod error;
pub mod gguf;
pub mod hub;
pub mod model;
pub mod sampler;
pub mod tensor;
pub mod vision;

pub use error::{Error, Result};
