//! Speculative decoding: a cheap drafter proposes the next few tokens, the model checks them all in
//! one verify pass (`Session::verify`, which reads the weights once for every row), and each
//! drafted token the model would have picked itself is accepted for the price of a row. The output
//! is the output without speculation: greedy keeps a drafted token only where it is the argmax of
//! the row before it, and replaces the first miss by that argmax; sampling keeps it with the
//! probability the sampler gives it and otherwise draws from the rest (`Sampler::sample_draft`),
//! so each token is distributed as without a drafter.
//!
//! Drafters sit behind `Drafter`: `NgramDrafter` drafts from the text itself (llama.cpp's
//! `ngram-simple`, "prompt lookup"): where the last few tokens appeared before in the context, the
//! tokens that followed them then are the draft — quotations, edits and code repeat.
//! `NgramMapDrafter` (llama.cpp's `ngram-map-k`) keys on a longer fixed n-gram and remembers, per
//! key, how much of its last draft was kept.
//! `ModelDrafter` drafts with a smaller model of the same vocabulary (llama.cpp's `draft-simple`).

use std::cell::RefCell;

use super::session::Session;
use super::tokenizer::Tokenizer;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::sampler::most_likely;

/// Proposes tokens to follow a context.
pub trait Drafter {
    /// Up to `max` tokens likely to follow `context` (none when it has no guess).
    fn draft(&self, context: &[u32], max: usize) -> Result<Vec<u32>>;

    /// How many tokens of the last draft the model kept (a drafter may learn from it).
    fn accepted(&self, _n: usize) {}
}

/// Drafts from the context's own n-grams: the longest suffix of `max_ngram` down to `min_ngram`
/// tokens that occurred earlier, and what followed its latest earlier occurrence.
#[derive(Debug, Clone, Copy)]
pub struct NgramDrafter {
    pub min_ngram: usize,
    pub max_ngram: usize,
}

impl Default for NgramDrafter {
    fn default() -> Self {
        NgramDrafter {
            min_ngram: 2,
            max_ngram: 4,
        }
    }
}

impl NgramDrafter {
    /// Where the context's longest repeated suffix (`max_ngram` down to `min_ngram` tokens)
    /// occurred last before: the index of the token that followed it then.
    fn follows_repeat(&self, context: &[u32]) -> Option<usize> {
        let len = context.len();
        for n in (self.min_ngram.max(1)..=self.max_ngram).rev() {
            if len <= n {
                continue;
            }
            let suffix = &context[len - n..];
            // The latest earlier occurrence, not overlapping the suffix itself.
            let found = (0..len - n)
                .rev()
                .find(|&start| &context[start..start + n] == suffix);
            if let Some(start) = found {
                return Some(start + n);
            }
        }
        None
    }
}

impl Drafter for NgramDrafter {
    fn draft(&self, context: &[u32], max: usize) -> Result<Vec<u32>> {
        Ok(match self.follows_repeat(context) {
            Some(from) => context[from..(from + max).min(context.len())].to_vec(),
            None => Vec::new(),
        })
    }
}

/// kiln's own `ngram-edit`: `ngram-simple` that keeps its place in what the reply copies and
/// follows an edit of it. Once a repeated suffix has found the source, the drafter moves along
/// it token by token instead of searching again (after a renamed variable the latest earlier
/// occurrence of the suffix is the reply's own earlier use of the new name, whose continuation
/// is wrong). Where the reply leaves the source and picks it up again a few tokens further on,
/// the drafter learns the replacement (these source tokens became those) and drafts it wherever
/// the source has those tokens again; a replacement the reply does not follow is forgotten.
/// Off the source it drafts as `ngram-simple`, edits applied, and follows that draft's source.
#[derive(Default)]
pub struct EditDrafter {
    state: RefCell<EditState>,
}

/// The most source tokens an edit replaces, and the most tokens it replaces them with: past
/// these the reply has left the source, not edited it.
const EDIT_MAX_FROM: usize = 8;
const EDIT_MAX_TO: usize = 6;
/// The most edits remembered (the oldest go first).
const EDIT_MAX_KEPT: usize = 64;

#[derive(Default)]
struct EditState {
    /// The context the last draft followed; one that does not extend it starts afresh.
    seen: Vec<u32>,
    /// Where in the context the reply copies from, while it does.
    place: Option<CopyPlace>,
    /// Where the reply last left its source, while it may come back: the source index it left
    /// at, and the context index of the reply's first token that differed.
    left: Option<(usize, usize)>,
    /// Replacements seen, applied to every later copy of their source tokens.
    edits: Vec<Edit>,
}

