//! `kiln run`: one prompt in, generated text streamed out. stdout carries only the generated text
//! (or, with `--format json`, one JSON object); everything else goes to stderr. Exit codes: 0 done,
//! 1 error, 2 bad flags, 130 interrupted by Ctrl-C (what was generated is flushed first).

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result, bail};
use serde_json::json;

use super::constrain::{ConstraintArgs, compile, compiler_for};
use super::tokenize::{print_verbose_prompt, text_or_stdin};
use super::{
    BackendArgs, CacheArgs, ContextShiftArgs, Loaded, ModelArgs, OutputFormat, SamplingArgs,
    context_size, load, on_backend,
};
use crate::backend::Backend;
use crate::model::chat::{ChatTemplate, Message, TemplateOrigin};
use crate::model::generate::{FinishReason, GenerateOptions, Generation, StopRules, generate};
use crate::model::session::DEFAULT_BATCH;
use crate::model::{Session, Tokenizer};
use crate::sampler::{ConstraintSpec, Sampler, SamplerConfig};

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    /// The prompt; `-` or nothing reads it from standard input
    pub prompt: Option<String>,

    /// Send the prompt through the model's chat template as a user message. This is the default
    /// when the model file carries a chat template: such models are instruction-tuned and answer
    /// best in their own turn format
    #[arg(long, conflicts_with = "raw")]
    pub chat: bool,

    /// Send the prompt exactly as given. This is the default when the model has no chat template:
    /// base models continue text
    #[arg(long)]
    pub raw: bool,

    /// System message (implies --chat)
    #[arg(long, value_name = "TEXT", conflicts_with = "raw")]
    pub system: Option<String>,

    /// Most tokens to generate (-1: until the model ends its reply or the context is full)
    #[arg(short = 'n', long, default_value_t = -1, allow_negative_numbers = true, value_name = "N")]
    pub max_tokens: i64,

    /// Context size in tokens (default: the model's, at most 4096)
    #[arg(short = 'c', long, value_name = "N")]
    pub ctx_size: Option<usize>,

    /// Stop when the output contains this text (repeatable; the text is not printed)
    #[arg(long = "stop", value_name = "STR")]
    pub stop: Vec<String>,

    #[command(flatten)]
    pub sampling: SamplingArgs,

    #[command(flatten)]
    pub backend: BackendArgs,

    #[command(flatten)]
    pub cache: CacheArgs,

    #[command(flatten)]
    pub shift: ContextShiftArgs,

    /// Output format: streamed text, or one JSON object at the end
    #[arg(long, value_enum, default_value_t)]
    pub format: OutputFormat,

    /// With --format json: the N most likely tokens at every generated step
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub logprobs: usize,

    /// Print load, prompt and generation timings to stderr
    #[arg(short = 'v', long)]
    pub verbose: bool,

    /// Print the prompt as the model is given it (rendered through the chat template) and its
    /// token ids to stderr
    #[arg(long)]
    pub verbose_prompt: bool,

    /// Run many requests from a JSON Lines file (`-`: standard input), one JSON result per line
    #[arg(long, value_name = "FILE", conflicts_with_all = ["prompt", "logprobs"])]
    pub batch: Option<String>,

    #[command(flatten)]
    pub constraint: ConstraintArgs,
}

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

/// The prompt's token ids: raw, or rendered through the chat template.
fn prompt_ids(
    args: &RunArgs,
    text: &str,
    tok: &Tokenizer,
    arch: crate::model::Arch,
) -> Result<Vec<u32>> {
    let has_template = tok.chat_template.is_some();
    let chat = args.chat || args.system.is_some() || (!args.raw && has_template);
    if !chat {
        return Ok(tok.encode(text, true)?);
    }
    let template = ChatTemplate::for_model(tok, arch);
    if template.origin != TemplateOrigin::Model && args.verbose {
        eprintln!(
            "note: the model has no chat template; using {}",
            template.describe()
        );
    }
    let mut messages = Vec::new();
    if let Some(system) = &args.system {
        messages.push(Message::new("system", system));
    }
    messages.push(Message::new("user", text));
    Ok(template.prompt_ids(tok, &messages, true)?)
}

pub fn run(args: RunArgs) -> Result<ExitCode> {
    if args.batch.is_some() {
        return super::batch::run(args);
    }
    let sampler_config = args.sampling.config()?;
    if args.logprobs > 0 && args.format != OutputFormat::Json {
        bail!("--logprobs needs --format json");
    }
    let constraint = args.constraint.spec()?;
    let text = text_or_stdin(args.prompt.clone())?;
    if text.is_empty() {
        bail!("the prompt is empty");
    }

    let loaded = load(&args.model, &args.backend)?;
    on_backend!(loaded, loaded => generate_for(&args, &text, sampler_config, constraint.as_ref(), loaded))
}

