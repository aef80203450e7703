//! One generation request on a session that serves many, as `kiln run --batch` reads them from
//! JSON lines and `kiln serve` receives them over HTTP: the request's fields (OpenAI's
//! chat/completions names where they exist, plus kiln's `regex` and `grammar`), its prompt (raw,
//! through the chat template, or with its images encoded), its sampler and constraint (the
//! command line's values where the request gives none), and the generation, which reuses what the
//! session's KV cache shares with the prompt.

use std::sync::atomic::AtomicBool;

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use serde_json::{Value, json};

use super::output::result_json;
use super::tool_calls::{Tools, calls_json};
use super::values::{LastN, Seed};
use super::vision::{
    ImageEncoder, Images, VisionArgs, load_image_url, prefill_pieces, prompt_rows,
};
use super::{
    AnyLoaded, CacheArgs, Loaded, SamplingArgs, SpeculationArgs, TemplateKwargs, context_size,
};
use crate::backend::Backend;
use crate::model::batcher::Batcher;
use crate::model::chat::{ChatTemplate, Message};
use crate::model::generate::{
    GenerateOptions, Generation, LogprobsSink, ReasoningSink, StopRules, generate,
};
use crate::model::multimodal::{self, PromptPiece};
use crate::model::session::{DEFAULT_BATCH, EMBEDDED_ROW};
use crate::model::speculative::Drafter;
use crate::model::tools::ToolCall;
use crate::model::{Session, Tokenizer};
use crate::sampler::{ConstraintCompiler, ConstraintSpec, Sampler};

/// One request: a batch line as it is read, or what a server request asks for.
#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct Request {
    pub id: Option<Value>,
    pub prompt: Option<String>,
    pub messages: Option<Vec<RequestMessage>>,
    pub system: Option<String>,
    pub max_tokens: Option<i64>,
    pub temperature: Option<f32>,
    pub top_k: Option<usize>,
    pub top_p: Option<f32>,
    pub min_p: Option<f32>,
    pub seed: Option<Seed>,
    pub repeat_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub repeat_last_n: Option<LastN>,
    pub stop: Option<Stop>,
    pub json_schema: Option<Value>,
    /// OpenAI's `{"type": "json_object"}` or `{"type": "json_schema", "json_schema": {"schema": …}}`.
    pub response_format: Option<Value>,
    pub regex: Option<String>,
    /// A grammar in llguidance's Lark syntax (the text, not a file).
    pub grammar: Option<String>,
    /// Extra chat-template variables for this request (llama-server's `chat_template_kwargs`:
    /// `{"enable_thinking": false}`), over the command line's.
    pub chat_template_kwargs: Option<TemplateKwargs>,
    /// OpenAI's function definitions (`[{"type": "function", "function": {…}}]`).
    pub tools: Option<Value>,
    /// `"none"`, `"auto"`, `"required"` or `{"type": "function", "function": {"name": …}}`.
    pub tool_choice: Option<Value>,
    /// The prompt goes to the model as it is, never through the chat template (a server's
    /// `/v1/completions`); not a batch field.
    #[serde(skip)]
    pub raw: bool,
    /// The prompt as token ids (a server's `/v1/completions` takes them); not a batch field.
    #[serde(skip)]
    pub prompt_tokens: Option<Vec<u32>>,
}

