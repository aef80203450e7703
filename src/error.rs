//! kiln's library error type. The CLI wraps these in anyhow with context; tests match on variants.

use std::path::{Path, PathBuf};

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A model file (or directory) whose content is malformed or inconsistent.
    #[error("{}: {reason}", path.display())]
    Invalid { path: PathBuf, reason: String },

    /// A malformed value before it is known which file it came from; see [`Error::in_file`].
    #[error("{0}")]
    Format(String),

    /// Well-formed input that kiln does not handle (an architecture, a tensor type, …).
    #[error("{0}")]
    Unsupported(String),

    #[error("tokenizer: {0}")]
    Tokenizer(String),

    #[error("chat template: {0}")]
    Template(String),

    #[error("the prompt is empty: there is nothing to run")]
    EmptyPrompt,

    #[error("decode called before prefill: the session has no context yet")]
    DecodeBeforePrefill,

    #[error("{needed} tokens do not fit the context of {ctx} tokens")]
    ContextFull { needed: usize, ctx: usize },

    #[error("token id {id} is outside the vocabulary of {vocab} tokens")]
    BadToken { id: u32, vocab: usize },

    #[error("{0}")]
    Usage(String),

    /// A model on the Hugging Face hub that cannot be found, reached or downloaded.
    #[error("{0}")]
    Hub(String),

    /// A constraint (JSON schema, grammar, regex) that does not compile or cannot go on.
    #[error("{0}")]
    Constraint(String),
}

impl Error {
    pub fn io(path: &Path, source: std::io::Error) -> Error {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub fn invalid(path: &Path, reason: impl Into<String>) -> Error {
        Error::Invalid {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }

    /// Attach the file a format error came from.
    pub fn in_file(self, path: &Path) -> Error {
        match self {
            Error::Format(reason) | Error::Unsupported(reason) => Error::invalid(path, reason),
            other => other,
        }
    }
}
