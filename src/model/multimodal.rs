//! Prompts with images: where each image's embeddings go among the prompt's tokens. A user
//! message with images is rendered through the chat template with OpenAI-style content parts
//! (the images first, then the text, as llama.cpp's and ollama's command lines put them); where
//! the template writes the projector's image placeholder (Qwen's `<|image_pad|>`) once per image,
//! each placeholder becomes that image. A template that does not know images (it renders the
//! parts as nothing, or fails on them) gets llama.cpp's way instead: a marker in the message text
//! per image, each replaced by the projector's begin text, the image, and its end text
//! (`<|vision_start|>` … `<|vision_end|>`). Text between images is tokenized piece by piece, as
//! llama.cpp's mtmd tokenizes it, with the BOS only at the start.

use super::chat::{ChatTemplate, Message};
use super::tokenizer::Tokenizer;
use crate::error::{Error, Result};
use crate::vision::Projector;

/// One piece of a prompt: tokens, or the rows of image `n` (in the order given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptPiece {
    Tokens(Vec<u32>),
    Image(usize),
}

/// The texts a projector's images sit between in a prompt (llama.cpp's `img_beg` / `img_end`),
/// and the placeholder a model's template writes for an image content part.
#[derive(Debug, Clone, Copy)]
pub struct ImageMarkers {
    pub begin: &'static str,
    pub end: &'static str,
    pub placeholder: &'static str,
}

impl ImageMarkers {
    pub fn for_projector(projector: &Projector) -> ImageMarkers {
        match projector {
            Projector::Gemma3 => ImageMarkers {
                begin: "<start_of_image>",
                end: "<end_of_image>",
                placeholder: "<start_of_image>",
            },
            // llama.cpp's mtmd for gemma4v; a template that writes the begin text for an image
            // part places it as Gemma 3's do.
            Projector::Gemma4V => ImageMarkers {
                begin: "<|image>",
                end: "<image|>",
                placeholder: "<|image>",
            },
            _ => ImageMarkers {
                begin: "<|vision_start|>",
                end: "<|vision_end|>",
                placeholder: "<|image_pad|>",
            },
        }
    }
}

/// The marker llama.cpp's mtmd looks for in prompt text (`mtmd_default_marker`).
pub const MEDIA_MARKER: &str = "<__media__>";

/// An image as a prompt takes it: its token grid and embeddings (a `vision::Encoded`'s). The
/// `Arc` is its identity: a conversation's later turns recognize the image they already ran.
#[derive(Debug, Clone)]
pub struct ImageInput {
    pub cols: usize,
    pub rows: usize,
    pub embeddings: std::sync::Arc<Vec<f32>>,
    /// Its rows attend to each other both ways in the text model (Gemma 3's images; llama.cpp's
    /// `mtmd_decode_use_non_causal`).
    pub bidirectional: bool,
}

impl ImageInput {
    pub fn tokens(&self) -> usize {
        self.cols * self.rows
    }
}

/// The pieces of a chat prompt: `history` as it is, then a user message with `images` images and
/// `text`, then the assistant's turn.
pub fn chat_prompt(
    template: &ChatTemplate,
    tok: &Tokenizer,
    history: &[Message],
    text: &str,
    images: usize,
    markers: ImageMarkers,
) -> Result<Vec<PromptPiece>> {
    let mut messages: Vec<(Message, usize)> = history.iter().map(|m| (m.clone(), 0)).collect();
    messages.push((Message::new("user", text), images));
    render_pieces(template, tok, &messages, markers)
}

