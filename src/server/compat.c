/*
 * compat.c - the other APIs clients speak, translated to and from the OpenAI shapes that
 * request.c parses and builds (no sockets, no model: unit-tested on its own):
 *
 *   Anthropic's /v1/messages   system, messages (string or text / tool_use / tool_result
 *                              blocks), max_tokens (required), stop_sequences, temperature,
 *                              top_p, top_k, tools / tool_choice, stream -> a chat request;
 *                              the reply as a "message" with text / thinking / tool_use
 *                              blocks, streamed as message_start, content_block_start,
 *                              content_block_delta, content_block_stop, message_delta,
 *                              message_stop events.
 *   OpenAI's /v1/responses     input (string or messages), instructions, max_output_tokens,
 *                              temperature, top_p, tools, tool_choice, text.format, stream ->
 *                              a chat request; the reply as a "response" object, streamed as
 *                              response.created ... response.output_text.delta ...
 *                              response.completed events.
 *   llama-server's /completion the completions request as is (its own field list); the
 *                              reply as {content, tokens_predicted, stop, ...}, streamed as
 *                              data: {"content", "stop": false} ... {"stop": true, ...}.
 */
#include "server/server.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cJSON *get(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* A number field, 0 when absent. */
static double num(const cJSON *o, const char *k) {
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static bool in_list(const char *k, const char *const *list) {
    for (; *list; list++) if (!strcmp(k, *list)) return true;
    return false;
}

static int check_fields(const cJSON *root, const char *const *allowed, char *err, size_t en) {
    for (const cJSON *e = root->child; e; e = e->next)
        if (!in_list(e->string ? e->string : "", allowed))
            return srv_fail(err, en, "unknown field '%.64s' (not supported by tern; docs/server.md lists the accepted fields)",
                        e->string ? e->string : "");
    return 0;
}

/* Copy root[from] to out[to] when present. */
static void copy(cJSON *out, const cJSON *root, const char *from, const char *to) {
    const cJSON *v = get(root, from);
    if (v) cJSON_AddItemToObject(out, to, cJSON_Duplicate(v, true));
}

/* Text of a content value that is a string or an array of {type: one of types, text} blocks
 * (joined with "\n"); malloc'd, NULL with err on anything else. */
static char *block_text(const cJSON *c, const char *const *types, const char *what, char *err, size_t en) {
    if (cJSON_IsString(c)) return strdup(c->valuestring);
    if (!cJSON_IsArray(c)) { srv_fail(err, en, "%s must be a string or an array of text blocks", what); return NULL; }
    tern_str s = {0};
    tern_str_append(&s, "", 0);
    for (const cJSON *b = c->child; b; b = b->next) {
        const cJSON *t = get(b, "type"), *x = get(b, "text");
        if (!cJSON_IsString(t) || !in_list(t->valuestring, types) || !cJSON_IsString(x)) {
            srv_fail(err, en, "%s: only text blocks are supported here (got type '%.32s')", what,
                 cJSON_IsString(t) ? t->valuestring : "?");
            tern_str_free(&s);
            return NULL;
        }
        if (s.len) tern_str_append(&s, "\n", 1);
        tern_str_append(&s, x->valuestring, strlen(x->valuestring));
    }
    return s.data;
}

static cJSON *msg(const char *role, char *content) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", content ? content : "");
    free(content);
    return m;
}

/* ------------------------------------------------------------------ requests */

static const char *const A_FIELDS[] = {"model", "messages", "system", "max_tokens", "stop_sequences", "temperature",
                                       "top_p", "top_k", "stream", "tools", "tool_choice", "metadata", "service_tier",
                                       "thinking", NULL};
static const char *const TEXT_T[] = {"text", NULL};

