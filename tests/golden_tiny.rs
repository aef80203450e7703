//! The tiny F32 models (GGUF and Hugging Face layouts) against llama.cpp, teacher-forced.

mod common;

use common::golden_run::{EXACT_F32, check_model, load};
use kiln::model::ModelFile;

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
        let report = check_model(&load(&mf, 2), &golden["models"][entry], &EXACT_F32);
        eprintln!("{}", report.summary(file));
        report.assert_all(file);
        assert!(report.steps >= 50);
    }
}