/// The pieces of a conversation whose messages each carry a number of images (before their
/// text), then the assistant's turn. Images are numbered in order through the conversation.
pub fn render_pieces(
    template: &ChatTemplate,
    tok: &Tokenizer,
    messages: &[(Message, usize)],
    markers: ImageMarkers,
) -> Result<Vec<PromptPiece>> {
    let images: usize = messages.iter().map(|(_, n)| n).sum();
    let as_json = |with_parts: bool| -> serde_json::Value {
        messages
            .iter()
            .map(|(m, n)| {
                let content = if *n == 0 {
                    serde_json::json!(m.content)
                } else if with_parts {
                    let mut parts: Vec<serde_json::Value> = (0..*n)
                        .map(|_| serde_json::json!({"type": "image"}))
                        .collect();
                    parts.push(serde_json::json!({"type": "text", "text": m.content}));
                    serde_json::json!(parts)
                } else {
                    serde_json::json!(format!("{}{}", MEDIA_MARKER.repeat(*n), m.content))
                };
                serde_json::json!({"role": m.role, "content": content})
            })
            .collect()
    };
    if images > 0
        && let Ok(rendered) = template.render_json(&as_json(true), true)
        && rendered.matches(markers.placeholder).count() == images
    {
        let bos = !template.writes_bos(&rendered);
        // Gemma's templates write the begin text itself: the image goes between it and the end
        // text, as llama.cpp's mtmd places it.
        let wrap = (markers.placeholder == markers.begin).then_some(markers);
        return split(tok, &rendered, markers.placeholder, bos, images, wrap);
    }
    let rendered = template.render_json(&as_json(false), true)?;
    let bos = !template.writes_bos(&rendered);
    split(tok, &rendered, MEDIA_MARKER, bos, images, Some(markers))
}

/// The pieces of a raw prompt (no template): the text with one `MEDIA_MARKER` per image where
/// the user put them, or all images first when the text has none, as llama.cpp's mtmd-cli does.
pub fn raw_prompt(
    tok: &Tokenizer,
    text: &str,
    images: usize,
    markers: ImageMarkers,
) -> Result<Vec<PromptPiece>> {
    let placed = text.matches(MEDIA_MARKER).count();
    let text = if placed == 0 {
        format!("{}{text}", MEDIA_MARKER.repeat(images))
    } else {
        text.to_string()
    };
    split(tok, &text, MEDIA_MARKER, true, images, Some(markers))
}

/// Split `rendered` at `marker`, tokenizing the text between; with `wrap`, each image gets the
/// projector's begin and end texts around it, tokenized apart from the text beside them.
fn split(
    tok: &Tokenizer,
    rendered: &str,
    marker: &str,
    bos: bool,
    images: usize,
    wrap: Option<ImageMarkers>,
) -> Result<Vec<PromptPiece>> {
    let parts: Vec<&str> = rendered.split(marker).collect();
    if parts.len() != images + 1 {
        return Err(Error::Usage(format!(
            "the prompt has {} image markers ({marker}) for {images} images",
            parts.len() - 1
        )));
    }
    let mut pieces = Vec::new();
    let mut first = true;
    let mut push_text = |pieces: &mut Vec<PromptPiece>, text: &str| -> Result<()> {
        if text.is_empty() && !(first && bos) {
            return Ok(());
        }
        let ids = tok.encode(text, first && bos)?;
        first = false;
        if !ids.is_empty() {
            pieces.push(PromptPiece::Tokens(ids));
        }
        Ok(())
    };
    for (i, part) in parts.iter().enumerate() {
        push_text(&mut pieces, part)?;
        if i < images {
            if let Some(m) = wrap {
                push_text(&mut pieces, m.begin)?;
            }
            pieces.push(PromptPiece::Image(i));
            if let Some(m) = wrap {
                push_text(&mut pieces, m.end)?;
            }
        }
    }
    // Adjacent token pieces (a begin text after the text before it) run as one.
    let mut merged: Vec<PromptPiece> = Vec::with_capacity(pieces.len());
    for piece in pieces {
        match (merged.last_mut(), piece) {
            (Some(PromptPiece::Tokens(a)), PromptPiece::Tokens(b)) => a.extend(b),
            (_, piece) => merged.push(piece),
        }
    }
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_follow_the_projector() {
        let q = ImageMarkers::for_projector(&Projector::Qwen3VlMerger);
        assert_eq!((q.begin, q.end), ("<|vision_start|>", "<|vision_end|>"));
        let g = ImageMarkers::for_projector(&Projector::Gemma3);
        assert_eq!(g.begin, "<start_of_image>");
    }
}
