//! Drafting with the multi-token-prediction block (src/model/arch/mtp.rs), on the tiny Qwen3.5
//! files with a block added (tests/fixtures/make_qwen35_mtp.py) and the tiny GLM-4.5 file with its
//! block made to lean (make_glm4moe_mtp.py): greedy output equals
//! greedy output without it, the block's state after speculation equals a fresh session's
//! (cached == recomputed), its logits equal llama.cpp's MTP context's, teacher-forced, and a
//! float64 reference of the block written here from llama.cpp's `graph_mtp`, and it drafts and
//! keeps what llama.cpp's `draft-mtp` does.

use crate::common;

use common::golden_run::load;
use common::speculation::{greedy_pick as argmax, mtp_matches_plain};
use kiln::model::{ModelFile, Session, Tokenizer};

const FILES: [&str; 3] = [
    "qwen35-mtp-tiny.gguf",
    "qwen35moe-mtp-tiny.gguf",
    "glm4moe-mtp-tiny.gguf",
];
const PROMPT: &str = "The quick brown fox jumps over the lazy dog. The quick brown";

/// Greedy with the block drafting equals greedy without, and the block's state after
/// speculation is a fresh session's (tests/common/speculation.rs); some drafts are accepted (the
/// fixtures' blocks lean to repeats).
#[test]
fn mtp_greedy_is_plain_greedy() {
    for name in FILES {
        let mut mf = ModelFile::open(&common::fixture(&format!("models/{name}"))).unwrap();
        mf.load_mtp = true;
        let tok = Tokenizer::from_model(&mf).unwrap();
        let model = load(&mf, 2);
        assert!(model.has_mtp(), "{name}");
        let prompt = tok.encode(PROMPT, true).unwrap();
        let accepted = mtp_matches_plain(&model, &tok, &prompt, 80, &[1, 3, 8], 1e-4, name);
        eprintln!("{name}: {accepted} drafts accepted");
        // The Qwen3.5 MoE file's block is never right on this prompt (the llama.cpp replay below
        // has it accept one draft elsewhere); the others' must be, or acceptance went untested.
        assert!(
            accepted > 0 || name == "qwen35moe-mtp-tiny.gguf",
            "{name}: no MTP draft accepted"
        );
    }
}

/// llama.cpp's `llama-speculative-simple --spec-type draft-mtp` loop replayed on kiln's session
/// (tests/fixtures/golden/llama-cpp-mtp.json, scripts/reference/make_mtp_goldens.py): the prompt's
/// last token held back and drafted after first, each pass drafting up to N after the last token,
/// verifying and keeping the greedy prefix. The text and the counts of drafted and accepted tokens
/// are llama.cpp's.
#[test]
fn mtp_drafts_as_llama_cpp_does() {
    let golden = common::golden("llama-cpp-mtp.json");
    let n_predict = golden["n_predict"].as_u64().unwrap() as usize;
    for (name, runs) in golden["models"].as_object().unwrap() {
        let mut mf = ModelFile::open(&common::fixture(&format!("models/{name}"))).unwrap();
        mf.load_mtp = true;
        let tok = Tokenizer::from_model(&mf).unwrap();
        let model = load(&mf, 2);
        let vocab = model.config.vocab_size;
        let prompt = tok
            .encode(golden["prompt"].as_str().unwrap(), true)
            .unwrap();
        for run in runs.as_array().unwrap() {
            let n_max = run["n_max"].as_u64().unwrap() as usize;
            let ctx = 256;
            let mut s = Session::new(&model, ctx).unwrap();
            s.enable_mtp().unwrap();
            s.prefill(&prompt[..prompt.len() - 1]).unwrap();
            let mut id_last = prompt[prompt.len() - 1];
            let (mut drafted, mut accepted, mut predicted) = (0, 0, 0);
            let mut out = Vec::new();
            while predicted <= n_predict {
                let n_past = s.tokens().len();
                let budget = (ctx - n_past - 2).min(n_predict.saturating_sub(predicted + 1));
                // A budget of 0 leaves the draft uncut in llama.cpp (`dp.n_max > 0`).
                let limit = if budget > 0 { n_max.min(budget) } else { n_max };
                let draft = s.draft_mtp(id_last, limit, 0.0).unwrap();
                let mut rows = vec![id_last];
                rows.extend_from_slice(&draft);
                let logits = s.verify(&rows).unwrap().to_vec();
                let mut ids = Vec::new();
                for (i, row) in logits.chunks_exact(vocab).enumerate() {
                    let pick = argmax(row);
                    ids.push(pick);
                    if draft.get(i) != Some(&pick) {
                        break;
                    }
                }
                let kept = ids.len() - 1;
                s.truncate(n_past + 1 + kept).unwrap();
                drafted += draft.len();
                accepted += kept;
                predicted += ids.len();
                out.extend_from_slice(&ids);
                id_last = *ids.last().unwrap();
            }
            let how = format!("{name}, up to {n_max} a pass");
            let text = tok.decode(&out, false).unwrap();
            assert_eq!(text, run["text"].as_str().unwrap(), "{how}");
            assert_eq!(
                predicted as u64,
                run["n_predict"].as_u64().unwrap(),
                "{how}"
            );
            assert_eq!(drafted as u64, run["n_drafted"].as_u64().unwrap(), "{how}");
            assert_eq!(accepted as u64, run["n_accept"].as_u64().unwrap(), "{how}");
        }
    }
}

