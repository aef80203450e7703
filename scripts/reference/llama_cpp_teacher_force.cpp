// Teacher-forced logits from llama.cpp: prints, per step, the logits of given token ids.
// usage: tf MODEL "prompt ids comma" "step tokens comma" "ids-to-print per step ; separated" [kv] [fa]
// kv: the KV cache type, f16 (default), f32 or q8_0 (1 means f32, 0 f16); q8_0 needs fa = 1.
#include "llama.h"
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include <sstream>
static std::vector<int> parse(const std::string &s, char sep=',') { std::vector<int> v; std::stringstream ss(s); std::string t; while (std::getline(ss, t, sep)) if (!t.empty()) v.push_back(std::stoi(t)); return v; }
int main(int argc, char **argv) {
    llama_backend_init();
    auto mp = llama_model_default_params();
    llama_model *model = llama_model_load_from_file(argv[1], mp);
    auto cp = llama_context_default_params();
    cp.n_ctx = 2048; cp.n_batch = 2048; cp.n_ubatch = 512; cp.n_threads = 2; cp.n_threads_batch = 2;
    cp.flash_attn_type = (argc > 6 && atoi(argv[6])) ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    if (argc > 5) {
        std::string kv = argv[5];
        if (kv == "1" || kv == "f32") { cp.type_k = GGML_TYPE_F32; cp.type_v = GGML_TYPE_F32; }
        else if (kv == "q8_0") { cp.type_k = GGML_TYPE_Q8_0; cp.type_v = GGML_TYPE_Q8_0; }
        else if (kv != "0" && kv != "f16") { fprintf(stderr, "unknown KV type %s\n", argv[5]); return 1; }
    }
    llama_context *ctx = llama_init_from_model(model, cp);
    std::vector<int> prompt = parse(argv[2]), steps = parse(argv[3]);
    std::vector<std::string> show; { std::stringstream ss(argv[4]); std::string t; while (std::getline(ss, t, ';')) show.push_back(t); }
    llama_batch b = llama_batch_get_one(prompt.data(), prompt.size());
    if (llama_decode(ctx, b)) { fprintf(stderr, "decode failed\n"); return 1; }
    for (size_t i = 0; i < steps.size(); i++) {
        float *lg = llama_get_logits_ith(ctx, -1);
        printf("step %zu", i);
        for (int id : parse(show[i])) printf(" %.4f", lg[id]);
        printf("\n");
        llama_token t = steps[i];
        llama_batch bb = llama_batch_get_one(&t, 1);
        if (llama_decode(ctx, bb)) { fprintf(stderr, "decode failed\n"); return 1; }
    }
    return 0;
}
