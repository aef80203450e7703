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
use crate::model::generate::{FinishReason, Generation};
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

/// Run jobs until the queue closes (the HTTP side has shut down), each on the first free slot
/// (a runner on a thread of its own; with several, their forward calls batched together). Of the
/// free slots, a job goes to the one whose last request shares the longest start with it, whose
/// KV cache likely holds most of its prompt (llama-server's slot similarity). A job that panics
/// (a bug, never meant to happen) fails with a 500 instead of taking the server down; its slot's
/// session, which it may have left half-updated, starts afresh.
pub fn serve<B: Backend>(runners: Vec<Runner<'_, '_, B>>, jobs: Receiver<Job>) {
    let (free, freed) = std::sync::mpsc::channel::<usize>();
    std::thread::scope(|scope| {
        let mut slots = Vec::with_capacity(runners.len());
        for (index, mut runner) in runners.into_iter().enumerate() {
            let (give, take) = std::sync::mpsc::sync_channel::<Job>(1);
            let free = free.clone();
            scope.spawn(move || {
                for job in take {
                    run_guarded(&mut runner, &job, index);
                    if free.send(index).is_err() {
                        return;
                    }
                }
            });
            slots.push((give, String::new()));
        }
        let mut idle: Vec<usize> = (0..slots.len()).collect();
        while let Ok(job) = jobs.recv() {
            if idle.is_empty() {
                match freed.recv() {
                    Ok(i) => idle.push(i),
                    Err(_) => return,
                }
            }
            idle.extend(freed.try_iter());
            let key = prefix_key(&job.request);
            let best = (0..idle.len())
                .max_by_key(|&k| common_prefix(&slots[idle[k]].1, &key))
                .unwrap_or(0);
            let slot = idle.swap_remove(best);
            slots[slot].1 = key;
            if slots[slot].0.send(job).is_err() {
                return;
            }
        }
        // Dropping the slots' senders ends their threads once their jobs are done.
    });
}

/// What a request's prompt starts with, to match it with a slot's last one.
fn prefix_key(r: &Request) -> String {
    format!(
        "{:?}{:?}{:?}{:?}",
        r.system, r.messages, r.prompt, r.prompt_tokens
    )
}

fn common_prefix(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

fn run_guarded<B: Backend>(runner: &mut Runner<'_, '_, B>, job: &Job, slot: usize) {
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_job(runner, job, slot)));
    if ran.is_err() {
        runner.reset();
        let _ = job.events.send(Event::Done {
            choice: 0,
            result: Err("internal error: the generation failed (see the server's log)".into()),
        });
        eprintln!(
            "{} (slot {slot}): failed with an internal error; the slot's KV cache was cleared",
            job.id
        );
    }
}

fn run_job<B: Backend>(runner: &mut Runner<'_, '_, B>, job: &Job, slot: usize) {
    let waited = job.queued.elapsed();
    let mut generated = 0;
    let mut prompt = (0, 0);
    let mut error = None;
    let mut cancelled = false;
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
        let follow = Follow {
            on_text: &mut on_text,
            on_reasoning: Some(&on_reasoning),
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
        let _ = job.events.send(Event::Done { choice, result });
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
}
