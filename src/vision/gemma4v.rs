//! The Gemma 4 vision tower (`gemma4v`), as llama.cpp's `tools/mtmd/models/gemma4v.cpp` builds
//! it: pixels mapped to [−1, 1]; the patch convolution (no bias) plus two learned position tables
//! looked up by the patch's column and row; blocks of RMSNorm, Q/K/V with per-head RMSNorm of Q
//! and K (and of V, without a weight), a 2-D NEOX RoPE (columns on the first half of each head,
//! rows on the second, base 100), attention without a query scale, the attention's output
//! RMS-normed before the residual; then RMSNorm, a GELU-gated feed-forward, its output RMS-normed
//! before the residual, and the layer's output scale; k × k average pooling times √width, the
//! optional standardization (`v.std_bias`, `v.std_scale`), an RMSNorm without weight and the
//! projection into the text model's width. Every linear map clamps its input and output where
//! the file gives bounds (Gemma 4's "clippable" linears).
//!
//! The matrix products run on the backend; the rest on the host (`ops.rs`).

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

use super::mmproj::{Mmproj, VisionConfig};
use super::ops;
use super::vit::{self, Buffers, Loader};

/// The RoPE base of Gemma 4's vision tower (llama.cpp's `rope_theta` for gemma4v).
const ROPE_BASE: f32 = 100.0;

/// A linear map without bias whose input and output are clamped to the file's bounds.
struct Clipped<B: Backend> {
    w: B::Weight,
    input: (f32, f32),
    output: (f32, f32),
}

struct Block<B: Backend> {
    ln1: Vec<f32>,
    q: Clipped<B>,
    k: Clipped<B>,
    v: Clipped<B>,
    q_norm: Vec<f32>,
    k_norm: Vec<f32>,
    out: Clipped<B>,
    attn_post_norm: Vec<f32>,
    ln2: Vec<f32>,
    gate: Clipped<B>,
    up: Clipped<B>,
    down: Clipped<B>,
    ffn_post_norm: Vec<f32>,
    out_scale: Option<f32>,
}

pub struct Gemma4VTower<B: Backend> {
    config: VisionConfig,
    patch: B::Weight,
    /// The column table, then the row table: `tables × width` values each (host).
    positions: Vec<f32>,
    tables: usize,
    blocks: Vec<Block<B>>,
    /// The final RMSNorm's weight, where the file has one (`v.post_ln`).
    post_ln: Option<Vec<f32>>,
    std: Option<(Vec<f32>, Vec<f32>)>,
    projection: Clipped<B>,
}

/// A one-value tensor's value.
fn scalar(t: &Tensor) -> Option<f32> {
    (t.dims.iter().product::<usize>() == 1).then(|| t.to_f32()[0])
}

