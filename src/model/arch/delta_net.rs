//! The Gated DeltaNet block (linear attention with a recurrent state): a causal convolution over
//! the q/k/v projection, the delta-rule recurrence with decay and write strength, a gated
//! RMSNorm with SiLU(z), and the output projection. Its state (conv rows and one matrix per value
//! head) lives in the session's `RecurrentState`; prefill runs the recurrence over the whole batch
//! in one backend call.

use super::Step;
use crate::backend::{Backend, DeltaNetParams, GateActivation};
use crate::model::weights::DeltaNetWeights;

impl<B: Backend> Step<'_, '_, B> {
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
        // Recurrent blocks run one sequence per call (`Model::forward_batch`).
        let recurrent = self.seqs[0]
            .cache
            .recurrent
            .as_mut()
            .expect("recurrent blocks have a state");
        b.matmul_many(
            &s.h,
            &[&l.qkv, &l.z, &l.alpha, &l.beta],
            rows,
            &mut [&mut hs.qkv, &mut hs.z, &mut hs.alpha, &mut hs.beta],
        );
        let params = DeltaNetParams {
            rows,
            n_k_heads: d.n_k_heads,
            n_v_heads: d.n_v_heads,
            head_dim: d.head_dim,
            eps: c.rms_norm_eps,
        };
        let channels = d.conv_channels();
        if recurrent.keeps_rows() {
            // A verify pass: one row at a time, the state after each kept, so that rejected
            // rows leave by restoring one (recurrent.rs) rather than by running the rest again.
            let (conv_len, ssm_len) = recurrent.state_lens();
            let one = DeltaNetParams { rows: 1, ..params };
            let [qkv, conv, alpha, beta, delta] = &mut hs.one;
            for r in 0..rows {
                let (live, kept) = recurrent
                    .row_state(il, r)
                    .expect("a verify pass has a slot per row");
                b.copy_rows(&hs.qkv, r, qkv, 0, 1, channels);
                b.copy_rows(&hs.alpha, r, alpha, 0, 1, d.n_v_heads);
                b.copy_rows(&hs.beta, r, beta, 0, 1, d.n_v_heads);
                b.conv_step(qkv, &l.conv, &mut live.conv, conv, 1, channels);
                b.gated_delta_net(
                    conv,
                    alpha,
                    beta,
                    &l.a,
                    &l.dt_bias,
                    &mut live.ssm,
                    delta,
                    &one,
                );
                b.copy_rows(delta, 0, &mut hs.delta, r, 1, d.value_dim());
                if let Some(kept) = kept {
                    b.copy_rows(&live.conv, 0, &mut kept.conv, 0, 1, conv_len);
                    b.copy_rows(&live.ssm, 0, &mut kept.ssm, 0, 1, ssm_len);
                }
            }
        } else {
            let state = recurrent.layers[il]
                .as_mut()
                .expect("recurrent blocks have a state");
            b.conv_step(
                &hs.qkv,
                &l.conv,
                &mut state.conv,
                &mut hs.conv,
                rows,
                channels,
            );
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
        }
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
