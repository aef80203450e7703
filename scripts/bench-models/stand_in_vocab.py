"""The stand-in tokenizer of the random-weight bench files (make-gptoss-shape.py, make-qwen3moe-shape.py):
`vocab` distinct pieces (256 single characters, 1024 of their pairs, then names) with a merge per pair, since
llama.cpp refuses a gpt2 vocabulary without merges. Benchmarks feed token ids, so nothing else is needed."""
from gguf import TokenType


def add_stand_in_vocab(w, vocab, pre):
    pieces = [chr(0x100 + i) for i in range(256)]
    pairs = [(pieces[k // 32], pieces[k % 32]) for k in range(1024)]
    pieces += [a + b for a, b in pairs]
    pieces += [f"t{i}" for i in range(len(pieces), vocab)]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(pieces)
    w.add_token_types([TokenType.NORMAL] * vocab)
    w.add_token_merges([f"{a} {b}" for a, b in pairs])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
