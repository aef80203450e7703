//! The Gemma 3 vision tower (`gemma3`), as llama.cpp's `tools/mtmd/models/siglip.cpp` builds it:
//! SigLIP's patch convolution with its bias and learned position embeddings (one per patch of
//! the fixed square image), pre-LayerNorm blocks of full attention with separate Q, K and V and a
//! GELU MLP, the final LayerNorm; then the projector: k × k average pooling of the patch grid
//! (4 × 4: 4096 patches to 256 tokens), an RMSNorm by `mm.soft_emb_norm` and the projection
//! `mm.input_projection` into the text model's width.
//!
//! The matrix products run on the backend; the norms, attention and pooling on the host.

use half::f16;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::gguf::GgmlType;
use crate::tensor::Tensor;

use super::mmproj::{Mmproj, VisionConfig};
use super::ops;
use super::vit::{self, Blocks, Buffers, Loader, Norm};

pub struct Gemma3Tower<B: Backend> {
    config: VisionConfig,
    patch: B::Weight,
    patch_bias: B::Weight,
    /// One learned position embedding per patch, row-major over the patch grid (host).
    positions: Vec<f32>,
    blocks: Blocks<B>,
    post_ln: Norm,
    soft_emb_norm: Vec<f32>,
    /// `mm.input_projection`, stored in the file as the transpose of a linear map's weight (HF
    /// multiplies `x · W`): kept here transposed back, in its own type where it can be.
    projection: B::Weight,
}

/// A [rows, cols] matrix's transpose, from a tensor whose GGML shape is [cols, rows]: f16 and
/// bf16 stay as they are (llama.cpp's `ggml_cont` of the transpose keeps the type); others,
/// quantized ones included, become f32.
fn transposed(t: &Tensor) -> Tensor {
    let (cols, rows) = (t.dims[0], t.dims[1]);
    let values = t.to_f32();
    let mut out = vec![0f32; values.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = values[r * cols + c];
        }
    }
    let name = format!("{} (transposed)", t.name);
    match t.dtype {
        GgmlType::F16 => {
            let bytes = out
                .iter()
                .flat_map(|&v| f16::from_f32(v).to_le_bytes())
                .collect();
            Tensor::from_bytes(&name, GgmlType::F16, vec![rows, cols], bytes)
        }
        GgmlType::BF16 => {
            let bytes = out
                .iter()
                .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
                .collect();
            Tensor::from_bytes(&name, GgmlType::BF16, vec![rows, cols], bytes)
        }
        _ => Tensor::from_f32(&name, vec![rows, cols], &out),
    }
}

impl<B: Backend> Gemma3Tower<B> {
    pub fn load(file: &Mmproj, backend: &B) -> Result<Gemma3Tower<B>> {
        let c = file.config.clone();
        if let Some(why) = c.runnable() {
            return Err(Error::invalid(&file.path, why));
        }
        let (e, p) = (c.n_embd, c.patch_size);
        let side = c.image_size / p;
        let l = Loader { file, backend };
        let projection = file.tensor("mm.input_projection.weight", &[c.projection_dim, e])?;
        Ok(Gemma3Tower {
            patch: l.patch_kernel("v.patch_embd.weight", p, e)?,
            patch_bias: l.weight("v.patch_embd.bias", &[e])?,
            positions: file
                .tensor("v.position_embd.weight", &[e, side * side])?
                .to_f32(),
            blocks: Blocks::load(&l, &c)?,
            post_ln: l.norm("v.post_ln", e)?,
            soft_emb_norm: file.tensor("mm.soft_emb_norm.weight", &[e])?.to_f32(),
            projection: backend.weight(&transposed(projection))?,
            config: c,
        })
    }

    /// Embeddings (`tokens × projection_dim`, row-major) of a preprocessed image: `pixels`
    /// normalized, 3 values per pixel, the projector's square image size.
    pub fn encode(&self, backend: &B, pixels: &[f32]) -> Result<Vec<f32>> {
        let c = &self.config;
        let (e, p, k) = (c.n_embd, c.patch_size, c.merge);
        let side = c.image_size / p;
        let n = side * side;
        if pixels.len() != 3 * c.image_size * c.image_size {
            return Err(Error::Usage(format!(
                "the Gemma 3 tower takes {0}×{0} images",
                c.image_size
            )));
        }
        let order: Vec<(usize, usize)> = (0..n).map(|i| (i / side, i % side)).collect();
        let patches = vit::patches(pixels, c.image_size, p, &order);
        let widest = (3 * p * p).max(3 * e).max(c.n_ff).max(c.projection_dim);
        let mut h = backend.buffer(n * widest)?;
        let mut buf = Buffers::new(backend, n * widest, n, e)?;
        backend.upload(&mut buf.t, &patches);
        backend.matmul(&buf.t, &self.patch, n, &mut h);
        backend.add_bias(&mut h, &self.patch_bias, n);
        backend.upload(&mut buf.t, &self.positions);
        backend.add(&mut h, &buf.t, n * e);
        self.blocks
            .run(backend, c, &mut h, n, None, &mut buf, |_, _, _| {});
        let mut states = vec![0f32; n * e];
        backend.download(&h, 0, &mut states);
        ops::layer_norm(&mut states, &self.post_ln.0, &self.post_ln.1, c.eps);

        // k × k average pooling over the patch grid (ggml_pool_2d: an f32 sum over the window's
        // rows, then its columns, divided by k²), then the RMSNorm.
        let out_side = side / k;
        let tokens = out_side * out_side;
        let mut pooled = vec![0f32; tokens * e];
        for (t, dst) in pooled.chunks_exact_mut(e).enumerate() {
            let (oy, ox) = (t / out_side, t % out_side);
            for (ch, d) in dst.iter_mut().enumerate() {
                let mut sum = 0f32;
                for ky in 0..k {
                    for kx in 0..k {
                        sum += states[((oy * k + ky) * side + ox * k + kx) * e + ch];
                    }
                }
                *d = sum / (k * k) as f32;
            }
        }
        ops::rms_norm(&mut pooled, e, Some(&self.soft_emb_norm), c.eps);
        backend.upload(&mut buf.x, &pooled);
        backend.matmul(&buf.x, &self.projection, tokens, &mut buf.t);
        let mut out = vec![0f32; tokens * c.projection_dim];
        backend.download(&buf.t, 0, &mut out);
        if let Some(e) = backend.take_error() {
            return Err(e);
        }
        Ok(out)
    }
}