/* An Anthropic tool_use / tool_result-bearing message -> chat messages appended to arr. */
static int anthropic_message(const cJSON *m, int i, cJSON *arr, char *err, size_t en) {
    const cJSON *role = get(m, "role"), *c = get(m, "content");
    char what[48];
    snprintf(what, sizeof what, "messages[%d].content", i);
    if (!cJSON_IsString(role) || (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant")))
        return srv_fail(err, en, "messages[%d].role must be \"user\" or \"assistant\"", i);
    bool asst = !strcmp(role->valuestring, "assistant");
    if (cJSON_IsString(c)) { cJSON_AddItemToArray(arr, msg(role->valuestring, strdup(c->valuestring))); return 0; }
    if (!cJSON_IsArray(c)) return srv_fail(err, en, "%s must be a string or an array of blocks", what);
    tern_str text = {0}, think = {0};
    tern_str_append(&text, "", 0);
    tern_str_append(&think, "", 0);
    cJSON *calls = cJSON_CreateArray();
    int rc = 0;
    for (const cJSON *b = c->child; b && !rc; b = b->next) {
        const cJSON *t = get(b, "type");
        const char *ty = cJSON_IsString(t) ? t->valuestring : "";
        if (!strcmp(ty, "text") && cJSON_IsString(get(b, "text"))) {
            if (text.len) tern_str_append(&text, "\n", 1);
            tern_str_append(&text, get(b, "text")->valuestring, strlen(get(b, "text")->valuestring));
        } else if (asst && !strcmp(ty, "thinking") && cJSON_IsString(get(b, "thinking"))) {
            tern_str_append(&think, get(b, "thinking")->valuestring, strlen(get(b, "thinking")->valuestring));
        } else if (asst && !strcmp(ty, "tool_use") && cJSON_IsString(get(b, "name"))) {
            cJSON *call = cJSON_CreateObject(), *fn = cJSON_AddObjectToObject(call, "function");
            cJSON_AddStringToObject(call, "type", "function");
            cJSON_AddStringToObject(fn, "name", get(b, "name")->valuestring);
            const cJSON *in = get(b, "input");
            char *a = in ? cJSON_PrintUnformatted(in) : strdup("{}");
            cJSON_AddStringToObject(fn, "arguments", a ? a : "{}");
            free(a);
            cJSON_AddItemToArray(calls, call);
        } else if (!asst && !strcmp(ty, "tool_result")) {
            const cJSON *rc_ = get(b, "content");
            char *r = rc_ ? block_text(rc_, TEXT_T, what, err, en) : strdup("");
            if (!r) { rc = 400; break; }
            cJSON_AddItemToArray(arr, msg("tool", r));
        } else {
            rc = srv_fail(err, en, "%s: block type '%.32s' is not supported (text%s)", what, ty,
                      asst ? ", thinking, tool_use" : ", tool_result");
        }
    }
    if (!rc && (text.len || think.len || cJSON_GetArraySize(calls) || !cJSON_GetArraySize(arr))) {
        cJSON *o = msg(role->valuestring, strdup(text.data));
        if (think.len) cJSON_AddStringToObject(o, "reasoning_content", think.data);
        if (cJSON_GetArraySize(calls)) { cJSON_AddItemToObject(o, "tool_calls", calls); calls = NULL; }
        cJSON_AddItemToArray(arr, o);
    }
    cJSON_Delete(calls);
    tern_str_free(&text);
    tern_str_free(&think);
    return rc;
}

static int from_anthropic(const cJSON *root, cJSON *out, char *err, size_t en) {
    int rc = check_fields(root, A_FIELDS, err, en);
    if (rc) return rc;
    if (!get(root, "max_tokens")) return srv_fail(err, en, "'max_tokens' is required");
    const cJSON *ms = get(root, "messages");
    if (!cJSON_IsArray(ms) || !ms->child) return srv_fail(err, en, "'messages' must be a non-empty array");
    cJSON *arr = cJSON_AddArrayToObject(out, "messages");
    const cJSON *sys = get(root, "system");
    if (sys) {
        char *s = block_text(sys, TEXT_T, "'system'", err, en);
        if (!s) return 400;
        cJSON_AddItemToArray(arr, msg("system", s));
    }
    int i = 0;
    for (const cJSON *m = ms->child; m; m = m->next, i++)
        if ((rc = anthropic_message(m, i, arr, err, en))) return rc;
    copy(out, root, "max_tokens", "max_tokens");
    copy(out, root, "stop_sequences", "stop");
    copy(out, root, "temperature", "temperature");
    copy(out, root, "top_p", "top_p");
    copy(out, root, "top_k", "top_k");
    copy(out, root, "stream", "stream");
    const cJSON *th = get(root, "thinking"), *tt = th ? get(th, "type") : NULL;
    if (th) {
        if (!cJSON_IsString(tt) || (strcmp(tt->valuestring, "enabled") && strcmp(tt->valuestring, "disabled")))
            return srv_fail(err, en, "'thinking.type' must be \"enabled\" or \"disabled\"");
        cJSON_AddBoolToObject(out, "enable_thinking", !strcmp(tt->valuestring, "enabled"));
    }
    const cJSON *tools = get(root, "tools");
    if (tools) {
        if (!cJSON_IsArray(tools)) return srv_fail(err, en, "'tools' must be an array");
        cJSON *ta = cJSON_AddArrayToObject(out, "tools");
        for (const cJSON *t = tools->child; t; t = t->next) {
            const cJSON *nm = get(t, "name");
            if (!cJSON_IsString(nm)) return srv_fail(err, en, "every tool needs a string 'name'");
            cJSON *o = cJSON_CreateObject(), *fn = cJSON_AddObjectToObject(o, "function");
            cJSON_AddStringToObject(o, "type", "function");
            cJSON_AddStringToObject(fn, "name", nm->valuestring);
            copy(fn, t, "description", "description");
            copy(fn, t, "input_schema", "parameters");
            cJSON_AddItemToArray(ta, o);
        }
    }
    const cJSON *tc = get(root, "tool_choice");
    if (tc) {
        const cJSON *ty = get(tc, "type");
        const char *t = cJSON_IsString(ty) ? ty->valuestring : "";
        if (!strcmp(t, "auto")) cJSON_AddStringToObject(out, "tool_choice", "auto");
        else if (!strcmp(t, "any")) cJSON_AddStringToObject(out, "tool_choice", "required");
        else if (!strcmp(t, "none")) cJSON_AddStringToObject(out, "tool_choice", "none");
        else if (!strcmp(t, "tool") && cJSON_IsString(get(tc, "name"))) {
            cJSON *o = cJSON_AddObjectToObject(out, "tool_choice"), *fn;
            cJSON_AddStringToObject(o, "type", "function");
            fn = cJSON_AddObjectToObject(o, "function");
            cJSON_AddStringToObject(fn, "name", get(tc, "name")->valuestring);
        } else {
            return srv_fail(err, en, "'tool_choice' must be {type: auto | any | none | tool (with name)}");
        }
    }
    return 0;
}

static const char *const R_FIELDS[] = {"model", "input", "instructions", "max_output_tokens", "temperature", "top_p",
                                       "stream", "tools", "tool_choice", "text", "store", "metadata", "user",
                                       "parallel_tool_calls", "service_tier", "truncation", NULL};
static const char *const IN_T[] = {"input_text", "output_text", "text", NULL};

static int from_responses(const cJSON *root, cJSON *out, char *err, size_t en) {
    int rc = check_fields(root, R_FIELDS, err, en);
    if (rc) return rc;
    const cJSON *tr = get(root, "truncation");
    if (tr && !(cJSON_IsString(tr) && !strcmp(tr->valuestring, "disabled")))
        return srv_fail(err, en, "'truncation' must be \"disabled\" (prompts are never cut)");
    cJSON *arr = cJSON_AddArrayToObject(out, "messages");
    const cJSON *ins = get(root, "instructions");
    if (ins) {
        if (!cJSON_IsString(ins)) return srv_fail(err, en, "'instructions' must be a string");
        cJSON_AddItemToArray(arr, msg("system", strdup(ins->valuestring)));
    }
    const cJSON *in = get(root, "input");
    if (!in) return srv_fail(err, en, "'input' is required");
    if (cJSON_IsString(in)) {
        cJSON_AddItemToArray(arr, msg("user", strdup(in->valuestring)));
    } else if (cJSON_IsArray(in) && in->child) {
        int i = 0;
        for (const cJSON *m = in->child; m; m = m->next, i++) {
            const cJSON *ty = get(m, "type"), *role = get(m, "role");
            char what[40];
            snprintf(what, sizeof what, "input[%d].content", i);
            if (ty && !(cJSON_IsString(ty) && !strcmp(ty->valuestring, "message")))
                return srv_fail(err, en, "input[%d]: item type '%.32s' is not supported (messages only)", i,
                            cJSON_IsString(ty) ? ty->valuestring : "?");
            if (!cJSON_IsString(role) || (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant") &&
                                          strcmp(role->valuestring, "system") && strcmp(role->valuestring, "developer")))
                return srv_fail(err, en, "input[%d].role must be user, assistant, system or developer", i);
            char *t = block_text(get(m, "content"), IN_T, what, err, en);
            if (!t) return 400;
            cJSON_AddItemToArray(arr, msg(role->valuestring, t));
        }
    } else {
        return srv_fail(err, en, "'input' must be a string or a non-empty array of messages");
    }
    copy(out, root, "max_output_tokens", "max_tokens");
    copy(out, root, "temperature", "temperature");
    copy(out, root, "top_p", "top_p");
    copy(out, root, "stream", "stream");
    copy(out, root, "parallel_tool_calls", "parallel_tool_calls");
    const cJSON *tools = get(root, "tools");
    if (tools) {
        if (!cJSON_IsArray(tools)) return srv_fail(err, en, "'tools' must be an array");
        cJSON *ta = cJSON_AddArrayToObject(out, "tools");
        for (const cJSON *t = tools->child; t; t = t->next) {
            const cJSON *ty = get(t, "type"), *nm = get(t, "name");
            if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "function") || !cJSON_IsString(nm))
                return srv_fail(err, en, "only {type: \"function\", name, parameters} tools are supported");
            cJSON *o = cJSON_CreateObject(), *fn = cJSON_AddObjectToObject(o, "function");
            cJSON_AddStringToObject(o, "type", "function");
            cJSON_AddStringToObject(fn, "name", nm->valuestring);
            copy(fn, t, "description", "description");
            copy(fn, t, "parameters", "parameters");
            cJSON_AddItemToArray(ta, o);
        }
    }
    const cJSON *tc = get(root, "tool_choice");
    if (tc) {
        if (cJSON_IsString(tc)) cJSON_AddStringToObject(out, "tool_choice", tc->valuestring);
        else if (cJSON_IsString(get(tc, "name"))) {
            cJSON *o = cJSON_AddObjectToObject(out, "tool_choice"), *fn;
            cJSON_AddStringToObject(o, "type", "function");
            fn = cJSON_AddObjectToObject(o, "function");
            cJSON_AddStringToObject(fn, "name", get(tc, "name")->valuestring);
        } else {
            return srv_fail(err, en, "'tool_choice' must be a string or {type: \"function\", name}");
        }
    }
    const cJSON *tx = get(root, "text"), *fmt = tx ? get(tx, "format") : NULL;
    if (tx && !cJSON_IsObject(tx)) return srv_fail(err, en, "'text' must be an object");
    if (fmt) {
        const cJSON *ty = get(fmt, "type");
        const char *t = cJSON_IsString(ty) ? ty->valuestring : "";
        cJSON *rf = cJSON_AddObjectToObject(out, "response_format");
        cJSON_AddStringToObject(rf, "type", t);
        if (!strcmp(t, "json_schema")) {
            cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
            copy(js, fmt, "name", "name");
            copy(js, fmt, "schema", "schema");
            copy(js, fmt, "strict", "strict");
        }
    }
    return 0;
}

