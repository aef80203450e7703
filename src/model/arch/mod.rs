//! The architecture families and the forward pass. Each family has one file that owns its facts (a
//! `Family`, family.rs: the names files give it, its own GGUF and config.json keys, its quirks) and
//! its layer: `llama.rs` (Llama, SmolLM2, Mistral; its layer also serves Qwen), `qwen.rs` (Qwen2,
//! Qwen3), `qwen3moe.rs` (Qwen3 MoE: Qwen3's layer over the mixture of experts in `moe.rs`),
//! `qwen3vl.rs` (Qwen3-VL and its MoE: those layers under multi-axis RoPE, with the image's
//! deepstack features added after the first layers), `smollm3.rs` (Llama's layer, NoPE every
//! fourth), `gemma3.rs` (its layer also serves `gemma2.rs`, which soft-caps attention scores and
//! logits), `qwen35.rs` (Qwen3.5, over the Gated DeltaNet block in `delta_net.rs` and the experts
//! in `moe.rs`), `gpt_oss.rs` (Llama's layer with attention sinks and biased experts),
//! `mistral3.rs` (Llama's layer with YaRN and query temperature), `glm4moe.rs` (Llama's layer,
//! partial RoPE, leading dense blocks, then sigmoid-routed experts with a shared one), `phi3.rs`
//! (Llama's layer, partial RoPE, LongRoPE, fused projections split at load), `glm4.rs` (Gemma's
//! sandwich layer with SiLU, biases and partial RoPE), `gemma4.rs` (Gemma's sandwich layer with
//! per-layer head shapes, shared KV caches, experts beside the MLP and per-layer embeddings).
//! `FAMILIES` below lists them.
//!
//! `Model` holds the weights on a backend; `Step` is one batched forward call over a chunk of
//! tokens, with the shared building blocks (norms, attention, feed-forward, residual) that each
//! family's layer composes.

mod batch;
mod delta_net;
pub(crate) mod family;
mod gemma2;
mod gemma3;
mod gemma4;
mod glm4;
mod glm4moe;
mod gpt_oss;
mod llama;
mod matrices;
mod mistral3;
mod moe;
mod mtp;
mod phi3;
mod qwen;
mod qwen35;
mod qwen3moe;
mod qwen3vl;
mod rows;
mod smollm3;

use super::config::ModelConfig;
use super::loader::ModelFile;
use super::recurrent::RecurrentState;
use super::rope::RopeFreqs;
use super::weights::{Block, Ffn, GatedAttentionWeights, LayerWeights, Weights};
use crate::backend::{Backend, CacheType};
use crate::error::{Error, Result};
pub use batch::BatchSeq;
use batch::SeqScratch;
use family::{Family, LayerKind};
pub use matrices::LayerMatrices;
pub use mtp::MtpState;
pub use rows::RowInputs;
use rows::SeqRows;

/// Every family kiln runs, searched by GGUF `general.architecture` and config.json `model_type`.
/// A new family is its own file (which fills in a `Family`), its `mod` line at the top of this
/// file, one line here, and its `Arch` variant (config/mod.rs).
pub(crate) const FAMILIES: [&Family; 17] = [
    &llama::LLAMA,
    &smollm3::SMOLLM3,
    &qwen::QWEN2,
    &qwen::QWEN3,
    &qwen3moe::QWEN3_MOE,
    &qwen3vl::QWEN3_VL,
    &qwen3vl::QWEN3_VL_MOE,
    &gemma2::GEMMA2,
    &gemma3::GEMMA3,
    &qwen35::QWEN35,
    &qwen35::QWEN35_MOE,
    &gpt_oss::GPT_OSS,
    &mistral3::MISTRAL3,
    &glm4moe::GLM4_MOE,
    &phi3::PHI3,
    &glm4::GLM4,
    &gemma4::GEMMA4,
];

pub struct Model<B: Backend> {
    pub backend: B,
    pub config: ModelConfig,
    family: &'static Family,
    weights: Weights<B>,
    /// Distinct RoPE frequency sets (global, and local when different).
    ropes: Vec<RopeFreqs>,
    /// Index into `ropes` for each layer.
    layer_rope: Vec<usize>,
}

/// The element types of the key and of the value cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct KvCacheTypes {
    pub k: CacheType,
    pub v: CacheType,
}

