//! Forward calls over the rows of several sequences at once (continuous batching): each row's
//! matmuls, norms and feed-forward run with every other row's, reading the weights once, while
//! RoPE, the KV-cache append and attention run per sequence, against that sequence's own cache
//! and positions; so do the convolution and recurrence of Qwen3.5's DeltaNet blocks, each
//! sequence on its own state (`delta_net.rs`). A call over one sequence is the plain forward pass.

use super::rows::{RowInputs, SeqRows};
use super::{KvCache, Model, Scratch, Step, VerifyScratch};
use crate::backend::{AttentionParams, Backend, KvAppend};
use crate::error::{Error, Result};

/// One sequence's part of a batched forward call (`Model::forward_batch`).
pub struct BatchSeq<'c, B: Backend> {
    pub ids: &'c [u32],
    /// The position of the first row: the sequence's cache holds that many rows before it.
    pub start_pos: usize,
    pub cache: &'c mut KvCache<B>,
    pub inputs: RowInputs<'c>,
    /// Every row's logits (a verify pass), else the last row's.
    pub all_rows: bool,
}

/// Room for one sequence's attention inputs and output, copied out of and back into the call's
/// buffers; and for a model with DeltaNet blocks, their projected rows, convolution and output
/// (`delta_net.rs`).
pub(super) struct SeqScratch<B: Backend> {
    q: B::Buffer,
    k: B::Buffer,
    v: B::Buffer,
    attn: B::Buffer,
    table: B::Buffer,
    temperature: B::Buffer,
    /// q/k/v, convolution, alpha, beta, output.
    pub(super) delta_net: Option<[B::Buffer; 5]>,
}

impl<B: Backend> SeqScratch<B> {
    fn new(m: &Model<B>, rows: usize) -> Result<SeqScratch<B>> {
        let (b, c) = (&m.backend, &m.config);
        Ok(SeqScratch {
            q: b.buffer(rows * c.max_q_dim())?,
            k: b.buffer(rows * c.max_kv_dim())?,
            v: b.buffer(rows * c.max_kv_dim())?,
            attn: b.buffer(rows * c.max_q_dim())?,
            table: b.buffer(rows * c.max_head_dim())?,
            temperature: b.buffer(rows)?,
            delta_net: match &c.delta_net {
                Some(d) => Some([
                    b.buffer(rows * d.conv_channels())?,
                    b.buffer(rows * d.conv_channels())?,
                    b.buffer(rows * d.n_v_heads)?,
                    b.buffer(rows * d.n_v_heads)?,
                    b.buffer(rows * d.value_dim())?,
                ]),
                None => None,
            },
        })
    }
}

/// The buffers one sequence's attention reads and writes.
struct AttentionIo<'b, B: Backend> {
    q: &'b mut B::Buffer,
    k: &'b mut B::Buffer,
    v: &'b B::Buffer,
    table: &'b B::Buffer,
    temperature: Option<&'b B::Buffer>,
    attn: &'b mut B::Buffer,
}

impl<B: Backend> Model<B> {
    /// Run the rows of every sequence in `seqs` in one forward call (at most `s.rows()` rows in
    /// all), appending each sequence's keys and values to its own cache, and write into `logits`,
    /// sequence after sequence, every row's logits where `all_rows` is set, else the last row's
    /// (soft-capped as `forward`'s). One sequence alone is the plain forward pass.
    pub fn forward_batch(
        &self,
        seqs: &mut [BatchSeq<B>],
        s: &mut Scratch<B>,
        logits: &mut Vec<f32>,
    ) -> Result<()> {
        self.forward_batch_picking(seqs, s, logits, false)
            .map(|_| ())
    }

