//! Qwen3.5 files as converters write them: the variants llama.cpp accepts run exactly like the
//! fixtures (schedule from `full_attention_interval`, a skipped multi-token-prediction block,
//! fused `ffn_gate_up_exps`, a 1-D shared-expert gate), and inconsistent files are errors that
//! name the key or tensor.

use crate::common;

use common::gguf_writer::{GgufWriter, array};
use common::synth::{copy_of, open};
use gguf_rs_lib::format::metadata::MetadataValue as V;
use gguf_rs_lib::format::types::GGUFValueType;
use kiln::gguf::GgufFile;
use kiln::model::placement::{Footprint, bytes_by_side, placement};
use kiln::model::{Model, ModelFile, Session};

const PROMPT: [u32; 6] = [504, 3458, 282, 4649, 314, 1345];

fn fixture(file: &str) -> GgufFile {
    GgufFile::open(&common::fixture(&format!("models/{file}"))).unwrap()
}

fn logits(mf: &ModelFile) -> Vec<f32> {
    let model: Model<_> = common::golden_run::load(mf, 1);
    let mut s = Session::new(&model, 16).unwrap();
    s.prefill(&PROMPT).unwrap();
    s.decode(28).unwrap().to_vec()
}

/// The writer's tensor `name`.
fn tensor<'a>(w: &'a mut GgufWriter, name: &str) -> &'a mut (String, u32, Vec<u64>, Vec<u8>) {
    w.tensors.iter_mut().find(|t| t.0 == name).unwrap()
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

#[test]
fn converter_variants_run_like_the_fixtures() {
    let dense = fixture("qwen35-tiny.gguf");
    let want = logits(&ModelFile::from_gguf(fixture("qwen35-tiny.gguf")).unwrap());

    // Older files: no recurrent_layers, the schedule comes from the interval (4).
    let mut w = copy_of(&dense, str::to_string);
    w.kv.retain(|(k, _)| k != "qwen35.attention.recurrent_layers");
    assert_eq!(
        logits(&open("interval.gguf", &w)),
        want,
        "schedule from the interval"
    );

    // A multi-token-prediction block after the 8 used ones: loaded, never run.
    let mut w = copy_of(&dense, str::to_string);
    w.kv("qwen35.block_count", V::U32(9));
    w.kv("qwen35.nextn_predict_layers", V::U32(1));
    let mut flags: Vec<V> = [true, true, true, false, true, true, true, false, false]
        .map(V::Bool)
        .to_vec();
    w.kv(
        "qwen35.attention.recurrent_layers",
        array(GGUFValueType::Bool, std::mem::take(&mut flags)),
    );
    let extra: Vec<_> = w
        .tensors
        .iter()
        .filter(|t| t.0.starts_with("blk.7."))
        .map(|t| {
            (
                t.0.replace("blk.7.", "blk.8."),
                t.1,
                t.2.clone(),
                t.3.clone(),
            )
        })
        .collect();
    w.tensors.extend(extra);
    w.f32_tensor("blk.8.nextn.eh_proj.weight", &[128, 64], &[0.5; 128 * 64]);
    let mf = open("mtp.gguf", &w);
    assert_eq!((mf.config.n_layers, mf.config.nextn_layers), (8, 1));
    assert_eq!(logits(&mf), want, "the MTP block is skipped");
    // Never loaded, so neither side of a split counts it, nor `-ngl auto`'s footprint.
    let plain = ModelFile::from_gguf(fixture("qwen35-tiny.gguf")).unwrap();
    for ngl in [0, 4, 9] {
        let side = |f: &ModelFile| bytes_by_side(f, &placement(&f.config, ngl, 0));
        assert_eq!(side(&mf), side(&plain), "bytes by side at -ngl {ngl}");
    }
    let footprint = |f: &ModelFile| format!("{:?}", Footprint::of(f, 64, |w| 4 * w as u64, 1));
    assert_eq!(footprint(&mf), footprint(&plain));

    let moe = fixture("qwen35moe-tiny.gguf");
    let want = logits(&ModelFile::from_gguf(fixture("qwen35moe-tiny.gguf")).unwrap());

    // Fused gate and up experts: per expert, its gate rows then its up rows.
    let mut w = copy_of(&moe, str::to_string);
    let (h, eff, n_exp) = (40usize, 32usize, 8usize);
    for i in 0..8 {
        let gate = tensor(&mut w, &format!("blk.{i}.ffn_gate_exps.weight"))
            .3
            .clone();
        let up = tensor(&mut w, &format!("blk.{i}.ffn_up_exps.weight"))
            .3
            .clone();
        let block = eff * h * 4;
        let fused: Vec<u8> = (0..n_exp)
            .flat_map(|e| {
                let r = e * block..(e + 1) * block;
                [gate[r.clone()].to_vec(), up[r].to_vec()].concat()
            })
            .collect();
        w.tensors.retain(|t| {
            t.0 != format!("blk.{i}.ffn_gate_exps.weight")
                && t.0 != format!("blk.{i}.ffn_up_exps.weight")
        });
        w.tensor(
            &format!("blk.{i}.ffn_gate_up_exps.weight"),
            0,
            &[h as u64, 2 * eff as u64, n_exp as u64],
            fused,
        );
        // And the shared expert's gate as a plain vector.
        tensor(&mut w, &format!("blk.{i}.ffn_gate_inp_shexp.weight")).2 = vec![h as u64];
    }
    assert_eq!(
        logits(&open("fused.gguf", &w)),
        want,
        "fused gate_up experts"
    );
}

