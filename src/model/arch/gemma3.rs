//! Gemma 3: QK-norm, and each block's output RMS-normed again before the residual add (four norms
//! per layer); embeddings scaled by sqrt(hidden), GELU-tanh gating, RMSNorm by `1 + w`, and local
//! (sliding-window, RoPE base 10000) layers between every sixth global one. Its keys, Hugging Face
//! names and built-in turn format are here too.

use serde_json::Value;

use super::family::{Family, LayerKind};
use super::{AttentionOpts, Step};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::model::Arch;
use crate::model::chat::{BuiltinTemplate, TemplateOrigin};
use crate::model::config::{Activation, GgufKeys, HfKeys, ModelConfig};
use crate::model::weights::LayerWeights;

pub(crate) const GEMMA3: Family = Family {
    arch: Arch::Gemma3,
    name: "gemma3",
    gguf_names: &["gemma3", "gemma3_text"],
    hf_model_types: &["gemma3", "gemma3_text"],
    hf_text_config_of: Some("gemma3"),
    hf_head_dim: Some(256),
    gguf_keys,
    hf_keys,
    // Gemma's post_attention_layernorm norms the attention's output; the feed-forward's input
    // norm is pre_feedforward_layernorm.
    hf_tensor_names: &[("post_attention_layernorm", "post_attention_norm")],
    norm_one_plus_weight: true,
    ffn_norm: "ffn_norm",
    layer: LayerKind::Gemma(AttentionOpts {
        qkv_bias: false,
        qk_norm: true,
        ..AttentionOpts::PLAIN
    }),
    chat_template: &CHAT_TEMPLATE,
};

/// Gemma's facts that neither GGUF nor config.json states.
fn fixed_facts(c: &mut ModelConfig) {
    c.qk_norm = true;
    c.embedding_scale = Some((c.hidden_size as f32).sqrt());
    c.activation = Activation::GeluTanh;
}

fn gguf_keys(keys: &GgufKeys, c: &mut ModelConfig) -> Result<()> {
    fixed_facts(c);
    if c.sliding_window.is_some() {
        c.rope_theta_local = Some(keys.f64("rope.freq_base_swa")?.unwrap_or(10000.0) as f32);
        gguf_layer_pattern(keys, c, 6)?;
    }
    // llama.cpp's converter adds the 1 of `x·(1+w)` to the norm weights.
    c.norm_weights_include_one = true;
    // llama.cpp: 1/sqrt(head_dim), except Gemma 3 27B (62 layers) which uses hidden/heads.
    let scalar = if c.n_layers == 62 {
        c.hidden_size / c.n_heads.max(1)
    } else {
        c.head_dim
    };
    c.attention_scale = 1.0 / (scalar as f32).sqrt();
    Ok(())
}

fn hf_keys(keys: &HfKeys, c: &mut ModelConfig) -> Result<()> {
    fixed_facts(c);
    c.sliding_window = Some(keys.uint("sliding_window")?.unwrap_or(4096)).filter(|&w| w > 0);
    if c.sliding_window.is_some() {
        c.sliding_window_pattern = Some(hf_layer_pattern(keys, c.n_layers, 6)?);
    }
    c.rope_theta = keys.float("rope_theta")?.unwrap_or(1e6) as f32;
    c.rope_theta_local = Some(keys.float("rope_local_base_freq")?.unwrap_or(10000.0) as f32);
    c.tie_embeddings = keys.tie_word_embeddings().unwrap_or(true);
    let scalar = keys
        .float("query_pre_attn_scalar")?
        .unwrap_or(c.head_dim as f64);
    c.attention_scale = 1.0 / (scalar as f32).sqrt();
    Ok(())
}

/// Gemma's local/global layout from GGUF as llama.cpp reads `attention.sliding_window_pattern`:
/// one flag per layer (true: sliding window), else a period (every p-th layer global; `default`
/// without the key).
pub(crate) fn gguf_layer_pattern(
    keys: &GgufKeys,
    c: &mut ModelConfig,
    default: usize,
) -> Result<()> {
    let k = "attention.sliding_window_pattern";
    if let Ok(period) = keys.usize(k) {
        c.sliding_window_pattern = Some(period.unwrap_or(default));
        return Ok(());
    }
    let flags = keys.bool_array(k)?.unwrap_or_default();
    if flags.len() != c.n_layers {
        return Err(Error::Format(format!(
            "{}: {} per-layer flags for {} layers",
            keys.key(k),
            flags.len(),
            c.n_layers
        )));
    }
    c.swa_layers = Some(flags);
    Ok(())
}

/// Gemma's local/global layout: `sliding_window_pattern` (Gemma 3: 6), or a `layer_types` list
/// whose "full_attention" entries must fall on every n-th layer; `default` without either.
pub(crate) fn hf_layer_pattern(keys: &HfKeys, n_layers: usize, default: usize) -> Result<usize> {
    if let Some(p) = keys.get("sliding_window_pattern").and_then(Value::as_u64) {
        return Ok(p as usize);
    }
    let Some(types) = keys.get("layer_types").and_then(Value::as_array) else {
        return Ok(default);
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

/// Gemma's turn format (Gemma 2's too); a system message is folded into the first user turn, as
/// Gemma's own template does.
pub(crate) const CHAT_TEMPLATE: BuiltinTemplate = BuiltinTemplate {
    origin: TemplateOrigin::BuiltinGemma,
    source: "{%- if messages[0]['role'] == 'system' -%}{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}{%- set loop_messages = messages[1:] -%}{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}{%- for message in loop_messages -%}{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}{{ message['content'] | trim }}{{ '<end_of_turn>\n' }}{%- endfor -%}{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}",
};

/// Gemma's layer (Gemma 2 runs it without QK-norm): each block's output is normed again before
/// the residual add.
pub(crate) fn layer<B: Backend>(f: &mut Step<B>, l: &LayerWeights<B>, opts: AttentionOpts) {
    f.norm_input(&l.attn_norm);
    f.attention(l, opts);
    f.norm_output(l.post_attn_norm.as_ref());
    f.residual();

    f.norm_input(&l.ffn_norm);
    f.feed_forward(&l.ffn);
    f.norm_output(l.post_ffn_norm.as_ref());
    f.residual();
}
