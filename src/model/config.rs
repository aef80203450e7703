//! `ModelConfig`: one description of a model for every supported architecture, read from GGUF
//! metadata (`{arch}.block_count`, …) or a Hugging Face `config.json`. It holds every number and
//! fact that changes the forward pass, so the architecture code never looks at file formats.

use serde::Serialize;
use serde_json::Value;

pub use crate::backend::RopeLayout;
use crate::error::{Error, Result};
use crate::gguf::Metadata;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// Llama 2/3.x, SmolLM2, Mistral.
    Llama,
    Qwen2,
    Qwen3,
    Gemma3,
    /// Qwen3.5 dense: Gated DeltaNet blocks between gated full-attention blocks.
    Qwen35,
    /// Qwen3.5 mixture of experts: the same blocks with routed and shared experts.
    Qwen35Moe,
}

impl Arch {
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma3 => "gemma3",
            Arch::Qwen35 => "qwen35",
            Arch::Qwen35Moe => "qwen35moe",
        }
    }

    /// From GGUF `general.architecture`.
    pub fn from_gguf(name: &str) -> Result<Arch> {
        Ok(match name {
            "llama" | "mistral" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            "qwen3" => Arch::Qwen3,
            "gemma3" | "gemma3_text" => Arch::Gemma3,
            "qwen35" => Arch::Qwen35,
            "qwen35moe" => Arch::Qwen35Moe,
            other => return Err(unsupported_arch(other)),
        })
    }

    /// Qwen3.5's hybrid layout (recurrent blocks with a state beside the KV cache).
    pub fn is_hybrid(self) -> bool {
        matches!(self, Arch::Qwen35 | Arch::Qwen35Moe)
    }

    /// From config.json `model_type`.
    pub fn from_hf(model_type: &str) -> Result<Arch> {
        Ok(match model_type {
            "llama" | "mistral" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            "qwen3" => Arch::Qwen3,
            "gemma3" | "gemma3_text" => Arch::Gemma3,
            other => return Err(unsupported_arch(other)),
        })
    }
}

fn unsupported_arch(name: &str) -> Error {
    Error::Unsupported(format!(
        "architecture '{name}' is not supported (kiln runs llama, mistral, qwen2, qwen3, gemma3, \
         and qwen35/qwen35moe from GGUF)"
    ))
}

/// Position scaling applied to the RoPE frequencies.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RopeScaling {
    /// Every frequency divided by `factor` (positions compressed).
    Linear { factor: f32 },
    /// One divisor per frequency (Llama 3's scheme; GGUF stores them as `rope_freqs.weight`).
    PerFrequency { divisors: Vec<f32> },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// SiLU(gate) · up.
    Silu,
    /// GELU with the tanh approximation (gate) · up.
    GeluTanh,
}

/// The Gated DeltaNet (linear attention) blocks of a hybrid model (Qwen3.5).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeltaNetConfig {
    /// Per block: true for a DeltaNet block, false for full attention.
    pub recurrent: Vec<bool>,
    /// Taps of the causal convolution over the q/k/v channels (`ssm.conv_kernel`).
    pub conv_kernel: usize,
    /// Key (and query) heads (`ssm.group_count`).
    pub n_k_heads: usize,
    /// Value heads (`ssm.time_step_rank`), a multiple of the key heads.
    pub n_v_heads: usize,
    /// Width of every key, query and value head (`ssm.state_size`).
    pub head_dim: usize,
}

impl DeltaNetConfig {
    /// Channels of the q/k/v projection, which the convolution runs over.
    pub fn conv_channels(&self) -> usize {
        (2 * self.n_k_heads + self.n_v_heads) * self.head_dim
    }

    /// Width of the value heads together (`ssm.inner_size`).
    pub fn value_dim(&self) -> usize {
        self.n_v_heads * self.head_dim
    }

    /// f32 values of one block's convolution state (the last K−1 input rows).
    pub fn conv_state_len(&self) -> usize {
        self.conv_kernel.saturating_sub(1) * self.conv_channels()
    }

    /// f32 values of one block's recurrent state (a head_dim² matrix per value head).
    pub fn ssm_state_len(&self) -> usize {
        self.n_v_heads * self.head_dim * self.head_dim
    }
}

