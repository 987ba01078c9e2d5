/*
 * chat_internal.h - what chat.c (templates, reply parser) and chat_json.c (the
 * JSON reader that writes Python json.dumps text) share. Library-internal.
 */
#ifndef TERN_TEXT_CHAT_INTERNAL_H
#define TERN_TEXT_CHAT_INTERNAL_H

#include "core/common.h"

#include <string.h>

/* A string view. */
typedef struct sv { const char *p; size_t n; } sv;
static inline sv SV(const char *s) { sv r = {s ? s : "", s ? strlen(s) : 0}; return r; }

#define APP(out, s) do { tern_status _st = tern_str_append((out), (s), strlen(s)); if (_st) return _st; } while (0)
#define APPSV(out, v) do { sv _v = (v); tern_status _st = tern_str_append((out), _v.p, _v.n); if (_st) return _st; } while (0)

/* ---- JSON (chat_json.c): a small validating reader that writes Python
 * json.dumps text (separators ", " and ": ", non-ASCII kept, strings re-escaped as
 * Python does, integers as Python ints, floats as Python float repr). */
typedef struct jp { const char *p, *end; int depth; } jp;
void tern_cj_ws(jp *j);                                  /* skip JSON whitespace */
tern_status tern_cj_err(jp *j, const char *what);        /* INVALID_ARG naming the offset */
tern_status tern_cj_string(jp *j, tern_str *out);        /* a JSON string, decoded, appended */
tern_status tern_cj_py_json_str(sv s, tern_str *out);    /* s as a Python json.dumps string literal */
tern_status tern_cj_dump(jp *j, tern_str *out);          /* one value as json.dumps writes it */
tern_status tern_cj_to_py(sv text, tern_str *out);       /* the whole text is one value */
tern_status tern_cj_py_str_value(jp *j, tern_str *out);  /* Python str() of one value (Qwen3.5 rule) */
tern_status tern_cj_render_tools_list(sv tools, tern_str *out, bool *any); /* tools array members */
bool tern_cj_tools_nonempty(const char *tools);

#endif
