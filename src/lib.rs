//! kiln: run large language models locally from GGUF files or Hugging Face directories.
//!
//! The data flow: file → mmap → tensor views (`gguf`, `model::loader`) → `ModelConfig` + weights
//! handed to a backend (`backend`) → `model::Session` (prefill, decode, KV cache) → logits →
//! `sampler` → token → incremental detokenizer → text.

pub mod backend;
pub mod cli;
pub mod error;
pub mod gguf;
pub mod model;
pub mod sampler;

pub use error::{Error, Result};
