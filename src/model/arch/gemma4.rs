//! Gemma 4 (`gemma4`: 31B, 26B-A4B, E2B, E4B): Gemma 3's sandwich
//! layer (gemma3.rs: each block's output RMS-normed again before the residual add, embeddings ×
//! sqrt(hidden), GELU-tanh gating) with these differences, after llama.cpp's
//! `src/models/gemma4.cpp`:
//! - norm weights are plain `x·w` (the converter adds no 1), and the query scale is 1 (QK-norm
//!   sets the scores' size);
//! - sliding-window and global layers have their own heads: the global ones wider
//!   (`attention.key_length`, against `key_length_swa`) over fewer KV heads
//!   (`attention.head_count_kv` per layer), with their own RoPE base (`rope.freq_base` against
//!   `rope.freq_base_swa`) and rotated width (`rope.dimension_count[_swa]`);
//! - the global layers' "proportional" RoPE rotates only the first quarter of each half-head's
//!   pairs, at the frequencies of the whole head: `rope_freqs.weight` holds 1 for those and 1e30
//!   (no rotation) for the rest, used on global layers only;
//! - a global layer without `attn_v` takes its values from the key projection;
//! - values are RMS-normed per head without a scale; keys and queries by `attn_k_norm`,
//!   `attn_q_norm`;
//! - each layer's output (residual stream included) is scaled by `layer_output_scale` where the
//!   file has one;
//! - the last `shared_kv_layers` layers store no keys and values but attend over the cache of the
//!   last earlier layer of their kind (ModelConfig::layer_kv_source);
//! - logits soft-capped (`final_logit_softcapping`);
//! - 26B-A4B: beside every block's dense MLP, experts routed by softmax over a scaled norm of the
//!   block's input, run on their own norm of it, each output times its expert's scale; both
//!   outputs normed and summed (`experts`);
//! - E2B/E4B: per-layer token embeddings mixed with a projection of the token's embedding, fed
//!   into every block after its residual add (`per_layer_input`); MLP widths per layer (the
//!   shared-KV layers' twice the others').
//!
//! kiln reads Gemma 4 from GGUF only; its extra weights are in weights/gemma4.rs.

use super::Step;
use super::family::{Family, LayerKind, require_whole_heads};
use super::gemma3::gguf_layer_pattern;
use super::moe::{RoutedExperts, SharedExpert, gguf_experts, route_params};
use crate::backend::{Backend, GateActivation};
use crate::error::{Error, Result};
use crate::model::Arch;
use crate::model::chat::GEMMA4 as GEMMA4_TEMPLATE;
use crate::model::config::{Activation, AttentionShape, GgufKeys, ModelConfig, MoeConfig};
use crate::model::weights::{Gemma4Experts, LayerWeights, PerLayerInput};

pub(crate) const GEMMA4: Family = Family {
    arch: Arch::Gemma4,
    name: "gemma4",
    gguf_names: &["gemma4"],
    hf_model_types: &[],
    hf_text_config_of: None,
    hf_head_dim: None,
    gguf_keys,
    // Never called: no config.json model_type reads as Gemma 4.
    hf_keys: |_, _| Ok(()),
    hf_tensor_names: &[],
    norm_one_plus_weight: false,
    ffn_norm: "ffn_norm",
    layer: LayerKind::Gemma4,
    chat_template: &GEMMA4_TEMPLATE,
};

fn gguf_keys(keys: &GgufKeys, c: &mut ModelConfig) -> Result<()> {
    c.per_layer_embedding = keys.usize("embedding_length_per_layer_input")?.unwrap_or(0);
    // E2B's shared-KV layers are twice as wide: one width per layer.
    let widths = keys
        .per_layer("feed_forward_length", c.n_layers)?
        .ok_or_else(|| keys.missing("feed_forward_length"))?;
    c.intermediate_size = widths.iter().copied().max().unwrap_or(0);
    if widths.iter().any(|&w| w != c.intermediate_size) {
        c.ffn_widths = Some(widths);
    }
    // 26B-A4B: experts in every block, beside its dense MLP.
    c.moe = gguf_experts(keys, SharedExpert::No)?.map(|m| MoeConfig {
        activation: GateActivation::GeluTanh,
        ..m
    });
    c.qk_norm = true;
    c.embedding_scale = Some((c.hidden_size as f32).sqrt());
    c.activation = Activation::GeluTanh;
    c.attention_scale = 1.0;
    c.bidirectional_local_only = true;
    c.sliding_window = Some(keys.need("attention.sliding_window")?).filter(|&w| w > 0);
    gguf_layer_pattern(keys, c, 6)?;
    // Always set, so that `rope_freqs` (proportional RoPE) applies to the global layers alone.
    c.rope_theta_local = Some(
        keys.f64("rope.freq_base_swa")?
            .map_or(c.rope_theta, |b| b as f32),
    );
    require_whole_heads(keys, c, &["attention.value_length"], "gemma4")?;

    let kv_heads = keys.per_layer("attention.head_count_kv", c.n_layers)?;
    let kv_heads_where = |local: bool| {
        let first = (0..c.n_layers).find(|&l| c.layer_is_local(l) == local);
        match (&kv_heads, first) {
            (Some(v), Some(l)) => v[l],
            _ => c.n_kv_heads,
        }
    };
    let local_head_dim = keys.need("attention.key_length_swa")?;
    if let Some(v) = keys.usize("attention.value_length_swa")?
        && v != local_head_dim
    {
        return Err(Error::Unsupported(format!(
            "{} = {v} differs from {} = {local_head_dim} (gemma4 needs them equal)",
            keys.key("attention.value_length_swa"),
            keys.key("attention.key_length_swa"),
        )));
    }
    let local = AttentionShape {
        n_kv_heads: kv_heads_where(true),
        head_dim: local_head_dim,
        rope_dims: keys
            .usize("rope.dimension_count_swa")?
            .unwrap_or(local_head_dim),
    };
    c.n_kv_heads = kv_heads_where(false);
    c.local_attention = Some(local);

    let shared = keys.usize("attention.shared_kv_layers")?.unwrap_or(0);
    if shared > 0 {
        if shared + 2 > c.n_layers {
            return Err(Error::Format(format!(
                "{} = {shared} leaves fewer than two of the {} layers their own KV cache",
                keys.key("attention.shared_kv_layers"),
                c.n_layers
            )));
        }
        c.first_shared_kv_layer = Some(c.n_layers - shared);
    }
    Ok(())
}

