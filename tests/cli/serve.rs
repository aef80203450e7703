//! `kiln serve` as a real process on 127.0.0.1 (a free port, `--port 0`), spoken to over HTTP.
//! The truths: what `kiln run` prints for the same request (a greedy reply, its logprobs, a seeded
//! sample, a raw completion), what `kiln tokenize` prints, the whole reply for a streamed one;
//! and properties: bad requests get OpenAI-shaped 4xx errors and leave the server serving, a
//! client that goes away has its generation cancelled, Ctrl-C lets the request in flight finish
//! and exits 0, a conversation's next turn finds its slot. The official `openai` Python client runs against it too
//! (tests/serve/openai_client.py, from the fixtures venv).

use crate::common;

use std::io::Read;
use std::path::PathBuf;
use std::process::Command;

use common::serve::Server;
use serde_json::{Value, json};

fn smollm() -> PathBuf {
    common::real_model("SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// What `kiln run` gives is what the server gives: a greedy chat reply (text, token count,
/// finish), its logprobs, seeded samples for each of n choices, a raw completion; a streamed
/// reply concatenates to the whole one; the second request reuses the cached prompt.
#[test]
fn replies_equal_kiln_runs_and_streams_concatenate() {
    let model = smollm();
    let server = Server::start(&model, &["-c", "512"]);
    let question = "What is the capital of France?";
    let chat = json!({
        "model": "any", "messages": [{"role": "user", "content": question}],
        "max_tokens": 20, "temperature": 0,
    });
    let whole = server.ok("/v1/chat/completions", &chat);
    let run = common::kiln_run_json(&model, &["-c", "512", "--temp", "0", "-n", "20", question]);
    let choice = &whole["choices"][0];
    assert_eq!(choice["message"]["content"], run["text"], "{whole}");
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["finish_reason"], run["finish_reason"]);
    assert_eq!(whole["object"], "chat.completion");
    assert_eq!(
        whole["usage"]["completion_tokens"],
        run["completion_tokens"]
    );
    assert_eq!(whole["usage"]["prompt_tokens"], run["prompt_tokens"]);

    // Streamed: the role first, then text deltas that concatenate to the whole reply, the
    // finish reason, and the usage chunk asked for.
    let mut streamed = chat.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let chunks = server.stream("/v1/chat/completions", &streamed);
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, run["text"].as_str().unwrap());
    let last = &chunks[chunks.len() - 1];
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["completion_tokens"], run["completion_tokens"]);
    // The same prompt again: all but its last token came from the cache.
    let prompt_tokens = run["prompt_tokens"].as_u64().unwrap();
    assert_eq!(
        last["usage"]["prompt_tokens_details"]["cached_tokens"],
        prompt_tokens - 1
    );
    assert_eq!(
        chunks[chunks.len() - 2]["choices"][0]["finish_reason"],
        run["finish_reason"]
    );
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );

    // Logprobs: the chosen tokens' and the top 3, as `kiln run --logprobs 3`.
    let mut with_logprobs = chat.clone();
    with_logprobs["max_tokens"] = json!(6);
    with_logprobs["logprobs"] = json!(true);
    with_logprobs["top_logprobs"] = json!(3);
    let v = server.ok("/v1/chat/completions", &with_logprobs);
    let run = common::kiln_run_json(
        &model,
        &[
            "-c",
            "512",
            "--temp",
            "0",
            "-n",
            "6",
            "--logprobs",
            "3",
            question,
        ],
    );
    let served = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    let expected = run["logprobs"].as_array().unwrap();
    assert_eq!(served.len(), expected.len());
    for (s, e) in served.iter().zip(expected) {
        assert_eq!(s["token"], e["text"]);
        assert_eq!(s["logprob"], e["logprob"]);
        let top: Vec<&Value> = s["top_logprobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| &t["logprob"])
            .collect();
        let expected_top: Vec<&Value> = e["top"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| &t["logprob"])
            .collect();
        assert_eq!(top, expected_top);
    }

    // n = 2, seeded: choice i samples with seed + i.
    let mut sampled = chat.clone();
    sampled["n"] = json!(2);
    sampled["seed"] = json!(7);
    sampled["temperature"] = json!(1.0);
    sampled["max_tokens"] = json!(12);
    let v = server.ok("/v1/chat/completions", &sampled);
    for i in 0..2 {
        let seed = (7 + i).to_string();
        let run = common::kiln_run_json(
            &model,
            &[
                "-c", "512", "--temp", "1", "--seed", &seed, "-n", "12", question,
            ],
        );
        assert_eq!(
            v["choices"][i]["message"]["content"], run["text"],
            "choice {i}"
        );
        assert_eq!(v["choices"][i]["index"], i);
    }

    // A raw text completion, whole and streamed.
    let prompt = "The three primary colours are";
    let completion = json!({"prompt": prompt, "max_tokens": 10, "temperature": 0});
    let v = server.ok("/v1/completions", &completion);
    let run = common::kiln_run_json(
        &model,
        &["-c", "512", "--raw", "--temp", "0", "-n", "10", prompt],
    );
    assert_eq!(v["choices"][0]["text"], run["text"]);
    assert_eq!(v["object"], "text_completion");
    let mut streamed = completion.clone();
    streamed["stream"] = json!(true);
    let text: String = server
        .stream("/v1/completions", &streamed)
        .iter()
        .filter_map(|c| c["choices"][0]["text"].as_str())
        .collect();
    assert_eq!(text, run["text"].as_str().unwrap());

    // /tokenize without special tokens is `kiln tokenize --no-bos`; /detokenize inverts it.
    let text = "Hello world, hello server";
    let out = common::kiln()
        .args(["tokenize", "--no-bos", "--format", "json", "-m"])
        .arg(&model)
        .arg(text)
        .output()
        .unwrap();
    let tokenized = common::json_of(&out, "kiln tokenize");
    let v = server.ok("/tokenize", &json!({ "content": text }));
    let ids: Vec<u64> = serde_json::from_value(v["tokens"].clone()).unwrap();
    let expected: Vec<u64> = serde_json::from_value(tokenized["ids"].clone()).unwrap();
    assert_eq!(ids, expected);
    let v = server.ok("/detokenize", &json!({ "tokens": ids }));
    assert_eq!(v["content"], text);

    let (status, text) = server.request("GET", "/v1/models", None, None);
    assert_eq!(status, 200);
    let models: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(models["data"][0]["object"], "model");
    assert_eq!(models["data"][0]["meta"]["n_ctx"], 512);
}

