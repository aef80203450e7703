//! Qwen3.5's tiny synthetic models (dense and MoE) against llama.cpp, teacher-forced and free
//! running, with an f32 KV cache as the goldens were made (tests/fixtures/golden/README.md). The
//! last golden prompt has 961 tokens: it carries the recurrent state and the KV cache across two
//! 512-token prefill chunks.

use crate::common;

use common::golden_run::{EXACT_F32, QUANTIZED, check_model_with, load};
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

/// The MoE model as llama-quantize writes it for `MXFP4_MOE` (the experts' down projections in
/// MXFP4, the rest Q8_0 or, for rows of 40, F16). Judged by the README's rule for quantized
/// models, not the tight one: this random-weight model turns last-bit differences of the 8-bit
/// activation rounding into logit differences of up to ~0.4 (kiln's own AVX2 and portable
/// kernels, which differ only in float summation order, land 0.24 and 0.44 from llama.cpp on an
/// IQ4_NL-only variant), while a wrong kernel moves them by several units. Float order alone can
/// flip an expert choice here: llama.cpp built for AVX2 instead of AVX-512 misses this golden at
/// 9 of 720 checks (the golden README has the figures), and that is why the GPU does not run it
/// and the `IQ2_XXS` sibling is not a test.
#[test]
fn qwen35_moe_requantized_matches_llama_cpp() {
    let golden = common::golden("llama-cpp-qwen35-quants.json");
    let file = "qwen35moe-tiny-MXFP4_MOE.gguf";
    let mf = ModelFile::open(&common::fixture(&format!("models/{file}"))).unwrap();
    let model = load(&mf, 2);
    let report = check_model_with(&model, &golden["models"][file], &QUANTIZED, F32_CACHE);
    eprintln!("{}", report.summary(file));
    report.assert_all(file);
    assert_eq!(report.steps, 144, "{file}: every golden step checked");
}
