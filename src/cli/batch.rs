//! `kiln run --batch FILE|-`: many requests in one process. Each input line is a JSON request
//! (OpenAI's chat/completions field names where they exist: `prompt` or `messages`, `system`,
//! `max_tokens`, `temperature`, `top_p`, `top_k`, `min_p`, `seed`, `stop`, penalties,
//! `json_schema`, `response_format`, plus kiln's `regex` and `grammar`; a message's `content` may be
//! OpenAI's parts, text and `image_url` — a `data:` URL or a local path — with `--mmproj` or the
//! projector beside the model); each output line is the
//! object `kiln run --format json` prints, with the request's `id`, in input order. Flags on the
//! command line are the defaults every request can override. `seed` and `repeat_last_n` take -1
//! as llama.cpp's server does (a random seed, the whole context; see `values.rs`).
//!
//! The request's fields and how one runs are `requests.rs`'s (`kiln serve` runs them too).
//! The model is loaded once and one KV cache serves every request: the tokens a request shares
//! with what the cache holds (a common system prompt) are not prefilled again
//! (`cached_prompt_tokens` in its result). A bad line (not JSON, an unknown field, a prompt longer
//! than the context, a schema that does not compile) gives an error object for that line and the
//! run goes on; the exit code is then 1. Ctrl-C stops after the lines already finished (and the
//! interrupted one, marked `interrupted`), with exit code 130.

use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::process::ExitCode;
use std::sync::atomic::Ordering;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::output::{cancel_flag, install_interrupt_handler};
use super::requests::{Defaults, Follow, Outcome, Request, Runner};
use super::{AnyLoaded, Loaded, RunArgs, error_message, load_with_draft, on_backend};
use crate::backend::Backend;
use crate::model::generate::FinishReason;
use crate::sampler::ConstraintSpec;

/// The longest input line read (a request with a long prompt fits many times over).
const MAX_LINE_BYTES: u64 = 16 << 20;

pub fn run(args: RunArgs) -> Result<ExitCode> {
    let source = args.batch.clone().unwrap_or_default();
    if !args.vision.images.is_empty() {
        bail!(
            "--image does not apply to --batch: give each request its images as image_url \
             content parts"
        );
    }
    // Flag values are checked before the model loads.
    args.sampling.validate()?;
    args.speculation.validate()?;
    let default_constraint = args.constraint.spec()?;
    let tool_flags = args.tool_flags()?;
    let input: Box<dyn Read> = if source == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(std::fs::File::open(&source).with_context(|| format!("opening {source}"))?)
    };
    let total_lines = (source != "-")
        .then(|| std::fs::read(&source).ok())
        .flatten()
        .map(|b| {
            b.split(|&c| c == b'\n')
                .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
                .count()
        });
    let (loaded, draft) = load_with_draft(
        &args.model,
        &args.backend,
        args.ctx_size,
        &args.cache,
        &args.speculation,
    )?;
    on_backend!(loaded, loaded => run_batch(&args, input, total_lines, default_constraint.as_ref(), &tool_flags, loaded, draft.as_ref()))
}

fn run_batch<B: Backend>(
    args: &RunArgs,
    input: Box<dyn Read>,
    total_lines: Option<usize>,
    default_constraint: Option<&ConstraintSpec>,
    (tools, tool_choice): &(Option<Value>, Option<Value>),
    loaded: Loaded<B>,
    draft: Option<&AnyLoaded>,
) -> Result<ExitCode> {
    let defaults = Defaults {
        sampling: &args.sampling,
        max_tokens: args.max_tokens,
        stop: &args.stop,
        system: args.system.as_deref(),
        chat: args.chat
            || args.system.is_some()
            || (!args.raw && loaded.tokenizer.chat_template.is_some()),
        constraint: default_constraint,
        speculation: &args.speculation,
        vision: &args.vision,
        tools: tools.as_ref(),
        tool_choice: tool_choice.as_ref(),
    };
    let mut runner = Runner::new(
        defaults,
        &loaded,
        args.ctx_size,
        &args.cache,
        args.chat_template_kwargs.clone(),
        draft,
    )?;
    install_interrupt_handler(true);

    let progress = if std::io::stderr().is_terminal() {
        let bar = match total_lines {
            Some(n) => indicatif::ProgressBar::new(n as u64),
            None => indicatif::ProgressBar::new_spinner(),
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} requests ({per_sec})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };

    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut reader = BufReader::new(input);
    let mut failed = 0usize;
    let mut requests = 0usize;
    let mut line_no = 0usize;
    let mut buf = Vec::new();
    loop {
        if cancel_flag().load(Ordering::SeqCst) {
            break;
        }
        buf.clear();
        let n = (&mut reader)
            .take(MAX_LINE_BYTES + 1)
            .read_until(b'\n', &mut buf)
            .context("reading the batch input")?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let too_long = buf.len() as u64 > MAX_LINE_BYTES;
        if too_long && !buf.ends_with(b"\n") {
            skip_line(&mut reader).context("reading the batch input")?;
        }
        let text = String::from_utf8_lossy(&buf);
        if text.trim().is_empty() {
            continue;
        }
        requests += 1;
        let (id, result) = if too_long {
            (
                json!(line_no),
                Err(anyhow::anyhow!(
                    "the line is longer than {MAX_LINE_BYTES} bytes"
                )),
            )
        } else {
            match serde_json::from_str::<Request>(text.trim()) {
                Ok(req) => {
                    let id = req.id.clone().unwrap_or(json!(line_no));
                    let follow = Follow {
                        on_text: &mut |_| {},
                        on_reasoning: None,
                        cancel: cancel_flag(),
                        logprobs: 0,
                    };
                    (id, runner.request(&req, follow))
                }
                Err(e) => {
                    let id = serde_json::from_str::<Value>(text.trim())
                        .ok()
                        .and_then(|v| v.get("id").cloned())
                        .unwrap_or(json!(line_no));
                    (id, Err(anyhow::anyhow!("not a valid request: {e}")))
                }
            }
        };
        let (line, interrupted) = match result {
            Ok(Outcome {
                json: mut v,
                generation,
                ..
            }) => {
                // The id first, for readers that look at the start of a line.
                let mut with_id = serde_json::Map::new();
                with_id.insert("id".to_string(), id);
                if let Value::Object(map) = &mut v {
                    with_id.append(map);
                }
                (
                    Value::Object(with_id),
                    generation.finish == FinishReason::Interrupted,
                )
            }
            Err(e) => {
                failed += 1;
                (
                    json!({ "id": id, "line": line_no, "error": error_message(&e) }),
                    false,
                )
            }
        };
        progress.suspend(|| -> Result<()> {
            writeln!(out, "{line}")?;
            out.flush()?;
            Ok(())
        })?;
        progress.inc(1);
        if interrupted {
            break;
        }
    }
    progress.finish_and_clear();
    if cancel_flag().load(Ordering::SeqCst) {
        return Ok(ExitCode::from(130));
    }
    if failed > 0 {
        eprintln!("{failed} of {requests} requests failed");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// Skip the rest of an overlong line without holding it.
fn skip_line(reader: &mut impl BufRead) -> std::io::Result<()> {
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        if let Some(p) = buf.iter().position(|&b| b == b'\n') {
            reader.consume(p + 1);
            return Ok(());
        }
        let n = buf.len();
        reader.consume(n);
    }
}
