//! `kiln bench`: prompt-processing and generation speed in llama-bench's tests and table, so the
//! numbers compare. Beyond llama-bench, generation rows carry the effective weight-read bandwidth
//! (bytes of weights one token reads × tokens/s) and its share of this machine's own read
//! bandwidth, measured at start. Token ids are random; tokenization and sampling are outside the
//! timed region. stdout holds only the report; progress goes to stderr.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use clap::ValueEnum;
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use serde_json::json;

use super::info::human_count;
use super::placement::{GpuLayers, KvNeeds, Placed, PlacementArgs, place_on};
use super::{CacheArgs, ModelArgs};
use crate::backend::cpu::CpuBackend;
use crate::backend::{Backend, CoreOps, Profile};
use crate::model::arch::KvCacheTypes;
use crate::model::loader::Source;
use crate::model::session::DEFAULT_BATCH;
use crate::model::{Model, ModelFile, Session};
use crate::sampler::Rng;

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BenchFormat {
    #[default]
    Md,
    Csv,
    Json,
    Jsonl,
}

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    /// Prompt-processing tests: tokens per prompt (comma-separated list; 0 skips)
    #[arg(
        short = 'p',
        long = "n-prompt",
        default_value = "512",
        value_delimiter = ','
    )]
    pub n_prompt: Vec<usize>,

    /// Generation tests: tokens to generate (comma-separated list; 0 skips)
    #[arg(
        short = 'n',
        long = "n-gen",
        default_value = "128",
        value_delimiter = ','
    )]
    pub n_gen: Vec<usize>,

    /// Tokens already in the context before each test (comma-separated list)
    #[arg(
        short = 'd',
        long = "n-depth",
        default_value = "0",
        value_delimiter = ','
    )]
    pub n_depth: Vec<usize>,

    /// Repetitions of each test, after one warm-up run
    #[arg(short = 'r', long, default_value_t = 5)]
    pub repetitions: usize,

    /// Threads (comma-separated list; default: one per core)
    #[arg(short = 't', long = "threads", value_delimiter = ',')]
    pub threads: Vec<usize>,

    /// Compute backend
    #[arg(long, value_enum, default_value_t, env = "KILN_BACKEND")]
    pub backend: super::BackendKind,

    /// The GPU adapter to use, by its index in `kiln devices`
    #[arg(long = "gpu", value_name = "N", env = "KILN_GPU")]
    pub gpu: Option<usize>,

    /// CPU: keep the weights as the file holds them instead of repacking them at load
    #[arg(long = "no-repack")]
    pub no_repack: bool,

    /// GPU: layers on the GPU, as llama-bench's -ngl (comma-separated list; `all`, `auto`)
    #[arg(long = "n-gpu-layers", value_delimiter = ',', default_value = "auto")]
    pub n_gpu_layers: Vec<GpuLayers>,

    /// GPU: layers whose routed experts stay on the CPU, as llama-bench's -ncmoe
    /// (comma-separated list)
    #[arg(long = "n-cpu-moe", value_delimiter = ',', default_value = "0")]
    pub n_cpu_moe: Vec<usize>,

    #[command(flatten)]
    pub cache: CacheArgs,

    /// Output format
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    pub output: BenchFormat,

    /// Skip measuring the machine's memory read bandwidth (the roofline columns)
    #[arg(long)]
    pub no_roofline: bool,

    /// Time each kind of backend operation during the timed runs and report where a token's
    /// time goes (the timing itself costs a little speed)
    #[arg(long)]
    pub profile: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TestKind {
    Prompt,
    Generate,
}

#[derive(Clone, Copy)]
struct Test {
    kind: TestKind,
    n: usize,
    depth: usize,
}

impl Test {
    /// llama-bench's name: `pp512`, `tg128`, `tg128 @ d512`.
    fn name(&self) -> String {
        let base = match self.kind {
            TestKind::Prompt => format!("pp{}", self.n),
            TestKind::Generate => format!("tg{}", self.n),
        };
        if self.depth > 0 {
            format!("{base} @ d{}", self.depth)
        } else {
            base
        }
    }
}

struct Row {
    threads: usize,
    /// On a GPU: the layers there (-ngl) and the layers whose experts stay on the CPU.
    placement: Option<(usize, usize)>,
    test: Test,
    cache: KvCacheTypes,
    samples_ns: Vec<u64>,
    /// Weight bytes read per generated token ÷ mean seconds per token, in GB/s.
    weight_gbps: Option<f64>,
    /// Per-op times over the timed repetitions, with `--profile`.
    profile: Option<Profile>,
}