/// One Gemma 4 layer: sandwich-normed attention and feed-forward, then the layer's output scale.
pub(crate) fn layer<B: Backend>(f: &mut Step<B>, l: &LayerWeights<B>) {
    f.norm_input(&l.attn_norm);
    attention(f, l);
    f.norm_output(l.post_attn_norm.as_ref());
    f.residual();

    f.norm_input(&l.ffn_norm);
    f.feed_forward(&l.ffn);
    if let Some(e) = &l.experts {
        experts(f, e);
    }
    f.norm_output(l.post_ffn_norm.as_ref());
    f.residual();
    if let Some(p) = &l.per_layer {
        per_layer_input(f, p);
    }
    f.scale_layer_output();
}

/// 26B-A4B's experts beside the dense MLP, whose output is in `o`: the experts routed by
/// softmax over a scaled norm of the block's input `x`, run on their own norm of it, summed by
/// weight (times each expert's output scale) and normed; `o` becomes the normed MLP output plus
/// that.
fn experts<B: Backend>(f: &mut Step<B>, e: &Gemma4Experts<B>) {
    let (m, rows) = (f.model, f.rows);
    let (b, c) = (&m.backend, &m.config);
    let moe = c
        .moe
        .as_ref()
        .expect("a Gemma 4 block with experts has their settings");
    let (h, k, eps) = (c.hidden_size, moe.n_used, c.rms_norm_eps);
    let s = &mut *f.s;
    let ms = s.moe.as_mut().expect("MoE models have MoE scratch");
    b.rms_norm(&mut s.o, &e.dense_out_norm, rows, eps);
    // The router's input, in the expert outputs' buffer until the experts run.
    b.rms_norm_into(&s.x, &e.router_norm, rows, h, eps, &mut ms.down);
    b.matmul(&ms.down, &e.router, rows, &mut ms.router);
    let route = route_params(moe, rows);
    b.moe_route(&ms.router, None, &route, &mut ms.selected, &mut ms.weights);
    if let Some(scale) = &e.down_scale {
        // Each slot's expert's factor, gathered into the (not yet used) gate buffer.
        let slots = rows * k;
        b.upload(&mut ms.gate, &vec![0.0; slots]);
        b.add_expert_bias(&mut ms.gate, scale, &ms.selected, slots, 1);
        b.scale_rows(&mut ms.weights, &ms.gate, slots, 1);
    }
    b.rms_norm_into(&s.x, &e.input_norm, rows, h, eps, &mut s.h);
    let routed = RoutedExperts {
        gate_up: &e.gate_up,
        down: &e.down,
        biases: None,
    };
    routed.run(b, &s.h, ms, rows, moe, h);
    b.moe_combine(&ms.down, &ms.weights, rows, k, h, &mut s.h);
    b.rms_norm(&mut s.h, &e.experts_out_norm, rows, eps);
    b.add(&mut s.o, &s.h, rows * h);
}