/// A message: its content a string, or OpenAI's content parts.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct RequestMessage {
    pub role: String,
    /// Null for an assistant turn that only called tools.
    pub content: Option<Content>,
    /// An assistant turn's calls, as OpenAI gives them back.
    pub tool_calls: Option<Value>,
    /// A tool result's call.
    pub tool_call_id: Option<String>,
    pub name: Option<String>,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Deserialize, Debug, Clone)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Part {
    Text { text: String },
    ImageUrl { image_url: ImageUrl },
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct ImageUrl {
    pub url: String,
    /// OpenAI's resolution hint; the projector decides the resolution here.
    #[allow(dead_code)]
    pub detail: Option<String>,
}

impl RequestMessage {
    /// The message's text (its text parts joined by newlines) and its images' URLs, in order.
    /// As kiln's command lines place them, the images go before the text.
    pub fn split(&self) -> (Message, Vec<&str>) {
        match &self.content {
            None => (Message::new(&self.role, ""), Vec::new()),
            Some(Content::Text(t)) => (Message::new(&self.role, t), Vec::new()),
            Some(Content::Parts(parts)) => {
                let mut texts = Vec::new();
                let mut urls = Vec::new();
                for part in parts {
                    match part {
                        Part::Text { text } => texts.push(text.as_str()),
                        Part::ImageUrl { image_url } => urls.push(image_url.url.as_str()),
                    }
                }
                (Message::new(&self.role, &texts.join("\n")), urls)
            }
        }
    }
}

/// A request's prompt: tokens, or pieces with its images encoded.
enum Prompt {
    Tokens(Vec<u32>),
    Pieces(Vec<PromptPiece>, Images),
}

#[derive(Deserialize, Debug, Clone)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Request {
    /// The constraint the request asks for, if any.
    fn constraint(&self) -> Result<Option<ConstraintSpec>> {
        let mut asked = Vec::new();
        if let Some(s) = &self.json_schema {
            asked.push(ConstraintSpec::JsonSchema(s.clone()));
        }
        if let Some(f) = &self.response_format {
            match f["type"].as_str() {
                Some("json_object") => asked.push(ConstraintSpec::JsonSchema(
                    serde_json::json!({"type": "object"}),
                )),
                Some("json_schema") => {
                    let schema = &f["json_schema"]["schema"];
                    if schema.is_null() {
                        bail!("response_format json_schema needs json_schema.schema");
                    }
                    asked.push(ConstraintSpec::JsonSchema(schema.clone()));
                }
                Some("text") => {}
                _ => bail!("response_format type must be text, json_object or json_schema"),
            }
        }
        if let Some(r) = &self.regex {
            asked.push(ConstraintSpec::Regex(r.clone()));
        }
        if let Some(g) = &self.grammar {
            asked.push(ConstraintSpec::Lark(g.clone()));
        }
        match asked.len() {
            0 | 1 => Ok(asked.pop()),
            _ => bail!("give at most one of json_schema, response_format, regex and grammar"),
        }
    }
}

/// What every request gets unless it says otherwise: the command line's values.
#[derive(Clone, Copy)]
pub struct Defaults<'a> {
    pub sampling: &'a SamplingArgs,
    /// Most tokens to generate (-1: no limit but the context).
    pub max_tokens: i64,
    pub stop: &'a [String],
    pub system: Option<&'a str>,
    /// Prompts go through the chat template (else a `prompt` is raw text).
    pub chat: bool,
    pub constraint: Option<&'a ConstraintSpec>,
    pub speculation: &'a SpeculationArgs,
    pub vision: &'a VisionArgs,
    /// `--tools` and `--tool-choice`, for requests that give none.
    pub tools: Option<&'a Value>,
    pub tool_choice: Option<&'a Value>,
}

/// How a request's generation is followed as it runs.
pub struct Follow<'f> {
    /// Answer text as it comes.
    pub on_text: &'f mut dyn FnMut(&str),
    /// Reasoning text as it comes (None: only collected).
    pub on_reasoning: Option<&'f ReasoningSink<'f>>,
    /// Each step's logprobs as they are taken (when `logprobs` asks for them).
    pub on_logprobs: Option<&'f LogprobsSink<'f>>,
    /// Stops the generation when set (Ctrl-C; a client that went away).
    pub cancel: &'f AtomicBool,
    /// Record the top-N alternatives at every step (0: none).
    pub logprobs: usize,
}

/// A finished request.
pub struct Outcome {
    /// The object `kiln run --format json` prints, with the batch fields added.
    pub json: Value,
    pub generation: Generation,
    /// The prompt's rows in the context (text tokens and image rows), and how many of them the
    /// cache already held.
    pub prompt_rows: usize,
    pub cached_rows: usize,
    /// The seed the sampler ran with.
    pub seed: u64,
    /// With tools: the calls taken out of the reply, and the reply's text without them.
    pub tool_calls: Vec<ToolCall>,
    pub content: String,
}

/// The state shared by the requests: the model, one session (its KV cache reused across
/// requests), the chat template, and the constraint compiler once one is needed.
pub struct Runner<'a, 'm, B: Backend> {
    defaults: Defaults<'a>,
    loaded: &'m Loaded<B>,
    session: Session<'m, B>,
    template: ChatTemplate,
    compiler: Option<ConstraintCompiler>,
    /// Speculative decoding's drafter, shared by the requests (a draft model's session follows
    /// each request's context, as the model's does).
    drafter: Option<Box<dyn Drafter + Send + 'a>>,
    /// The projector's tower, loaded for the first request with an image.
    images: Option<ImageEncoder<'m, B>>,
    /// Continuous batching: the session's forward calls run with other runners' (each on a
    /// thread of its own), and a request holds a seat while it generates.
    batcher: Option<&'m Batcher<'m, B>>,
}

