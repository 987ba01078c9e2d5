/*
 * chat_input.c - one chat message from typed and pasted lines; the turns that
 * leave a full context (chat_input.h).
 */
#include "cli/chat_input.h"

#include <stdlib.h>
#include <string.h>

void chat_input_init(chat_input *ci) { memset(ci, 0, sizeof *ci); }

void chat_input_free(chat_input *ci) {
    free(ci->buf);
    memset(ci, 0, sizeof *ci);
}

void chat_input_reset(chat_input *ci) {
    ci->n = ci->line_start = 0;
    if (ci->buf) ci->buf[0] = 0;
    ci->quote = ci->paste = ci->line_pasted = ci->pending = ci->tail_typed = false;
}

bool chat_input_pending(const chat_input *ci) { return ci->pending; }

static bool put(chat_input *ci, const char *s, size_t n) {
    if (ci->n + n + 1 > ci->cap) {
        size_t cap = ci->cap ? ci->cap : 256;
        while (cap < ci->n + n + 1) cap *= 2;
        char *b = realloc(ci->buf, cap);
        if (!b) return false;
        ci->buf = b;
        ci->cap = cap;
    }
    memcpy(ci->buf + ci->n, s, n);
    ci->n += n;
    ci->buf[ci->n] = 0;
    return true;
}

/* first occurrence of needle (len m) in s (len n), or n */
static size_t find(const char *s, size_t n, const char *needle) {
    size_t m = strlen(needle);
    for (size_t i = 0; i + m <= n; i++)
        if (!memcmp(s + i, needle, m)) return i;
    return n;
}

/* pasted text: CR LF and CR become LF */
static bool put_pasted(chat_input *ci, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '\r') {
            if (i + 1 < n && s[i + 1] == '\n') i++;
            c = '\n';
        }
        if (!put(ci, &c, 1)) return false;
    }
    return true;
}

static bool is_quote_line(const char *s, size_t n) {
    while (n && (*s == ' ' || *s == '\t')) { s++; n--; }
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) n--;
    return n == 3 && !memcmp(s, "\"\"\"", 3);
}

static int done(chat_input *ci) {
    while (ci->n && (ci->buf[ci->n - 1] == '\n' || ci->buf[ci->n - 1] == '\r')) ci->n--;
    if (ci->buf) ci->buf[ci->n] = 0;
    else if (!put(ci, "", 0)) return CHAT_IN_NOMEM;
    ci->pending = false;
    return CHAT_IN_DONE;
}

static void new_line(chat_input *ci) {
    ci->line_start = ci->n;
    ci->line_pasted = ci->tail_typed = false;
}

int chat_input_feed(chat_input *ci, const char *text, size_t n, bool eol) {
    while (n) {
        if (ci->paste) {
            size_t e = find(text, n, CHAT_PASTE_END);
            if (!put_pasted(ci, text, e)) return CHAT_IN_NOMEM;
            if (e) ci->tail_typed = false;
            if (e == n) { n = 0; break; }
            ci->paste = false;
            size_t skip = e + strlen(CHAT_PASTE_END);
            text += skip;
            n -= skip;
            continue;
        }
        size_t b = find(text, n, CHAT_PASTE_BEGIN);
        if (!put(ci, text, b)) return CHAT_IN_NOMEM;
        if (b) ci->tail_typed = true;
        if (b == n) break;
        ci->paste = ci->line_pasted = ci->pending = true;
        size_t skip = b + strlen(CHAT_PASTE_BEGIN);
        text += skip;
        n -= skip;
    }
    if (!eol) {
        if (ci->n > 0 || ci->paste || ci->quote) ci->pending = true;
        return CHAT_IN_MORE;
    }
    if (ci->paste) { /* a newline inside the paste (a terminal without raw mode) */
        if (!put(ci, "\n", 1)) return CHAT_IN_NOMEM;
        return CHAT_IN_MORE;
    }
    const char *line = ci->buf ? ci->buf + ci->line_start : "";
    size_t ln = ci->n - ci->line_start;
    if (!ci->line_pasted && is_quote_line(line, ln)) {
        ci->n = ci->line_start;
        if (ci->quote) {
            ci->quote = false;
            return done(ci);
        }
        ci->quote = ci->pending = true;
        new_line(ci);
        if (ci->buf) ci->buf[ci->n] = 0;
        return CHAT_IN_MORE;
    }
    if (ci->quote) {
        if (!put(ci, "\n", 1)) return CHAT_IN_NOMEM;
        new_line(ci);
        return CHAT_IN_MORE;
    }
    /* a trailing backslash typed after any paste continues the line */
    if (ci->n > ci->line_start && ci->tail_typed && ci->buf[ci->n - 1] == '\\') {
        ci->buf[ci->n - 1] = '\n';
        ci->pending = true;
        new_line(ci);
        return CHAT_IN_MORE;
    }
    return done(ci);
}

size_t chat_turns_to_drop(const size_t *cost, size_t n, size_t fixed, size_t budget, bool *fits) {
    size_t total = fixed;
    for (size_t i = 0; i < n; i++) total += cost[i];
    size_t k = 0;
    while (k < n && total > budget) total -= cost[k++];
    if (fits) *fits = total <= budget;
    return k;
}
