// llama.cpp's pre-tokenization alone: the pieces `unicode_regex_split` cuts a text into for a list of
// regexes (those of one `tokenizer.ggml.pre`), byte-level encoded as llama.cpp hands them to BPE.
// Needs only llama.cpp's src/unicode.cpp and src/unicode-data.cpp (the vendored copy in
// llama-cpp-python 0.3.36, commit 0c1e570):
//   g++ -O2 -std=c++17 -I$L/src llama_cpp_pretokenize.cpp $L/src/unicode.cpp $L/src/unicode-data.cpp -o pretokenize
// Usage: pretokenize [--raw] REGEX... < texts (--raw: no byte-level encoding, as llama.cpp's
// `whitespace` pre-tokenizer), each text ended by a NUL byte; writes each text's pieces, each
// ended by \x01, and a NUL after each text.
#include "unicode.h"

#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

int main(int argc, char ** argv) {
    const bool raw = argc > 1 && std::string(argv[1]) == "--raw";
    std::vector<std::string> regexes(argv + 1 + raw, argv + argc);
    std::string all((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    size_t pos = 0;
    while (pos < all.size()) {
        size_t end = all.find('\0', pos);
        if (end == std::string::npos) {
            end = all.size();
        }
        for (const auto & piece : unicode_regex_split(all.substr(pos, end - pos), regexes, !raw)) {
            fwrite(piece.data(), 1, piece.size(), stdout);
            fputc(1, stdout);
        }
        fputc(0, stdout);
        pos = end + 1;
    }
    return 0;
}