impl<'a, 'm, B: Backend> Runner<'a, 'm, B> {
    /// A runner over a new session of `ctx_size` (None: the model's, at most 4096), with the
    /// chat template's extra variables and the drafter `defaults.speculation` asks for; its
    /// forward calls through `batcher` where one is given.
    pub fn new(
        defaults: Defaults<'a>,
        loaded: &'m Loaded<B>,
        ctx_size: Option<usize>,
        cache: &CacheArgs,
        kwargs: Option<TemplateKwargs>,
        draft: Option<&'a AnyLoaded>,
        batcher: Option<&'m Batcher<'m, B>>,
    ) -> Result<Self> {
        let (tok, model) = (&loaded.tokenizer, &loaded.model);
        let ctx = context_size(ctx_size, model.config.context_length);
        let mut session = match batcher {
            Some(b) => Session::batched(b, ctx, DEFAULT_BATCH, cache.types())?,
            None => Session::with_options(model, ctx, DEFAULT_BATCH, cache.types())?,
        };
        defaults.speculation.prepare(&mut session)?;
        let drafter = defaults
            .speculation
            .drafter(draft, tok, ctx, cache.types())?;
        Ok(Runner {
            template: ChatTemplate::for_model(tok, model.config.arch)
                .with_kwargs(kwargs.unwrap_or_default()),
            defaults,
            loaded,
            session,
            compiler: None,
            drafter,
            images: None,
            batcher,
        })
    }

    pub fn loaded(&self) -> &'m Loaded<B> {
        self.loaded
    }

    /// The context size, in tokens.
    pub fn ctx(&self) -> usize {
        self.session.ctx()
    }

    /// The request's tools (else the command line's), checked against the template.
    fn tools<'r>(&self, req: &'r Request) -> Result<Option<Tools<'r>>>
    where
        'a: 'r,
    {
        let tools = req.tools.as_ref().or(self.defaults.tools);
        let choice = req.tool_choice.as_ref().or(self.defaults.tool_choice);
        Tools::of(tools, choice, &self.template)
    }

    /// Forget what the session holds: the next request prefills its whole prompt.
    pub fn reset(&mut self) {
        self.session.reset();
    }
}

