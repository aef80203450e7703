//! Images in (src/vision/), on the CPU: the Qwen3.5 vision tower on the tiny random-weight
//! projector (tests/fixtures/make_qwen35_vision.py) against llama.cpp's embeddings of the same
//! images (golden/llama-cpp-vision.json, scripts/reference/make_vision_goldens.py) and against a
//! float64 NumPy tower written apart from both (golden/f64-qwen3vl.json,
//! scripts/reference/qwen3vl_f64.py), and the text model after an image against llama.cpp's
//! greedy steps (tests/common/vision.rs). Two images are at sizes the tower takes as they are (the
//! native 32×32, and 48×32, whose position grid is resampled); two take llama.cpp's resize and
//! letterbox.

use crate::common;

use common::golden_run;
use common::vision::{check_embeddings, encode_all, encoder, golden_embeddings, steps_after_image};
use kiln::backend::cpu::CpuBackend;
use kiln::model::{Model, ModelFile};
use kiln::vision::{Mmproj, image};

#[test]
fn qwen3vl_embeddings_match_llama_cpp_and_the_f64_tower() {
    let backend = CpuBackend::new(2).unwrap();
    check_embeddings(&encode_all(&backend), "CPU");
}

/// The text model after an image (llama.cpp's mtmd: the image's rows at (p, p + row, p + column)
/// under Qwen3.5's multi-axis RoPE, the text after it at p + max(rows, columns)), against
/// llama.cpp's greedy steps. Given llama.cpp's own embeddings, by the tight rule (top-5 logits
/// within 0.01, the argmax equal where the margin is at least 0.05): measured 1.1e-4. With
/// kiln's embeddings, whose f16 GELU roundings differ from llama.cpp's here and there by one f16
/// step (the embeddings test above), this random model moves its logits by about 0.01: by the
/// rule of the models with that GELU table (`GELU_TABLE_F32`, the golden README's Gemma 2
/// section).
#[test]
fn logits_after_an_image_match_llama_cpp() {
    let golden = common::golden("llama-cpp-vision.json");
    let image_name = golden["logits"]["image"].as_str().unwrap();
    let mf = ModelFile::open(&common::fixture("models/qwen35-tiny.gguf")).unwrap();
    let model = Model::load(&mf, CpuBackend::new(2).unwrap()).unwrap();
    let llama_embeddings = golden_embeddings(&golden, image_name).2;
    steps_after_image(
        &model,
        llama_embeddings,
        &golden_run::EXACT_F32,
        "llama.cpp's embeddings",
    );
    let file = Mmproj::open(&common::fixture("models/qwen35-mmproj-tiny.gguf")).unwrap();
    file.check_text_width(model.config.hidden_size).unwrap();
    let img = image::load(&common::fixture(&format!("models/{image_name}"))).unwrap();
    let encoded = encoder(&model.backend)
        .encode(&model.backend, &img)
        .unwrap();
    steps_after_image(
        &model,
        encoded.embeddings,
        &golden_run::GELU_TABLE_F32,
        "kiln's embeddings",
    );
}
