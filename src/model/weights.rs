//! The weights of a model, found by canonical name, checked against the configuration (so a bad
//! file is a clear error here rather than an out-of-bounds access in a kernel), and handed to the
//! backend. Qwen3.5's blocks (Gated DeltaNet or gated attention) are in weights/qwen35.rs; every
//! block's feed-forward part, dense or a mixture of experts, in weights/moe.rs; Gemma 4's experts
//! and per-layer embeddings in weights/gemma4.rs.

mod gemma4;
mod moe;
mod mtp;
mod qwen35;

use super::Arch;
use super::arch::family::LayerKind;
use super::config::ModelConfig;
use super::loader::ModelFile;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

pub use gemma4::{Gemma4Experts, PerLayerEmbeddings, PerLayerInput};
pub use moe::{ExpertBiases, ExpertsGateUp, Ffn, MoeWeights, SharedExpertWeights};
pub use mtp::MtpWeights;
pub use qwen35::{DeltaNetWeights, GatedAttentionWeights, Mixer, Qwen35Layer};

pub struct LayerWeights<B: Backend> {
    pub attn_norm: B::Weight,
    pub wq: B::Weight,
    /// None on a layer that stores no keys and values (Gemma 4's shared-KV layers).
    pub wk: Option<B::Weight>,
    /// None: the values are the key projection's output (Gemma 4's global layers).
    pub wv: Option<B::Weight>,
    pub wo: B::Weight,
    /// gpt-oss: the output projection's bias.
    pub bo: Option<B::Weight>,
    /// gpt-oss: one logit per query head joining the attention softmax.
    pub sinks: Option<B::Weight>,
    pub bq: Option<B::Weight>,
    pub bk: Option<B::Weight>,
    pub bv: Option<B::Weight>,
    pub q_norm: Option<B::Weight>,
    pub k_norm: Option<B::Weight>,
    /// Gemma 4: ones, for the RMSNorm of each value head without a scale.
    pub v_norm: Option<B::Weight>,
    /// Gemma 4: the factor on the layer's output (`layer_output_scale`).
    pub out_scale: Option<f32>,
    /// Gemma: norm of the attention output before the residual add.
    pub post_attn_norm: Option<B::Weight>,
    pub ffn_norm: B::Weight,
    /// A SwiGLU (GELU-gated for Gemma), or a mixture of experts (Qwen3 MoE).
    pub ffn: Ffn<B>,
    /// Gemma: norm of the feed-forward output before the residual add.
    pub post_ffn_norm: Option<B::Weight>,
    /// Gemma 4 26B-A4B: experts beside the dense MLP (`ffn`).
    pub experts: Option<Gemma4Experts<B>>,
    /// Gemma 4 E2B/E4B: the block's per-layer input.
    pub per_layer: Option<PerLayerInput<B>>,
}

/// The weights of one block: a standard transformer layer, or a Qwen3.5 block.
pub enum Block<B: Backend> {
    Standard(LayerWeights<B>),
    Qwen35(Qwen35Layer<B>),
}

pub struct Weights<B: Backend> {
    pub tok_embd: B::Weight,
    pub output_norm: B::Weight,
    /// None: tied to the embedding table.
    pub output: Option<B::Weight>,
    pub layers: Vec<Block<B>>,
    /// Gemma 4 E2B/E4B: the per-layer token embeddings.
    pub per_layer_embd: Option<PerLayerEmbeddings<B>>,
    /// Qwen3.5: the multi-token-prediction block, where the file has one.
    pub mtp: Option<MtpWeights<B>>,
    /// The file's tensors that no block read (`unused_tensors`).
    pub unused: Vec<String>,
}

struct Finder<'a, B: Backend> {
    file: &'a ModelFile,
    backend: &'a B,
    /// Every tensor name `tensor` has handed out.
    used: std::cell::RefCell<std::collections::BTreeSet<String>>,
}

