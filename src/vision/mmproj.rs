//! Multimodal projector files ("mmproj"): GGUF files with `general.architecture = clip`, as
//! llama.cpp's `tools/mtmd` reads them. The `clip.*` keys give the vision tower's shape and the
//! image preprocessing; the `v.*` (tower) and `mm.*` (projector) tensors stay in the mapping.
//!
//! Everything here is untrusted: every size is checked against a bound before anything is
//! allocated from it, and errors name the file and the key. A projector kiln cannot run still
//! opens, so `kiln info` can describe it; `VisionConfig::runnable` names what is missing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::gguf::{GgufFile, Metadata};
use crate::tensor::Tensor;

/// The projector families llama.cpp names in `clip.projector_type`, as far as kiln knows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Projector {
    /// Qwen3-VL, Qwen3.5 and Qwen3.5-MoE: the 2×2 patch merger (`qwen3vl_merger`).
    Qwen3VlMerger,
    /// Gemma 3: SigLIP with 4×4 average pooling (`gemma3`).
    Gemma3,
    /// Gemma 4 (`gemma4v`).
    Gemma4V,
    /// Any other name, kept for the description and the error.
    Other(String),
}

impl Projector {
    fn from_name(name: &str) -> Projector {
        match name {
            "qwen3vl_merger" => Projector::Qwen3VlMerger,
            "gemma3" => Projector::Gemma3,
            "gemma4v" => Projector::Gemma4V,
            other => Projector::Other(other.to_string()),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Projector::Qwen3VlMerger => "qwen3vl_merger",
            Projector::Gemma3 => "gemma3",
            Projector::Gemma4V => "gemma4v",
            Projector::Other(name) => name,
        }
    }
}

/// The activation of the tower's feed-forward blocks (`clip.use_gelu` / `clip.use_silu`, else
/// GELU-quick, as llama.cpp defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// GELU with the tanh approximation, as llama.cpp evaluates it (an f16 lookup table). Hugging
    /// Face's Qwen3-VL merger uses the exact (erf) GELU; kiln matches llama.cpp.
    Gelu,
    Silu,
    GeluQuick,
}

/// The vision tower's hyperparameters and its image preprocessing.
#[derive(Debug, Clone)]
pub struct VisionConfig {
    pub projector: Projector,
    /// Width of the tower's residual stream.
    pub n_embd: usize,
    pub n_head: usize,
    pub head_dim: usize,
    pub n_ff: usize,
    pub n_layer: usize,
    /// Width of the embeddings handed to the text model.
    pub projection_dim: usize,
    /// Blocks whose output also feeds the text model (Qwen3-VL's deepstack: `v.deepstack.{i}.*`
    /// tensors, known by their presence as llama.cpp knows them), in order: each image row
    /// carries one more `projection_dim` slice per block.
    pub deepstack: Vec<usize>,
    pub eps: f32,
    /// The side of the square images the position grid was learned for.
    pub image_size: usize,
    pub patch_size: usize,
    /// Patches merged per side into one token (2 for the Qwen merger).
    pub merge: usize,
    pub mean: [f32; 3],
    pub std: [f32; 3],
    pub activation: Activation,
    /// Tokens per image, at least and at most (llama.cpp's defaults for the projector, or
    /// `--image-min-tokens` / `--image-max-tokens`). As in llama.cpp's resize, a side never
    /// shrinks below one token, so a very long, thin image can take more than a low maximum.
    pub min_tokens: usize,
    pub max_tokens: usize,
}

/// Upper bounds on the hyperparameters: far above any released tower, low enough that no product
/// of them overflows or asks for absurd memory before a tensor shape check would catch it.
const MAX_WIDTH: usize = 1 << 16;
const MAX_LAYERS: usize = 1024;
const MAX_IMAGE_SIDE: usize = 1 << 14;