/// The per-layer key and value caches, `ctx` rows of `kv_dim` each (empty for recurrent
/// blocks), and the recurrent blocks' state when the model has them.
pub struct KvCache<B: Backend> {
    pub layers: Vec<(B::Cache, B::Cache)>,
    pub ctx: usize,
    pub types: KvCacheTypes,
    pub recurrent: Option<RecurrentState<B>>,
}

/// Activation buffers for a chunk of up to `rows` tokens, allocated once per session.
pub struct Scratch<B: Backend> {
    rows: usize,
    x: B::Buffer,
    h: B::Buffer,
    q: B::Buffer,
    k: B::Buffer,
    v: B::Buffer,
    attn: B::Buffer,
    o: B::Buffer,
    gate: B::Buffer,
    up: B::Buffer,
    /// One RoPE table per entry of `Model::ropes`.
    rope_tables: Vec<B::Buffer>,
    rope_host: Vec<f32>,
    /// Room on the host for slices of embedded rows on their way to the backend (deepstack).
    embedded_host: Vec<f32>,
    last: B::Buffer,
    logits: B::Buffer,
    /// Each row's query temperature (`ModelConfig::attn_temperature`), where the model has one.
    q_temperature: Option<B::Buffer>,
    /// What Qwen3.5's blocks need besides.
    qwen35: Option<qwen35::Qwen35Scratch<B>>,
    /// What mixture-of-experts blocks need besides.
    moe: Option<moe::MoeScratch<B>>,
    /// What Gemma 4's per-layer inputs need besides.
    gemma4: Option<gemma4::Gemma4Scratch<B>>,
    /// The final norm and LM head over the rows whose logits are wanted (`Model::forward_batch`),
    /// allocated on its first use.
    verify: Option<VerifyScratch<B>>,
    /// Room for one sequence's attention in a call over several (batch.rs), on first use.
    seq: Option<SeqScratch<B>>,
    /// Each RoPE table's values per row, as last built.
    rope_widths: Vec<usize>,
    /// Per layer with an output scale (Gemma 4), `rows` copies of it.
    layer_scales: Vec<Option<B::Buffer>>,
    /// `x += o` is still to be done: a block's residual add waits for the next block's input
    /// norm, so that a backend may fuse the two (`Step::residual`).
    pending_residual: bool,
}

/// Room for the final norm and LM head of `rows` rows.
struct VerifyScratch<B: Backend> {
    rows: usize,
    x: B::Buffer,
    logits: B::Buffer,
}

impl<B: Backend> Scratch<B> {
    /// The most tokens one forward call can take.
    pub fn rows(&self) -> usize {
        self.rows
    }
}

impl<B: Backend> Model<B> {
    pub fn load(file: &ModelFile, backend: B) -> Result<Model<B>> {
        let config = file.config.clone();
        let weights = Weights::load(file, &backend)?;
        let mut ropes: Vec<RopeFreqs> = Vec::new();
        // The multi-token-prediction block, when the file has one, is a layer after the rest.
        let n_layers = config.n_layers + weights.mtp.is_some() as usize;
        let mut layer_rope = Vec::with_capacity(n_layers);
        for il in 0..n_layers {
            let r = RopeFreqs::new(
                config.layer_shape(il).rope_dims,
                config.layer_rope_theta(il),
                config.layer_rope_scaling(il),
                config.rope_sections,
            );
            let idx = match ropes.iter().position(|x| *x == r) {
                Some(i) => i,
                None => {
                    ropes.push(r);
                    ropes.len() - 1
                }
            };
            layer_rope.push(idx);
        }
        Ok(Model {
            backend,
            family: config.arch.family(),
            config,
            weights,
            ropes,
            layer_rope,
        })
    }

    /// The file's tensors that kiln read nowhere (past its multi-token-prediction blocks and the
    /// RoPE factors its configuration holds): parts of the file's model kiln does not compute.
    pub fn unused_tensors(&self) -> &[String] {
        &self.weights.unused
    }

