//! Context shift: after a shift, every layer's cached keys equal the keys it held before, taken back
//! to their raw values and rotated afresh for their new positions in f64 (with that layer's own
//! RoPE base, scaling and layout), within the cache type's rounding; values and kept rows are
//! untouched. `kiln run` with a 64-token context goes on past it with `--context-shift` and stops
//! with `context_full` without; a chat that runs past its context keeps its system prompt.

use crate::common;

use common::golden_run::load;
use kiln::backend::CacheType;
use kiln::backend::cpu::CpuBackend;
use kiln::model::arch::KvCacheTypes;
use kiln::model::chat::ChatTemplate;
use kiln::model::config::{ModelConfig, RopeLayout, RopeScaling};
use kiln::model::conversation::Conversation;
use kiln::model::generate::{FinishReason, GenerateOptions, StopRules, generate};
use kiln::model::session::DEFAULT_BATCH;
use kiln::model::{Model, ModelFile, Session, Tokenizer};
use kiln::sampler::{Sampler, SamplerConfig};
use serde_json::Value;

/// The angle of RoPE frequency `i` at position `pos` for layer `il` in a session of `ctx`
/// positions (LongRoPE's choice), in f64 from the configuration.
fn angle(c: &ModelConfig, il: usize, i: usize, pos: f64, ctx: usize) -> f64 {
    let theta = c.layer_rope_theta(il) as f64;
    let rope_dims = c.layer_shape(il).rope_dims;
    let mut freq = theta.powf(-2.0 * i as f64 / rope_dims as f64);
    match c.layer_rope_scaling(il) {
        Some(RopeScaling::Linear { factor }) => freq /= *factor as f64,
        Some(RopeScaling::PerFrequency { divisors }) => freq /= divisors[i] as f64,
        Some(RopeScaling::LongRope {
            short,
            long,
            original_context,
            ..
        }) => {
            let divisors = if ctx > *original_context { long } else { short };
            freq /= divisors[i] as f64
        }
        Some(RopeScaling::Yarn {
            factor,
            original_context,
            beta_fast,
            beta_slow,
            ..
        }) => {
            // YaRN: the unscaled frequency below the correction range, the interpolated one
            // above it, a linear ramp between.
            let dims = rope_dims as f64;
            let corr = |rot: f64| {
                dims * (*original_context as f64 / (rot * 2.0 * std::f64::consts::PI)).ln()
                    / (2.0 * theta.ln())
            };
            let low = corr(*beta_fast as f64).floor().max(0.0);
            let high = corr(*beta_slow as f64).ceil().min(dims - 1.0);
            let keep = 1.0 - ((i as f64 - low) / (high - low).max(0.001)).clamp(0.0, 1.0);
            freq = freq / *factor as f64 * (1.0 - keep) + freq * keep;
        }
        None => {}
    }
    pos * freq
}

/// Rotate one head from position `from` to position `to`: undo RoPE at `from`, apply it at `to`
/// over the rotated dims (a NoPE layer's keys hold no position, and stay as they are).
fn rerotate(
    c: &ModelConfig,
    il: usize,
    head: &[f32],
    (from, to): (usize, usize),
    ctx: usize,
) -> Vec<f64> {
    let half = c.layer_shape(il).rope_dims / 2;
    let mut out: Vec<f64> = head.iter().map(|&v| v as f64).collect();
    if !c.layer_has_rope(il) {
        return out;
    }
    for i in 0..half {
        let (a, b) = match c.rope_layout {
            RopeLayout::Interleaved => (2 * i, 2 * i + 1),
            RopeLayout::Neox => (i, i + half),
        };
        for (pos, sign) in [(from as f64, -1.0), (to as f64, 1.0)] {
            let (s, co) = (sign * angle(c, il, i, pos, ctx)).sin_cos();
            let (x0, x1) = (out[a], out[b]);
            out[a] = x0 * co - x1 * s;
            out[b] = x0 * s + x1 * co;
        }
    }
    out
}

