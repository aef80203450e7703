//! The command line: one file per subcommand, with the flag groups they share defined here and
//! flattened into each.

pub mod batch;
pub mod bench;
pub mod chat;
pub mod check;
pub mod completions;
pub mod constrain;
pub mod devices;
pub mod info;
pub mod output;
pub mod placement;
pub mod requests;
pub mod run;
pub mod serve;
pub mod speculation;
pub mod tokenize;
pub mod tool_calls;
pub mod values;
pub mod vision;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};

use crate::backend::cpu::CpuBackend;
use crate::backend::split::SplitBackend;
use crate::backend::wgpu::{AdapterChoice, WgpuBackend};
use crate::backend::{Backend, CacheType};
use crate::model::arch::KvCacheTypes;
use crate::model::{Model, ModelFile, Tokenizer};
use crate::sampler::SamplerConfig;
pub use speculation::SpeculationArgs;
use values::{LastN, Seed};

#[derive(Parser, Debug)]
#[command(name = "kiln", version, about = "Run large language models locally")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Generate text for one prompt (argument or standard input), streamed to stdout
    Run(RunArgs),
    /// Talk with a model: an interactive conversation that keeps its context between turns
    Chat(chat::ChatArgs),
    /// Measure prompt-processing and generation speed (llama-bench's tests and table)
    Bench(bench::BenchArgs),
    /// Describe a model: architecture, size, tensor types, tokenizer and configuration
    Info(info::InfoArgs),
    /// Show the token ids (and pieces) of a text
    Tokenize(tokenize::TokenizeArgs),
    /// Print a shell completion script (bash, zsh, fish, powershell, elvish)
    Completions(completions::CompletionsArgs),
    /// List the GPU adapters, their limits and features, and which one `--backend auto` takes
    Devices(devices::DevicesArgs),
    /// Compare the GPU with the CPU: greedy tokens replayed teacher-forced, logits judged
    Check(check::CheckArgs),
    /// Serve the model over HTTP with OpenAI's API (chat and text completions, streamed or not)
    Serve(serve::ServeArgs),
}

/// The model to load.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// GGUF file, Hugging Face model directory (config.json + safetensors + tokenizer.json), or
    /// a model on the Hugging Face hub: hf:OWNER/REPO[:QUANT] or hf:OWNER/REPO/FILE.gguf
    #[arg(short = 'm', long = "model", env = "KILN_MODEL", value_name = "PATH")]
    pub model: PathBuf,
}

impl ModelArgs {
    /// The model's local path: the one given, or the hub model downloaded into (or found in) the
    /// Hugging Face cache.
    pub fn local_path(&self) -> Result<PathBuf> {
        match self.model.to_str().and_then(crate::hub::HubModel::parse) {
            Some(name) => Ok(name.map_err(FlagError)?.fetch()?),
            None => Ok(self.model.clone()),
        }
    }

    /// Open the model file (downloading a hub model first).
    pub fn open(&self) -> Result<ModelFile> {
        Ok(ModelFile::open(&self.local_path()?)?)
    }
}

/// A bad flag value found after parsing (a schema that does not compile, an unreadable grammar):
/// exit code 2, like the errors clap reports.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct FlagError(pub String);

/// The message of an error and its causes, each cause said once: a cause whose text the message
/// already holds (an I/O error wrapped with its file name) is not repeated.
pub fn error_message(e: &anyhow::Error) -> String {
    let mut msg = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if msg.contains(&text) {
            continue;
        }
        if !msg.is_empty() {
            msg.push_str(": ");
        }
        msg.push_str(&text);
    }
    msg
}

