//! Images in (src/vision/): the Qwen3.5 vision tower on the tiny random-weight projector
//! (tests/fixtures/make_qwen35_vision.py) against llama.cpp's embeddings of the same images
//! (golden/llama-cpp-vision.json, scripts/reference/make_vision_goldens.py) and against a float64
//! NumPy tower written apart from both (golden/f64-qwen3vl.json, scripts/reference/qwen3vl_f64.py).
//! Two images are at sizes the tower takes as they are (the native 32×32, and 48×32, whose position
//! grid is resampled); two take llama.cpp's resize and letterbox.

use std::sync::Arc;

use crate::common;

use common::golden_run;
use kiln::backend::CacheType;
use kiln::backend::cpu::CpuBackend;
use kiln::model::arch::KvCacheTypes;
use kiln::model::session::DEFAULT_BATCH;
use kiln::model::{Model, ModelFile, Session};
use kiln::vision::{Mmproj, VisionEncoder, image};

pub const IMAGES: [&str; 4] = [
    "vision-32x32.png",
    "vision-48x32.png",
    "vision-45x29.png",
    "vision-20x70.png",
];

/// Against llama.cpp, which rounds as kiln does (the f16 patch product and GELU table): what
/// remains is float ordering, except where it moves a GELU input across an f16 rounding boundary,
/// which moves that output by an f16 step (measured: at most 9.2e-4; a RoPE with row and column
/// swapped moves the embeddings by 1.3). Against the exact f64 tower, those f16
/// roundings themselves move the embeddings by up to 3.1e-3 (scripts/reference/qwen3vl_f64.py
/// measured llama.cpp at 1.6e-3 to 3.1e-3 from it).
const LLAMA_CPP_TOLERANCE: f32 = 2e-3;
const F64_TOLERANCE: f32 = 5e-3;

