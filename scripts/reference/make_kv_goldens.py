"""Goldens for another KV cache type: llama.cpp's own greedy runs over the prompts of llama-cpp.json
and llama-cpp-long.json, with the K and V caches of that type (flash attention on, which llama.cpp
needs for a quantized V cache). Writes llama-cpp-kv-TYPE.json in the goldens' format.

usage: python3 make_kv_goldens.py GREEDY_BINARY MODELS_DIR GOLDEN_DIR TYPE "WHICH LLAMA.CPP"
(GREEDY_BINARY built from llama_cpp_greedy.cpp; the last argument names the build for the record)"""
import json, sys

from llama_cpp_greedy import greedy_case

greedy, models, golden_dir, kv, which = sys.argv[1:6]
out = {"generator": f"{which} via scripts/reference/llama_cpp_greedy.cpp, CPU, 2 threads, "
                    f"KV cache {kv}/{kv}, flash attention",
       "models": {}}
for file in ["llama-cpp.json", "llama-cpp-long.json"]:
    golden = json.load(open(f"{golden_dir}/{file}"))
    for name, entry in golden["models"].items():
        cases = out["models"].setdefault(name, {"greedy": []})["greedy"]
        for case in entry["greedy"]:
            cases.append(greedy_case(greedy, f"{models}/{name}", case, kv, "1"))
            print(name, case["prompt"][:30], len(cases[-1]["steps"]), file=sys.stderr)
with open(f"{golden_dir}/llama-cpp-kv-{kv}.json", "w") as f:
    f.write(json.dumps(out) + "\n")
