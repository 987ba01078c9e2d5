/*
 * chat_json.c - the JSON side of the chat templates and the reply parser: a
 * small validating JSON reader that writes the text Python's json.dumps writes
 * (what the official Jinja templates' tojson gives), Python str() of values, and
 * the tools list. Split out of chat.c unchanged.
 */
#include "text/chat_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ JSON
 * A small validating JSON reader that writes Python json.dumps text:
 * separators ", " and ": ", non-ASCII kept, strings re-escaped as Python does,
 * integers as Python ints, floats as Python float repr. */


void tern_cj_ws(jp *j) { while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++; }

tern_status tern_cj_err(jp *j, const char *what) {
    int n = j->p < j->end ? (int)(j->end - j->p < 20 ? j->end - j->p : 20) : 0;
    return tern_fail(TERN_ERR_INVALID_ARG, "chat: invalid JSON (%s) near '%.*s'", what, n, n ? j->p : "");
}

static int hexv(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The 4 hex digits at p (before end) as a number; -1 when they are not. */
static long hex4(const char *p, const char *end) {
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int h = p + i < end ? hexv(p[i]) : -1;
        if (h < 0) return -1;
        v = v << 4 | h;
    }
    return v;
}

/* JSON's two-character escapes: the letter after the backslash and the byte it stands
 * for (Python's json.dumps writes all but the solidus this way). */
static const char g_esc_letter[8] = {'"', '\\', '/', 'b', 'f', 'n', 'r', 't'};
static const char g_esc_byte[8] = {'"', '\\', '/', '\b', '\f', '\n', '\r', '\t'};

/* Decode a JSON string at j->p (on the quote) into raw UTF-8. */
tern_status tern_cj_string(jp *j, tern_str *out) {
    if (j->p >= j->end || *j->p != '"') return tern_cj_err(j, "string expected");
    j->p++;
    tern_status st = tern_str_append(out, "", 0);
    if (st) return st;
    while (j->p < j->end && *j->p != '"') {
        unsigned char c = (unsigned char)*j->p;
        if (c < 0x20) return tern_cj_err(j, "control character in string");
        if (c != '\\') {
            const char *s = j->p;
            while (j->p < j->end && *j->p != '"' && *j->p != '\\' && (unsigned char)*j->p >= 0x20) j->p++;
            if ((st = tern_str_append(out, s, (size_t)(j->p - s)))) return st;
            continue;
        }
        if (j->p + 1 >= j->end) return tern_cj_err(j, "bad escape");
        char e = j->p[1];
        j->p += 2;
        if (e != 'u') {
            const char *esc = memchr(g_esc_letter, e, sizeof g_esc_letter);
            if (!esc) return tern_cj_err(j, "bad escape");
            if ((st = tern_str_append(out, &g_esc_byte[esc - g_esc_letter], 1))) return st;
            continue;
        }
        long hi = hex4(j->p, j->end), lo;
        if (hi < 0) return tern_cj_err(j, "bad \\u escape");
        uint32_t cp = (uint32_t)hi;
        j->p += 4;
        if (cp >= 0xD800 && cp < 0xDC00 && j->p + 6 <= j->end && j->p[0] == '\\' && j->p[1] == 'u' &&
            (lo = hex4(j->p + 2, j->end)) >= 0xDC00 && lo < 0xE000) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
            j->p += 6;
        }
        char u[4];
        if ((st = tern_str_append(out, u, tern_utf8_put(cp, u)))) return st;
    }
    if (j->p >= j->end) return tern_cj_err(j, "unterminated string");
    j->p++;
    return TERN_OK;
}

/* Python json.dumps string escaping (ensure_ascii=False). */
tern_status tern_cj_py_json_str(sv s, tern_str *out) {
    APP(out, "\"");
    for (size_t i = 0; i < s.n; i++) {
        unsigned char c = (unsigned char)s.p[i];
        char buf[8];
        const char *r = NULL;
        const char *esc = c != '/' ? memchr(g_esc_byte, c, sizeof g_esc_byte) : NULL;
        if (esc) { buf[0] = '\\'; buf[1] = g_esc_letter[esc - g_esc_byte]; buf[2] = 0; r = buf; }
        else if (c < 0x20) { snprintf(buf, sizeof buf, "\\u%04x", c); r = buf; }
        if (r) APP(out, r);
        else { tern_status st = tern_str_append(out, (const char *)&s.p[i], 1); if (st) return st; }
    }
    APP(out, "\"");
    return TERN_OK;
}

