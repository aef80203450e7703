//! Tool calls in a model's reply: which syntax a chat template teaches its model (read from the
//! template's source, as llama.cpp's chat-format detection does) and the parser that takes the
//! calls back out of the generated text, leaving the rest as the reply's content. A call that does
//! not parse stays in the content as text: a malformed call is never an error.
//!
//! The syntaxes:
//! - `Hermes` (Qwen2.5, Qwen3, Hermes): `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`;
//! - `QwenXml` (Qwen3-Coder, Qwen3.5): `<tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n
//!   </parameter>\n</function>\n</tool_call>`;
//! - `Glm` (GLM-4.5/4.6): `<tool_call>NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n
//!   </tool_call>`;
//! - `Mistral`: `[TOOL_CALLS][{"name": …, "arguments": {…}}, …]`, or `[TOOL_CALLS]NAME[ARGS]{…}`
//!   per call (v11 and later);
//! - `Llama3` (Llama 3.1–3.3): the reply is one JSON object `{"name": …, "parameters": {…}}`,
//!   after `<|python_tag|>` or alone;
//! - `Harmony` (gpt-oss): a message to `functions.NAME` (`harmony.rs`);
//! - `Gemma4`: `<|tool_call>call:NAME{key:VALUE,…}<tool_call|>` (`gemma4.rs`).
//!
//! `grammar.rs` writes the grammars that force a call in each syntax.

mod gemma4;
mod grammar;
mod harmony;

use serde_json::{Map, Value};

/// A tool call taken out of a reply: the function's name and its arguments as JSON text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub name: String,
    pub arguments: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolSyntax {
    Hermes,
    QwenXml,
    Glm,
    Mistral,
    Llama3,
    Harmony,
    Gemma4,
}

impl ToolSyntax {
    /// The syntax a template's source teaches; None for a template that takes no tools.
    pub fn of_template(source: &str) -> Option<ToolSyntax> {
        if !source.contains("tools") {
            return None;
        }
        if source.contains(gemma4::OPEN) {
            Some(ToolSyntax::Gemma4)
        } else if source.contains("<|call|>") {
            Some(ToolSyntax::Harmony)
        } else if source.contains("<function=") && source.contains("<parameter=") {
            Some(ToolSyntax::QwenXml)
        } else if source.contains("<arg_key>") {
            Some(ToolSyntax::Glm)
        } else if source.contains("<tool_call>") {
            Some(ToolSyntax::Hermes)
        } else if source.contains("[TOOL_CALLS]") {
            Some(ToolSyntax::Mistral)
        } else if source.contains("<|python_tag|>") || source.contains("ipython") {
            Some(ToolSyntax::Llama3)
        } else {
            None
        }
    }

