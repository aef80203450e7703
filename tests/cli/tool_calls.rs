//! Forced tool calls (`--tool-choice required`) on the random-weight fixtures of the families
//! whose calls are not JSON (Gemma 4's notation, GLM's XML): sampled at temperature 1, whatever
//! the weights pick, every reply is one call whose arguments validate under the function's
//! schema (checked by the `jsonschema` crate), and gpt-oss's harmony grammar compiles against
//! its vocabulary.

use serde_json::{Value, json};

use crate::common;

fn tools() -> Value {
    json!([{"type": "function", "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 6},
                "days": {"type": "integer", "minimum": 1, "maximum": 14},
                "units": {"enum": ["c", "f"]},
                "alerts": {"type": "boolean"},
                "hours": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 23}, "maxItems": 3},
            },
            "required": ["city", "days", "units"],
        },
    }}])
}

#[test]
fn forced_calls_validate_in_gemma4_and_glm_syntax() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tools.json");
    std::fs::write(&file, tools().to_string()).unwrap();
    let file = file.to_str().unwrap();
    let validator = jsonschema::validator_for(&tools()[0]["function"]["parameters"]).unwrap();
    for model in ["gemma4-chat-tiny.gguf", "glm4-tiny.gguf"] {
        let path = common::fixture(&format!("models/{model}"));
        for seed in ["1", "2", "3"] {
            let v = common::kiln_run_json(
                &path,
                &[
                    "--temp",
                    "1",
                    "--seed",
                    seed,
                    "-n",
                    "200",
                    "--tools",
                    file,
                    "--tool-choice",
                    "required",
                    "Weather in Paris?",
                ],
            );
            let call = &v["tool_calls"][0]["function"];
            assert_eq!(call["name"], "get_weather", "{model} seed {seed}: {v}");
            let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
            if let Err(e) = validator.validate(&args) {
                panic!("{model} seed {seed}: {e}\n{v}");
            }
        }
    }
    // Harmony's grammar names gpt-oss's control tokens: it compiles, and generation starts.
    let gptoss = common::fixture("models/gptoss-tiny.gguf");
    let v = common::kiln_run_json(
        &gptoss,
        &[
            "--temp",
            "1",
            "-n",
            "8",
            "--tools",
            file,
            "--tool-choice",
            "required",
            "Weather?",
        ],
    );
    assert_eq!(
        v["completion_tokens"].as_u64().map(|n| n > 0),
        Some(true),
        "{v}"
    );
}