impl<B: Backend> Finder<'_, B> {
    fn tensor(&self, name: &str, dims: &[usize]) -> Result<&Tensor> {
        self.used.borrow_mut().insert(name.to_string());
        let t = self.file.tensor(name).ok_or_else(|| {
            Error::invalid(&self.file.path, format!("tensor '{name}' is missing"))
        })?;
        if t.dims != dims {
            return Err(Error::invalid(
                &self.file.path,
                format!(
                    "tensor '{name}' has shape {:?}, expected {dims:?} for this configuration",
                    t.dims
                ),
            ));
        }
        Ok(t)
    }

    fn get(&self, name: &str, dims: &[usize]) -> Result<B::Weight> {
        self.backend.weight(self.tensor(name, dims)?)
    }

    /// A tensor of shape `dims` as one vector (biases stacked per expert, read row by row).
    fn flat(&self, name: &str, dims: &[usize]) -> Result<B::Weight> {
        let mut t = self.tensor(name, dims)?.clone();
        t.dims = vec![dims.iter().product()];
        self.backend.weight(&t)
    }

    /// A fused projection `name` (`[cols, Σ parts]`) as one weight per row group, in order
    /// (Phi-3's `attn_qkv` into Q, K and V; its `ffn_up` into gate and up).
    fn split<const N: usize>(
        &self,
        name: &str,
        cols: usize,
        parts: [usize; N],
    ) -> Result<[B::Weight; N]> {
        let t = self.tensor(name, &[cols, parts.iter().sum()])?;
        let mut start = 0;
        let mut out = Vec::with_capacity(N);
        for (i, rows) in parts.into_iter().enumerate() {
            out.push(
                self.backend
                    .weight(&t.row_range(format!("{name}[{i}]"), start, rows))?,
            );
            start += rows;
        }
        Ok(out
            .try_into()
            .unwrap_or_else(|_| unreachable!("one weight per part")))
    }

    /// Count `names` as read: tensors the file's model has and does not use either.
    fn skip(&self, names: &[&str]) {
        let mut used = self.used.borrow_mut();
        used.extend(names.iter().map(|n| n.to_string()));
    }

    fn optional(&self, name: &str, dims: &[usize]) -> Result<Option<B::Weight>> {
        match self.file.tensor(name) {
            None => Ok(None),
            Some(_) => self.get(name, dims).map(Some),
        }
    }

    /// A norm weight as `x·w` wants it: a family whose norm is `x·(1+w)` (Gemma) stores `w` in
    /// Hugging Face layout, so kiln adds the 1 once here (GGUF files already hold `1+w`).
    fn norm(&self, name: &str, dim: usize) -> Result<B::Weight> {
        let cfg = &self.file.config;
        let t = self.tensor(name, &[dim])?;
        if cfg.arch.family().norm_one_plus_weight && !cfg.norm_weights_include_one {
            let plus_one: Vec<f32> = t.to_f32().iter().map(|w| w + 1.0).collect();
            return self
                .backend
                .weight(&Tensor::from_f32(name, vec![dim], &plus_one));
        }
        self.backend.weight(t)
    }
}

impl<B: Backend> Weights<B> {
    pub fn load(file: &ModelFile, backend: &B) -> Result<Weights<B>> {
        let c: &ModelConfig = &file.config;
        let f = Finder {
            file,
            backend,
            used: Default::default(),
        };
        let h = c.hidden_size;
        let layer_kind = c.arch.family().layer;
        let layers = (0..c.n_layers)
            .map(|i| block(&f, c, i))
            .collect::<Result<Vec<_>>>()?;
        let vocab = c.vocab_size;
        let output = if c.tie_embeddings {
            None
        } else {
            Some(f.get("output.weight", &[h, vocab])?)
        };
        let tok_embd = if c.tie_embeddings {
            f.get("token_embd.weight", &[h, vocab])?
        } else {
            backend.embedding_table(f.tensor("token_embd.weight", &[h, vocab])?)?
        };
        let output_norm = f.norm("output_norm.weight", h)?;
        let per_layer_embd = gemma4::per_layer_embeddings(&f, c)?;
        // The families whose drafting block kiln runs (arch/mtp.rs).
        let mtp = match (layer_kind, c.arch) {
            (LayerKind::Qwen35, _) | (_, Arch::Glm4Moe) if file.load_mtp => mtp::mtp(&f, c)?,
            _ => None,
        };
        Ok(Weights {
            tok_embd,
            output_norm,
            output,
            layers,
            per_layer_embd,
            mtp,
            unused: unused_tensors(file, &f.used.borrow()),
        })
    }
}