    /// Text that starts a call: streamed content is held back from where it might begin. None
    /// for harmony, whose calls are never in the answer's text.
    pub fn opener(self) -> Option<&'static str> {
        match self {
            ToolSyntax::Hermes | ToolSyntax::QwenXml | ToolSyntax::Glm => Some("<tool_call>"),
            ToolSyntax::Mistral => Some("[TOOL_CALLS]"),
            ToolSyntax::Llama3 => Some("{"),
            ToolSyntax::Gemma4 => Some(gemma4::OPEN),
            ToolSyntax::Harmony => None,
        }
    }

    /// A grammar (llguidance's Lark) whose every sentence is one call, in this syntax, of one of
    /// `functions` (OpenAI's `{"name", "parameters"}` objects), its arguments valid under the
    /// function's parameter schema: what `tool_choice: "required"` or a named function asks
    /// for. An error names the part of a schema the syntax cannot enforce.
    pub fn call_grammar(self, functions: &[&Value]) -> Result<String, String> {
        grammar::call_grammar(self, functions)
    }

    /// A generated reply's content and tool calls, from its answer text and, for harmony, whose
    /// calls are not in that text, `raw`: the whole reply with its control tokens. `functions`
    /// tell a string parameter from one written as JSON where the syntax does not say.
    pub fn parse_reply(
        self,
        answer: &str,
        raw: impl FnOnce() -> String,
        functions: &[&Value],
    ) -> (String, Vec<ToolCall>) {
        if self != ToolSyntax::Harmony {
            return self.parse(answer, functions);
        }
        let (calls, malformed) = harmony::calls(&raw());
        let mut content = answer.trim().to_string();
        for text in malformed {
            if !content.is_empty() {
                content.push('\n');
            }
            content.push_str(&text);
        }
        (content, calls)
    }

    /// Split a reply into its content and its tool calls. Calls that do not parse stay in the
    /// content.
    pub fn parse(self, text: &str, functions: &[&Value]) -> (String, Vec<ToolCall>) {
        match self {
            ToolSyntax::Hermes | ToolSyntax::QwenXml | ToolSyntax::Glm => {
                self.parse_tagged(text, functions)
            }
            ToolSyntax::Mistral => parse_mistral(text),
            ToolSyntax::Llama3 => parse_llama3(text),
            ToolSyntax::Gemma4 => gemma4::parse(text),
            // Its calls are not in the text (`parse_reply`).
            ToolSyntax::Harmony => (text.trim().to_string(), Vec::new()),
        }
    }

    /// `<tool_call>…</tool_call>` blocks (an unclosed last one runs to the end of the text).
    fn parse_tagged(self, text: &str, functions: &[&Value]) -> (String, Vec<ToolCall>) {
        const OPEN: &str = "<tool_call>";
        const CLOSE: &str = "</tool_call>";
        let (mut content, mut calls) = (String::new(), Vec::new());
        let mut rest = text;
        while let Some(start) = rest.find(OPEN) {
            content.push_str(&rest[..start]);
            let inner_start = start + OPEN.len();
            let (inner, next) = match rest[inner_start..].find(CLOSE) {
                Some(end) => (
                    &rest[inner_start..inner_start + end],
                    &rest[inner_start + end + CLOSE.len()..],
                ),
                None => (&rest[inner_start..], ""),
            };
            let parsed = match self {
                ToolSyntax::QwenXml => parse_qwen_xml(inner, functions),
                ToolSyntax::Glm => parse_glm(inner, functions),
                _ => json_call(inner.trim(), "arguments"),
            };
            match parsed {
                Some(call) => calls.push(call),
                // Not a call after all: kept as the model wrote it.
                None => content.push_str(&rest[start..rest.len() - next.len()]),
            }
            rest = next;
        }
        content.push_str(rest);
        (content.trim().to_string(), calls)
    }
}

/// `{"name": …, "<args_key>": {…}}` (Llama 3's `parameters`, Hermes' `arguments`; either is
/// taken).
fn json_call(text: &str, args_key: &str) -> Option<ToolCall> {
    let v: Value = serde_json::from_str(text).ok()?;
    call_of(&v, args_key)
}

fn call_of(v: &Value, args_key: &str) -> Option<ToolCall> {
    let name = v.get("name")?.as_str()?.to_string();
    let args = v
        .get(args_key)
        .or_else(|| v.get("arguments"))
        .or_else(|| v.get("parameters"))
        .cloned()
        .unwrap_or(Value::Object(Map::new()));
    let arguments = match args {
        // Some models write the arguments as a JSON string already.
        Value::String(s) if serde_json::from_str::<Value>(&s).is_ok() => s,
        Value::Object(_) => args.to_string(),
        _ => return None,
    };
    Some(ToolCall { name, arguments })
}

