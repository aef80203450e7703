//! `kiln tokenize`: the token ids (and pieces) the model sees for a text.

use std::io::Read;

use anyhow::{Context, Result};
use serde_json::json;

use super::{ModelArgs, OutputFormat};
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
    #[arg(long)]
    pub no_bos: bool,

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

pub fn run(args: TokenizeArgs) -> Result<std::process::ExitCode> {
    let model = ModelFile::open(&args.model.model)?;
    let tok = Tokenizer::from_model(&model)?;
    let text = text_or_stdin(args.text)?;
    let ids = tok.encode(&text, !args.no_bos)?;
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
