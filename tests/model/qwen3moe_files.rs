//! Qwen3 MoE files as converters and llama.cpp allow them: variants llama.cpp accepts run exactly
//! like the fixture (fused `ffn_gate_up_exps`; no `expert_feed_forward_length`, the width then
//! `feed_forward_length / expert_used_count`), and inconsistent files are errors that name the
//! key or tensor.

use crate::common;

use common::gguf_writer::GgufWriter;
use common::synth::{copy_of, open};
use gguf_rs_lib::format::metadata::MetadataValue as V;
use kiln::gguf::GgufFile;
use kiln::model::{Model, ModelFile, Session};

const FILE: &str = "qwen3moe-tiny.gguf";
const PROMPT: [u32; 6] = [504, 3458, 282, 4649, 314, 1345];
const LAYERS: usize = 4;

fn fixture() -> GgufFile {
    GgufFile::open(&common::fixture(&format!("models/{FILE}"))).unwrap()
}

fn logits(mf: &ModelFile) -> Vec<f32> {
    let model: Model<_> = common::golden_run::load(mf, 1);
    let mut s = Session::new(&model, 16).unwrap();
    s.prefill(&PROMPT).unwrap();
    s.decode(28).unwrap().to_vec()
}

fn load_error(w: &GgufWriter) -> String {
    let g = GgufFile::from_bytes(std::path::Path::new("variant.gguf"), &w.to_bytes()).unwrap();
    match ModelFile::from_gguf(g).and_then(|mf| {
        Model::load(&mf, kiln::backend::cpu::CpuBackend::new(1)?)?;
        Ok(())
    }) {
        Ok(()) => panic!("an inconsistent file loaded"),
        Err(e) => e.to_string(),
    }
}

fn bytes_of(w: &GgufWriter, name: &str) -> Vec<u8> {
    w.tensors.iter().find(|t| t.0 == name).unwrap().3.clone()
}

#[test]
fn converter_variants_run_like_the_fixture() {
    let want = logits(&ModelFile::from_gguf(fixture()).unwrap());

    // Fused gate and up experts: per expert, its gate rows then its up rows.
    let mut w = copy_of(&fixture(), str::to_string);
    let (h, eff, n_exp) = (64usize, 32usize, 8usize);
    for i in 0..LAYERS {
        let (g, u) = (
            format!("blk.{i}.ffn_gate_exps.weight"),
            format!("blk.{i}.ffn_up_exps.weight"),
        );
        let (gate, up) = (bytes_of(&w, &g), bytes_of(&w, &u));
        let block = eff * h * 4;
        let fused: Vec<u8> = (0..n_exp)
            .flat_map(|e| {
                let r = e * block..(e + 1) * block;
                [gate[r.clone()].to_vec(), up[r].to_vec()].concat()
            })
            .collect();
        w.tensors.retain(|t| t.0 != g && t.0 != u);
        w.tensor(
            &format!("blk.{i}.ffn_gate_up_exps.weight"),
            0,
            &[h as u64, 2 * eff as u64, n_exp as u64],
            fused,
        );
    }
    assert_eq!(
        logits(&open("fused.gguf", &w)),
        want,
        "fused gate_up experts"
    );

    // Without `expert_feed_forward_length`, llama.cpp takes feed_forward_length / used experts.
    let mut w = copy_of(&fixture(), str::to_string);
    w.kv.retain(|(k, _)| k != "qwen3moe.expert_feed_forward_length");
    w.kv("qwen3moe.feed_forward_length", V::U32(64));
    assert_eq!(
        logits(&open("no-expert-width.gguf", &w)),
        want,
        "expert width from feed_forward_length"
    );
}

#[test]
fn inconsistent_files_are_errors_naming_the_key_or_tensor() {
    type Change = Box<dyn Fn(&mut GgufWriter)>;
    let cases: Vec<(&str, Change, &[&str])> = vec![
        (
            "no experts",
            Box::new(|w| w.kv.retain(|(k, _)| k != "qwen3moe.expert_count")),
            &["qwen3moe.expert_count"],
        ),
        (
            "zero experts",
            Box::new(|w| {
                w.kv("qwen3moe.expert_count", V::U32(0));
            }),
            &["qwen3moe.expert_count"],
        ),
        (
            "more experts used than there are",
            Box::new(|w| {
                w.kv("qwen3moe.expert_used_count", V::U32(9));
            }),
            &["qwen3moe.expert_used_count"],
        ),
        (
            "no expert_used_count",
            Box::new(|w| w.kv.retain(|(k, _)| k != "qwen3moe.expert_used_count")),
            &["qwen3moe.expert_used_count"],
        ),
        (
            "a value head narrower than the key head",
            Box::new(|w| {
                w.kv("qwen3moe.attention.value_length", V::U32(16));
            }),
            &["qwen3moe.attention.value_length"],
        ),
        (
            "partial rotary",
            Box::new(|w| {
                w.kv("qwen3moe.rope.dimension_count", V::U32(16));
            }),
            &["qwen3moe.rope.dimension_count"],
        ),
        (
            "experts of another width than the file says",
            Box::new(|w| {
                w.kv("qwen3moe.expert_feed_forward_length", V::U32(64));
            }),
            &["blk.0.ffn_gate_exps.weight", "[64, 64, 8]"],
        ),
        (
            "a missing expert tensor",
            Box::new(|w| w.tensors.retain(|t| t.0 != "blk.2.ffn_down_exps.weight")),
            &["blk.2.ffn_down_exps.weight", "missing"],
        ),
        (
            "a missing router",
            Box::new(|w| w.tensors.retain(|t| t.0 != "blk.1.ffn_gate_inp.weight")),
            &["blk.1.ffn_gate_inp.weight", "missing"],
        ),
    ];
    for (what, change, needles) in cases {
        let mut w = copy_of(&fixture(), str::to_string);
        change(&mut w);
        let err = load_error(&w);
        eprintln!("{what}: {err}");
        for n in needles {
            assert!(err.contains(n), "{what}: {err:?} does not mention {n:?}");
        }
    }
}
