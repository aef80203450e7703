//! Gemma 4's tool calls: `<|tool_call>call:NAME{key:VALUE,…}<tool_call|>`, the arguments in the
//! template's own notation (its `format_argument` macro): keys bare, strings between `<|"|>`
//! marks, numbers, `true`, `false` and `null` as in JSON, lists in `[…]`, objects in `{…}`. This
//! file reads that notation into JSON and writes JSON values in it (for grammars).

use serde_json::{Map, Number, Value};

use super::ToolCall;

pub const OPEN: &str = "<|tool_call>";
const CLOSE: &str = "<tool_call|>";
/// The string delimiter.
pub const QUOTE: &str = "<|\"|>";
/// Nesting deeper than this is not a call (and would cost stack).
const MAX_DEPTH: usize = 64;

/// Split a reply into its content and its calls; a block that does not parse stays in the
/// content. An unclosed last block runs to the end of the text.
pub fn parse(text: &str) -> (String, Vec<ToolCall>) {
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
        match call(inner) {
            Some(c) => calls.push(c),
            None => content.push_str(&rest[start..rest.len() - next.len()]),
        }
        rest = next;
    }
    content.push_str(rest);
    (content.trim().to_string(), calls)
}

/// `call:NAME{…}`.
fn call(inner: &str) -> Option<ToolCall> {
    let inner = inner.trim().strip_prefix("call:")?;
    let brace = inner.find('{')?;
    let name = inner[..brace].trim();
    if name.is_empty() || name.contains(char::is_whitespace) {
        return None;
    }
    let mut reader = Reader {
        text: &inner[brace..],
        depth: 0,
    };
    let args = reader.value()?;
    if !args.is_object() || !reader.text.trim().is_empty() {
        return None;
    }
    Some(ToolCall {
        name: name.to_string(),
        arguments: args.to_string(),
    })
}

/// A recursive-descent reader of the notation.
struct Reader<'t> {
    text: &'t str,
    depth: usize,
}

impl Reader<'_> {
    fn skip_space(&mut self) {
        self.text = self.text.trim_start();
    }

    fn eat(&mut self, s: &str) -> bool {
        self.skip_space();
        match self.text.strip_prefix(s) {
            Some(rest) => {
                self.text = rest;
                true
            }
            None => false,
        }
    }

    fn value(&mut self) -> Option<Value> {
        self.skip_space();
        if self.depth >= MAX_DEPTH {
            return None;
        }
        if let Some(rest) = self.text.strip_prefix(QUOTE) {
            let end = rest.find(QUOTE)?;
            self.text = &rest[end + QUOTE.len()..];
            return Some(Value::String(rest[..end].to_string()));
        }
        if self.text.starts_with('"') {
            // A JSON string, as a model may write one.
            let mut stream = serde_json::Deserializer::from_str(self.text).into_iter::<Value>();
            let v = stream.next()?.ok()?;
            self.text = &self.text[stream.byte_offset()..];
            return Some(v);
        }
        self.depth += 1;
        let v = if self.eat("{") {
            self.object()
        } else if self.eat("[") {
            self.list()
        } else {
            self.scalar()
        };
        self.depth -= 1;
        v
    }

    fn object(&mut self) -> Option<Value> {
        let mut map = Map::new();
        if self.eat("}") {
            return Some(Value::Object(map));
        }
        loop {
            self.skip_space();
            let key = match self.text.strip_prefix(QUOTE) {
                Some(rest) => {
                    let end = rest.find(QUOTE)?;
                    self.text = &rest[end + QUOTE.len()..];
                    rest[..end].to_string()
                }
                None => {
                    let end = self.text.find([':', '}', ','])?;
                    let key = self.text[..end].trim();
                    self.text = &self.text[end..];
                    key.to_string()
                }
            };
            if key.is_empty() || !self.eat(":") {
                return None;
            }
            let value = self.value()?;
            map.insert(key, value);
            if self.eat("}") {
                return Some(Value::Object(map));
            }
            if !self.eat(",") {
                return None;
            }
        }
    }

    fn list(&mut self) -> Option<Value> {
        let mut items = Vec::new();
        if self.eat("]") {
            return Some(Value::Array(items));
        }
        loop {
            items.push(self.value()?);
            if self.eat("]") {
                return Some(Value::Array(items));
            }
            if !self.eat(",") {
                return None;
            }
        }
    }

    /// `true`, `false`, `null` or a JSON number.
    fn scalar(&mut self) -> Option<Value> {
        let end = self
            .text
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '+' | '.')))
            .unwrap_or(self.text.len());
        let word = &self.text[..end];
        let v = match word {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            "null" => Value::Null,
            _ => Value::Number(serde_json::from_str::<Number>(word).ok()?),
        };
        self.text = &self.text[end..];
        Some(v)
    }
}

/// `v` in the notation, as the template writes an argument (object keys bare and sorted).
pub fn write(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{QUOTE}{s}{QUOTE}"),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(write).collect();
            format!("[{}]", items.join(","))
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let members: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{k}:{}", write(&map[k])))
                .collect();
            format!("{{{}}}", members.join(","))
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::call;
    use super::*;

    #[test]
    fn calls_and_their_content() {
        let text = "Let me check.<|tool_call>call:get_weather{city:<|\"|>Paris, FR<|\"|>,days:3,\
                    opts:{metric:true,tags:[<|\"|>a<|\"|>,null,-1.5e2]}}<tool_call|>\
                    <|tool_call>call:now{}<tool_call|>";
        let (content, calls) = parse(text);
        assert_eq!(content, "Let me check.");
        assert_eq!(
            calls,
            [
                call(
                    "get_weather",
                    r#"{"city":"Paris, FR","days":3,"opts":{"metric":true,"tags":["a",null,-150.0]}}"#
                ),
                call("now", "{}"),
            ]
        );
        // Malformed: kept whole, as text.
        for bad in [
            "<|tool_call>call:x{a:<|\"|>open}<tool_call|>",
            "<|tool_call>call:x{a:1<tool_call|>",
            "<|tool_call>call:{a:1}<tool_call|>",
            "<|tool_call>x{a:1}<tool_call|>",
            "<|tool_call>call:x{a:1} trailing<tool_call|>",
        ] {
            assert_eq!(parse(bad), (bad.to_string(), vec![]), "{bad}");
        }
        // Cut before its closing mark: a whole call still counts.
        assert_eq!(parse("<|tool_call>call:now{}").1, [call("now", "{}")]);
        // Deep nesting is refused, not a stack overflow.
        let deep = format!(
            "<|tool_call>call:x{{a:{}{}}}",
            "[".repeat(10_000),
            "]".repeat(10_000)
        );
        assert!(parse(&deep).1.is_empty());
    }

    #[test]
    fn written_values_read_back() {
        let v = serde_json::json!({"b": [1, "two", {"z": false, "a": null}], "a": "x y"});
        assert_eq!(
            write(&v),
            "{a:<|\"|>x y<|\"|>,b:[1,<|\"|>two<|\"|>,{a:null,z:false}]}"
        );
        let mut reader = Reader {
            text: &write(&v),
            depth: 0,
        };
        assert_eq!(reader.value(), Some(v));
    }
}
