//! Images in (src/vision/): the Qwen3.5 vision tower on the tiny random-weight projector
//! (tests/fixtures/make_qwen35_vision.py) against llama.cpp's embeddings of the same images
//! (golden/llama-cpp-vision.json, scripts/reference/make_vision_goldens.py) and against a float64
//! NumPy tower written apart from both (golden/f64-qwen3vl.json, scripts/reference/qwen3vl_f64.py).
//! Two images are at sizes the tower takes as they are (the native 32×32, and 48×32, whose position
//! grid is resampled); two take llama.cpp's resize and letterbox.

use crate::common;

use kiln::backend::cpu::CpuBackend;
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
