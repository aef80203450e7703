//! A model split between the GPU and the CPU from the command line: `-ngl`, `--n-cpu-moe` and
//! `--cpu-moe` (llama.cpp's spellings) generate the CPU's tokens; `-ngl auto` under a
//! `KILN_WGPU_MAX_MEMORY` below the model's size runs instead of failing and says what went
//! where; `kiln check` and `kiln bench` take a placement. Skips without a GPU adapter unless
//! KILN_REQUIRE_GPU=1.

use crate::common;

use serde_json::Value;

fn have_gpu() -> bool {
    common::gpu::gpu().is_some()
}

/// Greedy `kiln run --format json` token ids of `model`, with extra flags and environment, and
/// stderr.
fn greedy(model: &str, flags: &[&str], env: &[(&str, &str)]) -> (Vec<Value>, String) {
    let mut cmd = common::kiln();
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .args(["run", "-m"])
        .arg(common::fixture(&format!("models/{model}")))
        .args(flags)
        .args(["-c", "256", "--raw", "--temp", "0", "-n", "12"])
        .args(["--format", "json", "The capital of France is"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{model} {flags:?} {env:?}: {stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    (v["tokens"].as_array().unwrap().clone(), stderr)
}

#[test]
fn every_placement_flag_generates_the_cpus_tokens() {
    if !have_gpu() {
        return;
    }
    let cpu = greedy("tiny-llama.gguf", &["--backend", "cpu"], &[]).0;
    assert_eq!(cpu.len(), 12);
    for flags in [
        ["-ngl", "0"],
        ["-ngl", "1"],
        ["--n-gpu-layers", "2"],
        ["-ngl", "all"],
    ] {
        let (tokens, stderr) = greedy(
            "tiny-llama.gguf",
            &[&["--backend", "gpu"], &flags[..]].concat(),
            &[],
        );
        assert_eq!(tokens, cpu, "{flags:?}");
        // The placement line appears exactly when the model is split.
        let split = flags[1] == "1";
        assert_eq!(
            stderr.contains("placement: GPU: layer 1; CPU: layer 0, the output"),
            split,
            "{flags:?}: {stderr}"
        );
    }
    let moe = greedy("qwen3moe-tiny.gguf", &["--backend", "cpu"], &[]).0;
    for flags in [
        &["--cpu-moe"][..],
        &["-ncmoe", "2"],
        &["--n-cpu-moe=3", "-ngl", "3"],
    ] {
        let (tokens, stderr) = greedy(
            "qwen3moe-tiny.gguf",
            &[&["--backend", "gpu"], flags].concat(),
            &[],
        );
        assert_eq!(tokens, moe, "{flags:?}");
        assert!(
            stderr.contains("CPU: ") && stderr.contains("routed experts of"),
            "{flags:?}: {stderr}"
        );
    }
}

/// With less GPU memory allowed than the model takes, `--backend gpu` places what fits (experts
/// first for a mixture-of-experts model, else layers from the output end) and runs.
#[test]
fn auto_placement_fits_the_memory_allowed() {
    if !have_gpu() {
        return;
    }
    let cpu = greedy("qwen3moe-tiny.gguf", &["--backend", "cpu"], &[]).0;
    // 19 MiB of weights: 12.5 the output (and embeddings), 6.8 the routed experts.
    let (tokens, stderr) = greedy(
        "qwen3moe-tiny.gguf",
        &["--backend", "gpu"],
        &[("KILN_WGPU_MAX_MEMORY", "8000000")],
    );
    assert_eq!(tokens, cpu);
    assert!(
        stderr.contains(
            "placement: GPU: layers 0–3; CPU: the output, the routed experts of layers 0–3"
        ),
        "{stderr}"
    );
    // Without the cap everything goes to the GPU and nothing is said.
    let (tokens, stderr) = greedy("qwen3moe-tiny.gguf", &["--backend", "gpu"], &[]);
    assert_eq!(tokens, cpu);
    assert!(!stderr.contains("placement"), "{stderr}");
    // A dense model gives up layers from the input end: SmolLM2's 92 MiB under a 48 MB cap.
    let smollm2 = common::real_model(common::REAL_MODELS[0]);
    let out = common::kiln()
        .env("KILN_WGPU_MAX_MEMORY", "48000000")
        .args(["run", "-m"])
        .arg(&smollm2)
        .args([
            "--backend",
            "gpu",
            "-c",
            "256",
            "--raw",
            "--temp",
            "0",
            "-n",
            "4",
        ])
        .arg("The capital of France is")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("placement: GPU: layers ") && stderr.contains("CPU: layers 0–"),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("Paris"));
}

#[test]
fn check_and_bench_take_a_placement() {
    if !have_gpu() {
        return;
    }
    let out = common::kiln()
        .args(["check", "-m"])
        .arg(common::fixture("models/qwen3moe-tiny.gguf"))
        .args(["-n", "4", "-ngl", "3", "--n-cpu-moe", "2"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("PASS") && stdout.contains("routed experts of layer 1"),
        "{stdout}"
    );

    let out = common::kiln()
        .args(["bench", "--backend", "gpu", "-p", "8", "-n", "2", "-r", "1"])
        .args([
            "--no-roofline",
            "-o",
            "json",
            "-ngl",
            "2,all",
            "-ncmoe",
            "0,1",
            "-m",
        ])
        .arg(common::fixture("models/qwen3moe-tiny.gguf"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    let placed: Vec<(u64, u64)> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["n_gpu_layers"].as_u64().unwrap(),
                r["n_cpu_moe"].as_u64().unwrap(),
            )
        })
        .collect();
    // Each placement's pp8 and tg2, in llama-bench's order.
    assert_eq!(
        placed,
        [
            (2, 0),
            (2, 0),
            (2, 1),
            (2, 1),
            (5, 0),
            (5, 0),
            (5, 1),
            (5, 1)
        ]
    );
}

/// `kiln` with `args`: its stdout, which must be a success.
fn stdout_of(args: &[&str], stdin: &str) -> String {
    let out = common::kiln()
        .args(args)
        .write_stdin(stdin)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

/// A chat keeps its KV cache across turns on both sides of the boundary, and a context shift
/// moves and re-rotates the keys of the layers on each side: both print what the CPU prints.
#[test]
fn chat_turns_and_context_shifts_cross_the_boundary() {
    if !have_gpu() {
        return;
    }
    let tiny = common::fixture("models/tiny-llama.gguf");
    let tiny = tiny.to_str().unwrap();
    let chat = |flags: &[&str]| {
        let args = [&["chat", "-m", tiny, "--temp", "0", "-n", "8"], flags].concat();
        stdout_of(&args, "What is 2+2?\nAnd 3+3?\n")
    };
    let cpu = chat(&["--backend", "cpu"]);
    assert_eq!(chat(&["--backend", "gpu", "-ngl", "1"]), cpu);
    let shift = |flags: &[&str]| {
        let args = [
            &[
                "run", "-m", tiny, "--raw", "--temp", "0", "-c", "24", "-n", "40",
            ][..],
            &["--context-shift"],
            flags,
            &["The capital of France is"],
        ]
        .concat();
        stdout_of(&args, "")
    };
    let cpu = shift(&["--backend", "cpu"]);
    assert_eq!(shift(&["--backend", "gpu", "-ngl", "2"]), cpu);
}
