//! A session: the tokens of one conversation and their KV cache. `prefill` runs many tokens in
//! batched forward calls (chunks of up to `batch` tokens, each one matrix-matrix pass), `decode`
//! one; both return the logits of the last token. `truncate` rolls the context back; for models
//! with recurrent blocks (Qwen3.5) it restores the nearest state checkpoint and recomputes from
//! there (recurrent.rs), so prefill and decode take checkpoints as they go. `shift_context` drops
//! old tokens to make room (llama.cpp's context shift), and with `set_context_shift` generation
//! does so by itself whenever the context fills (not for models with recurrent state). `verify`
//! runs several tokens and returns every row's logits, for speculative decoding (speculative.rs);
//! with `enable_mtp` the model's multi-token-prediction block follows every forward call and
//! `draft_mtp` drafts with it (arch/mtp.rs).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::arch::{BatchSeq, KvCache, KvCacheTypes, Model, MtpState, RowInputs, Scratch};
use super::batcher::{Batcher, Call};
use super::multimodal::ImageInput;
use super::recurrent::CHECKPOINT_INTERVAL;
use crate::backend::Backend;
use crate::error::{Error, Result};

/// Tokens per batched forward call during prefill.
pub const DEFAULT_BATCH: usize = 512;

/// Cumulative timings of a session's forward calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct SessionStats {
    pub prefill_tokens: usize,
    pub prefill_time: Duration,
    pub decode_tokens: usize,
    pub decode_time: Duration,
    /// Context shifts made, and the tokens they dropped.
    pub context_shifts: usize,
    pub shifted_out_tokens: usize,
    /// Tokens run again by `truncate` to rebuild a recurrent state from a checkpoint.
    pub recomputed_tokens: usize,
}

/// What a greedy verify pass (`Session::verify_argmax`) gives: each row's most likely token, or
/// the rows' logits where the backend could not pick them.
pub enum Verdict<'a> {
    Picks(Vec<u32>),
    Logits(&'a [f32]),
}

pub struct Session<'m, B: Backend> {
    model: &'m Model<B>,
    cache: KvCache<B>,
    scratch: Scratch<B>,
    tokens: Vec<u32>,
    logits: Vec<f32>,
    /// Every row's logits of the last `verify`.
    rows_logits: Vec<f32>,
    has_logits: bool,
    /// With context shift on: how many tokens at the start every shift keeps.
    shift_keep: Option<usize>,
    /// The multi-token-prediction drafter's state, when it is on.
    mtp: Option<MtpState<B>>,
    /// Images in the context, in order (`prefill_embeddings`).
    media: Vec<Media>,
    /// Continuous batching: forward calls go through the batcher, with other sequences' rows.
    batcher: Option<&'m Batcher<'m, B>>,
    /// The most rows one forward call takes (the scratch's, or the batcher's).
    call_rows: usize,
    pub stats: SessionStats,
}

/// Rows of the context whose inputs were embeddings (an image), not tokens: they are kept so
/// that rows run again (a recurrent state rebuilt from a checkpoint) get the same inputs.
#[derive(Clone)]
struct Media {
    /// The context index of the first row.
    start: usize,
    /// The image's grid of tokens, row-major.
    cols: usize,
    rows: usize,
    embeddings: Arc<Vec<f32>>,
    /// Its rows attend to each other both ways (`ImageInput::bidirectional`).
    bidirectional: bool,
}

impl Media {
    fn end(&self) -> usize {
        self.start + self.cols * self.rows
    }
}

/// The token id that stands in `tokens()` for a row whose input was an embedding.
pub const EMBEDDED_ROW: u32 = 0;

impl<'m, B: Backend> Session<'m, B> {
    /// A session with room for `ctx` tokens.
    pub fn new(model: &'m Model<B>, ctx: usize) -> Result<Self> {
        Self::with_options(model, ctx, DEFAULT_BATCH, KvCacheTypes::default())
    }