struct Edit {
    from: Vec<u32>,
    to: Vec<u32>,
}

#[derive(Debug, Clone, Copy)]
struct CopyPlace {
    /// Context index of the next source token to copy (past an edit being replaced).
    source: usize,
    /// The edit whose replacement is being copied, and how many of its tokens were.
    replacing: Option<(usize, usize)>,
}

impl CopyPlace {
    fn at(source: usize) -> Self {
        CopyPlace {
            source,
            replacing: None,
        }
    }

    /// The token the copy expects next, from the source before `end`, entering an edit's
    /// replacement where the source has the edit's tokens; None past `end`.
    fn expected(&mut self, context: &[u32], end: usize, edits: &[Edit]) -> Option<u32> {
        loop {
            if let Some((e, done)) = self.replacing {
                if let Some(&t) = edits.get(e).and_then(|edit| edit.to.get(done)) {
                    return Some(t);
                }
                self.replacing = None;
            }
            let rest = context.get(self.source..end)?;
            match edits.iter().position(|e| rest.starts_with(&e.from)) {
                Some(e) => {
                    self.source += edits[e].from.len();
                    self.replacing = Some((e, 0));
                }
                None => return rest.first().copied(),
            }
        }
    }

    /// Past the token `expected` gave.
    fn advance(&mut self) {
        match &mut self.replacing {
            Some((_, done)) => *done += 1,
            None => self.source += 1,
        }
    }
}

impl EditState {
    /// Follow `context`'s tokens that the last call did not see.
    fn follow(&mut self, context: &[u32]) {
        let common = self
            .seen
            .iter()
            .zip(context)
            .take_while(|(a, b)| a == b)
            .count();
        if common < self.seen.len() {
            *self = EditState::default();
        }
        for i in self.seen.len()..context.len() {
            self.step(context, i);
        }
        self.seen.extend_from_slice(&context[self.seen.len()..]);
    }

    /// Follow the reply's token `context[i]`.
    fn step(&mut self, context: &[u32], i: usize) {
        let token = context[i];
        if let Some(mut place) = self.place {
            if place.expected(context, i, &self.edits) == Some(token) {
                place.advance();
                self.place = Some(place);
                return;
            }
            self.place = None;
            // The reply leaves the source; inside a replacement, the edit was wrong.
            let left = match place.replacing.filter(|&(e, _)| e < self.edits.len()) {
                Some((e, done)) => {
                    let start = place.source - self.edits[e].from.len();
                    self.edits.remove(e);
                    (start, i - done)
                }
                None => (place.source, i),
            };
            self.left.get_or_insert(left);
        }
        // Back on the source it left: the first of its next few tokens that this one is.
        if let Some((source, out)) = self.left {
            let last = (source + EDIT_MAX_FROM + 1).min(out);
            if let Some(j) = (source..last).find(|&j| context[j] == token) {
                self.learn(&context[source..j], &context[out..i]);
                self.place = Some(CopyPlace::at(j + 1));
                self.left = None;
            } else if i - out >= EDIT_MAX_TO {
                self.left = None;
            }
        }
    }

    fn learn(&mut self, from: &[u32], to: &[u32]) {
        if from.is_empty() || from == to {
            return;
        }
        self.edits.retain(|e| e.from != from);
        if self.edits.len() == EDIT_MAX_KEPT {
            self.edits.remove(0);
        }
        self.edits.push(Edit {
            from: from.to_vec(),
            to: to.to_vec(),
        });
    }

    /// Up to `max` tokens copied from `place`, edits applied.
    fn copy(&self, mut place: CopyPlace, context: &[u32], max: usize) -> Vec<u32> {
        let mut draft = Vec::with_capacity(max);
        while draft.len() < max
            && let Some(t) = place.expected(context, context.len(), &self.edits)
        {
            draft.push(t);
            place.advance();
        }
        draft
    }
}

impl Drafter for EditDrafter {
    fn draft(&self, context: &[u32], max: usize) -> Result<Vec<u32>> {
        let mut state = self.state.borrow_mut();
        state.follow(context);
        if state.place.is_none() {
            state.place = NgramDrafter::default()
                .follows_repeat(context)
                .map(CopyPlace::at);
        }
        Ok(match state.place {
            Some(place) => state.copy(place, context, max),
            None => Vec::new(),
        })
    }
}

