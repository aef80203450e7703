//! What kiln knows about an architecture family besides its layer code: the names files give it,
//! its own GGUF and config.json keys, its layer, and its quirks. Each family file (llama.rs,
//! smollm3.rs, qwen.rs, qwen3moe.rs, qwen3vl.rs, gemma2.rs, gemma3.rs, qwen35.rs, gpt_oss.rs,
//! mistral3.rs, glm4moe.rs, phi3.rs, glm4.rs, gemma4.rs) fills in a `Family`; `FAMILIES` in
//! arch/mod.rs lists them, and the lookups here search that list.

use super::{AttentionOpts, FAMILIES};
use crate::error::{Error, Result};
use crate::model::chat::BuiltinTemplate;
use crate::model::config::{Arch, GgufKeys, HfKeys, ModelConfig};

/// One architecture family, as its file describes it.
pub(crate) struct Family {
    pub arch: Arch,
    /// The name `kiln info` prints (and `Arch` serializes to).
    pub name: &'static str,
    /// GGUF `general.architecture` values read as this family.
    pub gguf_names: &'static [&'static str],
    /// config.json `model_type` values read as this family (none: kiln reads it from GGUF only).
    pub hf_model_types: &'static [&'static str],
    /// A multimodal config.json `model_type` that nests this family's settings in `text_config`.
    pub hf_text_config_of: Option<&'static str>,
    /// config.json's `head_dim` when it has none (None: hidden_size / heads).
    pub hf_head_dim: Option<usize>,
    /// The family's own GGUF keys, read into a configuration that config/gguf.rs filled from the
    /// keys every family shares.
    pub gguf_keys: fn(&GgufKeys, &mut ModelConfig) -> Result<()>,
    /// The family's own config.json settings, likewise after config/hf.rs.
    pub hf_keys: fn(&HfKeys, &mut ModelConfig) -> Result<()>,
    /// Hugging Face module names that this family maps to another GGUF name than the shared table
    /// in loader.rs does, as `(module, GGUF part)`.
    pub hf_tensor_names: &'static [(&'static str, &'static str)],
    /// RMSNorm scales by `1 + w` (Gemma): Hugging Face checkpoints store `w`, so the 1 is added
    /// at load; GGUF files already hold `1 + w`.
    pub norm_one_plus_weight: bool,
    /// The GGUF name of the norm before the feed-forward block (gpt-oss: `post_attention_norm`).
    pub ffn_norm: &'static str,
    /// The layer the forward pass runs, and so the weights each block loads.
    pub layer: LayerKind,
    /// The prompt format for a model without a chat template of its own.
    pub chat_template: &'static BuiltinTemplate,
}

/// The layer a family runs: the file that composes it from `Step`'s building blocks, and the
/// weights each block loads (weights.rs).
#[derive(Clone, Copy)]
pub(crate) enum LayerKind {
    /// llama.rs: pre-norm attention with these options, then a gated feed-forward, or a mixture
    /// of experts where the configuration has experts (Qwen3 MoE).
    Llama(AttentionOpts),
    /// gemma3.rs: pre-norm attention with these options (Gemma 3: QK-norm; Gemma 2: none; GLM-4:
    /// Q/K/V biases), each block's output normed again before the residual add
    /// (`post_attention_norm`, `post_ffw_norm`).
    Gemma(AttentionOpts),
    /// gemma4.rs: Gemma's sandwich layer with value norm, per-layer head shapes, shared KV
    /// caches and an output scale.
    Gemma4,
    /// qwen35.rs: a Gated DeltaNet or gated attention, then a dense or expert feed-forward
    /// (weights/qwen35.rs).
    Qwen35,
}

impl Arch {
    /// This architecture's family (every `Arch` has one in `FAMILIES`).
    pub(crate) fn family(self) -> &'static Family {
        FAMILIES
            .iter()
            .copied()
            .find(|f| f.arch == self)
            .expect("every Arch is listed in arch::FAMILIES")
    }
}

/// Drop the multi-token-prediction blocks (`nextn_predict_layers`) that end `block_count`
/// (Qwen3.5, GLM-4.5): kiln neither loads nor runs them.
pub(crate) fn skip_nextn_blocks(keys: &GgufKeys, c: &mut ModelConfig) -> Result<()> {
    let block_count = c.n_layers;
    let nextn_layers = keys.usize("nextn_predict_layers")?.unwrap_or(0);
    if nextn_layers >= block_count {
        return Err(Error::Format(format!(
            "{} = {nextn_layers} leaves none of the {block_count} blocks",
            keys.key("nextn_predict_layers")
        )));
    }
    c.n_layers = block_count - nextn_layers;
    c.nextn_layers = nextn_layers;
    Ok(())
}

