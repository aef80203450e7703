//! The server's engine: slots, each a runner with a session of its own on a thread of its own, run
//! the requests the HTTP side queues, streaming each one's text back as it comes; with several
//! slots their forward calls run together (continuous batching, `model::batcher`). A request whose
//! client went away (its `cancel` set) stops at the next token, or is skipped if still queued.
//! Every request reuses what its slot's KV cache shares with its prompt (`requests.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::time::Instant;

use tokio::sync::mpsc::UnboundedSender;

use super::super::error_message;
use super::super::requests::{Follow, Request, Runner};
use super::super::values::Seed;
use crate::backend::Backend;
use crate::model::generate::{FinishReason, Generation, LogprobsSink, StepLogprobs};
use crate::model::tools::ToolCall;

/// One queued request.
pub struct Job {
    /// For the log line: `chatcmpl-7`, `cmpl-8`.
    pub id: String,
    pub request: Request,
    pub choices: usize,
    pub top_logprobs: usize,
    /// Set when the client goes away.
    pub cancel: Arc<AtomicBool>,
    pub events: UnboundedSender<Event>,
    pub queued: Instant,
}

/// What the engine reports of a job, in order: text and reasoning as they come, then each
/// choice's end.
pub enum Event {
    Text {
        choice: usize,
        text: String,
    },
    Reasoning {
        choice: usize,
        text: String,
    },
    /// A step's logprobs, as it is taken (with `logprobs` asked).
    Logprobs {
        choice: usize,
        step: StepLogprobs,
    },
    Done {
        choice: usize,
        result: Result<Box<Finished>, String>,
    },
}

/// A finished choice.
pub struct Finished {
    pub generation: Generation,
    /// The reply's text without its tool calls, and the calls.
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    pub prompt_rows: usize,
    pub cached_rows: usize,
}

/// Run jobs until the queue closes (the HTTP side has shut down), each on a free slot (a runner
/// on a thread of its own; with several, their forward calls batched together). A job that
/// continues a free slot's last request (a conversation's next turn: that request's prompt is the
/// start of this one's) goes to that slot, whose KV cache holds it; any other to the free slot
/// used least recently. A job that panics (a bug, never meant to happen) fails with a 500 instead
/// of taking the server down; its slot's session, which it may have left half-updated, starts
/// afresh.
pub fn serve<B: Backend>(runners: Vec<Runner<'_, '_, B>>, jobs: Receiver<Job>) {
    let (free, freed) = std::sync::mpsc::channel::<usize>();
    std::thread::scope(|scope| {
        let mut slots = Vec::with_capacity(runners.len());
        for (index, mut runner) in runners.into_iter().enumerate() {
            let (give, take) = std::sync::mpsc::sync_channel::<Job>(1);
            let free = free.clone();
            scope.spawn(move || {
                for job in take {
                    let last = run_guarded(&mut runner, &job, index);
                    // Free before the reply ends: a client's next turn, sent the moment it has
                    // this one, then finds this slot free (its cache holds the conversation).
                    let stop = free.send(index).is_err();
                    let _ = job.events.send(last);
                    if stop {
                        return;
                    }
                }
            });
            slots.push(Slot {
                give,
                key: String::new(),
                last_used: 0,
            });
        }
        let mut idle: Vec<usize> = (0..slots.len()).collect();
        let mut clock = 0u64;
        while let Ok(job) = jobs.recv() {
            if idle.is_empty() {
                match freed.recv() {
                    Ok(i) => idle.push(i),
                    Err(_) => return,
                }
            }
            idle.extend(freed.try_iter());
            let key = prefix_key(&job.request);
            let continued = (0..idle.len())
                .filter(|&k| !slots[idle[k]].key.is_empty() && key.starts_with(&slots[idle[k]].key))
                .max_by_key(|&k| slots[idle[k]].key.len());
            let pick = continued
                .or_else(|| (0..idle.len()).min_by_key(|&k| slots[idle[k]].last_used))
                .unwrap_or(0);
            let slot = &mut slots[idle.swap_remove(pick)];
            clock += 1;
            slot.key = key;
            slot.last_used = clock;
            if slot.give.send(job).is_err() {
                return;
            }
        }
        // Dropping the slots' senders ends their threads once their jobs are done.
    });
}

/// A slot as the dispatcher sees it.
struct Slot {
    give: std::sync::mpsc::SyncSender<Job>,
    /// Its last request's `prefix_key`.
    key: String,
    /// When it last took a job (0: never).
    last_used: u64,
}

