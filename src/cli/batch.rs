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
use crate::model::batcher::Batcher;
use crate::model::generate::FinishReason;
use crate::model::session::DEFAULT_BATCH;
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
    // By default no more sequences (each with a KV cache of its own) than the file has lines.
    let parallel = match (args.parallel, total_lines) {
        (None, Some(lines)) => args.speculation.parallel(None).min(lines.max(1)),
        (given, _) => args.speculation.parallel(given),
    };
    let new_runner = |batcher| {
        Runner::new(
            defaults,
            &loaded,
            args.ctx_size,
            &args.cache,
            args.chat_template_kwargs.clone(),
            draft,
            batcher,
        )
    };
    let mut out = Output::new(total_lines);
    let mut lines = Lines::new(input);
    if parallel == 1 {
        let mut runner = new_runner(None)?;
        install_interrupt_handler(true);
        while let Some(item) = lines.next_item()? {
            let (line, interrupted) = run_item(&mut runner, item);
            out.write(line)?;
            if interrupted || cancel_flag().load(Ordering::SeqCst) {
                break;
            }
        }
    } else {
        let batcher = Batcher::new(&loaded.model, DEFAULT_BATCH)?;
        let runners = (0..parallel)
            .map(|_| new_runner(Some(&batcher)))
            .collect::<Result<Vec<_>>>()?;
        install_interrupt_handler(true);
        run_parallel(runners, &mut lines, &mut out)?;
    }
    out.finish()
}

/// One request of the input, read and parsed.
struct Item {
    line_no: usize,
    id: Value,
    request: Result<Request>,
}

/// The input's requests, a line at a time.
struct Lines {
    reader: BufReader<Box<dyn Read>>,
    line_no: usize,
    buf: Vec<u8>,
}

impl Lines {
    fn new(input: Box<dyn Read>) -> Lines {
        Lines {
            reader: BufReader::new(input),
            line_no: 0,
            buf: Vec::new(),
        }
    }

    /// The next request (None at the end of the input); blank lines are skipped.
    fn next_item(&mut self) -> Result<Option<Item>> {
        loop {
            if cancel_flag().load(Ordering::SeqCst) {
                return Ok(None);
            }
            self.buf.clear();
            let n = (&mut self.reader)
                .take(MAX_LINE_BYTES + 1)
                .read_until(b'\n', &mut self.buf)
                .context("reading the batch input")?;
            if n == 0 {
                return Ok(None);
            }
            self.line_no += 1;
            let line_no = self.line_no;
            let too_long = self.buf.len() as u64 > MAX_LINE_BYTES;
            if too_long && !self.buf.ends_with(b"\n") {
                skip_line(&mut self.reader).context("reading the batch input")?;
            }
            let text = String::from_utf8_lossy(&self.buf);
            let text = text.trim();
            if text.is_empty() {
                continue;
            }
            let item = if too_long {
                Item {
                    line_no,
                    id: json!(line_no),
                    request: Err(anyhow::anyhow!(
                        "the line is longer than {MAX_LINE_BYTES} bytes"
                    )),
                }
            } else {
                match serde_json::from_str::<Request>(text) {
                    Ok(req) => Item {
                        line_no,
                        id: req.id.clone().unwrap_or(json!(line_no)),
                        request: Ok(req),
                    },
                    Err(e) => Item {
                        line_no,
                        id: serde_json::from_str::<Value>(text)
                            .ok()
                            .and_then(|v| v.get("id").cloned())
                            .unwrap_or(json!(line_no)),
                        request: Err(anyhow::anyhow!("not a valid request: {e}")),
                    },
                }
            };
            return Ok(Some(item));
        }
    }
}

/// Run one request; its output line and whether it was interrupted.
fn run_item<B: Backend>(
    runner: &mut Runner<'_, '_, B>,
    item: Item,
) -> (Result<Value, Value>, bool) {
    let result = item.request.and_then(|req| {
        let follow = Follow {
            on_text: &mut |_| {},
            on_logprobs: None,
            on_reasoning: None,
            cancel: cancel_flag(),
            logprobs: 0,
        };
        runner.request(&req, follow)
    });
    match result {
        Ok(Outcome {
            json: mut v,
            generation,
            ..
        }) => {
            // The id first, for readers that look at the start of a line.
            let mut with_id = serde_json::Map::new();
            with_id.insert("id".to_string(), item.id);
            if let Value::Object(map) = &mut v {
                with_id.append(map);
            }
            (
                Ok(Value::Object(with_id)),
                generation.finish == FinishReason::Interrupted,
            )
        }
        Err(e) => (
            Err(json!({ "id": item.id, "line": item.line_no, "error": error_message(&e) })),
            false,
        ),
    }
}

