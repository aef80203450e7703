//! The commands on a tiny Gemma 4 with Gemma 4's own tokenizer and template
//! (tests/fixtures/make_gemma4_tiny.py `chat`) as real processes: a reply that thinks in Gemma 4's
//! thought channel (`<|channel>thought\n…<channel|>`, the file's tokens forced by a grammar)
//! prints its answer on standard output, its reasoning without the channel's name on standard
//! error with `--reasoning show`, and both in JSON; a reply ends at `<turn|>`; `kiln chat` holds
//! a conversation through Gemma 4's template.

use crate::cli_families::{kiln, kiln_json, letters, reasoning_runs, scripted_chat};

const FILE: &str = "gemma4-chat-tiny.gguf";

/// Gemma 4's tokens in tests/fixtures/make_gemma4_vocab.py's vocabulary: `<turn|>`, then the
/// thought channel's markers.
const END_TURN: u32 = 51994;
const CHANNEL: u32 = 51996;
const END_CHANNEL: u32 = 51997;

/// A reply that thinks: the channel named `thought`, 8–30 lowercase letters and spaces, the
/// channel closed, an answer of 4–12, the turn closed.
fn think_grammar() -> String {
    format!(
        "start: <[{CHANNEL}]> \"thought\\n\" /[a-z ]{{8,30}}/ <[{END_CHANNEL}]> /[a-z ]{{4,12}}/ \
         <[{END_TURN}]>\n"
    )
}

#[test]
fn run_prints_the_answer_and_keeps_the_thought_channel_apart() {
    let prompt = kiln(
        FILE,
        &["run", "-n", "1", "--verbose-prompt", "What is 2+2?"],
    );
    let stderr = String::from_utf8(prompt.stderr).unwrap();
    assert!(
        stderr.contains(r#"<|turn>model\n<|channel>thought\n<channel|>"#),
        "Gemma 4's template, thinking off: {stderr}"
    );
    let v = reasoning_runs(FILE, &think_grammar(), "What is 2+2?");
    let (answer, reasoning) = (
        v["text"].as_str().unwrap(),
        v["reasoning"].as_str().unwrap(),
    );
    assert!(letters(answer, 4..=12), "answer {answer:?}");
    // The channel's name line is markup, not reasoning.
    assert!(letters(reasoning, 8..=30), "reasoning {reasoning:?}");
    assert_eq!(v["tokens"][0], CHANNEL, "the reply opens the channel");
    assert_eq!(v["finish_reason"], "stop", "<turn|> ends the reply: {v}");
}

/// `<turn|>` ends generation, as in llama.cpp: a grammar that goes on past it is cut there.
#[test]
fn a_reply_ends_at_the_end_of_its_turn() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reply.lark");
    let grammar = format!("start: /[a-z ]{{4,8}}/ <[{END_TURN}]> /[a-z ]{{4,8}}/\n");
    std::fs::write(&path, grammar).unwrap();
    let g = path.to_str().unwrap();
    let v = kiln_json(
        FILE,
        &[
            "run",
            "--temp",
            "0",
            "-n",
            "40",
            "--grammar",
            g,
            "--format",
            "json",
            "Hi",
        ],
    );
    assert!(letters(v["text"].as_str().unwrap(), 4..=8), "{v}");
    assert_eq!(v["finish_reason"], "stop", "{v}");
}

#[test]
fn chat_holds_a_thinking_conversation_on_gemma4() {
    let replies = scripted_chat(FILE, &think_grammar(), "What is 2+2?\nAnd 3+3?\n");
    assert_eq!(replies.len(), 2, "{replies:?}");
    for r in replies {
        assert!(letters(&r, 4..=12), "reply {r:?} is an answer alone");
    }
}

#[test]
fn info_names_gemma4s_tokenizer() {
    let v = kiln_json(FILE, &["info", "--format", "json"]);
    assert_eq!(v["config"]["arch"], "gemma4");
    let text = String::from_utf8(kiln(FILE, &["info"]).stdout).unwrap();
    assert!(
        text.contains("tokenizer      gemma4 (BPE over ▁-spaced lines with byte fallback)"),
        "{text}"
    );
}
