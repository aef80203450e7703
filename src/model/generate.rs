//! The generation loop: prefill a prompt, then sample and decode until a stop rule fires — an
//! end-of-generation token, a stop string, the token limit, a full context, or cancellation.
//! Text is streamed through a callback as soon as it is complete UTF-8 and cannot be the start of
//! a stop string.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::reasoning::{ReplySplitter, Route};
use super::session::Session;
use super::tokenizer::Tokenizer;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::sampler::{Sampler, top_logprobs};

#[derive(Debug, Clone, Default)]
pub struct StopRules {
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Generation ends when the text contains one of these (it is not included).
    pub stop_strings: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// The model produced an end-of-generation token.
    EndOfText,
    /// A stop string appeared.
    StopString,
    /// `max_tokens` were generated.
    Length,
    /// The context is full.
    ContextFull,
    /// Cancelled (Ctrl-C).
    Interrupted,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::EndOfText => "stop",
            FinishReason::StopString => "stop_string",
            FinishReason::Length => "length",
            FinishReason::ContextFull => "context_full",
            FinishReason::Interrupted => "interrupted",
        }
    }
}

/// The top-N alternatives at one generated step.
#[derive(Debug, Clone)]
pub struct StepLogprobs {
    pub token: u32,
    pub logprob: f32,
    /// (id, logit, logprob), most likely first.
    pub top: Vec<(u32, f32, f32)>,
}

#[derive(Debug, Clone)]
pub struct Generation {
    pub tokens: Vec<u32>,
    /// The answer: the reply without its reasoning and format markup.
    pub text: String,
    /// The reasoning (gpt-oss's analysis channel, `<think>…</think>`), when the model reasoned.
    pub reasoning: String,
    pub finish: FinishReason,
    pub prompt_tokens: usize,
    pub prefill_time: Duration,
    pub decode_time: Duration,
    pub logprobs: Vec<StepLogprobs>,
}

pub struct GenerateOptions<'a> {
    pub rules: StopRules,
    /// Record the top-N alternatives at every step (0: none).
    pub logprobs: usize,
    /// Set from another thread (a signal handler) to stop cleanly.
    pub cancel: Option<&'a AtomicBool>,
    /// Where reasoning is streamed as it comes (None: it is only collected).
    pub on_reasoning: Option<&'a ReasoningSink<'a>>,
}

/// A callback that takes reasoning text as it is generated.
pub type ReasoningSink<'a> = dyn Fn(&str) -> Result<()> + 'a;

