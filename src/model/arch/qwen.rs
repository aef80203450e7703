//! Qwen family: the Llama layer (llama.rs) with Qwen's attention options.

use super::AttentionOpts;

/// Qwen2/2.5: biases on the Q, K and V projections.
pub(crate) const QWEN2: AttentionOpts = AttentionOpts {
    qkv_bias: true,
    qk_norm: false,
};

/// Qwen3: no biases; each query and key head RMS-normed before RoPE.
pub(crate) const QWEN3: AttentionOpts = AttentionOpts {
    qkv_bias: false,
    qk_norm: true,
};
