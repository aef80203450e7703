//! The GPU from the command line: `--backend gpu` runs end to end and agrees with the CPU,
//! `kiln devices`, `kiln check`, `kiln bench --backend gpu`, weights split by
//! KILN_WGPU_MAX_BINDING, and the failures (no adapter, `--gpu 99`, a model too large for the
//! memory allowed, bad settings) exit 1 with a clear message, never a panic; a run without a
//! desktop session leaves stderr clean. Skips without a GPU
//! adapter unless KILN_REQUIRE_GPU=1.

use crate::common;

use serde_json::Value;

fn tiny() -> std::path::PathBuf {
    common::fixture("models/tiny-llama.gguf")
}

fn have_gpu() -> bool {
    common::gpu::gpu().is_some()
}

/// Greedy `kiln run --format json` token ids on a backend, with extra environment.
fn greedy_ids(backend: &str, env: &[(&str, &str)]) -> Vec<Value> {
    let mut cmd = common::kiln();
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .args(["run", "-m"])
        .arg(tiny())
        .args(["--backend", backend, "--raw", "--temp", "0", "-n", "12"])
        .args(["--format", "json", "The capital of France is"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{backend}: {stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["tokens"].as_array().unwrap().clone()
}

#[test]
fn run_on_the_gpu_agrees_with_the_cpu_split_or_not() {
    if !have_gpu() {
        return;
    }
    let cpu = greedy_ids("cpu", &[]);
    assert_eq!(cpu.len(), 12);
    assert_eq!(greedy_ids("gpu", &[]), cpu);
    // 1 MiB bindings split the 3 MiB embedding table (also the output matrix) into parts.
    assert_eq!(
        greedy_ids("gpu", &[("KILN_WGPU_MAX_BINDING", "1048576")]),
        cpu
    );
    // KILN_BACKEND chooses it too.
    assert_eq!(greedy_ids("auto", &[("KILN_BACKEND", "gpu")]), cpu);
}

/// `kiln serve --backend gpu` answers a greedy completion with `kiln run --backend gpu`'s text.
#[test]
fn serve_on_the_gpu_answers_as_run_does() {
    if !have_gpu() {
        return;
    }
    let server = common::serve::Server::start(&tiny(), &["--backend", "gpu", "-c", "128"]);
    let prompt = "The capital of France is";
    let v = server.ok(
        "/v1/completions",
        &serde_json::json!({"prompt": prompt, "max_tokens": 12, "temperature": 0}),
    );
    let run = common::kiln_run_json(
        &tiny(),
        &[
            "--backend",
            "gpu",
            "-c",
            "128",
            "--raw",
            "--temp",
            "0",
            "-n",
            "12",
            prompt,
        ],
    );
    assert_eq!(v["choices"][0]["text"], run["text"], "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 12);
}

/// Without a desktop session (`XDG_RUNTIME_DIR` unset, as on servers and in CI) looking for a
/// GPU leaves stderr clean: Mesa's device-selection layer would otherwise have libwayland print
/// an "error:" line there on every run.
#[test]
fn a_headless_run_keeps_stderr_clean() {
    if !have_gpu() {
        return;
    }
    for backend in ["gpu", "auto"] {
        let out = common::kiln()
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("NODEVICE_SELECT")
            .args(["run", "-m"])
            .arg(tiny())
            .args(["--backend", backend, "-n", "4", "Hello"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{backend}: {stderr}");
        assert!(
            !stderr.contains("XDG_RUNTIME_DIR") && !stderr.contains("error"),
            "{backend}: {stderr}"
        );
    }
}

/// `--kernels` on the GPU: the profile names the mat-vec kernels each case dispatches.
#[test]
fn bench_kernels_on_the_gpu() {
    if !have_gpu() {
        return;
    }
    let model = common::fixture("models/tiny-llama.gguf");
    let kernels = common::bench_kernels::check(&model, &["--backend", "gpu"], 2);
    assert!(
        kernels.iter().all(|(_, k)| k.contains("matvec")),
        "{kernels:?}"
    );
}

#[test]
fn devices_check_and_bench_on_the_gpu() {
    if !have_gpu() {
        return;
    }
    let out = common::kiln().arg("devices").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.starts_with("0: "), "{text}");
    assert!(text.contains("limits: storage binding"), "{text}");
    let out = common::kiln()
        .args(["devices", "--format", "json"])
        .output()
        .unwrap();
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(list[0]["max_storage_binding"].as_u64().unwrap() > 0);

    let out = common::kiln()
        .args(["check", "-m"])
        .arg(tiny())
        .args(["-n", "6", "--format", "json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(out.status.success(), "{v}");
    assert_eq!(v["pass"], true);
    assert_eq!(v["steps"].as_array().unwrap().len(), 6);
    assert!(v["rms"].as_f64().unwrap() < 0.01, "{v}");

    let out = common::kiln()
        .args(["bench", "-m"])
        .arg(tiny())
        .args([
            "--backend",
            "gpu",
            "-p",
            "8",
            "-n",
            "4",
            "-r",
            "1",
            "-o",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for r in rows {
        assert!(r["backends"].as_str().unwrap().starts_with("GPU ("), "{r}");
        assert!(r["read_bandwidth_gbps"].as_f64().unwrap() > 0.0, "{r}");
    }
}

/// Runs `kiln run --backend gpu` on `model` with `args` and environment; expects exit 1 and a
/// message containing each of `wanted`.
fn fails_with(model: &std::path::Path, args: &[&str], env: &[(&str, &str)], wanted: &[&str]) {
    let mut cmd = common::kiln();
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .args(["run", "-m"])
        .arg(model)
        .args(args)
        .args(["-n", "2", "hello"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?} {env:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    for w in wanted {
        assert!(
            stderr.contains(w),
            "{args:?} {env:?}: {stderr:?} lacks {w:?}"
        );
    }
}

#[test]
fn gpu_failures_are_clear_errors() {
    // Without any Vulkan driver: no adapter (whether or not this machine has one).
    let no_driver = [
        ("VK_ICD_FILENAMES", "/nonexistent/none.json"),
        ("VK_DRIVER_FILES", "/nonexistent/none.json"),
    ];
    fails_with(
        &tiny(),
        &["--backend", "gpu"],
        &no_driver,
        &["no GPU adapter"],
    );
    fails_with(
        &tiny(),
        &["--backend", "gpu"],
        &[("KILN_WGPU_MAX_BINDING", "lots")],
        &["KILN_WGPU_MAX_BINDING=lots"],
    );
    fails_with(
        &tiny(),
        &["--backend", "cpu", "--gpu", "0"],
        &[],
        &["--backend cpu"],
    );
    if !have_gpu() {
        return;
    }
    fails_with(
        &tiny(),
        &["--gpu", "99"],
        &[],
        &["no GPU adapter 99", "kiln devices"],
    );
    // Lavapipe without the CPU's f16 conversions (GALLIUM_NOSSE=1) cannot pack f16 in shaders:
    // refused by name when the device opens, not a validation error at the first kernel.
    if common::gpu::gpu().is_some_and(|g| g.adapter_name().contains("llvmpipe")) {
        fails_with(
            &tiny(),
            &["--backend", "gpu"],
            &[("GALLIUM_NOSSE", "1")],
            &["cannot convert between f16 and f32", "--backend cpu"],
        );
    }
    let smollm2 = common::real_model(common::REAL_MODELS[0]);
    fails_with(
        &smollm2,
        &["--backend", "gpu", "-ngl", "all"],
        &[("KILN_WGPU_MAX_MEMORY", "16777216")],
        &["does not fit in GPU memory", "-ngl", "--backend cpu"],
    );
    fails_with(
        &tiny(),
        &["--backend", "cpu", "-ngl", "3"],
        &[],
        &["-ngl", "--backend cpu"],
    );
}

/// `KILN_WGPU_NOOP=1` puts the GPU backend on wgpu's no-op adapter (no GPU needed): a bench runs,
/// names the adapter, and reports the host's own time per token.
#[test]
fn the_noop_backend_measures_host_time() {
    let out = common::kiln()
        .env("KILN_WGPU_NOOP", "1")
        .args(["bench", "--backend", "gpu", "-p", "0", "-n", "4", "-r", "1"])
        .args(["--no-roofline", "-o", "json", "-m"])
        .arg(tiny())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = &rows[0];
    assert!(row["backends"].as_str().unwrap().contains("noop"), "{row}");
    assert!(row["avg_ts"].as_f64().unwrap() > 0.0);
}