/// A parameter's value as Qwen's and GLM's templates write it: the text itself where the
/// function's schema says the parameter is a string; JSON where it parses and the schema says it
/// is something else (a quoted string too: an `anyOf` branch, as the grammar writes it); without
/// a schema, JSON where it parses to a number, boolean, list or object; else the text.
fn xml_value(text: &str, schema: Option<&Value>) -> Value {
    let text = text.strip_prefix('\n').unwrap_or(text);
    let text = text.strip_suffix('\n').unwrap_or(text);
    let is_string = schema.is_some_and(|s| {
        s["type"] == "string"
            || s["enum"]
                .as_array()
                .is_some_and(|a| !a.is_empty() && a.iter().all(Value::is_string))
            || s["const"].is_string()
    });
    match serde_json::from_str::<Value>(text) {
        Ok(v) if schema.is_some() && !is_string => v,
        Ok(v) if !v.is_string() && !is_string => v,
        _ => Value::String(text.to_string()),
    }
}

/// The schema of parameter `key` of function `name`, where `functions` has one.
fn parameter<'f>(functions: &[&'f Value], name: &str, key: &str) -> Option<&'f Value> {
    let f = functions.iter().find(|f| f["name"] == name)?;
    f.get("parameters")?.get("properties")?.get(key)
}

/// `<function=NAME>` then `<parameter=KEY>VALUE</parameter>`s, then `</function>`.
fn parse_qwen_xml(inner: &str, functions: &[&Value]) -> Option<ToolCall> {
    let inner = inner.trim();
    let rest = inner.strip_prefix("<function=")?;
    let close = rest.find('>')?;
    let name = rest[..close].trim().to_string();
    let mut body = &rest[close + 1..];
    body = body.trim_end();
    body = body.strip_suffix("</function>")?;
    let mut args = Map::new();
    let mut rest = body.trim();
    while !rest.is_empty() {
        let after = rest.strip_prefix("<parameter=")?;
        let close = after.find('>')?;
        let key = after[..close].trim().to_string();
        let value_start = &after[close + 1..];
        let end = value_start.find("</parameter>")?;
        let value = xml_value(&value_start[..end], parameter(functions, &name, &key));
        args.insert(key, value);
        rest = value_start[end + "</parameter>".len()..].trim_start();
    }
    (!name.is_empty()).then(|| ToolCall {
        name,
        arguments: Value::Object(args).to_string(),
    })
}

/// `NAME` then `<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>` pairs.
fn parse_glm(inner: &str, functions: &[&Value]) -> Option<ToolCall> {
    let inner = inner.trim();
    let name_end = inner.find("<arg_key>").unwrap_or(inner.len());
    let name = inner[..name_end].trim().to_string();
    if name.is_empty() || name.contains(char::is_whitespace) {
        return None;
    }
    let mut args = Map::new();
    let mut rest = inner[name_end..].trim();
    while !rest.is_empty() {
        let after = rest.strip_prefix("<arg_key>")?;
        let key_end = after.find("</arg_key>")?;
        let key = after[..key_end].trim().to_string();
        let after = after[key_end + "</arg_key>".len()..].trim_start();
        let after = after.strip_prefix("<arg_value>")?;
        let value_end = after.find("</arg_value>")?;
        let value = xml_value(&after[..value_end], parameter(functions, &name, &key));
        args.insert(key, value);
        rest = after[value_end + "</arg_value>".len()..].trim_start();
    }
    Some(ToolCall {
        name,
        arguments: Value::Object(args).to_string(),
    })
}

/// `[TOOL_CALLS][{…}, …]` or `[TOOL_CALLS]NAME[ARGS]{…}` (repeated).
fn parse_mistral(text: &str) -> (String, Vec<ToolCall>) {
    const OPEN: &str = "[TOOL_CALLS]";
    let Some(start) = text.find(OPEN) else {
        return (text.trim().to_string(), Vec::new());
    };
    let content = text[..start].trim().to_string();
    let rest = text[start..].trim();
    let whole = || (text.trim().to_string(), Vec::new());
    let mut calls = Vec::new();
    let body = rest.strip_prefix(OPEN).unwrap_or(rest).trim_start();
    if body.starts_with('[') {
        let Ok(Value::Array(items)) = serde_json::from_str::<Value>(body) else {
            return whole();
        };
        for item in &items {
            match call_of(item, "arguments") {
                Some(c) => calls.push(c),
                None => return whole(),
            }
        }
        return (content, calls);
    }
    for part in rest.split(OPEN).filter(|p| !p.trim().is_empty()) {
        let Some((name, args)) = part.split_once("[ARGS]") else {
            return whole();
        };
        let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(args.trim()) else {
            return whole();
        };
        calls.push(ToolCall {
            name: name.trim().to_string(),
            arguments: v.to_string(),
        });
    }
    (content, calls)
}

