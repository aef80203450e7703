//! The commands on the gpt-oss fixture as real processes: `kiln run` reproduces llama.cpp's greedy
//! tokens; a harmony reply (its structure forced by a grammar over the file's harmony control
//! tokens) prints its final channel on standard output and its analysis channel nowhere, on
//! standard error with `--reasoning show`, and as `reasoning` in JSON; `kiln chat` holds a
//! conversation through gpt-oss's own template; `kiln info` names the experts' activation.

use crate::cli_families::{letters, reasoning_runs, scripted_chat};
use crate::common;

use serde_json::Value;

const FILE: &str = "gptoss-tiny.gguf";

/// A harmony reply: an analysis message of 8–30 lowercase letters and spaces, then a final one
/// of 4–12 (llguidance's Lark, with the vocabulary's special tokens by name).
const HARMONY_GRAMMAR: &str = "start: <|channel|> \"analysis\" <|message|> /[a-z ]{8,30}/ <|end|> \
     <|start|> \"assistant\" <|channel|> \"final\" <|message|> /[a-z ]{4,12}/\n";

fn kiln(args: &[&str]) -> std::process::Output {
    common::kiln_on(FILE, args)
}

fn kiln_json(args: &[&str]) -> Value {
    common::kiln_json_on(FILE, args)
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
    let v = reasoning_runs(FILE, HARMONY_GRAMMAR, "What is 2+2?");
    let (answer, reasoning) = (
        v["text"].as_str().unwrap(),
        v["reasoning"].as_str().unwrap(),
    );
    assert!(letters(answer, 4..=12), "answer {answer:?}");
    assert!(letters(reasoning, 8..=30), "reasoning {reasoning:?}");
    assert_eq!(v["finish_reason"], "stop", "<|return|> ends the reply");
}

/// A scripted two-turn chat through gpt-oss's own template, each reply a harmony message pair:
/// the final channels printed, one per turn, the analysis left out (standard output is not a
/// terminal). The second turn's template gives the first reply as its final channel alone, so
/// the cache (which holds the analysis) is rolled back to where they part.
#[test]
fn chat_holds_a_harmony_conversation_on_the_gptoss_file() {
    let replies = scripted_chat(FILE, HARMONY_GRAMMAR, "What is 2+2?\nAnd 3+3?\n");
    assert_eq!(replies.len(), 2, "{replies:?}");
    for r in replies {
        assert!(letters(&r, 4..=12), "reply {r:?} is a final channel's text");
    }
}