/// Run `prompt` after what `session` already holds and generate a reply. `prompt` may be empty
/// when the session's last call left logits to continue from. The answer streams through
/// `on_text`, stop strings apply to it; reasoning goes to `opts.on_reasoning` and
/// `Generation::reasoning` (reasoning.rs tells them apart).
pub fn generate<B: Backend>(
    session: &mut Session<B>,
    tok: &Tokenizer,
    sampler: &mut Sampler,
    prompt: &[u32],
    opts: &GenerateOptions,
    mut on_text: impl FnMut(&str) -> Result<()>,
) -> Result<Generation> {
    let cancelled = || opts.cancel.is_some_and(|c| c.load(Ordering::Relaxed));
    let t0 = Instant::now();
    let mut logits: Vec<f32> = if prompt.is_empty() {
        session.logits().ok_or(Error::EmptyPrompt)?.to_vec()
    } else {
        session.prefill(prompt)?.to_vec()
    };
    let prefill_time = t0.elapsed();
    for &t in prompt {
        sampler.accept(t);
    }

    let mut stream = tok.stream(session.tokens(), true);
    let mut reasoning_stream = tok.stream(&[], true);
    let mut splitter = ReplySplitter::new(tok, session.tokens());
    let mut out = Generation {
        tokens: Vec::new(),
        text: String::new(),
        reasoning: String::new(),
        finish: FinishReason::Length,
        prompt_tokens: prompt.len(),
        prefill_time,
        decode_time: Duration::ZERO,
        logprobs: Vec::new(),
    };
    let mut emitted = 0usize;
    // Greedy without logprobs: the backend may pick each next token where the logits live, so a
    // GPU reads back one index per token instead of the logits.
    let device_argmax = sampler.is_plain_greedy() && opts.logprobs == 0;
    let mut next: Option<u32> = None;
    let t1 = Instant::now();
    let stops = &opts.rules.stop_strings;

    loop {
        if cancelled() {
            out.finish = FinishReason::Interrupted;
            break;
        }
        if out.tokens.len() >= opts.rules.max_tokens {
            out.finish = FinishReason::Length;
            break;
        }
        let token = match next.take() {
            Some(t) => t,
            None => sampler.sample(&logits)?,
        };
        if opts.logprobs > 0 {
            let top = top_logprobs(&logits, opts.logprobs);
            let logprob = top
                .iter()
                .find(|t| t.0 == token)
                .map(|t| t.2)
                .unwrap_or_else(|| top_logprobs_of(&logits, token));
            out.logprobs.push(StepLogprobs {
                token,
                logprob,
                top,
            });
        }
        if tok.is_eog(token) {
            out.finish = FinishReason::EndOfText;
            break;
        }
        sampler.accept(token);
        out.tokens.push(token);
        let route = splitter.route(tok, token);
        if route == Route::Reasoning
            && let Some(piece) = reasoning_stream.push(tok, token)?
        {
            out.reasoning.push_str(&piece);
            if let Some(f) = opts.on_reasoning {
                f(&piece)?;
            }
        }
        // Markup and reasoning are not the answer's text.
        if route == Route::Answer
            && let Some(piece) = stream.push(tok, token)?
        {
            // An answer after reasoning starts at its first word (`</think>` is followed by
            // blank lines).
            let piece = match out.text.is_empty() && !out.reasoning.is_empty() {
                true => piece.trim_start(),
                false => &piece,
            };
            out.text.push_str(piece);
            if let Some(cut) = find_stop(&out.text, stops, emitted) {
                out.text.truncate(cut);
                on_text(&out.text[emitted..])?;
                emitted = out.text.len();
                out.finish = FinishReason::StopString;
                break;
            }
            let safe = out.text.len() - held_back(&out.text, stops);
            if safe > emitted {
                on_text(&out.text[emitted..safe])?;
                emitted = safe;
            }
        }
        if out.tokens.len() >= opts.rules.max_tokens {
            out.finish = FinishReason::Length;
            break;
        }
        // A full context ends generation, unless the session shifts it (--context-shift).
        if !session.make_room()? {
            out.finish = FinishReason::ContextFull;
            break;
        }
        if device_argmax {
            next = session.decode_argmax(token)?;
            if next.is_none() {
                logits = session.logits().ok_or(Error::EmptyPrompt)?.to_vec();
            }
        } else {
            logits = session.decode(token)?.to_vec();
        }
    }

    let rest = reasoning_stream.finish(tok)?;
    if !rest.is_empty() {
        out.reasoning.push_str(&rest);
        if let Some(f) = opts.on_reasoning {
            f(&rest)?;
        }
    }
    if out.finish != FinishReason::StopString {
        out.text.push_str(&stream.finish(tok)?);
        if emitted < out.text.len() {
            on_text(&out.text[emitted..])?;
        }
    }
    out.decode_time = t1.elapsed();
    // A later turn that rolls back into or past this reply restarts a recurrent state here.
    session.checkpoint()?;
    Ok(out)
}

fn top_logprobs_of(logits: &[f32], token: u32) -> f32 {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &l| m.max(l));
    let lse = logits
        .iter()
        .map(|&l| ((l - max) as f64).exp())
        .sum::<f64>()
        .ln() as f32
        + max;
    logits[token as usize] - lse
}

/// Where the earliest stop string starts. Text before `emitted` cannot hold the start of one:
/// any possible beginning of a stop string was held back rather than emitted.
fn find_stop(text: &str, stops: &[String], emitted: usize) -> Option<usize> {
    stops
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| text[emitted..].find(s.as_str()).map(|p| emitted + p))
        .min()
}

/// Bytes at the end of `text` that might be the beginning of a stop string, so not yet shown.
fn held_back(text: &str, stops: &[String]) -> usize {
    let mut hold = 0;
    for s in stops {
        for (i, _) in s.char_indices().skip(1) {
            if text.ends_with(&s[..i]) {
                hold = hold.max(i);
            }
        }
    }
    hold
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_strings_are_found_and_prefixes_held_back() {
        let stops = vec!["</s>".to_string(), "\n\n".to_string()];
        assert_eq!(find_stop("hello </s> x", &stops, 0), Some(6));
        assert_eq!(find_stop("a\n\nb</s>", &stops, 0), Some(1));
        assert_eq!(find_stop("hello", &stops, 0), None);
        assert_eq!(held_back("hello </", &stops), 2);
        assert_eq!(held_back("hello\n", &stops), 1);
        assert_eq!(held_back("hello", &stops), 0);
    }
}
