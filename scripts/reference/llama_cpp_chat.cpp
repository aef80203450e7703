// A conversation rendered by one of llama.cpp's built-in chat templates (llama_chat_apply_template with a
// template name, as `--chat-template NAME` uses them), printed to stdout.
// usage: chat TEMPLATE_NAME ADD_GENERATION_PROMPT(0|1) ROLE CONTENT [ROLE CONTENT ...]
// Build as llama_cpp_teacher_force.cpp (scripts/reference/README.md).
#include "llama.h"
#include <cstdio>
#include <cstdlib>
#include <vector>
int main(int argc, char **argv) {
    if (argc < 3 || (argc - 3) % 2) { fprintf(stderr, "usage: chat NAME ADD_GEN [ROLE CONTENT]...\n"); return 2; }
    std::vector<llama_chat_message> chat;
    for (int i = 3; i + 1 < argc; i += 2) chat.push_back({argv[i], argv[i + 1]});
    std::vector<char> buf(1 << 16);
    int n = llama_chat_apply_template(argv[1], chat.data(), chat.size(), atoi(argv[2]) != 0, buf.data(), buf.size());
    if (n < 0 || n > (int) buf.size()) { fprintf(stderr, "template %s failed (%d)\n", argv[1], n); return 1; }
    fwrite(buf.data(), 1, n, stdout);
    return 0;
}
