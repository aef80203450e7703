//! Images on the command line, as llama.cpp's `llama-mtmd-cli` takes them: `--mmproj` (found
//! beside the model when not given), `--image` (repeatable), `--image-min-tokens` and
//! `--image-max-tokens`; the images decoded and encoded on the model's backend, and a prompt
//! with images prefilled into a session.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::backend::Backend;
use crate::model::multimodal::{ImageInput, ImageMarkers, PromptPiece};
use crate::model::{Model, Session};
use crate::vision::{Encoded, Mmproj, VisionEncoder, image};

#[derive(clap::Args, Debug, Clone, Default)]
pub struct VisionArgs {
    /// Multimodal projector (an mmproj GGUF) for --image. Default: the one mmproj*.gguf file in
    /// the model's folder
    #[arg(long, value_name = "FILE")]
    pub mmproj: Option<PathBuf>,

    /// An image to give the model before the prompt (repeatable): PNG, JPEG, WebP, BMP or GIF
    /// (its first frame). A `<__media__>` marker in a raw prompt places it there
    #[arg(long = "image", value_name = "FILE")]
    pub images: Vec<PathBuf>,

    /// Fewest tokens per image (0: the projector's default); small images are scaled up to it
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub image_min_tokens: usize,

    /// Most tokens per image (0: the projector's default); large images are scaled down to it
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub image_max_tokens: usize,
}

/// A prompt's images, encoded.
pub struct Images {
    pub encoded: Vec<Encoded>,
    pub encode_time: Duration,
    pub markers: ImageMarkers,
}

impl Images {
    pub fn tokens(&self) -> usize {
        self.encoded.iter().map(Encoded::tokens).sum()
    }
}

impl VisionArgs {
    /// The projector: `--mmproj`; else for a model from the hub (a file in a Hugging Face cache
    /// snapshot) its repo's projector, fetched as llama.cpp's `-hf` fetches it; else the one
    /// `mmproj*.gguf` beside the model.
    fn mmproj_path(&self, model_path: &Path) -> Result<PathBuf> {
        if let Some(p) = &self.mmproj {
            return Ok(p.clone());
        }
        if let Some(hub) = crate::hub::HubModel::of_cached_file(model_path) {
            return match hub.fetch_mmproj()? {
                Some(p) => Ok(p),
                None => bail!(
                    "--image needs a multimodal projector and {} has no mmproj*.gguf: give one \
                     with --mmproj",
                    hub.repo
                ),
            };
        }
        let dir = model_path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let dir = if model_path.is_dir() { model_path } else { dir };
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| {
                        p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                            n.to_ascii_lowercase().starts_with("mmproj") && n.ends_with(".gguf")
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        found.sort();
        match found.len() {
            1 => Ok(found.remove(0)),
            0 => bail!(
                "--image needs a multimodal projector: give one with --mmproj (no mmproj*.gguf \
                 beside {})",
                model_path.display()
            ),
            _ => bail!(
                "{} holds several projectors ({}): choose one with --mmproj",
                dir.display(),
                found
                    .iter()
                    .filter_map(|p| p.file_name()?.to_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// The projector's tower on the model's backend.
    pub fn encoder<'m, B: Backend>(
        &self,
        model: &'m Model<B>,
        model_path: &Path,
    ) -> Result<ImageEncoder<'m, B>> {
        let path = self.mmproj_path(model_path)?;
        let mut file = Mmproj::open(&path)?;
        file.config
            .set_token_limits(self.image_min_tokens, self.image_max_tokens)?;
        file.check_text_width(model.config.hidden_size, model.config.deepstack_layers)?;
        Ok(ImageEncoder {
            markers: ImageMarkers::for_projector(&file.config.projector),
            encoder: VisionEncoder::load(&file, &model.backend)?,
            backend: &model.backend,
        })
    }

    /// Decode and encode the images on the model's backend; None without `--image`.
    pub fn encode<B: Backend>(
        &self,
        model: &Model<B>,
        model_path: &Path,
        verbose: bool,
    ) -> Result<Option<Images>> {
        if self.images.is_empty() {
            if self.mmproj.is_some() && verbose {
                eprintln!("note: --mmproj without --image: the projector is not loaded");
            }
            return Ok(None);
        }
        let encoder = self.encoder(model, model_path)?;
        let start = Instant::now();
        let encoded = self
            .images
            .iter()
            .map(|p| encoder.encode_file(p, verbose))
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(Images {
            encoded,
            encode_time: start.elapsed(),
            markers: encoder.markers,
        }))
    }
}

/// A projector's tower loaded on a model's backend.
pub struct ImageEncoder<'m, B: Backend> {
    encoder: VisionEncoder<B>,
    backend: &'m B,
    pub markers: ImageMarkers,
}

impl<B: Backend> ImageEncoder<'_, B> {
    /// Preprocess and encode a decoded image.
    pub fn encode_image(&self, img: &image::RgbImage) -> Result<Encoded> {
        Ok(self.encoder.encode(self.backend, img)?)
    }