    /// As `forward_batch`; with `pick`, where the backend can take each output row's argmax
    /// where the logits live (and no soft-cap could merge close logits into ties), those are
    /// returned and `logits` is left as it was: greedy verify passes on a GPU read back an index
    /// a row instead of the vocabulary's logits.
    pub fn forward_batch_picking(
        &self,
        seqs: &mut [BatchSeq<B>],
        s: &mut Scratch<B>,
        logits: &mut Vec<f32>,
        pick: bool,
    ) -> Result<Option<Vec<u32>>> {
        let (b, c) = (&self.backend, &self.config);
        let rows: usize = seqs.iter().map(|q| q.ids.len()).sum();
        let out_rows: usize = seqs
            .iter()
            .map(|q| if q.all_rows { q.ids.len() } else { 1 })
            .sum();
        let ctx = seqs.first().map_or(0, |q| q.cache.ctx);
        if rows > s.rows {
            return Err(Error::Usage(format!(
                "a forward call takes at most {} rows, not {rows}",
                s.rows
            )));
        }
        for q in seqs.iter() {
            if q.ids.is_empty() || q.start_pos + q.ids.len() > q.cache.ctx || q.cache.ctx != ctx {
                return Err(Error::Usage(format!(
                    "a sequence of {} rows at {} does not fit a context of {} (the call's: {ctx})",
                    q.ids.len(),
                    q.start_pos,
                    q.cache.ctx
                )));
            }
        }
        let mut v = match s.verify.take() {
            Some(v) if v.rows >= out_rows => v,
            _ => VerifyScratch {
                rows: out_rows,
                x: b.buffer(out_rows * c.hidden_size)?,
                logits: b.buffer(out_rows * c.vocab_size)?,
            },
        };
        let together = seqs.len() > 1;
        let mut out = 0;
        if together {
            if s.seq.is_none() {
                s.seq = Some(SeqScratch::new(self, s.rows)?);
            }
            let mut ids = Vec::with_capacity(rows);
            let mut inputs = Vec::with_capacity(seqs.len());
            let mut parts = Vec::with_capacity(seqs.len());
            for q in seqs.iter_mut() {
                parts.push(SeqRows {
                    start_pos: q.start_pos,
                    first: ids.len(),
                    rows: q.ids.len(),
                    causal: !q.inputs.bidirectional,
                    cache: &mut *q.cache,
                });
                ids.extend_from_slice(q.ids);
                inputs.push(RowInputs {
                    embedded: q.inputs.embedded,
                    positions: q.inputs.positions,
                    bidirectional: q.inputs.bidirectional,
                });
            }
            self.forward_seqs(&ids, &inputs, &mut parts, s);
            self.finish_residual(ids.len(), s);
            let mut first = 0;
            for q in seqs.iter() {
                out += self.gather_rows(s, &mut v, first, q, out);
                first += q.ids.len();
            }
        } else {
            for q in seqs.iter_mut() {
                self.forward_layers(q.ids, &q.inputs, q.start_pos, q.cache, s);
                self.finish_residual(q.ids.len(), s);
                out += self.gather_rows(s, &mut v, 0, q, out);
            }
        }
        b.rms_norm(
            &mut v.x,
            &self.weights.output_norm,
            out_rows,
            c.rms_norm_eps,
        );
        b.matmul(&v.x, self.lm_head(), out_rows, &mut v.logits);
        let picks = match pick && c.final_logit_softcap.is_none() {
            true => b.argmax_rows(&v.logits, c.vocab_size, out_rows),
            false => None,
        };
        if picks.is_none() {
            logits.resize(out_rows * c.vocab_size, 0.0);
            b.download(&v.logits, 0, logits);
            self.soft_cap(logits);
        }
        s.verify = Some(v);
        Ok(picks)
    }

    /// Copy the rows of `q` whose logits are wanted (from row `first` of `s.x`) to row `to` on of
    /// `v.x`; returns how many.
    fn gather_rows(
        &self,
        s: &Scratch<B>,
        v: &mut VerifyScratch<B>,
        first: usize,
        q: &BatchSeq<B>,
        to: usize,
    ) -> usize {
        let n = q.ids.len();
        let (from, count) = if q.all_rows {
            (first, n)
        } else {
            (first + n - 1, 1)
        };
        let width = self.config.hidden_size;
        self.backend
            .copy_rows(&s.x, from, &mut v.x, to, count, width);
        count
    }

