//! Shared helpers for the integration tests: where fixtures and real models live.
#![allow(dead_code)]

use std::path::PathBuf;

/// A fixture by its path under tests/fixtures. The models that a tests/fixtures/make_*.py script
/// writes (those named in manifest.sha256) live in the git-ignored made/, written and checked by
/// scripts/make-fixtures.sh; the rest are committed where `rel` says.
pub fn fixture(rel: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    match rel.strip_prefix("models/") {
        Some(name) if is_made(name) => {
            let path = dir.join("made").join(name);
            assert!(
                path.is_file(),
                "{} is missing: run scripts/make-fixtures.sh (scripts/test.sh does)",
                path.display()
            );
            path
        }
        _ => dir.join(rel),
    }
}

/// Whether tests/fixtures/manifest.sha256 lists `name`: a fixture written by a script, not committed.
fn is_made(name: &str) -> bool {
    include_str!("../fixtures/manifest.sha256")
        .lines()
        .filter(|line| !line.starts_with('#'))
        .any(|line| line.split_whitespace().nth(1) == Some(name))
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

pub mod batching;
pub mod bench_kernels;
pub mod gguf_writer;
pub mod golden_run;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod hub_server;
pub mod random_weights;
pub mod requantized;
pub mod serve;
pub mod speculation;
pub mod synth;
pub mod vision;

/// A kiln process's standard output as one JSON value. It must have exited 0: else the test
/// fails with its standard error, after `what` (the arguments, the model).
pub fn json_of(out: &std::process::Output, what: &str) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{what}: stdout is not JSON ({e})"))
}

/// `kiln ARGS… -m FILE`, FILE a fixture under models/: its output, whatever its status.
pub fn kiln_on(file: &str, args: &[&str]) -> std::process::Output {
    kiln()
        .args(args)
        .arg("-m")
        .arg(fixture(&format!("models/{file}")))
        .output()
        .unwrap()
}

/// `kiln_on`'s stdout as JSON (the command must succeed).
pub fn kiln_json_on(file: &str, args: &[&str]) -> serde_json::Value {
    json_of(&kiln_on(file, args), &format!("{file} {args:?}"))
}

/// `kiln run --format json -m MODEL ARGS…`: its JSON object (the run must succeed).
pub fn kiln_run_json(model: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let out = kiln()
        .args(["run", "--format", "json", "-m"])
        .arg(model)
        .args(args)
        .output()
        .unwrap();
    json_of(&out, &format!("{} {args:?}", model.display()))
}

/// The kiln binary as a command, with no model taken from the environment and no colours.
pub fn kiln() -> assert_cmd::Command {
    let mut c = assert_cmd::Command::cargo_bin("kiln").unwrap();
    c.env_remove("KILN_MODEL").env("NO_COLOR", "1");
    c
}

/// A scripted two-turn `kiln chat` on the fixture `model`: it exits 0 and prints two non-empty
/// replies, one per turn.
pub fn assert_two_turn_chat(model: &str) {
    let out = kiln()
        .arg("chat")
        .arg("-m")
        .arg(fixture(&format!("models/{model}")))
        .args(["--temp", "0", "-n", "8"])
        .write_stdin("What is 2+2?\nAnd 3+3?\n")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    );
    assert_eq!(out.status.code(), Some(0), "{model}: {stderr}");
    let replies: Vec<&str> = stdout.trim_end().split("\n\n").collect();
    assert_eq!(replies.len(), 2, "{model}: {stdout:?}");
    assert!(
        replies.iter().all(|r| !r.trim().is_empty()),
        "{model}: {stdout:?}"
    );
}

/// Copy the Hugging Face model directory `src` (one model.safetensors) into `dest` with its
/// weights split over two shards and a model.safetensors.index.json, as large models come.
pub fn shard_safetensors_dir(src: &std::path::Path, dest: &std::path::Path) {
    use safetensors::tensor::{Dtype, TensorView};
    use serde_json::Value;
    use std::collections::HashMap;
    for f in ["config.json", "tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(src.join(f), dest.join(f)).unwrap();
    }
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut names: Vec<String> = st.names().into_iter().map(str::to_string).collect();
    names.sort();
    let mut weight_map = serde_json::Map::new();
    for (shard, chunk) in names.chunks(names.len().div_ceil(2)).enumerate() {
        let file = format!("model-{:05}-of-00002.safetensors", shard + 1);
        let views: HashMap<String, TensorView> = chunk
            .iter()
            .map(|n| {
                let t = st.tensor(n).unwrap();
                assert_eq!(t.dtype(), Dtype::F32);
                weight_map.insert(n.clone(), Value::String(file.clone()));
                (
                    n.clone(),
                    TensorView::new(t.dtype(), t.shape().to_vec(), t.data()).unwrap(),
                )
            })
            .collect();
        safetensors::serialize_to_file(views, None, &dest.join(&file)).unwrap();
    }
    let index = serde_json::json!({"metadata": {}, "weight_map": weight_map});
    std::fs::write(dest.join("model.safetensors.index.json"), index.to_string()).unwrap();
}
