//! `kiln chat`: an interactive conversation. On a terminal: a reedline editor with history, `\`
//! line continuation and `"""` blocks, slash commands, streamed replies with a dim stats line,
//! Ctrl-C to stop a reply, Ctrl-D to leave. With stdin not a terminal: each input line is a user
//! turn (or a command) and each reply is printed followed by a blank line, for scripts.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;

use anyhow::{Context, Result, bail};
use crossterm::style::Stylize;
use reedline::{
    FileBackedHistory, Prompt, PromptEditMode, PromptHistorySearch, Reedline, Signal,
    ValidationResult, Validator,
};

use super::output::{cancel_flag, install_interrupt_handler, per_s};
use super::{
    AnyLoaded, BackendArgs, CacheArgs, ContextShiftArgs, Loaded, ModelArgs, SamplingArgs,
    context_size, load_with_draft, on_backend,
};
use crate::backend::Backend;
use crate::model::chat::{ChatTemplate, TemplateOrigin};
use crate::model::conversation::Conversation;
use crate::model::generate::{
    FinishReason, GenerateOptions, Generation, ReasoningSink, StopRules, generate,
};
use crate::model::multimodal::ImageInput;
use crate::model::session::DEFAULT_BATCH;
use crate::model::speculative::Drafter;
use crate::model::{Session, Tokenizer};
use crate::sampler::Sampler;

#[derive(clap::Args, Debug)]
pub struct ChatArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    /// System message
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,

    /// Extra variables for the chat template, as a JSON object (as llama.cpp's), e.g.
    /// '{"enable_thinking": false}' to turn Qwen3's or GLM's thinking off
    #[arg(long, value_name = "JSON", value_parser = super::template_kwargs)]
    pub chat_template_kwargs: Option<super::TemplateKwargs>,

    /// Most tokens per reply (-1: until the model ends its turn)
    #[arg(short = 'n', long, default_value_t = -1, allow_negative_numbers = true, value_name = "N")]
    pub max_tokens: i64,

    /// Context size in tokens (0: the model's trained context; default: that, at most 4096)
    #[arg(short = 'c', long, value_name = "N")]
    pub ctx_size: Option<usize>,

    #[command(flatten)]
    pub sampling: SamplingArgs,

    #[command(flatten)]
    pub speculation: super::SpeculationArgs,

    #[command(flatten)]
    pub backend: BackendArgs,

    #[command(flatten)]
    pub cache: CacheArgs,

    #[command(flatten)]
    pub shift: ContextShiftArgs,

    /// Images: --mmproj, --image (attached to the first message), and their token limits
    #[command(flatten)]
    pub vision: super::vision::VisionArgs,

    /// Do not print the stats line after each reply
    #[arg(long)]
    pub no_stats: bool,

    /// Print what each turn adds to the prompt (rendered through the chat template) and its
    /// token ids to stderr
    #[arg(long)]
    pub verbose_prompt: bool,

    /// Every reply is constrained (each one is a complete JSON value, grammar sentence, …)
    #[command(flatten)]
    pub constraint: super::constrain::ConstraintArgs,
}

const HELP: &str = "\
Commands:
  /help                 this text
  /clear                start a new conversation (the system prompt stays)
  /system TEXT          set the system prompt (and start over)
  /set temp|top-k|top-p|min-p|seed|max-tokens VALUE
  /stats                context used and the last reply's speed
  /save FILE            write the conversation as JSON
  /image PATH           attach an image to your next message (needs a projector: --mmproj)
  /exit                 leave (Ctrl-D works too)
Input: end a line with \\ to continue it; wrap several lines in \"\"\" … \"\"\".
Ctrl-C stops a reply; Ctrl-D leaves.";

/// Multi-line input: a trailing `\`, or an unclosed `"""` block.
struct ContinuationValidator;

impl Validator for ContinuationValidator {
    fn validate(&self, line: &str) -> ValidationResult {
        if line.ends_with('\\') || line.matches("\"\"\"").count() % 2 == 1 {
            ValidationResult::Incomplete
        } else {
            ValidationResult::Complete
        }
    }
}

