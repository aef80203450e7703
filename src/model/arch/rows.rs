//! A forward call's rows: each sequence's place among them (`SeqRows`), and what they carry
//! besides their token ids: for an image in the context, the embeddings that take the place of
//! its tokens' (and Qwen3-VL's deepstack slices, added after the first layers), multi-axis RoPE
//! positions, and attention that runs both ways over the image's rows.

use super::{KvCache, Model, Scratch};
use crate::backend::Backend;
use crate::model::config::ModelConfig;

/// What a forward call's rows carry besides their token ids, for images in the context.
pub struct RowInputs<'a> {
    /// Rows whose input is an embedding instead of their token's: the first of them in this
    /// call, and their embeddings (consecutive rows of `ModelConfig::embedding_width`: the hidden
    /// size, then any deepstack slices).
    pub embedded: Option<(usize, &'a [f32])>,
    /// Each row's (time, row, column) RoPE position; None: the positions are the cache
    /// indices, as for text.
    pub positions: Option<&'a [[u32; 3]]>,
    /// The rows attend to each other both ways: an image Gemma 3 sees whole. Each row sees every
    /// key up to the call's last, as llama.cpp's non-causal decode of an image batch.
    pub bidirectional: bool,
}

/// A sequence's rows inside one forward call: `rows` rows from row `first` of the scratch
/// buffers, at positions `start_pos..` of `cache`.
pub(super) struct SeqRows<'c, B: Backend> {
    pub cache: &'c mut KvCache<B>,
    pub start_pos: usize,
    pub first: usize,
    pub rows: usize,
    /// False: the rows attend to each other both ways (`RowInputs::bidirectional`).
    pub causal: bool,
}

impl RowInputs<'_> {
    /// Token rows at their cache indices.
    pub const TOKENS: RowInputs<'static> = RowInputs {
        embedded: None,
        positions: None,
        bidirectional: false,
    };
}

impl<B: Backend> Model<B> {
    /// The embedded rows' embeddings into the residual stream `s.x` over their token embeddings:
    /// unscaled, as llama.cpp takes embeddings (only token rows get the embedding scale).
    pub(super) fn place_embeddings(
        &self,
        inputs: &[RowInputs],
        seqs: &[SeqRows<B>],
        s: &mut Scratch<B>,
    ) {
        let (b, c) = (&self.backend, &self.config);
        for (q, inputs) in seqs.iter().zip(inputs) {
            if let Some((first, embeddings)) = inputs.embedded {
                let n = embeddings.len() / c.embedding_width();
                assert!(first + n <= q.rows);
                if c.deepstack_layers == 0 {
                    b.upload(&mut s.h, embeddings);
                } else {
                    s.embedded_host.clear();
                    s.embedded_host.extend(embedded_slices(embeddings, c, 0));
                    b.upload(&mut s.h, &s.embedded_host);
                }
                b.copy_rows(&s.h, 0, &mut s.x, q.first + first, n, c.hidden_size);
            }
        }
    }

    /// After layer `il`, the embedded rows' deepstack slice `il + 1` joins the residual stream
    /// (Qwen3-VL; llama.cpp adds it to the layer's output, after its residual add). Token rows
    /// add nothing.
    pub(super) fn add_deepstack(
        &self,
        il: usize,
        inputs: &[RowInputs],
        seqs: &[SeqRows<B>],
        rows: usize,
        s: &mut Scratch<B>,
    ) {
        let (b, c) = (&self.backend, &self.config);
        let e = c.hidden_size;
        if std::mem::take(&mut s.pending_residual) {
            b.add(&mut s.x, &s.o, rows * e);
        }
        s.embedded_host.clear();
        s.embedded_host.resize(rows * e, 0.0);
        for (q, inputs) in seqs.iter().zip(inputs) {
            if let Some((first, embeddings)) = inputs.embedded {
                let at = (q.first + first) * e;
                for (dst, v) in
                    s.embedded_host[at..]
                        .iter_mut()
                        .zip(embedded_slices(embeddings, c, il + 1))
                {
                    *dst = v;
                }
            }
        }
        b.upload(&mut s.h, &s.embedded_host);
        b.add(&mut s.x, &s.h, rows * e);
    }
}

/// Slice `k` (0: the embedding; `i + 1`: deepstack layer `i`'s) of every row of `embeddings`,
/// rows of `c.embedding_width()` values.
fn embedded_slices<'e>(
    embeddings: &'e [f32],
    c: &ModelConfig,
    k: usize,
) -> impl Iterator<Item = f32> + 'e {
    let e = c.hidden_size;
    embeddings
        .chunks_exact(c.embedding_width())
        .flat_map(move |row| row[k * e..(k + 1) * e].iter().copied())
}
