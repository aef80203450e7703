//! Token sampling, as llama.cpp's default chain: penalties → top-k → top-p → min-p → temperature →
//! draw from the softmax. `temperature <= 0` is greedy (penalties still apply). A seeded
//! xoshiro256** generator makes `--seed` reproduce a run exactly. With a [`Constraint`] (JSON
//! schema, grammar, regex), tokens it does not allow are masked out before the chain, and every
//! token sampled advances it.

pub mod constraint;
pub mod gbnf;

use std::collections::{HashMap, VecDeque};

pub use constraint::{Constraint, ConstraintCompiler, ConstraintSpec, JSON_WHITESPACE, TokenBytes};

#[derive(Debug, Clone, PartialEq)]
pub struct SamplerConfig {
    pub temperature: f32,
    /// Keep the k most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches p (1: all).
    pub top_p: f32,
    /// Drop tokens less likely than min_p × the most likely one (0: none).
    pub min_p: f32,
    /// Divide positive logits (multiply negative ones) of recent tokens by this (1: off).
    pub repeat_penalty: f32,
    /// Subtract count × this from recent tokens' logits.
    pub frequency_penalty: f32,
    /// Subtract this from the logit of every token seen recently.
    pub presence_penalty: f32,
    /// How many recent tokens the penalties look at.
    pub penalty_last_n: usize,
    pub seed: u64,
}

impl Default for SamplerConfig {
    /// llama.cpp's defaults.
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            penalty_last_n: 64,
            seed: 0,
        }
    }
}

impl SamplerConfig {
    pub fn greedy() -> Self {
        SamplerConfig {
            temperature: 0.0,
            ..Self::default()
        }
    }

    fn penalties_active(&self) -> bool {
        self.penalty_last_n > 0
            && (self.repeat_penalty != 1.0
                || self.frequency_penalty != 0.0
                || self.presence_penalty != 0.0)
    }
}

/// xoshiro256** seeded through splitmix64: small, fast, and the same sequence everywhere.
#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

pub struct Sampler {
    pub config: SamplerConfig,
    rng: Rng,
    recent: VecDeque<u32>,
    /// Reused candidate list: (token, logit).
    candidates: Vec<(u32, f32)>,
    constraint: Option<Constraint>,
    /// Reused logits with the constraint's mask applied.
    masked: Vec<f32>,
}

impl Sampler {
    pub fn new(config: SamplerConfig) -> Sampler {
        Sampler {
            rng: Rng::new(config.seed),
            config,
            recent: VecDeque::new(),
            candidates: Vec::new(),
            constraint: None,
            masked: Vec::new(),
        }
    }

    /// Constrain what is sampled from now on (`None`: no constraint).
    pub fn set_constraint(&mut self, constraint: Option<Constraint>) {
        self.constraint = constraint;
    }

    pub fn constraint(&self) -> Option<&Constraint> {
        self.constraint.as_ref()
    }

    pub fn constraint_mut(&mut self) -> Option<&mut Constraint> {
        self.constraint.as_mut()
    }

    /// Change settings mid-conversation; a new seed restarts the random sequence.
    pub fn set_config(&mut self, config: SamplerConfig) {
        if config.seed != self.config.seed {
            self.rng = Rng::new(config.seed);
        }
        self.config = config;
    }

    /// Remember a token for the penalties (prompt tokens and generated ones alike).
    pub fn accept(&mut self, token: u32) {
        if self.config.penalty_last_n == 0 {
            return;
        }
        self.recent.push_back(token);
        while self.recent.len() > self.config.penalty_last_n {
            self.recent.pop_front();
        }
    }

    /// Forget the last `n` accepted tokens: speculative decoding's drafts that were accepted
    /// (their rows judged after them) but not generated, because generation stopped first. (A
    /// token they pushed out of the penalty window stays out.)
    pub fn forget_recent(&mut self, n: usize) {
        let keep = self.recent.len().saturating_sub(n);
        self.recent.truncate(keep);
    }

    pub fn reset(&mut self) {
        self.recent.clear();
    }

