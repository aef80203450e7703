//! Chat templates: the GGUF templates render the golden conversations byte for byte (as Python's
//! jinja2 did with Hugging Face's settings); built-in templates and template errors.

use crate::common;

use kiln::model::chat::{ChatTemplate, Message, TemplateOrigin};
use kiln::model::{ModelFile, Tokenizer};

fn messages(v: &serde_json::Value) -> Vec<Message> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|m| Message::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect()
}

#[test]
fn gguf_templates_render_like_jinja2() {
    let golden = common::golden("chat-templates.json");
    let mut rendered = 0;
    for (name, case) in golden.as_object().unwrap() {
        let model = ModelFile::open(&common::real_model(name)).unwrap();
        let tok = Tokenizer::from_model(&model).unwrap();
        let tmpl = ChatTemplate::for_model(&tok, model.config.arch);
        if case.is_null() {
            assert_eq!(
                tmpl.origin,
                TemplateOrigin::BuiltinGemma,
                "{name} has no template"
            );
            continue;
        }
        assert_eq!(tmpl.origin, TemplateOrigin::Model);
        assert_eq!(tok.chat_template.as_deref(), case["template"].as_str());
        for r in case["renders"].as_array().unwrap() {
            let text = tmpl
                .render(
                    &messages(&r["messages"]),
                    r["add_generation_prompt"].as_bool().unwrap(),
                )
                .unwrap();
            assert_eq!(text, r["text"].as_str().unwrap(), "{name}");
            rendered += 1;
        }
    }
    assert_eq!(rendered, 4);
}

#[test]
fn builtin_gemma_template_uses_turn_markers_and_tokenizes_them_as_specials() {
    let model = ModelFile::open(&common::real_model(common::REAL_MODELS[2])).unwrap();
    let tok = Tokenizer::from_model(&model).unwrap();
    let tmpl = ChatTemplate::for_model(&tok, model.config.arch);
    let msgs = [
        Message::new("system", "Be brief."),
        Message::new("user", "Hi"),
    ];
    let text = tmpl.render(&msgs, true).unwrap();
    assert_eq!(text.matches("<start_of_turn>").count(), 2, "{text}");
    assert!(
        text.starts_with("<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"),
        "{text}"
    );
    assert!(text.ends_with("<start_of_turn>model\n"), "{text}");
    let ids = tmpl.prompt_ids(&tok, &msgs, true).unwrap();
    assert_eq!(ids[0], tok.bos.unwrap(), "Gemma prompts start with BOS");
    assert_eq!(ids.iter().filter(|&&i| i == tok.bos.unwrap()).count(), 1);
    let sot = tok.token_id("<start_of_turn>").unwrap();
    assert_eq!(ids.iter().filter(|&&i| i == sot).count(), 2);
}

#[test]
fn templates_that_write_bos_do_not_get_a_second_one() {
    let model = ModelFile::open(&common::real_model(common::REAL_MODELS[2])).unwrap();
    let tok = Tokenizer::from_model(&model).unwrap();
    let tmpl = ChatTemplate::from_source(
        "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}",
        "<bos>",
        "<eos>",
    );
    let ids = tmpl
        .prompt_ids(&tok, &[Message::new("user", "Hi")], true)
        .unwrap();
    assert_eq!(
        ids.iter().filter(|&&i| Some(i) == tok.bos).count(),
        1,
        "{ids:?}"
    );
}

#[test]
fn template_errors_carry_the_template_message() {
    let tmpl = ChatTemplate::from_source(
        "{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversations must start with a user message') }}{% endif %}",
        "",
        "",
    );
    let err = tmpl
        .render(&[Message::new("assistant", "x")], true)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("Conversations must start with a user message"),
        "{err}"
    );

    let broken = ChatTemplate::from_source("{% for m in messages %}", "", "");
    assert!(broken.render(&[Message::new("user", "x")], true).is_err());
}

#[test]
fn python_compatible_helpers() {
    let tmpl = ChatTemplate::from_source(
        "{{ messages[0].content.strip().upper() }}|{{ {'b': 1, 'a': [1, 'é']} | tojson }}|{{ strftime_now('%Y') | length }}",
        "",
        "",
    );
    let text = tmpl
        .render(&[Message::new("user", "  hi  ")], false)
        .unwrap();
    assert_eq!(text, "HI|{\"b\": 1, \"a\": [1, \"é\"]}|4");
    // GLM's template passes Python's `ensure_ascii` (json.dumps's escapes when it is true).
    let tmpl = ChatTemplate::from_source(
        "{{ 'é😀' | tojson(ensure_ascii=False) }}|{{ 'é😀' | tojson(ensure_ascii=True) }}",
        "",
        "",
    );
    let text = tmpl.render(&[], false).unwrap();
    assert_eq!(text, "\"é😀\"|\"\\u00e9\\ud83d\\ude00\"");
}

