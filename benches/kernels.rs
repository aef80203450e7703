//! The CPU's matmul kernels in cache, per weight type: one thread multiplying a 256 × 4096 weight
//! (0.3–1.1 MiB, within this class of CPU's L2) by one activation row (decode's mat-vec, reported
//! as weight bytes per second) and by 32 rows (prefill, reported as multiply-adds per second).
//! Weights are random quants under typical scales (tests/common/random_weights.rs), repacked at
//! upload where the CPU has GEMM kernels for the type, as a model's are.
//! `cargo bench --bench kernels [-- FILTER]`; `KILN_NO_SIMD=1` measures the portable kernels.

#[allow(dead_code)]
#[path = "../tests/common/random_weights.rs"]
mod random_weights;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kiln::backend::CoreOps;
use kiln::backend::cpu::CpuBackend;
use kiln::gguf::GgmlType;
use random_weights::{Rng, random_weight};

const ROWS: usize = 256;
const COLS: usize = 4096;

const TYPES: [GgmlType; 20] = [
    GgmlType::F16,
    GgmlType::Q4_0,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
    GgmlType::MXFP4,
    GgmlType::IQ3_S,
    GgmlType::IQ3_XXS,
    GgmlType::IQ2_S,
    GgmlType::IQ2_XS,
    GgmlType::IQ2_XXS,
    GgmlType::IQ1_M,
    GgmlType::IQ1_S,
    GgmlType::TQ2_0,
    GgmlType::TQ1_0,
    GgmlType::Q1_0,
    GgmlType::Q2_K,
];

fn kernels(c: &mut Criterion) {
    let b = CpuBackend::new(1).expect("a one-thread CPU backend");
    let mut rng = Rng(0x9e3779b97f4a7c15);
    for t in TYPES {
        let w = random_weight(t, ROWS, COLS, &mut rng);
        let weight = b.weight(&w).expect("weight upload");
        let bytes = (ROWS * COLS / t.block_len() * t.block_bytes()) as u64;
        for (tokens, name) in [(1, "decode"), (32, "prefill32")] {
            let mut x = b.buffer(tokens * COLS).expect("activations");
            b.upload(&mut x, &rng.vec(tokens * COLS, 1.0));
            let mut out = b.buffer(tokens * ROWS).expect("outputs");
            let mut g = c.benchmark_group(name);
            g.throughput(if tokens == 1 {
                Throughput::Bytes(bytes)
            } else {
                Throughput::Elements((ROWS * COLS * tokens) as u64)
            });
            g.bench_function(t.to_string(), |bench| {
                bench.iter(|| b.matmul(&x, &weight, tokens, &mut out))
            });
            g.finish();
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(std::time::Duration::from_millis(300))
        .measurement_time(std::time::Duration::from_millis(800));
    targets = kernels
}
criterion_main!(benches);
