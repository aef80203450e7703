//! `kiln bench`: prompt-processing and generation speed in llama-bench's tests and table, so the
//! numbers compare. Beyond llama-bench, generation rows carry the effective weight-read bandwidth
//! (bytes of weights one token reads × tokens/s) and its share of this machine's own read
//! bandwidth, measured at start. Token ids are random; tokenization and sampling are outside the
//! timed region. stdout holds only the report; progress goes to stderr.

mod kernels;
mod report;

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use clap::ValueEnum;
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;

use super::info::human_count;
use super::placement::{GpuLayers, KvNeeds, Placed, PlacementArgs, place_on};
use super::speculation::BenchSpeculation;
use super::{CacheArgs, ModelArgs};
use crate::backend::cpu::CpuBackend;
use crate::backend::{Backend, CoreOps, Profile};
use crate::model::arch::KvCacheTypes;
use crate::model::loader::Source;
use crate::model::session::DEFAULT_BATCH;
use crate::model::{Model, ModelFile, Session};
use crate::sampler::{Rng, most_likely};
use report::Report;

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

    /// Instead of the tests, time each kind of decode mat-vec (Q/K/V, attention output, gate/up,
    /// down, output head) over every layer's own weights: µs a call and weight GB/s, by the wall
    /// clock and by the backend's profile (GPU timestamps where the adapter has them), split by
    /// kernel; -r passes over the layers
    #[arg(long, conflicts_with_all = ["profile", "n_gpu_layers", "n_cpu_moe"])]
    pub kernels: bool,

    /// Time each kind of backend operation during the timed runs and report where a token's
    /// time goes (the timing itself costs a little speed)
    #[arg(long)]
    pub profile: bool,

    /// Generation tests with speculative decoding (`--spec-type draft-mtp`, `ngram-simple`,
    /// `ngram-map-k` or `ngram-edit`;
    /// with `--spec-synth-rates` the drafts are kept at those rates, as llama.cpp measures it)
    #[command(flatten)]
    pub speculation: super::speculation::SpeculationArgs,

    /// Image-encoding tests: each --image encoded by the projector (--mmproj, or the one beside
    /// the model), a row of its own ("image WxH", t/s in image tokens per second)
    #[command(flatten)]
    pub vision: super::vision::VisionArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TestKind {
    Prompt,
    Generate,
    /// Encoding an image of this size (after preprocessing) into `n` tokens.
    Image(usize, usize),
}

#[derive(Clone, Copy)]
struct Test {
    kind: TestKind,
    n: usize,
    depth: usize,
}

