//! Grammars (llguidance's Lark) whose every sentence is one tool call in a family's syntax, its
//! arguments valid under the function's parameter schema: what `tool_choice: "required"` or a
//! named function asks for. Where a syntax writes arguments as JSON (Hermes, Mistral, Llama 3,
//! gpt-oss) the arguments are llguidance's `%json` of the schema. Where it does not (Qwen's and
//! GLM's XML parameters, Gemma 4's notation) the schema is translated: objects, arrays, strings,
//! `enum`/`const`, `anyOf`/`oneOf` and type lists by hand, each value that is written as JSON
//! through `%json` (so a number's `minimum` and the like still hold). A schema keyword that cannot
//! be kept is an error naming it, never a call that might not validate (`format` is an annotation,
//! as JSON Schema's default vocabulary has it, so a text string's `format` is not enforced).

use serde_json::{Map, Value, json};

use super::{ToolSyntax, gemma4};
use crate::sampler::JSON_WHITESPACE;

/// A grammar whose sentences are one call of one of `functions` (OpenAI's `{"name",
/// "parameters"}` objects) in `syntax`; an error names what in a schema cannot be expressed.
pub fn call_grammar(syntax: ToolSyntax, functions: &[&Value]) -> Result<String, String> {
    let mut g = Lark::default();
    let params = |f: &Value| {
        f.get("parameters")
            .cloned()
            .unwrap_or(json!({"type": "object"}))
    };
    let name = |f: &Value| f["name"].as_str().unwrap_or_default().to_string();
    let start = match syntax {
        ToolSyntax::Hermes | ToolSyntax::Mistral | ToolSyntax::Llama3 => {
            let key = match syntax {
                ToolSyntax::Llama3 => "parameters",
                _ => "arguments",
            };
            let one_of: Vec<Value> = functions
                .iter()
                .map(|f| {
                    json!({
                        "type": "object",
                        "properties": {"name": {"const": name(f)}, key: params(f)},
                        "required": ["name", key],
                        "additionalProperties": false,
                    })
                })
                .collect();
            let call = json!({ "anyOf": one_of });
            match syntax {
                ToolSyntax::Hermes => {
                    format!("\"<tool_call>\\n\" {} \"\\n</tool_call>\"", g.json(&call))
                }
                ToolSyntax::Mistral => {
                    let calls = json!({"type": "array", "items": call, "minItems": 1});
                    format!("\"[TOOL_CALLS]\" {}", g.json(&calls))
                }
                _ => g.json(&call),
            }
        }
        ToolSyntax::Harmony => {
            // Any analysis or preamble messages first, then the call, as llama.cpp's parser
            // takes them; the call ends at `<|call|>`, an end-of-generation token.
            g.rules.push("HARMONY_TEXT: /(?s:.*)/".into());
            let before = g.rule(
                "<|channel|> (\"analysis\" | \"commentary\") <|message|> HARMONY_TEXT <|end|> \
                 <|start|> \"assistant\""
                    .into(),
            );
            let calls: Vec<String> = functions
                .iter()
                .map(|f| {
                    let head = lit(&format!("commentary to=functions.{} ", name(f)));
                    let args = g.json(&params(f));
                    format!("{head} <|constrain|> \"json\" <|message|> {args}")
                })
                .collect();
            format!("{before}* <|channel|> ({})", calls.join(" | "))
        }
        ToolSyntax::QwenXml | ToolSyntax::Glm | ToolSyntax::Gemma4 => {
            let calls = functions
                .iter()
                .map(|f| {
                    let (name, params) = (name(f), params(f));
                    let at = format!("the parameters of {name:?}");
                    match syntax {
                        ToolSyntax::Gemma4 => {
                            let args = g.gemma(&params, &at)?;
                            Ok(format!("{} {args}", lit(&format!("call:{name}"))))
                        }
                        _ => {
                            let args = g.xml_parameters(syntax, &params, &at)?;
                            let head = match syntax {
                                ToolSyntax::QwenXml => format!("\n<function={name}>\n"),
                                _ => format!("{name}\n"),
                            };
                            Ok(format!("{} {args}", lit(&head)))
                        }
                    }
                })
                .collect::<Result<Vec<_>, String>>()?;
            let (open, close) = match syntax {
                ToolSyntax::QwenXml => ("<tool_call>", "</function>\n</tool_call>"),
                ToolSyntax::Glm => ("<tool_call>", "</tool_call>"),
                _ => (gemma4::OPEN, "<tool_call|>"),
            };
            format!("{} ({}) {}", lit(open), calls.join(" | "), lit(close))
        }
    };
    Ok(g.finish(&start))
}

