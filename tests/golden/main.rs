//! Against independent references: llama.cpp's goldens (real, tiny and synthetic models, Qwen3.5, Qwen3 MoE; tokenizers; chat
//! templates; block decoders) and GGUF/Hugging Face twins of the same model.

#[path = "../common/mod.rs"]
mod common;

mod chat_template;
mod dequant;
mod golden_families;
mod golden_mixtral;
mod golden_quants;
mod golden_qwen35;
mod golden_qwen3moe;
mod golden_real;
mod golden_synth;
mod golden_tiny;
mod hf_equivalence;
mod tokenizer;
mod tokenizer_suite;
