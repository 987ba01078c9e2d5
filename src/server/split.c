/*
 * split.c - the streaming reasoning / content splitter of `tern serve` (server.h: srv_split):
 * generated chat text cut into reasoning and content deltas as it arrives, so that their
 * concatenation equals tern_chat_parse of the whole text. No sockets, no model: unit-tested
 * (test_server) and fuzzed (fuzz_server) on its own.
 */
#include "server/server.h"

#include <string.h>

/* ---------------------------------------------------------------- splitter */

enum { SP_START, SP_THINK_START, SP_THINK, SP_CONTENT_START, SP_CONTENT, SP_TOOL };

void srv_split_init(srv_split *s, bool thinking_open) {
    memset(s, 0, sizeof *s);
    s->state = thinking_open ? SP_THINK_START : SP_START;
}

void srv_split_free(srv_split *s) { tern_str_free(&s->hold); }

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* Longest suffix of h[0..n) that is a proper prefix of tag. */
static size_t tag_tail(const char *h, size_t n, const char *tag) {
    size_t tl = strlen(tag);
    for (size_t l = tl - 1; l > 0; l--)
        if (l <= n && !memcmp(h + n - l, tag, l)) return l;
    return 0;
}

static const char *find(const char *h, size_t n, const char *tag) {
    size_t tl = strlen(tag);
    for (size_t i = 0; i + tl <= n; i++)
        if (!memcmp(h + i, tag, tl)) return h + i;
    return NULL;
}

/* Drop the first k bytes of the hold buffer. */
static void consume(srv_split *s, size_t k) {
    memmove(s->hold.data, s->hold.data + k, s->hold.len - k);
    s->hold.len -= k;
    s->hold.data[s->hold.len] = 0;
}

static tern_status emit(srv_split *s, tern_str *dst, size_t n, bool reasoning) {
    if (!n) return TERN_OK;
    if (reasoning) s->any_reasoning = true;
    else s->any_content = true;
    tern_status st = tern_str_append(dst, s->hold.data, n);
    if (!st) consume(s, n);
    return st;
}

static tern_status split_run(srv_split *s, tern_str *content, tern_str *reasoning, bool final) {
    tern_status st = TERN_OK;
    for (;;) {
        char *h = s->hold.data;
        size_t n = s->hold.len;
        switch (s->state) {
        case SP_START: {
            size_t k = 0;
            while (k < n && h[k] == '\n') k++;
            if (k == n && !final) { consume(s, k); return TERN_OK; }
            if (n - k >= 7 && !memcmp(h + k, "<think>", 7)) { consume(s, k + 7); s->state = SP_THINK_START; continue; }
            if (!final && n - k < 7 && !memcmp(h + k, "<think>", n - k)) return TERN_OK;
            s->state = SP_CONTENT_START;
            continue;
        }
        case SP_THINK_START: {
            size_t k = 0;
            while (k < n && h[k] == '\n') k++;
            consume(s, k);
            if (k == n) return TERN_OK;
            s->state = SP_THINK;
            continue;
        }
        case SP_THINK: {
            const char *c = find(h, n, "</think>");
            size_t end = c ? (size_t)(c - h) : final ? n : n - tag_tail(h, n, "</think>");
            size_t keep = end;
            while (keep && h[keep - 1] == '\n') keep--;
            if (c || final) {
                if ((st = emit(s, reasoning, keep, true))) return st;
                consume(s, end - keep + (c ? 8 : 0));
                if (!c) return TERN_OK;
                s->state = SP_CONTENT_START;
                continue;
            }
            return emit(s, reasoning, keep, true);
        }
        case SP_CONTENT_START: {
            size_t k = 0;
            while (k < n && is_ws(h[k])) k++;
            consume(s, k);
            if (k == n) return TERN_OK;
            s->state = SP_CONTENT;
            continue;
        }
        case SP_CONTENT: {
            const char *c = find(h, n, "<tool_call>");
            size_t end = c ? (size_t)(c - h) : final ? n : n - tag_tail(h, n, "<tool_call>");
            size_t keep = end;
            while (keep && is_ws(h[keep - 1])) keep--;
            if ((st = emit(s, content, keep, false))) return st;
            if (c) { s->tool = true; s->state = SP_TOOL; continue; }
            if (final) consume(s, s->hold.len);
            return TERN_OK;
        }
        default: /* SP_TOOL: the caller reports the parsed calls */
            consume(s, s->hold.len);
            return TERN_OK;
        }
    }
}

tern_status srv_split_push(srv_split *s, const char *text, size_t len, tern_str *content, tern_str *reasoning) {
    tern_status st = tern_str_append(&s->hold, text ? text : "", text ? len : 0);
    return st ? st : split_run(s, content, reasoning, false);
}

tern_status srv_split_finish(srv_split *s, tern_str *content, tern_str *reasoning) {
    tern_status st = tern_str_append(&s->hold, "", 0);
    return st ? st : split_run(s, content, reasoning, true);
}
