//! Images in (src/vision/), on the CPU: the Qwen3.5 vision tower on the tiny random-weight
//! projector (tests/fixtures/make_qwen35_vision.py) against llama.cpp's embeddings of the same
//! images (golden/llama-cpp-vision.json, scripts/reference/make_vision_goldens.py) and against a
//! float64 NumPy tower written apart from both (golden/f64-qwen3vl.json,
//! scripts/reference/qwen3vl_f64.py), and the text model after an image against llama.cpp's
//! greedy steps (tests/common/vision.rs); likewise Qwen3-VL's tower with deepstack blocks and its
//! text model (tests/fixtures/make_qwen3vl_vision.py), Gemma 3's and Gemma 4's. Two images are at sizes the tower takes as they are (the
//! native 32×32, and 48×32, whose position grid is resampled); two take llama.cpp's resize and
//! letterbox.

use crate::common;

use common::golden_run;
use common::vision::{
    Case, GEMMA3, GEMMA4, QWEN3VL, QWEN3VL_MOE, QWEN35, check_embeddings, encode_all, encoder,
    golden_embeddings, max_diff, prefill_prompt, steps_after_image,
};
use std::sync::Arc;

use kiln::backend::cpu::CpuBackend;
use kiln::model::arch::{BatchSeq, KvCacheTypes, RowInputs};
use kiln::model::chat::{ChatTemplate, Message};
use kiln::model::conversation::Conversation;
use kiln::model::multimodal::{ImageInput, ImageMarkers, PromptPiece, render_pieces};
use kiln::model::session::DEFAULT_BATCH;
use kiln::model::{Model, ModelFile, Session, Tokenizer};
use kiln::vision::{Mmproj, image};

#[test]
fn qwen3vl_embeddings_match_llama_cpp_and_the_f64_tower() {
    let backend = CpuBackend::new(2).unwrap();
    check_embeddings(&QWEN35, &encode_all(&QWEN35, &backend), "CPU");
}

/// The text model after an image (llama.cpp's mtmd: the image's rows at (p, p + row, p + column)
/// under Qwen3.5's multi-axis RoPE, the text after it at p + max(rows, columns)), against
/// llama.cpp's greedy steps. Given llama.cpp's own embeddings, by the tight rule (top-5 logits
/// within 0.01, the argmax equal where the margin is at least 0.05): measured 1.1e-4. With
/// kiln's embeddings, whose f16 GELU roundings differ from llama.cpp's here and there by one f16
/// step (the embeddings test above), this random model moves its logits by about 0.01: by the
/// rule of the models with that GELU table (`GELU_TABLE_F32`, the golden README's Gemma 2
/// section).
#[test]
fn logits_after_an_image_match_llama_cpp() {
    logits_after_an_image(&QWEN35, "Qwen3.5");
}

/// Qwen3-VL's tower with deepstack blocks (0 and 2 of its 3): each image row carries the merger's
/// embedding and the two blocks' features side by side, against llama.cpp's embeddings and the
/// float64 tower's.
#[test]
fn qwen3vl_deepstack_embeddings_match_llama_cpp_and_the_f64_tower() {
    let backend = CpuBackend::new(2).unwrap();
    check_embeddings(&QWEN3VL, &encode_all(&QWEN3VL, &backend), "CPU");
}

/// The Qwen3-VL text model after an image, as the Qwen3.5 one above, its image rows' deepstack
/// slices added after its first two layers; with those slices zeroed, or swapped between the
/// layers, the logits move past any rule: the test sees where each goes.
#[test]
fn logits_after_a_qwen3vl_image_match_llama_cpp() {
    let (model, embeddings) = logits_after_an_image(&QWEN3VL, "Qwen3-VL");
    let (e, width) = (model.config.hidden_size, model.config.embedding_width());
    assert_eq!(width, 3 * e, "two deepstack slices");
    let (_, want) = prefill_prompt(&QWEN3VL, &model, embeddings.clone(), None);
    let mut zeroed = embeddings.clone();
    let mut swapped = embeddings;
    for (z, s) in zeroed
        .chunks_exact_mut(width)
        .zip(swapped.chunks_exact_mut(width))
    {
        z[e..].fill(0.0);
        let (first, second) = s[e..].split_at_mut(e);
        first.swap_with_slice(second);
    }
    for (what, mutant) in [("zeroed", zeroed), ("swapped", swapped)] {
        let (_, got) = prefill_prompt(&QWEN3VL, &model, mutant, None);
        let moved = max_diff(&got, &want);
        eprintln!("deepstack slices {what}: the logits move by {moved:.3}");
        assert!(
            moved > 0.5,
            "deepstack slices {what} moved the logits by {moved}"
        );
    }
}

