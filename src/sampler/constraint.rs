//! Constrained generation through llguidance: output that always parses. A [`ConstraintSpec`]
//! (any JSON value, a JSON Schema, a Lark grammar, a regex) is compiled against the model's
//! vocabulary into a [`Constraint`], whose token mask the sampler applies before its chain, and
//! which it advances with every token it picks. When the grammar is complete and nothing more can
//! follow, the mask allows only end-of-generation tokens, so generation ends as at a natural stop.
//!
//! llguidance's own bridge to the `tokenizers` crate pins an older `tokenizers`; kiln builds the
//! token trie itself from the bytes each vocabulary entry stands for (a [`TokenBytes`] per token
//! id, which the model's tokenizer lists), so this works the same for GGUF and tokenizer.json
//! models and the sampler needs nothing from the model layer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{self, SimpleVob, TokEnv, TokRxInfo, TokTrie, TokenizerEnv};
use llguidance::{Matcher, ParserFactory, TokenParser};
use serde_json::Value;

use crate::error::{Error, Result};

/// Whitespace allowed between JSON tokens: llama.cpp's choice for its JSON-schema grammars (a
/// space, or one or two newlines and up to 20 spaces or tabs of indentation). Unbounded whitespace
/// would let a sampled run pad forever.
pub const JSON_WHITESPACE: &str = r"\x20|\x0A{1,2}[\x20\x09]{0,20}";

/// What the output must be.
#[derive(Debug, Clone, PartialEq)]
pub enum ConstraintSpec {
    /// Any JSON value.
    Json,
    /// A JSON value valid under this JSON Schema.
    JsonSchema(Value),
    /// A grammar in llguidance's Lark syntax.
    Lark(String),
    /// A regular expression the whole output matches.
    Regex(String),
}

impl ConstraintSpec {
    fn grammar(&self) -> TopLevelGrammar {
        match self {
            ConstraintSpec::Json => json_grammar(&Value::Object(Default::default())),
            ConstraintSpec::JsonSchema(schema) => json_grammar(schema),
            ConstraintSpec::Lark(source) => TopLevelGrammar::from_lark(source.clone()),
            ConstraintSpec::Regex(re) => TopLevelGrammar::from_regex(re),
        }
    }

    /// What kind of constraint this is, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            ConstraintSpec::Json => "JSON",
            ConstraintSpec::JsonSchema(_) => "JSON schema",
            ConstraintSpec::Lark(_) => "grammar",
            ConstraintSpec::Regex(_) => "regex",
        }
    }
}

/// A JSON text under `schema`: whitespace may come first, as JSON allows (`ws value ws`) and as
/// a model continuing text writes (` {`), so greedy output that was already JSON is unchanged.
/// Nothing may follow the value: trailing whitespace would keep a model that wants to go on
/// padding until the whitespace runs out, instead of ending when the value is complete.
fn json_grammar(schema: &Value) -> TopLevelGrammar {
    let mut schema = schema.clone();
    // Bounded whitespace inside too, unless the schema chooses its own (`x-guidance`).
    if let Value::Object(map) = &mut schema
        && !map.contains_key("x-guidance")
    {
        map.insert(
            "x-guidance".to_string(),
            serde_json::json!({ "whitespace_pattern": JSON_WHITESPACE }),
        );
    }
    TopLevelGrammar::from_lark(format!(
        "start: JSON_LEADING_SPACE? json_value\nJSON_LEADING_SPACE: /{JSON_WHITESPACE}/\njson_value: %json {schema}\n"
    ))
}

/// What a vocabulary entry stands for in the output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenBytes {
    /// The bytes it decodes to (a fragment of UTF-8 for byte tokens).
    Text(Vec<u8>),
    /// A special token (BOS, end-of-turn, …), by name: it has no text of its own.
    Special(String),
}

/// The vocabulary as llguidance sees it: a token trie over the bytes of every token.
struct Vocabulary {
    trie: TokTrie,
}

impl TokenizerEnv for Vocabulary {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<toktrie::TokenId> {
        self.trie.greedy_tokenize(s)
    }

    /// Greedy tokenization is not the model's own, so llguidance does not force tokens from it.
    fn tokenize_is_canonical(&self) -> bool {
        false
    }
}

/// Compiles constraints for one model: the vocabulary's trie and llguidance's per-tokenizer
/// tables, built once and shared by every constraint.
pub struct ConstraintCompiler {
    factory: ParserFactory,
}

