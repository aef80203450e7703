//! The synthetic models of tests/fixtures/golden/README.md, derived from SmolLM2 in memory:
//! qwen3-synth (SmolLM2's tensors as Qwen3, plus QK-norm weights) and llama32-synth (SmolLM2 plus
//! Llama 3 RoPE frequency divisors). The formulas are the README's, written out here on their own.

use std::path::Path;

use gguf_rs_lib::format::metadata::MetadataValue;
use kiln::gguf::GgufFile;
use kiln::model::ModelFile;

use super::gguf_writer::GgufWriter;

/// A writer holding every tensor and metadata entry of a GGUF file, keys renamed by `rename`.
pub fn copy_of(src: &GgufFile, rename: impl Fn(&str) -> String) -> GgufWriter {
    let mut w = GgufWriter::default();
    for key in src.metadata.keys() {
        if key == "general.alignment" {
            continue;
        }
        w.kv(&rename(key), src.metadata.get(key).unwrap().clone());
    }
    for t in &src.tensors {
        w.tensor(
            &t.name,
            t.ggml_type.id(),
            &t.dims,
            src.tensor_bytes(t).to_vec(),
        );
    }
    w
}

pub fn open(label: &str, w: &GgufWriter) -> ModelFile {
    let g = GgufFile::from_bytes(Path::new(label), &w.to_bytes()).unwrap();
    ModelFile::from_gguf(g).unwrap()
}

pub fn qwen3_synth(smollm2: &Path) -> ModelFile {
    let src = GgufFile::open(smollm2).unwrap();
    let mut w = copy_of(&src, |k| match k.strip_prefix("llama.") {
        Some(rest) => format!("qwen3.{rest}"),
        None => k.to_string(),
    });
    w.kv(
        "general.architecture",
        MetadataValue::String("qwen3".into()),
    );
    w.kv("qwen3.attention.key_length", MetadataValue::U32(64));
    w.kv("qwen3.attention.value_length", MetadataValue::U32(64));
    let layers = src.metadata.u64("llama.block_count").unwrap().unwrap() as usize;
    for i in 0..layers {
        let q: Vec<f32> = (0..64)
            .map(|j| (1.0 + 0.25 * (0.5 * j as f64 + i as f64).sin()) as f32)
            .collect();
        let k: Vec<f32> = (0..64)
            .map(|j| (1.0 + 0.25 * (0.3 * j as f64 + i as f64).cos()) as f32)
            .collect();
        w.f32_tensor(&format!("blk.{i}.attn_q_norm.weight"), &[64], &q);
        w.f32_tensor(&format!("blk.{i}.attn_k_norm.weight"), &[64], &k);
    }
    open("qwen3-synth.gguf", &w)
}

/// Llama 3 RoPE scaling divisors: factor 8, low_freq_factor 1, high_freq_factor 4, original
/// context 512, theta 1e5, head_dim 64.
pub fn llama32_divisors() -> Vec<f32> {
    (0..64)
        .step_by(2)
        .map(|k| {
            let f = 1.0 / 1e5f64.powf(k as f64 / 64.0);
            let wl = 2.0 * std::f64::consts::PI / f;
            let v = if wl < 512.0 / 4.0 {
                1.0
            } else if wl > 512.0 / 1.0 {
                8.0
            } else {
                let s = (512.0 / wl - 1.0) / (4.0 - 1.0);
                1.0 / ((1.0 - s) / 8.0 + s)
            };
            v as f32
        })
        .collect()
}

pub fn llama32_synth(smollm2: &Path) -> ModelFile {
    let src = GgufFile::open(smollm2).unwrap();
    let mut w = copy_of(&src, str::to_string);
    w.f32_tensor("rope_freqs.weight", &[32], &llama32_divisors());
    open("llama32-synth.gguf", &w)
}
