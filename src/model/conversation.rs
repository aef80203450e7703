//! A multi-turn conversation over one session: the messages, rendered through the chat template,
//! and a KV cache that carries across turns. Each new turn renders the whole conversation, keeps
//! the cached tokens it shares with it, and prefills only the rest — what the template adds for
//! the new message. When a turn will not fit, the oldest turns are dropped (the system prompt
//! stays) and the caller is told how many.

use super::chat::{ChatTemplate, Message};
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
}

/// What preparing a turn did.
#[derive(Debug, Clone)]
pub struct Turn {
    /// Tokens to prefill: the part of the rendered conversation not already cached.
    pub new_tokens: Vec<u32>,
    /// Tokens of the whole rendered conversation.
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
        }
    }

    fn all_messages(&self) -> Vec<Message> {
        let mut all = Vec::with_capacity(self.messages.len() + 1);
        if let Some(s) = &self.system {
            all.push(Message::new("system", s));
        }
        all.extend(self.messages.iter().cloned());
        all
    }

    /// Add a user message and bring the KV cache in line with the rendered conversation, leaving
    /// room for `reserve` reply tokens. On error the message is not added.
    pub fn user_turn(&mut self, tok: &Tokenizer, text: &str, reserve: usize) -> Result<Turn> {
        let ctx = self.session.ctx();
        // A message that cannot fit even alone is refused before any history is dropped.
        let mut alone: Vec<Message> = self
            .system
            .iter()
            .map(|s| Message::new("system", s))
            .collect();
        alone.push(Message::new("user", text));
        let needed = self.template.prompt_ids(tok, &alone, true)?.len() + reserve;
        if needed > ctx {
            return Err(Error::ContextFull { needed, ctx });
        }
        self.messages.push(Message::new("user", text));
        let mut dropped = 0;
        let ids = loop {
            let ids = match self.template.prompt_ids(tok, &self.all_messages(), true) {
                Ok(ids) => ids,
                Err(e) => {
                    self.messages.pop();
                    return Err(e);
                }
            };
            if ids.len() + reserve <= ctx {
                break ids;
            }
            // Drop the oldest exchange: everything up to the next user message. (The new message
            // alone fits, so this ends before it.)
            let next_user = self.messages[1..]
                .iter()
                .position(|m| m.role == "user")
                .map_or(self.messages.len() - 1, |p| p + 1);
            self.messages.drain(..next_user);
            dropped += next_user;
        };

        // Keep what the cache shares with the new rendering; always re-run at least one token so
        // the session has logits to continue from.
        let cached = self.session.tokens();
        let shared = cached
            .iter()
            .zip(&ids)
            .take_while(|(a, b)| a == b)
            .count()
            .min(ids.len() - 1);
        self.session.truncate(shared)?;
        Ok(Turn {
            new_tokens: ids[shared..].to_vec(),
            total_tokens: ids.len(),
            dropped_messages: dropped,
        })
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
    }

    /// A new conversation: no messages, empty cache (the system prompt stays).
    pub fn clear(&mut self) {
        self.messages.clear();
        self.session.reset();
    }
}
