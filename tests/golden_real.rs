//! The three real models against llama.cpp, teacher-forced over the short prompts and the 900+
//! token one (past Gemma 3's 512-token window), by the README's rules.

mod common;

use common::golden_run::{QUANTIZED, Report, check_model_with, load};
use kiln::backend::CacheType;
use kiln::model::ModelFile;
use kiln::model::arch::KvCacheTypes;

fn run(golden_file: &str, name: &str) -> Report {
    run_with(golden_file, name, KvCacheTypes::default())
}

fn run_with(golden_file: &str, name: &str, cache: KvCacheTypes) -> Report {
    let golden = common::golden(golden_file);
    let mf = ModelFile::open(&common::real_model(name)).unwrap();
    let report = check_model_with(&load(&mf, 2), &golden["models"][name], &QUANTIZED, cache);
    eprintln!(
        "{}",
        report.summary(&format!(
            "{golden_file} {name} (cache {}/{})",
            cache.k, cache.v
        ))
    );
    report
}

/// Every real model, short prompts and the long one, with both caches of type `ty`: the same rule
/// holds as for llama.cpp's default f16 cache.
fn all_models_with(ty: CacheType) {
    let cache = KvCacheTypes { k: ty, v: ty };
    for name in common::REAL_MODELS {
        for file in ["llama-cpp.json", "llama-cpp-long.json"] {
            run_with(file, name, cache).assert_all(&format!("{file} {name} cache {ty}"));
        }
    }
}

#[test]
fn q8_0_cache_on_every_real_model() {
    all_models_with(CacheType::Q8_0);
}

#[test]
fn f32_cache_on_every_real_model() {
    all_models_with(CacheType::F32);
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
