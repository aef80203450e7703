//! Mixtral's tiny random-weight model (a llama file with experts, tests/fixtures/make_mixtral_tiny.py)
//! against llama.cpp, teacher-forced and free running, with an f32 KV cache as the goldens were
//! made, by the tight rule of the tiny F32 models (tests/fixtures/golden/README.md), on the CPU;
//! the GPU runs it in tests/gpu/gpu_models.rs. The last golden prompt has 961 tokens: two
//! 512-token prefill chunks over the KV cache.

use crate::common;

use common::golden_run::{EXACT_F32, check_model_with, golden_steps};
use kiln::backend::cpu::CpuBackend;
use kiln::backend::{CacheType, CoreOps};
use kiln::model::arch::KvCacheTypes;
use kiln::model::{Model, ModelFile};

const FILE: &str = "mixtral-tiny.gguf";

#[test]
fn mixtral_matches_llama_cpp() {
    let golden = common::golden("llama-cpp-mixtral.json");
    let entry = &golden["models"][FILE];
    let mf = ModelFile::open(&common::fixture(&format!("models/{FILE}"))).unwrap();
    let moe = mf.config.moe.as_ref().expect("a llama file with experts");
    assert_eq!((moe.n_expert, moe.n_used, moe.expert_ff), (8, 2, 224));
    let cache = KvCacheTypes {
        k: CacheType::F32,
        v: CacheType::F32,
    };
    let model = Model::load(&mf, CpuBackend::new(2).unwrap()).unwrap();
    let what = format!("{FILE} ({})", model.backend.describe());
    let report = check_model_with(&model, entry, &EXACT_F32, cache);
    eprintln!(
        "{}; worst |Δ| {:.1e}",
        report.summary(&what),
        report.worst_ratio * EXACT_F32.abs
    );
    report.assert_all(&what);
    let steps = golden_steps(entry);
    assert_eq!(report.steps, steps, "{what}: every step");
}
