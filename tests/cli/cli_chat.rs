//! `kiln chat` and `kiln bench` as real processes: scripted chats, commands, the KV cache carried
//! across turns, bench JSON, exit codes, and Ctrl-C in a pseudo-terminal.

use crate::common;

use kiln::model::chat::ChatTemplate;
use kiln::model::conversation::Conversation;
use kiln::model::{ModelFile, Session, Tokenizer};

fn chat(model: &std::path::Path, input: &str, extra: &[&str]) -> (String, String, Option<i32>) {
    let out = common::kiln()
        .arg("chat")
        .arg("-m")
        .arg(model)
        .args(["--temp", "0", "-n", "16"])
        .args(extra)
        .write_stdin(input)
        .output()
        .unwrap();
    (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
        out.status.code(),
    )
}

/// Each stdin line is a turn; each reply is printed and followed by a blank line; the first
/// reply is exactly what `kiln run --chat` generates for the same message.
#[test]
fn stdin_fed_chat_is_scriptable() {
    let model = common::real_model(common::REAL_MODELS[0]);
    let (out, err, code) = chat(
        &model,
        "What is the capital of France?\nAnd of Germany?\n",
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(out.ends_with("\n\n"), "{out:?}");
    let run = common::kiln()
        .arg("run")
        .arg("-m")
        .arg(&model)
        .args([
            "--chat",
            "--temp",
            "0",
            "-n",
            "16",
            "--format",
            "json",
            "What is the capital of France?",
        ])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let first = v["text"].as_str().unwrap();
    assert!(
        out.starts_with(&format!("{}\n", first.trim_end_matches('\n'))),
        "{out:?} vs {first:?}"
    );
    let replies: Vec<&str> = out.trim_end().split("\n\n").collect();
    assert_eq!(replies.len(), 2, "{out:?}");
    assert!(!replies[1].trim().is_empty());
}

/// After /clear the same question gets the same greedy answer: the context was really reset.
#[test]
fn clear_starts_over_and_commands_work() {
    let model = common::real_model(common::REAL_MODELS[0]);
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("conv.json");
    let input = format!(
        "Name a fruit.\n/clear\nName a fruit.\n/set temp abc\n/set top-k 5\n/save {}\n/nonsense\n/exit\nnever read\n",
        saved.display()
    );
    let (out, err, code) = chat(&model, &input, &[]);
    assert_eq!(code, Some(0), "{err}");
    let replies: Vec<&str> = out.trim_end().split("\n\n").collect();
    assert_eq!(replies.len(), 2, "{out:?}");
    assert_eq!(replies[0], replies[1], "/clear must reset the conversation");
    assert!(err.contains("new conversation"), "{err}");
    assert!(
        err.contains("not a number"),
        "bad /set values are reported: {err}"
    );
    assert!(err.contains("unknown command /nonsense"), "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&saved).unwrap()).unwrap();
    let msgs = v["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[0]["role"], "user");
    assert_eq!(msgs[1]["role"], "assistant");
    assert_eq!(v["sampling"]["top_k"], 5);
}

#[test]
fn chat_exit_codes() {
    let (_, err, code) = chat(std::path::Path::new("/nonexistent.gguf"), "hi\n", &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("/nonexistent.gguf"));
    let out = common::kiln().args(["chat", "--bogus"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// llama.cpp's special values work in chat as in run: with `--temp -1` (greedy, whatever
/// `--seed -1` draws), `-t -1`, `--repeat-last-n -1` and `-c 0` the replies are those of
/// `--temp 0` with the defaults.
#[test]
fn chat_takes_llama_cpp_special_values() {
    let model = common::fixture("models/tiny-llama.gguf");
    let input = "Hello\nAnd then?\n";
    let (greedy, err, code) = chat(&model, input, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!greedy.trim().is_empty());
    let out = common::kiln()
        .arg("chat")
        .arg("-m")
        .arg(&model)
        .args(["-n", "16", "--temp", "-1", "--seed", "-1", "-t", "-1"])
        .args(["--repeat-last-n", "-1", "-c", "0"])
        .write_stdin(input)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), greedy);
}

/// Turn 2 prefills only what the template adds (the end of the reply's turn and the new user
/// message), never the whole history again.
#[test]
fn the_kv_cache_carries_across_turns() {
    let mf = ModelFile::open(&common::real_model(common::REAL_MODELS[0])).unwrap();
    let tok = Tokenizer::from_model(&mf).unwrap();
    let model = common::golden_run::load(&mf, 2);
    let template = ChatTemplate::for_model(&tok, mf.config.arch);
    let mut conv = Conversation::new(Session::new(&model, 1024).unwrap(), template, None);

    let turn1 = conv.user_turn(&tok, "What is 2+2?", 64).unwrap();
    assert_eq!(
        turn1.new_tokens.len(),
        turn1.total_tokens,
        "the first turn prefills everything"
    );
    conv.session.prefill(&turn1.new_tokens).unwrap();
    // The reply, as generation would leave it in the cache: its tokens, without end-of-turn.
    let reply = "2 + 2 equals 4.";
    let reply_ids = tok.encode(reply, false).unwrap();
    for &t in &reply_ids {
        conv.session.decode(t).unwrap();
    }
    conv.assistant_reply(reply);
    let cached = conv.session.tokens().to_vec();

    let turn2 = conv.user_turn(&tok, "And 3+3?", 64).unwrap();
    assert_eq!(
        conv.session.tokens(),
        &cached[..],
        "nothing cached was dropped"
    );
    assert_eq!(turn2.new_tokens.len(), turn2.total_tokens - cached.len());
    // Exactly the tokens the template adds: "<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n".
    let added = tok
        .encode(
            "<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n",
            false,
        )
        .unwrap();
    assert_eq!(turn2.new_tokens, added);
    let before = conv.session.stats.prefill_tokens;
    conv.session.prefill(&turn2.new_tokens).unwrap();
    assert_eq!(conv.session.stats.prefill_tokens - before, added.len());
}

/// When the next turn will not fit, the oldest turns are dropped (the system prompt stays); a
/// message that cannot fit at all is an error, not a crash.
#[test]
fn full_contexts_drop_old_turns() {
    let mf = ModelFile::open(&common::fixture("models/tiny-llama.gguf")).unwrap();
    let tok = Tokenizer::from_model(&mf).unwrap();
    let model = common::golden_run::load(&mf, 1);
    let template = ChatTemplate::for_model(&tok, mf.config.arch);
    let mut conv = Conversation::new(
        Session::new(&model, 96).unwrap(),
        template,
        Some("Be brief.".into()),
    );
    let mut dropped = 0;
    for i in 0..6 {
        let turn = conv
            .user_turn(&tok, &format!("question number {i} about something"), 16)
            .unwrap();
        dropped += turn.dropped_messages;
        conv.session.prefill(&turn.new_tokens).unwrap();
        conv.assistant_reply("a short answer here");
        assert!(turn.total_tokens + 16 <= 96);
    }
    assert!(dropped > 0, "old turns were dropped");
    assert_eq!(conv.system.as_deref(), Some("Be brief."));
    assert_eq!(conv.messages[0].role, "user");
    let long = "word ".repeat(200);
    assert!(matches!(
        conv.user_turn(&tok, &long, 16),
        Err(kiln::Error::ContextFull { .. })
    ));
    let kept = conv.messages.len();
    assert!(
        kept >= 2,
        "history is not dropped for a message that cannot fit"
    );
    assert_eq!(
        conv.messages.last().unwrap().role,
        "assistant",
        "the failed message is not kept"
    );
}

#[test]
fn bench_json_holds_every_sample() {
    let model = common::fixture("models/tiny-llama.gguf");
    let out = common::kiln()
        .arg("bench")
        .arg("-m")
        .arg(&model)
        .args([
            "-p", "16", "-n", "8", "-d", "0,8", "-r", "3", "-t", "1,2", "-o", "json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(
        rows.len(),
        2 * 2 * 2,
        "pp and tg × two depths × two thread counts"
    );
    let names: Vec<&str> = rows.iter().map(|r| r["test"].as_str().unwrap()).collect();
    for want in ["pp16", "tg8", "pp16 @ d8", "tg8 @ d8"] {
        assert!(names.contains(&want), "{names:?}");
    }
    for r in rows {
        let samples = r["samples_ns"].as_array().unwrap();
        assert_eq!(samples.len(), 3);
        assert!(r["avg_ts"].as_f64().unwrap() > 0.0);
        // As llama-bench: each sample's t/s is tokens / its time, and avg_ts is their mean.
        let n = (r["n_prompt"].as_u64().unwrap() + r["n_gen"].as_u64().unwrap()) as f64;
        let ts: Vec<f64> = r["samples_ts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_f64().unwrap())
            .collect();
        for (t, ns) in ts.iter().zip(samples) {
            let want = n / (ns.as_f64().unwrap() / 1e9);
            assert!((t - want).abs() <= 1e-9 * want, "{t} vs {want}");
        }
        let mean = ts.iter().sum::<f64>() / ts.len() as f64;
        assert!((r["avg_ts"].as_f64().unwrap() - mean).abs() <= 1e-9 * mean);
        assert_eq!(
            r["weights_gbps"].is_null(),
            r["n_gen"] == 0,
            "bandwidth for generation rows"
        );
        assert!(r["read_bandwidth_gbps"].as_f64().unwrap() > 0.0);
    }
}

/// `--profile`: each row carries per-op times that fit inside the measured time, with the matmuls
/// and attention among them, and the markdown report adds a profile table per test.
#[test]
fn bench_profile_accounts_for_the_measured_time() {
    let model = common::fixture("models/tiny-llama.gguf");
    let out = common::kiln()
        .arg("bench")
        .arg("-m")
        .arg(&model)
        .args([
            "-p",
            "16",
            "-n",
            "8",
            "-r",
            "2",
            "-t",
            "2",
            "--no-roofline",
            "--profile",
            "-o",
            "json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for r in v.as_array().unwrap() {
        let total: f64 = r["samples_ns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_f64().unwrap())
            .sum();
        let ops = r["profile"]["ops"].as_array().unwrap();
        let timed: f64 = ops.iter().map(|o| o["ns"].as_f64().unwrap()).sum();
        assert!(timed > 0.0 && timed <= total, "{timed} of {total}");
        let names: Vec<&str> = ops.iter().map(|o| o["op"].as_str().unwrap()).collect();
        for want in ["matmul ffn_gate_up", "attention", "rms_norm"] {
            assert!(names.contains(&want), "{names:?}");
        }
        // Generation runs the layers once per token: 8 tokens × 2 runs × the model's layers.
        if r["n_gen"] == 8 {
            let attn = ops.iter().find(|o| o["op"] == "attention").unwrap();
            assert_eq!(attn["calls"].as_u64().unwrap() % 16, 0);
        }
    }
    let out = common::kiln()
        .arg("bench")
        .arg("-m")
        .arg(&model)
        .args([
            "-p",
            "8",
            "-n",
            "0",
            "-r",
            "1",
            "--no-roofline",
            "--profile",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("profile: pp8 t="), "{text}");
    assert!(text.contains("| matmul attn_qkv"), "{text}");
}

/// `--kernels` on the CPU: every kind of mat-vec over both layers, with the profile's split.
#[test]
fn bench_kernels_times_each_mat_vec() {
    let model = common::fixture("models/tiny-llama.gguf");
    let kernels = common::bench_kernels::check(&model, &["-t", "2"], 2);
    assert!(kernels[0].1.starts_with("matmul attn_qkv"), "{kernels:?}");
}

#[test]
fn bench_markdown_table_and_bad_flags() {
    let model = common::fixture("models/tiny-llama.gguf");
    let out = common::kiln()
        .arg("bench")
        .arg("-m")
        .arg(&model)
        .args(["-p", "8", "-n", "4", "-r", "1", "--no-roofline"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("| model") && lines[0].contains("t/s |"),
        "{text}"
    );
    assert!(
        lines[2].contains("pp8") && lines[3].contains("tg4"),
        "{text}"
    );
    let out = common::kiln()
        .arg("bench")
        .arg("-m")
        .arg(&model)
        .args(["-r", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let out = common::kiln()
        .arg("bench")
        .arg("-m")
        .arg(&model)
        .args(["-o", "xml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// In a terminal: Ctrl-C while a reply streams stops the reply and the REPL carries on; Ctrl-C
/// at an empty prompt says how to leave; Ctrl-D leaves. (With this seed the reply runs to well
/// over 1500 words, so it is still streaming when interrupted.)
#[cfg(unix)]
#[test]
fn ctrl_c_in_a_terminal_stops_the_reply_and_the_repl_survives() {
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("kiln"));
    cmd.arg("chat")
        .arg("-m")
        .arg(common::real_model(common::REAL_MODELS[0]))
        .args(["-c", "8192", "--temp", "0.7", "--seed", "1"])
        .env("NO_COLOR", "1")
        .env("HOME", std::env::temp_dir());
    let mut p = rexpect::session::spawn_command(cmd, Some(60_000)).unwrap();
    p.exp_string(">>> ").unwrap();
    p.send_line("Write a very long story about a dragon and a lighthouse.")
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2500));
    p.send_control('c').unwrap();
    p.exp_string("(reply stopped)").unwrap();
    p.exp_string(">>> ").unwrap();
    p.send_line("/stats").unwrap();
    p.exp_string("(interrupted)").unwrap();
    p.exp_string(">>> ").unwrap();
    p.send_control('c').unwrap();
    p.exp_string("to leave").unwrap();
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();
}