/// Bad requests get 4xx errors in OpenAI's shape, naming the problem, and the server goes on.
/// Slots (`-np 3`): three conversations' first turns, then their second turns in another order;
/// each second turn goes to the slot its conversation left (the free slot whose last request
/// shares the longest start), so all of the first turn it repeats comes from that slot's cache.
#[test]
fn a_conversation_returns_to_its_slot() {
    let server = Server::start(&smollm(), &["-np", "3"]);
    let topics = ["cats", "the sea", "bread"];
    let first: Vec<(Value, u64)> = topics
        .iter()
        .map(|t| {
            let messages = json!([{"role": "user", "content": format!("Tell me about {t}.")}]);
            let body = json!({"messages": messages, "max_tokens": 8, "temperature": 0});
            let reply = server.ok("/v1/chat/completions", &body);
            let prompt = reply["usage"]["prompt_tokens"].as_u64().unwrap();
            let mut messages = messages;
            messages
                .as_array_mut()
                .unwrap()
                .push(reply["choices"][0]["message"].clone());
            (messages, prompt)
        })
        .collect();
    for i in [2, 0, 1] {
        let (mut messages, prompt) = first[i].clone();
        messages
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "user", "content": "And more?"}));
        let body = json!({"messages": messages, "max_tokens": 4, "temperature": 0});
        let reply = server.ok("/v1/chat/completions", &body);
        let cached = reply["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap();
        assert!(
            cached >= prompt,
            "{}: {cached} cached of the first turn's {prompt}\n{}",
            topics[i],
            server.log()
        );
    }
}

