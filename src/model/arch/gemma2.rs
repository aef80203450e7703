//! Gemma 2 (`gemma2`): Gemma 3's layer (gemma3.rs: four norms per layer, embeddings × sqrt(hidden),
//! GELU-tanh gating, RMSNorm by `1 + w`) without QK-norm, and with two soft caps, each
//! `cap · tanh(x / cap)`: on the attention scores after the query scale (`attn_logit_softcapping`,
//! 50) and on the logits (`final_logit_softcapping`, 30). Sliding-window layers alternate with
//! global ones, the local ones first (pattern 2: layers 0, 2, 4, … local), all with one RoPE base
//! unless the file gives the local layers their own. llama.cpp (`src/models/gemma2.cpp`) defaults
//! the window to 4096 and the caps to 50 and 30 when the keys are absent, and scales queries by
//! 1/sqrt(head_dim) except in the 46-layer 27B, whose scale is 1/sqrt(hidden / heads) (Hugging
//! Face: `query_pre_attn_scalar`, 144 there).

use super::AttentionOpts;
use super::family::{Family, LayerKind};
use super::gemma3::{CHAT_TEMPLATE, gguf_layer_pattern, hf_layer_pattern};
use crate::error::{Error, Result};
use crate::model::Arch;
use crate::model::config::{Activation, GgufKeys, HfKeys, ModelConfig};

pub(crate) const GEMMA2: Family = Family {
    arch: Arch::Gemma2,
    name: "gemma2",
    gguf_names: &["gemma2"],
    hf_model_types: &["gemma2"],
    hf_text_config_of: None,
    hf_head_dim: Some(256),
    gguf_keys,
    hf_keys,
    // As Gemma 3: post_attention_layernorm norms the attention's output.
    hf_tensor_names: &[("post_attention_layernorm", "post_attention_norm")],
    norm_one_plus_weight: true,
    ffn_norm: "ffn_norm",
    layer: LayerKind::Gemma(AttentionOpts {
        qkv_bias: false,
        qk_norm: false,
        ..AttentionOpts::PLAIN
    }),
    chat_template: &CHAT_TEMPLATE,
};

/// llama.cpp's (and Gemma 2's) defaults.
const WINDOW: usize = 4096;
const PATTERN: usize = 2;
const ATTN_SOFTCAP: f64 = 50.0;
const FINAL_SOFTCAP: f64 = 30.0;

/// Gemma's facts that neither GGUF nor config.json states.
fn fixed_facts(c: &mut ModelConfig) {
    c.qk_norm = false;
    c.embedding_scale = Some((c.hidden_size as f32).sqrt());
    c.activation = Activation::GeluTanh;
}

/// A soft cap: positive, or none (ModelConfig::validate refuses an infinite one).
fn cap(v: f64) -> Option<f32> {
    (v > 0.0).then_some(v as f32)
}

fn gguf_keys(keys: &GgufKeys, c: &mut ModelConfig) -> Result<()> {
    fixed_facts(c);
    c.sliding_window =
        Some(keys.usize("attention.sliding_window")?.unwrap_or(WINDOW)).filter(|&w| w > 0);
    gguf_layer_pattern(keys, c, PATTERN)?;
    c.rope_theta_local = keys
        .f64("rope.freq_base_swa")?
        .map(|b| b as f32)
        .filter(|&b| b != c.rope_theta);
    c.attn_logit_softcap = cap(keys.f64("attn_logit_softcapping")?.unwrap_or(ATTN_SOFTCAP));
    c.final_logit_softcap = cap(keys
        .f64("final_logit_softcapping")?
        .unwrap_or(FINAL_SOFTCAP));
    // llama.cpp's converter adds the 1 of `x·(1+w)` to the norm weights.
    c.norm_weights_include_one = true;
    // llama.cpp tells the 27B by its 46 layers; its query_pre_attn_scalar is hidden/heads (144).
    let scalar = if c.n_layers == 46 {
        c.hidden_size / c.n_heads.max(1)
    } else {
        c.head_dim
    };
    c.attention_scale = 1.0 / (scalar as f32).sqrt();
    Ok(())
}

/// A config.json soft cap: the default when the key is missing, none when it is null.
fn hf_cap(keys: &HfKeys, k: &str, default: f64) -> Result<Option<f32>> {
    match keys.get(k) {
        None => Ok(cap(default)),
        Some(_) => Ok(keys.float(k)?.and_then(cap)),
    }
}

fn hf_keys(keys: &HfKeys, c: &mut ModelConfig) -> Result<()> {
    fixed_facts(c);
    c.sliding_window = Some(keys.uint("sliding_window")?.unwrap_or(WINDOW)).filter(|&w| w > 0);
    if c.sliding_window.is_some() {
        c.sliding_window_pattern = Some(hf_layer_pattern(keys, c.n_layers, PATTERN)?);
    }
    c.tie_embeddings = keys.tie_word_embeddings().unwrap_or(true);
    c.attn_logit_softcap = hf_cap(keys, "attn_logit_softcapping", ATTN_SOFTCAP)?;
    c.final_logit_softcap = hf_cap(keys, "final_logit_softcapping", FINAL_SOFTCAP)?;
    let scalar = keys
        .float("query_pre_attn_scalar")?
        .unwrap_or(c.head_dim as f64);
    if !(scalar > 0.0 && scalar.is_finite()) {
        return Err(Error::Format(format!(
            "config.json: query_pre_attn_scalar {scalar} should be positive"
        )));
    }
    c.attention_scale = 1.0 / (scalar as f32).sqrt();
    Ok(())
}