/// The routed and shared experts of a mixture-of-experts feed-forward block.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MoeConfig {
    /// Experts per block (`expert_count`).
    pub n_expert: usize,
    /// Experts each token is routed to (`expert_used_count`).
    pub n_used: usize,
    /// Width of each routed expert (`expert_feed_forward_length`).
    pub expert_ff: usize,
    /// Width of the shared expert (`expert_shared_feed_forward_length`).
    pub shared_ff: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelConfig {
    pub arch: Arch,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f32,
    pub rope_theta: f32,
    /// RoPE base of sliding-window layers when it differs (Gemma 3: 10000).
    pub rope_theta_local: Option<f32>,
    pub rope_scaling: Option<RopeScaling>,
    pub rope_layout: RopeLayout,
    /// Sliding-window length in tokens (a query sees itself and the window − 1 before it).
    pub sliding_window: Option<usize>,
    /// Which layers use the window; `None` with a window set means every layer.
    pub sliding_window_pattern: Option<usize>,
    pub attention_bias: bool,
    pub qk_norm: bool,
    pub tie_embeddings: bool,
    pub context_length: usize,
    /// Norm weights already include the `+1` of Gemma's `x·(1+w)` (llama.cpp's converter adds it).
    pub norm_weights_include_one: bool,
    /// Gemma multiplies embeddings by sqrt(hidden_size).
    pub embedding_scale: Option<f32>,
    /// Multiplier of q·k (1/sqrt(head_dim), or Gemma's query_pre_attn_scalar).
    pub attention_scale: f32,
    pub activation: Activation,
    pub final_logit_softcap: Option<f32>,
    /// Leading dimensions of each head that RoPE rotates; the rest pass through (partial
    /// rotary). Equal to head_dim except in Qwen3.5 (`rope.dimension_count`).
    pub rope_dims: usize,
    /// Multimodal RoPE sections (Qwen3.5's IMRoPE), in rotary pairs. Text positions use the same
    /// position in the first three; pairs in none of them stay unrotated.
    pub rope_sections: Option<[usize; 4]>,
    /// Hybrid models: which blocks are Gated DeltaNet, and their shapes.
    pub delta_net: Option<DeltaNetConfig>,
    /// Mixture-of-experts feed-forward blocks.
    pub moe: Option<MoeConfig>,
    /// Multi-token-prediction blocks the file carries after the `n_layers` used (skipped).
    pub nextn_layers: usize,
}

