//! `kiln tokenize`: the token ids (and pieces) the model sees for a text, as given or (`--chat`)
//! as the chat template renders it.

use std::io::Read;

use anyhow::{Context, Result};
use serde_json::json;

use super::{ModelArgs, OutputFormat};
use crate::gguf::GgufFile;
use crate::model::Arch;
use crate::model::chat::{ChatTemplate, Message};
use crate::model::{ModelFile, Tokenizer};

#[derive(clap::Args, Debug)]
pub struct TokenizeArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    /// Text to tokenize; `-` or nothing reads standard input
    pub text: Option<String>,

    /// Print each token's text beside its id
    #[arg(long)]
    pub pieces: bool,

    /// Leave out the BOS token the model would otherwise get first
    #[arg(long, conflicts_with = "chat")]
    pub no_bos: bool,

    /// Take special-token texts (`<|im_start|>`, `<s>`) in the text as plain text, as
    /// llama-tokenize's --no-parse-special (user-defined tokens are still matched)
    #[arg(long)]
    pub no_parse_special: bool,

    /// Tokenize the text as a user message rendered through the model's chat template, up to
    /// where the reply begins: exactly what `kiln run --chat` gives the model
    #[arg(long)]
    pub chat: bool,

    /// With --chat: a system message before the user's
    #[arg(long, value_name = "TEXT", requires = "chat")]
    pub system: Option<String>,

    /// Output format
    #[arg(long, value_enum, default_value_t)]
    pub format: OutputFormat,
}

/// The text of a positional argument, or standard input for `-` or no argument.
pub fn text_or_stdin(arg: Option<String>) -> Result<String> {
    match arg.as_deref() {
        Some("-") | None => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("reading standard input")?;
            Ok(s)
        }
        Some(t) => Ok(t.to_string()),
    }
}

/// The tokenizer of a model, and its architecture; or, for a GGUF file kiln cannot run (a
/// vocabulary-only file, an architecture kiln lacks) that carries a vocabulary, that vocabulary.
fn open_tokenizer(args: &ModelArgs) -> Result<(Tokenizer, Option<Arch>)> {
    let path = args.local_path()?;
    match ModelFile::open(&path) {
        Ok(model) => Ok((Tokenizer::from_model(&model)?, Some(model.config.arch))),
        Err(cannot_run) => match GgufFile::open(&path) {
            Ok(g) if g.metadata.str("tokenizer.ggml.model")?.is_some() => {
                Ok((Tokenizer::from_gguf_file(&g)?, None))
            }
            _ => Err(cannot_run.into()),
        },
    }
}

pub fn run(args: TokenizeArgs) -> Result<std::process::ExitCode> {
    let (mut tok, arch) = open_tokenizer(&args.model)?;
    tok.set_parse_special(!args.no_parse_special);
    let text = text_or_stdin(args.text)?;
    let ids = if args.chat {
        let template = match arch {
            Some(arch) => ChatTemplate::for_model(&tok, arch),
            None => ChatTemplate::from_file(&tok).with_context(|| {
                format!(
                    "{}: --chat needs a chat template: the file has none \
                     (tokenizer.chat_template), and kiln does not know its architecture",
                    args.model.model.display()
                )
            })?,
        };
        let mut messages = Vec::new();
        if let Some(system) = &args.system {
            messages.push(Message::new("system", system));
        }
        messages.push(Message::new("user", &text));
        template.prompt_ids(&tok, &messages, true)?
    } else {
        tok.encode(&text, !args.no_bos)?
    };
    let pieces: Vec<String> = ids
        .iter()
        .map(|&id| tok.decode(&[id], false))
        .collect::<Result<_, _>>()?;
    match args.format {
        OutputFormat::Json => {
            let mut out = json!({ "count": ids.len(), "ids": ids });
            if args.pieces {
                out["pieces"] = json!(pieces);
            }
            println!("{out}");
        }
        OutputFormat::Text if args.pieces => {
            for (id, piece) in ids.iter().zip(&pieces) {
                println!("{id:>7} {piece:?}");
            }
        }
        OutputFormat::Text => {
            let line: Vec<String> = ids.iter().map(u32::to_string).collect();
            println!("{}", line.join(" "));
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// `--verbose-prompt`: the prompt as the model is given it, then each token id and its text, on
/// stderr (llama.cpp's format).
pub fn print_verbose_prompt(tok: &Tokenizer, ids: &[u32]) {
    let text = tok.decode(ids, false).unwrap_or_default();
    eprintln!("prompt: {text:?}");
    eprintln!("number of tokens in prompt = {}", ids.len());
    for &id in ids {
        let piece = tok.decode(&[id], false).unwrap_or_default();
        eprintln!("{id:>7} -> {piece:?}");
    }
    eprintln!();
}
