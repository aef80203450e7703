"""Writes tests/fixtures/golden/llama-cpp-pretokenize.json: how llama.cpp cuts texts into pre-tokens for
every `tokenizer.ggml.pre` it knows. The names and each one's regex list are read from llama.cpp's own
src/llama-vocab.cpp (the name → pre-type table in `llama_vocab::impl::load`, the pre-type → regexes
table in `llm_tokenizer_bpe`), and each list is run by llama_cpp_pretokenize.cpp (llama.cpp's
`unicode_regex_split`, custom splitters included) over the texts of llama.cpp's tokenizer suite
(models/ggml-vocab-*.inp) and a few more in scripts that the suite leaves out.

Run: python3 scripts/reference/make_pretokenizer_goldens.py LLAMA_CPP_DIR PRETOKENIZE_BIN VOCAB_DIR OUT
(LLAMA_CPP_DIR: the llama.cpp tree vendored in llama-cpp-python 0.3.36; VOCAB_DIR: models/ggml-vocab.)
"""
import glob
import json
import re
import subprocess
import sys

src_dir, binary, vocab_dir, out = sys.argv[1:5]
source = open(f"{src_dir}/src/llama-vocab.cpp", encoding="utf-8").read()


def c_strings(code):
    """The C string literals of `code`, decoded, skipping // comments."""
    found = []
    for line in code.split("\n"):
        line = line.split("//")[0] if line.strip().startswith("//") else line
        for m in re.finditer(r'"((?:[^"\\]|\\.)*)"', line):
            s, i, text = m.group(1), 0, ""
            while i < len(s):
                if s[i] == "\\":
                    text += {"n": "\n", "r": "\r", "t": "\t"}.get(s[i + 1], s[i + 1])
                    i += 2
                else:
                    text += s[i]
                    i += 1
            found.append(text)
    return found


# Pre-type → regexes: case labels, then `regex_exprs = { ... };`.
ctor = source[source.index("struct llm_tokenizer_bpe : llm_tokenizer {"):]
ctor = ctor[: ctor.index("std::vector<std::string> regex_exprs;")]
regexes, labels = {}, []
for m in re.finditer(r"case (LLAMA_VOCAB_PRE_TYPE_\w+):|default:|regex_exprs = \{(.*?)\n\s*\};", ctor, re.S):
    if m.group(1) or m.group(0) == "default:":
        labels.append(m.group(1) or "DEFAULT")
    else:
        exprs = c_strings(m.group(2))
        for label in labels:
            regexes[label] = exprs
        labels = []

# Name → pre-type, in the BPE branch of the loader.
load = source[source.index('} else if (tokenizer_pre == "default") {'):]
load = load[: load.index("} else if (type == LLAMA_VOCAB_TYPE_SPM)")]
names, pending = {"default": "LLAMA_VOCAB_PRE_TYPE_DEFAULT"}, []
for m in re.finditer(r'tokenizer_pre == "([^"]+)"|pre_type = (LLAMA_VOCAB_PRE_TYPE_\w+);', load):
    if m.group(1):
        pending.append(m.group(1))
    else:
        for n in pending:
            names.setdefault(n, m.group(2))
        pending = []
# LLAMA_VOCAB_PRE_TYPE_DEFAULT is the `default:` case.
regexes["LLAMA_VOCAB_PRE_TYPE_DEFAULT"] = regexes["DEFAULT"]

texts = []
for inp in sorted(glob.glob(f"{vocab_dir}/ggml-vocab-*.inp")):
    for t in open(inp, encoding="utf-8").read().split("\n__ggml_vocab_test__\n"):
        if t and t not in texts:
            texts.append(t)
texts += [
    "नमस्ते दुनिया, क्या हाल है?",  # Devanagari: combining vowel signs and virama
    "ສະບາຍດີ ជំរាបសួរ สวัสดีครับ",  # Lao, Khmer, Thai
    "Ελληνικά, русский, עִבְרִית, العربية",
    "日本語のテキストと한국어 텍스트와 中文文本",
    "1234567 12,345.67 0.5% 2026-11-28 ١٢٣٤",
    "I'LL DON'T we'Re THEY'VE camelCaseWord HTTPServer iOS",
    "tabs\tand\r\nCRLF\n\n\n   three spaces  \u00a0nbsp\u3000ideographic",
    "emoji 👍🏽 👨‍👩‍👧 and ½ ¾ ⅔ and x²",
    "<|im_start|>user\nsentinel:12 IMGIMGABCZ keep as text<|im_end|>",
]

# One name per regex list (names that share a pre-type share its list); the space-escaped
# vocabularies (Gemma 4's) only split lines, so they are left to the suite. `whitespace` splits raw
# UTF-8 (no byte-level encoding).
out_cases = {}
seen = {}
for name, pre_type in names.items():
    exprs = regexes[pre_type]
    if exprs == ["[^\\n]+|[\\n]+"] and pre_type in ("LLAMA_VOCAB_PRE_TYPE_GEMMA4", "LLAMA_VOCAB_PRE_TYPE_SARVAM_MOE"):
        continue
    key = json.dumps(exprs)
    if key in seen:
        out_cases[seen[key]]["names"].append(name)
        continue
    seen[key] = name
    raw = ["--raw"] if pre_type == "LLAMA_VOCAB_PRE_TYPE_WHITESPACE" else []
    run = subprocess.run([binary, *raw, *exprs], input="\0".join(texts).encode() + b"\0", capture_output=True, check=True)
    pieces = [
        [p.decode("utf-8") for p in t.split(b"\x01")[:-1]]
        for t in run.stdout.split(b"\0")[:-1]
    ]
    assert len(pieces) == len(texts), name
    out_cases[name] = {"names": [name], "pre_type": pre_type, "pieces": pieces}

json.dump(
    {
        "generator": "llama.cpp 0c1e570 (llama-cpp-python 0.3.36) src/unicode.cpp via "
        "scripts/reference/llama_cpp_pretokenize.cpp, by scripts/reference/make_pretokenizer_goldens.py",
        "texts": texts,
        "pre_tokenizers": out_cases,
    },
    open(out, "w", encoding="utf-8"),
    ensure_ascii=False,
    separators=(",", ":"),
)
print(f"{len(out_cases)} regex lists, {len(names)} names, {len(texts)} texts")
