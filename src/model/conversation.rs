//! A multi-turn conversation over one session: the messages, rendered through the chat template,
//! and a KV cache that carries across turns. Each new turn renders the whole conversation, keeps
//! the cached tokens it shares with it, and prefills only the rest — what the template adds for
//! the new message. When a turn will not fit, the oldest turns are dropped (the system prompt
//! stays) and the caller is told how many.

use std::sync::Arc;

use super::chat::{ChatTemplate, Message};
use super::multimodal::{ImageInput, ImageMarkers, PromptPiece, render_pieces};
use super::session::Session;
use super::tokenizer::Tokenizer;
use crate::backend::Backend;
use crate::error::{Error, Result};

pub struct Conversation<'m, B: Backend> {
    pub session: Session<'m, B>,
    pub template: ChatTemplate,
    pub system: Option<String>,
    /// User and assistant messages, oldest first (the system prompt is kept apart).
    pub messages: Vec<Message>,
    /// Each message's images (before its text), in step with `messages`.
    images: Vec<Vec<ImageInput>>,
    /// Where images go in a prompt, once the conversation has had one.
    markers: Option<ImageMarkers>,
}

/// A piece of a rendered conversation: tokens, or an image's rows.
#[derive(Debug, Clone)]
enum Piece {
    Tokens(Vec<u32>),
    Image(ImageInput),
}

impl Piece {
    fn rows(&self) -> usize {
        match self {
            Piece::Tokens(ids) => ids.len(),
            Piece::Image(img) => img.tokens(),
        }
    }
}

/// What preparing a turn did.
#[derive(Debug, Clone)]
pub struct Turn {
    /// Tokens to prefill: the part of the rendered conversation not already cached (after its
    /// last new image, which the turn ran).
    pub new_tokens: Vec<u32>,
    /// Rows of the whole rendered conversation (tokens and images' rows).
    pub total_tokens: usize,
    /// Oldest messages dropped to make room.
    pub dropped_messages: usize,
}

impl<'m, B: Backend> Conversation<'m, B> {
    pub fn new(session: Session<'m, B>, template: ChatTemplate, system: Option<String>) -> Self {
        Conversation {
            session,
            template,
            system,
            messages: Vec::new(),
            images: Vec::new(),
            markers: None,
        }
    }

    /// Add a user message and bring the KV cache in line with the rendered conversation, leaving
    /// room for `reserve` reply tokens. On error the message is not added.
    pub fn user_turn(&mut self, tok: &Tokenizer, text: &str, reserve: usize) -> Result<Turn> {
        self.user_turn_with_images(tok, text, Vec::new(), reserve)
    }

    /// Set where images go in this conversation's prompts (the projector's markers), before the
    /// first turn with an image.
    pub fn set_image_markers(&mut self, markers: ImageMarkers) {
        self.markers = Some(markers);
    }

    /// `user_turn` with images before the text. Images the cache holds from earlier turns are
    /// not run again; what follows the last shared row is (new images are prefilled here, and
    /// `Turn::new_tokens` is the text after the last of them).
    pub fn user_turn_with_images(
        &mut self,
        tok: &Tokenizer,
        text: &str,
        images: Vec<ImageInput>,
        reserve: usize,
    ) -> Result<Turn> {
        let ctx = self.session.ctx();
        if !images.is_empty() && self.markers.is_none() {
            return Err(Error::Usage(
                "this conversation takes no images: it has no projector".into(),
            ));
        }
        // A message that cannot fit even alone is refused before any history is dropped.
        let mut alone: Vec<(Message, Vec<ImageInput>)> = self
            .system
            .iter()
            .map(|s| (Message::new("system", s), Vec::new()))
            .collect();
        alone.push((Message::new("user", text), images.clone()));
        let needed = self.render(tok, &alone)?.1 + reserve;
        if needed > ctx {
            return Err(Error::ContextFull { needed, ctx });
        }
        self.messages.push(Message::new("user", text));
        self.images.push(images);
        let mut dropped = 0;
        let (pieces, rows) = loop {
            let (pieces, rows) = match self.render(tok, &self.all_messages()) {
                Ok(r) => r,
                Err(e) => {
                    self.messages.pop();
                    self.images.pop();
                    return Err(e);
                }
            };
            if rows + reserve <= ctx {
                break (pieces, rows);
            }
            // Drop the oldest exchange: everything up to the next user message. (The new message
            // alone fits, so this ends before it.)
            let next_user = self.messages[1..]
                .iter()
                .position(|m| m.role == "user")
                .map_or(self.messages.len() - 1, |p| p + 1);
            self.messages.drain(..next_user);
            self.images.drain(..next_user);
            dropped += next_user;
        };
        let new = self.keep_shared(pieces, rows)?;
        // Run what is new up to its last text; that text is the caller's to prefill.
        let (last, before) = match new.split_last() {
            Some((Piece::Tokens(ids), before)) => (ids.clone(), before),
            _ => (Vec::new(), &new[..]),
        };
        for piece in before {
            match piece {
                Piece::Tokens(ids) => {
                    self.session.prefill(ids)?;
                }
                Piece::Image(img) => {
                    self.session.prefill_embeddings(img)?;
                }
            }
        }
        Ok(Turn {
            new_tokens: last,
            total_tokens: rows,
            dropped_messages: dropped,
        })
    }

