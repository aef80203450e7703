// An image through llama.cpp's mtmd (libmtmd's C API: mtmd.h, mtmd-helper.h): the projector's output
// embeddings for one image, or greedy decoding after a prompt holding one image. CPU, 2 threads, flash
// attention off (vision encoder and text context), no mtmd warmup pass.
// usage: vision embd MODEL MMPROJ IMAGE
//        vision logits MODEL MMPROJ IMAGE PROMPT N
// embd: the prompt is mtmd_default_marker() alone; the image chunk is encoded (mtmd_encode_chunk) and
//   stdout gets one JSON object: {"n_tokens", "nx_tokens", "ny_tokens" (mtmd_image_tokens_get_nx/ny: the
//   merged grid, so the preprocessed image is nx_tokens*patch*merge by ny_tokens*patch*merge pixels),
//   "n_pos" (positions the image takes in the text model), "n_embd", "embd" (n_tokens rows of n_embd,
//   row-major, %.9g)}.
// logits: PROMPT (holding mtmd_default_marker() once; mtmd adds the projector's own begin/end text
//   around it) is tokenized with add_special and parse_special, every chunk evaluated by
//   mtmd_helper_eval_chunks (n_batch 512, logits for the last token), then N greedy steps decoded one
//   token at a time (llama_decode, F32 KV cache, n_ctx 512). stdout: {"chunks": [{"type": "text",
//   "tokens": [...]} | {"type": "image", "n_tokens", "n_pos", "nx_tokens", "ny_tokens", "non_causal"
//   (mtmd_decode_use_non_causal: the image's rows attend to each other both ways)}...],
//   "n_prompt_tokens", "prompt_tokens" (positions the prompt used: n_past after it), "steps": [{"token",
//   "top5": [[id, logit]...]}...]}: step 0 is the logits right after the prompt, step k those after
//   feeding step k-1's token; "token" is each step's argmax (lowest id on a tie), top-5 largest first.
// Logs go to stderr.
// build (L = the llama.cpp tree, built with cmake --build build --target llama-mtmd-cli):
//   g++ -O2 -std=c++17 -Wno-deprecated-declarations -I$L/include -I$L/ggml/include -I$L/tools/mtmd \
//     llama_cpp_vision.cpp -L$L/build/bin -lmtmd -lllama -lggml -lggml-base \
//     -Wl,-rpath,$L/build/bin -o vision
#include "llama.h"
#include "mtmd.h"
#include "mtmd-helper.h"
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

static void print_top5(const float * logits, int n_vocab) {
    std::vector<int> ids(n_vocab);
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + 5, ids.end(), [&](int a, int b) {
        return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
    });
    printf("[");
    for (int k = 0; k < 5; k++) printf("%s[%d, %.9g]", k ? ", " : "", ids[k], logits[ids[k]]);
    printf("]");
}

static int argmax(const float * logits, int n_vocab) {
    int best = 0;
    for (int i = 1; i < n_vocab; i++) if (logits[i] > logits[best]) best = i;
    return best;
}