/// Block `i` of the file (or its multi-token-prediction block, at `i` = `n_layers`): a Qwen3.5
/// block, or the standard layer of the other families.
fn block<B: Backend>(f: &Finder<'_, B>, c: &ModelConfig, i: usize) -> Result<Block<B>> {
    let (file, backend) = (f.file, f.backend);
    let h = c.hidden_size;
    let family = c.arch.family();
    let layer_kind = family.layer;
    let (out_bias_and_sinks, may_have_qk_norm) = match layer_kind {
        LayerKind::Llama(o) | LayerKind::Gemma(o) => (o.out_bias_and_sinks, o.qk_norm),
        LayerKind::Gemma4 => (false, true),
        LayerKind::Qwen35 => return Ok(Block::Qwen35(qwen35::layer(f, c, i)?)),
    };
    let gemma4 = matches!(layer_kind, LayerKind::Gemma4);
    // Gemma's layer norms each block's output too.
    let post_norms = matches!(layer_kind, LayerKind::Gemma(_) | LayerKind::Gemma4);
    let (q, kv, hd) = (
        c.layer_q_dim(i),
        c.layer_kv_dim(i),
        c.layer_shape(i).head_dim,
    );
    let n = |part: &str| format!("blk.{i}.{part}");
    let bias = |part: &str, dim: usize| -> Result<Option<B::Weight>> {
        if c.attention_bias {
            f.get(&n(part), &[dim]).map(Some)
        } else {
            f.optional(&n(part), &[dim])
        }
    };
    // Required where the configuration says so; where the family only allows them
    // (GLM-4.5: its largest model has them), used when the file has them.
    let qk_norm = |part: &str| -> Result<Option<B::Weight>> {
        let name = n(part);
        if c.qk_norm || (may_have_qk_norm && f.file.tensor(&name).is_some()) {
            f.norm(&name, hd).map(Some)
        } else {
            Ok(None)
        }
    };
    let required = |part: &str, dim: usize| -> Result<Option<B::Weight>> {
        if out_bias_and_sinks {
            f.get(&n(part), &[dim]).map(Some)
        } else {
            Ok(None)
        }
    };
    let post_norm = |part: &str| -> Result<Option<B::Weight>> {
        if post_norms {
            f.norm(&n(part), h).map(Some)
        } else {
            Ok(None)
        }
    };
    // Q, K and V, or one fused projection of all three (Phi-3). A Gemma 4 layer may
    // take its values from the key projection (no `attn_v`); its shared-KV layers
    // project queries alone (llama.cpp reads no keys or values there either).
    let (wq, wk, wv) = match f.file.tensor(&n("attn_qkv.weight")) {
        Some(_) => {
            let [wq, wk, wv] = f.split(&n("attn_qkv.weight"), h, [q, kv, kv])?;
            (wq, Some(wk), Some(wv))
        }
        None if !c.layer_has_kv(i) => {
            f.skip(&[
                &n("attn_k.weight"),
                &n("attn_v.weight"),
                &n("attn_k_norm.weight"),
            ]);
            (f.get(&n("attn_q.weight"), &[h, q])?, None, None)
        }
        None => (
            f.get(&n("attn_q.weight"), &[h, q])?,
            Some(f.get(&n("attn_k.weight"), &[h, kv])?),
            match gemma4 {
                true => f.optional(&n("attn_v.weight"), &[h, kv])?,
                false => Some(f.get(&n("attn_v.weight"), &[h, kv])?),
            },
        ),
    };
    if f.file.tensor(&n("attn_qkv.bias")).is_some() {
        return Err(Error::Unsupported(format!(
            "{}: a fused Q/K/V bias (blk.{i}.attn_qkv.bias) is not supported",
            file.path.display()
        )));
    }
    Ok(Block::Standard(LayerWeights {
        attn_norm: f.norm(&n("attn_norm.weight"), h)?,
        wq,
        wk,
        wv,
        wo: f.get(&n("attn_output.weight"), &[q, h])?,
        // Required with sinks (gpt-oss); optional elsewhere, as llama.cpp loads it.
        bo: match out_bias_and_sinks {
            true => required("attn_output.bias", h)?,
            false => f.optional(&n("attn_output.bias"), &[h])?,
        },
        sinks: required("attn_sinks.weight", c.n_heads)?,
        bq: bias("attn_q.bias", q)?,
        bk: bias("attn_k.bias", kv)?,
        bv: bias("attn_v.bias", kv)?,
        q_norm: qk_norm("attn_q_norm.weight")?,
        k_norm: match c.layer_has_kv(i) {
            true => qk_norm("attn_k_norm.weight")?,
            false => None,
        },
        v_norm: match gemma4 {
            true => Some(backend.weight(&Tensor::from_f32(
                n("attn_v_norm.ones"),
                vec![hd],
                &vec![1.0; hd],
            ))?),
            false => None,
        },
        out_scale: match gemma4 {
            true => out_scale(f, i)?,
            false => None,
        },
        post_attn_norm: post_norm("post_attention_norm.weight")?,
        ffn_norm: f.norm(&n(&format!("{}.weight", family.ffn_norm)), h)?,
        // Gemma 4's experts are a second feed-forward beside the dense one.
        ffn: match gemma4 {
            true => moe::dense_ffn(f, c, i)?,
            false => moe::ffn(f, c, i)?,
        },
        post_ffn_norm: post_norm("post_ffw_norm.weight")?,
        experts: match gemma4 {
            true => gemma4::experts(f, c, i)?,
            false => None,
        },
        per_layer: gemma4::per_layer_input(f, c, i)?,
    }))
}

