//! Qwen3.5 (`qwen35`, `qwen35moe`): Gated DeltaNet blocks (linear attention with a recurrent
//! state, delta_net.rs) and, every few blocks, gated full attention (sigmoid output gate, QK-norm,
//! partial IMRoPE); each followed by a SwiGLU feed-forward, or in the MoE variant by routed
//! experts plus a gated shared expert (moe.rs). Every block is pre-norm with two residual adds.
//! kiln reads Qwen3.5 from GGUF only; its weights are in weights/qwen35.rs.

use super::Step;
use super::family::{Family, LayerKind};
use super::moe::MoeScratch;
use crate::backend::Backend;
use crate::error::Result;
use crate::model::Arch;
use crate::model::chat::CHATML;
use crate::model::config::ModelConfig;
use crate::model::weights::{Ffn, Mixer, Qwen35Layer};

pub(crate) const QWEN35: Family = Family {
    arch: Arch::Qwen35,
    name: "qwen35",
    gguf_names: &["qwen35"],
    hf_model_types: &[],
    hf_text_config_of: None,
    hf_tensor_names: &[],
    norm_one_plus_weight: false,
    layer: LayerKind::Qwen35,
    chat_template: &CHATML,
};

/// The mixture-of-experts variant: the same blocks and keys, plus `expert_*`.
pub(crate) const QWEN35_MOE: Family = Family {
    arch: Arch::Qwen35Moe,
    name: "qwen35moe",
    gguf_names: &["qwen35moe"],
    ..QWEN35
};

pub(crate) fn layer<B: Backend>(f: &mut Step<B>, l: &Qwen35Layer<B>) {
    f.norm_input(&l.attn_norm);
    match &l.mixer {
        Mixer::DeltaNet(d) => f.delta_net(d),
        Mixer::Attention(a) => f.gated_attention(a),
    }
    f.residual();

    f.norm_input(&l.post_attention_norm);
    match &l.ffn {
        Ffn::Dense { gate, up, down } => f.gated_ffn(gate, up, down),
        Ffn::Moe(m) => f.moe(m),
    }
    f.residual();
}

/// The activation buffers Qwen3.5's blocks add, for up to `rows` tokens.
pub(crate) struct Qwen35Scratch<B: Backend> {
    /// The attention's gate (one value per query value).
    pub q_gate: B::Buffer,
    /// DeltaNet: the q/k/v projection, its convolution, z, alpha and beta, and the output.
    pub qkv: B::Buffer,
    pub conv: B::Buffer,
    pub z: B::Buffer,
    pub alpha: B::Buffer,
    pub beta: B::Buffer,
    pub delta: B::Buffer,
    pub moe: Option<MoeScratch<B>>,
}

impl<B: Backend> Qwen35Scratch<B> {
    pub fn new(c: &ModelConfig, b: &B, rows: usize) -> Result<Option<Qwen35Scratch<B>>> {
        let Some(d) = &c.delta_net else {
            return Ok(None);
        };
        Ok(Some(Qwen35Scratch {
            q_gate: b.buffer(rows * c.q_dim())?,
            qkv: b.buffer(rows * d.conv_channels())?,
            conv: b.buffer(rows * d.conv_channels())?,
            z: b.buffer(rows * d.value_dim())?,
            alpha: b.buffer(rows * d.n_v_heads)?,
            beta: b.buffer(rows * d.n_v_heads)?,
            delta: b.buffer(rows * d.value_dim())?,
            moe: match &c.moe {
                Some(m) => Some(MoeScratch::new(m, c.hidden_size, b, rows)?),
                None => None,
            },
        }))
    }
}
