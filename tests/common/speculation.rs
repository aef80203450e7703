//! Speculative decoding against decoding one token at a time, on any backend: the verify pass's
//! rows are sequential decode's logits, truncation rolls rejected rows back, and greedy generation
//! with a drafter gives the tokens (and leaves the session) greedy generation gives without one.

use kiln::backend::Backend;
use kiln::model::generate::{
    DraftSource, GenerateOptions, Generation, Speculation, StopRules, generate,
};
use kiln::model::speculative::{Drafter, EditDrafter, NgramDrafter, NgramMapDrafter};
use kiln::model::{Model, Session, Tokenizer};
use kiln::sampler::{Sampler, SamplerConfig};

/// A text whose greedy continuation the n-gram drafter can guess: it repeats.
pub const REPEATING: &str =
    "one two three four five, one two three four five, one two three four five, one two";

/// A drafter that knows the plain greedy continuation and proposes it, wrong at every
/// `wrong_every`-th position: it drives acceptance, rejection at every offset and rollback on any
/// model, where the text's own n-grams may never repeat (random tiny models). With an odd
/// `wrong_every`, single-token drafts (which step by two when accepted) still meet a wrong one.
pub struct Scripted {
    pub truth: Vec<u32>,
    pub wrong_every: usize,
}

impl Drafter for Scripted {
    fn draft(&self, context: &[u32], max: usize) -> kiln::Result<Vec<u32>> {
        if !self.truth.starts_with(context) {
            return Ok(Vec::new());
        }
        let from = context.len();
        let to = (from + max).min(self.truth.len());
        Ok(self.truth[from..to]
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                if (from + i).is_multiple_of(self.wrong_every) {
                    t ^ 1
                } else {
                    t
                }
            })
            .collect())
    }
}

pub fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    let scale = a.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

/// Greedy generation of `n` tokens after `prompt`; the generation and the session's tokens after.
pub fn greedy_run<B: Backend>(
    model: &Model<B>,
    tok: &Tokenizer,
    prompt: &[u32],
    n: usize,
    speculation: Option<Speculation>,
) -> (Generation, Vec<u32>) {
    let greedy = SamplerConfig {
        temperature: 0.0,
        ..SamplerConfig::default()
    };
    sampled_run(model, tok, prompt, n, greedy, speculation)
}

/// Generation of `n` tokens after `prompt` with the sampler `config` sets up; the generation and
/// the session's tokens after.
pub fn sampled_run<B: Backend>(
    model: &Model<B>,
    tok: &Tokenizer,
    prompt: &[u32],
    n: usize,
    config: SamplerConfig,
    speculation: Option<Speculation>,
) -> (Generation, Vec<u32>) {
    let mut s = Session::new(model, prompt.len() + n + 32).unwrap();
    if let Some(Speculation {
        drafter: DraftSource::Mtp { .. },
        ..
    }) = speculation
    {
        s.enable_mtp().unwrap();
    }
    let g = generate_on(&mut s, tok, prompt, n, config, speculation);
    (g, s.tokens().to_vec())
}

/// Generation of `n` tokens after `prompt` on `session`, with the sampler `config` sets up.
pub fn generate_on<B: Backend>(
    session: &mut Session<B>,
    tok: &Tokenizer,
    prompt: &[u32],
    n: usize,
    config: SamplerConfig,
    speculation: Option<Speculation>,
) -> Generation {
    let mut sampler = Sampler::new(config);
    let opts = GenerateOptions {
        rules: StopRules {
            max_tokens: n,
            stop_strings: vec![],
        },
        logprobs: 0,
        cancel: None,
        on_logprobs: None,
        on_reasoning: None,
        speculation,
    };
    generate(session, tok, &mut sampler, prompt, &opts, |_| Ok(())).unwrap()
}

/// The verify pass over five prompt tokens after the prompt equals decoding them one by one
/// (within `tol`, relative); truncated back to two of them, the next token sees only those two.
pub fn verify_rows_match_decode<B: Backend>(
    model: &Model<B>,
    prompt: &[u32],
    tol: f32,
    what: &str,
) {
    let rows: Vec<u32> = prompt[1..6].to_vec();
    let mut verified = Session::new(model, 256).unwrap();
    verified.prefill(prompt).unwrap();
    let all = verified.verify(&rows).unwrap().to_vec();
    let mut one_by_one = Session::new(model, 256).unwrap();
    one_by_one.prefill(prompt).unwrap();
    for (i, (&t, row)) in rows
        .iter()
        .zip(all.chunks_exact(model.config.vocab_size))
        .enumerate()
    {
        let d = max_rel_diff(row, one_by_one.decode(t).unwrap());
        assert!(d <= tol, "{what}: verify row {i} vs decode: {d:e}");
    }
    verified.truncate(prompt.len() + 2).unwrap();
    let after = verified.decode(rows[4]).unwrap().to_vec();
    let mut fresh = Session::new(model, 256).unwrap();
    let mut ids = prompt.to_vec();
    ids.extend_from_slice(&[rows[0], rows[1], rows[4]]);
    let d = max_rel_diff(&after, fresh.prefill(&ids).unwrap());
    assert!(d <= tol, "{what}: truncated verify vs fresh prefill: {d:e}");
}

