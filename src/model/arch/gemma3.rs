//! Gemma 3: QK-norm, and each block's output RMS-normed again before the residual add (four norms
//! per layer). Embeddings scaled by sqrt(hidden), GELU-tanh gating, and local (sliding-window,
//! RoPE base 10000) layers between every sixth global one come from the configuration.

use super::{AttentionOpts, Step};
use crate::backend::Backend;
use crate::model::weights::LayerWeights;

pub(crate) fn layer<B: Backend>(f: &mut Step<B>, l: &LayerWeights<B>) {
    let opts = AttentionOpts {
        qk_norm: true,
        ..AttentionOpts::default()
    };
    f.norm_input(&l.attn_norm);
    f.attention(l, opts);
    f.norm_output(l.post_attn_norm.as_ref());
    f.residual();

    f.norm_input(&l.ffn_norm);
    f.feed_forward(l);
    f.norm_output(l.post_ffn_norm.as_ref());
    f.residual();
}
