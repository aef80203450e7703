"""Writes tests/fixtures/golden/llama-cpp-mtp.json: llama.cpp's `llama-speculative-simple --spec-type
draft-mtp` on the tiny Qwen3.5 files with a multi-token-prediction block (tests/fixtures/make_qwen35_mtp.py)
and the tiny GLM-4.5 file with its block made to lean (make_glm4moe_mtp.py), greedy, F32 KV cache, 2 threads, drafting up to 1 and up to 3 tokens a pass: the text it generates and its
counts of drafted and accepted tokens.

llama-speculative-simple keeps the prompt's last token out of the prompt pass and drafts after it first;
each pass drafts up to N after the last token, verifies, keeps the greedy prefix; it stops once it has
predicted more than -n tokens. tests/model/mtp.rs replays that loop on kiln's session and compares.

And, under "teacher_forced", the block's own logits: llama_cpp_mtp_logits.cpp (built as its header says) runs
the prompt through the trunk, then every prompt row through the MTP context at once, row k taking token k and
the trunk's output-normed state at k - 1; per row its five largest logits, and the prompt's ids.

Run: python3 scripts/reference/make_mtp_goldens.py LLAMA_CPP_BUILD_BIN MTP_DRIVER MADE_DIR OUT
(LLAMA_CPP_BUILD_BIN holds llama-speculative-simple, built from the llama.cpp that llama-cpp-python 0.3.36
vendors: cmake -B build -DLLAMA_CURL=OFF && cmake --build build --target llama-speculative-simple; MTP_DRIVER
is llama_cpp_mtp_logits.cpp built against that build's libraries)
"""
import json
import os
import re
import subprocess
import sys

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown"
N_PREDICT = 40


def run(bin_dir, model, n_max):
    out = subprocess.run(
        [os.path.join(bin_dir, "llama-speculative-simple"), "-m", model, "--spec-type", "draft-mtp",
         "--spec-draft-n-max", str(n_max), "-p", PROMPT, "-n", str(N_PREDICT), "--temp", "0", "-t", "2",
         "-c", "256", "-ctk", "f32", "-ctv", "f32"],
        capture_output=True, text=True, check=True,
    )
    log = out.stdout + out.stderr
    count = lambda key: int(re.search(rf"{key}\s*=\s*(\d+)", log).group(1))
    # The generated text is printed after the prompt on stdout.
    text = out.stdout.split(PROMPT, 1)[1].strip("\n")
    return {"n_max": n_max, "text": text, "n_predict": count("n_predict"),
            "n_drafted": count("n_drafted"), "n_accept": count("n_accept")}


def teacher_forced(driver, model):
    out = subprocess.run([driver, model, PROMPT], capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    ids = [int(t) for t in lines[0].split(" ", 1)[1].split(",")]
    rows = []
    for line in lines[1:]:
        parts = line.split()
        assert parts[0] == "row" and int(parts[1]) == len(rows), line
        rows.append([[int(i), round(float(v), 4)] for i, v in (p.split(":") for p in parts[2:])])
    assert len(rows) == len(ids)
    return {"prompt_ids": ids, "top5": rows}


def main(bin_dir, driver, made, out):
    golden = {
        "made_by": "scripts/reference/make_mtp_goldens.py: llama.cpp 0c1e570 llama-speculative-simple "
                   "--spec-type draft-mtp, greedy, F32 KV cache, 2 threads",
        "prompt": PROMPT,
        "n_predict": N_PREDICT,
        "models": {},
        "teacher_forced": {},
    }
    for name in ["qwen35-mtp-tiny.gguf", "qwen35moe-mtp-tiny.gguf", "glm4moe-mtp-tiny.gguf"]:
        golden["models"][name] = [run(bin_dir, os.path.join(made, name), n) for n in (1, 3)]
        golden["teacher_forced"][name] = teacher_forced(driver, os.path.join(made, name))
    with open(out, "w") as f:
        json.dump(golden, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
