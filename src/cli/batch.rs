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
use serde::Deserialize;
use serde_json::{Value, json};

use super::output::{cancel_flag, install_interrupt_handler, result_json};
use super::values::{LastN, Seed};
use super::vision::{ImageEncoder, Images, load_image_url, prefill_pieces, prompt_rows};
use super::{AnyLoaded, Loaded, RunArgs, context_size, error_message, load, on_backend};
use crate::backend::Backend;
use crate::model::chat::{ChatTemplate, Message};
use crate::model::generate::{FinishReason, GenerateOptions, StopRules, generate};
use crate::model::multimodal::{self, PromptPiece};
use crate::model::session::{DEFAULT_BATCH, EMBEDDED_ROW};
use crate::model::speculative::Drafter;
use crate::model::{Session, Tokenizer};
use crate::sampler::{ConstraintCompiler, ConstraintSpec, Sampler};

/// The longest input line read (a request with a long prompt fits many times over).
const MAX_LINE_BYTES: u64 = 16 << 20;

/// One request line.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct Request {
    id: Option<Value>,
    prompt: Option<String>,
    messages: Option<Vec<RequestMessage>>,
    system: Option<String>,
    max_tokens: Option<i64>,
    temperature: Option<f32>,
    top_k: Option<usize>,
    top_p: Option<f32>,
    min_p: Option<f32>,
    seed: Option<Seed>,
    repeat_penalty: Option<f32>,
    frequency_penalty: Option<f32>,
    presence_penalty: Option<f32>,
    repeat_last_n: Option<LastN>,
    stop: Option<Stop>,
    json_schema: Option<Value>,
    /// OpenAI's `{"type": "json_object"}` or `{"type": "json_schema", "json_schema": {"schema": …}}`.
    response_format: Option<Value>,
    regex: Option<String>,
    /// A grammar in llguidance's Lark syntax (the text, not a file).
    grammar: Option<String>,
}

/// A message: its content a string, or OpenAI's content parts.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct RequestMessage {
    role: String,
    content: Content,
}

#[derive(Deserialize, Debug)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Deserialize, Debug)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum Part {
    Text { text: String },
    ImageUrl { image_url: ImageUrl },
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct ImageUrl {
    url: String,
    /// OpenAI's resolution hint; the projector decides the resolution here.
    #[allow(dead_code)]
    detail: Option<String>,
}