/// E2B/E4B's per-layer input, after the block's residual add: this layer's slice of the
/// per-layer embeddings (× sqrt(P)) plus the normed projection of the scaled token embedding
/// (÷ sqrt(hidden)), over sqrt(2), gates `gelu(gate(x))`; projected back, normed, added to `x`.
fn per_layer_input<B: Backend>(f: &mut Step<B>, p: &PerLayerInput<B>) {
    let (m, rows, il) = (f.model, f.rows, f.il);
    let (b, c) = (&m.backend, &m.config);
    let (h, width, eps) = (c.hidden_size, c.per_layer_embedding, c.rms_norm_eps);
    let embd = m
        .weights
        .per_layer_embd
        .as_ref()
        .expect("a model with per-layer inputs has their embeddings");
    let s = &mut *f.s;
    if std::mem::take(&mut s.pending_residual) {
        b.add(&mut s.x, &s.o, rows * h);
    }
    let g = s
        .gemma4
        .as_mut()
        .expect("a model with per-layer inputs has their scratch");
    b.matmul(&g.x0, &p.model_proj, rows, &mut g.input);
    b.scale_rows(&mut g.input, &g.inv_sqrt_hidden, rows, width);
    b.rms_norm(&mut g.input, &embd.proj_norm, rows, eps);
    let ids: Vec<u32> = g
        .ids
        .iter()
        .map(|&t| t * c.n_layers as u32 + il as u32)
        .collect();
    b.embed(&embd.table, &ids, (width as f32).sqrt(), &mut g.embedded);
    b.add(&mut g.input, &g.embedded, rows * width);
    b.scale_rows(&mut g.input, &g.inv_sqrt2, rows, width);
    b.matmul(&s.x, &p.gate, rows, &mut g.gate);
    b.gated_activation(
        &mut g.gate,
        &g.input,
        rows * width,
        GateActivation::GeluTanh,
    );
    b.matmul(&g.gate, &p.proj, rows, &mut s.o);
    b.rms_norm(&mut s.o, &p.post_norm, rows, eps);
    f.residual();
}

/// What per-layer inputs (E2B/E4B) need besides the shared activations.
pub(crate) struct Gemma4Scratch<B: Backend> {
    /// The scaled token embeddings of the chunk, and its token ids.
    pub x0: B::Buffer,
    pub ids: Vec<u32>,
    /// A layer's per-layer input, its embedding rows, and its gate (`rows × P` each).
    input: B::Buffer,
    embedded: B::Buffer,
    gate: B::Buffer,
    /// `rows` copies of 1/sqrt(hidden) and of 1/sqrt(2).
    inv_sqrt_hidden: B::Buffer,
    inv_sqrt2: B::Buffer,
}

impl<B: Backend> Gemma4Scratch<B> {
    pub fn new(c: &ModelConfig, b: &B, rows: usize) -> Result<Option<Gemma4Scratch<B>>> {
        let width = c.per_layer_embedding;
        if width == 0 {
            return Ok(None);
        }
        let constant = |v: f32| -> Result<B::Buffer> {
            let mut buf = b.buffer(rows)?;
            b.upload(&mut buf, &vec![v; rows]);
            Ok(buf)
        };
        Ok(Some(Gemma4Scratch {
            x0: b.buffer(rows * c.hidden_size)?,
            ids: Vec::with_capacity(rows),
            input: b.buffer(rows * width)?,
            embedded: b.buffer(rows * width)?,
            gate: b.buffer(rows * width)?,
            inv_sqrt_hidden: constant(1.0 / (c.hidden_size as f32).sqrt())?,
            inv_sqrt2: constant(1.0 / 2f32.sqrt())?,
        }))
    }
}

/// Gemma 4's attention of `h` into `o`: queries (and, on a layer with a cache of its own, keys
/// and values, the values from the key projection where the layer has none) projected and
/// RMS-normed per head, RoPE, attention, output projection.
fn attention<B: Backend>(f: &mut Step<B>, l: &LayerWeights<B>) {
    let (m, rows, il) = (f.model, f.rows, f.il);
    let (b, c) = (&m.backend, &m.config);
    let shape = c.layer_shape(il);
    let kv_dim = shape.n_kv_heads * shape.head_dim;
    let s = &mut *f.s;
    match (&l.wk, &l.wv) {
        (None, _) => b.matmul(&s.h, &l.wq, rows, &mut s.q),
        (Some(wk), Some(wv)) => b.matmul_many(
            &s.h,
            &[&l.wq, wk, wv],
            rows,
            &mut [&mut s.q, &mut s.k, &mut s.v],
        ),
        (Some(wk), None) => {
            b.matmul_many(&s.h, &[&l.wq, wk], rows, &mut [&mut s.q, &mut s.k]);
            b.copy_rows(&s.k, 0, &mut s.v, 0, rows, kv_dim);
        }
    }
    let eps = c.rms_norm_eps;
    if let Some(qn) = &l.q_norm {
        b.rms_norm(&mut s.q, qn, rows * c.n_heads, eps);
    }
    if c.layer_has_kv(il) {
        if let Some(kn) = &l.k_norm {
            b.rms_norm(&mut s.k, kn, rows * shape.n_kv_heads, eps);
        }
        if let Some(vn) = &l.v_norm {
            b.rms_norm(&mut s.v, vn, rows * shape.n_kv_heads, eps);
        }
    }
    f.rope_store_attend(None, false);
    b.matmul(&f.s.attn, &l.wo, rows, &mut f.s.o);
}
