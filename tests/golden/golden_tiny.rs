//! The tiny F32 models (GGUF and Hugging Face layouts) against llama.cpp, teacher-forced.

use crate::common;

use common::golden_run::{EXACT_F32, check_model_with, load};
use kiln::backend::CacheType;
use kiln::model::arch::KvCacheTypes;
use kiln::model::{ModelFile, Session};

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
        for k in [CacheType::F32, CacheType::F16] {
            for v in [CacheType::F32, CacheType::F16] {
                let cache = KvCacheTypes { k, v };
                let what = format!("{file} (cache {k}/{v})");
                let report = check_model_with(&model, &golden["models"][entry], &EXACT_F32, cache);
                eprintln!("{}", report.summary(&what));
                report.assert_all(&what);
                assert!(report.steps >= 50);
            }
        }
        // Their heads of 8 cannot hold a q8_0 block of 32: a clear error, not a panic.
        let q8 = KvCacheTypes {
            k: CacheType::Q8_0,
            v: CacheType::F16,
        };
        let err = Session::with_options(&model, 16, 16, q8).err().unwrap();
        assert!(
            err.to_string()
                .contains("head dimension that is a multiple of 32"),
            "{err}"
        );
    }
}
