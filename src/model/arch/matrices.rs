//! The weight matrices a decode step multiplies, layer by layer, for `kiln bench --kernels`,
//! which times each kind over every layer's own weights.

use super::Model;
use crate::backend::{Backend, GateActivation};
use crate::model::config::Activation;
use crate::model::weights::{Block, Ffn};

/// One standard layer's projections: Q/K/V, the attention output, and a dense feed-forward.
pub struct LayerMatrices<'a, B: Backend> {
    pub layer: usize,
    pub qkv: [&'a B::Weight; 3],
    pub wo: &'a B::Weight,
    pub gate: &'a B::Weight,
    pub up: &'a B::Weight,
    pub down: &'a B::Weight,
}

impl<B: Backend> Model<B> {
    /// The layers with their own Q/K/V and a dense feed-forward (recurrent blocks, shared-KV
    /// layers and experts are left out).
    pub fn layer_matrices(&self) -> Vec<LayerMatrices<'_, B>> {
        let standard = self
            .weights
            .layers
            .iter()
            .enumerate()
            .filter_map(|(i, b)| match b {
                Block::Standard(l) => Some((i, l)),
                Block::Qwen35(_) => None,
            });
        standard
            .filter_map(|(layer, l)| {
                let (Some(wk), Some(wv), Ffn::Dense { gate, up, down }) = (&l.wk, &l.wv, &l.ffn)
                else {
                    return None;
                };
                Some(LayerMatrices {
                    layer,
                    qkv: [&l.wq, wk, wv],
                    wo: &l.wo,
                    gate,
                    up,
                    down,
                })
            })
            .collect()
    }

    /// The output projection (`lm_head`).
    pub fn output_matrix(&self) -> &B::Weight {
        self.lm_head()
    }

    /// The feed-forward's gate activation.
    pub fn gate_activation(&self) -> GateActivation {
        match self.config.activation {
            Activation::Silu => GateActivation::Silu,
            Activation::GeluTanh => GateActivation::GeluTanh,
        }
    }
}