    /// Whether the next token is simply the most likely one (greedy, no penalties, no
    /// constraint): then a backend may pick it where the logits live.
    pub fn is_plain_greedy(&self) -> bool {
        self.config.temperature <= 0.0
            && !self.config.penalties_active()
            && self.constraint.is_none()
    }

    /// Choose the next token from `logits`. Under a constraint, only the tokens it allows are
    /// candidates, and the token chosen is committed to it (the caller generates that token, or
    /// ends generation if it is an end-of-generation token).
    pub fn sample(&mut self, logits: &[f32]) -> crate::Result<u32> {
        self.sample_with(logits, None).map(|(token, _)| token)
    }

    /// As `sample`, where a drafter proposed `draft` for this position (speculative decoding):
    /// the draft is kept with the probability the sampler's chain gives it, else the token is
    /// drawn from the chain's distribution without the draft, renormalized. That is the
    /// speculative-sampling rule for a drafter that proposes one token, and it leaves the token
    /// distributed exactly as `sample` draws it (greedy: the draft is kept where it is the pick).
    /// Returns the token and whether it is the draft.
    pub fn sample_draft(&mut self, logits: &[f32], draft: u32) -> crate::Result<(u32, bool)> {
        self.sample_with(logits, Some(draft))
    }

    fn sample_with(&mut self, logits: &[f32], draft: Option<u32>) -> crate::Result<(u32, bool)> {
        let Some(constraint) = self.constraint.as_mut() else {
            return Ok(self.choose(logits, draft));
        };
        let mask = constraint.mask()?;
        let mut masked = std::mem::take(&mut self.masked);
        masked.clear();
        masked.resize(logits.len(), f32::NEG_INFINITY);
        mask.iter_set_entries(|i| {
            if let (Some(m), Some(&l)) = (masked.get_mut(i), logits.get(i)) {
                *m = l;
            }
        });
        let (token, kept) = self.choose(&masked, draft);
        self.masked = masked;
        if let Some(constraint) = self.constraint.as_mut() {
            constraint.commit(token)?;
        }
        Ok((token, kept))
    }

    /// The sampler chain over `logits` and a draw from what it leaves, or the decision on
    /// `draft` (`sample_draft`).
    fn choose(&mut self, logits: &[f32], draft: Option<u32>) -> (u32, bool) {
        let c = &self.config;
        let mut penalized: Option<Vec<(u32, f32)>> = None;
        if c.penalties_active() && !self.recent.is_empty() {
            let mut counts: HashMap<u32, u32> = HashMap::new();
            for &t in &self.recent {
                *counts.entry(t).or_default() += 1;
            }
            penalized = Some(
                counts
                    .into_iter()
                    .filter(|&(t, _)| (t as usize) < logits.len())
                    .map(|(t, n)| {
                        let mut l = logits[t as usize];
                        if c.repeat_penalty != 1.0 {
                            l = if l > 0.0 {
                                l / c.repeat_penalty
                            } else {
                                l * c.repeat_penalty
                            };
                        }
                        l -= n as f32 * c.frequency_penalty + c.presence_penalty;
                        (t, l)
                    })
                    .collect(),
            );
        }
        if c.temperature <= 0.0 {
            // One pass in id order, taking penalized values where they apply.
            let mut pen = penalized.unwrap_or_default();
            pen.sort_unstable_by_key(|p| p.0);
            let mut pen = pen.into_iter().peekable();
            let mut best = (0u32, f32::NEG_INFINITY);
            for (i, &l) in logits.iter().enumerate() {
                let l = match pen.peek() {
                    Some(&(t, pl)) if t as usize == i => {
                        pen.next();
                        pl
                    }
                    _ => l,
                };
                if l > best.1 {
                    best = (i as u32, l);
                }
            }
            return (best.0, draft == Some(best.0));
        }

        let cands = &mut self.candidates;
        cands.clear();
        cands.extend(logits.iter().enumerate().map(|(i, &l)| (i as u32, l)));
        if let Some(p) = &penalized {
            for &(t, l) in p {
                cands[t as usize].1 = l;
            }
        }
        let by_logit_desc = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1);
        if c.top_k > 0 && c.top_k < cands.len() {
            cands.select_nth_unstable_by(c.top_k - 1, by_logit_desc);
            cands.truncate(c.top_k);
        }
        cands.sort_unstable_by(by_logit_desc);

