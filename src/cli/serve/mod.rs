//! `kiln serve`: the model behind an OpenAI-compatible HTTP API, as llama-server, ollama and
//! mistral.rs serve one: `POST /v1/chat/completions` and `/v1/completions` (whole or streamed as
//! server-sent events), `GET /v1/models`, `GET /health`, and llama-server's `/tokenize` and
//! `/detokenize`. The flags are `run`'s model, backend, sampling and speculation flags (the
//! defaults each request may override) and llama-server's `--host`, `--port`, `--api-key` and
//! `-a/--alias`.
//!
//! The engine (`engine.rs`) runs the queued requests on `--parallel` slots, each a session of its
//! own on a thread of its own, their forward calls batched together, each request reusing what its
//! slot's KV cache shares with its prompt; the HTTP side (`http.rs`, on a
//! tokio runtime of its own thread) parses and checks requests (`api.rs`), queues them and writes
//! the replies. Ctrl-C stops accepting connections, lets the requests already taken finish, and
//! exits; a second Ctrl-C exits at once.

mod api;
mod engine;
mod http;

use std::net::TcpListener;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use anyhow::{Context, Result, bail};

use super::requests::{Defaults, Runner};
use super::vision::VisionArgs;
use super::{
    AnyLoaded, BackendArgs, CacheArgs, FlagError, Loaded, ModelArgs, SamplingArgs, SpeculationArgs,
    TemplateKwargs, load_with_draft, on_backend, template_kwargs, values,
};
use crate::backend::Backend;
use crate::model::Tokenizer;
use crate::model::batcher::Batcher;
use crate::model::chat::ChatTemplate;
use crate::model::session::DEFAULT_BATCH;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    /// Address to listen on. The default answers this machine only; 0.0.0.0 answers every
    /// network it is on (set --api-key then)
    #[arg(long, default_value = "127.0.0.1", value_name = "ADDR")]
    pub host: String,

    /// Port to listen on (0: any free one; the address is printed to stderr)
    #[arg(long, default_value_t = 8080, value_name = "N")]
    pub port: u16,

    /// Require this key: every route but /health then needs the header `Authorization: Bearer
    /// KEY`
    #[arg(long, env = "KILN_API_KEY", value_name = "KEY", hide_env_values = true)]
    pub api_key: Option<String>,

    /// The model's name in replies and /v1/models (default: the model file's name)
    #[arg(short = 'a', long, value_name = "NAME")]
    pub alias: Option<String>,

    /// Context size in tokens of each slot (0: the model's trained context; default: that, at
    /// most 4096). The KV caches take --parallel times this
    #[arg(short = 'c', long, value_name = "N")]
    pub ctx_size: Option<usize>,

    /// Slots: requests that generate at once, each with a KV cache of -c tokens, advancing
    /// together in one forward pass per step (llama-server's -np; default 4, and 1 with
    /// --spec-type draft-mtp); more requests wait in the queue
    #[arg(long = "parallel", value_name = "N", value_parser = values::parse_parallel)]
    pub parallel: Option<usize>,

    /// Most tokens a reply may have when its request gives no max_tokens (-1: until the model
    /// ends it or the context is full)
    #[arg(short = 'n', long, default_value_t = -1, allow_negative_numbers = true, value_name = "N")]
    pub max_tokens: i64,

    /// Extra variables for the chat template, as a JSON object, e.g. '{"enable_thinking":
    /// false}'
    #[arg(long, value_name = "JSON", value_parser = template_kwargs)]
    pub chat_template_kwargs: Option<TemplateKwargs>,

    #[command(flatten)]
    pub sampling: SamplingArgs,

    #[command(flatten)]
    pub speculation: SpeculationArgs,

    #[command(flatten)]
    pub backend: BackendArgs,

    #[command(flatten)]
    pub cache: CacheArgs,

    #[command(flatten)]
    pub vision: VisionArgs,
}

