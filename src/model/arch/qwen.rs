//! Qwen family: Qwen2/2.5 (biases on the Q, K and V projections) and Qwen3 (QK-norm instead), both
//! running the Llama layer (llama.rs) with these attention options.

use super::AttentionOpts;
use super::family::{Family, LayerKind};
use crate::error::Result;
use crate::model::Arch;
use crate::model::chat::CHATML;
use crate::model::config::{HfKeys, ModelConfig};

pub(crate) const QWEN2: Family = Family {
    arch: Arch::Qwen2,
    name: "qwen2",
    gguf_names: &["qwen2"],
    hf_model_types: &["qwen2"],
    hf_text_config_of: None,
    hf_head_dim: None,
    gguf_keys: |_, c| {
        c.attention_bias = true;
        Ok(())
    },
    hf_keys: qwen2_hf_keys,
    hf_tensor_names: &[],
    norm_one_plus_weight: false,
    ffn_norm: "ffn_norm",
    layer: LayerKind::Llama(AttentionOpts {
        qkv_bias: true,
        qk_norm: false,
        ..AttentionOpts::PLAIN
    }),
    chat_template: &CHATML,
};

pub(crate) const QWEN3: Family = Family {
    arch: Arch::Qwen3,
    name: "qwen3",
    gguf_names: &["qwen3"],
    hf_model_types: &["qwen3"],
    hf_text_config_of: None,
    hf_head_dim: Some(128),
    gguf_keys: |_, c| {
        c.qk_norm = true;
        Ok(())
    },
    // Qwen3's config.json carries a `sliding_window` it does not use.
    hf_keys: |_, c| {
        c.qk_norm = true;
        Ok(())
    },
    hf_tensor_names: &[],
    norm_one_plus_weight: false,
    ffn_norm: "ffn_norm",
    layer: LayerKind::Llama(AttentionOpts {
        qkv_bias: false,
        qk_norm: true,
        ..AttentionOpts::PLAIN
    }),
    chat_template: &CHATML,
};

/// Qwen2 always has Q/K/V biases; its sliding window applies only with `use_sliding_window`.
fn qwen2_hf_keys(keys: &HfKeys, c: &mut ModelConfig) -> Result<()> {
    c.attention_bias = true;
    if keys.flag("use_sliding_window") == Some(true) {
        c.sliding_window = keys.uint("sliding_window")?.filter(|&w| w > 0);
    }
    Ok(())
}
