//! Models split between the GPU and the CPU (`-ngl`, `--n-cpu-moe`; `SplitBackend`): each
//! placement — no layers, some, all but the output, all; the routed experts of some or all layers
//! on the CPU — generates the CPU alone's greedy tokens and meets llama.cpp's goldens by the rule
//! of its model, and the session properties hold across the boundary. Skips without a GPU adapter
//! unless KILN_REQUIRE_GPU=1.

use crate::common;
use crate::gpu_models::{REAL_STEPS_IN_CI, check_properties};

use common::golden_run::{
    EXACT_F32, GELU_TABLE_F32, QUANTIZED, Tolerance, argmax, check_model_with, first_steps,
    shortest_case, with_cases,
};
use common::gpu::gpu;
use kiln::backend::cpu::CpuBackend;
use kiln::backend::split::SplitBackend;
use kiln::backend::{Backend, CacheType};
use kiln::model::arch::KvCacheTypes;
use kiln::model::placement::placement;
use kiln::model::session::DEFAULT_BATCH;
use kiln::model::{Model, ModelFile, Session};

/// `mf` on the GPU and the CPU: its last `gpu_layers` layers on the GPU (+1: the output too), the
/// routed experts of its first `cpu_moe` layers on the CPU.
fn split(mf: &ModelFile, gpu_layers: usize, cpu_moe: usize) -> Option<Model<SplitBackend>> {
    let placement = placement(&mf.config, gpu_layers, cpu_moe);
    let backend = SplitBackend::new(gpu()?, CpuBackend::new(2).unwrap(), placement);
    Some(Model::load(mf, backend).unwrap())
}

/// The placements worth telling apart on a model of `n` layers: none on the GPU (every op
/// through the split backend, on the CPU), half, all but the output, all; with experts, all
/// layers on the GPU but the experts of half or all of them, and half the layers with every
/// expert on the CPU.
fn placements(n: usize, experts: bool) -> Vec<(usize, usize)> {
    let mut v = vec![(0, 0), (n / 2, 0), (n, 0), (n + 1, 0)];
    if experts {
        v.extend([(n + 1, n / 2), (n + 1, n), (n / 2, n)]);
    }
    v
}

/// `n` greedy tokens after `prompt`, with the margin of each choice over the runner-up.
fn greedy<B: Backend>(
    model: &Model<B>,
    prompt: &[u32],
    n: usize,
    cache: KvCacheTypes,
) -> Vec<(u32, f32)> {
    let mut s = Session::with_options(model, prompt.len() + n + 1, DEFAULT_BATCH, cache).unwrap();
    let mut logits = s.prefill(prompt).unwrap().to_vec();
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = argmax(&logits);
        let best = logits[t as usize];
        let second = logits
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != t as usize)
            .fold(f32::NEG_INFINITY, |m, (_, &v)| m.max(v));
        out.push((t, best - second));
        logits = s.decode(t).unwrap().to_vec();
    }
    out
}