/* Scan a JSON number literal; *is_float when it has a fraction or exponent. */
static tern_status jnumber(jp *j, sv *lit, bool *is_float) {
    const char *s = j->p;
    *is_float = false;
    if (j->p < j->end && *j->p == '-') j->p++;
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') return tern_cj_err(j, "bad number");
    if (*j->p == '0') j->p++;
    else while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    if (j->p < j->end && *j->p == '.') {
        *is_float = true;
        j->p++;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9') return tern_cj_err(j, "bad number");
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        *is_float = true;
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9') return tern_cj_err(j, "bad number");
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    }
    lit->p = s;
    lit->n = (size_t)(j->p - s);
    return TERN_OK;
}

/* Python repr() of a float given as a JSON literal (shortest round-trip digits). */
static tern_status py_float_repr(sv lit, tern_str *out) {
    char tmp[64];
    if (lit.n >= sizeof tmp) return tern_fail(TERN_ERR_INVALID_ARG, "chat: number literal too long");
    memcpy(tmp, lit.p, lit.n);
    tmp[lit.n] = 0;
    double v = strtod(tmp, NULL);
    if (isinf(v)) { APP(out, v > 0 ? "Infinity" : "-Infinity"); return TERN_OK; }
    char e[40];
    int prec;
    for (prec = 0; prec < 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec, v);
        if (strtod(e, NULL) == v) break;
    }
    snprintf(e, sizeof e, "%.*e", prec, v);
    /* e = [-]d[.ddd]e[+-]XX -> digits + decimal exponent */
    char digits[24];
    int nd = 0;
    const char *q = e;
    bool neg = *q == '-';
    if (neg) q++;
    for (; *q && *q != 'e'; q++) if (*q >= '0' && *q <= '9') digits[nd++] = *q;
    int exp10 = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    int decpt = exp10 + 1; /* value = 0.digits * 10^decpt */
    char buf[64];
    int o = 0;
    if (neg) buf[o++] = '-';
    if (v == 0) { o += snprintf(buf + o, sizeof buf - (size_t)o, "0.0"); }
    else if (decpt > 16 || decpt <= -4) {
        buf[o++] = digits[0];
        if (nd > 1) { buf[o++] = '.'; for (int i = 1; i < nd; i++) buf[o++] = digits[i]; }
        o += snprintf(buf + o, sizeof buf - (size_t)o, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    } else if (decpt <= 0) {
        buf[o++] = '0'; buf[o++] = '.';
        for (int i = 0; i < -decpt; i++) buf[o++] = '0';
        for (int i = 0; i < nd; i++) buf[o++] = digits[i];
    } else {
        for (int i = 0; i < decpt; i++) buf[o++] = i < nd ? digits[i] : '0';
        buf[o++] = '.';
        if (nd > decpt) for (int i = decpt; i < nd; i++) buf[o++] = digits[i];
        else buf[o++] = '0';
    }
    return tern_str_append(out, buf, (size_t)o);
}

static tern_status py_int(sv lit, tern_str *out) {
    if (lit.n == 2 && !memcmp(lit.p, "-0", 2)) { APP(out, "0"); return TERN_OK; }
    APPSV(out, lit);
    return TERN_OK;
}

