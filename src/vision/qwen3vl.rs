//! The Qwen3-VL / Qwen3.5 vision tower (`qwen3vl_merger`), as llama.cpp's
//! `tools/mtmd/models/qwen3vl.cpp` builds it: the patch convolution with its two temporal slices
//! (a still image goes through both), patches ordered by 2×2 merge group, the patch bias and the
//! learned position grid resampled to the image's patch grid; blocks of LayerNorm, fused QKV with
//! bias, 2-D RoPE, full attention and a GELU MLP; the final LayerNorm; every 2×2 group's four
//! states side by side into the merger MLP, one embedding per group.
//!
//! The matrix products run on the backend; the norms, RoPE and attention on the host (`ops.rs`).
//! The patch convolution multiplies in f16, as llama.cpp's does.

use half::f16;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::gguf::GgmlType;
use crate::tensor::Tensor;

use super::mmproj::{Mmproj, VisionConfig};
use super::ops;

struct Block<B: Backend> {
    ln1: (Vec<f32>, Vec<f32>),
    qkv: (B::Weight, B::Weight),
    out: (B::Weight, B::Weight),
    ln2: (Vec<f32>, Vec<f32>),
    up: (B::Weight, B::Weight),
    down: (B::Weight, B::Weight),
}

pub struct Qwen3VlTower<B: Backend> {
    config: VisionConfig,
    /// The two temporal slices of the patch convolution, as matrices over a patch's 3·p·p
    /// values (channel, row, column).
    patch: [B::Weight; 2],
    patch_bias: B::Weight,
    /// The learned position grid, `grid × grid` vectors of the tower's width (host).
    positions: Vec<f32>,
    grid: usize,
    blocks: Vec<Block<B>>,
    post_ln: (Vec<f32>, Vec<f32>),
    merger: [(B::Weight, B::Weight); 2],
}

fn host(t: &Tensor) -> Vec<f32> {
    t.to_f32()
}