/// What the process exits with for an error: 2 for bad flags, 1 otherwise.
pub fn exit_code_for(e: &anyhow::Error) -> ExitCode {
    if e.chain().any(|c| c.is::<FlagError>()) {
        ExitCode::from(2)
    } else {
        ExitCode::from(1)
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendKind {
    /// A discrete or integrated GPU if there is one, else the CPU
    #[default]
    Auto,
    /// The CPU, with SIMD kernels chosen at run time
    Cpu,
    /// A GPU through wgpu (Vulkan, Metal, DX12); software adapters such as lavapipe too
    Gpu,
}

/// Where and how the model runs.
#[derive(clap::Args, Debug, Clone)]
pub struct BackendArgs {
    /// Compute backend
    #[arg(long, value_enum, default_value_t, env = "KILN_BACKEND")]
    pub backend: BackendKind,

    /// The GPU adapter to use, by its index in `kiln devices`
    #[arg(long = "gpu", value_name = "N", env = "KILN_GPU")]
    pub gpu: Option<usize>,

    /// CPU threads (default, 0 or -1: one per core)
    #[arg(short = 't', long, value_name = "N", allow_negative_numbers = true, value_parser = values::threads)]
    pub threads: Option<usize>,

    /// CPU: keep the weights as the file holds them instead of repacking them at load for the
    /// GEMM kernels; loads sooner and reads only the experts tokens use, but runs slower
    #[arg(long = "no-repack")]
    pub no_repack: bool,

    #[command(flatten)]
    pub placement: placement::PlacementArgs,
}

/// The KV cache's element types. llama.cpp's spellings `-ctk` and `-ctv` work too.
#[derive(clap::Args, Debug, Clone)]
pub struct CacheArgs {
    /// Element type of the key cache: f32, f16 or q8_0
    #[arg(long = "cache-type-k", value_name = "TYPE", default_value_t)]
    pub cache_type_k: CacheType,

    /// Element type of the value cache: f32, f16 or q8_0
    #[arg(long = "cache-type-v", value_name = "TYPE", default_value_t)]
    pub cache_type_v: CacheType,
}

impl RunArgs {
    /// `--tools` read, and `--tool-choice` in the API's shape.
    pub fn tool_flags(&self) -> Result<(Option<serde_json::Value>, Option<serde_json::Value>)> {
        let Some(path) = &self.tools else {
            return Ok((None, None));
        };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading --tools {}", path.display()))?;
        let tools: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| FlagError(format!("--tools {}: not JSON: {e}", path.display())))?;
        let choice = self.tool_choice.as_deref().map(|c| match c {
            "auto" | "none" | "required" => serde_json::json!(c),
            name => serde_json::json!({"type": "function", "function": {"name": name}}),
        });
        Ok((Some(tools), choice))
    }
}

impl CacheArgs {
    pub fn types(&self) -> KvCacheTypes {
        KvCacheTypes {
            k: self.cache_type_k,
            v: self.cache_type_v,
        }
    }
}

/// What to do when the context fills up (`run` and `chat`).
#[derive(clap::Args, Debug, Clone)]
pub struct ContextShiftArgs {
    /// When the context is full, drop the oldest half of the tokens after the kept ones and go
    /// on, the cached keys re-rotated for their new positions (llama.cpp's context shift).
    /// Without it, generation stops with `context_full`
    #[arg(long)]
    pub context_shift: bool,

    /// Tokens at the start of the context that a context shift keeps, besides the BOS token
    /// (-1: the whole prompt in run, the system prompt in chat; default: 0 in run, the system
    /// prompt in chat)
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        requires = "context_shift"
    )]
    pub keep: Option<i64>,
}

impl ContextShiftArgs {
    /// These settings for `model`: a model with recurrent state (Qwen3.5) cannot shift its
    /// context, so `--context-shift` is dropped with a note, and generation stops with
    /// `context_full` when the context fills, as without the flag.
    pub fn for_model<B: Backend>(&self, model: &Model<B>) -> ContextShiftArgs {
        if self.context_shift && !model.can_shift_context() {
            eprintln!(
                "note: --context-shift is impossible for {} models (their recurrent state cannot \
                 drop old tokens); generation stops when the context is full",
                model.config.arch.name()
            );
            return ContextShiftArgs {
                context_shift: false,
                keep: None,
            };
        }
        self.clone()
    }

    /// How many tokens at the start of a context that begins with `prompt` a shift keeps, or None
    /// without `--context-shift`. As llama.cpp's `n_keep`: N < 0, or more than the prompt, keeps
    /// the whole prompt; otherwise N tokens after the BOS token, which is always kept.
    /// `default` stands in for a missing `--keep`.
    pub fn keep(&self, prompt: &[u32], bos: Option<u32>, default: i64) -> Option<usize> {
        if !self.context_shift {
            return None;
        }
        let n = self.keep.unwrap_or(default);
        let has_bos = usize::from(bos.is_some() && prompt.first() == bos.as_ref());
        Some(match usize::try_from(n) {
            Ok(n) if n <= prompt.len() => (n + has_bos).min(prompt.len()),
            _ => prompt.len(),
        })
    }
}