/// llama.cpp's `ngram-map-k`: the key is the context's last `size_n` tokens; where the key occurred
/// before with `size_m` tokens after it, its latest occurrence's following tokens are the draft,
/// as many as were kept the last time this key drafted (all `size_m` the first time).
pub struct NgramMapDrafter {
    pub size_n: usize,
    pub size_m: usize,
    /// Per key drafted from: the tokens kept of its last draft.
    kept: RefCell<std::collections::HashMap<Vec<u32>, usize>>,
    /// The key of the last draft, until `accepted` says how it went.
    last: RefCell<Option<Vec<u32>>>,
}

impl NgramMapDrafter {
    /// llama.cpp's defaults: keys of 12 tokens, drafts of up to 48.
    pub fn new(size_n: usize, size_m: usize) -> Self {
        NgramMapDrafter {
            size_n: size_n.max(1),
            size_m,
            kept: Default::default(),
            last: RefCell::new(None),
        }
    }
}

impl Drafter for NgramMapDrafter {
    fn draft(&self, context: &[u32], max: usize) -> Result<Vec<u32>> {
        *self.last.borrow_mut() = None;
        let (len, n, m) = (context.len(), self.size_n, self.size_m);
        // As llama.cpp: a key's occurrence counts where a whole m-gram and one more token follow
        // it before the key's last token, and not at position 0 (its "no match").
        if len < 2 * n + m {
            return Ok(Vec::new());
        }
        let key = &context[len - n..];
        let Some(at) = (1..len - n - m - 1)
            .rev()
            .find(|&j| &context[j..j + n] == key)
        else {
            return Ok(Vec::new());
        };
        let kept = self.kept.borrow().get(key).copied().unwrap_or(m);
        let take = kept.min(m).min(max);
        *self.last.borrow_mut() = Some(key.to_vec());
        Ok(context[at + n..at + n + take].to_vec())
    }

    fn accepted(&self, n: usize) {
        if let Some(key) = self.last.borrow_mut().take() {
            self.kept.borrow_mut().insert(key, n);
        }
    }
}

/// Drafts with a smaller model of the same vocabulary (llama.cpp's `draft-simple`): its own
/// session follows the context — what it already holds is kept up to the first token that
/// differs, so accepted drafts and the prompt are not run again — and it decodes greedily.
pub struct ModelDrafter<'m, B: Backend> {
    session: RefCell<Session<'m, B>>,
    /// Drafting stops where the draft model's probability of its own pick falls below this
    /// (llama.cpp's `--spec-draft-p-min`; 0: never).
    p_min: f32,
}

impl<'m, B: Backend> ModelDrafter<'m, B> {
    /// A drafter running in `session` (fresh or not: it follows the context it is given).
    pub fn new(session: Session<'m, B>, p_min: f32) -> Self {
        ModelDrafter {
            session: RefCell::new(session),
            p_min,
        }
    }
}

impl<B: Backend> Drafter for ModelDrafter<'_, B> {
    fn draft(&self, context: &[u32], max: usize) -> Result<Vec<u32>> {
        let mut s = self.session.borrow_mut();
        let vocab = s.model().config.vocab_size;
        // A context past the draft's room, or holding a token the draft model does not have (its
        // vocabulary may be a little smaller), gets no draft rather than an error.
        if max == 0
            || context.is_empty()
            || context.len() + max > s.ctx()
            || context.iter().any(|&t| t as usize >= vocab)
        {
            return Ok(Vec::new());
        }
        let common = s
            .tokens()
            .iter()
            .zip(context)
            .take_while(|(a, b)| a == b)
            .count();
        // The draft starts from the logits after the whole context: unless the session ends
        // exactly there with them, at least the context's last token runs.
        let at_end = common == context.len() && s.tokens().len() == common && s.logits().is_some();
        let keep = if at_end {
            common
        } else {
            common.min(context.len() - 1)
        };
        s.truncate(keep)?;
        if keep < context.len() {
            s.prefill(&context[keep..])?;
        }
        let mut draft = Vec::with_capacity(max);
        let mut next = most_likely(s.logits().ok_or(Error::EmptyPrompt)?, self.p_min);
        while let Some(token) = next {
            draft.push(token);
            if draft.len() == max {
                break;
            }
            next = if self.p_min > 0.0 {
                most_likely(s.decode(token)?, self.p_min)
            } else {
                match s.decode_argmax(token)? {
                    Some(t) => Some(t),
                    None => most_likely(s.logits().ok_or(Error::EmptyPrompt)?, 0.0),
                }
            };
        }
        Ok(draft)
    }
}

