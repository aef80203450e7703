//! The mixture-of-experts feed-forward block: a softmax router picks each token's top experts
//! (weights renormalized), their SwiGLU outputs are summed by weight, and a shared SwiGLU expert,
//! scaled by sigmoid of its own gate, is added.

use super::Step;
use crate::backend::{Backend, ExpertMatmulParams, GateActivation};
use crate::error::Result;
use crate::model::config::MoeConfig;
use crate::model::weights::{ExpertsGateUp, MoeWeights};

/// The activation buffers of a mixture-of-experts block, for up to `rows` tokens.
pub(crate) struct MoeScratch<B: Backend> {
    router: B::Buffer,
    selected: B::Buffer,
    weights: B::Buffer,
    /// Per slot (token × used expert): gate and up, then the down projection.
    gate: B::Buffer,
    up: B::Buffer,
    down: B::Buffer,
    shared_gate: B::Buffer,
    shared_out: B::Buffer,
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
            shared_gate: b.buffer(rows)?,
            shared_out: b.buffer(rows * hidden)?,
        })
    }
}

impl<B: Backend> Step<'_, B> {
    /// Routed experts plus the gated shared expert, of `h` into `o`.
    pub fn moe(&mut self, l: &MoeWeights<B>) {
        let (m, rows) = (self.model, self.rows);
        let (b, c) = (&m.backend, &m.config);
        let moe = c.moe.as_ref().expect("an MoE block has its settings");
        let (h, k, eff) = (c.hidden_size, moe.n_used, moe.expert_ff);
        let s = &mut *self.s;
        let ms = s
            .qwen35
            .as_mut()
            .and_then(|hs| hs.moe.as_mut())
            .expect("MoE models have MoE scratch");

        // Everything that reads the block's input, in one pass: router, shared gate, gate, up.
        b.matmul_many(
            &s.h,
            &[&l.router, &l.shared_gate, &l.shared_gate_proj, &l.shared_up],
            rows,
            &mut [&mut ms.router, &mut ms.shared_gate, &mut s.gate, &mut s.up],
        );
        b.moe_route(
            &ms.router,
            rows,
            moe.n_expert,
            k,
            &mut ms.selected,
            &mut ms.weights,
        );
        let shared_input = |w_rows: usize, stride: usize, offset: usize| ExpertMatmulParams {
            rows,
            n_used: k,
            per_slot_input: false,
            expert_rows: w_rows,
            expert_stride: stride,
            row_offset: offset,
        };
        match &l.gate_up {
            ExpertsGateUp::Separate { gate, up } => {
                let p = shared_input(eff, eff, 0);
                b.expert_matmul(&s.h, gate, &ms.selected, &mut ms.gate, &p);
                b.expert_matmul(&s.h, up, &ms.selected, &mut ms.up, &p);
            }
            ExpertsGateUp::Fused(w) => {
                let gate = shared_input(eff, 2 * eff, 0);
                let up = shared_input(eff, 2 * eff, eff);
                b.expert_matmul(&s.h, w, &ms.selected, &mut ms.gate, &gate);
                b.expert_matmul(&s.h, w, &ms.selected, &mut ms.up, &up);
            }
        }
        b.gated_activation(&mut ms.gate, &ms.up, rows * k * eff, GateActivation::Silu);
        let down = ExpertMatmulParams {
            rows,
            n_used: k,
            per_slot_input: true,
            expert_rows: h,
            expert_stride: h,
            row_offset: 0,
        };
        b.expert_matmul(&ms.gate, &l.down, &ms.selected, &mut ms.down, &down);
        b.moe_combine(&ms.down, &ms.weights, rows, k, h, &mut s.o);

        // The shared expert, gated by sigmoid(shared_gate · x).
        b.gated_activation(
            &mut s.gate,
            &s.up,
            rows * moe.shared_ff,
            GateActivation::Silu,
        );
        b.matmul(&s.gate, &l.shared_down, rows, &mut ms.shared_out);
        b.mul_sigmoid(&mut ms.shared_out, &ms.shared_gate, rows, h, 1);
        b.add(&mut s.o, &ms.shared_out, rows * h);
    }
}
