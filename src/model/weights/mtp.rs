//! The multi-token-prediction ("nextn") block that Qwen3.5 and GLM-4.5 files carry after the
//! trunk's blocks (`nextn_predict_layers`), which drafts for speculative decoding (arch/mtp.rs).
//! It loads only with `ModelFile::load_mtp`, as llama.cpp loads it only for `draft-mtp`.

use super::{Block, Finder};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::model::config::ModelConfig;

/// The multi-token-prediction block (`blk.{n_layers}.*`, llama.cpp's `graph_mtp`): a block of the
/// trunk's kind whose input is `eh_proj` over [enorm(embedding of a token) ; hnorm(the trunk's
/// output-normed hidden state at the position before it)], then its own head norm and the LM head.
pub struct MtpWeights<B: Backend> {
    /// The block proper: a Qwen3.5 block with attention (never DeltaNet), or GLM-4.5's layer.
    pub block: Block<B>,
    /// `eh_proj` split at load by its input: the columns that take the token's embedding and those
    /// that take the hidden state.
    pub eh_embed: B::Weight,
    pub eh_hidden: B::Weight,
    pub enorm: B::Weight,
    pub hnorm: B::Weight,
    /// Its own embedding table (`nextn.embed_tokens`), else the trunk's.
    pub embed: Option<B::Weight>,
    /// Its own LM head and the norm before it (`nextn.shared_head_*`), else the trunk's.
    pub head: Option<B::Weight>,
    pub head_norm: Option<B::Weight>,
}

/// The first multi-token-prediction block, where the file has one (`nextn_predict_layers`).
pub(super) fn mtp<B: Backend>(f: &Finder<'_, B>, c: &ModelConfig) -> Result<Option<MtpWeights<B>>> {
    if c.nextn_layers == 0 {
        return Ok(None);
    }
    let i = c.n_layers;
    let n = |part: &str| format!("blk.{i}.{part}");
    let (h, vocab) = (c.hidden_size, c.vocab_size);
    let eh_name = n("nextn.eh_proj.weight");
    let eh = f.tensor(&eh_name, &[2 * h, h])?;
    let half = |start: usize, part: &str| {
        eh.column_range(format!("{eh_name}[{part}]"), start, h)
            .ok_or_else(|| {
                Error::Unsupported(format!(
                    "tensor '{eh_name}' is {} with rows of {} values; kiln splits it at the \
                     hidden size {h}, which is not a multiple of the type's block",
                    eh.dtype,
                    2 * h
                ))
            })
    };
    let (eh_embed, eh_hidden) = (half(0, "embedding")?, half(h, "hidden")?);
    Ok(Some(MtpWeights {
        block: super::block(f, c, i)?,
        eh_embed: f.backend.weight(&eh_embed)?,
        eh_hidden: f.backend.weight(&eh_hidden)?,
        enorm: f.norm(&n("nextn.enorm.weight"), h)?,
        hnorm: f.norm(&n("nextn.hnorm.weight"), h)?,
        embed: match f.file.tensor(&n("nextn.embed_tokens.weight")) {
            None => None,
            Some(_) => Some(
                f.backend
                    .embedding_table(f.tensor(&n("nextn.embed_tokens.weight"), &[h, vocab])?)?,
            ),
        },
        head: f.optional(&n("nextn.shared_head_head.weight"), &[h, vocab])?,
        head_norm: match f.file.tensor(&n("nextn.shared_head_norm.weight")) {
            None => None,
            Some(_) => Some(f.norm(&n("nextn.shared_head_norm.weight"), h)?),
        },
    }))
}
