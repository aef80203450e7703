//! The server's engine: the thread that owns the model's session and runs the requests the HTTP
//! side queues, one after another, streaming each one's text back as it comes. A request whose
//! client went away (its `cancel` set) stops at the next token, or is skipped if still queued.
//! Every request reuses what the KV cache shares with its prompt (`requests.rs`).

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

/// Run jobs until the queue closes (the HTTP side has shut down). A job that panics (a bug,
/// never meant to happen) fails with a 500 instead of taking the server down; the session, which
/// it may have left half-updated, starts afresh.
pub fn serve<B: Backend>(runner: &mut Runner<'_, '_, B>, jobs: Receiver<Job>) {
    while let Ok(job) = jobs.recv() {
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_job(runner, &job)));
        if ran.is_err() {
            runner.reset();
            let _ = job.events.send(Event::Done {
                choice: 0,
                result: Err("internal error: the generation failed (see the server's log)".into()),
            });
            eprintln!(
                "{}: failed with an internal error; the KV cache was cleared",
                job.id
            );
        }
    }
}

fn run_job<B: Backend>(runner: &mut Runner<'_, '_, B>, job: &Job) {
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
        "{}: {} prompt tokens ({} cached), {generated} generated, queued {:.0} ms, ran {:.0} ms, {state}",
        job.id,
        prompt.0,
        prompt.1,
        waited.as_secs_f64() * 1e3,
        (job.queued.elapsed() - waited).as_secs_f64() * 1e3,
    );
}
