//! Llama family: Llama 2/3.x, SmolLM2, Mistral, Mixtral — and the same pre-norm layer serves the
//! Qwen family with its attention options (qwen.rs). Pre-norm attention and SwiGLU feed-forward,
//! each added to the residual stream. (Llama 3's frequency scaling is a key every family shares;
//! GGUF files' interleaved RoPE, Mixtral's experts and Mistral's sliding window are read below.)

use super::family::{Family, LayerKind};
use super::moe::{SharedExpert, gguf_experts};
use super::{AttentionOpts, Step};
use crate::backend::{Backend, RopeLayout};
use crate::error::Result;
use crate::model::chat::CHATML;
use crate::model::config::{GgufKeys, HfKeys, ModelConfig};
use crate::model::weights::LayerWeights;

pub(crate) const LLAMA: Family = Family {
    arch: crate::model::Arch::Llama,
    name: "llama",
    gguf_names: &["llama", "mistral"],
    hf_model_types: &["llama", "mistral"],
    hf_text_config_of: None,
    hf_head_dim: None,
    gguf_keys,
    hf_keys,
    hf_tensor_names: &[],
    norm_one_plus_weight: false,
    ffn_norm: "ffn_norm",
    // No biases or QK-norm in the forward pass, even where config.json sets `attention_bias`.
    layer: LayerKind::Llama(AttentionOpts {
        qkv_bias: false,
        qk_norm: false,
        ..AttentionOpts::PLAIN
    }),
    chat_template: &CHATML,
};

/// llama.cpp's converter permutes Llama's Q and K rows for interleaved (GPT-J style) RoPE.
/// Mixtral is a llama file with `expert_count`: every block's feed-forward is a mixture of experts
/// routed as Qwen3 MoE's (softmax, top-k, renormalized; moe.rs), each expert as wide as
/// `feed_forward_length` (llama.cpp sizes a llama file's experts by it, where the Qwen MoE
/// families split it among the experts used).
fn gguf_keys(keys: &GgufKeys, c: &mut ModelConfig) -> Result<()> {
    c.rope_layout = RopeLayout::Interleaved;
    if let Some(mut m) = gguf_experts(keys, SharedExpert::No)? {
        if let Ok(None) = keys.usize("expert_feed_forward_length") {
            m.expert_ff = keys.need("feed_forward_length")?;
        }
        c.intermediate_size = m.expert_ff;
        c.moe = Some(m);
    }
    Ok(())
}

/// Mistral's sliding window, when config.json sets one.
fn hf_keys(keys: &HfKeys, c: &mut ModelConfig) -> Result<()> {
    c.sliding_window = keys.uint("sliding_window")?.filter(|&w| w > 0);
    Ok(())
}

pub(crate) fn layer<B: Backend>(f: &mut Step<B>, l: &LayerWeights<B>, opts: AttentionOpts) {
    f.norm_input(&l.attn_norm);
    f.attention(l, opts);
    f.residual();

    f.norm_input(&l.ffn_norm);
    f.feed_forward(&l.ffn);
    f.residual();
}
