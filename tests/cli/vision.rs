//! `kiln run --image` as a real process: the tiny Qwen3.5 model with its tiny projector
//! (tests/fixtures/make_qwen35_vision.py), and the tiny Qwen3-VL, Gemma 3 and Gemma 4 pairs
//! (make_qwen3vl_vision.py, make_gemma3_vision.py, make_gemma4_vision.py), continue a prompt with
//! an image as llama.cpp's mtmd does (golden/llama-cpp-vision*.json), the projector is found
//! beside the model, and bad images and projectors are clear errors (exit code 1), never a panic.

use std::path::{Path, PathBuf};

use crate::common;

fn model() -> PathBuf {
    common::fixture("models/qwen35-tiny.gguf")
}

fn mmproj() -> PathBuf {
    common::fixture("models/qwen35-mmproj-tiny.gguf")
}

fn image(name: &str) -> PathBuf {
    common::fixture(&format!("models/{name}"))
}

/// `kiln run` with an image in a raw prompt at llama.cpp's marker, greedy: the tokens llama.cpp
/// generated (every step of the golden has a margin of at least 0.175), the image's 16 tokens,
/// and the prompt's 44 rows.
#[test]
fn run_with_an_image_generates_llama_cpps_tokens() {
    generates_llama_cpps_tokens("llama-cpp-vision.json", &model(), &mmproj());
}

/// The same for Qwen3-VL's deepstack projector and text model.
#[test]
fn run_with_a_qwen3vl_image_generates_llama_cpps_tokens() {
    generates_llama_cpps_tokens(
        "llama-cpp-vision-qwen3vl.json",
        &common::fixture("models/qwen3vl-tiny.gguf"),
        &common::fixture("models/qwen3vl-mmproj-tiny.gguf"),
    );
}

/// The same for Gemma 3's projector and text model (the image's rows attended both ways; the
/// golden's smallest margin is 0.68).
#[test]
fn run_with_a_gemma3_image_generates_llama_cpps_tokens() {
    generates_llama_cpps_tokens(
        "llama-cpp-vision-gemma3.json",
        &common::fixture("models/gemma3-tiny.gguf"),
        &common::fixture("models/gemma3-mmproj-tiny.gguf"),
    );
}

/// The same for Gemma 4's (seen both ways on the sliding-window layers only; smallest margin 0.91).
#[test]
fn run_with_a_gemma4_image_generates_llama_cpps_tokens() {
    generates_llama_cpps_tokens(
        "llama-cpp-vision-gemma4.json",
        &common::fixture("models/gemma4-tiny.gguf"),
        &common::fixture("models/gemma4-mmproj-tiny.gguf"),
    );
}

