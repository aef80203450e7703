//! The constrained-generation flags shared by `run` and `chat` (`--json`, `--json-schema`,
//! `--grammar`, `--regex`), read into a [`ConstraintSpec`] and compiled for the loaded model.

use std::path::PathBuf;

use anyhow::Result;

use super::FlagError;
use crate::model::Tokenizer;
use crate::sampler::gbnf;
use crate::sampler::{Constraint, ConstraintCompiler, ConstraintSpec};

#[derive(clap::Args, Debug, Clone, Default)]
pub struct ConstraintArgs {
    /// Output one JSON value (generation ends when it is complete)
    #[arg(long, group = "constraint")]
    pub json: bool,

    /// Output JSON valid under this JSON Schema: a file, or the schema itself
    #[arg(long, value_name = "FILE|TEXT", group = "constraint")]
    pub json_schema: Option<String>,

    /// Output text in this grammar: a file in llguidance's Lark syntax, or GBNF as llama.cpp
    /// writes it
    #[arg(long, value_name = "FILE", group = "constraint")]
    pub grammar: Option<PathBuf>,

    /// Output text that matches this regular expression as a whole
    #[arg(long, value_name = "RE", group = "constraint")]
    pub regex: Option<String>,
}

impl ConstraintArgs {
    /// What the flags ask for; unreadable files and malformed schemas are flag errors (exit 2).
    pub fn spec(&self) -> Result<Option<ConstraintSpec>> {
        if self.json {
            return Ok(Some(ConstraintSpec::Json));
        }
        if let Some(schema) = &self.json_schema {
            return Ok(Some(ConstraintSpec::JsonSchema(parse_schema(schema)?)));
        }
        if let Some(path) = &self.grammar {
            let text = std::fs::read_to_string(path).map_err(|e| {
                FlagError(format!("--grammar: cannot read {}: {e}", path.display()))
            })?;
            let lark = if gbnf::looks_like_gbnf(&text) {
                gbnf::to_lark(&text)
                    .map_err(|e| FlagError(format!("--grammar {}: {e}", path.display())))?
            } else {
                text
            };
            return Ok(Some(ConstraintSpec::Lark(lark)));
        }
        Ok(self.regex.clone().map(ConstraintSpec::Regex))
    }
}

/// A schema given inline (it starts with `{`) or as a file.
pub fn parse_schema(arg: &str) -> Result<serde_json::Value> {
    let (text, origin) = if arg.trim_start().starts_with('{') {
        (arg.to_string(), "the schema".to_string())
    } else {
        let text = std::fs::read_to_string(arg)
            .map_err(|e| FlagError(format!("--json-schema: cannot read {arg}: {e}")))?;
        (text, arg.to_string())
    };
    serde_json::from_str(&text)
        .map_err(|e| FlagError(format!("--json-schema: {origin} is not JSON: {e}")).into())
}

/// Compile `spec` for the model: a schema or grammar that does not compile is a flag error with
/// llguidance's message; its warnings go to stderr.
pub fn compile(
    compiler: &ConstraintCompiler,
    spec: &ConstraintSpec,
) -> Result<Constraint, FlagError> {
    let (constraint, warnings) = compiler
        .compile(spec)
        .map_err(|e| FlagError(e.to_string()))?;
    for w in warnings {
        eprintln!("warning: {}: {w}", spec.kind());
    }
    Ok(constraint)
}

/// The compiler for a model, built only when a constraint is asked for (it indexes the
/// vocabulary, which takes a moment on large ones).
pub fn compiler_for(tok: &Tokenizer, n_logits: usize) -> Result<ConstraintCompiler> {
    Ok(ConstraintCompiler::new(
        tok.vocabulary_bytes(),
        tok.eog_ids(),
        n_logits,
    )?)
}