/// Greedy with the n-gram drafters (ngram-simple, ngram-edit) and with scripted drafters wrong at
/// every 3rd, 5th and 7th position, each drafting up to 1, 3 and 8 tokens a pass, and with
/// ngram-map-k, equals greedy without: the tokens, the finish and the session after. The scripted
/// drafts must be both accepted and rejected. Returns ngram-simple's run (up to 8 a pass).
pub fn speculation_matches_plain<B: Backend>(
    model: &Model<B>,
    tok: &Tokenizer,
    prompt: &[u32],
    n: usize,
    what: &str,
) -> Generation {
    let (plain, plain_ctx) = greedy_run(model, tok, prompt, n, None);
    assert_eq!(plain.drafted_tokens, 0);
    let mut truth = prompt.to_vec();
    truth.extend_from_slice(&plain.tokens);
    let ngrams = NgramDrafter::default();
    let scripted: Vec<Scripted> = [3, 5, 7]
        .into_iter()
        .map(|wrong_every| Scripted {
            truth: truth.clone(),
            wrong_every,
        })
        .collect();
    let edits = EditDrafter::default();
    let mut drafters: Vec<&dyn Drafter> = vec![&ngrams, &edits];
    drafters.extend(scripted.iter().map(|d| d as &dyn Drafter));
    let mut accepted = 0;
    for (i, drafter) in drafters.into_iter().enumerate() {
        for max_draft in [1, 3, 8] {
            let spec = Speculation {
                drafter: DraftSource::Drafter(drafter),
                max_draft,
                min_draft: 0,
                synthetic: None,
            };
            let (fast, fast_ctx) = greedy_run(model, tok, prompt, n, Some(spec));
            let how = format!("{what}: drafter {i}, up to {max_draft}");
            assert_eq!(fast.tokens, plain.tokens, "{how}");
            assert_eq!(fast.finish, plain.finish, "{how}");
            assert_eq!(fast_ctx, plain_ctx, "{how}: the session after");
            if i > 1 {
                accepted += fast.accepted_tokens;
                assert!(
                    fast.accepted_tokens < fast.drafted_tokens,
                    "{how}: no rejection"
                );
            }
        }
    }
    assert!(accepted > n, "{what}: {accepted} drafted tokens accepted");
    // llama.cpp's ngram-map-k, on keys of 4 (the default 12 is longer than these prompts' repeats).
    let map = NgramMapDrafter::new(4, 8);
    let spec = Speculation {
        drafter: DraftSource::Drafter(&map),
        max_draft: 8,
        min_draft: 0,
        synthetic: None,
    };
    let (fast, fast_ctx) = greedy_run(model, tok, prompt, n, Some(spec));
    assert_eq!(fast.tokens, plain.tokens, "{what}: ngram-map-k");
    assert_eq!(
        fast_ctx, plain_ctx,
        "{what}: ngram-map-k, the session after"
    );
    let spec = Speculation {
        drafter: DraftSource::Drafter(&ngrams),
        max_draft: 8,
        min_draft: 0,
        synthetic: None,
    };
    greedy_run(model, tok, prompt, n, Some(spec)).0
}

/// Drafting with the model's multi-token-prediction block (`DraftSource::Mtp`, up to each of
/// `max_drafts` tokens a pass): greedy's tokens and session after, with drafts made; and the block's state after
/// a run of verify passes, rollbacks and decodes drafts the logits of a session that prefilled the
/// same tokens at once (within `tol`, absolute). Returns the drafts accepted.
pub fn mtp_matches_plain<B: Backend>(
    model: &Model<B>,
    tok: &Tokenizer,
    prompt: &[u32],
    n: usize,
    max_drafts: &[usize],
    tol: f32,
    what: &str,
) -> usize {
    let (plain, plain_ctx) = greedy_run(model, tok, prompt, n, None);
    let mut accepted = 0;
    for &max_draft in max_drafts {
        let spec = Speculation {
            drafter: DraftSource::Mtp { p_min: 0.0 },
            max_draft,
            min_draft: 0,
            synthetic: None,
        };
        let (fast, fast_ctx) = greedy_run(model, tok, prompt, n, Some(spec));
        let how = format!("{what}: MTP, up to {max_draft} a pass");
        assert_eq!(fast.tokens, plain.tokens, "{how}");
        assert_eq!(fast_ctx, plain_ctx, "{how}: the session after");
        assert!(fast.drafted_tokens > 0, "{how}: nothing drafted");
        accepted += fast.accepted_tokens;
    }

    let mut s = Session::new(model, prompt.len() + 64).unwrap();
    s.enable_mtp().unwrap();
    s.prefill(prompt).unwrap();
    // Verify passes whose drafts go wrong after a few rows, cut back as speculation cuts them.
    for round in 0..6u32 {
        let next = greedy_pick(s.logits().unwrap());
        let mut rows = vec![next];
        rows.extend(s.draft_mtp(next, 3, 0.0).unwrap());
        rows.push(7 + round);
        let len = s.tokens().len();
        s.verify(&rows).unwrap();
        s.truncate(len + 1 + round as usize % 3).unwrap();
        s.decode(rows[0] ^ 1).unwrap();
    }
    let context = s.tokens().to_vec();
    let next = greedy_pick(s.logits().unwrap());
    // A p_min reads the logits back.
    s.draft_mtp(next, 2, 1e-30).unwrap();
    let cached = s.mtp_logits().unwrap().to_vec();
    let mut fresh = Session::new(model, prompt.len() + 64).unwrap();
    fresh.enable_mtp().unwrap();
    fresh.prefill(&context).unwrap();
    assert_eq!(greedy_pick(fresh.logits().unwrap()), next, "{what}");
    fresh.draft_mtp(next, 2, 1e-30).unwrap();
    let d = cached
        .iter()
        .zip(fresh.mtp_logits().unwrap())
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(
        d <= tol,
        "{what}: MTP logits after speculation differ from a fresh session's by {d:e}"
    );
    accepted
}

/// The first most likely token.
pub fn greedy_pick(logits: &[f32]) -> u32 {
    kiln::sampler::most_likely(logits, 0.0).expect("logits")
}
