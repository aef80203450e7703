//! Shared helpers for the integration tests: where fixtures and real models live.
#![allow(dead_code)]

use std::path::PathBuf;

pub fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

pub fn golden(name: &str) -> serde_json::Value {
    let path = fixture(&format!("golden/{name}"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// Directory of the real models fetched by scripts/fetch-models.sh (`KILN_MODELS` overrides).
pub fn models_dir() -> PathBuf {
    match std::env::var_os("KILN_MODELS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models"),
    }
}

/// A real model by file name. The suite needs them: a missing one fails with the command to run.
pub fn real_model(name: &str) -> PathBuf {
    let p = models_dir().join(name);
    assert!(
        p.is_file(),
        "{} is missing: run scripts/fetch-models.sh (or set KILN_MODELS)",
        p.display()
    );
    p
}

pub const REAL_MODELS: [&str; 3] = [
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    "qwen2.5-coder-0.5b.gguf",
    "gemma-3-270m-q4_k_m.gguf",
];

pub fn hex_bytes(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

pub mod gguf_writer;
pub mod golden_run;
pub mod gpu;
pub mod synth;

/// The kiln binary as a command, with no model taken from the environment and no colours.
pub fn kiln() -> assert_cmd::Command {
    let mut c = assert_cmd::Command::cargo_bin("kiln").unwrap();
    c.env_remove("KILN_MODEL").env("NO_COLOR", "1");
    c
}
