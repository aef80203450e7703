//! Reading a `ModelConfig` from a Hugging Face `config.json`.

use serde_json::Value;

use super::{Activation, Arch, ModelConfig, RopeLayout, RopeScaling};
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
        let arch = family::from_hf_model_type(model_type)?.arch;
        let gemma = arch == Arch::Gemma3;

        let uint = |k: &str| -> Result<Option<usize>> {
            match c.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v.as_u64().map(|x| Some(x as usize)).ok_or_else(|| {
                    Error::Format(format!("config.json: '{k}' should be an integer"))
                }),
            }
        };
        let float = |k: &str| -> Result<Option<f64>> {
            match c.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v
                    .as_f64()
                    .map(Some)
                    .ok_or_else(|| Error::Format(format!("config.json: '{k}' should be a number"))),
            }
        };
        let flag = |k: &str| -> Option<bool> { c.get(k).and_then(Value::as_bool) };
        let need = |k: &str| -> Result<usize> {
            uint(k)?.ok_or_else(|| Error::Format(format!("config.json has no '{k}'")))
        };

        let hidden_size = need("hidden_size")?;
        let n_heads = need("num_attention_heads")?;
        let n_layers = need("num_hidden_layers")?;
        let default_head_dim = match arch {
            Arch::Qwen3 => 128,
            Arch::Gemma3 => 256,
            _ => hidden_size / n_heads.max(1),
        };
        let head_dim = uint("head_dim")?.unwrap_or(default_head_dim);

        let sliding_window = match arch {
            Arch::Gemma3 => Some(uint("sliding_window")?.unwrap_or(4096)),
            Arch::Qwen2 if flag("use_sliding_window") == Some(true) => uint("sliding_window")?,
            Arch::Llama => uint("sliding_window")?,
            _ => None,
        }
        .filter(|&w| w > 0);
        let sliding_window_pattern = if gemma && sliding_window.is_some() {
            Some(gemma_pattern(c, n_layers)?)
        } else {
            None
        };

        let rope_scaling = match c.get("rope_scaling") {
            None | Some(Value::Null) => None,
            Some(s) => hf_rope_scaling(s, head_dim, float("rope_theta")?.unwrap_or(10000.0))?,
        };

        let cfg = ModelConfig {
            arch,
            vocab_size: need("vocab_size")?,
            hidden_size,
            intermediate_size: need("intermediate_size")?,
            n_layers,
            n_heads,
            n_kv_heads: uint("num_key_value_heads")?.unwrap_or(n_heads),
            head_dim,
            rms_norm_eps: float("rms_norm_eps")?.unwrap_or(1e-6) as f32,
            rope_theta: float("rope_theta")?.unwrap_or(if gemma { 1e6 } else { 1e4 }) as f32,
            rope_theta_local: if gemma {
                Some(float("rope_local_base_freq")?.unwrap_or(10000.0) as f32)
            } else {
                None
            },
            rope_scaling,
            rope_layout: RopeLayout::Neox,
            sliding_window,
            sliding_window_pattern,
            attention_bias: arch == Arch::Qwen2 || flag("attention_bias") == Some(true),
            qk_norm: matches!(arch, Arch::Qwen3 | Arch::Gemma3),
            tie_embeddings: flag("tie_word_embeddings")
                .or_else(|| json.get("tie_word_embeddings").and_then(Value::as_bool))
                .unwrap_or(gemma),
            context_length: uint("max_position_embeddings")?.unwrap_or(2048),
            norm_weights_include_one: false,
            embedding_scale: gemma.then(|| (hidden_size as f32).sqrt()),
            attention_scale: if gemma {
                1.0 / (float("query_pre_attn_scalar")?.unwrap_or(head_dim as f64) as f32).sqrt()
            } else {
                1.0 / (head_dim as f32).sqrt()
            },
            activation: if gemma {
                Activation::GeluTanh
            } else {
                Activation::Silu
            },
            final_logit_softcap: float("final_logit_softcapping")?
                .filter(|&x| x > 0.0)
                .map(|x| x as f32),
            rope_dims: head_dim,
            rope_sections: None,
            delta_net: None,
            moe: None,
            nextn_layers: 0,
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

/// Gemma 3's local/global layout: `sliding_window_pattern: 6`, or a `layer_types` list whose
/// "full_attention" entries must fall on every n-th layer.
fn gemma_pattern(c: &Value, n_layers: usize) -> Result<usize> {
    if let Some(p) = c.get("sliding_window_pattern").and_then(Value::as_u64) {
        return Ok(p as usize);
    }
    let Some(types) = c.get("layer_types").and_then(Value::as_array) else {
        return Ok(6);
    };
    let global: Vec<usize> = types
        .iter()
        .enumerate()
        .filter(|(_, t)| t.as_str() == Some("full_attention"))
        .map(|(i, _)| i)
        .collect();
    let Some(&first) = global.first() else {
        return Ok(0);
    };
    let pattern = first + 1;
    let expected: Vec<usize> = (0..n_layers.min(types.len()))
        .filter(|i| (i + 1) % pattern == 0)
        .collect();
    if expected != global {
        return Err(Error::Unsupported(
            "config.json layer_types is not a regular local/global pattern".into(),
        ));
    }
    Ok(pattern)
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
