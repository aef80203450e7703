//! SmolLM3 (`smollm3`: SmolLM3-3B): Llama's layer (llama.rs: pre-norm attention, SwiGLU, Q/K rows
//! permuted by llama.cpp's converter for interleaved RoPE) with no RoPE in every fourth layer. In
//! GGUF the NoPE layers are a fact of the architecture, not a key: llama.cpp
//! (`src/models/smollm3.cpp`) rotates layer il only when (il + 1) % 4 != 0 (its
//! `n_no_rope_layer_step`, which it reads from no key). config.json states them: `no_rope_layers`
//! (1: RoPE, 0: none, per layer) or `no_rope_layer_interval`.

use serde_json::Value;

use super::AttentionOpts;
use super::family::{Family, LayerKind};
use crate::backend::RopeLayout;
use crate::error::{Error, Result};
use crate::model::Arch;
use crate::model::chat::CHATML;
use crate::model::config::{GgufKeys, HfKeys, ModelConfig};

pub(crate) const SMOLLM3: Family = Family {
    arch: Arch::SmolLM3,
    name: "smollm3",
    gguf_names: &["smollm3"],
    hf_model_types: &["smollm3"],
    hf_text_config_of: None,
    hf_head_dim: None,
    gguf_keys,
    hf_keys,
    hf_tensor_names: &[],
    norm_one_plus_weight: false,
    ffn_norm: "ffn_norm",
    layer: LayerKind::Llama(AttentionOpts {
        qkv_bias: false,
        qk_norm: false,
        ..AttentionOpts::PLAIN
    }),
    chat_template: &CHATML,
};

/// The step of llama.cpp's NoPE layers (and config.json's default interval).
const NO_ROPE_STEP: usize = 4;

/// Layers il with (il + 1) % step == 0 have no RoPE.
fn every(step: usize, n_layers: usize) -> Vec<bool> {
    (0..n_layers)
        .map(|il| step > 0 && (il + 1) % step == 0)
        .collect()
}

fn gguf_keys(keys: &GgufKeys, c: &mut ModelConfig) -> Result<()> {
    c.rope_layout = RopeLayout::Interleaved;
    // llama.cpp asserts that RoPE spans the whole head.
    if let Some(v) = keys.usize("rope.dimension_count")?
        && v != c.head_dim
    {
        return Err(Error::Unsupported(format!(
            "{} = {v} differs from the head size {} (smollm3 needs them equal)",
            keys.key("rope.dimension_count"),
            c.head_dim
        )));
    }
    c.nope_layers = every(NO_ROPE_STEP, c.n_layers);
    Ok(())
}

fn hf_keys(keys: &HfKeys, c: &mut ModelConfig) -> Result<()> {
    c.nope_layers = match keys.get("no_rope_layers") {
        Some(Value::Array(flags)) => {
            if flags.len() < c.n_layers {
                return Err(Error::Format(format!(
                    "config.json: no_rope_layers has {} entries for {} layers",
                    flags.len(),
                    c.n_layers
                )));
            }
            flags
                .iter()
                .take(c.n_layers)
                .map(|f| {
                    f.as_u64().map(|use_rope| use_rope == 0).ok_or_else(|| {
                        Error::Format("config.json: no_rope_layers should hold 0s and 1s".into())
                    })
                })
                .collect::<Result<_>>()?
        }
        _ => {
            let step = keys.uint("no_rope_layer_interval")?.unwrap_or(NO_ROPE_STEP);
            every(step, c.n_layers)
        }
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fourth_layer_has_no_rope() {
        assert_eq!(
            every(4, 9),
            [false, false, false, true, false, false, false, true, false]
        );
        assert!(every(0, 3).iter().all(|&n| !n));
    }
}
