//! Tokenizers: text ↔ token ids exactly as the model was trained, through the `tokenizers` crate.
//!
//! A GGUF file carries its vocabulary in metadata; kiln builds a `tokenizers::Tokenizer` from it so
//! GGUF and Hugging Face's tokenizer.json share one code path:
//! - `tokenizer.ggml.model = gpt2`: byte-level BPE from tokens + merges, split first by the
//!   pre-tokenizer regex that `tokenizer.ggml.pre` names (as llama.cpp's `llm_tokenizer_bpe` does);
//! - `tokenizer.ggml.model = llama`: SentencePiece BPE. llama.cpp merges the adjacent pair whose
//!   merged piece has the best score; the same result comes from BPE merges ranked by that score
//!   (how Hugging Face converts SentencePiece models), with byte fallback to `<0xNN>` tokens, and
//!   the dummy space in front of every stretch of text between special tokens;
//! - `gemma4`: BPE over raw UTF-8 lines with spaces written `▁`; `bert`: WordPiece.
//!
//! The builders for each model are in `gguf_vocab`, the pre-tokenizers in `pre_tokenizer`.
//!
//! Control tokens (type 3) and user-defined tokens (type 4) are matched whole in the text before
//! the model sees it, like llama.cpp with special-token parsing on.

use std::collections::HashMap;
use std::path::Path;

use ahash::AHashMap;
use serde_json::Value;
use tokenizers::AddedToken;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::prepend::Prepend;
use tokenizers::normalizers::replace::Replace;
use tokenizers::normalizers::{NormalizerWrapper, Sequence as NormalizerSequence};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;

use crate::model::loader::{ModelFile, Source};
mod gguf_vocab;
pub mod pre_tokenizer;

use crate::error::{Error, Result};
use crate::gguf::{GgufFile, Metadata};
use crate::sampler::TokenBytes;
pub use gguf_vocab::pre_tokenize;
use gguf_vocab::{
    TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED, byte_level_pre_tokenizer, gguf_merges,
    sentencepiece_merges, space_escaped_bpe, tok_err, wordpiece,
};
use pre_tokenizer::{PreTokenizer, Splitter};

