//! The transformer blocks the vision towers share, as llama.cpp's `clip_graph::build_vit` runs
//! them: pre-LayerNorm blocks of full attention (fused QKV as Qwen's towers have it, or separate
//! Q, K and V as SigLIP's), each with its bias, and a GELU MLP; the weights' loading from an
//! mmproj file, and the patch convolution's kernel as llama.cpp multiplies it (in f16).
//!
//! The matrix products and attention run on the backend; LayerNorm, RoPE and GELU on the host
//! (`ops.rs`), between them: in place where the backend's buffers are the host's memory (the
//! CPU's), else on values read back and sent again.

use half::f16;
use rayon::prelude::*;

use crate::backend::{AttentionParams, Backend, CacheType};
use crate::error::Result;
use crate::gguf::GgmlType;
use crate::tensor::Tensor;

use super::mmproj::{Mmproj, VisionConfig};
use super::ops;

/// A LayerNorm's weight and bias, on the host.
pub(super) type Norm = (Vec<f32>, Vec<f32>);

/// A linear map's weight and bias, on the backend.
pub(super) struct Linear<B: Backend> {
    pub w: B::Weight,
    pub b: B::Weight,
}

impl<B: Backend> Linear<B> {
    /// `out = x · wᵀ + b` over `rows` rows.
    pub fn apply(&self, backend: &B, x: &B::Buffer, rows: usize, out: &mut B::Buffer) {
        backend.matmul(x, &self.w, rows, out);
        backend.add_bias(out, &self.b, rows);
    }
}

/// The attention's input maps.
enum Qkv<B: Backend> {
    /// One map to Q, K and V side by side (`attn_qkv`).
    Fused(Linear<B>),
    /// Three maps (`attn_q`, `attn_k`, `attn_v`).
    Split([Linear<B>; 3]),
}

struct Block<B: Backend> {
    ln1: Norm,
    qkv: Qkv<B>,
    out: Linear<B>,
    ln2: Norm,
    up: Linear<B>,
    down: Linear<B>,
}

/// An mmproj file's tensors, read onto a backend with their shapes checked.
pub(super) struct Loader<'a, B: Backend> {
    pub file: &'a Mmproj,
    pub backend: &'a B,
}

impl<B: Backend> Loader<'_, B> {
    /// Tensor `name` of GGML shape `dims` on the backend.
    pub fn weight(&self, name: &str, dims: &[usize]) -> Result<B::Weight> {
        self.backend.weight(self.file.tensor(name, dims)?)
    }

    /// `name.weight` (`cols` in, `rows` out) and `name.bias`.
    pub fn linear(&self, name: &str, cols: usize, rows: usize) -> Result<Linear<B>> {
        Ok(Linear {
            w: self.weight(&format!("{name}.weight"), &[cols, rows])?,
            b: self.weight(&format!("{name}.bias"), &[rows])?,
        })
    }

    /// `name.weight` and `name.bias` of width `width`, on the host.
    pub fn norm(&self, name: &str, width: usize) -> Result<Norm> {
        Ok((
            self.file
                .tensor(&format!("{name}.weight"), &[width])?
                .to_f32(),
            self.file
                .tensor(&format!("{name}.bias"), &[width])?
                .to_f32(),
        ))
    }

    /// A patch convolution's kernel `name` (GGML shape [p, p, 3, width]) as a matrix over a
    /// patch's 3·p·p values (channel, row, column), in f16: llama.cpp's `ggml_conv_2d` goes
    /// through an f16 im2col and rounds the kernel to f16 for the product, and so does kiln.
    pub fn patch_kernel(&self, name: &str, p: usize, width: usize) -> Result<B::Weight> {
        let values = self.file.tensor(name, &[p, p, 3, width])?.to_f32();
        let bytes = values
            .iter()
            .flat_map(|&v| f16::from_f32(v).to_le_bytes())
            .collect();
        self.backend.weight(&Tensor::from_bytes(
            name,
            GgmlType::F16,
            vec![3 * p * p, width],
            bytes,
        ))
    }
}

/// An error unless a `width × height` image is a nonempty grid of whole `side × side`-pixel
/// tokens (merge groups or pools of patches).
pub(super) fn check_whole_tokens(width: usize, height: usize, side: usize) -> Result<()> {
    if width == 0 || height == 0 || !width.is_multiple_of(side) || !height.is_multiple_of(side) {
        return Err(crate::error::Error::Usage(format!(
            "an image of {width}×{height} is not whole {side}×{side}-pixel tokens"
        )));
    }
    Ok(())
}