/// Token ids from which the vocabularies of a model and its draft must spell every token alike
/// (llama.cpp's `SPEC_VOCAB_CHECK_START_TOKEN_ID`: the first few are often special tokens that
/// differ harmlessly).
const VOCAB_CHECK_START: usize = 5;
/// The most two vocabularies' sizes may differ (llama.cpp's `SPEC_VOCAB_MAX_SIZE_DIFFERENCE`).
const VOCAB_MAX_SIZE_DIFFERENCE: usize = 128;

/// Whether a draft model's vocabulary can draft for the target's, as llama.cpp checks it: the same
/// kind of tokenizer, the same BOS where one is added and the same EOS, sizes within 128 of each
/// other, and the same spelling of every token both have from id 5 on. The error names what
/// differs.
pub fn check_draft_vocabulary(target: &Tokenizer, draft: &Tokenizer) -> Result<()> {
    let differ = |what: String| {
        Err(Error::Usage(format!(
            "the draft model cannot draft for this model: {what}"
        )))
    };
    if std::mem::discriminant(&target.kind) != std::mem::discriminant(&draft.kind) {
        return differ(format!(
            "its tokenizer is {:?}, the model's {:?}",
            draft.kind, target.kind
        ));
    }
    if target.add_bos != draft.add_bos || (target.add_bos && target.bos != draft.bos) {
        return differ(format!(
            "the beginning-of-text token differs (model: {}, draft: {})",
            describe_bos(target),
            describe_bos(draft)
        ));
    }
    if target.eos != draft.eos {
        return differ(format!(
            "the end-of-text token differs (model: {:?}, draft: {:?})",
            target.eos, draft.eos
        ));
    }
    let (nt, nd) = (target.vocab_size(), draft.vocab_size());
    if nt.abs_diff(nd) > VOCAB_MAX_SIZE_DIFFERENCE {
        return differ(format!(
            "its vocabulary has {nd} tokens, the model's {nt} (at most {VOCAB_MAX_SIZE_DIFFERENCE} apart)"
        ));
    }
    for id in VOCAB_CHECK_START..nt.min(nd) {
        let (a, b) = (target.piece(id as u32), draft.piece(id as u32));
        if a != b {
            return differ(format!(
                "token {id} is {:?} in the model and {:?} in the draft",
                a.unwrap_or_default(),
                b.unwrap_or_default()
            ));
        }
    }
    Ok(())
}

