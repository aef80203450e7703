//! Speculative decoding (src/model/speculative.rs) on the CPU against decoding one token at a time
//! (tests/common/speculation.rs): on tiny files of every attention kind (plain, QK-norm, experts,
//! soft-capped with a sliding window, sinks, Qwen3.5's recurrent state), on the three real models
//! with the text's own n-grams drafting, and with a draft model.

use crate::common;

use common::golden_run::load;
use common::speculation::{
    REPEATING, greedy_run, sampled_run, speculation_matches_plain, verify_rows_match_decode,
};
use kiln::model::generate::{DraftSource, Speculation};
use kiln::model::speculative::{ModelDrafter, check_draft_vocabulary};
use kiln::model::{ModelFile, Session, Tokenizer};

fn check(mf: &ModelFile, n: usize) -> kiln::model::generate::Generation {
    let what = mf.path.display().to_string();
    let tok = Tokenizer::from_model(mf).unwrap();
    let model = load(mf, 2);
    let prompt = tok.encode(REPEATING, true).unwrap();
    verify_rows_match_decode(&model, &prompt, 1e-4, &what);
    speculation_matches_plain(&model, &tok, &prompt, n, &what)
}

#[test]
fn speculative_greedy_is_plain_greedy_on_the_tiny_models() {
    for m in [
        "tiny-llama.gguf",
        "tiny-qwen3.gguf",
        "qwen3moe-tiny.gguf",
        "gemma2-tiny.gguf",
        "gptoss-tiny.gguf",
    ] {
        let mf = ModelFile::open(&common::fixture(&format!("models/{m}"))).unwrap();
        check(&mf, 24);
    }
}

/// The three real models (SmolLM2, Qwen2.5-Coder, Gemma 3), the text's own n-grams drafting: the
/// repeats of the prompt are guessed. (No two of them share a vocabulary, so none drafts for
/// another; the draft-model test below uses tiny files.)
#[test]
fn speculative_greedy_is_plain_greedy_on_the_real_models() {
    for name in common::REAL_MODELS {
        let mf = ModelFile::open(&common::real_model(name)).unwrap();
        let g = check(&mf, 32);
        eprintln!(
            "{name}: {} of {} n-gram drafts accepted",
            g.accepted_tokens, g.drafted_tokens
        );
        assert!(
            g.accepted_tokens >= 8,
            "{name}: {} of {} n-gram drafts accepted",
            g.accepted_tokens,
            g.drafted_tokens
        );
    }
}

/// Qwen3.5's recurrent state (dense and MoE): rows the drafter got wrong leave it by restoring the
/// copy kept after the last accepted row, with nothing run again; the prompt's checkpoint stays
/// where it was.
#[test]
fn speculative_greedy_is_plain_greedy_with_recurrent_state() {
    for m in ["qwen35-tiny.gguf", "qwen35moe-tiny.gguf"] {
        let mf = ModelFile::open(&common::fixture(&format!("models/{m}"))).unwrap();
        check(&mf, 24);
        let tok = Tokenizer::from_model(&mf).unwrap();
        let model = load(&mf, 2);
        let prompt = tok.encode(REPEATING, true).unwrap();
        let mut s = Session::new(&model, 64).unwrap();
        s.prefill(&prompt).unwrap();
        s.verify(&prompt[1..4]).unwrap();
        s.truncate(prompt.len() + 1).unwrap();
        assert_eq!(s.checkpoints(), [prompt.len()], "{m}");
        // The state after each verify row was kept: rolling back into the pass runs nothing.
        assert_eq!(s.stats.recomputed_tokens, 0, "{m}");
    }
}

