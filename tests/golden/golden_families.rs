//! The tiny random-weight SmolLM3, Gemma 2, Mistral 3, gpt-oss and GLM-4.5 MoE files
//! (tests/fixtures/make_smollm3_tiny.py, make_gemma2_tiny.py, make_mistral3_tiny.py,
//! make_gptoss_tiny.py, make_glm4moe_tiny.py) against llama.cpp, teacher-forced and free running, with an f32 KV cache
//! as the goldens were made, by the tight rule of the tiny F32 models
//! (tests/fixtures/golden/README.md; Gemma 2 by the looser `GELU_TABLE_F32`). Each file makes its family's features matter: SmolLM3's NoPE
//! layers, Gemma 2's two soft caps and its sliding window of 16 (shorter than every prompt); the
//! README records how far each feature, switched off in kiln, lands from the goldens. The last
//! golden prompt has 961 tokens: two 512-token prefill chunks over the KV cache.

use crate::common;

use common::golden_run::{
    EXACT_F32, GELU_TABLE_F32, RANDOM_QUANTIZED, Tolerance, check_model_with, golden_steps,
};
use kiln::backend::cpu::CpuBackend;
use kiln::backend::{CacheType, CoreOps};
use kiln::model::arch::KvCacheTypes;
use kiln::model::{Model, ModelFile};

/// Every golden step of `file` (its goldens in `golden`) within `rule` on the CPU, once per
/// repacking choice in `repacks`.
fn check_with(file: &str, golden: &str, rule: &Tolerance, repacks: &[bool]) {
    let golden = common::golden(golden);
    let entry = &golden["models"][file];
    let steps = golden_steps(entry);
    let mf = ModelFile::open(&common::fixture(&format!("models/{file}"))).unwrap();
    let cache = KvCacheTypes {
        k: CacheType::F32,
        v: CacheType::F32,
    };
    for &repack in repacks {
        let backend = CpuBackend::new(2).unwrap().with_repacking(repack);
        let model = Model::load(&mf, backend).unwrap();
        let what = format!("{file} ({})", model.backend.describe());
        let report = check_model_with(&model, entry, rule, cache);
        eprintln!(
            "{}; worst |Δ| {:.1e}",
            report.summary(&what),
            report.worst_ratio * rule.abs
        );
        report.assert_all(&what);
        assert_eq!(report.steps, steps, "{what}: every step");
    }
}

/// As `check_with`, with the default (repacked) weights.
fn check(file: &str, golden: &str, rule: &Tolerance) {
    check_with(file, golden, rule, &[true]);
}

#[test]
fn smollm3_matches_llama_cpp() {
    check("smollm3-tiny.gguf", "llama-cpp-smollm3.json", &EXACT_F32);
}

/// Mistral 3: YaRN with the file's betas and log multiplier, interleaved RoPE, query temperature
/// from position 64 (the 961-token prompt's rows reach 2.4×).
#[test]
fn mistral3_matches_llama_cpp() {
    check("mistral3-tiny.gguf", "llama-cpp-mistral3.json", &EXACT_F32);
}

/// By the GELU models' rule: llama.cpp's f16-table GELU makes it disagree with itself by more
/// than the tight rule allows on this file (golden_run.rs, `GELU_TABLE_F32`).
#[test]
fn gemma2_matches_llama_cpp() {
    check("gemma2-tiny.gguf", "llama-cpp-gemma2.json", &GELU_TABLE_F32);
}

/// gpt-oss (tests/fixtures/make_gptoss_tiny.py): the F32 file (experts holding MXFP4's values,
/// dequantized) by the tight rule; biases, sinks, the clamped SwiGLU, YaRN and the window of 8
/// each matter on it (the README records how far each, switched off in kiln, lands). Repacked
/// and not.
#[test]
fn gptoss_matches_llama_cpp() {
    check_with(
        "gptoss-tiny.gguf",
        "llama-cpp-gptoss.json",
        &EXACT_F32,
        &[true, false],
    );
}

/// The MXFP4 file, whose experts llama.cpp multiplies with Q8_0-rounded activations, by the rule
/// for random-weight quantized files; repacked and not.
#[test]
fn gptoss_mxfp4_matches_llama_cpp() {
    check_with(
        "gptoss-tiny-MXFP4.gguf",
        "llama-cpp-gptoss.json",
        &RANDOM_QUANTIZED,
        &[true, false],
    );
}

