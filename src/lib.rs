//! kiln: run large language models locally from GGUF files or Hugging Face directories.
//!
//! The data flow: file → mmap → tensor views (`gguf`, `tensor`, `model::loader`) → `ModelConfig` + weights
//! handed to a backend (`backend`) → `model::Session` (prefill, decode, KV cache) → logits →
//! `sampler` → token → incremental detokenizer → text.

pub mod backend;
pub mod cli;
pub mod error;
pub mod gguf;
pub mod hub;
pub mod model;
pub mod sampler;
pub mod tensor;

pub use error::{Error, Result};

// Layering, bottom up: `gguf` (file format) → `tensor` (views of weights) → `backend` (compute on
// tensors) → `model` (configs, architectures, sessions) → `sampler`, `cli`. No module imports one
// above it.