impl ModelConfig {
    /// True when layer `layer` attends through the sliding window.
    pub fn layer_is_local(&self, layer: usize) -> bool {
        match (self.sliding_window, self.sliding_window_pattern) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(_), Some(p)) => p == 0 || layer % p < p - 1,
        }
    }

    pub fn layer_window(&self, layer: usize) -> Option<usize> {
        if self.layer_is_local(layer) {
            self.sliding_window
        } else {
            None
        }
    }

    pub fn layer_rope_theta(&self, layer: usize) -> f32 {
        match self.rope_theta_local {
            Some(local) if self.layer_is_local(layer) => local,
            _ => self.rope_theta,
        }
    }

    /// RoPE scaling applies to global layers only when local layers have their own base (Gemma 3).
    pub fn layer_rope_scaling(&self, layer: usize) -> Option<&RopeScaling> {
        if self.rope_theta_local.is_some() && self.layer_is_local(layer) {
            None
        } else {
            self.rope_scaling.as_ref()
        }
    }

    /// True when block `layer` is a recurrent (Gated DeltaNet) block rather than attention.
    pub fn layer_is_recurrent(&self, layer: usize) -> bool {
        self.delta_net
            .as_ref()
            .is_some_and(|d| d.recurrent.get(layer).copied().unwrap_or(false))
    }

    /// Blocks with a KV cache (every block except recurrent ones).
    pub fn attention_layers(&self) -> usize {
        (0..self.n_layers)
            .filter(|&l| !self.layer_is_recurrent(l))
            .count()
    }

    /// Bytes of recurrent state per sequence (conv rows and DeltaNet matrices of every
    /// recurrent block, f32); 0 for models without recurrent blocks.
    pub fn recurrent_state_bytes(&self) -> usize {
        self.delta_net.as_ref().map_or(0, |d| {
            let blocks = (0..self.n_layers)
                .filter(|&l| self.layer_is_recurrent(l))
                .count();
            blocks * (d.conv_state_len() + d.ssm_state_len()) * 4
        })
    }

    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

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
        let arch = Arch::from_gguf(arch_name)?;
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

    /// Read from a Hugging Face config.json (already parsed).
    pub fn from_hf(json: &Value) -> Result<ModelConfig> {
        // Multimodal Gemma 3 checkpoints nest the language model's settings under text_config.
        let top_type = json.get("model_type").and_then(Value::as_str).unwrap_or("");
        let c = match json.get("text_config") {
            Some(t) if top_type == "gemma3" => t,
            _ => json,
        };
        let model_type = c
            .get("model_type")
            .and_then(Value::as_str)
            .unwrap_or(top_type);
        let arch = Arch::from_hf(model_type)?;
        let gemma = arch == Arch::Gemma3;

        let uint = |k: &str| -> Result<Option<usize>> {
            match c.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v.as_u64().map(|x| Some(x as usize)).ok_or_else(|| {
                    Error::Format(format!("config.json: '{k}' should be an integer"))
                }),
            }
        };
        let float = |k: &str| -> Result<Option<f64>> {
            match c.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v
                    .as_f64()
                    .map(Some)
                    .ok_or_else(|| Error::Format(format!("config.json: '{k}' should be a number"))),
            }
        };
        let flag = |k: &str| -> Option<bool> { c.get(k).and_then(Value::as_bool) };
        let need = |k: &str| -> Result<usize> {
            uint(k)?.ok_or_else(|| Error::Format(format!("config.json has no '{k}'")))
        };

        let hidden_size = need("hidden_size")?;
        let n_heads = need("num_attention_heads")?;
        let n_layers = need("num_hidden_layers")?;
        let default_head_dim = match arch {
            Arch::Qwen3 => 128,
            Arch::Gemma3 => 256,
            _ => hidden_size / n_heads.max(1),
        };
        let head_dim = uint("head_dim")?.unwrap_or(default_head_dim);

        let sliding_window = match arch {
            Arch::Gemma3 => Some(uint("sliding_window")?.unwrap_or(4096)),
            Arch::Qwen2 if flag("use_sliding_window") == Some(true) => uint("sliding_window")?,
            Arch::Llama => uint("sliding_window")?,
            _ => None,
        }
        .filter(|&w| w > 0);
        let sliding_window_pattern = if gemma && sliding_window.is_some() {
            Some(gemma_pattern(c, n_layers)?)
        } else {
            None
        };

        let rope_scaling = match c.get("rope_scaling") {
            None | Some(Value::Null) => None,
            Some(s) => hf_rope_scaling(s, head_dim, float("rope_theta")?.unwrap_or(10000.0))?,
        };

        let cfg = ModelConfig {
            arch,
            vocab_size: need("vocab_size")?,
            hidden_size,
            intermediate_size: need("intermediate_size")?,
            n_layers,
            n_heads,
            n_kv_heads: uint("num_key_value_heads")?.unwrap_or(n_heads),
            head_dim,
            rms_norm_eps: float("rms_norm_eps")?.unwrap_or(1e-6) as f32,
            rope_theta: float("rope_theta")?.unwrap_or(if gemma { 1e6 } else { 1e4 }) as f32,
            rope_theta_local: if gemma {
                Some(float("rope_local_base_freq")?.unwrap_or(10000.0) as f32)
            } else {
                None
            },
            rope_scaling,
            rope_layout: RopeLayout::Neox,
            sliding_window,
            sliding_window_pattern,
            attention_bias: arch == Arch::Qwen2 || flag("attention_bias") == Some(true),
            qk_norm: matches!(arch, Arch::Qwen3 | Arch::Gemma3),
            tie_embeddings: flag("tie_word_embeddings")
                .or_else(|| json.get("tie_word_embeddings").and_then(Value::as_bool))
                .unwrap_or(gemma),
            context_length: uint("max_position_embeddings")?.unwrap_or(2048),
            norm_weights_include_one: false,
            embedding_scale: gemma.then(|| (hidden_size as f32).sqrt()),
            attention_scale: if gemma {
                1.0 / (float("query_pre_attn_scalar")?.unwrap_or(head_dim as f64) as f32).sqrt()
            } else {
                1.0 / (head_dim as f32).sqrt()
            },
            activation: if gemma {
                Activation::GeluTanh
            } else {
                Activation::Silu
            },
            final_logit_softcap: float("final_logit_softcapping")?
                .filter(|&x| x > 0.0)
                .map(|x| x as f32),
            rope_dims: head_dim,
            rope_sections: None,
            delta_net: None,
            moe: None,
            nextn_layers: 0,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reject numbers the forward pass cannot use, before anything is allocated from them.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Format(m));
        if self.hidden_size == 0 || self.n_layers == 0 || self.n_heads == 0 || self.head_dim == 0 {
            return bad(format!(
                "model dimensions must be positive (hidden {}, layers {}, heads {}, head_dim {})",
                self.hidden_size, self.n_layers, self.n_heads, self.head_dim
            ));
        }
        if self.n_kv_heads == 0 || !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return bad(format!(
                "{} query heads cannot share {} key/value heads",
                self.n_heads, self.n_kv_heads
            ));
        }
        if !self.head_dim.is_multiple_of(2) {
            return bad(format!("head_dim {} must be even for RoPE", self.head_dim));
        }
        if self.vocab_size == 0 || self.intermediate_size == 0 {
            return bad("vocabulary and feed-forward sizes must be positive".into());
        }
        // Generous bounds that keep later size arithmetic far from overflow.
        let limit = 1usize << 24;
        for (name, v) in [
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("n_layers", self.n_layers),
            ("n_heads", self.n_heads),
            ("head_dim", self.head_dim),
            ("vocab_size", self.vocab_size),
        ] {
            if v > limit {
                return bad(format!("{name} = {v} is implausibly large"));
            }
        }
        if let Some(RopeScaling::PerFrequency { divisors }) = &self.rope_scaling
            && divisors.len() != self.head_dim / 2
        {
            return bad(format!(
                "rope_freqs has {} values, expected head_dim/2 = {}",
                divisors.len(),
                self.head_dim / 2
            ));
        }
        if !(self.rms_norm_eps.is_finite() && self.rope_theta.is_finite() && self.rope_theta > 0.0)
        {
            return bad("norm epsilon and RoPE base must be finite".into());
        }
        Ok(())
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