/// Rules being written.
#[derive(Default)]
struct Lark {
    rules: Vec<String>,
    /// Rules already written for a (syntax, schema) pair, by their key.
    named: Map<String, Value>,
}

/// Schema keywords that say nothing about which values are valid.
const ANNOTATIONS: [&str; 8] = [
    "description",
    "title",
    "default",
    "examples",
    "$schema",
    "$comment",
    "deprecated",
    "format",
];

impl Lark {
    fn finish(self, start: &str) -> String {
        let mut out = format!("start: {start}\n");
        for r in self.rules {
            out.push_str(&r);
            out.push('\n');
        }
        out
    }

    /// A new rule with `body`; its name.
    fn rule(&mut self, body: String) -> String {
        let name = format!("r{}", self.rules.len());
        self.rules.push(format!("{name}: {body}"));
        name
    }

    /// A rule for a JSON value under `schema`, with the whitespace JSON outputs are allowed.
    fn json(&mut self, schema: &Value) -> String {
        let mut schema = schema.clone();
        if let Value::Object(map) = &mut schema {
            map.entry("x-guidance")
                .or_insert(json!({ "whitespace_pattern": JSON_WHITESPACE }));
        }
        let key = format!("json {schema}");
        if let Some(Value::String(name)) = self.named.get(&key) {
            return name.clone();
        }
        let name = self.rule(format!("%json {schema}"));
        self.named.insert(key, Value::String(name.clone()));
        name
    }

    /// The schema's alternatives where it is one of several (`anyOf`, `oneOf`, a list of types,
    /// `enum`, `const`): each written by `write`, or None for a schema of one kind.
    fn alternatives(
        &mut self,
        schema: &Map<String, Value>,
        at: &str,
        write: &mut dyn FnMut(&mut Lark, &Value, &str) -> Result<String, String>,
        literal: &dyn Fn(&Value) -> String,
    ) -> Result<Option<String>, String> {
        if let Some(values) = schema.get("enum").and_then(Value::as_array) {
            let alts: Vec<String> = values.iter().map(literal).collect();
            return Ok(Some(format!("({})", alts.join(" | "))));
        }
        if let Some(v) = schema.get("const") {
            return Ok(Some(literal(v)));
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(branches) = schema.get(key).and_then(Value::as_array) {
                let mut alts = Vec::new();
                for (i, b) in branches.iter().enumerate() {
                    alts.push(write(self, b, &format!("{at}.{key}[{i}]"))?);
                }
                return Ok(Some(format!("({})", alts.join(" | "))));
            }
        }
        if let Some(types) = schema.get("type").and_then(Value::as_array) {
            let mut alts = Vec::new();
            for t in types {
                let mut one = schema.clone();
                one.insert("type".into(), t.clone());
                alts.push(write(self, &Value::Object(one), at)?);
            }
            return Ok(Some(format!("({})", alts.join(" | "))));
        }
        Ok(None)
    }

