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

#[test]
fn smollm2_short_prompts() {
    run("llama-cpp.json", common::REAL_MODELS[0]).assert_all("smollm2");
}

#[test]
fn gemma3_short_prompts() {
    run("llama-cpp.json", common::REAL_MODELS[2]).assert_all("gemma3");
}
