//! The cost of speculative decoding's verify pass per row count, against one decode step, on a
//! model file: `KILN_BENCH_MODEL=FILE cargo bench --bench verify` (`KILN_BENCH_GPU=1` runs it on
//! the best wgpu adapter, lavapipe included, instead of the CPU; `KILN_BENCH_NO_REPACK=1` runs the
//! CPU's row kernels, as `--no-repack`; `KILN_BENCH_THREADS`, default 2; `KILN_BENCH_ROUNDS`,
//! default 15; `KILN_BENCH_PROFILE=N` prints the CPU's per-op times of the last round's N-row
//! pass). Each round times a decode step and a verify pass of 2, 3, 4, 6 and 8 rows after a
//! 64-token context, each followed by the truncation that rejects the rows past the first (what a
//! pass whose drafts all fail costs), and prints the median time of each and its ratio to the
//! decode step's.
//! The model files: `../shared/tools/make-bench-models.py`, `scripts/bench-models/`.

use std::time::{Duration, Instant};

use kiln::backend::Backend;
use kiln::backend::cpu::CpuBackend;
use kiln::backend::wgpu::{AdapterChoice, WgpuBackend};
use kiln::model::{Model, ModelFile, Session};

const CONTEXT: usize = 64;
const ROW_COUNTS: [usize; 5] = [2, 3, 4, 6, 8];

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let Some(path) = std::env::var_os("KILN_BENCH_MODEL") else {
        eprintln!("verify bench: set KILN_BENCH_MODEL to a GGUF file to measure (skipped)");
        return Ok(());
    };
    let threads = env_or("KILN_BENCH_THREADS", 2);
    let rounds = env_or("KILN_BENCH_ROUNDS", 15).max(1);
    let file = ModelFile::open(std::path::Path::new(&path))?;
    let what = std::path::Path::new(&path).display().to_string();
    if std::env::var_os("KILN_BENCH_GPU").is_some() {
        let model = Model::load(&file, WgpuBackend::new(AdapterChoice::Best)?)?;
        measure(&model, &format!("{what} (GPU)"), rounds)
    } else {
        let repack = std::env::var_os("KILN_BENCH_NO_REPACK").is_none();
        let model = Model::load(&file, CpuBackend::new(threads)?.with_repacking(repack))?;
        measure(&model, &format!("{what} ({threads} threads)"), rounds)
    }
}

fn measure<B: Backend>(model: &Model<B>, what: &str, rounds: usize) -> anyhow::Result<()> {
    let vocab = model.config.vocab_size as u32;
    let ids: Vec<u32> = (0..CONTEXT as u32 + 16)
        .map(|i| (i * 7919 + 13) % vocab)
        .collect();
    let mut session = Session::new(model, CONTEXT + 32)?;
    session.prefill(&ids[..CONTEXT])?;
    let profiled = env_or("KILN_BENCH_PROFILE", 0);
    let mut decode = Vec::new();
    let mut verify: Vec<Vec<Duration>> = vec![Vec::new(); ROW_COUNTS.len()];
    for round in 0..rounds + 1 {
        let profile = |rows: usize, on: bool| {
            if round == rounds && rows == profiled {
                model.backend.set_profiling(on);
            }
        };
        profile(1, true);
        let t = Instant::now();
        session.decode(ids[CONTEXT])?;
        session.truncate(CONTEXT)?;
        profile(1, false);
        if round > 0 {
            decode.push(t.elapsed());
        }
        for (k, &n) in ROW_COUNTS.iter().enumerate() {
            profile(n, true);
            let t = Instant::now();
            session.verify(&ids[CONTEXT..CONTEXT + n])?;
            session.truncate(CONTEXT + 1)?;
            let spent = t.elapsed();
            profile(n, false);
            session.truncate(CONTEXT)?;
            if round > 0 {
                verify[k].push(spent);
            }
        }
    }
    let one = median(decode);
    println!("{what}, {rounds} rounds, medians");
    println!("rows  ms      × decode");
    println!("1     {:6.2}  1.00", one.as_secs_f64() * 1e3);
    for (&n, times) in ROW_COUNTS.iter().zip(verify) {
        let m = median(times);
        println!(
            "{n:<5} {:6.2}  {:.2}",
            m.as_secs_f64() * 1e3,
            m.as_secs_f64() / one.as_secs_f64()
        );
    }
    if let Some(p) = model.backend.profile().filter(|_| profiled > 0) {
        println!("per-op time of the {profiled}-row pass, ms per pass:");
        for op in p.ops {
            let ms = op.time.as_secs_f64() * 1e3;
            println!("  {:<24} {ms:7.2}  ({} calls)", op.name, op.calls);
        }
    }
    Ok(())
}
