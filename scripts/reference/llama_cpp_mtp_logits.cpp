// Teacher-forced logits of a model's multi-token-prediction block from llama.cpp: the trunk runs the
// prompt with its output-normed hidden states (h_nextn) kept for every row, then an MTP context runs
// every prompt row in one batch, row k taking token k and the trunk's h_nextn at k - 1 (zeros at row
// 0), as common/speculative.cpp's draft-mtp feeds it. Prints each row's five largest logits.
// usage: mtp MODEL PROMPT   (tokenized with the vocabulary's BOS; F32 KV cache, 2 threads, no flash attention)
// output: "ids I0,I1,...", then one line per row, "row K id:logit id:logit ..." (largest first)
// build: g++ -O2 -std=c++17 -I$L/include -I$L/ggml/include -I$L/src llama_cpp_mtp_logits.cpp \
//          -L$L/build/bin -lllama -lggml -lggml-base -Wl,-rpath,$L/build/bin -o mtp
#include "llama.h"
#include "llama-ext.h"
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

int main(int argc, char ** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL PROMPT\n", argv[0]);
        return 2;
    }
    llama_backend_init();
    auto mp = llama_model_default_params();
    mp.load_mtp = true;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    const std::string text = argv[2];
    std::vector<llama_token> prompt(text.size() + 8);
    const int n = llama_tokenize(llama_model_get_vocab(model), text.c_str(), text.size(), prompt.data(),
                                 prompt.size(), /*add_special*/ true, /*parse_special*/ false);
    if (n < 0) return 1;
    prompt.resize(n);
    printf("ids");
    for (size_t k = 0; k < prompt.size(); k++) printf("%c%d", k ? ',' : ' ', prompt[k]);
    printf("\n");
    auto cp = llama_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = 256;
    cp.n_ubatch = 256;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    llama_context * tgt = llama_init_from_model(model, cp);
    if (!tgt) return 1;
    llama_set_embeddings_nextn(tgt, true, /*masked*/ false);
    auto cd = cp;
    cd.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
    cd.n_rs_seq = 0;
    cd.ctx_other = tgt;
    llama_context * dft = llama_init_from_model(model, cd);
    if (!dft) return 1;
    llama_set_embeddings_nextn(dft, true, /*masked*/ true);

    if (llama_decode(tgt, llama_batch_get_one(prompt.data(), prompt.size()))) {
        fprintf(stderr, "trunk decode failed\n");
        return 1;
    }
    const int n_embd = llama_model_n_embd(model);
    const float * h = llama_get_embeddings_nextn(tgt);
    std::vector<float> zeros(n_embd, 0.0f);
    llama_batch_ext * b = llama_batch_ext_init(dft);
    for (size_t k = 0; k < prompt.size(); k++) {
        const int32_t idx = llama_batch_ext_add_token(b, 0, prompt[k]);
        const llama_pos pos[4] = { (llama_pos) k, 0, 0, 0 };
        llama_batch_ext_set_pos(b, idx, pos);
        const float * row = k == 0 ? zeros.data() : h + (k - 1) * n_embd;
        llama_batch_ext_set_embd_token(b, idx, { row, 1, (size_t) n_embd });
        llama_batch_ext_set_output_logits(b, idx, true);
    }
    if (llama_process(dft, LLAMA_PROCESS_TYPE_DECODE, b)) {
        fprintf(stderr, "MTP decode failed\n");
        return 1;
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    for (size_t k = 0; k < prompt.size(); k++) {
        const float * lg = llama_get_logits_ith(dft, k);
        std::vector<int> ids(n_vocab);
        std::iota(ids.begin(), ids.end(), 0);
        std::partial_sort(ids.begin(), ids.begin() + 5, ids.end(), [&](int a, int c) { return lg[a] > lg[c]; });
        printf("row %zu", k);
        for (int i = 0; i < 5; i++) printf(" %d:%.6f", ids[i], lg[ids[i]]);
        printf("\n");
    }
    llama_batch_ext_free(b);
    llama_free(dft);
    llama_free(tgt);
    llama_model_free(model);
    return 0;
}
