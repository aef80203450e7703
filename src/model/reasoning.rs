//! A reply's reasoning told apart from its answer, token by token, in the two formats models use:
//! gpt-oss's harmony channels (`<|channel|>analysis<|message|>…<|end|><|start|>assistant
//! <|channel|>final<|message|>…`: the analysis channel is reasoning, every other channel answer,
//! the headers between them markup, and a message to a function, a tool call, markup too: the
//! calls are read from the reply's tokens, `tools/harmony.rs`), `<think>…</think>` (Qwen3, Qwen3.5, DeepSeek-R1 and their
//! descendants), and Gemma 4's thought channel (`<|channel>thought\n…<channel|>`: think tags whose
//! first line names the channel). The splitter follows the prompt first, so a prompt that ends inside a header
//! (harmony's `<|start|>assistant`) or inside `<think>` starts the reply there.

use super::tokenizer::Tokenizer;

/// Where a generated token's text goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The reply proper: what `kiln run` prints.
    Answer,
    /// The model's reasoning: hidden, or shown apart.
    Reasoning,
    /// The format's own tokens (channel markers, role names, think tags): neither.
    Markup,
}

/// The harmony control tokens of a vocabulary.
#[derive(Debug, Clone, Copy)]
struct Harmony {
    start: u32,
    end: u32,
    message: u32,
    channel: u32,
}

/// Header tokens kept to find a message's channel and recipient (a header is a few tokens).
const MAX_HEADER: usize = 64;

#[derive(Debug, Clone, PartialEq)]
enum HarmonyState {
    /// After `<|start|>`: the role and any recipient, up to `<|channel|>` or `<|message|>`.
    Header(Vec<u32>),
    /// After `<|channel|>`: the channel's name (and any recipient and constraint), up to
    /// `<|message|>`; and the header before it.
    Channel { name: Vec<u32>, header: Vec<u32> },
    /// A message's content; whether its channel is the analysis one, whether it is a call.
    Content { analysis: bool, call: bool },
    /// After `<|end|>`, waiting for the next `<|start|>`.
    Between,
}

#[derive(Debug, Clone)]
enum Format {
    Plain,
    Harmony {
        ids: Harmony,
        state: HarmonyState,
    },
    Think {
        open: u32,
        close: u32,
        /// The open tag starts a line that names the channel (Gemma 4): markup.
        named: bool,
        state: ThinkState,
    },
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum ThinkState {
    Outside,
    /// After a named open tag, up to the end of its line.
    Name,
    Inside,
}

/// Routes each token of a reply to the answer, the reasoning, or neither.
#[derive(Debug, Clone)]
pub struct ReplySplitter {
    format: Format,
}

impl ReplySplitter {
    /// The splitter for `tok`'s format (harmony, think tags, Gemma 4's channel, or none), having
    /// followed `prompt`.
    pub fn new(tok: &Tokenizer, prompt: &[u32]) -> ReplySplitter {
        let id = |t: &str| tok.token_id(t);
        let think = |open, close, named| Format::Think {
            open,
            close,
            named,
            state: ThinkState::Outside,
        };
        let format = match (
            id("<|start|>"),
            id("<|end|>"),
            id("<|message|>"),
            id("<|channel|>"),
            (id("<think>"), id("</think>")),
            (id("<|channel>"), id("<channel|>")),
        ) {
            (Some(start), Some(end), Some(message), Some(channel), ..) => Format::Harmony {
                ids: Harmony {
                    start,
                    end,
                    message,
                    channel,
                },
                // A reply without any harmony header is all answer.
                state: HarmonyState::Content {
                    analysis: false,
                    call: false,
                },
            },
            (.., (Some(open), Some(close)), _) => think(open, close, false),
            (.., (Some(open), Some(close))) => think(open, close, true),
            _ => Format::Plain,
        };
        ReplySplitter { format }.after(prompt, &|ids| text(tok, ids))
    }

    /// The splitter having followed `prompt`.
    fn after(mut self, prompt: &[u32], text: &dyn Fn(&[u32]) -> String) -> ReplySplitter {
        for &t in prompt {
            self.route_with(t, text);
        }
        self
    }

