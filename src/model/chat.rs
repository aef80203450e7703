//! Chat templates: a conversation rendered to prompt text by the model's own Jinja template, with
//! minijinja set up as Hugging Face's transformers renders (trim_blocks, lstrip_blocks, Python
//! string methods, `raise_exception`, `strftime_now`, Python's `tojson`). A model without a
//! template gets its family's built-in one (`Family::chat_template`): ChatML unless the family
//! file names another.

use std::fmt::Write as _;

use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, ErrorKind};
use serde::{Deserialize, Serialize};

use super::config::Arch;
use super::tokenizer::Tokenizer;
use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: &str, content: &str) -> Message {
        Message {
            role: role.to_string(),
            content: content.to_string(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateOrigin {
    /// The model file's own template.
    Model,
    /// kiln's built-in ChatML (`<|im_start|>role … <|im_end|>`).
    BuiltinChatml,
    /// kiln's built-in Gemma format (`<start_of_turn>user … <end_of_turn>`).
    BuiltinGemma,
    /// gpt-oss's harmony template (OpenAI's, as llama.cpp keeps it), built in.
    BuiltinHarmony,
    /// GLM-4.6's template (Z.ai's, as llama.cpp keeps it), built in.
    BuiltinGlm,
    /// Phi-3.5-mini's template (Microsoft's, as llama.cpp keeps it), built in.
    BuiltinPhi3,
    /// Gemma 4 31B's template (Google's, as llama.cpp keeps it), built in.
    BuiltinGemma4,
    /// Mistral's v7-tekken format (llama.cpp's `mistral-v7-tekken`), built in.
    BuiltinMistralV7Tekken,
}

/// A prompt format kiln supplies for models that carry no chat template.
pub(crate) struct BuiltinTemplate {
    pub origin: TemplateOrigin,
    /// Jinja source, rendered as a model's own template would be.
    pub source: &'static str,
}

pub(crate) const CHATML: BuiltinTemplate = BuiltinTemplate {
    origin: TemplateOrigin::BuiltinChatml,
    source: "{%- for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{%- endif %}",
};

/// gpt-oss's own template (`openai/gpt-oss-120b`'s chat_template.jinja, llama.cpp's copy in
/// models/templates), for a gpt-oss file that carries none.
pub(crate) const HARMONY: BuiltinTemplate = BuiltinTemplate {
    origin: TemplateOrigin::BuiltinHarmony,
    source: include_str!("templates/gpt-oss.jinja"),
};

/// GLM-4.6's own template (`zai-org/GLM-4.6`'s, llama.cpp's copy in models/templates), for a
/// GLM-4.5 MoE file that carries none.
pub(crate) const GLM: BuiltinTemplate = BuiltinTemplate {
    origin: TemplateOrigin::BuiltinGlm,
    source: include_str!("templates/glm4.jinja"),
};

/// Mistral's v7-tekken format (Ministral 3, Devstral Small 2), as llama.cpp's built-in
/// `mistral-v7-tekken` writes it: `[SYSTEM_PROMPT]…[/SYSTEM_PROMPT]`, `[INST]…[/INST]`, every
/// other turn followed by `</s>`; nothing opens the reply.
pub(crate) const MISTRAL_V7_TEKKEN: BuiltinTemplate = BuiltinTemplate {
    origin: TemplateOrigin::BuiltinMistralV7Tekken,
    source: include_str!("templates/mistral-v7-tekken.jinja"),
};

/// Gemma 4 31B's own template (`google/gemma-4-31B-it`'s, llama.cpp's copy in models/templates),
/// for a Gemma 4 file that carries none.
pub(crate) const GEMMA4: BuiltinTemplate = BuiltinTemplate {
    origin: TemplateOrigin::BuiltinGemma4,
    source: include_str!("templates/gemma4.jinja"),
};

/// Phi-3.5-mini's own template (`microsoft/Phi-3.5-mini-instruct`'s, llama.cpp's copy in
/// models/templates), for a phi3 file that carries none.
pub(crate) const PHI3: BuiltinTemplate = BuiltinTemplate {
    origin: TemplateOrigin::BuiltinPhi3,
    source: include_str!("templates/phi3.jinja"),
};

#[derive(Clone)]
pub struct ChatTemplate {
    source: String,
    pub origin: TemplateOrigin,
    bos_token: String,
    eos_token: String,
    /// Extra variables for the template (`--chat-template-kwargs`, as llama.cpp's: Qwen3's and
    /// GLM's `enable_thinking`, for one).
    kwargs: serde_json::Map<String, serde_json::Value>,
}

impl ChatTemplate {
    /// The model's template, or the built-in one for its architecture.
    pub fn for_model(tok: &Tokenizer, arch: Arch) -> ChatTemplate {
        let builtin = arch.family().chat_template;
        Self::with_fallback(tok, Some((builtin.source, builtin.origin)))
            .expect("a fallback template is given")
    }

    /// The file's own template, for a file whose architecture kiln does not run (a vocabulary-only
    /// GGUF): None when it has none.
    pub fn from_file(tok: &Tokenizer) -> Option<ChatTemplate> {
        Self::with_fallback(tok, None)
    }

    fn with_fallback(
        tok: &Tokenizer,
        fallback: Option<(&str, TemplateOrigin)>,
    ) -> Option<ChatTemplate> {
        let (source, origin) = match (&tok.chat_template, fallback) {
            (Some(t), _) => (t.clone(), TemplateOrigin::Model),
            (None, Some((source, origin))) => (source.to_string(), origin),
            (None, None) => return None,
        };
        let text = |id: Option<u32>| {
            id.and_then(|i| tok.decode(&[i], false).ok())
                .unwrap_or_default()
        };
        Some(ChatTemplate {
            source,
            origin,
            bos_token: text(tok.bos),
            eos_token: text(tok.eos),
            kwargs: Default::default(),
        })
    }

    /// This template with extra variables for the renders (`--chat-template-kwargs`); the
    /// conversation's own (`messages`, `add_generation_prompt`, the BOS and EOS texts) win.
    pub fn with_kwargs(mut self, kwargs: serde_json::Map<String, serde_json::Value>) -> Self {
        self.kwargs = kwargs;
        self
    }

    /// This template with `extra` variables added to (and overriding) those it has.
    pub fn with_extra_kwargs(mut self, extra: &serde_json::Map<String, serde_json::Value>) -> Self {
        self.kwargs
            .extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        self
    }

    /// A template from source text (tests, `--chat-template`).
    pub fn from_source(source: &str, bos_token: &str, eos_token: &str) -> ChatTemplate {
        ChatTemplate {
            source: source.to_string(),
            origin: TemplateOrigin::Model,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            kwargs: Default::default(),
        }
    }

    pub fn describe(&self) -> &'static str {
        match self.origin {
            TemplateOrigin::Model => "the model's chat template",
            TemplateOrigin::BuiltinChatml => "kiln's built-in ChatML template",
            TemplateOrigin::BuiltinGemma => "kiln's built-in Gemma template",
            TemplateOrigin::BuiltinHarmony => "kiln's built-in harmony template (gpt-oss)",
            TemplateOrigin::BuiltinGlm => "kiln's built-in GLM-4.6 template",
            TemplateOrigin::BuiltinPhi3 => "kiln's built-in Phi-3.5 template",
            TemplateOrigin::BuiltinGemma4 => "kiln's built-in Gemma 4 template",
            TemplateOrigin::BuiltinMistralV7Tekken => "kiln's built-in Mistral v7-tekken template",
        }
    }

    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }

    /// Render `messages`; with `add_generation_prompt` the text ends where the assistant's reply
    /// begins. A template that fails is an error carrying the template's own message.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        self.render_messages(
            Value::from(minijinja::value::Serde(messages)),
            add_generation_prompt,
        )
    }

    /// `render` over messages in any shape the template takes (OpenAI-style content parts with
    /// images, for one: `multimodal.rs`).
    pub fn render_json(
        &self,
        messages: &serde_json::Value,
        add_generation_prompt: bool,
    ) -> Result<String> {
        self.render_messages(
            Value::from(minijinja::value::Serde(messages)),
            add_generation_prompt,
        )
    }

    /// `render_json` with OpenAI's `tools` (function definitions) given to the template as its
    /// `tools` variable, as Hugging Face's `apply_chat_template(tools=…)` does.
    pub fn render_with_tools(
        &self,
        messages: &serde_json::Value,
        tools: &serde_json::Value,
        add_generation_prompt: bool,
    ) -> Result<String> {
        let mut with_tools = self.clone();
        with_tools.kwargs.insert("tools".to_string(), tools.clone());
        with_tools.render_json(messages, add_generation_prompt)
    }

    /// The tool-call syntax this template teaches its model, if it takes tools.
    pub fn tool_syntax(&self) -> Option<super::tools::ToolSyntax> {
        super::tools::ToolSyntax::of_template(&self.source)
    }

    fn render_messages(&self, messages: Value, add_generation_prompt: bool) -> Result<String> {
        let mut env = Environment::new();
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()
                .map_err(|e| Error::Template(e.to_string()))?,
        );
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> Result<Value, minijinja::Error> {
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
            },
        );
        env.add_function(
            "strftime_now",
            |fmt: String| -> Result<String, minijinja::Error> {
                let mut out = String::new();
                write!(out, "{}", chrono::Local::now().format(&fmt)).map_err(|_| {
                    minijinja::Error::new(
                        ErrorKind::InvalidOperation,
                        format!("bad strftime format {fmt:?}"),
                    )
                })?;
                Ok(out)
            },
        );
        env.add_filter("tojson", python_tojson);
        let tmpl = env
            .template_from_str(&self.source)
            .map_err(|e| Error::Template(describe(&e)))?;
        let ctx = minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
            ..Value::from(minijinja::value::Serde(&self.kwargs)),
        };
        tmpl.render(ctx).map_err(|e| Error::Template(describe(&e)))
    }

    /// The token ids of a rendered conversation. A template that writes the BOS text itself
    /// (many do) is not given a second BOS by the tokenizer.
    pub fn prompt_ids(
        &self,
        tok: &Tokenizer,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<Vec<u32>> {
        let text = self.render(messages, add_generation_prompt)?;
        self.encode(tok, &text)
    }

    /// The token ids of a rendering: a template that writes the BOS text itself (many do) is
    /// not given a second BOS by the tokenizer.
    pub fn encode(&self, tok: &Tokenizer, rendered: &str) -> Result<Vec<u32>> {
        tok.encode(rendered, !self.writes_bos(rendered))
    }

    /// Whether a rendering starts with the BOS text (many templates write it themselves: the
    /// tokenizer then adds no second one).
    pub fn writes_bos(&self, rendered: &str) -> bool {
        !self.bos_token.is_empty() && rendered.starts_with(&self.bos_token)
    }
}

