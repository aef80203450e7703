//! qwen3-synth and llama32-synth (built from SmolLM2 as the golden README says) against llama.cpp.

use crate::common;

use common::golden_run::{QUANTIZED, check_model, load};

#[test]
fn qwen3_synth_matches_llama_cpp() {
    let mf = common::synth::qwen3_synth(&common::real_model(common::REAL_MODELS[0]));
    assert_eq!(mf.config.arch, kiln::model::Arch::Qwen3);
    let golden = common::golden("llama-cpp-synth.json");
    let report = check_model(
        &load(&mf, 2),
        &golden["models"]["qwen3-synth.gguf"],
        &QUANTIZED,
    );
    eprintln!("{}", report.summary("qwen3-synth"));
    report.assert_all("qwen3-synth");
}

fn llama32_synth_report() -> common::golden_run::Report {
    let mf = common::synth::llama32_synth(&common::real_model(common::REAL_MODELS[0]));
    assert!(mf.config.rope_scaling.is_some());
    let golden = common::golden("llama-cpp-synth.json");
    let report = check_model(
        &load(&mf, 2),
        &golden["models"]["llama32-synth.gguf"],
        &QUANTIZED,
    );
    eprintln!("{}", report.summary("llama32-synth"));
    report
}

#[test]
fn llama32_synth_matches_llama_cpp() {
    llama32_synth_report().assert_all("llama32-synth");
}

/// config.json's `rope_scaling: {rope_type: llama3, …}` gives the divisors llama.cpp's converter
/// stores in GGUF as rope_freqs.weight.
#[test]
fn hf_llama3_rope_scaling_equals_the_gguf_divisors() {
    let cfg = serde_json::json!({
        "model_type": "llama", "vocab_size": 10, "hidden_size": 64, "intermediate_size": 8,
        "num_hidden_layers": 1, "num_attention_heads": 1, "rope_theta": 100000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 512}
    });
    let c = kiln::model::ModelConfig::from_hf(&cfg).unwrap();
    match c.rope_scaling {
        Some(kiln::model::config::RopeScaling::PerFrequency { divisors }) => {
            assert_eq!(divisors, common::synth::llama32_divisors());
        }
        other => panic!("{other:?}"),
    }
}
