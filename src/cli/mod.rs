//! The command line: one file per subcommand, with the flag groups they share defined here and
//! flattened into each.

pub mod info;
pub mod tokenize;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(name = "kiln", version, about = "Run large language models locally")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Describe a model: architecture, size, tensor types, tokenizer and configuration
    Info(info::InfoArgs),
    /// Show the token ids (and pieces) of a text
    Tokenize(tokenize::TokenizeArgs),
}

/// The model to load.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// GGUF file or Hugging Face model directory (config.json + safetensors + tokenizer.json)
    #[arg(short = 'm', long = "model", env = "KILN_MODEL", value_name = "PATH")]
    pub model: PathBuf,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    #[default]
    Text,
    Json,
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Info(args) => info::run(args),
        Command::Tokenize(args) => tokenize::run(args),
    }
}
