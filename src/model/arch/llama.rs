//! Llama family: Llama 2/3.x, SmolLM2, Mistral — and the same pre-norm layer serves the Qwen
//! family with its attention options (qwen.rs). Pre-norm attention and SwiGLU feed-forward, each
//! added to the residual stream. (RoPE layout, Llama 3 frequency scaling and Mistral's sliding
//! window come from the configuration.)

use super::family::{Family, LayerKind};
use super::{AttentionOpts, Step};
use crate::backend::Backend;
use crate::model::chat::CHATML;
use crate::model::weights::LayerWeights;

pub(crate) const LLAMA: Family = Family {
    arch: crate::model::Arch::Llama,
    name: "llama",
    gguf_names: &["llama", "mistral"],
    hf_model_types: &["llama", "mistral"],
    hf_text_config_of: None,
    hf_tensor_names: &[],
    norm_one_plus_weight: false,
    // No biases or QK-norm in the forward pass, even where config.json sets `attention_bias`.
    layer: LayerKind::Llama(AttentionOpts {
        qkv_bias: false,
        qk_norm: false,
    }),
    chat_template: &CHATML,
};

pub(crate) fn layer<B: Backend>(f: &mut Step<B>, l: &LayerWeights<B>, opts: AttentionOpts) {
    f.norm_input(&l.attn_norm);
    f.attention(l, opts);
    f.residual();

    f.norm_input(&l.ffn_norm);
    f.feed_forward(l);
    f.residual();
}