/// A request's prompt as text that a later turn of the same conversation starts with: each
/// message's role, content and calls, then a raw prompt or its token ids (its first
/// `PREFIX_KEY_BYTES`: enough to tell conversations apart, without keeping images' data URLs).
fn prefix_key(r: &Request) -> String {
    use std::fmt::Write;
    let mut key = format!("{:?}\u{2}", r.system);
    for m in r.messages.iter().flatten() {
        let _ = write!(
            key,
            "{}\u{1}{:?}\u{1}{:?}\u{2}",
            m.role, m.content, m.tool_calls
        );
    }
    key.push_str(r.prompt.as_deref().unwrap_or(""));
    for t in r.prompt_tokens.iter().flatten() {
        let _ = write!(key, "{t},");
    }
    if key.len() > PREFIX_KEY_BYTES {
        let mut cut = PREFIX_KEY_BYTES;
        while !key.is_char_boundary(cut) {
            cut -= 1;
        }
        key.truncate(cut);
    }
    key
}

const PREFIX_KEY_BYTES: usize = 64 << 10;

/// Run `job`; returns its last event (its last choice's end), not yet sent.
fn run_guarded<B: Backend>(runner: &mut Runner<'_, '_, B>, job: &Job, slot: usize) -> Event {
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_job(runner, job, slot)));
    ran.unwrap_or_else(|_| {
        runner.reset();
        eprintln!(
            "{}: failed with an internal error; the slot's KV cache was cleared (slot {slot})",
            job.id
        );
        Event::Done {
            choice: 0,
            result: Err("internal error: the generation failed (see the server's log)".into()),
        }
    })
}

/// Run `job`'s choices, sending their events; returns the last one, the last choice's end.
fn run_job<B: Backend>(runner: &mut Runner<'_, '_, B>, job: &Job, slot: usize) -> Event {
    let waited = job.queued.elapsed();
    let mut generated = 0;
    let mut prompt = (0, 0);
    let mut error = None;
    let mut cancelled = false;
    let mut last = None;
    for choice in 0..job.choices {
        if job.cancel.load(Ordering::Relaxed) {
            cancelled = true;
            break;
        }
        let mut request = job.request.clone();
        // Each further choice samples with the next seed: n choices of one seed differ, and the
        // same request gives the same choices again.
        if choice > 0
            && let Some(Seed::Fixed(s)) = request.seed
        {
            request.seed = Some(Seed::Fixed(s.wrapping_add(choice as u64)));
        }
        let events = &job.events;
        let mut on_text = |text: &str| {
            let _ = events.send(Event::Text {
                choice,
                text: text.to_string(),
            });
        };
        let on_reasoning = |text: &str| {
            let _ = events.send(Event::Reasoning {
                choice,
                text: text.to_string(),
            });
            Ok(())
        };
        let on_logprobs = |step: &StepLogprobs| {
            let _ = events.send(Event::Logprobs {
                choice,
                step: step.clone(),
            });
        };
        let follow = Follow {
            on_text: &mut on_text,
            on_reasoning: Some(&on_reasoning),
            on_logprobs: (job.top_logprobs > 0).then_some(&on_logprobs as &LogprobsSink),
            cancel: &job.cancel,
            logprobs: job.top_logprobs,
        };
        let result = match runner.request(&request, follow) {
            Ok(outcome) => {
                generated += outcome.generation.tokens.len();
                cancelled |= outcome.generation.finish == FinishReason::Interrupted;
                prompt = (outcome.prompt_rows, outcome.cached_rows);
                Ok(Box::new(Finished {
                    generation: outcome.generation,
                    content: outcome.content,
                    tool_calls: outcome.tool_calls,
                    prompt_rows: outcome.prompt_rows,
                    cached_rows: outcome.cached_rows,
                }))
            }
            Err(e) => {
                let message = error_message(&e);
                error = Some(message.clone());
                Err(message)
            }
        };
        let failed = result.is_err();
        if let Some(done) = last.replace(Event::Done { choice, result }) {
            let _ = job.events.send(done);
        }
        if failed {
            break;
        }
    }
    let state = match (&error, cancelled) {
        (Some(e), _) => format!("failed: {e}"),
        (None, true) => "cancelled (the client went away)".to_string(),
        (None, false) => "done".to_string(),
    };
    eprintln!(
        "{}: {} prompt tokens ({} cached), {generated} generated, queued {:.0} ms, ran {:.0} ms, {state} (slot {slot})",
        job.id,
        prompt.0,
        prompt.1,
        waited.as_secs_f64() * 1e3,
        (job.queued.elapsed() - waited).as_secs_f64() * 1e3,
    );
    // A job cancelled before its first choice ends with nobody listening.
    last.unwrap_or(Event::Done {
        choice: 0,
        result: Err("cancelled".into()),
    })
}