impl Row {
    fn samples_ts(&self) -> Vec<f64> {
        self.samples_ns
            .iter()
            .map(|&ns| self.test.n as f64 / (ns as f64 / 1e9))
            .collect()
    }
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, var.sqrt())
}

/// llama.cpp's name for a GGUF `general.file_type`.
fn file_type_name(ft: u64) -> Option<&'static str> {
    Some(match ft {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K - Medium",
        11 => "Q3_K - Small",
        12 => "Q3_K - Medium",
        13 => "Q3_K - Large",
        14 => "Q4_K - Small",
        15 => "Q4_K - Medium",
        16 => "Q5_K - Small",
        17 => "Q5_K - Medium",
        18 => "Q6_K",
        32 => "BF16",
        _ => return None,
    })
}

/// `arch params type`, as llama-bench's model column.
fn model_type(m: &ModelFile) -> String {
    let ftype = match &m.source {
        Source::Gguf(g) => g
            .metadata
            .u64("general.file_type")
            .ok()
            .flatten()
            .and_then(file_type_name)
            .map(str::to_string),
        Source::HuggingFace { .. } => None,
    }
    .unwrap_or_else(|| {
        // The type holding most of the bytes.
        m.type_mix()
            .into_iter()
            .max_by_key(|(_, (_, bytes))| *bytes)
            .map(|(t, _)| t.name().to_string())
            .unwrap_or_default()
    });
    let params = human_count(m.parameter_count()).replace(' ', "");
    format!("{} {params} {ftype}", m.config.arch.name())
}

/// Bytes of weights one generated token reads: every tensor except the embedding table, of which
/// one row is read, unless the output projection is tied to it; of routed experts, the share a
/// token uses (n_used of n_expert); none of the multi-token-prediction blocks kiln skips.
fn weight_bytes_per_token(m: &ModelFile) -> u64 {
    let c = &m.config;
    let skipped = |name: &str| {
        name.strip_prefix("blk.")
            .and_then(|r| r.split('.').next())
            .and_then(|i| i.parse::<usize>().ok())
            .is_some_and(|i| i >= c.n_layers)
    };
    m.tensors
        .values()
        .map(|t| {
            let bytes = t.bytes().len() as u64;
            if t.name == "token_embd.weight" && !c.tie_embeddings {
                t.row_bytes() as u64
            } else if skipped(&t.name) {
                0
            } else if let (Some(moe), true) = (&c.moe, t.name.ends_with("_exps.weight")) {
                bytes * moe.n_used as u64 / moe.n_expert as u64
            } else {
                bytes
            }
        })
        .sum()
}

/// This machine's memory read bandwidth in GB/s: the best of several parallel passes over a
/// buffer far larger than any cache.
pub fn measure_read_bandwidth(threads: usize) -> Result<f64> {
    const BYTES: usize = 1 << 30;
    let mut buf: Vec<u64> = Vec::new();
    buf.try_reserve_exact(BYTES / 8)
        .map_err(|_| anyhow::anyhow!("cannot allocate 1 GiB to measure memory bandwidth"))?;
    buf.resize(BYTES / 8, 1);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?;
    let mut best = 0f64;
    for _ in 0..5 {
        let start = Instant::now();
        let sum: u64 = pool.install(|| {
            buf.par_chunks(1 << 16)
                .map(|c| c.iter().fold(0u64, |a, &x| a.wrapping_add(x)))
                .reduce(|| 0, u64::wrapping_add)
        });
        std::hint::black_box(sum);
        best = best.max(BYTES as f64 / start.elapsed().as_secs_f64() / 1e9);
    }
    Ok(best)
}