#[test]
fn bad_requests_get_openai_errors_and_the_server_goes_on() {
    let model = common::fixture("models/tiny-llama.gguf");
    let server = Server::start(&model, &["-c", "64"]);
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        ("/v1/chat/completions", b"{\"messages\": [".to_vec(), 400, "invalid request"),
        ("/v1/chat/completions", b"not json".to_vec(), 400, "invalid request"),
        ("/v1/chat/completions", json!({"messages": [{"role": "user", "content": "x"}], "temprature": 1}).to_string().into_bytes(), 400, "unknown field `temprature`"),
        ("/v1/chat/completions", json!({"messages": []}).to_string().into_bytes(), 400, "messages is empty"),
        ("/v1/chat/completions", json!({"messages": [{"role": "user", "content": "x"}], "n": 0}).to_string().into_bytes(), 400, "n must be"),
        ("/v1/chat/completions", json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": -5}).to_string().into_bytes(), 400, "max_tokens"),
        ("/v1/chat/completions", json!({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}).to_string().into_bytes(), 400, "needs logprobs"),
        ("/v1/chat/completions", json!({"messages": [{"role": "user", "content": "word ".repeat(100)}]}).to_string().into_bytes(), 400, "context holds 64"),
        ("/v1/chat/completions", json!({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {}}}).to_string().into_bytes(), 400, "json_schema.schema"),
        ("/v1/completions", json!({"prompt": [1, 2, 999999]}).to_string().into_bytes(), 400, "token id 999999"),
        ("/v1/completions", json!({"prompt": ["a", "b"]}).to_string().into_bytes(), 400, "one prompt"),
        ("/detokenize", json!({"tokens": [-1]}).to_string().into_bytes(), 400, "invalid request"),
        ("/v1/nothing", b"{}".to_vec(), 404, "no such route"),
        ("/v1/completions", vec![b' '; 33 << 20], 413, "larger than 32 MiB"),
    ];
    for (path, body, status, message) in cases {
        let (got, text) = server.request("POST", path, Some(&body), None);
        let v: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}"));
        assert_eq!(got, status, "{path}: {text}");
        assert_eq!(v["error"]["code"], status, "{text}");
        let said = v["error"]["message"].as_str().unwrap();
        assert!(said.contains(message), "{path}: `{said}` lacks `{message}`");
    }
    // Still serving.
    let v = server.ok(
        "/v1/completions",
        &json!({"prompt": "Hello", "max_tokens": 3, "temperature": 0}),
    );
    assert_eq!(v["usage"]["completion_tokens"], 3);
}

/// With --api-key every route but /health needs `Authorization: Bearer KEY`.
#[test]
fn api_key_guards_every_route_but_health() {
    let model = common::fixture("models/tiny-llama.gguf");
    let server = Server::start(&model, &["-c", "64", "--api-key", "sesame"]);
    let body = json!({"prompt": "Hi", "max_tokens": 2}).to_string();
    let (status, text) = server.request("POST", "/v1/completions", Some(body.as_bytes()), None);
    assert_eq!(status, 401, "{text}");
    assert!(text.contains("API key"));
    let (status, _) = server.request(
        "POST",
        "/v1/completions",
        Some(body.as_bytes()),
        Some("wrong"),
    );
    assert_eq!(status, 401);
    let (status, _) = server.request("GET", "/v1/models", None, None);
    assert_eq!(status, 401);
    let (status, text) = server.request(
        "POST",
        "/v1/completions",
        Some(body.as_bytes()),
        Some("sesame"),
    );
    assert_eq!(status, 200, "{text}");
    let (status, _) = server.request("GET", "/health", None, None);
    assert_eq!(status, 200);
}

/// A client that goes away mid-stream has its generation cancelled (the engine is free for the
/// next request at once); Ctrl-C lets the request in flight finish whole and exits 0.
#[test]
fn disconnects_cancel_and_ctrl_c_drains() {
    let model = common::fixture("models/tiny-llama.gguf");
    let mut server = Server::start(&model, &["-c", "4096"]);
    let long = json!({
        "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4000,
        "temperature": 0, "stream": true,
    });
    // Read the first chunk, then hang up.
    {
        let stream =
            std::net::TcpStream::connect(server.url.trim_start_matches("http://")).unwrap();
        let body = long.to_string();
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        use std::io::Write;
        (&stream).write_all(head.as_bytes()).unwrap();
        let mut first = [0u8; 256];
        let n = (&stream).read(&mut first).unwrap();
        assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    }
    let log = server.wait_for_log("chatcmpl-1:");
    let line = log.lines().find(|l| l.starts_with("chatcmpl-1:")).unwrap();
    assert!(line.contains("cancelled"), "{line}");
    let generated: usize = line
        .split(", ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(generated < 4000, "{line}");

    // Ctrl-C while a request runs: it finishes whole, then the server exits 0.
    let url = server.url.clone();
    let body = json!({"prompt": "Once", "max_tokens": 3000, "temperature": 0}).to_string();
    let client = std::thread::spawn(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut r = agent
            .post(format!("{url}/v1/completions"))
            .send(body)
            .unwrap();
        let mut text = String::new();
        r.body_mut().as_reader().read_to_string(&mut text).unwrap();
        (r.status().as_u16(), text)
    });
    server.wait_for_log("POST /v1/completions");
    let pid = server.child.id().to_string();
    // The request is queued or running: its log line comes when it ends.
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let (status, text) = client.join().unwrap();
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["usage"]["completion_tokens"], 3000, "{}", server.log());
    let exit = server.child.wait().unwrap();
    assert_eq!(exit.code(), Some(0), "{}", server.log());
}

