//! Qwen3.5's tiny synthetic models (dense and MoE) against llama.cpp, teacher-forced and free
//! running, with an f32 KV cache as the goldens were made (tests/fixtures/golden/README.md). The
//! last golden prompt has 961 tokens: it carries the recurrent state and the KV cache across two
//! 512-token prefill chunks.

use crate::common;

use common::golden_run::{EXACT_F32, check_model_with, load};
use kiln::backend::CacheType;
use kiln::model::ModelFile;
use kiln::model::arch::KvCacheTypes;

const F32_CACHE: KvCacheTypes = KvCacheTypes {
    k: CacheType::F32,
    v: CacheType::F32,
};

fn check(file: &str) {
    let golden = common::golden("llama-cpp-qwen35.json");
    let entry = &golden["models"][file];
    let mf = ModelFile::open(&common::fixture(&format!("models/{file}"))).unwrap();
    let model = load(&mf, 2);
    let report = check_model_with(&model, entry, &EXACT_F32, F32_CACHE);
    eprintln!("{}", report.summary(file));
    report.assert_all(file);
    assert_eq!(report.steps, 144, "{file}: every golden step checked");

    // The long prompt alone, for the record of how close it stays across the chunk boundary.
    let cases = entry["greedy"].as_array().unwrap();
    let long = serde_json::json!({ "greedy": [cases.last().unwrap()] });
    let what = format!("{file}, long prompt");
    let report = check_model_with(&model, &long, &EXACT_F32, F32_CACHE);
    eprintln!("{}", report.summary(&what));
    report.assert_all(&what);
}

#[test]
fn qwen35_dense_matches_llama_cpp() {
    check("qwen35-tiny.gguf");
}

#[test]
fn qwen35_moe_matches_llama_cpp() {
    check("qwen35moe-tiny.gguf");
}
