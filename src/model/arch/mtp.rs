//! The multi-token-prediction ("nextn") block of Qwen3.5 and GLM-4.5 files as a drafter, as
//! llama.cpp's `graph_mtp` (`src/models/qwen35.cpp`, `glm4-moe.cpp`) and `common/speculative.cpp`
//! (`draft-mtp`) define it. The block predicts the token after next: its row at position p takes
//! the token at p and the trunk's output-normed hidden state at p − 1 (`eh_proj` over
//! [enorm(embedding) ; hnorm(hidden)]), runs one layer of the trunk's kind (Qwen3.5's gated
//! full-attention block, or GLM-4.5's layer with its experts) over its own KV cache, and ends in
//! its head norm and the LM head.
//!
//! `MtpState` follows a session: after every trunk forward call (prefill chunk, decode, verify)
//! `Model::mtp_follow` stores the trunk's normed rows and appends the block's keys and values for
//! the same positions (only those: the rows' outputs are not needed). `Model::mtp_draft` then
//! chains the block from the last position: the sampled token with the trunk's last hidden state,
//! then each drafted token with the block's own normed output. Draft rows write the cache past the
//! session's length, where the next verify pass's rows overwrite them.

use super::family::LayerKind;
use super::{KvCache, Model, Scratch, SeqRows, Step, llama, qwen35};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::model::weights::{Block, Mixer, MtpWeights};

/// The drafting block's cache and inputs beside one session.
pub struct MtpState<B: Backend> {
    /// One cache per trunk block (empty) and the block's own, last.
    cache: KvCache<B>,
    /// Row r holds the trunk's normed hidden state at position `hs_pos + r − 1`: row 0 the one
    /// before the last forward call (zeros where unknown), rows 1.. that call's.
    hs: B::Buffer,
    hs_pos: usize,
    hs_rows: usize,
    /// Whether row 0 of `hs` is the real state (or, at position 0, the zeros that stand for none).
    hs_first_known: bool,
    /// The block's inputs: embeddings, hidden states, the hidden half of `eh_proj`.
    e: B::Buffer,
    hn: B::Buffer,
    eh: B::Buffer,
    /// The last draft row's normed output: the next draft row's hidden input.
    draft_h: B::Buffer,
    logits_dev: B::Buffer,
    /// The last draft row's logits, where they were read back.
    pub logits: Vec<f32>,
    /// Cache rows `0..valid` hold the block's keys and values for the session's tokens.
    valid: usize,
}

/// Where a block row's hidden input comes from.
#[derive(Clone, Copy)]
enum Hidden {
    /// Rows of `hs`, from this one on.
    Trunk(usize),
    /// The last draft row's output.
    Draft,
}

impl<B: Backend> MtpState<B> {
    /// The session was cut to `len` tokens: cache rows past it are stale.
    pub fn truncate(&mut self, len: usize) {
        self.valid = self.valid.min(len);
    }

    /// The session starts over.
    pub fn reset(&mut self) {
        self.valid = 0;
        self.hs_rows = 0;
    }

    /// The trunk's normed hidden state at `pos` (`width` values), where it is at hand.
    pub fn trunk_state(&self, b: &B, pos: usize, width: usize) -> Option<Vec<f32>> {
        let row = self.hs_row(pos)?;
        let mut out = vec![0.0; width];
        b.download(&self.hs, row * width, &mut out);
        Some(out)
    }

    /// The row of `hs` holding the trunk's state at `pos`, if it is there.
    fn hs_row(&self, pos: usize) -> Option<usize> {
        let row = (pos + 1).checked_sub(self.hs_pos)?;
        (row < self.hs_rows && (row > 0 || self.hs_first_known)).then_some(row)
    }
}

impl<B: Backend> Model<B> {
    /// Whether the model's multi-token-prediction block is loaded (`ModelFile::load_mtp`).
    pub fn has_mtp(&self) -> bool {
        self.weights.mtp.is_some()
    }

    fn mtp_weights(&self) -> Result<&MtpWeights<B>> {
        self.weights.mtp.as_ref().ok_or_else(|| {
            Error::Usage(match self.config.nextn_layers {
                0 => format!(
                    "this {} file has no multi-token-prediction block (nextn_predict_layers) to \
                     draft with",
                    self.config.arch.name()
                ),
                _ => "the multi-token-prediction block was not loaded (ModelFile::load_mtp)".into(),
            })
        })
    }