/// The patches at grid positions `order` ((row, column) each) of an image `width` pixels wide
/// (`pixels`: 3 normalized values per pixel), one row of 3·p·p values (channel, row, column)
/// each: the patch convolution's input as llama.cpp's f16 im2col makes it (rounded to f16).
pub(super) fn patches(
    pixels: &[f32],
    width: usize,
    p: usize,
    order: &[(usize, usize)],
) -> Vec<f32> {
    let k = 3 * p * p;
    let mut patches = vec![0f32; order.len() * k];
    for (row, &(y, x)) in patches.chunks_exact_mut(k).zip(order) {
        for ch in 0..3 {
            for ky in 0..p {
                for kx in 0..p {
                    let px = (y * p + ky) * width + x * p + kx;
                    row[(ch * p + ky) * p + kx] = f16::from_f32(pixels[px * 3 + ch]).to_f32();
                }
            }
        }
    }
    patches
}

/// The tower's transformer blocks.
pub(super) struct Blocks<B: Backend> {
    blocks: Vec<Block<B>>,
}

/// Backend buffers a tower's passes share: `n × widest` values each, and f32 key and value
/// caches of `n` rows of the tower's width for its attention.
pub(super) struct Buffers<B: Backend> {
    pub x: B::Buffer,
    pub t: B::Buffer,
    keys: B::Cache,
    values: B::Cache,
    /// Room on the host for one of Q, K and V on its way to the backend.
    part: Vec<f32>,
}

impl<B: Backend> Buffers<B> {
    pub fn new(backend: &B, len: usize, n: usize, width: usize) -> Result<Buffers<B>> {
        Ok(Buffers {
            x: backend.buffer(len)?,
            t: backend.buffer(len)?,
            keys: backend.cache(n * width, CacheType::F32, 1)?,
            values: backend.cache(n * width, CacheType::F32, 1)?,
            part: Vec::new(),
        })
    }

    /// Full attention of `n` rows whose queries, keys and values are separate maps of `self.x`
    /// (SigLIP's), each kept on the backend: the keys and values go straight into the caches.
    /// The output lands in `self.x` (the maps' input, read by then).
    pub fn attend_split(
        &mut self,
        backend: &B,
        maps: &[Linear<B>; 3],
        n: usize,
        (heads, head_dim, scale): (usize, usize, f32),
    ) {
        let e = heads * head_dim;
        maps[1].apply(backend, &self.x, n, &mut self.t);
        backend.store_rows(&self.t, &mut self.keys, 0, n, e);
        maps[2].apply(backend, &self.x, n, &mut self.t);
        backend.store_rows(&self.t, &mut self.values, 0, n, e);
        maps[0].apply(backend, &self.x, n, &mut self.t);
        let p = full_attention(n, heads, head_dim, scale);
        backend.attention(&self.t, &self.keys, &self.values, &mut self.x, &p, None);
    }

    /// Full (bidirectional) attention of `n` rows on the backend's attention kernels: `qkv` (host)
    /// holds each row's queries, keys and values side by side; the output lands in `self.t`.
    pub fn attend(
        &mut self,
        backend: &B,
        qkv: &[f32],
        n: usize,
        heads: usize,
        head_dim: usize,
        scale: f32,
    ) {
        let e = heads * head_dim;
        // Q, K or V (k = 0, 1, 2) of every row into `self.part`.
        let part = |k: usize, part: &mut Vec<f32>| {
            part.clear();
            part.extend(
                qkv.chunks_exact(3 * e)
                    .flat_map(|row| &row[k * e..(k + 1) * e]),
            );
        };
        part(1, &mut self.part);
        backend.upload(&mut self.t, &self.part);
        backend.store_rows(&self.t, &mut self.keys, 0, n, e);
        part(2, &mut self.part);
        backend.upload(&mut self.t, &self.part);
        backend.store_rows(&self.t, &mut self.values, 0, n, e);
        part(0, &mut self.part);
        backend.upload(&mut self.x, &self.part);
        let p = full_attention(n, heads, head_dim, scale);
        backend.attention(&self.x, &self.keys, &self.values, &mut self.t, &p, None);
    }