impl RequestMessage {
    /// The message's text (its text parts joined by newlines) and its images' URLs, in order.
    /// As kiln's command lines place them, the images go before the text.
    fn split(&self) -> (Message, Vec<&str>) {
        match &self.content {
            Content::Text(t) => (Message::new(&self.role, t), Vec::new()),
            Content::Parts(parts) => {
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

#[derive(Deserialize, Debug)]
#[serde(untagged)]
enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Request {
    /// The constraint the request asks for, else the command line's.
    fn constraint(&self, default: Option<&ConstraintSpec>) -> Result<Option<ConstraintSpec>> {
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
            0 => Ok(default.cloned()),
            1 => Ok(asked.pop()),
            _ => bail!("give at most one of json_schema, response_format, regex and grammar"),
        }
    }
}

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
    let loaded = load(
        &args.model,
        &args.backend,
        args.ctx_size,
        args.cache.types(),
        args.speculation.wants_mtp(),
    )?;
    let draft = args
        .speculation
        .load_draft(&args.backend, args.ctx_size, args.cache.types())?;
    on_backend!(loaded, loaded => run_batch(&args, input, total_lines, default_constraint.as_ref(), loaded, draft.as_ref()))
}

/// The state shared by the requests: the model, one session (its KV cache reused across
/// requests), the chat template, and the constraint compiler once one is needed.
struct Batch<'a, 'm, B: Backend> {
    args: &'a RunArgs,
    loaded: &'m Loaded<B>,
    session: Session<'m, B>,
    template: ChatTemplate,
    chat: bool,
    default_constraint: Option<&'a ConstraintSpec>,
    compiler: Option<ConstraintCompiler>,
    /// Speculative decoding's drafter, shared by the requests (a draft model's session follows
    /// each request's context, as the model's does).
    drafter: Option<Box<dyn Drafter + 'a>>,
    /// The projector's tower, loaded for the first request with an image.
    images: Option<ImageEncoder<'m, B>>,
}

fn run_batch<B: Backend>(
    args: &RunArgs,
    input: Box<dyn Read>,
    total_lines: Option<usize>,
    default_constraint: Option<&ConstraintSpec>,
    loaded: Loaded<B>,
    draft: Option<&AnyLoaded>,
) -> Result<ExitCode> {
    let (tok, model) = (&loaded.tokenizer, &loaded.model);
    let ctx = context_size(args.ctx_size, model.config.context_length);
    let mut session = Session::with_options(model, ctx, DEFAULT_BATCH, args.cache.types())?;
    args.speculation.prepare(&mut session)?;
    let drafter = args
        .speculation
        .drafter(draft, tok, ctx, args.cache.types())?;
    let mut batch = Batch {
        args,
        loaded: &loaded,
        session,
        template: ChatTemplate::for_model(tok, model.config.arch)
            .with_kwargs(args.chat_template_kwargs.clone().unwrap_or_default()),
        chat: args.chat || args.system.is_some() || (!args.raw && tok.chat_template.is_some()),
        default_constraint,
        compiler: None,
        drafter,
        images: None,
    };
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
                    (id, batch.request(&req))
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
            Ok((mut v, finish)) => {
                // The id first, for readers that look at the start of a line.
                let mut with_id = serde_json::Map::new();
                with_id.insert("id".to_string(), id);
                if let Value::Object(map) = &mut v {
                    with_id.append(map);
                }
                (Value::Object(with_id), finish == FinishReason::Interrupted)
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

impl<B: Backend> Batch<'_, '_, B> {
    /// Run one request on the shared session; its result object and how it finished.
    fn request(&mut self, req: &Request) -> Result<(Value, FinishReason)> {
        let tok: &Tokenizer = &self.loaded.tokenizer;
        let prompt = self.prompt(req)?;
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

        let mut sampling = self.args.sampling.clone();
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
        if let Some(spec) = req.constraint(self.default_constraint)? {
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
        let max_tokens = req.max_tokens.unwrap_or(self.args.max_tokens);
        let stop_strings = match &req.stop {
            None => self.args.stop.clone(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };

        // Keep what the cache shares with this prompt, up to the first image on either side
        // (images are not matched across requests); always run at least one token so there are
        // logits to start from.
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
            logprobs: 0,
            cancel: Some(cancel_flag()),
            on_reasoning: None,
            speculation: self.args.speculation.speculation(&self.drafter),
        };
        let result = generate(
            &mut self.session,
            tok,
            &mut sampler,
            &ids,
            &opts,
            |_| Ok(()),
        )?;
        let mut v = result_json(self.loaded, &result, &sampler, false);
        v["cached_prompt_tokens"] = json!(shared);
        if let Prompt::Pieces(_, images) = &prompt {
            v["image_tokens"] = images.tokens().into();
            v["timings"]["image_encode_ms"] = (images.encode_time.as_secs_f64() * 1e3).into();
            // As for text: the rows this request ran (`cached_prompt_tokens` the rest).
            v["prompt_tokens"] = (rows.len() - shared).into();
        }
        Ok((v, result.finish))
    }

    /// The request's prompt: its tokens, or, when a message has images, its pieces with the
    /// images encoded (the projector loaded the first time).
    fn prompt(&mut self, req: &Request) -> Result<Prompt> {
        let tok = &self.loaded.tokenizer;
        let mut messages: Vec<(Message, Vec<&str>)> = Vec::new();
        let system = req.system.as_ref().or(self.args.system.as_ref());
        match (&req.prompt, &req.messages) {
            (Some(_), Some(_)) => bail!("give either prompt or messages, not both"),
            (None, None) => bail!("the request has neither prompt nor messages"),
            (Some(p), None) if p.is_empty() => bail!("the prompt is empty"),
            (Some(p), None) if !self.chat && req.system.is_none() => {
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
            return Ok(Prompt::Tokens(self.template.prompt_ids(tok, &plain, true)?));
        }
        if self.images.is_none() {
            let model = &self.loaded.model;
            self.images = Some(self.args.vision.encoder(model, &self.loaded.file.path)?);
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
        let pieces = multimodal::render_pieces(&self.template, tok, &counts, encoder.markers)?;
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
