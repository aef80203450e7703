//! Gemma 3: QK-norm, and each block's output RMS-normed again before the residual add (four norms
//! per layer); embeddings scaled by sqrt(hidden), GELU-tanh gating, RMSNorm by `1 + w`, and local
//! (sliding-window, RoPE base 10000) layers between every sixth global one. Its Hugging Face
//! names and built-in turn format are here too.

use super::family::{Family, LayerKind};
use super::{AttentionOpts, Step};
use crate::backend::Backend;
use crate::model::Arch;
use crate::model::chat::{BuiltinTemplate, TemplateOrigin};
use crate::model::weights::LayerWeights;

pub(crate) const GEMMA3: Family = Family {
    arch: Arch::Gemma3,
    name: "gemma3",
    gguf_names: &["gemma3", "gemma3_text"],
    hf_model_types: &["gemma3", "gemma3_text"],
    hf_text_config_of: Some("gemma3"),
    // Gemma's post_attention_layernorm norms the attention's output; the feed-forward's input
    // norm is pre_feedforward_layernorm.
    hf_tensor_names: &[("post_attention_layernorm", "post_attention_norm")],
    norm_one_plus_weight: true,
    layer: LayerKind::Gemma3,
    chat_template: &CHAT_TEMPLATE,
};

/// Gemma's turn format; a system message is folded into the first user turn, as Gemma's own
/// template does.
const CHAT_TEMPLATE: BuiltinTemplate = BuiltinTemplate {
    origin: TemplateOrigin::BuiltinGemma,
    source: "{%- if messages[0]['role'] == 'system' -%}{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}{%- set loop_messages = messages[1:] -%}{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}{%- for message in loop_messages -%}{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}{{ message['content'] | trim }}{{ '<end_of_turn>\n' }}{%- endfor -%}{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}",
};

pub(crate) fn layer<B: Backend>(f: &mut Step<B>, l: &LayerWeights<B>) {
    let opts = AttentionOpts {
        qkv_bias: false,
        qk_norm: true,
    };
    f.norm_input(&l.attn_norm);
    f.attention(l, opts);
    f.norm_output(l.post_attn_norm.as_ref());
    f.residual();

    f.norm_input(&l.ffn_norm);
    f.feed_forward(l);
    f.norm_output(l.post_ffn_norm.as_ref());
    f.residual();
}