/// Two Qwen3-VL sequences with images in one forward call, a text-only one between them: each
/// sequence's last logits are those it gets alone, so each image's deepstack slices land on its
/// own rows.
#[test]
fn qwen3vl_images_in_one_batched_call_match_each_alone() {
    let mf = ModelFile::open(&common::fixture(QWEN3VL.model)).unwrap();
    let model = Model::load(&mf, CpuBackend::new(2).unwrap()).unwrap();
    let tower = encoder(&QWEN3VL, &model.backend);
    let embed = |name: &str| {
        let img = image::load(&common::fixture(&format!("models/{name}"))).unwrap();
        tower.encode(&model.backend, &img).unwrap().embeddings
    };
    let width = model.config.embedding_width();
    let images = [embed("vision-48x32.png"), embed("vision-20x70.png")];
    let text: Vec<u32> = (100..110).collect();
    let ids = [
        vec![0; images[0].len() / width],
        text,
        vec![0; images[1].len() / width],
    ];
    let inputs = |i: usize| RowInputs {
        embedded: match i {
            0 => Some((0, &images[0][..])),
            2 => Some((0, &images[1][..])),
            _ => None,
        },
        positions: None,
        bidirectional: false,
    };
    let vocab = model.config.vocab_size;
    let run = |which: &[usize]| -> Vec<f32> {
        let mut caches: Vec<_> = which
            .iter()
            .map(|_| model.new_cache(128, KvCacheTypes::default()).unwrap())
            .collect();
        let mut seqs: Vec<BatchSeq<CpuBackend>> = which
            .iter()
            .zip(caches.iter_mut())
            .map(|(&i, cache)| BatchSeq {
                ids: &ids[i],
                start_pos: 0,
                cache,
                inputs: inputs(i),
                all_rows: false,
            })
            .collect();
        let mut scratch = model.new_scratch(64).unwrap();
        let mut logits = Vec::new();
        model
            .forward_batch(&mut seqs, &mut scratch, &mut logits)
            .unwrap();
        logits
    };
    let together = run(&[0, 1, 2]);
    for i in 0..3 {
        let alone = run(&[i]);
        let d = max_diff(&together[i * vocab..(i + 1) * vocab], &alone);
        eprintln!("sequence {i}: |Δ| {d:.1e} from alone");
        assert!(d <= 1e-4, "sequence {i}: {d} from its logits alone");
    }
}

/// Qwen3-VL MoE's text model (Qwen3 MoE's experts under the same multi-axis RoPE and deepstack)
/// after an image, as the dense one.
#[test]
fn logits_after_a_qwen3vl_moe_image_match_llama_cpp() {
    logits_after_an_image(&QWEN3VL_MOE, "Qwen3-VL MoE");
}

/// `case`'s greedy steps after its image against llama.cpp's: given llama.cpp's embeddings by
/// the tight rule, given kiln's by the GELU models' rule. Returns the model and llama.cpp's
/// embeddings.
fn logits_after_an_image(case: &Case, name: &str) -> (Model<CpuBackend>, Vec<f32>) {
    let golden = common::golden(case.golden);
    let image_name = golden["logits"]["image"].as_str().unwrap();
    let mf = ModelFile::open(&common::fixture(case.model)).unwrap();
    let model = Model::load(&mf, CpuBackend::new(2).unwrap()).unwrap();
    let llama_embeddings = golden_embeddings(&golden, image_name).2;
    steps_after_image(
        case,
        &model,
        llama_embeddings.clone(),
        &golden_run::EXACT_F32,
        &format!("{name}, llama.cpp's embeddings"),
    );
    let file = Mmproj::open(&common::fixture(case.mmproj)).unwrap();
    file.check_text_width(model.config.hidden_size, model.config.deepstack_layers)
        .unwrap();
    let img = image::load(&common::fixture(&format!("models/{image_name}"))).unwrap();
    let encoded = encoder(case, &model.backend)
        .encode(&model.backend, &img)
        .unwrap();
    steps_after_image(
        case,
        &model,
        encoded.embeddings,
        &golden_run::GELU_TABLE_F32,
        &format!("{name}, kiln's embeddings"),
    );
    (model, llama_embeddings)
}

/// Gemma 3's tower (SigLIP blocks, 2×2 average pooling here, the soft-embedding RMSNorm and the
/// transposed input projection) on images letterboxed into its fixed square with the bilinear
/// filter, against llama.cpp's embeddings.
#[test]
fn gemma3_embeddings_match_llama_cpp() {
    let backend = CpuBackend::new(2).unwrap();
    check_embeddings(&GEMMA3, &encode_all(&GEMMA3, &backend), "CPU");
}