int srv_compat_request(srv_api api, const char *body, size_t len, char **out, char *err, size_t en) {
    *out = NULL;
    size_t bad_at = 0;
    cJSON *root = srv_json_parse_whole(body, len, &bad_at);
    if (!root && bad_at) return srv_fail(err, en, "the body has more after its JSON value (at byte %zu)", bad_at);
    if (!root) return srv_fail(err, en, "the body is not valid JSON");
    if (!cJSON_IsObject(root)) { cJSON_Delete(root); return srv_fail(err, en, "the body must be a JSON object"); }
    cJSON *o = cJSON_CreateObject();
    int rc = api == SRV_API_ANTHROPIC ? from_anthropic(root, o, err, en) : from_responses(root, o, err, en);
    if (!rc && !(*out = cJSON_PrintUnformatted(o))) rc = srv_fail(err, en, "out of memory");
    cJSON_Delete(o);
    cJSON_Delete(root);
    return rc;
}

/* ------------------------------------------------------------------ replies */

static const char *anthropic_stop(const char *finish) {
    if (!finish) return "end_turn";
    if (!strcmp(finish, "length")) return "max_tokens";
    if (!strcmp(finish, "tool_calls")) return "tool_use";
    return "end_turn";
}

static cJSON *tool_input(const char *args) {
    cJSON *in = args ? cJSON_Parse(args) : NULL;
    if (!cJSON_IsObject(in)) { cJSON_Delete(in); in = cJSON_CreateObject(); }
    return in;
}

