//! Qwen3.5's recurrent state in a session: checkpoints let `truncate(n)` rebuild the state of
//! any prefix (n at, before and between checkpoints equals a fresh prefill of n tokens), and a
//! chat's second turn prefills only its new tokens, with the logits of a fresh prefill of the
//! whole conversation.

use crate::common;

use common::golden_run::load;
use kiln::backend::cpu::CpuBackend;
use kiln::model::chat::ChatTemplate;
use kiln::model::conversation::Conversation;
use kiln::model::recurrent::CHECKPOINT_INTERVAL;
use kiln::model::{Model, ModelFile, Session, Tokenizer};

const MODELS: [&str; 2] = ["qwen35-tiny.gguf", "qwen35moe-tiny.gguf"];

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

fn assert_close(a: &[f32], b: &[f32], what: &str) {
    let d = max_abs_diff(a, b);
    assert!(d <= 1e-3, "{what}: logits differ by {d:e}");
}

fn fresh(model: &Model<CpuBackend>, ids: &[u32]) -> Vec<f32> {
    let mut s = Session::new(model, ids.len() + 8).unwrap();
    s.prefill(ids).unwrap().to_vec()
}

/// The 961-token prompt plus a few decoded tokens holds checkpoints at 512 (interval), 961 (end
/// of prefill); truncating to each n and decoding the next token equals a fresh prefill.
#[test]
fn truncate_restores_the_nearest_checkpoint_and_recomputes() {
    let long = common::golden("prompts-long.json")["prompts"][0]
        .as_str()
        .unwrap()
        .to_string();
    for file in MODELS {
        let mf = ModelFile::open(&common::fixture(&format!("models/{file}"))).unwrap();
        let tok = Tokenizer::from_model(&mf).unwrap();
        let model = load(&mf, 2);
        let prompt = tok.encode(&long, true).unwrap();
        assert!(prompt.len() > CHECKPOINT_INTERVAL + 100, "{}", prompt.len());
        let mut all = prompt.clone();
        all.extend_from_slice(&[11, 29, 1782, 314, 260]);
        let p = prompt.len();

        // (n, the checkpoint it restarts from)
        let cases = [
            (p, p),                                     // at the end-of-prefill checkpoint
            (p + 2, p),                                 // between it and the end
            (p - 1, CHECKPOINT_INTERVAL),               // just before it
            (700, CHECKPOINT_INTERVAL),                 // between two checkpoints
            (CHECKPOINT_INTERVAL, CHECKPOINT_INTERVAL), // at the interval checkpoint
            (300, 0),                                   // before any: from the start
        ];
        for (n, from) in cases {
            let what = format!("{file}: truncate({n})");
            let mut s = Session::new(&model, all.len() + 8).unwrap();
            s.prefill(&prompt).unwrap();
            for &t in &all[p..] {
                s.decode(t).unwrap();
            }
            assert_eq!(s.checkpoints(), vec![CHECKPOINT_INTERVAL, p], "{what}");
            s.truncate(n).unwrap();
            assert_eq!(s.tokens(), &all[..n], "{what}");
            assert!(
                s.logits().is_none(),
                "{what}: truncating invalidates the logits"
            );
            assert_eq!(
                s.stats.recomputed_tokens,
                n - from,
                "{what}: tokens recomputed"
            );
            let after = s.decode(all[n]).unwrap().to_vec();
            assert_close(&after, &fresh(&model, &all[..=n]), &what);
        }
    }
}

/// Turn 2 of a chat prefills only the tokens the new turn adds, and its logits equal a fresh
/// prefill of the whole rendered conversation. When a reply was cut short (a stop string), the
/// next turn rolls back into it: the state is rebuilt from the checkpoint at the end of the
/// previous prompt, recomputing only the reply's kept tokens.
#[test]
fn chat_turn_two_prefills_only_the_new_tokens() {
    for file in MODELS {
        let mf = ModelFile::open(&common::fixture(&format!("models/{file}"))).unwrap();
        let tok = Tokenizer::from_model(&mf).unwrap();
        let model = load(&mf, 2);
        let template = ChatTemplate::for_model(&tok, mf.config.arch);
        let mut conv = Conversation::new(Session::new(&model, 512).unwrap(), template, None);

        let turn1 = conv.user_turn(&tok, "What is 2+2?", 64).unwrap();
        conv.session.prefill(&turn1.new_tokens).unwrap();
        let reply = "2 + 2 equals 4.";
        for t in tok.encode(reply, false).unwrap() {
            conv.session.decode(t).unwrap();
        }
        conv.session.checkpoint().unwrap();
        conv.assistant_reply(reply);
        let cached = conv.session.tokens().len();

        let turn2 = conv.user_turn(&tok, "And 3+3?", 64).unwrap();
        assert_eq!(
            conv.session.tokens().len(),
            cached,
            "{file}: nothing dropped"
        );
        assert_eq!(turn2.new_tokens.len(), turn2.total_tokens - cached);
        let before = conv.session.stats;
        let logits = conv.session.prefill(&turn2.new_tokens).unwrap().to_vec();
        let after = conv.session.stats;
        assert_eq!(
            after.prefill_tokens - before.prefill_tokens,
            turn2.new_tokens.len(),
            "{file}: turn 2 prefills only its new tokens"
        );
        assert_eq!(after.recomputed_tokens, 0, "{file}: nothing recomputed");
        let d = max_abs_diff(&logits, &fresh(&model, conv.session.tokens()));
        eprintln!(
            "{file}: turn 2 prefilled {} of {} tokens; logits vs fresh prefill: max |d| {d:e}",
            turn2.new_tokens.len(),
            turn2.total_tokens
        );
        assert!(d <= 1e-3, "{file}: turn 2 vs fresh prefill: {d:e}");

        // Turn 3 after a reply that was cut: the session holds tokens past the kept text.
        let prompt2_end = conv.session.tokens().len();
        for t in tok.encode("6, and then some more words", false).unwrap() {
            conv.session.decode(t).unwrap();
        }
        conv.session.checkpoint().unwrap();
        conv.assistant_reply("6, and");
        let turn3 = conv.user_turn(&tok, "Thanks.", 64).unwrap();
        let shared = turn3.total_tokens - turn3.new_tokens.len();
        assert!(
            shared > prompt2_end && shared < prompt2_end + 6,
            "{file}: {shared}"
        );
        assert_eq!(
            conv.session.stats.recomputed_tokens,
            shared - prompt2_end,
            "{file}: recomputed from the end of turn 2's prompt"
        );
        let logits = conv.session.prefill(&turn3.new_tokens).unwrap().to_vec();
        assert_close(
            &logits,
            &fresh(&model, conv.session.tokens()),
            &format!("{file}: turn 3"),
        );
    }
}