    /// Key and value caches for `ctx` positions.
    pub fn new_cache(&self, ctx: usize, types: KvCacheTypes) -> Result<KvCache<B>> {
        let b = &self.backend;
        let c = &self.config;
        let layers = (0..c.n_layers)
            .map(|il| {
                let hd = c.layer_shape(il).head_dim;
                for ty in [types.k, types.v] {
                    if !hd.is_multiple_of(ty.block_len()) {
                        return Err(Error::Unsupported(format!(
                            "a {ty} KV cache needs a head dimension that is a multiple of {}; \
                             this model's is {hd} (use -ctk/-ctv f16 or f32)",
                            ty.block_len()
                        )));
                    }
                }
                let width = if c.layer_has_kv(il) {
                    c.layer_kv_dim(il)
                } else {
                    0
                };
                let len = ctx.checked_mul(width).ok_or_else(|| {
                    Error::Usage(format!("a context of {ctx} tokens is too large"))
                })?;
                let k = b.layer_cache(il, len, types.k, types.k.key_rotation(hd))?;
                let v = b.layer_cache(il, len, types.v, types.v.value_rotation(hd))?;
                if len > 0 {
                    b.prepare_attention(&k, &v, hd, c.n_heads, c.layer_shape(il).n_kv_heads);
                }
                Ok((k, v))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(KvCache {
            layers,
            ctx,
            types,
            recurrent: RecurrentState::new(c, b)?,
        })
    }

    /// Whether the context can be shifted: every layer's state is a KV cache of RoPE'd keys, which
    /// a shift can move and re-rotate. (An architecture with recurrent state cannot: that state
    /// holds every past token, with no way to take the oldest out.)
    pub fn can_shift_context(&self) -> bool {
        match self.family.layer {
            LayerKind::Llama(_) | LayerKind::Gemma(_) | LayerKind::Gemma4 => true,
            LayerKind::Qwen35 => false,
        }
    }

    /// Context shift on the cache: of its first `len` rows, drop `keep..keep + discard` and move
    /// the rows after them down by `discard`, their keys rotated back by `discard` positions with
    /// each layer's own RoPE frequencies. The cache then holds what running the remaining tokens
    /// at their new positions would have stored, up to rounding.
    pub fn shift_cache(
        &self,
        cache: &mut KvCache<B>,
        keep: usize,
        discard: usize,
        len: usize,
    ) -> Result<()> {
        if !self.can_shift_context() {
            return Err(Error::Unsupported(format!(
                "{} models keep recurrent state, which a context shift cannot shift",
                self.config.arch.name()
            )));
        }
        if keep + discard > len || len > cache.ctx {
            return Err(Error::Usage(format!(
                "cannot drop tokens {keep}..{} of a context of {len}",
                keep + discard
            )));
        }
        let (b, c) = (&self.backend, &self.config);
        let moved = len - keep - discard;
        let mut host = Vec::new();
        let mut tables = Vec::with_capacity(self.ropes.len());
        for rope in &self.ropes {
            rope.shift_table(-(discard as i64), cache.ctx, &mut host);
            let mut t = b.buffer(host.len())?;
            b.upload(&mut t, &host);
            tables.push(t);
        }
        for (il, (kc, vc)) in cache.layers.iter_mut().enumerate() {
            if !c.layer_has_kv(il) {
                continue;
            }
            let shape = c.layer_shape(il);
            b.move_cache_rows(kc, keep + discard, keep, moved, c.layer_kv_dim(il));
            b.move_cache_rows(vc, keep + discard, keep, moved, c.layer_kv_dim(il));
            if !c.layer_has_rope(il) {
                // Keys without RoPE hold no position to shift.
                continue;
            }
            let table = &tables[self.layer_rope[il]];
            b.rope_cache(
                kc,
                table,
                keep,
                moved,
                shape.n_kv_heads,
                shape.head_dim,
                shape.rope_dims,
                c.rope_layout,
            );
        }
        Ok(())
    }

    /// Bytes of key/value cache per token of context.
    pub fn kv_bytes_per_token(&self, types: KvCacheTypes) -> usize {
        let c = &self.config;
        (0..c.n_layers)
            .filter(|&il| c.layer_has_kv(il))
            .map(|il| {
                let kv = c.layer_kv_dim(il);
                types.k.row_bytes(kv) + types.v.row_bytes(kv)
            })
            .sum()
    }

    pub fn new_scratch(&self, rows: usize) -> Result<Scratch<B>> {
        let c = &self.config;
        let b = &self.backend;
        // The dense feed-forward's width, or the shared expert's where wider.
        let ff = c
            .moe
            .as_ref()
            .and_then(|m| m.shared_ff)
            .map_or(c.max_ff(), |s| s.max(c.max_ff()));
        Ok(Scratch {
            rows,
            x: b.buffer(rows * c.hidden_size)?,
            h: b.buffer(rows * c.hidden_size)?,
            q: b.buffer(rows * c.max_q_dim())?,
            k: b.buffer(rows * c.max_kv_dim())?,
            v: b.buffer(rows * c.max_kv_dim())?,
            attn: b.buffer(rows * c.max_q_dim())?,
            o: b.buffer(rows * c.hidden_size)?,
            gate: b.buffer(rows * ff)?,
            up: b.buffer(rows * ff)?,
            rope_tables: self
                .ropes
                .iter()
                .map(|_| b.buffer(rows * c.max_head_dim()))
                .collect::<Result<_>>()?,
            rope_host: Vec::new(),
            embedded_host: Vec::new(),
            last: b.buffer(c.hidden_size)?,
            logits: b.buffer(c.vocab_size)?,
            q_temperature: match c.attn_temperature {
                Some(_) => Some(b.buffer(rows)?),
                None => None,
            },
            qwen35: qwen35::Qwen35Scratch::new(c, b, rows)?,
            gemma4: gemma4::Gemma4Scratch::new(c, b, rows)?,
            moe: match &c.moe {
                Some(m) => Some(moe::MoeScratch::new(m, c.hidden_size, b, rows)?),
                None => None,
            },
            layer_scales: self
                .weights
                .layers
                .iter()
                .map(|l| match l {
                    Block::Standard(LayerWeights {
                        out_scale: Some(scale),
                        ..
                    }) => {
                        let mut buf = b.buffer(rows)?;
                        b.upload(&mut buf, &vec![*scale; rows]);
                        Ok(Some(buf))
                    }
                    _ => Ok(None),
                })
                .collect::<Result<_>>()?,
            verify: None,
            seq: None,
            rope_widths: vec![0; self.ropes.len()],
            pending_residual: false,
        })
    }

    /// Run `ids` (at most `scratch.rows` of them) at positions `start_pos..`, appending their keys
    /// and values to `cache`, and write the logits of the last one into `logits`.
    pub fn forward(
        &self,
        ids: &[u32],
        start_pos: usize,
        cache: &mut KvCache<B>,
        s: &mut Scratch<B>,
        logits: &mut [f32],
    ) {
        self.forward_with(ids, &RowInputs::TOKENS, start_pos, cache, s, logits);
    }

    /// `forward` over rows some of which are embeddings (an image) or sit at positions other
    /// than their cache index (multi-axis RoPE after an image).
    pub fn forward_with(
        &self,
        ids: &[u32],
        inputs: &RowInputs,
        start_pos: usize,
        cache: &mut KvCache<B>,
        s: &mut Scratch<B>,
        logits: &mut [f32],
    ) {
        self.forward_layers(ids, inputs, start_pos, cache, s);
        self.last_logits(ids.len(), s);
        self.backend.download(&s.logits, 0, logits);
        self.soft_cap(logits);
    }

    /// As `forward`, but return only the most likely next token, picked by the backend where the
    /// logits live (greedy decoding on a GPU reads back one index). None when the backend cannot,
    /// or when a logit soft-cap could merge close logits into ties: then the logits are in
    /// `logits`, as `forward` leaves them.
    pub fn forward_argmax(
        &self,
        ids: &[u32],
        start_pos: usize,
        cache: &mut KvCache<B>,
        s: &mut Scratch<B>,
        logits: &mut [f32],
    ) -> Option<u32> {
        if self.config.final_logit_softcap.is_none() {
            self.forward_to_logits(ids, start_pos, cache, s);
            if let Some(t) = self.backend.argmax(&s.logits, self.config.vocab_size) {
                return Some(t);
            }
            self.backend.download(&s.logits, 0, logits);
            return None;
        }
        self.forward(ids, start_pos, cache, s, logits);
        None
    }

    /// The output projection: its own tensor, or the tied embedding table.
    fn lm_head(&self) -> &B::Weight {
        self.weights
            .output
            .as_ref()
            .unwrap_or(&self.weights.tok_embd)
    }

    /// The final logit soft-cap (Gemma 2), on logits read back to the host.
    fn soft_cap(&self, logits: &mut [f32]) {
        if let Some(cap) = self.config.final_logit_softcap {
            logits.iter_mut().for_each(|l| *l = cap * (*l / cap).tanh());
        }
    }

    /// The forward pass up to the last position's logits in `s.logits`, on the backend.
    fn forward_to_logits(
        &self,
        ids: &[u32],
        start_pos: usize,
        cache: &mut KvCache<B>,
        s: &mut Scratch<B>,
    ) {
        self.forward_layers(ids, &RowInputs::TOKENS, start_pos, cache, s);
        self.last_logits(ids.len(), s);
    }

    /// The logits of row `rows − 1` of the residual stream into `s.logits`, after the last
    /// block's residual add (`forward_seqs` leaves it pending): for one row, the add and the
    /// output norm are one op, as between layers.
    fn last_logits(&self, rows: usize, s: &mut Scratch<B>) {
        let c = &self.config;
        let b = &self.backend;
        let (width, eps, norm) = (c.hidden_size, c.rms_norm_eps, &self.weights.output_norm);
        if rows == 1 && std::mem::take(&mut s.pending_residual) {
            b.add_rms_norm_into(&mut s.x, &s.o, norm, 1, width, eps, &mut s.last);
        } else {
            self.finish_residual(rows, s);
            b.copy_row(&s.x, rows - 1, &mut s.last, width);
            b.rms_norm(&mut s.last, norm, 1, eps);
        }
        b.matmul(&s.last, self.lm_head(), 1, &mut s.logits);
    }

    /// The last block's residual add, which `forward_seqs` leaves pending, so that `s.x` holds
    /// the residual stream of each row.
    fn finish_residual(&self, rows: usize, s: &mut Scratch<B>) {
        if std::mem::take(&mut s.pending_residual) {
            self.backend
                .add(&mut s.x, &s.o, rows * self.config.hidden_size);
        }
    }

    /// Every layer over `ids`, leaving the residual stream of each row in `s.x`, but for the last
    /// block's residual add (`finish_residual`).
    fn forward_layers(
        &self,
        ids: &[u32],
        inputs: &RowInputs,
        start_pos: usize,
        cache: &mut KvCache<B>,
        s: &mut Scratch<B>,
    ) {
        let mut seqs = [SeqRows {
            cache,
            start_pos,
            first: 0,
            rows: ids.len(),
            causal: !inputs.bidirectional,
        }];
        self.forward_seqs(ids, std::slice::from_ref(inputs), &mut seqs, s);
    }

    /// Every layer over the rows of `seqs` (their ids one after another in `ids`, each
    /// sequence's `RowInputs` in `inputs`), leaving the residual stream of each row in `s.x`,
    /// but for the last block's residual add (`finish_residual`).
    fn forward_seqs(
        &self,
        ids: &[u32],
        inputs: &[RowInputs],
        seqs: &mut [SeqRows<B>],
        s: &mut Scratch<B>,
    ) {
        let c = &self.config;
        let rows = ids.len();
        assert!(rows <= s.rows && seqs.iter().map(|q| q.rows).sum::<usize>() == rows);
        for q in seqs.iter() {
            assert!(q.start_pos + q.rows <= q.cache.ctx);
        }
        let b = &self.backend;
        b.embed(
            &self.weights.tok_embd,
            ids,
            c.embedding_scale.unwrap_or(1.0),
            &mut s.x,
        );
        self.place_embeddings(inputs, seqs, s);
        let deepstack = c.deepstack_layers > 0 && inputs.iter().any(|i| i.embedded.is_some());
        if let Some(g) = &mut s.gemma4 {
            b.copy_rows(&s.x, 0, &mut g.x0, 0, rows, c.hidden_size);
            g.ids.clear();
            g.ids.extend_from_slice(ids);
        }
        self.rope_tables(inputs, seqs, s);
        if let (Some(t), Some(buf)) = (c.attn_temperature, &mut s.q_temperature) {
            s.rope_host.clear();
            for q in seqs.iter() {
                s.rope_host
                    .extend((q.start_pos..q.start_pos + q.rows).map(|p| t.at(p)));
            }
            b.upload(buf, &s.rope_host);
        }
        for q in seqs.iter_mut() {
            if q.start_pos == 0
                && let Some(r) = &mut q.cache.recurrent
            {
                // A sequence starts from the zero state.
                r.zero(b);
            }
        }
        s.pending_residual = false;
        for (il, layer) in self.weights.layers.iter().enumerate() {
            let mut step = Step {
                model: self,
                s: &mut *s,
                seqs: &mut *seqs,
                rows,
                il,
            };
            match (self.family.layer, layer) {
                (_, Block::Qwen35(layer)) => qwen35::layer(&mut step, layer),
                (LayerKind::Llama(opts), Block::Standard(layer)) => {
                    llama::layer(&mut step, layer, opts)
                }
                (LayerKind::Gemma(opts), Block::Standard(layer)) => {
                    gemma3::layer(&mut step, layer, opts)
                }
                (LayerKind::Gemma4, Block::Standard(layer)) => gemma4::layer(&mut step, layer),
                (LayerKind::Qwen35, Block::Standard(_)) => {
                    unreachable!("Qwen3.5 weights load as Qwen3.5 blocks")
                }
            }
            if deepstack && il < c.deepstack_layers {
                self.add_deepstack(il, inputs, seqs, rows, s);
            }
        }
        // The last block's residual add stays pending: `last_logits` fuses it with the output
        // norm, other callers run `finish_residual`.
    }
}

/// Which optional parts of the attention block an architecture uses.
#[derive(Clone, Copy)]
pub(crate) struct AttentionOpts {
    /// Biases on the Q, K and V projections (Qwen2).
    pub qkv_bias: bool,
    /// RMSNorm of each query and key head before RoPE (Qwen3, Gemma 3).
    pub qk_norm: bool,
    /// A bias on the output projection and a sink logit per query head (gpt-oss), both
    /// required in the file.
    pub out_bias_and_sinks: bool,
}

impl AttentionOpts {
    /// No biases, no QK-norm, no sinks (Llama).
    pub const PLAIN: AttentionOpts = AttentionOpts {
        qkv_bias: false,
        qk_norm: false,
        out_bias_and_sinks: false,
    };
}

/// One layer's worth of a forward call: the building blocks the architecture files compose.
/// The residual stream is `x`; blocks read their input from `h` and leave their output in `o`.
pub(crate) struct Step<'a, 'c, B: Backend> {
    model: &'a Model<B>,
    s: &'a mut Scratch<B>,
    /// The sequences whose rows the call runs, one after another (batch.rs).
    seqs: &'a mut [SeqRows<'c, B>],
    /// Rows of all of them.
    rows: usize,
    il: usize,
}

impl<B: Backend> Step<'_, '_, B> {
    /// `h = rms_norm(x) · w`: the input of the next block (after the last block's residual add,
    /// fused with it).
    pub fn norm_input(&mut self, w: &B::Weight) {
        let (b, c) = (&self.model.backend, &self.model.config);
        let (rows, eps, width) = (self.rows, c.rms_norm_eps, c.hidden_size);
        let s = &mut *self.s;
        if std::mem::take(&mut s.pending_residual) {
            b.add_rms_norm_into(&mut s.x, &s.o, w, rows, width, eps, &mut s.h);
        } else {
            b.rms_norm_into(&s.x, w, rows, width, eps, &mut s.h);
        }
    }