    pub fn with_batch(model: &'m Model<B>, ctx: usize, batch: usize) -> Result<Self> {
        Self::with_options(model, ctx, batch, KvCacheTypes::default())
    }

    /// A session with room for `ctx` tokens, prefilling up to `batch` per forward call, its KV
    /// cache of the given types.
    pub fn with_options(
        model: &'m Model<B>,
        ctx: usize,
        batch: usize,
        cache_types: KvCacheTypes,
    ) -> Result<Self> {
        if ctx == 0 || batch == 0 {
            return Err(Error::Usage(
                "context size and batch size must be at least 1".into(),
            ));
        }
        let batch = batch.min(ctx);
        Ok(Session {
            model,
            cache: model.new_cache(ctx, cache_types)?,
            scratch: model.new_scratch(batch)?,
            batcher: None,
            call_rows: batch,
            tokens: Vec::new(),
            logits: vec![0.0; model.config.vocab_size],
            rows_logits: Vec::new(),
            has_logits: false,
            shift_keep: None,
            mtp: None,
            media: Vec::new(),
            stats: SessionStats::default(),
        })
    }

    /// A session whose forward calls run in `batcher`'s steps, with other sequences' (each on a
    /// thread of its own), up to `batch` rows of a prefill at a time.
    pub fn batched(
        batcher: &'m Batcher<'m, B>,
        ctx: usize,
        batch: usize,
        cache_types: KvCacheTypes,
    ) -> Result<Self> {
        let model = batcher.model();
        let mut session = Session::with_options(model, ctx, 1, cache_types)?;
        session.batcher = Some(batcher);
        session.call_rows = batch.min(batcher.rows()).min(ctx).max(1);
        Ok(session)
    }