impl<B: Backend> Gemma4VTower<B> {
    pub fn load(file: &Mmproj, backend: &B) -> Result<Gemma4VTower<B>> {
        let c = file.config.clone();
        if let Some(why) = c.runnable() {
            return Err(Error::invalid(&file.path, why));
        }
        let (e, p, hd, ff) = (c.n_embd, c.patch_size, c.head_dim, c.n_ff);
        let l = Loader { file, backend };
        let host = |name: &str, len: usize| -> Result<Vec<f32>> {
            Ok(file.tensor(name, &[len])?.to_f32())
        };
        let bound = |name: &str, default: f32| -> Result<f32> {
            match file.tensors.get(name) {
                None => Ok(default),
                Some(t) => scalar(t).filter(|v| !v.is_nan()).ok_or_else(|| {
                    Error::invalid(&file.path, format!("tensor '{name}' is not one number"))
                }),
            }
        };
        let range = |name: &str, what: &str| -> Result<(f32, f32)> {
            let (lo, hi) = (
                bound(&format!("{name}.{what}_min"), f32::MIN)?,
                bound(&format!("{name}.{what}_max"), f32::MAX)?,
            );
            if lo > hi {
                return Err(Error::invalid(
                    &file.path,
                    format!(
                        "'{name}' clamps its {what} to [{lo}, {hi}]: the minimum is above the \
                         maximum"
                    ),
                ));
            }
            Ok((lo, hi))
        };
        let clipped = |name: &str, cols: usize, rows: usize| -> Result<Clipped<B>> {
            Ok(Clipped {
                w: l.weight(&format!("{name}.weight"), &[cols, rows])?,
                input: range(name, "input")?,
                output: range(name, "output")?,
            })
        };
        let pos = file.tensors.get("v.position_embd.weight").ok_or_else(|| {
            Error::invalid(&file.path, "tensor 'v.position_embd.weight' is missing")
        })?;
        let tables = match pos.dims.as_slice() {
            [w, n, 2] if *w == e && *n > 0 => *n,
            dims => {
                return Err(Error::invalid(
                    &file.path,
                    format!(
                        "tensor 'v.position_embd.weight' has shape {dims:?}: expected [{e}, n, 2] \
                         (a column table and a row table)"
                    ),
                ));
            }
        };
        let blocks = (0..c.n_layer)
            .map(|i| {
                let b = |part: &str| format!("v.blk.{i}.{part}");
                let out_scale = match file.tensors.get(&b("out_scale.weight")) {
                    None => None,
                    Some(t) => Some(scalar(t).ok_or_else(|| {
                        Error::invalid(&file.path, format!("tensor '{}' is not one number", t.name))
                    })?),
                };
                Ok(Block {
                    ln1: host(&b("ln1.weight"), e)?,
                    q: clipped(&b("attn_q"), e, e)?,
                    k: clipped(&b("attn_k"), e, e)?,
                    v: clipped(&b("attn_v"), e, e)?,
                    q_norm: host(&b("attn_q_norm.weight"), hd)?,
                    k_norm: host(&b("attn_k_norm.weight"), hd)?,
                    out: clipped(&b("attn_out"), e, e)?,
                    attn_post_norm: host(&b("attn_post_norm.weight"), e)?,
                    ln2: host(&b("ln2.weight"), e)?,
                    gate: clipped(&b("ffn_gate"), e, ff)?,
                    up: clipped(&b("ffn_up"), e, ff)?,
                    down: clipped(&b("ffn_down"), ff, e)?,
                    ffn_post_norm: host(&b("ffn_post_norm.weight"), e)?,
                    out_scale,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let std = match (
            file.tensors.contains_key("v.std_bias"),
            file.tensors.contains_key("v.std_scale"),
        ) {
            (true, true) => Some((host("v.std_bias", e)?, host("v.std_scale", e)?)),
            _ => None,
        };
        Ok(Gemma4VTower {
            patch: l.patch_kernel("v.patch_embd.weight", p, e)?,
            positions: pos.to_f32(),
            tables,
            blocks,
            post_ln: match file.tensors.contains_key("v.post_ln.weight") {
                true => Some(host("v.post_ln.weight", e)?),
                false => None,
            },
            std,
            projection: clipped("mm.input_projection", e, c.projection_dim)?,
            config: c,
        })
    }

    /// `x` (host, `rows` rows) through `map` into `out` (host): clamped in, multiplied on the
    /// backend, clamped out.
    fn apply(
        &self,
        backend: &B,
        map: &Clipped<B>,
        x: &mut [f32],
        rows: usize,
        bufs: &mut Buffers<B>,
        out: &mut [f32],
    ) {
        let clamp = |v: &mut [f32], (lo, hi): (f32, f32)| {
            if lo > f32::MIN || hi < f32::MAX {
                v.iter_mut().for_each(|x| *x = x.clamp(lo, hi));
            }
        };
        clamp(x, map.input);
        backend.upload(&mut bufs.x, x);
        backend.matmul(&bufs.x, &map.w, rows, &mut bufs.t);
        backend.download(&bufs.t, 0, out);
        clamp(out, map.output);
    }

    /// Embeddings (`tokens × projection_dim`, row-major) of a preprocessed image: `pixels`
    /// normalized, 3 values per pixel, `width × height` in whole pools of patches.
    pub fn encode(
        &self,
        backend: &B,
        pixels: &[f32],
        width: usize,
        height: usize,
    ) -> Result<Vec<f32>> {
        let c = &self.config;
        let (e, p, k, hd, heads) = (c.n_embd, c.patch_size, c.merge, c.head_dim, c.n_head);
        vit::check_whole_tokens(width, height, p * k)?;
        let (gw, gh) = (width / p, height / p);
        if gw > self.tables || gh > self.tables {
            return Err(Error::Usage(format!(
                "an image of {gw}×{gh} patches is beyond the tower's {} positions a side",
                self.tables
            )));
        }
        let n = gw * gh;
        // Pixels to [−1, 1] (llama.cpp's scale_bias before the convolution).
        let scaled: Vec<f32> = pixels.iter().map(|&v| v * 2.0 - 1.0).collect();
        let order: Vec<(usize, usize)> = (0..n).map(|i| (i / gw, i % gw)).collect();
        let patches = vit::patches(&scaled, width, p, &order);
        let widest = (3 * p * p).max(e).max(c.n_ff).max(c.projection_dim);
        let mut bufs = Buffers::new(backend, n * widest, n, e)?;
        backend.upload(&mut bufs.x, &patches);
        backend.matmul(&bufs.x, &self.patch, n, &mut bufs.t);
        let mut h = vec![0f32; n * e];
        backend.download(&bufs.t, 0, &mut h);
        let (col_table, row_table) = self.positions.split_at(self.tables * e);
        for (row, &(y, x)) in h.chunks_exact_mut(e).zip(&order) {
            for ((v, &cx), &ry) in row
                .iter_mut()
                .zip(&col_table[x * e..(x + 1) * e])
                .zip(&row_table[y * e..(y + 1) * e])
            {
                *v = *v + cx + ry;
            }
        }

        let rope_pos: Vec<(u32, u32)> = order.iter().map(|&(y, x)| (x as u32, y as u32)).collect();
        let mut normed = vec![0f32; n * e];
        let mut qkv = vec![0f32; n * 3 * e];
        let mut part = vec![0f32; n * e];
        let mut attn = vec![0f32; n * e];
        let mut gate = vec![0f32; n * c.n_ff];
        let mut up = vec![0f32; n * c.n_ff];
        for b in &self.blocks {
            normed.copy_from_slice(&h);
            ops::rms_norm(&mut normed, e, Some(&b.ln1), c.eps);
            for (slot, (map, norm)) in [
                (&b.q, Some(&b.q_norm)),
                (&b.k, Some(&b.k_norm)),
                (&b.v, None),
            ]
            .into_iter()
            .enumerate()
            {
                let mut x = normed.clone();
                self.apply(backend, map, &mut x, n, &mut bufs, &mut part);
                // Per head: Q and K by their norms' weights, V by none.
                ops::rms_norm(&mut part, hd, norm.map(|w| &w[..]), c.eps);
                for (dst, src) in qkv.chunks_exact_mut(3 * e).zip(part.chunks_exact(e)) {
                    dst[slot * e..(slot + 1) * e].copy_from_slice(src);
                }
            }
            ops::neox_rope_2d(&mut qkv, 3 * e, 2 * heads, hd, &rope_pos, ROPE_BASE);
            bufs.attend(backend, &qkv, n, heads, hd, 1.0);
            backend.download(&bufs.t, 0, &mut attn);
            self.apply(backend, &b.out, &mut attn, n, &mut bufs, &mut part);
            ops::rms_norm(&mut part, e, Some(&b.attn_post_norm), c.eps);
            h.iter_mut().zip(&part).for_each(|(x, y)| *x += y);

            normed.copy_from_slice(&h);
            ops::rms_norm(&mut normed, e, Some(&b.ln2), c.eps);
            let mut x = normed.clone();
            self.apply(backend, &b.gate, &mut x, n, &mut bufs, &mut gate);
            let mut x = normed.clone();
            self.apply(backend, &b.up, &mut x, n, &mut bufs, &mut up);
            // GELU(gate) · up, through ggml's f16 GELU table as llama.cpp's geglu.
            ops::gelu_in_place(&mut gate);
            gate.iter_mut().zip(&up).for_each(|(g, u)| *g *= u);
            self.apply(backend, &b.down, &mut gate, n, &mut bufs, &mut part);
            ops::rms_norm(&mut part, e, Some(&b.ffn_post_norm), c.eps);
            h.iter_mut().zip(&part).for_each(|(x, y)| *x += y);
            if let Some(s) = b.out_scale {
                h.iter_mut().for_each(|x| *x *= s);
            }
        }

        if let Some(w) = &self.post_ln {
            ops::rms_norm(&mut h, e, Some(w), c.eps);
        }
        // k × k average pooling (as Gemma 3's), times √width.
        let (ow, oh) = (gw / k, gh / k);
        let mut pooled = vec![0f32; ow * oh * e];
        let root = (e as f32).sqrt();
        for (t, dst) in pooled.chunks_exact_mut(e).enumerate() {
            let (oy, ox) = (t / ow, t % ow);
            for (ch, d) in dst.iter_mut().enumerate() {
                let mut sum = 0f32;
                for ky in 0..k {
                    for kx in 0..k {
                        sum += h[((oy * k + ky) * gw + ox * k + kx) * e + ch];
                    }
                }
                *d = sum / (k * k) as f32 * root;
            }
        }
        if let Some((bias, scale)) = &self.std {
            for row in pooled.chunks_exact_mut(e) {
                for ((v, b), s) in row.iter_mut().zip(bias).zip(scale) {
                    *v = (*v - b) * s;
                }
            }
        }
        ops::rms_norm(&mut pooled, e, None, c.eps);
        let mut out = vec![0f32; ow * oh * c.projection_dim];
        self.apply(
            backend,
            &self.projection,
            &mut pooled,
            ow * oh,
            &mut bufs,
            &mut out,
        );
        if let Some(e) = backend.take_error() {
            return Err(e);
        }
        Ok(out)
    }
}