/// Rows `rows` of one cache, as f32.
fn rows_of(
    cache: &kiln::backend::cpu::CpuCache,
    rows: std::ops::Range<usize>,
    w: usize,
) -> Vec<f32> {
    let mut out = vec![0.0; rows.len() * w];
    cache.read(rows.start * w, &mut out);
    out
}

/// How far a cache of type `ty` may round a re-rotated head, relative to the head's length: f32
/// only by the rotation's arithmetic; f16 by two roundings of each value; q8_0 by two
/// quantizations of its (Hadamard-rotated) blocks, each within half a step of amax/127.
fn tolerance(ty: CacheType) -> f64 {
    match ty {
        CacheType::F32 => 2e-6,
        CacheType::F16 => 1e-3,
        CacheType::Q8_0 => 0.02,
    }
}

/// Prefill `prompt` in a session of `ctx` positions, shift (keep the first `keep`, drop half the
/// rest), and check every layer.
fn check_shift(
    model: &Model<CpuBackend>,
    prompt: &[u32],
    (keep, ctx): (usize, usize),
    ty: CacheType,
    what: &str,
) {
    let c = &model.config;
    let types = KvCacheTypes { k: ty, v: ty };
    let mut s = Session::with_options(model, ctx, DEFAULT_BATCH, types).unwrap();
    s.prefill(prompt).unwrap();
    let n = prompt.len();
    // A shared-KV layer (Gemma 4) has no cache of its own: width 0.
    let width = |il: usize| {
        if c.layer_has_kv(il) {
            c.layer_kv_dim(il)
        } else {
            0
        }
    };
    let before: Vec<(Vec<f32>, Vec<f32>)> = s
        .cache()
        .layers
        .iter()
        .enumerate()
        .map(|(il, (k, v))| (rows_of(k, 0..n, width(il)), rows_of(v, 0..n, width(il))))
        .collect();
    let dropped = s.shift_context(keep).unwrap();
    assert_eq!(dropped, (n - keep) / 2, "{what}");
    let moved = n - keep - dropped;
    assert_eq!(s.tokens().len(), keep + moved);
    assert_eq!(&s.tokens()[keep..], &prompt[keep + dropped..], "{what}");
    let mut worst = 0.0f64;
    for (il, ((k_before, v_before), (kc, vc))) in before.iter().zip(&s.cache().layers).enumerate() {
        let (w, shape) = (width(il), c.layer_shape(il));
        let (k_after, v_after) = (
            rows_of(kc, 0..keep + moved, w),
            rows_of(vc, 0..keep + moved, w),
        );
        assert_eq!(
            k_after[..keep * w],
            k_before[..keep * w],
            "{what}: kept keys, layer {il}"
        );
        assert_eq!(
            v_after[..keep * w],
            v_before[..keep * w],
            "{what}: kept values, layer {il}"
        );
        assert_eq!(
            v_after[keep * w..],
            v_before[(keep + dropped) * w..],
            "{what}: moved values, layer {il}"
        );
        for r in 0..moved {
            let (old, new) = (keep + dropped + r, keep + r);
            for h in 0..shape.n_kv_heads * usize::from(w > 0) {
                let hd = shape.head_dim;
                let head = |rows: &[f32], row: usize| {
                    rows[row * w + h * hd..row * w + (h + 1) * hd].to_vec()
                };
                let want = rerotate(c, il, &head(k_before, old), (old, new), ctx);
                let got = head(&k_after, new);
                let norm = want.iter().map(|v| v * v).sum::<f64>().sqrt();
                let err = got
                    .iter()
                    .zip(&want)
                    .map(|(&g, w)| (g as f64 - w).powi(2))
                    .sum::<f64>()
                    .sqrt();
                let rel = err / norm.max(1e-12);
                worst = worst.max(rel);
                assert!(
                    rel <= tolerance(ty),
                    "{what}: layer {il} head {h}, row {old} → {new}: relative error {rel:e}"
                );
            }
        }
    }
    eprintln!("{what}: {moved} rows moved by {dropped}, worst relative error {worst:.2e}");
}

