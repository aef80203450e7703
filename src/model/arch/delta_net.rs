//! The Gated DeltaNet block (linear attention with a recurrent state): a causal convolution over
//! the q/k/v projection, the delta-rule recurrence with decay and write strength, a gated
//! RMSNorm with SiLU(z), and the output projection. Its state (conv rows and one matrix per value
//! head) lives in each session's `RecurrentState`; prefill runs the recurrence over a sequence's
//! rows in one backend call.

use super::{KvCache, Step};
use crate::backend::{Backend, DeltaNetParams, GateActivation};
use crate::model::weights::DeltaNetWeights;

impl<B: Backend> Step<'_, '_, B> {
    /// Gated DeltaNet of `h` into `o`, advancing this block's recurrent state: the projections
    /// over every row of the call, the convolution and recurrence per sequence, each on its own
    /// state (a call's sequences are copied to `SeqScratch` and back, as attention's are).
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
        let (channels, heads, value_dim) = (d.conv_channels(), d.n_v_heads, d.value_dim());
        if let [seq] = &mut *self.seqs {
            let io = DeltaIo {
                qkv: &hs.qkv,
                alpha: &hs.alpha,
                beta: &hs.beta,
                conv: &mut hs.conv,
                delta: &mut hs.delta,
            };
            recur(b, l, il, &mut *seq.cache, io, &mut hs.one, params);
        } else {
            let mut sub = s
                .seq
                .take()
                .expect("forward_batch makes room for one sequence's rows");
            let [qkv, conv, alpha, beta, delta] = sub
                .delta_net
                .as_mut()
                .expect("a model with DeltaNet blocks has room for their rows");
            for seq in self.seqs.iter_mut() {
                let (first, n) = (seq.first, seq.rows);
                b.copy_rows(&hs.qkv, first, qkv, 0, n, channels);
                b.copy_rows(&hs.alpha, first, alpha, 0, n, heads);
                b.copy_rows(&hs.beta, first, beta, 0, n, heads);
                let io = DeltaIo {
                    qkv: &*qkv,
                    alpha: &*alpha,
                    beta: &*beta,
                    conv: &mut *conv,
                    delta: &mut *delta,
                };
                let params = DeltaNetParams { rows: n, ..params };
                recur(b, l, il, &mut *seq.cache, io, &mut hs.one, params);
                b.copy_rows(delta, 0, &mut hs.delta, first, n, value_dim);
            }
            s.seq = Some(sub);
        }
        // Gated RMSNorm: rms_norm(head) · w · silu(z), per value head.
        b.rms_norm(&mut hs.delta, &l.norm, rows * heads, c.rms_norm_eps);
        b.gated_activation(&mut hs.z, &hs.delta, rows * value_dim, GateActivation::Silu);
        b.matmul(&hs.z, &l.out, rows, &mut s.o);
    }
}

/// One sequence's projected rows (from row 0), and where its convolution and recurrence write.
struct DeltaIo<'a, B: Backend> {
    qkv: &'a B::Buffer,
    alpha: &'a B::Buffer,
    beta: &'a B::Buffer,
    conv: &'a mut B::Buffer,
    delta: &'a mut B::Buffer,
}

/// The convolution and the delta-rule recurrence of one sequence's `params.rows` rows at block
/// `il`, on the state in `cache`.
fn recur<B: Backend>(
    b: &B,
    l: &DeltaNetWeights<B>,
    il: usize,
    cache: &mut KvCache<B>,
    io: DeltaIo<B>,
    one: &mut [B::Buffer; 5],
    params: DeltaNetParams,
) {
    let recurrent = cache
        .recurrent
        .as_mut()
        .expect("recurrent blocks have a state");
    let (rows, heads) = (params.rows, params.n_v_heads);
    let channels = (2 * params.n_k_heads + heads) * params.head_dim;
    let value_dim = heads * params.head_dim;
    if recurrent.keeps_rows() {
        // A verify pass: one row at a time, the state after each kept, so that rejected rows
        // leave by restoring one (recurrent.rs) rather than by running the rest again.
        let (conv_len, ssm_len) = recurrent.state_lens();
        let one_row = DeltaNetParams { rows: 1, ..params };
        let [qkv, conv, alpha, beta, delta] = one;
        for r in 0..rows {
            let (live, kept) = recurrent
                .row_state(il, r)
                .expect("a verify pass has a slot per row");
            b.copy_rows(io.qkv, r, qkv, 0, 1, channels);
            b.copy_rows(io.alpha, r, alpha, 0, 1, heads);
            b.copy_rows(io.beta, r, beta, 0, 1, heads);
            b.conv_step(qkv, &l.conv, &mut live.conv, conv, 1, channels);
            b.gated_delta_net(
                conv,
                alpha,
                beta,
                &l.a,
                &l.dt_bias,
                &mut live.ssm,
                delta,
                &one_row,
            );
            b.copy_rows(delta, 0, io.delta, r, 1, value_dim);
            if let Some(kept) = kept {
                b.copy_rows(&live.conv, 0, &mut kept.conv, 0, 1, conv_len);
                b.copy_rows(&live.ssm, 0, &mut kept.ssm, 0, 1, ssm_len);
            }
        }
    } else {
        let state = recurrent.layers[il]
            .as_mut()
            .expect("recurrent blocks have a state");
        b.conv_step(io.qkv, &l.conv, &mut state.conv, io.conv, rows, channels);
        b.gated_delta_net(
            io.conv,
            io.alpha,
            io.beta,
            &l.a,
            &l.dt_bias,
            &mut state.ssm,
            io.delta,
            &params,
        );
    }
}