/// Run one test; its time and, when `profile` is set, the backend's profile of the timed part.
fn run_test<B: Backend>(
    model: &Model<B>,
    test: &Test,
    cache: KvCacheTypes,
    rng: &mut Rng,
    profile: bool,
) -> Result<(Duration, Option<Profile>)> {
    let vocab = model.config.vocab_size as u64;
    let mut random =
        |n: usize| -> Vec<u32> { (0..n).map(|_| (rng.next_u64() % vocab) as u32).collect() };
    let mut s = Session::with_options(model, test.depth + test.n + 1, DEFAULT_BATCH, cache)?;
    if test.depth > 0 {
        s.prefill(&random(test.depth))?;
    }
    let tokens = random(test.n);
    if profile {
        model.backend.set_profiling(true);
    }
    let start = Instant::now();
    match test.kind {
        TestKind::Prompt => {
            s.prefill(&tokens)?;
        }
        TestKind::Generate => {
            for (i, &t) in tokens.iter().enumerate() {
                if i == 0 && test.depth == 0 {
                    s.prefill(&[t])?;
                } else {
                    s.decode(t)?;
                }
            }
        }
    }
    let elapsed = start.elapsed();
    let profile = profile.then(|| model.backend.profile()).flatten();
    if profile.is_some() {
        model.backend.set_profiling(false);
    }
    Ok((elapsed, profile))
}

/// The sum of two runs' profiles.
fn merge_profiles(a: Option<Profile>, b: Option<Profile>) -> Option<Profile> {
    let (mut a, b) = match (a, b) {
        (Some(a), Some(b)) => (a, b),
        (a, b) => return a.or(b),
    };
    for op in b.ops {
        match a.ops.iter_mut().find(|o| o.name == op.name) {
            Some(o) => {
                o.calls += op.calls;
                o.time += op.time;
            }
            None => a.ops.push(op),
        }
    }
    for (name, n) in b.counters {
        match a.counters.iter_mut().find(|c| c.0 == name) {
            Some(c) => c.1 += n,
            None => a.counters.push((name, n)),
        }
    }
    Some(a)
}

/// How to measure one model: its backend's threads, the cache and the repetitions.
struct Measure<'a, B: Backend> {
    model: &'a Model<B>,
    threads: usize,
    placement: Option<(usize, usize)>,
    cache: KvCacheTypes,
    repetitions: usize,
    bytes_per_token: u64,
    profile: bool,
}

impl<B: Backend> Measure<'_, B> {
    /// One test: a warm-up run, then the timed repetitions.
    fn row(&self, test: &Test, progress: &ProgressBar, rng: &mut Rng) -> Result<Row> {
        progress.set_message(format!("{} t={}", test.name(), self.threads));
        run_test(self.model, test, self.cache, rng, false)?; // warm-up
        progress.inc(1);
        let mut samples_ns = Vec::with_capacity(self.repetitions);
        let mut profile = None;
        for _ in 0..self.repetitions {
            let (time, p) = run_test(self.model, test, self.cache, rng, self.profile)?;
            samples_ns.push(time.as_nanos() as u64);
            profile = merge_profiles(profile, p);
            progress.inc(1);
        }
        let row = Row {
            threads: self.threads,
            placement: self.placement,
            test: *test,
            cache: self.cache,
            weight_gbps: None,
            samples_ns,
            profile,
        };
        let weight_gbps = (test.kind == TestKind::Generate)
            .then(|| self.bytes_per_token as f64 * mean_sd(&row.samples_ts()).0 / 1e9);
        Ok(Row { weight_gbps, ..row })
    }
}

