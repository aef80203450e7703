//! SmolLM3 and Gemma 2 files as converters write them and llama.cpp reads them: where a key is
//! missing, llama.cpp's defaults (Gemma 2's caps of 50 and 30, window 4096, every second layer
//! global); keys that llama.cpp refuses, or that would make the caps NaN, are errors naming them.

use crate::common;

use common::gguf_writer::{GgufWriter, array};
use common::synth::{copy_of, open};
use gguf_rs_lib::format::metadata::MetadataValue as V;
use gguf_rs_lib::format::types::GGUFValueType;
use kiln::gguf::GgufFile;
use kiln::model::{Model, ModelFile, Session};

fn writer(file: &str) -> GgufWriter {
    let g = GgufFile::open(&common::fixture(&format!("models/{file}"))).unwrap();
    copy_of(&g, str::to_string)
}

fn load_error(w: &GgufWriter) -> String {
    let g = GgufFile::from_bytes(std::path::Path::new("variant.gguf"), &w.to_bytes()).unwrap();
    match ModelFile::from_gguf(g) {
        Ok(_) => panic!("an inconsistent file loaded"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn gemma2_keys_default_as_in_llama_cpp() {
    let mut w = writer("gemma2-tiny.gguf");
    let c = open("as-written.gguf", &w).config;
    assert_eq!(
        (c.attn_logit_softcap, c.final_logit_softcap),
        (Some(50.0), Some(30.0))
    );
    assert_eq!(
        (c.sliding_window, c.sliding_window_pattern),
        (Some(16), Some(2))
    );
    // 1/sqrt(head_dim 16), not 1/sqrt(hidden/heads = 8): the file does not have the 27B's 46 layers.
    assert_eq!(c.attention_scale, 0.25);
    assert!(!c.qk_norm && c.tie_embeddings && c.norm_weights_include_one);
    assert!((0..6).all(|l| c.layer_is_local(l) == (l % 2 == 0)));

    w.kv.retain(|(k, _)| {
        !matches!(
            k.as_str(),
            "gemma2.attn_logit_softcapping"
                | "gemma2.final_logit_softcapping"
                | "gemma2.attention.sliding_window"
        )
    });
    let c = open("defaults.gguf", &w).config;
    assert_eq!(
        (c.attn_logit_softcap, c.final_logit_softcap),
        (Some(50.0), Some(30.0))
    );
    assert_eq!(c.sliding_window, Some(4096));

    // A cap of 0 turns it off; an explicit pattern is read.
    w.kv("gemma2.attn_logit_softcapping", V::F32(0.0));
    w.kv("gemma2.attention.sliding_window_pattern", V::U32(3));
    let c = open("no-cap.gguf", &w).config;
    assert_eq!(c.attn_logit_softcap, None);
    assert_eq!(c.sliding_window_pattern, Some(3));
}

#[test]
fn inconsistent_files_are_errors_naming_the_key() {
    let mut w = writer("gemma2-tiny.gguf");
    w.kv("gemma2.final_logit_softcapping", V::F32(f32::INFINITY));
    let e = load_error(&w);
    assert!(e.contains("soft cap"), "{e}");

    let mut w = writer("smollm3-tiny.gguf");
    w.kv("smollm3.rope.dimension_count", V::U32(8));
    let e = load_error(&w);
    assert!(e.contains("smollm3.rope.dimension_count"), "{e}");
}

/// The last logits after a 40-token prompt: longer than the fixture's window of 16.
fn logits(mf: &ModelFile) -> Vec<f32> {
    let model: Model<_> = common::golden_run::load(mf, 1);
    let mut s = Session::new(&model, 64).unwrap();
    let prompt: Vec<u32> = (0..40).map(|i| 2 + (i * 37) % 200).collect();
    s.prefill(&prompt).unwrap().to_vec()
}

/// llama.cpp also reads `attention.sliding_window_pattern` as one flag per layer (true: the
/// layer attends through the window): the flags of Gemma 2's period give the period's logits,
/// other flags other logits, and a list that is not one flag per layer is an error naming it.
#[test]
fn gemma2_per_layer_window_flags_read_as_llama_cpp() {
    let n = open("as-written.gguf", &writer("gemma2-tiny.gguf"))
        .config
        .n_layers;
    let want = logits(&open("as-written.gguf", &writer("gemma2-tiny.gguf")));
    let with_flags = |local: &dyn Fn(usize) -> bool, len: usize| {
        let mut w = writer("gemma2-tiny.gguf");
        let flags = (0..len).map(|l| V::Bool(local(l))).collect();
        w.kv(
            "gemma2.attention.sliding_window_pattern",
            array(GGUFValueType::Bool, flags),
        );
        w
    };
    let period = open("flags.gguf", &with_flags(&|l| l % 2 == 0, n));
    assert!((0..n).all(|l| period.config.layer_is_local(l) == (l % 2 == 0)));
    assert_eq!(logits(&period), want, "the period's flags");

    let odd = open("odd-flags.gguf", &with_flags(&|l| l % 2 == 1, n));
    assert!((0..n).all(|l| odd.config.layer_is_local(l) == (l % 2 == 1)));
    assert_ne!(logits(&odd), want, "other flags, other logits");

    let e = load_error(&with_flags(&|_| true, n + 1));
    assert!(e.contains("gemma2.attention.sliding_window_pattern"), "{e}");
}