/// The official openai Python client (from the fixtures venv): chat, streamed chat, text
/// completions, JSON-schema output, logprobs and a tool-call round trip (Qwen2.5-Coder's
/// template takes tools), each checked against the others and against what the schema and the
/// API promise.
#[test]
fn the_openai_python_client_works() {
    let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/fixtures-venv/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run scripts/make-fixtures.sh (scripts/test.sh does)",
        python.display()
    );
    let model = common::real_model("qwen2.5-coder-0.5b.gguf");
    let server = Server::start(&model, &["-c", "1024", "--api-key", "test-key"]);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/serve/openai_client.py");
    let out = Command::new(&python)
        .arg(&script)
        .arg(format!("{}/v1", server.url))
        .env("OPENAI_API_KEY", "test-key")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        server.log()
    );
}

/// Tool calls: a required call parses and holds to the schema, a named one calls that function,
/// and the requests that cannot be served say why (a model whose template takes no tools, a
/// named function that is not among the tools, a malformed tool).
#[test]
fn tool_calls_are_parsed_forced_and_checked() {
    let tools = json!([
        {"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
        {"type": "function", "function": {"name": "get_time", "parameters": {
            "type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
            "required": ["zone"]}}},
    ]);
    let qwen = common::real_model("qwen2.5-coder-0.5b.gguf");
    let server = Server::start(&qwen, &["-c", "1024"]);
    let ask = json!([{"role": "user", "content": "What is the weather in Paris?"}]);
    let named = json!({"type": "function", "function": {"name": "get_time"}});
    for choice in [json!("required"), named] {
        let v = server.ok(
            "/v1/chat/completions",
            &json!({"messages": ask, "tools": tools, "tool_choice": choice, "max_tokens": 60, "temperature": 0}),
        );
        let c = &v["choices"][0];
        assert_eq!(c["finish_reason"], "tool_calls", "{v}");
        let call = &c["message"]["tool_calls"][0];
        let args: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        match call["function"]["name"].as_str().unwrap() {
            "get_weather" => assert!(args["city"].is_string(), "{args}"),
            "get_time" => assert!(
                ["UTC", "CET"].contains(&args["zone"].as_str().unwrap()),
                "{args}"
            ),
            other => panic!("called {other}"),
        }
        if choice != "required" {
            assert_eq!(call["function"]["name"], "get_time");
        }
    }
    let bad = [
        (
            json!({"messages": ask, "tools": tools, "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
            "not among the tools",
        ),
        (
            json!({"messages": ask, "tools": [{"type": "function"}]}),
            "tools[0]",
        ),
        (
            json!({"messages": ask, "tool_choice": "required"}),
            "tool_choice needs tools",
        ),
    ];
    for (body, message) in bad {
        let (status, v) = server.post("/v1/chat/completions", &body);
        assert_eq!(status, 400, "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(message),
            "{v}"
        );
    }
    // `kiln run --tools` and a batch line with `tools` render and parse through their own paths:
    // the same forced call as the server's.
    let served = server.ok(
        "/v1/chat/completions",
        &json!({"messages": ask, "tools": tools, "tool_choice": "required", "max_tokens": 60, "temperature": 0}),
    );
    let served_call = &served["choices"][0]["message"]["tool_calls"][0]["function"];
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tools.json");
    std::fs::write(&file, tools.to_string()).unwrap();
    let file = file.to_str().unwrap();
    let run = common::kiln_run_json(
        &qwen,
        &[
            "-c",
            "1024",
            "--temp",
            "0",
            "-n",
            "60",
            "--tools",
            file,
            "--tool-choice",
            "required",
            "What is the weather in Paris?",
        ],
    );
    assert_eq!(&run["tool_calls"][0]["function"], served_call, "{run}");
    let line =
        json!({"messages": ask, "tool_choice": "required", "max_tokens": 60, "temperature": 0});
    let out = common::kiln()
        .args(["run", "-c", "1024", "--tools", file, "--batch", "-", "-m"])
        .arg(&qwen)
        .write_stdin(line.to_string())
        .output()
        .unwrap();
    let batch = common::json_of(&out, "run --batch with --tools");
    assert_eq!(&batch["tool_calls"][0]["function"], served_call, "{batch}");
    drop(server);
    // SmolLM2's template has no tools.
    let server = Server::start(&smollm(), &["-c", "512"]);
    let (status, v) = server.post(
        "/v1/chat/completions",
        &json!({"messages": ask, "tools": tools, "max_tokens": 4}),
    );
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("takes no tools"),
        "{v}"
    );
}

/// Load and faults (tests/serve/load_faults.py): 200 requests from 16 clients, hang-ups and bad
/// requests mixed in; every good request answered as it is alone, every bad one a 4xx, the
/// server free and its memory back near its idle level afterwards, no panic in its log.
#[test]
fn load_with_hang_ups_and_bad_requests() {
    let model = common::fixture("models/tiny-llama.gguf");
    let server = Server::start(&model, &["-c", "512"]);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/serve/load_faults.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(&server.url)
        .arg(server.child.id().to_string())
        .output()
        .unwrap();
    let log = server.log();
    assert!(
        out.status.success(),
        "{}\n{}\nserver log (last 3000 bytes):\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        &log[log.len().saturating_sub(3000)..]
    );
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    assert!(!log.contains("panicked"), "{log}");
}

/// Per-request chat-template variables (llama-server's `chat_template_kwargs`) reach the
/// template as `--chat-template-kwargs` does: GLM's `enable_thinking: false` adds an empty think
/// block to the prompt, and the reply is `kiln run`'s with the same flag.
#[test]
fn chat_template_kwargs_apply_per_request() {
    let model = common::fixture("models/glm4moe-tiny.gguf");
    let server = Server::start(&model, &["-c", "256"]);
    let ask = |kwargs: Option<Value>| {
        let mut body = json!({"messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 6, "temperature": 0});
        if let Some(k) = kwargs {
            body["chat_template_kwargs"] = k;
        }
        server.ok("/v1/chat/completions", &body)
    };
    let plain = ask(None);
    let off = ask(Some(json!({"enable_thinking": false})));
    let run = common::kiln_run_json(
        &model,
        &[
            "-c",
            "256",
            "--temp",
            "0",
            "-n",
            "6",
            "--chat-template-kwargs",
            r#"{"enable_thinking": false}"#,
            "Hello there",
        ],
    );
    assert_eq!(off["usage"]["prompt_tokens"], run["prompt_tokens"]);
    assert_eq!(off["choices"][0]["message"]["content"], run["text"]);
    assert_ne!(
        off["usage"]["prompt_tokens"],
        plain["usage"]["prompt_tokens"]
    );
}

/// An image as an `image_url` data URL in a chat message: the reply and the prompt's rows are
/// `kiln run --image`'s (the tiny Qwen3.5 pair), and the image's encode time is reported.
#[test]
fn chat_takes_images_as_data_urls() {
    use base64::Engine as _;
    let model = common::fixture("models/qwen35-tiny.gguf");
    let mmproj = common::fixture("models/qwen35-mmproj-tiny.gguf");
    let image = common::fixture("models/vision-45x29.png");
    let server = Server::start(&model, &["-c", "256", "--mmproj", mmproj.to_str().unwrap()]);
    let data = base64::engine::general_purpose::STANDARD.encode(std::fs::read(&image).unwrap());
    let body = json!({
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{data}")}},
        ]}],
        "max_tokens": 8, "temperature": 0,
    });
    let v = server.ok("/v1/chat/completions", &body);
    let run = common::kiln_run_json(
        &model,
        &[
            "-c",
            "256",
            "--temp",
            "0",
            "-n",
            "8",
            "--mmproj",
            mmproj.to_str().unwrap(),
            "--image",
            image.to_str().unwrap(),
            "What is in this picture?",
        ],
    );
    assert_eq!(v["choices"][0]["message"]["content"], run["text"], "{v}");
    assert_eq!(v["usage"]["prompt_tokens"], run["prompt_tokens"]);
    // A broken image is the request's 400.
    let mut bad = body.clone();
    bad["messages"][0]["content"][1]["image_url"]["url"] = json!("data:image/png;base64,AAAA");
    let (status, v) = server.post("/v1/chat/completions", &bad);
    assert_eq!(status, 400, "{v}");
}
