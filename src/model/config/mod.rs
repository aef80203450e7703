//! `ModelConfig`: one description of a model for every supported architecture, read from GGUF
//! metadata (`{arch}.block_count`, …; gguf.rs) or a Hugging Face `config.json` (hf.rs): the keys
//! every family shares there, then the family's own in its arch/<family>.rs. It holds every number
//! and fact that changes the forward pass, so the architecture code never looks at file formats.

mod gguf;
mod hf;
mod keys;

pub(crate) use keys::{GgufKeys, HfKeys};

use serde::Serialize;

pub use crate::backend::RopeLayout;
use crate::error::{Error, Result};

/// An architecture family. What kiln knows about each is in its file under arch/ (`family()`).
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
    /// Qwen3 mixture of experts (Qwen3-30B-A3B, Qwen3-Coder-30B-A3B): Qwen3's attention, routed
    /// experts in every block and no shared expert.
    Qwen3Moe,
    /// Qwen3-VL dense: Qwen3's layer under multi-axis RoPE, image features joining its first
    /// layers' outputs (deepstack).
    Qwen3Vl,
    /// Qwen3-VL mixture of experts (Qwen3-VL-30B-A3B): Qwen3 MoE's layer, the same way.
    Qwen3VlMoe,
    /// Gemma 2: Gemma 3's layer without QK-norm, with soft-capped attention scores and logits.
    Gemma2,
    /// SmolLM3: Llama's layer with no RoPE in every fourth layer.
    SmolLM3,
    /// gpt-oss (OpenAI's open-weight MoE): biased attention with sinks, alternating sliding
    /// window, biased experts with a clamped SwiGLU.
    #[serde(rename = "gpt-oss")]
    GptOss,
    /// Mistral 3 (Ministral 3, Devstral Small 2): Llama's layer with YaRN and query temperature.
    Mistral3,
    /// GLM-4.5 MoE (GLM-4.5-Air, GLM-4.6): partial RoPE, leading dense blocks, then experts
    /// routed by sigmoid scores with a selection bias, and a shared expert.
    Glm4Moe,
    /// Phi-3, Phi-3.5, Phi-4, Phi-4-mini: Llama's layer with partial RoPE and LongRoPE.
    Phi3,
    /// GLM-4 dense (GLM-4-9B/32B-0414): Gemma's sandwich norms with SiLU, biases, partial RoPE.
    Glm4,
    /// Gemma 4: Gemma's sandwich layer with wider global heads over fewer KV heads, proportional
    /// RoPE, value norm, layers that reuse an earlier layer's KV cache.
    Gemma4,
}

impl Arch {
    /// The name `kiln info` prints; the family's file (arch/<family>.rs) holds it.
    pub fn name(self) -> &'static str {
        self.family().name
    }
}

/// The RoPE frequency divisors a GGUF file may carry as tensors, decoded.
#[derive(Debug, Default)]
pub struct RopeFactorTensors {
    /// `rope_freqs.weight` (Llama 3.1+).
    pub freqs: Option<Vec<f32>>,
    /// `rope_factors_short.weight` and `rope_factors_long.weight` (LongRoPE: Phi-3.5, Phi-4-mini).
    pub short: Option<Vec<f32>>,
    pub long: Option<Vec<f32>>,
}

/// Position scaling applied to the RoPE frequencies.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RopeScaling {
    /// Every frequency divided by `factor` (positions compressed).
    Linear { factor: f32 },
    /// One divisor per frequency (Llama 3's scheme; GGUF stores them as `rope_freqs.weight`).
    PerFrequency { divisors: Vec<f32> },
    /// YaRN (gpt-oss, Mistral 3, Qwen with long contexts): frequencies below the correction range
    /// interpolated by `factor`, those above kept, a ramp between; cos and sin scaled by
    /// `magnitude` (`yarn_magnitude`). The correction range comes from `original_context` and the
    /// betas (llama.cpp: 32 and 1, read from the file for Mistral 3 only).
    Yarn {
        factor: f32,
        original_context: usize,
        beta_fast: f32,
        beta_slow: f32,
        magnitude: f32,
    },
    /// LongRoPE (Phi-3.5, Phi-4-mini): one divisor per frequency, `short` while the session's
    /// context is at most `original_context`, `long` past it (llama.cpp's choice, by context
    /// size, not position); cos and sin scaled by `magnitude` (`rope.scaling.attn_factor`).
    /// GGUF stores them as `rope_factors_short.weight` and `rope_factors_long.weight`.
    LongRope {
        short: Vec<f32>,
        long: Vec<f32>,
        original_context: usize,
        magnitude: f32,
    },
}

