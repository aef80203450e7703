//! The server's HTTP side: axum routes for OpenAI's `/v1/chat/completions`, `/v1/completions` and
//! `/v1/models`, llama-server's `/health`, `/tokenize` and `/detokenize`; the API key check; a
//! log line per request; bodies bounded before they are read; requests queued for the engine
//! (503 past the queue's depth); replies whole or streamed as server-sent events. A client that
//! goes away drops its reply, which cancels its generation.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::super::tool_calls::calls_json;
use super::api::{
    self, ApiError, Asked, ChatRequest, CompletionRequest, chat_logprobs, completion_logprobs,
    finish_reason, piece, timings, usage,
};
use super::engine::{Event, Finished, Job};
use crate::model::Tokenizer;
use crate::model::generate::StepLogprobs;
use crate::model::tools::ToolSyntax;

/// The largest request body read (a request with a few images as `data:` URLs fits).
pub const MAX_BODY_BYTES: usize = 32 << 20;
/// Requests that may wait for the engine; past this the server answers 503.
pub const QUEUE_DEPTH: usize = 64;
/// How much of an oversized body is read and dropped so its client can see the 413.
const DRAIN_BYTES: usize = 256 << 20;
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(10);

/// What the handlers share.
pub struct Server {
    pub jobs: SyncSender<Job>,
    /// The HTTP side's own copy of the model's tokenizer (`/tokenize`, logprobs' texts).
    pub tokenizer: Tokenizer,
    pub model_name: String,
    pub api_key: Option<String>,
    pub ctx: usize,
    pub n_vocab: usize,
    /// The tool-call syntax of the model's template, if it takes tools.
    pub tool_syntax: Option<ToolSyntax>,
    pub created: u64,
    pub next_id: AtomicU64,
}

type Shared = Arc<Server>;

pub fn router(server: Shared) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .route("/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/completions", post(completions))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(
            server.clone(),
            guard_and_log,
        ))
        .with_state(server)
}

pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::BAD_REQUEST);
        (status, axum::Json(self.body())).into_response()
    }
}

/// The API key (every route but `/health` needs it when one is set), and one log line per
/// request on stderr: method, path, status, time to the reply's head.
async fn guard_and_log(
    State(server): State<Shared>,
    request: axum::extract::Request,
    next: Next,
) -> Response {
    let start = Instant::now();
    let (method, path) = (request.method().clone(), request.uri().path().to_string());
    let response = match &server.api_key {
        Some(key) if path != "/health" && !authorized(request.headers(), key) => ApiError {
            status: 401,
            message: "invalid or missing API key: send the header Authorization: Bearer KEY".into(),
        }
        .into_response(),
        _ => next.run(request).await,
    };
    eprintln!(
        "{method} {path} {} {:.0} ms",
        response.status().as_u16(),
        start.elapsed().as_secs_f64() * 1e3
    );
    response
}

fn authorized(headers: &HeaderMap, key: &str) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|given| given.trim() == key)
}

async fn not_found() -> ApiError {
    ApiError {
        status: 404,
        message: "no such route: this server has /v1/chat/completions, /v1/completions, \
                  /v1/models, /health, /tokenize and /detokenize"
            .into(),
    }
}

async fn health() -> axum::Json<Value> {
    axum::Json(json!({"status": "ok"}))
}

async fn models(State(server): State<Shared>) -> axum::Json<Value> {
    axum::Json(json!({
        "object": "list",
        "data": [{
            "id": server.model_name,
            "object": "model",
            "created": server.created,
            "owned_by": "kiln",
            "meta": {"n_ctx": server.ctx, "n_vocab": server.n_vocab},
        }],
    }))
}

