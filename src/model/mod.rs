//! Models: their description (`config`), files (`loader`, `tensor`), tokenizers, chat templates,
//! the architecture families (`arch`: one file per family with its facts and its layer, listed in
//! `arch::FAMILIES`), their weights, the session, and a reply's reasoning told from its answer
//! (`reasoning`), and tool calls in a reply (`tools`).

pub mod arch;
pub mod batcher;
pub mod chat;
pub mod config;
pub mod conversation;
pub mod generate;
pub mod loader;
pub mod multimodal;
#[cfg(feature = "gpu")]
pub mod placement;
pub mod reasoning;
pub mod recurrent;
pub mod rope;
pub mod session;
pub mod speculative;
pub mod tokenizer;
pub mod tools;
pub mod weights;

pub use crate::tensor::Tensor;
pub use arch::Model;
pub use config::{Arch, ModelConfig};
pub use loader::{Format, ModelFile};
pub use session::{Session, Verdict};
pub use tokenizer::Tokenizer;
