//! The Gated DeltaNet block (linear attention with a recurrent state): a causal convolution over
//! the q/k/v projection, the delta-rule recurrence with decay and write strength, a gated
//! RMSNorm with SiLU(z), and the output projection. Its state (conv rows and one matrix per value
//! head) lives in the session's `RecurrentState`; prefill runs the recurrence over the whole batch
//! in one backend call.

use super::Step;
use crate::backend::{Backend, DeltaNetParams, GateActivation};
use crate::model::weights::DeltaNetWeights;

impl<B: Backend> Step<'_, B> {
    /// Gated DeltaNet of `h` into `o`, advancing this block's recurrent state.
    pub fn delta_net(&mut self, l: &DeltaNetWeights<B>) {
        let (m, rows, il) = (self.model, self.rows, self.il);
        let (b, c) = (&m.backend, &m.config);
        let d = c
            .delta_net
            .as_ref()
            .expect("a DeltaNet block has its settings");
        let s = &mut *self.s;
        let hs = s
            .qwen35
            .as_mut()
            .expect("Qwen3.5 models have Qwen3.5 scratch");
        let state = self
            .cache
            .recurrent
            .as_mut()
            .and_then(|r| r.layers[il].as_mut())
            .expect("recurrent blocks have a state");
        b.matmul_many(
            &s.h,
            &[&l.qkv, &l.z, &l.alpha, &l.beta],
            rows,
            &mut [&mut hs.qkv, &mut hs.z, &mut hs.alpha, &mut hs.beta],
        );
        b.conv_step(
            &hs.qkv,
            &l.conv,
            &mut state.conv,
            &mut hs.conv,
            rows,
            d.conv_channels(),
        );
        let params = DeltaNetParams {
            rows,
            n_k_heads: d.n_k_heads,
            n_v_heads: d.n_v_heads,
            head_dim: d.head_dim,
            eps: c.rms_norm_eps,
        };
        b.gated_delta_net(
            &hs.conv,
            &hs.alpha,
            &hs.beta,
            &l.a,
            &l.dt_bias,
            &mut state.ssm,
            &mut hs.delta,
            &params,
        );
        // Gated RMSNorm: rms_norm(head) · w · silu(z), per value head.
        b.rms_norm(&mut hs.delta, &l.norm, rows * d.n_v_heads, c.rms_norm_eps);
        b.gated_activation(
            &mut hs.z,
            &hs.delta,
            rows * d.value_dim(),
            GateActivation::Silu,
        );
        b.matmul(&hs.z, &l.out, rows, &mut s.o);
    }
}
