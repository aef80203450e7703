//! Fuzzing the vision inputs (src/vision/): images (PNG, JPEG, WebP, BMP, GIF) and multimodal
//! projector files, mutated at random (bytes flipped or overwritten, the file cut short, chunks
//! repeated or dropped, header sizes and metadata integers set to huge values), must each give
//! `Ok` or an error: no panic, and no call that runs longer than `HANG`.
//!
//! A mutated image goes through `image::decode`, and when it decodes, `VisionEncoder::encode` on
//! the tiny projector (see `IMAGE_TOKENS`). A mutated projector goes through
//! `GgufFile::from_bytes`, `Mmproj::from_gguf` (and `describe`), `VisionEncoder::load` and
//! `encode` of one of the test images.
//!
//! Every call runs on a worker thread, inside `catch_unwind`: a panic is reported with its message,
//! its location and backtrace, and the input that caused it saved to `fuzz-*.bin` in the temporary
//! directory (path in the failure); the fuzzing goes on, and the test fails at the end listing each
//! distinct panic. A call over `HANG` is run again alone (the tests around it share the CPU): over
//! `HANG` again, or not back after 12 × `HANG`, it fails the test at once, its input saved the
//! same way. Each run prints its cases, their outcomes per call, the most frequent errors and the
//! slowest call (whose input it saves).
//!
//! Cases are deterministic: case `i` of a kind is drawn from `KILN_FUZZ_SEED` (default below) and
//! `i`, whatever the time budget. `KILN_FUZZ_SAVE=i` writes case `i` to a file and stops;
//! `KILN_FUZZ_REPLAY=file` runs a saved input through the same calls (`replay_saved_input`).
//!
//! The two `mutated_*` tests run about `CI_SECONDS` each; the ignored `long_*` ones run
//! `KILN_FUZZ_SECONDS` (default 300) each, by hand:
//! `KILN_FUZZ_SECONDS=120 cargo test --release --test model vision_fuzz::long -- --ignored --nocapture`.

use crate::common;

use std::collections::HashMap;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use image::codecs::bmp::BmpEncoder;
use image::codecs::gif::GifEncoder;
use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::PngEncoder;
use image::codecs::webp::WebPEncoder;
use image::{ExtendedColorType, ImageEncoder};
use kiln::backend::cpu::CpuBackend;
use kiln::gguf::GgufFile;
use kiln::vision::image::{self as vision_image, RgbImage};
use kiln::vision::{Mmproj, VisionEncoder};

/// Wall time per input kind in the default (CI) run.
const CI_SECONDS: u64 = 8;
/// The ignored variants' default wall time per kind (`KILN_FUZZ_SECONDS` overrides).
const LONG_SECONDS: u64 = 300;
/// A call slower than this is a hang. Debug builds (plain `cargo test`) run the decoders and the
/// tower an order of magnitude slower, so they get more.
const HANG: Duration = if cfg!(debug_assertions) {
    Duration::from_secs(60)
} else {
    Duration::from_secs(5)
};
const DEFAULT_SEED: u64 = 0x6b69_6c6e_5649_5331;

const MMPROJ: [&str; 4] = [
    "models/qwen35-mmproj-tiny.gguf",
    "models/qwen3vl-mmproj-tiny.gguf",
    "models/gemma3-mmproj-tiny.gguf",
    "models/gemma4-mmproj-tiny.gguf",
];
const IMAGES: [&str; 4] = [
    "vision-32x32.png",
    "vision-48x32.png",
    "vision-45x29.png",
    "vision-20x70.png",
];

#[test]
fn mutated_images_decode_or_fail_cleanly() {
    fuzz(Kind::Images, Duration::from_secs(CI_SECONDS));
}

#[test]
fn mutated_projectors_load_or_fail_cleanly() {
    fuzz(Kind::Mmproj, Duration::from_secs(CI_SECONDS));
}

#[test]
#[ignore = "long fuzzing run, by hand: KILN_FUZZ_SECONDS (default 300) per kind"]
fn long_mutated_images() {
    fuzz(Kind::Images, long_budget());
}

#[test]
#[ignore = "long fuzzing run, by hand: KILN_FUZZ_SECONDS (default 300) per kind"]
fn long_mutated_projectors() {
    fuzz(Kind::Mmproj, long_budget());
}

/// One saved input (`KILN_FUZZ_REPLAY=/tmp/fuzz-….bin`) through the same calls, on this thread,
/// each call's time and outcome printed, with no time limit: a panic fails this test with its
/// backtrace. The kind, and a projector's image, come from the file name as the fuzzer saves it.
#[test]
#[ignore = "replays KILN_FUZZ_REPLAY, a saved fuzz input"]
fn replay_saved_input() {
    let Some(path) = std::env::var_os("KILN_FUZZ_REPLAY") else {
        eprintln!("KILN_FUZZ_REPLAY is not set: nothing to replay");
        return;
    };
    let path = PathBuf::from(path);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let job = if name.starts_with("fuzz-mmproj") {
        let image = name
            .rsplit_once("-img")
            .and_then(|(_, rest)| rest.split('.').next()?.parse().ok())
            .unwrap_or(0);
        Job::Mmproj(bytes, image)
    } else {
        Job::Image(bytes)
    };
    let ctx = Ctx::new();
    let (tx, rx) = mpsc::channel();
    let stage = Mutex::new("");
    run_job(&ctx, &job, &tx, &stage);
    drop(tx);
    for msg in rx {
        if let Msg::End {
            stage,
            elapsed,
            result,
        } = msg
        {
            eprintln!(
                "{name}: {stage}: {:.3} s, {}",
                elapsed.as_secs_f64(),
                match result {
                    Ok(()) => "Ok".to_string(),
                    Err(e) => format!("Err: {e}"),
                }
            );
        }
    }
}

fn long_budget() -> Duration {
    let secs = std::env::var("KILN_FUZZ_SECONDS")
        .ok()
        .map(|s| {
            s.trim()
                .parse::<u64>()
                .unwrap_or_else(|e| panic!("KILN_FUZZ_SECONDS={s}: {e}"))
        })
        .unwrap_or(LONG_SECONDS);
    Duration::from_secs(secs)
}

fn base_seed() -> u64 {
    match std::env::var("KILN_FUZZ_SEED") {
        Ok(s) => {
            let s = s.trim();
            let parsed = match s.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => s.parse(),
            };
            parsed.unwrap_or_else(|e| panic!("KILN_FUZZ_SEED={s}: {e}"))
        }
        Err(_) => DEFAULT_SEED,
    }
}

// ---------------------------------------------------------------------------------------------
// The driver: cases drawn on this thread, run on a worker, each call timed.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Images,
    Mmproj,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Images => "images",
            Kind::Mmproj => "mmproj",
        }
    }

    fn salt(self) -> u64 {
        match self {
            Kind::Images => 0x1111_1111_1111_1111,
            Kind::Mmproj => 0x2222_2222_2222_2222,
        }
    }
}

/// One mutated input, and how it was made.
struct Case {
    index: u64,
    seed: u64,
    /// The seed input it was made from, and the mutations applied, in order.
    origin: String,
    mutations: Vec<String>,
    bytes: Vec<u8>,
    /// For a projector: which of `IMAGES` to encode.
    image: usize,
}

impl Case {
    fn describe(&self) -> String {
        format!(
            "case {} (seed {:#018x}) from {} with [{}], {} bytes",
            self.index,
            self.seed,
            self.origin,
            self.mutations.join(", "),
            self.bytes.len()
        )
    }

