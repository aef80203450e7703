//! The generation loop: prefill a prompt, then sample and decode until a stop rule fires — an
//! end-of-generation token, a stop string, the token limit, a full context, or cancellation.
//! Text is streamed through a callback as soon as it is complete UTF-8 and cannot be the start of
//! a stop string.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::reasoning::{ReplySplitter, Route};
use super::session::{Session, Verdict};
use super::speculative::Drafter;
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
    /// Speculative decoding: tokens drafted, and how many of them the model accepted.
    pub drafted_tokens: usize,
    pub accepted_tokens: usize,
}

pub struct GenerateOptions<'a> {
    pub rules: StopRules,
    /// Record the top-N alternatives at every step (0: none).
    pub logprobs: usize,
    /// Set from another thread (a signal handler) to stop cleanly.
    pub cancel: Option<&'a AtomicBool>,
    /// Where reasoning is streamed as it comes (None: it is only collected).
    pub on_reasoning: Option<&'a ReasoningSink<'a>>,
    /// Where each step's logprobs go as they are taken (they are collected too).
    pub on_logprobs: Option<&'a LogprobsSink<'a>>,
    /// Speculative decoding, where it applies (without logprobs); elsewhere generation runs as
    /// without it.
    pub speculation: Option<Speculation<'a>>,
}

/// A drafter and how many tokens it may propose per verify pass.
#[derive(Clone, Copy)]
pub struct Speculation<'a> {
    pub drafter: DraftSource<'a>,
    pub max_draft: usize,
    /// A shorter draft is not verified: the token is decoded alone (llama.cpp's
    /// `--spec-draft-n-min`).
    pub min_draft: usize,
    /// Benchmarking only (llama.cpp's `--spec-synth-rates`): the probability that a draft is kept
    /// up to each position, whatever the model says (token i is kept, given those before it were,
    /// with rates[i] / rates[i − 1]), so that speed can be measured at a chosen acceptance on any
    /// model; the text is not the model's. Every pass drafts as many tokens as there are rates.
    pub synthetic: Option<&'a [f64]>,
}

/// Check llama.cpp's `--spec-synth-rates`: the unconditional probabilities that a draft is kept
/// up to each position, within 0..=1 and never increasing.
pub fn check_synthetic_rates(rates: &[f64]) -> Result<()> {
    let mut prev = 1.0;
    for &r in rates {
        if !r.is_finite() || !(0.0..=1.0).contains(&r) {
            return Err(Error::Usage(format!(
                "synthetic acceptance rates must be within 0 and 1, not {r}"
            )));
        }
        if r > prev {
            return Err(Error::Usage(format!(
                "synthetic acceptance rates must not increase ({prev} then {r})"
            )));
        }
        prev = r;
    }
    Ok(())
}

/// Who drafts.
#[derive(Clone, Copy)]
pub enum DraftSource<'a> {
    /// A drafter apart from the model: the text's n-grams, a draft model.
    Drafter(&'a dyn Drafter),
    /// The model's own multi-token-prediction block, in the session (`Session::enable_mtp`),
    /// stopping where its pick is less likely than `p_min`.
    Mtp { p_min: f32 },
}

/// A callback that takes reasoning text as it is generated.
pub type ReasoningSink<'a> = dyn Fn(&str) -> Result<()> + 'a;

/// A callback that takes each step's logprobs as they are taken.
pub type LogprobsSink<'a> = dyn Fn(&StepLogprobs) + 'a;

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
        drafted_tokens: 0,
        accepted_tokens: 0,
    };
    let mut emitted = 0usize;
    // Greedy without logprobs: the backend may pick each next token where the logits live, so a
    // GPU reads back one index per token instead of the logits.
    let device_argmax = sampler.is_plain_greedy() && opts.logprobs == 0;
    let mut next: Option<u32> = None;
    // Speculation: drafted tokens the model accepted, already in the session but not yet
    // emitted, and the model's own pick after them.
    let speculation = opts
        .speculation
        .filter(|s| s.max_draft > 0 && opts.logprobs == 0);
    let mut accepted: std::collections::VecDeque<u32> = Default::default();
    let mut after_accepted: Option<u32> = None;
    // Accepted drafts in the session that generation has not yet gone past: where it stops
    // first, they leave the session, which then holds what it would without speculation.
    let mut ahead = 0usize;
    // Accepted drafts the sampler took into its history that generation has not reached: where
    // it stops first, the sampler forgets them.
    let mut unheard = 0usize;
    // Tokens to draft at the next pass (grown and shrunk by how the last one went).
    let mut draft_len = speculation.map_or(0, |s| match s.synthetic {
        Some(p) => p.len(),
        None => s.max_draft.min(4).max(s.min_draft),
    });
    let mut synthetic_rng = 0x9e37_79b9_7f4a_7c15u64;
    // After a pass that kept nothing, the next `pause` tokens decode alone, and each further
    // fruitless pass doubles the pause (up to MAX_PAUSE): a drafter that is never right costs a
    // pass in every MAX_PAUSE + 1 tokens, not one per token.
    let (mut pause, mut next_pause) = (0usize, 1usize);
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
        let from_draft = accepted.pop_front();
        let token = match from_draft.or_else(|| next.take()) {
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
            let step = StepLogprobs {
                token,
                logprob,
                top,
            };
            if let Some(f) = opts.on_logprobs {
                f(&step);
            }
            out.logprobs.push(step);
        }
        if tok.is_eog(token) {
            out.finish = FinishReason::EndOfText;
            break;
        }
        // An accepted draft is in the penalties' history already: its row was judged after it.
        if from_draft.is_some() {
            unheard -= 1;
        } else {
            sampler.accept(token);
        }
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
        if from_draft.is_some() {
            // Already in the session: the verify pass ran it.
            ahead -= 1;
            if accepted.is_empty() {
                next = after_accepted.take();
            }
            continue;
        }
        // A full context ends generation, unless the session shifts it (--context-shift).
        if !session.make_room()? {
            out.finish = FinishReason::ContextFull;
            break;
        }
        let paused = pause > 0;
        pause = pause.saturating_sub(1);
        if let Some(spec) = speculation
            && !paused
            && let Some((drafted, n, after)) = speculate(
                session,
                tok,
                sampler,
                spec,
                draft_len,
                token,
                &mut synthetic_rng,
            )?
        {
            out.drafted_tokens += drafted;
            out.accepted_tokens += n;
            if spec.synthetic.is_none() {
                (pause, next_pause) = match n {
                    0 => (next_pause, (next_pause * 2).min(MAX_PAUSE)),
                    _ => (0, 1),
                };
                // Every drafted row costs a row of the pass and of the LM head: the length
                // grows while drafts are right and falls back to what was accepted when not.
                draft_len = if n == drafted {
                    (draft_len * 2).min(spec.max_draft)
                } else {
                    (n + 1).clamp(spec.min_draft.min(spec.max_draft), spec.max_draft)
                };
            }
            ahead += n;
            unheard += n;
            let t = session.tokens();
            accepted.extend(&t[t.len() - n..]);
            if accepted.is_empty() {
                next = Some(after);
            } else {
                after_accepted = Some(after);
            }
            continue;
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
    if ahead > 0 {
        session.truncate(session.tokens().len() - ahead)?;
    }
    sampler.forget_recent(unheard);
    // A later turn that rolls back into or past this reply restarts a recurrent state here.
    session.checkpoint()?;
    Ok(out)
}