/// A model without the block refuses it, saying so; a file with one loads it only when asked.
#[test]
fn a_model_without_an_mtp_block_cannot_draft_with_one() {
    let mf = ModelFile::open(&common::fixture("models/qwen35-tiny.gguf")).unwrap();
    let model = load(&mf, 2);
    assert!(!model.has_mtp());
    let mut s = Session::new(&model, 64).unwrap();
    let e = s.enable_mtp().unwrap_err().to_string();
    assert!(e.contains("no multi-token-prediction block"), "{e}");
    assert!(s.draft_mtp(1, 2, 0.0).is_err());
    // A file with the block leaves it unread unless asked (as llama.cpp does without draft-mtp).
    let mf = ModelFile::open(&common::fixture("models/qwen35-mtp-tiny.gguf")).unwrap();
    let model = load(&mf, 2);
    assert!(!model.has_mtp());
    let e = Session::new(&model, 64).unwrap().enable_mtp().unwrap_err();
    assert!(e.to_string().contains("not loaded"), "{e}");
}

/// The block's logits equal llama.cpp's, teacher-forced (scripts/reference/llama_cpp_mtp_logits.cpp,
/// golden `teacher_forced`): for each prompt position k ≥ 1, a session of the prompt's first k
/// tokens drafts one token after token k, so the block's row at k takes token k and the trunk's
/// state at k − 1, its cache holding rows 0..k as llama.cpp's MTP context does. Each of
/// llama.cpp's top-5 logits within 0.01 (the golden rule for tiny F32 models, F32 KV cache) and
/// the same pick wherever llama.cpp's margin is 0.05 or more. (Row 0, whose hidden input is zeros,
/// is never drafted from by either program.)
#[test]
fn mtp_logits_match_llama_cpp() {
    let golden = common::golden("llama-cpp-mtp.json");
    for (name, tf) in golden["teacher_forced"].as_object().unwrap() {
        let mut mf = ModelFile::open(&common::fixture(&format!("models/{name}"))).unwrap();
        mf.load_mtp = true;
        let model = load(&mf, 2);
        let ids: Vec<u32> = tf["prompt_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let rows = tf["top5"].as_array().unwrap();
        assert_eq!(rows.len(), ids.len(), "{name}");
        let mut worst = 0f32;
        for k in 1..ids.len() {
            let mut s = Session::with_options(
                &model,
                64,
                kiln::model::session::DEFAULT_BATCH,
                kiln::model::arch::KvCacheTypes {
                    k: kiln::backend::CacheType::F32,
                    v: kiln::backend::CacheType::F32,
                },
            )
            .unwrap();
            s.enable_mtp().unwrap();
            s.prefill(&ids[..k]).unwrap();
            s.draft_mtp(ids[k], 1, 1e-30).unwrap();
            let got = s.mtp_logits().unwrap();
            let top: Vec<(usize, f32)> = rows[k]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    (
                        p[0].as_u64().unwrap() as usize,
                        p[1].as_f64().unwrap() as f32,
                    )
                })
                .collect();
            for &(id, want) in &top {
                let d = (got[id] - want).abs();
                worst = worst.max(d);
                assert!(
                    d <= 0.01,
                    "{name} row {k}: logit of {id} {} vs llama.cpp {want}",
                    got[id]
                );
            }
            if top[0].1 - top[1].1 >= 0.05 {
                assert_eq!(argmax(got), top[0].0 as u32, "{name} row {k}");
            }
        }
        eprintln!("{name}: MTP logits max |Δ| {worst:.2e} against llama.cpp, teacher-forced");
    }
}

