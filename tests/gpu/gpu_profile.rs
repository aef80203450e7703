//! The GPU backend's greedy argmax on the device and its profile: greedy decoding that reads back
//! only the device's argmax picks the tokens the logits readback picks, and `--profile`'s counts
//! (dispatches, submits, readbacks, per-kernel calls) agree with what a decode step records.
//! Skips without a GPU adapter unless KILN_REQUIRE_GPU=1.

use crate::common;

use common::golden_run::argmax;
use common::gpu::gpu;
use kiln::backend::CoreOps;
use kiln::backend::wgpu::{DISPATCHES_PER_SUBMIT, FIRST_SUBMIT, WgpuBackend};
use kiln::model::{Model, ModelFile, Session, Tokenizer};

fn tiny() -> Option<(ModelFile, Model<WgpuBackend>)> {
    let mf = ModelFile::open(&common::fixture("models/tiny-llama.gguf")).unwrap();
    let model = Model::load(&mf, gpu()?).unwrap();
    Some((mf, model))
}

fn prompt(mf: &ModelFile) -> Vec<u32> {
    let tok = Tokenizer::from_model(mf).unwrap();
    tok.encode("The capital of France is", true).unwrap()
}

#[test]
fn greedy_argmax_on_the_device_picks_what_the_logits_pick() {
    let Some((mf, model)) = tiny() else { return };
    let prompt = prompt(&mf);
    let steps = 12;
    let mut host = Session::new(&model, prompt.len() + steps + 1).unwrap();
    let mut t = argmax(host.prefill(&prompt).unwrap());
    let mut by_logits = vec![t];
    for _ in 0..steps {
        t = argmax(host.decode(t).unwrap());
        by_logits.push(t);
    }
    let mut device = Session::new(&model, prompt.len() + steps + 1).unwrap();
    let mut t = argmax(device.prefill(&prompt).unwrap());
    let mut by_device = vec![t];
    model.backend.set_profiling(true);
    for _ in 0..steps {
        t = device
            .decode_argmax(t)
            .unwrap()
            .expect("the GPU backend picks the argmax on the device");
        assert!(device.logits().is_none());
        by_device.push(t);
    }
    assert_eq!(by_device, by_logits);
    let profile = model.backend.profile().unwrap();
    let count = |name: &str| profile.counters.iter().find(|c| c.0 == name).unwrap().1;
    assert_eq!(count("readbacks"), steps as u64, "one readback per token");
    let argmax_calls = profile
        .ops
        .iter()
        .find(|o| o.name == "argmax")
        .map(|o| o.calls);
    assert_eq!(argmax_calls, Some(steps as u64));
}

#[test]
fn profile_counts_what_a_decode_step_records() {
    let Some((mf, model)) = tiny() else { return };
    let prompt = prompt(&mf);
    let steps = 5u64;
    let mut s = Session::new(&model, prompt.len() + steps as usize + 1).unwrap();
    let mut t = argmax(s.prefill(&prompt).unwrap());
    let b = &model.backend;
    b.set_profiling(true);
    for _ in 0..steps {
        t = argmax(s.decode(t).unwrap());
    }
    let p = b.profile().unwrap();
    b.set_profiling(false);
    let count = |name: &str| p.counters.iter().find(|c| c.0 == name).unwrap().1;
    let calls = |name: &str| p.ops.iter().find(|o| o.name == name).map_or(0, |o| o.calls);
    let layers = model.config.n_layers as u64;
    let dispatches = count("dispatches");
    assert_eq!(
        dispatches % steps,
        0,
        "every step records the same dispatches"
    );
    let per_step = dispatches / steps;
    // Every dispatch is timed, once.
    assert_eq!(p.ops.iter().map(|o| o.calls).sum::<u64>(), dispatches);
    // Per layer: one attention (short context: no split), and one dispatch that ropes the query
    // and key and stores the key and value.
    assert_eq!(calls("attention"), layers * steps);
    assert_eq!(calls("rope_kv"), layers * steps);
    assert_eq!(calls("kv_store") + calls("rope"), 0);
    assert_eq!(calls("embed"), steps);
    // One readback per token (the logits), submitted with the chunks before it.
    assert_eq!(count("readbacks"), steps);
    // Chunks of 8, 16, 32, then 64 dispatches, the last one submitted with the readback.
    let (mut chunk, mut left, mut chunks) = (FIRST_SUBMIT as u64, per_step, 1);
    while left >= chunk {
        left -= chunk;
        chunks += 1;
        chunk = (2 * chunk).min(DISPATCHES_PER_SUBMIT as u64);
    }
    assert_eq!(
        count("submits"),
        chunks * steps,
        "{per_step} dispatches a step"
    );
    assert!(p.ops.iter().any(|o| o.time.as_nanos() > 0), "{:?}", p.ops);
}
