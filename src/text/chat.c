/*
 * chat.c - Qwen3 and Qwen3.5 ChatML prompts, rendered natively and
 * byte-identical to the official Jinja templates (tools/templates/qwen3.jinja,
 * qwen3.5.jinja, as rendered by transformers: trim_blocks + lstrip_blocks,
 * tojson = json.dumps(ensure_ascii=False), separators ", " and ": ", key order
 * kept), and the reply parser (reasoning / content / tool calls).
 *
 * What the templates do, in short:
 *   <|im_start|>{role}\n{content}<|im_end|>\n per turn; a system turn first
 *   (with the tools block when tools are given); assistant turns after the last
 *   real user query (not a <tool_response> wrapper) carry
 *   <think>\n{reasoning}\n</think>\n\n before the content, earlier ones lose
 *   their reasoning (Qwen3 keeps it when non-empty); tool results become
 *   <tool_response> blocks inside one user turn per run of tool messages.
 *   Qwen3 writes tool calls as Hermes JSON, Qwen3.5 as XML <function=...>
 *   with <parameter=...> blocks (strings raw, mappings/lists as JSON, other
 *   values as Python str(): True, None, 1.0). Qwen3.5 trims every content
 *   (Python str.strip()). The generation prompt is <|im_start|>assistant\n,
 *   then <think>\n (Qwen3.5, thinking on) or <think>\n\n</think>\n\n (off).
 */
#include "text/chat_internal.h"
#include "text/tok_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

tern_chat_format tern_chat_format_for(const tern_tokenizer *t) {
    if (!t) return TERN_CHAT_QWEN3;
    /* the file's own template decides when it shows its tool-call style */
    const char *tm = t->chat_template;
    if (tm && strstr(tm, "<function=")) return TERN_CHAT_QWEN35;
    if (tm && strstr(tm, "\"arguments\": ")) return TERN_CHAT_QWEN3;
    return !strcmp(t->pre, "qwen35") ? TERN_CHAT_QWEN35 : TERN_CHAT_QWEN3;
}

/* ------------------------------------------------------- string helpers */


static bool sv_starts(sv s, const char *pre) { size_t l = strlen(pre); return s.n >= l && !memcmp(s.p, pre, l); }
static bool sv_ends(sv s, const char *suf) { size_t l = strlen(suf); return s.n >= l && !memcmp(s.p + s.n - l, suf, l); }
static const char *sv_find(sv s, const char *needle) {
    size_t l = strlen(needle);
    if (l > s.n) return NULL;
    for (size_t i = 0; i + l <= s.n; i++) if (!memcmp(s.p + i, needle, l)) return s.p + i;
    return NULL;
}
static const char *sv_rfind(sv s, const char *needle) {
    size_t l = strlen(needle);
    if (l > s.n) return NULL;
    for (size_t i = s.n - l + 1; i-- > 0;) if (!memcmp(s.p + i, needle, l)) return s.p + i;
    return NULL;
}
static sv lstrip_nl(sv s) { while (s.n && s.p[0] == '\n') { s.p++; s.n--; } return s; }
static sv rstrip_nl(sv s) { while (s.n && s.p[s.n - 1] == '\n') s.n--; return s; }

/* Python str.isspace() code points, for str.strip() / Jinja |trim */
static bool py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}
static size_t dec_utf8(const char *s, size_t n, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    if (u[0] < 0x80) { *cp = u[0]; return 1; }
    if ((u[0] & 0xE0) == 0xC0 && n >= 2) { *cp = (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F); return 2; }
    if ((u[0] & 0xF0) == 0xE0 && n >= 3) {
        *cp = (uint32_t)(u[0] & 0x0F) << 12 | (uint32_t)(u[1] & 0x3F) << 6 | (u[2] & 0x3F); return 3;
    }
    if ((u[0] & 0xF8) == 0xF0 && n >= 4) {
        *cp = (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3F) << 12 | (uint32_t)(u[2] & 0x3F) << 6 | (u[3] & 0x3F);
        return 4;
    }
    *cp = 0xFFFD;
    return 1;
}
static sv py_strip(sv s) {
    while (s.n) {
        uint32_t c;
        size_t k = dec_utf8(s.p, s.n, &c);
        if (!py_space(c)) break;
        s.p += k; s.n -= k;
    }
    while (s.n) {
        size_t k = 1;
        while (k < s.n && k < 4 && ((unsigned char)s.p[s.n - k] & 0xC0) == 0x80) k++;
        uint32_t c;
        dec_utf8(s.p + s.n - k, k, &c);
        if (!py_space(c)) break;
        s.n -= k;
    }
    return s;
}

