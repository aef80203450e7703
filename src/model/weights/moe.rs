//! The weights of a block's feed-forward part, for every family: a dense SwiGLU, or a mixture of
//! experts (router, stacked experts, and a shared expert where the family has one: Qwen3.5 MoE's
//! gated, GLM-4.5's not; Qwen3 MoE has none). Which one a block loads follows `ModelConfig::moe`
//! (GLM-4.5's first blocks are dense).

use super::Finder;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::model::config::ModelConfig;

/// A block's feed-forward part.
pub enum Ffn<B: Backend> {
    Dense {
        gate: B::Weight,
        up: B::Weight,
        down: B::Weight,
    },
    Moe(MoeWeights<B>),
}

/// The experts' gate and up projections: two stacked weights, or one with each expert's gate
/// rows followed by its up rows (`ffn_gate_up_exps`).
pub enum ExpertsGateUp<B: Backend> {
    Separate { gate: B::Weight, up: B::Weight },
    Fused(B::Weight),
}

/// A mixture of experts: the router, the experts stacked along the last dimension (GGUF `ne`
/// `[in, out, n_expert]`), and the shared expert where the family has one.
pub struct MoeWeights<B: Backend> {
    /// Input → one logit per expert (`ffn_gate_inp`).
    pub router: B::Weight,
    pub gate_up: ExpertsGateUp<B>,
    pub down: B::Weight,
    pub shared: Option<SharedExpertWeights<B>>,
    /// gpt-oss's biases.
    pub biases: Option<ExpertBiases<B>>,
    /// GLM-4.5's bias on the scores that choose the experts (`exp_probs_b`, one per expert).
    pub selection_bias: Option<B::Weight>,
}

/// The router's bias (one per expert) and each expert's gate, up and down biases, stacked one
/// row per expert.
pub struct ExpertBiases<B: Backend> {
    pub router: B::Weight,
    pub gate: B::Weight,
    pub up: B::Weight,
    pub down: B::Weight,
}

/// A SwiGLU expert every token runs, scaled by sigmoid of its own gate logit where it has one.
pub struct SharedExpertWeights<B: Backend> {
    /// Input → the shared expert's gate logit (`ffn_gate_inp_shexp`, one row; Qwen3.5 MoE).
    pub gate_inp: Option<B::Weight>,
    pub gate: B::Weight,
    pub up: B::Weight,
    pub down: B::Weight,
}

/// Block `i`'s feed-forward weights: `ffn_gate`/`ffn_up`/`ffn_down`, or the experts' tensors
/// when the configuration has experts.
pub(super) fn ffn<B: Backend>(f: &Finder<'_, B>, c: &ModelConfig, i: usize) -> Result<Ffn<B>> {
    let n = |part: &str| format!("blk.{i}.{part}");
    let h = c.hidden_size;
    let dense = match &c.moe {
        None => None,
        Some(m) if i < m.first_moe_layer => None,
        Some(m) => Some(m),
    };
    let Some(m) = dense else {
        return dense_ffn(f, c, i);
    };
    let (e, eff) = (m.n_expert, m.expert_ff);
    let gate_up = match f.file.tensor(&n("ffn_gate_up_exps.weight")) {
        Some(_) => ExpertsGateUp::Fused(f.get(&n("ffn_gate_up_exps.weight"), &[h, 2 * eff, e])?),
        None => ExpertsGateUp::Separate {
            gate: f.get(&n("ffn_gate_exps.weight"), &[h, eff, e])?,
            up: f.get(&n("ffn_up_exps.weight"), &[h, eff, e])?,
        },
    };
    let shared = match m.shared_ff {
        None => None,
        Some(sff) => Some(SharedExpertWeights {
            gate_inp: match m.shared_gated {
                true => Some(shared_expert_gate(f, &n("ffn_gate_inp_shexp.weight"), h)?),
                false => None,
            },
            gate: f.get(&n("ffn_gate_shexp.weight"), &[h, sff])?,
            up: f.get(&n("ffn_up_shexp.weight"), &[h, sff])?,
            down: f.get(&n("ffn_down_shexp.weight"), &[sff, h])?,
        }),
    };
    let biases = match m.biases {
        false => None,
        true => Some(ExpertBiases {
            router: f.get(&n("ffn_gate_inp.bias"), &[e])?,
            gate: f.flat(&n("ffn_gate_exps.bias"), &[eff, e])?,
            up: f.flat(&n("ffn_up_exps.bias"), &[eff, e])?,
            down: f.flat(&n("ffn_down_exps.bias"), &[h, e])?,
        }),
    };
    Ok(Ffn::Moe(MoeWeights {
        router: f.get(&n("ffn_gate_inp.weight"), &[h, e])?,
        gate_up,
        down: f.get(&n("ffn_down_exps.weight"), &[eff, h, e])?,
        shared,
        biases,
        selection_bias: match m.selection_bias {
            true => Some(f.get(&n("exp_probs_b.bias"), &[e])?),
            false => None,
        },
    }))
}

/// Block `i`'s dense feed-forward: gate and up (or one projection of both), and down.
pub(super) fn dense_ffn<B: Backend>(
    f: &Finder<'_, B>,
    c: &ModelConfig,
    i: usize,
) -> Result<Ffn<B>> {
    let n = |part: &str| format!("blk.{i}.{part}");
    let (h, ff) = (c.hidden_size, c.layer_ff(i));
    // llama.cpp reads these for a few families (Mistral 3); kiln has no biased dense
    // feed-forward, and a bias left out would change every output.
    for part in ["ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"] {
        if f.file.tensor(&n(part)).is_some() {
            return Err(Error::Unsupported(format!(
                "{}: feed-forward biases ({}) are not supported",
                f.file.path.display(),
                n(part)
            )));
        }
    }
    // Gate and up, or one projection of both, gate rows first (Phi-3's `ffn_up`).
    let fused = f.file.tensor(&n("ffn_gate.weight")).is_none()
        && f.file
            .tensor(&n("ffn_up.weight"))
            .is_some_and(|t| t.dims == [h, 2 * ff]);
    let [gate, up] = match fused {
        true => f.split(&n("ffn_up.weight"), h, [ff, ff])?,
        false => [
            f.get(&n("ffn_gate.weight"), &[h, ff])?,
            f.get(&n("ffn_up.weight"), &[h, ff])?,
        ],
    };
    Ok(Ffn::Dense {
        gate,
        up,
        down: f.get(&n("ffn_down.weight"), &[ff, h])?,
    })
}

/// The shared expert's gate, one row of `hidden` values, stored `[hidden, 1]` by the converter
/// or `[hidden]` by others (llama.cpp accepts both).
fn shared_expert_gate<B: Backend>(
    f: &Finder<'_, B>,
    name: &str,
    hidden: usize,
) -> Result<B::Weight> {
    let flat = f.file.tensor(name).is_some_and(|t| t.dims.len() == 1);
    if flat {
        let mut t = f.tensor(name, &[hidden])?.clone();
        t.dims = vec![hidden, 1];
        return f.backend.weight(&t);
    }
    f.get(name, &[hidden, 1])
}