impl<B: Backend> Runner<'_, '_, B> {
    /// Run one request on the shared session.
    pub fn request(&mut self, req: &Request, follow: Follow) -> Result<Outcome> {
        let tok: &Tokenizer = &self.loaded.tokenizer;
        let tools = self.tools(req)?;
        let prompt = self.prompt(req, tools.as_ref())?;
        let (rows, image_row) = match &prompt {
            Prompt::Tokens(ids) => (ids.clone(), vec![false; ids.len()]),
            Prompt::Pieces(pieces, images) => piece_rows(pieces, images),
        };
        let ctx = self.session.ctx();
        if rows.len() > ctx {
            bail!(
                "the prompt is {} tokens but the context holds {ctx}; use -c to enlarge it",
                rows.len()
            );
        }
        if matches!(prompt, Prompt::Pieces(..)) && self.drafter.is_some() {
            bail!("speculative decoding does not take images yet: leave out --spec-type");
        }

        let mut sampling = self.defaults.sampling.clone();
        macro_rules! take {
            ($($field:ident => $flag:ident),*) => {$(
                if let Some(v) = req.$field { sampling.$flag = v; }
            )*};
        }
        take!(temperature => temperature, top_k => top_k, top_p => top_p, min_p => min_p,
              repeat_penalty => repeat_penalty, frequency_penalty => frequency_penalty,
              presence_penalty => presence_penalty, repeat_last_n => repeat_last_n);
        if req.seed.is_some() {
            sampling.seed = req.seed;
        }
        let mut sampler = Sampler::new(sampling.config(ctx)?);
        let asked = req.constraint()?;
        let constraint = match tools.as_ref().map(Tools::grammar).transpose()?.flatten() {
            Some(_) if asked.is_some() => bail!(
                "a required tool call cannot take response_format, json_schema, regex or grammar too"
            ),
            Some(grammar) => Some(ConstraintSpec::Lark(grammar)),
            None => asked.or_else(|| self.defaults.constraint.cloned()),
        };
        if let Some(spec) = constraint {
            if self.compiler.is_none() {
                self.compiler = Some(super::constrain::compiler_for(
                    tok,
                    self.loaded.model.config.vocab_size,
                )?);
            }
            if let Some(compiler) = &self.compiler {
                sampler.set_constraint(Some(super::constrain::compile(compiler, &spec)?));
            }
        }
        let max_tokens = req.max_tokens.unwrap_or(self.defaults.max_tokens);
        let stop_strings = match &req.stop {
            None => self.defaults.stop.to_vec(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };

        // Keep what the cache shares with this prompt, up to the first image on either side
        // (images are not matched across requests); always run at least one token so there are
        // logits to start from.
        // From here on the session runs forward calls: other sequences' steps wait for its.
        let _seat = self.batcher.map(Batcher::seat);
        let shared = (0..rows.len().min(self.session.tokens().len()))
            .take_while(|&i| {
                self.session.tokens()[i] == rows[i]
                    && self.session.image_at(i).is_none()
                    && !image_row[i]
            })
            .count()
            .min(rows.len() - 1);
        self.session.truncate(shared)?;
        // The rest of the prompt: with images, everything up to its last run of text is
        // prefilled here, and that run starts the generation.
        let ids = match &prompt {
            Prompt::Tokens(ids) => ids[shared..].to_vec(),
            Prompt::Pieces(pieces, images) => {
                prefill_pieces(&mut self.session, pieces, images, shared)?
            }
        };
        // The penalties see the whole prompt's text (not its images' rows), as in a run without
        // reuse.
        for (i, &t) in rows[..rows.len() - ids.len()].iter().enumerate() {
            if !image_row[i] {
                sampler.accept(t);
            }
        }
        let opts = GenerateOptions {
            rules: StopRules {
                max_tokens: usize::try_from(max_tokens).unwrap_or(usize::MAX),
                stop_strings,
            },
            logprobs: follow.logprobs,
            cancel: Some(follow.cancel),
            on_reasoning: follow.on_reasoning,
            on_logprobs: follow.on_logprobs,
            speculation: self.defaults.speculation.speculation(&self.drafter),
        };
        let on_text = follow.on_text;
        let result = generate(&mut self.session, tok, &mut sampler, &ids, &opts, |piece| {
            on_text(piece);
            Ok(())
        })?;
        let mut v = result_json(self.loaded, &result, &sampler, follow.logprobs > 0);
        let (content, tool_calls) = match &tools {
            Some(t) => t.parse(&result, tok),
            None => (result.text.clone(), Vec::new()),
        };
        if !tool_calls.is_empty() {
            v["text"] = json!(content);
            v["tool_calls"] = calls_json(&tool_calls, "0").into();
        }
        v["cached_prompt_tokens"] = json!(shared);
        if let Prompt::Pieces(_, images) = &prompt {
            v["image_tokens"] = images.tokens().into();
            v["timings"]["image_encode_ms"] = (images.encode_time.as_secs_f64() * 1e3).into();
            // As for text: the rows this request ran (`cached_prompt_tokens` the rest).
            v["prompt_tokens"] = (rows.len() - shared).into();
        }
        Ok(Outcome {
            json: v,
            prompt_rows: rows.len(),
            cached_rows: shared,
            seed: sampler.config.seed,
            generation: result,
            tool_calls,
            content,
        })
    }

    /// The request's prompt: its tokens, or, when a message has images, its pieces with the
    /// images encoded (the projector loaded the first time).
    fn prompt(&mut self, req: &Request, tools: Option<&Tools>) -> Result<Prompt> {
        let tok = &self.loaded.tokenizer;
        if let Some(ids) = &req.prompt_tokens {
            let vocab = self.loaded.model.config.vocab_size;
            if ids.is_empty() {
                bail!("the prompt is empty");
            }
            if let Some(bad) = ids.iter().find(|&&id| id as usize >= vocab) {
                bail!("the prompt has token id {bad}, but the vocabulary has {vocab}");
            }
            return Ok(Prompt::Tokens(ids.clone()));
        }
        let mut messages: Vec<(Message, Vec<&str>)> = Vec::new();
        let system = req.system.as_deref().or(self.defaults.system);
        let template = match &req.chat_template_kwargs {
            None => self.template.clone(),
            Some(extra) => self.template.clone().with_extra_kwargs(extra),
        };
        if let Some(m) = &req.messages
            && (tools.is_some() || has_tool_turns(m))
        {
            if m.iter().any(|m| !m.split().1.is_empty()) {
                bail!("tool calls with images are not supported yet");
            }
            let json = messages_json(system, m);
            let text = match tools {
                Some(t) => template.render_with_tools(&json, t.tools, true)?,
                None => template.render_json(&json, true)?,
            };
            return Ok(Prompt::Tokens(template.encode(tok, &text)?));
        }
        match (&req.prompt, &req.messages) {
            (Some(_), Some(_)) => bail!("give either prompt or messages, not both"),
            (None, None) => bail!("the request has neither prompt nor messages"),
            (Some(p), None) if p.is_empty() => bail!("the prompt is empty"),
            (Some(p), None) if req.raw || (!self.defaults.chat && req.system.is_none()) => {
                return Ok(Prompt::Tokens(tok.encode(p, true)?));
            }
            (Some(p), None) => {
                if let Some(s) = system {
                    messages.push((Message::new("system", s), Vec::new()));
                }
                messages.push((Message::new("user", p), Vec::new()));
            }
            (None, Some(m)) => {
                if m.is_empty() {
                    bail!("messages is empty");
                }
                if let Some(s) = system
                    && m[0].role != "system"
                {
                    messages.push((Message::new("system", s), Vec::new()));
                }
                messages.extend(m.iter().map(RequestMessage::split));
            }
        }
        if messages.iter().all(|(_, urls)| urls.is_empty()) {
            let plain: Vec<Message> = messages.into_iter().map(|(m, _)| m).collect();
            return Ok(Prompt::Tokens(template.prompt_ids(tok, &plain, true)?));
        }
        if self.images.is_none() {
            let model = &self.loaded.model;
            self.images = Some(
                self.defaults
                    .vision
                    .encoder(model, &self.loaded.file.path)?,
            );
        }
        let Some(encoder) = &self.images else {
            unreachable!("loaded above")
        };
        let start = std::time::Instant::now();
        let mut encoded = Vec::new();
        for (i, url) in messages.iter().flat_map(|(_, urls)| urls).enumerate() {
            let img = load_image_url(url).with_context(|| format!("image {}", i + 1))?;
            encoded.push(
                encoder
                    .encode_image(&img)
                    .with_context(|| format!("encoding image {}", i + 1))?,
            );
        }
        let counts: Vec<(Message, usize)> = messages
            .into_iter()
            .map(|(m, urls)| (m, urls.len()))
            .collect();
        let pieces = multimodal::render_pieces(&template, tok, &counts, encoder.markers)?;
        let images = Images {
            encoded,
            encode_time: start.elapsed(),
            markers: encoder.markers,
        };
        Ok(Prompt::Pieces(pieces, images))
    }
}

/// The rows a prompt with images takes in the context (its tokens, and `EMBEDDED_ROW` for each row
/// of an image, as the session's `tokens()` shows them), and which rows are an image's.
fn piece_rows(pieces: &[PromptPiece], images: &Images) -> (Vec<u32>, Vec<bool>) {
    let n = prompt_rows(pieces, images);
    let (mut rows, mut image_row) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for piece in pieces {
        let (ids, image) = match piece {
            PromptPiece::Tokens(ids) => (ids.clone(), false),
            PromptPiece::Image(i) => (vec![EMBEDDED_ROW; images.encoded[*i].tokens()], true),
        };
        image_row.extend(std::iter::repeat_n(image, ids.len()));
        rows.extend(ids);
    }
    (rows, image_row)
}

/// Whether the conversation holds earlier tool calls or their results (it must then be rendered
/// with them, even when this request gives no tools).
pub fn has_tool_turns(messages: &[RequestMessage]) -> bool {
    messages
        .iter()
        .any(|m| m.tool_calls.is_some() || m.role == "tool")
}

/// The conversation as the template takes it: OpenAI's messages, with each earlier call's
/// `arguments` (JSON text in the API) given as the object templates write out with `tojson`, as
/// llama.cpp and Hugging Face pass them.
pub fn messages_json(system: Option<&str>, messages: &[RequestMessage]) -> Value {
    let mut out = Vec::new();
    if let Some(s) = system
        && messages.first().is_none_or(|m| m.role != "system")
    {
        out.push(json!({"role": "system", "content": s}));
    }
    for m in messages {
        let (text, _) = m.split();
        let mut v = json!({"role": m.role, "content": text.content});
        if let Some(calls) = &m.tool_calls {
            let calls: Vec<Value> = calls
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    let mut c = c.clone();
                    if let Some(args) = c["function"]["arguments"].as_str()
                        && let Ok(parsed) = serde_json::from_str::<Value>(args)
                    {
                        c["function"]["arguments"] = parsed;
                    }
                    c
                })
                .collect();
            v["tool_calls"] = Value::Array(calls);
        }
        if let Some(id) = &m.tool_call_id {
            v["tool_call_id"] = json!(id);
        }
        if let Some(name) = &m.name {
            v["name"] = json!(name);
        }
        out.push(v);
    }
    Value::Array(out)
}
