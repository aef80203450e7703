//! The session's properties (the seeds' tests): cached decode equals full recompute; prefill(N)
//! equals prefill(N−1) then decode; truncate then decode equals a fresh prefill; a longer (padded)
//! context changes nothing; greedy and seeded runs repeat exactly; misuse is an error.

use crate::common;

use common::golden_run::{argmax, load};
use kiln::backend::cpu::CpuBackend;
use kiln::model::config::RopeScaling;
use kiln::model::generate::{GenerateOptions, StopRules, generate};
use kiln::model::{Model, ModelFile, Session, Tokenizer};
use kiln::sampler::{Sampler, SamplerConfig};

fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    let scale = a.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

fn assert_close(a: &[f32], b: &[f32], what: &str) {
    let d = max_rel_diff(a, b);
    assert!(d <= 1e-4, "{what}: logits differ by {d:e} (relative)");
}

/// Greedy continuation of `prompt` for `n` tokens, with the logits seen before each token.
fn greedy(
    model: &Model<CpuBackend>,
    prompt: &[u32],
    n: usize,
    ctx: usize,
) -> (Vec<u32>, Vec<Vec<f32>>) {
    let mut s = Session::new(model, ctx).unwrap();
    let mut logits = s.prefill(prompt).unwrap().to_vec();
    let (mut toks, mut seen) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let t = argmax(&logits);
        seen.push(logits.clone());
        toks.push(t);
        logits = s.decode(t).unwrap().to_vec();
    }
    (toks, seen)
}

fn check_properties(mf: &ModelFile, prompt_text: &str, steps: usize) {
    let tok = Tokenizer::from_model(mf).unwrap();
    let model = load(mf, 2);
    let prompt = tok.encode(prompt_text, true).unwrap();
    let ctx = prompt.len() + steps + 8;
    let what = mf.path.display().to_string();

    // Cached decode equals full recompute at every step.
    let (toks, seen) = greedy(&model, &prompt, steps, ctx);
    for i in 0..steps {
        let mut all = prompt.clone();
        all.extend_from_slice(&toks[..i]);
        let mut s = Session::new(&model, ctx).unwrap();
        let full = s.prefill(&all).unwrap().to_vec();
        assert_close(
            &seen[i],
            &full,
            &format!("{what}: step {i}, cached vs recomputed"),
        );
    }

    // prefill(N) equals prefill(N−1) then decode.
    let mut a = Session::new(&model, ctx).unwrap();
    let whole = a.prefill(&prompt).unwrap().to_vec();
    let mut b = Session::new(&model, ctx).unwrap();
    b.prefill(&prompt[..prompt.len() - 1]).unwrap();
    let split = b.decode(*prompt.last().unwrap()).unwrap().to_vec();
    assert_close(
        &whole,
        &split,
        &format!("{what}: prefill(N) vs prefill(N-1)+decode"),
    );

    // truncate then decode equals a fresh prefill.
    let mut c = Session::new(&model, ctx).unwrap();
    c.prefill(&prompt).unwrap();
    for &t in &toks {
        c.decode(t).unwrap();
    }
    c.truncate(prompt.len() - 1).unwrap();
    assert!(c.logits().is_none(), "truncating invalidates the logits");
    let after = c.decode(*prompt.last().unwrap()).unwrap().to_vec();
    assert_close(
        &whole,
        &after,
        &format!("{what}: truncate+decode vs fresh prefill"),
    );

    // A much larger context (a padded cache) changes nothing; neither do other instances or
    // another thread count. (Except across LongRoPE's boundary, where a larger context takes the
    // long factors by design, as in llama.cpp: there the padding stops at it.)
    let padded = match &model.config.rope_scaling {
        Some(RopeScaling::LongRope {
            original_context, ..
        }) => (*original_context).max(ctx),
        _ => ctx + 1000,
    };
    let (toks_big, seen_big) = greedy(&model, &prompt, steps, padded);
    assert_eq!(toks_big, toks, "{what}: padded cache");
    assert_close(
        &seen_big[steps - 1],
        &seen[steps - 1],
        &format!("{what}: padded cache"),
    );
    let other = load(mf, 1);
    let (toks_other, seen_other) = greedy(&other, &prompt, steps, ctx);
    assert_eq!(toks_other, toks, "{what}: one thread vs two");
    assert_close(
        &seen_other[steps - 1],
        &seen[steps - 1],
        &format!("{what}: threads"),
    );

    // A seeded sampled run repeats exactly; another seed (almost surely) does not.
    let run = |seed: u64| {
        let mut s = Session::new(&model, ctx).unwrap();
        let mut sampler = Sampler::new(SamplerConfig {
            seed,
            temperature: 1.0,
            ..SamplerConfig::default()
        });
        let opts = GenerateOptions {
            rules: StopRules {
                max_tokens: steps,
                stop_strings: vec![],
            },
            logprobs: 0,
            cancel: None,
            on_logprobs: None,
            on_reasoning: None,
            speculation: None,
        };
        generate(&mut s, &tok, &mut sampler, &prompt, &opts, |_| Ok(()))
            .unwrap()
            .tokens
    };
    assert_eq!(run(42), run(42), "{what}: seeded run");
}

