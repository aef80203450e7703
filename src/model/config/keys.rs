//! The readers a family's hooks (`Family::gguf_keys`, `Family::hf_keys`, in arch/<family>.rs) get
//! its settings through: GGUF keys under `{general.architecture}.`, or a config.json's language
//! model settings, each error naming the key. They sit below both the readers that call the hooks
//! (gguf.rs, hf.rs) and the families, so neither imports the other's file.

use serde_json::Value;

use crate::error::{Error, Result};
use crate::gguf::Metadata;

/// A GGUF file's metadata as a family reads it: keys under `{general.architecture}.`, named in
/// full in every error.
pub(crate) struct GgufKeys<'a> {
    md: &'a Metadata,
    arch: &'a str,
}

impl<'a> GgufKeys<'a> {
    pub fn new(md: &'a Metadata, arch: &'a str) -> GgufKeys<'a> {
        GgufKeys { md, arch }
    }

    /// The full name of `k`: `llama.block_count` for `block_count`.
    pub fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.arch)
    }

    /// The error for a required key the file lacks.
    pub fn missing(&self, k: &str) -> Error {
        Error::Format(format!("metadata has no {}", self.key(k)))
    }

    pub fn usize(&self, k: &str) -> Result<Option<usize>> {
        self.md.usize(&self.key(k))
    }

    /// A key the configuration cannot do without.
    pub fn need(&self, k: &str) -> Result<usize> {
        self.usize(k)?.ok_or_else(|| self.missing(k))
    }

    pub fn f64(&self, k: &str) -> Result<Option<f64>> {
        self.md.f64(&self.key(k))
    }

    pub fn str(&self, k: &str) -> Result<Option<&str>> {
        self.md.str(&self.key(k))
    }

    pub fn bool(&self, k: &str) -> Result<Option<bool>> {
        self.md.bool(&self.key(k))
    }

    pub fn bool_array(&self, k: &str) -> Result<Option<Vec<bool>>> {
        self.md.bool_array(&self.key(k))
    }

    pub fn i64_array(&self, k: &str) -> Result<Option<Vec<i64>>> {
        self.md.i64_array(&self.key(k))
    }

    /// A count given once or per layer (llama.cpp's `get_key_or_arr`): one value per layer of
    /// `n_layers`, a scalar repeated.
    pub fn per_layer(&self, k: &str, n_layers: usize) -> Result<Option<Vec<usize>>> {
        if let Ok(v) = self.usize(k) {
            return Ok(v.map(|v| vec![v; n_layers]));
        }
        let Some(values) = self.i64_array(k)? else {
            return Ok(None);
        };
        if values.len() != n_layers || values.iter().any(|&v| v < 0) {
            return Err(Error::Format(format!(
                "{} has {} values, expected one count per layer ({n_layers})",
                self.key(k),
                values.len()
            )));
        }
        Ok(Some(values.into_iter().map(|v| v as usize).collect()))
    }
}

/// A config.json as a family reads it: the language model's settings (`text_config` in a
/// multimodal checkpoint), with errors that name the key.
pub(crate) struct HfKeys<'a> {
    /// The language model's settings.
    c: &'a Value,
    /// The whole file.
    top: &'a Value,
}

impl<'a> HfKeys<'a> {
    /// The reader of the settings `c` of the file `top`.
    pub fn new(c: &'a Value, top: &'a Value) -> HfKeys<'a> {
        HfKeys { c, top }
    }

    /// The raw value of `k`, for settings that are not a plain number or flag.
    pub fn get(&self, k: &str) -> Option<&Value> {
        self.c.get(k)
    }

    pub fn uint(&self, k: &str) -> Result<Option<usize>> {
        match self.c.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .map(|x| Some(x as usize))
                .ok_or_else(|| Error::Format(format!("config.json: '{k}' should be an integer"))),
        }
    }

    pub fn float(&self, k: &str) -> Result<Option<f64>> {
        match self.c.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| Error::Format(format!("config.json: '{k}' should be a number"))),
        }
    }

    /// A boolean setting; anything else counts as absent.
    pub fn flag(&self, k: &str) -> Option<bool> {
        self.c.get(k).and_then(Value::as_bool)
    }

    /// A setting the configuration cannot do without.
    pub fn need(&self, k: &str) -> Result<usize> {
        self.uint(k)?
            .ok_or_else(|| Error::Format(format!("config.json has no '{k}'")))
    }

    /// `tie_word_embeddings`, which multimodal checkpoints may set beside `text_config`.
    pub fn tie_word_embeddings(&self) -> Option<bool> {
        self.flag("tie_word_embeddings")
            .or_else(|| self.top.get("tie_word_embeddings").and_then(Value::as_bool))
    }
}