/// llama.cpp's single-dash long flags that kiln accepts, and their clap spelling.
const LLAMA_CPP_FLAGS: [(&str, &str); 7] = [
    ("-np", "--parallel"),
    ("-ctk", "--cache-type-k"),
    ("-ctv", "--cache-type-v"),
    ("-ngl", "--n-gpu-layers"),
    ("-ncmoe", "--n-cpu-moe"),
    ("-md", "--spec-draft-model"),
    ("-ngld", "--spec-draft-ngl"),
];

/// The command line, with llama.cpp's single-dash long flags (`-ctk f16`) spelled as clap expects.
pub fn parse_args(args: impl IntoIterator<Item = std::ffi::OsString>) -> Cli {
    let args = args.into_iter().map(|a| {
        let Some(text) = a.to_str() else { return a };
        for (short, long) in LLAMA_CPP_FLAGS {
            if text == short {
                return long.into();
            }
            if let Some(value) = text.strip_prefix(short).and_then(|r| r.strip_prefix('=')) {
                return format!("{long}={value}").into();
            }
        }
        a
    });
    Cli::parse_from(args)
}

/// Sampling settings; the defaults and the special values are llama.cpp's.
#[derive(clap::Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Temperature; 0 or less (llama.cpp's -1) picks the most likely token every time (greedy)
    #[arg(
        long = "temp",
        default_value_t = 0.8,
        value_name = "T",
        allow_negative_numbers = true
    )]
    pub temperature: f32,

    /// Sample from the K most likely tokens (0: all)
    #[arg(long, default_value_t = 40, value_name = "K")]
    pub top_k: usize,

    /// Sample from the smallest set of tokens whose probability reaches P (1: all)
    #[arg(long, default_value_t = 0.95, value_name = "P")]
    pub top_p: f32,

    /// Drop tokens less likely than P × the most likely one (0: none)
    #[arg(long, default_value_t = 0.05, value_name = "P")]
    pub min_p: f32,

    /// Penalize repeating recent tokens (1: off)
    #[arg(long, default_value_t = 1.0, value_name = "X")]
    pub repeat_penalty: f32,

    /// Penalize recent tokens by how often they occurred
    #[arg(long, default_value_t = 0.0, value_name = "X")]
    pub frequency_penalty: f32,

    /// Penalize every recent token once
    #[arg(long, default_value_t = 0.0, value_name = "X")]
    pub presence_penalty: f32,

    /// How many recent tokens the penalties consider (0: none, -1: the whole context)
    #[arg(long, default_value_t = LastN::Tokens(64), value_name = "N", allow_negative_numbers = true)]
    pub repeat_last_n: LastN,

    /// Random seed; the same seed, prompt and settings give the same output (default or -1:
    /// random; `--format json` reports the seed used)
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub seed: Option<Seed>,
}

impl SamplingArgs {
    /// Check the values before anything loads.
    pub fn validate(&self) -> Result<()> {
        anyhow::ensure!(
            self.temperature.is_finite(),
            "--temp must be a finite number"
        );
        anyhow::ensure!(
            self.repeat_penalty.is_finite() && self.repeat_penalty >= 0.0,
            "--repeat-penalty must be a finite number ≥ 0"
        );
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.top_p) && (0.0..=1.0).contains(&self.min_p),
            "--top-p and --min-p must be between 0 and 1"
        );
        anyhow::ensure!(
            self.frequency_penalty.is_finite() && self.presence_penalty.is_finite(),
            "penalties must be finite numbers"
        );
        Ok(())
    }

    /// The sampler's settings for a context of `ctx` tokens. A temperature below 0 is 0 (greedy),
    /// as llama.cpp clamps it.
    pub fn config(&self, ctx: usize) -> Result<SamplerConfig> {
        self.validate()?;
        Ok(SamplerConfig {
            temperature: self.temperature.max(0.0),
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            penalty_last_n: self.repeat_last_n.tokens(ctx),
            seed: self.seed.unwrap_or(Seed::Random).pick(),
        })
    }
}

