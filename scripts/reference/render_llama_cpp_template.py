"""A llama.cpp built-in chat template (by name, as `--chat-template NAME`; llama_cpp_chat.cpp) rendered for
render_template.py's conversations, in its golden format, for kiln's built-in templates that copy one of
llama.cpp's hand-written formats rather than a Jinja file.

usage: python3 render_llama_cpp_template.py CHAT_BINARY NAME OUT.json BOS EOS
"""
import subprocess
import sys

from render_template import CONVERSATIONS, variants, write_golden

chat, name, out, bos, eos = sys.argv[1:6]
renders = []
for conversation in CONVERSATIONS:
    for messages, gen in variants(conversation):
        args = [chat, name, str(int(gen))] + [x for m in messages for x in (m["role"], m["content"])]
        text = subprocess.run(args, capture_output=True, text=True, check=True).stdout
        renders.append({"messages": messages, "add_generation_prompt": gen, "text": text})
write_golden(out, f"llama.cpp built-in {name}", bos, eos, {}, renders)