pub fn run(args: ServeArgs) -> Result<ExitCode> {
    if !args.vision.images.is_empty() {
        bail!(FlagError(
            "--image does not apply to serve: send images in a message's image_url parts".into()
        ));
    }
    args.sampling.validate()?;
    args.speculation.validate()?;
    // Listen first: a port in use is known before the model loads.
    let listener = TcpListener::bind((args.host.as_str(), args.port))
        .with_context(|| format!("listening on {}:{}", args.host, args.port))?;
    let (loaded, draft) = load_with_draft(
        &args.model,
        &args.backend,
        args.ctx_size,
        &args.cache,
        &args.speculation,
    )?;
    on_backend!(loaded, loaded => serve(&args, listener, &loaded, draft.as_ref()))
}

fn serve<B: Backend>(
    args: &ServeArgs,
    listener: TcpListener,
    loaded: &Loaded<B>,
    draft: Option<&AnyLoaded>,
) -> Result<ExitCode> {
    let defaults = Defaults {
        sampling: &args.sampling,
        max_tokens: args.max_tokens,
        stop: &[],
        system: None,
        chat: true,
        constraint: None,
        speculation: &args.speculation,
        vision: &args.vision,
        tools: None,
        tool_choice: None,
    };
    let parallel = args.speculation.parallel(args.parallel);
    let batcher = match parallel {
        1 => None,
        _ => Some(Batcher::new(&loaded.model, DEFAULT_BATCH)?),
    };
    let runners = (0..parallel)
        .map(|_| {
            Runner::new(
                defaults,
                loaded,
                args.ctx_size,
                &args.cache,
                args.chat_template_kwargs.clone(),
                draft,
                batcher.as_ref(),
            )
        })
        .collect::<Result<Vec<_>>>()?;
    let ctx = runners[0].ctx();
    let (jobs, queue) = std::sync::mpsc::sync_channel(http::QUEUE_DEPTH);
    let server = Arc::new(http::Server {
        jobs,
        tokenizer: Tokenizer::from_model(&loaded.file)?,
        model_name: args
            .alias
            .clone()
            .unwrap_or_else(|| loaded.file.display_name()),
        api_key: args.api_key.clone().filter(|k| !k.is_empty()),
        ctx,
        n_vocab: loaded.model.config.vocab_size,
        tool_syntax: ChatTemplate::for_model(&loaded.tokenizer, loaded.model.config.arch)
            .tool_syntax(),
        created: http::now_secs(),
        next_id: AtomicU64::new(1),
    });
    listener
        .set_nonblocking(true)
        .context("setting up the listening socket")?;
    let address = listener
        .local_addr()
        .context("reading the listening address")?;
    if !address.ip().is_loopback() && server.api_key.is_none() {
        eprintln!(
            "warning: listening on {address} without --api-key: anyone who can reach this \
             machine can use the model"
        );
    }
    eprintln!(
        "kiln serve: {} on http://{address} ({} slots of {ctx} tokens); Ctrl-C stops",
        server.model_name, parallel,
    );
    let http = std::thread::Builder::new()
        .name("http".into())
        .spawn(move || run_http(listener, server))
        .context("starting the HTTP thread")?;
    // Runs until the HTTP side has shut down and dropped the queue's sender.
    engine::serve(runners, queue);
    match http.join() {
        Ok(result) => result.map(|()| ExitCode::SUCCESS),
        Err(_) => bail!("the HTTP thread panicked"),
    }
}

/// Serve HTTP until Ctrl-C, then finish the requests already taken.
fn run_http(listener: TcpListener, server: Arc<http::Server>) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the HTTP runtime")?;
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    ctrlc::set_handler(move || {
        if stop.send_replace(true) {
            std::process::exit(130);
        }
    })
    .context("installing the Ctrl-C handler")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let shutdown = async move {
            let _ = stopped.wait_for(|&s| s).await;
            eprintln!("kiln serve: stopping; the requests already taken finish first");
        };
        axum::serve(listener, http::router(server))
            .with_graceful_shutdown(shutdown)
            .await
            .context("serving HTTP")
    })
}