/// Every placement of `mf`: the CPU alone's greedy tokens for `steps` steps after the golden's
/// first prompt (up to the first step the CPU decides by less than `tol.margin`: there the order
/// of float sums may decide), and the goldens of `entry` (its first `prompts` prompts) by `tol`.
fn every_placement(
    mf: &ModelFile,
    entry: &serde_json::Value,
    prompts: usize,
    tol: &Tolerance,
    cache: KvCacheTypes,
    steps: usize,
    only: Option<&[(usize, usize)]>,
) {
    let mut entry = entry.clone();
    if let Some(cases) = entry["greedy"].as_array_mut() {
        cases.truncate(prompts);
    }
    let prompt: Vec<u32> = entry["greedy"][0]["prompt_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let cpu = Model::load(mf, CpuBackend::new(2).unwrap()).unwrap();
    let want = greedy(&cpu, &prompt, steps, cache);
    drop(cpu);
    let c = &mf.config;
    let all = placements(c.n_layers, c.moe.is_some());
    for &(gpu_layers, cpu_moe) in only.unwrap_or(&all) {
        let Some(model) = split(mf, gpu_layers, cpu_moe) else {
            return;
        };
        let what = format!(
            "{} split as {}",
            mf.path.display(),
            model.backend.placement().describe()
        );
        let got = greedy(&model, &prompt, steps, cache);
        for (i, (&(w, margin), &(g, _))) in want.iter().zip(&got).enumerate() {
            if margin < tol.margin {
                break;
            }
            assert_eq!(g, w, "{what}: greedy token {i} differs from the CPU's");
        }
        let report = check_model_with(&model, &entry, tol, cache);
        eprintln!("{}", report.summary(&what));
        report.assert_all(&what);
    }
}

const F32_CACHE: KvCacheTypes = KvCacheTypes {
    k: CacheType::F32,
    v: CacheType::F32,
};

/// How much a split test runs: `Ci`, the placements that differ in kind and one golden prompt
/// (lavapipe runs these at a CPU's pace); `Full` (`every_split_placement_on_every_model`,
/// `--ignored`), every placement the test names and two prompts.
#[derive(Clone, Copy, PartialEq)]
enum Scope {
    Ci,
    Full,
}

impl Scope {
    fn prompts(self) -> usize {
        match self {
            Scope::Ci => 1,
            Scope::Full => 2,
        }
    }

    /// `ci` in CI, else `full` (`None`: every placement `placements` lists).
    fn pick<'a>(
        self,
        ci: &'a [(usize, usize)],
        full: Option<&'a [(usize, usize)]>,
    ) -> Option<&'a [(usize, usize)]> {
        match self {
            Scope::Ci => Some(ci),
            Scope::Full => full,
        }
    }
}

/// Qwen3.5's tiny models, dense and MoE (recurrent state and KV caches on both sides, the
/// experts of either side's layers on the CPU), by golden_qwen35's rule; in CI the cuts between
/// layers (half on the GPU; all but the output) on the dense file, and on the MoE file the cuts
/// within a layer (half the layers' experts on the CPU; half the layers on the GPU with every
/// expert on the CPU).
fn qwen35_placements(scope: Scope) {
    let golden = common::golden("llama-cpp-qwen35.json");
    for file in ["qwen35-tiny.gguf", "qwen35moe-tiny.gguf"] {
        let mf = ModelFile::open(&common::fixture(&format!("models/{file}"))).unwrap();
        let n = mf.config.n_layers;
        let ci = if mf.config.moe.is_some() {
            vec![(n + 1, n / 2), (n / 2, n)]
        } else {
            vec![(n / 2, 0), (n, 0)]
        };
        let entry = &golden["models"][file];
        let only = scope.pick(&ci, None);
        every_placement(&mf, entry, scope.prompts(), &EXACT_F32, F32_CACHE, 16, only);
    }
}

#[test]
fn qwen35_placements_match_the_cpu_and_llama_cpp() {
    qwen35_placements(Scope::Ci);
}

/// The real models split, on the placements that cut them (lavapipe is slow: one prompt; in CI
/// the shortest, and one placement of each kind, each on the model where it costs least: Qwen2.5,
/// the largest, with every layer through the split backend on the CPU; Gemma 3 with half the
/// layers on the GPU; SmolLM2, the smallest, with all but the output there).
fn real_models_split(scope: Scope) {
    let golden = common::golden("llama-cpp.json");
    for (i, name) in common::REAL_MODELS.into_iter().enumerate() {
        let mf = ModelFile::open(&common::real_model(name)).unwrap();
        let n = mf.config.n_layers;
        // In CI the golden's shortest prompt for as many steps as the greedy comparison takes.
        let (entry, steps) = match scope {
            Scope::Ci => {
                let entry = &golden["models"][name];
                let shortest = with_cases(entry, &[shortest_case(entry)]);
                (first_steps(&shortest, REAL_STEPS_IN_CI), REAL_STEPS_IN_CI)
            }
            Scope::Full => (golden["models"][name].clone(), 8),
        };
        let entry = &entry;
        let all = [(0, 0), (n / 2, 0), (n, 0)];
        let kind = [2, 0, 1][i];
        let only = scope.pick(&all[kind..=kind], Some(&all));
        every_placement(
            &mf,
            entry,
            1,
            &QUANTIZED,
            KvCacheTypes::default(),
            steps,
            only,
        );
    }
}

