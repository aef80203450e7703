//! `kiln run` as a real process: output, pipelines, JSON, stop strings, seeds, exit codes, Ctrl-C.

use crate::common;

use std::io::Write;
use std::process::{Command as StdCommand, Stdio};

use serde_json::Value;

fn json_run(model: &std::path::Path, args: &[&str]) -> Value {
    common::kiln_run_json(model, args)
}

/// Greedy raw generation reproduces llama.cpp's golden tokens (up to its first close call).
#[test]
fn greedy_raw_generation_matches_the_goldens_on_every_real_model() {
    let golden = common::golden("llama-cpp.json");
    for name in common::REAL_MODELS {
        let case = &golden["models"][name]["greedy"][0];
        let steps = case["steps"].as_array().unwrap();
        let sure: Vec<u64> = steps
            .iter()
            .take_while(|s| s["margin"].as_f64().unwrap() >= 0.5)
            .map(|s| s["token"].as_u64().unwrap())
            .collect();
        let v = json_run(
            &common::real_model(name),
            &[
                "--raw",
                "--temp",
                "0",
                "-n",
                &sure.len().max(1).to_string(),
                case["prompt"].as_str().unwrap(),
            ],
        );
        let got: Vec<u64> = v["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap())
            .collect();
        assert_eq!(&got[..sure.len()], &sure[..], "{name}");
        assert_eq!(
            v["prompt_tokens"].as_u64().unwrap() as usize,
            case["prompt_ids"].as_array().unwrap().len()
        );
        assert_eq!(v["finish_reason"], "length");
    }
}

#[test]
fn chat_and_raw_on_every_real_model_and_stdin_pipelines() {
    for name in common::REAL_MODELS {
        let model = common::real_model(name);
        // Chat mode answers a question; raw mode continues a text.
        for (mode, prompt) in [
            ("--chat", "What is 2+2?"),
            ("--raw", "The capital of France is"),
        ] {
            let out = common::kiln()
                .arg("run")
                .arg("-m")
                .arg(&model)
                .args([mode, "--temp", "0", "-n", "12", "-"])
                .write_stdin(prompt)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{name} {mode}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8(out.stdout).unwrap();
            assert!(!text.trim().is_empty(), "{name} {mode}: no output");
            // stdout holds exactly the generated text: no prompt echo, no logs, no extra newline.
            let v = json_run(&model, &[mode, "--temp", "0", "-n", "12", prompt]);
            assert_eq!(text, v["text"].as_str().unwrap(), "{name} {mode}");
        }
    }
}

#[test]
fn json_output_with_logprobs() {
    let model = common::fixture("models/tiny-llama.gguf");
    let v = json_run(
        &model,
        &[
            "--temp",
            "0",
            "-n",
            "5",
            "--logprobs",
            "3",
            "--raw",
            "Hello",
        ],
    );
    assert_eq!(v["completion_tokens"], 5);
    let lp = v["logprobs"].as_array().unwrap();
    assert_eq!(lp.len(), 5);
    for step in lp {
        let top = step["top"].as_array().unwrap();
        assert_eq!(top.len(), 3);
        // Greedy: the chosen token is the most likely one.
        assert_eq!(step["id"], top[0]["id"]);
        assert!(top[0]["logprob"].as_f64().unwrap() <= 0.0);
        assert!(top[0]["logit"].as_f64().unwrap() >= top[1]["logit"].as_f64().unwrap());
    }
    assert!(v["timings"]["decode_tokens_per_s"].as_f64().unwrap() > 0.0);
    assert!(v["text"].is_string());
}

#[test]
fn seeds_repeat_and_stop_strings_stop() {
    let model = common::fixture("models/tiny-llama.gguf");
    let a = json_run(&model, &["--seed", "7", "-n", "20", "--raw", "Once upon"]);
    let b = json_run(&model, &["--seed", "7", "-n", "20", "--raw", "Once upon"]);
    assert_eq!(a["tokens"], b["tokens"]);
    assert_eq!(a["seed"], 7);

    // Stop at the first occurrence of a piece of the greedy output; it is not included.
    let full = json_run(&model, &["--temp", "0", "-n", "30", "--raw", "Once upon"]);
    let text = full["text"].as_str().unwrap();
    let stop: String = text
        .chars()
        .skip(text.chars().count() / 2)
        .take(3)
        .collect();
    let cut = json_run(
        &model,
        &[
            "--temp",
            "0",
            "-n",
            "30",
            "--raw",
            "--stop",
            &stop,
            "Once upon",
        ],
    );
    assert_eq!(cut["finish_reason"], "stop_string");
    let cut_text = cut["text"].as_str().unwrap();
    assert_eq!(cut_text, &text[..text.find(&stop).unwrap()]);
}

#[test]
fn bad_input_exits_1_with_a_clear_message() {
    let tiny = common::fixture("models/tiny-llama.gguf");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["-m".into(), "/nonexistent.gguf".into(), "hi".into()],
            "/nonexistent.gguf",
        ),
        (
            vec!["-m".into(), tiny.display().to_string(), "".into()],
            "empty",
        ),
        (
            vec![
                "-m".into(),
                tiny.display().to_string(),
                "-c".into(),
                "2".into(),
                "--raw".into(),
                "one two three four".into(),
            ],
            "context",
        ),
        (
            vec![
                "-m".into(),
                tiny.display().to_string(),
                "--logprobs".into(),
                "2".into(),
                "hi".into(),
            ],
            "--format json",
        ),
        (
            vec![
                "-m".into(),
                tiny.display().to_string(),
                "--top-p".into(),
                "1.5".into(),
                "hi".into(),
            ],
            "top-p",
        ),
    ];
    for (args, expect) in cases {
        let out = common::kiln().arg("run").args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expect), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: stdout must stay clean");
    }
    // A corrupt model file.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.gguf");
    let bytes = std::fs::read(&tiny).unwrap();
    std::fs::write(&bad, &bytes[..1000]).unwrap();
    let out = common::kiln()
        .arg("run")
        .arg("-m")
        .arg(&bad)
        .arg("hi")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.gguf"));
}

