//! `kiln`'s commands as real processes: run (pipelines, JSON, batches, constrained output), chat, bench, info, tokenize and
//! the shell conveniences, models by hub name, and the OpenAI-compatible server.

#[path = "../common/mod.rs"]
mod common;

mod batch;
mod cli_chat;
mod cli_families;
mod cli_gemma4;
mod cli_glm4moe;
mod cli_gptoss;
mod cli_qwen35;
mod cli_qwen3moe;
mod cli_run;
mod constrain;
mod hub;
mod info;
mod serve;
mod shell;
mod tool_calls;
mod vision;
