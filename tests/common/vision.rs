//! The vision tests' shared parts (tests/model/vision.rs on the CPU, tests/gpu/gpu_vision.rs on
//! the GPU): the tiny projectors (Qwen3.5's, Qwen3-VL's, Gemma 3's and Gemma 4's) and their images, llama.cpp's and
//! the float64 towers' embeddings of them, and llama.cpp's greedy steps after a prompt with
//! an image.

use std::sync::Arc;

use super::golden_run::{self, Tolerance};
use kiln::backend::{Backend, CacheType};
use kiln::model::arch::KvCacheTypes;
use kiln::model::multimodal::ImageInput;
use kiln::model::session::DEFAULT_BATCH;
use kiln::model::{Model, Session};
use kiln::vision::{Encoded, Mmproj, VisionEncoder, image};

/// A projector's test inputs and goldens.
pub struct Case {
    /// llama.cpp's embeddings and greedy steps (scripts/reference/make_vision_goldens.py).
    pub golden: &'static str,
    pub mmproj: &'static str,
    /// The text model the projector feeds.
    pub model: &'static str,
    /// The float64 tower's embeddings (scripts/reference/*_f64.py).
    pub f64_golden: &'static str,
    /// Whether llama.cpp's token grid is the image's (multi-axis RoPE places the rows by it);
    /// Gemma 3's images are a run of tokens to llama.cpp (16 × 1).
    pub grid: bool,
}

pub const QWEN35: Case = Case {
    golden: "llama-cpp-vision.json",
    mmproj: "models/qwen35-mmproj-tiny.gguf",
    model: "models/qwen35-tiny.gguf",
    f64_golden: "f64-qwen3vl.json",
    grid: true,
};

/// Qwen3-VL: the Qwen3.5 tower's kind with deepstack blocks, before a `qwen3vl` text model
/// (tests/fixtures/make_qwen3vl_vision.py).
pub const QWEN3VL: Case = Case {
    golden: "llama-cpp-vision-qwen3vl.json",
    mmproj: "models/qwen3vl-mmproj-tiny.gguf",
    model: "models/qwen3vl-tiny.gguf",
    f64_golden: "f64-qwen3vl-deepstack.json",
    grid: true,
};

/// Qwen3-VL MoE: the same projector before a `qwen3vlmoe` text model (its embeddings are
/// Qwen3-VL's).
pub const QWEN3VL_MOE: Case = Case {
    golden: "llama-cpp-vision-qwen3vlmoe.json",
    model: "models/qwen3vlmoe-tiny.gguf",
    ..QWEN3VL
};

pub const GEMMA3: Case = Case {
    golden: "llama-cpp-vision-gemma3.json",
    mmproj: "models/gemma3-mmproj-tiny.gguf",
    model: "models/gemma3-tiny.gguf",
    f64_golden: "f64-gemma3v.json",
    grid: false,
};

pub const GEMMA4: Case = Case {
    golden: "llama-cpp-vision-gemma4.json",
    mmproj: "models/gemma4-mmproj-tiny.gguf",
    model: "models/gemma4-tiny.gguf",
    f64_golden: "f64-gemma4v.json",
    grid: false,
};

pub const IMAGES: [&str; 4] = [
    "vision-32x32.png",
    "vision-48x32.png",
    "vision-45x29.png",
    "vision-20x70.png",
];

/// Against llama.cpp, which rounds as kiln does (the f16 patch product and GELU table): what
/// remains is float ordering, except where it moves a GELU input across an f16 rounding boundary,
/// which moves that output by an f16 step (measured: at most 9.2e-4; a RoPE with row and column
/// swapped moves the embeddings by 1.3).
pub const LLAMA_CPP_TOLERANCE: f32 = 2e-3;
/// Against the exact f64 tower, the f16 roundings themselves move the embeddings by up to 3.1e-3
/// (scripts/reference/qwen3vl_f64.py measured llama.cpp at 1.6e-3 to 3.1e-3 from it).
pub const F64_TOLERANCE: f32 = 5e-3;