impl Test {
    /// llama-bench's name: `pp512`, `tg128`, `tg128 @ d512`; `image 768x512` for an image.
    fn name(&self) -> String {
        let base = match self.kind {
            TestKind::Prompt => format!("pp{}", self.n),
            TestKind::Generate => format!("tg{}", self.n),
            TestKind::Image(w, h) => format!("image {w}x{h}"),
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
    /// Speculative generation: the drafter's name, and tokens drafted and kept over the timed
    /// repetitions, and the verify passes.
    speculation: Option<(&'static str, DraftCounts)>,
}

/// Tokens drafted and kept, and verify passes, in speculative generation.
#[derive(Debug, Clone, Copy, Default)]
struct DraftCounts {
    drafted: usize,
    accepted: usize,
    passes: usize,
}

impl DraftCounts {
    fn add(&mut self, o: DraftCounts) {
        self.drafted += o.drafted;
        self.accepted += o.accepted;
        self.passes += o.passes;
    }
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

/// Bytes of weights one generated token reads: every tensor except the embedding tables (Gemma
/// 4's per-layer one too), of which one row is read, unless the output projection is tied to it; of routed experts, the share a
/// token uses (n_used of n_expert); none of the multi-token-prediction blocks kiln skips.
fn weight_bytes_per_token(m: &ModelFile) -> u64 {
    let c = &m.config;
    let skipped = |name: &str| crate::tensor::block_of(name).is_some_and(|(i, _)| i >= c.n_layers);
    m.tensors
        .values()
        .map(|t| {
            let bytes = t.bytes().len() as u64;
            if t.name == "token_embd.weight" && !c.tie_embeddings {
                t.row_bytes() as u64
            } else if t.name == "per_layer_token_embd.weight" {
                // Gemma 4's per-layer embeddings: one row per token too.
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

/// Run one test; its time, when `profile` is set the backend's profile of the timed part, and
/// with `spec` what speculative generation drafted and kept.
fn run_test<B: Backend>(
    model: &Model<B>,
    test: &Test,
    cache: KvCacheTypes,
    rng: &mut Rng,
    profile: bool,
    spec: Option<&BenchSpeculation>,
) -> Result<(Duration, Option<Profile>, DraftCounts)> {
    let vocab = model.config.vocab_size as u64;
    let mut random =
        |n: usize| -> Vec<u32> { (0..n).map(|_| (rng.next_u64() % vocab) as u32).collect() };
    let mut s = Session::with_options(model, test.depth + test.n + 1, DEFAULT_BATCH, cache)?;
    let spec = spec.filter(|_| test.kind == TestKind::Generate);
    if spec.is_some_and(|sp| sp.drafter.is_none()) {
        s.enable_mtp()?;
    }
    if test.depth > 0 {
        s.prefill(&random(test.depth))?;
    }
    let tokens = random(test.n);
    if profile {
        model.backend.set_profiling(true);
    }
    let start = Instant::now();
    let mut counts = DraftCounts::default();
    match test.kind {
        TestKind::Prompt => {
            s.prefill(&tokens)?;
        }
        TestKind::Generate if let Some(sp) = spec => {
            counts = generate_speculatively(&mut s, &tokens, test.depth == 0, sp, rng)?;
        }
        TestKind::Image(..) => bail!("image tests run apart (image_row)"),
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
    Ok((elapsed, profile, counts))
}

/// A generation test with speculative decoding: `tokens` stand for the sampled tokens; each
/// pass drafts after the next of them, verifies, and keeps the drafts greedy would keep (or,
/// with synthetic rates, as many as a draw at those rates keeps), so a pass yields one token
/// and the kept drafts.
fn generate_speculatively<B: Backend>(
    s: &mut Session<B>,
    tokens: &[u32],
    first_is_prompt: bool,
    sp: &BenchSpeculation,
    rng: &mut Rng,
) -> Result<DraftCounts> {
    let mut counts = DraftCounts::default();
    let vocab = s.model().config.vocab_size;
    let mut generated = 0;
    if first_is_prompt {
        s.prefill(&tokens[..1])?;
        generated = 1;
    }
    while generated < tokens.len() {
        let token = tokens[generated];
        let room = tokens.len() - generated - 1;
        let max = sp.max_draft.min(room);
        let draft = match &sp.drafter {
            None => s.draft_mtp(token, max, 0.0)?,
            Some(d) => {
                let mut context = s.tokens().to_vec();
                context.push(token);
                d.draft(&context, max)?
            }
        };
        if draft.is_empty() {
            s.decode(token)?;
            generated += 1;
            continue;
        }
        let len = s.tokens().len();
        let mut rows = vec![token];
        rows.extend_from_slice(&draft);
        let logits = s.verify(&rows)?;
        let kept = if sp.rates.is_empty() {
            draft
                .iter()
                .zip(logits.chunks_exact(vocab))
                .take_while(|&(&d, row)| most_likely(row, 0.0) == Some(d))
                .count()
        } else {
            let mut prev = 1.0;
            let mut kept = 0;
            for &rate in &sp.rates[..draft.len()] {
                // Kept given the ones before were: rate / prev.
                if (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * prev >= rate {
                    break;
                }
                prev = rate;
                kept += 1;
            }
            kept
        };
        if let Some(d) = &sp.drafter {
            d.accepted(kept);
        }
        s.truncate(len + 1 + kept)?;
        counts.add(DraftCounts {
            drafted: draft.len(),
            accepted: kept,
            passes: 1,
        });
        generated += 1 + kept;
    }
    Ok(counts)
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
    speculation: Option<&'a BenchSpeculation>,
}

impl<B: Backend> Measure<'_, B> {
    /// One test: a warm-up run, then the timed repetitions.
    fn row(&self, test: &Test, progress: &ProgressBar, rng: &mut Rng) -> Result<Row> {
        progress.set_message(format!("{} t={}", test.name(), self.threads));
        let spec = self.speculation;
        run_test(self.model, test, self.cache, rng, false, spec)?; // warm-up
        progress.inc(1);
        let mut samples_ns = Vec::with_capacity(self.repetitions);
        let mut profile = None;
        let mut counts = DraftCounts::default();
        for _ in 0..self.repetitions {
            let (time, p, c) = run_test(self.model, test, self.cache, rng, self.profile, spec)?;
            samples_ns.push(time.as_nanos() as u64);
            profile = merge_profiles(profile, p);
            counts.add(c);
            progress.inc(1);
        }
        let speculation = match (spec, test.kind) {
            (Some(sp), TestKind::Generate) => Some((sp.name, counts)),
            _ => None,
        };
        let row = Row {
            threads: self.threads,
            placement: self.placement,
            test: *test,
            cache: self.cache,
            weight_gbps: None,
            samples_ns,
            profile,
            speculation,
        };
        let weight_gbps = (test.kind == TestKind::Generate)
            .then(|| self.bytes_per_token as f64 * mean_sd(&row.samples_ts()).0 / 1e9);
        Ok(Row { weight_gbps, ..row })
    }
}

/// The image tests on one loaded model: each image encoded once to warm up, then timed
/// `repetitions` times.
fn image_rows<B: Backend>(
    model: &Model<B>,
    args: &BenchArgs,
    model_path: &std::path::Path,
    threads: usize,
    placement: Option<(usize, usize)>,
    progress: &ProgressBar,
) -> Result<Vec<Row>> {
    if args.vision.images.is_empty() {
        return Ok(Vec::new());
    }
    let encoder = args.vision.encoder(model, model_path)?;
    let mut rows = Vec::new();
    for path in &args.vision.images {
        progress.set_message(format!("image {} t={threads}", path.display()));
        // Decoding the file is not timed: preprocessing and the tower are (as llama.cpp's
        // encode time, which starts from the decoded bitmap).
        let img = crate::vision::image::load(path)?;
        let first = encoder.encode_image(&img)?;
        let mut samples_ns = Vec::with_capacity(args.repetitions);
        if args.profile {
            model.backend.set_profiling(true);
        }
        for _ in 0..args.repetitions {
            let start = Instant::now();
            encoder.encode_image(&img)?;
            samples_ns.push(start.elapsed().as_nanos() as u64);
        }
        let profile = args.profile.then(|| model.backend.profile()).flatten();
        if args.profile {
            model.backend.set_profiling(false);
        }
        rows.push(Row {
            threads,
            placement,
            test: Test {
                kind: TestKind::Image(first.width, first.height),
                n: first.tokens(),
                depth: 0,
            },
            cache: KvCacheTypes::default(),
            samples_ns,
            weight_gbps: None,
            profile,
            speculation: None,
        });
    }
    Ok(rows)
}

/// `--kernels`: the model whole on the GPU (or the CPU), its mat-vecs timed.
fn run_kernels(args: &BenchArgs, file: &ModelFile) -> Result<ExitCode> {
    fn on<B: Backend>(model: Model<B>, file: &ModelFile, repetitions: usize) -> Result<ExitCode> {
        let rows = kernels::measure(&model, file, repetitions)?;
        kernels::markdown(
            &mut std::io::stdout().lock(),
            &model.backend.describe(),
            &rows,
        )?;
        Ok(ExitCode::SUCCESS)
    }
    if let Some(gpu) = super::choose_gpu(args.backend, args.gpu)? {
        return on(Model::load(file, gpu)?, file, args.repetitions);
    }
    let threads = args.threads.iter().max().copied();
    let threads =
        threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let cpu = CpuBackend::new(threads)?.with_repacking(!args.no_repack);
    on(Model::load(file, cpu)?, file, args.repetitions)
}

pub fn run(args: BenchArgs) -> Result<ExitCode> {
    if args.repetitions == 0 {
        bail!("-r must be at least 1");
    }
    let speculation = args.speculation.for_bench()?;
    args.speculation.validate()?;
    let mut file = args.model.open()?;
    if args.kernels {
        return run_kernels(&args, &file);
    }
    file.load_mtp = args.speculation.wants_mtp();
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
    if tests.is_empty() && args.vision.images.is_empty() {
        bail!("no tests: give -p or -n a positive count (or --image)");
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
    let image_results = std::cell::RefCell::new(Vec::new());
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
                speculation: speculation.as_ref(),
            };
            measure(&|test, rng| on.row(test, &progress, rng))?;
            let images = image_rows(&model, &args, &file.path, $threads, $placement, &progress)?;
            image_results.borrow_mut().extend(images);
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
    rows.extend(image_results.into_inner());

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
