//! `kiln run --batch`: JSON Lines in, one result per line out, in order, with ids; broken lines
//! give error objects and exit code 1 without stopping the run; a prompt prefix shared with the
//! previous request is not prefilled again, and reusing it changes nothing (the results equal
//! separate `kiln run`s); `--parallel` requests, advancing together, give what they give one at a
//! time.

use crate::common;

use serde_json::{Value, json};

fn run_json(args: &[&str]) -> Value {
    common::kiln_run_json(&common::fixture("models/tiny-llama.gguf"), args)
}

#[test]
fn order_ids_errors_and_prefix_reuse() {
    let system = "You are a careful assistant. Answer briefly, in plain words, and never make \
                  anything up. If you do not know, say so.";
    let lines = [
        json!({"id": "first", "system": system, "prompt": "Name a colour.", "max_tokens": 6, "temperature": 0}).to_string(),
        json!({"id": 2, "system": system, "prompt": "Name a fruit.", "max_tokens": 6, "temperature": 0}).to_string(),
        "{\"id\": \"broken\", \"prompt\": ".to_string(),
        json!({"id": "unknown-field", "prompt": "x", "temprature": 0.5}).to_string(),
        String::new(),
        json!({"id": "too-long", "prompt": "word ".repeat(200)}).to_string(),
        json!({"id": "last", "messages": [{"role": "system", "content": system}, {"role": "user", "content": "Name a fruit."}], "max_tokens": 6, "temperature": 0}).to_string(),
    ];
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("requests.jsonl");
    std::fs::write(&file, lines.join("\n")).unwrap();

    // One sequence: each request runs on the cache the one before it left.
    let out = common::kiln()
        .args(["run", "-c", "128", "--parallel", "1", "-m"])
        .arg(common::fixture("models/tiny-llama.gguf"))
        .arg("--batch")
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "a failed line makes the exit code 1"
    );
    let results: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<&Value> = results.iter().map(|r| &r["id"]).collect();
    assert_eq!(
        ids,
        [
            &json!("first"),
            &json!(2),
            &json!(3),
            &json!("unknown-field"),
            &json!("too-long"),
            &json!("last")
        ],
        "input order, ids echoed (a line that is not JSON gets its line number)"
    );
    for (i, says) in [
        (2, "not a valid request"),
        (3, "temprature"),
        (4, "context holds 128"),
    ] {
        let err = results[i]["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{}", results[i]));
        assert!(err.contains(says), "{err}");
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("3 of 6 requests failed"), "{err}");

    // The second request shares the system prompt's tokens: only the rest is prefilled.
    let whole = |prompt: &str| {
        let out = common::kiln()
            .args([
                "tokenize", "--chat", "--format", "json", "--system", system, "-m",
            ])
            .arg(common::fixture("models/tiny-llama.gguf"))
            .arg(prompt)
            .output()
            .unwrap();
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["count"]
            .as_u64()
            .unwrap()
    };
    let second = &results[1];
    let cached = second["cached_prompt_tokens"].as_u64().unwrap();
    let prefilled = second["prompt_tokens"].as_u64().unwrap();
    assert!(cached > 20, "the shared system prompt is reused: {second}");
    assert_eq!(cached + prefilled, whole("Name a fruit."));
    assert_eq!(results[0]["cached_prompt_tokens"], 0);
    // The same conversation as messages: all but the last token come from the cache.
    assert_eq!(results[5]["prompt_tokens"], 1);

    // Reuse changes nothing: each result equals a run of its own.
    for (r, prompt) in [
        (&results[0], "Name a colour."),
        (&results[1], "Name a fruit."),
    ] {
        let alone = run_json(&["--system", system, "--temp", "0", "-n", "6", prompt]);
        assert_eq!(r["tokens"], alone["tokens"], "{prompt}");
        assert_eq!(r["text"], alone["text"]);
    }
    assert_eq!(results[5]["tokens"], results[1]["tokens"]);
}