fn describe_bos(tok: &Tokenizer) -> String {
    match (tok.add_bos, tok.bos) {
        (true, Some(id)) => format!("{id}, added"),
        (true, None) => "added, none set".into(),
        (false, _) => "not added".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ngrams_draft_what_followed_the_latest_earlier_occurrence() {
        let d = NgramDrafter::default();
        // "1 2 3 4 5 ... 1 2 3" → 4 5 6 follow the earlier "2 3" (the 3-gram "1 2 3" too).
        let ctx = [1, 2, 3, 4, 5, 6, 9, 1, 2, 3];
        assert_eq!(d.draft(&ctx, 3).unwrap(), [4, 5, 6]);
        assert_eq!(d.draft(&ctx, 10).unwrap(), [4, 5, 6, 9, 1, 2, 3]);
        // The latest occurrence wins: "7 8" was followed by 1, then by 2.
        assert_eq!(d.draft(&[7, 8, 1, 7, 8, 2, 7, 8], 1).unwrap(), [2]);
        // The longest matching suffix wins over a later shorter one.
        assert_eq!(d.draft(&[5, 6, 7, 1, 9, 6, 7, 2, 5, 6, 7], 1).unwrap(), [1]);
        // Nothing repeats: no draft.
        assert!(d.draft(&[1, 2, 3, 4], 4).unwrap().is_empty());
        assert!(d.draft(&[1], 4).unwrap().is_empty());
    }

    /// Generate `reply` after `prompt` as greedy speculation does: each pass drafts after the
    /// context, keeps the draft up to its first miss, and the model's own token follows. Returns
    /// the passes and the drafted tokens kept.
    fn passes(d: &dyn Drafter, prompt: &[u32], reply: &[u32], max: usize) -> (usize, usize) {
        let (mut done, mut passes, mut kept) = (0, 0, 0);
        while done < reply.len() {
            let mut context = prompt.to_vec();
            context.extend_from_slice(&reply[..done + 1]);
            let draft = d.draft(&context, max).unwrap();
            let n = draft
                .iter()
                .zip(&reply[done + 1..])
                .take_while(|(a, b)| a == b)
                .count();
            passes += 1;
            kept += n;
            done += n + 1;
        }
        (passes, kept)
    }

    /// A function copied with its variable 7 renamed to the two tokens 70 71: the edit drafter
    /// learns the rename at its first use and drafts it at every later one; ngram-simple misses
    /// after each (its latest earlier match is the reply's own earlier use of the new name).
    #[test]
    fn the_edit_drafter_drafts_a_rename_after_its_first_use() {
        let body: Vec<u32> = (0..12)
            .flat_map(|line| [1, 7, 2, 100 + line, 7, 3, 200 + line, 4])
            .collect();
        let mut prompt = vec![50, 7, 51, 70, 71, 52];
        prompt.extend_from_slice(&body);
        let reply: Vec<u32> = body
            .iter()
            .flat_map(|&t| if t == 7 { vec![70, 71] } else { vec![t] })
            .collect();
        let (edit_passes, edit_kept) = passes(&EditDrafter::default(), &prompt, &reply, 16);
        let (simple_passes, _) = passes(&NgramDrafter::default(), &prompt, &reply, 16);
        // 119 tokens: 16 a pass once the rename is learned, a few more at its first use.
        assert!(edit_passes <= 12, "ngram-edit: {edit_passes} passes");
        assert_eq!(edit_kept + edit_passes, reply.len());
        assert!(
            simple_passes > 2 * edit_passes,
            "ngram-simple: {simple_passes}"
        );
    }

    /// An edit the reply stops following is forgotten; a context that does not extend the last
    /// one starts afresh; a reply that leaves its source for good drafts as ngram-simple.
    #[test]
    fn the_edit_drafter_forgets_what_the_reply_does_not_follow() {
        let d = EditDrafter::default();
        let source = [1, 2, 9, 3, 4, 9, 5, 6, 9, 8];
        let mut context = vec![0];
        context.extend_from_slice(&source);
        // The reply copies 1 2, writes 7 for 9, then follows with 3 4: 9 → 7 is learned.
        context.extend_from_slice(&[0, 1]);
        assert_eq!(d.draft(&context, 3).unwrap(), [2, 9, 3]);
        context.extend_from_slice(&[2, 7, 3]);
        assert_eq!(d.draft(&context, 4).unwrap(), [4, 7, 5, 6]);
        // It writes 9 after all: the edit goes, and the copy goes on from the source.
        context.extend_from_slice(&[4, 9]);
        assert_eq!(d.draft(&context, 4).unwrap(), [5, 6, 9, 8]);
        // Another context: no place, no edits (the suffix 6 9 last occurred before 8).
        let fresh = [1, 2, 9, 3, 5, 6, 9];
        assert_eq!(
            d.draft(&fresh, 4).unwrap(),
            NgramDrafter::default().draft(&fresh, 4).unwrap()
        );
        // Far off the source: ngram-simple's draft, then nothing once nothing repeats.
        let mut off = fresh.to_vec();
        off.extend(40..60);
        assert!(d.draft(&off, 4).unwrap().is_empty());
    }

    #[test]
    fn ngram_map_drafts_after_the_key_as_much_as_was_kept() {
        let d = NgramMapDrafter::new(2, 3);
        // The key "1 2" occurred at 1 with 3 tokens after it: 7 8 9.
        let ctx = [0, 1, 2, 7, 8, 9, 5, 5, 1, 2];
        assert_eq!(d.draft(&ctx, 10).unwrap(), [7, 8, 9]);
        assert_eq!(d.draft(&ctx, 2).unwrap(), [7, 8]);
        // One of that key's draft kept: the next draft for it is one long.
        d.accepted(1);
        assert_eq!(d.draft(&ctx, 10).unwrap(), [7]);
        // An occurrence too late for a whole m-gram after it does not count.
        assert!(
            d.draft(&[5, 5, 5, 5, 1, 2, 7, 8, 1, 2], 3)
                .unwrap()
                .is_empty()
        );
        assert!(d.draft(&[1, 2, 7, 8, 9, 5, 5, 1, 2], 3).unwrap().is_empty());
        // Too short a context.
        assert!(d.draft(&[1, 2, 1, 2], 3).unwrap().is_empty());
    }

    #[test]
    fn the_draft_stops_where_its_pick_is_unlikely() {
        assert_eq!(most_likely(&[0.0, 3.0, 1.0], 0.0), Some(1));
        // softmax(0, 3, 1)[1] = 0.84
        assert_eq!(most_likely(&[0.0, 3.0, 1.0], 0.8), Some(1));
        assert_eq!(most_likely(&[0.0, 3.0, 1.0], 0.9), None);
        assert_eq!(most_likely(&[], 0.0), None);
        assert_eq!(most_likely(&[1.0, 2.0, 2.0], 0.0), Some(1));
    }
}