    pub fn model(&self) -> &'m Model<B> {
        self.model
    }

    /// Draft with the model's multi-token-prediction block (`draft_mtp`): from now on every forward
    /// call also runs the block's keys and values. Before the first token only, and an error for a
    /// model without the block.
    pub fn enable_mtp(&mut self) -> Result<()> {
        if !self.tokens.is_empty() {
            return Err(Error::Usage(
                "multi-token prediction must be on before the session's first token".into(),
            ));
        }
        if self.batcher.is_some() {
            return Err(Error::Unsupported(
                "multi-token prediction does not run with several sequences at once yet (use \
                 --parallel 1, or another --spec-type)"
                    .into(),
            ));
        }
        let rows = self.scratch.rows();
        self.mtp = Some(
            self.model
                .new_mtp_state(self.cache.ctx, rows, self.cache.types)?,
        );
        Ok(())
    }

    /// Up to `max` tokens the multi-token-prediction block drafts to follow `token`, the token
    /// sampled after the context (see `Model::mtp_draft`). An error unless `enable_mtp` was called.
    pub fn draft_mtp(&mut self, token: u32, max: usize, p_min: f32) -> Result<Vec<u32>> {
        self.check(&[token])?;
        let m = self.mtp.as_mut().ok_or_else(|| {
            Error::Usage("multi-token prediction is not on for this session".into())
        })?;
        self.model
            .mtp_draft(token, self.tokens.len(), max, p_min, &mut self.scratch, m)
    }

    /// The logits of the last drafted row of `draft_mtp`, where they were read back (with a
    /// `p_min`, or on a backend without a device argmax).
    pub fn mtp_logits(&self) -> Option<&[f32]> {
        self.mtp.as_ref().map(|m| m.logits.as_slice())
    }

    /// The trunk's output-normed hidden state at `pos`, as the multi-token-prediction block takes
    /// it, where the session holds it (its last forward call's rows; for inspection).
    pub fn mtp_trunk_state(&self, pos: usize) -> Option<Vec<f32>> {
        let m = self.mtp.as_ref()?;
        m.trunk_state(&self.model.backend, pos, self.model.config.hidden_size)
    }

    /// Let the multi-token-prediction block follow the forward call just made over `ids`.
    fn follow(&mut self, ids: &[u32], start_pos: usize) -> Result<()> {
        if let Some(m) = &mut self.mtp {
            self.model
                .mtp_follow(ids, start_pos, &mut self.scratch, m)?;
            if let Some(e) = self.model.backend.take_error() {
                return Err(e);
            }
        }
        Ok(())
    }

    /// The tokens whose keys and values are in the cache.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    pub fn ctx(&self) -> usize {
        self.cache.ctx
    }

    /// The KV cache (for inspection).
    pub fn cache(&self) -> &KvCache<B> {
        &self.cache
    }

    pub fn cache_types(&self) -> KvCacheTypes {
        self.cache.types
    }

    /// Positions still free in the context.
    pub fn remaining(&self) -> usize {
        self.cache.ctx - self.tokens.len()
    }

    /// Logits of the last token run, if the last call produced any.
    pub fn logits(&self) -> Option<&[f32]> {
        self.has_logits.then_some(self.logits.as_slice())
    }

    fn check(&self, ids: &[u32]) -> Result<()> {
        let vocab = self.model.config.vocab_size;
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(Error::BadToken { id: bad, vocab });
        }
        let needed = self.tokens.len() + ids.len();
        if needed > self.cache.ctx {
            return Err(Error::ContextFull {
                needed,
                ctx: self.cache.ctx,
            });
        }
        Ok(())
    }

    /// Run `ids` after the tokens already in the context; returns the logits of the last one.
    pub fn prefill(&mut self, ids: &[u32]) -> Result<&[f32]> {
        if ids.is_empty() {
            return Err(Error::EmptyPrompt);
        }
        self.check(ids)?;
        let start = Instant::now();
        self.run_chunks(ids)?;
        self.checkpoint()?;
        self.stats.prefill_tokens += ids.len();
        self.stats.prefill_time += start.elapsed();
        Ok(&self.logits)
    }

    /// Run an image after the context: `rows × cols` embeddings of the model's embedding width
    /// (the hidden size, and Qwen3-VL's deepstack slices; row-major, in reading order), which
    /// take the place of token embeddings. Under multi-axis RoPE (Qwen3.5, Qwen3-VL)
    /// its rows sit at (p, p + row, p + column) and the text after it at p + max(rows, cols), as
    /// llama.cpp's mtmd places them; otherwise one position per row. `tokens()` shows its rows
    /// as `EMBEDDED_ROW`. With `image.bidirectional` its rows attend to each other both ways
    /// (Gemma 3), a batch at a time as llama.cpp's non-causal decode. Returns the logits of its
    /// last row.
    pub fn prefill_embeddings(&mut self, image: &ImageInput) -> Result<&[f32]> {
        let (cols, rows, embeddings) = (image.cols, image.rows, image.embeddings.clone());
        let n = cols * rows;
        let width = self.model.config.embedding_width();
        if n == 0 || embeddings.len() != n * width {
            return Err(Error::Usage(format!(
                "{} embedding values are not {rows} × {cols} rows of the model's embedding width \
                 {width}",
                embeddings.len()
            )));
        }
        if self.mtp.is_some() {
            return Err(Error::Unsupported(
                "multi-token prediction does not take images yet: run without --spec-type draft-mtp"
                    .into(),
            ));
        }
        self.check(&vec![EMBEDDED_ROW; n])?;
        let start = Instant::now();
        self.media.push(Media {
            start: self.tokens.len(),
            cols,
            rows,
            embeddings,
            bidirectional: image.bidirectional,
        });
        if let Err(e) = self.run_chunks(&vec![EMBEDDED_ROW; n]) {
            let from = self.media.pop().map_or(0, |m| m.start);
            self.tokens.truncate(from);
            return Err(e);
        }
        self.checkpoint()?;
        self.stats.prefill_tokens += n;
        self.stats.prefill_time += start.elapsed();
        Ok(&self.logits)
    }

    /// Whether the context holds an image.
    pub fn has_media(&self) -> bool {
        !self.media.is_empty()
    }

    /// For a row of an image: the image's identity (its embeddings' address, the `Arc` given to
    /// `prefill_embeddings`), the row's index in it, and the image's first row.
    pub fn image_at(&self, row: usize) -> Option<(usize, usize, usize)> {
        self.media
            .iter()
            .find(|m| m.start <= row && row < m.end())
            .map(|m| (Arc::as_ptr(&m.embeddings) as usize, row - m.start, m.start))
    }

    /// The RoPE positions of context rows `from..from + n`, where images make them differ from
    /// the cache indices (multi-axis RoPE); None where they do not.
    fn positions(&self, from: usize, n: usize) -> Option<Vec<[u32; 3]>> {
        if self.media.is_empty() || self.model.config.rope_sections.is_none() {
            return None;
        }
        let mut out = Vec::with_capacity(n);
        let mut shift = 0usize; // positions saved by the images before `i`
        let mut next = 0;
        for i in from..from + n {
            while next < self.media.len() && self.media[next].end() <= i {
                let m = &self.media[next];
                shift += m.cols * m.rows - m.cols.max(m.rows);
                next += 1;
            }
            let pos = match self.media.get(next) {
                Some(m) if m.start <= i => {
                    let base = (m.start - shift) as u32;
                    let k = i - m.start;
                    [base, base + (k / m.cols) as u32, base + (k % m.cols) as u32]
                }
                _ => [(i - shift) as u32; 3],
            };
            out.push(pos);
        }
        Some(out)
    }

    /// The next position after the context (text continues there); the context length unless
    /// images under multi-axis RoPE took fewer positions than rows.
    pub fn next_position(&self) -> usize {
        let len = self.tokens.len();
        match self.positions(len.saturating_sub(1), len.min(1)) {
            Some(p) if len > 0 => {
                let last = self.media.last().filter(|m| m.end() == len);
                match last {
                    // After an image: its first position plus the larger side.
                    Some(m) => p[0][0] as usize + m.cols.max(m.rows),
                    None => p[0][0] as usize + 1,
                }
            }
            _ => len,
        }
    }

    /// Run one token after the context; returns its logits.
    pub fn decode(&mut self, id: u32) -> Result<&[f32]> {
        if self.tokens.is_empty() {
            return Err(Error::DecodeBeforePrefill);
        }
        self.check(&[id])?;
        let start = Instant::now();
        self.run(&[id])?;
        if self.tokens.len().is_multiple_of(CHECKPOINT_INTERVAL) {
            self.checkpoint()?;
        }
        self.stats.decode_tokens += 1;
        self.stats.decode_time += start.elapsed();
        Ok(&self.logits)
    }

    /// Run one token after the context and return the most likely next one, picked by the
    /// backend where the logits live (a GPU reads back one index, not the logits; `logits()` is
    /// then None). None when the backend cannot: the logits are in `logits()` as after `decode`.
    pub fn decode_argmax(&mut self, id: u32) -> Result<Option<u32>> {
        if self.tokens.is_empty() {
            return Err(Error::DecodeBeforePrefill);
        }
        self.check(&[id])?;
        if self.positions(self.tokens.len(), 1).is_some() || self.batcher.is_some() {
            // After an image under multi-axis RoPE: positions the device path does not take. A
            // batched step reads back every sequence's logits.
            self.decode(id)?;
            return Ok(None);
        }
        let start = Instant::now();
        let start_pos = self.tokens.len();
        let next = self.model.forward_argmax(
            &[id],
            start_pos,
            &mut self.cache,
            &mut self.scratch,
            &mut self.logits,
        );
        if let Some(e) = self.model.backend.take_error() {
            self.has_logits = false;
            return Err(e);
        }
        self.follow(&[id], start_pos)?;
        self.tokens.push(id);
        self.has_logits = next.is_none();
        if self.tokens.len().is_multiple_of(CHECKPOINT_INTERVAL) {
            self.checkpoint()?;
        }
        self.stats.decode_tokens += 1;
        self.stats.decode_time += start.elapsed();
        Ok(next)
    }

    /// The most tokens one forward call (and so one `verify`) can take.
    pub fn max_rows(&self) -> usize {
        self.call_rows
    }

    /// Run `ids` after the context in one forward pass and return the logits after each of them
    /// (`ids.len()` rows of the vocabulary): the verify pass of speculative decoding. `logits()`
    /// is then the last row's. At most the batch size of tokens at once. Rejected rows leave by
    /// `truncate`: from the KV cache by forgetting them, from a recurrent state by restoring the
    /// copy of it kept after the last accepted row.
    pub fn verify(&mut self, ids: &[u32]) -> Result<&[f32]> {
        self.run_verify(ids, false)?;
        Ok(&self.rows_logits[..ids.len() * self.logits.len()])
    }

    /// `verify` for greedy decoding: each row's most likely token, picked by the backend where
    /// the logits live (a GPU reads back an index a row, not the rows' logits; `logits()` is
    /// then None), or the rows' logits where it cannot pick them.
    pub fn verify_argmax(&mut self, ids: &[u32]) -> Result<Verdict<'_>> {
        Ok(match self.run_verify(ids, true)? {
            Some(picks) => Verdict::Picks(picks),
            None => Verdict::Logits(&self.rows_logits[..ids.len() * self.logits.len()]),
        })
    }

    /// The verify pass behind `verify` and `verify_argmax`: the rows' picks where `pick` asked
    /// for them and the backend took them, else None with the logits in `rows_logits`.
    fn run_verify(&mut self, ids: &[u32], pick: bool) -> Result<Option<Vec<u32>>> {
        if self.tokens.is_empty() {
            return Err(Error::DecodeBeforePrefill);
        }
        if ids.is_empty() || ids.len() > self.call_rows {
            return Err(Error::Usage(format!(
                "a verify pass takes 1 to {} tokens, not {}",
                self.call_rows,
                ids.len()
            )));
        }
        self.check(ids)?;
        let start = Instant::now();
        let start_pos = self.tokens.len();
        // A recurrent state cannot drop the rows the drafter got wrong: the state after each row
        // is kept, and `truncate` restores the one it needs.
        if let Some(r) = &mut self.cache.recurrent {
            r.begin_verify(&self.model.backend, &self.model.config, ids.len())?;
        }
        let positions = self.positions(start_pos, ids.len());
        let done = match self.batcher {
            Some(_) => self.run_batched(ids, true).map(|logits| {
                self.rows_logits = logits;
                None
            }),
            // One sequence, every row's logits (or picks).
            None => self.model.forward_batch_picking(
                &mut [BatchSeq {
                    ids,
                    start_pos,
                    cache: &mut self.cache,
                    inputs: RowInputs {
                        embedded: None,
                        positions: positions.as_deref(),
                        bidirectional: false,
                    },
                    all_rows: true,
                }],
                &mut self.scratch,
                &mut self.rows_logits,
                pick,
            ),
        };
        if let Some(r) = &mut self.cache.recurrent {
            r.end_verify(start_pos, done.is_ok());
        }
        let picks = done?;
        if let Some(e) = self.model.backend.take_error() {
            self.has_logits = false;
            return Err(e);
        }
        self.follow(ids, start_pos)?;
        self.tokens.extend_from_slice(ids);
        self.has_logits = picks.is_none();
        if picks.is_none() {
            let vocab = self.logits.len();
            self.logits
                .copy_from_slice(&self.rows_logits[(ids.len() - 1) * vocab..ids.len() * vocab]);
        }
        self.stats.decode_time += start.elapsed();
        Ok(picks)
    }

    /// Keep only the first `n` tokens of the context (the cache beyond them is overwritten later).
    /// A recurrent state goes back to the nearest checkpoint at or before `n`, and the tokens
    /// from there to `n` are run again.
    pub fn truncate(&mut self, n: usize) -> Result<()> {
        if n > self.tokens.len() {
            return Err(Error::Usage(format!(
                "cannot truncate a context of {} tokens to {n}",
                self.tokens.len()
            )));
        }
        if let Some(m) = self.media.iter().find(|m| m.start < n && n < m.end()) {
            return Err(Error::Usage(format!(
                "cannot cut the context at {n}: an image fills rows {} to {}",
                m.start,
                m.end()
            )));
        }
        if n < self.tokens.len() {
            // Before any rows run again: those the drafter's cache still holds are not redone.
            if let Some(m) = &mut self.mtp {
                m.truncate(n);
            }
            if let Some(r) = &mut self.cache.recurrent {
                let from = r.restore(&self.model.backend, n);
                let redo = self.tokens[from..n].to_vec();
                self.tokens.truncate(from);
                self.run_chunks(&redo)?;
                self.stats.recomputed_tokens += redo.len();
            }
            self.tokens.truncate(n);
            self.media.retain(|m| m.end() <= n);
            self.has_logits = false;
        }
        Ok(())
    }

    /// Whether this model's context can be shifted (not with recurrent state).
    pub fn can_shift_context(&self) -> bool {
        self.model.can_shift_context()
    }

    /// Context shift on (`Some(keep)`: when the context is full, `make_room` drops the oldest half
    /// of the tokens after the first `keep`) or off. An error for a model that cannot shift.
    pub fn set_context_shift(&mut self, keep: Option<usize>) -> Result<()> {
        if keep.is_some() && !self.can_shift_context() {
            return Err(Error::Unsupported(format!(
                "context shift is impossible for {} models: they keep recurrent state, not a \
                 cache of tokens that can be dropped",
                self.model.config.arch.name()
            )));
        }
        self.shift_keep = keep;
        Ok(())
    }

    /// The tokens a context shift keeps, if it is on.
    pub fn context_shift(&self) -> Option<usize> {
        self.shift_keep
    }

    /// Drop the oldest half of the tokens after the first `keep` (llama.cpp's `n_discard =
    /// n_left / 2`), moving the rest down and re-rotating their cached keys for their new
    /// positions. Returns how many tokens were dropped (0 when nothing follows the kept ones).
    /// The logits of the last token stay valid: they depend on what it saw when it ran.
    pub fn shift_context(&mut self, keep: usize) -> Result<usize> {
        if !self.media.is_empty() {
            return Err(Error::Unsupported(
                "context shift cannot move an image: its rows keep the positions they were \
                 encoded at (start a new session, or give a larger context)"
                    .into(),
            ));
        }
        let len = self.tokens.len();
        let keep = keep.min(len);
        let discard = (len - keep) / 2;
        if discard == 0 {
            return Ok(0);
        }
        self.model
            .shift_cache(&mut self.cache, keep, discard, len)?;
        self.tokens.drain(keep..keep + discard);
        self.stats.context_shifts += 1;
        self.stats.shifted_out_tokens += discard;
        Ok(discard)
    }

    /// Make room for one more token if the context is full: shift it when context shift is on.
    /// Returns whether there is room.
    pub fn make_room(&mut self) -> Result<bool> {
        if self.remaining() > 0 {
            return Ok(true);
        }
        match self.shift_keep {
            Some(keep) => Ok(self.shift_context(keep)? > 0),
            None => Ok(false),
        }
    }

    /// Forget the whole context.
    pub fn reset(&mut self) {
        self.tokens.clear();
        self.media.clear();
        self.has_logits = false;
        if let Some(m) = &mut self.mtp {
            m.reset();
        }
        if let Some(r) = &mut self.cache.recurrent {
            r.clear_checkpoints();
        }
    }

    /// Keep a copy of the recurrent state at the current length, so `truncate` can come back
    /// here without recomputing (prefill does this at its end; `generate` at a reply's end).
    /// Nothing for models without recurrent blocks.
    pub fn checkpoint(&mut self) -> Result<()> {
        let pos = self.tokens.len();
        match &mut self.cache.recurrent {
            Some(r) if pos > 0 => r.save(&self.model.backend, &self.model.config, pos),
            _ => Ok(()),
        }
    }

    /// The positions with a recurrent-state checkpoint (empty for other models).
    pub fn checkpoints(&self) -> Vec<usize> {
        self.cache
            .recurrent
            .as_ref()
            .map_or_else(Vec::new, |r| r.checkpoint_positions())
    }

    /// Run `ids` in batches of up to the scratch size; for recurrent models a batch also ends at
    /// each multiple of `CHECKPOINT_INTERVAL`, where a checkpoint is taken.
    fn run_chunks(&mut self, mut ids: &[u32]) -> Result<()> {
        let recurrent = self.cache.recurrent.is_some();
        while !ids.is_empty() {
            let mut n = ids.len().min(self.scratch_rows());
            let pos = self.tokens.len();
            if recurrent {
                n = n.min(CHECKPOINT_INTERVAL - pos % CHECKPOINT_INTERVAL);
            }
            // A call holds rows of at most one image, and no text with them.
            for m in &self.media {
                for edge in [m.start, m.end()] {
                    if edge > pos {
                        n = n.min(edge - pos);
                    }
                }
            }
            self.run(&ids[..n])?;
            ids = &ids[n..];
            if recurrent && self.tokens.len().is_multiple_of(CHECKPOINT_INTERVAL) {
                self.checkpoint()?;
            }
        }
        Ok(())
    }

    fn scratch_rows(&self) -> usize {
        self.call_rows
    }

    fn run(&mut self, ids: &[u32]) -> Result<()> {
        if self.batcher.is_some() {
            let logits = self.run_batched(ids, false)?;
            self.logits.copy_from_slice(&logits);
            self.tokens.extend_from_slice(ids);
            self.has_logits = true;
            return Ok(());
        }
        let start_pos = self.tokens.len();
        let positions = self.positions(start_pos, ids.len());
        let width = self.model.config.embedding_width();
        let media = self
            .media
            .iter()
            .find(|m| m.start <= start_pos && start_pos < m.end());
        let embedded = media.map(|m| {
            let from = (start_pos - m.start) * width;
            (0, &m.embeddings[from..from + ids.len() * width])
        });
        let inputs = RowInputs {
            embedded,
            positions: positions.as_deref(),
            bidirectional: media.is_some_and(|m| m.bidirectional),
        };
        self.model.forward_with(
            ids,
            &inputs,
            start_pos,
            &mut self.cache,
            &mut self.scratch,
            &mut self.logits,
        );
        if let Some(e) = self.model.backend.take_error() {
            self.has_logits = false;
            return Err(e);
        }
        self.follow(ids, start_pos)?;
        self.tokens.extend_from_slice(ids);
        self.has_logits = true;
        Ok(())
    }

    /// `ids` after the context as one call of the batcher's next step: the cache goes to the step
    /// and comes back. Returns the last row's logits, or every row's. A failed step leaves the
    /// session empty (its cache may not hold what its tokens say).
    fn run_batched(&mut self, ids: &[u32], all_rows: bool) -> Result<Vec<f32>> {
        let batcher = self.batcher.expect("a batched session has its batcher");
        let start_pos = self.tokens.len();
        let width = self.model.config.embedding_width();
        let media = self
            .media
            .iter()
            .find(|m| m.start <= start_pos && start_pos < m.end());
        let placeholder = KvCache {
            layers: Vec::new(),
            ctx: self.cache.ctx,
            types: self.cache.types,
            recurrent: None,
        };
        let call = Call {
            ids: ids.to_vec(),
            start_pos,
            positions: self.positions(start_pos, ids.len()),
            embedded: media.map(|m| (0, m.embeddings.clone(), (start_pos - m.start) * width)),
            bidirectional: media.is_some_and(|m| m.bidirectional),
            all_rows,
            cache: std::mem::replace(&mut self.cache, placeholder),
        };
        let answer = batcher.forward(call);
        self.cache = answer.cache;
        if answer.logits.is_err() {
            self.reset();
        }
        answer.logits
    }
}
