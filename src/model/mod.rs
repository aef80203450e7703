//! Models: their description (`config`), files (`loader`, `tensor`), and — in later modules —
//! tokenizers, chat templates, the forward pass of each architecture family and the session.

pub mod arch;
pub mod chat;
pub mod config;
pub mod conversation;
pub mod generate;
pub mod loader;
pub mod recurrent;
pub mod rope;
pub mod session;
pub mod tokenizer;
pub mod weights;

pub use crate::tensor::Tensor;
pub use arch::Model;
pub use config::{Arch, ModelConfig};
pub use loader::{Format, ModelFile};
pub use session::Session;
pub use tokenizer::Tokenizer;
