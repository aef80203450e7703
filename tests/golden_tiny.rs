//! The tiny F32 models (GGUF and Hugging Face layouts) against llama.cpp, teacher-forced.

mod common;

use common::golden_run::{EXACT_F32, check_model_with, load};
use kiln::backend::CacheType;
use kiln::model::ModelFile;
use kiln::model::arch::KvCacheTypes;

#[test]
fn tiny_models_match_llama_cpp() {
    let golden = common::golden("llama-cpp-tiny.json");
    for (file, entry) in [
        ("tiny-llama.gguf", "tiny-llama.gguf"),
        ("tiny-llama-hf", "tiny-llama.gguf"),
        ("tiny-qwen3.gguf", "tiny-qwen3.gguf"),
        ("tiny-qwen3-hf", "tiny-qwen3.gguf"),
    ] {
        let mf = ModelFile::open(&common::fixture(&format!("models/{file}"))).unwrap();
        let model = load(&mf, 2);
        // f16 as llama.cpp ran, and f32 (exact) caches: these F32 models have no other rounding,
        // so both stay well within the tolerance.
        for k in CacheType::ALL {
            for v in CacheType::ALL {
                let cache = KvCacheTypes { k, v };
                let what = format!("{file} (cache {k}/{v})");
                let report = check_model_with(&model, &golden["models"][entry], &EXACT_F32, cache);
                eprintln!("{}", report.summary(&what));
                report.assert_all(&what);
                assert!(report.steps >= 50);
            }
        }
    }
}
