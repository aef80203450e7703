//! The commands on the Qwen3 MoE fixture as real processes: `kiln run` reproduces llama.cpp's
//! greedy tokens, `kiln chat` holds a two-turn conversation (ChatML, as for Qwen3), and `kiln
//! info` shows the experts.

use crate::common;

use serde_json::Value;

const FILE: &str = "qwen3moe-tiny.gguf";

fn kiln(args: &[&str]) -> std::process::Output {
    common::kiln_on(FILE, args)
}

fn kiln_json(args: &[&str]) -> Value {
    common::kiln_json_on(FILE, args)
}

#[test]
fn run_and_info_on_the_qwen3moe_file() {
    let golden = common::golden("llama-cpp-qwen3moe.json");
    // Greedy generation from each short prompt reproduces llama.cpp's tokens up to its first close
    // call (margin < 0.05).
    for case in golden["models"][FILE]["greedy"]
        .as_array()
        .unwrap()
        .iter()
        .take(3)
    {
        let sure: Vec<u64> = case["steps"]
            .as_array()
            .unwrap()
            .iter()
            .take_while(|s| s["margin"].as_f64().unwrap() >= 0.05)
            .map(|s| s["token"].as_u64().unwrap())
            .collect();
        let n = sure.len().to_string();
        let prompt = case["prompt"].as_str().unwrap();
        let v = kiln_json(&[
            "run", "--raw", "--temp", "0", "-n", &n, "--format", "json", prompt,
        ]);
        let got: Vec<u64> = v["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap())
            .collect();
        assert_eq!(got, sure, "kiln run {prompt:?}");
    }

    // A plain run prints text and exits 0.
    let out = kiln(&["run", "-n", "8", "hello"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.stdout.is_empty());

    let v = kiln_json(&["info", "--format", "json"]);
    assert_eq!(v["config"]["arch"], "qwen3moe");
    let moe = &v["config"]["moe"];
    assert_eq!(
        (&moe["n_expert"], &moe["n_used"], &moe["expert_ff"]),
        (&Value::from(8), &Value::from(2), &Value::from(32))
    );
    assert_eq!(moe["shared_ff"], Value::Null);
    assert_eq!(v["config"]["qk_norm"], true);
    let out = kiln(&["info"]);
    let text = String::from_utf8(out.stdout).unwrap();
    for want in [
        "architecture   qwen3moe",
        "experts             8 (2 per token) of width 32; no shared expert",
        "rope_layout         Neox",
    ] {
        assert!(text.contains(want), "{want:?} not in {text}");
    }
}

/// A scripted two-turn chat: both replies printed, exit 0.
#[test]
fn chat_holds_a_conversation_on_the_qwen3moe_file() {
    common::assert_two_turn_chat(FILE);
}
