//! `kiln check`: does the GPU compute what the CPU computes? Generates N greedy tokens on the CPU
//! backend, replays them teacher-forced on the GPU, and compares the logits at every step by the
//! golden README's rule for quantized models: every |Δ| ≤ 1.0 + 0.03·|logit| on the CPU's top 5,
//! the root mean square of those Δ ≤ 0.4, and the same argmax wherever the CPU's margin between
//! its best two tokens is at least 0.5. Exit 0 when that holds, 1 when not. With `--image`, each
//! backend encodes the images with its own tower and the prompt holds them, so the GPU's vision
//! tower and its attention over an image are checked too.

use std::process::ExitCode;

use anyhow::{Context, Result};
use serde_json::json;

use super::placement::{KvNeeds, Placed, place_on};
use super::vision::{Images, VisionArgs, prefill_pieces, prompt_rows};
use super::{BackendArgs, BackendKind, CacheArgs, ModelArgs, OutputFormat};
use crate::backend::cpu::CpuBackend;
use crate::backend::wgpu::{AdapterChoice, WgpuBackend};
use crate::backend::{Backend, CoreOps};
use crate::model::multimodal::{self, PromptPiece};
use crate::model::{Model, ModelFile, Session, Tokenizer};

const ABS: f32 = 1.0;
const REL: f32 = 0.03;
const RMS: f32 = 0.4;
const MARGIN: f32 = 0.5;

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    /// The prompt to continue
    #[arg(default_value = "The capital of France is")]
    pub prompt: String,

    /// Greedy tokens to generate and compare
    #[arg(
        short = 'n',
        long = "n-predict",
        default_value_t = 16,
        value_name = "N"
    )]
    pub steps: usize,

    #[command(flatten)]
    pub backend: BackendArgs,

    #[command(flatten)]
    pub cache: CacheArgs,

    #[command(flatten)]
    pub vision: VisionArgs,

    /// Output format
    #[arg(long, value_enum, default_value_t)]
    pub format: OutputFormat,
}

struct Step {
    token: u32,
    piece: String,
    margin: f32,
    top1_agrees: bool,
    max_diff: f32,
    /// Largest |Δ| as a fraction of its allowance.
    worst_ratio: f32,
    sum_sq: f64,
}

fn top(logits: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..logits.len()).collect();
    let k = k.min(idx.len()).max(1);
    idx.select_nth_unstable_by(k - 1, |&a, &b| logits[b].total_cmp(&logits[a]));
    idx.truncate(k);
    idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    idx
}

/// The prompt: its tokens, or with `--image` its pieces (the images placed as the raw prompt
/// places them: before the text, or at its `<__media__>` markers).
enum Prompt {
    Text(Vec<u32>),
    Pieces(Vec<PromptPiece>),
}

impl Prompt {
    fn new(tok: &Tokenizer, text: &str, images: Option<&Images>) -> Result<Prompt> {
        let prompt = match images {
            None => Prompt::Text(tok.encode(text, true)?),
            Some(img) => {
                let pieces = multimodal::raw_prompt(tok, text, img.encoded.len(), img.markers)?;
                anyhow::ensure!(
                    matches!(pieces.last(), Some(PromptPiece::Tokens(t)) if !t.is_empty()),
                    "the prompt must end in text after its images: the check starts from the \
                     logits of its last token"
                );
                Prompt::Pieces(pieces)
            }
        };
        anyhow::ensure!(prompt.rows(images) > 0, "the prompt is empty");
        Ok(prompt)
    }

    /// Rows the prompt takes in the context.
    fn rows(&self, images: Option<&Images>) -> usize {
        match (self, images) {
            (Prompt::Text(ids), _) => ids.len(),
            (Prompt::Pieces(pieces), Some(img)) => prompt_rows(pieces, img),
            (Prompt::Pieces(_), None) => 0,
        }
    }

