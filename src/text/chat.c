/* chat.c - placeholder being written */
#include "text/tok_internal.h"
tern_chat_format tern_chat_format_for(const tern_tokenizer *t) {
    return t && !strcmp(t->pre, "qwen35") ? TERN_CHAT_QWEN35 : TERN_CHAT_QWEN3;
}
