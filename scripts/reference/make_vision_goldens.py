"""Writes tests/fixtures/golden/llama-cpp-vision.json: llama.cpp's mtmd (libmtmd, commit 0c1e570) on the
tiny Qwen3-VL-style vision tower tests/fixtures/make_qwen35_vision.py writes (`qwen35-mmproj-tiny.gguf`,
projector `qwen3vl_merger`) in front of the text model models/qwen35-tiny.gguf, through
llama_cpp_vision.cpp (CPU, 2 threads, flash attention off, no warmup pass):

- "images": for each of the script's four PNGs, the driver's `embd` output: the projector's embeddings
  (`embd`, n_tokens rows of n_embd = 64, row-major, as printed with %.9g), `n_tokens`, the merged grid
  `nx_tokens` × `ny_tokens` (the preprocessed image is 8·nx_tokens × 8·ny_tokens pixels: patch 4, merge 2)
  and `n_pos`, the positions the image takes in the text model (M-RoPE: max(nx_tokens, ny_tokens)).
  32×32 and 48×32 are used as they are (16 and 24 tokens; 48×32's 12×8 patch grid interpolates the
  learned 8×8 position grid); 45×29 and 20×70 are resized by mtmd's Qwen preprocessing (to 48×32 and
  24×72: 24 and 27 tokens).
- "logits": the driver's `logits` output for vision-32x32.png and PROMPT, 8 greedy steps (F32 KV cache,
  n_ctx 512, mtmd_helper_eval_chunks with n_batch 512): the prompt's chunks (text token ids; the image's
  token count and positions), `n_prompt_tokens`, `prompt_tokens` (positions used: n_past after the
  prompt) and per step the argmax `token` and top-5 [id, logit] (step 0: right after the prompt).

PROMPT is Qwen's chat format with mtmd's media marker where the image goes, and no <|vision_start|> or
<|vision_end|>: mtmd adds those itself for this projector (img_beg/img_end in mtmd.cpp), each tokenized
on its own, not across the neighbouring text, with parse_special. qwen35-tiny's vocabulary (SmolLM2's)
has neither as a token, so both come out as plain BPE pieces; it has <|im_start|> (1, also the BOS id,
which the vocabulary does not add) and <|im_end|> (2). The chunks are thus: text "<|im_start|>user\\n"
+ "<|vision_start|>", the image, text "<|vision_end|>" + "What do you see?<|im_end|>\\n<|im_start|>assistant\\n".
"What do you see?" rather than "Describe it.": the latter's greedy path had steps with a top-1/top-2
margin of 0.033 and 0.007; this one's smallest is 0.175 (margins 0.77, 1.89, 0.175, 3.31, 1.48, 1.58, 1.83, 0.24).

llama.cpp's CPU arithmetic is f32 but for two f16 roundings: the patch convolution goes through an F16
im2col (normalized pixels and both kernels rounded to f16) and GELU through ggml's f16 table (input and
output rounded to f16). An exact float64 pass (scripts/reference/qwen3vl_f64.py, golden/f64-qwen3vl.json)
is 1.6e-3 to 3.1e-3 from these embeddings; one that makes those two roundings came within 5.3e-4 of
them on 32×32 and 48×32.

Gemma 3 (CASE gemma3: golden/llama-cpp-vision-gemma3.json): the same for make_gemma3_vision.py's tower
and text model, gemma3-mmproj-tiny.gguf in front of gemma3-tiny.gguf. Every image is letterboxed into
the native 32×32 (bilinear) and pooled to 4×4 = 16 tokens, which take 16 positions; the logits are
taken after vision-48x32.png (letterboxed: black bands above and below) with the same prompt, the
image chunk run with non-causal attention (the chunk's "non_causal", mtmd_decode_use_non_causal).
The begin and end texts are <start_of_image> and <end_of_image>, plain BPE pieces in this vocabulary.

Gemma 4 (CASE gemma4: golden/llama-cpp-vision-gemma4.json): make_gemma4_vision.py's tower in front of
make_gemma4_tiny.py's gemma4-tiny.gguf (width 64, so its images are decoded non-causally: only widths 1536
and 2560, E2B and E4B, are causal in mtmd). Images keep their aspect in whole 8×8-pixel tokens between 70 and
1120 (81, 77, 77 and 80 tokens); the begin and end texts are <|image> and <image|>.

Qwen3-VL with deepstack (CASE qwen3vl: golden/llama-cpp-vision-qwen3vl.json): make_qwen3vl_vision.py's tower
(qwen3vl-mmproj-tiny.gguf: 3 blocks, deepstack mergers on blocks 0 and 2) in front of its text model
qwen3vl-tiny.gguf (architecture qwen3vl, n_deepstack_layers 2, IMROPE sections [3, 3, 2, 0], qwen35-tiny's
vocabulary). Each embedding row is 192 wide (n_embd in "images"): the merger's 64, then block 0's and block
2's deepstack features, 64 each; the text model adds the second slice to an image row's residual after its
block 0 and the third after its block 1 (text rows carry zeros there). Images, token counts, n_pos, prompt
and chunks as qwen35: mtmd picks M-RoPE positions from the text model's rope type (IMROPE), so the image's
rows sit at (p, p + row, p + column) and the text after it continues at p + max(nx_tokens, ny_tokens) (44
prompt tokens, 32 positions). Logits after vision-32x32.png, margins 2.37, 3.75, 0.72, 0.62, 3.20, 4.24,
0.185, 1.27 (after vision-48x32.png one step's margin is 0.017). Fed through llama.cpp with the image's
embeddings altered before decoding (a variant of the driver, not kept), teacher-forced on the golden path,
the top-5 logits move per step by: the deepstack slices zeroed (the same as an mmproj with both fc2 zeroed)
1.4 to 4.6; the two slices exchanged (each added after the other layer) 1.8 to 5.7; only block 0's slice
kept 0.33 to 2.5, only block 2's 0.76 to 3.9; the image's row and column positions exchanged 1.1 to 7.6; and
with an mmproj whose block-2 merger sits on block 1 (v.deepstack.1) 0.11 to 0.67. The float64 tower
(scripts/reference/qwen3vl_f64.py, golden/f64-qwen3vl-deepstack.json) is 2.0e-3 to 3.3e-3 from these
embeddings (4.9e-4 to 7.8e-4 with llama.cpp's f16 roundings reproduced).

Qwen3-VL MoE (CASE qwen3vlmoe: golden/llama-cpp-vision-qwen3vlmoe.json): the same tower and images in front of
make_qwen3vl_vision.py's qwen3vlmoe-tiny.gguf (architecture qwen3vlmoe, src/models/qwen3vlmoe.cpp: qwen3vl-tiny's
attention shapes, IMROPE sections and deepstack, each block's feed-forward qwen3moe's mixture of 8 experts of
width 32, 2 used, softmax router with the top two renormalized). "images" are the qwen3vl case's, bit for bit.
Logits after vision-48x32.png (24 tokens, a 6×4 grid, so the row and column axes differ; 52 prompt tokens at 34
positions), margins 0.283, 0.437, 1.505, 8.595, 0.473, 0.486, 0.491, 2.433 (the smallest after vision-32x32.png is
0.113, after 45x29 0.19, after 20x70 0.269). On that run the router's top two experts hold on average 55 %, 63 %
and 67 % of its probability in blocks 0, 1 and 2 (36 % to 89 % per token; read through a cb_eval variant of the
driver, not kept). The same file with expert_used_count 1 (8) puts 21934 at 20.47 (2595 at 12.82) first at step 0
instead of 27605 at 13.64, four (five) of the five top-5 ids new, and the greedy path differs from its first
token.

Run: python3 scripts/reference/make_vision_goldens.py DRIVER MADE OUT [CASE]
(DRIVER: llama_cpp_vision.cpp built as its header says, e.g. /tmp/lc/vision; MADE: the directory
make_qwen35_vision.py, make_gemma3_vision.py, make_gemma4_vision.py, make_gemma4_tiny.py and
make_qwen3vl_vision.py wrote, tests/fixtures/made; OUT: tests/fixtures/golden/llama-cpp-vision.json, or
llama-cpp-vision-CASE.json with CASE gemma3, gemma4, qwen3vl or qwen3vlmoe (default qwen35); run from the
repository root, which holds tests/fixtures/models/qwen35-tiny.gguf)
"""
import json
import math
import os
import subprocess
import sys