/// The block's logits for two chained draft rows equal the float64 reference's, every logit
/// within 0.01 (the golden rule's tight bound) and the same picks.
#[test]
fn mtp_logits_match_a_float64_reference() {
    let mut mf = ModelFile::open(&common::fixture("models/qwen35-mtp-tiny.gguf")).unwrap();
    mf.load_mtp = true;
    let tok = Tokenizer::from_model(&mf).unwrap();
    let model = load(&mf, 2);
    let prompt = tok.encode(PROMPT, true).unwrap();
    let n = prompt.len();
    let mut s = Session::new(&model, 128).unwrap();
    s.enable_mtp().unwrap();
    s.prefill(&prompt).unwrap();
    let hidden: Vec<Vec<f64>> = (0..n)
        .map(|p| f64s(&s.mtp_trunk_state(p).expect("the prompt ran in one call")))
        .collect();
    let next = argmax(s.logits().unwrap());
    let reference = Reference::new(&mf);
    let mut rows: Vec<(u32, Vec<f64>)> = (0..n)
        .map(|p| {
            let h = match p {
                0 => vec![0.0; reference.h],
                _ => hidden[p - 1].clone(),
            };
            (prompt[p], h)
        })
        .collect();
    rows.push((next, hidden[n - 1].clone()));
    let (want1, out1) = reference.last_row(&rows);
    let draft = s.draft_mtp(next, 1, 1e-30).unwrap();
    let got1 = s.mtp_logits().unwrap().to_vec();
    assert_eq!(draft, [argmax(&got1)]);
    rows.push((draft[0], out1));
    let (want2, _) = reference.last_row(&rows);
    let draft2 = s.draft_mtp(next, 2, 1e-30).unwrap();
    let got2 = s.mtp_logits().unwrap().to_vec();
    for (step, got, want) in [(1, &got1, &want1), (2, &got2, &want2)] {
        let want: Vec<f32> = want.iter().map(|&v| v as f32).collect();
        let d = max_abs_diff(got, &want);
        assert!(d <= 0.01, "draft row {step}: |Δ| {d:e} against float64");
        assert_eq!(argmax(got), argmax(&want), "draft row {step}");
        eprintln!("MTP draft row {step}: max |Δ| {d:.2e} against float64");
    }
    assert_eq!(draft2[0], draft[0]);
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).fold(0.0, |m, (x, y)| m.max((x - y).abs()))
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// The dense MTP block in float64 from the file's tensors, as llama.cpp's `graph_mtp` computes
/// it: x = eh_proj·[enorm(embedding) ; hnorm(hidden)]; x += wo·(attention(q, k, v) ⊙
/// σ(gate)) over RMSNorm(x), with per-head QK-norm and NEOX RoPE on the leading rotary dims;
/// x += SwiGLU(RMSNorm(x)); logits = head(RMSNorm(x)·shared_head_norm).
struct Reference {
    h: usize,
    heads: usize,
    kv_heads: usize,
    hd: usize,
    rot: usize,
    theta: f64,
    eps: f64,
    t: std::collections::HashMap<String, Vec<f64>>,
}

impl Reference {
    fn new(mf: &ModelFile) -> Reference {
        let c = &mf.config;
        let il = c.n_layers;
        let mut t = std::collections::HashMap::new();
        let names = [
            "attn_norm.weight",
            "post_attention_norm.weight",
            "attn_q.weight",
            "attn_k.weight",
            "attn_v.weight",
            "attn_q_norm.weight",
            "attn_k_norm.weight",
            "attn_output.weight",
            "ffn_gate.weight",
            "ffn_up.weight",
            "ffn_down.weight",
            "nextn.eh_proj.weight",
            "nextn.enorm.weight",
            "nextn.hnorm.weight",
            "nextn.shared_head_norm.weight",
        ];
        for name in names {
            let full = format!("blk.{il}.{name}");
            let tensor = mf.tensor(&full).unwrap_or_else(|| panic!("{full}"));
            t.insert(name.to_string(), f64s(&tensor.to_f32()));
        }
        t.insert(
            "embed".into(),
            f64s(&mf.tensor("token_embd.weight").unwrap().to_f32()),
        );
        Reference {
            h: c.hidden_size,
            heads: c.n_heads,
            kv_heads: c.n_kv_heads,
            hd: c.head_dim,
            rot: c.rope_dims,
            theta: c.rope_theta as f64,
            eps: c.rms_norm_eps as f64,
            t,
        }
    }

    fn w(&self, name: &str) -> &[f64] {
        &self.t[name]
    }

    /// `rows` of a `[rows, cols]` matrix times `x`.
    fn matvec(&self, name: &str, x: &[f64]) -> Vec<f64> {
        let m = self.w(name);
        m.chunks_exact(x.len())
            .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
            .collect()
    }

