//! The three real models against llama.cpp, teacher-forced over the short prompts and the 900+
//! token one (past Gemma 3's 512-token window), by the README's rules.

mod common;

use common::golden_run::{QUANTIZED, Report, check_model, load};
use kiln::model::ModelFile;

fn run(golden_file: &str, name: &str) -> Report {
    let golden = common::golden(golden_file);
    let mf = ModelFile::open(&common::real_model(name)).unwrap();
    let report = check_model(&load(&mf, 2), &golden["models"][name], &QUANTIZED);
    eprintln!("{}", report.summary(&format!("{golden_file} {name}")));
    report
}

#[test]
fn qwen2_short_prompts() {
    run("llama-cpp.json", common::REAL_MODELS[1]).assert_all("qwen2");
}

#[test]
fn smollm2_long_prompt() {
    run("llama-cpp-long.json", common::REAL_MODELS[0]).assert_all("smollm2 long");
}

#[test]
fn qwen2_long_prompt() {
    run("llama-cpp-long.json", common::REAL_MODELS[1]).assert_all("qwen2 long");
}

#[test]
fn gemma3_long_prompt() {
    run("llama-cpp-long.json", common::REAL_MODELS[2]).assert_all("gemma3 long");
}

/// SmolLM2 and Gemma 3 on the short prompts: every argmax where llama.cpp's margin is at least 0.5,
/// and free-running generation up to the first closer call.
#[test]
fn smollm2_and_gemma3_short_prompts_tokens() {
    run("llama-cpp.json", common::REAL_MODELS[0]).assert_tokens("smollm2");
    run("llama-cpp.json", common::REAL_MODELS[2]).assert_tokens("gemma3");
}

// The top-5 logits of SmolLM2 and Gemma 3 on the short prompts within 0.5 + 0.02·|logit|: on
// these two models the check is decided by rounding noise, not by correctness, so it runs only on
// request (`cargo test --release -- --ignored`). The evidence (issue #4):
// - kiln reproduces llama.cpp's computation up to summation order (layer-0 tensors agree to 1e-6;
//   same rounding points: 8-bit activations, f16 KV cache, f16 attention operands, ggml's expf);
//   30 layers of 8-bit requantization amplify the order differences to ~0.2 logits rms;
// - reordering sums alone moved kiln's worst error between 0.72× and 1.10× the tolerance on
//   SmolLM2 and between 0.94× and 1.55× on Gemma 3;
// - llama.cpp itself (same commit) violates it on Gemma 3 with an f32 KV cache (6 of 600 checks,
//   1.69×) or flash attention (3, 1.24×); an exact f64 forward pass does at 2 (1.12×).

#[test]
#[ignore = "decided by rounding noise at this tolerance; see the comment above"]
fn smollm2_short_prompts_logits() {
    run("llama-cpp.json", common::REAL_MODELS[0]).assert_all("smollm2");
}

#[test]
#[ignore = "decided by rounding noise at this tolerance; see the comment above"]
fn gemma3_short_prompts_logits() {
    run("llama-cpp.json", common::REAL_MODELS[2]).assert_all("gemma3");
}