/// The Gemma 3 text model after an image whose rows attend to each other both ways (llama.cpp's
/// non-causal decode of an image chunk) and enter unscaled, against llama.cpp's greedy steps:
/// given llama.cpp's embeddings by the tight rule (measured: 1.8e-3), given kiln's by the GELU
/// models' rule (8.3e-3: their f16 GELU roundings differ here and there by a step). Run causally
/// instead, the image moves the logits by 9.6: the test sees the attention's direction.
#[test]
fn logits_after_a_gemma3_image_match_llama_cpp() {
    logits_after_a_bidirectional_image(&GEMMA3, "Gemma 3");
}

/// Gemma 4's tower (RMSNorm blocks with per-head norms, the 2-D NEOX RoPE, gated feed-forward,
/// clamped linears, pooling and standardization) on images resized to whole tokens, against
/// llama.cpp's embeddings.
#[test]
fn gemma4_embeddings_match_llama_cpp() {
    let backend = CpuBackend::new(2).unwrap();
    check_embeddings(&GEMMA4, &encode_all(&GEMMA4, &backend), "CPU");
}

/// The Gemma 4 text model after an image (seen both ways on its sliding-window layers, causally
/// on its global ones, as llama.cpp decodes it for every Gemma 4 but E2B and E4B), against
/// llama.cpp's greedy steps: given llama.cpp's embeddings by the tight rule (measured 5.2e-3);
/// given kiln's, whose f16 GELU roundings differ here and there by a step, by the GELU models'
/// rule (measured 1.9e-2). Run causally, the image moves the logits by 24.
#[test]
fn logits_after_a_gemma4_image_match_llama_cpp() {
    logits_after_a_bidirectional_image(&GEMMA4, "Gemma 4");
}

/// The greedy steps after `case`'s image, given llama.cpp's embeddings (tight rule) and kiln's
/// (the GELU models' rule), and the image's rows seen both ways: run causally, they move the
/// logits past any rule.
fn logits_after_a_bidirectional_image(case: &Case, name: &str) {
    let golden = common::golden(case.golden);
    let image_name = golden["logits"]["image"].as_str().unwrap();
    let mf = ModelFile::open(&common::fixture(case.model)).unwrap();
    let model = Model::load(&mf, CpuBackend::new(2).unwrap()).unwrap();
    let llama_embeddings = golden_embeddings(&golden, image_name).2;
    steps_after_image(
        case,
        &model,
        llama_embeddings.clone(),
        &golden_run::EXACT_F32,
        &format!("{name}, llama.cpp's embeddings"),
    );
    let (_, both_ways) = prefill_prompt(case, &model, llama_embeddings.clone(), None);
    let (_, causal) = prefill_prompt(case, &model, llama_embeddings, Some(false));
    let moved = max_diff(&both_ways, &causal);
    eprintln!("{name}: causal attention over the image moves the logits by {moved:.3}");
    assert!(
        moved > 0.5,
        "{name}: causal or not changed the logits by only {moved}"
    );
    let img = image::load(&common::fixture(&format!("models/{image_name}"))).unwrap();
    let encoded = encoder(case, &model.backend)
        .encode(&model.backend, &img)
        .unwrap();
    assert!(encoded.bidirectional, "{name}'s images are seen both ways");
    steps_after_image(
        case,
        &model,
        encoded.embeddings,
        &golden_run::GELU_TABLE_F32,
        &format!("{name}, kiln's embeddings"),
    );
}

/// A chat with an image in turn 1 and questions in turns 2 and 3: each later turn prefills only
/// what it adds (the image is not encoded or run again), and its logits are those of a fresh
/// session that runs the whole rendered conversation, image included.
#[test]
fn chat_with_an_image_reuses_it_across_turns() {
    chat_with_an_image(&QWEN35, DEFAULT_BATCH);
}

/// The same with Qwen3-VL's deepstack, in chunks of 5 rows, so the image's 24 rows (and their
/// deepstack slices) are split across forward calls.
#[test]
fn qwen3vl_chat_with_an_image_in_small_chunks_reuses_it_across_turns() {
    chat_with_an_image(&QWEN3VL, 5);
}