static char *anthropic_reply(const cJSON *oa, const char *id) {
    const cJSON *ch = cJSON_GetArrayItem(get(oa, "choices"), 0), *m = get(ch, "message"), *us = get(oa, "usage");
    cJSON *o = cJSON_CreateObject(), *content;
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "type", "message");
    cJSON_AddStringToObject(o, "role", "assistant");
    copy(o, oa, "model", "model");
    content = cJSON_AddArrayToObject(o, "content");
    const cJSON *r = get(m, "reasoning_content"), *c = get(m, "content"), *tc = get(m, "tool_calls");
    if (cJSON_IsString(r) && r->valuestring[0]) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "thinking");
        cJSON_AddStringToObject(b, "thinking", r->valuestring);
        cJSON_AddStringToObject(b, "signature", "");
        cJSON_AddItemToArray(content, b);
    }
    if (cJSON_IsString(c) && (c->valuestring[0] || !tc)) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "text");
        cJSON_AddStringToObject(b, "text", c->valuestring);
        cJSON_AddItemToArray(content, b);
    }
    for (const cJSON *t = tc ? tc->child : NULL; t; t = t->next) {
        const cJSON *fn = get(t, "function");
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "tool_use");
        copy(b, t, "id", "id");
        copy(b, fn, "name", "name");
        cJSON_AddItemToObject(b, "input", tool_input(cJSON_GetStringValue(get(fn, "arguments"))));
        cJSON_AddItemToArray(content, b);
    }
    cJSON_AddStringToObject(o, "stop_reason", anthropic_stop(cJSON_GetStringValue(get(ch, "finish_reason"))));
    cJSON_AddNullToObject(o, "stop_sequence");
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "input_tokens", num(us, "prompt_tokens"));
    cJSON_AddNumberToObject(u, "output_tokens", num(us, "completion_tokens"));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* The Responses "output" items of a chat message (reasoning, message, function calls). */