    /// `o = rms_norm(o) · w` (Gemma's post-block norms).
    pub fn norm_output(&mut self, w: Option<&B::Weight>) {
        if let Some(w) = w {
            let c = &self.model.config;
            self.model
                .backend
                .rms_norm(&mut self.s.o, w, self.rows, c.rms_norm_eps);
        }
    }

    /// `x += o`, done by the next `norm_input` (or at the end of the layers), so that the add
    /// and the norm may run as one op: `o` stays as it is until then.
    pub fn residual(&mut self) {
        self.s.pending_residual = true;
    }

    /// `x *= scale` over the whole residual stream, for a layer with an output scale (Gemma 4),
    /// once the block's residual add is done.
    pub fn scale_layer_output(&mut self) {
        let (b, c) = (&self.model.backend, &self.model.config);
        let s = &mut *self.s;
        let Some(scales) = &s.layer_scales[self.il] else {
            return;
        };
        if std::mem::take(&mut s.pending_residual) {
            b.add(&mut s.x, &s.o, self.rows * c.hidden_size);
        }
        b.scale_rows(&mut s.x, scales, self.rows, c.hidden_size);
    }

    /// Self-attention of `h`: Q/K/V projections, optional biases and QK-norm, RoPE, KV-cache
    /// append, causal attention (windowed on local layers), output projection into `o`.
    pub fn attention(&mut self, l: &LayerWeights<B>, opts: AttentionOpts) {
        let (m, rows) = (self.model, self.rows);
        let (b, c) = (&m.backend, &m.config);
        let wk =
            l.wk.as_ref()
                .expect("every layer but Gemma 4's shared-KV ones loads keys");
        let wv = l.wv.as_ref().unwrap_or(wk);
        // Nothing between the projections and RoPE: the backend may fuse them.
        let biased = opts.qkv_bias && [&l.bq, &l.bk, &l.bv].iter().any(|b| b.is_some());
        let normed = opts.qk_norm && l.q_norm.is_some() && l.k_norm.is_some();
        if !biased && !normed && self.qkv_rope_store([&l.wq, wk, wv]) {
            self.rope_store_attend(l.sinks.as_ref(), true);
            let s = &mut *self.s;
            b.matmul(&s.attn, &l.wo, rows, &mut s.o);
            if let Some(bo) = &l.bo {
                b.add_bias(&mut s.o, bo, rows);
            }
            return;
        }
        let s = &mut *self.s;
        b.matmul_many(
            &s.h,
            &[&l.wq, wk, wv],
            rows,
            &mut [&mut s.q, &mut s.k, &mut s.v],
        );
        if opts.qkv_bias {
            for (x, bias) in [(&mut s.q, &l.bq), (&mut s.k, &l.bk), (&mut s.v, &l.bv)] {
                if let Some(bias) = bias {
                    b.add_bias(x, bias, rows);
                }
            }
        }
        if opts.qk_norm
            && let (Some(qn), Some(kn)) = (&l.q_norm, &l.k_norm)
        {
            b.rms_norm(&mut s.q, qn, rows * c.n_heads, c.rms_norm_eps);
            let n_kv_heads = c.layer_shape(self.il).n_kv_heads;
            b.rms_norm(&mut s.k, kn, rows * n_kv_heads, c.rms_norm_eps);
        }
        self.rope_store_attend(l.sinks.as_ref(), false);
        b.matmul(&self.s.attn, &l.wo, rows, &mut self.s.o);
        if let Some(bo) = &l.bo {
            b.add_bias(&mut self.s.o, bo, rows);
        }
    }