        // Probabilities at temperature 1 decide top-p and min-p, as in llama.cpp.
        let max = cands[0].1;
        let probs: Vec<f64> = cands
            .iter()
            .map(|&(_, l)| ((l - max) as f64).exp())
            .collect();
        let total: f64 = probs.iter().sum();
        let mut keep = cands.len();
        if c.top_p < 1.0 {
            let mut cum = 0.0;
            for (i, p) in probs.iter().enumerate() {
                cum += p / total;
                if cum >= c.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
        }
        if c.min_p > 0.0 {
            let floor = c.min_p as f64 * probs[0];
            keep = keep.min(probs.iter().take_while(|&&p| p >= floor).count().max(1));
        }
        cands.truncate(keep);

        let mut weights: Vec<f64> = cands
            .iter()
            .map(|&(_, l)| (((l - max) / c.temperature) as f64).exp())
            .collect();
        let mut total: f64 = weights.iter().sum();
        if let Some(d) = draft
            && let Some(i) = cands.iter().position(|&(t, _)| t == d)
        {
            if self.rng.next_f64() * total < weights[i] {
                return (d, true);
            }
            // Rejected: the rest of the distribution.
            total -= weights[i];
            weights[i] = 0.0;
        }
        let mut r = self.rng.next_f64() * total;
        for (&(t, _), w) in cands.iter().zip(&weights) {
            r -= w;
            if r < 0.0 {
                return (t, false);
            }
        }
        // Rounding left r ≥ 0: the last candidate that had any weight (never a masked one, nor
        // a rejected draft).
        let last = cands
            .iter()
            .zip(&weights)
            .rev()
            .find(|(_, w)| **w > 0.0)
            .map_or(cands[0].0, |(&(t, _), _)| t);
        (last, false)
    }
}

/// The most likely token of `logits` (the first on ties, as the backends' argmax and greedy
/// sampling pick), or None when its probability is below `p_min`.
pub fn most_likely(logits: &[f32], p_min: f32) -> Option<u32> {
    let (best, &top) = logits
        .iter()
        .enumerate()
        .reduce(|best, x| if x.1 > best.1 { x } else { best })?;
    if p_min > 0.0 {
        let sum: f64 = logits.iter().map(|&l| ((l - top) as f64).exp()).sum();
        if ((1.0 / sum) as f32) < p_min {
            return None;
        }
    }
    Some(best as u32)
}