/* Parse one value at j->p and write it as Python json.dumps would. */
tern_status tern_cj_dump(jp *j, tern_str *out) {
    tern_status st;
    tern_cj_ws(j);
    if (j->p >= j->end) return tern_cj_err(j, "value expected");
    if (++j->depth > 64) return tern_cj_err(j, "nested too deeply");
    char c = *j->p;
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->p++;
        APP(out, c == '{' ? "{" : "[");
        tern_cj_ws(j);
        bool first = true;
        if (j->p < j->end && *j->p == close) j->p++;
        else for (;;) {
            if (!first) APP(out, ", ");
            first = false;
            if (c == '{') {
                tern_cj_ws(j);
                tern_str key = {0};
                st = tern_cj_string(j, &key);
                if (!st) st = tern_cj_py_json_str((sv){key.data, key.len}, out);
                tern_str_free(&key);
                if (st) return st;
                tern_cj_ws(j);
                if (j->p >= j->end || *j->p != ':') return tern_cj_err(j, "':' expected");
                j->p++;
                APP(out, ": ");
            }
            if ((st = tern_cj_dump(j, out))) return st;
            tern_cj_ws(j);
            if (j->p < j->end && *j->p == ',') { j->p++; continue; }
            if (j->p < j->end && *j->p == close) { j->p++; break; }
            return tern_cj_err(j, "',' or closing bracket expected");
        }
        APP(out, c == '{' ? "}" : "]");
    } else if (c == '"') {
        tern_str s = {0};
        st = tern_cj_string(j, &s);
        if (!st) st = tern_cj_py_json_str((sv){s.data, s.len}, out);
        tern_str_free(&s);
        if (st) return st;
    } else if (j->end - j->p >= 4 && !memcmp(j->p, "true", 4)) { j->p += 4; APP(out, "true"); }
    else if (j->end - j->p >= 5 && !memcmp(j->p, "false", 5)) { j->p += 5; APP(out, "false"); }
    else if (j->end - j->p >= 4 && !memcmp(j->p, "null", 4)) { j->p += 4; APP(out, "null"); }
    else {
        sv lit;
        bool fl;
        if ((st = jnumber(j, &lit, &fl))) return st;
        if ((st = fl ? py_float_repr(lit, out) : py_int(lit, out))) return st;
    }
    j->depth--;
    return TERN_OK;
}

/* Whole text must be exactly one JSON value. */
tern_status tern_cj_to_py(sv text, tern_str *out) {
    jp j = {text.p, text.p + text.n, 0};
    tern_status st = tern_cj_dump(&j, out);
    if (st) return st;
    tern_cj_ws(&j);
    if (j.p != j.end) return tern_cj_err(&j, "trailing characters");
    return TERN_OK;
}

/* Python str() of one JSON value, as Jinja's |string gives it for a non-mapping
 * non-list value; mappings and lists go through tojson (the Qwen3.5 rule). */
tern_status tern_cj_py_str_value(jp *j, tern_str *out) {
    tern_cj_ws(j);
    if (j->p >= j->end) return tern_cj_err(j, "value expected");
    char c = *j->p;
    if (c == '{' || c == '[') return tern_cj_dump(j, out);
    if (c == '"') return tern_cj_string(j, out);
    if (j->end - j->p >= 4 && !memcmp(j->p, "true", 4)) { j->p += 4; APP(out, "True"); return TERN_OK; }
    if (j->end - j->p >= 5 && !memcmp(j->p, "false", 5)) { j->p += 5; APP(out, "False"); return TERN_OK; }
    if (j->end - j->p >= 4 && !memcmp(j->p, "null", 4)) { j->p += 4; APP(out, "None"); return TERN_OK; }
    sv lit;
    bool fl;
    tern_status st = jnumber(j, &lit, &fl);
    if (st) return st;
    return fl ? py_float_repr(lit, out) : py_int(lit, out);
}

/* Iterate the top-level members of a JSON array (tools). */
tern_status tern_cj_render_tools_list(sv tools, tern_str *out, bool *any) {
    jp j = {tools.p, tools.p + tools.n, 0};
    *any = false;
    tern_cj_ws(&j);
    if (j.p >= j.end || *j.p != '[') return tern_fail(TERN_ERR_INVALID_ARG, "chat: tools must be a JSON array");
    j.p++;
    tern_cj_ws(&j);
    if (j.p < j.end && *j.p == ']') { j.p++; tern_cj_ws(&j); return j.p == j.end ? TERN_OK : tern_cj_err(&j, "trailing characters"); }
    for (;;) {
        APP(out, "\n");
        tern_status st = tern_cj_dump(&j, out);
        if (st) return st;
        *any = true;
        tern_cj_ws(&j);
        if (j.p < j.end && *j.p == ',') { j.p++; continue; }
        if (j.p < j.end && *j.p == ']') { j.p++; break; }
        return tern_cj_err(&j, "',' or ']' expected in tools");
    }
    tern_cj_ws(&j);
    return j.p == j.end ? TERN_OK : tern_cj_err(&j, "trailing characters");
}

bool tern_cj_tools_nonempty(const char *tools) {
    if (!tools) return false;
    const char *p = tools;
    while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
    if (*p != '[') return true; /* let the renderer report it */
    p++;
    while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
    return *p != ']';
}