#[test]
fn inconsistent_files_are_errors_naming_the_key_or_tensor() {
    let dense = fixture("qwen35-tiny.gguf");
    type Change = Box<dyn Fn(&mut GgufWriter)>;
    let cases: Vec<(&str, Change, &[&str])> = vec![
        (
            "value heads not a multiple of key heads",
            Box::new(|w| {
                w.kv("qwen35.ssm.time_step_rank", V::U32(3));
            }),
            &[
                "qwen35.ssm.time_step_rank",
                "qwen35.ssm.group_count",
                "multiple",
            ],
        ),
        (
            "inner size not value heads × head size",
            Box::new(|w| {
                w.kv("qwen35.ssm.inner_size", V::U32(60));
            }),
            &["qwen35.ssm.inner_size"],
        ),
        (
            "sections past the rotary pairs",
            Box::new(|w| {
                let s = [3, 1, 1, 0].map(V::I32).to_vec();
                w.kv(
                    "qwen35.rope.dimension_sections",
                    array(GGUFValueType::I32, s),
                );
            }),
            &["qwen35.rope.dimension_sections", "4 rotary pairs"],
        ),
        (
            "rotary dims past the head",
            Box::new(|w| {
                w.kv("qwen35.rope.dimension_count", V::U32(40));
            }),
            &["qwen35.rope.dimension_count"],
        ),
        (
            "a schedule of the wrong length",
            Box::new(|w| {
                let flags = [true, false].map(V::Bool).to_vec();
                w.kv(
                    "qwen35.attention.recurrent_layers",
                    array(GGUFValueType::Bool, flags),
                );
            }),
            &[
                "qwen35.attention.recurrent_layers",
                "2 entries for 8 blocks",
            ],
        ),
        (
            "a missing ssm key",
            Box::new(|w| w.kv.retain(|(k, _)| k != "qwen35.ssm.conv_kernel")),
            &["qwen35.ssm.conv_kernel"],
        ),
        (
            "a missing ssm tensor",
            Box::new(|w| w.tensors.retain(|t| t.0 != "blk.4.ssm_a")),
            &["blk.4.ssm_a", "missing", "variant.gguf"],
        ),
        (
            "a conv kernel of the wrong shape",
            Box::new(|w| tensor(w, "blk.1.ssm_conv1d.weight").2 = vec![8, 64]),
            &["blk.1.ssm_conv1d.weight", "[8, 64]"],
        ),
        (
            "an attention block where the schedule says so, without its tensors",
            Box::new(|w| {
                let flags = [true, true, false, false, true, true, true, false]
                    .map(V::Bool)
                    .to_vec();
                w.kv(
                    "qwen35.attention.recurrent_layers",
                    array(GGUFValueType::Bool, flags),
                );
            }),
            &["blk.2.attn_q.weight", "missing"],
        ),
    ];
    for (what, change, needles) in cases {
        let mut w = copy_of(&dense, str::to_string);
        change(&mut w);
        let err = load_error(&w);
        eprintln!("{what}: {err}");
        for n in needles {
            assert!(err.contains(n), "{what}: {err:?} does not mention {n:?}");
        }
    }

    let moe = fixture("qwen35moe-tiny.gguf");
    let mut w = copy_of(&moe, str::to_string);
    w.kv("qwen35moe.expert_used_count", V::U32(9));
    let err = load_error(&w);
    assert!(err.contains("qwen35moe.expert_used_count"), "{err}");
    let mut w = copy_of(&moe, str::to_string);
    w.tensors.retain(|t| t.0 != "blk.0.ffn_down_exps.weight");
    let err = load_error(&w);
    assert!(err.contains("blk.0.ffn_down_exps.weight"), "{err}");
}
