//! The same tiny random model written as a GGUF (llama.cpp's conventions) and as a Hugging Face
//! directory (config.json + safetensors) runs to the same logits — for the architectures whose
//! Hugging Face layout the fixtures do not cover: gemma3 (norms stored as w for x·(1+w), four norms
//! per layer, local/global layers), gemma2 (the same without QK-norm, with soft caps), qwen2 (Q/K/V
//! biases) and smollm3 (Llama's Q/K rows, which llama.cpp's converter permutes; NoPE layers).

use crate::common;

use std::collections::HashMap;

use common::gguf_writer::{GgufWriter, string};
use gguf_rs_lib::format::metadata::MetadataValue as V;
use kiln::backend::CacheType;
use kiln::gguf::GgufFile;
use kiln::model::arch::KvCacheTypes;
use kiln::model::session::DEFAULT_BATCH;
use kiln::model::{ModelFile, Session};

const HIDDEN: usize = 16;
const HEADS: usize = 2;
const KV_HEADS: usize = 1;
const HEAD_DIM: usize = 8;
const FF: usize = 32;
const LAYERS: usize = 2;
const VOCAB: usize = 64;

/// Deterministic values in [−0.5, 0.5).
fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

/// One tensor in both namings: GGUF name, HF name, GGML dims (row length first), values.
struct Tensor {
    gguf: String,
    hf: String,
    dims: Vec<usize>,
    values: Vec<f32>,
    /// A Gemma norm weight: HF stores w, GGUF stores 1 + w.
    gemma_norm: bool,
}

fn tensors(gemma: bool, biases: bool) -> Vec<Tensor> {
    let mut out = Vec::new();
    let mut seed = 1;
    let mut add = |gguf: &str, hf: &str, dims: &[usize], norm: bool| {
        seed += 1;
        let n = dims.iter().product();
        let mut v = values(seed, n);
        if norm && !gemma {
            v.iter_mut().for_each(|x| *x += 1.0);
        }
        out.push(Tensor {
            gguf: gguf.into(),
            hf: hf.into(),
            dims: dims.to_vec(),
            values: v,
            gemma_norm: norm && gemma,
        });
    };
    let q = HEADS * HEAD_DIM;
    let kv = KV_HEADS * HEAD_DIM;
    add(
        "token_embd.weight",
        "model.embed_tokens.weight",
        &[HIDDEN, VOCAB],
        false,
    );
    add("output_norm.weight", "model.norm.weight", &[HIDDEN], true);
    for i in 0..LAYERS {
        let g = |p: &str| format!("blk.{i}.{p}");
        let h = |p: &str| format!("model.layers.{i}.{p}");
        add(
            &g("attn_norm.weight"),
            &h("input_layernorm.weight"),
            &[HIDDEN],
            true,
        );
        add(
            &g("attn_q.weight"),
            &h("self_attn.q_proj.weight"),
            &[HIDDEN, q],
            false,
        );
        add(
            &g("attn_k.weight"),
            &h("self_attn.k_proj.weight"),
            &[HIDDEN, kv],
            false,
        );
        add(
            &g("attn_v.weight"),
            &h("self_attn.v_proj.weight"),
            &[HIDDEN, kv],
            false,
        );
        add(
            &g("attn_output.weight"),
            &h("self_attn.o_proj.weight"),
            &[q, HIDDEN],
            false,
        );
        if biases {
            add(&g("attn_q.bias"), &h("self_attn.q_proj.bias"), &[q], false);
            add(&g("attn_k.bias"), &h("self_attn.k_proj.bias"), &[kv], false);
            add(&g("attn_v.bias"), &h("self_attn.v_proj.bias"), &[kv], false);
        }
        add(
            &g("ffn_gate.weight"),
            &h("mlp.gate_proj.weight"),
            &[HIDDEN, FF],
            false,
        );
        add(
            &g("ffn_up.weight"),
            &h("mlp.up_proj.weight"),
            &[HIDDEN, FF],
            false,
        );
        add(
            &g("ffn_down.weight"),
            &h("mlp.down_proj.weight"),
            &[FF, HIDDEN],
            false,
        );
        if gemma {
            add(
                &g("attn_q_norm.weight"),
                &h("self_attn.q_norm.weight"),
                &[HEAD_DIM],
                true,
            );
            add(
                &g("attn_k_norm.weight"),
                &h("self_attn.k_norm.weight"),
                &[HEAD_DIM],
                true,
            );
            add(
                &g("post_attention_norm.weight"),
                &h("post_attention_layernorm.weight"),
                &[HIDDEN],
                true,
            );
            add(
                &g("ffn_norm.weight"),
                &h("pre_feedforward_layernorm.weight"),
                &[HIDDEN],
                true,
            );
            add(
                &g("post_ffw_norm.weight"),
                &h("post_feedforward_layernorm.weight"),
                &[HIDDEN],
                true,
            );
        } else {
            add(
                &g("ffn_norm.weight"),
                &h("post_attention_layernorm.weight"),
                &[HIDDEN],
                true,
            );
        }
    }
    out
}

