//! Shell conveniences: completion scripts, each error cause said once, `--verbose-prompt` and
//! `kiln tokenize --chat` showing exactly the tokens the model is given, and a final newline when
//! stdout is a terminal.

use crate::common;

#[test]
fn completion_scripts_for_each_shell() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef kiln"),
        ("fish", "complete -c kiln"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let out = common::kiln()
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(script.contains(marker), "{shell}");
        for sub in [
            "run",
            "chat",
            "tokenize",
            "completions",
            "json-schema",
            "batch",
        ] {
            assert!(script.contains(sub), "{shell} completes {sub}");
        }
    }
    let out = common::kiln()
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn each_error_cause_is_said_once() {
    let out = common::kiln()
        .args(["run", "-m", "/no/such/model.gguf", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
    assert!(err.contains("/no/such/model.gguf"), "{err}");
}

#[test]
fn verbose_prompt_and_tokenize_chat_show_what_the_model_is_given() {
    let model = common::fixture("models/tiny-llama.gguf");
    let tokenize = common::kiln()
        .args(["tokenize", "--chat", "--system", "Be brief.", "-m"])
        .arg(&model)
        .arg("Hello there")
        .output()
        .unwrap();
    assert!(tokenize.status.success());
    let ids: Vec<String> = String::from_utf8(tokenize.stdout)
        .unwrap()
        .split_whitespace()
        .map(str::to_string)
        .collect();

    let run = common::kiln()
        .args([
            "run",
            "--verbose-prompt",
            "--system",
            "Be brief.",
            "--temp",
            "0",
            "-n",
            "3",
            "--format",
            "json",
            "-m",
        ])
        .arg(&model)
        .arg("Hello there")
        .output()
        .unwrap();
    assert!(run.status.success());
    let err = String::from_utf8(run.stderr).unwrap();
    assert!(
        err.contains("<|im_start|>system\\nBe brief.<|im_end|>"),
        "{err}"
    );
    assert!(
        err.contains(&format!("number of tokens in prompt = {}", ids.len())),
        "{err}"
    );
    let shown: Vec<String> = err
        .lines()
        .filter_map(|l| l.split_once(" -> ").map(|(id, _)| id.trim().to_string()))
        .collect();
    assert_eq!(shown, ids, "the same ids, in order");
    let v: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(v["prompt_tokens"], ids.len(), "stdout is untouched");
}

/// On a terminal the generated text ends with a newline (in a pipe, stdout holds exactly the
/// generated text: tests/cli_run.rs).
#[cfg(unix)]
#[test]
fn a_terminal_gets_a_final_newline() {
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("kiln"));
    cmd.args(["run", "--raw", "--temp", "0", "-n", "3", "-m"])
        .arg(common::fixture("models/tiny-llama.gguf"))
        .arg("Once upon a time")
        .env("NO_COLOR", "1");
    let mut p = rexpect::session::spawn_command(cmd, Some(30_000)).unwrap();
    let all = p.exp_eof().unwrap();
    assert!(!all.trim().is_empty());
    assert!(all.ends_with("\r\n"), "{all:?}");
}
