//! Mistral 3 (`mistral3`: Ministral 3, Devstral Small 2, Mistral Small 3.x): Llama's layer
//! (llama.rs) with interleaved RoPE over the whole head, YaRN whose betas and log multiplier the
//! file gives (llama.cpp reads them for this family only), and optional query temperature:
//! queries scaled by `1 + β·ln(1 + ⌊pos / n_ctx_orig⌋)` (`attention.temperature_scale` = β; the
//! floor is YaRN's original context), which only moves positions past that context. The tekken
//! tokenizer and the v7-tekken template come with the file. llama.cpp:
//! `src/models/mistral3.cpp`. Q/K/V and output biases are used where a block has them. kiln
//! reads Mistral 3 from GGUF only, and its dense files (a `mistral3` file with experts is
//! refused).

use super::AttentionOpts;
use super::family::{Family, LayerKind};
use crate::backend::RopeLayout;
use crate::error::{Error, Result};
use crate::model::Arch;
use crate::model::chat::MISTRAL_V7_TEKKEN;
use crate::model::config::{AttnTemperature, GgufKeys, ModelConfig, RopeScaling, yarn_magnitude};

pub(crate) const MISTRAL3: Family = Family {
    arch: Arch::Mistral3,
    name: "mistral3",
    gguf_names: &["mistral3"],
    hf_model_types: &[],
    hf_text_config_of: None,
    hf_head_dim: None,
    gguf_keys,
    // Never called: no config.json model_type reads as Mistral 3.
    hf_keys: |_, _| Ok(()),
    hf_tensor_names: &[],
    norm_one_plus_weight: false,
    ffn_norm: "ffn_norm",
    // Q/K/V and output biases where a block has them (llama.cpp reads them optionally).
    layer: LayerKind::Llama(AttentionOpts {
        qkv_bias: true,
        ..AttentionOpts::PLAIN
    }),
    chat_template: &MISTRAL_V7_TEKKEN,
};

fn gguf_keys(keys: &GgufKeys, c: &mut ModelConfig) -> Result<()> {
    c.rope_layout = RopeLayout::Interleaved;
    if c.rope_dims != c.head_dim {
        return Err(Error::Unsupported(format!(
            "{} = {} differs from the head size {} (mistral3 rotates whole heads)",
            keys.key("rope.dimension_count"),
            c.rope_dims,
            c.head_dim
        )));
    }
    if keys.usize("expert_count")?.unwrap_or(0) > 0 {
        return Err(Error::Unsupported(
            "mistral3 files with experts are not supported yet (dense ones are)".into(),
        ));
    }
    let original = match &mut c.rope_scaling {
        Some(RopeScaling::Yarn {
            factor,
            original_context,
            beta_fast,
            beta_slow,
            magnitude,
        }) => {
            let num = |k: &str, default: f32| -> Result<f32> {
                Ok(keys.f64(k)?.map_or(default, |v| v as f32))
            };
            *beta_fast = num("rope.scaling.yarn_beta_fast", *beta_fast)?;
            *beta_slow = num("rope.scaling.yarn_beta_slow", *beta_slow)?;
            let attn = num("rope.scaling.attn_factor", 1.0)?;
            let log_mul = num("rope.scaling.yarn_log_multiplier", 0.0)?;
            *magnitude = yarn_magnitude(*factor, attn, log_mul);
            Some(*original_context)
        }
        _ => keys.usize("rope.scaling.original_context_length")?,
    };
    let scale = keys.f64("attention.temperature_scale")?.unwrap_or(0.0) as f32;
    if scale != 0.0 {
        let floor = original
            .or(Some(c.context_length))
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                Error::Format(format!(
                    "{} is set, but the file gives no original context for its floor",
                    keys.key("attention.temperature_scale")
                ))
            })?;
        if !scale.is_finite() {
            return Err(Error::Format(format!(
                "{} = {scale} is not a number",
                keys.key("attention.temperature_scale")
            )));
        }
        c.attn_temperature = Some(AttnTemperature { scale, floor });
    }
    Ok(())
}
