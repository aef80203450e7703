//! `kiln info` as a real process, on every fixture and real model; and Hugging Face directories
//! (single file and sharded) read the same as their GGUF twins.

use crate::common;

use serde_json::Value;

fn info_json(path: &std::path::Path) -> Value {
    let out = common::kiln()
        .args(["info", "--format", "json", "-m"])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kiln info {} failed: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn check(path: &std::path::Path, arch: &str, layers: u64, hidden: u64, template: bool) -> Value {
    let v = info_json(path);
    assert_eq!(v["architecture"], arch, "{}", path.display());
    assert_eq!(v["config"]["n_layers"], layers, "{}", path.display());
    assert_eq!(v["config"]["hidden_size"], hidden, "{}", path.display());
    assert_eq!(v["chat_template"], template, "{}", path.display());
    assert!(v["file_size"].as_u64().unwrap() > 0);
    v
}

#[test]
fn info_describes_the_fixture_models() {
    let m = |p: &str| common::fixture(&format!("models/{p}"));
    let v = check(&m("tiny-llama.gguf"), "llama", 2, 16, true);
    assert_eq!(v["vocab_tokens"], 49152);
    assert_eq!(v["tensor_types"]["F32"]["tensors"], 21);
    check(&m("tiny-qwen3.gguf"), "qwen3", 2, 16, true);
    check(&m("tiny-llama-hf"), "llama", 2, 16, true);
    let v = check(&m("tiny-qwen3-hf"), "qwen3", 2, 16, true);
    assert_eq!(v["config"]["qk_norm"], true);
    let v = check(&m("llama3-vocab.gguf"), "llama", 1, 64, true);
    assert_eq!(v["parameters"], 0);
    assert_eq!(v["vocab_tokens"], 128256);
}

#[test]
fn info_describes_the_real_models() {
    let v = check(
        &common::real_model(common::REAL_MODELS[0]),
        "llama",
        30,
        576,
        true,
    );
    assert_eq!(v["config"]["n_kv_heads"], 3);
    assert_eq!(v["config"]["tie_embeddings"], true);
    assert!(v["tensor_types"]["Q4_1"]["tensors"].as_u64().unwrap() > 200);
    let v = check(
        &common::real_model(common::REAL_MODELS[1]),
        "qwen2",
        24,
        896,
        true,
    );
    assert_eq!(v["config"]["attention_bias"], true);
    let v = check(
        &common::real_model(common::REAL_MODELS[2]),
        "gemma3",
        18,
        640,
        false,
    );
    assert_eq!(v["config"]["sliding_window"], 512);
    assert_eq!(v["config"]["sliding_window_pattern"], 6);
    assert_eq!(v["config"]["head_dim"], 256);
    let params = v["parameters"].as_u64().unwrap();
    assert!((260_000_000..280_000_000).contains(&params), "{params}");
}

/// The same model in both formats reports the same configuration; only the RoPE layout differs,
/// because llama.cpp's converter permuted the GGUF's Q/K rows for interleaved RoPE.
#[test]
fn gguf_and_hf_configs_agree() {
    for (gguf, hf) in [
        ("tiny-llama.gguf", "tiny-llama-hf"),
        ("tiny-qwen3.gguf", "tiny-qwen3-hf"),
    ] {
        let mut a = info_json(&common::fixture(&format!("models/{gguf}")))["config"].clone();
        let mut b = info_json(&common::fixture(&format!("models/{hf}")))["config"].clone();
        let layout_a = a.as_object_mut().unwrap().remove("rope_layout").unwrap();
        let layout_b = b.as_object_mut().unwrap().remove("rope_layout").unwrap();
        assert_eq!(a, b, "{gguf} vs {hf}");
        if gguf.contains("llama") {
            assert_eq!(
                (layout_a.as_str(), layout_b.as_str()),
                (Some("interleaved"), Some("neox"))
            );
        } else {
            assert_eq!(layout_a, layout_b);
        }
    }
}

#[test]
fn info_text_output_and_bad_paths() {
    let out = common::kiln()
        .args(["info", "-m"])
        .arg(common::fixture("models/tiny-qwen3.gguf"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("qwen3") && text.contains("qk_norm             true"),
        "{text}"
    );

    let out = common::kiln()
        .args(["info", "-m", "/nonexistent/model.gguf"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("/nonexistent/model.gguf"), "{err}");

    let out = common::kiln()
        .args(["info"])
        .env_remove("KILN_MODEL")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "a missing flag is a usage error"
    );
}

#[test]
fn sharded_safetensors_read_like_the_single_file() {
    let src = common::fixture("models/tiny-llama-hf");
    let single = kiln::model::ModelFile::open(&src).unwrap();

    let dir = tempfile::tempdir().unwrap();
    common::shard_safetensors_dir(&src, dir.path());
    let sharded = kiln::model::ModelFile::open(dir.path()).unwrap();
    assert_eq!(sharded.tensors.len(), single.tensors.len());
    for (name, t) in &single.tensors {
        let s = &sharded.tensors[name];
        assert_eq!((s.dtype, &s.dims), (t.dtype, &t.dims), "{name}");
        assert_eq!(s.bytes(), t.bytes(), "{name}");
    }

    // A shard cut short is an error naming it.
    let shard = dir.path().join("model-00002-of-00002.safetensors");
    let b = std::fs::read(&shard).unwrap();
    std::fs::write(&shard, &b[..b.len() - 10]).unwrap();
    let err = kiln::model::ModelFile::open(dir.path())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("model-00002-of-00002.safetensors"), "{err}");
}

/// `-ngl` and `--n-cpu-moe` on `kiln info` say what a GPU run would place where (no GPU needed),
/// and `-ngl auto` under KILN_WGPU_MAX_MEMORY what fits; the bytes on the two sides are the
/// file's tensors.
#[test]
fn info_shows_a_placement_and_the_bytes_on_each_side() {
    let moe = common::fixture("models/qwen3moe-tiny.gguf");
    let run = |args: &[&str], env: Option<&str>| {
        let mut cmd = common::kiln();
        if let Some(cap) = env {
            cmd.env("KILN_WGPU_MAX_MEMORY", cap);
        }
        let out = cmd
            .args(["info", "-m"])
            .arg(&moe)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = run(&["-ngl", "3", "--n-cpu-moe", "2"], None);
    assert!(
        text.contains("GPU: layers 1–3; CPU: layer 0, the output, the routed experts of layer 1 ("),
        "{text}"
    );
    assert!(!run(&[], None).contains("placement"));
    let v: Value = serde_json::from_str(&run(&["--format", "json", "--cpu-moe"], None)).unwrap();
    let p = &v["placement"];
    assert_eq!(
        (p["n_gpu_layers"].as_u64(), p["n_cpu_moe"].as_u64()),
        (Some(5), Some(4))
    );
    let (gpu, cpu) = (
        p["gpu_weight_bytes"].as_u64().unwrap(),
        p["cpu_weight_bytes"].as_u64().unwrap(),
    );
    assert!(gpu > 0 && cpu > 0, "{p}");
    let total: u64 = v["tensor_types"]
        .as_object()
        .unwrap()
        .values()
        .map(|t| t["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(gpu + cpu, total);
    let fitted = run(&["-c", "256"], Some("8000000"));
    assert!(
        fitted.contains("CPU: the output, the routed experts of layers 0–3"),
        "{fitted}"
    );
}

/// A GGUF file of an architecture kiln does not run (Phi-3's layout here) is described from its
/// header, with what stops kiln, instead of refused: exit 0, its tensors and metadata listed.
#[test]
fn info_describes_a_file_kiln_cannot_run() {
    use common::gguf_writer::{GgufWriter, string};
    use gguf_rs_lib::format::metadata::MetadataValue;
    let mut w = GgufWriter::default();
    w.kv("general.architecture", string("rwkv7"))
        .kv("general.name", string("rwkv-shaped"))
        .kv("rwkv7.context_length", MetadataValue::U32(4096))
        .kv("rwkv7.block_count", MetadataValue::U32(1))
        .f32_tensor("token_embd.weight", &[8, 4], &[0.0; 32])
        .f32_tensor("blk.0.attn_qkv.weight", &[8, 24], &[0.0; 192]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rwkv.gguf");
    std::fs::write(&path, w.to_bytes()).unwrap();

    let v = info_json(&path);
    assert_eq!(v["architecture"], "rwkv7");
    assert_eq!(v["supported"], false);
    let why = v["unsupported"].as_str().unwrap();
    assert!(
        why.contains("architecture 'rwkv7' is not supported"),
        "{why}"
    );
    assert_eq!(v["parameters"], 32 + 192);
    assert_eq!(v["tensor_types"]["F32"]["tensors"], 2);
    assert_eq!(v["context_length"], 4096);

    let out = common::kiln()
        .args(["info", "--tensors", "--metadata", "-m"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for want in [
        "architecture   rwkv7",
        "runs in kiln   no: architecture 'rwkv7' is not supported",
        "blk.0.attn_qkv.weight",
        "general.name = ",
    ] {
        assert!(text.contains(want), "{want:?} not in {text}");
    }
}

/// `kiln tokenize` reads any GGUF that carries a vocabulary: llama.cpp's vocabulary-only files of
/// architectures kiln does not run (GPT-2, BERT) give the ids of llama.cpp's suite (`.out`), with
/// `--no-parse-special` as the suite runs; `--chat` on a file without a template says what is
/// missing.
#[test]
fn tokenize_reads_any_gguf_with_a_vocabulary() {
    let dir = common::models_dir().join("ggml-vocab");
    for vocab in ["gpt-2", "bert-bge", "falcon"] {
        let file = dir.join(format!("ggml-vocab-{vocab}.gguf"));
        let inp = std::fs::read_to_string(file.with_extension("gguf.inp")).unwrap();
        let out = std::fs::read_to_string(file.with_extension("gguf.out")).unwrap();
        let text = inp.split("\n__ggml_vocab_test__\n").nth(3).unwrap();
        let want: Vec<u64> = out
            .lines()
            .nth(3)
            .unwrap()
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        let got = common::kiln()
            .args([
                "tokenize",
                "--no-bos",
                "--no-parse-special",
                "--format",
                "json",
                "-m",
            ])
            .arg(&file)
            .arg(text)
            .output()
            .unwrap();
        assert!(
            got.status.success(),
            "{vocab}: {}",
            String::from_utf8_lossy(&got.stderr)
        );
        let v: Value = serde_json::from_slice(&got.stdout).unwrap();
        assert_eq!(v["ids"], serde_json::json!(want), "{vocab}: {text:?}");
    }
    let gpt2 = dir.join("ggml-vocab-gpt-2.gguf");
    let chat = common::kiln()
        .args(["tokenize", "--chat", "-m"])
        .arg(&gpt2)
        .arg("hi")
        .output()
        .unwrap();
    assert_eq!(chat.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&chat.stderr).contains("--chat needs a chat template"),
        "{}",
        String::from_utf8_lossy(&chat.stderr)
    );
    // <|endoftext|> is GPT-2's control token: one id when parsed, several as text.
    let count = |flags: &[&str]| -> u64 {
        let out = common::kiln()
            .args(["tokenize", "--no-bos", "--format", "json", "-m"])
            .arg(&gpt2)
            .args(flags)
            .arg("<|endoftext|>")
            .output()
            .unwrap();
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["count"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(count(&[]), 1);
    assert!(count(&["--no-parse-special"]) > 1);
}