#[test]
fn real_models_split_match_the_cpu_and_llama_cpp() {
    real_models_split(Scope::Ci);
}

/// Cached decode equals recompute, prefill(N) equals prefill(N−1) then decode, truncate then
/// decode equals a fresh prefill, with the boundary between layers, around the experts, and
/// through Qwen3.5's recurrent state and its checkpoints.
#[test]
fn session_properties_hold_across_the_boundary() {
    for (file, gpu_layers, cpu_moe) in [
        ("tiny-llama.gguf", 1, 0),
        ("qwen3moe-tiny.gguf", 5, 4),
        ("qwen3moe-tiny.gguf", 2, 4),
        ("qwen35-tiny.gguf", 4, 0),
        ("qwen35moe-tiny.gguf", 9, 8),
    ] {
        let mf = ModelFile::open(&common::fixture(&format!("models/{file}"))).unwrap();
        let Some(model) = split(&mf, gpu_layers, cpu_moe) else {
            return;
        };
        check_properties(&model, &mf, 6);
    }
}

/// GLM-4.5 MoE's tiny model split between the backends (the selection bias on the side of its
/// layer, the routing, shared expert and dense first block on either), by the tight rule, on
/// placements that cut it: half the layers on the GPU, every layer there with every layer's
/// experts on the CPU, and (in CI) three layers there with two layers' experts on the CPU.
fn glm4moe_split(scope: Scope) {
    let golden = common::golden("llama-cpp-glm4moe.json");
    let file = "glm4moe-tiny.gguf";
    let mf = ModelFile::open(&common::fixture(&format!("models/{file}"))).unwrap();
    let all = [(2, 0), (4, 4), (3, 2)];
    every_placement(
        &mf,
        &golden["models"][file],
        scope.prompts(),
        &EXACT_F32,
        F32_CACHE,
        16,
        scope.pick(&all[2..], Some(&all)),
    );
}

#[test]
fn glm4moe_split_matches_the_cpu_and_llama_cpp() {
    glm4moe_split(Scope::Ci);
}

/// Gemma 4's tiny model split between the backends by the GELU models' rule, on placements that
/// put a shared-KV layer (6 and 7, reading the caches of layers 4 and 5) on the other side of
/// the cut from its source layer (in CI: the last two layers on the GPU), and on placements that
/// do not.
fn gemma4_split(scope: Scope) {
    let golden = common::golden("llama-cpp-gemma4.json");
    let file = "gemma4-tiny.gguf";
    let mf = ModelFile::open(&common::fixture(&format!("models/{file}"))).unwrap();
    let all = [(2, 0), (3, 0), (4, 0), (6, 0)];
    every_placement(
        &mf,
        &golden["models"][file],
        scope.prompts(),
        &GELU_TABLE_F32,
        F32_CACHE,
        16,
        scope.pick(&all[..1], Some(&all)),
    );
    // 26B-A4B's shape with its experts on either side, and E2B's, whose per-layer embeddings
    // are looked up on the CPU whatever the placement.
    for (file, golden, all) in [
        (
            "gemma4moe-tiny.gguf",
            "llama-cpp-gemma4moe.json",
            &[(4, 2), (3, 0), (6, 6)][..],
        ),
        (
            "gemma4e-tiny.gguf",
            "llama-cpp-gemma4e.json",
            &[(3, 0), (5, 0)][..],
        ),
    ] {
        let golden = common::golden(golden);
        let mf = ModelFile::open(&common::fixture(&format!("models/{file}"))).unwrap();
        every_placement(
            &mf,
            &golden["models"][file],
            scope.prompts(),
            &GELU_TABLE_F32,
            F32_CACHE,
            16,
            scope.pick(&all[..1], Some(all)),
        );
    }
}