static cJSON *responses_output(const cJSON *m, const char *id, const char *status) {
    cJSON *out = cJSON_CreateArray();
    char iid[96];
    const cJSON *r = get(m, "reasoning_content"), *c = get(m, "content"), *tc = get(m, "tool_calls");
    if (cJSON_IsString(r) && r->valuestring[0]) {
        cJSON *it = cJSON_CreateObject(), *ca, *p;
        snprintf(iid, sizeof iid, "rs_%s", id);
        cJSON_AddStringToObject(it, "type", "reasoning");
        cJSON_AddStringToObject(it, "id", iid);
        cJSON_AddArrayToObject(it, "summary");
        ca = cJSON_AddArrayToObject(it, "content");
        p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "type", "reasoning_text");
        cJSON_AddStringToObject(p, "text", r->valuestring);
        cJSON_AddItemToArray(ca, p);
        cJSON_AddItemToArray(out, it);
    }
    if (!tc || (cJSON_IsString(c) && c->valuestring[0])) {
        cJSON *it = cJSON_CreateObject(), *ca, *p;
        snprintf(iid, sizeof iid, "msg_%s", id);
        cJSON_AddStringToObject(it, "type", "message");
        cJSON_AddStringToObject(it, "id", iid);
        cJSON_AddStringToObject(it, "status", status);
        cJSON_AddStringToObject(it, "role", "assistant");
        ca = cJSON_AddArrayToObject(it, "content");
        p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "type", "output_text");
        cJSON_AddStringToObject(p, "text", cJSON_IsString(c) ? c->valuestring : "");
        cJSON_AddArrayToObject(p, "annotations");
        cJSON_AddItemToArray(ca, p);
        cJSON_AddItemToArray(out, it);
    }
    int k = 0;
    for (const cJSON *t = tc ? tc->child : NULL; t; t = t->next, k++) {
        const cJSON *fn = get(t, "function");
        cJSON *it = cJSON_CreateObject();
        snprintf(iid, sizeof iid, "fc_%s_%d", id, k);
        cJSON_AddStringToObject(it, "type", "function_call");
        cJSON_AddStringToObject(it, "id", iid);
        copy(it, t, "id", "call_id");
        copy(it, fn, "name", "name");
        copy(it, fn, "arguments", "arguments");
        cJSON_AddStringToObject(it, "status", "completed");
        cJSON_AddItemToArray(out, it);
    }
    return out;
}

static cJSON *responses_object(const char *id, const cJSON *oa, cJSON *output, const char *status,
                               const char *finish) {
    cJSON *o = cJSON_CreateObject();
    char rid[80];
    snprintf(rid, sizeof rid, "resp_%s", id);
    cJSON_AddStringToObject(o, "id", rid);
    cJSON_AddStringToObject(o, "object", "response");
    cJSON_AddNumberToObject(o, "created_at", num(oa, "created"));
    cJSON_AddStringToObject(o, "status", status);
    copy(o, oa, "model", "model");
    if (finish && !strcmp(finish, "length")) {
        cJSON *d = cJSON_AddObjectToObject(o, "incomplete_details");
        cJSON_AddStringToObject(d, "reason", "max_output_tokens");
    } else {
        cJSON_AddNullToObject(o, "incomplete_details");
    }
    cJSON_AddNullToObject(o, "error");
    cJSON_AddItemToObject(o, "output", output ? output : cJSON_CreateArray());
    const cJSON *us = get(oa, "usage");
    if (us) {
        cJSON *u = cJSON_AddObjectToObject(o, "usage");
        double in = num(us, "prompt_tokens"), out = num(us, "completion_tokens");
        cJSON_AddNumberToObject(u, "input_tokens", in);
        cJSON_AddNumberToObject(u, "output_tokens", out);
        cJSON_AddNumberToObject(u, "total_tokens", in + out);
    }
    return o;
}

static const char *native_stop_type(const char *finish) {
    if (!finish) return "none";
    if (!strcmp(finish, "length")) return "limit";
    return "eos";
}

/* One native /completion result from an OpenAI completion choice. */
static cJSON *native_result(const cJSON *oa, const cJSON *ch, bool final, int index) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", index);
    copy(o, ch, "text", "content");
    if (!get(o, "content")) cJSON_AddStringToObject(o, "content", "");
    cJSON_AddNumberToObject(o, "id_slot", 0);
    cJSON_AddBoolToObject(o, "stop", final);
    const cJSON *lp = get(ch, "logprobs"), *lc = lp ? get(lp, "content") : NULL;
    if (lc) cJSON_AddItemToObject(o, "completion_probabilities", cJSON_Duplicate(lc, true));
    if (final) {
        copy(o, oa, "model", "model");
        const cJSON *us = get(oa, "usage"), *tm = get(oa, "timings");
        const char *fr = cJSON_GetStringValue(get(ch, "finish_reason"));
        cJSON_AddNumberToObject(o, "tokens_predicted", num(us, "completion_tokens"));
        cJSON_AddNumberToObject(o, "tokens_evaluated", num(us, "prompt_tokens"));
        cJSON_AddNumberToObject(o, "tokens_cached", num(tm, "cache_n"));
        cJSON_AddBoolToObject(o, "truncated", false);
        cJSON_AddStringToObject(o, "stop_type", native_stop_type(fr));
        cJSON_AddStringToObject(o, "stopping_word", "");
        if (tm) cJSON_AddItemToObject(o, "timings", cJSON_Duplicate(tm, true));
    }
    return o;
}