    /// A session of `model` with room for the prompt and `steps` tokens, the prompt prefilled
    /// (with `images`, encoded by that model's backend); the logits after its last token.
    fn start<'m, B: Backend>(
        &self,
        model: &'m Model<B>,
        images: Option<&Images>,
        steps: usize,
        args: &CheckArgs,
    ) -> Result<(Session<'m, B>, Vec<f32>)> {
        let ctx = self.rows(images) + steps + 1;
        let mut s = Session::with_options(model, ctx, 512, args.cache.types())?;
        let logits = match (self, images) {
            (Prompt::Pieces(pieces), Some(img)) => {
                let rest = prefill_pieces(&mut s, pieces, img, 0)?;
                s.prefill(&rest)?.to_vec()
            }
            (Prompt::Text(ids), _) => s.prefill(ids)?.to_vec(),
            (Prompt::Pieces(_), None) => anyhow::bail!("a prompt with images needs them encoded"),
        };
        Ok((s, logits))
    }
}

/// The CPU's greedy tokens and its logits before each.
fn cpu_run(
    model: &Model<CpuBackend>,
    prompt: &Prompt,
    images: Option<&Images>,
    n: usize,
    args: &CheckArgs,
) -> Result<Vec<Vec<f32>>> {
    let (mut s, mut logits) = prompt.start(model, images, n, args)?;
    let mut seen = Vec::with_capacity(n);
    for _ in 0..n {
        let t = top(&logits, 1)[0] as u32;
        seen.push(logits);
        logits = s.decode(t)?.to_vec();
    }
    Ok(seen)
}

/// The reference's tokens replayed teacher-forced on `model`, each step compared with the
/// reference's logits.
fn replay<B: Backend>(
    model: &Model<B>,
    prompt: &Prompt,
    file: &ModelFile,
    reference: &[Vec<f32>],
    tok: &Tokenizer,
    args: &CheckArgs,
) -> Result<Vec<Step>> {
    let images = args.vision.encode(model, &file.path, false)?;
    let (mut s, mut logits) = prompt.start(model, images.as_ref(), args.steps, args)?;
    let mut steps = Vec::with_capacity(args.steps);
    for want in reference {
        let best = top(want, 2);
        let token = best[0] as u32;
        let margin = want[best[0]] - best.get(1).map_or(f32::NEG_INFINITY, |&i| want[i]);
        let (mut max_diff, mut worst_ratio, mut sum_sq) = (0f32, 0f32, 0f64);
        for i in top(want, 5) {
            let d = (logits[i] - want[i]).abs();
            max_diff = max_diff.max(d);
            worst_ratio = worst_ratio.max(d / (ABS + REL * want[i].abs()));
            sum_sq += (d as f64).powi(2);
        }
        steps.push(Step {
            token,
            piece: tok.decode(&[token], false).unwrap_or_default(),
            margin,
            top1_agrees: top(&logits, 1)[0] as u32 == token,
            max_diff,
            worst_ratio,
            sum_sq,
        });
        logits = s.decode(token)?.to_vec();
    }

    Ok(steps)
}

