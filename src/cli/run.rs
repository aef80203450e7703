//! `kiln run`: one prompt in, generated text streamed out. stdout carries only the generated text
//! (or, with `--format json`, one JSON object); everything else goes to stderr. Exit codes: 0 done,
//! 1 error, 2 bad flags, 130 interrupted by Ctrl-C (what was generated is flushed first).

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::Ordering;

use anyhow::{Context, Result, bail};

use super::constrain::{compile, compiler_for};
use super::output::{cancel_flag, install_interrupt_handler, per_s, result_json};
use super::speculation::SpecType;
use super::tokenize::{print_verbose_prompt, text_or_stdin};
use super::tool_calls::{Tools, calls_json};
use super::vision::{Images, prefill_pieces, prompt_rows};
use super::{
    AnyLoaded, Loaded, OutputFormat, ReasoningDisplay, RunArgs, context_size, load_with_draft,
    on_backend,
};
use crate::backend::Backend;
use crate::model::chat::{ChatTemplate, Message, TemplateOrigin};
use crate::model::generate::{FinishReason, GenerateOptions, ReasoningSink, StopRules, generate};
use crate::model::multimodal::{self, PromptPiece};
use crate::model::session::DEFAULT_BATCH;
use crate::model::{Session, Tokenizer};
use crate::sampler::{ConstraintSpec, Sampler};

/// The chat template the prompt goes through, or None for a raw prompt.
fn template_for(args: &RunArgs, tok: &Tokenizer, arch: crate::model::Arch) -> Option<ChatTemplate> {
    let has_template = tok.chat_template.is_some();
    let chat = args.chat || args.system.is_some() || (!args.raw && has_template);
    if !chat {
        return None;
    }
    let template = ChatTemplate::for_model(tok, arch)
        .with_kwargs(args.chat_template_kwargs.clone().unwrap_or_default());
    if template.origin != TemplateOrigin::Model && args.verbose {
        eprintln!(
            "note: the model has no chat template; using {}",
            template.describe()
        );
    }
    Some(template)
}

/// The system message, if any.
fn history(args: &RunArgs) -> Vec<Message> {
    args.system
        .iter()
        .map(|s| Message::new("system", s))
        .collect()
}

/// The prompt's token ids: raw, or rendered through the chat template (with the functions of
/// `--tools`).
fn prompt_ids(
    args: &RunArgs,
    text: &str,
    tok: &Tokenizer,
    arch: crate::model::Arch,
    tools: Option<&Tools>,
) -> Result<Vec<u32>> {
    let Some(template) = template_for(args, tok, arch) else {
        return Ok(tok.encode(text, true)?);
    };
    let mut messages = history(args);
    messages.push(Message::new("user", text));
    let Some(tools) = tools else {
        return Ok(template.prompt_ids(tok, &messages, true)?);
    };
    let json = serde_json::to_value(&messages)?;
    let rendered = template.render_with_tools(&json, tools.tools, true)?;
    Ok(template.encode(tok, &rendered)?)
}

/// `--tools` checked against the model's template: None without the flag, or with
/// `--tool-choice none`.
fn tools_for<'t>(
    args: &RunArgs,
    defs: Option<&'t serde_json::Value>,
    choice: Option<&serde_json::Value>,
    tok: &Tokenizer,
    arch: crate::model::Arch,
) -> Result<Option<Tools<'t>>> {
    let Some(defs) = defs else {
        return Ok(None);
    };
    let Some(template) = template_for(args, tok, arch) else {
        bail!(super::FlagError(
            "--tools needs the chat template: leave out --raw".into()
        ));
    };
    Tools::of(Some(defs), choice, &template).map_err(|e| super::FlagError(e.to_string()).into())
}

/// The prompt's pieces with `images` among its tokens.
fn image_prompt(
    args: &RunArgs,
    text: &str,
    tok: &Tokenizer,
    arch: crate::model::Arch,
    images: &Images,
) -> Result<Vec<PromptPiece>> {
    let n = images.encoded.len();
    Ok(match template_for(args, tok, arch) {
        None => multimodal::raw_prompt(tok, text, n, images.markers)?,
        Some(t) => multimodal::chat_prompt(&t, tok, &history(args), text, n, images.markers)?,
    })
}

pub fn run(args: RunArgs) -> Result<ExitCode> {
    args.sampling.validate()?;
    args.speculation.validate()?;
    if args.logprobs > 0 && args.format != OutputFormat::Json {
        bail!("--logprobs needs --format json");
    }
    let constraint = args.constraint.spec()?;
    let text = text_or_stdin(args.prompt.clone())?;
    if text.is_empty() {
        bail!("the prompt is empty");
    }

    // Read before the model loads: a bad file is known at once.
    let tool_flags = args.tool_flags()?;
    let (loaded, draft) = load_with_draft(
        &args.model,
        &args.backend,
        args.ctx_size,
        &args.cache,
        &args.speculation,
    )?;
    on_backend!(loaded, loaded => generate_for(&args, &text, constraint.as_ref(), &tool_flags, loaded, draft.as_ref()))
}

