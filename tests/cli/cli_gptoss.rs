//! The commands on the gpt-oss fixture as real processes: `kiln run` reproduces llama.cpp's greedy
//! tokens; a harmony reply (its structure forced by a grammar over the file's harmony control
//! tokens) prints its final channel on standard output and its analysis channel nowhere, on
//! standard error with `--reasoning show`, and as `reasoning` in JSON; `kiln chat` holds a
//! conversation through gpt-oss's own template; `kiln info` names the experts' activation.

use crate::common;

use serde_json::Value;

const FILE: &str = "gptoss-tiny.gguf";

/// A harmony reply: an analysis message of 8–30 lowercase letters and spaces, then a final one
/// of 4–12 (llguidance's Lark, with the vocabulary's special tokens by name).
const HARMONY_GRAMMAR: &str = "start: <|channel|> \"analysis\" <|message|> /[a-z ]{8,30}/ <|end|> \
     <|start|> \"assistant\" <|channel|> \"final\" <|message|> /[a-z ]{4,12}/\n";

fn kiln(args: &[&str]) -> std::process::Output {
    crate::cli_families::kiln(FILE, args)
}

fn kiln_json(args: &[&str]) -> Value {
    crate::cli_families::kiln_json(FILE, args)
}

fn letters(s: &str, lens: std::ops::RangeInclusive<usize>) -> bool {
    lens.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_lowercase() || b == b' ')
}

#[test]
fn run_reproduces_llama_cpp_on_the_gptoss_file() {
    crate::cli_families::greedy_runs_match_llama_cpp(FILE, "llama-cpp-gptoss.json", 0.05);

    let v = kiln_json(&["info", "--format", "json"]);
    assert_eq!(v["config"]["arch"], "gpt-oss");
    assert_eq!(v["config"]["moe"]["activation"], "swiglu_oai");
    assert_eq!(v["config"]["moe"]["biases"], true);
    let text = String::from_utf8(kiln(&["info"]).stdout).unwrap();
    let want = "experts             8 (4 per token) of width 64, clamped SwiGLU, with biases";
    assert!(text.contains(want), "{want:?} not in {text}");
}

#[test]
fn run_prints_the_final_channel_and_keeps_the_analysis_apart() {
    let dir = tempfile::tempdir().unwrap();
    let grammar = dir.path().join("harmony.lark");
    std::fs::write(&grammar, HARMONY_GRAMMAR).unwrap();
    let g = grammar.to_str().unwrap();
    let prompt = "What is 2+2?";

    let v = kiln_json(&[
        "run",
        "--temp",
        "0",
        "--grammar",
        g,
        "--format",
        "json",
        prompt,
    ]);
    let (answer, reasoning) = (
        v["text"].as_str().unwrap(),
        v["reasoning"].as_str().unwrap(),
    );
    assert!(letters(answer, 4..=12), "answer {answer:?}");
    assert!(letters(reasoning, 8..=30), "reasoning {reasoning:?}");
    assert_eq!(v["finish_reason"], "stop", "<|return|> ends the reply");

    // Text output: the answer alone on stdout; the analysis on stderr only when asked for.
    let out = kiln(&["run", "--temp", "0", "--grammar", g, prompt]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), answer);
    assert!(!String::from_utf8_lossy(&out.stderr).contains(reasoning.trim()));
    let out = kiln(&[
        "run",
        "--temp",
        "0",
        "--grammar",
        g,
        "--reasoning",
        "show",
        prompt,
    ]);
    assert_eq!(String::from_utf8(out.stdout).unwrap(), answer);
    assert!(String::from_utf8_lossy(&out.stderr).contains(reasoning));
}

/// A scripted two-turn chat through gpt-oss's own template, each reply a harmony message pair:
/// the final channels printed, one per turn, the analysis left out (standard output is not a
/// terminal). The second turn's template gives the first reply as its final channel alone, so
/// the cache (which holds the analysis) is rolled back to where they part.
#[test]
fn chat_holds_a_harmony_conversation_on_the_gptoss_file() {
    let dir = tempfile::tempdir().unwrap();
    let grammar = dir.path().join("harmony.lark");
    std::fs::write(&grammar, HARMONY_GRAMMAR).unwrap();
    let out = common::kiln()
        .arg("chat")
        .arg("-m")
        .arg(common::fixture(&format!("models/{FILE}")))
        .args(["--temp", "0", "--grammar", grammar.to_str().unwrap()])
        .write_stdin("What is 2+2?\nAnd 3+3?\n")
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replies: Vec<&str> = stdout.trim_end().split("\n\n").collect();
    assert_eq!(replies.len(), 2, "{stdout:?}");
    for r in replies {
        assert!(letters(r, 4..=12), "reply {r:?} is a final channel's text");
    }
}
