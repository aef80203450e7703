"""Goldens for the tiny Mixtral (tests/fixtures/models/mixtral-tiny.gguf, made by
tests/fixtures/make_mixtral_tiny.py): llama.cpp's greedy runs over the prompts of
llama-cpp-qwen35.json (the same SmolLM2 tokenizer, so the same prompt ids; the last one is the
961-token prompt, two 512-token ubatches), with an F32 KV cache and flash attention off, as the Qwen3
MoE goldens (make_qwen3moe_goldens.py) were made. Writes llama-cpp-mixtral.json in the goldens' format.

usage: python3 make_mixtral_goldens.py GREEDY_BINARY GOLDEN_DIR "WHICH LLAMA.CPP" MODEL...
(GREEDY_BINARY built from llama_cpp_greedy.cpp; the third argument names the build for the record)"""
import json
import subprocess
import sys

greedy, golden_dir, which = sys.argv[1:4]
prompts = json.load(open(f"{golden_dir}/llama-cpp-qwen35.json"))["models"]["qwen35moe-tiny.gguf"]
models = {}
for model in sys.argv[4:]:
    name = model.split("/")[-1]
    entry = models[name] = {k: prompts[k] for k in ["add_bos", "bos", "eos"]}
    entry["greedy"] = []
    for case in prompts["greedy"]:
        run = subprocess.run([greedy, model, ",".join(map(str, case["prompt_ids"])),
                              str(len(case["steps"])), "f32", "0"],
                             capture_output=True, text=True, check=True)
        steps = [json.loads(line) for line in run.stdout.splitlines()]
        entry["greedy"].append({"prompt": case["prompt"], "prompt_ids": case["prompt_ids"], "steps": steps})
        print(name, repr(case["prompt"][:30]), len(steps), file=sys.stderr)
out = {"generator": f"{which} via scripts/reference/llama_cpp_greedy.cpp, CPU, 2 threads, n_ubatch 512, "
                    f"F32 KV cache, flash attention off; mixtral-tiny.gguf written by "
                    f"tests/fixtures/make_mixtral_tiny.py",
       "models": models}
with open(f"{golden_dir}/llama-cpp-mixtral.json", "w") as f:
    f.write(json.dumps(out) + "\n")
