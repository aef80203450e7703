//! The commands on the SmolLM3, Gemma 2, Mistral 3, Phi-3 and GLM-4 fixtures as real processes: `kiln run` reproduces
//! llama.cpp's greedy tokens, and `kiln info` names the architecture and shows what sets it apart
//! (SmolLM3's NoPE layers; Gemma 2's soft caps and alternating sliding window).

use crate::common;

pub(crate) use common::{kiln_json_on as kiln_json, kiln_on as kiln};
use serde_json::Value;

/// Greedy `kiln run` from each short golden prompt gives llama.cpp's tokens up to its first close
/// call (margin below `margin`: golden_families.rs's rule for the file), with an f32 KV cache as
/// the goldens were made (with an f16 one llama.cpp itself moves the Gemma 2 file's logits by 2).
pub(crate) fn greedy_runs_match_llama_cpp(file: &str, golden: &str, margin: f64) {
    greedy_runs_match_llama_cpp_with(file, golden, margin, &[]);
}

/// `greedy_runs_match_llama_cpp` with `extra` arguments to each run.
fn greedy_runs_match_llama_cpp_with(file: &str, golden: &str, margin: f64, extra: &[&str]) {
    let golden = common::golden(golden);
    for case in golden["models"][file]["greedy"]
        .as_array()
        .unwrap()
        .iter()
        .take(3)
    {
        let sure: Vec<u64> = case["steps"]
            .as_array()
            .unwrap()
            .iter()
            .take_while(|s| s["margin"].as_f64().unwrap() >= margin)
            .map(|s| s["token"].as_u64().unwrap())
            .collect();
        let n = sure.len().to_string();
        let prompt = case["prompt"].as_str().unwrap();
        let mut args = vec![
            "run", "--raw", "--temp", "0", "-ctk", "f32", "-ctv", "f32", "-n", &n, "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        args.push(prompt);
        let v = kiln_json(file, &args);
        let got: Vec<u64> = v["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap())
            .collect();
        assert_eq!(got, sure, "{file}: kiln run {prompt:?}");
    }
}

/// `greedy_runs_match_llama_cpp`, and a plain run prints text and exits 0.
fn run_reproduces_llama_cpp(file: &str, golden: &str, margin: f64) {
    greedy_runs_match_llama_cpp(file, golden, margin);
    let out = kiln(file, &["run", "-n", "8", "hello"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.stdout.is_empty());
}

/// `kiln info`'s text holds every line of `want`.
fn info_shows(file: &str, want: &[&str]) {
    let out = kiln(file, &["info"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for w in want {
        assert!(text.contains(w), "{w:?} not in {text}");
    }
}

#[test]
fn run_and_info_on_the_smollm3_file() {
    let file = "smollm3-tiny.gguf";
    run_reproduces_llama_cpp(file, "llama-cpp-smollm3.json", 0.05);
    let v = kiln_json(file, &["info", "--format", "json"]);
    assert_eq!(v["config"]["arch"], "smollm3");
    let nope: Vec<bool> = (0..8).map(|l| l == 3 || l == 7).collect();
    assert_eq!(v["config"]["nope_layers"], serde_json::json!(nope));
    info_shows(
        file,
        &[
            "architecture   smollm3",
            "rope_layout         Interleaved",
            "no RoPE in layers   3, 7",
        ],
    );
}

#[test]
fn run_and_info_on_the_gemma2_file() {
    let file = "gemma2-tiny.gguf";
    run_reproduces_llama_cpp(file, "llama-cpp-gemma2.json", 0.1);
    let v = kiln_json(file, &["info", "--format", "json"]);
    assert_eq!(v["config"]["arch"], "gemma2");
    assert_eq!(v["config"]["attn_logit_softcap"], 50.0);
    assert_eq!(v["config"]["final_logit_softcap"], 30.0);
    assert_eq!(v["config"]["qk_norm"], false);
    info_shows(
        file,
        &[
            "architecture   gemma2",
            "sliding_window      16 (every 2nd layer global)",
            "softcaps            attention 50, logits 30",
            "activation          GeluTanh",
        ],
    );
}

#[test]
fn run_and_info_on_the_mistral3_file() {
    let file = "mistral3-tiny.gguf";
    run_reproduces_llama_cpp(file, "llama-cpp-mistral3.json", 0.05);
    let v = kiln_json(file, &["info", "--format", "json"]);
    assert_eq!(v["config"]["arch"], "mistral3");
    assert_eq!(v["config"]["attn_temperature"]["scale"], 0.5);
    assert_eq!(v["config"]["attn_temperature"]["floor"], 64);
    info_shows(
        file,
        &[
            "architecture   mistral3",
            "rope_layout         Interleaved",
            "rope_scaling        YaRN ×16 from 64 tokens",
        ],
    );
}

/// A scripted two-turn chat on each: both replies printed, exit 0.
#[test]
fn chat_holds_a_conversation_on_the_smollm3_and_gemma2_files() {
    common::assert_two_turn_chat("smollm3-tiny.gguf");
    common::assert_two_turn_chat("gemma2-tiny.gguf");
}

/// Phi-3: `kiln run` at the default context of 4096 takes the long LongRoPE factors and
/// reproduces llama.cpp's goldens at 2048 (also past the original 1024); with `-c 1024`, the
/// short ones, as the goldens at 1024; `kiln info` shows the partial RoPE and LongRoPE.
#[test]
fn run_and_info_on_the_phi3_file() {
    let file = "phi3-tiny.gguf";
    run_reproduces_llama_cpp(file, "llama-cpp-phi3-long.json", 0.05);
    greedy_runs_match_llama_cpp_with(file, "llama-cpp-phi3.json", 0.05, &["-c", "1024"]);
    let v = kiln_json(file, &["info", "--format", "json"]);
    assert_eq!(v["config"]["arch"], "phi3");
    assert_eq!(v["config"]["rope_dims"], 24);
    assert_eq!(v["config"]["rope_scaling"]["type"], "long_rope");
    assert_eq!(v["config"]["rope_scaling"]["original_context"], 1024);
    info_shows(
        file,
        &[
            "architecture   phi3",
            "rotary dims         24 of 32 per head",
            "rope_scaling        LongRoPE: short factors up to a context of 1024 tokens",
        ],
    );
}

/// GLM-4: `kiln run` reproduces llama.cpp; `kiln info` names the family and its partial RoPE.
#[test]
fn run_and_info_on_the_glm4_file() {
    let file = "glm4-tiny.gguf";
    run_reproduces_llama_cpp(file, "llama-cpp-glm4.json", 0.05);
    let v = kiln_json(file, &["info", "--format", "json"]);
    assert_eq!(v["config"]["arch"], "glm4");
    assert_eq!(v["config"]["rope_dims"], 8);
    info_shows(
        file,
        &[
            "architecture   glm4",
            "rope_layout         Interleaved",
            "rotary dims         8 of 16 per head",
        ],
    );
}

/// Gemma 4: `kiln run` reproduces llama.cpp; `kiln info` shows the local layers' heads, the
/// shared KV caches and the proportional RoPE; no tensor goes unused (the shared-KV layers have
/// no keys or values to read).
#[test]
fn run_and_info_on_the_gemma4_file() {
    let file = "gemma4-tiny.gguf";
    run_reproduces_llama_cpp(file, "llama-cpp-gemma4.json", 0.05);
    let v = kiln_json(file, &["info", "--format", "json"]);
    assert_eq!(v["config"]["arch"], "gemma4");
    assert_eq!(v["config"]["local_attention"]["head_dim"], 16);
    assert_eq!(v["config"]["first_shared_kv_layer"], 6);
    info_shows(
        file,
        &[
            "architecture   gemma4",
            "local layers        2 kv heads of 16, RoPE over 16",
            "shared KV caches    6←4, 7←5",
            "rope_scaling        proportional: 4 of 16 pairs rotate (global layers)",
        ],
    );
}

/// A tensor the loader reads nowhere (here a norm bias kiln's Llama layer has no use for) is
/// named in a warning, since whatever it computes is left out; the blocks past the model's
/// layers (multi-token prediction) are not. A file kiln uses whole gets no warning.
#[test]
fn run_warns_of_tensors_kiln_does_not_use() {
    use common::synth::copy_of;
    let src = kiln::gguf::GgufFile::open(&common::fixture("models/tiny-llama.gguf")).unwrap();
    let mut w = copy_of(&src, str::to_string);
    w.f32_tensor("blk.0.ffn_norm.bias", &[16], &[0.5; 16]);
    w.f32_tensor("blk.2.attn_norm.weight", &[16], &[1.0; 16]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("extra.gguf");
    std::fs::write(&path, w.to_bytes()).unwrap();
    let run = |path: &std::path::Path| {
        let out = common::kiln()
            .args(["run", "-n", "1", "--backend", "cpu", "-m"])
            .arg(path)
            .arg("hi")
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stderr).unwrap()
    };
    let stderr = run(&path);
    assert!(
        stderr.contains("kiln does not use 1 of its tensors (blk.0.ffn_norm.bias)"),
        "{stderr}"
    );
    let plain = run(&common::fixture("models/tiny-llama.gguf"));
    assert!(!plain.contains("does not use"), "{plain}");
}

/// Whether `s` is `lens` lowercase letters and spaces (what the reasoning tests' grammars allow).
pub(crate) fn letters(s: &str, lens: std::ops::RangeInclusive<usize>) -> bool {
    lens.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_lowercase() || b == b' ')
}

/// A reply to `prompt` on `file`, its shape forced by the Lark `grammar`, run three ways: as JSON
/// (returned, for the caller's checks of `text` and `reasoning`); as text, the answer alone on
/// standard output and the reasoning nowhere; with `--reasoning show`, the reasoning on standard
/// error.
pub(crate) fn reasoning_runs(file: &str, grammar: &str, prompt: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reply.lark");
    std::fs::write(&path, grammar).unwrap();
    let g = path.to_str().unwrap();
    let run = ["run", "--temp", "0", "--grammar", g];
    let v = kiln_json(file, &[&run[..], &["--format", "json", prompt]].concat());
    let (answer, reasoning) = (
        v["text"].as_str().unwrap(),
        v["reasoning"].as_str().unwrap(),
    );
    let out = kiln(file, &[&run[..], &[prompt]].concat());
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), answer);
    assert!(!String::from_utf8_lossy(&out.stderr).contains(reasoning.trim()));
    let out = kiln(file, &[&run[..], &["--reasoning", "show", prompt]].concat());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), answer);
    assert!(String::from_utf8_lossy(&out.stderr).contains(reasoning));
    v
}

/// The replies `kiln chat` prints on `file` for the turns of `input`, under the Lark `grammar`
/// (standard output is not a terminal: reasoning is left out); it exits 0.
pub(crate) fn scripted_chat(file: &str, grammar: &str, input: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reply.lark");
    std::fs::write(&path, grammar).unwrap();
    let out = common::kiln()
        .arg("chat")
        .arg("-m")
        .arg(common::fixture(&format!("models/{file}")))
        .args(["--temp", "0", "--grammar", path.to_str().unwrap()])
        .write_stdin(input)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .trim_end()
        .split("\n\n")
        .map(str::to_string)
        .collect()
}