pub fn run(args: BenchArgs) -> Result<ExitCode> {
    if args.repetitions == 0 {
        bail!("-r must be at least 1");
    }
    let file = args.model.open()?;
    let threads = if args.threads.is_empty() {
        vec![std::thread::available_parallelism().map_or(1, |n| n.get())]
    } else {
        args.threads.clone()
    };
    if threads.contains(&0) {
        bail!("-t must be at least 1");
    }
    let mut tests = Vec::new();
    for &depth in &args.n_depth {
        tests.extend(args.n_prompt.iter().filter(|&&n| n > 0).map(|&n| Test {
            kind: TestKind::Prompt,
            n,
            depth,
        }));
        tests.extend(args.n_gen.iter().filter(|&&n| n > 0).map(|&n| Test {
            kind: TestKind::Generate,
            n,
            depth,
        }));
    }
    if tests.is_empty() {
        bail!("no tests: give -p or -n a positive count");
    }

    let progress = ProgressBar::new((threads.len() * tests.len() * (args.repetitions + 1)) as u64);
    progress.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let bytes_per_token = weight_bytes_per_token(&file);
    let mut rows = Vec::new();
    let mut rng = Rng::new(1234);
    let cache = args.cache.types();
    let mut measure = |model: &dyn Fn(&Test, &mut Rng) -> Result<Row>| -> Result<()> {
        for test in &tests {
            rows.push(model(test, &mut rng)?);
        }
        Ok(())
    };
    // Measure every test on one loaded model; its backend's description.
    macro_rules! measure_model {
        ($model:expr, $threads:expr, $placement:expr) => {{
            let model = $model;
            let on = Measure {
                model: &model,
                threads: $threads,
                placement: $placement,
                cache,
                repetitions: args.repetitions,
                bytes_per_token,
                profile: args.profile,
            };
            measure(&|test, rng| on.row(test, &progress, rng))?;
            model.backend.describe()
        }};
    }
    let (backend_name, read_bw, bw_kind) = match super::choose_gpu(args.backend, args.gpu)? {
        Some(gpu) => {
            // The GPU's roofline is its own memory, measured with a copy kernel.
            let bw = if args.no_roofline {
                None
            } else {
                progress.set_message("measuring GPU memory bandwidth");
                Some(gpu.measure_bandwidth()?)
            };
            let kv = KvNeeds {
                ctx: tests.iter().map(|t| t.depth + t.n).max().unwrap_or(1),
                types: cache,
            };
            let cpu_threads = *threads.iter().max().unwrap_or(&1);
            let combos = args.n_gpu_layers.len() * args.n_cpu_moe.len();
            progress.set_length((combos * tests.len() * (args.repetitions + 1)) as u64);
            let mut gpu = Some(gpu);
            let mut name = String::new();
            for &n_gpu_layers in &args.n_gpu_layers {
                for &n_cpu_moe in &args.n_cpu_moe {
                    let flags = PlacementArgs {
                        n_gpu_layers,
                        cpu_moe: false,
                        n_cpu_moe: Some(n_cpu_moe),
                    };
                    let gpu = match gpu.take() {
                        Some(g) => g,
                        None => super::choose_gpu(args.backend, args.gpu)?
                            .ok_or_else(|| anyhow::anyhow!("the GPU is gone"))?,
                    };
                    let cpu = CpuBackend::new(cpu_threads)?.with_repacking(!args.no_repack);
                    let (placed, line) = place_on(&file, Some(gpu), cpu, &flags, kv)?;
                    if let Some(line) = line {
                        progress.suspend(|| eprintln!("{line}"));
                    }
                    name = match placed {
                        Placed::Gpu(gpu) => {
                            let all = file.config.n_layers + 1;
                            measure_model!(Model::load(&file, *gpu)?, 1, Some((all, 0)))
                        }
                        Placed::Split(split) => {
                            let model = Model::load(&file, *split)?;
                            let p = model.backend.placement();
                            let at = Some((p.gpu_layers, p.cpu_moe_layers));
                            measure_model!(model, cpu_threads, at)
                        }
                        Placed::Cpu(cpu) => {
                            measure_model!(Model::load(&file, *cpu)?, cpu_threads, Some((0, 0)))
                        }
                    };
                }
            }
            (name, bw, "GPU copy")
        }
        None => {
            let bw = if args.no_roofline {
                None
            } else {
                progress.set_message("measuring memory bandwidth");
                Some(measure_read_bandwidth(*threads.iter().max().unwrap_or(&1))?)
            };
            let mut name = String::from("CPU");
            for &t in &threads {
                let cpu = CpuBackend::new(t)?.with_repacking(!args.no_repack);
                name = measure_model!(Model::load(&file, cpu)?, t, None);
            }
            (name, bw, "read")
        }
    };
    progress.finish_and_clear();

    let report = Report {
        file: &file,
        model_type: model_type(&file),
        backend: backend_name,
        read_bw,
        bw_kind,
        rows,
    };
    let mut out = std::io::stdout().lock();
    match args.output {
        BenchFormat::Md => report.markdown(&mut out)?,
        BenchFormat::Csv => report.csv(&mut out)?,
        BenchFormat::Json => writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&report.json_rows())?
        )?,
        BenchFormat::Jsonl => {
            for r in report.json_rows() {
                writeln!(out, "{r}")?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

struct Report<'a> {
    file: &'a ModelFile,
    model_type: String,
    backend: String,
    read_bw: Option<f64>,
    /// What `read_bw` measured: this machine's memory read, or the GPU's copy bandwidth.
    bw_kind: &'static str,
    rows: Vec<Row>,
}

impl Report<'_> {
    fn model_size(&self) -> u64 {
        self.file
            .tensors
            .values()
            .map(|t| t.bytes().len() as u64)
            .sum()
    }

    fn json_rows(&self) -> Vec<serde_json::Value> {
        self.rows
            .iter()
            .map(|r| {
                let ts = r.samples_ts();
                let ns: Vec<f64> = r.samples_ns.iter().map(|&x| x as f64).collect();
                let (avg_ns, sd_ns) = mean_sd(&ns);
                let (avg_ts, sd_ts) = mean_sd(&ts);
                json!({
                    "build": format!("kiln {}", env!("CARGO_PKG_VERSION")),
                    "model_filename": self.file.path,
                    "model_type": self.model_type,
                    "model_size": self.model_size(),
                    "model_n_params": self.file.parameter_count(),
                    "backends": self.backend,
                    "n_threads": r.threads,
                    "n_gpu_layers": r.placement.map_or(0, |p| p.0),
                    "n_cpu_moe": r.placement.map_or(0, |p| p.1),
                    "type_k": r.cache.k.name(),
                    "type_v": r.cache.v.name(),
                    "n_prompt": if r.test.kind == TestKind::Prompt { r.test.n } else { 0 },
                    "n_gen": if r.test.kind == TestKind::Generate { r.test.n } else { 0 },
                    "n_depth": r.test.depth,
                    "test": r.test.name(),
                    "avg_ns": avg_ns as u64,
                    "stddev_ns": sd_ns as u64,
                    "avg_ts": avg_ts,
                    "stddev_ts": sd_ts,
                    "samples_ns": r.samples_ns,
                    "samples_ts": ts,
                    "weights_gbps": r.weight_gbps,
                    "read_bandwidth_gbps": self.read_bw,
                    "roofline_fraction": r.weight_gbps.zip(self.read_bw).map(|(w, b)| w / b),
                    "profile": r.profile.as_ref().map(|p| json!({
                        "ops": p.ops.iter().map(|o| json!({
                            "op": o.name,
                            "calls": o.calls,
                            "ns": o.time.as_nanos() as u64,
                        })).collect::<Vec<_>>(),
                        "counters": p.counters.iter().map(|(n, v)| json!({"name": n, "count": v}))
                            .collect::<Vec<_>>(),
                    })),
                })
            })
            .collect()
    }

    fn csv(&self, out: &mut impl Write) -> Result<()> {
        let cols = [
            "model_filename",
            "model_type",
            "model_size",
            "model_n_params",
            "backends",
            "n_threads",
            "n_gpu_layers",
            "n_cpu_moe",
            "type_k",
            "type_v",
            "n_prompt",
            "n_gen",
            "n_depth",
            "test",
            "avg_ns",
            "stddev_ns",
            "avg_ts",
            "stddev_ts",
            "weights_gbps",
            "read_bandwidth_gbps",
            "roofline_fraction",
        ];
        writeln!(out, "{}", cols.join(","))?;
        for r in self.json_rows() {
            let cells: Vec<String> = cols
                .iter()
                .map(|c| match &r[*c] {
                    serde_json::Value::Null => "\"\"".to_string(),
                    serde_json::Value::String(s) => format!("\"{}\"", s.replace('"', "\"\"")),
                    other => format!("\"{other}\""),
                })
                .collect();
            writeln!(out, "{}", cells.join(","))?;
        }
        Ok(())
    }

    fn markdown(&self, out: &mut impl Write) -> Result<()> {
        let size = format!("{:.2} MiB", self.model_size() as f64 / (1u64 << 20) as f64);
        let params = format!("{:.2} M", self.file.parameter_count() as f64 / 1e6);
        let roof = self.read_bw.is_some();
        // As llama-bench: the cache types get columns only when one is not the default.
        let types = self.rows.iter().any(|r| r.cache != KvCacheTypes::default());
        let mut header = format!(
            "| {:<30} | {:>10} | {:>10} | {:<10} | {:>7} |",
            "model", "size", "params", "backend", "threads"
        );
        let mut rule = format!(
            "| {} | {}: | {}: | {} | {}: |",
            "-".repeat(30),
            "-".repeat(9),
            "-".repeat(9),
            "-".repeat(10),
            "-".repeat(6),
        );
        // As llama-bench: -ngl on a GPU, -ncmoe when any row keeps experts on the CPU.
        let ngl = self.rows.iter().any(|r| r.placement.is_some());
        let ncmoe = self
            .rows
            .iter()
            .any(|r| r.placement.is_some_and(|p| p.1 > 0));
        if ngl {
            header.push_str(&format!(" {:>3} |", "ngl"));
            rule.push_str(&format!(" {}: |", "-".repeat(2)));
        }
        if ncmoe {
            header.push_str(&format!(" {:>5} |", "ncmoe"));
            rule.push_str(&format!(" {}: |", "-".repeat(4)));
        }
        if types {
            header.push_str(&format!(" {:<6} | {:<6} |", "type_k", "type_v"));
            rule.push_str(&format!(" {} | {} |", "-".repeat(6), "-".repeat(6)));
        }
        header.push_str(&format!(" {:>15} | {:>20} |", "test", "t/s"));
        rule.push_str(&format!(" {}: | {}: |", "-".repeat(14), "-".repeat(19)));
        if roof {
            header.push_str(&format!(" {:>12} | {:>9} |", "weights GB/s", "of read BW"));
            rule.push_str(&format!(" {}: | {}: |", "-".repeat(11), "-".repeat(8)));
        }
        writeln!(out, "{header}")?;
        writeln!(out, "{rule}")?;
        // llama-bench's short backend name; the footer has the whole description.
        let short = if self.backend.starts_with("GPU") {
            "GPU"
        } else {
            "CPU"
        };
        for r in &self.rows {
            let (mean, sd) = mean_sd(&r.samples_ts());
            let mut line = format!(
                "| {:<30} | {:>10} | {:>10} | {:<10} | {:>7} |",
                self.model_type, size, params, short, r.threads,
            );
            let (layers, experts) = r.placement.unwrap_or_default();
            if ngl {
                line.push_str(&format!(" {layers:>3} |"));
            }
            if ncmoe {
                line.push_str(&format!(" {experts:>5} |"));
            }
            if types {
                line.push_str(&format!(" {:<6} | {:<6} |", r.cache.k, r.cache.v));
            }
            line.push_str(&format!(
                " {:>15} | {:>20} |",
                r.test.name(),
                format!("{mean:.2} ± {sd:.2}")
            ));
            if let Some(bw) = self.read_bw {
                let (g, f) = match r.weight_gbps {
                    Some(g) => (format!("{g:.1}"), format!("{:.0} %", 100.0 * g / bw)),
                    None => (String::new(), String::new()),
                };
                line.push_str(&format!(" {g:>12} | {f:>9} |"));
            }
            writeln!(out, "{line}")?;
        }
        writeln!(out)?;
        let mut footer = format!(
            "build: kiln {} ({})",
            env!("CARGO_PKG_VERSION"),
            self.backend
        );
        if let Some(bw) = self.read_bw {
            let kind = self.bw_kind;
            footer.push_str(&format!("; measured {kind} bandwidth {bw:.1} GB/s"));
        }
        writeln!(out, "{footer}")?;
        for r in &self.rows {
            if let Some(p) = &r.profile {
                profile_table(out, r, p)?;
            }
        }
        Ok(())
    }
}

