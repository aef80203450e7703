"""Tokenizer goldens: llama.cpp's ids (llama_cpp_tokenize.cpp, no BOS, special tokens not parsed) for every
text and prompt of golden/prompts.json and prompts-long.json, plus texts that tell pre-tokenizers apart (case
changes inside words, contractions in capitals, long digit runs, punctuation before newlines and slashes).
Writes OUT in the format of llama-cpp-llama3-vocab.json.

usage: python3 make_tokenizer_goldens.py TOKENIZE_BINARY GOLDEN_DIR MODEL OUT "WHICH LLAMA.CPP"
"""
import json
import subprocess
import sys

EXTRA = [
    "HELLOworld CamelCaseWords and camelCase, iPhone XMLHttpRequest",
    "I'M SURE YOU'RE RIGHT, DON'T WORRY; she'S here, it'LL do",
    "1234567890 and 3.14159 or 1,000,000",
    "path/to/file.txt\n// comment\n/* block */\r\n",
    "Ünïcödé ÀÉÎÕÜ straße ΑΒΓ αβγ",
    "  indented\n\n\n   more   spaces\t\ttabs ",
    "!!!???... ---===>>> $$$ %%%",
    "mixedCASEwordsWITHnumbers123and456",
    "iOS macOS tvOS on an iPhone",
    "eBay eBook",
    "XMLHttpRequest getHTTPResponseCode",
]

tool, golden_dir, model, out, which = sys.argv[1:6]
texts = []
for name in ["prompts.json", "prompts-long.json"]:
    p = json.load(open(f"{golden_dir}/{name}"))
    texts += p["texts"] + p["prompts"]
texts += EXTRA
run = subprocess.run([tool, model], input=json.dumps(texts).encode(), capture_output=True, check=True)
ids = [json.loads(line) for line in run.stdout.decode().splitlines()]
assert len(ids) == len(texts)
golden = {"model": model.split("/")[-1],
          "generator": f"{which} via scripts/reference/llama_cpp_tokenize.cpp (no BOS, special tokens not parsed)",
          "tokenize": [{"text": t, "ids": i} for t, i in zip(texts, ids)]}
with open(f"{golden_dir}/{out}", "w") as f:
    f.write(json.dumps(golden, ensure_ascii=False) + "\n")
