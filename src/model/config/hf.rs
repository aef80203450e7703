//! Reading a `ModelConfig` from a Hugging Face `config.json`. `model_type` names the family; the
//! settings every family shares (`hidden_size`, `num_hidden_layers`, `rope_scaling`, ...) are read
//! here, then the family's own hook (`Family::hf_keys`, in arch/<family>.rs) reads the rest.

use serde_json::Value;

use super::keys::HfKeys;
use super::{Activation, ModelConfig, RopeLayout, RopeScaling, yarn_magnitude};
use crate::error::{Error, Result};
use crate::model::arch::family;

impl ModelConfig {
    /// Read from a Hugging Face config.json (already parsed).
    pub fn from_hf(json: &Value) -> Result<ModelConfig> {
        // Multimodal checkpoints (Gemma 3's) nest the language model's settings under text_config.
        let top_type = json.get("model_type").and_then(Value::as_str).unwrap_or("");
        let c = match json.get("text_config") {
            Some(t) if family::hf_nests_text_config(top_type) => t,
            _ => json,
        };
        let model_type = c
            .get("model_type")
            .and_then(Value::as_str)
            .unwrap_or(top_type);
        let family = family::from_hf_model_type(model_type)?;
        let keys = HfKeys::new(c, json);

        let hidden_size = keys.need("hidden_size")?;
        let n_heads = keys.need("num_attention_heads")?;
        let n_layers = keys.need("num_hidden_layers")?;
        let head_dim = match (keys.uint("head_dim")?, family.hf_head_dim) {
            (Some(d), _) | (None, Some(d)) => d,
            (None, None) => hidden_size / n_heads.max(1),
        };
        let rope_scaling = match keys.get("rope_scaling") {
            None | Some(Value::Null) => None,
            Some(s) => hf_rope_scaling(s, head_dim, keys.float("rope_theta")?.unwrap_or(10000.0))?,
        };

        let mut cfg = ModelConfig {
            arch: family.arch,
            vocab_size: keys.need("vocab_size")?,
            hidden_size,
            intermediate_size: keys.need("intermediate_size")?,
            n_layers,
            n_heads,
            n_kv_heads: keys.uint("num_key_value_heads")?.unwrap_or(n_heads),
            head_dim,
            rms_norm_eps: keys.float("rms_norm_eps")?.unwrap_or(1e-6) as f32,
            rope_theta: keys.float("rope_theta")?.unwrap_or(1e4) as f32,
            rope_theta_local: None,
            rope_scaling,
            rope_layout: RopeLayout::Neox,
            sliding_window: None,
            sliding_window_pattern: None,
            swa_layers: None,
            attention_bias: keys.flag("attention_bias") == Some(true),
            qk_norm: false,
            tie_embeddings: keys.tie_word_embeddings().unwrap_or(false),
            context_length: keys.uint("max_position_embeddings")?.unwrap_or(2048),
            norm_weights_include_one: false,
            embedding_scale: None,
            attention_scale: 1.0 / (head_dim as f32).sqrt(),
            bidirectional_local_only: false,
            activation: Activation::Silu,
            final_logit_softcap: keys
                .float("final_logit_softcapping")?
                .filter(|&x| x > 0.0)
                .map(|x| x as f32),
            attn_logit_softcap: None,
            attn_temperature: None,
            nope_layers: Vec::new(),
            rope_dims: head_dim,
            rope_sections: None,
            delta_net: None,
            moe: None,
            nextn_layers: 0,
            local_attention: None,
            first_shared_kv_layer: None,
            ffn_widths: None,
            per_layer_embedding: 0,
            deepstack_layers: 0,
        };
        (family.hf_keys)(&keys, &mut cfg)?;
        cfg.validate()?;
        Ok(cfg)
    }
}

/// config.json `rope_scaling`: linear, or Llama 3's per-frequency divisors (computed in f64 as
/// llama.cpp's converter does, then rounded to f32 as GGUF stores them).
fn hf_rope_scaling(s: &Value, head_dim: usize, theta: f64) -> Result<Option<RopeScaling>> {
    let kind = s
        .get("rope_type")
        .or_else(|| s.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let num = |k: &str, default: f64| s.get(k).and_then(Value::as_f64).unwrap_or(default);
    match kind {
        "default" => Ok(None),
        "linear" => {
            let factor = num("factor", 1.0);
            Ok((factor != 1.0).then_some(RopeScaling::Linear {
                factor: factor as f32,
            }))
        }
        "llama3" => {
            let factor = num("factor", 8.0);
            let low = num("low_freq_factor", 1.0);
            let high = num("high_freq_factor", 4.0);
            let original = num("original_max_position_embeddings", 8192.0);
            Ok(Some(RopeScaling::PerFrequency {
                divisors: llama3_divisors(head_dim, theta, factor, low, high, original),
            }))
        }
        "yarn" => {
            let factor = num("factor", 1.0);
            let original = num("original_max_position_embeddings", 0.0);
            if !(factor > 0.0 && original >= 1.0 && original.is_finite()) {
                return Err(Error::Format(format!(
                    "config.json rope_scaling: YaRN needs a positive factor and \
                     original_max_position_embeddings (have {factor} and {original})"
                )));
            }
            // Hugging Face's `attention_factor` replaces the 1 + 0.1·ln(factor) that llama.cpp's
            // `attn_factor` multiplies.
            let attn_factor = s
                .get("attention_factor")
                .and_then(Value::as_f64)
                .map_or(1.0, |a| a / (1.0 + 0.1 * factor.ln()));
            Ok(Some(RopeScaling::Yarn {
                factor: factor as f32,
                original_context: original as usize,
                beta_fast: num("beta_fast", 32.0) as f32,
                beta_slow: num("beta_slow", 1.0) as f32,
                magnitude: yarn_magnitude(factor as f32, attn_factor as f32, 0.0),
            }))
        }
        other => Err(Error::Unsupported(format!(
            "config.json rope_scaling type '{other}' is not supported"
        ))),
    }
}

/// Llama 3 RoPE scaling: each frequency's divisor (1 for high frequencies, `factor` for low ones,
/// smoothly interpolated between).
fn llama3_divisors(
    head_dim: usize,
    theta: f64,
    factor: f64,
    low_freq_factor: f64,
    high_freq_factor: f64,
    original_context: f64,
) -> Vec<f32> {
    let low_wavelen = original_context / low_freq_factor;
    let high_wavelen = original_context / high_freq_factor;
    (0..head_dim)
        .step_by(2)
        .map(|k| {
            let freq = 1.0 / theta.powf(k as f64 / head_dim as f64);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            let divisor = if wavelen < high_wavelen {
                1.0
            } else if wavelen > low_wavelen {
                factor
            } else {
                let smooth = (original_context / wavelen - low_freq_factor)
                    / (high_freq_factor - low_freq_factor);
                1.0 / ((1.0 - smooth) / factor + smooth)
            };
            divisor as f32
        })
        .collect()
}
