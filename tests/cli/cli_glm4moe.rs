//! The commands on the GLM-4.5 MoE fixture as real processes: `kiln run` reproduces llama.cpp's
//! greedy tokens; a reply that thinks (`<think>…</think>`, the file's own tag tokens forced by a
//! grammar) prints its answer on standard output and its reasoning nowhere, on standard error
//! with `--reasoning show`, and as `reasoning` in JSON; `kiln chat` holds a conversation through
//! GLM-4.6's template; `kiln info` describes the routing.

use crate::cli_families::{kiln, kiln_json, letters, reasoning_runs, scripted_chat};
use crate::common;

const FILE: &str = "glm4moe-tiny.gguf";

/// The tag tokens `<think>` and `</think>` that make_glm4moe_tiny.py appends to SmolLM2's 49152
/// tokens after GLM's six control tokens.
const THINK: u32 = 49158;
const END_THINK: u32 = 49159;

/// A reply that reasons: `<think>`, 8–30 lowercase letters and spaces, `</think>`, an answer of
/// 4–12 (llguidance's Lark; the tags by token id, as a model that thinks writes them).
fn think_grammar() -> String {
    format!("start: <[{THINK}]> /[a-z ]{{8,30}}/ <[{END_THINK}]> /[a-z ]{{4,12}}/\n")
}

#[test]
fn run_and_info_on_the_glm4moe_file() {
    crate::cli_families::greedy_runs_match_llama_cpp(FILE, "llama-cpp-glm4moe.json", 0.05);

    let v = kiln_json(FILE, &["info", "--format", "json"]);
    assert_eq!(v["config"]["arch"], "glm4moe");
    assert_eq!(v["config"]["n_layers"], 4);
    assert_eq!(v["config"]["nextn_layers"], 1);
    assert_eq!(v["config"]["rope_dims"], 16);
    assert_eq!(v["config"]["moe"]["gating"], "sigmoid");
    assert_eq!(v["config"]["moe"]["first_moe_layer"], 1);
    let text = String::from_utf8(kiln(FILE, &["info"]).stdout).unwrap();
    for want in [
        "architecture   glm4moe",
        "rotary dims         16 of 32 per head",
        "routing             sigmoid, selection bias, renormalized, ×2.5, shared expert ungated",
        "dense blocks        1 (experts from block 1)",
    ] {
        assert!(text.contains(want), "{want:?} not in {text}");
    }
}

#[test]
fn run_prints_the_answer_and_keeps_the_thinking_apart() {
    let v = reasoning_runs(FILE, &think_grammar(), "What is 2+2?");
    let (answer, reasoning) = (
        v["text"].as_str().unwrap(),
        v["reasoning"].as_str().unwrap(),
    );
    assert!(letters(answer, 4..=12), "answer {answer:?}");
    assert!(letters(reasoning, 8..=30), "reasoning {reasoning:?}");
    let tokens = v["tokens"].as_array().unwrap();
    assert_eq!(tokens[0], THINK, "the reply opens with the tag token");
}

/// A scripted two-turn chat through GLM-4.6's template, each reply thinking first: the answers
/// printed, one per turn, the thinking left out (standard output is not a terminal). The second
/// turn's template gives the first reply behind an empty `<think></think>`, so the cache (which
/// holds the thinking) is rolled back to where they part.
#[test]
fn chat_holds_a_thinking_conversation_on_the_glm4moe_file() {
    let replies = scripted_chat(FILE, &think_grammar(), "What is 2+2?\nAnd 3+3?\n");
    assert_eq!(replies.len(), 2, "{replies:?}");
    for r in replies {
        assert!(
            letters(&r, 4..=12),
            "reply {r:?} is an answer without its thinking"
        );
    }
}

/// `--chat-template-kwargs` reaches the template: with `enable_thinking` false the prompt is
/// jinja2's render of GLM-4.6's template with it (template-glm4-nothink.json); a value that is
/// not a JSON object is a usage error (exit 2).
#[test]
fn chat_template_kwargs_turn_thinking_off() {
    let golden = common::golden("template-glm4-nothink.json");
    let want = golden["renders"][0]["text"].as_str().unwrap();
    assert_eq!(
        golden["renders"][0]["messages"][0]["content"],
        "What is 2+2?"
    );
    let out = kiln(
        FILE,
        &[
            "run",
            "-n",
            "1",
            "--verbose-prompt",
            "--chat-template-kwargs",
            r#"{"enable_thinking": false}"#,
            "What is 2+2?",
        ],
    );
    assert!(out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains(&format!("prompt: {want:?}")), "{stderr}");
    let bad = kiln(FILE, &["run", "--chat-template-kwargs", "[1]", "hi"]);
    assert_eq!(bad.status.code(), Some(2));
}