MARKER = "<__media__>"  # mtmd_default_marker()
N_STEPS = 8
# The projectors' cases: the text model (a path, or a file in MADE), the projector file in MADE, the
# images with their token counts, the prompt and the image the logits are taken after.
CASES = {
    "qwen35": {
        "model": "tests/fixtures/models/qwen35-tiny.gguf",
        "mmproj": "qwen35-mmproj-tiny.gguf",
        "images": {"vision-32x32.png": 16, "vision-48x32.png": 24, "vision-45x29.png": 24, "vision-20x70.png": 27},
        "prompt": "<|im_start|>user\n" + MARKER + "What do you see?<|im_end|>\n<|im_start|>assistant\n",
        "logits_image": "vision-32x32.png",
    },
    "gemma3": {
        "model": "gemma3-tiny.gguf",
        "mmproj": "gemma3-mmproj-tiny.gguf",
        "images": {"vision-32x32.png": 16, "vision-48x32.png": 16, "vision-45x29.png": 16, "vision-20x70.png": 16},
        "prompt": "<|im_start|>user\n" + MARKER + "What do you see?<|im_end|>\n<|im_start|>assistant\n",
        "logits_image": "vision-48x32.png",
    },
    "gemma4": {
        "model": "gemma4-tiny.gguf",
        "mmproj": "gemma4-mmproj-tiny.gguf",
        "images": {"vision-32x32.png": 81, "vision-48x32.png": 77, "vision-45x29.png": 77, "vision-20x70.png": 80},
        "prompt": "<|im_start|>user\n" + MARKER + "What do you see?<|im_end|>\n<|im_start|>assistant\n",
        "logits_image": "vision-48x32.png",
    },
    "qwen3vl": {
        "model": "qwen3vl-tiny.gguf",
        "mmproj": "qwen3vl-mmproj-tiny.gguf",
        "images": {"vision-32x32.png": 16, "vision-48x32.png": 24, "vision-45x29.png": 24, "vision-20x70.png": 27},
        "prompt": "<|im_start|>user\n" + MARKER + "What do you see?<|im_end|>\n<|im_start|>assistant\n",
        "logits_image": "vision-32x32.png",
    },
    "qwen3vlmoe": {
        "model": "qwen3vlmoe-tiny.gguf",
        "mmproj": "qwen3vl-mmproj-tiny.gguf",
        "images": {"vision-32x32.png": 16, "vision-48x32.png": 24, "vision-45x29.png": 24, "vision-20x70.png": 27},
        "prompt": "<|im_start|>user\n" + MARKER + "What do you see?<|im_end|>\n<|im_start|>assistant\n",
        "logits_image": "vision-48x32.png",
    },
}