/// gpt-oss's harmony template (llama.cpp's copy of openai/gpt-oss-120b's, which kiln builds in
/// for gpt-oss files that carry none) renders as jinja2 renders it
/// (scripts/reference/render_template.py): its system header with the date, developer
/// instructions, the final channel of earlier replies.
#[test]
fn harmony_template_renders_like_jinja2() {
    let source = include_str!("../../src/model/templates/gpt-oss.jinja");
    renders_like_jinja2(source, "template-gpt-oss.json");
}

/// GLM-4.6's template (kiln's built-in for glm4moe files without one) as jinja2 renders it: the
/// `[gMASK]<sop>` prefix, earlier replies behind an empty `<think></think>`.
#[test]
fn glm_template_renders_like_jinja2() {
    let source = include_str!("../../src/model/templates/glm4.jinja");
    renders_like_jinja2(source, "template-glm4.json");
}

/// GLM-4.6's template with `enable_thinking` false (`--chat-template-kwargs`): each user turn
/// ends in `/nothink` and the generation prompt closes an empty `<think></think>`, as in jinja2.
#[test]
fn glm_template_with_thinking_off_renders_like_jinja2() {
    let source = include_str!("../../src/model/templates/glm4.jinja");
    renders_like_jinja2(source, "template-glm4-nothink.json");
}

/// Phi-3.5-mini's template (kiln's built-in for phi3 files without one) as jinja2 renders it.
#[test]
fn phi3_template_renders_like_jinja2() {
    let source = include_str!("../../src/model/templates/phi3.jinja");
    renders_like_jinja2(source, "template-phi3.json");
}

/// Gemma 4 31B's template (kiln's built-in for gemma4 files without one) as jinja2 renders it:
/// `<|turn>role … <turn|>`, an empty thought channel opening the model's turn.
#[test]
fn gemma4_template_renders_like_jinja2() {
    let source = include_str!("../../src/model/templates/gemma4.jinja");
    renders_like_jinja2(source, "template-gemma4.json");
}

/// Gemma 4's template with `enable_thinking` true (`--chat-template-kwargs`): a system turn
/// carrying `<|think|>`, and no empty thought channel, as in jinja2.
#[test]
fn gemma4_template_with_thinking_renders_like_jinja2() {
    let source = include_str!("../../src/model/templates/gemma4.jinja");
    renders_like_jinja2(source, "template-gemma4-thinking.json");
}

/// Mistral's v7-tekken format (kiln's built-in for mistral3 files without a template) as
/// llama.cpp's built-in `mistral-v7-tekken` renders the same conversations
/// (scripts/reference/render_llama_cpp_template.py), a developer turn included.
#[test]
fn mistral_v7_tekken_template_renders_like_llama_cpp() {
    let source = include_str!("../../src/model/templates/mistral-v7-tekken.jinja");
    renders_like_jinja2(source, "template-mistral-v7-tekken.json");
}

/// Every render in `golden` (scripts/reference/render_template.py: four conversations, with and
/// without the generation prompt, with the golden's BOS and EOS texts) equals kiln's.
fn renders_like_jinja2(source: &str, golden: &str) {
    let golden = common::golden(golden);
    let text = |k: &str| golden[k].as_str().unwrap().to_string();
    let kwargs = golden["kwargs"].as_object().cloned().unwrap_or_default();
    let tmpl = ChatTemplate::from_source(source, &text("bos_token"), &text("eos_token"))
        .with_kwargs(kwargs);
    let mut rendered = 0;
    for r in golden["renders"].as_array().unwrap() {
        let today = chrono::Local::now().format("%Y-%m-%d").to_string();
        let text = tmpl
            .render(
                &messages(&r["messages"]),
                r["add_generation_prompt"].as_bool().unwrap(),
            )
            .unwrap();
        let want = r["text"].as_str().unwrap().replace("DATE", &today);
        assert_eq!(text, want);
        rendered += 1;
    }
    assert_eq!(rendered, 8);
}