/// How many leading dimensions of each head RoPE rotates (`rope.dimension_count`; all without),
/// for every family (config/gguf.rs; GLM-4.5 and Phi-4-mini rotate part of each head).
pub(crate) fn gguf_rope_dims(keys: &GgufKeys, head_dim: usize) -> Result<usize> {
    let rope_dims = keys.usize("rope.dimension_count")?.unwrap_or(head_dim);
    if rope_dims == 0 || rope_dims > head_dim || !rope_dims.is_multiple_of(2) {
        return Err(Error::Format(format!(
            "{} = {rope_dims} must be even and within the head size {head_dim}",
            keys.key("rope.dimension_count")
        )));
    }
    Ok(rope_dims)
}

/// Refuse a file whose `keys` (`attention.value_length`, `rope.dimension_count`) give another
/// size than the head: llama.cpp asserts them equal for `family`.
pub(crate) fn require_whole_heads(
    keys: &GgufKeys,
    c: &ModelConfig,
    names: &[&str],
    family: &str,
) -> Result<()> {
    for &k in names {
        if let Some(v) = keys.usize(k)?
            && v != c.head_dim
        {
            return Err(Error::Unsupported(format!(
                "{} = {v} differs from the head size {} ({family} needs them equal)",
                keys.key(k),
                c.head_dim
            )));
        }
    }
    Ok(())
}

/// Refuse nonzero `rope.dimension_sections`: multimodal RoPE, which the vision siblings named by
/// `models` use and kiln does not run.
pub(crate) fn refuse_multimodal_rope(keys: &GgufKeys, models: &str) -> Result<()> {
    if let Some(s) = keys.i64_array("rope.dimension_sections")?
        && s.iter().any(|&x| x != 0)
    {
        return Err(Error::Unsupported(format!(
            "{} = {s:?}: multimodal RoPE ({models}) is not supported (the text models are)",
            keys.key("rope.dimension_sections")
        )));
    }
    Ok(())
}

/// The family of GGUF `general.architecture` = `name`.
pub(crate) fn from_gguf_name(name: &str) -> Result<&'static Family> {
    FAMILIES
        .iter()
        .copied()
        .find(|f| f.gguf_names.contains(&name))
        .ok_or_else(|| unsupported(name))
}

/// The family of config.json `model_type`.
pub(crate) fn from_hf_model_type(model_type: &str) -> Result<&'static Family> {
    FAMILIES
        .iter()
        .copied()
        .find(|f| f.hf_model_types.contains(&model_type))
        .ok_or_else(|| unsupported(model_type))
}

/// Whether a config.json whose `model_type` is `model_type` keeps the language model's settings
/// in `text_config` (a multimodal checkpoint).
pub(crate) fn hf_nests_text_config(model_type: &str) -> bool {
    FAMILIES
        .iter()
        .any(|f| f.hf_text_config_of == Some(model_type))
}

/// The error for an architecture no family claims. (A new family adds its name to this list.)
fn unsupported(name: &str) -> Error {
    Error::Unsupported(format!(
        "architecture '{name}' is not supported (kiln runs llama, mistral, smollm3, qwen2, qwen3, \
         gemma2, gemma3, and qwen3moe, qwen3vl, qwen3vlmoe, qwen35, qwen35moe, gpt-oss, mistral3, \
         glm4, glm4moe, phi3 and gemma4 from GGUF)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_found_by_its_arch_and_names() {
        for f in FAMILIES {
            let same_arch = FAMILIES.iter().filter(|g| g.arch == f.arch).count();
            assert_eq!(same_arch, 1, "{} listed {same_arch} times", f.name);
            assert_eq!(f.arch.name(), f.name);
            // `kiln info --format json` prints the serialized Arch as the config's architecture.
            assert_eq!(
                serde_json::to_value(f.arch).ok(),
                Some(serde_json::Value::from(f.name))
            );
            for &n in f.gguf_names {
                assert_eq!(from_gguf_name(n).ok().map(|g| g.arch), Some(f.arch), "{n}");
            }
            for &t in f.hf_model_types {
                assert_eq!(
                    from_hf_model_type(t).ok().map(|g| g.arch),
                    Some(f.arch),
                    "{t}"
                );
            }
            assert!(
                unsupported("x").to_string().contains(f.name),
                "the unsupported-architecture message should name {}",
                f.name
            );
        }
    }
}