/* The renderer writes through a chat_w: the text, and, when tern_chat_tokenize
 * renders, every byte range of it that comes from the caller (contents, reasoning,
 * names, JSON), so that added tokens are only matched in the template's own markup
 * (no injection through message text). tern_chat_render keeps no ranges. */
typedef struct chat_w {
    tern_str *out;
    bool record;                  /* keep the caller ranges below */
    size_t (*r)[2], n, cap;       /* caller ranges [a, b), ascending, adjacent ones merged */
    bool failed;                  /* out of memory while recording */
} chat_w;

static void w_record(chat_w *w, size_t a) {
    size_t b = w->out->len;
    if (!w->record || a >= b) return;
    if (w->n && w->r[w->n - 1][1] == a) { w->r[w->n - 1][1] = b; return; }
    if (!tern_grow(&w->r, &w->cap, w->n, sizeof *w->r, 32)) { w->failed = true; return; }
    w->r[w->n][0] = a;
    w->r[w->n][1] = b;
    w->n++;
}
/* Append the caller's text v, recorded. */
#define APPV(w, v) do { size_t _a = (w)->out->len; APPSV((w)->out, v); w_record((w), _a); } while (0)
/* Run `stmt` (which appends caller data to w->out) and record what it appended. */
#define USER(w, stmt) do { size_t _a = (w)->out->len; stmt; w_record((w), _a); } while (0)


/* --------------------------------------------------------------- Qwen3 */