    /// A value in Gemma 4's notation, valid under `schema`.
    fn gemma(&mut self, schema: &Value, at: &str) -> Result<String, String> {
        let Some(map) = schema.as_object() else {
            return match schema {
                Value::Bool(true) => Ok(self.gemma_any()),
                _ => Err(format!("{at}: a schema must be an object")),
            };
        };
        let literal = |v: &Value| lit(&gemma4::write(v));
        if let Some(alts) = self.alternatives(map, at, &mut |g, s, a| g.gemma(s, a), &literal)? {
            return Ok(alts);
        }
        let kind = map.get("type").and_then(Value::as_str);
        match kind {
            None if map.keys().all(|k| ANNOTATIONS.contains(&k.as_str())) => Ok(self.gemma_any()),
            Some("string") => {
                check_keywords(map, &["type", "minLength", "maxLength"], at)?;
                match length_range(map) {
                    None => Ok(self.gemma_string()),
                    Some(range) => {
                        let q = regex_escape(gemma4::QUOTE);
                        let name = format!("GEMMA_STRING_{}", self.rules.len());
                        self.rules.push(format!(
                            "{name}: /{q}(?s:.){range}{q}/ & ~/{q}(?s:.)*{q}(?s:.)*{q}/"
                        ));
                        Ok(name)
                    }
                }
            }
            Some("integer" | "number" | "boolean" | "null") => Ok(self.json(schema)),
            Some("array") => {
                check_keywords(map, &["type", "items", "minItems", "maxItems"], at)?;
                let item = match map.get("items") {
                    Some(items) => self.gemma(items, &format!("{at}.items"))?,
                    None => self.gemma_any(),
                };
                Ok(list("[", &item, "]", map)?)
            }
            Some("object") => {
                check_keywords(
                    map,
                    &["type", "properties", "required", "additionalProperties"],
                    at,
                )?;
                let props = map.get("properties").and_then(Value::as_object);
                let Some(props) = props.filter(|p| !p.is_empty()) else {
                    return match map.get("additionalProperties") {
                        Some(Value::Bool(false)) => Ok(lit("{}")),
                        _ => Ok(self.gemma_dict()),
                    };
                };
                let required = required_of(map);
                // The template writes keys sorted; the model learned them so.
                let mut keys: Vec<&String> = props.keys().collect();
                keys.sort();
                let mut members = Vec::new();
                for k in keys {
                    let v = self.gemma(&props[k], &format!("{at}.properties.{k}"))?;
                    members.push((
                        format!("{} {v}", lit(&format!("{k}:"))),
                        required.contains(&k),
                    ));
                }
                Ok(object("{", &members, ",", "}"))
            }
            Some(other) => Err(format!("{at}: type {other:?} is not a JSON Schema type")),
            None => Err(unsupported(map, &["type"], at)),
        }
    }

    /// A string between `<|"|>` marks, the marks not inside.
    fn gemma_string(&mut self) -> String {
        self.once("GEMMA_STRING", || {
            format!(
                "GEMMA_STRING: /{q}(?s:.*){q}/ & ~/{q}(?s:.*){q}(?s:.*){q}/",
                q = regex_escape(gemma4::QUOTE)
            )
        })
    }

    /// Any value in the notation.
    fn gemma_any(&mut self) -> String {
        let s = self.gemma_string();
        let number = self.json(&json!({"type": ["number", "boolean", "null"]}));
        self.once("gemma_any", || {
            format!(
                "gemma_any: {s} | {number} | \"[\" (gemma_any (\",\" gemma_any)*)? \"]\" | gemma_dict\n\
                 gemma_dict: \"{{\" (GEMMA_KEY \":\" gemma_any (\",\" GEMMA_KEY \":\" gemma_any)*)? \"}}\"\n\
                 GEMMA_KEY: /[A-Za-z_][A-Za-z0-9_]*/"
            )
        })
    }

    fn gemma_dict(&mut self) -> String {
        self.gemma_any();
        "gemma_dict".into()
    }

    /// A rule or terminal written once, by name.
    fn once(&mut self, name: &str, write: impl FnOnce() -> String) -> String {
        if !self.named.contains_key(name) {
            self.named.insert(name.into(), Value::Null);
            self.rules.push(write());
        }
        name.into()
    }

