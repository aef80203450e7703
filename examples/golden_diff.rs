//! Diagnostic: per-step differences between kiln's logits and a golden file's top-5 (teacher-forced).
//! `cargo run --release --example golden_diff -- GOLDEN.json MODEL_NAME MODEL_PATH [CASE]`; with a
//! CASE index it prints every step, otherwise a summary against the README tolerance. The KV cache
//! is f16 unless `KILN_DIFF_F32_KV` is set (the Qwen3.5 goldens' cache); `KILN_DIFF_GPU` runs the
//! model on the GPU (`--backend gpu`'s adapter).
use kiln::backend::Backend;
use kiln::backend::CacheType;
use kiln::backend::cpu::CpuBackend;
use kiln::backend::wgpu::{AdapterChoice, WgpuBackend};
use kiln::model::arch::KvCacheTypes;
use kiln::model::session::DEFAULT_BATCH;
use kiln::model::{Model, ModelFile, Session};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let mf = ModelFile::open(std::path::Path::new(&a[3])).unwrap();
    if std::env::var_os("KILN_DIFF_GPU").is_some() {
        let gpu = WgpuBackend::new(AdapterChoice::Best).unwrap();
        diff(&a, &Model::load(&mf, gpu).unwrap());
    } else {
        let repack = std::env::var_os("KILN_DIFF_NO_REPACK").is_none();
        let cpu = CpuBackend::new(2).unwrap().with_repacking(repack);
        diff(&a, &Model::load(&mf, cpu).unwrap());
    }
}

fn diff<B: Backend>(a: &[String], model: &Model<B>) {
    let golden: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&a[1]).unwrap()).unwrap();
    let entry = &golden["models"][&a[2]];
    let cache = if std::env::var_os("KILN_DIFF_F32_KV").is_some() {
        KvCacheTypes {
            k: CacheType::F32,
            v: CacheType::F32,
        }
    } else {
        KvCacheTypes::default()
    };
    let which: Option<usize> = a.get(4).map(|s| s.parse().unwrap());
    let (mut viol, mut total, mut worst, mut sq) = (0, 0, 0f32, 0f64);
    // The golden README's rule for real (quantized) models: |Δ| ≤ 1.0 + 0.03·|logit|.
    let (mut rule_viol, mut rule_worst) = (0, 0f32);
    for (ci, case) in entry["greedy"].as_array().unwrap().iter().enumerate() {
        if which.is_some_and(|w| w != ci) {
            continue;
        }
        let prompt: Vec<u32> = case["prompt_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        let steps = case["steps"].as_array().unwrap();
        let ctx = prompt.len() + steps.len() + 1;
        let mut s = Session::with_options(model, ctx, DEFAULT_BATCH, cache).unwrap();
        let mut logits = s.prefill(&prompt).unwrap().to_vec();
        for (i, st) in steps.iter().enumerate() {
            let diffs: Vec<String> = st["top5"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    let id = p[0].as_u64().unwrap() as usize;
                    let w = p[1].as_f64().unwrap() as f32;
                    let r = (logits[id] - w).abs() / (0.5 + 0.02 * w.abs());
                    total += 1;
                    if r > 1.0 {
                        viol += 1;
                    }
                    worst = worst.max(r);
                    let rule = (logits[id] - w).abs() / (1.0 + 0.03 * w.abs());
                    rule_viol += (rule > 1.0) as usize;
                    rule_worst = rule_worst.max(rule);
                    sq += ((logits[id] - w) as f64).powi(2);
                    format!("{:+.3}", logits[id] - w)
                })
                .collect();
            if which.is_some() {
                println!(
                    "  step {i:2} margin {:.3} diffs {}",
                    st["margin"].as_f64().unwrap(),
                    diffs.join(" ")
                );
            }
            logits = s
                .decode(st["token"].as_u64().unwrap() as u32)
                .unwrap()
                .to_vec();
        }
    }
    println!(
        "SUMMARY violations {viol} of {total}; worst {worst:.2}; rms {:.4}; README rule: {rule_viol} violations, worst {rule_worst:.2}",
        (sq / total as f64).sqrt()
    );
}