    /// Each RoPE table over the call's rows: one sequence's at its positions (explicit ones after
    /// an image, else from its start), several sequences' one after another.
    pub(super) fn rope_tables(
        &self,
        inputs: &[RowInputs],
        seqs: &[SeqRows<B>],
        s: &mut Scratch<B>,
    ) {
        let ctx = seqs[0].cache.ctx;
        let rows: usize = seqs.iter().map(|q| q.rows).sum();
        let mut positions = Vec::new();
        if seqs.len() > 1 {
            for (q, inputs) in seqs.iter().zip(inputs) {
                match inputs.positions {
                    Some(p) => positions.extend_from_slice(&p[..q.rows]),
                    None => {
                        positions.extend((q.start_pos..q.start_pos + q.rows).map(|p| [p as u32; 3]))
                    }
                }
            }
        }
        for (i, (rope, table)) in self.ropes.iter().zip(s.rope_tables.iter_mut()).enumerate() {
            match (seqs, inputs[0].positions) {
                ([q], Some(p)) => rope.table_at(&p[..q.rows], ctx, &mut s.rope_host),
                ([q], None) => rope.table(q.start_pos, q.rows, ctx, &mut s.rope_host),
                _ => rope.table_at(&positions, ctx, &mut s.rope_host),
            }
            s.rope_widths[i] = s.rope_host.len() / rows.max(1);
            self.backend.upload(table, &s.rope_host);
        }
    }
}

impl<B: Backend> Step<'_, '_, B> {
    /// RoPE over the leading rotated dimensions of each query and key head, the keys and values
    /// appended to this layer's cache, and attention of `q` into `attn`, for each sequence of the
    /// call against its own cache. A shared-KV layer (Gemma 4) rotates its queries only and
    /// attends over its source layer's cache.
    /// `stored`: `qkv_rope_store` did the RoPE and the KV append already.
    pub(super) fn rope_store_attend(&mut self, sinks: Option<&B::Weight>, stored: bool) {
        let (m, il) = (self.model, self.il);
        let s = &mut *self.s;
        let r = m.layer_rope[il];
        if let [seq] = &mut *self.seqs {
            let io = AttentionIo {
                q: &mut s.q,
                k: &mut s.k,
                v: &s.v,
                table: &s.rope_tables[r],
                temperature: s.q_temperature.as_ref(),
                attn: &mut s.attn,
            };
            attend(m, il, io, seq, sinks, stored);
            return;
        }
        assert!(
            !stored,
            "qkv_rope_store fuses a single sequence's step only"
        );
        let (b, c) = (&m.backend, &m.config);
        let mut sub = s
            .seq
            .take()
            .expect("forward_batch makes room for one sequence's attention");
        let (q_dim, kv_dim, table_width) =
            (c.layer_q_dim(il), c.layer_kv_dim(il), s.rope_widths[r]);
        let own_cache = c.layer_kv_source(il) == il;
        for seq in self.seqs.iter_mut() {
            let (first, rows) = (seq.first, seq.rows);
            b.copy_rows(&s.q, first, &mut sub.q, 0, rows, q_dim);
            if own_cache {
                b.copy_rows(&s.k, first, &mut sub.k, 0, rows, kv_dim);
                b.copy_rows(&s.v, first, &mut sub.v, 0, rows, kv_dim);
            }
            b.copy_rows(
                &s.rope_tables[r],
                first,
                &mut sub.table,
                0,
                rows,
                table_width,
            );
            if let Some(t) = &s.q_temperature {
                b.copy_rows(t, first, &mut sub.temperature, 0, rows, 1);
            }
            let io = AttentionIo {
                q: &mut sub.q,
                k: &mut sub.k,
                v: &sub.v,
                table: &sub.table,
                temperature: s.q_temperature.as_ref().map(|_| &sub.temperature),
                attn: &mut sub.attn,
            };
            attend(m, il, io, seq, sinks, false);
            b.copy_rows(&sub.attn, 0, &mut s.attn, first, rows, q_dim);
        }
        s.seq = Some(sub);
    }

