"""One golden case from llama.cpp's greedy run (llama_cpp_greedy.cpp built as GREEDY), shared by the scripts that
write goldens: the case's prompt and prompt ids, and per step what the binary prints (token, top-5, margin)."""
import json
import subprocess


def greedy_case(greedy, model, case, *args):
    """`case`'s prompt run greedily on `model` for as many steps as it has; `args` go to the binary after the step
    count (KV cache type, flash attention, context)."""
    run = subprocess.run([greedy, model, ",".join(map(str, case["prompt_ids"])), str(len(case["steps"])), *args],
                         capture_output=True, text=True, check=True)
    return {"prompt": case["prompt"], "prompt_ids": case["prompt_ids"],
            "steps": [json.loads(line) for line in run.stdout.splitlines()]}