static const char QWEN3_TOOLS_HEAD[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char QWEN3_TOOLS_TAIL[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n";
static const char QWEN35_TOOLS_HEAD[] = "# Tools\n\nYou have access to the following functions:\n\n<tools>";
static const char QWEN35_TOOLS_TAIL[] =
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
    "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n"
    "- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested "
    "within <tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE the function call, "
    "but NOT after\n- If there is no function call available, answer the question like normal with your current "
    "knowledge and do not tell the user about function calls\n</IMPORTANT>";

static bool role_is(const tern_chat_msg *m, const char *r) { return m->role && !strcmp(m->role, r); }

static tern_status check_roles(const tern_chat_msg *msgs, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!role_is(&msgs[i], "system") && !role_is(&msgs[i], "user") && !role_is(&msgs[i], "assistant") &&
            !role_is(&msgs[i], "tool"))
            return tern_fail(TERN_ERR_INVALID_ARG, "chat: message %zu has unknown role '%s'", i,
                             msgs[i].role ? msgs[i].role : "(null)");
    return TERN_OK;
}

/* Split reasoning out of content the way both templates do (when no explicit
 * reasoning_content): content after the last </think> (lstrip \n); reasoning =
 * before the first </think>, rstrip \n, after the last <think>, lstrip \n. */
static void split_think(sv content, sv *reasoning, sv *rest) {
    const char *last = sv_rfind(content, "</think>"), *first = sv_find(content, "</think>");
    rest->p = last + 8;
    rest->n = (size_t)(content.p + content.n - rest->p);
    *rest = lstrip_nl(*rest);
    sv before = {content.p, (size_t)(first - content.p)};
    before = rstrip_nl(before);
    const char *open = sv_rfind(before, "<think>");
    if (open) { before.n -= (size_t)(open + 7 - before.p); before.p = open + 7; }
    *reasoning = lstrip_nl(before);
}

static tern_status render_qwen3(const tern_chat_msg *msgs, size_t n, const tern_chat_opts *o, chat_w *w) {
    tern_str *out = w->out;
    tern_status st;
    bool tools = tern_cj_tools_nonempty(o->tools_json);
    if (tools) {
        APP(out, "<|im_start|>system\n");
        if (n && role_is(&msgs[0], "system")) { APPV(w, SV(msgs[0].content)); APP(out, "\n\n"); }
        APP(out, QWEN3_TOOLS_HEAD);
        bool any;
        USER(w, st = tern_cj_render_tools_list(SV(o->tools_json), out, &any));
        if (st) return st;
        APP(out, QWEN3_TOOLS_TAIL);
    } else if (n && role_is(&msgs[0], "system")) {
        APP(out, "<|im_start|>system\n");
        APPV(w, SV(msgs[0].content));
        APP(out, "<|im_end|>\n");
    }
    size_t lqi = n ? n - 1 : 0;
    for (size_t k = n; k-- > 0;) {
        sv c = SV(msgs[k].content);
        if (role_is(&msgs[k], "user") && !(sv_starts(c, "<tool_response>") && sv_ends(c, "</tool_response>"))) {
            lqi = k;
            break;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const tern_chat_msg *m = &msgs[i];
        if (role_is(m, "user") || (role_is(m, "system") && i != 0)) {
            APP(out, "<|im_start|>");
            APP(out, m->role);
            APP(out, "\n");
            APPV(w, SV(m->content));
            APP(out, "<|im_end|>\n");
        } else if (role_is(m, "assistant")) {
            sv content = SV(m->content), rc = {"", 0};
            if (m->reasoning_content) rc = SV(m->reasoning_content);
            else if (sv_find(content, "</think>")) split_think(SV(m->content), &rc, &content);
            bool last = i + 1 == n;
            if (i > lqi && (last || rc.n)) {
                APP(out, "<|im_start|>assistant\n<think>\n");
                sv r = lstrip_nl(rstrip_nl(rc));
                APPV(w, r);
                APP(out, "\n</think>\n\n");
                APPV(w, lstrip_nl(content));
            } else {
                APP(out, "<|im_start|>assistant\n");
                APPV(w, content);
            }
            for (size_t t = 0; t < m->n_tool_calls; t++) {
                if ((t == 0 && content.n) || t > 0) APP(out, "\n");
                APP(out, "<tool_call>\n{\"name\": \"");
                APPV(w, SV(m->tool_calls[t].name));
                APP(out, "\", \"arguments\": ");
                USER(w, st = tern_cj_to_py(SV(m->tool_calls[t].arguments ? m->tool_calls[t].arguments : "{}"), out));
                if (st)
                    return tern_fail_prefix(st, "tool call '%s' arguments", m->tool_calls[t].name);
                APP(out, "}\n</tool_call>");
            }
            APP(out, "<|im_end|>\n");
        } else if (role_is(m, "tool")) {
            if (i == 0 || !role_is(&msgs[i - 1], "tool")) APP(out, "<|im_start|>user");
            APP(out, "\n<tool_response>\n");
            APPV(w, SV(m->content));
            APP(out, "\n</tool_response>");
            if (i + 1 == n || !role_is(&msgs[i + 1], "tool")) APP(out, "<|im_end|>\n");
        }
    }
    if (o->add_generation_prompt) {
        APP(out, "<|im_start|>assistant\n");
        if (!o->enable_thinking) APP(out, "<think>\n\n</think>\n\n");
    }
    return TERN_OK;
}

/* ------------------------------------------------------------- Qwen3.5 */

static tern_status render_qwen35(const tern_chat_msg *msgs, size_t n, const tern_chat_opts *o, chat_w *w) {
    tern_str *out = w->out;
    tern_status st;
    if (!n) return tern_fail(TERN_ERR_INVALID_ARG, "chat: No messages provided.");
    if (tern_cj_tools_nonempty(o->tools_json)) {
        APP(out, "<|im_start|>system\n");
        APP(out, QWEN35_TOOLS_HEAD);
        bool any;
        USER(w, st = tern_cj_render_tools_list(SV(o->tools_json), out, &any));
        if (st) return st;
        APP(out, QWEN35_TOOLS_TAIL);
        if (role_is(&msgs[0], "system")) {
            sv c = py_strip(SV(msgs[0].content));
            if (c.n) { APP(out, "\n\n"); APPV(w, c); }
        }
        APP(out, "<|im_end|>\n");
    } else if (role_is(&msgs[0], "system")) {
        APP(out, "<|im_start|>system\n");
        APPV(w, py_strip(SV(msgs[0].content)));
        APP(out, "<|im_end|>\n");
    }
    size_t lqi = 0;
    bool found = false;
    for (size_t k = n; k-- > 0;) {
        if (!role_is(&msgs[k], "user")) continue;
        sv c = py_strip(SV(msgs[k].content));
        if (!(sv_starts(c, "<tool_response>") && sv_ends(c, "</tool_response>"))) { lqi = k; found = true; break; }
    }
    if (!found) return tern_fail(TERN_ERR_INVALID_ARG, "chat: No user query found in messages.");
    for (size_t i = 0; i < n; i++) {
        const tern_chat_msg *m = &msgs[i];
        sv content = py_strip(SV(m->content));
        if (role_is(m, "system")) {
            if (i != 0) return tern_fail(TERN_ERR_INVALID_ARG, "chat: System message must be at the beginning.");
        } else if (role_is(m, "user")) {
            APP(out, "<|im_start|>user\n");
            APPV(w, content);
            APP(out, "<|im_end|>\n");
        } else if (role_is(m, "assistant")) {
            sv rc = {"", 0};
            if (m->reasoning_content) rc = SV(m->reasoning_content);
            else if (sv_find(content, "</think>")) split_think(content, &rc, &content);
            rc = py_strip(rc);
            if (i > lqi) {
                APP(out, "<|im_start|>assistant\n<think>\n");
                APPV(w, rc);
                APP(out, "\n</think>\n\n");
                APPV(w, content);
            } else {
                APP(out, "<|im_start|>assistant\n");
                APPV(w, content);
            }
            for (size_t t = 0; t < m->n_tool_calls; t++) {
                const tern_tool_call *tc = &m->tool_calls[t];
                if (t == 0) APP(out, py_strip(content).n ? "\n\n<tool_call>\n<function=" : "<tool_call>\n<function=");
                else APP(out, "\n<tool_call>\n<function=");
                APPV(w, SV(tc->name));
                APP(out, ">\n");
                if (tc->arguments) {
                    jp j = {tc->arguments, tc->arguments + strlen(tc->arguments), 0};
                    tern_cj_ws(&j);
                    if (j.p >= j.end || *j.p != '{')
                        return tern_fail(TERN_ERR_INVALID_ARG, "chat: tool call '%s' arguments must be a JSON object",
                                         tc->name ? tc->name : "");
                    j.p++;
                    tern_cj_ws(&j);
                    if (j.p < j.end && *j.p == '}') j.p++;
                    else for (;;) {
                        tern_cj_ws(&j);
                        tern_str key = {0};
                        if ((st = tern_cj_string(&j, &key))) { tern_str_free(&key); return st; }
                        APP(out, "<parameter=");
                        USER(w, st = tern_str_append(out, key.data, key.len));
                        tern_str_free(&key);
                        if (st) return st;
                        APP(out, ">\n");
                        tern_cj_ws(&j);
                        if (j.p >= j.end || *j.p != ':') return tern_cj_err(&j, "':' expected");
                        j.p++;
                        USER(w, st = tern_cj_py_str_value(&j, out));
                        if (st) return st;
                        APP(out, "\n</parameter>\n");
                        tern_cj_ws(&j);
                        if (j.p < j.end && *j.p == ',') { j.p++; continue; }
                        if (j.p < j.end && *j.p == '}') { j.p++; break; }
                        return tern_cj_err(&j, "',' or '}' expected");
                    }
                    tern_cj_ws(&j);
                    if (j.p != j.end) return tern_cj_err(&j, "trailing characters");
                }
                APP(out, "</function>\n</tool_call>");
            }
            APP(out, "<|im_end|>\n");
        } else { /* tool */
            if (i > 0 && !role_is(&msgs[i - 1], "tool")) APP(out, "<|im_start|>user");
            APP(out, "\n<tool_response>\n");
            APPV(w, content);
            APP(out, "\n</tool_response>");
            if (i + 1 == n || !role_is(&msgs[i + 1], "tool")) APP(out, "<|im_end|>\n");
        }
    }
    if (o->add_generation_prompt) {
        APP(out, "<|im_start|>assistant\n");
        APP(out, o->enable_thinking ? "<think>\n" : "<think>\n\n</think>\n\n");
    }
    return TERN_OK;
}

static tern_status render(tern_chat_format fmt, const tern_chat_msg *msgs, size_t n, const tern_chat_opts *opts,
                          chat_w *w) {
    tern_chat_opts def = {NULL, true, true};
    if (!opts) opts = &def;
    tern_status st = check_roles(msgs, n);
    if (st) return st;
    size_t mark = w->out->len;
    st = fmt == TERN_CHAT_QWEN35 ? render_qwen35(msgs, n, opts, w) : render_qwen3(msgs, n, opts, w);
    if (st && w->out->data) { w->out->len = mark; w->out->data[mark] = 0; }
    return st;
}

tern_status tern_chat_render(tern_chat_format fmt, const tern_chat_msg *msgs, size_t n, const tern_chat_opts *opts,
                             tern_str *out) {
    if ((!msgs && n) || !out) return tern_fail(TERN_ERR_INVALID_ARG, "tern_chat_render: NULL argument");
    chat_w w = {.out = out};
    return render(fmt, msgs, n, opts, &w);
}

tern_status tern_chat_tokenize(const tern_tokenizer *t, tern_chat_format fmt, const tern_chat_msg *msgs, size_t n,
                               const tern_chat_opts *opts, tern_tokens *out) {
    if (!t || !out) return tern_fail(TERN_ERR_INVALID_ARG, "tern_chat_tokenize: NULL argument");
    if (!msgs && n) return tern_fail(TERN_ERR_INVALID_ARG, "tern_chat_render: NULL argument");
    tern_str text = {0};
    chat_w w = {.out = &text, .record = true};
    tern_status st = render(fmt, msgs, n, opts, &w);
    if (!st && w.failed) st = tern_fail(TERN_ERR_NOMEM, "chat: out of memory");
    if (!st) st = tern_tok_encode_plain_ranges(t, text.data ? text.data : "", text.len, (const size_t(*)[2])w.r,
                                               w.n, out);
    if (w.r) tern_free(w.r, w.cap * sizeof *w.r);
    tern_str_free(&text);
    return st;
}

/* ---------------------------------------------------------- reply parser */

static char *dup_sv(sv s) {
    char *d = tern_malloc(s.n + 1);
    if (d) { memcpy(d, s.p, s.n); d[s.n] = 0; }
    return d;
}

void tern_chat_reply_free(tern_chat_reply *r) {
    if (!r) return;
    if (r->reasoning) tern_free(r->reasoning, strlen(r->reasoning) + 1);
    if (r->content) tern_free(r->content, strlen(r->content) + 1);
    for (size_t i = 0; i < r->n_tool_calls; i++) {
        if (r->tool_calls[i].name) tern_free((char *)r->tool_calls[i].name, strlen(r->tool_calls[i].name) + 1);
        if (r->tool_calls[i].arguments)
            tern_free((char *)r->tool_calls[i].arguments, strlen(r->tool_calls[i].arguments) + 1);
    }
    if (r->tool_calls) tern_free(r->tool_calls, r->n_tool_calls * sizeof *r->tool_calls);
    memset(r, 0, sizeof *r);
}

static tern_status add_call(tern_chat_reply *r, sv name, const tern_str *args) {
    tern_tool_call *a = tern_realloc(r->tool_calls, r->n_tool_calls * sizeof *a, (r->n_tool_calls + 1) * sizeof *a);
    if (!a) return tern_fail(TERN_ERR_NOMEM, "chat: out of memory");
    r->tool_calls = a;
    tern_tool_call *c = &a[r->n_tool_calls++];
    c->name = dup_sv(name);
    c->arguments = dup_sv((sv){args->data ? args->data : "{}", args->data ? args->len : 2});
    if (!c->name || !c->arguments) return tern_fail(TERN_ERR_NOMEM, "chat: out of memory");
    return TERN_OK;
}

/* Qwen3.5 parameter value: JSON if it parses as JSON (numbers, objects, ...),
 * Python literals True/False/None as JSON, else a JSON string. */
static tern_status param_value_json(sv v, tern_str *out) {
    if (v.n == 4 && !memcmp(v.p, "True", 4)) { APP(out, "true"); return TERN_OK; }
    if (v.n == 5 && !memcmp(v.p, "False", 5)) { APP(out, "false"); return TERN_OK; }
    if (v.n == 4 && !memcmp(v.p, "None", 4)) { APP(out, "null"); return TERN_OK; }
    size_t mark = out->len;
    if (v.n && v.p[0] != '"' && tern_cj_to_py(v, out) == TERN_OK) return TERN_OK;
    tern_clear_error();
    out->len = mark;
    if (out->data) out->data[mark] = 0;
    return tern_cj_py_json_str(v, out);
}

static tern_status parse_call_qwen3(sv body, tern_chat_reply *r) {
    /* {"name": "...", "arguments": {...}} */
    sv b = py_strip(body);
    jp j = {b.p, b.p + b.n, 0};
    tern_cj_ws(&j);
    if (j.p >= j.end || *j.p != '{') return tern_fail(TERN_ERR_FORMAT, "chat: tool call is not a JSON object");
    j.p++;
    tern_str name = {0}, args = {0};
    tern_status st = TERN_OK;
    for (;;) {
        tern_cj_ws(&j);
        tern_str key = {0};
        if ((st = tern_cj_string(&j, &key))) { tern_str_free(&key); break; }
        tern_cj_ws(&j);
        if (j.p >= j.end || *j.p != ':') { tern_str_free(&key); st = tern_cj_err(&j, "':' expected"); break; }
        j.p++;
        tern_cj_ws(&j);
        if (key.data && !strcmp(key.data, "name") && j.p < j.end && *j.p == '"') st = tern_cj_string(&j, &name);
        else if (key.data && !strcmp(key.data, "arguments")) st = tern_cj_dump(&j, &args);
        else { tern_str skip = {0}; st = tern_cj_dump(&j, &skip); tern_str_free(&skip); }
        tern_str_free(&key);
        if (st) break;
        tern_cj_ws(&j);
        if (j.p < j.end && *j.p == ',') { j.p++; continue; }
        if (j.p < j.end && *j.p == '}') break;
        st = tern_cj_err(&j, "',' or '}' expected");
        break;
    }
    if (!st && !name.data) st = tern_fail(TERN_ERR_FORMAT, "chat: tool call has no name");
    if (!st) st = add_call(r, (sv){name.data, name.len}, &args);
    tern_str_free(&name);
    tern_str_free(&args);
    return st;
}

static tern_status parse_call_qwen35(sv body, tern_chat_reply *r) {
    const char *f = sv_find(body, "<function=");
    if (!f) return tern_fail(TERN_ERR_FORMAT, "chat: tool call without <function=...>");
    sv rest = {f + 10, (size_t)(body.p + body.n - (f + 10))};
    const char *gt = sv_find(rest, ">");
    if (!gt) return tern_fail(TERN_ERR_FORMAT, "chat: unterminated <function=");
    sv name = {rest.p, (size_t)(gt - rest.p)};
    rest.n -= (size_t)(gt + 1 - rest.p);
    rest.p = gt + 1;
    tern_str args = {0};
    tern_status st = tern_str_append(&args, "{", 1);
    bool first = true;
    const char *pp;
    while (!st && (pp = sv_find(rest, "<parameter="))) {
        sv a = {pp + 11, (size_t)(rest.p + rest.n - (pp + 11))};
        const char *g2 = sv_find(a, ">");
        if (!g2) break;
        sv key = {a.p, (size_t)(g2 - a.p)};
        sv val = {g2 + 1, (size_t)(a.p + a.n - (g2 + 1))};
        const char *endp = sv_find(val, "</parameter>");
        sv v = {val.p, endp ? (size_t)(endp - val.p) : val.n};
        if (v.n && v.p[0] == '\n') { v.p++; v.n--; }
        if (v.n && v.p[v.n - 1] == '\n') v.n--;
        if (!first) st = tern_str_append(&args, ", ", 2);
        first = false;
        if (!st) st = tern_cj_py_json_str(key, &args);
        if (!st) st = tern_str_append(&args, ": ", 2);
        if (!st) st = param_value_json(v, &args);
        if (!endp) break;
        rest.n -= (size_t)(endp + 12 - rest.p);
        rest.p = endp + 12;
    }
    if (!st) st = tern_str_append(&args, "}", 1);
    if (!st) st = add_call(r, py_strip(name), &args);
    tern_str_free(&args);
    return st;
}

tern_status tern_chat_parse(tern_chat_format fmt, const char *text, size_t len, bool thinking_open,
                            tern_chat_reply *out) {
    if (!out || (!text && len)) return tern_fail(TERN_ERR_INVALID_ARG, "tern_chat_parse: NULL argument");
    memset(out, 0, sizeof *out);
    sv t = {text ? text : "", len}, reasoning = {"", 0}, body = t;
    const char *close = sv_find(t, "</think>");
    sv lead = lstrip_nl(t);
    if (close) {
        sv before = {t.p, (size_t)(close - t.p)};
        const char *open = sv_find(before, "<think>");
        if (open || thinking_open) {
            if (open) { before.n -= (size_t)(open + 7 - before.p); before.p = open + 7; }
            reasoning = lstrip_nl(rstrip_nl(before));
            body.p = close + 8;
            body.n = (size_t)(t.p + t.n - body.p);
        }
    } else if (thinking_open || sv_starts(lead, "<think>")) {
        /* still thinking (cut off): everything is reasoning */
        sv r = thinking_open ? t : (sv){lead.p + 7, lead.n - 7};
        reasoning = lstrip_nl(rstrip_nl(r));
        body.p = t.p + t.n;
        body.n = 0;
    }
    tern_str content = {0};
    tern_status st = tern_str_append(&content, "", 0);
    const char *tc;
    while (!st && (tc = sv_find(body, "<tool_call>"))) {
        st = tern_str_append(&content, body.p, (size_t)(tc - body.p));
        sv after = {tc + 11, (size_t)(body.p + body.n - (tc + 11))};
        const char *end = sv_find(after, "</tool_call>");
        sv call = {after.p, end ? (size_t)(end - after.p) : after.n};
        if (!st) {
            st = fmt == TERN_CHAT_QWEN35 ? parse_call_qwen35(call, out) : parse_call_qwen3(call, out);
            if (st) { /* not a well-formed call: keep it as text */
                tern_clear_error();
                st = tern_str_append(&content, tc, (size_t)(call.p + call.n - tc) + (end ? 12 : 0));
            }
        }
        if (!end) { body.p += body.n; body.n = 0; break; }
        body.n -= (size_t)(end + 12 - body.p);
        body.p = end + 12;
    }
    if (!st) st = tern_str_append(&content, body.p, body.n);
    if (!st) {
        out->reasoning = dup_sv(reasoning);
        out->content = dup_sv(py_strip((sv){content.data, content.len}));
        if (!out->reasoning || !out->content) st = tern_fail(TERN_ERR_NOMEM, "chat: out of memory");
    }
    tern_str_free(&content);
    if (st) tern_chat_reply_free(out);
    return st;
}
