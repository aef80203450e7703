//! Qwen3-VL (`qwen3vl`: Qwen3-VL 2B–32B; `qwen3vlmoe`: Qwen3-VL-30B-A3B, 235B-A22B), the text
//! halves of Qwen's vision-language models, as llama.cpp's `src/models/qwen3vl.cpp` and
//! `qwen3vlmoe.cpp` build them: Qwen3's and Qwen3 MoE's layers (llama.rs) under interleaved
//! multi-axis RoPE (`rope.dimension_sections`, as Qwen3.5's; text rows turn by one position in
//! every section), and deepstack: an image row brings `n_deepstack_layers` more slices of the
//! hidden size beside its embedding (the vision tower's features from its middle blocks), and
//! slice `i + 1` is added to the residual stream after layer `i` (arch/mod.rs). Token rows bring
//! zeros there, so a text-only prompt runs exactly as Qwen3. kiln reads Qwen3-VL from GGUF only.

use super::AttentionOpts;
use super::family::{Family, LayerKind};
use super::qwen35::partial_rope;
use crate::error::{Error, Result};
use crate::model::Arch;
use crate::model::chat::CHATML;
use crate::model::config::{GgufKeys, ModelConfig};

const QWEN3_ATTENTION: LayerKind = LayerKind::Llama(AttentionOpts {
    qkv_bias: false,
    qk_norm: true,
    ..AttentionOpts::PLAIN
});

pub(crate) const QWEN3_VL: Family = Family {
    arch: Arch::Qwen3Vl,
    name: "qwen3vl",
    gguf_names: &["qwen3vl"],
    hf_model_types: &[],
    hf_text_config_of: None,
    hf_head_dim: None,
    gguf_keys: |keys, c| {
        c.qk_norm = true;
        vision_keys(keys, c)
    },
    // Never called: no config.json model_type reads as Qwen3-VL.
    hf_keys: |_, _| Ok(()),
    hf_tensor_names: &[],
    norm_one_plus_weight: false,
    ffn_norm: "ffn_norm",
    layer: QWEN3_ATTENTION,
    chat_template: &CHATML,
};

pub(crate) const QWEN3_VL_MOE: Family = Family {
    arch: Arch::Qwen3VlMoe,
    name: "qwen3vlmoe",
    gguf_names: &["qwen3vlmoe"],
    hf_model_types: &[],
    hf_text_config_of: None,
    hf_head_dim: None,
    gguf_keys: |keys, c| {
        super::qwen3moe::experts_keys(keys, c, "qwen3vlmoe")?;
        vision_keys(keys, c)
    },
    hf_keys: |_, _| Ok(()),
    hf_tensor_names: &[],
    norm_one_plus_weight: false,
    ffn_norm: "ffn_norm",
    // The feed-forward is the experts because the configuration has them (weights/moe.rs).
    layer: QWEN3_ATTENTION,
    chat_template: &CHATML,
};

/// The multi-axis RoPE sections (required, as llama.cpp requires them) and the deepstack layers.
fn vision_keys(keys: &GgufKeys, c: &mut ModelConfig) -> Result<()> {
    let (rope_dims, sections) = partial_rope(keys, c.head_dim)?;
    if sections.is_none() {
        return Err(Error::Format(format!(
            "{} is missing: Qwen3-VL's multi-axis RoPE needs it",
            keys.key("rope.dimension_sections")
        )));
    }
    (c.rope_dims, c.rope_sections) = (rope_dims, sections);
    let deepstack = keys.usize("n_deepstack_layers")?.unwrap_or(0);
    // Each adds a slice after a layer: more than the layers has no meaning (and would make an
    // image row implausibly wide).
    if deepstack > c.n_layers {
        return Err(Error::Format(format!(
            "{} = {deepstack}, but the model has {} layers",
            keys.key("n_deepstack_layers"),
            c.n_layers
        )));
    }
    c.deepstack_layers = deepstack;
    Ok(())
}
