//! Qwen3.5 (`qwen35`, `qwen35moe`): Gated DeltaNet blocks (linear attention with a recurrent
//! state, delta_net.rs) and, every few blocks, gated full attention (sigmoid output gate, QK-norm,
//! partial IMRoPE); each followed by a SwiGLU feed-forward, or in the MoE variant by routed
//! experts plus a gated shared expert (moe.rs). Every block is pre-norm with two residual adds.
//! kiln reads Qwen3.5 from GGUF only; its keys are read here, its weights in weights/qwen35.rs.

use super::Step;
use super::family::{Family, LayerKind, gguf_rope_dims, skip_nextn_blocks};
use super::moe::{SharedExpert, gguf_experts};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::model::Arch;
use crate::model::chat::CHATML;
use crate::model::config::{DeltaNetConfig, GgufKeys, ModelConfig};
use crate::model::weights::{Mixer, Qwen35Layer};

pub(crate) const QWEN35: Family = Family {
    arch: Arch::Qwen35,
    name: "qwen35",
    gguf_names: &["qwen35"],
    hf_model_types: &[],
    hf_text_config_of: None,
    hf_head_dim: None,
    gguf_keys,
    // Never called: no config.json model_type reads as Qwen3.5.
    hf_keys: |_, _| Ok(()),
    hf_tensor_names: &[],
    norm_one_plus_weight: false,
    ffn_norm: "ffn_norm",
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

/// Qwen3.5's keys beyond the shared ones: the block schedule and any multi-token-prediction
/// blocks, the DeltaNet shapes (`ssm.*`), partial IMRoPE and the experts, each error naming its
/// key.
fn gguf_keys(keys: &GgufKeys, c: &mut ModelConfig) -> Result<()> {
    c.qk_norm = true;
    let block_count = c.n_layers;
    skip_nextn_blocks(keys, c)?;
    let recurrent = recurrent_blocks(keys, block_count, c.n_layers)?;
    c.delta_net = Some(delta_net(keys, recurrent)?);
    (c.rope_dims, c.rope_sections) = partial_rope(keys, c.head_dim)?;
    c.moe = gguf_experts(keys, SharedExpert::Yes)?;
    if let Some(sff) = c.moe.as_ref().and_then(|m| m.shared_ff) {
        // The shared expert is an MoE block's dense part.
        c.intermediate_size = sff;
    }
    Ok(())
}

fn bad<T>(message: String) -> Result<T> {
    Err(Error::Format(message))
}

/// Per used block, whether it is a DeltaNet (true) or full attention: `attention.recurrent_layers`,
/// or in older files every `full_attention_interval`-th block attends.
fn recurrent_blocks(keys: &GgufKeys, block_count: usize, n_layers: usize) -> Result<Vec<bool>> {
    match keys.bool_array("attention.recurrent_layers")? {
        Some(flags) => {
            if flags.len() != block_count {
                return bad(format!(
                    "{} has {} entries for {block_count} blocks",
                    keys.key("attention.recurrent_layers"),
                    flags.len()
                ));
            }
            Ok(flags[..n_layers].to_vec())
        }
        None => {
            let interval = keys.usize("full_attention_interval")?.unwrap_or(4);
            if interval == 0 {
                return bad(format!(
                    "{} must be at least 1",
                    keys.key("full_attention_interval")
                ));
            }
            Ok((0..n_layers).map(|i| (i + 1) % interval != 0).collect())
        }
    }
}

fn delta_net(keys: &GgufKeys, recurrent: Vec<bool>) -> Result<DeltaNetConfig> {
    let head = keys.need("ssm.state_size")?;
    let n_k_heads = keys.need("ssm.group_count")?;
    let n_v_heads = keys.need("ssm.time_step_rank")?;
    let inner = keys.need("ssm.inner_size")?;
    let conv_kernel = keys.need("ssm.conv_kernel")?;
    if head == 0 || n_k_heads == 0 || n_v_heads == 0 {
        return bad(format!(
            "{}, {} and {} must be positive",
            keys.key("ssm.state_size"),
            keys.key("ssm.group_count"),
            keys.key("ssm.time_step_rank")
        ));
    }
    if !n_v_heads.is_multiple_of(n_k_heads) {
        return bad(format!(
            "{} value heads ({}) are not a multiple of the {} key heads ({})",
            n_v_heads,
            keys.key("ssm.time_step_rank"),
            n_k_heads,
            keys.key("ssm.group_count")
        ));
    }
    if inner != n_v_heads.saturating_mul(head) {
        return bad(format!(
            "{} = {inner} is not value heads × head size = {n_v_heads} × {head}",
            keys.key("ssm.inner_size")
        ));
    }
    if !(1..=64).contains(&conv_kernel) {
        return bad(format!(
            "{} = {conv_kernel} is outside 1..=64",
            keys.key("ssm.conv_kernel")
        ));
    }
    for (name, v) in [("ssm.state_size", head), ("ssm.time_step_rank", n_v_heads)] {
        if v > 1 << 16 {
            return bad(format!("{} = {v} is implausibly large", keys.key(name)));
        }
    }
    Ok(DeltaNetConfig {
        recurrent,
        conv_kernel,
        n_k_heads,
        n_v_heads,
        head_dim: head,
    })
}

/// How many leading dimensions of each head RoPE rotates, and their IMRoPE sections (in rotary
/// pairs).
pub(super) fn partial_rope(
    keys: &GgufKeys,
    head_dim: usize,
) -> Result<(usize, Option<[usize; 4]>)> {
    let rope_dims = gguf_rope_dims(keys, head_dim)?;
    let Some(v) = keys.i64_array("rope.dimension_sections")? else {
        return Ok((rope_dims, None));
    };
    if v.len() != 4 || v.iter().any(|&s| !(0..=1 << 16).contains(&s)) {
        return bad(format!(
            "{} should be 4 non-negative integers, found {v:?}",
            keys.key("rope.dimension_sections")
        ));
    }
    let s = [v[0] as usize, v[1] as usize, v[2] as usize, v[3] as usize];
    let sum: usize = s.iter().sum();
    if sum == 0 || sum > rope_dims / 2 {
        return bad(format!(
            "{} {s:?} sum to {sum}, but there are {} rotary pairs ({} = {rope_dims})",
            keys.key("rope.dimension_sections"),
            rope_dims / 2,
            keys.key("rope.dimension_count")
        ));
    }
    Ok((rope_dims, Some(s)))
}

pub(crate) fn layer<B: Backend>(f: &mut Step<B>, l: &Qwen35Layer<B>) {
    f.norm_input(&l.attn_norm);
    match &l.mixer {
        Mixer::DeltaNet(d) => f.delta_net(d),
        Mixer::Attention(a) => f.gated_attention(a),
    }
    f.residual();
    feed_forward_part(f, l);
}

/// The block's second half: norm, feed-forward (dense or experts), residual.
pub(crate) fn feed_forward_part<B: Backend>(f: &mut Step<B>, l: &Qwen35Layer<B>) {
    f.norm_input(&l.post_attention_norm);
    f.feed_forward(&l.ffn);
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
    /// One row of `qkv`, `conv`, `alpha`, `beta` and `delta`, for a verify pass that runs its
    /// DeltaNet rows one at a time to keep the state after each.
    pub one: [B::Buffer; 5],
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
            one: [
                b.buffer(d.conv_channels())?,
                b.buffer(d.conv_channels())?,
                b.buffer(d.n_v_heads)?,
                b.buffer(d.n_v_heads)?,
                b.buffer(d.value_dim())?,
            ],
        }))
    }
}