impl VisionConfig {
    fn from_metadata(m: &Metadata) -> Result<VisionConfig> {
        let name = match m.str("clip.projector_type")? {
            Some(name) => name,
            None => m.str("clip.vision.projector_type")?.ok_or_else(|| {
                Error::Format("no clip.projector_type: not a projector kiln can read".into())
            })?,
        };
        let projector = Projector::from_name(name);
        let size = |key: &str, max: usize| -> Result<usize> {
            let v = m
                .usize(key)?
                .ok_or_else(|| Error::Format(format!("{key} is missing")))?;
            if v == 0 || v > max {
                return Err(Error::Format(format!("{key} = {v} is outside 1..={max}")));
            }
            Ok(v)
        };
        let n_embd = size("clip.vision.embedding_length", MAX_WIDTH)?;
        let n_head = size("clip.vision.attention.head_count", MAX_WIDTH)?;
        let head_dim = match m.usize("clip.vision.attention.head_dim")? {
            Some(d) if d > 0 && d <= MAX_WIDTH => d,
            Some(d) => {
                return Err(Error::Format(format!(
                    "clip.vision.attention.head_dim = {d} is outside 1..={MAX_WIDTH}"
                )));
            }
            None => n_embd / n_head,
        };
        let eps = m
            .f64("clip.vision.attention.layer_norm_epsilon")?
            .ok_or_else(|| {
                Error::Format("clip.vision.attention.layer_norm_epsilon is missing".into())
            })? as f32;
        if !(eps.is_finite() && eps >= 0.0) {
            return Err(Error::Format(format!(
                "clip.vision.attention.layer_norm_epsilon = {eps} is not a small positive number"
            )));
        }
        let channel_triple = |key: &str| -> Result<[f32; 3]> {
            let v = m
                .f32_array(key)?
                .ok_or_else(|| Error::Format(format!("{key} is missing")))?;
            match v.as_slice() {
                [a, b, c, ..] if v.iter().all(|x| x.is_finite()) => Ok([*a, *b, *c]),
                _ => Err(Error::Format(format!(
                    "{key} needs 3 finite values, has {v:?}"
                ))),
            }
        };
        let std = channel_triple("clip.vision.image_std")?;
        if std.contains(&0.0) {
            return Err(Error::Format(format!(
                "clip.vision.image_std {std:?} has a zero: the image would divide by it"
            )));
        }
        let activation = match (
            m.bool("clip.use_gelu")?.unwrap_or(false),
            m.bool("clip.use_silu")?.unwrap_or(false),
        ) {
            (true, true) => {
                return Err(Error::Format(
                    "clip.use_gelu and clip.use_silu are both set".into(),
                ));
            }
            (true, false) => Activation::Gelu,
            (false, true) => Activation::Silu,
            (false, false) => Activation::GeluQuick,
        };
        let merge = match projector {
            Projector::Qwen3VlMerger => match m.usize("clip.vision.spatial_merge_size")? {
                None => 2,
                Some(v) if (1..=8).contains(&v) => v,
                Some(v) => {
                    return Err(Error::Format(format!(
                        "clip.vision.spatial_merge_size = {v} is outside 1..=8"
                    )));
                }
            },
            // The pooling kernel: 4 (Gemma 3) or 3 (Gemma 4), or
            // `clip.vision.projector.scale_factor` (llama.cpp reads it for test models).
            Projector::Gemma3 | Projector::Gemma4V => {
                match m.usize("clip.vision.projector.scale_factor")? {
                    None if projector == Projector::Gemma3 => 4,
                    None => 3,
                    Some(v) if (1..=64).contains(&v) => v,
                    Some(v) => {
                        return Err(Error::Format(format!(
                            "clip.vision.projector.scale_factor = {v} is outside 1..=64"
                        )));
                    }
                }
            }
            _ => 1,
        };
        let image_size = size("clip.vision.image_size", MAX_IMAGE_SIDE)?;
        let patch_size = size("clip.vision.patch_size", 1024)?;
        let (min_tokens, max_tokens) = match projector {
            // Every image is resized to the native square: always the same tokens.
            Projector::Gemma3 => {
                let n = (image_size / patch_size / merge).pow(2);
                (n, n)
            }
            // llama.cpp's limits (set_limit_image_tokens) for Gemma 4 and the Qwen merger.
            Projector::Gemma4V => (70, 1120),
            _ => (8, 4096),
        };
        Ok(VisionConfig {
            projector,
            n_embd,
            n_head,
            head_dim,
            n_ff: size("clip.vision.feed_forward_length", 4 * MAX_WIDTH)?,
            n_layer: size("clip.vision.block_count", MAX_LAYERS)?,
            projection_dim: size("clip.vision.projection_dim", MAX_WIDTH)?,
            deepstack: Vec::new(),
            eps,
            image_size,
            patch_size,
            merge,
            mean: channel_triple("clip.vision.image_mean")?,
            std,
            activation,
            min_tokens,
            max_tokens,
        })
    }