#[test]
fn bad_flags_exit_2() {
    for args in [
        vec!["run", "--temp", "hot", "x"],
        vec!["run", "--no-such-flag"],
        vec!["run", "-ctk", "q9_9", "x"],
        vec!["chat", "--cache-type-v", "f8"],
        vec!["frobnicate"],
    ] {
        let out = common::kiln().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    let out = common::kiln()
        .args(["run", "-ctk", "q9_9", "x"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown cache type 'q9_9'"), "{err}");
}

/// llama.cpp's cache flags, in both spellings, reach the session (the library tests check what
/// each cache type computes).
#[test]
fn cache_type_flags_choose_the_kv_cache() {
    let model = common::fixture("models/tiny-llama.gguf");
    let base = ["--raw", "--temp", "0", "-n", "12"];
    let f32a = json_run(
        &model,
        &[&base[..], &["-ctk", "f32", "-ctv=f32", "Hello"]].concat(),
    );
    let f32b = json_run(
        &model,
        &[
            &base[..],
            &["--cache-type-k", "f32", "--cache-type-v", "f32", "Hello"],
        ]
        .concat(),
    );
    assert_eq!(f32a["tokens"], f32b["tokens"]);
    assert_eq!(f32a["completion_tokens"], 12);
}

/// Ctrl-C stops generation cleanly: what was produced is flushed and the exit code is 130. The
/// interrupt comes as soon as the first text arrives, while the model is generating (400 tokens,
/// seconds); a fixed delay raced it on a fast machine. The cap keeps the uninterrupted run short:
/// with this seed SmolLM2 no longer ends its text early, and without a cap it ran to the 8192-token
/// context (7 minutes on a 2-core machine).
#[test]
fn interrupt_stops_cleanly_with_130() {
    use std::io::Read;
    let model = common::real_model(common::REAL_MODELS[0]);
    let mut child = StdCommand::new(assert_cmd::cargo::cargo_bin("kiln"))
        .arg("run")
        .arg("-m")
        .arg(&model)
        .args([
            "--raw", "--temp", "0.8", "--seed", "1", "-c", "8192", "-n", "400", "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"Once upon a time")
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 1];
    stdout
        .read_exact(&mut first)
        .expect("generation starts and writes text");
    let status = StdCommand::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut rest = Vec::new();
    stdout.read_to_end(&mut rest).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&[&first[..], &rest].concat()).into_owned();
    let full = json_run(
        &model,
        &[
            "--raw",
            "--temp",
            "0.8",
            "--seed",
            "1",
            "-c",
            "8192",
            "-n",
            "400",
            "Once upon a time",
        ],
    )["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        text.len() < full.len() && full.starts_with(&text),
        "the interrupted text ({} bytes) is a proper start of the full text ({} bytes)",
        text.len(),
        full.len()
    );
}

/// The context a model was trained for, as `kiln info` reports it.
fn trained_context(model: &std::path::Path) -> u64 {
    let out = common::kiln()
        .args(["info", "--format", "json", "-m"])
        .arg(model)
        .output()
        .unwrap();
    let info: Value = serde_json::from_slice(&out.stdout).unwrap();
    info["context_length"].as_u64().unwrap()
}

/// llama.cpp's special flag values, which scripts ported from it pass, mean what they mean there:
/// `--temp -1` greedy, `--seed -1` a random seed, `-t -1` the default threads, `--repeat-last-n -1`
/// the whole context, `-c 0` the model's whole trained context (the default caps it at 4096).
/// Other negative
/// values are bad flags (exit 2) whose message names the special value.
#[test]
fn llama_cpp_special_values() {
    let tiny = common::fixture("models/tiny-llama.gguf");
    let base = ["--raw", "-n", "12", "Once upon"];
    let tokens = |extra: &[&str]| json_run(&tiny, &[extra, &base[..]].concat())["tokens"].clone();

    // Greedy whatever the seed.
    let greedy = tokens(&["--temp", "0"]);
    assert_eq!(tokens(&["--temp", "-1", "--seed", "-1"]), greedy);
    assert_eq!(tokens(&["--temp", "-1", "--seed", "5"]), greedy);
    // The default threads.
    assert_eq!(tokens(&["--temp", "0", "-t", "-1"]), greedy);
    assert_eq!(tokens(&["--temp", "0", "-t", "0"]), greedy);

    // A random seed, reported, and reproduced when given back.
    let sampled = |seed: &str| {
        json_run(
            &tiny,
            &[&["--temp", "1", "--seed", seed], &base[..]].concat(),
        )
    };
    let (a, b) = (sampled("-1"), sampled("-1"));
    let seed = a["seed"].as_u64().expect("the seed used is reported");
    assert_ne!(a["seed"], b["seed"], "each run draws its own seed");
    assert_eq!(sampled(&seed.to_string())["tokens"], a["tokens"]);

    // The penalties see the whole context: the same as giving its size. (A real model, whose
    // greedy continuation of a repeating pattern is what a repetition penalty changes.)
    let smol = common::real_model(common::REAL_MODELS[0]);
    let penalized = |last_n: &str| {
        json_run(
            &smol,
            &[
                "--raw",
                "--temp",
                "0",
                "-n",
                "12",
                "-c",
                "48",
                "--repeat-penalty",
                "1.5",
                "--repeat-last-n",
                last_n,
                "1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2,",
            ],
        )["tokens"]
            .clone()
    };
    assert_eq!(penalized("-1"), penalized("48"));
    assert_ne!(penalized("-1"), penalized("0"), "the penalty is in force");

    // -c 0: the model's whole trained context; without -c, the same capped at 4096 (SmolLM2 was
    // trained for 8192). A prompt one token longer than the context is refused with a message
    // that names its size.
    for model in [tiny.clone(), common::real_model(common::REAL_MODELS[0])] {
        let trained = trained_context(&model);
        for (c, ctx) in [(&["-c", "0"][..], trained), (&[], trained.min(4096))] {
            let prompt = "word ".repeat(ctx as usize + 8);
            let count = common::kiln()
                .args(["tokenize", "--format", "json", "-m"])
                .arg(&model)
                .arg(&prompt)
                .output()
                .unwrap();
            let count: Value = serde_json::from_slice(&count.stdout).unwrap();
            assert!(count["count"].as_u64().unwrap() > ctx);
            let out = common::kiln()
                .arg("run")
                .arg("-m")
                .arg(&model)
                .args(c)
                .args(["--raw", &prompt])
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(1));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains(&format!("the context holds {ctx};")),
                "{c:?}: {err}"
            );
        }
        assert_eq!(
            json_run(
                &model,
                &["-c", "0", "--temp", "0", "-n", "4", "--raw", "Hello"]
            )["tokens"],
            json_run(&model, &["--temp", "0", "-n", "4", "--raw", "Hello"])["tokens"]
        );
    }

    // Other negative values are bad flags.
    for (flag, value) in [("--seed", "-5"), ("-t", "-2"), ("--repeat-last-n", "-2")] {
        let out = common::kiln()
            .arg("run")
            .arg("-m")
            .arg(&tiny)
            .args([flag, value, "hi"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag} {value}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("or -1 for"), "{flag} {value}: {err}");
    }
}

/// `--spec-type ngram-simple`, `ngram-map-k` and `ngram-edit` draft from the text's own repeats
/// and change nothing in greedy output; `--format json` counts the drafted and accepted tokens.
#[test]
fn speculative_decoding_gives_the_plain_greedy_output() {
    let model = common::real_model(common::REAL_MODELS[0]);
    let prompt = "one two three four five, one two three four five, one two three four five, one";
    let base = ["--raw", "--temp", "0", "-n", "24", prompt];
    let plain = json_run(&model, &base);
    for (kind, draft_max) in [
        ("ngram-simple", "1"),
        ("ngram-simple", "16"),
        ("ngram-map-k", "16"),
        ("ngram-edit", "16"),
    ] {
        let mut args = base.to_vec();
        args.extend(["--spec-type", kind, "--draft-max", draft_max]);
        if kind == "ngram-map-k" {
            // Keys of 4 and drafts of 8: the defaults (12, 48) want a longer text.
            args.extend([
                "--spec-ngram-map-k-size-n",
                "4",
                "--spec-ngram-map-k-size-m",
                "8",
            ]);
        }
        let fast = json_run(&model, &args);
        assert_eq!(
            fast["tokens"], plain["tokens"],
            "{kind} --draft-max {draft_max}"
        );
        assert_eq!(fast["text"], plain["text"]);
        let accepted = fast["timings"]["draft_accepted"].as_u64().unwrap();
        assert!(accepted > 0 && accepted <= fast["timings"]["draft_tokens"].as_u64().unwrap());
    }
    assert!(plain["timings"].get("draft_tokens").is_none());
}

/// `-md` (`--spec-draft-model`): a draft model drafts and greedy output is unchanged — here the
/// Q8_0 tiny Qwen3 MoE drafted for by its f32 original. A draft of another vocabulary (Qwen2.5's)
/// is an error that says what differs; `--spec-type draft-simple` without a draft model a flag
/// error.
#[test]
fn a_draft_model_gives_the_plain_greedy_output() {
    let model = common::fixture("models/qwen3moe-tiny-Q8_0.gguf");
    let draft = common::fixture("models/qwen3moe-tiny.gguf");
    let base = ["--raw", "--temp", "0", "-n", "24", "one two three four"];
    let plain = json_run(&model, &base);
    let mut args = base.to_vec();
    args.extend(["-md", draft.to_str().unwrap(), "--spec-draft-n-max", "4"]);
    let fast = json_run(&model, &args);
    assert_eq!(fast["tokens"], plain["tokens"]);
    assert!(fast["timings"]["draft_accepted"].as_u64().unwrap() > 0);

    let other = common::real_model(common::REAL_MODELS[1]);
    let out = common::kiln()
        .args(["run", "-m"])
        .arg(&model)
        .arg("-md")
        .arg(&other)
        .args(["--temp", "0", "-n", "4", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot draft for this model"), "{err}");

    let out = common::kiln()
        .args(["run", "-m"])
        .arg(&model)
        .args(["--spec-type", "draft-simple", "-n", "4", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs a draft model"), "{err}");
}