/// A uniform draw in [0, 1) from a SplitMix64 state (synthetic acceptance only).
fn uniform(state: &mut u64) -> f64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as f64 / 2f64.powi(64)
}

/// The most tokens decoded alone after fruitless speculative passes (see `generate`).
const MAX_PAUSE: usize = 16;

/// Draft up to `draft_len` tokens after `token` and verify: `token` and the draft run in one
/// pass, the rows the model rejects leave the session. Returns how many tokens were drafted, how many of them were
/// accepted (now the session's last tokens, after `token`) and the model's pick after them; None
/// when the drafter had nothing or the context has no room for the pass (the caller then decodes
/// `token` alone).
fn speculate<B: Backend>(
    session: &mut Session<B>,
    tok: &Tokenizer,
    sampler: &mut Sampler,
    spec: Speculation,
    draft_len: usize,
    token: u32,
    synthetic_rng: &mut u64,
) -> Result<Option<(usize, usize, u32)>> {
    let room = session.remaining().saturating_sub(1);
    let max = draft_len
        .min(room)
        .min(session.max_rows().saturating_sub(1));
    let mut draft = match spec.drafter {
        DraftSource::Drafter(drafter) => {
            let mut context = session.tokens().to_vec();
            context.push(token);
            drafter.draft(&context, max)?
        }
        DraftSource::Mtp { p_min } => session.draft_mtp(token, max, p_min)?,
    };
    // A draft model's vocabulary may be a little larger than the model's.
    let vocab = session.model().config.vocab_size;
    if let Some(cut) = draft.iter().position(|&t| t as usize >= vocab) {
        draft.truncate(cut);
    }
    if draft.is_empty() || draft.len() < spec.min_draft {
        return Ok(None);
    }
    let mut rows = Vec::with_capacity(draft.len() + 1);
    rows.push(token);
    rows.extend_from_slice(&draft);
    let base = session.tokens().len();
    // Greedy: the backend may pick each row's token where the logits live.
    let verdict = match sampler.is_plain_greedy() && spec.synthetic.is_none() {
        true => session.verify_argmax(&rows)?,
        false => Verdict::Logits(session.verify(&rows)?),
    };
    let (mut n, mut after) = (0, None);
    match verdict {
        // The draft is kept while it is what the model picks; the pick after it follows.
        Verdict::Picks(picks) => {
            n = draft.iter().zip(&picks).take_while(|(d, p)| d == p).count();
            draft[..n].iter().for_each(|&t| sampler.accept(t));
            after = picks.get(n).copied();
        }
        // Row i's logits judge draft[i] (after the rows before it were kept), the last row,
        // after the whole draft, gives the token that follows it.
        Verdict::Logits(logits) => {
            for (i, row) in logits.chunks_exact(vocab).enumerate() {
                let Some(&d) = draft.get(i) else {
                    after = Some(sampler.sample(row)?);
                    break;
                };
                let (token, kept) = match spec.synthetic {
                    // Never an end of text: it would end the run early.
                    Some(rates) => match uniform(synthetic_rng)
                        * if i == 0 { 1.0 } else { rates[i - 1] }
                        < rates[i]
                        && !tok.is_eog(d)
                    {
                        true => (d, true),
                        false => (sampler.sample(row)?, false),
                    },
                    None => sampler.sample_draft(row, d)?,
                };
                if !kept {
                    after = Some(token);
                    break;
                }
                sampler.accept(token);
                n += 1;
            }
        }
    }
    let after = after.ok_or(Error::EmptyPrompt)?;
    if let DraftSource::Drafter(d) = spec.drafter {
        d.accepted(n);
    }
    session.truncate(base + 1 + n)?;
    session.stats.decode_tokens += 1 + n;
    Ok(Some((draft.len(), n, after)))
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
