//! Qwen3 MoE (`qwen3moe`: Qwen3-30B-A3B, Qwen3-Coder-30B-A3B, Qwen3-235B-A22B): Qwen3's layer
//! (pre-norm attention with QK-norm, no biases, NEOX RoPE; llama.rs) whose feed-forward is, in
//! every block, a mixture of experts (moe.rs): softmax over all router logits, the top
//! `expert_used_count`, their weights renormalized to sum 1, SwiGLU experts, no shared expert.
//! llama.cpp (`src/models/qwen3moe.cpp`) always renormalizes and never scales the weights,
//! whatever `expert_weights_norm`/`expert_weights_scale` say, so kiln reads neither. kiln reads
//! Qwen3 MoE from GGUF only.

use super::AttentionOpts;
use super::family::{Family, LayerKind, require_whole_heads};
use super::moe::{SharedExpert, gguf_experts};
use crate::error::{Error, Result};
use crate::model::Arch;
use crate::model::chat::CHATML;
use crate::model::config::{GgufKeys, ModelConfig};

pub(crate) const QWEN3_MOE: Family = Family {
    arch: Arch::Qwen3Moe,
    name: "qwen3moe",
    gguf_names: &["qwen3moe"],
    hf_model_types: &[],
    hf_text_config_of: None,
    hf_head_dim: None,
    gguf_keys: |keys, c| experts_keys(keys, c, "qwen3moe"),
    // Never called: no config.json model_type reads as Qwen3 MoE.
    hf_keys: |_, _| Ok(()),
    hf_tensor_names: &[],
    norm_one_plus_weight: false,
    ffn_norm: "ffn_norm",
    // The feed-forward is the experts because the configuration has them (weights/moe.rs).
    layer: LayerKind::Llama(AttentionOpts {
        qkv_bias: false,
        qk_norm: true,
        ..AttentionOpts::PLAIN
    }),
    chat_template: &CHATML,
};

/// The experts (required: llama.cpp refuses a `family` file without them), and the checks
/// llama.cpp makes on the head shapes (Qwen3-VL MoE's too: qwen3vl.rs).
pub(super) fn experts_keys(keys: &GgufKeys, c: &mut ModelConfig, family: &str) -> Result<()> {
    c.qk_norm = true;
    // llama.cpp asserts that values, keys and RoPE all span the whole head.
    require_whole_heads(
        keys,
        c,
        &["attention.value_length", "rope.dimension_count"],
        family,
    )?;
    let m = gguf_experts(keys, SharedExpert::No)?.ok_or_else(|| {
        Error::Format(format!(
            "{} must be positive: every {family} block is a mixture of experts",
            keys.key("expert_count")
        ))
    })?;
    // No dense part: the dense scratch, unused, stays as small as one expert.
    c.intermediate_size = m.expert_ff;
    c.moe = Some(m);
    Ok(())
}