char *srv_compat_reply(srv_api api, const char *openai_body, const char *id) {
    cJSON *oa = cJSON_Parse(openai_body);
    if (!oa) return NULL;
    char *s = NULL;
    if (api == SRV_API_ANTHROPIC) {
        s = anthropic_reply(oa, id);
    } else if (api == SRV_API_RESPONSES) {
        const cJSON *ch = cJSON_GetArrayItem(get(oa, "choices"), 0);
        const char *fr = cJSON_GetStringValue(get(ch, "finish_reason"));
        bool incomplete = fr && !strcmp(fr, "length");
        cJSON *o = responses_object(id, oa, responses_output(get(ch, "message"), id, incomplete ? "incomplete" : "completed"),
                                    incomplete ? "incomplete" : "completed", fr);
        s = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
    } else {
        const cJSON *chs = get(oa, "choices");
        int n = cJSON_GetArraySize(chs);
        cJSON *o;
        if (n == 1) o = native_result(oa, chs->child, true, 0);
        else {
            o = cJSON_CreateArray();
            int k = 0;
            for (const cJSON *c = chs ? chs->child : NULL; c; c = c->next, k++)
                cJSON_AddItemToArray(o, native_result(oa, c, true, k));
        }
        s = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
    }
    cJSON_Delete(oa);
    return s;
}

char *srv_compat_error(srv_api api, int status, const char *message) {
    if (api != SRV_API_ANTHROPIC) return srv_json_error(status, message);
    cJSON *o = cJSON_CreateObject(), *e;
    cJSON_AddStringToObject(o, "type", "error");
    e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "type", status == 401 ? "authentication_error" : status == 404 ? "not_found_error"
                                       : status == 413 ? "request_too_large" : status == 503 ? "overloaded_error"
                                       : status >= 500 ? "api_error" : "invalid_request_error");
    cJSON_AddStringToObject(e, "message", message ? message : "");
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* ---------------------------------------------------------------- streaming */

static void event(tern_str *out, const char *name, cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) return;
    if (name) {
        tern_str_append(out, "event: ", 7);
        tern_str_append(out, name, strlen(name));
        tern_str_append(out, "\n", 1);
    }
    tern_str_append(out, "data: ", 6);
    tern_str_append(out, s, strlen(s));
    tern_str_append(out, "\n\n", 2);
    free(s);
}

static cJSON *typed(const char *type) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

/* Anthropic: close the open block (if any). */
static void a_close(srv_compat_stream *st, tern_str *out) {
    if (!st->block) return;
    cJSON *o = typed("content_block_stop");
    cJSON_AddNumberToObject(o, "index", st->index);
    event(out, "content_block_stop", o);
    st->index++;
    st->block = 0;
}

/* Anthropic: a text (1) or thinking (2) delta, opening its block when needed. */
static void a_delta(srv_compat_stream *st, int kind, const char *text, tern_str *out) {
    if (st->block != kind) {
        a_close(st, out);
        cJSON *o = typed("content_block_start"), *b;
        cJSON_AddNumberToObject(o, "index", st->index);
        b = cJSON_AddObjectToObject(o, "content_block");
        cJSON_AddStringToObject(b, "type", kind == 1 ? "text" : "thinking");
        cJSON_AddStringToObject(b, kind == 1 ? "text" : "thinking", "");
        event(out, "content_block_start", o);
        st->block = kind;
    }
    cJSON *o = typed("content_block_delta"), *d;
    cJSON_AddNumberToObject(o, "index", st->index);
    d = cJSON_AddObjectToObject(o, "delta");
    cJSON_AddStringToObject(d, "type", kind == 1 ? "text_delta" : "thinking_delta");
    cJSON_AddStringToObject(d, kind == 1 ? "text" : "thinking", text);
    event(out, "content_block_delta", o);
}

static void r_event(srv_compat_stream *st, const char *type, cJSON *o, tern_str *out) {
    cJSON_AddStringToObject(o, "type", type);
    cJSON_AddNumberToObject(o, "sequence_number", st->seq++);
    event(out, type, o);
}

static cJSON *r_item_head(srv_compat_stream *st, const char *type) {
    cJSON *o = cJSON_CreateObject();
    char iid[96];
    snprintf(iid, sizeof iid, "msg_%s", st->id);
    cJSON_AddStringToObject(o, "item_id", iid);
    cJSON_AddNumberToObject(o, "output_index", 0);
    if (type) cJSON_AddNumberToObject(o, "content_index", 0);
    return o;
}

static void r_start(srv_compat_stream *st, const cJSON *chunk, tern_str *out) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "response", responses_object(st->id, chunk, NULL, "in_progress", NULL));
    r_event(st, "response.created", o, out);
    o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "response", responses_object(st->id, chunk, NULL, "in_progress", NULL));
    r_event(st, "response.in_progress", o, out);
    o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "output_index", 0);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON *it = responses_output(m, st->id, "in_progress");
    cJSON_Delete(m);
    cJSON *item = cJSON_DetachItemFromArray(it, 0);
    cJSON_Delete(it);
    cJSON_ReplaceItemInObjectCaseSensitive(item, "content", cJSON_CreateArray());
    cJSON_AddItemToObject(o, "item", item);
    r_event(st, "response.output_item.added", o, out);
    o = r_item_head(st, "part");
    cJSON *p = cJSON_AddObjectToObject(o, "part");
    cJSON_AddStringToObject(p, "type", "output_text");
    cJSON_AddStringToObject(p, "text", "");
    cJSON_AddArrayToObject(p, "annotations");
    r_event(st, "response.content_part.added", o, out);
}