/// `parallel` runners on threads of their own, their sessions' forward calls batched together;
/// the requests handed out in input order as runners come free, the results written in input
/// order as they are complete.
fn run_parallel<B: Backend>(
    runners: Vec<Runner<'_, '_, B>>,
    lines: &mut Lines,
    out: &mut Output,
) -> Result<()> {
    type Done = (usize, Result<Value, Value>, bool);
    let (work, queue) = std::sync::mpsc::sync_channel::<(usize, Item)>(runners.len());
    let queue = std::sync::Mutex::new(queue);
    let (done, results) = std::sync::mpsc::channel::<Done>();
    std::thread::scope(|scope| -> Result<()> {
        for mut runner in runners {
            let (queue, done) = (&queue, done.clone());
            scope.spawn(move || {
                loop {
                    let next = queue
                        .lock()
                        .map_err(|_| ())
                        .and_then(|q| q.recv().map_err(|_| ()));
                    let Ok((index, item)) = next else { return };
                    // After Ctrl-C nothing more starts (the lines after this one stay unwritten).
                    if cancel_flag().load(Ordering::SeqCst) {
                        return;
                    }
                    let (id, line_no) = (item.id.clone(), item.line_no);
                    // A request that panics (a bug) fails alone; the runner starts afresh.
                    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        run_item(&mut runner, item)
                    }));
                    let (line, interrupted) = ran.unwrap_or_else(|_| {
                        runner.reset();
                        let error = "internal error: the generation failed";
                        (
                            Err(json!({ "id": id, "line": line_no, "error": error })),
                            false,
                        )
                    });
                    if done.send((index, line, interrupted)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(done);
        let mut pending = std::collections::BTreeMap::new();
        let mut next_out = 0;
        let mut write_ready =
            |(index, line, interrupted): Done, out: &mut Output| -> Result<bool> {
                pending.insert(index, line);
                while let Some(line) = pending.remove(&next_out) {
                    out.write(line)?;
                    next_out += 1;
                }
                Ok(interrupted)
            };
        let mut index = 0;
        let mut interrupted = false;
        while !interrupted && let Some(item) = lines.next_item()? {
            if work.send((index, item)).is_err() {
                break;
            }
            index += 1;
            while let Ok(d) = results.try_recv() {
                interrupted |= write_ready(d, out)?;
            }
        }
        drop(work);
        for d in results {
            write_ready(d, out)?;
        }
        Ok(())
    })
}

/// Where results go: stdout, a line each, with a progress bar on a terminal's stderr; and the
/// count of failed requests for the exit code.
struct Output {
    progress: indicatif::ProgressBar,
    requests: usize,
    failed: usize,
}

impl Output {
    fn new(total_lines: Option<usize>) -> Output {
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
        Output {
            progress,
            requests: 0,
            failed: 0,
        }
    }

    /// Write a result line (an error object counts as failed).
    fn write(&mut self, line: Result<Value, Value>) -> Result<()> {
        self.requests += 1;
        let line = line.unwrap_or_else(|error| {
            self.failed += 1;
            error
        });
        self.progress.suspend(|| -> Result<()> {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{line}")?;
            out.flush()?;
            Ok(())
        })?;
        self.progress.inc(1);
        Ok(())
    }

    /// The exit code: 130 after Ctrl-C, 1 when a request failed.
    fn finish(self) -> Result<ExitCode> {
        self.progress.finish_and_clear();
        if cancel_flag().load(Ordering::SeqCst) {
            return Ok(ExitCode::from(130));
        }
        if self.failed > 0 {
            eprintln!("{} of {} requests failed", self.failed, self.requests);
            return Ok(ExitCode::from(1));
        }
        Ok(ExitCode::SUCCESS)
    }
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