pub fn run(args: CheckArgs) -> Result<ExitCode> {
    anyhow::ensure!(args.steps > 0, "-n must be at least 1");
    let file = args.model.open()?;
    let tok = Tokenizer::from_model(&file)?;
    let gpu = match args.backend.backend {
        BackendKind::Cpu => {
            anyhow::bail!("kiln check compares the CPU backend with a GPU: leave out --backend cpu")
        }
        _ => WgpuBackend::new(
            args.backend
                .gpu
                .map_or(AdapterChoice::Best, AdapterChoice::Index),
        )?,
    };
    let cpu = CpuBackend::new(args.backend.threads.unwrap_or(0))?;
    let cpu_model = Model::load(&file, cpu.with_repacking(!args.backend.no_repack))
        .with_context(|| format!("loading {}", file.path.display()))?;
    let cpu_name = cpu_model.backend.describe();
    let images = args.vision.encode(&cpu_model, &file.path, false)?;
    let prompt = Prompt::new(&tok, &args.prompt, images.as_ref())?;
    let prompt_rows = prompt.rows(images.as_ref());
    let image_tokens = images.as_ref().map_or(0, Images::tokens);
    let reference = cpu_run(&cpu_model, &prompt, images.as_ref(), args.steps, &args)?;
    drop(cpu_model);

    let kv = KvNeeds {
        ctx: prompt_rows + args.steps + 1,
        types: args.cache.types(),
    };
    let cpu =
        CpuBackend::new(args.backend.threads.unwrap_or(0))?.with_repacking(!args.backend.no_repack);
    let (placed, line) = place_on(&file, Some(gpu), cpu, &args.backend.placement, kv)?;
    if let Some(line) = line {
        eprintln!("{line}");
    }
    let loading = || format!("loading {} on the GPU", file.path.display());
    let (gpu_name, steps) = match placed {
        Placed::Gpu(gpu) => {
            let model = Model::load(&file, *gpu).with_context(loading)?;
            (
                model.backend.describe(),
                replay(&model, &prompt, &file, &reference, &tok, &args)?,
            )
        }
        Placed::Split(split) => {
            let model = Model::load(&file, *split).with_context(loading)?;
            (
                model.backend.describe(),
                replay(&model, &prompt, &file, &reference, &tok, &args)?,
            )
        }
        Placed::Cpu(_) => anyhow::bail!(
            "this placement puts nothing on the GPU (-ngl 0): there is nothing to check"
        ),
    };

    let checks = steps.len() * 5;
    let rms = (steps.iter().map(|s| s.sum_sq).sum::<f64>() / checks as f64).sqrt() as f32;
    let agree = steps.iter().filter(|s| s.top1_agrees).count();
    let logit_fail = steps.iter().filter(|s| s.worst_ratio > 1.0).count();
    let argmax_fail = steps
        .iter()
        .filter(|s| !s.top1_agrees && s.margin >= MARGIN)
        .count();
    let pass = logit_fail == 0 && argmax_fail == 0 && rms <= RMS;

    if args.format == OutputFormat::Json {
        let out = json!({
            "model": file.path.display().to_string(),
            "reference": cpu_name,
            "backend": gpu_name,
            "prompt_tokens": prompt_rows,
            "image_tokens": image_tokens,
            "steps": steps.iter().enumerate().map(|(i, s)| json!({
                "step": i, "token": s.token, "piece": s.piece, "cpu_margin": s.margin,
                "top1_agrees": s.top1_agrees, "max_abs_diff": s.max_diff,
                "worst_fraction_of_tolerance": s.worst_ratio,
                "rms": (s.sum_sq / 5.0).sqrt(),
            })).collect::<Vec<_>>(),
            "top1_agreement": agree as f64 / steps.len() as f64,
            "rms": rms,
            "logit_violations": logit_fail,
            "argmax_violations": argmax_fail,
            "pass": pass,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("reference: {cpu_name}");
        println!("checked:   {gpu_name}");
        if image_tokens > 0 {
            println!("prompt:    {prompt_rows} rows, {image_tokens} of them image tokens");
        }
        println!(
            "{:>4}  {:>7}  {:<16} {:>6}  {:>5}  {:>9}  {:>6}",
            "step", "token", "piece", "margin", "top-1", "max |Δ|", "rms"
        );
        for (i, s) in steps.iter().enumerate() {
            let mark = if s.worst_ratio > 1.0 || (!s.top1_agrees && s.margin >= MARGIN) {
                "  ✗"
            } else if !s.top1_agrees {
                "  (close call)"
            } else {
                ""
            };
            println!(
                "{i:>4}  {:>7}  {:<16} {:>6.2}  {:>5}  {:>9.4}  {:>6.4}{mark}",
                s.token,
                format!("{:?}", s.piece),
                s.margin,
                if s.top1_agrees { "yes" } else { "no" },
                s.max_diff,
                (s.sum_sq / 5.0).sqrt(),
            );
        }
        println!(
            "top-1 agreement {agree}/{}; rms of the top-5 Δ {rms:.4} (limit {RMS}); {logit_fail} steps beyond |Δ| ≤ {ABS} + {REL}·|logit|, {argmax_fail} argmax changes at margin ≥ {MARGIN}",
            steps.len()
        );
        println!("{}", if pass { "PASS" } else { "FAIL" });
    }
    Ok(if pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
