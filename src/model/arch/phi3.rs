//! Phi-3 (`phi3`: Phi-3 and Phi-3.5 mini and medium, Phi-4, Phi-4-mini): Llama's layer
//! (llama.rs) with NEOX RoPE over the leading `rope.dimension_count` dims of each head (Phi-4-mini
//! rotates 96 of 128), the Q/K/V and gate/up projections each stored fused (`attn_qkv`, `ffn_up`
//! of twice the width, gate rows first; weights.rs splits them at load), and, for the 128k-context
//! models, LongRoPE: per-frequency divisors `rope_factors_short` for a session context up to
//! `rope.scaling.original_context_length` and `rope_factors_long` past it, cos and sin scaled by
//! `rope.scaling.attn_factor` (config/gguf.rs reads them; rope.rs chooses by the session's
//! context). The sliding window some files declare is ignored, as llama.cpp ignores it (it
//! disabled Phi's window, ggml-org/llama.cpp#13676). llama.cpp: `src/models/phi3.cpp`. kiln
//! reads Phi-3 from GGUF only.

use super::AttentionOpts;
use super::family::{Family, LayerKind};
use crate::error::{Error, Result};
use crate::model::Arch;
use crate::model::chat::PHI3 as PHI3_TEMPLATE;
use crate::model::config::{GgufKeys, ModelConfig};

pub(crate) const PHI3: Family = Family {
    arch: Arch::Phi3,
    name: "phi3",
    gguf_names: &["phi3"],
    hf_model_types: &[],
    hf_text_config_of: None,
    hf_head_dim: None,
    gguf_keys,
    // Never called: no config.json model_type reads as Phi-3.
    hf_keys: |_, _| Ok(()),
    hf_tensor_names: &[],
    norm_one_plus_weight: false,
    ffn_norm: "ffn_norm",
    layer: LayerKind::Llama(AttentionOpts::PLAIN),
    chat_template: &PHI3_TEMPLATE,
};

fn gguf_keys(keys: &GgufKeys, c: &mut ModelConfig) -> Result<()> {
    if c.n_heads * c.head_dim != c.hidden_size {
        return Err(Error::Unsupported(format!(
            "{} heads of {} differ from the hidden size {} (phi3 needs them equal)",
            c.n_heads, c.head_dim, c.hidden_size
        )));
    }
    c.sliding_window = None;
    if keys.usize("expert_count")?.unwrap_or(0) > 0 {
        return Err(Error::Unsupported(
            "phi3 files with experts are not supported (PhiMoE is its own architecture)".into(),
        ));
    }
    Ok(())
}