    /// Qwen's `<parameter=KEY>\nVALUE\n</parameter>\n` or GLM's
    /// `<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n`, one per property, in the
    /// schema's order: strings as text, anything else as JSON.
    fn xml_parameters(
        &mut self,
        syntax: ToolSyntax,
        schema: &Value,
        at: &str,
    ) -> Result<String, String> {
        let map = schema
            .as_object()
            .ok_or_else(|| format!("{at}: a schema must be an object"))?;
        check_keywords(
            map,
            &["type", "properties", "required", "additionalProperties"],
            at,
        )?;
        if map.get("type").is_some_and(|t| t != "object") {
            return Err(format!("{at}: the parameters must be an object"));
        }
        let empty = Map::new();
        let props = map
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let required = required_of(map);
        let mut members = Vec::new();
        for (k, v) in props {
            let (open, close) = match syntax {
                ToolSyntax::QwenXml => (format!("<parameter={k}>\n"), "\n</parameter>\n"),
                _ => (
                    format!("<arg_key>{k}</arg_key>\n<arg_value>"),
                    "</arg_value>\n",
                ),
            };
            let value = self.xml_value(syntax, v, close, &format!("{at}.properties.{k}"))?;
            members.push((format!("{} {value}", lit(&open)), required.contains(&k)));
        }
        Ok(object("", &members, "", ""))
    }

    /// A parameter's value, then `close`: a string's text up to the first `close`, or JSON.
    fn xml_value(
        &mut self,
        syntax: ToolSyntax,
        schema: &Value,
        close: &str,
        at: &str,
    ) -> Result<String, String> {
        let map = schema.as_object();
        let is_string = map.is_some_and(|m| m.get("type").is_some_and(|t| t == "string"));
        let only_strings = map
            .and_then(|m| m.get("enum").or(m.get("const")))
            .is_some_and(|v| {
                v.as_array()
                    .map_or(v.is_string(), |a| a.iter().all(Value::is_string))
            });
        if only_strings {
            let m = map.unwrap_or_else(|| unreachable!());
            let values: Vec<&Value> = match m.get("enum").and_then(Value::as_array) {
                Some(a) => a.iter().collect(),
                None => m.get("const").into_iter().collect(),
            };
            let alts: Vec<String> = values
                .iter()
                .map(|v| lit(&format!("{}{close}", v.as_str().unwrap_or_default())))
                .collect();
            return Ok(format!("({})", alts.join(" | ")));
        }
        if let Some(m) = map.filter(|_| is_string) {
            check_keywords(m, &["type", "minLength", "maxLength"], at)?;
            // The text and the first closing tag after it, lexed whole so the tag ends it (the
            // reader takes one newline off either end of the text).
            let close_re = regex_escape(close.trim_start_matches('\n'));
            let not_inside = format!("~/(?s:.)*{close_re}(?s:.)+/");
            return Ok(match length_range(m) {
                None => {
                    let name = match syntax {
                        ToolSyntax::QwenXml => "QWEN_TEXT",
                        _ => "GLM_TEXT",
                    };
                    self.once(name, || {
                        format!("{name}: /(?s:.)*{close_re}/ & {not_inside}")
                    })
                }
                Some(range) => {
                    let name = format!("XML_TEXT_{}", self.rules.len());
                    let close_re = regex_escape(close);
                    self.rules
                        .push(format!("{name}: /(?s:.){range}{close_re}/ & {not_inside}"));
                    name
                }
            });
        }
        // Not only a string: JSON (a string branch of an `anyOf` quoted, which the reader, told by
        // the schema, takes as JSON).
        let json = self.json(schema);
        Ok(format!("{json} {}", lit(close)))
    }
}

/// A string schema's `{min,max}` character count as a regex repetition; None when unbounded.
fn length_range(map: &Map<String, Value>) -> Option<String> {
    let min = map.get("minLength").and_then(Value::as_u64);
    let max = map.get("maxLength").and_then(Value::as_u64);
    match (min.unwrap_or(0), max) {
        (0, None) => None,
        (lo, None) => Some(format!("{{{lo},}}")),
        (lo, Some(hi)) => Some(format!("{{{lo},{}}}", hi.max(lo))),
    }
}