    /// Full attention of `n` rows whose queries, keys and values sit side by side in each row of
    /// `self.t` (a fused map's output), with `rope`'s 2-D vision RoPE on the queries and keys
    /// first; the output lands in `self.t`. Where the backend's buffers are the host's memory, the
    /// three are copied apart in place; elsewhere they go through `room` on the host (`attend`).
    pub fn attend_fused(
        &mut self,
        backend: &B,
        n: usize,
        (heads, head_dim, scale): (usize, usize, f32),
        rope: Option<&[(u32, u32)]>,
        room: &mut Vec<f32>,
    ) {
        let e = heads * head_dim;
        let turn = |qkv: &mut [f32]| {
            if let Some(pos) = rope {
                // Q and K of a row sit side by side: both rotate, as 2 × heads heads.
                ops::vision_rope(qkv, 3 * e, 2 * heads, head_dim, pos);
            }
        };
        if backend.host_values(&self.x).is_none() {
            room.resize(n * 3 * e, 0.0);
            backend.download(&self.t, 0, room);
            turn(room);
            return self.attend(backend, room, n, heads, head_dim, scale);
        }
        if let Some(qkv) = backend.host_values_mut(&mut self.t) {
            turn(&mut qkv[..n * 3 * e]);
        }
        // Q, K or V (k = 0, 1, 2) of every row of `t` into `x`.
        let part = |k: usize, t: &B::Buffer, x: &mut B::Buffer| {
            if let (Some(qkv), Some(x)) = (backend.host_values(t), backend.host_values_mut(x)) {
                x[..n * e]
                    .par_chunks_mut(e)
                    .zip(qkv.par_chunks(3 * e))
                    .for_each(|(dst, row)| dst.copy_from_slice(&row[k * e..(k + 1) * e]));
            }
        };
        part(1, &self.t, &mut self.x);
        backend.store_rows(&self.x, &mut self.keys, 0, n, e);
        part(2, &self.t, &mut self.x);
        backend.store_rows(&self.x, &mut self.values, 0, n, e);
        part(0, &self.t, &mut self.x);
        let p = full_attention(n, heads, head_dim, scale);
        backend.attention(&self.x, &self.keys, &self.values, &mut self.t, &p, None);
    }
}

/// `f` on the first `len` values of `b`, in place: in the backend's own memory where that is the
/// host's (the CPU), else read back into `room` and sent again.
fn on_host<B: Backend>(
    backend: &B,
    b: &mut B::Buffer,
    len: usize,
    room: &mut Vec<f32>,
    f: impl FnOnce(&mut [f32]),
) {
    if let Some(values) = backend.host_values_mut(b) {
        return f(&mut values[..len]);
    }
    room.resize(len, 0.0);
    backend.download(b, 0, room);
    f(room);
    backend.upload(b, room);
}

/// `dst` = LayerNorm(`src`) over the first `len` values (rows of the norm's width): in place where
/// the backend's buffers are the host's memory, else through `room`.
fn layer_norm_into<B: Backend>(
    backend: &B,
    (src, dst): (&B::Buffer, &mut B::Buffer),
    len: usize,
    (w, b): &Norm,
    eps: f32,
    room: &mut Vec<f32>,
) {
    if let (Some(from), Some(to)) = (backend.host_values(src), backend.host_values_mut(dst)) {
        return ops::layer_norm_into(&from[..len], &mut to[..len], w, b, eps);
    }
    room.resize(len, 0.0);
    backend.download(src, 0, room);
    ops::layer_norm(room, w, b, eps);
    backend.upload(dst, room);
}

/// Attention of `n` rows over all `n`, both ways: a vision tower's.
fn full_attention(n: usize, heads: usize, head_dim: usize, scale: f32) -> AttentionParams {
    AttentionParams {
        start_pos: 0,
        rows: n,
        n_heads: heads,
        n_kv_heads: heads,
        head_dim,
        scale,
        window: None,
        softcap: None,
        causal: false,
    }
}

