/*
 * str.c - the growable byte string and token array of tern.h (tern_str, tern_tokens)
 * and UTF-8 sanitising. Every layer builds text with them (the loader's metadata,
 * the tokenizer, chat templates, the server), so they live at the bottom, in core.
 */
#include "core/common.h"

#include <stdint.h>

void tern_str_free(tern_str *s) {
    if (!s) return;
    if (s->data) tern_free(s->data, s->cap);
    s->data = NULL; s->len = s->cap = 0;
}

tern_status tern_str_reserve(tern_str *s, size_t extra) {
    size_t need;
    if (!tern_add_ok(s->len, extra, &need) || !tern_add_ok(need, 1, &need))
        return tern_fail(TERN_ERR_NOMEM, "text: string too long");
    if (need <= s->cap) return TERN_OK;
    size_t cap = s->cap ? s->cap : 64;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *d = tern_realloc(s->data, s->cap, cap);
    if (!d) return tern_fail(TERN_ERR_NOMEM, "text: out of memory (%zu bytes)", cap);
    s->data = d; s->cap = cap;
    return TERN_OK;
}

tern_status tern_str_append(tern_str *s, const char *data, size_t len) {
    tern_status st = tern_str_reserve(s, len);
    if (st) return st;
    if (len) memcpy(s->data + s->len, data, len);
    s->len += len;
    s->data[s->len] = 0;
    return TERN_OK;
}

tern_status tern_utf8_sanitize(const char *s, size_t n, tern_str *out) {
    size_t cap;
    if (__builtin_mul_overflow(n, (size_t)3, &cap)) return tern_fail(TERN_ERR_NOMEM, "text: %zu bytes is too long", n);
    tern_status st = tern_str_reserve(out, cap); /* at most 3 bytes out per byte in */
    if (st) return st;
    const unsigned char *u = (const unsigned char *)s;
    char *q = out->data + out->len;
    for (size_t i = 0; i < n;) {
        size_t need = u[i] < 0x80 ? 1 : u[i] >= 0xC2 && u[i] < 0xE0 ? 2 : u[i] >= 0xE0 && u[i] < 0xF0 ? 3
                    : u[i] >= 0xF0 && u[i] < 0xF5 ? 4 : 0;
        bool ok = need && i + need <= n && u[i] != 0;
        for (size_t k = 1; ok && k < need; k++) ok = (u[i + k] & 0xC0) == 0x80;
        if (ok && need == 3) ok = !(u[i] == 0xE0 && u[i + 1] < 0xA0) && !(u[i] == 0xED && u[i + 1] >= 0xA0);
        if (ok && need == 4) ok = !(u[i] == 0xF0 && u[i + 1] < 0x90) && !(u[i] == 0xF4 && u[i + 1] >= 0x90);
        if (ok) { memcpy(q, s + i, need); q += need; i += need; }
        else { memcpy(q, "\xEF\xBF\xBD", 3); q += 3; i++; }
    }
    out->len = (size_t)(q - out->data);
    out->data[out->len] = 0;
    return TERN_OK;
}

void tern_tokens_free(tern_tokens *t) {
    if (!t) return;
    if (t->ids) tern_free(t->ids, t->cap * sizeof *t->ids);
    t->ids = NULL; t->n = t->cap = 0;
}

tern_status tern_tokens_push(tern_tokens *t, int32_t id) {
    if (!tern_grow(&t->ids, &t->cap, t->n, sizeof *t->ids, 64))
        return tern_fail(TERN_ERR_NOMEM, "text: out of memory (token array)");
    t->ids[t->n++] = id;
    return TERN_OK;
}

size_t tern_utf8_put(uint32_t cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F)); return 4;
}