/// `open` item (`,` item)* `close`, with `minItems`/`maxItems` kept.
fn list(open: &str, item: &str, close: &str, map: &Map<String, Value>) -> Result<String, String> {
    let min = map.get("minItems").and_then(Value::as_u64).unwrap_or(0);
    let max = map.get("maxItems").and_then(Value::as_u64);
    if max.is_some_and(|m| m < min) {
        return Err("maxItems is below minItems".into());
    }
    let more = match (min.saturating_sub(1), max.map(|m| m.saturating_sub(1))) {
        (0, None) => "*".to_string(),
        (lo, None) => format!("{{{lo},}}"),
        (lo, Some(hi)) => format!("{{{lo},{hi}}}"),
    };
    let body = match max {
        Some(0) => String::new(),
        // `{0,0}` is not a range llguidance takes.
        Some(1) => item.to_string(),
        _ => format!("{item} (\",\" {item}){more}"),
    };
    Ok(match (min, body.is_empty()) {
        (_, true) => format!("{} {}", lit(open), lit(close)),
        (0, false) => format!("{} ({body})? {}", lit(open), lit(close)),
        _ => format!("{} {body} {}", lit(open), lit(close)),
    })
}

/// Members in order, each required or optional, between `open` and `close`, `sep` between
/// those present.
fn object(open: &str, members: &[(String, bool)], sep: &str, close: &str) -> String {
    let sep = match sep {
        "" => String::new(),
        s => format!("{} ", lit(s)),
    };
    // After a first member: each later one, with its separator, required or optional.
    let rest = |from: usize| -> String {
        members[from..]
            .iter()
            .map(|(m, req)| match req {
                true => format!("{sep}{m} "),
                false => format!("({sep}{m})? "),
            })
            .collect()
    };
    // The first member present is one up to the first required one.
    let last_first = members
        .iter()
        .position(|(_, req)| *req)
        .unwrap_or(members.len().saturating_sub(1));
    let firsts: Vec<String> = (0..=last_first)
        .filter(|&i| i < members.len())
        .map(|i| format!("{} {}", members[i].0, rest(i + 1)))
        .collect();
    let open = match open {
        "" => String::new(),
        o => lit(o),
    };
    let close = match close {
        "" => String::new(),
        c => lit(c),
    };
    let any_required = members.iter().any(|(_, r)| *r);
    match (firsts.is_empty(), any_required) {
        (true, _) => format!("{open} {close}"),
        (false, true) => format!("{open} ({}) {close}", firsts.join(" | ")),
        (false, false) => format!("{open} ({})? {close}", firsts.join(" | ")),
    }
}

fn required_of(map: &Map<String, Value>) -> Vec<&String> {
    let Some(Value::Array(req)) = map.get("required") else {
        return Vec::new();
    };
    let props = map.get("properties").and_then(Value::as_object);
    props
        .map(|p| {
            p.keys()
                .filter(|k| req.iter().any(|r| r == k.as_str()))
                .collect()
        })
        .unwrap_or_default()
}

/// An error for the first keyword of `map` that is neither in `allowed` nor an annotation.
fn check_keywords(map: &Map<String, Value>, allowed: &[&str], at: &str) -> Result<(), String> {
    match map
        .keys()
        .any(|k| !allowed.contains(&k.as_str()) && !ANNOTATIONS.contains(&k.as_str()))
    {
        true => Err(unsupported(map, allowed, at)),
        false => Ok(()),
    }
}

fn unsupported(map: &Map<String, Value>, allowed: &[&str], at: &str) -> String {
    let key = map
        .keys()
        .find(|k| !allowed.contains(&k.as_str()) && !ANNOTATIONS.contains(&k.as_str()))
        .map_or("(none)", |k| k.as_str());
    format!("{at}: the schema keyword {key:?} cannot be enforced in this model's tool-call syntax")
}

/// A Lark string literal.
fn lit(s: &str) -> String {
    Value::from(s).to_string()
}