/// A reply that is one JSON call (`<|python_tag|>` before it or not).
fn parse_llama3(text: &str) -> (String, Vec<ToolCall>) {
    let body = text.trim();
    let body = body.strip_prefix("<|python_tag|>").unwrap_or(body).trim();
    match json_call(body, "parameters") {
        Some(call) => (String::new(), vec![call]),
        None => (text.trim().to_string(), Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call, for the expectations of this module's tests and its submodules'.
    pub(super) fn call(name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn hermes_calls_and_their_content() {
        let text = "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
        let (content, calls) = ToolSyntax::Hermes.parse(text, &[]);
        assert_eq!(content, "Let me look.");
        assert_eq!(
            calls,
            [
                call("get_weather", r#"{"city":"Paris"}"#),
                call("now", "{}")
            ]
        );
        // Malformed: kept as text, whole.
        let bad = "<tool_call>\n{\"name\": \"x\", \"arguments\": \n</tool_call>";
        assert_eq!(
            ToolSyntax::Hermes.parse(bad, &[]),
            (bad.to_string(), vec![])
        );
        // Unclosed at the end (max_tokens cut the closing tag): a whole JSON still counts.
        let cut = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n";
        assert_eq!(ToolSyntax::Hermes.parse(cut, &[]).1, [call("now", "{}")]);
        assert_eq!(
            ToolSyntax::Hermes.parse("plain", &[]),
            ("plain".into(), vec![])
        );
    }

    #[test]
    fn qwen_xml_and_glm_calls() {
        let text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
        let (content, calls) = ToolSyntax::QwenXml.parse(text, &[]);
        assert_eq!(content, "");
        assert_eq!(calls, [call("get_weather", r#"{"city":"Paris","days":3}"#)]);
        // A string parameter keeps text that would read as JSON.
        let schema = serde_json::json!({"name": "get_weather", "parameters": {"properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}});
        let numeric = text.replace("Paris", "42");
        assert_eq!(
            ToolSyntax::QwenXml.parse(&numeric, &[&schema]).1,
            [call("get_weather", r#"{"city":"42","days":3}"#)]
        );
        let bad = "<tool_call>\n<function=x>\n<parameter=a>\n1\n</function>\n</tool_call>";
        assert_eq!(ToolSyntax::QwenXml.parse(bad, &[]).1, []);

        let glm = "Sure.<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>units</arg_key>\n<arg_value>{\"c\": true}</arg_value>\n</tool_call>";
        let (content, calls) = ToolSyntax::Glm.parse(glm, &[]);
        assert_eq!(content, "Sure.");
        assert_eq!(
            calls,
            [call(
                "get_weather",
                r#"{"city":"Paris","units":{"c":true}}"#
            )]
        );
    }

    #[test]
    fn mistral_and_llama3_calls() {
        let v7 = "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]";
        assert_eq!(
            ToolSyntax::Mistral.parse(v7, &[]).1,
            [call("a", r#"{"x":1}"#), call("b", "{}")]
        );
        let v11 = "[TOOL_CALLS]a[ARGS]{\"x\": 1}[TOOL_CALLS]b[ARGS]{}";
        assert_eq!(
            ToolSyntax::Mistral.parse(v11, &[]).1,
            [call("a", r#"{"x":1}"#), call("b", "{}")]
        );
        let broken = "[TOOL_CALLS]a[ARGS]{\"x\": ";
        assert_eq!(
            ToolSyntax::Mistral.parse(broken, &[]),
            (broken.trim().into(), vec![])
        );

        let llama =
            "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}";
        assert_eq!(
            ToolSyntax::Llama3.parse(llama, &[]),
            (
                String::new(),
                vec![call("get_weather", r#"{"city":"Paris"}"#)]
            )
        );
        assert_eq!(
            ToolSyntax::Llama3.parse("{\"answer\": 1}", &[]),
            ("{\"answer\": 1}".into(), vec![])
        );
    }

    #[test]
    fn the_syntax_comes_from_the_template() {
        let of = ToolSyntax::of_template;
        assert_eq!(
            of("{% if tools %}<tool_call>{% endif %}"),
            Some(ToolSyntax::Hermes)
        );
        assert_eq!(
            of("{% if tools %}<tool_call><function=x><parameter=y>{% endif %}"),
            Some(ToolSyntax::QwenXml)
        );
        assert_eq!(of("{{ tools }}<tool_call><arg_key>"), Some(ToolSyntax::Glm));
        assert_eq!(of("{{ tools }}[TOOL_CALLS]"), Some(ToolSyntax::Mistral));
        assert_eq!(of("{{ tools }}<|python_tag|>"), Some(ToolSyntax::Llama3));
        assert_eq!(
            of("{% if tools %}<|tool_call>call:{{ name }}{% endif %}"),
            Some(ToolSyntax::Gemma4)
        );
        assert_eq!(
            of("{{ tools }}<|start|>assistant to=functions.{{ name }}<|call|>"),
            Some(ToolSyntax::Harmony)
        );
        assert_eq!(of("<|im_start|>{{ m }}"), None);
    }

    /// Each family's own template writes an earlier call into the prompt; the family's parser
    /// reads the same call back out of that text.
    #[test]
    fn calls_written_by_the_templates_parse_back() {
        use crate::model::chat::ChatTemplate;
        let golden: Value = serde_json::from_str(include_str!(
            "../../../tests/fixtures/golden/chat-templates.json"
        ))
        .unwrap();
        let qwen = golden["qwen2.5-coder-0.5b.gguf"]["template"]
            .as_str()
            .unwrap();
        let args = serde_json::json!({"city": "Paris", "days": 3, "units": {"metric": true}});
        let tools = serde_json::json!([{"type": "function", "function": {"name": "get_weather",
            "description": "Weather.", "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"}, "units": {"type": "object"}}}}}]);
        let messages = serde_json::json!([
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c0", "type": "function",
                "function": {"name": "get_weather", "arguments": args}}]},
        ]);
        for (source, syntax) in [
            (qwen, ToolSyntax::Hermes),
            (include_str!("../templates/glm4.jinja"), ToolSyntax::Glm),
            (
                include_str!("../templates/gemma4.jinja"),
                ToolSyntax::Gemma4,
            ),
            (
                include_str!("../templates/gpt-oss.jinja"),
                ToolSyntax::Harmony,
            ),
        ] {
            let template = ChatTemplate::from_source(source, "<bos>", "</s>");
            assert_eq!(template.tool_syntax(), Some(syntax));
            let text = template
                .render_with_tools(&messages, &tools, false)
                .unwrap_or_else(|e| panic!("{syntax:?}: {e}"));
            let functions: Vec<&Value> = tools
                .as_array()
                .unwrap()
                .iter()
                .map(|t| &t["function"])
                .collect();
            let calls = match syntax {
                ToolSyntax::Harmony => harmony::calls(&text).0,
                _ => syntax.parse(&text, &functions).1,
            };
            assert_eq!(calls.len(), 1, "{syntax:?}: {text}");
            assert_eq!(calls[0].name, "get_weather");
            let parsed: Value = serde_json::from_str(&calls[0].arguments).unwrap();
            assert_eq!(parsed, args, "{syntax:?}: {text}");
        }
    }
}
