//! Qwen3 MoE's tiny random-weight model (tests/fixtures/make_qwen3moe_tiny.py) against llama.cpp,
//! teacher-forced and free running, with an f32 KV cache as the goldens were made, by the tight
//! rule of the tiny F32 models (tests/fixtures/golden/README.md). The last golden prompt has 961
//! tokens: two 512-token prefill chunks over the KV cache.

use crate::common;

use common::golden_run::{EXACT_F32, check_model_with};
use kiln::backend::cpu::CpuBackend;
use kiln::backend::{CacheType, CoreOps};
use kiln::model::arch::KvCacheTypes;
use kiln::model::{Model, ModelFile};

const FILE: &str = "qwen3moe-tiny.gguf";

/// Every step of every case in the golden file.
fn golden_steps(entry: &serde_json::Value) -> usize {
    entry["greedy"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["steps"].as_array().unwrap().len())
        .sum()
}

#[test]
fn qwen3moe_matches_llama_cpp() {
    let golden = common::golden("llama-cpp-qwen3moe.json");
    let entry = &golden["models"][FILE];
    let mf = ModelFile::open(&common::fixture(&format!("models/{FILE}"))).unwrap();
    let cache = KvCacheTypes {
        k: CacheType::F32,
        v: CacheType::F32,
    };
    // Repacking applies to quantized blocks only, so for this F32 file both loads run the same
    // kernels today; both are checked so that a packed F32 (or expert) path stays covered.
    for repack in [true, false] {
        let backend = CpuBackend::new(2).unwrap().with_repacking(repack);
        let model = Model::load(&mf, backend).unwrap();
        let what = format!("{FILE} ({})", model.backend.describe());
        let report = check_model_with(&model, entry, &EXACT_F32, cache);
        eprintln!(
            "{}; worst |Δ| {:.1e}",
            report.summary(&what),
            report.worst_ratio * EXACT_F32.abs
        );
        report.assert_all(&what);
        assert_eq!(report.steps, golden_steps(entry), "{what}: every step");
    }
}
