//! Tokenizer construction from GGUF metadata and encoding throughput on a 100 KB text, for the
//! three real models (fetched by scripts/fetch-models.sh). `cargo bench --bench tokenizer`.

use std::path::PathBuf;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kiln::model::{ModelFile, Tokenizer};

fn models() -> Vec<PathBuf> {
    let dir = std::env::var_os("KILN_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models"));
    [
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "qwen2.5-coder-0.5b.gguf",
        "gemma-3-270m-q4_k_m.gguf",
    ]
    .iter()
    .map(|n| dir.join(n))
    .filter(|p| p.is_file())
    .collect()
}

/// About 100 KB of mixed English, code and non-ASCII text.
fn text_100k() -> String {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/golden/prompts-long.json");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut base = String::new();
    for key in ["texts", "prompts"] {
        for t in v[key].as_array().unwrap() {
            base.push_str(t.as_str().unwrap());
            base.push('\n');
        }
    }
    base.push_str("fn main() {\n    println!(\"naïve café — déjà vu 😀 日本語のテキスト\");\n}\n");
    let mut text = String::new();
    while text.len() < 100 * 1024 {
        text.push_str(&base);
    }
    text
}

fn bench(c: &mut Criterion) {
    let text = text_100k();
    for path in models() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let model = ModelFile::open(&path).unwrap();
        let mut g = c.benchmark_group(format!("tokenizer/{name}"));
        g.sample_size(10);
        g.bench_function("build from GGUF", |b| {
            b.iter(|| Tokenizer::from_model(&model).unwrap())
        });
        let tok = Tokenizer::from_model(&model).unwrap();
        g.throughput(Throughput::Bytes(text.len() as u64));
        g.bench_function("encode 100 KB", |b| {
            b.iter(|| tok.encode(&text, false).unwrap())
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