/// Texts of tokens that end a turn in common chat formats: llama.cpp's list (`llama-vocab.cpp`).
/// Each one present in the vocabulary as a control or user-defined token ends generation; llama.cpp
/// takes a normal-text token of these names too (Qwen2.5's vocabulary has a plain `</s>` piece),
/// which kiln leaves to mean its text.
const END_OF_TURN_TEXTS: [&str; 22] = [
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    // gpt-oss's harmony: the end of the final message, and of a tool call.
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    // Gemma 4: the end of a turn, and a tool call awaiting its response.
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// The end-of-generation set, sorted: harmony's `<|end|>` closes one message of a reply (the
/// analysis before the final answer), not the reply, so a vocabulary with `<|return|>` and
/// `<|call|>` does not stop on it (as llama.cpp).
fn end_of_generation(mut eog: Vec<u32>, id: impl Fn(&str) -> Option<u32>) -> Vec<u32> {
    if let (Some(_), Some(_), Some(end)) = (id("<|return|>"), id("<|call|>"), id("<|end|>")) {
        eog.retain(|&t| t != end);
    }
    eog.sort_unstable();
    eog.dedup();
    eog
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenizerKind {
    /// Byte-level BPE from GGUF; the pre-tokenizer name.
    Gpt2 { pre: String },
    /// SentencePiece BPE from GGUF.
    SentencePiece,
    /// BERT's WordPiece from GGUF.
    WordPiece,
    /// Hugging Face tokenizer.json.
    HuggingFace,
}

pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    pub kind: TokenizerKind,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    /// Whether prompts start with BOS.
    pub add_bos: bool,
    /// Appended after the text when special tokens are added: BERT's `[SEP]`.
    sep: Option<u32>,
    /// Token ids that end a reply, sorted.
    eog: Vec<u32>,
    /// The model's chat template (Jinja source), when it has one.
    pub chat_template: Option<String>,
    n_vocab: usize,
}

impl Tokenizer {
    pub fn from_model(model: &ModelFile) -> Result<Tokenizer> {
        match &model.source {
            Source::Gguf(g) => Self::from_gguf_file(g),
            Source::HuggingFace { dir, config_json } => Self::from_hf_dir(dir, Some(config_json)),
        }
    }

    /// The vocabulary of a GGUF file, whatever its architecture (vocabulary-only files too); errors
    /// name the file.
    pub fn from_gguf_file(g: &GgufFile) -> Result<Tokenizer> {
        Self::from_gguf(&g.metadata).map_err(|e| match e {
            Error::Tokenizer(msg) => Error::invalid(&g.path, format!("tokenizer: {msg}")),
            other => other.in_file(&g.path),
        })
    }

    pub fn from_gguf(md: &Metadata) -> Result<Tokenizer> {
        let model = md
            .str("tokenizer.ggml.model")?
            .ok_or_else(|| tok_err("the file has no tokenizer (tokenizer.ggml.model)"))?;
        let tokens = md
            .str_array("tokenizer.ggml.tokens")?
            .ok_or_else(|| tok_err("no tokenizer.ggml.tokens"))?;
        let n = tokens.len();
        let types = md
            .i64_array("tokenizer.ggml.token_type")?
            .unwrap_or_else(|| vec![1; n]);
        if types.len() != n {
            return Err(tok_err(format!(
                "{} token types for {n} tokens",
                types.len()
            )));
        }
        let id_of = |key: &str| -> Result<Option<u32>> {
            match md.u64(key)? {
                None => Ok(None),
                Some(id) if (id as usize) < n => Ok(Some(id as u32)),
                Some(id) => Err(tok_err(format!(
                    "{key} = {id} is outside the vocabulary ({n})"
                ))),
            }
        };

        let mut vocab: AHashMap<String, u32> = AHashMap::with_capacity(n);
        for (i, t) in tokens.iter().enumerate() {
            vocab.insert(t.to_string(), i as u32);
        }

        let (mut inner, kind, default_add_bos) = match model {
            // And Gemma 4's adds BOS whatever the file says (llama.cpp PR 21500).
            "gemma4" => (
                space_escaped_bpe(vocab, gguf_merges(md)?, &tokens, &types)?,
                TokenizerKind::SentencePiece,
                true,
            ),
            "gpt2" => {
                let pre = md
                    .str("tokenizer.ggml.pre")?
                    .unwrap_or("default")
                    .to_string();
                let spec = pre_tokenizer::lookup(&pre).unwrap_or_else(|| {
                    eprintln!(
                        "warning: unknown pre-tokenizer '{pre}'; using GPT-2's. Tokenization may differ from the model's."
                    );
                    PreTokenizer {
                        splitter: Splitter::Gpt2,
                        ignore_merges: false,
                        add_bos: false,
                    }
                });
                let merges = gguf_merges(md)?;
                if spec.splitter == Splitter::SpaceEscaped {
                    // Pieces spelled with ▁ and <0xNN>, as SentencePiece's (Gemma 4's).
                    let inner = space_escaped_bpe(vocab, merges, &tokens, &types)?;
                    (inner, TokenizerKind::SentencePiece, spec.add_bos)
                } else {
                    let bpe = BPE::builder()
                        .vocab_and_merges(vocab, merges)
                        .ignore_merges(spec.ignore_merges)
                        .build()
                        .map_err(|e| tok_err(format!("cannot build BPE: {e}")))?;
                    let mut inner = tokenizers::Tokenizer::new(bpe);
                    inner.with_pre_tokenizer(Some(byte_level_pre_tokenizer(spec.splitter)?));
                    let decoder: DecoderWrapper = match spec.splitter {
                        Splitter::Raw(_) => Fuse::new().into(),
                        _ => ByteLevel::default().into(),
                    };
                    inner.with_decoder(Some(decoder));
                    (inner, TokenizerKind::Gpt2 { pre }, spec.add_bos)
                }
            }
            "llama" => {
                let scores = md
                    .f32_array("tokenizer.ggml.scores")?
                    .ok_or_else(|| tok_err("SentencePiece needs tokenizer.ggml.scores"))?;
                if scores.len() != n {
                    return Err(tok_err(format!("{} scores for {n} tokens", scores.len())));
                }
                let add_space_prefix = md.bool("tokenizer.ggml.add_space_prefix")?.unwrap_or(true);
                let merges = sentencepiece_merges(&tokens, &scores, &vocab);
                let mut builder = BPE::builder()
                    .vocab_and_merges(vocab, merges)
                    .byte_fallback(true)
                    .fuse_unk(true);
                if let Some(unk) = id_of("tokenizer.ggml.unknown_token_id")? {
                    builder = builder.unk_token(tokens[unk as usize].to_string());
                }
                let bpe = builder
                    .build()
                    .map_err(|e| tok_err(format!("cannot build SentencePiece BPE: {e}")))?;
                let mut inner = tokenizers::Tokenizer::new(bpe);
                // Spaces are written ▁, and (add_space_prefix) each stretch of text gets one more
                // in front: llama.cpp adds it at the start and after every special token, whatever
                // the text begins with (" Hello" is "▁▁Hello"). The normalizer runs on each stretch
                // between added tokens, which is that rule.
                let mut normalizers: Vec<NormalizerWrapper> = Vec::new();
                if add_space_prefix {
                    normalizers.push(Prepend::new("▁".into()).into());
                }
                normalizers.push(
                    Replace::new(" ", "▁")
                        .map_err(|e| tok_err(e.to_string()))?
                        .into(),
                );
                inner
                    .with_normalizer(Some(NormalizerSequence::new(normalizers)))
                    .map_err(|e| tok_err(e.to_string()))?;
                let mut decoders: Vec<DecoderWrapper> = vec![
                    Replace::new("▁", " ")
                        .map_err(|e| tok_err(e.to_string()))?
                        .into(),
                    ByteFallback::new().into(),
                    Fuse::new().into(),
                ];
                if add_space_prefix {
                    decoders.push(Strip::new(' ', 1, 0).into());
                }
                inner.with_decoder(Some(DecoderSequence::new(decoders)));
                (inner, TokenizerKind::SentencePiece, true)
            }
            "bert" => (
                wordpiece(&tokens, &types, id_of("tokenizer.ggml.unknown_token_id")?)?,
                TokenizerKind::WordPiece,
                true,
            ),
            other => {
                return Err(Error::Unsupported(format!(
                    "tokenizer model '{other}' is not supported (kiln reads gpt2, llama, gemma4 and bert)"
                )));
            }
        };

        // Control and user-defined tokens are matched whole, before the model sees the text. In a
        // model named Phi-3, llama.cpp has each of them but <unk>, <s> and <|endoftext|> swallow
        // the whitespace after it (as Hugging Face's Phi-3 tokenizer does): a template's
        // "<|user|>\nHello" has no newline token.
        let phi3 = md.str("general.name")?.is_some_and(|n| {
            let n = n.to_lowercase();
            n.contains("phi-3") || n.contains("phi3")
        });
        let rstrip = |t: &str| phi3 && !matches!(t, "<unk>" | "<s>" | "<|endoftext|>");
        let mut special = Vec::new();
        let mut user_defined = Vec::new();
        for (t, &ty) in tokens.iter().zip(&types) {
            if t.is_empty() {
                continue;
            }
            // llama.cpp makes a user-defined token with an end-of-turn text a control token
            // ("control-looking token … its type will be overridden"): Phi-3's `</s>`.
            let control = ty == TOKEN_TYPE_CONTROL
                || (ty == TOKEN_TYPE_USER_DEFINED && END_OF_TURN_TEXTS.contains(t));
            match ty {
                _ if control => {
                    special.push(AddedToken::from(t.to_string(), true).rstrip(rstrip(t)))
                }
                TOKEN_TYPE_USER_DEFINED => user_defined.push(
                    AddedToken::from(t.to_string(), false)
                        .normalized(false)
                        .rstrip(rstrip(t)),
                ),
                _ => {}
            }
        }
        inner
            .add_special_tokens(special)
            .map_err(|e| tok_err(e.to_string()))?;
        inner
            .add_tokens(user_defined)
            .map_err(|e| tok_err(e.to_string()))?;

        let mut bos = id_of("tokenizer.ggml.bos_token_id")?;
        // BERT's inputs begin with [CLS] and end with [SEP] (llama.cpp's add_sep; the key is
        // spelled so in GGUF).
        let sep = match kind {
            TokenizerKind::WordPiece => {
                bos = bos.or(id_of("tokenizer.ggml.cls_token_id")?);
                id_of("tokenizer.ggml.seperator_token_id")?
            }
            _ => None,
        };
        let eos = id_of("tokenizer.ggml.eos_token_id")?;
        let add_bos = md
            .bool("tokenizer.ggml.add_bos_token")?
            .unwrap_or(default_add_bos)
            && bos.is_some();
        let mut eog: Vec<u32> = [
            eos,
            id_of("tokenizer.ggml.eot_token_id")?,
            id_of("tokenizer.ggml.eom_token_id")?,
        ]
        .into_iter()
        .flatten()
        .collect();
        let special = |text: &str| {
            inner.token_to_id(text).filter(|&id| {
                matches!(
                    types[id as usize],
                    TOKEN_TYPE_CONTROL | TOKEN_TYPE_USER_DEFINED
                )
            })
        };
        eog.extend(END_OF_TURN_TEXTS.into_iter().filter_map(special));
        let eog = end_of_generation(eog, special);

        Ok(Tokenizer {
            inner,
            kind,
            bos,
            eos,
            add_bos,
            sep,
            eog,
            chat_template: md.str("tokenizer.chat_template")?.map(str::to_string),
            n_vocab: n,
        })
    }

    /// tokenizer.json, with bos/eos and the chat template from tokenizer_config.json and extra
    /// end-of-generation ids from generation_config.json (and config.json) when present.
    pub fn from_hf_dir(dir: &Path, config_json: Option<&Value>) -> Result<Tokenizer> {
        let tok_path = dir.join("tokenizer.json");
        if !tok_path.is_file() {
            return Err(Error::invalid(
                dir,
                "no tokenizer.json in this model directory",
            ));
        }
        let inner = tokenizers::Tokenizer::from_file(&tok_path)
            .map_err(|e| Error::invalid(&tok_path, format!("cannot load: {e}")))?;
        let cfg_path = dir.join("tokenizer_config.json");
        let cfg = read_optional_json(&cfg_path)?.unwrap_or(Value::Null);
        let gen_cfg =
            read_optional_json(&dir.join("generation_config.json"))?.unwrap_or(Value::Null);
        let model_cfg = config_json.cloned().unwrap_or(Value::Null);

        let token_text = |v: &Value| -> Option<String> {
            match v {
                Value::String(s) => Some(s.clone()),
                Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_string),
                _ => None,
            }
        };
        let id_from_cfg = |key: &str| -> Option<u32> {
            token_text(&cfg[key]).and_then(|t| inner.token_to_id(&t))
        };
        let ids_of = |v: &Value| -> Vec<u32> {
            match v {
                Value::Number(n) => n.as_u64().map(|x| vec![x as u32]).unwrap_or_default(),
                Value::Array(a) => a
                    .iter()
                    .filter_map(Value::as_u64)
                    .map(|x| x as u32)
                    .collect(),
                _ => Vec::new(),
            }
        };

        let bos = id_from_cfg("bos_token")
            .or_else(|| ids_of(&model_cfg["bos_token_id"]).first().copied());
        let eos = id_from_cfg("eos_token")
            .or_else(|| ids_of(&model_cfg["eos_token_id"]).first().copied());
        let add_bos = match cfg["add_bos_token"].as_bool() {
            Some(b) => b && bos.is_some(),
            // No explicit setting: trust the post-processor (it adds BOS when the model wants it).
            None => match (inner.encode("", true), bos) {
                (Ok(enc), Some(b)) => enc.get_ids().first() == Some(&b),
                _ => false,
            },
        };

        let mut eog: Vec<u32> = eos.into_iter().collect();
        eog.extend(ids_of(&gen_cfg["eos_token_id"]));
        eog.extend(ids_of(&model_cfg["eos_token_id"]));
        let added: HashMap<String, u32> = inner
            .get_added_tokens_decoder()
            .iter()
            .filter(|(_, t)| t.special)
            .map(|(&id, t)| (t.content.clone(), id))
            .collect();
        eog.extend(
            END_OF_TURN_TEXTS
                .iter()
                .filter_map(|t| added.get(*t).copied()),
        );
        let n_vocab = inner.get_vocab_size(true);
        eog.retain(|&id| (id as usize) < n_vocab);
        let eog = end_of_generation(eog, |t| added.get(t).copied());

        let chat_template = hf_chat_template(dir, &cfg)?;

        Ok(Tokenizer {
            inner,
            kind: TokenizerKind::HuggingFace,
            bos,
            eos,
            add_bos,
            sep: None,
            eog,
            chat_template,
            n_vocab,
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.n_vocab
    }

    /// Token ids of `text`, special tokens parsed; with `add_special`, BOS first when the model
    /// wants one.
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode_fast(text, false)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        let mut ids = Vec::with_capacity(enc.len() + 1);
        if add_special
            && self.add_bos
            && let Some(bos) = self.bos
        {
            ids.push(bos);
        }
        ids.extend_from_slice(enc.get_ids());
        if add_special && let Some(sep) = self.sep {
            ids.push(sep);
        }
        Ok(ids)
    }

    /// Whether control tokens written in the text (`<|im_start|>`, `<s>`) become those tokens
    /// (the default, as llama.cpp with special-token parsing on) or are tokenized as plain text.
    /// User-defined tokens are matched either way, as llama.cpp does.
    pub fn set_parse_special(&mut self, parse: bool) {
        self.inner.set_encode_special_tokens(!parse);
    }

    /// Text of `ids`; with `skip_special`, control tokens (BOS, end-of-turn, …) are left out.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= self.n_vocab) {
            return Err(Error::BadToken {
                id: bad,
                vocab: self.n_vocab,
            });
        }
        self.inner
            .decode(ids, skip_special)
            .map_err(|e| Error::Tokenizer(e.to_string()))
    }

    /// The vocabulary entry of `id` as stored (e.g. `Ġworld`, `▁world`, `<0x0A>`).
    pub fn piece(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.inner.token_to_id(text)
    }

    /// True for tokens that end a reply (eos, eot, the chat format's end-of-turn).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    pub fn is_special(&self, id: u32) -> bool {
        self.inner
            .get_added_tokens_decoder()
            .get(&id)
            .is_some_and(|t| t.special)
    }

    /// A streaming detokenizer for text that follows `context` (the prompt's last tokens, so
    /// leading-space rules see what came before).
    pub fn stream(&self, context: &[u32], skip_special: bool) -> TextStream {
        let keep = context.len().min(4);
        TextStream {
            ids: context[context.len() - keep..].to_vec(),
            prefix_offset: 0,
            read_offset: keep,
            skip_special,
        }
    }
}

