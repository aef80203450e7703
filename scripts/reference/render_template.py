"""A chat template rendered by Python's jinja2 as Hugging Face's transformers renders it (trim_blocks,
lstrip_blocks, a sandbox, `raise_exception`; `strftime_now` gives the fixed text DATE, which a test replaces by
the date of its own rendering) for a few conversations, with `add_generation_prompt` true and false. Writes a
golden of {"template": file name, "renders": [{"messages", "add_generation_prompt", "text"}]}.

usage: python3 render_template.py TEMPLATE.jinja OUT.json [BOS EOS [KWARGS]]   (jinja2 3.1; BOS and EOS default
to gpt-oss's <|startoftext|> and <|return|>; KWARGS is a JSON object of extra template variables, as
--chat-template-kwargs passes them; the golden records what it used)
"""
import json
import os
import sys

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

CONVERSATIONS = [
    [{"role": "user", "content": "What is 2+2?"}],
    [{"role": "system", "content": "Answer in one word."},
     {"role": "user", "content": "Capital of France?"}],
    [{"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Tell me a joke about \"quotes\" and {braces}."}],
    [{"role": "developer", "content": "Be terse."},
     {"role": "user", "content": "Name three primes."},
     {"role": "assistant", "content": "2, 3, 5."},
     {"role": "user", "content": "Two more?"}],
]


def raise_exception(message):
    raise TemplateError(message)


def variants(messages):
    """The renders of one conversation: for generation, and where it ends with the assistant without;
    a conversation that ends with the user is also closed by an assistant reply, as chat history holds it."""
    out = [(messages, True)]
    if messages[-1]["role"] == "assistant":
        out.append((messages, False))
    else:
        out.append((messages + [{"role": "assistant", "content": "Done."}], False))
    return out


def write_golden(out, template, bos, eos, kwargs, renders):
    """The renders of a template, in the template goldens' format."""
    with open(out, "w") as f:
        f.write(json.dumps({"template": template, "bos_token": bos, "eos_token": eos, "kwargs": kwargs,
                            "renders": renders},
                           ensure_ascii=False, indent=1) + "\n")


def main():
    template_path, out = sys.argv[1:3]
    bos, eos = sys.argv[3:5] if len(sys.argv) > 4 else ("<|startoftext|>", "<|return|>")
    kwargs = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: "DATE"
    template = env.from_string(open(template_path).read())
    renders = []
    for conversation in CONVERSATIONS:
        for messages, gen in variants(conversation):
            renders.append({"messages": messages, "add_generation_prompt": gen,
                            "text": template.render(messages=messages, add_generation_prompt=gen,
                                                    bos_token=bos, eos_token=eos, **kwargs)})
    write_golden(out, os.path.basename(template_path), bos, eos, kwargs, renders)


if __name__ == "__main__":
    main()
