//! The weights of Qwen3.5's blocks (GGUF `qwen35`, `qwen35moe`): a Gated DeltaNet or a gated
//! full-attention mixer, then a dense SwiGLU or a mixture of experts with a gated shared expert
//! (weights/moe.rs). A file's multi-token-prediction block is one of these (weights/mtp.rs).
//! Every tensor's shape is checked against the configuration, so an inconsistent file is an
//! error naming the tensor here, not a wrong index in a kernel.

use super::Finder;
use super::moe::Ffn;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::gguf::GgmlType;
use crate::model::config::ModelConfig;

pub struct Qwen35Layer<B: Backend> {
    pub attn_norm: B::Weight,
    /// The norm before the feed-forward part (`post_attention_norm` in GGUF).
    pub post_attention_norm: B::Weight,
    pub mixer: Mixer<B>,
    pub ffn: Ffn<B>,
}

pub enum Mixer<B: Backend> {
    DeltaNet(DeltaNetWeights<B>),
    Attention(GatedAttentionWeights<B>),
}

/// A Gated DeltaNet block (linear attention with a recurrent state).
pub struct DeltaNetWeights<B: Backend> {
    /// Input → the q, k and v channels (`attn_qkv`).
    pub qkv: B::Weight,
    /// Input → z, the output gate (`attn_gate`).
    pub z: B::Weight,
    /// Input → the decay and write-strength inputs, one per value head.
    pub alpha: B::Weight,
    pub beta: B::Weight,
    /// Convolution taps, K per q/k/v channel (F32).
    pub conv: B::Weight,
    /// −exp(A_log) and the time-step bias, per value head.
    pub a: B::Weight,
    pub dt_bias: B::Weight,
    /// The gated RMSNorm's weight, shared by the value heads.
    pub norm: B::Weight,
    pub out: B::Weight,
}

/// Full attention with a sigmoid output gate. GGUF's `attn_q` interleaves each head's query and
/// gate rows; they are separated at load into `wq` and `wq_gate`.
pub struct GatedAttentionWeights<B: Backend> {
    pub wq: B::Weight,
    pub wq_gate: B::Weight,
    pub wk: B::Weight,
    pub wv: B::Weight,
    pub wo: B::Weight,
    pub q_norm: B::Weight,
    pub k_norm: B::Weight,
}

pub(super) fn layer<B: Backend>(
    f: &Finder<'_, B>,
    c: &ModelConfig,
    i: usize,
) -> Result<Qwen35Layer<B>> {
    let n = |part: &str| format!("blk.{i}.{part}");
    let h = c.hidden_size;
    let mixer = if c.layer_is_recurrent(i) {
        Mixer::DeltaNet(delta_net(f, c, i)?)
    } else {
        let (q, kv, hd) = (c.q_dim(), c.kv_dim(), c.head_dim);
        let (wq, wq_gate) = split_query_gate(f, &n("attn_q.weight"), h, c.n_heads, hd)?;
        Mixer::Attention(GatedAttentionWeights {
            wq,
            wq_gate,
            wk: f.get(&n("attn_k.weight"), &[h, kv])?,
            wv: f.get(&n("attn_v.weight"), &[h, kv])?,
            wo: f.get(&n("attn_output.weight"), &[q, h])?,
            q_norm: f.norm(&n("attn_q_norm.weight"), hd)?,
            k_norm: f.norm(&n("attn_k_norm.weight"), hd)?,
        })
    };
    let ffn = super::moe::ffn(f, c, i)?;
    Ok(Qwen35Layer {
        attn_norm: f.norm(&n("attn_norm.weight"), h)?,
        post_attention_norm: f.norm(&n("post_attention_norm.weight"), h)?,
        mixer,
        ffn,
    })
}

fn delta_net<B: Backend>(
    f: &Finder<'_, B>,
    c: &ModelConfig,
    i: usize,
) -> Result<DeltaNetWeights<B>> {
    let n = |part: &str| format!("blk.{i}.{part}");
    let h = c.hidden_size;
    let d = c
        .delta_net
        .as_ref()
        .expect("Qwen3.5 configurations have DeltaNet settings");
    let (channels, vd, nv) = (d.conv_channels(), d.value_dim(), d.n_v_heads);
    let conv_name = n("ssm_conv1d.weight");
    let conv = f.tensor(&conv_name, &[d.conv_kernel, channels])?;
    if conv.dtype != GgmlType::F32 {
        return Err(Error::invalid(
            &f.file.path,
            format!(
                "tensor '{conv_name}' is {}; kiln needs the convolution taps in F32 (as llama.cpp does)",
                conv.dtype
            ),
        ));
    }
    Ok(DeltaNetWeights {
        qkv: f.get(&n("attn_qkv.weight"), &[h, channels])?,
        z: f.get(&n("attn_gate.weight"), &[h, vd])?,
        alpha: f.get(&n("ssm_alpha.weight"), &[h, nv])?,
        beta: f.get(&n("ssm_beta.weight"), &[h, nv])?,
        conv: f.backend.weight(conv)?,
        a: f.get(&n("ssm_a"), &[nv])?,
        dt_bias: f.get(&n("ssm_dt.bias"), &[nv])?,
        // A plain weight in Hugging Face too (no 1 to add), used as stored.
        norm: f.get(&n("ssm_norm.weight"), &[d.head_dim])?,
        out: f.get(&n("ssm_out.weight"), &[vd, h])?,
    })
}

/// Separate the query and gate rows of a gated attention's `attn_q` (per head: head_dim query
/// rows, then head_dim gate rows) into two weights.
fn split_query_gate<B: Backend>(
    f: &Finder<'_, B>,
    name: &str,
    hidden: usize,
    n_heads: usize,
    head_dim: usize,
) -> Result<(B::Weight, B::Weight)> {
    let t = f.tensor(name, &[hidden, 2 * n_heads * head_dim])?;
    let rows = |part: usize| -> Vec<usize> {
        (0..n_heads)
            .flat_map(|hh| {
                let start = (2 * hh + part) * head_dim;
                start..start + head_dim
            })
            .collect()
    };
    let query = t.gather_rows(format!("{name}[query]"), &rows(0));
    let gate = t.gather_rows(format!("{name}[gate]"), &rows(1));
    Ok((f.backend.weight(&query)?, f.backend.weight(&gate)?))
}
