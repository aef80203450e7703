//! Gemma 4's weights beyond Gemma's layer (weights.rs loads that): the mixture of experts that
//! 26B-A4B runs beside each layer's dense MLP, and the per-layer token embeddings of E2B/E4B. The
//! forward pass that uses them is in arch/gemma4.rs.

use super::Finder;
use super::moe::ExpertsGateUp;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::model::config::ModelConfig;
use crate::tensor::Tensor;

/// A Gemma 4 block's experts: routed on their own norm of the block's input, summed by weight,
/// normed, and added to the dense MLP's (normed) output.
pub struct Gemma4Experts<B: Backend> {
    /// `rms_norm(x) · router_norm` is the router's input: `ffn_gate_inp.scale` / sqrt(hidden).
    pub router_norm: B::Weight,
    /// Input → one logit per expert (`ffn_gate_inp`).
    pub router: B::Weight,
    /// The experts' input norm (`pre_ffw_norm_2`).
    pub input_norm: B::Weight,
    /// The norms of the dense MLP's output and of the experts' sum (`post_ffw_norm_1`, `_2`).
    pub dense_out_norm: B::Weight,
    pub experts_out_norm: B::Weight,
    pub gate_up: ExpertsGateUp<B>,
    pub down: B::Weight,
    /// One factor per expert on its output (`ffn_down_exps.scale`), where the file has them.
    pub down_scale: Option<B::Weight>,
}

/// A Gemma 4 block's per-layer input (E2B/E4B): `x += post_norm(proj(gelu(gate(x)) · input))`,
/// with `input` this layer's slice of the per-layer embeddings mixed with a projection of the
/// token's embedding (`PerLayerEmbeddings`).
pub struct PerLayerInput<B: Backend> {
    /// The block's output → P (`inp_gate`).
    pub gate: B::Weight,
    /// P → hidden (`proj`).
    pub proj: B::Weight,
    pub post_norm: B::Weight,
    /// The scaled token embedding → this layer's P values (rows of `per_layer_model_proj`).
    pub model_proj: B::Weight,
}

/// The model's per-layer token embeddings: `per_layer_token_embd`, one row of P values per
/// (token, layer) (row `token · layers + layer`), and the norm of the embedding's projection.
pub struct PerLayerEmbeddings<B: Backend> {
    pub table: B::Weight,
    pub proj_norm: B::Weight,
}

/// Block `i`'s experts, when the configuration has them.
pub(super) fn experts<B: Backend>(
    f: &Finder<'_, B>,
    c: &ModelConfig,
    i: usize,
) -> Result<Option<Gemma4Experts<B>>> {
    let Some(m) = &c.moe else {
        return Ok(None);
    };
    let n = |part: &str| format!("blk.{i}.{part}");
    let (h, e, eff) = (c.hidden_size, m.n_expert, m.expert_ff);
    let scale = f.tensor(&n("ffn_gate_inp.scale"), &[h])?.to_f32();
    let inv = 1.0 / (h as f32).sqrt();
    let folded: Vec<f32> = scale.iter().map(|s| s * inv).collect();
    let gate_up = match f.file.tensor(&n("ffn_gate_up_exps.weight")) {
        Some(_) => ExpertsGateUp::Fused(f.get(&n("ffn_gate_up_exps.weight"), &[h, 2 * eff, e])?),
        None => ExpertsGateUp::Separate {
            gate: f.get(&n("ffn_gate_exps.weight"), &[h, eff, e])?,
            up: f.get(&n("ffn_up_exps.weight"), &[h, eff, e])?,
        },
    };
    Ok(Some(Gemma4Experts {
        router_norm: f.backend.weight(&Tensor::from_f32(
            n("ffn_gate_inp.scale"),
            vec![h],
            &folded,
        ))?,
        router: f.get(&n("ffn_gate_inp.weight"), &[h, e])?,
        input_norm: f.norm(&n("pre_ffw_norm_2.weight"), h)?,
        dense_out_norm: f.norm(&n("post_ffw_norm_1.weight"), h)?,
        experts_out_norm: f.norm(&n("post_ffw_norm_2.weight"), h)?,
        gate_up,
        down: f.get(&n("ffn_down_exps.weight"), &[eff, h, e])?,
        down_scale: f.optional(&n("ffn_down_exps.scale"), &[e])?,
    }))
}

/// Block `i`'s per-layer input, when the model has per-layer embeddings.
pub(super) fn per_layer_input<B: Backend>(
    f: &Finder<'_, B>,
    c: &ModelConfig,
    i: usize,
) -> Result<Option<PerLayerInput<B>>> {
    let p = c.per_layer_embedding;
    if p == 0 {
        return Ok(None);
    }
    let n = |part: &str| format!("blk.{i}.{part}");
    let h = c.hidden_size;
    let proj = f.tensor("per_layer_model_proj.weight", &[h, p * c.n_layers])?;
    Ok(Some(PerLayerInput {
        gate: f.get(&n("inp_gate.weight"), &[h, p])?,
        proj: f.get(&n("proj.weight"), &[p, h])?,
        post_norm: f.norm(&n("post_norm.weight"), h)?,
        model_proj: f.backend.weight(&proj.row_range(
            n("per_layer_model_proj.weight"),
            i * p,
            p,
        ))?,
    }))
}

/// The model's per-layer embeddings, when it has them: `per_layer_token_embd` read as one row
/// per (token, layer), which needs each layer's P values to be whole blocks of its type.
pub(super) fn per_layer_embeddings<B: Backend>(
    f: &Finder<'_, B>,
    c: &ModelConfig,
) -> Result<Option<PerLayerEmbeddings<B>>> {
    let p = c.per_layer_embedding;
    if p == 0 {
        return Ok(None);
    }
    let name = "per_layer_token_embd.weight";
    let t = f.tensor(name, &[p * c.n_layers, c.vocab_size])?;
    if !p.is_multiple_of(t.dtype.block_len()) {
        return Err(Error::invalid(
            &f.file.path,
            format!(
                "tensor '{name}' is {:?}, whose blocks of {} values do not divide a layer's {p}",
                t.dtype,
                t.dtype.block_len()
            ),
        ));
    }
    let mut rows = t.clone();
    rows.dims = vec![p, c.vocab_size * c.n_layers];
    Ok(Some(PerLayerEmbeddings {
        table: f.backend.embedding_table(&rows)?,
        proj_norm: f.norm("per_layer_proj_norm.weight", p)?,
    }))
}