int main(int argc, char ** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (!((mode == "embd" && argc == 5) || (mode == "logits" && argc == 7))) {
        fprintf(stderr, "usage: %s embd MODEL MMPROJ IMAGE\n       %s logits MODEL MMPROJ IMAGE PROMPT N\n", argv[0], argv[0]);
        return 2;
    }
    llama_backend_init();
    auto mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model * model = llama_model_load_from_file(argv[2], mp);
    if (!model) return 1;

    auto vp = mtmd_context_params_default();
    vp.use_gpu = false;
    vp.print_timings = false;
    vp.n_threads = 2;
    vp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    vp.warmup = false;
    mtmd_context * mctx = mtmd_init_from_file(argv[3], model, vp);
    if (!mctx) return 1;

    mtmd_bitmap * bitmap = mtmd_helper_bitmap_init_from_file(mctx, argv[4], false, mtmd_helper_init_opt_default()).bitmap;
    if (!bitmap) {
        fprintf(stderr, "cannot load %s\n", argv[4]);
        return 1;
    }
    const std::string prompt = mode == "embd" ? std::string(mtmd_default_marker()) : std::string(argv[5]);
    mtmd_input_text text = {prompt.c_str(), prompt.size(), /*add_special*/ mode == "logits", /*parse_special*/ true};
    mtmd_input_chunks * chunks = mtmd_input_chunks_init();
    const mtmd_bitmap * bitmaps[] = {bitmap};
    if (mtmd_tokenize(mctx, chunks, &text, bitmaps, 1) != 0) {
        fprintf(stderr, "mtmd_tokenize failed\n");
        return 1;
    }

    if (mode == "embd") {
        const mtmd_input_chunk * image = nullptr;
        for (size_t i = 0; i < mtmd_input_chunks_size(chunks); i++) {
            const mtmd_input_chunk * c = mtmd_input_chunks_get(chunks, i);
            if (mtmd_input_chunk_get_type(c) == MTMD_INPUT_CHUNK_TYPE_IMAGE) image = c;
        }
        if (!image || mtmd_encode_chunk(mctx, image) != 0) {
            fprintf(stderr, "no image chunk, or encoding failed\n");
            return 1;
        }
        const mtmd_image_tokens * it = mtmd_input_chunk_get_tokens_image(image);
        const size_t n_tokens = mtmd_input_chunk_get_n_tokens(image);
        const int n_embd = llama_model_n_embd_inp(model);
        const float * embd = mtmd_get_output_embd(mctx);
        printf("{\"n_tokens\": %zu, \"nx_tokens\": %zu, \"ny_tokens\": %zu, \"n_pos\": %d, \"n_embd\": %d, \"embd\": [",
               n_tokens, mtmd_image_tokens_get_nx(it), mtmd_image_tokens_get_ny(it),
               (int) mtmd_input_chunk_get_n_pos(image), n_embd);
        for (size_t i = 0; i < n_tokens * n_embd; i++) printf("%s%.9g", i ? ", " : "", embd[i]);
        printf("]}\n");
    } else {
        const int n_steps = atoi(argv[6]);
        auto cp = llama_context_default_params();
        cp.n_ctx = 512;
        cp.n_batch = 512;
        cp.n_ubatch = 512;
        cp.n_threads = 2;
        cp.n_threads_batch = 2;
        cp.type_k = GGML_TYPE_F32;
        cp.type_v = GGML_TYPE_F32;
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
        llama_context * lctx = llama_init_from_model(model, cp);
        if (!lctx) return 1;
        const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

        printf("{\"chunks\": [");
        for (size_t i = 0; i < mtmd_input_chunks_size(chunks); i++) {
            const mtmd_input_chunk * c = mtmd_input_chunks_get(chunks, i);
            printf("%s", i ? ", " : "");
            if (mtmd_input_chunk_get_type(c) == MTMD_INPUT_CHUNK_TYPE_TEXT) {
                size_t n = 0;
                const llama_token * toks = mtmd_input_chunk_get_tokens_text(c, &n);
                printf("{\"type\": \"text\", \"tokens\": [");
                for (size_t k = 0; k < n; k++) printf("%s%d", k ? ", " : "", toks[k]);
                printf("]}");
            } else {
                const mtmd_image_tokens * it = mtmd_input_chunk_get_tokens_image(c);
                printf("{\"type\": \"image\", \"n_tokens\": %zu, \"n_pos\": %d, \"nx_tokens\": %zu, \"ny_tokens\": %zu, \"non_causal\": %s}",
                       mtmd_input_chunk_get_n_tokens(c), (int) mtmd_input_chunk_get_n_pos(c),
                       mtmd_image_tokens_get_nx(it), mtmd_image_tokens_get_ny(it),
                       mtmd_decode_use_non_causal(mctx, c) ? "true" : "false");
            }
        }
        llama_pos n_past = 0;
        if (mtmd_helper_eval_chunks(mctx, lctx, chunks, 0, 0, 512, /*logits_last*/ true, &n_past) != 0) {
            fprintf(stderr, "mtmd_helper_eval_chunks failed\n");
            return 1;
        }
        printf("], \"n_prompt_tokens\": %zu, \"prompt_tokens\": %d, \"steps\": [", mtmd_helper_get_n_tokens(chunks), (int) n_past);
        llama_batch batch = llama_batch_init(1, 0, 1);
        for (int step = 0; step < n_steps; step++) {
            const float * logits = llama_get_logits_ith(lctx, -1);
            const int tok = argmax(logits, n_vocab);
            printf("%s{\"token\": %d, \"top5\": ", step ? ", " : "", tok);
            print_top5(logits, n_vocab);
            printf("}");
            if (step + 1 == n_steps) break;
            batch.n_tokens = 1;
            batch.token[0] = tok;
            batch.pos[0] = n_past++;
            batch.n_seq_id[0] = 1;
            batch.seq_id[0][0] = 0;
            batch.logits[0] = 1;
            if (llama_decode(lctx, batch) != 0) {
                fprintf(stderr, "decode failed at step %d\n", step);
                return 1;
            }
        }
        printf("]}\n");
        llama_batch_free(batch);
        llama_free(lctx);
    }
    mtmd_input_chunks_free(chunks);
    mtmd_bitmap_free(bitmap);
    mtmd_free(mctx);
    llama_model_free(model);
    return 0;
}