/// The byte each character of a byte-level BPE vocabulary entry stands for (GPT-2's table:
/// printable bytes map to themselves, the others to U+0100 onwards in byte order).
fn byte_level_table() -> HashMap<char, u8> {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut next = 0x100u32;
    (0..=255u8)
        .map(|b| {
            if printable(b) {
                (b as char, b)
            } else {
                let c = char::from_u32(next).unwrap_or('\0');
                next += 1;
                (c, b)
            }
        })
        .collect()
}

impl Tokenizer {
    /// What every token id stands for, in id order: its bytes (from the vocabulary entry, through
    /// byte-level BPE's character table or SentencePiece's `▁` and `<0xNN>` conventions), or the
    /// name of a special token. Constrained generation builds its token trie from this.
    pub fn vocabulary_bytes(&self) -> Vec<TokenBytes> {
        let byte_level = match self.kind {
            TokenizerKind::Gpt2 { .. } => true,
            TokenizerKind::SentencePiece | TokenizerKind::WordPiece => false,
            // tokenizer.json: its decoder says which convention the vocabulary follows.
            TokenizerKind::HuggingFace => self.inner.get_decoder().is_some_and(|d| {
                serde_json::to_string(d).is_ok_and(|s| s.contains("\"ByteLevel\""))
            }),
        };
        let table = byte_level_table();
        let added = self.inner.get_added_tokens_decoder();
        (0..self.n_vocab as u32)
            .map(|id| {
                if let Some(t) = added.get(&id) {
                    return if t.special {
                        TokenBytes::Special(t.content.clone())
                    } else {
                        TokenBytes::Text(t.content.clone().into_bytes())
                    };
                }
                let Some(piece) = self.inner.id_to_token(id) else {
                    return TokenBytes::Special(format!("<[{id}]>"));
                };
                if byte_level {
                    match piece.chars().map(|c| table.get(&c).copied()).collect() {
                        Some(bytes) => TokenBytes::Text(bytes),
                        None => TokenBytes::Text(piece.into_bytes()),
                    }
                } else if let Some(byte) = piece
                    .strip_prefix("<0x")
                    .and_then(|h| h.strip_suffix('>'))
                    .filter(|h| h.len() == 2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    TokenBytes::Text(vec![byte])
                } else {
                    TokenBytes::Text(piece.replace('▁', " ").into_bytes())
                }
            })
            .collect()
    }
}