/// Everything after loading, on whichever backend the model was loaded.
fn generate_for<B: Backend>(
    args: &RunArgs,
    text: &str,
    sampler_config: SamplerConfig,
    constraint: Option<&ConstraintSpec>,
    loaded: Loaded<B>,
) -> Result<ExitCode> {
    let (tok, model) = (&loaded.tokenizer, &loaded.model);
    let ids = prompt_ids(args, text, tok, model.config.arch)?;
    if args.verbose_prompt {
        print_verbose_prompt(tok, &ids);
    }
    let ctx = context_size(args.ctx_size, model.config.context_length)?;
    if ids.len() > ctx {
        bail!(
            "the prompt is {} tokens but the context holds {ctx}; use -c to enlarge it",
            ids.len()
        );
    }
    let max_tokens = if args.max_tokens < 0 {
        usize::MAX
    } else {
        args.max_tokens as usize
    };
    let mut session = Session::with_options(model, ctx, DEFAULT_BATCH, args.cache.types())?;
    let shift = args.shift.for_model(model);
    session.set_context_shift(shift.keep(&ids, tok.bos, 0))?;
    let mut sampler = Sampler::new(sampler_config.clone());
    if let Some(spec) = constraint {
        let compiler = compiler_for(tok, model.config.vocab_size)?;
        if args.verbose {
            eprintln!(
                "constraint: vocabulary indexed in {:.0} ms",
                compiler.setup_time.as_secs_f64() * 1e3
            );
        }
        sampler.set_constraint(Some(compile(&compiler, spec)?));
    }
    install_interrupt_handler(true);
    let opts = GenerateOptions {
        rules: StopRules {
            max_tokens,
            stop_strings: args.stop.clone(),
        },
        logprobs: args.logprobs,
        cancel: Some(cancel_flag()),
    };

    let streaming = args.format == OutputFormat::Text;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut last_char = None;
    let mut pipe_closed = false;
    let result = generate(&mut session, tok, &mut sampler, &ids, &opts, |piece| {
        if streaming && !pipe_closed {
            last_char = piece.chars().last().or(last_char);
            if let Err(e) = out.write_all(piece.as_bytes()).and_then(|_| out.flush()) {
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    // The reader went away (`| head`): stop generating, quietly.
                    pipe_closed = true;
                    CANCEL.store(true, Ordering::SeqCst);
                } else {
                    return Err(crate::Error::Usage(format!("writing to stdout: {e}")));
                }
            }
        }
        Ok(())
    })
    .context("generating")?;
    if pipe_closed {
        return Ok(ExitCode::SUCCESS);
    }

    match args.format {
        OutputFormat::Text => {
            if std::io::stdout().is_terminal() && last_char.is_some_and(|c| c != '\n') {
                let _ = writeln!(out);
            }
        }
        OutputFormat::Json => {
            let v = result_json(&loaded, &result, &sampler, args.logprobs > 0);
            writeln!(out, "{v}")?;
        }
    }
    out.flush()?;

    if args.verbose {
        if session.stats.context_shifts > 0 {
            eprintln!(
                "\ncontext shifted {} times, {} tokens dropped",
                session.stats.context_shifts, session.stats.shifted_out_tokens
            );
        }
        eprintln!(
            "\nload {:.0} ms | prompt {} tokens, {:.1} tok/s | generated {} tokens, {:.1} tok/s | {} | {}",
            loaded.load_time.as_secs_f64() * 1e3,
            result.prompt_tokens,
            per_s(result.prompt_tokens, result.prefill_time),
            result.tokens.len(),
            per_s(result.tokens.len(), result.decode_time),
            result.finish.as_str(),
            loaded.model.backend.describe(),
        );
        if let Some(c) = sampler.constraint() {
            // The mask is computed once per sampled token, inside the decode time.
            let per_token = result.decode_time / c.stats.masks.max(1) as u32;
            eprintln!(
                "constraint: {} masks, {:.3} ms each = {:.1} % of a token's {:.2} ms",
                c.stats.masks,
                c.stats.per_mask().as_secs_f64() * 1e3,
                100.0 * c.stats.per_mask().as_secs_f64() / per_token.as_secs_f64().max(1e-12),
                per_token.as_secs_f64() * 1e3,
            );
        }
    }
    if result.finish == FinishReason::Interrupted {
        return Ok(ExitCode::from(130));
    }
    Ok(ExitCode::SUCCESS)
}

fn per_s(n: usize, t: std::time::Duration) -> f64 {
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
    if with_logprobs {
        v["logprobs"] = serde_json::Value::Array(logprobs);
    }
    if let Some(c) = sampler.constraint() {
        v["timings"]["mask_ms"] = json!(c.stats.mask_time.as_secs_f64() * 1e3);
    }
    v
}