/// `--parallel 4` (continuous batching) against `--parallel 1`: the same results in the same
/// order, greedy tokens equal, on SmolLM2; each slot reuses the shared system prompt its last
/// request left in its cache.
#[test]
fn parallel_lines_equal_one_at_a_time() {
    let system = "You are a helpful assistant who answers in one short sentence.";
    let questions = [
        "Name a colour.",
        "What is 2+2?",
        "Name a fruit.",
        "Say hello.",
        "Name a planet.",
        "What is water made of?",
        "Name an animal.",
        "Count to three.",
        "Name a city.",
        "What colour is the sky?",
        "Name a tree.",
        "Say goodbye.",
    ];
    let lines: Vec<String> = questions
        .iter()
        .enumerate()
        .map(|(i, q)| {
            json!({"id": i, "system": system, "prompt": q, "max_tokens": 24, "temperature": 0})
                .to_string()
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("requests.jsonl");
    std::fs::write(&file, lines.join("\n")).unwrap();
    let model = common::real_model(common::REAL_MODELS[0]);
    let run = |parallel: &str| -> Vec<Value> {
        let out = common::kiln()
            .args(["run", "--parallel", parallel, "-m"])
            .arg(&model)
            .arg("--batch")
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let alone = run("1");
    let together = run("4");
    assert_eq!(together.len(), questions.len());
    for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
        assert_eq!(t["id"], i, "in order");
        assert_eq!(t["tokens"], a["tokens"], "line {i}");
        assert_eq!(t["text"], a["text"], "line {i}");
    }
    let reused = together
        .iter()
        .filter(|r| r["cached_prompt_tokens"].as_u64().unwrap() > 10)
        .count();
    assert!(
        reused >= questions.len() - 4,
        "{reused} of the requests reused a prefix"
    );
}

/// Ctrl-C: the lines finished so far are written whole, in order (those cut short say
/// `interrupted`), nothing more runs, and the exit code is 130.
#[cfg(unix)]
#[test]
fn interrupt_keeps_the_finished_lines() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("many.jsonl");
    let lines: Vec<String> = (0..200)
        .map(|i| {
            json!({"id": i, "prompt": "Tell a long story.", "max_tokens": 400, "seed": i})
                .to_string()
        })
        .collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("kiln"))
        .args(["run", "--temp", "1", "-m"])
        .arg(common::fixture("models/tiny-llama.gguf"))
        .arg("--batch")
        .arg(&file)
        .env_remove("KILN_MODEL")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let rest: Vec<String> = stdout.lines().map(Result::unwrap).collect();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let results: Vec<Value> = std::iter::once(first.trim().to_string())
        .chain(rest)
        .map(|l| serde_json::from_str(&l).unwrap())
        .collect();
    assert!(results.len() < 200, "the run stopped early");
    // The four requests running at the time (the default --parallel) are cut short.
    let mut interrupted = 0;
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["id"], i, "in order");
        interrupted += usize::from(r["finish_reason"] == "interrupted");
    }
    assert!(interrupted <= 4, "{interrupted} interrupted");
}

/// A request's `seed` and `repeat_last_n` take -1 as llama.cpp's server does (a random seed, the
/// whole context), and a negative `temperature` is greedy; other negative values are that line's
/// error.
#[test]
fn requests_take_llama_cpp_special_values() {
    let req = |id: &str, extra: Value| {
        let mut r = json!({"id": id, "prompt": "Once upon", "max_tokens": 8});
        if let (Value::Object(r), Value::Object(extra)) = (&mut r, extra) {
            r.extend(extra);
        }
        r.to_string()
    };
    let lines = [
        req("greedy", json!({"temperature": 0})),
        req("minus-one", json!({"temperature": -1, "seed": -1})),
        req("random", json!({"temperature": 1, "seed": -1})),
        req("whole", json!({"temperature": 0, "repeat_last_n": -1})),
        req("bad-seed", json!({"seed": -3})),
        req("bad-last-n", json!({"repeat_last_n": -2})),
    ];
    // One sequence: each request runs on the cache the one before it left.
    let out = common::kiln()
        .args(["run", "-c", "128", "--parallel", "1", "-m"])
        .arg(common::fixture("models/tiny-llama.gguf"))
        .args(["--batch", "-"])
        .write_stdin(lines.join("\n"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "two lines fail");
    let results: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(results.len(), 6);
    assert_eq!(results[1]["tokens"], results[0]["tokens"]);
    assert!(results[3]["error"].is_null(), "{}", results[3]);
    // The random seed is reported, and `kiln run` with it gives the same tokens.
    let seed = results[2]["seed"].as_u64().unwrap().to_string();
    let alone = run_json(&[
        "-c",
        "128",
        "--temp",
        "1",
        "--seed",
        &seed,
        "-n",
        "8",
        "Once upon",
    ]);
    assert_eq!(results[2]["tokens"], alone["tokens"]);
    for r in &results[4..] {
        let err = r["error"].as_str().unwrap_or_else(|| panic!("{r}"));
        assert!(err.contains("or -1 for"), "{err}");
    }
}