/// Llama 4's and Mistral 3's query temperature: a query at position p is scaled by
/// `1 + scale · ln(1 + ⌊p / floor⌋)` (1 below `floor`, growing slowly past it).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AttnTemperature {
    pub scale: f32,
    pub floor: usize,
}

impl AttnTemperature {
    /// The factor of position `pos`, in llama.cpp's arithmetic (f32 position, f64 log).
    pub fn at(&self, pos: usize) -> f32 {
        let steps = ((pos as f32) / self.floor as f32).floor() as f64;
        ((steps + 1.0).ln() * self.scale as f64 + 1.0) as f32
    }
}

/// YaRN's scale of cos and sin, in llama.cpp's f32 steps: its context sets `attn_factor` ·
/// m(1)/m(log_mul) (m(1) without a log multiplier), with m(x) = 1 + 0.1·x·ln(factor), divided
/// by 1 + 0.1·ln(factor), and its rope multiplies by 1 + 0.1·ln(factor) again.
pub fn yarn_magnitude(factor: f32, attn_factor: f32, log_mul: f32) -> f32 {
    let factor = 1.0 / (1.0 / factor);
    let m = |x: f32| {
        if factor <= 1.0 {
            1.0
        } else {
            0.1 * x * factor.ln() + 1.0
        }
    };
    let context = if log_mul != 0.0 {
        m(1.0) / m(log_mul)
    } else {
        m(1.0)
    };
    let context = context * (1.0 / (1.0 + 0.1 * factor.ln())) * attn_factor;
    context * (1.0 + 0.1 * (1.0 / (1.0 / factor)).ln())
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

/// The routed experts, and the shared expert if any, of a mixture-of-experts feed-forward block.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MoeConfig {
    /// Experts per block (`expert_count`).
    pub n_expert: usize,
    /// Experts each token is routed to (`expert_used_count`).
    pub n_used: usize,
    /// Width of each routed expert (`expert_feed_forward_length`).
    pub expert_ff: usize,
    /// Width of the shared expert (`expert_shared_feed_forward_length`); None for a block
    /// without one (Qwen3 MoE).
    pub shared_ff: Option<usize>,
    /// The routed experts' gated activation (SiLU; gpt-oss: its clamped SwiGLU).
    pub activation: crate::backend::GateActivation,
    /// Biases on the router and on every expert's gate, up and down projections (gpt-oss).
    pub biases: bool,
    /// How the router scores the experts (softmax; GLM-4.5: sigmoid).
    pub gating: crate::backend::ExpertGating,
    /// The chosen experts' weights divided by their sum (`expert_weights_norm`).
    pub normalize: bool,
    /// The factor on the chosen experts' weights after that (`expert_weights_scale`; 1: none).
    pub weights_scale: f32,
    /// A per-expert bias on the scores that choose the experts (`exp_probs_b`, GLM-4.5).
    pub selection_bias: bool,
    /// The shared expert's output is scaled by sigmoid of its own gate logit (Qwen3.5 MoE; GLM-4.5's
    /// is not).
    pub shared_gated: bool,
    /// Blocks before this one are dense (`leading_dense_block_count`, GLM-4.5); the dense width is
    /// `ModelConfig::intermediate_size`.
    pub first_moe_layer: usize,
}

