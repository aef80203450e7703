"""The official openai Python client against `kiln serve` (run by tests/cli/serve.rs with the
server's base URL; the key comes from OPENAI_API_KEY). Each call is checked against another
(a streamed reply concatenates to the whole one) or against what the API promises (the schema
holds, logprobs line up with the tokens, errors come back as the client's exceptions).
Exits non-zero, saying what failed, on the first failure."""

import json
import sys

import openai
from openai import OpenAI


def check(condition, what):
    if not condition:
        sys.exit(f"FAILED: {what}")


def main():
    base = sys.argv[1]
    client = OpenAI(base_url=base, max_retries=0, timeout=300)

    models = client.models.list()
    check(len(models.data) == 1, f"one model listed: {models}")
    model = models.data[0].id

    # Chat, whole and streamed: the stream concatenates to the whole reply.
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    whole = client.chat.completions.create(
        model=model, messages=messages, max_tokens=24, temperature=0
    )
    text = whole.choices[0].message.content
    check(bool(text), f"a chat reply: {whole}")
    check(whole.usage.completion_tokens > 0, f"usage: {whole.usage}")
    parts, finish, usage = [], None, None
    stream = client.chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=24,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                parts.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    check("".join(parts) == text, f"streamed {''.join(parts)!r} == whole {text!r}")
    check(finish == whole.choices[0].finish_reason, f"finish {finish}")
    check(
        usage is not None and usage.completion_tokens == whole.usage.completion_tokens,
        f"stream usage {usage}",
    )

    # A multi-turn conversation with a system message.
    turns = [
        {"role": "system", "content": "You answer in one word."},
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": text},
        {"role": "user", "content": "Another one?"},
    ]
    reply = client.chat.completions.create(model=model, messages=turns, max_tokens=8, temperature=0)
    check(reply.choices[0].message.role == "assistant", f"{reply}")

    # Text completions, whole and streamed.
    prompt = "The capital of France is"
    whole = client.completions.create(model=model, prompt=prompt, max_tokens=8, temperature=0)
    completion = whole.choices[0].text
    check(bool(completion), f"a completion: {whole}")
    streamed = "".join(
        c.choices[0].text
        for c in client.completions.create(
            model=model, prompt=prompt, max_tokens=8, temperature=0, stream=True
        )
        if c.choices
    )
    check(streamed == completion, f"streamed completion {streamed!r} == {completion!r}")

    # JSON-schema output: the reply parses and holds to the schema.
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
        },
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    r = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Describe a person as JSON with a name and an age."}],
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema}},
        max_tokens=80,
        temperature=0,
    )
    content = r.choices[0].message.content
    check(r.choices[0].finish_reason == "stop", f"the JSON ended: {content!r}")
    person = json.loads(content)
    check(set(person) == {"name", "age"}, f"the schema's keys: {person}")
    check(isinstance(person["name"], str) and len(person["name"]) <= 20, f"name: {person}")
    check(isinstance(person["age"], int) and 0 <= person["age"] <= 150, f"age: {person}")

    # Logprobs: one entry per token, two alternatives each, the greedy pick the likeliest.
    r = client.chat.completions.create(
        model=model, messages=messages, max_tokens=6, temperature=0, logprobs=True, top_logprobs=2
    )
    entries = r.choices[0].logprobs.content
    check(len(entries) == r.usage.completion_tokens, f"{len(entries)} logprobs")
    for e in entries:
        check(len(e.top_logprobs) == 2, f"two alternatives: {e}")
        check(e.top_logprobs[0].logprob == e.logprob, f"greedy takes the likeliest: {e}")
        check(e.logprob <= 0, f"a log probability: {e}")
    # Streamed, each chunk carries the logprobs of the tokens it brings (the rest with the last):
    # they concatenate to the same list, and the chunks with text carry some.
    streamed, with_text = [], 0
    for chunk in client.chat.completions.create(
        model=model, messages=messages, max_tokens=6, temperature=0, logprobs=True, top_logprobs=2,
        stream=True,
    ):
        c = chunk.choices[0]
        got = c.logprobs.content if c.logprobs and c.logprobs.content else []
        streamed += got
        with_text += bool(c.delta.content and got)
    check([(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in entries],
          f"streamed logprobs {streamed} != {entries}")
    check(with_text >= 1, "logprobs come with the streamed text")

    # A tool-call round trip: the call (required, so it always comes, its arguments valid under
    # the function's schema), the tool's result, then an answer that is text.
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The current weather in a city",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ]
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.chat.completions.create(
        model=model, messages=ask, tools=tools, tool_choice="required", max_tokens=60, temperature=0
    )
    choice = r.choices[0]
    check(choice.finish_reason == "tool_calls", f"a call: {r}")
    calls = choice.message.tool_calls
    check(len(calls) == 1 and calls[0].function.name == "get_weather", f"the call: {calls}")
    args = json.loads(calls[0].function.arguments)
    check(isinstance(args.get("city"), str), f"the arguments hold to the schema: {args}")
    # The same call streamed: its deltas assemble to the whole one.
    streamed_calls, finish = {}, None
    for chunk in client.chat.completions.create(
        model=model, messages=ask, tools=tools, tool_choice="required", max_tokens=60,
        temperature=0, stream=True,
    ):
        for c in chunk.choices:
            for d in c.delta.tool_calls or []:
                entry = streamed_calls.setdefault(d.index, {"name": "", "arguments": ""})
                entry["name"] += d.function.name or ""
                entry["arguments"] += d.function.arguments or ""
            finish = c.finish_reason or finish
    check(finish == "tool_calls", f"streamed finish {finish}")
    check(
        streamed_calls == {0: {"name": "get_weather", "arguments": calls[0].function.arguments}},
        f"streamed call {streamed_calls}",
    )
    turns = ask + [
        {"role": "assistant", "content": None, "tool_calls": [c.model_dump() for c in calls]},
        {"role": "tool", "tool_call_id": calls[0].id, "content": json.dumps({"temperature_c": 18, "sky": "clear"})},
    ]
    answer = client.chat.completions.create(
        model=model, messages=turns, tools=tools, max_tokens=40, temperature=0
    )
    check(answer.choices[0].message.content, f"an answer after the tool's result: {answer}")
    check(answer.usage.prompt_tokens > r.usage.prompt_tokens, "the result is in the prompt")

    # Errors come back as the client's exceptions, with the server's message.
    try:
        client.chat.completions.create(model=model, messages=[], max_tokens=1)
        check(False, "an empty conversation was accepted")
    except openai.BadRequestError as e:
        check("messages is empty" in str(e), f"the message: {e}")
    try:
        OpenAI(base_url=base, api_key="wrong", max_retries=0).models.list()
        check(False, "a wrong key was accepted")
    except openai.AuthenticationError:
        pass
    print("openai client: all checks passed")


if __name__ == "__main__":
    main()