    /// Qwen3.5's gated attention of `h` into `o`: the query, its gate, keys and values; QK-norm;
    /// RoPE over the leading `rope_dims` of each head; attention; the output times sigmoid(gate).
    pub fn gated_attention(&mut self, l: &GatedAttentionWeights<B>) {
        let (m, rows) = (self.model, self.rows);
        let (b, c) = (&m.backend, &m.config);
        let s = &mut *self.s;
        let gate = &mut s
            .qwen35
            .as_mut()
            .expect("Qwen3.5 models have Qwen3.5 scratch")
            .q_gate;
        b.matmul_many(
            &s.h,
            &[&l.wq, &l.wq_gate, &l.wk, &l.wv],
            rows,
            &mut [&mut s.q, gate, &mut s.k, &mut s.v],
        );
        b.rms_norm(&mut s.q, &l.q_norm, rows * c.n_heads, c.rms_norm_eps);
        b.rms_norm(&mut s.k, &l.k_norm, rows * c.n_kv_heads, c.rms_norm_eps);
        self.rope_store_attend(None, false);
        let s = &mut *self.s;
        let gate = &s.qwen35.as_ref().expect("Qwen3.5 scratch").q_gate;
        b.mul_sigmoid(&mut s.attn, gate, rows, c.q_dim(), c.q_dim());
        b.matmul(&s.attn, &l.wo, rows, &mut s.o);
    }

    /// The feed-forward part of `h` into `o`: gated, or a mixture of experts (moe.rs).
    pub fn feed_forward(&mut self, ffn: &Ffn<B>) {
        match ffn {
            Ffn::Dense { gate, up, down } => self.gated_ffn(gate, up, down),
            Ffn::Moe(m) => self.moe(m),
        }
    }

    /// `o = down(act(gate(h)) · up(h))` with the given weights.
    pub fn gated_ffn(&mut self, gate: &B::Weight, up: &B::Weight, down: &B::Weight) {
        let (b, c) = (&self.model.backend, &self.model.config);
        let s = &mut *self.s;
        let act = self.model.gate_activation();
        let (rows, width) = (self.rows, c.layer_ff(self.il));
        b.matmul_gated(&s.h, gate, up, rows, width, act, &mut s.gate, &mut s.up);
        b.matmul(&s.gate, down, self.rows, &mut s.o);
    }
}