/// `kiln run`'s flags, here because two modes read them: one prompt (`run.rs`) and `--batch`
/// (`batch.rs`); the dispatch at the end of this file picks the mode.
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

    /// Extra variables for the chat template, as a JSON object (as llama.cpp's), e.g.
    /// '{"enable_thinking": false}' to turn Qwen3's or GLM's thinking off
    #[arg(long, value_name = "JSON", value_parser = template_kwargs, conflicts_with = "raw")]
    pub chat_template_kwargs: Option<TemplateKwargs>,

    /// Most tokens to generate (-1: until the model ends its reply or the context is full)
    #[arg(short = 'n', long, default_value_t = -1, allow_negative_numbers = true, value_name = "N")]
    pub max_tokens: i64,

    /// Context size in tokens (0: the model's trained context; default: that, at most 4096)
    #[arg(short = 'c', long, value_name = "N")]
    pub ctx_size: Option<usize>,

    /// Stop when the output contains this text (repeatable; the text is not printed)
    #[arg(long = "stop", value_name = "STR")]
    pub stop: Vec<String>,

    /// A reasoning model's reasoning (gpt-oss's analysis channel, `<think>…</think>`): streamed
    /// to standard error as it comes (`show`; `auto`: when standard error is a terminal), or left
    /// out (`hide`); the answer alone goes to standard output either way, and `--format json`
    /// has both
    #[arg(long, value_enum, default_value_t)]
    pub reasoning: ReasoningDisplay,

    #[command(flatten)]
    pub sampling: SamplingArgs,

    #[command(flatten)]
    pub speculation: SpeculationArgs,

    #[command(flatten)]
    pub backend: BackendArgs,

    #[command(flatten)]
    pub cache: CacheArgs,

    #[command(flatten)]
    pub shift: ContextShiftArgs,

    #[command(flatten)]
    pub vision: vision::VisionArgs,

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

    /// Functions the model may call: a JSON file with OpenAI's `tools` list. The calls it makes
    /// come back as `tool_calls` with --format json (in batch mode: every request's default)
    #[arg(long, value_name = "FILE")]
    pub tools: Option<PathBuf>,

    /// With --tools: auto (the model decides), none, required (one call, always), or a
    /// function's name (one call of it); required and a name force the call with a grammar
    #[arg(long, value_name = "CHOICE", requires = "tools")]
    pub tool_choice: Option<String>,

    /// Run many requests from a JSON Lines file (`-`: standard input), one JSON result per line
    #[arg(long, value_name = "FILE", conflicts_with_all = ["prompt", "logprobs"])]
    pub batch: Option<String>,

    /// With --batch: how many requests generate at once, each with a KV cache of -c tokens of its
    /// own, advancing together in one forward pass per step (llama.cpp's -np; default 4, and 1
    /// with --spec-type draft-mtp). Results still come in input order
    #[arg(long = "parallel", value_name = "N", requires = "batch", value_parser = values::parse_parallel)]
    pub parallel: Option<usize>,

    #[command(flatten)]
    pub constraint: constrain::ConstraintArgs,
}

/// What `kiln run` does with a reply's reasoning.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReasoningDisplay {
    /// Shown on a terminal (dim), so that a long think is seen to progress; else left out.
    #[default]
    Auto,
    Hide,
    Show,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    #[default]
    Text,
    Json,
}

/// A model ready to run: its file, tokenizer and weights on a backend.
pub struct Loaded<B: Backend> {
    pub file: ModelFile,
    pub tokenizer: Tokenizer,
    pub model: Model<B>,
    pub load_time: Duration,
}

/// A model loaded on the backend the flags chose. `on_backend!` runs generic code on it.
/// (Boxed: the two backends' states differ much in size.)
pub enum AnyLoaded {
    Cpu(Box<Loaded<CpuBackend>>),
    Gpu(Box<Loaded<WgpuBackend>>),
    Split(Box<Loaded<SplitBackend>>),
}

/// `on_backend!(any, loaded => expr)`: evaluate `expr` with `loaded` bound to the `Loaded<B>`
/// inside an `AnyLoaded`, whichever backend it is on.
macro_rules! on_backend {
    ($any:expr, $loaded:ident => $body:expr) => {
        match $any {
            $crate::cli::AnyLoaded::Cpu(boxed) => {
                let $loaded = *boxed;
                $body
            }
            $crate::cli::AnyLoaded::Gpu(boxed) => {
                let $loaded = *boxed;
                $body
            }
            $crate::cli::AnyLoaded::Split(boxed) => {
                let $loaded = *boxed;
                $body
            }
        }
    };
}
pub(crate) use on_backend;