fn generates_llama_cpps_tokens(golden: &str, model: &Path, mmproj: &Path) {
    let golden = common::golden(golden);
    let case = &golden["logits"];
    let want: Vec<u64> = case["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["token"].as_u64().unwrap())
        .collect();
    let out = common::kiln()
        .args([
            "run", "--raw", "--temp", "0", "-n", "8", "--format", "json", "-c", "128",
        ])
        .arg("-m")
        .arg(model)
        .arg("--mmproj")
        .arg(mmproj)
        .arg("--image")
        .arg(image(case["image"].as_str().unwrap()))
        .arg(case["prompt"].as_str().unwrap())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let got: Vec<u64> = v["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect();
    assert_eq!(got, want);
    let image_chunk = case["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "image")
        .unwrap();
    assert_eq!(v["image_tokens"], image_chunk["n_tokens"]);
    assert_eq!(v["prompt_tokens"], case["n_prompt_tokens"]);
    assert!(v["timings"]["image_encode_ms"].as_f64().unwrap() >= 0.0);
}

/// Without --mmproj, the one mmproj*.gguf beside the model is used; two are an error naming both.
#[test]
fn the_projector_beside_the_model_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let link = |from: &Path, name: &str| std::fs::copy(from, dir.path().join(name)).unwrap();
    link(&model(), "model.gguf");
    link(&mmproj(), "mmproj-model-f32.gguf");
    let run = || {
        common::kiln()
            .args(["run", "--temp", "0", "-n", "2", "-m"])
            .arg(dir.path().join("model.gguf"))
            .arg("--image")
            .arg(image("vision-48x32.png"))
            .arg("What is this?")
            .output()
            .unwrap()
    };
    let out = run();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `kiln info` names the projector beside a model, and describes a projector file.
    let info = |path: PathBuf| {
        let out = common::kiln()
            .arg("info")
            .arg("-m")
            .arg(path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let text = info(dir.path().join("model.gguf"));
    assert!(
        text.contains("mmproj-model-f32.gguf beside it (qwen3vl_merger"),
        "{text}"
    );
    let text = info(mmproj());
    assert!(
        text.contains("qwen3vl_merger") && text.contains("16 at the native size"),
        "{text}"
    );
    link(&mmproj(), "mmproj-other.gguf");
    let out = run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("mmproj-other.gguf") && stderr.contains("--mmproj"),
        "{stderr}"
    );
}

/// Bad images and projectors: exit code 1 and a message that names the problem.
#[test]
fn bad_images_and_projectors_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let png = std::fs::read(image("vision-32x32.png")).unwrap();
    let truncated = dir.path().join("truncated.png");
    std::fs::write(&truncated, &png[..png.len() / 2]).unwrap();
    let text = dir.path().join("notes.png");
    std::fs::write(&text, "not an image at all").unwrap();
    // A BMP header that claims 100000 × 100000 pixels and holds none.
    let mut bmp = b"BM".to_vec();
    for v in [54u32, 0, 54, 40, 100_000, 100_000] {
        bmp.extend_from_slice(&v.to_le_bytes());
    }
    bmp.extend_from_slice(&1u16.to_le_bytes());
    bmp.extend_from_slice(&24u16.to_le_bytes());
    bmp.extend_from_slice(&[0; 24]);
    let huge = dir.path().join("huge.bmp");
    std::fs::write(&huge, &bmp).unwrap();
    let cases: [(&Path, PathBuf, PathBuf, &str); 7] = [
        (&truncated, model(), mmproj(), "cannot decode"),
        (&text, model(), mmproj(), "not an image"),
        (&huge, model(), mmproj(), "too large"),
        (
            Path::new("/nonexistent/cat.png"),
            model(),
            mmproj(),
            "cat.png",
        ),
        // A projector for a model of width 64 with one of width 16.
        (
            &image("vision-32x32.png"),
            common::fixture("models/tiny-qwen3.gguf"),
            mmproj(),
            "belongs to another model",
        ),
        // The widths agree, the deepstack layers do not (Qwen3.5's projector has none).
        (
            &image("vision-32x32.png"),
            common::fixture("models/qwen3vl-tiny.gguf"),
            mmproj(),
            "has 0 deepstack layers, but the model takes 2",
        ),
        (
            &image("vision-32x32.png"),
            model(),
            common::fixture("models/qwen3vl-mmproj-tiny.gguf"),
            "has 2 deepstack layers, but the model takes 0",
        ),
    ];
    for (img, model, mmproj, want) in cases {
        let out = common::kiln()
            .args(["run", "-n", "1", "-m"])
            .arg(&model)
            .arg("--mmproj")
            .arg(&mmproj)
            .arg("--image")
            .arg(img)
            .arg("hi")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{}: {stderr}", img.display());
        assert!(stderr.contains(want), "{}: {stderr}", img.display());
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// `kiln chat` with `/image`: the first reply is `kiln run`'s with the same image and text (the
/// same rendering), a second turn answers after it, and an image without a projector is an
/// error that leaves the chat going.
#[test]
fn chat_takes_an_image_for_the_next_message() {
    let img = image("vision-32x32.png");
    let run = common::kiln()
        .args(["run", "--temp", "0", "-n", "6", "-m"])
        .arg(model())
        .arg("--mmproj")
        .arg(mmproj())
        .arg("--image")
        .arg(&img)
        .arg("What is this?")
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let want = String::from_utf8(run.stdout).unwrap();
    let out = common::kiln()
        .args(["chat", "--temp", "0", "-n", "6", "-m"])
        .arg(model())
        .arg("--mmproj")
        .arg(mmproj())
        .write_stdin(format!(
            "/image {}\nWhat is this?\nAnd now?\n",
            img.display()
        ))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("16 tokens, for your next message"),
        "{stderr}"
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let replies: Vec<&str> = stdout
        .split("\n\n")
        .filter(|r| !r.trim().is_empty())
        .collect();
    assert_eq!(replies.len(), 2, "{stdout:?}");
    assert_eq!(
        replies[0].trim_end(),
        want.trim_end(),
        "turn 1 is kiln run's reply"
    );

    let out = common::kiln()
        .args(["chat", "--temp", "0", "-n", "3", "-m"])
        .arg(model())
        .write_stdin(format!("/image {}\nhi\n", img.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.contains("--mmproj"),
        "{stderr}"
    );
}

/// `kiln bench --image`: a row of its own per image, named by the preprocessed size, its t/s in
/// image tokens per second (45×29 is resized to 48×32: 24 tokens).
#[test]
fn bench_times_the_image_encoder() {
    let out = common::kiln()
        .args([
            "bench",
            "-p",
            "0",
            "-n",
            "0",
            "-r",
            "2",
            "-t",
            "2",
            "--no-roofline",
            "-o",
            "jsonl",
            "-m",
        ])
        .arg(model())
        .arg("--mmproj")
        .arg(mmproj())
        .arg("--image")
        .arg(image("vision-45x29.png"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(row["test"], "image 48x32");
    // Each sample's rate is its 24 tokens over its time (the mean of the rates is not 24 over
    // the mean time when the samples differ).
    let samples = |k: &str| -> Vec<f64> {
        row[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect()
    };
    let (ns, ts) = (samples("samples_ns"), samples("samples_ts"));
    assert_eq!(ns.len(), 2, "{row}");
    for (ns, ts) in ns.iter().zip(ts) {
        assert!(
            *ns > 0.0 && (ts - 24.0 / (ns / 1e9)).abs() / ts < 1e-6,
            "{row}"
        );
    }
}

/// `kiln run --batch` takes images as OpenAI content parts: a base64 `data:` URL, a local path and a
/// `file://` URL of one picture each give the tokens `kiln run --image` gives for the same message
/// (greedy); a later request shares the cache only up to the first image; a text-only request
/// runs as before; an image that does not decode is its line's error (exit code 1).
#[test]
fn batch_requests_take_image_content_parts() {
    use base64::Engine;
    let path = image("vision-48x32.png");
    let data = base64::engine::general_purpose::STANDARD.encode(std::fs::read(&path).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let requests = write_requests(
        dir.path(),
        &[
            image_request(&format!("data:image/png;base64,{data}")),
            image_request(&path.display().to_string()),
            text_request("Hello there"),
            image_request(&format!("file://{}", path.display())),
            image_request("data:image/png;base64,AAAA"),
        ],
    );
    let common_args = ["--temp", "0", "-n", "6", "-c", "256"];
    // One sequence: each request meets the cache the one before it left.
    let out = common::kiln()
        .arg("run")
        .args(common_args)
        .args(["--parallel", "1"])
        .arg("-m")
        .arg(model())
        .arg("--mmproj")
        .arg(mmproj())
        .arg("--batch")
        .arg(&requests)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(results.len(), 5);

    let want = run_alone(&common_args, &model(), &mmproj(), &path);
    for i in [0, 1, 3] {
        let r = &results[i];
        assert_eq!(r["tokens"], want["tokens"], "request {}: {r}", i + 1);
        assert_eq!(r["image_tokens"], want["image_tokens"], "request {}", i + 1);
        let rows =
            r["prompt_tokens"].as_u64().unwrap() + r["cached_prompt_tokens"].as_u64().unwrap();
        assert_eq!(
            rows,
            want["prompt_tokens"].as_u64().unwrap(),
            "request {}",
            i + 1
        );
    }
    // The second request shares the text before the image with the first, not the image.
    let before_image = results[1]["cached_prompt_tokens"].as_u64().unwrap();
    assert!(before_image > 0 && before_image < 40, "{before_image}");
    assert!(results[2]["text"].is_string() && results[2]["image_tokens"].is_null());
    let err = results[4]["error"].as_str().unwrap();
    assert!(
        err.contains("image 1") && err.contains("not an image"),
        "{err}"
    );
}

/// Qwen3-VL's images in a batch of three sequences at a time (`--parallel 3`): two requests with
/// different images and a text-only one between them. Each image request gives the tokens
/// `kiln run --image` gives alone (greedy). (tests/model/vision.rs checks images that share one
/// forward call row by row.)
#[test]
fn batch_runs_qwen3vl_images_side_by_side() {
    let (model, mmproj) = (
        common::fixture("models/qwen3vl-tiny.gguf"),
        common::fixture("models/qwen3vl-mmproj-tiny.gguf"),
    );
    let images = ["vision-48x32.png", "vision-20x70.png"];
    let dir = tempfile::tempdir().unwrap();
    let requests = write_requests(
        dir.path(),
        &[
            image_request(&image(images[0]).display().to_string()),
            text_request("Hello there"),
            image_request(&image(images[1]).display().to_string()),
        ],
    );
    let common_args = ["--temp", "0", "-n", "6", "-c", "256"];
    let out = common::kiln()
        .arg("run")
        .args(common_args)
        .args(["--parallel", "3", "-m"])
        .arg(&model)
        .arg("--mmproj")
        .arg(&mmproj)
        .arg("--batch")
        .arg(&requests)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let results: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(results.len(), 3, "{stderr}");
    for (r, name) in [(&results[0], images[0]), (&results[2], images[1])] {
        let want = run_alone(&common_args, &model, &mmproj, &image(name));
        assert_eq!(r["tokens"], want["tokens"], "{name}: {r}");
        assert_eq!(r["image_tokens"], want["image_tokens"], "{name}");
    }
}

/// `kiln run --format json` with `args`, one image and batch's question: its JSON line.
fn run_alone(args: &[&str], model: &Path, mmproj: &Path, img: &Path) -> serde_json::Value {
    let out = common::kiln()
        .arg("run")
        .args(args)
        .args(["--format", "json", "-m"])
        .arg(model)
        .arg("--mmproj")
        .arg(mmproj)
        .arg("--image")
        .arg(img)
        .arg("What do you see?")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A batch request: one user message with the image at `url` and batch's question.
fn image_request(url: &str) -> serde_json::Value {
    serde_json::json!({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}},
        {"type": "text", "text": "What do you see?"},
    ]}]})
}

/// A batch request of one user message of text.
fn text_request(text: &str) -> serde_json::Value {
    serde_json::json!({"messages": [{"role": "user", "content": text}]})
}

/// `requests` as a JSONL file in `dir`.
fn write_requests(dir: &Path, requests: &[serde_json::Value]) -> PathBuf {
    let path = dir.join("requests.jsonl");
    let lines: Vec<String> = requests.iter().map(|r| r.to_string()).collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}
