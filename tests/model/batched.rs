//! Continuous batching on the CPU (tests/common/batching.rs): a forward call over several
//! sequences gives each the logits it gets alone, and sequences generating on threads of their
//! own through one batcher give the tokens each gives alone, on tiny files of every attention kind
//! (plain, QK-norm, experts, soft-capped with a sliding window, sinks, query temperature, partial
//! RoPE, shared KV layers, Qwen3.5's recurrent state) and on SmolLM2.

use crate::common;

use common::batching::{forward_batch_matches_alone, threads_match_alone};
use common::golden_run::load;
use kiln::model::{ModelFile, Tokenizer};

const PROMPTS: [&str; 4] = [
    "The capital of France is",
    "one two three four five, one two three four five, one two",
    "Hi",
    "In a hole in the ground there lived a hobbit. Not a nasty, dirty, wet hole",
];

fn check(mf: &ModelFile, what: &str) {
    let tok = Tokenizer::from_model(mf).unwrap();
    let model = load(mf, 2);
    let prompts: Vec<Vec<u32>> = PROMPTS
        .iter()
        .map(|p| tok.encode(p, true).unwrap())
        .collect();
    forward_batch_matches_alone(&model, &prompts, 6, 1e-4, what);
    let (steps, calls) = threads_match_alone(&model, &tok, &prompts, 12, what);
    // The sequences met: fewer steps than calls.
    assert!(steps < calls, "{what}: {steps} steps for {calls} calls");
}

#[test]
fn batched_sequences_match_each_alone_on_the_tiny_models() {
    for m in [
        "tiny-llama.gguf",
        "tiny-qwen3.gguf",
        "qwen3moe-tiny.gguf",
        "gemma2-tiny.gguf",
        "gemma3-tiny.gguf",
        "gemma4-tiny.gguf",
        "gptoss-tiny.gguf",
        "mistral3-tiny.gguf",
        "phi3-tiny.gguf",
        "glm4-tiny.gguf",
        "qwen35-tiny.gguf",
    ] {
        let mf = ModelFile::open(&common::fixture(&format!("models/{m}"))).unwrap();
        check(&mf, m);
    }
}

#[test]
fn batched_sequences_match_each_alone_on_smollm2() {
    let mf = ModelFile::open(&common::real_model(common::REAL_MODELS[0])).unwrap();
    check(&mf, "SmolLM2");
}
