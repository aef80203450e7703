//! Images on the GPU: the tiny Qwen3.5, Qwen3-VL, Gemma 3 and Gemma 4 projectors' towers on the wgpu
//! backend against llama.cpp's (and for Qwen the float64 tower's) embeddings, and the text model
//! after an image against llama.cpp's greedy steps, as tests/model/vision.rs checks them on the CPU (tests/common/vision.rs).

use crate::common;

use common::golden_run;
use common::vision::{
    Case, GEMMA3, GEMMA4, QWEN3VL, QWEN3VL_MOE, QWEN35, check_embeddings, encode_all, encoder,
    steps_after_image,
};
use kiln::model::{Model, ModelFile};
use kiln::vision::image;

#[test]
fn qwen3vl_on_the_gpu_matches_llama_cpp() {
    qwen_on_the_gpu(&QWEN35);
}

/// Qwen3-VL's deepstack blocks and text model on the GPU.
#[test]
fn qwen3vl_deepstack_on_the_gpu_matches_llama_cpp() {
    qwen_on_the_gpu(&QWEN3VL);
}

fn qwen_on_the_gpu(case: &Case) {
    let Some(gpu) = common::gpu::gpu() else {
        return;
    };
    check_embeddings(case, &encode_all(case, &gpu), "GPU");
    let golden = common::golden(case.golden);
    let image_name = golden["logits"]["image"].as_str().unwrap();
    let mf = ModelFile::open(&common::fixture(case.model)).unwrap();
    let Some(gpu) = common::gpu::gpu() else {
        return;
    };
    let model = Model::load(&mf, gpu).unwrap();
    let img = image::load(&common::fixture(&format!("models/{image_name}"))).unwrap();
    let encoded = encoder(case, &model.backend)
        .encode(&model.backend, &img)
        .unwrap();
    steps_after_image(
        case,
        &model,
        encoded.embeddings,
        &golden_run::GELU_TABLE_F32,
        "GPU, kiln's embeddings",
    );
}

#[test]
fn gemma3_on_the_gpu_matches_llama_cpp() {
    gemma_on_the_gpu(&GEMMA3, "GPU Gemma 3, kiln's embeddings");
}

#[test]
fn gemma4_on_the_gpu_matches_llama_cpp() {
    gemma_on_the_gpu(&GEMMA4, "GPU Gemma 4, kiln's embeddings");
}

/// `case`'s embeddings on the GPU, and the greedy steps after its image given them.
fn gemma_on_the_gpu(case: &Case, what: &str) {
    let Some(gpu) = common::gpu::gpu() else {
        return;
    };
    check_embeddings(case, &encode_all(case, &gpu), "GPU");
    let golden = common::golden(case.golden);
    let image_name = golden["logits"]["image"].as_str().unwrap();
    let mf = ModelFile::open(&common::fixture(case.model)).unwrap();
    let model = Model::load(&mf, gpu).unwrap();
    let img = image::load(&common::fixture(&format!("models/{image_name}"))).unwrap();
    let encoded = encoder(case, &model.backend)
        .encode(&model.backend, &img)
        .unwrap();
    steps_after_image(
        case,
        &model,
        encoded.embeddings,
        &golden_run::GELU_TABLE_F32,
        what,
    );
}

/// `kiln check --image`: each backend encodes the image with its own tower and the GPU's logits
/// after it stay within the golden rule of the CPU's, for all three projectors. The image's rows
/// are counted in the prompt (the tiny towers' token counts for a 32×32 image: Qwen3.5 16,
/// Qwen3-VL and its MoE 16, Gemma 3 16, Gemma 4 81).
#[test]
fn check_compares_the_gpu_after_an_image() {
    if common::gpu::gpu().is_none() {
        return;
    }
    for (case, tokens) in [
        (&QWEN35, 16),
        (&QWEN3VL, 16),
        (&QWEN3VL_MOE, 16),
        (&GEMMA3, 16),
        (&GEMMA4, 81),
    ] {
        let out = common::kiln()
            .args(["check", "-m"])
            .arg(common::fixture(case.model))
            .arg("--mmproj")
            .arg(common::fixture(case.mmproj))
            .arg("--image")
            .arg(common::fixture("models/vision-32x32.png"))
            .args(["-n", "3", "--format", "json", "What is in the picture?"])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
            panic!("{}: {}", case.mmproj, String::from_utf8_lossy(&out.stderr))
        });
        assert!(out.status.success(), "{}: {v}", case.mmproj);
        assert_eq!(v["pass"], true, "{}: {v}", case.mmproj);
        assert_eq!(v["image_tokens"], tokens, "{}: {v}", case.mmproj);
        assert!(v["prompt_tokens"].as_u64().unwrap() > tokens, "{v}");
        assert_eq!(v["steps"].as_array().unwrap().len(), 3);
    }
}
