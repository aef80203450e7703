"""Goldens for the tiny Qwen3 MoE (tests/fixtures/made/qwen3moe-tiny.gguf, made by
tests/fixtures/make_qwen3moe_tiny.py): llama.cpp's greedy runs over the prompts of
llama-cpp-qwen35.json (the same SmolLM2 tokenizer, so the same prompt ids; the last one is the
961-token prompt, two 512-token ubatches), with an F32 KV cache and flash attention off, as the Qwen3.5
goldens were made. Also for its requantized sibling qwen3moe-tiny-Q8_0.gguf (`llama-quantize IN OUT Q8_0`),
whose expert stacks kiln repacks. Writes llama-cpp-qwen3moe.json in the goldens' format.

usage: python3 make_qwen3moe_goldens.py GREEDY_BINARY GOLDEN_DIR "WHICH LLAMA.CPP" MODEL...
(GREEDY_BINARY built from llama_cpp_greedy.cpp; the third argument names the build for the record)"""
import json
import sys

from llama_cpp_greedy import greedy_case

greedy, golden_dir, which = sys.argv[1:4]
prompts = json.load(open(f"{golden_dir}/llama-cpp-qwen35.json"))["models"]["qwen35moe-tiny.gguf"]
models = {}
for model in sys.argv[4:]:
    name = model.split("/")[-1]
    entry = models[name] = {k: prompts[k] for k in ["add_bos", "bos", "eos"]}
    entry["greedy"] = []
    for case in prompts["greedy"]:
        entry["greedy"].append(greedy_case(greedy, model, case, "f32", "0"))
        print(name, repr(case["prompt"][:30]), len(entry["greedy"][-1]["steps"]), file=sys.stderr)
out = {"generator": f"{which} via scripts/reference/llama_cpp_greedy.cpp, CPU, 2 threads, n_ubatch 512, "
                    f"F32 KV cache, flash attention off; qwen3moe-tiny.gguf written by "
                    f"tests/fixtures/make_qwen3moe_tiny.py, qwen3moe-tiny-Q8_0.gguf from it by llama-quantize Q8_0",
       "models": models}
with open(f"{golden_dir}/llama-cpp-qwen3moe.json", "w") as f:
    f.write(json.dumps(out) + "\n")