fn prompt_for(tok: &Tokenizer) -> Vec<u32> {
    tok.encode(
        "The lock keeper opened the gates at dawn, and the barges moved slowly \
         down the river toward the sea, carrying grain, timber and wool.",
        true,
    )
    .unwrap()
}

#[test]
fn re_rotated_keys_equal_keys_rotated_afresh() {
    let smollm2 = common::real_model(common::REAL_MODELS[0]);
    let models: Vec<(String, ModelFile)> = vec![
        // Interleaved pairs, heads of 8 (too small for q8_0).
        (
            "tiny-llama".into(),
            ModelFile::open(&common::fixture("models/tiny-llama.gguf")).unwrap(),
        ),
        // NEOX halves after QK-norm.
        (
            "tiny-qwen3-hf".into(),
            ModelFile::open(&common::fixture("models/tiny-qwen3-hf")).unwrap(),
        ),
        // The same in a mixture-of-experts model (Qwen3 MoE), heads of 32.
        (
            "qwen3moe-tiny".into(),
            ModelFile::open(&common::fixture("models/qwen3moe-tiny.gguf")).unwrap(),
        ),
        // YaRN (gpt-oss): ramped frequencies, and keys stored scaled, which a shift must rotate
        // without scaling again.
        (
            "gptoss-tiny".into(),
            ModelFile::open(&common::fixture("models/gptoss-tiny.gguf")).unwrap(),
        ),
        // NoPE layers (SmolLM3: every fourth), whose keys a shift moves but does not rotate.
        (
            "smollm3-tiny".into(),
            ModelFile::open(&common::fixture("models/smollm3-tiny.gguf")).unwrap(),
        ),
        // Llama 3 per-frequency divisors, heads of 64.
        (
            "llama32-synth".into(),
            common::synth::llama32_synth(&smollm2),
        ),
        // Multi-axis RoPE on text (Qwen3-VL: IMRoPE sections [3, 3, 2, 0] over all 8 pairs, a
        // text row at one position in each), heads of 16.
        (
            "qwen3vl-tiny".into(),
            ModelFile::open(&common::fixture("models/qwen3vl-tiny.gguf")).unwrap(),
        ),
        // Partial NEOX RoPE (GLM-4.5 MoE: 16 of 32 dims).
        (
            "glm4moe-tiny".into(),
            ModelFile::open(&common::fixture("models/glm4moe-tiny.gguf")).unwrap(),
        ),
        // Partial RoPE in adjacent pairs (GLM-4: 8 of 16 dims).
        (
            "glm4-tiny".into(),
            ModelFile::open(&common::fixture("models/glm4-tiny.gguf")).unwrap(),
        ),
        // Local and global layers of their own head shapes and RoPE (Gemma 4: proportional RoPE
        // over a quarter of the global pairs), and shared-KV layers, whose caches are their
        // source layers'.
        (
            "gemma4-tiny".into(),
            ModelFile::open(&common::fixture("models/gemma4-tiny.gguf")).unwrap(),
        ),
        // Partial RoPE with LongRoPE (Phi-3: 24 of 32 dims), whose short and long divisors a
        // short and a long context each take.
        (
            "phi3-tiny".into(),
            ModelFile::open(&common::fixture("models/phi3-tiny.gguf")).unwrap(),
        ),
        // Local layers at base 10000 and global ones at 1e6, heads of 256.
        (
            "gemma3".into(),
            ModelFile::open(&common::real_model(common::REAL_MODELS[2])).unwrap(),
        ),
    ];
    for (name, mf) in &models {
        let model = load(mf, 2);
        let prompt = prompt_for(&Tokenizer::from_model(mf).unwrap());
        assert!(prompt.len() >= 24, "{name}: a prompt long enough to shift");
        for ty in CacheType::ALL {
            let c = &model.config;
            if !c.head_dim.is_multiple_of(ty.block_len())
                || c.local_attention
                    .is_some_and(|l| !l.head_dim.is_multiple_of(ty.block_len()))
            {
                continue;
            }
            let long = match &model.config.rope_scaling {
                Some(RopeScaling::LongRope {
                    original_context, ..
                }) => Some(original_context + 1),
                _ => None,
            };
            for ctx in std::iter::once(prompt.len() + 8).chain(long) {
                for keep in [0, 4] {
                    check_shift(
                        &model,
                        &prompt,
                        (keep, ctx),
                        ty,
                        &format!("{name} cache {ty} keep {keep} context {ctx}"),
                    );
                }
            }
        }
    }
}

