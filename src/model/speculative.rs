//! Speculative decoding: a cheap drafter proposes the next few tokens, the model checks them all in
//! one verify pass (`Session::verify`, which reads the weights once for every row), and each
//! drafted token the model would have picked itself is accepted for the price of a row. Greedy
//! output is the output without speculation: a drafted token is kept only where it is the argmax
//! of the row before it, and the first miss is replaced by that argmax.
//!
//! Drafters sit behind `Drafter`. The one here drafts from the text itself (llama.cpp's
//! `ngram-simple`, "prompt lookup"): where the last few tokens appeared before in the context, the
//! tokens that followed them then are the draft — quotations, edits and code repeat.

/// Proposes tokens to follow a context.
pub trait Drafter {
    /// Up to `max` tokens likely to follow `context` (none when it has no guess).
    fn draft(&self, context: &[u32], max: usize) -> Vec<u32>;
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

impl Drafter for NgramDrafter {
    fn draft(&self, context: &[u32], max: usize) -> Vec<u32> {
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
                let from = start + n;
                let to = (from + max).min(len);
                return context[from..to].to_vec();
            }
        }
        Vec::new()
    }
}

/// How many drafted tokens the model accepts given the argmax after each verify row: `argmax[i]`
/// is the model's pick after row i, where row 0 is the last accepted token and row i + 1 is
/// `draft[i]`. Returns the accepted count and the token that follows them (the model's own pick
/// at the first miss, or after the last drafted token when all are accepted).
pub fn accept(draft: &[u32], argmax: &[u32]) -> (usize, u32) {
    debug_assert_eq!(argmax.len(), draft.len() + 1);
    let accepted = draft.iter().zip(argmax).take_while(|(d, a)| d == a).count();
    (accepted, argmax[accepted])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ngrams_draft_what_followed_the_latest_earlier_occurrence() {
        let d = NgramDrafter::default();
        // "1 2 3 4 5 ... 1 2 3" → 4 5 6 follow the earlier "2 3" (the 3-gram "1 2 3" too).
        let ctx = [1, 2, 3, 4, 5, 6, 9, 1, 2, 3];
        assert_eq!(d.draft(&ctx, 3), [4, 5, 6]);
        assert_eq!(d.draft(&ctx, 10), [4, 5, 6, 9, 1, 2, 3]);
        // The latest occurrence wins: "7 8" was followed by 1, then by 2.
        assert_eq!(d.draft(&[7, 8, 1, 7, 8, 2, 7, 8], 1), [2]);
        // The longest matching suffix wins over a later shorter one.
        assert_eq!(d.draft(&[5, 6, 7, 1, 9, 6, 7, 2, 5, 6, 7], 1), [1]);
        // Nothing repeats: no draft.
        assert!(d.draft(&[1, 2, 3, 4], 4).is_empty());
        assert!(d.draft(&[1], 4).is_empty());
    }

    #[test]
    fn acceptance_stops_at_the_first_miss_and_takes_the_models_token() {
        assert_eq!(accept(&[4, 5, 6], &[4, 5, 6, 7]), (3, 7));
        assert_eq!(accept(&[4, 5, 6], &[4, 9, 6, 7]), (1, 9));
        assert_eq!(accept(&[4, 5, 6], &[8, 5, 6, 7]), (0, 8));
        assert_eq!(accept(&[], &[3]), (0, 3));
    }
}
