//! Reading a `ModelConfig` from GGUF metadata: `general.architecture` names the family, whose
//! keys live under `{arch}.` (`llama.block_count`, ...).

use super::{Activation, Arch, DeltaNetConfig, ModelConfig, MoeConfig, RopeLayout, RopeScaling};
use crate::error::{Error, Result};
use crate::gguf::Metadata;
use crate::model::arch::family;

impl ModelConfig {
    /// Read from GGUF metadata. `rope_freqs` is the `rope_freqs.weight` tensor when the file has one;
    /// `output_present` says whether the file has a separate `output.weight`.
    pub fn from_gguf(
        md: &Metadata,
        vocab_from_tensors: Option<usize>,
        rope_freqs: Option<Vec<f32>>,
        output_present: bool,
    ) -> Result<ModelConfig> {
        let arch_name = md
            .str("general.architecture")?
            .ok_or_else(|| Error::Format("metadata has no general.architecture".into()))?;
        let arch = family::from_gguf_name(arch_name)?.arch;
        let key = |k: &str| format!("{arch_name}.{k}");
        let need = |k: &str| -> Result<usize> {
            md.usize(&key(k))?
                .ok_or_else(|| Error::Format(format!("metadata has no {}", key(k))))
        };

        let hidden_size = need("embedding_length")?;
        let n_heads = need("attention.head_count")?;
        let n_kv_heads = md
            .usize(&key("attention.head_count_kv"))?
            .unwrap_or(n_heads);
        let head_dim = match md.usize(&key("attention.key_length"))? {
            Some(d) => d,
            None if n_heads > 0 => hidden_size / n_heads,
            None => 0,
        };
        // The embedding table is the truth about the logits' width; metadata is the fallback for
        // files without tensors (vocabulary-only GGUFs).
        let vocab_size = match (vocab_from_tensors, md.usize(&key("vocab_size"))?) {
            (Some(v), _) | (None, Some(v)) => v,
            (None, None) => md
                .str_array("tokenizer.ggml.tokens")?
                .map_or(0, |tokens| tokens.len()),
        };
        let sliding_window = md
            .usize(&key("attention.sliding_window"))?
            .filter(|&w| w > 0);
        let gemma = arch == Arch::Gemma3;

        let rope_scaling = match rope_freqs {
            Some(divisors) => Some(RopeScaling::PerFrequency { divisors }),
            None => match md.str(&key("rope.scaling.type"))? {
                Some("linear") => md
                    .f64(&key("rope.scaling.factor"))?
                    .filter(|&f| f > 0.0 && f != 1.0)
                    .map(|f| RopeScaling::Linear { factor: f as f32 }),
                Some("none") | None => None,
                Some(other) => {
                    return Err(Error::Unsupported(format!(
                        "RoPE scaling '{other}' is not supported"
                    )));
                }
            },
        };

        let attention_scale = if gemma {
            // llama.cpp: 1/sqrt(head_dim), except Gemma 3 27B (62 layers) which uses hidden/heads.
            let n_layers = need("block_count")?;
            let scalar = if n_layers == 62 {
                hidden_size / n_heads.max(1)
            } else {
                head_dim
            };
            1.0 / (scalar as f32).sqrt()
        } else {
            1.0 / (head_dim as f32).sqrt()
        };

        let block_count = need("block_count")?;
        let hybrid = if arch.is_hybrid() {
            Some(hybrid_from_gguf(md, arch_name, block_count, head_dim)?)
        } else {
            None
        };
        let intermediate_size = match &hybrid {
            // The shared expert is an MoE block's dense part.
            Some(h) => match &h.moe {
                Some(m) => m.shared_ff,
                None => need("feed_forward_length")?,
            },
            None => need("feed_forward_length")?,
        };
        let nextn_layers = hybrid.as_ref().map_or(0, |h| h.nextn_layers);

        let cfg = ModelConfig {
            arch,
            vocab_size,
            hidden_size,
            intermediate_size,
            n_layers: block_count - nextn_layers,
            n_heads,
            n_kv_heads,
            head_dim,
            rms_norm_eps: md
                .f64(&key("attention.layer_norm_rms_epsilon"))?
                .unwrap_or(1e-5) as f32,
            rope_theta: md.f64(&key("rope.freq_base"))?.unwrap_or(10000.0) as f32,
            rope_theta_local: if gemma && sliding_window.is_some() {
                Some(md.f64(&key("rope.freq_base_swa"))?.unwrap_or(10000.0) as f32)
            } else {
                None
            },
            rope_scaling,
            rope_layout: if arch == Arch::Llama {
                RopeLayout::Interleaved
            } else {
                RopeLayout::Neox
            },
            sliding_window,
            sliding_window_pattern: if gemma && sliding_window.is_some() {
                Some(
                    md.usize(&key("attention.sliding_window_pattern"))?
                        .unwrap_or(6),
                )
            } else {
                None
            },
            attention_bias: arch == Arch::Qwen2,
            qk_norm: matches!(
                arch,
                Arch::Qwen3 | Arch::Gemma3 | Arch::Qwen35 | Arch::Qwen35Moe
            ),
            tie_embeddings: !output_present,
            context_length: md.usize(&key("context_length"))?.unwrap_or(2048),
            norm_weights_include_one: gemma,
            embedding_scale: gemma.then(|| (hidden_size as f32).sqrt()),
            attention_scale,
            activation: if gemma {
                Activation::GeluTanh
            } else {
                Activation::Silu
            },
            final_logit_softcap: md
                .f64(&key("final_logit_softcapping"))?
                .filter(|&c| c > 0.0)
                .map(|c| c as f32),
            rope_dims: hybrid.as_ref().map_or(head_dim, |h| h.rope_dims),
            rope_sections: hybrid.as_ref().and_then(|h| h.rope_sections),
            moe: hybrid.as_ref().and_then(|h| h.moe.clone()),
            delta_net: hybrid.map(|h| h.delta_net),
            nextn_layers,
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

/// What a Qwen3.5 GGUF adds to the common keys.
struct HybridKeys {
    delta_net: DeltaNetConfig,
    moe: Option<MoeConfig>,
    rope_dims: usize,
    rope_sections: Option<[usize; 4]>,
    nextn_layers: usize,
}

/// Read Qwen3.5's keys (`{arch}.ssm.*`, the layer schedule, experts, partial IMRoPE), naming the
/// key in every error. `block_count` includes any multi-token-prediction blocks.
fn hybrid_from_gguf(
    md: &Metadata,
    arch: &str,
    block_count: usize,
    head_dim: usize,
) -> Result<HybridKeys> {
    let key = |k: &str| format!("{arch}.{k}");
    let need = |k: &str| -> Result<usize> {
        md.usize(&key(k))?
            .ok_or_else(|| Error::Format(format!("metadata has no {}", key(k))))
    };
    let bad = |m: String| Err(Error::Format(m));

    let nextn_layers = md.usize(&key("nextn_predict_layers"))?.unwrap_or(0);
    if nextn_layers >= block_count {
        return bad(format!(
            "{} = {nextn_layers} leaves none of the {block_count} blocks",
            key("nextn_predict_layers")
        ));
    }
    let n_layers = block_count - nextn_layers;
    let recurrent = match md.bool_array(&key("attention.recurrent_layers"))? {
        Some(flags) => {
            if flags.len() != block_count {
                return bad(format!(
                    "{} has {} entries for {block_count} blocks",
                    key("attention.recurrent_layers"),
                    flags.len()
                ));
            }
            flags[..n_layers].to_vec()
        }
        None => {
            let interval = md.usize(&key("full_attention_interval"))?.unwrap_or(4);
            if interval == 0 {
                return bad(format!(
                    "{} must be at least 1",
                    key("full_attention_interval")
                ));
            }
            (0..n_layers).map(|i| (i + 1) % interval != 0).collect()
        }
    };

    let head = need("ssm.state_size")?;
    let n_k_heads = need("ssm.group_count")?;
    let n_v_heads = need("ssm.time_step_rank")?;
    let inner = need("ssm.inner_size")?;
    let conv_kernel = need("ssm.conv_kernel")?;
    if head == 0 || n_k_heads == 0 || n_v_heads == 0 {
        return bad(format!(
            "{}, {} and {} must be positive",
            key("ssm.state_size"),
            key("ssm.group_count"),
            key("ssm.time_step_rank")
        ));
    }
    if !n_v_heads.is_multiple_of(n_k_heads) {
        return bad(format!(
            "{} value heads ({}) are not a multiple of the {} key heads ({})",
            n_v_heads,
            key("ssm.time_step_rank"),
            n_k_heads,
            key("ssm.group_count")
        ));
    }
    if inner != n_v_heads.saturating_mul(head) {
        return bad(format!(
            "{} = {inner} is not value heads × head size = {n_v_heads} × {head}",
            key("ssm.inner_size")
        ));
    }
    if !(1..=64).contains(&conv_kernel) {
        return bad(format!(
            "{} = {conv_kernel} is outside 1..=64",
            key("ssm.conv_kernel")
        ));
    }
    for (name, v) in [("ssm.state_size", head), ("ssm.time_step_rank", n_v_heads)] {
        if v > 1 << 16 {
            return bad(format!("{} = {v} is implausibly large", key(name)));
        }
    }

    let rope_dims = md.usize(&key("rope.dimension_count"))?.unwrap_or(head_dim);
    if rope_dims == 0 || rope_dims > head_dim || !rope_dims.is_multiple_of(2) {
        return bad(format!(
            "{} = {rope_dims} must be even and within the head size {head_dim}",
            key("rope.dimension_count")
        ));
    }
    let rope_sections = match md.i64_array(&key("rope.dimension_sections"))? {
        None => None,
        Some(v) => {
            if v.len() != 4 || v.iter().any(|&s| !(0..=1 << 16).contains(&s)) {
                return bad(format!(
                    "{} should be 4 non-negative integers, found {v:?}",
                    key("rope.dimension_sections")
                ));
            }
            let s = [v[0] as usize, v[1] as usize, v[2] as usize, v[3] as usize];
            let sum: usize = s.iter().sum();
            if sum == 0 || sum > rope_dims / 2 {
                return bad(format!(
                    "{} {s:?} sum to {sum}, but there are {} rotary pairs ({} = {rope_dims})",
                    key("rope.dimension_sections"),
                    rope_dims / 2,
                    key("rope.dimension_count")
                ));
            }
            Some(s)
        }
    };

    let moe = match md.usize(&key("expert_count"))? {
        None | Some(0) => None,
        Some(n_expert) => {
            let n_used = need("expert_used_count")?;
            if n_used == 0 || n_used > n_expert || n_expert > 1 << 16 {
                return bad(format!(
                    "{} = {n_used} must be between 1 and {} = {n_expert}",
                    key("expert_used_count"),
                    key("expert_count")
                ));
            }
            let dense_ff = md.usize(&key("feed_forward_length"))?;
            let expert_ff = match md.usize(&key("expert_feed_forward_length")) {
                Ok(Some(ff)) => ff,
                Ok(None) => dense_ff.map(|ff| ff / n_used).ok_or_else(|| {
                    Error::Format(format!(
                        "metadata has no {}",
                        key("expert_feed_forward_length")
                    ))
                })?,
                // A per-layer array: kiln runs files whose experts all have one width.
                Err(_) => {
                    let v = md
                        .i64_array(&key("expert_feed_forward_length"))?
                        .unwrap_or_default();
                    match v.first() {
                        Some(&f) if f > 0 && v.iter().all(|&x| x == f) => f as usize,
                        _ => {
                            return Err(Error::Unsupported(format!(
                                "{} varies across layers ({v:?})",
                                key("expert_feed_forward_length")
                            )));
                        }
                    }
                }
            };
            let shared_ff = md
                .usize(&key("expert_shared_feed_forward_length"))?
                .or(dense_ff)
                .ok_or_else(|| {
                    Error::Format(format!(
                        "metadata has no {}",
                        key("expert_shared_feed_forward_length")
                    ))
                })?;
            if expert_ff == 0 || shared_ff == 0 || expert_ff > 1 << 20 || shared_ff > 1 << 24 {
                return bad(format!(
                    "expert widths {expert_ff} and {shared_ff} ({} and {}) must be positive and plausible",
                    key("expert_feed_forward_length"),
                    key("expert_shared_feed_forward_length")
                ));
            }
            Some(MoeConfig {
                n_expert,
                n_used,
                expert_ff,
                shared_ff,
            })
        }
    };
    Ok(HybridKeys {
        delta_net: DeltaNetConfig {
            recurrent,
            conv_kernel,
            n_k_heads,
            n_v_heads,
            head_dim: head,
        },
        moe,
        rope_dims,
        rope_sections,
        nextn_layers,
    })
}