/// A draft model (`-md`): the Q8_0 file of the tiny Qwen3 MoE drafted for by its f32 original
/// (the same vocabulary, near-identical picks). Greedy output is the output without it, on two
/// prompts one after another with the same drafter, whose session follows each new context; most
/// drafts are accepted. A model of another vocabulary (Qwen2.5's) is refused, saying what differs.
#[test]
fn a_draft_model_changes_nothing_but_the_speed() {
    let target_file = ModelFile::open(&common::fixture("models/qwen3moe-tiny-Q8_0.gguf")).unwrap();
    let draft_file = ModelFile::open(&common::fixture("models/qwen3moe-tiny.gguf")).unwrap();
    let tok = Tokenizer::from_model(&target_file).unwrap();
    let draft_tok = Tokenizer::from_model(&draft_file).unwrap();
    check_draft_vocabulary(&tok, &draft_tok).unwrap();
    let (target, draft) = (load(&target_file, 2), load(&draft_file, 2));
    let drafter = ModelDrafter::new(Session::new(&draft, 512).unwrap(), 0.0);
    let spec = Speculation {
        drafter: DraftSource::Drafter(&drafter),
        max_draft: 8,
        min_draft: 0,
        synthetic: None,
    };
    let (mut drafted, mut accepted) = (0, 0);
    for text in [REPEATING, "The quick brown fox jumps over the lazy dog."] {
        let prompt = tok.encode(text, true).unwrap();
        let (plain, plain_ctx) = greedy_run(&target, &tok, &prompt, 24, None);
        let (fast, fast_ctx) = greedy_run(&target, &tok, &prompt, 24, Some(spec));
        assert_eq!(fast.tokens, plain.tokens, "{text}");
        assert_eq!(fast_ctx, plain_ctx, "{text}: the session after");
        drafted += fast.drafted_tokens;
        accepted += fast.accepted_tokens;
    }
    assert!(
        accepted * 2 > drafted && drafted > 0,
        "{accepted} of {drafted} drafted tokens accepted"
    );

    // The tiny files all carry SmolLM2's vocabulary; Qwen2.5's is another.
    let other = ModelFile::open(&common::real_model(common::REAL_MODELS[1])).unwrap();
    let err = check_draft_vocabulary(&tok, &Tokenizer::from_model(&other).unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot draft for this model"), "{err}");
}

/// Sampling with speculation is distributed as sampling without it: the tiny Llama's first three
/// sampled tokens (top-3 at temperature 1.5, a repeat penalty), from 1,500 seeds each way, fall
/// into their sequences alike by a two-sample χ² test at p = 0.001. The draft model is the model
/// itself, drafting its own argmax, which the sampler keeps with its probability: accepted and
/// rejected drafts both occur at every position.
#[test]
fn sampling_with_speculation_is_distributed_as_without() {
    use kiln::sampler::SamplerConfig;
    use std::collections::HashMap;

    let mf = ModelFile::open(&common::fixture("models/tiny-llama.gguf")).unwrap();
    let tok = Tokenizer::from_model(&mf).unwrap();
    let model = load(&mf, 2);
    let prompt = tok.encode(REPEATING, true).unwrap();
    let drafter = ModelDrafter::new(Session::new(&model, 128).unwrap(), 0.0);
    let (steps, seeds) = (3, 1500);
    let (mut drafted, mut accepted) = (0, 0);
    let mut counts: [HashMap<Vec<u32>, usize>; 2] = Default::default();
    for (way, counts) in counts.iter_mut().enumerate() {
        for seed in 0..seeds {
            let config = SamplerConfig {
                temperature: 1.5,
                top_k: 3,
                top_p: 1.0,
                min_p: 0.0,
                repeat_penalty: 1.3,
                seed,
                ..SamplerConfig::default()
            };
            let spec = (way == 1).then_some(Speculation {
                drafter: DraftSource::Drafter(&drafter),
                max_draft: 2,
                min_draft: 0,
                synthetic: None,
            });
            let (g, _) = sampled_run(&model, &tok, &prompt, steps, config, spec);
            drafted += g.drafted_tokens;
            accepted += g.accepted_tokens;
            *counts.entry(g.tokens).or_default() += 1;
        }
    }
    assert!(
        accepted > 0 && accepted * 5 < drafted * 4,
        "{accepted} of {drafted} drafted tokens accepted: both ways must occur"
    );
    // Two samples of equal size: χ² = Σ (a − b)² / (a + b), over the sequences either saw.
    let [plain, fast] = &counts;
    let mut seen: Vec<&Vec<u32>> = plain.keys().chain(fast.keys()).collect();
    seen.sort();
    seen.dedup();
    let chi2: f64 = seen
        .iter()
        .map(|s| {
            let (a, b) = (
                *plain.get(*s).unwrap_or(&0) as f64,
                *fast.get(*s).unwrap_or(&0) as f64,
            );
            (a - b).powi(2) / (a + b)
        })
        .sum();
    // The χ² quantile at p = 0.001 by Wilson and Hilferty's approximation (z = 3.09).
    let df = (seen.len() - 1) as f64;
    let limit = df * (1.0 - 2.0 / (9.0 * df) + 3.09 * (2.0 / (9.0 * df)).sqrt()).powi(3);
    assert!(
        chi2 < limit,
        "χ² {chi2:.1} over {} sequences (limit {limit:.1})",
        seen.len()
    );
}