fn describe(e: &minijinja::Error) -> String {
    let mut msg = match e.kind() {
        ErrorKind::InvalidOperation => e.detail().unwrap_or("invalid operation").to_string(),
        _ => e.to_string(),
    };
    if let Some(line) = e.line() {
        let _ = write!(msg, " (template line {line})");
    }
    msg
}

/// Python's `json.dumps(x, ensure_ascii=False, indent=…)`, which Hugging Face templates expect
/// (minijinja's own `tojson` escapes HTML characters and packs separators); `ensure_ascii=True`
/// escapes what is not ASCII, as Python's default.
fn python_tojson(value: Value, kwargs: Kwargs) -> Result<Value, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(&value)
        .map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    let mut out = String::new();
    write_python_json(&json, indent, 0, &mut out);
    if ensure_ascii == Some(true) {
        out = out
            .encode_utf16()
            .map(|u| match u {
                0..0x80 => char::from(u as u8).to_string(),
                _ => format!("\\u{u:04x}"),
            })
            .collect();
    }
    Ok(Value::from_safe_string(out))
}

fn write_python_json(v: &serde_json::Value, indent: Option<usize>, level: usize, out: &mut String) {
    use serde_json::Value as J;
    let newline = |out: &mut String, level: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * level));
        }
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    match v {
        J::Array(items) if !items.is_empty() => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, level + 1);
                write_python_json(x, indent, level + 1, out);
            }
            newline(out, level);
            out.push(']');
        }
        J::Object(map) if !map.is_empty() => {
            out.push('{');
            for (i, (k, x)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, level + 1);
                out.push_str(&serde_json::to_string(k).unwrap_or_default());
                out.push_str(": ");
                write_python_json(x, indent, level + 1, out);
            }
            newline(out, level);
            out.push('}');
        }
        other => out.push_str(&serde_json::to_string(other).unwrap_or_default()),
    }
}