    /// Decode and encode the image file at `path`; with `verbose`, a line about it on stderr.
    pub fn encode_file(&self, path: &Path, verbose: bool) -> Result<Encoded> {
        let img = image::load(path)?;
        let t = Instant::now();
        let e = self
            .encoder
            .encode(self.backend, &img)
            .with_context(|| format!("encoding {}", path.display()))?;
        if verbose {
            eprintln!(
                "image {}: {}×{} → {}×{}, {} tokens, encoded in {:.0} ms",
                path.display(),
                img.width,
                img.height,
                e.width,
                e.height,
                e.tokens(),
                t.elapsed().as_secs_f64() * 1e3
            );
        }
        Ok(e)
    }
}

/// An image named by an OpenAI-style `image_url`: a `data:` URL holding the file base64-encoded
/// (`data:image/png;base64,…`), a `file://` URL or a local path. kiln does not fetch from the web.
pub fn load_image_url(url: &str) -> Result<image::RgbImage> {
    use base64::Engine;
    if let Some(rest) = url.strip_prefix("data:") {
        let Some((kind, data)) = rest.split_once(',') else {
            bail!("a data: URL needs a comma before its data");
        };
        if !kind.ends_with(";base64") {
            bail!("a data: URL image must be base64-encoded (data:image/png;base64,…)");
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .context("the data: URL's base64 does not decode")?;
        return Ok(image::decode(&bytes)?);
    }
    if url.starts_with("http://") || url.starts_with("https://") {
        bail!("kiln does not fetch images from the web: give a data: URL or a local path");
    }
    let path = url.strip_prefix("file://").unwrap_or(url);
    Ok(image::load(Path::new(path))?)
}

/// An encoded image as a prompt takes it.
pub fn image_input(e: &Encoded) -> ImageInput {
    ImageInput {
        cols: e.cols,
        rows: e.rows,
        embeddings: std::sync::Arc::new(e.embeddings.clone()),
        bidirectional: e.bidirectional,
    }
}

/// Rows a prompt of `pieces` takes in the context.
pub fn prompt_rows(pieces: &[PromptPiece], images: &Images) -> usize {
    pieces
        .iter()
        .map(|p| match p {
            PromptPiece::Tokens(ids) => ids.len(),
            PromptPiece::Image(i) => images.encoded[*i].tokens(),
        })
        .sum()
}

/// Prefill every piece but a last run of tokens, which is returned: the prompt `generate` runs.
/// The first `from` rows are in the session already (a prefix it shares; no image among them).
pub fn prefill_pieces<B: Backend>(
    session: &mut Session<'_, B>,
    pieces: &[PromptPiece],
    images: &Images,
    from: usize,
) -> Result<Vec<u32>> {
    let mut at = 0;
    for (i, piece) in pieces.iter().enumerate() {
        let len = match piece {
            PromptPiece::Tokens(ids) => ids.len(),
            PromptPiece::Image(n) => images.encoded[*n].tokens(),
        };
        let skip = from.saturating_sub(at).min(len);
        at += len;
        match piece {
            PromptPiece::Tokens(ids) if i + 1 == pieces.len() => return Ok(ids[skip..].to_vec()),
            _ if skip == len => {}
            PromptPiece::Tokens(ids) => {
                session.prefill(&ids[skip..])?;
            }
            PromptPiece::Image(n) => {
                session.prefill_embeddings(&image_input(&images.encoded[*n]))?;
            }
        }
    }
    Ok(Vec::new())
}

/// `kiln info` on a projector file: its projector, tower and image handling, as text or JSON.
pub fn describe_mmproj(path: &Path, json: bool) -> Result<std::process::ExitCode> {
    let file = Mmproj::open(path)?;
    let lines = file.describe();
    if json {
        let c = &file.config;
        let v = serde_json::json!({
            "path": path,
            "architecture": "clip",
            "projector": c.projector.name(),
            "file_size": file.file_size,
            "tensor_count": file.tensors.len(),
            "vision": {
                "embedding_length": c.n_embd,
                "block_count": c.n_layer,
                "head_count": c.n_head,
                "head_dim": c.head_dim,
                "feed_forward_length": c.n_ff,
                "image_size": c.image_size,
                "patch_size": c.patch_size,
                "spatial_merge": c.merge,
                "min_tokens": c.min_tokens,
                "max_tokens": c.max_tokens,
                "projection_dim": c.projection_dim,
                "deepstack_blocks": c.deepstack,
            },
            "runs": c.runnable().is_none(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("{:<16} {}", "path", path.display());
        println!("{:<16} multimodal projector (mmproj)", "format");
        for (label, value) in lines {
            println!("{label:<16} {value}");
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// The projector beside a model, for `kiln info`'s line about it: (file name, projector name).
pub fn projector_beside(model_path: &Path) -> Option<(String, String)> {
    let args = VisionArgs::default();
    let path = args.mmproj_path(model_path).ok()?;
    let file = Mmproj::open(&path).ok()?;
    let name = path.file_name()?.to_string_lossy().into_owned();
    Some((name, file.config.projector.name().to_string()))
}
