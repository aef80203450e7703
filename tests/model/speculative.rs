//! Speculative decoding (src/model/speculative.rs) on the CPU against decoding one token at a time
//! (tests/common/speculation.rs): on tiny files of every attention kind (plain, QK-norm, experts,
//! soft-capped with a sliding window, sinks), on SmolLM2 with the text's own n-grams drafting, and
//! not at all where a recurrent state cannot roll back.

use crate::common;

use common::golden_run::load;
use common::speculation::{
    REPEATING, greedy_run, speculation_matches_plain, verify_rows_match_decode,
};
use kiln::model::generate::Speculation;
use kiln::model::speculative::NgramDrafter;
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

#[test]
fn speculative_greedy_is_plain_greedy_on_smollm2() {
    let mf = ModelFile::open(&common::real_model(common::REAL_MODELS[0])).unwrap();
    // The text's own n-grams draft: the repeats of the prompt are guessed.
    let g = check(&mf, 32);
    assert!(
        g.accepted_tokens >= 8,
        "{} of {} n-gram drafts accepted",
        g.accepted_tokens,
        g.drafted_tokens
    );
}

/// A recurrent state cannot be rolled back by truncation: the drafter is not used, and generation
/// runs as without it; `verify` itself is an error.
#[test]
fn recurrent_models_generate_without_speculation() {
    let mf = ModelFile::open(&common::fixture("models/qwen35-tiny.gguf")).unwrap();
    let tok = Tokenizer::from_model(&mf).unwrap();
    let model = load(&mf, 2);
    let prompt = tok.encode(REPEATING, true).unwrap();
    let drafter = NgramDrafter::default();
    let spec = Speculation {
        drafter: &drafter,
        max_draft: 8,
    };
    let (plain, _) = greedy_run(&model, &tok, &prompt, 16, None);
    let (fast, _) = greedy_run(&model, &tok, &prompt, 16, Some(spec));
    assert_eq!(fast.tokens, plain.tokens);
    assert_eq!(fast.drafted_tokens, 0);
    let mut s = Session::new(&model, 64).unwrap();
    s.prefill(&prompt).unwrap();
    assert!(s.verify(&prompt[1..3]).is_err());
}