/// Where one test's time went: per op, its calls and time per token and its share of the run.
fn profile_table(out: &mut impl Write, r: &Row, p: &Profile) -> Result<()> {
    let tokens = (r.test.n * r.samples_ns.len()) as f64;
    let total_ns: u64 = r.samples_ns.iter().sum();
    let mut ops: Vec<_> = p.ops.iter().collect();
    ops.sort_by_key(|o| std::cmp::Reverse(o.time));
    writeln!(out)?;
    writeln!(
        out,
        "profile: {} t={} (per token)",
        r.test.name(),
        r.threads
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "| {:<20} | {:>8} | {:>10} | {:>6} |",
        "op", "calls", "µs", "share"
    )?;
    writeln!(
        out,
        "| {} | {}: | {}: | {}: |",
        "-".repeat(20),
        "-".repeat(7),
        "-".repeat(9),
        "-".repeat(5)
    )?;
    let mut line = |name: &str, calls: f64, ns: f64| {
        writeln!(
            out,
            "| {:<20} | {:>8.1} | {:>10.1} | {:>5.1}% |",
            name,
            calls / tokens,
            ns / tokens / 1e3,
            100.0 * ns / total_ns as f64
        )
    };
    let mut accounted = 0.0;
    for o in ops {
        let ns = o.time.as_nanos() as f64;
        accounted += ns;
        line(o.name, o.calls as f64, ns)?;
    }
    line("(outside ops)", 0.0, total_ns as f64 - accounted)?;
    if !p.counters.is_empty() {
        writeln!(out)?;
        for (name, n) in &p.counters {
            writeln!(out, "{name}: {:.1} per token", *n as f64 / tokens)?;
        }
    }
    Ok(())
}
