//! Qwen family: Qwen2/2.5 (Llama's layer with biases on Q, K and V) and Qwen3 (no biases; each
//! query and key head RMS-normed before RoPE).

use super::{AttentionOpts, Step};
use crate::backend::Backend;
use crate::model::weights::LayerWeights;

pub(crate) fn qwen2_layer<B: Backend>(f: &mut Step<B>, l: &LayerWeights<B>) {
    let opts = AttentionOpts {
        qkv_bias: true,
        ..AttentionOpts::default()
    };
    f.norm_input(&l.attn_norm);
    f.attention(l, opts);
    f.residual();

    f.norm_input(&l.ffn_norm);
    f.feed_forward(l);
    f.residual();
}

pub(crate) fn qwen3_layer<B: Backend>(f: &mut Step<B>, l: &LayerWeights<B>) {
    let opts = AttentionOpts {
        qk_norm: true,
        ..AttentionOpts::default()
    };
    f.norm_input(&l.attn_norm);
    f.attention(l, opts);
    f.residual();

    f.norm_input(&l.ffn_norm);
    f.feed_forward(l);
    f.residual();
}