/// A shifted session decodes on: every token is generated, from a context that never overflows.
#[test]
fn generation_shifts_a_full_context_and_goes_on() {
    let mf = ModelFile::open(&common::real_model(common::REAL_MODELS[0])).unwrap();
    let tok = Tokenizer::from_model(&mf).unwrap();
    let model = load(&mf, 2);
    let prompt = prompt_for(&tok);
    let ctx = prompt.len() + 16;
    let opts = GenerateOptions {
        rules: StopRules {
            max_tokens: 60,
            stop_strings: vec![],
        },
        logprobs: 0,
        cancel: None,
        on_logprobs: None,
        on_reasoning: None,
        speculation: None,
    };
    let greedy = || {
        Sampler::new(SamplerConfig {
            temperature: 0.0,
            ..SamplerConfig::default()
        })
    };
    for ty in CacheType::ALL {
        let types = KvCacheTypes { k: ty, v: ty };
        let mut s = Session::with_options(&model, ctx, DEFAULT_BATCH, types).unwrap();
        let g = generate(&mut s, &tok, &mut greedy(), &prompt, &opts, |_| Ok(())).unwrap();
        assert_eq!(
            g.finish,
            FinishReason::ContextFull,
            "{ty}: no shift without the flag"
        );

        let mut s = Session::with_options(&model, ctx, DEFAULT_BATCH, types).unwrap();
        s.set_context_shift(Some(1)).unwrap();
        let g = generate(&mut s, &tok, &mut greedy(), &prompt, &opts, |_| Ok(())).unwrap();
        assert_eq!(g.finish, FinishReason::Length, "{ty}");
        assert_eq!(g.tokens.len(), 60, "{ty}");
        assert!(
            s.stats.context_shifts >= 2,
            "{ty}: {} shifts",
            s.stats.context_shifts
        );
        assert_eq!(s.tokens()[0], prompt[0], "{ty}: the kept BOS token");
        assert!(s.tokens().len() <= ctx);
        // What the session holds is the kept token and the newest ones, in order.
        let all: Vec<u32> = prompt.iter().chain(&g.tokens[..59]).copied().collect();
        let tail = &s.tokens()[1..];
        assert_eq!(tail, &all[all.len() - tail.len()..], "{ty}");
    }
}

/// A chat that runs past its context with context shift keeps its system prompt at the front.
#[test]
fn a_shifted_chat_keeps_its_system_prompt() {
    let mf = ModelFile::open(&common::real_model(common::REAL_MODELS[0])).unwrap();
    let tok = Tokenizer::from_model(&mf).unwrap();
    let model = load(&mf, 2);
    let session = Session::new(&model, 96).unwrap();
    let template = ChatTemplate::for_model(&tok, model.config.arch);
    let system = "You are a pirate. Answer every question like a pirate would.";
    let mut conv = Conversation::new(session, template, Some(system.into()));
    let prefix = conv.fixed_prefix(&tok).unwrap();
    let system_ids = tok.encode(system, false).unwrap();
    assert!(
        prefix.windows(system_ids.len()).any(|w| w == system_ids),
        "the kept prefix holds the system prompt"
    );
    let turn = conv
        .user_turn(&tok, "Tell me a long story about a dragon.", 24)
        .unwrap();
    conv.session.set_context_shift(Some(prefix.len())).unwrap();
    let opts = GenerateOptions {
        rules: StopRules {
            max_tokens: 150,
            stop_strings: vec![],
        },
        logprobs: 0,
        cancel: None,
        on_logprobs: None,
        on_reasoning: None,
        speculation: None,
    };
    let mut sampler = Sampler::new(SamplerConfig {
        temperature: 0.0,
        ..SamplerConfig::default()
    });
    let g = generate(
        &mut conv.session,
        &tok,
        &mut sampler,
        &turn.new_tokens,
        &opts,
        |_| Ok(()),
    )
    .unwrap();
    assert!(
        conv.session.stats.context_shifts > 0,
        "the reply ran past the context"
    );
    assert!(
        g.tokens.len() > 96 - turn.total_tokens,
        "{} tokens",
        g.tokens.len()
    );
    assert_eq!(&conv.session.tokens()[..prefix.len()], &prefix[..]);
}