/// A spinner on stderr naming the loading stage, shown only if loading takes more than half a
/// second and stderr is a terminal.
struct LoadProgress {
    bar: indicatif::ProgressBar,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl LoadProgress {
    fn start(path: &std::path::Path) -> LoadProgress {
        use std::sync::atomic::{AtomicBool, Ordering};
        let bar =
            indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::hidden());
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} loading {prefix}: {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        let done = std::sync::Arc::new(AtomicBool::new(false));
        if std::io::stderr().is_terminal() {
            let name = path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            );
            let (bar, done) = (bar.clone(), done.clone());
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(500));
                if !done.load(Ordering::SeqCst) {
                    bar.set_prefix(name);
                    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
                    bar.enable_steady_tick(Duration::from_millis(100));
                }
            });
        }
        LoadProgress { bar, done }
    }

    fn stage(&self, msg: &str) {
        self.bar.set_message(msg.to_string());
    }

    fn finish(self) {
        self.done.store(true, std::sync::atomic::Ordering::SeqCst);
        self.bar.finish_and_clear();
    }
}

/// Load the model `model` names onto the backend `backend` places it on, leaving room on a GPU
/// for a KV cache of the context `ctx` asks for (as `context_size` reads it) of `cache` types.
/// The model, and the draft model `--spec-type draft-simple` asks for, loaded as the flags say.
pub fn load_with_draft(
    model: &ModelArgs,
    backend: &BackendArgs,
    ctx: Option<usize>,
    cache: &CacheArgs,
    speculation: &SpeculationArgs,
) -> Result<(AnyLoaded, Option<AnyLoaded>)> {
    let loaded = load(model, backend, ctx, cache.types(), speculation.wants_mtp())?;
    let draft = speculation.load_draft(backend, ctx, cache.types())?;
    Ok((loaded, draft))
}

pub fn load(
    model: &ModelArgs,
    backend: &BackendArgs,
    ctx: Option<usize>,
    cache: KvCacheTypes,
    load_mtp: bool,
) -> Result<AnyLoaded> {
    let path = model.local_path()?;
    let start = Instant::now();
    let progress = LoadProgress::start(&path);
    progress.stage("reading the model file");
    let mut file = ModelFile::open(&path)?;
    file.load_mtp = load_mtp;
    progress.stage("preparing the weights");
    let trained = file.config.context_length;
    let kv = placement::KvNeeds {
        ctx: context_length(ctx, trained),
        types: cache,
    };
    let (placed, line) = placement::place(&file, backend, kv)?;
    if let Some(line) = line {
        progress.bar.suspend(|| eprintln!("{line}"));
    }
    let loaded = match placed {
        placement::Placed::Cpu(cpu) => AnyLoaded::Cpu(Box::new(Loaded::new(file, *cpu, start)?)),
        placement::Placed::Gpu(gpu) => AnyLoaded::Gpu(Box::new(Loaded::new(file, *gpu, start)?)),
        placement::Placed::Split(split) => {
            AnyLoaded::Split(Box::new(Loaded::new(file, *split, start)?))
        }
    };
    progress.finish();
    Ok(loaded)
}

/// The GPU `--backend` and `--gpu` choose, or None for the CPU backend. `auto` takes a discrete
/// or integrated GPU (a software adapter such as lavapipe is slower than kiln's CPU backend) and
/// falls back to the CPU, with a warning if the GPU it found would not open.
pub fn choose_gpu(kind: BackendKind, index: Option<usize>) -> Result<Option<WgpuBackend>> {
    let choice = index.map(AdapterChoice::Index);
    match kind {
        BackendKind::Cpu => {
            if index.is_some() {
                anyhow::bail!("--gpu picks a GPU adapter, but --backend cpu asks for the CPU");
            }
            Ok(None)
        }
        BackendKind::Gpu => Ok(Some(WgpuBackend::new(
            choice.unwrap_or(AdapterChoice::Best),
        )?)),
        BackendKind::Auto => match choice {
            Some(c) => Ok(Some(WgpuBackend::new(c)?)),
            None => match WgpuBackend::open(
                AdapterChoice::Hardware,
                crate::backend::wgpu::GpuOptions::from_env()?,
            ) {
                Ok(found) => Ok(found),
                Err(e) => {
                    eprintln!("warning: {e}; using the CPU backend");
                    Ok(None)
                }
            },
        },
    }
}

