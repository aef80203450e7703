//! The OpenAI API's shapes as `kiln serve` speaks them: the chat and text completion requests
//! (OpenAI's fields, plus the sampling fields llama-server takes), turned into the `Request` that
//! `requests.rs` runs, and the responses, stream chunks and errors built from what a run gives.
//! Unknown fields are refused (400), as are values out of range, before anything runs.

use serde::Deserialize;
use serde_json::{Value, json};

use super::super::requests::{Request, RequestMessage, Stop};
use super::super::values::{LastN, Seed};
use crate::model::Tokenizer;
use crate::model::generate::{FinishReason, Generation, StepLogprobs};

/// Most choices (`n`) one request may ask for.
pub const MAX_CHOICES: usize = 16;
/// Most alternatives per token (`top_logprobs`; OpenAI's limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// `stream_options`.
#[derive(Deserialize, Debug, Default, Clone, Copy)]
#[serde(deny_unknown_fields)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// The fields both endpoints take.
macro_rules! request_struct {
    ($(#[$doc:meta])* $name:ident { $($(#[$fdoc:meta])* $field:ident: $ty:ty,)* }) => {
        $(#[$doc])*
        #[derive(Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            /// Any name: this server runs one model.
            #[allow(dead_code)]
            pub model: Option<String>,
            #[serde(default)]
            pub stream: bool,
            pub stream_options: Option<StreamOptions>,
            pub n: Option<usize>,
            pub max_tokens: Option<i64>,
            pub temperature: Option<f32>,
            pub top_p: Option<f32>,
            pub top_k: Option<usize>,
            pub min_p: Option<f32>,
            pub seed: Option<Seed>,
            pub stop: Option<Stop>,
            pub presence_penalty: Option<f32>,
            pub frequency_penalty: Option<f32>,
            pub repeat_penalty: Option<f32>,
            pub repeat_last_n: Option<LastN>,
            pub response_format: Option<Value>,
            pub json_schema: Option<Value>,
            /// A grammar in llguidance's Lark syntax.
            pub grammar: Option<String>,
            pub regex: Option<String>,
            /// The caller's name for itself: accepted, unused.
            #[allow(dead_code)]
            pub user: Option<String>,
            $($(#[$fdoc])* pub $field: $ty,)*
        }
    };
}

request_struct! {
    /// `POST /v1/chat/completions`.
    ChatRequest {
        messages: Vec<RequestMessage>,
        /// OpenAI's newer name for `max_tokens`.
        max_completion_tokens: Option<i64>,
        logprobs: Option<bool>,
        top_logprobs: Option<usize>,
        tools: Option<Value>,
        tool_choice: Option<Value>,
        /// Extra chat-template variables (llama-server's), e.g. `{"enable_thinking": false}`.
        chat_template_kwargs: Option<serde_json::Map<String, Value>>,
        /// Whether the model may call several functions in one reply: it may, always.
        #[allow(dead_code)]
        parallel_tool_calls: Option<bool>,
    }
}

request_struct! {
    /// `POST /v1/completions`.
    CompletionRequest {
        prompt: PromptInput,
        /// The N most likely tokens at every step, with the chosen one's (OpenAI's legacy field).
        logprobs: Option<usize>,
    }
}

/// A text completion's prompt: text, or token ids (one prompt: a list of several is refused).
#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub enum PromptInput {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
}

/// What a validated request asks the engine for.
pub struct Asked {
    pub request: Request,
    pub choices: usize,
    /// With logprobs: how many alternatives to report per token.
    pub logprobs: Option<usize>,
    pub stream: bool,
    pub include_usage: bool,
    /// The reply may hold tool calls (tools given, and not turned off).
    pub tools: bool,
}

/// A request the server refuses: its HTTP status and message, in OpenAI's error shape.
#[derive(Debug)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            message: message.into(),
        }
    }

    pub fn body(&self) -> Value {
        let kind = match self.status {
            401 => "authentication_error",
            404 => "not_found_error",
            503 => "unavailable_error",
            s if s >= 500 => "server_error",
            _ => "invalid_request_error",
        };
        json!({"error": {"code": self.status, "message": self.message, "type": kind}})
    }
}