    fn rms_norm(&self, x: &[f64], w: &[f64]) -> Vec<f64> {
        let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
        let r = 1.0 / (ms + self.eps).sqrt();
        x.iter().zip(w).map(|(v, w)| v * r * w).collect()
    }

    fn rope(&self, x: &mut [f64], pos: usize) {
        let half = self.rot / 2;
        for head in x.chunks_exact_mut(self.hd) {
            for i in 0..half {
                let angle = pos as f64 * self.theta.powf(-2.0 * i as f64 / self.rot as f64);
                let (a, b) = (head[i], head[i + half]);
                head[i] = a * angle.cos() - b * angle.sin();
                head[i + half] = a * angle.sin() + b * angle.cos();
            }
        }
    }

    /// The block's input x and its attention input for one (token, hidden) row.
    fn input(&self, token: u32, hidden: &[f64]) -> Vec<f64> {
        let h = self.h;
        let e = &self.w("embed")[token as usize * h..(token as usize + 1) * h];
        let mut cat = self.rms_norm(e, self.w("nextn.enorm.weight"));
        cat.extend(self.rms_norm(hidden, self.w("nextn.hnorm.weight")));
        self.matvec("nextn.eh_proj.weight", &cat)
    }

    /// Queries (with their gates) or keys and values of the row with input `x` at `pos`.
    fn qkv(&self, x: &[f64], pos: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
        let xa = self.rms_norm(x, self.w("attn_norm.weight"));
        let qg = self.matvec("attn_q.weight", &xa);
        let (mut q, mut gate) = (Vec::new(), Vec::new());
        for head in qg.chunks_exact(2 * self.hd) {
            q.extend(self.rms_norm(&head[..self.hd], self.w("attn_q_norm.weight")));
            gate.extend_from_slice(&head[self.hd..]);
        }
        let mut k: Vec<f64> = self
            .matvec("attn_k.weight", &xa)
            .chunks_exact(self.hd)
            .flat_map(|head| self.rms_norm(head, self.w("attn_k_norm.weight")))
            .collect();
        let v = self.matvec("attn_v.weight", &xa);
        self.rope(&mut q, pos);
        self.rope(&mut k, pos);
        (q, gate, k, v)
    }

    /// The logits of the last of `rows` (each a token and the hidden state paired with it, at
    /// positions 0..), attending over all of them, and the block's normed output there.
    fn last_row(&self, rows: &[(u32, Vec<f64>)]) -> (Vec<f64>, Vec<f64>) {
        let kv: Vec<(Vec<f64>, Vec<f64>)> = rows
            .iter()
            .enumerate()
            .map(|(p, (t, hid))| {
                let (_, _, k, v) = self.qkv(&self.input(*t, hid), p);
                (k, v)
            })
            .collect();
        let last = rows.len() - 1;
        let mut x = self.input(rows[last].0, &rows[last].1);
        let (q, gate, _, _) = self.qkv(&x, last);
        let (hd, group) = (self.hd, self.heads / self.kv_heads);
        let mut attn = vec![0.0; self.heads * hd];
        for head in 0..self.heads {
            let kvh = head / group;
            let qh = &q[head * hd..(head + 1) * hd];
            let scores: Vec<f64> = kv
                .iter()
                .map(|(k, _)| {
                    let kh = &k[kvh * hd..(kvh + 1) * hd];
                    qh.iter().zip(kh).map(|(a, b)| a * b).sum::<f64>() / (hd as f64).sqrt()
                })
                .collect();
            let top = scores.iter().cloned().fold(f64::MIN, f64::max);
            let weights: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
            let sum: f64 = weights.iter().sum();
            for ((_, v), w) in kv.iter().zip(&weights) {
                for d in 0..hd {
                    attn[head * hd + d] += w / sum * v[kvh * hd + d];
                }
            }
        }
        for (a, g) in attn.iter_mut().zip(&gate) {
            *a /= 1.0 + (-g).exp();
        }
        let o = self.matvec("attn_output.weight", &attn);
        x.iter_mut().zip(&o).for_each(|(x, o)| *x += o);
        let xf = self.rms_norm(&x, self.w("post_attention_norm.weight"));
        let gate = self.matvec("ffn_gate.weight", &xf);
        let up = self.matvec("ffn_up.weight", &xf);
        let act: Vec<f64> = gate
            .iter()
            .zip(&up)
            .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
            .collect();
        let down = self.matvec("ffn_down.weight", &act);
        x.iter_mut().zip(&down).for_each(|(x, d)| *x += d);
        let out = self.rms_norm(&x, self.w("nextn.shared_head_norm.weight"));
        (self.matvec("embed", &out), out)
    }
}