def driver(*args):
    out = subprocess.run(list(args), capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout)


def main(drv, made, out, case="qwen35"):
    c = CASES[case]
    MODEL = c["model"] if os.path.exists(c["model"]) else os.path.join(made, c["model"])
    MMPROJ, IMAGES, PROMPT, LOGITS_IMAGE = c["mmproj"], c["images"], c["prompt"], c["logits_image"]
    mmproj = os.path.join(made, MMPROJ)
    golden = {
        "source": "scripts/reference/make_vision_goldens.py: llama.cpp 0c1e570 libmtmd through "
                  "scripts/reference/llama_cpp_vision.cpp (CPU, 2 threads, flash attention off, no warmup; "
                  "logits: F32 KV cache, n_ctx 512, greedy)",
        "mmproj": MMPROJ,
        "model": os.path.basename(MODEL),
        "images": {},
        "logits": {"image": LOGITS_IMAGE, "prompt": PROMPT},
    }
    for name, n_tokens in IMAGES.items():
        g = driver(drv, "embd", MODEL, mmproj, os.path.join(made, name))
        assert g["n_tokens"] == n_tokens == g["nx_tokens"] * g["ny_tokens"], (name, g["n_tokens"])
        assert len(g["embd"]) == g["n_tokens"] * g["n_embd"], name
        assert all(math.isfinite(v) for v in g["embd"]), name
        golden["images"][name] = g
    g = driver(drv, "logits", MODEL, mmproj, os.path.join(made, LOGITS_IMAGE), PROMPT, str(N_STEPS))
    assert len(g["steps"]) == N_STEPS
    assert all(math.isfinite(v) for s in g["steps"] for _, v in s["top5"])
    golden["logits"].update(g)
    g_steps0 = g["steps"][0]["token"]

    # One line per embedding row, per chunk and per step; the rest as json.dump(indent=1) writes it.
    blocks = {}
    for name, g in golden["images"].items():
        n = g["n_embd"]
        blocks[name] = "[\n" + ",\n".join(
            "   " + json.dumps(g["embd"][i:i + n])[1:-1] for i in range(0, len(g["embd"]), n)) + "\n  ]"
        g["embd"] = f"@@{name}@@"
    for key in ("chunks", "steps"):
        blocks[key] = "[\n" + ",\n".join("   " + json.dumps(v) for v in golden["logits"][key]) + "\n  ]"
        golden["logits"][key] = f"@@{key}@@"
    text = json.dumps(golden, indent=1, ensure_ascii=False)
    for key, body in blocks.items():
        text = text.replace(f'"@@{key}@@"', body)
    assert json.loads(text)["logits"]["steps"][0]["token"] == g_steps0
    with open(out, "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    main(*sys.argv[1:])