/// Gemma 3's local/global layout: `sliding_window_pattern: 6`, or a `layer_types` list whose
/// "full_attention" entries must fall on every n-th layer.
fn gemma_pattern(c: &Value, n_layers: usize) -> Result<usize> {
    if let Some(p) = c.get("sliding_window_pattern").and_then(Value::as_u64) {
        return Ok(p as usize);
    }
    let Some(types) = c.get("layer_types").and_then(Value::as_array) else {
        return Ok(6);
    };
    let global: Vec<usize> = types
        .iter()
        .enumerate()
        .filter(|(_, t)| t.as_str() == Some("full_attention"))
        .map(|(i, _)| i)
        .collect();
    let Some(&first) = global.first() else {
        return Ok(0);
    };
    let pattern = first + 1;
    let expected: Vec<usize> = (0..n_layers.min(types.len()))
        .filter(|i| (i + 1) % pattern == 0)
        .collect();
    if expected != global {
        return Err(Error::Unsupported(
            "config.json layer_types is not a regular local/global pattern".into(),
        ));
    }
    Ok(pattern)
}

/// config.json `rope_scaling`: linear, or Llama 3's per-frequency divisors (computed in f64 as
/// llama.cpp's converter does, then rounded to f32 as GGUF stores them).
fn hf_rope_scaling(s: &Value, head_dim: usize, theta: f64) -> Result<Option<RopeScaling>> {
    let kind = s
        .get("rope_type")
        .or_else(|| s.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let num = |k: &str, default: f64| s.get(k).and_then(Value::as_f64).unwrap_or(default);
    match kind {
        "default" => Ok(None),
        "linear" => {
            let factor = num("factor", 1.0);
            Ok((factor != 1.0).then_some(RopeScaling::Linear {
                factor: factor as f32,
            }))
        }
        "llama3" => {
            let factor = num("factor", 8.0);
            let low = num("low_freq_factor", 1.0);
            let high = num("high_freq_factor", 4.0);
            let original = num("original_max_position_embeddings", 8192.0);
            Ok(Some(RopeScaling::PerFrequency {
                divisors: llama3_divisors(head_dim, theta, factor, low, high, original),
            }))
        }
        other => Err(Error::Unsupported(format!(
            "config.json rope_scaling type '{other}' is not supported"
        ))),
    }
}

/// Llama 3 RoPE scaling: each frequency's divisor (1 for high frequencies, `factor` for low ones,
/// smoothly interpolated between).
pub fn llama3_divisors(
    head_dim: usize,
    theta: f64,
    factor: f64,
    low_freq_factor: f64,
    high_freq_factor: f64,
    original_context: f64,
) -> Vec<f32> {
    let low_wavelen = original_context / low_freq_factor;
    let high_wavelen = original_context / high_freq_factor;
    (0..head_dim)
        .step_by(2)
        .map(|k| {
            let freq = 1.0 / theta.powf(k as f64 / head_dim as f64);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            let divisor = if wavelen < high_wavelen {
                1.0
            } else if wavelen > low_wavelen {
                factor
            } else {
                let smooth = (original_context / wavelen - low_freq_factor)
                    / (high_freq_factor - low_freq_factor);
                1.0 / ((1.0 - smooth) / factor + smooth)
            };
            divisor as f32
        })
        .collect()
}