void srv_compat_stream_init(srv_compat_stream *st, srv_api api, const char *id, size_t n_prompt) {
    memset(st, 0, sizeof *st);
    st->api = api;
    snprintf(st->id, sizeof st->id, "%s", id);
    st->n_prompt = n_prompt;
    tern_str_append(&st->text, "", 0);
    tern_str_append(&st->reasoning, "", 0);
}

void srv_compat_stream_free(srv_compat_stream *st) {
    tern_str_free(&st->text);
    tern_str_free(&st->reasoning);
    cJSON_Delete(st->calls);
    free(st->finish);
    free(st->model);
}

/* One OpenAI SSE chunk (its JSON) -> the API's events. */
void srv_compat_stream_chunk(srv_compat_stream *st, const char *chunk_json, tern_str *out) {
    cJSON *c = cJSON_Parse(chunk_json);
    if (!c) return;
    if (!st->started) {
        st->started = true;
        st->created = num(c, "created");
        const char *md = cJSON_GetStringValue(get(c, "model"));
        st->model = strdup(md ? md : "");
        if (st->api == SRV_API_ANTHROPIC) {
            cJSON *o = typed("message_start"), *m = cJSON_AddObjectToObject(o, "message"), *u;
            cJSON_AddStringToObject(m, "id", st->id);
            cJSON_AddStringToObject(m, "type", "message");
            cJSON_AddStringToObject(m, "role", "assistant");
            cJSON_AddArrayToObject(m, "content");
            cJSON_AddStringToObject(m, "model", st->model);
            cJSON_AddNullToObject(m, "stop_reason");
            cJSON_AddNullToObject(m, "stop_sequence");
            u = cJSON_AddObjectToObject(m, "usage");
            cJSON_AddNumberToObject(u, "input_tokens", (double)st->n_prompt);
            cJSON_AddNumberToObject(u, "output_tokens", 0);
            event(out, "message_start", o);
        } else if (st->api == SRV_API_RESPONSES) {
            r_start(st, c, out);
        }
    }
    const cJSON *us = get(c, "usage");
    if (us) {
        st->n_prompt = (size_t)num(us, "prompt_tokens");
        st->n_gen = (size_t)num(us, "completion_tokens");
        st->usage_seen = true;
    }
    const cJSON *ch = cJSON_GetArrayItem(get(c, "choices"), 0);
    if (st->api == SRV_API_NATIVE) {
        if (ch && !get(ch, "finish_reason")) event(out, NULL, native_result(c, ch, false, (int)num(ch, "index")));
        else if (ch) { free(st->finish); st->finish = strdup(cJSON_GetStringValue(get(ch, "finish_reason"))); }
        cJSON_Delete(c);
        return;
    }
    const cJSON *d = ch ? get(ch, "delta") : NULL;
    const char *txt = cJSON_GetStringValue(get(d, "content")), *rea = cJSON_GetStringValue(get(d, "reasoning_content"));
    const cJSON *tc = get(d, "tool_calls");
    if (rea && *rea) {
        tern_str_append(&st->reasoning, rea, strlen(rea));
        if (st->api == SRV_API_ANTHROPIC) a_delta(st, 2, rea, out);
    }
    if (txt && *txt) {
        tern_str_append(&st->text, txt, strlen(txt));
        if (st->api == SRV_API_ANTHROPIC) a_delta(st, 1, txt, out);
        else {
            cJSON *o = r_item_head(st, "delta");
            cJSON_AddStringToObject(o, "delta", txt);
            r_event(st, "response.output_text.delta", o, out);
        }
    }
    if (tc) {
        if (!st->calls) st->calls = cJSON_CreateArray();
        for (const cJSON *t = tc->child; t; t = t->next) cJSON_AddItemToArray(st->calls, cJSON_Duplicate(t, true));
    }
    const char *fr = ch ? cJSON_GetStringValue(get(ch, "finish_reason")) : NULL;
    if (fr) { free(st->finish); st->finish = strdup(fr); }
    cJSON_Delete(c);
}