fn chat_with_an_image(case: &Case, batch: usize) {
    let mf = ModelFile::open(&common::fixture(case.model)).unwrap();
    let tok = Tokenizer::from_model(&mf).unwrap();
    let model = Model::load(&mf, CpuBackend::new(2).unwrap()).unwrap();
    let file = Mmproj::open(&common::fixture(case.mmproj)).unwrap();
    let markers = ImageMarkers::for_projector(&file.config.projector);
    let img = image::load(&common::fixture("models/vision-48x32.png")).unwrap();
    let e = encoder(case, &model.backend)
        .encode(&model.backend, &img)
        .unwrap();
    let image = ImageInput {
        cols: e.cols,
        rows: e.rows,
        embeddings: Arc::new(e.embeddings),
        bidirectional: e.bidirectional,
    };
    let template = ChatTemplate::for_model(&tok, mf.config.arch);
    let session = Session::with_batch(&model, 512, batch).unwrap();
    let mut conv = Conversation::new(session, template.clone(), None);
    conv.set_image_markers(markers);
    let turns = ["What is in this picture?", "What colour is it?", "Thanks."];
    let reply = "A small test pattern.";
    let mut history: Vec<(Message, usize)> = Vec::new();
    for (i, text) in turns.iter().enumerate() {
        let images = if i == 0 {
            vec![image.clone()]
        } else {
            Vec::new()
        };
        let cached = conv.session.tokens().len();
        let before = conv.session.stats;
        let turn = conv.user_turn_with_images(&tok, text, images, 64).unwrap();
        let logits = conv.session.prefill(&turn.new_tokens).unwrap().to_vec();
        let prefilled = conv.session.stats.prefill_tokens - before.prefill_tokens;
        history.push((Message::new("user", text), usize::from(i == 0)));
        if i == 0 {
            assert_eq!(
                prefilled, turn.total_tokens,
                "turn 1 runs it all, image included"
            );
        } else {
            assert_eq!(
                prefilled,
                turn.total_tokens - cached,
                "turn {}: only what is new",
                i + 1
            );
            assert!(conv.session.has_media(), "the image stays in the cache");
        }
        // A fresh session over the whole conversation.
        let pieces = render_pieces(&template, &tok, &history, markers).unwrap();
        let mut fresh = Session::new(&model, 512).unwrap();
        let mut want = Vec::new();
        for piece in &pieces {
            want = match piece {
                PromptPiece::Tokens(ids) => fresh.prefill(ids).unwrap().to_vec(),
                PromptPiece::Image(_) => fresh.prefill_embeddings(&image).unwrap().to_vec(),
            };
        }
        assert_eq!(fresh.tokens(), conv.session.tokens(), "turn {}", i + 1);
        let d = common::vision::max_diff(&logits, &want);
        eprintln!(
            "turn {}: prefilled {prefilled} of {} rows; |Δ| {d:.1e}",
            i + 1,
            turn.total_tokens
        );
        assert!(d <= 1e-3, "turn {}: against a fresh run: {d}", i + 1);
        for t in tok.encode(reply, false).unwrap() {
            conv.session.decode(t).unwrap();
        }
        conv.session.checkpoint().unwrap();
        conv.assistant_reply(reply);
        history.push((Message::new("assistant", reply), 0));
    }
}

/// A Gemma template that writes `<start_of_image>` for an image part gives the pieces llama.cpp's
/// way gives (the media marker replaced by `<start_of_image>`, the image, `<end_of_image>`): the
/// image sits between the begin and end texts either way.
#[test]
fn a_gemma_template_places_the_image_between_its_markers() {
    let mf = ModelFile::open(&common::fixture(GEMMA3.model)).unwrap();
    let tok = Tokenizer::from_model(&mf).unwrap();
    let turn = |content: &str| {
        format!(
            "{{%- for m in messages -%}}<start_of_turn>{{{{ m.role }}}}\n{content}<end_of_turn>\n\
             {{% endfor -%}}{{%- if add_generation_prompt -%}}<start_of_turn>model\n{{% endif -%}}"
        )
    };
    let with_parts = ChatTemplate::from_source(
        &turn(
            "{% if m.content is string -%}{{ m.content }}{%- else -%}{%- for item in m.content -%}\
             {%- if item.type == 'image' -%}{{ '<start_of_image>' }}{%- else -%}{{ item.text }}\
             {%- endif -%}{%- endfor -%}{%- endif -%}",
        ),
        "<bos>",
        "<eos>",
    );
    let text_only = ChatTemplate::from_source(&turn("{{ m.content }}"), "<bos>", "<eos>");
    let markers = ImageMarkers::for_projector(&kiln::vision::Projector::Gemma3);
    let messages = [(Message::new("user", "What is this?"), 1)];
    let a = render_pieces(&with_parts, &tok, &messages, markers).unwrap();
    let b = render_pieces(&text_only, &tok, &messages, markers).unwrap();
    assert!(
        matches!(
            a.as_slice(),
            [
                PromptPiece::Tokens(_),
                PromptPiece::Image(0),
                PromptPiece::Tokens(_)
            ]
        ),
        "{a:?}"
    );
    assert_eq!(a, b);
    let PromptPiece::Tokens(before) = &a[0] else {
        unreachable!()
    };
    assert!(
        tok.decode(before, false)
            .unwrap()
            .ends_with("<start_of_image>")
    );
}
