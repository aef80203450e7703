//! gpt-oss (`gpt-oss`: OpenAI's gpt-oss-20b and gpt-oss-120b): Llama's pre-norm layer (llama.rs)
//! with biases on the Q, K, V and output projections, and a learned sink logit per query head that
//! joins each softmax's denominator (a key whose value is zero). Sliding-window (128) and full
//! attention alternate, the windowed layers first (pattern 2). RoPE is NEOX with YaRN (factor 32
//! from 4096 tokens). Every block's feed-forward is a mixture of experts (moe.rs): the router
//! (biased) picks the top k, weighted by the softmax over their logits; each expert's gate, up and
//! down projections carry biases, and its activation is the clamped SwiGLU
//! (`GateActivation::SwigluOai`). The norm before the experts is stored as `post_attention_norm`.
//! llama.cpp (`src/models/openai-moe.cpp`) requires every bias and the sinks, and reads neither
//! `expert_weights_scale` nor YaRN's betas (32 and 1). kiln reads gpt-oss from GGUF only.

use super::AttentionOpts;
use super::family::{Family, LayerKind};
use super::gemma3::gguf_layer_pattern;
use super::moe::{SharedExpert, gguf_experts};
use crate::backend::GateActivation;
use crate::error::{Error, Result};
use crate::model::Arch;
use crate::model::chat::HARMONY;
use crate::model::config::{GgufKeys, ModelConfig};

pub(crate) const GPT_OSS: Family = Family {
    arch: Arch::GptOss,
    name: "gpt-oss",
    gguf_names: &["gpt-oss"],
    hf_model_types: &[],
    hf_text_config_of: None,
    hf_head_dim: None,
    gguf_keys,
    // Never called: no config.json model_type reads as gpt-oss.
    hf_keys: |_, _| Ok(()),
    hf_tensor_names: &[],
    norm_one_plus_weight: false,
    ffn_norm: "post_attention_norm",
    layer: LayerKind::Llama(AttentionOpts {
        qkv_bias: true,
        qk_norm: false,
        out_bias_and_sinks: true,
    }),
    chat_template: &HARMONY,
};

/// llama.cpp's sliding-window period for gpt-oss: even layers windowed, odd ones global.
const PATTERN: usize = 2;

fn gguf_keys(keys: &GgufKeys, c: &mut ModelConfig) -> Result<()> {
    c.attention_bias = true;
    if c.sliding_window.is_none() {
        return Err(keys.missing("attention.sliding_window"));
    }
    gguf_layer_pattern(keys, c, PATTERN)?;
    // llama.cpp would give windowed layers their own base, with the same scaling; kiln's local
    // base (Gemma 3's) drops the scaling, so a file that sets one is refused rather than misrun.
    if let Some(b) = keys.f64("rope.freq_base_swa")?
        && b as f32 != c.rope_theta
    {
        return Err(Error::Unsupported(format!(
            "{} = {b} differs from the global RoPE base {} (kiln runs gpt-oss with one base)",
            keys.key("rope.freq_base_swa"),
            c.rope_theta
        )));
    }
    let mut m = gguf_experts(keys, SharedExpert::No)?.ok_or_else(|| {
        Error::Format(format!(
            "{} must be positive: every gpt-oss block is a mixture of experts",
            keys.key("expert_count")
        ))
    })?;
    m.activation = GateActivation::SwigluOai;
    m.biases = true;
    c.intermediate_size = m.expert_ff;
    c.moe = Some(m);
    Ok(())
}