/// GLM-4.5 MoE (tests/fixtures/make_glm4moe_tiny.py): partial NEOX RoPE, Q/K/V biases, QK-norm
/// on two of four blocks, a leading dense block, sigmoid routing with a selection bias,
/// renormalized and scaled weights, an ungated shared expert, and a multi-token-prediction block
/// that must be skipped. Repacked and not.
#[test]
fn glm4moe_matches_llama_cpp() {
    check_with(
        "glm4moe-tiny.gguf",
        "llama-cpp-glm4moe.json",
        &EXACT_F32,
        &[true, false],
    );
}

/// Phi-3 (tests/fixtures/make_phi3_tiny.py): fused Q/K/V and gate/up projections, RoPE over 24 of
/// 32 dims, LongRoPE's short factors at a context of 1024 and its long ones at 2048 (the
/// goldens' contexts, llama.cpp's and so kiln's), with its attention factor.
#[test]
fn phi3_matches_llama_cpp() {
    check("phi3-tiny.gguf", "llama-cpp-phi3.json", &EXACT_F32);
    check("phi3-tiny.gguf", "llama-cpp-phi3-long.json", &EXACT_F32);
}

/// Mistral v0.1's sliding window (config.json `sliding_window`, every layer), which llama.cpp
/// ignores, against an independent float64 pass instead (scripts/reference/families_f64.py
/// `--window 8`, golden f64-mistral-window.json): tiny-llama-hf given a window of 8, on the six
/// Qwen3.5 golden prompts (the same vocabulary), the 961-token one included, by the tight rule.
/// Without the window the same comparison fails: the window matters on these prompts.
#[test]
fn mistral_sliding_window_matches_the_f64_reference() {
    let dir = tempfile::tempdir().unwrap();
    let src = common::fixture("models/tiny-llama-hf");
    for f in [
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
    }
    let config = std::fs::read_to_string(src.join("config.json")).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(&config).unwrap();
    config["model_type"] = "mistral".into();
    let golden = common::golden("f64-mistral-window.json");
    let entry = &golden["models"]["tiny-llama-hf, sliding_window 8"];
    let cache = KvCacheTypes {
        k: CacheType::F32,
        v: CacheType::F32,
    };
    for window in [Some(8), None] {
        config["sliding_window"] = window.into();
        std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
        let mf = ModelFile::open(dir.path()).unwrap();
        assert_eq!(mf.config.sliding_window, window);
        let model = Model::load(&mf, CpuBackend::new(2).unwrap()).unwrap();
        let report = check_model_with(&model, entry, &EXACT_F32, cache);
        let what = format!("tiny-llama-hf, sliding_window {window:?}");
        eprintln!(
            "{}; worst |Δ| {:.1e}",
            report.summary(&what),
            report.worst_ratio * EXACT_F32.abs
        );
        match window {
            Some(_) => report.assert_all(&what),
            None => assert!(
                report.worst_ratio > 10.0,
                "{what}: without the window the f64 reference should not be met"
            ),
        }
    }
}

/// GLM-4 dense (tests/fixtures/make_glm4_tiny.py): Gemma's sandwich norms with SiLU, Q/K/V
/// biases, RoPE over 8 of 16 dims, the gate and up projections stored fused.
#[test]
fn glm4_matches_llama_cpp() {
    check("glm4-tiny.gguf", "llama-cpp-glm4.json", &EXACT_F32);
}

/// Gemma 4 (tests/fixtures/make_gemma4_tiny.py): local and global layers of their own head sizes
/// and KV head counts, proportional RoPE on the global ones, value norm, values from the key
/// projection where `attn_v` is absent, layer output scales, two layers that share earlier
/// layers' caches, a final soft cap.
#[test]
fn gemma4_matches_llama_cpp() {
    check("gemma4-tiny.gguf", "llama-cpp-gemma4.json", &GELU_TABLE_F32);
}

/// Gemma 4's mixture of experts (tests/fixtures/make_gemma4_tiny.py `moe`, 26B-A4B's ratios):
/// experts routed on their own scaled norm beside every block's dense MLP, each expert's output
/// scale, fused gate and up. Repacked and not.
#[test]
fn gemma4_moe_matches_llama_cpp() {
    check_with(
        "gemma4moe-tiny.gguf",
        "llama-cpp-gemma4moe.json",
        &GELU_TABLE_F32,
        &[true, false],
    );
}

/// Gemma 4 E2B's shape (tests/fixtures/make_gemma4_tiny.py `e2b`): per-layer token embeddings
/// (Q8_0) mixed with a projection of the token's embedding into every block, three shared-KV
/// layers with twice the MLP width.
#[test]
fn gemma4_e2b_matches_llama_cpp() {
    check(
        "gemma4e-tiny.gguf",
        "llama-cpp-gemma4e.json",
        &GELU_TABLE_F32,
    );
}