fn gguf_model(arch: &str, ts: &[Tensor]) -> ModelFile {
    let mut w = GgufWriter::default();
    let k = |s: &str| format!("{arch}.{s}");
    w.kv("general.architecture", string(arch))
        .kv(&k("block_count"), V::U32(LAYERS as u32))
        .kv(&k("context_length"), V::U32(256))
        .kv(&k("embedding_length"), V::U32(HIDDEN as u32))
        .kv(&k("feed_forward_length"), V::U32(FF as u32))
        .kv(&k("attention.head_count"), V::U32(HEADS as u32))
        .kv(&k("attention.head_count_kv"), V::U32(KV_HEADS as u32))
        .kv(&k("attention.key_length"), V::U32(HEAD_DIM as u32))
        .kv(&k("attention.value_length"), V::U32(HEAD_DIM as u32))
        .kv(&k("attention.layer_norm_rms_epsilon"), V::F32(1e-6))
        .kv(&k("rope.freq_base"), V::F32(1e6));
    if arch == "gemma3" {
        // A 4-token window and every second layer global, so both kinds of layer are exercised.
        w.kv(&k("attention.sliding_window"), V::U32(4))
            .kv(&k("attention.sliding_window_pattern"), V::U32(2));
    }
    if arch == "gemma2" {
        // Gemma 2's pattern (every second layer global) is llama.cpp's default; caps small
        // enough to bite on these small weights.
        w.kv(&k("attention.sliding_window"), V::U32(4))
            .kv(&k("attn_logit_softcapping"), V::F32(0.5))
            .kv(&k("final_logit_softcapping"), V::F32(2.0));
    }
    for t in ts {
        // llama.cpp's converter stores Gemma's norms as 1 + w (in f32).
        let v: Vec<f32> = if t.gemma_norm {
            t.values.iter().map(|x| x + 1.0).collect()
        } else {
            t.values.clone()
        };
        // llama.cpp's converter permutes Llama's (and SmolLM3's) Q/K rows for interleaved RoPE.
        let permuted = arch == "smollm3"
            && (t.gguf.ends_with("attn_q.weight") || t.gguf.ends_with("attn_k.weight"));
        let v = if permuted {
            interleave_rows(&v, t.dims[0])
        } else {
            v
        };
        let dims: Vec<u64> = t.dims.iter().map(|&d| d as u64).collect();
        w.f32_tensor(&t.gguf, &dims, &v);
    }
    let g =
        GgufFile::from_bytes(std::path::Path::new(&format!("{arch}.gguf")), &w.to_bytes()).unwrap();
    ModelFile::from_gguf(g).unwrap()
}

/// Rows of `row` values in llama.cpp's permuted order: per head of HEAD_DIM rows, the first and
/// second halves interleaved (row 2i from row i, row 2i + 1 from row i + HEAD_DIM / 2).
fn interleave_rows(v: &[f32], row: usize) -> Vec<f32> {
    let half = HEAD_DIM / 2;
    let rows = v.len() / row;
    let mut out = Vec::with_capacity(v.len());
    for r in 0..rows {
        let (head, j) = (r / HEAD_DIM, r % HEAD_DIM);
        let src = head * HEAD_DIM + j / 2 + (j % 2) * half;
        out.extend_from_slice(&v[src * row..(src + 1) * row]);
    }
    out
}

