//! gpt-oss's tool calls. Harmony addresses a call as a message to a recipient:
//! `<|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}<|call|>`
//! (or with `to=functions.NAME` in the role header instead). Its header is format markup, so a
//! call never reaches the reply's answer text (`reasoning.rs` routes the message to neither); the
//! calls are read here from the reply's full text, control tokens included.

use serde_json::Value;

use super::ToolCall;

const START: &str = "<|start|>";
const MESSAGE: &str = "<|message|>";
/// What ends a message: `<|end|>`, or the end-of-generation tokens a reply stops on (they are
/// not in its tokens, but a transcript may hold them).
const ENDS: [&str; 3] = ["<|end|>", "<|call|>", "<|return|>"];

/// The function calls in `raw`, a reply decoded with its control tokens (the prompt ended in
/// `<|start|>assistant`, so the reply starts inside a header), and the arguments of any call that
/// is not a JSON object (kept as text for the reply's content: a malformed call is not an error).
pub fn calls(raw: &str) -> (Vec<ToolCall>, Vec<String>) {
    let (mut calls, mut malformed) = (Vec::new(), Vec::new());
    for message in raw.split(START) {
        let Some((header, body)) = message.split_once(MESSAGE) else {
            continue;
        };
        let Some(name) = recipient(header).and_then(|r| r.strip_prefix("functions.")) else {
            continue;
        };
        let end = ENDS
            .iter()
            .filter_map(|e| body.find(e))
            .min()
            .unwrap_or(body.len());
        let arguments = body[..end].trim();
        match serde_json::from_str::<Value>(arguments) {
            Ok(v @ Value::Object(_)) if !name.is_empty() => calls.push(ToolCall {
                name: name.to_string(),
                arguments: v.to_string(),
            }),
            _ => malformed.push(arguments.to_string()),
        }
    }
    (calls, malformed)
}

/// The recipient a header names (`to=functions.get_weather`), up to a space or control token.
fn recipient(header: &str) -> Option<&str> {
    let at = header.find("to=")? + 3;
    let rest = &header[at..];
    let end = rest
        .find(|c: char| c.is_whitespace() || c == '<')
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

#[cfg(test)]
mod tests {
    use super::super::tests::call;
    use super::*;

    #[test]
    fn calls_in_the_channel_header_or_the_role_header() {
        let raw = "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant\
                   <|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>\
                   {\"city\": \"Paris\"}";
        assert_eq!(
            calls(raw),
            (vec![call("get_weather", r#"{"city":"Paris"}"#)], vec![])
        );
        let in_role = " to=functions.now<|channel|>commentary json<|message|>{}<|call|>";
        assert_eq!(calls(in_role), (vec![call("now", "{}")], vec![]));
        // Not a function, or no call at all.
        let other = "<|channel|>commentary to=browser.search<|message|>{\"q\": 1}<|end|>";
        assert_eq!(calls(other), (vec![], vec![]));
        let plain = "<|channel|>final<|message|>Hello.";
        assert_eq!(calls(plain), (vec![], vec![]));
        // Arguments that are not a JSON object come back as text.
        let bad = "<|channel|>commentary to=functions.x <|constrain|>json<|message|>{\"a\": ";
        assert_eq!(calls(bad), (vec![], vec!["{\"a\":".to_string()]));
    }
}