/// An image's token grid (columns, rows) and embeddings in a golden file.
pub fn golden_embeddings(golden: &serde_json::Value, name: &str) -> (usize, usize, Vec<f32>) {
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

pub fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// The case's tiny projector's tower on `backend`.
pub fn encoder<B: Backend>(case: &Case, backend: &B) -> VisionEncoder<B> {
    let file = Mmproj::open(&super::fixture(case.mmproj)).unwrap();
    VisionEncoder::load(&file, backend).unwrap()
}

/// Every test image encoded on `backend`.
pub fn encode_all<B: Backend>(case: &Case, backend: &B) -> Vec<Encoded> {
    let encoder = encoder(case, backend);
    IMAGES
        .iter()
        .map(|name| {
            let img = image::load(&super::fixture(&format!("models/{name}"))).unwrap();
            encoder.encode(backend, &img).unwrap()
        })
        .collect()
}

/// Each image's largest difference from llama.cpp's embeddings and from the float64 tower's,
/// asserting both tolerances.
pub fn check_embeddings(case: &Case, encoded: &[Encoded], what: &str) {
    let llama = super::golden(case.golden);
    let f64_tower = super::golden(case.f64_golden);
    for (name, got) in IMAGES.iter().zip(encoded) {
        let (cols, rows, want) = golden_embeddings(&llama, name);
        if case.grid {
            assert_eq!(
                (got.cols, got.rows),
                (cols, rows),
                "{what} {name}: token grid"
            );
        }
        assert_eq!(got.tokens(), cols * rows, "{what} {name}: tokens");
        let d_llama = max_diff(&got.embeddings, &want);
        eprintln!("{what} {name}: max |Δ| {d_llama:.2e} against llama.cpp");
        assert!(
            d_llama <= LLAMA_CPP_TOLERANCE,
            "{what} {name}: {d_llama} from llama.cpp"
        );
        let d_f64 = max_diff(&got.embeddings, &golden_embeddings(&f64_tower, name).2);
        eprintln!("{what} {name}: max |Δ| {d_f64:.2e} against f64");
        assert!(
            d_f64 <= F64_TOLERANCE,
            "{what} {name}: {d_f64} from the f64 tower"
        );
    }
}

/// A session (F32 cache, as llama.cpp's run kept) over the golden's prompt with its image given as
/// `embeddings`, attending over the image both ways where llama.cpp did (its chunk's
/// `non_causal`) unless `bidirectional` says otherwise; and the logits after the prompt.
pub fn prefill_prompt<'m, B: Backend>(
    case: &Case,
    model: &'m Model<B>,
    embeddings: Vec<f32>,
    bidirectional: Option<bool>,
) -> (Session<'m, B>, Vec<f32>) {
    let golden = super::golden(case.golden);
    let f32_cache = KvCacheTypes {
        k: CacheType::F32,
        v: CacheType::F32,
    };
    let mut session = Session::with_options(model, 128, DEFAULT_BATCH, f32_cache).unwrap();
    let mut embeddings = Some(Arc::new(embeddings));
    let mut logits = Vec::new();
    for chunk in golden["logits"]["chunks"].as_array().unwrap() {
        let count = |k: &str| chunk[k].as_u64().unwrap() as usize;
        logits = match chunk["type"].as_str().unwrap() {
            "text" => session
                .prefill(&golden_run::ids(&chunk["tokens"]))
                .unwrap()
                .to_vec(),
            _ => {
                let image = ImageInput {
                    cols: count("nx_tokens"),
                    rows: count("ny_tokens"),
                    embeddings: embeddings.take().unwrap(),
                    bidirectional: bidirectional
                        .unwrap_or(chunk["non_causal"].as_bool().unwrap_or(false)),
                };
                session.prefill_embeddings(&image).unwrap().to_vec()
            }
        };
    }
    (session, logits)
}

/// Teacher-forced greedy steps after the golden's prompt with an image, its embeddings given:
/// (worst top-5 |Δ|, rms of the top-5 differences) against llama.cpp, asserting `tol`'s rule.
pub fn steps_after_image<B: Backend>(
    case: &Case,
    model: &Model<B>,
    embeddings: Vec<f32>,
    tol: &Tolerance,
    what: &str,
) -> (f32, f32) {
    let (mut session, mut logits) = prefill_prompt(case, model, embeddings, None);
    let golden = super::golden(case.golden);
    let case = &golden["logits"];
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