    /// None when kiln can encode images with this projector, else why not.
    pub fn runnable(&self) -> Option<String> {
        let runs = matches!(
            self.projector,
            Projector::Qwen3VlMerger | Projector::Gemma3 | Projector::Gemma4V
        );
        if runs && self.n_head * self.head_dim != self.n_embd {
            return Some(format!(
                "its {} heads of {} do not make its width {}",
                self.n_head, self.head_dim, self.n_embd
            ));
        }
        if runs && self.head_dim > super::ops::MAX_HEAD {
            return Some(format!(
                "its head size {} is over the {} kiln's attention takes",
                self.head_dim,
                super::ops::MAX_HEAD
            ));
        }
        if runs && self.activation != Activation::Gelu {
            return Some(format!(
                "its feed-forward activation is {:?} (kiln's towers run GELU)",
                self.activation
            ));
        }
        match &self.projector {
            Projector::Qwen3VlMerger if !self.head_dim.is_multiple_of(4) => Some(format!(
                "its head size {} is not a multiple of 4 (2-D RoPE)",
                self.head_dim
            )),
            Projector::Qwen3VlMerger if self.merge != 2 => Some(format!(
                "its spatial merge of {} (llama.cpp's merger takes 2×2 groups)",
                self.merge
            )),
            Projector::Qwen3VlMerger => None,
            Projector::Gemma3 if !self.image_size.is_multiple_of(self.patch_size * self.merge) => {
                Some(format!(
                    "its image size {} is not whole {}×{} pools of {}-pixel patches",
                    self.image_size, self.merge, self.merge, self.patch_size
                ))
            }
            Projector::Gemma3 => None,
            Projector::Gemma4V if !self.head_dim.is_multiple_of(4) => Some(format!(
                "its head size {} is not a multiple of 4 (2-D RoPE)",
                self.head_dim
            )),
            Projector::Gemma4V => None,
            other => Some(format!(
                "kiln does not run the '{}' projector yet (it runs qwen3vl_merger, gemma3 and \
                 gemma4v)",
                other.name()
            )),
        }
    }

    /// Pixels per output token along each side.
    pub fn token_side(&self) -> usize {
        self.patch_size * self.merge
    }

    /// The values each image token carries: the embedding, then a slice as wide per deepstack
    /// block.
    pub fn embedding_width(&self) -> usize {
        self.projection_dim * (1 + self.deepstack.len())
    }

    /// Whether images keep their aspect ratio and take a number of tokens within the limits
    /// (Qwen), rather than being resized to the native square (Gemma 3).
    pub fn dynamic_size(&self) -> bool {
        self.projector != Projector::Gemma3
    }

    /// The filter of the projector's resize, as llama.cpp's `image_resize_algo`.
    pub fn resize_filter(&self) -> super::image::Filter {
        match self.projector {
            Projector::Gemma3 => super::image::Filter::Bilinear,
            _ => super::image::Filter::Bicubic,
        }
    }

    /// Whether the text model attends over an image's rows both ways (llama.cpp's
    /// `mtmd_decode_use_non_causal`: Gemma 3, and Gemma 4 but its E2B and E4B, known by their
    /// widths 1536 and 2560).
    pub fn bidirectional(&self) -> bool {
        match self.projector {
            Projector::Gemma3 => true,
            Projector::Gemma4V => !matches!(self.projection_dim, 1536 | 2560),
            _ => false,
        }
    }

    /// Override the tokens per image (`--image-min-tokens`, `--image-max-tokens`; 0 keeps the
    /// projector's default). A fixed-size projector (Gemma 3) keeps its one count, as llama.cpp.
    pub fn set_token_limits(&mut self, min: usize, max: usize) -> Result<()> {
        if !self.dynamic_size() {
            return Ok(());
        }
        let (min, max) = (
            if min > 0 { min } else { self.min_tokens },
            if max > 0 { max } else { self.max_tokens },
        );
        if min > max || max > 1 << 16 {
            return Err(Error::Usage(format!(
                "image tokens {min}..={max}: the minimum must not exceed the maximum (at most 65536)"
            )));
        }
        (self.min_tokens, self.max_tokens) = (min, max);
        Ok(())
    }
}

/// An opened mmproj file.
pub struct Mmproj {
    pub path: PathBuf,
    pub config: VisionConfig,
    pub tensors: BTreeMap<String, Tensor>,
    pub file_size: u64,
}

impl Mmproj {
    pub fn open(path: &Path) -> Result<Mmproj> {
        Mmproj::from_gguf(GgufFile::open(path)?)
    }

