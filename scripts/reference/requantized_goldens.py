"""A real model in other ftypes (issue #24's oracle): each ftype written from MODEL by llama-quantize
(`--allow-requantize --imatrix`), llama.cpp's greedy steps on the golden prompts of NAME in GOLDEN (f16 KV
cache, flash attention off: the shipped goldens' settings), and kiln's `golden_diff` summary against them under
the golden README's rule. Files land in OUTDIR and are reused when present.

usage: python3 requantized_goldens.py LLAMA_BIN GREEDY GOLDEN NAME MODEL IMATRIX OUTDIR [FTYPE...]
  LLAMA_BIN: llama.cpp's build/bin (llama-quantize); GREEDY: llama_cpp_greedy.cpp built;
  IMATRIX: from `llama-imatrix -m MODEL -f TEXT -c 128 --chunks 16` on any text;
  kiln's examples/golden_diff must be built (`cargo build --release --example golden_diff`).
Default ftypes: the imatrix list of issue #24."""
import json, os, subprocess, sys

from llama_cpp_greedy import greedy_case

bin_dir, greedy, golden, name, model, imatrix, out_dir = sys.argv[1:8]
ftypes = sys.argv[8:] or ("IQ4_NL IQ4_XS IQ3_XXS IQ3_S IQ3_M IQ2_XXS IQ2_XS IQ2_S IQ2_M IQ1_S IQ1_M "
                          "TQ1_0 TQ2_0 Q2_K_S").split()
diff = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../target/release/examples/golden_diff")
cases = json.load(open(golden))["models"][name]["greedy"]
os.makedirs(out_dir, exist_ok=True)
for ft in ftypes:
    path = os.path.join(out_dir, f"{ft}.gguf")
    if not os.path.exists(path):
        subprocess.run([os.path.join(bin_dir, "llama-quantize"), "--allow-requantize", "--imatrix", imatrix,
                        model, path, ft, "2"], capture_output=True, check=True)
    gold = os.path.join(out_dir, f"golden-{ft}.json")
    if not os.path.exists(gold):
        runs = [greedy_case(greedy, path, case) for case in cases]
        with open(gold, "w") as f:
            json.dump({"generator": f"llama.cpp greedy on {ft} of {os.path.basename(model)}, f16 KV",
                       "models": {name: {"greedy": runs}}}, f)
    r = subprocess.run([diff, gold, name, path], capture_output=True, text=True)
    print(ft, (r.stdout.strip().splitlines() or [r.stderr.strip()[-300:]])[-1], flush=True)