    fn save(&self, kind: Kind) -> PathBuf {
        let name = match kind {
            Kind::Images => format!("fuzz-images-{:016x}.bin", self.seed),
            Kind::Mmproj => format!("fuzz-mmproj-{:016x}-img{}.bin", self.seed, self.image),
        };
        let path = std::env::temp_dir().join(name);
        match std::fs::write(&path, &self.bytes) {
            Ok(()) => path,
            Err(e) => PathBuf::from(format!("<could not save {}: {e}>", path.display())),
        }
    }
}

enum Job {
    Image(Vec<u8>),
    Mmproj(Vec<u8>, usize),
}

enum Msg {
    /// A call began.
    Start(&'static str),
    /// A call returned: Ok, or the error's text.
    End {
        stage: &'static str,
        elapsed: Duration,
        result: Result<(), String>,
    },
    /// Something worth counting that is not a failure.
    Note(String),
    /// The case is over; `Some` when it panicked.
    Done(Option<PanicReport>),
}

#[derive(Clone)]
struct PanicReport {
    stage: &'static str,
    message: String,
    location: String,
    thread: String,
    backtrace: String,
}

#[derive(Default)]
struct Stats {
    cases: u64,
    /// Per stage: (Ok, Err).
    stages: Vec<(&'static str, u64, u64)>,
    /// Per case, the last call's outcome.
    cases_ok: u64,
    cases_err: u64,
    /// Error texts with digits blanked, and how often each came.
    errors: HashMap<String, u64>,
    slowest: Option<(Duration, &'static str, String)>,
    panics: Vec<(PanicReport, String, PathBuf, u64)>,
    /// Calls over `HANG` that took less run again alone.
    slowed: u64,
    /// Images whose smart resize exceeds the encoder's maximum tokens: how many, the first.
    over_max: (u64, String),
}

impl Stats {
    fn record(&mut self, stage: &'static str, elapsed: Duration, result: &Result<(), String>) {
        let i = match self.stages.iter().position(|s| s.0 == stage) {
            Some(i) => i,
            None => {
                self.stages.push((stage, 0, 0));
                self.stages.len() - 1
            }
        };
        match result {
            Ok(()) => self.stages[i].1 += 1,
            Err(e) => {
                self.stages[i].2 += 1;
                let key: String = e
                    .chars()
                    .map(|c| if c.is_ascii_digit() { '#' } else { c })
                    .take(110)
                    .collect();
                *self.errors.entry(format!("{stage}: {key}")).or_default() += 1;
            }
        }
        if self.slowest.as_ref().is_none_or(|s| elapsed > s.0) {
            self.slowest = Some((elapsed, stage, String::new()));
        }
    }

    fn print(&self, kind: Kind, seed: u64, wall: Duration) {
        let stages: Vec<String> = self
            .stages
            .iter()
            .map(|(s, ok, err)| format!("{s} Ok {ok} / Err {err}"))
            .collect();
        eprintln!(
            "vision_fuzz {}: {} cases in {:.1} s (KILN_FUZZ_SEED={seed:#x}): {} Ok, {} Err, {} panicked, \
             {} slowed by load; calls: {}",
            kind.name(),
            self.cases,
            wall.as_secs_f64(),
            self.cases_ok,
            self.cases_err,
            self.panics.iter().map(|p| p.3).sum::<u64>(),
            self.slowed,
            stages.join("; ")
        );
        if let Some((d, stage, case)) = &self.slowest {
            eprintln!(
                "vision_fuzz {}: slowest call {:.3} s ({stage} of {case})",
                kind.name(),
                d.as_secs_f64()
            );
        }
        if self.over_max.0 > 0 {
            eprintln!(
                "vision_fuzz {}: {} decoded images took more tokens than the maximum, first {}",
                kind.name(),
                self.over_max.0,
                self.over_max.1
            );
        }
        let mut errors: Vec<_> = self.errors.iter().collect();
        errors.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        eprintln!(
            "vision_fuzz {}: {} distinct errors, the most frequent:",
            kind.name(),
            errors.len()
        );
        for (text, n) in errors.iter().take(12) {
            eprintln!("  {n:>7}  {text}");
        }
    }
}

/// What one case did: its calls (stage, time, outcome), a panic, or the stage still running when
/// the driver stopped waiting.
struct CaseRun {
    calls: Vec<(&'static str, Duration, Result<(), String>)>,
    panic: Option<PanicReport>,
    stuck: Option<&'static str>,
    notes: Vec<String>,
}

impl CaseRun {
    fn slowest(&self) -> Option<(&'static str, Duration)> {
        self.calls.iter().map(|c| (c.0, c.1)).max_by_key(|c| c.1)
    }
}

/// Run `job` on the worker, waiting at most `patience` for each call.
fn run_case(jobs: &Sender<Job>, msgs: &Receiver<Msg>, job: Job, patience: Duration) -> CaseRun {
    jobs.send(job).expect("the fuzz worker is gone");
    let mut run = CaseRun {
        calls: Vec::new(),
        panic: None,
        stuck: None,
        notes: Vec::new(),
    };
    let mut running: &'static str = "(before the first call)";
    loop {
        match msgs.recv_timeout(patience) {
            Ok(Msg::Start(stage)) => running = stage,
            Ok(Msg::Note(note)) => run.notes.push(note),
            Ok(Msg::End {
                stage,
                elapsed,
                result,
            }) => run.calls.push((stage, elapsed, result)),
            Ok(Msg::Done(report)) => {
                run.panic = report;
                return run;
            }
            Err(RecvTimeoutError::Timeout) => {
                run.stuck = Some(running);
                return run;
            }
            Err(RecvTimeoutError::Disconnected) => panic!("the fuzz worker died during {running}"),
        }
    }
}

/// Case `index` of `kind` under the base seed `seed`.
fn make_case(kind: Kind, seed: u64, index: u64, seeds: &[Seed]) -> Case {
    let case_seed = splitmix(seed ^ kind.salt() ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    match kind {
        Kind::Images => mutate_image(index, case_seed, seeds),
        // The projectors take turns.
        Kind::Mmproj => mutate_mmproj(index, case_seed, &seeds[index as usize % seeds.len()]),
    }
}

fn fuzz(kind: Kind, budget: Duration) {
    install_panic_recorder();
    let seed = base_seed();
    let seeds = match kind {
        Kind::Images => image_seeds(),
        Kind::Mmproj => MMPROJ
            .iter()
            .map(|name| {
                let bytes = std::fs::read(common::fixture(name)).unwrap();
                let layout = GgufLayout::parse(&bytes)
                    .expect("the tiny projector fixtures should parse as GGUF");
                (name.to_string(), bytes, Some(layout))
            })
            .collect(),
    };
    if let Ok(index) = std::env::var("KILN_FUZZ_SAVE") {
        // Write case `index` of this seed to a file, for `replay_saved_input`, and stop.
        let index: u64 = index.trim().parse().expect("KILN_FUZZ_SAVE: a case number");
        let case = make_case(kind, seed, index, &seeds);
        eprintln!(
            "vision_fuzz {}: {} saved to {}",
            kind.name(),
            case.describe(),
            case.save(kind).display()
        );
        return;
    }
    let (job_tx, job_rx) = mpsc::channel::<Job>();
    let (msg_tx, msg_rx) = mpsc::channel::<Msg>();
    std::thread::Builder::new()
        .name(format!("vision-fuzz-{}", kind.name()))
        .spawn(move || worker(job_rx, msg_tx))
        .unwrap();
    // A call past HANG is waited for this long before it is called stuck; one that returns in
    // between is run again, alone, to tell a slow call from one slowed by the tests around it
    // (the vision ops share rayon's pool with them, and CI machines may have two cores).
    let patience = HANG * 12;

    // The seeds themselves must go through cleanly (and images must decode: else the fuzzing
    // would start from nothing).
    for (name, bytes, _) in &seeds {
        let job = match kind {
            Kind::Images => Job::Image(bytes.clone()),
            Kind::Mmproj => Job::Mmproj(bytes.clone(), 0),
        };
        let run = run_case(&job_tx, &msg_rx, job, patience);
        if let Some(p) = run.panic {
            panic!(
                "seed {name} panicked in {}: {} at {}",
                p.stage, p.message, p.location
            );
        }
        assert!(run.stuck.is_none(), "seed {name}: stuck in {:?}", run.stuck);
        for (stage, _, result) in run.calls {
            if let Err(e) = result {
                panic!("seed {name}: {stage} failed: {e}");
            }
        }
    }
    eprintln!(
        "vision_fuzz {}: {} seed inputs ({}); a call over {:?} is a hang",
        kind.name(),
        seeds.len(),
        seeds
            .iter()
            .map(|s| s.0.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        HANG
    );

    let mut stats = Stats::default();
    // The input of the slowest call, saved at the end for a look with `replay_saved_input`.
    let mut slowest_case: Option<(u64, usize, Vec<u8>)> = None;
    let start = Instant::now();
    let mut index = 0u64;
    while start.elapsed() < budget {
        let case = make_case(kind, seed, index, &seeds);
        index += 1;
        let job = || match kind {
            Kind::Images => Job::Image(case.bytes.clone()),
            Kind::Mmproj => Job::Mmproj(case.bytes.clone(), case.image),
        };
        stats.cases += 1;
        let run = run_case(&job_tx, &msg_rx, job(), patience);
        for note in &run.notes {
            if stats.over_max.0 == 0 {
                stats.over_max.1 = format!("{note}: {}", case.describe());
            }
            stats.over_max.0 += 1;
        }
        for (stage, elapsed, result) in &run.calls {
            stats.record(stage, *elapsed, result);
            if let Some(s) = &mut stats.slowest
                && s.0 == *elapsed
                && s.1 == *stage
                && s.2.is_empty()
            {
                s.2 = case.describe();
                slowest_case = Some((case.seed, case.image, case.bytes.clone()));
            }
        }
        if let Some(stage) = run.stuck {
            let path = case.save(kind);
            stats.print(kind, seed, start.elapsed());
            panic!(
                "vision_fuzz {}: HANG: {stage} has not returned after {:?}, on {}; input saved \
                 to {} (KILN_FUZZ_REPLAY={0} cargo test --release --test model \
                 vision_fuzz::replay -- --ignored --nocapture)",
                kind.name(),
                patience,
                case.describe(),
                path.display()
            );
        }
        if let Some(report) = run.panic {
            let path = case.save(kind);
            eprintln!(
                "vision_fuzz {}: PANIC in {} at {}: {}\n  {}\n  input saved to {}",
                kind.name(),
                report.stage,
                report.location,
                report.message,
                case.describe(),
                path.display()
            );
            match stats
                .panics
                .iter_mut()
                .find(|p| p.0.location == report.location)
            {
                Some(seen) => seen.3 += 1,
                None => stats.panics.push((report, case.describe(), path, 1)),
            }
            continue;
        }
        match run.calls.last() {
            Some((_, _, Ok(()))) => stats.cases_ok += 1,
            _ => stats.cases_err += 1,
        }
        if let Some((stage, took)) = run.slowest()
            && took > HANG
        {
            // Slow, or slowed: once more, alone.
            let again = run_case(&job_tx, &msg_rx, job(), patience);
            let retook = again.slowest().map_or(Duration::ZERO, |s| s.1);
            if again.stuck.is_some() || retook > HANG {
                let path = case.save(kind);
                stats.print(kind, seed, start.elapsed());
                panic!(
                    "vision_fuzz {}: HANG: {stage} took {:.1} s, and {:.1} s run again{}, over \
                     {:?}, on {}; input saved to {}",
                    kind.name(),
                    took.as_secs_f64(),
                    retook.as_secs_f64(),
                    if again.stuck.is_some() {
                        " (still running)"
                    } else {
                        ""
                    },
                    HANG,
                    case.describe(),
                    path.display()
                );
            }
            stats.slowed += 1;
            eprintln!(
                "vision_fuzz {}: {stage} took {:.1} s under load, {:.2} s run again, on {}",
                kind.name(),
                took.as_secs_f64(),
                retook.as_secs_f64(),
                case.describe()
            );
        }
    }
    stats.print(kind, seed, start.elapsed());
    if let Some((seed, image, bytes)) = slowest_case {
        let case = Case {
            index: 0,
            seed,
            origin: String::new(),
            mutations: Vec::new(),
            bytes,
            image,
        };
        eprintln!(
            "vision_fuzz {}: the slowest call's input is saved to {}",
            kind.name(),
            case.save(kind).display()
        );
    }
    if !stats.panics.is_empty() {
        let list: Vec<String> = stats
            .panics
            .iter()
            .map(|(p, case, path, n)| {
                format!(
                    "{n} panic(s) at {} in {} (thread {}): {}\n  first on {case}\n  input: {}\n  \
                     backtrace:\n{}",
                    p.location,
                    p.stage,
                    p.thread,
                    p.message,
                    path.display(),
                    p.backtrace
                )
            })
            .collect();
        panic!(
            "vision_fuzz {}: {} distinct panic location(s):\n{}",
            kind.name(),
            list.len(),
            list.join("\n")
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The worker: kiln's calls, each announced, timed and answered.

/// The most tokens a decoded image is encoded to. The tower's attention is quadratic in them: at
/// the projector's 4096 the tiny tower takes ~15 s on a 2-core machine (~1 s at 1024), which is
/// bounded work, not a hang, and the same code at any size; so an image that would take more is
/// encoded with a lower `--image-max-tokens` (the same resize and tower), 256, else 8: the
/// smart resize can exceed a low maximum for a long thin image (16384 × 1 takes 2048 tokens under
/// a maximum of 256, 362 under 8; never over the default 4096 within `MAX_SIDE`), and that is
/// counted and printed, not failed.
const IMAGE_TOKENS: usize = 1024;

struct Ctx {
    backend: CpuBackend,
    /// The tiny projector's tower (for decoded images), then the same with at most 256 and 8
    /// tokens per image, each with its call's name.
    encoders: Vec<(VisionEncoder<CpuBackend>, &'static str)>,
    /// The test images, decoded (for mutated projectors).
    images: Vec<RgbImage>,
}

impl Ctx {
    fn new() -> Ctx {
        let backend = CpuBackend::new(1).unwrap();
        let mut file = Mmproj::open(&common::fixture(MMPROJ[0])).unwrap();
        let mut encoders = vec![(VisionEncoder::load(&file, &backend).unwrap(), "encode")];
        for (max, name) in [
            (256, "encode (max 256 tokens)"),
            (8, "encode (max 8 tokens)"),
        ] {
            file.config.set_token_limits(0, max).unwrap();
            encoders.push((VisionEncoder::load(&file, &backend).unwrap(), name));
        }
        let images = IMAGES
            .iter()
            .map(|name| vision_image::load(&common::fixture(&format!("models/{name}"))).unwrap())
            .collect();
        Ctx {
            backend,
            encoders,
            images,
        }
    }
}

fn worker(jobs: Receiver<Job>, out: Sender<Msg>) {
    let mut ctx = Ctx::new();
    let me = std::thread::current().name().unwrap_or("").to_string();
    for job in jobs {
        ACTIVE.fetch_add(1, Ordering::SeqCst);
        let stage = Mutex::new("(before the first call)");
        let result = panic::catch_unwind(AssertUnwindSafe(|| run_job(&ctx, &job, &out, &stage)));
        ACTIVE.fetch_sub(1, Ordering::SeqCst);
        let report = match result {
            Ok(()) => None,
            Err(payload) => {
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(a panic payload that is not text)".into());
                let recorded = take_recorded(&me);
                let stage = *stage.lock().unwrap();
                let report = match recorded {
                    Some(r) => PanicReport { stage, ..r },
                    None => PanicReport {
                        stage,
                        message,
                        location: "(unknown: the panic hook saw nothing)".into(),
                        thread: me.clone(),
                        backtrace: String::new(),
                    },
                };
                // The backend may be mid-operation: start over from a fresh one.
                ctx = Ctx::new();
                Some(report)
            }
        };
        if out.send(Msg::Done(report)).is_err() {
            return;
        }
    }
}

/// Time `f` as one call named `stage`, telling the driver before and after.
fn call<T>(
    out: &Sender<Msg>,
    current: &Mutex<&'static str>,
    stage: &'static str,
    f: impl FnOnce() -> kiln::Result<T>,
) -> Option<T> {
    *current.lock().unwrap() = stage;
    let _ = out.send(Msg::Start(stage));
    let t = Instant::now();
    let r = f();
    let elapsed = t.elapsed();
    let (value, result) = match r {
        Ok(v) => (Some(v), Ok(())),
        Err(e) => (None, Err(e.to_string())),
    };
    let _ = out.send(Msg::End {
        stage,
        elapsed,
        result,
    });
    value
}

fn run_job(ctx: &Ctx, job: &Job, out: &Sender<Msg>, stage: &Mutex<&'static str>) {
    match job {
        Job::Image(bytes) => {
            let Some(img) = call(out, stage, "decode", || vision_image::decode(bytes)) else {
                return;
            };
            assert_eq!(
                img.pixels.len(),
                img.width * img.height * 3,
                "decode returned {}×{} with {} bytes",
                img.width,
                img.height,
                img.pixels.len()
            );
            let tokens = |e: &VisionEncoder<CpuBackend>| {
                let (w, h) = e.input_size(img.width, img.height);
                let side = e.config().token_side();
                (w / side) * (h / side)
            };
            let (encoder, what) = ctx
                .encoders
                .iter()
                .find(|(e, _)| tokens(e) <= IMAGE_TOKENS)
                .unwrap_or(ctx.encoders.last().unwrap());
            let (n, max) = (tokens(encoder), encoder.config().max_tokens);
            if n > max {
                let _ = out.send(Msg::Note(format!(
                    "{}×{} takes {n} tokens under a maximum of {max}",
                    img.width, img.height
                )));
            }
            call(out, stage, what, || {
                let encoded = encoder.encode(&ctx.backend, &img)?;
                check_encoded(&encoded, encoder.config().embedding_width());
                assert_eq!(encoded.tokens(), n, "tokens against input_size's");
                Ok(())
            });
        }
        Job::Mmproj(bytes, image) => {
            let label = Path::new("fuzz-mmproj.gguf");
            let Some(gguf) = call(out, stage, "GgufFile::from_bytes", || {
                GgufFile::from_bytes(label, bytes)
            }) else {
                return;
            };
            let Some(file) = call(out, stage, "Mmproj::from_gguf", || Mmproj::from_gguf(gguf))
            else {
                return;
            };
            call(out, stage, "Mmproj::describe", || {
                let lines = file.describe();
                assert!(!lines.is_empty());
                Ok(())
            });
            let Some(encoder) = call(out, stage, "VisionEncoder::load", || {
                VisionEncoder::load(&file, &ctx.backend)
            }) else {
                return;
            };
            let img = &ctx.images[*image];
            call(out, stage, "encode", || {
                let encoded = encoder.encode(&ctx.backend, img)?;
                check_encoded(&encoded, file.config.embedding_width());
                Ok(())
            });
        }
    }
}

/// An `Ok` encoding must be as large as it says.
fn check_encoded(e: &kiln::vision::Encoded, width: usize) {
    assert_eq!(
        e.embeddings.len(),
        e.tokens() * width,
        "{}×{} tokens of width {width}, {} values",
        e.cols,
        e.rows,
        e.embeddings.len()
    );
}

// ---------------------------------------------------------------------------------------------
// Panics: the hook records where each happened (message, location, backtrace) while a fuzz case
// runs, then hands the panic to the hook before it, so that other tests' panics print as ever.

static ACTIVE: AtomicUsize = AtomicUsize::new(0);
static RECORDED: Mutex<Vec<PanicReport>> = Mutex::new(Vec::new());
static HOOK: Once = Once::new();

fn install_panic_recorder() {
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if ACTIVE.load(Ordering::SeqCst) > 0 {
                let message = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(a panic payload that is not text)".into());
                let location = info
                    .location()
                    .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()))
                    .unwrap_or_else(|| "(no location)".into());
                let thread = std::thread::current()
                    .name()
                    .unwrap_or("(unnamed)")
                    .to_string();
                let backtrace = std::backtrace::Backtrace::force_capture().to_string();
                if let Ok(mut r) = RECORDED.lock() {
                    r.push(PanicReport {
                        stage: "",
                        message,
                        location,
                        thread,
                        backtrace,
                    });
                }
            }
            previous(info);
        }));
    });
}

/// The panic recorded for the worker `me`: its own thread's, else the latest of another thread
/// that is not another fuzz worker (a rayon or pool thread whose panic was carried over).
fn take_recorded(me: &str) -> Option<PanicReport> {
    let mut all = RECORDED.lock().ok()?;
    let pick = all.iter().rposition(|r| r.thread == me).or_else(|| {
        all.iter()
            .rposition(|r| !r.thread.starts_with("vision-fuzz-"))
    })?;
    let found = all.remove(pick);
    all.retain(|r| r.thread != me);
    Some(found)
}

// ---------------------------------------------------------------------------------------------
// Randomness: xorshift64*, seeded per case through splitmix64.

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(splitmix(seed) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in 0..n (0 when n is 0).
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi.saturating_sub(lo))
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }

