//! GLM-4.5 / 4.6 / 4.7 MoE (`glm4moe`: GLM-4.5-Air, GLM-4.6, Solar Open): Llama's layer
//! (llama.rs) with biased Q/K/V, optional QK-norm (the largest model has it), NEOX RoPE over part
//! of each head, and a feed-forward that is dense in the first `leading_dense_block_count`
//! blocks and a mixture of experts after: sigmoid router scores, a per-expert selection bias
//! (`exp_probs_b`) that moves the choice but not the weights, the chosen scores renormalized
//! (`expert_weights_norm`) and scaled (`expert_weights_scale`), plus an ungated shared expert.
//! The norm before the feed-forward is `post_attention_norm`. The multi-token-prediction block at
//! the end (`nextn_predict_layers`) is one more such layer, which drafts with `--spec-type
//! draft-mtp` (arch/mtp.rs) and is skipped otherwise. llama.cpp: `src/models/glm4-moe.cpp`.
//! kiln reads GLM-4.5 from GGUF only.

use super::AttentionOpts;
use super::family::{
    Family, LayerKind, refuse_multimodal_rope, require_whole_heads, skip_nextn_blocks,
};
use super::moe::{SharedExpert, gguf_experts};
use crate::backend::ExpertGating;
use crate::error::{Error, Result};
use crate::model::Arch;
use crate::model::chat::GLM;
use crate::model::config::{GgufKeys, ModelConfig};

pub(crate) const GLM4_MOE: Family = Family {
    arch: Arch::Glm4Moe,
    name: "glm4moe",
    gguf_names: &["glm4moe"],
    hf_model_types: &[],
    hf_text_config_of: None,
    hf_head_dim: None,
    gguf_keys,
    // Never called: no config.json model_type reads as GLM-4.5.
    hf_keys: |_, _| Ok(()),
    hf_tensor_names: &[],
    norm_one_plus_weight: false,
    ffn_norm: "post_attention_norm",
    layer: LayerKind::Llama(AttentionOpts {
        qkv_bias: true,
        qk_norm: true,
        out_bias_and_sinks: false,
    }),
    chat_template: &GLM,
};

fn gguf_keys(keys: &GgufKeys, c: &mut ModelConfig) -> Result<()> {
    skip_nextn_blocks(keys, c)?;
    refuse_multimodal_rope(keys, "GLM-4.5V")?;
    require_whole_heads(keys, c, &["attention.value_length"], "glm4moe")?;
    let mut m = gguf_experts(keys, SharedExpert::No)?.ok_or_else(|| {
        Error::Format(format!(
            "{} must be positive: glm4moe blocks after the leading dense ones are experts",
            keys.key("expert_count")
        ))
    })?;
    let n_shared = keys.need("expert_shared_count")?;
    if n_shared > 0 {
        m.shared_ff = Some(m.expert_ff.checked_mul(n_shared).ok_or_else(|| {
            Error::Format(format!(
                "{} = {n_shared} is too large",
                keys.key("expert_shared_count")
            ))
        })?);
        m.shared_gated = false;
    }
    m.first_moe_layer = keys.usize("leading_dense_block_count")?.unwrap_or(0);
    if m.first_moe_layer > c.n_layers {
        return Err(Error::Format(format!(
            "{} = {} is more than the {} blocks",
            keys.key("leading_dense_block_count"),
            m.first_moe_layer,
            c.n_layers
        )));
    }
    // llama.cpp's gating codes: 1 softmax, 2 sigmoid; glm4moe takes a missing one as sigmoid.
    m.gating = match keys.usize("expert_gating_func")? {
        None | Some(0) | Some(2) => ExpertGating::Sigmoid,
        Some(1) => ExpertGating::Softmax,
        Some(other) => {
            return Err(Error::Unsupported(format!(
                "{} = {other} (kiln routes by softmax, 1, or sigmoid, 2)",
                keys.key("expert_gating_func")
            )));
        }
    };
    m.selection_bias = true;
    m.normalize = keys.bool("expert_weights_norm")?.unwrap_or(false);
    // llama.cpp scales by neither 0 (the key's absence) nor 1.
    m.weights_scale = match keys.f64("expert_weights_scale")? {
        Some(s) if !s.is_finite() => {
            return Err(Error::Format(format!(
                "{} = {s} is not a number",
                keys.key("expert_weights_scale")
            )));
        }
        Some(s) if s != 0.0 => s as f32,
        _ => 1.0,
    };
    c.intermediate_size = if m.first_moe_layer > 0 {
        keys.need("feed_forward_length")?
    } else {
        m.expert_ff
    };
    c.moe = Some(m);
    Ok(())
}