/// The body, refused past `MAX_BODY_BYTES` (413) without keeping more of it. The rest of an
/// oversized body is still read and dropped, up to `DRAIN_BYTES` or `DRAIN_TIME`: a client that is
/// still sending when the server closes gets a reset instead of the 413 (nginx's lingering close).
async fn read_body(body: Body) -> Result<axum::body::Bytes, ApiError> {
    use axum::body::HttpBody;
    use futures_util::StreamExt;
    let cut_off =
        |e: axum::Error| ApiError::bad_request(format!("the request body was cut off: {e}"));
    // A declared length past the bound is refused without keeping any of it.
    let declared_too_long = body.size_hint().lower() > MAX_BODY_BYTES as u64;
    let mut stream = body.into_data_stream();
    let mut chunks = Vec::new();
    let mut kept = 0usize;
    let mut dropped = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(cut_off)?;
        if declared_too_long || kept + chunk.len() > MAX_BODY_BYTES {
            dropped = chunk.len();
            break;
        }
        kept += chunk.len();
        chunks.push(chunk);
    }
    if dropped == 0 && !declared_too_long {
        return Ok(chunks.concat().into());
    }
    drop(chunks);
    let drain = async {
        while dropped <= DRAIN_BYTES {
            match stream.next().await {
                Some(Ok(chunk)) => dropped += chunk.len(),
                _ => break,
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIME, drain).await;
    Err(ApiError {
        status: 413,
        message: format!(
            "the request body is larger than {} MiB",
            MAX_BODY_BYTES >> 20
        ),
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenizeRequest {
    content: String,
    #[serde(default)]
    add_special: bool,
    #[serde(default)]
    with_pieces: bool,
}

async fn tokenize(State(server): State<Shared>, body: Body) -> Result<Response, ApiError> {
    let req: TokenizeRequest = api::parse(&read_body(body).await?)?;
    // Megabytes of text take a while: off the threads that serve the other connections.
    tokio::task::spawn_blocking(move || tokenize_now(&server, req))
        .await
        .map_err(|_| ApiError {
            status: 500,
            message: "internal error while tokenizing".into(),
        })?
}

fn tokenize_now(server: &Server, req: TokenizeRequest) -> Result<Response, ApiError> {
    let tok = &server.tokenizer;
    let ids = tok
        .encode(&req.content, req.add_special)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let tokens: Vec<Value> = match req.with_pieces {
        false => ids.iter().map(|&id| json!(id)).collect(),
        true => ids
            .iter()
            .map(|&id| json!({"id": id, "piece": tok.decode(&[id], false).unwrap_or_default()}))
            .collect(),
    };
    Ok(axum::Json(json!({ "tokens": tokens })).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DetokenizeRequest {
    tokens: Vec<u32>,
}

async fn detokenize(State(server): State<Shared>, body: Body) -> Result<Response, ApiError> {
    let req: DetokenizeRequest = api::parse(&read_body(body).await?)?;
    let content = tokio::task::spawn_blocking(move || server.tokenizer.decode(&req.tokens, false))
        .await
        .map_err(|_| ApiError {
            status: 500,
            message: "internal error while detokenizing".into(),
        })?
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(axum::Json(json!({ "content": content })).into_response())
}

/// Which endpoint a generation answers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Chat,
    Completion,
}

impl Endpoint {
    fn id_prefix(self) -> &'static str {
        match self {
            Endpoint::Chat => "chatcmpl",
            Endpoint::Completion => "cmpl",
        }
    }

    fn object(self, chunk: bool) -> &'static str {
        match (self, chunk) {
            (Endpoint::Chat, false) => "chat.completion",
            (Endpoint::Chat, true) => "chat.completion.chunk",
            (Endpoint::Completion, _) => "text_completion",
        }
    }
}

async fn chat(State(server): State<Shared>, body: Body) -> Result<Response, ApiError> {
    let asked = api::parse::<ChatRequest>(&read_body(body).await?)?.into_asked()?;
    generate(server, asked, Endpoint::Chat).await
}

async fn completions(State(server): State<Shared>, body: Body) -> Result<Response, ApiError> {
    let asked = api::parse::<CompletionRequest>(&read_body(body).await?)?.into_asked()?;
    generate(server, asked, Endpoint::Completion).await
}

/// Sets a job's cancel flag when dropped: when the reply (or the handler waiting for it) goes
/// away before the generation ends, the engine stops it.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Queue the request and answer it: whole, or as a stream once the first event shows it started.
async fn generate(server: Shared, asked: Asked, endpoint: Endpoint) -> Result<Response, ApiError> {
    let id = format!(
        "{}-{}",
        endpoint.id_prefix(),
        server.next_id.fetch_add(1, Ordering::Relaxed)
    );
    let (events, mut rx) = unbounded_channel();
    let cancel = Arc::new(AtomicBool::new(false));
    let job = Job {
        id: id.clone(),
        request: asked.request,
        choices: asked.choices,
        // The chosen token's own logprob needs the distribution once even without alternatives.
        top_logprobs: asked.logprobs.map_or(0, |n| n.max(1)),
        cancel: cancel.clone(),
        events,
        queued: Instant::now(),
    };
    let guard = CancelOnDrop(cancel);
    match server.jobs.try_send(job) {
        Ok(()) => {}
        Err(TrySendError::Full(_)) => {
            return Err(ApiError {
                status: 503,
                message: format!(
                    "the server is busy ({QUEUE_DEPTH} requests waiting); try again later"
                ),
            });
        }
        Err(TrySendError::Disconnected(_)) => {
            return Err(ApiError {
                status: 503,
                message: "the server is shutting down".into(),
            });
        }
    }
    let server_syntax = server.tool_syntax;
    let reply = Reply {
        server,
        endpoint,
        id,
        created: now_secs(),
        logprobs: asked.logprobs,
        choices: asked.choices,
    };
    // A request that fails before generating (a prompt too long, a schema that does not compile)
    // is a 400 either way.
    let first = rx.recv().await;
    if let Some(Event::Done {
        result: Err(message),
        ..
    }) = &first
    {
        return Err(ApiError::bad_request(message.clone()));
    }
    if !asked.stream {
        return Ok(reply.whole(first, rx).await?.into_response());
    }
    let stream = ChunkStream {
        reply,
        rx,
        first,
        started: vec![false; asked.choices],
        ended: 0,
        include_usage: asked.include_usage,
        totals: Totals::default(),
        pending: VecDeque::new(),
        closed: false,
        hold: server_syntax.filter(|_| asked.tools),
        text: vec![String::new(); asked.choices],
        sent: vec![0; asked.choices],
        steps: vec![Vec::new(); asked.choices],
        text_offset: vec![0; asked.choices],
        _guard: guard,
    };
    let stream = futures_util::stream::unfold(stream, |mut s| async move {
        s.next_data().await.map(|data| {
            (
                Ok::<_, std::convert::Infallible>(SseEvent::default().data(data)),
                s,
            )
        })
    });
    Ok(Sse::new(stream).into_response())
}

/// What a reply needs besides the engine's events.
struct Reply {
    server: Shared,
    endpoint: Endpoint,
    id: String,
    created: u64,
    /// Alternatives to report per token, when logprobs were asked for.
    logprobs: Option<usize>,
    choices: usize,
}

/// Usage over the choices: the prompt once, the tokens of every choice.
#[derive(Default)]
struct Totals {
    prompt_rows: usize,
    cached_rows: usize,
    completion: usize,
}

impl Totals {
    fn add(&mut self, f: &Finished) {
        self.prompt_rows = f.prompt_rows;
        self.cached_rows = self.cached_rows.max(f.cached_rows);
        self.completion += f.generation.tokens.len();
    }

    fn usage(&self) -> Value {
        usage(self.prompt_rows, self.cached_rows, self.completion)
    }
}

impl Reply {
    fn logprobs_value(&self, f: &Finished) -> Value {
        let Some(top) = self.logprobs else {
            return Value::Null;
        };
        let tok = &self.server.tokenizer;
        match self.endpoint {
            Endpoint::Chat => chat_logprobs(tok, &f.generation.logprobs, top),
            Endpoint::Completion => completion_logprobs(tok, &f.generation.logprobs, top, 0),
        }
    }

    fn envelope(&self, chunk: bool, choices: Vec<Value>) -> Value {
        json!({
            "id": self.id,
            "object": self.endpoint.object(chunk),
            "created": self.created,
            "model": self.server.model_name,
            "system_fingerprint": concat!("kiln-", env!("CARGO_PKG_VERSION")),
            "choices": choices,
        })
    }

    /// The whole reply, once every choice has ended.
    async fn whole(
        &self,
        first: Option<Event>,
        mut rx: UnboundedReceiver<Event>,
    ) -> Result<axum::Json<Value>, ApiError> {
        let mut finished: Vec<Option<Box<Finished>>> = (0..self.choices).map(|_| None).collect();
        let mut next = first;
        let mut ended = 0;
        while let Some(event) = next {
            if let Event::Done { choice, result } = event {
                finished[choice] = Some(result.map_err(ApiError::bad_request)?);
                ended += 1;
                if ended == self.choices {
                    break;
                }
            }
            next = rx.recv().await;
        }
        let mut totals = Totals::default();
        let mut choices = Vec::new();
        for (index, f) in finished.iter().enumerate() {
            let Some(f) = f else {
                return Err(ApiError {
                    status: 500,
                    message: "the generation stopped before it ended".into(),
                });
            };
            totals.add(f);
            let g = &f.generation;
            let mut choice = json!({
                "index": index,
                "logprobs": self.logprobs_value(f),
                "finish_reason": finish_reason(g.finish, !f.tool_calls.is_empty()),
            });
            match self.endpoint {
                Endpoint::Chat if !f.tool_calls.is_empty() => {
                    let calls = calls_json(&f.tool_calls, &format!("{}_{index}", self.id));
                    let content = (!f.content.is_empty()).then_some(&f.content);
                    choice["message"] =
                        json!({"role": "assistant", "content": content, "tool_calls": calls});
                }
                Endpoint::Chat => {
                    choice["message"] = json!({"role": "assistant", "content": g.text});
                    if !g.reasoning.is_empty() {
                        choice["message"]["reasoning_content"] = json!(g.reasoning);
                    }
                }
                Endpoint::Completion => choice["text"] = json!(g.text),
            }
            choices.push(choice);
        }
        let mut v = self.envelope(false, choices);
        v["usage"] = totals.usage();
        if let Some(Some(f)) = finished.first() {
            v["timings"] = timings(&f.generation);
        }
        Ok(axum::Json(v))
    }
}

/// A streamed reply: each engine event becomes a chunk (`data: {…}`), then the usage chunk when
/// asked for, then `data: [DONE]`.
struct ChunkStream {
    reply: Reply,
    rx: UnboundedReceiver<Event>,
    /// The event read before the stream started.
    first: Option<Event>,
    /// Whether each choice has had its first chunk (chat's role delta).
    started: Vec<bool>,
    ended: usize,
    include_usage: bool,
    totals: Totals,
    pending: VecDeque<String>,
    closed: bool,
    /// With tools: the syntax whose calls are held back from the streamed text, and each
    /// choice's text so far and how much of it was sent.
    hold: Option<ToolSyntax>,
    text: Vec<String>,
    sent: Vec<usize>,
    /// Each choice's logprobs not yet sent: they go with its next chunk of text, or its last.
    steps: Vec<Vec<StepLogprobs>>,
    /// Where each choice's next logprobs token starts in its text (completions' `text_offset`).
    text_offset: Vec<usize>,
    _guard: CancelOnDrop,
}

impl ChunkStream {
    async fn next_data(&mut self) -> Option<String> {
        loop {
            if let Some(data) = self.pending.pop_front() {
                return Some(data);
            }
            if self.closed {
                return None;
            }
            let event = match self.first.take() {
                Some(e) => Some(e),
                None => self.rx.recv().await,
            };
            match event {
                Some(e) => self.push(e),
                None => {
                    // The engine ended the job early (it failed after starting).
                    self.pending.push_back("[DONE]".into());
                    self.closed = true;
                }
            }
        }
    }

    fn chunk(&self, choice: usize, delta: Value, logprobs: Value, finish: Value) -> String {
        let mut c = json!({"index": choice, "logprobs": logprobs, "finish_reason": finish});
        match self.reply.endpoint {
            Endpoint::Chat => c["delta"] = delta,
            Endpoint::Completion => c["text"] = delta.get("content").cloned().unwrap_or(json!("")),
        }
        let mut v = self.reply.envelope(true, vec![c]);
        if self.include_usage {
            v["usage"] = Value::Null;
        }
        v.to_string()
    }

    /// The logprobs of `choice` not yet sent, in the endpoint's shape (null when none).
    fn take_logprobs(&mut self, choice: usize) -> Value {
        let (Some(top), false) = (self.reply.logprobs, self.steps[choice].is_empty()) else {
            return Value::Null;
        };
        let steps = std::mem::take(&mut self.steps[choice]);
        let tok = &self.reply.server.tokenizer;
        match self.reply.endpoint {
            Endpoint::Chat => chat_logprobs(tok, &steps, top),
            Endpoint::Completion => {
                let offset = &mut self.text_offset[choice];
                let v = completion_logprobs(tok, &steps, top, *offset);
                *offset += steps
                    .iter()
                    .map(|s| piece(tok, s.token).len())
                    .sum::<usize>();
                v
            }
        }
    }

    fn push(&mut self, event: Event) {
        let choice = match &event {
            Event::Text { choice, .. }
            | Event::Reasoning { choice, .. }
            | Event::Logprobs { choice, .. }
            | Event::Done { choice, .. } => *choice,
        };
        if self.reply.endpoint == Endpoint::Chat && !self.started[choice] {
            self.started[choice] = true;
            let role = self.chunk(
                choice,
                json!({"role": "assistant", "content": ""}),
                Value::Null,
                Value::Null,
            );
            self.pending.push_back(role);
        }
        match event {
            Event::Text { text, .. } => {
                let text = match self.hold {
                    None => text,
                    Some(syntax) => {
                        self.text[choice].push_str(&text);
                        let all = &self.text[choice];
                        let upto = streamable(all, syntax);
                        let new = all.get(self.sent[choice]..upto).unwrap_or("").to_string();
                        self.sent[choice] = upto.max(self.sent[choice]);
                        new
                    }
                };
                if !text.is_empty() {
                    let logprobs = self.take_logprobs(choice);
                    let c = self.chunk(choice, json!({ "content": text }), logprobs, Value::Null);
                    self.pending.push_back(c);
                }
            }
            Event::Logprobs { step, .. } => self.steps[choice].push(step),
            Event::Reasoning { text, .. } => {
                if self.reply.endpoint == Endpoint::Chat {
                    let delta = json!({ "reasoning_content": text });
                    let c = self.chunk(choice, delta, Value::Null, Value::Null);
                    self.pending.push_back(c);
                }
            }
            Event::Done { result: Ok(f), .. } => {
                self.totals.add(&f);
                if self.hold.is_some() {
                    // The content the calls were held back from, then the calls.
                    let sent = &self.text[choice][..self.sent[choice]];
                    if let Some(rest) = f.content.strip_prefix(sent)
                        && !rest.is_empty()
                    {
                        let delta = json!({ "content": rest });
                        let c = self.chunk(choice, delta, Value::Null, Value::Null);
                        self.pending.push_back(c);
                    }
                    let prefix = format!("{}_{choice}", self.reply.id);
                    for (i, mut call) in calls_json(&f.tool_calls, &prefix).into_iter().enumerate()
                    {
                        call["index"] = json!(i);
                        let delta = json!({ "tool_calls": [call] });
                        let c = self.chunk(choice, delta, Value::Null, Value::Null);
                        self.pending.push_back(c);
                    }
                }
                let reason = json!(finish_reason(f.generation.finish, !f.tool_calls.is_empty()));
                let logprobs = self.take_logprobs(choice);
                let c = self.chunk(choice, json!({}), logprobs, reason);
                self.pending.push_back(c);
                self.ended += 1;
                if self.ended == self.reply.choices {
                    if self.include_usage {
                        let mut v = self.reply.envelope(true, vec![]);
                        v["usage"] = self.totals.usage();
                        self.pending.push_back(v.to_string());
                    }
                    self.pending.push_back("[DONE]".into());
                    self.closed = true;
                }
            }
            Event::Done {
                result: Err(message),
                ..
            } => {
                let e = ApiError {
                    status: 500,
                    message,
                };
                self.pending.push_back(e.body().to_string());
                self.pending.push_back("[DONE]".into());
                self.closed = true;
            }
        }
    }
}

/// How much of a reply's text so far can be streamed as content: up to where a tool call starts
/// or may be starting (a possible beginning of the opener at the end is held back).
fn streamable(text: &str, syntax: ToolSyntax) -> usize {
    if syntax == ToolSyntax::Llama3 {
        // A call is the whole reply: nothing is sent while it may still be one.
        let t = text.trim_start();
        let maybe_call = t.is_empty()
            || t.starts_with('{')
            || t.starts_with("<|python_tag|>")
            || "<|python_tag|>".starts_with(t);
        return if maybe_call { 0 } else { text.len() };
    }
    let Some(opener) = syntax.opener() else {
        return text.len();
    };
    if let Some(at) = text.find(opener) {
        return at;
    }
    let held = (1..opener.len())
        .rev()
        .find(|&n| text.ends_with(&opener[..n]))
        .unwrap_or(0);
    text.len() - held
}
