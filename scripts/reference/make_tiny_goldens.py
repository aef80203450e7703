"""Goldens for tiny random-weight files of the smaller families (tests/fixtures/make_smollm3_tiny.py,
make_gemma2_tiny.py, make_mixtral_tiny.py): llama.cpp's greedy runs over the prompts of llama-cpp-qwen35.json (the files
carry the same SmolLM2 tokenizer, so the same prompt ids; the last prompt has 961 tokens, two
512-token ubatches), with an F32 KV cache and flash attention off, as the Qwen3.5 and Qwen3 MoE
goldens were made. Writes OUT in the goldens' format, one entry per model.

usage: python3 make_tiny_goldens.py GREEDY_BINARY GOLDEN_DIR OUT "WHICH LLAMA.CPP" "HOW THE FILES WERE MADE" MODEL...
(GREEDY_BINARY built from llama_cpp_greedy.cpp; WHICH names the build for the record). With N_CTX set in the
environment, llama.cpp's context is that many positions instead of 2048, and each case records it as `n_ctx`
(the tests then run kiln's sessions at that context: LongRoPE chooses its factors by it)."""
import json
import os
import sys

from llama_cpp_greedy import greedy_case

n_ctx = os.environ.get("N_CTX")

greedy, golden_dir, out_name, which, made = sys.argv[1:6]
prompts = json.load(open(f"{golden_dir}/llama-cpp-qwen35.json"))["models"]["qwen35moe-tiny.gguf"]
models = {}
for model in sys.argv[6:]:
    name = model.split("/")[-1]
    entry = models[name] = {k: prompts[k] for k in ["add_bos", "bos", "eos"]}
    entry["greedy"] = []
    for case in prompts["greedy"]:
        entry["greedy"].append(greedy_case(greedy, model, case, "f32", "0", *([n_ctx] if n_ctx else [])))
        if n_ctx:
            entry["greedy"][-1]["n_ctx"] = int(n_ctx)
        print(name, repr(case["prompt"][:30]), len(entry["greedy"][-1]["steps"]), file=sys.stderr)
context = f"n_ctx {n_ctx}, " if n_ctx else ""
out = {"generator": f"{which} via scripts/reference/llama_cpp_greedy.cpp, CPU, 2 threads, {context}n_ubatch 512, "
                    f"F32 KV cache, flash attention off; {made}",
       "models": models}
with open(f"{golden_dir}/{out_name}", "w") as f:
    f.write(json.dumps(out) + "\n")