impl ConstraintCompiler {
    /// For a vocabulary (`tokens[id]`, in id order) whose end-of-generation tokens are `eog`, on a
    /// model whose logits have `n_logits` entries (at least the vocabulary; the padding rows past
    /// it are never allowed).
    pub fn new(
        tokens: Vec<TokenBytes>,
        eog: &[u32],
        n_logits: usize,
    ) -> Result<ConstraintCompiler> {
        let mut words: Vec<Vec<u8>> = tokens
            .into_iter()
            .map(|b| match b {
                TokenBytes::Text(bytes) => bytes,
                TokenBytes::Special(name) => special_word(&name),
            })
            .collect();
        if words.len() > n_logits {
            return Err(Error::Usage(format!(
                "the tokenizer has {} tokens but the model only {n_logits} logits",
                words.len()
            )));
        }
        while words.len() < n_logits {
            words.push(special_word(&format!("<[{}]>", words.len())));
        }
        let first_eog = *eog.first().ok_or_else(|| {
            Error::Usage(
                "the model has no end-of-generation token, so a constraint cannot end generation"
                    .into(),
            )
        })?;
        let info = TokRxInfo::new(n_logits as u32, first_eog);
        let trie = TokTrie::from(&info, &words).with_eos_tokens(eog);
        let env: TokEnv = Arc::new(Vocabulary { trie });
        // llguidance's default vocabulary slices: a second or two more to build on a 262k
        // vocabulary, but much faster masks inside JSON strings.
        let mut factory = ParserFactory::new_simple(&env)
            .map_err(|e| Error::Constraint(format!("preparing the vocabulary: {e}")))?;
        factory.quiet();
        Ok(ConstraintCompiler { factory })
    }

    /// Compile `spec`; a schema or grammar that does not compile is an error with llguidance's
    /// message. Warnings (parts of a schema llguidance ignores) are returned beside it.
    pub fn compile(&self, spec: &ConstraintSpec) -> Result<(Constraint, Vec<String>)> {
        let parser = self.factory.create_parser(spec.grammar()).map_err(|e| {
            let msg = e.to_string();
            // A schema's own error, without the wrapper grammar around it.
            let msg = match msg.split_once("failed to compile JSON schema: ") {
                Some((_, rest)) => rest.lines().next().unwrap_or(rest).to_string(),
                None => msg,
            };
            Error::Constraint(format!("the {} does not compile: {msg}", spec.kind()))
        })?;
        let mut matcher = Matcher::new(Ok(parser.clone()));
        let warnings = matcher.grammar_warnings();
        Ok((
            Constraint {
                start: parser,
                matcher,
                stats: ConstraintStats::default(),
            },
            warnings,
        ))
    }
}

/// A special token's trie entry: llguidance's marker byte, then its name, so grammar text can
/// never spell it.
fn special_word(name: &str) -> Vec<u8> {
    let mut w = Vec::with_capacity(name.len() + 1);
    w.push(TokTrie::SPECIAL_TOKEN_MARKER);
    w.extend_from_slice(name.as_bytes());
    w
}

/// Time spent computing masks.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConstraintStats {
    pub masks: usize,
    pub mask_time: Duration,
}

impl ConstraintStats {
    pub fn per_mask(&self) -> Duration {
        self.mask_time / self.masks.max(1) as u32
    }
}

/// One generation's constraint: the parser state after the tokens generated so far.
pub struct Constraint {
    start: TokenParser,
    matcher: Matcher,
    pub stats: ConstraintStats,
}

impl Constraint {
    /// The tokens allowed next (only end-of-generation ones once the grammar is complete).
    pub fn mask(&mut self) -> Result<SimpleVob> {
        let t = Instant::now();
        let mask = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| Error::Constraint(format!("computing the allowed tokens: {e}")))?;
        self.stats.mask_time += t.elapsed();
        self.stats.masks += 1;
        if mask.is_zero() {
            return Err(Error::Constraint(
                "the grammar allows no token here (nothing in the vocabulary continues it)".into(),
            ));
        }
        Ok(mask)
    }

    /// Advance past a generated token. End-of-generation tokens end the output instead.
    pub fn commit(&mut self, token: u32) -> Result<()> {
        if self.matcher.is_stopped() && !self.matcher.is_error() {
            return Ok(());
        }
        let t = Instant::now();
        let r = self.matcher.consume_token(token);
        self.stats.mask_time += t.elapsed();
        r.map_err(|e| Error::Constraint(format!("token {token} does not fit the grammar: {e}")))
    }

    /// Back to the start, for the next reply.
    pub fn restart(&mut self) {
        self.matcher = Matcher::new(Ok(self.start.clone()));
    }

    /// Whether the output so far is complete under the grammar.
    pub fn is_accepting(&mut self) -> bool {
        self.matcher.is_accepting().unwrap_or(false)
    }
}