/// Gemma 4's `blk.{i}.layer_output_scale.weight`, one finite value, where the file has it.
fn out_scale<B: Backend>(f: &Finder<'_, B>, i: usize) -> Result<Option<f32>> {
    let name = format!("blk.{i}.layer_output_scale.weight");
    if f.file.tensor(&name).is_none() {
        return Ok(None);
    }
    let value = f.tensor(&name, &[1])?.to_f32()[0];
    if !value.is_finite() {
        return Err(Error::invalid(
            &f.file.path,
            format!("tensor '{name}' holds {value}, not a finite scale"),
        ));
    }
    Ok(Some(value))
}

/// The tensors of `file` that the loader did not read, leaving out those kiln has no use for by
/// design: the blocks past `n_layers` (multi-token prediction) and the RoPE factors that the
/// configuration already holds. What remains is something the file's model computes and kiln
/// would not (a bias, a norm), so its output could differ from llama.cpp's.
fn unused_tensors(file: &ModelFile, used: &std::collections::BTreeSet<String>) -> Vec<String> {
    const IN_CONFIG: [&str; 3] = [
        "rope_freqs.weight",
        "rope_factors_short.weight",
        "rope_factors_long.weight",
    ];
    let n_layers = file.config.n_layers;
    let mut unused: Vec<String> = file
        .tensors()
        .map(|t| t.name.as_str())
        .filter(|name| !used.contains(*name) && !IN_CONFIG.contains(name))
        .filter(|name| crate::tensor::block_of(name).is_none_or(|(i, _)| i < n_layers))
        .map(str::to_string)
        .collect();
    unused.sort();
    unused
}
