//! GLM-4 (`glm4`: GLM-4-9B-0414, GLM-4-32B-0414, GLM-Z1): Gemma's sandwich layer (gemma3.rs:
//! each block's output RMS-normed again, `post_attention_norm` and `post_ffw_norm`, before the
//! residual add) with plain RMSNorm weights, SiLU gating (the gate and up projections stored as
//! one `ffn_up` of twice the width, split at load), Q/K/V biases, RoPE over part of each head in
//! adjacent pairs (llama.cpp's NORM type; GLM-4.5's is NEOX), no embedding scale and no QK-norm.
//! Multi-token-prediction blocks at the end are skipped, as for GLM-4.5 (glm4moe.rs, which
//! shares its tokenizer and template). llama.cpp: `src/models/glm4.cpp`. kiln reads GLM-4 from
//! GGUF only.

use super::AttentionOpts;
use super::family::{
    Family, LayerKind, refuse_multimodal_rope, require_whole_heads, skip_nextn_blocks,
};
use crate::backend::RopeLayout;
use crate::error::Result;
use crate::model::Arch;
use crate::model::chat::GLM;
use crate::model::config::{GgufKeys, ModelConfig};

pub(crate) const GLM4: Family = Family {
    arch: Arch::Glm4,
    name: "glm4",
    gguf_names: &["glm4"],
    hf_model_types: &[],
    hf_text_config_of: None,
    hf_head_dim: None,
    gguf_keys,
    // Never called: no config.json model_type reads as GLM-4.
    hf_keys: |_, _| Ok(()),
    hf_tensor_names: &[],
    norm_one_plus_weight: false,
    ffn_norm: "ffn_norm",
    layer: LayerKind::Gemma(AttentionOpts {
        qkv_bias: true,
        qk_norm: false,
        out_bias_and_sinks: false,
    }),
    chat_template: &GLM,
};

fn gguf_keys(keys: &GgufKeys, c: &mut ModelConfig) -> Result<()> {
    // llama.cpp's rope type NORM for glm4 (adjacent pairs), unlike glm4moe's NEOX.
    c.rope_layout = RopeLayout::Interleaved;
    skip_nextn_blocks(keys, c)?;
    refuse_multimodal_rope(keys, "GLM-4.1V, GLM-OCR")?;
    require_whole_heads(keys, c, &["attention.value_length"], "glm4")?;
    Ok(())
}
