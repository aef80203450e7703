//! The mixture-of-experts feed-forward block, shared by the families whose blocks route to
//! experts (Qwen3.5 MoE, qwen35.rs; Qwen3 MoE, qwen3moe.rs; gpt-oss, gpt_oss.rs; GLM-4.5,
//! glm4moe.rs): a router picks each token's top experts (`MoeConfig`: softmax or sigmoid scores,
//! an optional selection bias, weights renormalized and scaled), their gated outputs (SwiGLU, or
//! gpt-oss's clamped one, with biases where the family has them) are summed by weight, and where
//! the block has one, a shared SwiGLU expert is added, scaled by sigmoid of its own gate where it
//! has one.
//! Also here: the experts' GGUF keys, and the block's activation buffers.

use super::Step;
use crate::backend::{Backend, ExpertGating, ExpertMatmulParams, GateActivation, MoeRouteParams};
use crate::error::{Error, Result};
use crate::model::config::{GgufKeys, MoeConfig};
use crate::model::weights::{ExpertBiases, ExpertsGateUp, MoeWeights};

/// Whether a family's expert blocks have a shared expert, and so need its width.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum SharedExpert {
    Yes,
    No,
}

/// The experts (`expert_count` > 0; None without), with the widths converters write in several
/// ways, each error naming its key.
pub(crate) fn gguf_experts(keys: &GgufKeys, shared: SharedExpert) -> Result<Option<MoeConfig>> {
    let n_expert = match keys.usize("expert_count")? {
        None | Some(0) => return Ok(None),
        Some(n) => n,
    };
    let n_used = keys.need("expert_used_count")?;
    if n_used == 0 || n_used > n_expert || n_expert > 1 << 16 {
        return Err(Error::Format(format!(
            "{} = {n_used} must be between 1 and {} = {n_expert}",
            keys.key("expert_used_count"),
            keys.key("expert_count")
        )));
    }
    // Only a fallback here; a per-layer array (Gemma 4) is its family's to read.
    let dense_ff = keys.usize("feed_forward_length").ok().flatten();
    let expert_ff = match keys.usize("expert_feed_forward_length") {
        Ok(Some(ff)) => ff,
        // llama.cpp's fallback: the dense width split among the experts a token uses.
        Ok(None) => dense_ff
            .map(|ff| ff / n_used)
            .ok_or_else(|| keys.missing("expert_feed_forward_length"))?,
        // A per-layer array: kiln runs files whose experts all have one width.
        Err(_) => {
            let v = keys
                .i64_array("expert_feed_forward_length")?
                .unwrap_or_default();
            match v.first() {
                Some(&f) if f > 0 && v.iter().all(|&x| x == f) => f as usize,
                _ => {
                    return Err(Error::Unsupported(format!(
                        "{} varies across layers ({v:?})",
                        keys.key("expert_feed_forward_length")
                    )));
                }
            }
        }
    };
    if expert_ff == 0 || expert_ff > 1 << 20 {
        return Err(Error::Format(format!(
            "{} = {expert_ff} must be positive and plausible",
            keys.key("expert_feed_forward_length")
        )));
    }
    let shared_ff = match shared {
        SharedExpert::No => None,
        SharedExpert::Yes => {
            let ff = keys
                .usize("expert_shared_feed_forward_length")?
                .or(dense_ff)
                .ok_or_else(|| keys.missing("expert_shared_feed_forward_length"))?;
            if ff == 0 || ff > 1 << 24 {
                return Err(Error::Format(format!(
                    "{} = {ff} must be positive and plausible",
                    keys.key("expert_shared_feed_forward_length")
                )));
            }
            Some(ff)
        }
    };
    Ok(Some(MoeConfig {
        n_expert,
        n_used,
        expert_ff,
        shared_ff,
        activation: GateActivation::Silu,
        biases: false,
        gating: ExpertGating::Softmax,
        normalize: true,
        weights_scale: 1.0,
        selection_bias: false,
        shared_gated: true,
        first_moe_layer: 0,
    }))
}

/// Weights and scratch both follow `MoeConfig::shared_ff`.
const SHARED_SCRATCH: &str = "a shared expert has its scratch";

/// The activation buffers of a mixture-of-experts block, for up to `rows` tokens.
pub(crate) struct MoeScratch<B: Backend> {
    pub(super) router: B::Buffer,
    pub(super) selected: B::Buffer,
    pub(super) weights: B::Buffer,
    /// Per slot (token × used expert): gate and up, then the down projection.
    pub(super) gate: B::Buffer,
    pub(super) up: B::Buffer,
    pub(super) down: B::Buffer,
    /// The shared expert's gate logit and output (its gate and up use the dense scratch).
    shared: Option<(B::Buffer, B::Buffer)>,
}

impl<B: Backend> MoeScratch<B> {
    pub fn new(m: &MoeConfig, hidden: usize, b: &B, rows: usize) -> Result<MoeScratch<B>> {
        let slots = rows * m.n_used;
        Ok(MoeScratch {
            router: b.buffer(rows * m.n_expert)?,
            selected: b.buffer(slots)?,
            weights: b.buffer(slots)?,
            gate: b.buffer(slots * m.expert_ff)?,
            up: b.buffer(slots * m.expert_ff)?,
            down: b.buffer(slots * hidden)?,
            shared: match m.shared_ff {
                Some(_) => Some((b.buffer(rows)?, b.buffer(rows * hidden)?)),
                None => None,
            },
        })
    }
}