fn read_optional_json(path: &Path) -> Result<Option<Value>> {
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| Error::invalid(path, format!("invalid JSON: {e}")))
}

/// chat_template.jinja, or tokenizer_config.json's `chat_template` (a string, or a list of named
/// templates of which "default" is used).
fn hf_chat_template(dir: &Path, cfg: &Value) -> Result<Option<String>> {
    let jinja = dir.join("chat_template.jinja");
    if jinja.is_file() {
        return std::fs::read_to_string(&jinja)
            .map(Some)
            .map_err(|e| Error::io(&jinja, e));
    }
    Ok(match &cfg["chat_template"] {
        Value::String(s) => Some(s.clone()),
        Value::Array(list) => list
            .iter()
            .find(|t| t["name"] == "default")
            .or_else(|| list.first())
            .and_then(|t| t["template"].as_str())
            .map(str::to_string),
        _ => None,
    })
}

/// Incremental detokenizer: fed one id at a time, it emits text only once it is complete UTF-8,
/// so a character split across tokens never prints as U+FFFD. It decodes a short window and emits
/// what the newest token added to it (the approach of Hugging Face's text-generation-inference).
pub struct TextStream {
    ids: Vec<u32>,
    prefix_offset: usize,
    read_offset: usize,
    skip_special: bool,
}

