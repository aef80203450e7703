//! What `run` and its batch mode share besides their flags: the Ctrl-C flag that stops
//! generation, and the JSON object `--format json` prints for a generation (batch mode prints one
//! per request). `chat` uses the Ctrl-C flag too.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;

use super::Loaded;
use crate::backend::Backend;
use crate::model::generate::Generation;
use crate::sampler::Sampler;

/// Set by Ctrl-C.
static CANCEL: AtomicBool = AtomicBool::new(false);

/// Route Ctrl-C to `cancel_flag()`. With `exit_on_second`, a Ctrl-C while the flag is still set
/// (generation has not stopped yet) exits at once with 130.
pub fn install_interrupt_handler(exit_on_second: bool) {
    static INSTALLED: AtomicBool = AtomicBool::new(false);
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return;
    }
    let _ = ctrlc::set_handler(move || {
        if CANCEL.swap(true, Ordering::SeqCst) && exit_on_second {
            std::process::exit(130);
        }
    });
}

pub fn cancel_flag() -> &'static AtomicBool {
    &CANCEL
}

pub fn per_s(n: usize, t: Duration) -> f64 {
    n as f64 / t.as_secs_f64().max(1e-9)
}

/// The object `--format json` prints for a generation (batch mode prints one per request).
pub fn result_json<B: Backend>(
    loaded: &Loaded<B>,
    result: &Generation,
    sampler: &Sampler,
    with_logprobs: bool,
) -> serde_json::Value {
    let tok = &loaded.tokenizer;
    let piece = |id: u32| tok.decode(&[id], false).unwrap_or_default();
    let logprobs: Vec<serde_json::Value> = result
        .logprobs
        .iter()
        .map(|s| {
            json!({
                "id": s.token,
                "text": piece(s.token),
                "logprob": s.logprob,
                "top": s.top.iter().map(|&(id, logit, logprob)| json!({
                    "id": id, "text": piece(id), "logit": logit, "logprob": logprob,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let mut v = json!({
        "model": loaded.file.display_name(),
        "text": result.text,
        "tokens": result.tokens,
        "finish_reason": result.finish.as_str(),
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.tokens.len(),
        "seed": sampler.config.seed,
        "timings": {
            "load_ms": loaded.load_time.as_secs_f64() * 1e3,
            "prefill_ms": result.prefill_time.as_secs_f64() * 1e3,
            "decode_ms": result.decode_time.as_secs_f64() * 1e3,
            "prefill_tokens_per_s": per_s(result.prompt_tokens, result.prefill_time),
            "decode_tokens_per_s": per_s(result.tokens.len(), result.decode_time),
        },
    });
    if !result.reasoning.is_empty() {
        v["reasoning"] = json!(result.reasoning);
    }
    if with_logprobs {
        v["logprobs"] = serde_json::Value::Array(logprobs);
    }
    if result.drafted_tokens > 0 {
        v["timings"]["draft_tokens"] = json!(result.drafted_tokens);
        v["timings"]["draft_accepted"] = json!(result.accepted_tokens);
    }
    if let Some(c) = sampler.constraint() {
        v["timings"]["mask_ms"] = json!(c.stats.mask_time.as_secs_f64() * 1e3);
    }
    v
}