    pub fn from_gguf(gguf: GgufFile) -> Result<Mmproj> {
        let path = gguf.path.clone();
        let arch = gguf
            .metadata
            .str("general.architecture")
            .map_err(|e| e.in_file(&path))?;
        if arch != Some("clip") {
            return Err(Error::invalid(
                &path,
                format!(
                    "not a multimodal projector: general.architecture is {}, not 'clip'",
                    arch.map_or("missing".to_string(), |a| format!("'{a}'"))
                ),
            ));
        }
        if gguf
            .metadata
            .bool("clip.has_vision_encoder")
            .map_err(|e| e.in_file(&path))?
            != Some(true)
        {
            return Err(Error::invalid(
                &path,
                "this projector has no vision encoder (clip.has_vision_encoder is not true)",
            ));
        }
        let mut config =
            VisionConfig::from_metadata(&gguf.metadata).map_err(|e| e.in_file(&path))?;
        let tensors: BTreeMap<String, Tensor> =
            Tensor::all_in(&gguf).map(|t| (t.name.clone(), t)).collect();
        if config.projector == Projector::Qwen3VlMerger {
            config.deepstack = (0..config.n_layer)
                .filter(|i| tensors.contains_key(&format!("v.deepstack.{i}.fc1.weight")))
                .collect();
        }
        Ok(Mmproj {
            path,
            config,
            tensors,
            file_size: gguf.file_size(),
        })
    }

    /// The tensor `name` with GGML dimensions `dims`; an error naming both otherwise.
    pub fn tensor(&self, name: &str, dims: &[usize]) -> Result<&Tensor> {
        let t = self
            .tensors
            .get(name)
            .ok_or_else(|| Error::invalid(&self.path, format!("tensor '{name}' is missing")))?;
        if t.dims != dims {
            return Err(Error::invalid(
                &self.path,
                format!(
                    "tensor '{name}' has shape {:?}, expected {dims:?} for this projector",
                    t.dims
                ),
            ));
        }
        Ok(t)
    }

    /// Check that this projector feeds a text model of width `n_embd` that takes
    /// `deepstack_layers` deepstack slices per image row (Qwen3-VL).
    pub fn check_text_width(&self, n_embd: usize, deepstack_layers: usize) -> Result<()> {
        let c = &self.config;
        if c.projection_dim != n_embd {
            return Err(Error::invalid(
                &self.path,
                format!(
                    "this projector makes embeddings of width {}, but the model's hidden size is \
                     {n_embd}: it belongs to another model",
                    c.projection_dim
                ),
            ));
        }
        if c.deepstack.len() != deepstack_layers {
            return Err(Error::invalid(
                &self.path,
                format!(
                    "this projector has {} deepstack layers, but the model takes {deepstack_layers} \
                     (n_deepstack_layers): it belongs to another model",
                    c.deepstack.len()
                ),
            ));
        }
        Ok(())
    }

    /// `kiln info`'s lines: (label, value).
    pub fn describe(&self) -> Vec<(String, String)> {
        let c = &self.config;
        let side = c.token_side();
        let mut lines = vec![
            ("projector".to_string(), c.projector.name().to_string()),
            (
                "vision tower".to_string(),
                format!(
                    "{} blocks of width {}, {} heads of {}, feed-forward {}, {:?}",
                    c.n_layer, c.n_embd, c.n_head, c.head_dim, c.n_ff, c.activation
                ),
            ),
            (
                "image".to_string(),
                if c.projector == Projector::Gemma4V {
                    // Its file's image size plays no part: any size, the aspect ratio kept.
                    format!(
                        "any size, patches of {0}×{0}, {1}×{1} patches per token",
                        c.patch_size, c.merge
                    )
                } else {
                    format!(
                        "{0}×{0} native, patches of {1}×{1}, {2}×{2} patches per token",
                        c.image_size, c.patch_size, c.merge
                    )
                },
            ),
            (
                "tokens per image".to_string(),
                if c.projector == Projector::Gemma4V {
                    format!(
                        "{} to {} ({side}×{side} pixels each)",
                        c.min_tokens, c.max_tokens
                    )
                } else if c.dynamic_size() {
                    format!(
                        "{} to {} ({} at the native size; {}×{} pixels each)",
                        c.min_tokens,
                        c.max_tokens,
                        (c.image_size / side).pow(2),
                        side,
                        side
                    )
                } else {
                    format!(
                        "{} (every image is resized to {1}×{1})",
                        c.max_tokens, c.image_size
                    )
                },
            ),
            (
                "embeddings".to_string(),
                if c.deepstack.is_empty() {
                    format!("width {}", c.projection_dim)
                } else {
                    let blocks: Vec<String> = c.deepstack.iter().map(|i| i.to_string()).collect();
                    format!(
                        "width {}, and {} deepstack slices of it (from blocks {})",
                        c.projection_dim,
                        c.deepstack.len(),
                        blocks.join(", ")
                    )
                },
            ),
        ];
        if let Some(why) = c.runnable() {
            lines.push(("runs".to_string(), format!("no: {why}")));
        }
        lines
    }
}