impl TextStream {
    /// Add a token; returns the text it completes, if any.
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<Option<String>> {
        self.ids.push(id);
        let prefix = tok.decode(
            &self.ids[self.prefix_offset..self.read_offset],
            self.skip_special,
        )?;
        let full = tok.decode(&self.ids[self.prefix_offset..], self.skip_special)?;
        if full.len() > prefix.len() && !full.ends_with('\u{FFFD}') && full.starts_with(&prefix) {
            let new = full[prefix.len()..].to_string();
            self.prefix_offset = self.read_offset;
            self.read_offset = self.ids.len();
            // Keep the window short: only the last emitted token is needed as context.
            if self.prefix_offset > 64 {
                self.ids.drain(..self.prefix_offset);
                self.read_offset -= self.prefix_offset;
                self.prefix_offset = 0;
            }
            return Ok(Some(new));
        }
        Ok(None)
    }

    /// Whatever is still held back (an incomplete character at the end of generation).
    pub fn finish(&mut self, tok: &Tokenizer) -> Result<String> {
        let prefix = tok.decode(
            &self.ids[self.prefix_offset..self.read_offset],
            self.skip_special,
        )?;
        let full = tok.decode(&self.ids[self.prefix_offset..], self.skip_special)?;
        self.prefix_offset = self.ids.len();
        self.read_offset = self.ids.len();
        Ok(full
            .strip_prefix(&prefix)
            .map(str::to_string)
            .unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::end_of_generation;

    #[test]
    fn harmony_vocabularies_do_not_stop_at_the_end_of_a_message() {
        let harmony = |t: &str| match t {
            "<|end|>" => Some(7),
            "<|return|>" => Some(8),
            "<|call|>" => Some(9),
            _ => None,
        };
        assert_eq!(end_of_generation(vec![9, 7, 8, 2], harmony), [2, 8, 9]);
        // Phi-3's <|end|> ends its turn: without <|return|> and <|call|> it stays.
        let phi = |t: &str| (t == "<|end|>").then_some(7);
        assert_eq!(end_of_generation(vec![7, 2, 7], phi), [2, 7]);
    }
}