impl<B: Backend> Loaded<B> {
    /// Load the weights onto `backend` while the tokenizer builds on a thread of its own
    /// (turning Gemma 3's 262k-piece SentencePiece vocabulary into merges takes ~0.5 s).
    fn new(file: ModelFile, backend: B, start: Instant) -> Result<Self> {
        let (tokenizer, model) = std::thread::scope(|s| {
            let tokenizer = s.spawn(|| Tokenizer::from_model(&file));
            let model = Model::load(&file, backend);
            (tokenizer.join(), model)
        });
        let tokenizer = tokenizer.unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
        let model = model.with_context(|| format!("loading {}", file.path.display()))?;
        warn_unused(&file, model.unused_tensors());
        Ok(Loaded {
            file,
            tokenizer,
            model,
            load_time: start.elapsed(),
        })
    }
}

/// `--chat-template-kwargs`: a JSON object of extra template variables.
pub type TemplateKwargs = serde_json::Map<String, serde_json::Value>;

pub(crate) fn template_kwargs(s: &str) -> std::result::Result<TemplateKwargs, String> {
    match serde_json::from_str(s) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => Err("expected a JSON object, like '{\"enable_thinking\": false}'".into()),
        Err(e) => Err(format!("not JSON: {e}")),
    }
}

/// A warning naming the file's tensors kiln does not use: what they compute is left out, so the
/// output may differ from llama.cpp's.
fn warn_unused(file: &ModelFile, unused: &[String]) {
    if unused.is_empty() {
        return;
    }
    const SHOWN: usize = 4;
    let more = match unused.len() > SHOWN {
        true => format!(" and {} more", unused.len() - SHOWN),
        false => String::new(),
    };
    eprintln!(
        "warning: {}: kiln does not use {} of its tensors ({}{more}); output may differ from \
         llama.cpp's",
        file.path.display(),
        unused.len(),
        unused[..unused.len().min(SHOWN)].join(", ")
    );
}

/// The context size to use: the flag; `-c 0`, llama.cpp's "the model's context", the length the
/// model was trained for; without `-c`, that capped at 4096, so that a 128k-token model does not
/// take gigabytes of KV cache unasked.
pub fn context_size(requested: Option<usize>, trained: usize) -> usize {
    if let Some(n) = requested
        && n > trained
    {
        eprintln!(
            "warning: a context of {n} tokens is longer than the {trained} the model was trained on"
        );
    }
    context_length(requested, trained)
}

/// `context_size` without the warning.
pub(crate) fn context_length(requested: Option<usize>, trained: usize) -> usize {
    match requested {
        None => trained.clamp(1, 4096),
        Some(0) => trained.max(1),
        Some(n) => n,
    }
}

pub fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Run(args) if args.batch.is_some() => batch::run(args),
        Command::Run(args) => run::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Chat(args) => chat::run(args),
        Command::Info(args) => info::run(args),
        Command::Tokenize(args) => tokenize::run(args),
        Command::Completions(args) => completions::run(args),
        Command::Devices(args) => devices::run(args),
        Command::Check(args) => check::run(args),
        Command::Serve(args) => serve::run(args),
    }
}

#[cfg(test)]
mod tests {
    use super::ContextShiftArgs;

    #[test]
    fn keep_counts_as_llama_cpp_n_keep() {
        let shift = |keep| ContextShiftArgs {
            context_shift: true,
            keep,
        };
        let (with_bos, bos) = ([1, 10, 11, 12, 13], Some(1));
        // The BOS token is kept besides N; N < 0 or past the prompt keeps the prompt.
        assert_eq!(shift(None).keep(&with_bos, bos, 0), Some(1));
        assert_eq!(shift(Some(2)).keep(&with_bos, bos, 0), Some(3));
        assert_eq!(shift(Some(-1)).keep(&with_bos, bos, 0), Some(5));
        assert_eq!(shift(Some(9)).keep(&with_bos, bos, 0), Some(5));
        assert_eq!(shift(None).keep(&with_bos, bos, -1), Some(5));
        // No BOS at the start: N tokens exactly.
        assert_eq!(shift(Some(2)).keep(&[10, 11, 12], bos, 0), Some(2));
        assert_eq!(shift(Some(2)).keep(&[10, 11, 12], None, 0), Some(2));
        let off = ContextShiftArgs {
            context_shift: false,
            keep: None,
        };
        assert_eq!(off.keep(&with_bos, bos, 0), None);
    }
}