fn hf_model(dir: &std::path::Path, config: serde_json::Value, ts: &[Tensor]) -> ModelFile {
    use safetensors::tensor::{Dtype, TensorView};
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = ts
        .iter()
        .map(|t| {
            let shape: Vec<usize> = t.dims.iter().rev().copied().collect();
            (
                t.hf.clone(),
                shape,
                t.values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            )
        })
        .collect();
    let views: HashMap<String, TensorView> = bytes
        .iter()
        .map(|(n, s, b)| {
            (
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), b).unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
    ModelFile::open(dir).unwrap()
}

/// The logits of a prefill of three tokens and a decode of each of the rest, over f32 caches: a
/// SmolLM3 GGUF (interleaved RoPE rows) and its HF directory (NEOX halves) sum Q·K in different
/// orders, which moves a score by float order only (here ≤ 1.7e-6 at the logits); an f16 value
/// cache rounds the softmax weights to f16, as llama.cpp does, and turns that into a flipped f16
/// step (2.8e-4), which says nothing about the loaders.
fn logits(mf: &ModelFile, ids: &[u32]) -> Vec<Vec<f32>> {
    let model = common::golden_run::load(mf, 2);
    let f32_cache = KvCacheTypes {
        k: CacheType::F32,
        v: CacheType::F32,
    };
    let mut s = Session::with_options(&model, 64, DEFAULT_BATCH, f32_cache).unwrap();
    let mut all = vec![s.prefill(&ids[..3]).unwrap().to_vec()];
    for &t in &ids[3..] {
        all.push(s.decode(t).unwrap().to_vec());
    }
    all
}

fn assert_same(a: &[Vec<f32>], b: &[Vec<f32>], what: &str) {
    for (step, (x, y)) in a.iter().zip(b).enumerate() {
        let d = x.iter().zip(y).fold(0f32, |m, (p, q)| m.max((p - q).abs()));
        assert!(d <= 1e-5, "{what}: step {step} differs by {d}");
    }
}

/// Past the 4-token window, so local and global layers both matter.
const IDS: [u32; 10] = [1, 5, 9, 2, 33, 17, 60, 4, 8, 21];

#[test]
fn gemma3_hf_directory_runs_like_its_gguf() {
    let ts = tensors(true, false);
    let gguf = gguf_model("gemma3", &ts);
    let dir = tempfile::tempdir().unwrap();
    let config = serde_json::json!({
        "model_type": "gemma3_text", "vocab_size": VOCAB, "hidden_size": HIDDEN,
        "intermediate_size": FF, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "rms_norm_eps": 1e-6,
        "rope_theta": 1e6, "rope_local_base_freq": 10000.0, "sliding_window": 4,
        "layer_types": ["sliding_attention", "full_attention"], "query_pre_attn_scalar": HEAD_DIM,
        "max_position_embeddings": 256, "tie_word_embeddings": true
    });
    let hf = hf_model(dir.path(), config, &ts);
    assert_eq!(hf.config.sliding_window_pattern, Some(2));
    assert!(!hf.config.norm_weights_include_one && gguf.config.norm_weights_include_one);
    assert_same(&logits(&gguf, &IDS), &logits(&hf, &IDS), "gemma3");
}

#[test]
fn gemma2_hf_directory_runs_like_its_gguf() {
    let mut ts = tensors(true, false);
    ts.retain(|t| !t.gguf.contains("attn_q_norm") && !t.gguf.contains("attn_k_norm"));
    let gguf = gguf_model("gemma2", &ts);
    let dir = tempfile::tempdir().unwrap();
    // No layer_types: Gemma 2's alternation is the default.
    let config = serde_json::json!({
        "model_type": "gemma2", "vocab_size": VOCAB, "hidden_size": HIDDEN,
        "intermediate_size": FF, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "rms_norm_eps": 1e-6,
        "rope_theta": 1e6, "sliding_window": 4, "query_pre_attn_scalar": HEAD_DIM,
        "attn_logit_softcapping": 0.5, "final_logit_softcapping": 2.0,
        "max_position_embeddings": 256, "tie_word_embeddings": true
    });
    let hf = hf_model(dir.path(), config, &ts);
    for c in [&hf.config, &gguf.config] {
        assert_eq!(c.sliding_window_pattern, Some(2));
        assert_eq!(
            (c.attn_logit_softcap, c.final_logit_softcap),
            (Some(0.5), Some(2.0))
        );
        assert!(!c.qk_norm);
    }
    assert_same(&logits(&gguf, &IDS), &logits(&hf, &IDS), "gemma2");
}

#[test]
fn smollm3_hf_directory_runs_like_its_gguf() {
    let ts = tensors(false, false);
    let gguf = gguf_model("smollm3", &ts);
    let config = |nope: serde_json::Value| {
        serde_json::json!({
            "model_type": "smollm3", "vocab_size": VOCAB, "hidden_size": HIDDEN,
            "intermediate_size": FF, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
            "num_key_value_heads": KV_HEADS, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
            "max_position_embeddings": 256, "tie_word_embeddings": true,
            "no_rope_layers": nope
        })
    };
    // Two layers: llama.cpp's NoPE step of 4 leaves both rotating, as [1, 1] says.
    let dir = tempfile::tempdir().unwrap();
    let hf = hf_model(dir.path(), config(serde_json::json!([1, 1])), &ts);
    assert_eq!(gguf.config.nope_layers, [false, false]);
    assert_same(&logits(&gguf, &IDS), &logits(&hf, &IDS), "smollm3");
    // config.json's list decides: the second layer without RoPE moves the logits.
    let dir = tempfile::tempdir().unwrap();
    let nope = hf_model(dir.path(), config(serde_json::json!([1, 0])), &ts);
    assert_eq!(nope.config.nope_layers, [false, true]);
    let (a, b) = (logits(&hf, &IDS), logits(&nope, &IDS));
    let moved = a
        .iter()
        .flatten()
        .zip(b.iter().flatten())
        .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    assert!(moved > 1e-3, "a NoPE layer changed nothing ({moved})");
}

#[test]
fn qwen2_hf_directory_runs_like_its_gguf() {
    let ts = tensors(false, true);
    let gguf = gguf_model("qwen2", &ts);
    let dir = tempfile::tempdir().unwrap();
    let config = serde_json::json!({
        "model_type": "qwen2", "vocab_size": VOCAB, "hidden_size": HIDDEN,
        "intermediate_size": FF, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
        "max_position_embeddings": 256, "tie_word_embeddings": true
    });
    let hf = hf_model(dir.path(), config, &ts);
    assert!(hf.config.attention_bias && hf.config.tie_embeddings);
    assert_same(&logits(&gguf, &IDS), &logits(&hf, &IDS), "qwen2");
}