/// Everything after loading, on whichever backend the model was loaded.
fn generate_for<B: Backend>(
    args: &RunArgs,
    text: &str,
    constraint: Option<&ConstraintSpec>,
    (tool_defs, tool_choice): &(Option<serde_json::Value>, Option<serde_json::Value>),
    loaded: Loaded<B>,
    draft: Option<&AnyLoaded>,
) -> Result<ExitCode> {
    let (tok, model) = (&loaded.tokenizer, &loaded.model);
    let tools = tools_for(
        args,
        tool_defs.as_ref(),
        tool_choice.as_ref(),
        tok,
        model.config.arch,
    )?;
    let tool_grammar = tools.as_ref().map(Tools::grammar).transpose()?.flatten();
    if tool_grammar.is_some() && constraint.is_some() {
        bail!(super::FlagError(
            "--tool-choice required (or a name) forces a call: it cannot take --json, \
             --json-schema, --grammar or --regex too"
                .into()
        ));
    }
    let tool_constraint = tool_grammar.map(ConstraintSpec::Lark);
    let constraint = tool_constraint.as_ref().or(constraint);
    let images = args.vision.encode(model, &loaded.file.path, args.verbose)?;
    if images.is_some() && tools.is_some() {
        bail!("--tools does not take images yet");
    }
    if images.is_some()
        && (args
            .speculation
            .spec_type
            .is_some_and(|t| t != SpecType::None))
    {
        bail!("speculative decoding does not take images yet: leave out --spec-type");
    }
    let (pieces, ids, rows) = match &images {
        None => {
            let ids = prompt_ids(args, text, tok, model.config.arch, tools.as_ref())?;
            let rows = ids.len();
            (Vec::new(), ids, rows)
        }
        Some(img) => {
            let pieces = image_prompt(args, text, tok, model.config.arch, img)?;
            let rows = prompt_rows(&pieces, img);
            (pieces, Vec::new(), rows)
        }
    };
    if args.verbose_prompt {
        for piece in &pieces {
            match piece {
                PromptPiece::Tokens(ids) => print_verbose_prompt(tok, ids),
                PromptPiece::Image(i) => eprintln!(
                    "image {}: {} tokens\n",
                    i + 1,
                    images.as_ref().map_or(0, |img| img.encoded[*i].tokens())
                ),
            }
        }
        if images.is_none() {
            print_verbose_prompt(tok, &ids);
        }
    }
    let ctx = context_size(args.ctx_size, model.config.context_length);
    if rows > ctx {
        bail!("the prompt is {rows} tokens but the context holds {ctx}; use -c to enlarge it");
    }
    let max_tokens = if args.max_tokens < 0 {
        usize::MAX
    } else {
        args.max_tokens as usize
    };
    let mut session = Session::with_options(model, ctx, DEFAULT_BATCH, args.cache.types())?;
    args.speculation.prepare(&mut session)?;
    let shift = args.shift.for_model(model);
    if images.is_none() {
        session.set_context_shift(shift.keep(&ids, tok.bos, 0))?;
    }
    let ids = match &images {
        Some(img) => prefill_pieces(&mut session, &pieces, img, 0)?,
        None => ids,
    };
    let mut sampler = Sampler::new(args.sampling.config(ctx)?);
    if let Some(spec) = constraint {
        let start = std::time::Instant::now();
        let compiler = compiler_for(tok, model.config.vocab_size)?;
        if args.verbose {
            eprintln!(
                "constraint: vocabulary indexed in {:.0} ms",
                start.elapsed().as_secs_f64() * 1e3
            );
        }
        sampler.set_constraint(Some(compile(&compiler, spec)?));
    }
    install_interrupt_handler(true);
    let terminal = std::io::stderr().is_terminal();
    let show_reasoning = |piece: &str| -> crate::Result<()> {
        let mut err = std::io::stderr().lock();
        // A closed standard error is no reason to stop the answer.
        let _ = if terminal {
            write!(err, "\x1b[2m{piece}\x1b[0m")
        } else {
            err.write_all(piece.as_bytes())
        }
        .and_then(|_| err.flush());
        Ok(())
    };
    let show = match args.reasoning {
        ReasoningDisplay::Auto => terminal,
        ReasoningDisplay::Hide => false,
        ReasoningDisplay::Show => true,
    };
    let drafter = args
        .speculation
        .drafter(draft, tok, ctx, args.cache.types())?;
    let opts = GenerateOptions {
        rules: StopRules {
            max_tokens,
            stop_strings: args.stop.clone(),
        },
        logprobs: args.logprobs,
        cancel: Some(cancel_flag()),
        on_logprobs: None,
        on_reasoning: (show && args.format == OutputFormat::Text)
            .then_some(&show_reasoning as &ReasoningSink<'_>),
        speculation: args.speculation.speculation(&drafter),
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
                    cancel_flag().store(true, Ordering::SeqCst);
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
    if opts.on_reasoning.is_some()
        && !result.reasoning.is_empty()
        && !result.reasoning.ends_with('\n')
    {
        eprintln!();
    }

    match args.format {
        OutputFormat::Text => {
            if std::io::stdout().is_terminal() && last_char.is_some_and(|c| c != '\n') {
                let _ = writeln!(out);
            }
        }
        OutputFormat::Json => {
            let mut v = result_json(&loaded, &result, &sampler, args.logprobs > 0);
            if let Some(t) = &tools {
                let (content, calls) = t.parse(&result, &loaded.tokenizer);
                if !calls.is_empty() {
                    v["text"] = content.into();
                    v["tool_calls"] = calls_json(&calls, "0").into();
                }
            }
            if let Some(img) = &images {
                v["image_tokens"] = img.tokens().into();
                v["prompt_tokens"] = (rows as u64).into();
                v["timings"]["image_encode_ms"] = (img.encode_time.as_secs_f64() * 1e3).into();
            }
            writeln!(out, "{v}")?;
        }
    }
    out.flush()?;

    if args.verbose {
        if result.drafted_tokens > 0 {
            eprintln!(
                "\nspeculative decoding: {} of {} drafted tokens accepted ({:.0} %)",
                result.accepted_tokens,
                result.drafted_tokens,
                100.0 * result.accepted_tokens as f64 / result.drafted_tokens as f64
            );
        }
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