/// The attention geometry of a group of layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AttentionShape {
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Leading dimensions of each head that RoPE rotates.
    pub rope_dims: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelConfig {
    pub arch: Arch,
    pub vocab_size: usize,
    pub hidden_size: usize,
    /// Width of the dense feed-forward: a mixture-of-experts block's shared expert, or, where
    /// its blocks have none, the routed experts' width.
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
    /// Which layers use the window: every p-th layer global (0: none); `None` with a window set
    /// and no `swa_layers` means every layer.
    pub sliding_window_pattern: Option<usize>,
    /// Per layer, whether it uses the window (llama.cpp's array form of
    /// `attention.sliding_window_pattern`); set, it overrides `sliding_window_pattern`.
    pub swa_layers: Option<Vec<bool>>,
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
    /// A span of rows attended both ways (an image) is so on sliding-window layers only; global
    /// layers stay causal (Gemma 4: llama.cpp's `LLAMA_NON_CAUSAL_TYPE_SWA_ONLY`).
    pub bidirectional_local_only: bool,
    pub activation: Activation,
    /// Logits become `cap · tanh(logit / cap)` (Gemma 2).
    pub final_logit_softcap: Option<f32>,
    /// Attention scores (after the scale, before the softmax) become `cap · tanh(s / cap)`
    /// (Gemma 2).
    pub attn_logit_softcap: Option<f32>,
    /// Queries scaled by position (Mistral 3, Llama 4's "temperature tuning").
    pub attn_temperature: Option<AttnTemperature>,
    /// Per layer, true where the layer applies no RoPE (SmolLM3's NoPE layers); empty: every
    /// layer rotates.
    pub nope_layers: Vec<bool>,
    /// Leading dimensions of each head that RoPE rotates; the rest pass through (partial
    /// rotary). Equal to head_dim except in Qwen3.5 (`rope.dimension_count`).
    pub rope_dims: usize,
    /// Multimodal RoPE sections (Qwen3.5's IMRoPE), in rotary pairs. Text positions use the same
    /// position in the first three; pairs in none of them stay unrotated.
    pub rope_sections: Option<[usize; 4]>,
    /// Models with recurrent blocks (Qwen3.5): which blocks are Gated DeltaNet, and their shapes.
    pub delta_net: Option<DeltaNetConfig>,
    /// Mixture-of-experts feed-forward blocks.
    pub moe: Option<MoeConfig>,
    /// Multi-token-prediction blocks the file carries after the `n_layers` used (skipped).
    pub nextn_layers: usize,
    /// The sliding-window layers' heads where they differ from the global layers' (`n_kv_heads`,
    /// `head_dim`, `rope_dims` above): Gemma 4.
    pub local_attention: Option<AttentionShape>,
    /// The first layer that stores no keys and values of its own but attends over the cache of the
    /// last earlier layer of its kind (local or global): Gemma 4's `shared_kv_layers`.
    pub first_shared_kv_layer: Option<usize>,
    /// Per layer, the dense feed-forward's width where the layers differ (Gemma 4 E2B's shared-KV
    /// layers are twice as wide); None: `intermediate_size` everywhere.
    pub ffn_widths: Option<Vec<usize>>,
    /// Width of each layer's slice of the per-layer token embeddings (Gemma 4 E2B/E4B:
    /// `embedding_length_per_layer_input`); 0 without them.
    pub per_layer_embedding: usize,
    /// Qwen3-VL's deepstack: an image row carries this many more slices of the hidden size after
    /// its embedding, and slice `i + 1` joins the residual stream after layer `i`
    /// (`n_deepstack_layers`); 0 elsewhere.
    pub deepstack_layers: usize,
}

impl ModelConfig {
    /// The values an embedded row (an image's) carries: the hidden size, and one slice of it per
    /// deepstack layer after it (llama.cpp's `n_embd_inp`).
    pub fn embedding_width(&self) -> usize {
        self.hidden_size * (1 + self.deepstack_layers)
    }