/// Parse a JSON body into `T`, the parser's complaint as a 400.
pub fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("invalid request: {e}")))
}

/// The fields both endpoints share, checked and copied into `req`.
macro_rules! common_fields {
    ($from:expr, $req:expr) => {{
        let from = $from;
        let req: &mut Request = $req;
        req.temperature = from.temperature;
        req.top_p = from.top_p;
        req.top_k = from.top_k;
        req.min_p = from.min_p;
        req.seed = from.seed;
        req.stop = from.stop;
        req.presence_penalty = from.presence_penalty;
        req.frequency_penalty = from.frequency_penalty;
        req.repeat_penalty = from.repeat_penalty;
        req.repeat_last_n = from.repeat_last_n;
        req.response_format = from.response_format;
        req.json_schema = from.json_schema;
        req.grammar = from.grammar;
        req.regex = from.regex;
        let choices = from.n.unwrap_or(1);
        if !(1..=MAX_CHOICES).contains(&choices) {
            return Err(ApiError::bad_request(format!(
                "n must be from 1 to {MAX_CHOICES}, not {choices}"
            )));
        }
        if from.stream_options.is_some() && !from.stream {
            return Err(ApiError::bad_request(
                "stream_options applies only with stream: true",
            ));
        }
        (
            choices,
            from.stream,
            from.stream_options.unwrap_or_default().include_usage,
        )
    }};
}

fn max_tokens(value: Option<i64>) -> Result<Option<i64>, ApiError> {
    match value {
        Some(n) if n < -1 => Err(ApiError::bad_request(format!(
            "max_tokens must be a positive number (or -1: until the context is full), not {n}"
        ))),
        n => Ok(n),
    }
}

impl ChatRequest {
    pub fn into_asked(mut self) -> Result<Asked, ApiError> {
        if self.messages.is_empty() {
            return Err(ApiError::bad_request("messages is empty"));
        }
        let max = match (self.max_tokens, self.max_completion_tokens) {
            (Some(_), Some(_)) => {
                return Err(ApiError::bad_request(
                    "give max_tokens or max_completion_tokens, not both",
                ));
            }
            (a, b) => max_tokens(a.or(b))?,
        };
        let top = self.top_logprobs.unwrap_or(0);
        if top > MAX_TOP_LOGPROBS {
            return Err(ApiError::bad_request(format!(
                "top_logprobs must be from 0 to {MAX_TOP_LOGPROBS}, not {top}"
            )));
        }
        let logprobs = self.logprobs.unwrap_or(false);
        if top > 0 && !logprobs {
            return Err(ApiError::bad_request("top_logprobs needs logprobs: true"));
        }
        let tools = self
            .tools
            .as_ref()
            .and_then(Value::as_array)
            .is_some_and(|t| !t.is_empty())
            && self.tool_choice.as_ref().is_none_or(|c| c != "none");
        let mut request = Request {
            max_tokens: max,
            messages: Some(std::mem::take(&mut self.messages)),
            tools: self.tools.take(),
            tool_choice: self.tool_choice.take(),
            chat_template_kwargs: self.chat_template_kwargs.take(),
            ..Request::default()
        };
        let (choices, stream, include_usage) = common_fields!(self, &mut request);
        Ok(Asked {
            request,
            choices,
            logprobs: logprobs.then_some(top),
            stream,
            include_usage,
            tools,
        })
    }
}