    /// A drafting state for a session of `ctx` positions whose forward calls take up to `rows`
    /// tokens.
    pub fn new_mtp_state(
        &self,
        ctx: usize,
        rows: usize,
        types: super::KvCacheTypes,
    ) -> Result<MtpState<B>> {
        self.mtp_weights()?;
        let (b, c) = (&self.backend, &self.config);
        let il = c.n_layers;
        let (hd, width) = (c.head_dim, c.kv_dim());
        let len = ctx
            .checked_mul(width)
            .ok_or_else(|| Error::Usage(format!("a context of {ctx} tokens is too large")))?;
        let mut layers = Vec::with_capacity(il + 1);
        for l in 0..=il {
            let len = if l == il { len } else { 0 };
            layers.push((
                b.layer_cache(l, len, types.k, types.k.key_rotation(hd))?,
                b.layer_cache(l, len, types.v, types.v.value_rotation(hd))?,
            ));
        }
        let h = c.hidden_size;
        Ok(MtpState {
            cache: KvCache {
                layers,
                ctx,
                types,
                recurrent: None,
            },
            hs: b.buffer((rows + 1) * h)?,
            hs_pos: 0,
            hs_rows: 0,
            hs_first_known: false,
            e: b.buffer(rows * h)?,
            hn: b.buffer(rows * h)?,
            eh: b.buffer(rows * h)?,
            draft_h: b.buffer(h)?,
            logits_dev: b.buffer(c.vocab_size)?,
            logits: vec![0.0; c.vocab_size],
            valid: 0,
        })
    }

    /// After a trunk forward call over `ids` at `start_pos` (its residual rows still in `s.x`):
    /// keep the trunk's normed rows and append the block's keys and values for the positions the
    /// cache does not hold yet.
    pub fn mtp_follow(
        &self,
        ids: &[u32],
        start_pos: usize,
        s: &mut Scratch<B>,
        m: &mut MtpState<B>,
    ) -> Result<()> {
        let mtp = self.mtp_weights()?;
        let (b, c) = (&self.backend, &self.config);
        let (rows, h) = (ids.len(), c.hidden_size);
        // Row 0: the state before this call, from the last call's rows where it is there.
        let before = start_pos.checked_sub(1).and_then(|p| m.hs_row(p));
        match before {
            Some(row) => b.copy_rows(&m.hs, row, &mut m.draft_h, 0, 1, h),
            None => b.upload(&mut m.draft_h, &vec![0.0; h]),
        }
        b.copy_rows(&m.draft_h, 0, &mut m.hs, 0, 1, h);
        b.rms_norm_into(
            &s.x,
            &self.weights.output_norm,
            rows,
            h,
            c.rms_norm_eps,
            &mut s.h,
        );
        b.copy_rows(&s.h, 0, &mut m.hs, 1, rows, h);
        m.hs_pos = start_pos;
        m.hs_rows = rows + 1;
        m.hs_first_known = before.is_some() || start_pos == 0;
        // A recurrent model's rollback runs rows the cache already holds again.
        let skip = m.valid.saturating_sub(start_pos).min(rows);
        if skip < rows {
            self.mtp_rows(
                mtp,
                &ids[skip..],
                start_pos + skip,
                Hidden::Trunk(skip),
                false,
                s,
                m,
            );
        }
        m.valid = m.valid.max(start_pos + rows);
        Ok(())
    }

    /// Up to `max` drafted tokens after `token`, the token the session's tokens (`len` of them)
    /// are followed by: the block chained from the trunk's state at `len − 1`. Drafting stops
    /// where the block's probability of its pick is below `p_min`, and at the end of the context.
    /// Empty when the trunk's state at `len − 1` is not at hand (a session cut back past its last
    /// forward call).
    pub fn mtp_draft(
        &self,
        token: u32,
        len: usize,
        max: usize,
        p_min: f32,
        s: &mut Scratch<B>,
        m: &mut MtpState<B>,
    ) -> Result<Vec<u32>> {
        let mtp = self.mtp_weights()?;
        let Some(row) = len.checked_sub(1).and_then(|p| m.hs_row(p)) else {
            return Ok(Vec::new());
        };
        let max = max.min(m.cache.ctx.saturating_sub(len));
        let mut draft = Vec::with_capacity(max);
        let (mut next, mut hidden) = (token, Hidden::Trunk(row));
        while draft.len() < max {
            let pos = len + draft.len();
            self.mtp_rows(mtp, &[next], pos, hidden, true, s, m);
            hidden = Hidden::Draft;
            let picked = if p_min > 0.0 {
                None
            } else {
                self.backend.argmax(&m.logits_dev, self.config.vocab_size)
            };
            let picked = match picked {
                Some(t) => Some(t),
                None => {
                    self.backend.download(&m.logits_dev, 0, &mut m.logits);
                    crate::sampler::most_likely(&m.logits, p_min)
                }
            };
            if let Some(e) = self.backend.take_error() {
                return Err(e);
            }
            let Some(t) = picked else { break };
            draft.push(t);
            next = t;
        }
        Ok(draft)
    }

