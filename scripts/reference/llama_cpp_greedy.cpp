// Greedy generation with llama.cpp, printing per step what a golden file records: the chosen token,
// the top-5 (id, logit) and the margin between the best and second-best logit.
// usage: greedy MODEL "prompt ids comma" STEPS [kv] [fa]
// kv: the KV cache type for both K and V, f16 (default), f32 or q8_0; fa: 1 for flash attention
// (llama.cpp needs it for a quantized V cache). Build as llama_cpp_teacher_force.cpp.
#include "llama.h"
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>
static std::vector<int> parse(const std::string &s) { std::vector<int> v; std::stringstream ss(s); std::string t; while (std::getline(ss, t, ',')) if (!t.empty()) v.push_back(std::stoi(t)); return v; }
int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: greedy MODEL PROMPT_IDS STEPS [kv] [fa] [n_ctx]\n"); return 2; }
    llama_backend_init();
    llama_model *model = llama_model_load_from_file(argv[1], llama_model_default_params());
    auto cp = llama_context_default_params();
    cp.n_ctx = argc > 6 ? atoi(argv[6]) : 2048; cp.n_batch = 2048; cp.n_ubatch = 512; cp.n_threads = 2; cp.n_threads_batch = 2;
    cp.flash_attn_type = (argc > 5 && atoi(argv[5])) ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    std::string kv = argc > 4 ? argv[4] : "f16";
    ggml_type t = kv == "f32" ? GGML_TYPE_F32 : kv == "q8_0" ? GGML_TYPE_Q8_0 : GGML_TYPE_F16;
    if (kv != "f32" && kv != "q8_0" && kv != "f16") { fprintf(stderr, "unknown KV type %s\n", kv.c_str()); return 2; }
    cp.type_k = t; cp.type_v = t;
    llama_context *ctx = llama_init_from_model(model, cp);
    const llama_vocab *vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    std::vector<int> prompt = parse(argv[2]);
    const int steps = atoi(argv[3]);
    llama_batch b = llama_batch_get_one(prompt.data(), prompt.size());
    if (llama_decode(ctx, b)) { fprintf(stderr, "decode failed\n"); return 1; }
    std::vector<int> idx(n_vocab);
    for (int i = 0; i < steps; i++) {
        const float *lg = llama_get_logits_ith(ctx, -1);
        std::iota(idx.begin(), idx.end(), 0);
        std::partial_sort(idx.begin(), idx.begin() + 5, idx.end(), [&](int a, int c) { return lg[a] > lg[c]; });
        llama_token tok = idx[0];
        printf("{\"token\": %d, \"top5\": [", tok);
        for (int k = 0; k < 5; k++) printf("%s[%d, %.6f]", k ? ", " : "", idx[k], lg[idx[k]]);
        printf("], \"margin\": %.6f}\n", lg[idx[0]] - lg[idx[1]]);
        if (llama_vocab_is_eog(vocab, tok)) break;
        llama_batch bb = llama_batch_get_one(&tok, 1);
        if (llama_decode(ctx, bb)) { fprintf(stderr, "decode failed\n"); return 1; }
    }
    return 0;
}