#[test]
fn gemma4_split_matches_the_cpu_and_llama_cpp() {
    gemma4_split(Scope::Ci);
}

/// What CI's split tests leave out: every placement they name, on two golden prompts.
#[test]
#[ignore = "every placement of every split model: tens of minutes on lavapipe"]
fn every_split_placement_on_every_model() {
    qwen35_placements(Scope::Full);
    real_models_split(Scope::Full);
    glm4moe_split(Scope::Full);
    gemma4_split(Scope::Full);
}

/// Speculative decoding across the boundary (tests/common/speculation.rs): the verify pass's rows
/// go through layers on both backends (the tiny Llama file, one layer on the GPU).
#[test]
fn speculative_greedy_is_plain_greedy_across_the_boundary() {
    let mf = ModelFile::open(&common::fixture("models/tiny-llama.gguf")).unwrap();
    let Some(model) = split(&mf, 1, 0) else {
        return;
    };
    let tok = kiln::model::Tokenizer::from_model(&mf).unwrap();
    let prompt = tok.encode(common::speculation::REPEATING, true).unwrap();
    let what = "tiny-llama split 1 GPU layer";
    common::speculation::verify_rows_match_decode(&model, &prompt, 1e-4, what);
    common::speculation::speculation_matches_plain(&model, &tok, &prompt, 16, what);
}

/// Drafting with the multi-token-prediction block across the boundary: the trunk's first half on
/// the CPU, the rest and the block on the GPU (the dense Qwen3.5 file with a block added, and
/// GLM-4.5's).
#[test]
fn mtp_greedy_is_plain_greedy_across_the_boundary() {
    for (name, gpu_layers) in [("qwen35-mtp-tiny.gguf", 4), ("glm4moe-mtp-tiny.gguf", 2)] {
        let mut mf = ModelFile::open(&common::fixture(&format!("models/{name}"))).unwrap();
        mf.load_mtp = true;
        let Some(model) = split(&mf, gpu_layers, 0) else {
            return;
        };
        let tok = kiln::model::Tokenizer::from_model(&mf).unwrap();
        let prompt = tok.encode(common::speculation::REPEATING, true).unwrap();
        let what = format!("{name} split {gpu_layers} GPU layers");
        common::speculation::mtp_matches_plain(&model, &tok, &prompt, 12, &[3], 1e-3, &what);
    }
}

/// Continuous batching split between the GPU and the CPU (tests/common/batching.rs): Qwen3 MoE's
/// tiny file with half its layers on the GPU and the experts of the first of those on the CPU;
/// each sequence of a batched forward call gets its logits alone, and sequences on threads of
/// their own through one batcher the tokens each gets alone.
#[test]
fn batched_sequences_match_each_alone_split() {
    let mf = ModelFile::open(&common::fixture("models/qwen3moe-tiny.gguf")).unwrap();
    let n = mf.config.n_layers;
    let Some(model) = split(&mf, n / 2, n / 4 + 1) else {
        return;
    };
    let tok = kiln::model::Tokenizer::from_model(&mf).unwrap();
    let prompts: Vec<Vec<u32>> = ["Hello there", common::speculation::REPEATING, "Hi"]
        .iter()
        .map(|p| tok.encode(p, true).unwrap())
        .collect();
    let what = "qwen3moe-tiny.gguf split";
    common::batching::forward_batch_matches_alone(&model, &prompts, 4, 1e-4, what);
    common::batching::threads_match_alone(&model, &tok, &prompts, 8, what);
}