    fn byte(&mut self) -> u8 {
        self.next() as u8
    }
}

const INTERESTING_U32: [u32; 34] = [
    0,
    1,
    2,
    3,
    4,
    7,
    8,
    15,
    16,
    31,
    32,
    33,
    63,
    64,
    127,
    128,
    255,
    256,
    1023,
    1024,
    4096,
    16383,
    16384,
    16385,
    32767,
    32768,
    65535,
    65536,
    1 << 20,
    1 << 24,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_fffe,
    0xffff_ffff,
];

const INTERESTING_U64: [u64; 10] = [
    1 << 31,
    1 << 32,
    (1 << 32) + 1,
    1 << 40,
    1 << 48,
    1 << 62,
    i64::MAX as u64,
    1 << 63,
    u64::MAX - 1,
    u64::MAX,
];

fn interesting_u32(rng: &mut Rng, old: u32) -> u32 {
    match rng.below(6) {
        0 => rng.next() as u32,
        1 => old.wrapping_add(1 + rng.below(4) as u32),
        2 => old.wrapping_sub(1 + rng.below(4) as u32),
        3 => old.wrapping_mul(2 + rng.below(15) as u32),
        _ => *rng.pick(&INTERESTING_U32),
    }
}

fn interesting_u64(rng: &mut Rng, old: u64) -> u64 {
    match rng.below(7) {
        0 => rng.next(),
        1 => old.wrapping_add(1 + rng.below(4) as u64),
        2 => old.wrapping_sub(1 + rng.below(4) as u64),
        3 => old.wrapping_mul(2 + rng.below(15) as u64),
        4 => *rng.pick(&INTERESTING_U64),
        _ => *rng.pick(&INTERESTING_U32) as u64,
    }
}

fn interesting_f32(rng: &mut Rng) -> f32 {
    *rng.pick(&[
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        -1.0,
        1.0,
        1e-45,
        1e-38,
        1e30,
        -1e30,
        f32::MAX,
        f32::MIN,
        65504.0,
        65520.0,
    ])
}

// ---------------------------------------------------------------------------------------------
// Mutations common to both kinds, within `lo..hi` of `data` (clamped to its length).

fn mutate_bytes(rng: &mut Rng, data: &mut Vec<u8>, lo: usize, hi: usize) -> String {
    let hi = hi.min(data.len());
    let lo = lo.min(hi);
    if hi == lo {
        data.push(rng.byte());
        return "append 1".into();
    }
    match rng.below(10) {
        0 | 1 => {
            let n = 1 + rng.below(8);
            for _ in 0..n {
                let at = rng.range(lo, hi);
                data[at] ^= 1 << rng.below(8);
            }
            format!("flip {n} bits in {lo}..{hi}")
        }
        2 | 3 => {
            let n = 1 + rng.below(8);
            for _ in 0..n {
                let at = rng.range(lo, hi);
                let r = rng.byte();
                data[at] = *rng.pick(&[0x00, 0xff, 0x7f, 0x80, r]);
            }
            format!("overwrite {n} bytes in {lo}..{hi}")
        }
        4 => {
            let at = rng.range(lo, hi);
            data.truncate(at);
            format!("truncate at {at}")
        }
        5 => {
            // Repeat a chunk: copied from one place, inserted at another.
            let from = rng.range(lo, hi);
            let len = 1 + rng.below((hi - from).min(256));
            let chunk = data[from..from + len].to_vec();
            let at = rng.range(lo, hi + 1);
            data.splice(at..at, chunk);
            format!("insert a copy of {from}..{} at {at}", from + len)
        }
        6 => {
            let from = rng.range(lo, hi);
            let len = 1 + rng.below((hi - from).min(256));
            data.drain(from..from + len);
            format!("delete {from}..{}", from + len)
        }
        7 => {
            let at = rng.range(lo, hi + 1);
            let len = 1 + rng.below(64);
            let fill: Vec<u8> = match rng.below(3) {
                0 => vec![0; len],
                1 => vec![0xff; len],
                _ => (0..len).map(|_| rng.byte()).collect(),
            };
            data.splice(at..at, fill);
            format!("insert {len} bytes at {at}")
        }
        _ => {
            // An integer of 2, 4 or 8 bytes, either byte order, set to an interesting value.
            let width = *rng.pick(&[2usize, 4, 8]);
            if hi - lo < width {
                data[lo] ^= 0xff;
                return format!("invert byte {lo}");
            }
            let at = rng.range(lo, hi - width + 1);
            let big = rng.chance(50);
            write_int(rng, data, at, width, big);
            format!(
                "set a {}-byte {} integer at {at}",
                width,
                if big { "BE" } else { "LE" }
            )
        }
    }
}

/// Set the `width`-byte integer at `at` to an interesting value derived from the old one.
fn write_int(rng: &mut Rng, data: &mut [u8], at: usize, width: usize, big: bool) {
    let bytes = &mut data[at..at + width];
    let mut old = [0u8; 8];
    if big {
        old[8 - width..].copy_from_slice(bytes);
        let v = u64::from_be_bytes(old);
        let new = if width == 8 {
            interesting_u64(rng, v)
        } else {
            interesting_u32(rng, v as u32) as u64
        };
        bytes.copy_from_slice(&new.to_be_bytes()[8 - width..]);
    } else {
        old[..width].copy_from_slice(bytes);
        let v = u64::from_le_bytes(old);
        let new = if width == 8 {
            interesting_u64(rng, v)
        } else {
            interesting_u32(rng, v as u32) as u64
        };
        bytes.copy_from_slice(&new.to_le_bytes()[..width]);
    }
}

// ---------------------------------------------------------------------------------------------
// Images: the seeds, and format-aware mutations of their headers.

type Seed = (String, Vec<u8>, Option<GgufLayout>);

/// An EXIF block (TIFF, little-endian) holding one entry: the orientation.
fn exif_orientation(orientation: u16) -> Vec<u8> {
    let mut e = b"II*\0".to_vec();
    e.extend(8u32.to_le_bytes());
    e.extend(1u16.to_le_bytes());
    e.extend(0x0112u16.to_le_bytes());
    e.extend(3u16.to_le_bytes());
    e.extend(1u32.to_le_bytes());
    e.extend(orientation.to_le_bytes());
    e.extend([0, 0]);
    e.extend(0u32.to_le_bytes());
    e
}

/// The four fixture PNGs, and a 16×12 image written in every format kiln reads, in several color
/// types, some with an EXIF orientation. Lossy WebP has no encoder in the `image` crate (only
/// lossless is compiled in), so WebP seeds are lossless; the lossy (VP8) decoder is reached only
/// through mutations that rename a chunk.
fn image_seeds() -> Vec<Seed> {
    let (w, h) = (16u32, 12u32);
    let mut rgb = Vec::new();
    let mut rgba = Vec::new();
    let mut gray16 = Vec::new();
    for y in 0..h {
        for x in 0..w {
            let px = [(x * 16) as u8, (y * 20) as u8, ((x + y) * 8) as u8 ^ 0x55];
            rgb.extend(px);
            rgba.extend(px);
            rgba.push((x * y * 3) as u8);
            gray16.extend(((x * 4000 + y * 1000) as u16).to_ne_bytes());
        }
    }
    let gray: Vec<u8> = rgb.chunks(3).map(|p| p[1]).collect();

    let mut seeds: Vec<Seed> = IMAGES
        .iter()
        .map(|name| {
            let bytes = std::fs::read(common::fixture(&format!("models/{name}"))).unwrap();
            (name.to_string(), bytes, None)
        })
        .collect();
    let mut add = |name: &str, bytes: Vec<u8>| seeds.push((name.to_string(), bytes, None));

    let png = |data: &[u8], color: ExtendedColorType, exif: Option<u16>| {
        let mut buf = Vec::new();
        let mut enc = PngEncoder::new(&mut buf);
        if let Some(o) = exif {
            enc.set_exif_metadata(exif_orientation(o)).unwrap();
        }
        enc.write_image(data, w, h, color).unwrap();
        buf
    };
    add("png rgb8", png(&rgb, ExtendedColorType::Rgb8, None));
    add("png rgba8", png(&rgba, ExtendedColorType::Rgba8, None));
    add("png l16", png(&gray16, ExtendedColorType::L16, None));
    add("png l8 exif 6", png(&gray, ExtendedColorType::L8, Some(6)));

    let jpeg = |data: &[u8], color: ExtendedColorType, exif: Option<u16>| {
        let mut buf = Vec::new();
        let mut enc = JpegEncoder::new_with_quality(&mut buf, 85);
        if let Some(o) = exif {
            enc.set_exif_metadata(exif_orientation(o)).unwrap();
        }
        enc.write_image(data, w, h, color).unwrap();
        buf
    };
    add("jpeg rgb8", jpeg(&rgb, ExtendedColorType::Rgb8, None));
    add("jpeg l8", jpeg(&gray, ExtendedColorType::L8, None));
    add(
        "jpeg rgb8 exif 8",
        jpeg(&rgb, ExtendedColorType::Rgb8, Some(8)),
    );

    let bmp = |data: &[u8], color: ExtendedColorType| {
        let mut buf = Vec::new();
        BmpEncoder::new(&mut buf)
            .write_image(data, w, h, color)
            .unwrap();
        buf
    };
    add("bmp rgb8", bmp(&rgb, ExtendedColorType::Rgb8));
    add("bmp rgba8", bmp(&rgba, ExtendedColorType::Rgba8));
    add("bmp l8", bmp(&gray, ExtendedColorType::L8));

    let mut gif = Vec::new();
    GifEncoder::new(&mut gif)
        .write_image(&rgb, w, h, ExtendedColorType::Rgb8)
        .unwrap();
    add("gif", gif);
    let mut gif2 = Vec::new();
    {
        let frame = |shift: u8| {
            let px: Vec<u8> = rgba.iter().map(|v| v.wrapping_add(shift)).collect();
            image::Frame::new(image::RgbaImage::from_raw(w, h, px).unwrap())
        };
        let mut enc = GifEncoder::new(&mut gif2);
        enc.encode_frames([frame(0), frame(97)]).unwrap();
    }
    add("gif 2 frames", gif2);

    let webp = |data: &[u8], color: ExtendedColorType, exif: Option<u16>| {
        let mut buf = Vec::new();
        let mut enc = WebPEncoder::new_lossless(&mut buf);
        if let Some(o) = exif {
            enc.set_exif_metadata(exif_orientation(o)).unwrap();
        }
        enc.write_image(data, w, h, color).unwrap();
        buf
    };
    add("webp rgb8", webp(&rgb, ExtendedColorType::Rgb8, None));
    add("webp rgba8", webp(&rgba, ExtendedColorType::Rgba8, None));
    add(
        "webp rgb8 exif 5",
        webp(&rgb, ExtendedColorType::Rgb8, Some(5)),
    );
    seeds
}

fn mutate_image(index: u64, seed: u64, seeds: &[Seed]) -> Case {
    let mut rng = Rng::new(seed);
    let origin = rng.below(seeds.len());
    let mut bytes = seeds[origin].1.clone();
    let mut mutations = Vec::new();
    if rng.chance(5) {
        // Splice: this seed's head on another's tail.
        let other = rng.below(seeds.len());
        let cut = rng.below(bytes.len());
        let tail = &seeds[other].1;
        let from = rng.below(tail.len());
        bytes.truncate(cut);
        bytes.extend_from_slice(&tail[from..]);
        mutations.push(format!("splice {cut}.. with {}[{from}..]", seeds[other].0));
    }
    let n = 1 + rng.below(3);
    for _ in 0..n {
        let m = match rng.below(10) {
            0..=2 => patch_image_header(&mut rng, &mut bytes),
            3 if bytes.starts_with(b"\x89PNG") => png_chunk_mutation(&mut rng, &mut bytes),
            _ => {
                // Headers are where the decoders branch: bias there half of the time.
                let hi = if rng.chance(50) { 64 } else { bytes.len() };
                mutate_bytes(&mut rng, &mut bytes, 0, hi)
            }
        };
        mutations.push(m);
    }
    Case {
        index,
        seed,
        origin: seeds[origin].0.clone(),
        mutations,
        bytes,
        image: 0,
    }
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in bytes {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// PNG chunks: (start of the length field, data length), those wholly inside the file.
fn png_chunks(data: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut p = 8;
    while p + 12 <= data.len() {
        let len = u32::from_be_bytes(data[p..p + 4].try_into().unwrap()) as usize;
        if p + 12 + len > data.len() {
            break;
        }
        out.push((p, len));
        p += 12 + len;
    }
    out
}

fn fix_png_crc(data: &mut [u8], chunk: usize, len: usize) {
    let crc = crc32(&data[chunk + 4..chunk + 8 + len]);
    data[chunk + 8 + len..chunk + 12 + len].copy_from_slice(&crc.to_be_bytes());
}

/// Mutate inside one PNG chunk (type or data) and fix its CRC, so that the decoder looks further
/// than the checksum.
fn png_chunk_mutation(rng: &mut Rng, data: &mut Vec<u8>) -> String {
    let chunks = png_chunks(data);
    if chunks.is_empty() {
        return mutate_bytes(rng, data, 0, 64);
    }
    let &(p, len) = rng.pick(&chunks);
    let name = String::from_utf8_lossy(&data[p + 4..p + 8]).into_owned();
    let (lo, hi) = if len == 0 || rng.chance(10) {
        (p + 4, p + 8)
    } else {
        (p + 8, p + 8 + len)
    };
    let n = 1 + rng.below(4);
    for _ in 0..n {
        let at = rng.range(lo, hi);
        if rng.chance(50) {
            data[at] ^= 1 << rng.below(8);
        } else {
            data[at] = rng.byte();
        }
    }
    fix_png_crc(data, p, len);
    format!("change {n} bytes of the {name} chunk at {p}, CRC fixed")
}

/// Set a width, height or other header field of the image's format to an interesting value
/// (PNG: its CRC fixed).
fn patch_image_header(rng: &mut Rng, data: &mut Vec<u8>) -> String {
    let side = |rng: &mut Rng| -> u32 {
        let (r16, r32) = (rng.next() as u32 & 0xffff, rng.next() as u32);
        *rng.pick(&[
            0,
            1,
            2,
            16383,
            16384,
            16385,
            32768,
            65535,
            100_000,
            0x7fff_ffff,
            0xffff_ffff,
            r16,
            r32,
        ])
    };
    if data.starts_with(b"\x89PNG\r\n\x1a\n") && data.len() >= 33 {
        let (field, at, width) = *rng.pick(&[
            ("width", 16usize, 4usize),
            ("height", 20, 4),
            ("bit depth", 24, 1),
            ("color type", 25, 1),
            ("compression", 26, 1),
            ("filter", 27, 1),
            ("interlace", 28, 1),
        ]);
        let v = if width == 4 {
            let v = side(rng);
            data[at..at + 4].copy_from_slice(&v.to_be_bytes());
            v
        } else {
            let r = rng.byte();
            let v = *rng.pick(&[0u8, 1, 2, 3, 4, 6, 8, 16, 255, r]);
            data[at] = v;
            v as u32
        };
        let len = u32::from_be_bytes(data[8..12].try_into().unwrap()) as usize;
        if len == 13 {
            fix_png_crc(data, 8, 13);
        }
        return format!("PNG {field} = {v}, CRC fixed");
    }
    if data.starts_with(b"BM") && data.len() >= 54 {
        let (field, at, width) = *rng.pick(&[
            ("file size", 2usize, 4usize),
            ("pixel offset", 10, 4),
            ("header size", 14, 4),
            ("width", 18, 4),
            ("height", 22, 4),
            ("planes", 26, 2),
            ("bits per pixel", 28, 2),
            ("compression", 30, 4),
            ("image size", 34, 4),
            ("colors used", 46, 4),
        ]);
        let v: i64 = match (field, width) {
            ("width" | "height", _) => match rng.below(3) {
                0 => -(side(rng) as i32 as i64).abs(),
                _ => side(rng) as i32 as i64,
            },
            (_, 2) => *rng.pick(&[0i64, 1, 2, 4, 8, 15, 16, 24, 32, 64, 0xffff]),
            _ => *rng.pick(&[0i64, 1, 2, 3, 4, 6, 40, 108, 124, 0x7fff_ffff, 0xffff_ffff]),
        };
        data[at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
        return format!("BMP {field} = {v}");
    }
    if (data.starts_with(b"GIF87a") || data.starts_with(b"GIF89a")) && data.len() >= 13 {
        let mut fields = vec![("screen width", 6usize), ("screen height", 8)];
        if let Some(d) = gif_descriptor(data) {
            fields.extend([
                ("frame left", d + 1),
                ("frame top", d + 3),
                ("frame width", d + 5),
                ("frame height", d + 7),
            ]);
        }
        let &(field, at) = rng.pick(&fields);
        let v = side(rng) as u16;
        data[at..at + 2].copy_from_slice(&v.to_le_bytes());
        return format!("GIF {field} = {v}");
    }
    if data.starts_with(&[0xff, 0xd8]) {
        // A start-of-frame segment: FF Cn, length, precision, height, width, components.
        if let Some(p) = (2..data.len().saturating_sub(9)).find(|&i| {
            data[i] == 0xff
                && matches!(data[i + 1], 0xc0..=0xcf if ![0xc4, 0xc8, 0xcc].contains(&data[i + 1]))
        }) {
            let (field, at, width) = *rng.pick(&[
                ("height", p + 5, 2usize),
                ("width", p + 7, 2),
                ("precision", p + 4, 1),
                ("components", p + 9, 1),
                ("segment length", p + 2, 2),
                ("sampling", p + 11, 1),
            ]);
            if at + width > data.len() {
                return mutate_bytes(rng, data, 0, 64);
            }
            let v = if width == 2 {
                let v = side(rng) as u16;
                data[at..at + 2].copy_from_slice(&v.to_be_bytes());
                v as u32
            } else {
                let v = *rng.pick(&[0u8, 1, 2, 3, 4, 8, 12, 16, 0x11, 0x22, 0x44, 255]);
                data[at] = v;
                v as u32
            };
            return format!("JPEG SOF {field} = {v}");
        }
    }
    if data.starts_with(b"RIFF") && data.len() >= 12 {
        let find = |tag: &[u8]| data.windows(4).position(|w| w == tag);
        if let Some(p) = find(b"VP8X")
            && p + 18 <= data.len()
            && rng.chance(50)
        {
            let field = *rng.pick(&["canvas width", "canvas height", "flags"]);
            let at = match field {
                "canvas width" => p + 12,
                "canvas height" => p + 15,
                _ => p + 8,
            };
            if field == "flags" {
                data[at] = rng.byte();
                return format!("WebP VP8X flags = {}", data[at]);
            }
            let r = rng.next() as u32 & 0xff_ffff;
            let v = *rng.pick(&[0u32, 16382, 16383, 16384, 0xff_ffff, r]);
            data[at..at + 3].copy_from_slice(&v.to_le_bytes()[..3]);
            return format!("WebP VP8X {field} - 1 = {v}");
        }
        if let Some(p) = find(b"VP8L")
            && p + 13 <= data.len()
        {
            // After the signature byte: 14 bits of width − 1, 14 of height − 1, alpha, version.
            let at = p + 9;
            let mut bits = u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
            let which = rng.below(3);
            let r = rng.next() as u32 & 0x3fff;
            let v = *rng.pick(&[0u32, 1, 8191, 16382, 16383, r]);
            match which {
                0 => bits = (bits & !0x3fff) | v,
                1 => bits = (bits & !(0x3fff << 14)) | (v << 14),
                _ => bits ^= 1 << (28 + rng.below(4)),
            }
            data[at..at + 4].copy_from_slice(&bits.to_le_bytes());
            return format!(
                "WebP VP8L {} = {v}",
                ["width - 1", "height - 1", "alpha/version bits"][which]
            );
        }
        if rng.chance(30) {
            let v = interesting_u32(rng, 0);
            data[4..8].copy_from_slice(&v.to_le_bytes());
            return format!("RIFF size = {v}");
        }
    }
    mutate_bytes(rng, data, 0, 64)
}

/// The first GIF image descriptor (its 0x2C byte), past the global color table and extensions.
fn gif_descriptor(data: &[u8]) -> Option<usize> {
    let flags = *data.get(10)?;
    let mut p = 13;
    if flags & 0x80 != 0 {
        p += 3 << ((flags & 7) + 1);
    }
    loop {
        match *data.get(p)? {
            0x2c => return (p + 9 <= data.len()).then_some(p),
            0x21 => {
                p += 2;
                loop {
                    let n = *data.get(p)? as usize;
                    p += 1 + n;
                    if n == 0 {
                        break;
                    }
                }
            }
            _ => return None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Projectors: a map of the GGUF's fields, so that mutations can aim at them.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FieldKind {
    /// A length or count (strings, arrays, the header's counts, a tensor's dimension count).
    Count,
    /// A type tag (a value's, an array element's) or a tensor's GGML type.
    TypeTag,
    TensorType,
    /// A metadata integer value.
    Value,
    /// A metadata float value.
    Float,
    Dim,
    Offset,
}

#[derive(Clone)]
struct GgufLayout {
    /// (offset, width in bytes, kind, what) of every integer field.
    fields: Vec<(usize, usize, FieldKind, String)>,
    /// The bytes of each metadata key and tensor name.
    names: Vec<(usize, usize)>,
    /// Offsets of the tensor offset fields, in order (for swaps).
    tensor_offsets: Vec<usize>,
    data_start: usize,
}

impl GgufLayout {
    fn parse(b: &[u8]) -> Option<GgufLayout> {
        let mut l = GgufLayout {
            fields: Vec::new(),
            names: Vec::new(),
            tensor_offsets: Vec::new(),
            data_start: 0,
        };
        let u32_at = |p: usize| Some(u32::from_le_bytes(b.get(p..p + 4)?.try_into().ok()?));
        let u64_at = |p: usize| Some(u64::from_le_bytes(b.get(p..p + 8)?.try_into().ok()?));
        let n_tensors = u64_at(8)? as usize;
        let n_kv = u64_at(16)? as usize;
        l.fields.push((4, 4, FieldKind::TypeTag, "version".into()));
        l.fields
            .push((8, 8, FieldKind::Count, "tensor count".into()));
        l.fields
            .push((16, 8, FieldKind::Count, "metadata count".into()));
        let mut p = 24;
        let mut alignment = 32;
        for _ in 0..n_kv {
            let len = u64_at(p)? as usize;
            let key = String::from_utf8_lossy(b.get(p + 8..p + 8 + len)?).into_owned();
            l.fields
                .push((p, 8, FieldKind::Count, format!("{key} key length")));
            l.names.push((p + 8, len));
            p += 8 + len;
            let ty = u32_at(p)?;
            l.fields
                .push((p, 4, FieldKind::TypeTag, format!("{key} type")));
            p += 4;
            if key == "general.alignment" {
                alignment = u32_at(p)? as usize;
            }
            p = Self::value(b, p, ty, &key, &mut l.fields, 0)?;
        }
        for _ in 0..n_tensors {
            let len = u64_at(p)? as usize;
            let name = String::from_utf8_lossy(b.get(p + 8..p + 8 + len)?).into_owned();
            l.fields
                .push((p, 8, FieldKind::Count, format!("{name} name length")));
            l.names.push((p + 8, len));
            p += 8 + len;
            let n_dims = u32_at(p)? as usize;
            l.fields
                .push((p, 4, FieldKind::Count, format!("{name} dimension count")));
            p += 4;
            for d in 0..n_dims {
                l.fields
                    .push((p, 8, FieldKind::Dim, format!("{name} dimension {d}")));
                p += 8;
            }
            l.fields
                .push((p, 4, FieldKind::TensorType, format!("{name} type")));
            p += 4;
            l.fields
                .push((p, 8, FieldKind::Offset, format!("{name} offset")));
            l.tensor_offsets.push(p);
            p += 8;
        }
        l.data_start = p.div_ceil(alignment.max(1)) * alignment.max(1);
        (l.data_start <= b.len()).then_some(l)
    }

    /// Past the value of type `ty` at `p`, recording its fields.
    fn value(
        b: &[u8],
        p: usize,
        ty: u32,
        key: &str,
        fields: &mut Vec<(usize, usize, FieldKind, String)>,
        depth: usize,
    ) -> Option<usize> {
        let scalar = |width: usize, kind: FieldKind, fields: &mut Vec<_>| {
            fields.push((p, width, kind, format!("{key} value")));
            Some(p + width)
        };
        match ty {
            0 | 1 | 7 => scalar(1, FieldKind::Value, fields),
            2 | 3 => scalar(2, FieldKind::Value, fields),
            4 | 5 => scalar(4, FieldKind::Value, fields),
            6 => scalar(4, FieldKind::Float, fields),
            10 | 11 => scalar(8, FieldKind::Value, fields),
            12 => scalar(8, FieldKind::Float, fields),
            8 => {
                let len = u64::from_le_bytes(b.get(p..p + 8)?.try_into().ok()?) as usize;
                fields.push((p, 8, FieldKind::Count, format!("{key} string length")));
                (p + 8 + len <= b.len()).then_some(p + 8 + len)
            }
            9 if depth == 0 => {
                let inner = u32::from_le_bytes(b.get(p..p + 4)?.try_into().ok()?);
                fields.push((p, 4, FieldKind::TypeTag, format!("{key} element type")));
                let n = u64::from_le_bytes(b.get(p + 4..p + 12)?.try_into().ok()?) as usize;
                fields.push((p + 4, 8, FieldKind::Count, format!("{key} element count")));
                let mut q = p + 12;
                for _ in 0..n {
                    q = Self::value(b, q, inner, key, fields, depth + 1)?;
                }
                Some(q)
            }
            _ => None,
        }
    }
}

fn mutate_mmproj(index: u64, seed: u64, origin: &Seed) -> Case {
    let mut rng = Rng::new(seed);
    let layout = origin.2.as_ref().unwrap();
    let mut bytes = origin.1.clone();
    let mut mutations = Vec::new();
    let header = layout.data_start;
    // First the mutations that rely on the layout (they keep offsets in place), then, some of
    // the time, ones that may move everything after them.
    // Mostly one: each more is likelier to stop the file at the parser.
    let structured = *rng.pick(&[1, 1, 1, 1, 1, 1, 2, 2, 2, 3]);
    for _ in 0..structured {
        let m = match rng.below(12) {
            0..=3 => {
                // A field of the header, metadata or tensor descriptors.
                let (at, width, kind, what) = rng.pick(&layout.fields).clone();
                let field = &mut bytes[at..at + width];
                let value = match (kind, width) {
                    (FieldKind::Float, 4) => {
                        let v = interesting_f32(&mut rng);
                        field.copy_from_slice(&v.to_le_bytes());
                        format!("{v}")
                    }
                    (FieldKind::Float, _) => {
                        let v = interesting_f32(&mut rng) as f64;
                        field.copy_from_slice(&v.to_le_bytes());
                        format!("{v}")
                    }
                    (FieldKind::TypeTag | FieldKind::TensorType, _) => {
                        let v = match rng.below(4) {
                            0 => interesting_u32(&mut rng, 0),
                            _ => rng.below(42) as u32,
                        };
                        field.copy_from_slice(&v.to_le_bytes()[..width]);
                        format!("{v}")
                    }
                    (FieldKind::Value, 4) if rng.chance(60) => {
                        // Plausible sizes first: they get past the bounds into the shape checks.
                        let v = *rng.pick(&[
                            0u32, 1, 2, 3, 4, 5, 6, 8, 12, 16, 31, 32, 33, 48, 64, 96, 128, 256,
                            1024, 4096, 16384, 65536, 65537,
                        ]);
                        field.copy_from_slice(&v.to_le_bytes());
                        format!("{v}")
                    }
                    (FieldKind::Value, 1) => {
                        let r = rng.byte();
                        let v = *rng.pick(&[0u8, 1, 2, 255, r]);
                        field[0] = v;
                        format!("{v}")
                    }
                    _ => {
                        write_int(&mut rng, &mut bytes, at, width, false);
                        let mut v = [0u8; 8];
                        v[..width].copy_from_slice(&bytes[at..at + width]);
                        format!("{}", u64::from_le_bytes(v))
                    }
                };
                format!("{what} = {value}")
            }
            4 => {
                // A byte of a key or tensor name.
                let &(at, len) = rng.pick(&layout.names);
                if len == 0 {
                    continue;
                }
                let i = at + rng.below(len);
                let old = bytes[i];
                let r = rng.byte();
                bytes[i] = *rng.pick(&[b'-', b'_', b'.', b'A', 0, 0xff, 0xc3, r]);
                format!("name byte {i} '{}' → {:#04x}", old.escape_ascii(), bytes[i])
            }
            5 => {
                // Two tensors' data swapped: shapes may then disagree with sizes.
                let a = *rng.pick(&layout.tensor_offsets);
                let b = *rng.pick(&layout.tensor_offsets);
                for k in 0..8 {
                    bytes.swap(a + k, b + k);
                }
                format!("tensor offsets at {a} and {b} swapped")
            }
            6 | 7 => {
                // Weights that are not numbers: NaN, infinities, huge.
                let n = 1 + rng.below(64);
                let end = bytes.len() / 4 * 4;
                for _ in 0..n {
                    let at = rng.range(header, end) / 4 * 4;
                    if at + 4 <= end && at >= header {
                        let v = interesting_f32(&mut rng);
                        bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
                    }
                }
                format!("{n} weights set to NaN/Inf/huge values")
            }
            8 => mutate_bytes(&mut rng, &mut bytes, header, usize::MAX),
            _ => {
                // Bytes of the header, overwritten in place.
                let n = 1 + rng.below(8);
                for _ in 0..n {
                    let at = rng.below(header);
                    if rng.chance(50) {
                        bytes[at] ^= 1 << rng.below(8);
                    } else {
                        let r = rng.byte();
                        bytes[at] = *rng.pick(&[0x00, 0xff, 0x7f, 0x80, r]);
                    }
                }
                format!("{n} header bytes changed")
            }
        };
        mutations.push(m);
    }
    if rng.chance(15) {
        let m = match rng.below(4) {
            0 => {
                let at = if rng.chance(50) {
                    rng.below(header + 1)
                } else {
                    rng.below(bytes.len() + 1)
                };
                bytes.truncate(at);
                format!("truncate at {at}")
            }
            1 | 2 => mutate_bytes(&mut rng, &mut bytes, 0, header),
            _ => mutate_bytes(&mut rng, &mut bytes, 0, usize::MAX),
        };
        mutations.push(m);
    }
    Case {
        index,
        seed,
        origin: origin.0.clone(),
        mutations,
        bytes,
        image: rng.below(IMAGES.len()),
    }
}
