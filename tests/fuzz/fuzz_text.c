/*
 * fuzz_text.c - libFuzzer target for the text module: the BPE tokenizer
 * (NFC, regex split, added-token matching, BPE), decode and the streaming
 * detokenizer, the chat reply parser, and the JSON reformatter behind tool-call
 * rendering. Input: arbitrary bytes, used as text, as a model reply and as a
 * tool call's arguments JSON.
 * Invariants: decode(encode(x)) == x for ASCII x (NFC is the identity there);
 * the streamed decode equals the plain decode.
 */
#include "tern.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static tern_tokenizer *g_tok;

/* A byte-level vocabulary: the 256 GPT-2 byte characters, a few merges and the
 * Qwen added tokens, as tokenizer.json. */
static void init(void) {
    static char buf[1 << 16];
    size_t o = 0;
    o += (size_t)snprintf(buf + o, sizeof buf - o, "{\"model\":{\"type\":\"BPE\",\"vocab\":{");
    int n = 0, id = 0;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        int cp = keep ? b : 256 + n++;
        char u[8];
        size_t k;
        if (cp == '"' || cp == '\\') { u[0] = '\\'; u[1] = (char)cp; k = 2; }
        else if (cp < 0x80) { u[0] = (char)cp; k = 1; }
        else { u[0] = (char)(0xC0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3F)); k = 2; }
        o += (size_t)snprintf(buf + o, sizeof buf - o, "%s\"%.*s\":%d", id ? "," : "", (int)k, u, id);
        id++;
    }
    const char *extra[] = {"th", "the", "\\u0120t", "\\u0120the", "in", "ing", "\\u0120\\u0120"};
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
        o += (size_t)snprintf(buf + o, sizeof buf - o, ",\"%s\":%d", extra[i], id++);
    o += (size_t)snprintf(buf + o, sizeof buf - o,
                          "},\"merges\":[\"t h\",\"th e\",\"\\u0120 t\",\"\\u0120t he\",\"i n\",\"in g\","
                          "\"\\u0120 \\u0120\"]},\"added_tokens\":["
                          "{\"id\":%d,\"content\":\"<|im_start|>\",\"special\":true},"
                          "{\"id\":%d,\"content\":\"<|im_end|>\",\"special\":true},"
                          "{\"id\":%d,\"content\":\"<think>\",\"special\":false}]}",
                          id, id + 1, id + 2);
    if (tern_tokenizer_load_json(buf, o, "fuzz-vocab", &g_tok) != TERN_OK) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_tok) init();
    const char *s = (const char *)data;
    bool ascii = true;
    for (size_t i = 0; i < size; i++) ascii &= data[i] < 0x80;
    for (int sp = 0; sp < 2; sp++) {
        tern_tokens ids = {0};
        if (tern_tokenize(g_tok, s, size, sp, &ids) == TERN_OK) {
            tern_str dec = {0}, st = {0};
            if (tern_detokenize(g_tok, ids.ids, ids.n, &dec) != TERN_OK) __builtin_trap();
            if (ascii && (dec.len != size || (size && memcmp(dec.data, s, size)))) __builtin_trap();
            tern_detok_stream ds = {0};
            for (size_t i = 0; i < ids.n; i++) tern_detok_stream_push(&ds, g_tok, ids.ids[i], &st);
            tern_detok_stream_flush(&ds, &st);
            if (st.len != dec.len || (st.len && memcmp(st.data, dec.data, st.len))) __builtin_trap();
            tern_str_free(&dec);
            tern_str_free(&st);
        }
        tern_tokens_free(&ids);
    }
    for (int f = 0; f < 2; f++) {
        tern_chat_reply r;
        if (tern_chat_parse((tern_chat_format)f, s, size, f == 1, &r) == TERN_OK) tern_chat_reply_free(&r);
    }
    char *z = malloc(size + 1);
    if (!z) return 0;
    memcpy(z, data, size);
    z[size] = 0;
    tern_tool_call tc = {"f", z};
    tern_chat_msg m[2] = {{"user", "q", NULL, NULL, 0}, {"assistant", z, NULL, &tc, 1}};
    tern_chat_opts o = {z, true, true};
    for (int f = 0; f < 2; f++) {
        tern_str out = {0};
        tern_chat_render((tern_chat_format)f, m, 2, &o, &out);
        tern_str_free(&out);
    }
    free(z);
    return 0;
}
