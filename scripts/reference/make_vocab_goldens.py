"""Writes tests/fixtures/golden/llama-cpp-vocab-extra.json: llama.cpp's ids (no BOS) for texts beyond
llama.cpp's own tokenizer suite, on the suite's vocabulary files (models/ggml-vocab, fetched by
scripts/fetch-models.sh):
- every vocabulary, special tokens not parsed: scripts and marks the suite has few of (Devanagari,
  Khmer, Lao, Thai, Hebrew points, Greek, CJK), digit runs, case changes, whitespace runs;
- the SentencePiece vocabularies (llama-spm: Llama 2 and Mistral; phi-3), special tokens parsed:
  chats rendered in their templates, so the dummy prefix SentencePiece adds after each special token
  is checked where prompts have it.

Run: python3 scripts/reference/make_vocab_goldens.py TOKENIZE_BIN VOCAB_DIR OUT
(TOKENIZE_BIN: llama_cpp_tokenize.cpp built against llama.cpp 0c1e570, scripts/reference/README.md.)
"""
import json
import subprocess
import sys

binary, vocab_dir, out = sys.argv[1:4]

TEXTS = [
    "नमस्ते दुनिया, क्या हाल है?",
    "ສະບາຍດີ ជំរាបសួរ สวัสดีครับ",
    "Ελληνικά, русский, עִבְרִית, العربية",
    "日本語のテキストと한국어 텍스트와 中文文本",
    "1234567 12,345.67 0.5% 2026-11-28",
    "I'LL DON'T we'Re THEY'VE camelCaseWord HTTPServer iOS",
    "tabs\tand\r\nCRLF\n\n\n   three spaces  \u00a0nbsp",
    "emoji 👍🏽 👨‍👩‍👧 and ½ ¾ ⅔ and x²",
    "  leading spaces, then trailing   ",
    "<s> and </s> and <|endoftext|> written as text",
]

SPM_CHATS = {
    "llama-spm": [
        "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nWhat is 2+2? [/INST] 4 </s><s>[INST] And 3+3? [/INST]",
        "<s>[INST] Hello[/INST] Hi there!</s>[INST]  two spaces first[/INST]",
        "<s> Hello</s><s>\nnewline after BOS</s>",
        "</s>  after the end of a sentence",
    ],
    "phi-3": [
        "<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>\n4<|end|>\n<|user|>\n  two spaces<|end|>\n<|assistant|>\n",
        "<|system|>\nYou are terse.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n",
        "<s> text after BOS<|endoftext|> and after the end",
    ],
}

VOCABS = [
    "bert-bge", "command-r", "deepseek-coder", "deepseek-llm", "falcon", "gemma-4", "gpt-2", "llama-bpe",
    "llama-spm", "mpt", "phi-3", "qwen2", "qwen35", "refact", "starcoder",
]


def tokenize(vocab, texts, special):
    args = [binary, f"{vocab_dir}/ggml-vocab-{vocab}.gguf"] + (["special"] if special else [])
    run = subprocess.run(args, input=json.dumps(texts).encode(), capture_output=True, check=True)
    ids = [json.loads(line) for line in run.stdout.decode().splitlines() if line.startswith("[")]
    assert len(ids) == len(texts), (vocab, run.stderr.decode()[-500:])
    return [{"text": t, "ids": i} for t, i in zip(texts, ids)]


golden = {
    "generator": "llama.cpp 0c1e570 (llama-cpp-python 0.3.36) via scripts/reference/llama_cpp_tokenize.cpp, "
    "by scripts/reference/make_vocab_goldens.py",
    "plain": {v: tokenize(v, TEXTS, False) for v in VOCABS},
    "chat": {v: tokenize(v, texts, True) for v, texts in SPM_CHATS.items()},
}
json.dump(golden, open(out, "w", encoding="utf-8"), ensure_ascii=False, separators=(",", ":"))
print(f"{len(VOCABS)} vocabularies × {len(TEXTS)} texts, {sum(map(len, SPM_CHATS.values()))} chats")