/// The text of a (possibly multi-line) input: continuation backslashes and `"""` fences removed.
pub fn normalize_input(raw: &str) -> String {
    let trimmed = raw.trim();
    if let Some(inner) = trimmed
        .strip_prefix("\"\"\"")
        .and_then(|s| s.strip_suffix("\"\"\""))
    {
        return inner.trim_matches('\n').to_string();
    }
    trimmed
        .split('\n')
        .map(|l| l.strip_suffix('\\').unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

struct ChatPrompt;

impl Prompt for ChatPrompt {
    fn render_prompt_left(&self) -> std::borrow::Cow<'_, str> {
        "".into()
    }
    fn render_prompt_right(&self) -> std::borrow::Cow<'_, str> {
        "".into()
    }
    fn render_prompt_indicator(&self, _: PromptEditMode) -> std::borrow::Cow<'_, str> {
        ">>> ".into()
    }
    fn render_prompt_multiline_indicator(&self) -> std::borrow::Cow<'_, str> {
        "... ".into()
    }
    fn render_prompt_history_search_indicator(
        &self,
        search: PromptHistorySearch,
    ) -> std::borrow::Cow<'_, str> {
        format!("(search: {}) ", search.term).into()
    }
}

fn history_file() -> Option<PathBuf> {
    let dir = dirs::data_dir()?.join("kiln");
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir.join("chat_history.txt"))
}

fn use_color() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stdout().is_terminal()
}

/// Everything a chat needs between turns.
struct Chat<'m, B: Backend> {
    tok: &'m Tokenizer,
    conv: Conversation<'m, B>,
    sampler: Sampler,
    max_tokens: Option<usize>,
    /// Speculative decoding's drafter (--spec-type) and its flags.
    drafter: Option<Box<dyn Drafter + Send + 'm>>,
    speculation: super::SpeculationArgs,
    last: Option<Generation>,
    interactive: bool,
    color: bool,
    show_stats: bool,
    shift: ContextShiftArgs,
    verbose_prompt: bool,
    /// The projector's tower, loaded at the first image.
    encoder: Option<super::vision::ImageEncoder<'m, B>>,
    vision: super::vision::VisionArgs,
    model_path: std::path::PathBuf,
    /// Images waiting for the next message.
    pending_images: Vec<ImageInput>,
}

enum Flow {
    Continue,
    Exit,
}