/// The `n` most likely tokens of `logits` with their log-probabilities: (id, logit, logprob).
pub fn top_logprobs(logits: &[f32], n: usize) -> Vec<(u32, f32, f32)> {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &l| m.max(l));
    let log_total = (logits
        .iter()
        .map(|&l| ((l - max) as f64).exp())
        .sum::<f64>())
    .ln() as f32
        + max;
    let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
    let n = n.min(idx.len());
    if n == 0 {
        return Vec::new();
    }
    idx.select_nth_unstable_by(n - 1, |&a, &b| {
        logits[b as usize].total_cmp(&logits[a as usize])
    });
    idx.truncate(n);
    idx.sort_unstable_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
    idx.into_iter()
        .map(|t| (t, logits[t as usize], logits[t as usize] - log_total))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits() -> Vec<f32> {
        vec![1.0, 3.0, 2.5, -1.0, 0.0, 2.9]
    }

    #[test]
    fn greedy_takes_the_argmax() {
        let mut s = Sampler::new(SamplerConfig::greedy());
        assert_eq!(s.sample(&logits()).unwrap(), 1);
        assert_eq!(s.sample_draft(&logits(), 1).unwrap(), (1, true));
        assert_eq!(s.sample_draft(&logits(), 5).unwrap(), (1, false));
    }

    /// With probabilities 1/4 and 3/4, either draft is kept with its own probability, a
    /// rejected one gives way to the other token, and the token comes out as `sample` draws it.
    #[test]
    fn a_draft_is_kept_with_its_probability_and_the_token_distributed_as_without() {
        let config = SamplerConfig {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 7,
            ..SamplerConfig::default()
        };
        let two = [0.0, 3f32.ln()];
        let draws = 20_000;
        for draft in [0u32, 1] {
            let mut s = Sampler::new(config.clone());
            let (mut kept, mut ones) = (0, 0);
            for _ in 0..draws {
                let (token, was_kept) = s.sample_draft(&two, draft).unwrap();
                assert!(was_kept == (token == draft), "a rejected draft came back");
                kept += usize::from(was_kept);
                ones += usize::from(token == 1);
            }
            let kept = kept as f64 / draws as f64;
            let want = if draft == 1 { 0.75 } else { 0.25 };
            assert!((kept - want).abs() < 0.015, "draft {draft} kept {kept}");
            let ones = ones as f64 / draws as f64;
            assert!(
                (ones - 0.75).abs() < 0.015,
                "draft {draft}: token 1 at {ones}"
            );
        }
    }

    #[test]
    fn repetition_penalty_can_change_the_greedy_choice() {
        let mut s = Sampler::new(SamplerConfig {
            repeat_penalty: 1.5,
            ..SamplerConfig::greedy()
        });
        s.accept(1);
        // 3.0 / 1.5 = 2.0 falls below 2.9.
        assert_eq!(s.sample(&logits()).unwrap(), 5);
        let mut s = Sampler::new(SamplerConfig {
            presence_penalty: 0.2,
            ..SamplerConfig::greedy()
        });
        s.accept(1);
        assert_eq!(s.sample(&logits()).unwrap(), 5);
    }

    #[test]
    fn top_k_one_is_greedy_and_seeds_repeat() {
        let mut s = Sampler::new(SamplerConfig {
            top_k: 1,
            ..SamplerConfig::default()
        });
        for _ in 0..20 {
            assert_eq!(s.sample(&logits()).unwrap(), 1);
        }
        let draw = |seed| {
            let mut s = Sampler::new(SamplerConfig {
                seed,
                temperature: 1.5,
                top_k: 0,
                top_p: 1.0,
                min_p: 0.0,
                ..SamplerConfig::default()
            });
            (0..50)
                .map(|_| s.sample(&logits()).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn sampling_follows_the_distribution() {
        let mut s = Sampler::new(SamplerConfig {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 3,
            ..SamplerConfig::default()
        });
        let l = logits();
        let n = 20000;
        let mut counts = vec![0usize; l.len()];
        for _ in 0..n {
            counts[s.sample(&l).unwrap() as usize] += 1;
        }
        let total: f64 = l.iter().map(|&x| (x as f64).exp()).sum();
        for (i, &c) in counts.iter().enumerate() {
            let p = (l[i] as f64).exp() / total;
            let got = c as f64 / n as f64;
            assert!((got - p).abs() < 0.015, "token {i}: {got} vs {p}");
        }
    }

    #[test]
    fn min_p_and_top_p_cut_the_tail() {
        // min-p 0.5 keeps only tokens at least half as likely as the best: 3.0, 2.9, 2.5.
        let mut s = Sampler::new(SamplerConfig {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.5,
            seed: 1,
            ..SamplerConfig::default()
        });
        for _ in 0..500 {
            assert!([1, 2, 5].contains(&s.sample(&logits()).unwrap()));
        }
        let mut s = Sampler::new(SamplerConfig {
            temperature: 1.0,
            top_k: 0,
            top_p: 0.3,
            min_p: 0.0,
            seed: 1,
            ..SamplerConfig::default()
        });
        for _ in 0..500 {
            assert!([1, 5].contains(&s.sample(&logits()).unwrap()));
        }
    }

    #[test]
    fn logprobs_are_normalized() {
        let top = top_logprobs(&logits(), 3);
        assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 5, 2]);
        let all = top_logprobs(&logits(), 6);
        let sum: f64 = all.iter().map(|t| (t.2 as f64).exp()).sum();
        assert!((sum - 1.0).abs() < 1e-5);
    }
}