    /// The block over `ids` at `start_pos`, each row's hidden input from `hidden`: its keys and
    /// values into the cache, and with `output` (one row) its normed output into `m.draft_h` and
    /// its logits into `m.logits_dev`.
    #[allow(clippy::too_many_arguments)]
    fn mtp_rows(
        &self,
        mtp: &MtpWeights<B>,
        ids: &[u32],
        start_pos: usize,
        hidden: Hidden,
        output: bool,
        s: &mut Scratch<B>,
        m: &mut MtpState<B>,
    ) {
        let (b, c) = (&self.backend, &self.config);
        let (rows, h, eps) = (ids.len(), c.hidden_size, c.rms_norm_eps);
        let table = mtp.embed.as_ref().unwrap_or(&self.weights.tok_embd);
        b.embed(table, ids, c.embedding_scale.unwrap_or(1.0), &mut m.e);
        b.rms_norm(&mut m.e, &mtp.enorm, rows, eps);
        match hidden {
            Hidden::Trunk(row) => b.copy_rows(&m.hs, row, &mut m.hn, 0, rows, h),
            Hidden::Draft => b.copy_rows(&m.draft_h, 0, &mut m.hn, 0, rows, h),
        }
        b.rms_norm(&mut m.hn, &mtp.hnorm, rows, eps);
        // eh_proj([e ; h]) as its two halves.
        b.matmul(&m.e, &mtp.eh_embed, rows, &mut s.x);
        b.matmul(&m.hn, &mtp.eh_hidden, rows, &mut m.eh);
        b.add(&mut s.x, &m.eh, rows * h);

        let il = c.n_layers;
        let rope = &self.ropes[self.layer_rope[il]];
        rope.table(start_pos, rows, m.cache.ctx, &mut s.rope_host);
        b.upload(&mut s.rope_tables[self.layer_rope[il]], &s.rope_host);
        s.pending_residual = false;
        let mut seqs = [SeqRows {
            cache: &mut m.cache,
            start_pos,
            first: 0,
            rows,
            causal: true,
        }];
        let mut step = Step {
            model: self,
            s: &mut *s,
            seqs: &mut seqs,
            rows,
            il,
        };
        // A draft row is the trunk's layer whole; following the trunk needs only the keys and
        // values, so those rows stop after attention.
        match (&mtp.block, self.family.layer) {
            (Block::Qwen35(block), _) if output => qwen35::layer(&mut step, block),
            (Block::Qwen35(block), _) => {
                let Mixer::Attention(attention) = &block.mixer else {
                    unreachable!("the MTP block loads as attention")
                };
                step.norm_input(&block.attn_norm);
                step.gated_attention(attention);
            }
            (Block::Standard(layer), LayerKind::Llama(opts)) if output => {
                llama::layer(&mut step, layer, opts)
            }
            (Block::Standard(layer), LayerKind::Llama(opts)) => {
                step.norm_input(&layer.attn_norm);
                step.attention(layer, opts);
            }
            (Block::Standard(_), _) => {
                unreachable!("drafting blocks load for Qwen3.5 and GLM-4.5 only")
            }
        }
        if !output {
            s.pending_residual = false;
            return;
        }
        if std::mem::take(&mut s.pending_residual) {
            b.add(&mut s.x, &s.o, rows * h);
        }
        let norm = mtp.head_norm.as_ref().unwrap_or(&self.weights.output_norm);
        b.rms_norm_into(&s.x, norm, 1, h, eps, &mut m.draft_h);
        let head = mtp.head.as_ref().unwrap_or(self.lm_head());
        b.matmul(&m.draft_h, head, 1, &mut m.logits_dev);
    }
}