    /// A single sequence's decode row: its Q/K/V projections of `h` by `ws` with RoPE and the KV
    /// append, as one op where the backend fuses them (`CoreOps::qkv_rope_store`); true when it
    /// did (then `rope_store_attend(_, true)`), false when nothing ran.
    pub(super) fn qkv_rope_store(&mut self, ws: [&B::Weight; 3]) -> bool {
        let (m, il) = (self.model, self.il);
        let (b, c) = (&m.backend, &m.config);
        let [seq] = &mut *self.seqs else {
            return false;
        };
        if self.rows != 1 || c.layer_kv_source(il) != il {
            return false;
        }
        let s = &mut *self.s;
        let shape = c.layer_shape(il);
        let append = KvAppend {
            rows: 1,
            n_heads: c.n_heads,
            n_kv_heads: shape.n_kv_heads,
            head_dim: shape.head_dim,
            rot_dims: if c.layer_has_rope(il) {
                shape.rope_dims
            } else {
                0
            },
            layout: c.rope_layout,
            dst_row: seq.start_pos,
        };
        let (kc, vc) = &mut seq.cache.layers[il];
        b.qkv_rope_store(
            &s.h,
            ws,
            [&mut s.q, &mut s.k, &mut s.v],
            &s.rope_tables[m.layer_rope[il]],
            kc,
            vc,
            &append,
        )
    }
}

/// One sequence's RoPE, KV append and attention at layer `il` (see `Step::rope_store_attend`).
fn attend<B: Backend>(
    m: &Model<B>,
    il: usize,
    io: AttentionIo<B>,
    seq: &mut SeqRows<B>,
    sinks: Option<&B::Weight>,
    stored: bool,
) {
    let (b, c) = (&m.backend, &m.config);
    let rows = seq.rows;
    let shape = c.layer_shape(il);
    // A NoPE layer (SmolLM3) stores and attends with its queries and keys as projected.
    let rot_dims = if c.layer_has_rope(il) {
        shape.rope_dims
    } else {
        0
    };
    let source = c.layer_kv_source(il);
    if stored {
        // Rotated and appended by `qkv_rope_store`.
    } else if source == il {
        let (kc, vc) = &mut seq.cache.layers[il];
        let append = KvAppend {
            rows,
            n_heads: c.n_heads,
            n_kv_heads: shape.n_kv_heads,
            head_dim: shape.head_dim,
            rot_dims,
            layout: c.rope_layout,
            dst_row: seq.start_pos,
        };
        b.rope_store_kv(io.q, io.k, io.v, io.table, kc, vc, &append);
    } else if rot_dims > 0 {
        let hd = shape.head_dim;
        b.rope_partial(io.q, io.table, rows, c.n_heads, hd, rot_dims, c.rope_layout);
    }
    if let Some(t) = io.temperature {
        b.scale_rows(io.q, t, rows, c.layer_q_dim(il));
    }
    let params = AttentionParams {
        start_pos: seq.start_pos,
        rows,
        n_heads: c.n_heads,
        n_kv_heads: shape.n_kv_heads,
        head_dim: shape.head_dim,
        scale: c.attention_scale,
        window: c.layer_window(il),
        softcap: c.attn_logit_softcap,
        causal: seq.causal || (c.bidirectional_local_only && c.layer_window(il).is_none()),
    };
    let (kc, vc) = &seq.cache.layers[source];
    b.attention(io.q, kc, vc, io.attn, &params, sinks);
}
