//! The library's properties: sessions (cached equals recomputed, prefill and decode agree), Qwen3.5's recurrent state
//! and checkpoints, context shift, multi-token prediction, the Qwen3.5, Qwen3 MoE, SmolLM3 and Gemma 2 file variants converters write, and
//! malformed files.

#[path = "../common/mod.rs"]
mod common;

mod batched;
mod context_shift;
mod family_files;
mod fixture_manifest;
mod malformed;
mod mtp;
mod qwen35_files;
mod qwen3moe_files;
mod recurrent;
mod session;
mod speculative;
mod vision;
mod vision_fuzz;