fn golden_embeddings(golden: &serde_json::Value, name: &str) -> (usize, usize, Vec<f32>) {
    let entry = &golden["images"][name];
    let floats = entry["embd"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect();
    let count = |k: &str| entry[k].as_u64().unwrap() as usize;
    (count("nx_tokens"), count("ny_tokens"), floats)
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

pub fn encode_all<B: kiln::backend::Backend>(backend: &B) -> Vec<kiln::vision::Encoded> {
    let file = Mmproj::open(&common::fixture("models/qwen35-mmproj-tiny.gguf")).unwrap();
    let encoder = VisionEncoder::load(&file, backend).unwrap();
    IMAGES
        .iter()
        .map(|name| {
            let img = image::load(&common::fixture(&format!("models/{name}"))).unwrap();
            encoder.encode(backend, &img).unwrap()
        })
        .collect()
}

#[test]
fn qwen3vl_embeddings_match_llama_cpp_and_the_f64_tower() {
    let llama = common::golden("llama-cpp-vision.json");
    let f64_tower = common::golden("f64-qwen3vl.json");
    let backend = CpuBackend::new(2).unwrap();
    for (name, got) in IMAGES.iter().zip(encode_all(&backend)) {
        let (cols, rows, want) = golden_embeddings(&llama, name);
        assert_eq!((got.cols, got.rows), (cols, rows), "{name}: token grid");
        let d_llama = max_diff(&got.embeddings, &want);
        let (_, _, exact) = golden_embeddings(&f64_tower, name);
        let d_f64 = max_diff(&got.embeddings, &exact);
        eprintln!("{name}: max |Δ| {d_llama:.2e} against llama.cpp, {d_f64:.2e} against f64");
        assert!(
            d_llama <= LLAMA_CPP_TOLERANCE,
            "{name}: {d_llama} from llama.cpp"
        );
        assert!(d_f64 <= F64_TOLERANCE, "{name}: {d_f64} from the f64 tower");
    }
}

/// Teacher-forced greedy steps after the golden's prompt with an image, its embeddings given:
/// (worst top-5 |Δ|, rms of the top-5 differences) against llama.cpp, asserting `tol`'s rule.
fn steps_after_image(embeddings: Vec<f32>, tol: &golden_run::Tolerance, what: &str) -> (f32, f32) {
    let golden = common::golden("llama-cpp-vision.json");
    let case = &golden["logits"];
    let mf = ModelFile::open(&common::fixture("models/qwen35-tiny.gguf")).unwrap();
    let model = Model::load(&mf, CpuBackend::new(2).unwrap()).unwrap();
    // llama.cpp's run kept an F32 cache.
    let f32_cache = KvCacheTypes {
        k: CacheType::F32,
        v: CacheType::F32,
    };
    let mut session = Session::with_options(&model, 128, DEFAULT_BATCH, f32_cache).unwrap();
    let mut embeddings = Some(Arc::new(embeddings));
    let mut logits = Vec::new();
    for chunk in case["chunks"].as_array().unwrap() {
        let count = |k: &str| chunk[k].as_u64().unwrap() as usize;
        logits = match chunk["type"].as_str().unwrap() {
            "text" => session
                .prefill(&golden_run::ids(&chunk["tokens"]))
                .unwrap()
                .to_vec(),
            _ => session
                .prefill_embeddings(
                    embeddings.take().unwrap(),
                    count("nx_tokens"),
                    count("ny_tokens"),
                )
                .unwrap()
                .to_vec(),
        };
    }
    assert_eq!(
        session.next_position(),
        case["prompt_tokens"].as_u64().unwrap() as usize,
        "{what}: positions the prompt takes"
    );
    let (mut worst, mut sum_sq, mut checks) = (0f32, 0f64, 0);
    for (i, step) in case["steps"].as_array().unwrap().iter().enumerate() {
        let top5 = step["top5"].as_array().unwrap();
        for pair in top5 {
            let (id, want) = (
                pair[0].as_u64().unwrap() as usize,
                pair[1].as_f64().unwrap() as f32,
            );
            let d = (logits[id] - want).abs();
            (worst, sum_sq, checks) = (worst.max(d), sum_sq + (d as f64).powi(2), checks + 1);
            assert!(
                d <= tol.abs + tol.rel * want.abs(),
                "{what}: step {i}: logit of {id} is {}, llama.cpp {want}",
                logits[id]
            );
        }
        let token = step["token"].as_u64().unwrap() as u32;
        let margin = top5[0][1].as_f64().unwrap() - top5[1][1].as_f64().unwrap();
        if margin >= tol.margin as f64 {
            assert_eq!(golden_run::argmax(&logits), token, "{what}: step {i}");
        }
        logits = session.decode(token).unwrap().to_vec();
    }
    let rms = (sum_sq / checks as f64).sqrt() as f32;
    if let Some(limit) = tol.rms {
        assert!(rms <= limit, "{what}: rms {rms} over {limit}");
    }
    eprintln!("{what}: worst top-5 |Δ| {worst:.2e}, rms {rms:.2e} over 8 steps");
    (worst, rms)
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
    let image = golden["logits"]["image"].as_str().unwrap();
    steps_after_image(
        golden_embeddings(&golden, image).2,
        &golden_run::EXACT_F32,
        "llama.cpp's embeddings",
    );
    let backend = CpuBackend::new(2).unwrap();
    let file = Mmproj::open(&common::fixture("models/qwen35-mmproj-tiny.gguf")).unwrap();
    let text_model = ModelFile::open(&common::fixture("models/qwen35-tiny.gguf")).unwrap();
    file.check_text_width(text_model.config.hidden_size)
        .unwrap();
    let encoder = VisionEncoder::load(&file, &backend).unwrap();
    let img = image::load(&common::fixture(&format!("models/{image}"))).unwrap();
    let encoded = encoder.encode(&backend, &img).unwrap();
    steps_after_image(
        encoded.embeddings,
        &golden_run::GELU_TABLE_F32,
        "kiln's embeddings",
    );
}