fn json_run(args: &[&str]) -> Value {
    let model = common::real_model(common::REAL_MODELS[0]);
    let out = common::kiln()
        .args([
            "run",
            "-m",
            model.to_str().unwrap(),
            "--temp",
            "0",
            "--format",
            "json",
        ])
        .args(args)
        .arg("Write a story about a dragon who learns to bake bread.")
        .output()
        .unwrap();
    common::json_of(&out, &format!("{args:?}"))
}

#[test]
fn kiln_run_goes_past_a_small_context_with_context_shift() {
    let stopped = json_run(&["-c", "64", "-n", "200"]);
    assert_eq!(stopped["finish_reason"], "context_full");
    assert!(stopped["completion_tokens"].as_u64().unwrap() < 64);

    let shifted = json_run(&["-c", "64", "-n", "200", "--context-shift"]);
    assert_eq!(shifted["finish_reason"], "length");
    assert_eq!(shifted["completion_tokens"], 200);

    let q8 = json_run(&[
        "-c",
        "64",
        "-n",
        "200",
        "--context-shift",
        "--keep",
        "4",
        "-ctk",
        "q8_0",
        "-ctv",
        "q8_0",
    ]);
    assert_eq!(q8["completion_tokens"], 200);

    // --keep needs --context-shift.
    let model = common::real_model(common::REAL_MODELS[0]);
    common::kiln()
        .args(["run", "-m", model.to_str().unwrap(), "--keep", "4", "hi"])
        .assert()
        .code(2);
}

#[test]
fn kiln_chat_shifts_and_says_so() {
    let model = common::real_model(common::REAL_MODELS[0]);
    let out = common::kiln()
        .args([
            "chat",
            "-m",
            model.to_str().unwrap(),
            "--temp",
            "0",
            "-c",
            "128",
            "-n",
            "160",
            "--backend",
            "cpu",
        ])
        .args(["--context-shift", "--system", "You are a pirate."])
        .write_stdin("Tell me a long story about a dragon.\nWhat was its name?\n")
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("(context full: shifted"), "{stderr}");
    assert!(!stderr.contains("error:"), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).trim().is_empty());
}

/// Qwen3.5 keeps recurrent state, which a shift cannot drop tokens from: with `--context-shift`
/// kiln says so and stops at the full context, as without the flag.
#[test]
fn a_recurrent_model_says_it_cannot_shift_and_stops() {
    let model = common::fixture("models/qwen35-tiny.gguf");
    let out = common::kiln()
        .args(["run", "-m", model.to_str().unwrap(), "--temp", "0"])
        .args([
            "--format",
            "json",
            "-c",
            "64",
            "-n",
            "200",
            "--context-shift",
        ])
        .args(["--backend", "cpu", "Hi"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--context-shift is impossible for qwen35 models"),
        "{stderr}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["finish_reason"], "context_full");
    let mf = ModelFile::open(&model).unwrap();
    let m = load(&mf, 1);
    assert!(!m.can_shift_context());
    let mut s = Session::new(&m, 16).unwrap();
    assert!(s.set_context_shift(Some(0)).is_err());
}
