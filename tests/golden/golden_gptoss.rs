//! gpt-oss's tiny random-weight files (tests/fixtures/make_gptoss_tiny.py) against llama.cpp,
//! teacher-forced and free running, with an f32 KV cache as the goldens were made. The F32 file
//! (experts holding MXFP4's values, dequantized) by the tight rule of the tiny F32 models; the
//! MXFP4 file, whose experts llama.cpp multiplies with Q8_0-rounded activations, by the rule for
//! random-weight quantized files. Each feature matters on these files: biases, sinks, the clamped
//! SwiGLU, YaRN and the window of 8 (the README records how far each, switched off in kiln, lands).
//! The last golden prompt has 961 tokens: two 512-token prefill chunks over the KV cache.

use crate::common;

use common::golden_run::{EXACT_F32, RANDOM_QUANTIZED, Tolerance, check_model_with};
use kiln::backend::cpu::CpuBackend;
use kiln::backend::{CacheType, CoreOps};
use kiln::model::arch::KvCacheTypes;
use kiln::model::{Model, ModelFile};

/// Every golden step of `file` within `rule` on the CPU, repacked and not.
fn check(file: &str, rule: &Tolerance) {
    let golden = common::golden("llama-cpp-gptoss.json");
    let entry = &golden["models"][file];
    let steps: usize = entry["greedy"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["steps"].as_array().unwrap().len())
        .sum();
    let mf = ModelFile::open(&common::fixture(&format!("models/{file}"))).unwrap();
    let cache = KvCacheTypes {
        k: CacheType::F32,
        v: CacheType::F32,
    };
    for repack in [true, false] {
        let backend = CpuBackend::new(2).unwrap().with_repacking(repack);
        let model = Model::load(&mf, backend).unwrap();
        let what = format!("{file} ({})", model.backend.describe());
        let report = check_model_with(&model, entry, rule, cache);
        eprintln!(
            "{}; worst |Δ| {:.1e}",
            report.summary(&what),
            report.worst_ratio * rule.abs
        );
        report.assert_all(&what);
        assert_eq!(report.steps, steps, "{what}: every step");
    }
}

#[test]
fn gptoss_matches_llama_cpp() {
    check("gptoss-tiny.gguf", &EXACT_F32);
}

#[test]
fn gptoss_mxfp4_matches_llama_cpp() {
    check("gptoss-tiny-MXFP4.gguf", &RANDOM_QUANTIZED);
}