/// How `moe_route` picks and weighs `rows` tokens' experts under `moe`.
pub(super) fn route_params(moe: &MoeConfig, rows: usize) -> MoeRouteParams {
    MoeRouteParams {
        rows,
        n_expert: moe.n_expert,
        n_used: moe.n_used,
        gating: moe.gating,
        normalize: moe.normalize,
        scale: moe.weights_scale,
    }
}

/// The routed experts' weights, for `run`.
pub(super) struct RoutedExperts<'a, B: Backend> {
    pub gate_up: &'a ExpertsGateUp<B>,
    pub down: &'a B::Weight,
    pub biases: Option<&'a ExpertBiases<B>>,
}

impl<B: Backend> RoutedExperts<'_, B> {
    /// Each slot's expert (`ms.selected`, routed already) on its token's row of `input`: gate and
    /// up, the activation, down, into `ms.down` (one row of `hidden` per slot).
    pub(super) fn run(
        &self,
        b: &B,
        input: &B::Buffer,
        ms: &mut MoeScratch<B>,
        rows: usize,
        moe: &MoeConfig,
        hidden: usize,
    ) {
        let (k, eff) = (moe.n_used, moe.expert_ff);
        let shared_input = |w_rows: usize, stride: usize, offset: usize| ExpertMatmulParams {
            rows,
            n_used: k,
            per_slot_input: false,
            expert_rows: w_rows,
            expert_stride: stride,
            row_offset: offset,
        };
        match self.gate_up {
            ExpertsGateUp::Separate { gate, up } => {
                let p = shared_input(eff, eff, 0);
                b.expert_matmul(input, gate, &ms.selected, &mut ms.gate, &p);
                b.expert_matmul(input, up, &ms.selected, &mut ms.up, &p);
            }
            ExpertsGateUp::Fused(w) => {
                let gate = shared_input(eff, 2 * eff, 0);
                let up = shared_input(eff, 2 * eff, eff);
                b.expert_matmul(input, w, &ms.selected, &mut ms.gate, &gate);
                b.expert_matmul(input, w, &ms.selected, &mut ms.up, &up);
            }
        }
        if let Some(bias) = self.biases {
            b.add_expert_bias(&mut ms.gate, &bias.gate, &ms.selected, rows * k, eff);
            b.add_expert_bias(&mut ms.up, &bias.up, &ms.selected, rows * k, eff);
        }
        b.gated_activation(&mut ms.gate, &ms.up, rows * k * eff, moe.activation);
        let down = ExpertMatmulParams {
            rows,
            n_used: k,
            per_slot_input: true,
            expert_rows: hidden,
            expert_stride: hidden,
            row_offset: 0,
        };
        b.expert_matmul(&ms.gate, self.down, &ms.selected, &mut ms.down, &down);
        if let Some(bias) = self.biases {
            b.add_expert_bias(&mut ms.down, &bias.down, &ms.selected, rows * k, hidden);
        }
    }
}

impl<B: Backend> Step<'_, '_, B> {
    /// Routed experts, plus the gated shared expert where the block has one, of `h` into `o`.
    pub fn moe(&mut self, l: &MoeWeights<B>) {
        let (m, rows) = (self.model, self.rows);
        let (b, c) = (&m.backend, &m.config);
        let moe = c.moe.as_ref().expect("an MoE block has its settings");
        let (h, k) = (c.hidden_size, moe.n_used);
        let s = &mut *self.s;
        let ms = s.moe.as_mut().expect("MoE models have MoE scratch");

        // Everything that reads the block's input, in one pass: router, and the shared expert's
        // gate logit, gate and up.
        match &l.shared {
            Some(sh) => {
                let (shared_gate, _) = ms.shared.as_mut().expect(SHARED_SCRATCH);
                match &sh.gate_inp {
                    Some(gate_inp) => b.matmul_many(
                        &s.h,
                        &[&l.router, gate_inp, &sh.gate, &sh.up],
                        rows,
                        &mut [&mut ms.router, shared_gate, &mut s.gate, &mut s.up],
                    ),
                    None => b.matmul_many(
                        &s.h,
                        &[&l.router, &sh.gate, &sh.up],
                        rows,
                        &mut [&mut ms.router, &mut s.gate, &mut s.up],
                    ),
                }
            }
            None => b.matmul(&s.h, &l.router, rows, &mut ms.router),
        }
        if let Some(bias) = &l.biases {
            b.add_bias(&mut ms.router, &bias.router, rows);
        }
        let route = route_params(moe, rows);
        let bias = l.selection_bias.as_ref();
        b.moe_route(&ms.router, bias, &route, &mut ms.selected, &mut ms.weights);
        let experts = RoutedExperts {
            gate_up: &l.gate_up,
            down: &l.down,
            biases: l.biases.as_ref(),
        };
        experts.run(b, &s.h, ms, rows, moe, h);
        b.moe_combine(&ms.down, &ms.weights, rows, k, h, &mut s.o);

        // The shared expert, scaled by sigmoid(shared_gate · x) where it has that gate.
        if let Some(sh) = &l.shared {
            let (shared_gate, shared_out) = ms.shared.as_mut().expect(SHARED_SCRATCH);
            let width = moe.shared_ff.expect(SHARED_SCRATCH);
            b.gated_activation(&mut s.gate, &s.up, rows * width, GateActivation::Silu);
            b.matmul(&s.gate, &sh.down, rows, shared_out);
            if sh.gate_inp.is_some() {
                b.mul_sigmoid(shared_out, shared_gate, rows, h, 1);
            }
            b.add(&mut s.o, shared_out, rows * h);
        }
    }
}