impl<B: Backend> Blocks<B> {
    /// Blocks `v.blk.{i}` of `c.n_layer`, with a fused `attn_qkv` or separate `attn_q/k/v`,
    /// whichever the file has. Files from older converters swap `ffn_up` and `ffn_down` (each
    /// under the other's name); as llama.cpp, kiln knows them by their shapes.
    pub fn load(l: &Loader<B>, c: &VisionConfig) -> Result<Blocks<B>> {
        let (e, ff) = (c.n_embd, c.n_ff);
        let swapped = l
            .file
            .tensors
            .get("v.blk.0.ffn_down.weight")
            .is_some_and(|t| t.dims == [e, ff] && e != ff);
        let (up, down) = if swapped {
            ("ffn_down", "ffn_up")
        } else {
            ("ffn_up", "ffn_down")
        };
        let blocks = (0..c.n_layer)
            .map(|i| {
                let b = |part: &str| format!("v.blk.{i}.{part}");
                let qkv = if l.file.tensors.contains_key(&b("attn_qkv.weight")) {
                    Qkv::Fused(l.linear(&b("attn_qkv"), e, 3 * e)?)
                } else {
                    Qkv::Split([
                        l.linear(&b("attn_q"), e, e)?,
                        l.linear(&b("attn_k"), e, e)?,
                        l.linear(&b("attn_v"), e, e)?,
                    ])
                };
                Ok(Block {
                    ln1: l.norm(&b("ln1"), e)?,
                    qkv,
                    out: l.linear(&b("attn_out"), e, e)?,
                    ln2: l.norm(&b("ln2"), e)?,
                    up: l.linear(&b(up), e, ff)?,
                    down: l.linear(&b(down), ff, e)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Blocks { blocks })
    }

    /// Every block over the `n` rows of `h` (the residual stream, on the backend), in place; with
    /// `rope`, each row's (row, column) patch position turns its queries and keys by the 2-D
    /// vision RoPE. `buf` holds at least `n × max(3·width, n_ff)` values each. After block `i`,
    /// `after_block(i, h, buf)` sees the residual stream (`buf` is free to use then).
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &self,
        backend: &B,
        c: &VisionConfig,
        h: &mut B::Buffer,
        n: usize,
        rope: Option<&[(u32, u32)]>,
        buf: &mut Buffers<B>,
        mut after_block: impl FnMut(usize, &B::Buffer, &mut Buffers<B>),
    ) {
        let e = c.n_embd;
        let scale = 1.0 / (c.head_dim as f32).sqrt();
        // Host room, for backends whose buffers are not the host's memory (grown as needed).
        let (mut normed, mut qkv, mut ffn, mut part) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (i, b) in self.blocks.iter().enumerate() {
            // Attention: h += out(attention(rope(qkv(ln1(h))))).
            layer_norm_into(backend, (h, &mut buf.x), n * e, &b.ln1, c.eps, &mut normed);
            if let (Qkv::Split(maps), None) = (&b.qkv, rope) {
                // Nothing to turn on the host: Q, K and V stay on the backend.
                buf.attend_split(backend, maps, n, (c.n_head, c.head_dim, scale));
                b.out.apply(backend, &buf.x, n, &mut buf.t);
                backend.add(h, &buf.t, n * e);
                self.feed_forward(backend, c, b, h, n, (&mut normed, &mut ffn), buf);
                after_block(i, h, buf);
                continue;
            }
            match &b.qkv {
                Qkv::Fused(map) => {
                    map.apply(backend, &buf.x, n, &mut buf.t);
                    let shape = (c.n_head, c.head_dim, scale);
                    buf.attend_fused(backend, n, shape, rope, &mut qkv);
                }
                Qkv::Split(maps) => {
                    // Side by side in each row, as the fused map writes them.
                    qkv.resize(n * 3 * e, 0.0);
                    part.resize(n * e, 0.0);
                    for (k, map) in maps.iter().enumerate() {
                        map.apply(backend, &buf.x, n, &mut buf.t);
                        backend.download(&buf.t, 0, &mut part);
                        for (dst, src) in qkv.chunks_exact_mut(3 * e).zip(part.chunks_exact(e)) {
                            dst[k * e..(k + 1) * e].copy_from_slice(src);
                        }
                    }
                    if let Some(pos) = rope {
                        ops::vision_rope(&mut qkv, 3 * e, 2 * c.n_head, c.head_dim, pos);
                    }
                    buf.attend(backend, &qkv, n, c.n_head, c.head_dim, scale);
                }
            }
            b.out.apply(backend, &buf.t, n, &mut buf.x);
            backend.add(h, &buf.x, n * e);
            self.feed_forward(backend, c, b, h, n, (&mut normed, &mut ffn), buf);
            after_block(i, h, buf);
        }
    }

    /// A block's feed-forward: h += down(gelu(up(ln2(h)))), through host room `normed` and `ffn`.
    #[allow(clippy::too_many_arguments)]
    fn feed_forward(
        &self,
        backend: &B,
        c: &VisionConfig,
        b: &Block<B>,
        h: &mut B::Buffer,
        n: usize,
        (normed, ffn): (&mut Vec<f32>, &mut Vec<f32>),
        buf: &mut Buffers<B>,
    ) {
        layer_norm_into(
            backend,
            (h, &mut buf.x),
            n * c.n_embd,
            &b.ln2,
            c.eps,
            normed,
        );
        b.up.apply(backend, &buf.x, n, &mut buf.t);
        on_host(backend, &mut buf.t, n * c.n_ff, ffn, ops::gelu_in_place);
        b.down.apply(backend, &buf.t, n, &mut buf.x);
        backend.add(h, &buf.x, n * c.n_embd);
    }
}
