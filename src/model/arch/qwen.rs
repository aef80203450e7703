//! Qwen family: Qwen2/2.5 (biases on the Q, K and V projections) and Qwen3 (QK-norm instead), both
//! running the Llama layer (llama.rs) with these attention options.

use super::AttentionOpts;
use super::family::{Family, LayerKind};
use crate::model::Arch;
use crate::model::chat::CHATML;

pub(crate) const QWEN2: Family = Family {
    arch: Arch::Qwen2,
    name: "qwen2",
    gguf_names: &["qwen2"],
    hf_model_types: &["qwen2"],
    hf_text_config_of: None,
    hf_tensor_names: &[],
    norm_one_plus_weight: false,
    layer: LayerKind::Llama(AttentionOpts {
        qkv_bias: true,
        qk_norm: false,
    }),
    chat_template: &CHATML,
};

pub(crate) const QWEN3: Family = Family {
    arch: Arch::Qwen3,
    name: "qwen3",
    gguf_names: &["qwen3"],
    hf_model_types: &["qwen3"],
    hf_text_config_of: None,
    hf_tensor_names: &[],
    norm_one_plus_weight: false,
    layer: LayerKind::Llama(AttentionOpts {
        qkv_bias: false,
        qk_norm: true,
    }),
    chat_template: &CHATML,
};
