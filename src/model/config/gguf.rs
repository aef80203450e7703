//! Reading a `ModelConfig` from GGUF metadata. `general.architecture` names the family; the keys
//! every family shares (`{arch}.embedding_length`, `{arch}.block_count`, ...) are read here, then
//! the family's own hook (`Family::gguf_keys`, in arch/<family>.rs) reads the rest.

use super::keys::GgufKeys;
use super::{Activation, ModelConfig, RopeFactorTensors, RopeLayout, RopeScaling, yarn_magnitude};
use crate::error::{Error, Result};
use crate::gguf::Metadata;
use crate::model::arch::family;

impl ModelConfig {
    /// Read from GGUF metadata. `rope` holds the file's RoPE factor tensors;
    /// `output_present` says whether the file has a separate `output.weight`.
    pub fn from_gguf(
        md: &Metadata,
        vocab_from_tensors: Option<usize>,
        rope: RopeFactorTensors,
        output_present: bool,
    ) -> Result<ModelConfig> {
        let arch_name = md
            .str("general.architecture")?
            .ok_or_else(|| Error::Format("metadata has no general.architecture".into()))?;
        let family = family::from_gguf_name(arch_name)?;
        let keys = GgufKeys::new(md, arch_name);

        let hidden_size = keys.need("embedding_length")?;
        let n_heads = keys.need("attention.head_count")?;
        let n_layers = keys.need("block_count")?;
        if n_layers > 1 << 16 {
            return Err(Error::Format(format!(
                "{} = {n_layers} is implausibly large",
                keys.key("block_count")
            )));
        }
        // Per layer in Gemma 4 (its global layers have fewer); its family reads the shapes.
        let kv_heads_per_layer = keys.per_layer("attention.head_count_kv", n_layers)?;
        let n_kv_heads = kv_heads_per_layer
            .as_ref()
            .and_then(|v| v.iter().max().copied())
            .unwrap_or(n_heads);
        let head_dim = match keys.usize("attention.key_length")? {
            Some(d) => d,
            None if n_heads > 0 => hidden_size / n_heads,
            None => 0,
        };
        // The embedding table is the truth about the logits' width; metadata is the fallback for
        // files without tensors (vocabulary-only GGUFs).
        let vocab_size = match (vocab_from_tensors, keys.usize("vocab_size")?) {
            (Some(v), _) | (None, Some(v)) => v,
            (None, None) => md
                .str_array("tokenizer.ggml.tokens")?
                .map_or(0, |tokens| tokens.len()),
        };
        let sliding_window = keys.usize("attention.sliding_window")?.filter(|&w| w > 0);

        let rope_scaling = match (rope.freqs, rope.short, rope.long) {
            (Some(divisors), ..) => Some(RopeScaling::PerFrequency { divisors }),
            (None, Some(short), Some(long)) => {
                let original_context = match keys.usize("rope.scaling.original_context_length")? {
                    Some(n) => n,
                    None => keys.usize("context_length")?.unwrap_or(0),
                };
                let magnitude = keys.f64("rope.scaling.attn_factor")?.unwrap_or(1.0) as f32;
                if !magnitude.is_finite() || original_context == 0 {
                    return Err(Error::Format(format!(
                        "{} = {magnitude}, {} = {original_context}: LongRoPE needs a finite \
                         factor and an original context",
                        keys.key("rope.scaling.attn_factor"),
                        keys.key("rope.scaling.original_context_length"),
                    )));
                }
                Some(RopeScaling::LongRope {
                    short,
                    long,
                    original_context,
                    magnitude,
                })
            }
            (None, Some(_), None) | (None, None, Some(_)) => {
                return Err(Error::Format(
                    "the file has one of rope_factors_short and rope_factors_long but not the \
                     other"
                        .into(),
                ));
            }
            (None, None, None) => match keys.str("rope.scaling.type")? {
                Some("linear") => keys
                    .f64("rope.scaling.factor")?
                    .filter(|&f| f > 0.0 && f != 1.0)
                    .map(|f| RopeScaling::Linear { factor: f as f32 }),
                Some("yarn") => {
                    let factor = keys.f64("rope.scaling.factor")?.unwrap_or(1.0) as f32;
                    let original_context =
                        match keys.usize("rope.scaling.original_context_length")? {
                            Some(n) => n,
                            None => keys.usize("context_length")?.unwrap_or(0),
                        };
                    let attn_factor = keys.f64("rope.scaling.attn_factor")?.unwrap_or(1.0) as f32;
                    if !(factor.is_finite() && factor > 0.0 && attn_factor.is_finite())
                        || original_context == 0
                    {
                        return Err(Error::Format(format!(
                            "{} = {factor}, {} = {original_context}, {} = {attn_factor}: YaRN \
                             needs a positive factor and original context",
                            keys.key("rope.scaling.factor"),
                            keys.key("rope.scaling.original_context_length"),
                            keys.key("rope.scaling.attn_factor"),
                        )));
                    }
                    // llama.cpp reads neither beta from the file (but for Mistral 3): 32 and 1.
                    Some(RopeScaling::Yarn {
                        factor,
                        original_context,
                        beta_fast: 32.0,
                        beta_slow: 1.0,
                        magnitude: yarn_magnitude(factor, attn_factor, 0.0),
                    })
                }
                Some("none") | None => None,
                Some(other) => {
                    return Err(Error::Unsupported(format!(
                        "RoPE scaling '{other}' is not supported"
                    )));
                }
            },
        };

        let mut cfg = ModelConfig {
            arch: family.arch,
            vocab_size,
            hidden_size,
            // Set below or by the family, once its keys say whether the blocks are experts.
            intermediate_size: 0,
            n_layers,
            n_heads,
            n_kv_heads,
            head_dim,
            rms_norm_eps: keys
                .f64("attention.layer_norm_rms_epsilon")?
                .unwrap_or(1e-5) as f32,
            rope_theta: keys.f64("rope.freq_base")?.unwrap_or(10000.0) as f32,
            rope_theta_local: None,
            rope_scaling,
            rope_layout: RopeLayout::Neox,
            sliding_window,
            sliding_window_pattern: None,
            swa_layers: None,
            attention_bias: false,
            qk_norm: false,
            tie_embeddings: !output_present,
            context_length: keys.usize("context_length")?.unwrap_or(2048),
            norm_weights_include_one: false,
            embedding_scale: None,
            attention_scale: 1.0 / (head_dim as f32).sqrt(),
            bidirectional_local_only: false,
            activation: Activation::Silu,
            final_logit_softcap: keys
                .f64("final_logit_softcapping")?
                .filter(|&c| c > 0.0)
                .map(|c| c as f32),
            attn_logit_softcap: None,
            attn_temperature: None,
            nope_layers: Vec::new(),
            rope_dims: family::gguf_rope_dims(&keys, head_dim)?,
            rope_sections: None,
            delta_net: None,
            moe: None,
            nextn_layers: 0,
            local_attention: None,
            first_shared_kv_layer: None,
            ffn_widths: None,
            per_layer_embedding: 0,
            deepstack_layers: 0,
        };
        (family.gguf_keys)(&keys, &mut cfg)?;
        if let Some(per_layer) = kv_heads_per_layer
            && let Some(l) =
                (0..cfg.n_layers).find(|&l| cfg.layer_shape(l).n_kv_heads != per_layer[l])
        {
            return Err(Error::Unsupported(format!(
                "{}: layer {l} has {} KV heads where the others have {}; {} models have one \
                 count for every layer",
                keys.key("attention.head_count_kv"),
                per_layer[l],
                cfg.n_kv_heads,
                family.name
            )));
        }
        // A mixture-of-experts family has set the width itself (its shared expert's, or with
        // none its experts'); every other block has `feed_forward_length`.
        if cfg.moe.is_none() && cfg.intermediate_size == 0 {
            cfg.intermediate_size = keys.need("feed_forward_length")?;
        }
        cfg.validate()?;
        Ok(cfg)
    }
}
