//! The commands on both Qwen3.5 files as real processes: `kiln run` reproduces llama.cpp's greedy
//! tokens, `kiln chat` holds a two-turn conversation, `kiln bench` reports pp and tg, `kiln
//! tokenize` gives llama.cpp's ids, `kiln info` describes the hybrid layout, and `--spec-type
//! draft-mtp` drafts with the files' multi-token-prediction block.

use crate::common;

use serde_json::Value;

const MODELS: [&str; 2] = ["qwen35-tiny.gguf", "qwen35moe-tiny.gguf"];

#[test]
fn run_tokenize_bench_and_info_on_both_files() {
    let golden = common::golden("llama-cpp-qwen35.json");
    for model in MODELS {
        let g = &golden["models"][model];

        // Greedy generation from the first prompt reproduces llama.cpp's tokens up to its first
        // close call (margin < 0.05).
        let case = &g["greedy"][0];
        let sure: Vec<u64> = case["steps"]
            .as_array()
            .unwrap()
            .iter()
            .take_while(|s| s["margin"].as_f64().unwrap() >= 0.05)
            .map(|s| s["token"].as_u64().unwrap())
            .collect();
        let n = sure.len().to_string();
        let prompt = case["prompt"].as_str().unwrap();
        let v = common::kiln_json_on(
            model,
            &[
                "run", "--raw", "--temp", "0", "-n", &n, "--format", "json", prompt,
            ],
        );
        let got: Vec<u64> = v["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap())
            .collect();
        assert_eq!(got, sure, "{model}: kiln run");

        let text = g["tokenize"][0]["text"].as_str().unwrap();
        let v = common::kiln_json_on(model, &["tokenize", "--no-bos", "--format", "json", text]);
        assert_eq!(v["ids"], g["tokenize"][0]["ids"], "{model}: kiln tokenize");

        let v = common::kiln_json_on(
            model,
            &[
                "bench",
                "-p",
                "32",
                "-n",
                "8",
                "-r",
                "1",
                "--no-roofline",
                "-o",
                "json",
            ],
        );
        let tests: Vec<&str> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["test"].as_str().unwrap())
            .collect();
        assert_eq!(tests, ["pp32", "tg8"], "{model}: kiln bench");

        let v = common::kiln_json_on(model, &["info", "--format", "json"]);
        assert_eq!(v["schedule"], "RRRARRRA", "{model}");
        // 6 DeltaNet blocks × (3 conv rows × 128 channels + 4 heads × 16 × 16) × 4 bytes.
        assert_eq!(v["recurrent_state_bytes"], 6 * (3 * 128 + 4 * 16 * 16) * 4);
        assert_eq!(v["config"]["rope_dims"], 8);
        let moe = model.contains("moe");
        let experts = if moe { Value::from(8) } else { Value::Null };
        assert_eq!(v["config"]["moe"]["n_expert"], experts, "{model}");
    }
    let out = common::kiln()
        .args(["info", "-m"])
        .arg(common::fixture("models/qwen35moe-tiny.gguf"))
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    for want in [
        "rotary dims         8 of 32 per head, IMRoPE sections [2, 1, 1, 0]",
        "RRRARRRA (6 Gated DeltaNet, 2 full attention: blocks 3, 7)",
        "experts             8 (2 per token) of width 32; shared expert of width 64",
        "recurrent state     33.00 KiB per sequence (and per checkpoint, up to 8)",
    ] {
        assert!(text.contains(want), "{want:?} not in {text}");
    }
}

/// A scripted two-turn chat: both replies printed, exit 0.
#[test]
fn chat_holds_a_conversation_on_both_files() {
    for model in MODELS {
        common::assert_two_turn_chat(model);
    }
}

/// `--spec-type draft-mtp` drafts with the multi-token-prediction block of a file that has one
/// (the tiny files with a block added) and changes nothing in greedy output; `--format json`
/// counts the drafts; a two-turn chat says what it says without it; `kiln bench` measures it at
/// synthetic acceptance rates. A file without a block is a flag error that says so.
#[test]
fn draft_mtp_gives_the_plain_greedy_output() {
    let base = [
        "run", "--format", "json", "--raw", "--temp", "0", "-n", "24",
    ];
    let prompt = "The quick brown fox jumps over the lazy dog. The quick brown";
    for model in ["qwen35-mtp-tiny.gguf", "qwen35moe-mtp-tiny.gguf"] {
        let plain = common::kiln_json_on(model, &[&base[..], &[prompt]].concat());
        let fast = common::kiln_json_on(
            model,
            &[&base[..], &["--spec-type", "draft-mtp", prompt]].concat(),
        );
        assert_eq!(fast["tokens"], plain["tokens"], "{model}");
        assert!(
            fast["timings"]["draft_tokens"].as_u64().unwrap() > 0,
            "{model}"
        );
    }
    // A chat keeps the KV cache (and the block's) between turns: two turns with draft-mtp say
    // what they say without it.
    let chat = |extra: &[&str]| {
        let out = common::kiln()
            .args(["chat", "--temp", "0", "-n", "16", "-m"])
            .arg(common::fixture("models/qwen35-mtp-tiny.gguf"))
            .args(extra)
            .write_stdin("What is 2+2?\nAnd 3+3?\n")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let plain = chat(&[]);
    assert_eq!(plain.trim_end().split("\n\n").count(), 2, "{plain:?}");
    assert_eq!(
        chat(&["--spec-type", "draft-mtp", "--spec-draft-n-max", "3"]),
        plain
    );
    // kiln bench at synthetic acceptance: every draft kept at rates 1 (or the longest mean
    // length), none at 0 (or a mean length of 1).
    for (flag, rates, all) in [
        ("--spec-synth-rates", "1,1", true),
        ("--spec-synth-rates", "0,0", false),
        ("--spec-synth-len", "3", true),
        ("--spec-synth-len", "1", false),
    ] {
        let bench = [
            "bench",
            "-p",
            "0",
            "-n",
            "16",
            "-r",
            "1",
            "--no-roofline",
            "-o",
            "json",
            "--spec-type",
            "draft-mtp",
            "--spec-draft-n-max",
            "2",
            flag,
            rates,
        ];
        let rows = common::kiln_json_on("qwen35-mtp-tiny.gguf", &bench);
        let row = &rows[0];
        let (drafted, kept) = (&row["draft_tokens"], &row["draft_accepted"]);
        assert!(drafted.as_u64().unwrap() > 0, "{rates}: {row}");
        assert_eq!(
            kept.as_u64().unwrap() == drafted.as_u64().unwrap(),
            all,
            "{rates}: {row}"
        );
        assert_eq!(kept.as_u64().unwrap() > 0, all, "{rates}: {row}");
    }
    // A mean length past what the drafts can give is refused before the model loads.
    let out = common::kiln()
        .args([
            "bench",
            "--spec-type",
            "draft-mtp",
            "--spec-draft-n-max",
            "2",
        ])
        .args(["--spec-synth-len", "3.5", "-m"])
        .arg(common::fixture("models/qwen35-tiny.gguf"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--spec-synth-len"), "{err}");
    let out = common::kiln()
        .args(["run", "--spec-type", "draft-mtp", "-n", "4", "-m"])
        .arg(common::fixture("models/qwen35-tiny.gguf"))
        .arg("hi")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no multi-token-prediction block"), "{err}");
}