impl CompletionRequest {
    pub fn into_asked(mut self) -> Result<Asked, ApiError> {
        let mut request = Request {
            raw: true,
            max_tokens: max_tokens(self.max_tokens)?,
            ..Request::default()
        };
        match std::mem::replace(&mut self.prompt, PromptInput::Tokens(Vec::new())) {
            PromptInput::Text(t) => request.prompt = Some(t),
            PromptInput::Texts(mut v) if v.len() == 1 => request.prompt = v.pop(),
            PromptInput::Texts(_) => {
                return Err(ApiError::bad_request(
                    "give one prompt per request (for several, send several requests)",
                ));
            }
            PromptInput::Tokens(ids) => request.prompt_tokens = Some(ids),
        }
        let top = self.logprobs;
        if top.is_some_and(|n| n > MAX_TOP_LOGPROBS) {
            return Err(ApiError::bad_request(format!(
                "logprobs must be from 0 to {MAX_TOP_LOGPROBS}"
            )));
        }
        let (choices, stream, include_usage) = common_fields!(self, &mut request);
        Ok(Asked {
            request,
            choices,
            logprobs: top,
            stream,
            include_usage,
            tools: false,
        })
    }
}

/// OpenAI's finish reasons: the model ended or a stop string appeared; a token limit or a full
/// context cut it.
pub fn finish_reason(f: FinishReason, called: bool) -> &'static str {
    if called {
        return "tool_calls";
    }
    match f {
        FinishReason::EndOfText | FinishReason::StopString | FinishReason::Interrupted => "stop",
        FinishReason::Length | FinishReason::ContextFull => "length",
    }
}

/// Token counts, OpenAI's `usage`.
pub fn usage(prompt_rows: usize, cached_rows: usize, completion: usize) -> Value {
    json!({
        "prompt_tokens": prompt_rows,
        "completion_tokens": completion,
        "total_tokens": prompt_rows + completion,
        "prompt_tokens_details": {"cached_tokens": cached_rows},
    })
}

/// One token's text for logprobs.
pub fn piece(tok: &Tokenizer, id: u32) -> String {
    tok.decode(&[id], false).unwrap_or_default()
}

/// Chat's `logprobs`: `{"content": [{token, logprob, bytes, top_logprobs}]}`, `top` alternatives
/// each.
pub fn chat_logprobs(tok: &Tokenizer, steps: &[StepLogprobs], top: usize) -> Value {
    let entry = |id: u32, logprob: f32| {
        let text = piece(tok, id);
        json!({"token": text, "logprob": logprob, "bytes": text.as_bytes()})
    };
    let content: Vec<Value> = steps
        .iter()
        .map(|s| {
            let mut e = entry(s.token, s.logprob);
            e["top_logprobs"] = s
                .top
                .iter()
                .take(top)
                .map(|&(id, _, lp)| entry(id, lp))
                .collect();
            e
        })
        .collect();
    json!({ "content": content })
}

/// Text completion's `logprobs`: parallel lists of tokens, their logprobs, their alternatives
/// (a map of text to logprob) and where each starts in the text (the first at `offset`).
pub fn completion_logprobs(
    tok: &Tokenizer,
    steps: &[StepLogprobs],
    top: usize,
    mut offset: usize,
) -> Value {
    let (mut tokens, mut lps, mut tops, mut offsets) = (vec![], vec![], vec![], vec![]);
    for s in steps {
        let text = piece(tok, s.token);
        offsets.push(offset);
        offset += text.len();
        tokens.push(text);
        lps.push(s.logprob);
        let mut alternatives = serde_json::Map::new();
        for &(id, _, lp) in s.top.iter().take(top) {
            alternatives.insert(piece(tok, id), json!(lp));
        }
        tops.push(Value::Object(alternatives));
    }
    json!({"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets})
}

/// kiln's timings for one choice, as llama-server adds them.
pub fn timings(g: &Generation) -> Value {
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    json!({
        "prompt_n": g.prompt_tokens,
        "prompt_ms": ms(g.prefill_time),
        "predicted_n": g.tokens.len(),
        "predicted_ms": ms(g.decode_time),
        "predicted_per_second": g.tokens.len() as f64 / g.decode_time.as_secs_f64().max(1e-9),
    })
}