impl<B: Backend> Qwen3VlTower<B> {
    pub fn load(file: &Mmproj, backend: &B) -> Result<Qwen3VlTower<B>> {
        let c = file.config.clone();
        if let Some(why) = c.runnable() {
            return Err(Error::invalid(&file.path, why));
        }
        let (e, p, ff) = (c.n_embd, c.patch_size, c.n_ff);
        let weight = |name: &str, dims: &[usize]| backend.weight(file.tensor(name, dims)?);
        let linear = |name: &str, cols: usize, rows: usize| -> Result<(B::Weight, B::Weight)> {
            Ok((
                weight(&format!("{name}.weight"), &[cols, rows])?,
                weight(&format!("{name}.bias"), &[rows])?,
            ))
        };
        let norm = |name: &str| -> Result<(Vec<f32>, Vec<f32>)> {
            Ok((
                host(file.tensor(&format!("{name}.weight"), &[e])?),
                host(file.tensor(&format!("{name}.bias"), &[e])?),
            ))
        };
        // llama.cpp's `ggml_conv_2d` multiplies in f16 (its im2col is f16, and the kernel is
        // rounded to it for the product): the kernels are kept as f16, the patches rounded.
        let kernel = |name: &str| -> Result<B::Weight> {
            let values = file.tensor(name, &[p, p, 3, e])?.to_f32();
            let bytes = values
                .iter()
                .flat_map(|&v| f16::from_f32(v).to_le_bytes())
                .collect();
            backend.weight(&Tensor::from_bytes(
                name,
                GgmlType::F16,
                vec![3 * p * p, e],
                bytes,
            ))
        };
        let pos = file.tensors.get("v.position_embd.weight").ok_or_else(|| {
            Error::invalid(&file.path, "tensor 'v.position_embd.weight' is missing")
        })?;
        let n_pos = pos.dims.get(1).copied().unwrap_or(0);
        let grid = (n_pos as f64).sqrt() as usize;
        if pos.dims.len() != 2 || pos.dims[0] != e || grid * grid != n_pos || grid == 0 {
            return Err(Error::invalid(
                &file.path,
                format!(
                    "tensor 'v.position_embd.weight' has shape {:?}: expected [{e}, a square number]",
                    pos.dims
                ),
            ));
        }
        let blocks = (0..c.n_layer)
            .map(|i| {
                let b = |part: &str| format!("v.blk.{i}.{part}");
                Ok(Block {
                    ln1: norm(&b("ln1"))?,
                    qkv: linear(&b("attn_qkv"), e, 3 * e)?,
                    out: linear(&b("attn_out"), e, e)?,
                    ln2: norm(&b("ln2"))?,
                    up: linear(&b("ffn_up"), e, ff)?,
                    down: linear(&b("ffn_down"), ff, e)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let merged = e * c.merge * c.merge;
        Ok(Qwen3VlTower {
            patch: [
                kernel("v.patch_embd.weight")?,
                kernel("v.patch_embd.weight.1")?,
            ],
            patch_bias: weight("v.patch_embd.bias", &[e])?,
            positions: host(pos),
            grid,
            blocks,
            post_ln: norm("v.post_ln")?,
            merger: [
                linear("mm.0", merged, merged)?,
                linear("mm.2", merged, c.projection_dim)?,
            ],
            config: c,
        })
    }

    /// Embeddings (`n_tokens × projection_dim`, row-major) of a preprocessed image: `pixels`
    /// normalized, 3 values per pixel, `width × height` in whole merge groups of patches.
    pub fn encode(
        &self,
        backend: &B,
        pixels: &[f32],
        width: usize,
        height: usize,
    ) -> Result<Vec<f32>> {
        let c = &self.config;
        let (e, p, m) = (c.n_embd, c.patch_size, c.merge);
        if !width.is_multiple_of(p * m)
            || !height.is_multiple_of(p * m)
            || width == 0
            || height == 0
        {
            return Err(Error::Usage(format!(
                "an image of {width}×{height} is not whole {0}×{0} merge groups",
                p * m
            )));
        }
        let (gw, gh) = (width / p, height / p);
        let n = gw * gh;
        // Patches in merge-group order: group row, group column, then row and column inside it.
        let mut order = Vec::with_capacity(n);
        for yb in (0..gh).step_by(m) {
            for xb in (0..gw).step_by(m) {
                for dy in 0..m {
                    for dx in 0..m {
                        order.push((yb + dy, xb + dx));
                    }
                }
            }
        }
        let k = 3 * p * p;
        let mut patches = vec![0f32; n * k];
        for (row, &(y, x)) in patches.chunks_exact_mut(k).zip(&order) {
            for ch in 0..3 {
                for ky in 0..p {
                    for kx in 0..p {
                        let px = (y * p + ky) * width + x * p + kx;
                        let v = pixels[px * 3 + ch];
                        row[(ch * p + ky) * p + kx] = f16::from_f32(v).to_f32();
                    }
                }
            }
        }
        let widest = k
            .max(3 * e)
            .max(c.n_ff)
            .max(e * m * m)
            .max(c.projection_dim);
        let mut x = backend.buffer(n * widest)?;
        let mut h = backend.buffer(n * widest)?;
        let mut t = backend.buffer(n * widest)?;
        backend.upload(&mut t, &patches);
        backend.matmul(&t, &self.patch[0], n, &mut h);
        backend.matmul(&t, &self.patch[1], n, &mut x);
        backend.add(&mut h, &x, n * e);
        backend.add_bias(&mut h, &self.patch_bias, n);
        let grid = if (gw, gh) == (self.grid, self.grid) {
            self.positions.clone()
        } else {
            ops::resample_grid(&self.positions, self.grid, e, gw, gh)
        };
        let mut pos = vec![0f32; n * e];
        for (dst, &(y, x)) in pos.chunks_exact_mut(e).zip(&order) {
            dst.copy_from_slice(&grid[(y * gw + x) * e..][..e]);
        }
        backend.upload(&mut t, &pos);
        backend.add(&mut h, &t, n * e);

        let rope_pos: Vec<(u32, u32)> = order.iter().map(|&(y, x)| (y as u32, x as u32)).collect();
        let scale = 1.0 / (c.head_dim as f32).sqrt();
        let mut normed = vec![0f32; n * e];
        let mut qkv = vec![0f32; n * 3 * e];
        let mut attn = vec![0f32; n * e];
        let mut ffn = vec![0f32; n * c.n_ff];
        for b in &self.blocks {
            // Attention: h += out(attention(rope(qkv(ln1(h))))).
            backend.download(&h, 0, &mut normed);
            ops::layer_norm(&mut normed, &b.ln1.0, &b.ln1.1, c.eps);
            backend.upload(&mut x, &normed);
            backend.matmul(&x, &b.qkv.0, n, &mut t);
            backend.add_bias(&mut t, &b.qkv.1, n);
            backend.download(&t, 0, &mut qkv);
            // Q and K of a row sit side by side: both rotate, as 2 × heads heads.
            ops::vision_rope(&mut qkv, 3 * e, 2 * c.n_head, c.head_dim, &rope_pos);
            ops::attention(&qkv, n, c.n_head, c.head_dim, scale, &mut attn);
            backend.upload(&mut x, &attn);
            backend.matmul(&x, &b.out.0, n, &mut t);
            backend.add_bias(&mut t, &b.out.1, n);
            backend.add(&mut h, &t, n * e);
            // Feed-forward: h += down(gelu(up(ln2(h)))).
            backend.download(&h, 0, &mut normed);
            ops::layer_norm(&mut normed, &b.ln2.0, &b.ln2.1, c.eps);
            backend.upload(&mut x, &normed);
            backend.matmul(&x, &b.up.0, n, &mut t);
            backend.add_bias(&mut t, &b.up.1, n);
            backend.download(&t, 0, &mut ffn);
            ops::gelu_in_place(&mut ffn);
            backend.upload(&mut x, &ffn);
            backend.matmul(&x, &b.down.0, n, &mut t);
            backend.add_bias(&mut t, &b.down.1, n);
            backend.add(&mut h, &t, n * e);
        }
        backend.download(&h, 0, &mut normed);
        ops::layer_norm(&mut normed, &self.post_ln.0, &self.post_ln.1, c.eps);
        // Each merge group's states are consecutive rows: as rows of m·m·e they are the merger's input.
        let groups = n / (m * m);
        let merged = e * m * m;
        backend.upload(&mut x, &normed);
        backend.matmul(&x, &self.merger[0].0, groups, &mut t);
        backend.add_bias(&mut t, &self.merger[0].1, groups);
        let mut mid = vec![0f32; groups * merged];
        backend.download(&t, 0, &mut mid);
        ops::gelu_in_place(&mut mid);
        backend.upload(&mut x, &mid);
        backend.matmul(&x, &self.merger[1].0, groups, &mut t);
        backend.add_bias(&mut t, &self.merger[1].1, groups);
        let mut out = vec![0f32; groups * c.projection_dim];
        backend.download(&t, 0, &mut out);
        if let Some(e) = backend.take_error() {
            return Err(e);
        }
        Ok(out)
    }
}