/// `s` matched literally inside a Lark `/…/` regex.
fn regex_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if "\\.+*?()|[]{}^$/".contains(c) {
            out.push('\\');
        }
        match c {
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::harmony;
    use super::*;
    use crate::sampler::{ConstraintCompiler, ConstraintSpec, TokenBytes};

    /// harmony's control tokens, after the 256 byte tokens; `<|call|>` ends generation.
    const SPECIALS: [&str; 6] = [
        "<|channel|>",
        "<|message|>",
        "<|constrain|>",
        "<|start|>",
        "<|end|>",
        "<|call|>",
    ];

    /// Whether `grammar` takes `text` whole (`{name}` is a control token), each token checked
    /// against the mask before it is taken, and generation may end after it.
    fn accepts(grammar: &str, text: &str) -> bool {
        let mut tokens: Vec<TokenBytes> = (0..=255u8).map(|b| TokenBytes::Text(vec![b])).collect();
        tokens.extend(SPECIALS.iter().map(|s| TokenBytes::Special(s.to_string())));
        let eog = 256 + SPECIALS.len() as u32 - 1;
        let compiler = ConstraintCompiler::new(tokens, &[eog], eog as usize + 1).unwrap();
        let (mut c, _) = compiler
            .compile(&ConstraintSpec::Lark(grammar.to_string()))
            .unwrap_or_else(|e| panic!("{e}\n{grammar}"));
        let mut ids = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            match SPECIALS.iter().position(|s| rest.starts_with(s)) {
                Some(i) => {
                    ids.push(256 + i as u32);
                    rest = &rest[SPECIALS[i].len()..];
                }
                None => {
                    ids.extend(rest.as_bytes()[..1].iter().map(|&b| b as u32));
                    rest = &rest[1..];
                }
            }
        }
        for id in ids.into_iter().chain([eog]) {
            if !c.mask().is_ok_and(|m| m.is_allowed(id)) {
                return false;
            }
            if id != eog && c.commit(id).is_err() {
                return false;
            }
        }
        true
    }

    fn weather() -> Value {
        json!({
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "A city."},
                    "days": {"type": "integer", "minimum": 1, "maximum": 14},
                    "units": {"enum": ["c", "f"]},
                    "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2},
                },
                "required": ["city", "days"],
            },
        })
    }

    fn now() -> Value {
        json!({"name": "now", "parameters": {"type": "object", "properties": {}}})
    }

    #[test]
    fn gemma4_calls_follow_the_schema() {
        let g = call_grammar(ToolSyntax::Gemma4, &[&weather(), &now()]).unwrap();
        let call = |args: &str, name: &str| format!("<|tool_call>call:{name}{args}<tool_call|>");
        let q = |s: &str| format!("<|\"|>{s}<|\"|>");
        let good = [
            call(
                &format!("{{city:{},days:3}}", q("Paris, FR")),
                "get_weather",
            ),
            call(
                &format!(
                    "{{city:{},days:14,tags:[{},{}],units:{}}}",
                    q(""),
                    q("a"),
                    q("bcd"),
                    q("f")
                ),
                "get_weather",
            ),
            call("{}", "now"),
        ];
        for text in &good {
            assert!(accepts(&g, text), "{text}\n{g}");
            assert_eq!(gemma4::parse(text).1.len(), 1, "{text}");
        }
        let bad = [
            call("{days:3}", "get_weather"),
            call(&format!("{{city:{},days:0}}", q("x")), "get_weather"),
            call(
                &format!("{{city:{},days:2,units:{}}}", q("x"), q("k")),
                "get_weather",
            ),
            call(
                &format!("{{city:{},days:2,tags:[{}]}}", q("x"), q("long")),
                "get_weather",
            ),
            call(&format!("{{days:2,city:{}}}", q("x")), "get_weather"),
            call("{}", "later"),
            format!("text first {}", call("{}", "now")),
        ];
        for text in &bad {
            assert!(!accepts(&g, text), "{text}");
        }
    }

    #[test]
    fn xml_calls_follow_the_schema() {
        let g = call_grammar(ToolSyntax::QwenXml, &[&weather()]).unwrap();
        let p = |k: &str, v: &str| format!("<parameter={k}>\n{v}\n</parameter>\n");
        let call = |params: &str| {
            format!("<tool_call>\n<function=get_weather>\n{params}</function>\n</tool_call>")
        };
        let good =
            call(&(p("city", "Paris\nwith </param text") + &p("days", "3") + &p("units", "c")));
        assert!(accepts(&g, &good), "{good}\n{g}");
        for bad in [
            call(&p("days", "3")),
            call(&(p("city", "x") + &p("days", "three"))),
            call(&(p("city", "x") + &p("days", "3") + &p("units", "k"))),
        ] {
            assert!(!accepts(&g, &bad), "{bad}");
        }

        let g = call_grammar(ToolSyntax::Glm, &[&weather()]).unwrap();
        let a = |k: &str, v: &str| format!("<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n");
        let good = format!(
            "<tool_call>get_weather\n{}{}</tool_call>",
            a("city", "Paris"),
            a("days", "3")
        );
        assert!(accepts(&g, &good), "{good}\n{g}");
        let (_, calls) = ToolSyntax::Glm.parse(&good, &[&weather()]);
        assert_eq!(calls[0].arguments, r#"{"city":"Paris","days":3}"#);
        let bad = format!("<tool_call>get_weather\n{}</tool_call>", a("city", "Paris"));
        assert!(!accepts(&g, &bad));

        // A value of several kinds is JSON, a string quoted; the reader, told by the schema,
        // takes it back as the string.
        let f = json!({"name": "when", "parameters": {"type": "object", "properties": {
            "at": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}, "required": ["at"]}});
        let g = call_grammar(ToolSyntax::Glm, &[&f]).unwrap();
        for (value, want) in [("\"noon\"", json!("noon")), ("12", json!(12))] {
            let text = format!("<tool_call>when\n{}</tool_call>", a("at", value));
            assert!(accepts(&g, &text), "{text}\n{g}");
            let (_, calls) = ToolSyntax::Glm.parse(&text, &[&f]);
            assert_eq!(calls[0].arguments, json!({ "at": want }).to_string());
        }
        assert!(!accepts(
            &g,
            &format!("<tool_call>when\n{}</tool_call>", a("at", "noon"))
        ));
    }

    #[test]
    fn harmony_and_json_calls_follow_the_schema() {
        let g = call_grammar(ToolSyntax::Harmony, &[&weather()]).unwrap();
        let call = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>\
                    {\"city\": \"Paris\", \"days\": 2}";
        let with_analysis =
            format!("<|channel|>analysis<|message|>Look it up.<|end|><|start|>assistant{call}");
        for text in [call.to_string(), with_analysis] {
            assert!(accepts(&g, &text), "{text}\n{g}");
            assert_eq!(harmony::calls(&text).0.len(), 1);
        }
        assert!(!accepts(&g, &call.replace("\"days\": 2", "\"days\": 20")));
        assert!(!accepts(&g, "<|channel|>final<|message|>No call."));

        let g = call_grammar(ToolSyntax::Hermes, &[&weather()]).unwrap();
        let call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 1}}\n</tool_call>";
        assert!(accepts(&g, call), "{g}");
        assert!(!accepts(&g, &call.replace("\"days\": 1", "\"day\": 1")));
    }

    #[test]
    fn what_a_syntax_cannot_enforce_is_named() {
        let f = json!({"name": "f", "parameters": {"type": "object", "properties": {
            "id": {"type": "string", "pattern": "^[a-z]+$"}}}});
        for syntax in [ToolSyntax::Gemma4, ToolSyntax::QwenXml, ToolSyntax::Glm] {
            let e = call_grammar(syntax, &[&f]).unwrap_err();
            assert!(
                e.contains("\"pattern\"") && e.contains("properties.id"),
                "{e}"
            );
        }
        // JSON syntaxes take any schema llguidance does.
        assert!(call_grammar(ToolSyntax::Hermes, &[&f]).is_ok());
    }
}
