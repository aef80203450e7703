//! Images in: multimodal projector files (`mmproj.rs`), image decoding and preprocessing
//! (`image.rs`), and the vision towers that turn an image into embeddings of the text model's
//! width, one file per projector (`qwen3vl.rs`, `gemma3.rs`, `gemma4v.rs`) over the transformer blocks they
//! share (`vit.rs`) and host operations the backend does not have yet (`ops.rs`).
//!
//! The flow: `Mmproj::open` → `VisionEncoder::load` (weights onto a backend) → `image::load` →
//! `VisionEncoder::encode` (the projector's preprocessing, then its tower) → `Encoded`, rows the
//! text model takes in place of token embeddings.

mod gemma3;
mod gemma4v;
pub mod image;
pub mod mmproj;
mod ops;
mod qwen3vl;
mod vit;

pub use mmproj::{Mmproj, Projector, VisionConfig};

use crate::backend::Backend;
use crate::error::Result;
use crate::tensor::Tensor;

use self::gemma3::Gemma3Tower;
use self::gemma4v::Gemma4VTower;
use self::image::RgbImage;
use self::qwen3vl::Qwen3VlTower;

/// An image's embeddings and where its tokens sit.
#[derive(Debug, Clone)]
pub struct Encoded {
    /// Tokens across and down the image (its grid of merge groups).
    pub cols: usize,
    pub rows: usize,
    /// The preprocessed image's size in pixels.
    pub width: usize,
    pub height: usize,
    /// `rows × cols` embeddings of the text model's width (with Qwen3-VL's deepstack slices after
    /// each: `ModelConfig::embedding_width`), row-major, in reading order.
    pub embeddings: Vec<f32>,
    /// The text model attends over the image's rows both ways (Gemma 3).
    pub bidirectional: bool,
}

impl Encoded {
    pub fn tokens(&self) -> usize {
        self.rows * self.cols
    }
}

/// A projector's tower with its weights on a backend.
pub enum VisionEncoder<B: Backend> {
    Qwen3Vl(Qwen3VlTower<B>, VisionConfig),
    Gemma3(Gemma3Tower<B>, VisionConfig),
    Gemma4V(Gemma4VTower<B>, VisionConfig),
}

impl<B: Backend> VisionEncoder<B> {
    /// The tower of `file` on `backend`; an error naming the projector when kiln cannot run it.
    pub fn load(file: &Mmproj, backend: &B) -> Result<VisionEncoder<B>> {
        let c = file.config.clone();
        // Every tensor is read by every image (in place, on the CPU): mapped in now, not at a
        // fault per page of the first image.
        file.tensors.values().for_each(Tensor::prefault);
        Ok(match c.projector {
            Projector::Gemma3 => VisionEncoder::Gemma3(Gemma3Tower::load(file, backend)?, c),
            Projector::Gemma4V => VisionEncoder::Gemma4V(Gemma4VTower::load(file, backend)?, c),
            _ => VisionEncoder::Qwen3Vl(Qwen3VlTower::load(file, backend)?, c),
        })
    }

    pub fn config(&self) -> &VisionConfig {
        match self {
            VisionEncoder::Qwen3Vl(_, c)
            | VisionEncoder::Gemma3(_, c)
            | VisionEncoder::Gemma4V(_, c) => c,
        }
    }

    /// The size an image is resized to before encoding, in pixels.
    pub fn input_size(&self, width: usize, height: usize) -> (usize, usize) {
        let c = self.config();
        if !c.dynamic_size() {
            return (c.image_size, c.image_size);
        }
        let side = c.token_side();
        image::smart_size(
            width,
            height,
            side,
            c.min_tokens * side * side,
            c.max_tokens * side * side,
        )
    }

    /// Preprocess `img` as the projector wants it and run the tower.
    pub fn encode(&self, backend: &B, img: &RgbImage) -> Result<Encoded> {
        let c = self.config();
        let (width, height) = self.input_size(img.width, img.height);
        let resized = image::resize_letterboxed(img, width, height, c.resize_filter());
        let pixels = image::normalize(&resized, c.mean, c.std);
        let side = c.token_side();
        let embeddings = match self {
            VisionEncoder::Qwen3Vl(tower, _) => tower.encode(backend, &pixels, width, height)?,
            VisionEncoder::Gemma3(tower, _) => tower.encode(backend, &pixels)?,
            VisionEncoder::Gemma4V(tower, _) => tower.encode(backend, &pixels, width, height)?,
        };
        Ok(Encoded {
            cols: width / side,
            rows: height / side,
            width,
            height,
            embeddings,
            bidirectional: c.bidirectional(),
        })
    }
}