    /// The conversation's messages with their images, the system prompt first.
    fn all_messages(&self) -> Vec<(Message, Vec<ImageInput>)> {
        let system = self
            .system
            .iter()
            .map(|s| (Message::new("system", s), Vec::new()));
        let images = |i: usize| self.images.get(i).cloned().unwrap_or_default();
        system
            .chain(
                self.messages
                    .iter()
                    .enumerate()
                    .map(|(i, m)| (m.clone(), images(i))),
            )
            .collect()
    }

    /// `messages` rendered into pieces (tokens and images), and the rows they take.
    fn render(
        &self,
        tok: &Tokenizer,
        messages: &[(Message, Vec<ImageInput>)],
    ) -> Result<(Vec<Piece>, usize)> {
        let with_images = messages.iter().any(|(_, i)| !i.is_empty());
        let pieces = match (with_images, self.markers) {
            (true, Some(markers)) => {
                let counts: Vec<(Message, usize)> =
                    messages.iter().map(|(m, i)| (m.clone(), i.len())).collect();
                let all: Vec<&ImageInput> = messages.iter().flat_map(|(_, i)| i).collect();
                render_pieces(&self.template, tok, &counts, markers)?
                    .into_iter()
                    .map(|p| match p {
                        PromptPiece::Tokens(ids) => Piece::Tokens(ids),
                        PromptPiece::Image(i) => Piece::Image(all[i].clone()),
                    })
                    .collect()
            }
            _ => {
                let plain: Vec<Message> = messages.iter().map(|(m, _)| m.clone()).collect();
                vec![Piece::Tokens(self.template.prompt_ids(tok, &plain, true)?)]
            }
        };
        let rows = pieces.iter().map(Piece::rows).sum();
        Ok((pieces, rows))
    }

    /// Keep what the cache shares with the new rendering (tokens equal, images the same), never
    /// cutting an image and always re-running at least one row so the session has logits to
    /// continue from; returns the pieces after it.
    fn keep_shared(&mut self, pieces: Vec<Piece>, rows: usize) -> Result<Vec<Piece>> {
        let cached = self.session.tokens().len();
        let mut shared = 0;
        'walk: for piece in &pieces {
            match piece {
                Piece::Tokens(ids) => {
                    for &id in ids {
                        if shared >= cached
                            || self.session.image_at(shared).is_some()
                            || self.session.tokens()[shared] != id
                        {
                            break 'walk;
                        }
                        shared += 1;
                    }
                }
                Piece::Image(img) => {
                    let id = Arc::as_ptr(&img.embeddings) as usize;
                    if self.session.image_at(shared) != Some((id, 0, shared))
                        || shared + img.tokens() > cached
                    {
                        break 'walk;
                    }
                    shared += img.tokens();
                }
            }
        }
        shared = shared.min(rows - 1);
        if let Some((_, _, start)) = self.session.image_at(shared) {
            shared = start; // re-run a cut image whole
        }
        self.session.truncate(shared)?;
        // The pieces from row `shared` on (a shared run of tokens cut where the new part starts).
        let mut out = Vec::new();
        let mut at = 0;
        for piece in pieces {
            let n = piece.rows();
            if at + n <= shared {
                at += n;
                continue;
            }
            match piece {
                Piece::Tokens(ids) if at < shared => {
                    out.push(Piece::Tokens(ids[shared - at..].to_vec()))
                }
                other => out.push(other),
            }
            at += n;
        }
        Ok(out)
    }

    /// The tokens every rendering of this conversation starts with, whatever is said: the BOS
    /// token and the system prompt (or the template's own default one). What a context shift
    /// keeps in a chat.
    pub fn fixed_prefix(&self, tok: &Tokenizer) -> Result<Vec<u32>> {
        let render = |text: &str| {
            let mut messages: Vec<Message> = self
                .system
                .iter()
                .map(|s| Message::new("system", s))
                .collect();
            messages.push(Message::new("user", text));
            self.template.prompt_ids(tok, &messages, true)
        };
        let (a, b) = (render("A")?, render("B")?);
        Ok(a.iter()
            .zip(&b)
            .take_while(|(x, y)| x == y)
            .map(|(&x, _)| x)
            .collect())
    }

    /// Record the assistant's reply (what was generated, possibly cut short).
    pub fn assistant_reply(&mut self, text: &str) {
        self.messages.push(Message::new("assistant", text));
        self.images.push(Vec::new());
    }

    /// A new conversation: no messages, empty cache (the system prompt stays).
    pub fn clear(&mut self) {
        self.messages.clear();
        self.images.clear();
        self.session.reset();
    }
}
