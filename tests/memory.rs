//! Peak resident memory running Qwen2.5-0.5B stays under 1.3 × its file size plus the KV cache:
//! weights are used from the mapping, never dequantized or copied. (Its own test binary, so the
//! process holds nothing else.)

mod common;

#[cfg(target_os = "linux")]
fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

#[cfg(target_os = "linux")]
#[test]
fn qwen2_peak_memory_is_bounded_by_the_file_and_the_cache() {
    use kiln::backend::cpu::CpuBackend;
    use kiln::model::{Model, ModelFile, Session, Tokenizer};

    let path = common::real_model(common::REAL_MODELS[1]);
    let file_size = std::fs::metadata(&path).unwrap().len();
    let mf = ModelFile::open(&path).unwrap();
    let tok = Tokenizer::from_model(&mf).unwrap();
    let model = Model::load(&mf, CpuBackend::new(2).unwrap()).unwrap();
    let ctx = 4096;
    let mut s = Session::new(&model, ctx).unwrap();
    let prompt = tok
        .encode(
            &"The quick brown fox jumps over the lazy dog. ".repeat(40),
            true,
        )
        .unwrap();
    let mut logits = s.prefill(&prompt).unwrap().to_vec();
    for _ in 0..16 {
        let t = common::golden_run::argmax(&logits);
        logits = s.decode(t).unwrap().to_vec();
    }
    let kv = (model.kv_bytes_per_token(Default::default()) * ctx) as u64;
    let peak = peak_rss_bytes();
    let limit = (1.3 * file_size as f64) as u64 + kv;
    eprintln!(
        "peak RSS {} MB, limit {} MB (file {} MB, KV cache {} MB)",
        peak >> 20,
        limit >> 20,
        file_size >> 20,
        kv >> 20
    );
    assert!(peak < limit, "peak RSS {peak} exceeds {limit}");
}
