// Token ids from llama.cpp's tokenizer for each text of a JSON array of strings (stdin), printed as
// JSON lines {"text": ..., "ids": [...]}; no BOS, special tokens not parsed, or parsed with a second
// argument `special` (as kiln's `encode(text, false)`, which matches them). Build as
// llama_cpp_teacher_force.cpp (scripts/reference/README.md); run:
//   ./tokenize MODEL.gguf [special] < texts.json
#include "llama.h"
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

// The texts, read by a minimal parser of a JSON array of strings (the escapes JSON writers use).
static std::vector<std::string> read_texts(const std::string & s) {
    std::vector<std::string> out;
    size_t i = 0;
    auto hex = [&](size_t at) { return (unsigned) std::stoul(s.substr(at, 4), nullptr, 16); };
    auto put = [](std::string & t, unsigned cp) {
        if (cp < 0x80) t += (char) cp;
        else if (cp < 0x800) { t += (char) (0xC0 | (cp >> 6)); t += (char) (0x80 | (cp & 0x3F)); }
        else if (cp < 0x10000) { t += (char) (0xE0 | (cp >> 12)); t += (char) (0x80 | ((cp >> 6) & 0x3F)); t += (char) (0x80 | (cp & 0x3F)); }
        else { t += (char) (0xF0 | (cp >> 18)); t += (char) (0x80 | ((cp >> 12) & 0x3F)); t += (char) (0x80 | ((cp >> 6) & 0x3F)); t += (char) (0x80 | (cp & 0x3F)); }
    };
    while ((i = s.find('"', i)) != std::string::npos) {
        std::string t;
        for (i++; s[i] != '"'; i++) {
            if (s[i] != '\\') { t += s[i]; continue; }
            char c = s[++i];
            switch (c) {
                case 'n': t += '\n'; break;
                case 't': t += '\t'; break;
                case 'r': t += '\r'; break;
                case 'b': t += '\b'; break;
                case 'f': t += '\f'; break;
                case 'u': {
                    unsigned cp = hex(i + 1); i += 4;
                    if (cp >= 0xD800 && cp < 0xDC00 && s[i + 1] == '\\' && s[i + 2] == 'u') {
                        unsigned lo = hex(i + 3); i += 6;
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    }
                    put(t, cp);
                    break;
                }
                default: t += c;
            }
        }
        i++;
        out.push_back(t);
    }
    return out;
}

int main(int argc, char ** argv) {
    if (argc != 2 && argc != 3) { fprintf(stderr, "usage: %s MODEL [special] < texts.json\n", argv[0]); return 1; }
    const bool special = argc == 3 && std::string(argv[2]) == "special";
    llama_backend_init();
    auto mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    const llama_vocab * vocab = llama_model_get_vocab(model);
    std::stringstream in; in << std::cin.rdbuf();
    for (const auto & text : read_texts(in.str())) {
        std::vector<llama_token> ids(text.size() + 16);
        int n = llama_tokenize(vocab, text.data(), (int) text.size(), ids.data(), (int) ids.size(), false, special);
        if (n < 0) return 1;
        printf("[");
        for (int k = 0; k < n; k++) printf("%s%d", k ? "," : "", ids[k]);
        printf("]\n");
    }
    llama_model_free(model);
    return 0;
}