    /// True when layer `layer` attends through the sliding window.
    pub fn layer_is_local(&self, layer: usize) -> bool {
        match (
            self.sliding_window,
            &self.swa_layers,
            self.sliding_window_pattern,
        ) {
            (None, ..) => false,
            (Some(_), Some(flags), _) => flags.get(layer).copied().unwrap_or(false),
            (Some(_), None, None) => true,
            (Some(_), None, Some(p)) => p == 0 || layer % p < p - 1,
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

    /// Whether layer `layer` rotates its queries and keys (false for NoPE layers).
    pub fn layer_has_rope(&self, layer: usize) -> bool {
        !self.nope_layers.get(layer).copied().unwrap_or(false)
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

    /// The heads of layer `layer`: the local shape on sliding-window layers that have their own.
    pub fn layer_shape(&self, layer: usize) -> AttentionShape {
        match self.local_attention {
            Some(local) if self.layer_is_local(layer) => local,
            _ => AttentionShape {
                n_kv_heads: self.n_kv_heads,
                head_dim: self.head_dim,
                rope_dims: self.rope_dims,
            },
        }
    }

    /// Width of layer `layer`'s queries (all heads).
    pub fn layer_q_dim(&self, layer: usize) -> usize {
        self.n_heads * self.layer_shape(layer).head_dim
    }

    /// Width of layer `layer`'s keys and of its values (all KV heads).
    pub fn layer_kv_dim(&self, layer: usize) -> usize {
        let s = self.layer_shape(layer);
        s.n_kv_heads * s.head_dim
    }

    /// The layer whose KV cache layer `layer` attends over: itself, or for a shared-KV layer the
    /// last layer of its kind before the first shared one (llama.cpp's rule for Gemma 4).
    pub fn layer_kv_source(&self, layer: usize) -> usize {
        match self.first_shared_kv_layer {
            Some(first) if layer >= first => (0..first)
                .rev()
                .find(|&l| self.layer_is_local(l) == self.layer_is_local(layer))
                .unwrap_or(layer),
            _ => layer,
        }
    }

    /// Whether layer `layer` stores keys and values (false for recurrent and shared-KV layers).
    pub fn layer_has_kv(&self, layer: usize) -> bool {
        !self.layer_is_recurrent(layer) && self.layer_kv_source(layer) == layer
    }

    /// Width of layer `layer`'s dense feed-forward.
    pub fn layer_ff(&self, layer: usize) -> usize {
        self.ffn_widths
            .as_ref()
            .and_then(|w| w.get(layer).copied())
            .unwrap_or(self.intermediate_size)
    }

    /// The widest dense feed-forward over the layers (scratch sizes).
    pub fn max_ff(&self) -> usize {
        self.ffn_widths
            .as_ref()
            .and_then(|w| w.iter().max().copied())
            .unwrap_or(self.intermediate_size)
            .max(self.intermediate_size)
    }

    /// The widest query row over the layers (scratch sizes).
    pub fn max_q_dim(&self) -> usize {
        (0..self.n_layers)
            .map(|l| self.layer_q_dim(l))
            .max()
            .unwrap_or(0)
    }

    /// The widest key or value row over the layers (scratch sizes).
    pub fn max_kv_dim(&self) -> usize {
        (0..self.n_layers)
            .map(|l| self.layer_kv_dim(l))
            .max()
            .unwrap_or(0)
    }

    /// The widest head over the layers.
    pub fn max_head_dim(&self) -> usize {
        self.local_attention
            .map_or(self.head_dim, |l| l.head_dim.max(self.head_dim))
    }

    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
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
        if let Some(l) = self.local_attention {
            let ok = l.n_kv_heads > 0
                && self.n_heads.is_multiple_of(l.n_kv_heads)
                && l.head_dim > 0
                && l.head_dim <= 1 << 16
                && l.rope_dims.is_multiple_of(2)
                && l.rope_dims <= l.head_dim;
            if !ok {
                return bad(format!(
                    "sliding-window layers: {} query heads over {} KV heads of {} with {}                      rotated dimensions",
                    self.n_heads, l.n_kv_heads, l.head_dim, l.rope_dims
                ));
            }
        }
        if let Some(w) = &self.ffn_widths
            && (w.len() != self.n_layers || w.iter().any(|&f| f == 0 || f > 1 << 24))
        {
            return bad(format!(
                "{} feed-forward widths for {} layers, each positive and plausible: {w:?}",
                w.len(),
                self.n_layers
            ));
        }
        if self.per_layer_embedding > 1 << 16 {
            return bad(format!(
                "per-layer embeddings of {} values are implausibly wide",
                self.per_layer_embedding
            ));
        }
        if let Some(first) = self.first_shared_kv_layer
            && let Some(l) = (first..self.n_layers).find(|&l| self.layer_kv_source(l) == l)
        {
            return bad(format!(
                "layer {l} shares the KV cache of an earlier layer of its kind, and no layer \
                 before {first} is one"
            ));
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
            && divisors.len() != self.rope_dims / 2
        {
            return bad(format!(
                "rope_freqs has {} values, expected one per rotary pair, {}",
                divisors.len(),
                self.rope_dims / 2
            ));
        }
        if let Some(RopeScaling::LongRope { short, long, .. }) = &self.rope_scaling
            && (short.len() != self.rope_dims / 2 || long.len() != self.rope_dims / 2)
        {
            return bad(format!(
                "rope_factors_short and _long have {} and {} values, expected one per rotary \
                 pair, {}",
                short.len(),
                long.len(),
                self.rope_dims / 2
            ));
        }
        if !(self.rms_norm_eps.is_finite() && self.rope_theta.is_finite() && self.rope_theta > 0.0)
        {
            return bad("norm epsilon and RoPE base must be finite".into());
        }
        // An infinite cap would turn cap·tanh(x/cap) into NaN.
        for cap in [self.final_logit_softcap, self.attn_logit_softcap]
            .into_iter()
            .flatten()
        {
            if !(cap.is_finite() && cap > 0.0) {
                return bad(format!("a soft cap of {cap} must be positive and finite"));
            }
        }
        Ok(())
    }
}
