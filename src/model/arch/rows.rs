//! What a forward call's rows carry besides their token ids: for an image in the context, the
//! embeddings that take the place of its tokens', multi-axis RoPE positions, and attention that
//! runs both ways over the image's rows.

/// What a forward call's rows carry besides their token ids, for images in the context.
pub struct RowInputs<'a> {
    /// Rows whose input is an embedding instead of their token's: the first of them in this
    /// call, and their embeddings (consecutive rows of the hidden size).
    pub embedded: Option<(usize, &'a [f32])>,
    /// Each row's (time, row, column) RoPE position; None: the positions are the cache
    /// indices, as for text.
    pub positions: Option<&'a [[u32; 3]]>,
    /// The rows attend to each other both ways: an image Gemma 3 sees whole. Each row sees every
    /// key up to the call's last, as llama.cpp's non-causal decode of an image batch.
    pub bidirectional: bool,
}

impl RowInputs<'_> {
    /// Token rows at their cache indices.
    pub const TOKENS: RowInputs<'static> = RowInputs {
        embedded: None,
        positions: None,
        bidirectional: false,
    };
}
