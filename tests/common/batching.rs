//! Continuous batching against each sequence alone, on any backend: a batched forward call over
//! several sequences gives each the logits it gets by itself, and sequences generating on threads
//! of their own through a `Batcher` give the tokens each gives alone.

use kiln::backend::Backend;
use kiln::model::arch::{BatchSeq, KvCacheTypes, RowInputs};
use kiln::model::batcher::Batcher;
use kiln::model::generate::{DraftSource, Speculation};
use kiln::model::speculative::NgramDrafter;
use kiln::model::{Model, Session, Tokenizer};
use kiln::sampler::SamplerConfig;

use super::golden_run::argmax;
use super::speculation::{generate_on, max_rel_diff};

/// Each prompt alone: its prefill's logits, then `steps` greedy decodes'. Returns, per prompt,
/// the logits after the prompt and after each picked token, and the picked tokens.
fn alone<B: Backend>(
    model: &Model<B>,
    prompts: &[Vec<u32>],
    steps: usize,
) -> Vec<(Vec<Vec<f32>>, Vec<u32>)> {
    prompts
        .iter()
        .map(|p| {
            let mut s = Session::new(model, 128).unwrap();
            let mut logits = vec![s.prefill(p).unwrap().to_vec()];
            let mut picked = Vec::new();
            for _ in 0..steps {
                let t = argmax(logits.last().unwrap());
                picked.push(t);
                logits.push(s.decode(t).unwrap().to_vec());
            }
            (logits, picked)
        })
        .collect()
}

/// Batched forward calls over `prompts` (at least three): the first two prefill together, the
/// third joins two steps later with its prefill beside the others' decodes, the first asks for
/// every row's logits; each then decodes the tokens it picked alone. Every sequence's logits are
/// its logits alone, within `tol` (relative).
pub fn forward_batch_matches_alone<B: Backend>(
    model: &Model<B>,
    prompts: &[Vec<u32>],
    steps: usize,
    tol: f32,
    what: &str,
) {
    let truth = alone(model, prompts, steps);
    let vocab = model.config.vocab_size;
    let mut caches: Vec<_> = prompts
        .iter()
        .map(|_| model.new_cache(128, KvCacheTypes::default()).unwrap())
        .collect();
    let mut scratch = model.new_scratch(64).unwrap();
    // Per sequence: how many of its logits were checked, its tokens in the cache.
    let mut done = vec![0usize; prompts.len()];
    let mut len = vec![0usize; prompts.len()];
    let joins = |i: usize| if i < 2 { 0 } else { 2 };
    let mut logits = Vec::new();
    for round in 0..steps + 3 {
        let mut ids: Vec<Vec<u32>> = Vec::new();
        let mut who = Vec::new();
        for i in 0..prompts.len() {
            if round < joins(i) || done[i] > steps {
                continue;
            }
            ids.push(match done[i] {
                0 => prompts[i].clone(),
                k => vec![truth[i].1[k - 1]],
            });
            who.push(i);
        }
        if who.is_empty() {
            break;
        }
        let mut seqs: Vec<BatchSeq<B>> = Vec::new();
        let mut rest = &mut caches[..];
        let mut taken = 0;
        for (&i, ids) in who.iter().zip(&ids) {
            let (_, tail) = rest.split_at_mut(i - taken);
            let (cache, tail) = tail.split_first_mut().unwrap();
            rest = tail;
            taken = i + 1;
            seqs.push(BatchSeq {
                ids,
                start_pos: len[i],
                cache,
                inputs: RowInputs::TOKENS,
                all_rows: i == 0 && done[i] == 0,
            });
        }
        model
            .forward_batch(&mut seqs, &mut scratch, &mut logits)
            .unwrap();
        let mut at = 0;
        for (&i, ids) in who.iter().zip(&ids) {
            let n = if i == 0 && done[i] == 0 { ids.len() } else { 1 };
            let last = &logits[(at + n - 1) * vocab..(at + n) * vocab];
            let d = max_rel_diff(&truth[i].0[done[i]], last);
            assert!(
                d <= tol,
                "{what}: sequence {i}, step {} in a batch of {}: {d:e}",
                done[i],
                who.len()
            );
            at += n;
            len[i] += ids.len();
            done[i] += 1;
        }
    }
    assert!(done.iter().all(|&d| d == steps + 1), "{what}: {done:?}");
}

/// Greedy generation of `n` tokens after each prompt, each on a thread of its own with a session
/// on one `Batcher`, gives the tokens each gives alone; every second sequence drafts from its
/// n-grams, so verify passes (and, for Qwen3.5, their per-row recurrent states) share steps with
/// plain decodes. Returns the batcher's steps and calls.
pub fn threads_match_alone<B: Backend>(
    model: &Model<B>,
    tok: &Tokenizer,
    prompts: &[Vec<u32>],
    n: usize,
    what: &str,
) -> (usize, usize) {
    let truth = alone(model, prompts, n);
    let batcher = Batcher::new(model, 64).unwrap();
    // Every sequence takes its seat before any generates, so that a busy machine's late thread
    // still finds the others waiting for it (the batcher waits for seated sequences).
    let seated = std::sync::Barrier::new(prompts.len());
    let got: Vec<Vec<u32>> = std::thread::scope(|scope| {
        let handles: Vec<_> = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let (batcher, seated) = (&batcher, &seated);
                scope.spawn(move || {
                    let mut s =
                        Session::batched(batcher, 128, 16, KvCacheTypes::default()).unwrap();
                    let _seat = batcher.seat();
                    seated.wait();
                    let greedy = SamplerConfig {
                        temperature: 0.0,
                        ..SamplerConfig::default()
                    };
                    let ngrams = NgramDrafter::default();
                    let speculation = (i % 2 == 1).then_some(Speculation {
                        drafter: DraftSource::Drafter(&ngrams),
                        max_draft: 4,
                        min_draft: 0,
                        synthetic: None,
                    });
                    generate_on(&mut s, tok, p, n, greedy, speculation).tokens
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, (tokens, (_, alone))) in got.iter().zip(&truth).enumerate() {
        // Generation stops at an end-of-generation token: compare what it made.
        assert_eq!(tokens[..], alone[..tokens.len()], "{what}: sequence {i}");
    }
    let stats = batcher.stats();
    (stats.steps, stats.calls)
}
