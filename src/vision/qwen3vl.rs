//! The Qwen3-VL / Qwen3.5 vision tower (`qwen3vl_merger`), as llama.cpp's
//! `tools/mtmd/models/qwen3vl.cpp` builds it: the patch convolution with its two temporal slices
//! (a still image goes through both), patches ordered by 2×2 merge group, the patch bias and the
//! learned position grid resampled to the image's patch grid; blocks of LayerNorm, fused QKV with
//! bias, 2-D RoPE, full attention and a GELU MLP; the final LayerNorm; every 2×2 group's four
//! states side by side into the merger MLP, one embedding per group. Qwen3-VL's deepstack
//! blocks (`v.deepstack.{i}.*`) also hand their output to the text model: each group's four
//! states through that block's own LayerNorm and GELU MLP, side by side after the embedding in
//! the same row.
//!
//! The matrix products run on the backend; the norms, RoPE and attention on the host (`ops.rs`).
//! The patch convolution multiplies in f16, as llama.cpp's does.

use crate::backend::Backend;
use crate::error::{Error, Result};

use super::mmproj::{Mmproj, VisionConfig};
use super::ops;
use super::vit::{self, Blocks, Buffers, Linear, Loader, Norm};

pub struct Qwen3VlTower<B: Backend> {
    config: VisionConfig,
    /// The two temporal slices of the patch convolution, as matrices over a patch's 3·p·p
    /// values (channel, row, column).
    patch: [B::Weight; 2],
    patch_bias: B::Weight,
    /// The learned position grid, `grid × grid` vectors of the tower's width (host).
    positions: Vec<f32>,
    grid: usize,
    blocks: Blocks<B>,
    post_ln: Norm,
    merger: [Linear<B>; 2],
    /// Per deepstack block (`config.deepstack`, in order): its norm over a merge group's states
    /// side by side, and its MLP.
    deepstack: Vec<(Norm, [Linear<B>; 2])>,
}

impl<B: Backend> Qwen3VlTower<B> {
    pub fn load(file: &Mmproj, backend: &B) -> Result<Qwen3VlTower<B>> {
        let c = file.config.clone();
        if let Some(why) = c.runnable() {
            return Err(Error::invalid(&file.path, why));
        }
        let (e, p) = (c.n_embd, c.patch_size);
        let l = Loader { file, backend };
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
        let merged = e * c.merge * c.merge;
        Ok(Qwen3VlTower {
            patch: [
                l.patch_kernel("v.patch_embd.weight", p, e)?,
                l.patch_kernel("v.patch_embd.weight.1", p, e)?,
            ],
            patch_bias: l.weight("v.patch_embd.bias", &[e])?,
            positions: pos.to_f32(),
            grid,
            blocks: Blocks::load(&l, &c)?,
            post_ln: l.norm("v.post_ln", e)?,
            merger: [
                l.linear("mm.0", merged, merged)?,
                l.linear("mm.2", merged, c.projection_dim)?,
            ],
            deepstack: c
                .deepstack
                .iter()
                .map(|i| {
                    let d = format!("v.deepstack.{i}");
                    Ok((
                        l.norm(&format!("{d}.norm"), merged)?,
                        [
                            l.linear(&format!("{d}.fc1"), merged, merged)?,
                            l.linear(&format!("{d}.fc2"), merged, c.projection_dim)?,
                        ],
                    ))
                })
                .collect::<Result<_>>()?,
            config: c,
        })
    }

    /// Embeddings (`n_tokens` rows of `projection_dim × (1 + deepstack blocks)`, row-major) of a
    /// preprocessed image: `pixels` normalized, 3 values per pixel, `width × height` in whole
    /// merge groups of patches.
    pub fn encode(
        &self,
        backend: &B,
        pixels: &[f32],
        width: usize,
        height: usize,
    ) -> Result<Vec<f32>> {
        let c = &self.config;
        let (e, p, m) = (c.n_embd, c.patch_size, c.merge);
        vit::check_whole_tokens(width, height, p * m)?;
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
        let patches = vit::patches(pixels, width, p, &order);
        let widest = k
            .max(3 * e)
            .max(c.n_ff)
            .max(e * m * m)
            .max(c.projection_dim);
        let mut h = backend.buffer(n * widest)?;
        let mut buf = Buffers::new(backend, n * widest, n, e)?;
        backend.upload(&mut buf.t, &patches);
        backend.matmul(&buf.t, &self.patch[0], n, &mut h);
        backend.matmul(&buf.t, &self.patch[1], n, &mut buf.x);
        backend.add(&mut h, &buf.x, n * e);
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
        backend.upload(&mut buf.t, &pos);
        backend.add(&mut h, &buf.t, n * e);

        let rope_pos: Vec<(u32, u32)> = order.iter().map(|&(y, x)| (y as u32, x as u32)).collect();
        // Each merge group's states are consecutive rows: as rows of m·m·e they are a merger's
        // input.
        let groups = n / (m * m);
        let mut states = vec![0f32; n * e];
        let mut slices = Vec::with_capacity(self.deepstack.len());
        let mut next = self.deepstack.iter().zip(&c.deepstack).peekable();
        self.blocks.run(
            backend,
            c,
            &mut h,
            n,
            Some(&rope_pos),
            &mut buf,
            |i, h, buf| {
                if let Some(((norm, mlp), _)) = next.next_if(|(_, block)| **block == i) {
                    backend.download(h, 0, &mut states);
                    ops::layer_norm(&mut states, &norm.0, &norm.1, c.eps);
                    slices.push(merger_mlp(
                        backend,
                        mlp,
                        &states,
                        groups,
                        c.projection_dim,
                        buf,
                    ));
                }
            },
        );
        backend.download(&h, 0, &mut states);
        ops::layer_norm(&mut states, &self.post_ln.0, &self.post_ln.1, c.eps);
        let main = merger_mlp(
            backend,
            &self.merger,
            &states,
            groups,
            c.projection_dim,
            &mut buf,
        );
        if let Some(e) = backend.take_error() {
            return Err(e);
        }
        if slices.is_empty() {
            return Ok(main);
        }
        // Side by side in each row: the embedding, then each deepstack block's slice.
        let d = c.projection_dim;
        let mut out = Vec::with_capacity(groups * d * (1 + slices.len()));
        for g in 0..groups {
            for part in std::iter::once(&main).chain(&slices) {
                out.extend_from_slice(&part[g * d..(g + 1) * d]);
            }
        }
        Ok(out)
    }
}

/// `fc[1](gelu(fc[0](input)))` over `groups` rows of host values (a merge group's states side by
/// side, normed; `fc[0]` keeps their width), `out_width` values a row back on the host.
fn merger_mlp<B: Backend>(
    backend: &B,
    fc: &[Linear<B>; 2],
    input: &[f32],
    groups: usize,
    out_width: usize,
    buf: &mut Buffers<B>,
) -> Vec<f32> {
    let width = input.len() / groups;
    backend.upload(&mut buf.x, input);
    fc[0].apply(backend, &buf.x, groups, &mut buf.t);
    let mut mid = vec![0f32; groups * width];
    backend.download(&buf.t, 0, &mut mid);
    ops::gelu_in_place(&mut mid);
    backend.upload(&mut buf.x, &mid);
    fc[1].apply(backend, &buf.x, groups, &mut buf.t);
    let mut out = vec![0f32; groups * out_width];
    backend.download(&buf.t, 0, &mut out);
    out
}