#[test]
fn properties_hold_on_the_tiny_models() {
    for m in [
        "tiny-llama.gguf",
        "tiny-llama-hf",
        "tiny-qwen3.gguf",
        "tiny-qwen3-hf",
        "qwen35-tiny.gguf",
        "qwen35moe-tiny.gguf",
        "qwen3moe-tiny.gguf",
        "smollm3-tiny.gguf",
        // 5 prompt tokens and 12 steps: past the sliding window of 16.
        "gemma2-tiny.gguf",
        // Past its window of 8; sinks, YaRN, biased experts.
        "gptoss-tiny.gguf",
        "mistral3-tiny.gguf",
        // Partial RoPE, sigmoid routing, a dense first block.
        "glm4moe-tiny.gguf",
        // Fused projections, partial RoPE, LongRoPE's short factors.
        "phi3-tiny.gguf",
        // Sandwich norms, partial RoPE in adjacent pairs.
        "glm4-tiny.gguf",
        // Local and global head shapes, proportional RoPE, two shared-KV layers, window 16.
        "gemma4-tiny.gguf",
        // Experts beside the dense MLP; per-layer embeddings and wider shared-KV layers.
        "gemma4moe-tiny.gguf",
        "gemma4e-tiny.gguf",
    ] {
        let mf = ModelFile::open(&common::fixture(&format!("models/{m}"))).unwrap();
        check_properties(&mf, "The capital of France is", 12);
    }
}

#[test]
fn properties_hold_on_smollm2() {
    let mf = ModelFile::open(&common::real_model(common::REAL_MODELS[0])).unwrap();
    check_properties(&mf, "Once upon a time, in a land far away, there lived", 8);
}

/// Gemma 3 past its 512-token window: cached decode (sliding-window layers reading a cache that
/// holds more than the window) equals recomputing the whole sequence.
#[test]
fn gemma3_cached_decode_past_the_window_equals_recompute() {
    let mf = ModelFile::open(&common::real_model(common::REAL_MODELS[2])).unwrap();
    let tok = Tokenizer::from_model(&mf).unwrap();
    let model = load(&mf, 2);
    let long = common::golden("prompts-long.json")["prompts"][0]
        .as_str()
        .unwrap()
        .to_string();
    let prompt = tok.encode(&long, true).unwrap();
    assert!(prompt.len() > 600);
    let (toks, seen) = greedy(&model, &prompt, 3, prompt.len() + 4);
    let mut all = prompt.clone();
    all.extend_from_slice(&toks[..2]);
    let mut s = Session::new(&model, all.len() + 1).unwrap();
    let full = s.prefill(&all).unwrap().to_vec();
    assert_close(&seen[2], &full, "gemma3 past the window");
}

#[test]
fn misuse_is_an_error_not_a_panic() {
    let mf = ModelFile::open(&common::fixture("models/tiny-llama.gguf")).unwrap();
    let model = load(&mf, 1);
    let mut s = Session::new(&model, 8).unwrap();
    assert!(matches!(s.decode(1), Err(kiln::Error::DecodeBeforePrefill)));
    assert!(matches!(s.prefill(&[]), Err(kiln::Error::EmptyPrompt)));
    assert!(matches!(
        s.prefill(&[1; 9]),
        Err(kiln::Error::ContextFull { needed: 9, ctx: 8 })
    ));
    assert!(matches!(
        s.prefill(&[49152]),
        Err(kiln::Error::BadToken { id: 49152, .. })
    ));
    s.prefill(&[1; 8]).unwrap();
    assert!(matches!(s.decode(1), Err(kiln::Error::ContextFull { .. })));
    assert!(s.truncate(9).is_err());
    assert!(Session::new(&model, 0).is_err());
}