/* The end of the stream (in place of "data: [DONE]"). */
void srv_compat_stream_end(srv_compat_stream *st, tern_str *out) {
    if (st->api == SRV_API_NATIVE) {
        cJSON *oa = cJSON_CreateObject(), *ch = cJSON_CreateObject(), *u = cJSON_AddObjectToObject(oa, "usage");
        cJSON_AddStringToObject(oa, "model", st->model ? st->model : "");
        cJSON_AddNumberToObject(u, "prompt_tokens", (double)st->n_prompt);
        cJSON_AddNumberToObject(u, "completion_tokens", (double)st->n_gen);
        cJSON_AddStringToObject(ch, "text", "");
        if (st->finish) cJSON_AddStringToObject(ch, "finish_reason", st->finish);
        event(out, NULL, native_result(oa, ch, true, 0));
        cJSON_Delete(ch);
        cJSON_Delete(oa);
        return;
    }
    if (st->api == SRV_API_ANTHROPIC) {
        for (const cJSON *t = st->calls ? st->calls->child : NULL; t; t = t->next) {
            a_close(st, out);
            const cJSON *fn = get(t, "function");
            cJSON *o = typed("content_block_start"), *b;
            cJSON_AddNumberToObject(o, "index", st->index);
            b = cJSON_AddObjectToObject(o, "content_block");
            cJSON_AddStringToObject(b, "type", "tool_use");
            copy(b, t, "id", "id");
            copy(b, fn, "name", "name");
            cJSON_AddItemToObject(b, "input", cJSON_CreateObject());
            event(out, "content_block_start", o);
            st->block = 3;
            o = typed("content_block_delta");
            cJSON_AddNumberToObject(o, "index", st->index);
            b = cJSON_AddObjectToObject(o, "delta");
            cJSON_AddStringToObject(b, "type", "input_json_delta");
            const char *a = cJSON_GetStringValue(get(fn, "arguments"));
            cJSON_AddStringToObject(b, "partial_json", a ? a : "{}");
            event(out, "content_block_delta", o);
        }
        if (!st->block && !st->index) a_delta(st, 1, "", out);  /* at least one (empty) text block */
        a_close(st, out);
        cJSON *o = typed("message_delta"), *d = cJSON_AddObjectToObject(o, "delta"), *u;
        cJSON_AddStringToObject(d, "stop_reason", anthropic_stop(st->finish));
        cJSON_AddNullToObject(d, "stop_sequence");
        u = cJSON_AddObjectToObject(o, "usage");
        cJSON_AddNumberToObject(u, "output_tokens", (double)st->n_gen);
        event(out, "message_delta", o);
        event(out, "message_stop", typed("message_stop"));
        return;
    }
    /* Responses */
    cJSON *o = r_item_head(st, "done");
    cJSON_AddStringToObject(o, "text", st->text.data);
    r_event(st, "response.output_text.done", o, out);
    o = r_item_head(st, "part");
    cJSON *p = cJSON_AddObjectToObject(o, "part");
    cJSON_AddStringToObject(p, "type", "output_text");
    cJSON_AddStringToObject(p, "text", st->text.data);
    cJSON_AddArrayToObject(p, "annotations");
    r_event(st, "response.content_part.done", o, out);
    bool incomplete = st->finish && !strcmp(st->finish, "length");
    cJSON *oa = cJSON_CreateObject(), *m = cJSON_CreateObject(), *u = cJSON_AddObjectToObject(oa, "usage");
    cJSON_AddNumberToObject(oa, "created", st->created);
    cJSON_AddStringToObject(oa, "model", st->model ? st->model : "");
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)st->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)st->n_gen);
    cJSON_AddStringToObject(m, "content", st->text.data);
    if (st->reasoning.len) cJSON_AddStringToObject(m, "reasoning_content", st->reasoning.data);
    if (st->calls) cJSON_AddItemToObject(m, "tool_calls", cJSON_Duplicate(st->calls, true));
    cJSON *output = responses_output(m, st->id, incomplete ? "incomplete" : "completed");
    cJSON *msgitem = NULL;
    for (cJSON *it = output->child; it; it = it->next)
        if (cJSON_IsString(get(it, "type")) && !strcmp(get(it, "type")->valuestring, "message")) msgitem = it;
    o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "output_index", 0);
    cJSON_AddItemToObject(o, "item", msgitem ? cJSON_Duplicate(msgitem, true) : cJSON_CreateObject());
    r_event(st, "response.output_item.done", o, out);
    o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "response", responses_object(st->id, oa, output, incomplete ? "incomplete" : "completed",
                                                          st->finish));
    r_event(st, incomplete ? "response.incomplete" : "response.completed", o, out);
    cJSON_Delete(m);
    cJSON_Delete(oa);
}

/* An error mid-stream, in the API's shape. */
void srv_compat_stream_error(srv_compat_stream *st, const char *message, tern_str *out) {
    if (st->api == SRV_API_ANTHROPIC) {
        cJSON *o = typed("error"), *e = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(e, "type", "api_error");
        cJSON_AddStringToObject(e, "message", message);
        event(out, "error", o);
    } else if (st->api == SRV_API_RESPONSES) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "code", "server_error");
        cJSON_AddStringToObject(o, "message", message);
        r_event(st, "error", o, out);
    } else {
        char *e = srv_json_error(500, message);
        if (e) {
            tern_str_append(out, "data: ", 6);
            tern_str_append(out, e, strlen(e));
            tern_str_append(out, "\n\n", 2);
            free(e);
        }
    }
}