impl<B: Backend> Chat<'_, B> {
    fn note(&self, msg: &str) {
        // Notes go to stderr, so a scripted chat's stdout holds only replies.
        if self.color {
            eprintln!("{}", msg.dim());
        } else {
            eprintln!("{msg}");
        }
    }

    fn command(&mut self, line: &str) -> Result<Flow> {
        let (cmd, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let rest = rest.trim();
        match cmd {
            "/help" | "/?" => println!("{HELP}"),
            "/exit" | "/quit" | "/bye" => return Ok(Flow::Exit),
            "/clear" => {
                self.conv.clear();
                self.sampler.reset();
                self.note("(new conversation)");
            }
            "/system" => {
                self.conv.system = (!rest.is_empty()).then(|| rest.to_string());
                self.conv.clear();
                self.sampler.reset();
                self.note(match self.conv.system {
                    Some(_) => "(system prompt set; new conversation)",
                    None => "(system prompt removed; new conversation)",
                });
            }
            "/set" => self.set(rest)?,
            "/image" => {
                if rest.is_empty() {
                    bail!("usage: /image PATH");
                }
                self.attach(std::path::Path::new(rest))?;
            }
            "/stats" => self.print_stats(),
            "/save" => {
                if rest.is_empty() {
                    bail!("usage: /save FILE");
                }
                let v = serde_json::json!({
                    "system": self.conv.system,
                    "messages": self.conv.messages,
                    "sampling": {
                        "temperature": self.sampler.config.temperature,
                        "top_k": self.sampler.config.top_k,
                        "top_p": self.sampler.config.top_p,
                        "min_p": self.sampler.config.min_p,
                        "seed": self.sampler.config.seed,
                    },
                });
                std::fs::write(rest, serde_json::to_string_pretty(&v)? + "\n")
                    .with_context(|| format!("writing {rest}"))?;
                self.note(&format!("(saved to {rest})"));
            }
            other => bail!("unknown command {other}; /help lists them"),
        }
        Ok(Flow::Continue)
    }

    /// Encode an image for the next message, loading the projector at the first.
    fn attach(&mut self, path: &std::path::Path) -> Result<()> {
        if self.encoder.is_none() {
            let model = self.conv.session.model();
            let encoder = self.vision.encoder(model, &self.model_path)?;
            self.conv.set_image_markers(encoder.markers);
            self.encoder = Some(encoder);
        }
        let encoder = self.encoder.as_ref().expect("loaded above");
        let e = encoder.encode_file(path, false)?;
        self.note(&format!(
            "(image {}: {} tokens, for your next message)",
            path.display(),
            e.tokens()
        ));
        self.pending_images.push(super::vision::image_input(&e));
        Ok(())
    }

    fn set(&mut self, rest: &str) -> Result<()> {
        let (key, value) = rest
            .split_once(char::is_whitespace)
            .map(|(k, v)| (k, v.trim()))
            .ok_or_else(|| {
                anyhow::anyhow!("usage: /set temp|top-k|top-p|min-p|seed|max-tokens VALUE")
            })?;
        let mut c = self.sampler.config.clone();
        let float = |v: &str| -> Result<f32> {
            let x: f32 = v
                .parse()
                .with_context(|| format!("{v:?} is not a number"))?;
            anyhow::ensure!(x.is_finite() && x >= 0.0, "{key} must be ≥ 0");
            Ok(x)
        };
        match key {
            "temp" | "temperature" => c.temperature = float(value)?,
            "top-k" | "top_k" => c.top_k = value.parse().context("top-k takes a whole number")?,
            "top-p" | "top_p" => {
                c.top_p = float(value)?;
                anyhow::ensure!(c.top_p <= 1.0, "top-p must be between 0 and 1");
            }
            "min-p" | "min_p" => {
                c.min_p = float(value)?;
                anyhow::ensure!(c.min_p <= 1.0, "min-p must be between 0 and 1");
            }
            "seed" => c.seed = value.parse().context("seed takes a whole number")?,
            "max-tokens" | "max_tokens" | "n" => {
                let n: i64 = value.parse().context("max-tokens takes a whole number")?;
                self.max_tokens = (n >= 0).then_some(n as usize);
            }
            other => bail!("unknown setting {other}; /help lists them"),
        }
        self.sampler.set_config(c);
        self.note(&format!("({key} = {value})"));
        Ok(())
    }

    fn print_stats(&self) {
        let s = &self.conv.session;
        println!(
            "context: {} of {} tokens used ({} messages)",
            s.tokens().len(),
            s.ctx(),
            self.conv.messages.len()
        );
        match &self.last {
            Some(g) => println!(
                "last reply: prompt {} tokens at {:.1} tok/s, generated {} tokens at {:.1} tok/s ({})",
                g.prompt_tokens,
                per_s(g.prompt_tokens, g.prefill_time),
                g.tokens.len(),
                per_s(g.tokens.len(), g.decode_time),
                g.finish.as_str()
            ),
            None => println!("no reply yet"),
        }
    }

    /// One user turn: fit the context, generate the reply streaming, record it.
    fn turn(&mut self, text: &str) -> Result<()> {
        let ctx = self.conv.session.ctx();
        let reserve = self.max_tokens.unwrap_or(ctx / 4).clamp(1, ctx / 2 + 1);
        let images = std::mem::take(&mut self.pending_images);
        let turn = match self
            .conv
            .user_turn_with_images(self.tok, text, images, reserve)
        {
            Ok(t) => t,
            Err(crate::Error::ContextFull { needed, ctx }) => {
                bail!(
                    "this message needs {needed} tokens with room for a reply, but the context \
                     holds {ctx}; shorten it, /clear, or restart with a larger -c"
                );
            }
            Err(e) => return Err(e.into()),
        };
        if turn.dropped_messages > 0 {
            self.note(&format!(
                "(context full: dropped the {} oldest messages; the system prompt is kept)",
                turn.dropped_messages
            ));
        }
        if self.verbose_prompt {
            super::tokenize::print_verbose_prompt(self.tok, &turn.new_tokens);
        }
        if let Some(c) = self.sampler.constraint_mut() {
            c.restart();
        }
        // A context shift keeps the system prompt (as it stands now) unless --keep says otherwise.
        let prefix = self.conv.fixed_prefix(self.tok)?;
        let keep = self.shift.keep(&prefix, self.tok.bos, -1);
        self.conv.session.set_context_shift(keep)?;
        let shifts_before = self.conv.session.stats.context_shifts;
        cancel_flag().store(false, Ordering::SeqCst);
        // A reasoning model's reasoning, dim, before its answer, on a terminal; left out of a
        // chat whose output is read by a program.
        let reasoned = std::cell::Cell::new(false);
        let show_reasoning = |piece: &str| -> crate::Result<()> {
            reasoned.set(true);
            let mut out = std::io::stdout().lock();
            write!(out, "\x1b[2m{piece}\x1b[0m")
                .and_then(|_| out.flush())
                .map_err(|e| crate::Error::Usage(format!("writing to stdout: {e}")))
        };
        let opts = GenerateOptions {
            rules: StopRules {
                max_tokens: self.max_tokens.unwrap_or(usize::MAX),
                stop_strings: Vec::new(),
            },
            logprobs: 0,
            cancel: Some(cancel_flag()),
            on_logprobs: None,
            on_reasoning: std::io::stdout()
                .is_terminal()
                .then_some(&show_reasoning as &ReasoningSink<'_>),
            speculation: self.speculation.speculation(&self.drafter),
        };
        let mut out = std::io::stdout().lock();
        let generation = generate(
            &mut self.conv.session,
            self.tok,
            &mut self.sampler,
            &turn.new_tokens,
            &opts,
            |piece| {
                if reasoned.replace(false) {
                    // The answer starts apart from the reasoning above it.
                    out.write_all(b"\n\n")
                        .map_err(|e| crate::Error::Usage(format!("writing to stdout: {e}")))?;
                }
                out.write_all(piece.as_bytes())
                    .and_then(|_| out.flush())
                    .map_err(|e| crate::Error::Usage(format!("writing to stdout: {e}")))
            },
        )?;
        let ended_with_newline = generation.text.ends_with('\n');
        if !ended_with_newline {
            writeln!(out)?;
        }
        if !self.interactive {
            writeln!(out)?;
        }
        out.flush()?;
        drop(out);
        self.conv.assistant_reply(&generation.text);
        let stats = &self.conv.session.stats;
        if let (true, Some(keep)) = (stats.context_shifts > shifts_before, keep) {
            self.note(&format!(
                "(context full: shifted {} times; the first {keep} tokens are kept, {} old ones \
                 dropped so far)",
                stats.context_shifts - shifts_before,
                stats.shifted_out_tokens
            ));
        }
        match generation.finish {
            FinishReason::Interrupted => self.note("(reply stopped)"),
            FinishReason::ContextFull => self.note(
                "(the context is full: the reply was cut short; the next turn drops old messages)",
            ),
            _ => {}
        }
        if self.show_stats {
            self.note(&format!(
                "[{} tokens · {:.1} tok/s · prompt {} tokens at {:.1} tok/s · context {}/{}]",
                generation.tokens.len(),
                per_s(generation.tokens.len(), generation.decode_time),
                generation.prompt_tokens,
                per_s(generation.prompt_tokens, generation.prefill_time),
                self.conv.session.tokens().len(),
                ctx
            ));
        }
        cancel_flag().store(false, Ordering::SeqCst);
        self.last = Some(generation);
        Ok(())
    }

    /// A line of input: a command or a user turn. Errors are reported, not fatal.
    fn handle(&mut self, raw: &str) -> Flow {
        let text = normalize_input(raw);
        if text.is_empty() {
            return Flow::Continue;
        }
        let result = if text.starts_with('/') {
            self.command(&text)
        } else {
            self.turn(&text).map(|_| Flow::Continue)
        };
        result.unwrap_or_else(|e| {
            eprintln!("error: {}", super::error_message(&e));
            Flow::Continue
        })
    }
}

pub fn run(args: ChatArgs) -> Result<ExitCode> {
    args.sampling.validate()?;
    args.speculation.validate()?;
    args.constraint.spec()?;
    let (loaded, draft) = load_with_draft(
        &args.model,
        &args.backend,
        args.ctx_size,
        &args.cache,
        &args.speculation,
    )?;
    on_backend!(loaded, loaded => chat_with(&args, loaded, draft.as_ref()))
}

/// The conversation, on whichever backend the model was loaded.
fn chat_with<B: Backend>(
    args: &ChatArgs,
    loaded: Loaded<B>,
    draft: Option<&AnyLoaded>,
) -> Result<ExitCode> {
    let tok = &loaded.tokenizer;
    let model = &loaded.model;
    let template = ChatTemplate::for_model(tok, model.config.arch)
        .with_kwargs(args.chat_template_kwargs.clone().unwrap_or_default());
    if template.origin != TemplateOrigin::Model {
        eprintln!(
            "note: the model has no chat template; using {}",
            template.describe()
        );
    }
    let ctx = context_size(args.ctx_size, model.config.context_length);
    let mut session = Session::with_options(model, ctx, DEFAULT_BATCH, args.cache.types())?;
    args.speculation.prepare(&mut session)?;
    let interactive = std::io::stdin().is_terminal();
    let color = use_color();
    let mut sampler = Sampler::new(args.sampling.config(ctx)?);
    if let Some(spec) = args.constraint.spec()? {
        let compiler = super::constrain::compiler_for(tok, model.config.vocab_size)?;
        sampler.set_constraint(Some(super::constrain::compile(&compiler, &spec)?));
    }
    let mut chat = Chat {
        tok,
        conv: Conversation::new(session, template, args.system.clone()),
        sampler,
        max_tokens: (args.max_tokens >= 0).then_some(args.max_tokens as usize),
        drafter: args
            .speculation
            .drafter(draft, tok, ctx, args.cache.types())?,
        speculation: args.speculation.clone(),
        last: None,
        interactive,
        color,
        show_stats: !args.no_stats && interactive,
        shift: args.shift.for_model(model),
        verbose_prompt: args.verbose_prompt,
        encoder: None,
        vision: args.vision.clone(),
        model_path: loaded.file.path.clone(),
        pending_images: Vec::new(),
    };
    for image in &args.vision.images {
        chat.attach(image)?;
    }
    install_interrupt_handler(false);

    if !interactive {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let line = line.context("reading standard input")?;
            if let Flow::Exit = chat.handle(&line) {
                break;
            }
        }
        return Ok(ExitCode::SUCCESS);
    }

    eprintln!(
        "kiln chat · {} · context {ctx} tokens · /help for commands, Ctrl-D to leave",
        loaded.file.display_name()
    );
    let mut editor = Reedline::create()
        .with_validator(Box::new(ContinuationValidator))
        .with_ansi_colors(color);
    if let Some(path) = history_file() {
        match FileBackedHistory::with_file(1000, path) {
            Ok(h) => editor = editor.with_history(Box::new(h)),
            Err(e) => eprintln!("note: no input history ({e})"),
        }
    }
    loop {
        match editor.read_line(&ChatPrompt) {
            Ok(Signal::Success(line)) => {
                if let Flow::Exit = chat.handle(&line) {
                    break;
                }
            }
            Ok(Signal::CtrlC) => chat.note("(to leave, type /exit or press Ctrl-D)"),
            Ok(Signal::CtrlD) => break,
            Ok(_) => {}
            Err(e) => bail!("reading input: {e}"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_line_input() {
        assert_eq!(normalize_input("one \\\ntwo"), "one \ntwo");
        assert_eq!(
            normalize_input("\"\"\"\nfirst\nsecond\n\"\"\""),
            "first\nsecond"
        );
        assert_eq!(normalize_input("  plain  "), "plain");
        let v = ContinuationValidator;
        assert!(matches!(v.validate("abc \\"), ValidationResult::Incomplete));
        assert!(matches!(
            v.validate("\"\"\"\nopen"),
            ValidationResult::Incomplete
        ));
        assert!(matches!(
            v.validate("\"\"\"\nclosed\n\"\"\""),
            ValidationResult::Complete
        ));
    }
}