    /// Where token `t` of `tok`'s vocabulary goes.
    pub fn route(&mut self, tok: &Tokenizer, t: u32) -> Route {
        self.route_with(t, &|ids| text(tok, ids))
    }

    /// Where token `t` goes, with `text` giving the text of ids (a harmony channel name may come
    /// in any tokenization: constrained sampling, for one, picks its own).
    fn route_with(&mut self, t: u32, text: &dyn Fn(&[u32]) -> String) -> Route {
        match &mut self.format {
            Format::Plain => Route::Answer,
            Format::Think {
                open,
                close,
                named,
                state,
            } => {
                if t == *open {
                    *state = match named {
                        true => ThinkState::Name,
                        false => ThinkState::Inside,
                    };
                    return Route::Markup;
                }
                if t == *close {
                    *state = ThinkState::Outside;
                    return Route::Markup;
                }
                match state {
                    ThinkState::Outside => Route::Answer,
                    ThinkState::Inside => Route::Reasoning,
                    ThinkState::Name => {
                        if text(&[t]).contains('\n') {
                            *state = ThinkState::Inside;
                        }
                        Route::Markup
                    }
                }
            }
            Format::Harmony { ids, state } => {
                if t == ids.start {
                    *state = HarmonyState::Header(Vec::new());
                    return Route::Markup;
                }
                if t == ids.end {
                    *state = HarmonyState::Between;
                    return Route::Markup;
                }
                if t == ids.channel {
                    let header = match state {
                        HarmonyState::Header(h) => std::mem::take(h),
                        _ => Vec::new(),
                    };
                    *state = HarmonyState::Channel {
                        name: Vec::new(),
                        header,
                    };
                    return Route::Markup;
                }
                if t == ids.message {
                    let (analysis, call) = match state {
                        HarmonyState::Channel { name, header } => (
                            text(name).trim() == "analysis",
                            text(header).contains("to=functions.")
                                || text(name).contains("to=functions."),
                        ),
                        HarmonyState::Header(header) => {
                            (false, text(header).contains("to=functions."))
                        }
                        _ => (false, false),
                    };
                    *state = HarmonyState::Content { analysis, call };
                    return Route::Markup;
                }
                match state {
                    HarmonyState::Content { call: true, .. } => Route::Markup,
                    HarmonyState::Content { analysis: true, .. } => Route::Reasoning,
                    HarmonyState::Content {
                        analysis: false, ..
                    } => Route::Answer,
                    HarmonyState::Channel { name: kept, .. } | HarmonyState::Header(kept) => {
                        if kept.len() < MAX_HEADER {
                            kept.push(t);
                        }
                        Route::Markup
                    }
                    HarmonyState::Between => Route::Markup,
                }
            }
        }
    }
}

/// The text of `ids` in `tok`'s vocabulary (empty where it has none).
fn text(tok: &Tokenizer, ids: &[u32]) -> String {
    tok.decode(ids, false).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Ids of a made-up vocabulary: the four harmony tokens, think tags, and text.
    const START: u32 = 1;
    const END: u32 = 2;
    const MESSAGE: u32 = 3;
    const CHANNEL: u32 = 4;
    const ANALYSIS: u32 = 10;
    const FINAL: u32 = 11;
    const ASSISTANT: u32 = 12;
    const OPEN: u32 = 20;
    const CLOSE: u32 = 21;

    fn harmony(prompt: &[u32]) -> ReplySplitter {
        ReplySplitter {
            format: Format::Harmony {
                ids: Harmony {
                    start: START,
                    end: END,
                    message: MESSAGE,
                    channel: CHANNEL,
                },
                state: HarmonyState::Content {
                    analysis: false,
                    call: false,
                },
            },
        }
        .after(prompt, &text)
    }

    const THOUGHT: u32 = 13;
    const TO_FUNCTION: u32 = 15;
    const COMMENTARY: u32 = 16;
    const NEWLINE: u32 = 14;

    /// The made-up vocabulary's texts.
    fn text(ids: &[u32]) -> String {
        ids.iter()
            .map(|&t| match t {
                ANALYSIS => "analysis",
                FINAL => "final",
                COMMENTARY => "commentary",
                THOUGHT => "thought",
                TO_FUNCTION => " to=functions.get_weather",
                NEWLINE => "\n",
                _ => "x",
            })
            .collect()
    }

    fn think_with(prompt: &[u32], named: bool) -> ReplySplitter {
        ReplySplitter {
            format: Format::Think {
                open: OPEN,
                close: CLOSE,
                named,
                state: ThinkState::Outside,
            },
        }
        .after(prompt, &text)
    }

    fn think(prompt: &[u32]) -> ReplySplitter {
        think_with(prompt, false)
    }

    fn routes(s: &mut ReplySplitter, reply: &[u32]) -> Vec<Route> {
        reply.iter().map(|&t| s.route_with(t, &text)).collect()
    }

    use Route::{Answer as A, Markup as M, Reasoning as R};

    #[test]
    fn harmony_analysis_is_reasoning_and_final_is_answer() {
        // The prompt ends with the generation prompt `<|start|>assistant`.
        let mut s = harmony(&[START, 30, MESSAGE, 31, END, START, ASSISTANT]);
        let reply = [
            CHANNEL, ANALYSIS, MESSAGE, 40, 41, END, START, ASSISTANT, CHANNEL, FINAL, MESSAGE, 50,
            51,
        ];
        assert_eq!(
            routes(&mut s, &reply),
            [M, M, M, R, R, M, M, M, M, M, M, A, A]
        );
    }

    #[test]
    fn harmony_messages_to_a_function_are_neither_answer_nor_reasoning() {
        // The recipient in the channel header, then in the role header; then a final answer.
        let mut s = harmony(&[START, ASSISTANT]);
        let reply = [
            CHANNEL,
            COMMENTARY,
            TO_FUNCTION,
            MESSAGE,
            40,
            END,
            START,
            ASSISTANT,
            TO_FUNCTION,
            CHANNEL,
            COMMENTARY,
            MESSAGE,
            41,
            END,
            START,
            ASSISTANT,
            CHANNEL,
            FINAL,
            MESSAGE,
            50,
        ];
        let mut want = [M; 20];
        want[19] = A;
        assert_eq!(routes(&mut s, &reply), want);
    }

    #[test]
    fn harmony_prompt_that_opens_the_final_channel_starts_in_the_answer() {
        let mut s = harmony(&[START, ASSISTANT, CHANNEL, FINAL, MESSAGE]);
        assert_eq!(routes(&mut s, &[50, 51]), [A, A]);
        // Without any header the reply is all answer.
        assert_eq!(routes(&mut harmony(&[30, 31]), &[50]), [A]);
    }

    #[test]
    fn think_tags_enclose_reasoning_from_the_prompt_or_the_reply() {
        assert_eq!(
            routes(&mut think(&[30]), &[OPEN, 40, 41, CLOSE, 50]),
            [M, R, R, M, A]
        );
        // A template that opens <think> itself (DeepSeek-R1, Qwen3 thinking models).
        assert_eq!(routes(&mut think(&[30, OPEN]), &[40, CLOSE, 50]), [R, M, A]);
        // One that closes an empty one (Qwen3 with thinking off).
        assert_eq!(routes(&mut think(&[OPEN, CLOSE]), &[50]), [A]);
    }

    #[test]
    fn gemma4_channel_names_its_line_then_reasons() {
        // `<|channel>thought\n…<channel|>answer`: the name line is markup.
        assert_eq!(
            routes(
                &mut think_with(&[30], true),
                &[OPEN, THOUGHT, NEWLINE, 40, 41, CLOSE, 50]
            ),
            [M, M, M, R, R, M, A]
        );
        // Thinking off: the template closes an empty channel in the prompt.
        let mut s = think_with(&[OPEN, THOUGHT, NEWLINE, CLOSE], true);
        assert_eq!(routes(&mut s, &[50, 51]), [A, A]);
    }
}
