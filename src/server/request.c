/*
 * request.c - the request side of `tern serve` that needs neither a socket nor
 * a model, so it can be unit-tested and fuzzed: the JSON body of
 * /v1/chat/completions and /v1/completions -> srv_request (every field
 * type- and range-checked, every count bounded), the OpenAI response objects,
 * SSE chunks and error bodies, and the front door's verdict on the first bytes
 * of a connection (the streaming reasoning/content splitter is in split.c).
 *
 * Accepted fields (the allow-lists F_COMMON, F_CHAT, F_COMPLETION, F_NATIVE below; any
 * other field is a 400 "unknown field 'NAME'"):
 *   chat:        messages [{role, content: string | null | [{type:"text", text}],
 *                reasoning_content, tool_calls [{function:{name, arguments}}]}],
 *                tools, tool_choice, chat_template_kwargs.enable_thinking
 *                (or enable_thinking)
 *   completions: prompt (a string, token ids, or a list of either)
 *   llama.cpp:   n_predict, n_probs, typical_p, min_keep, top_n_sigma, xtc_*, dry_*,
 *                samplers, repeat_last_n; /infill: input_prefix, input_suffix
 *   both:        max_tokens | max_completion_tokens, temperature, top_p, top_k,
 *                min_p, presence_penalty, frequency_penalty, repetition_penalty
 *                (or repeat_penalty), seed, stop, n (1 only), stream,
 *                stream_options.include_usage, ignore_eos (llama.cpp's: the
 *                end-of-generation tokens are never sampled); logprobs / echo must be false.
 */
#include "server/server.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------- helpers */

int srv_fail(char *err, size_t n, const char *fmt, ...) {
    if (err && n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, n, fmt, ap);
        va_end(ap);
    }
    return 400;
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* A field that is absent or JSON null counts as not given. */
static const cJSON *field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* Number in [lo, hi]; *set = true when given. Returns 0 or 400. */
static int get_num(const cJSON *o, const char *key, double lo, double hi, bool integer, double *out, bool *set,
                   char *err, size_t en) {
    const cJSON *v = field(o, key);
    if (set) *set = false;
    if (!v) return 0;
    if (!cJSON_IsNumber(v)) return srv_fail(err, en, "'%s' must be a number", key);
    double d = v->valuedouble;
    if (!isfinite(d) || d < lo || d > hi)
        return srv_fail(err, en, "'%s' must be %s in [%g, %g]", key, integer ? "an integer" : "a number", lo, hi);
    if (integer && d != floor(d)) return srv_fail(err, en, "'%s' must be an integer", key);
    *out = d;
    if (set) *set = true;
    return 0;
}

static int get_bool(const cJSON *o, const char *key, bool *out, bool *set, char *err, size_t en) {
    const cJSON *v = field(o, key);
    if (set) *set = false;
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return srv_fail(err, en, "'%s' must be a boolean", key);
    *out = cJSON_IsTrue(v);
    if (set) *set = true;
    return 0;
}

/* Message content: a string, null, or an array of {type:"text", text} parts
 * (joined with "\n"). *out is malloc'd ("" for null). */
static int get_content(const cJSON *v, const char *what, char **out, char *err, size_t en) {
    *out = NULL;
    if (!v || cJSON_IsNull(v)) { *out = dup_n("", 0); return *out ? 0 : srv_fail(err, en, "out of memory"); }
    if (cJSON_IsString(v)) {
        *out = dup_n(v->valuestring, strlen(v->valuestring));
        return *out ? 0 : srv_fail(err, en, "out of memory");
    }
    if (!cJSON_IsArray(v)) return srv_fail(err, en, "%s must be a string, null or an array of text parts", what);
    tern_str s = {0};
    if (tern_str_append(&s, "", 0)) return srv_fail(err, en, "out of memory");
    int k = 0;
    for (const cJSON *p = v->child; p; p = p->next, k++) {
        const cJSON *ty = cJSON_IsObject(p) ? cJSON_GetObjectItemCaseSensitive(p, "type") : NULL;
        const cJSON *tx = cJSON_IsObject(p) ? cJSON_GetObjectItemCaseSensitive(p, "text") : NULL;
        if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "text") || !cJSON_IsString(tx)) {
            tern_str_free(&s);
            return srv_fail(err, en, "%s part %d: only {\"type\":\"text\",\"text\":...} parts are supported", what, k);
        }
        if ((s.len && tern_str_append(&s, "\n", 1)) || tern_str_append(&s, tx->valuestring, strlen(tx->valuestring))) {
            tern_str_free(&s);
            return srv_fail(err, en, "out of memory");
        }
    }
    *out = s.data;
    return 0;
}

/* ------------------------------------------------------------------ parser */

void srv_request_free(srv_request *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n_msgs; i++) {
        tern_chat_msg *m = &r->msgs[i];
        free((char *)m->role);
        free((char *)m->content);
        free((char *)m->reasoning_content);
        for (size_t k = 0; k < m->n_tool_calls; k++) {
            free((char *)m->tool_calls[k].name);
            free((char *)m->tool_calls[k].arguments);
        }
        free((void *)m->tool_calls);
    }
    free(r->msgs);
    free(r->tools_json);
    free(r->bias_ids);
    free(r->bias);
    free(r->prompt);
    for (size_t i = 0; i < r->n_prompts; i++) { free(r->prompts[i].text); free(r->prompts[i].ids); }
    free(r->prompts);
    for (size_t i = 0; i < r->n_dry_breakers; i++) free(r->dry_breakers[i]);
    free(r->dry_breakers);
    free(r->samplers);
    free(r->input_prefix);
    free(r->input_suffix);
    free(r->grammar);
    free(r->schema);
    free(r->tool_name);
    for (size_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    memset(r, 0, sizeof *r);
}

static int parse_tool_calls(const cJSON *tc, tern_chat_msg *m, int mi, char *err, size_t en) {
    if (!cJSON_IsArray(tc)) return srv_fail(err, en, "messages[%d].tool_calls must be an array", mi);
    int n = cJSON_GetArraySize(tc);
    if (n > SRV_MAX_TOOL_CALLS) return srv_fail(err, en, "messages[%d]: more than %d tool calls", mi, SRV_MAX_TOOL_CALLS);
    if (!n) return 0;
    tern_tool_call *calls = calloc((size_t)n, sizeof *calls);
    if (!calls) return srv_fail(err, en, "out of memory");
    m->tool_calls = calls;
    int k = 0;
    for (const cJSON *c = tc->child; c; c = c->next, k++) {
        const cJSON *fn = cJSON_IsObject(c) ? cJSON_GetObjectItemCaseSensitive(c, "function") : NULL;
        const cJSON *name = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
        const cJSON *args = cJSON_IsObject(fn) ? field(fn, "arguments") : NULL;
        if (!cJSON_IsString(name))
            return srv_fail(err, en, "messages[%d].tool_calls[%d].function.name must be a string", mi, k);
        char *a;
        if (!args) a = dup_n("{}", 2);
        else if (cJSON_IsString(args)) a = dup_n(args->valuestring, strlen(args->valuestring));
        else if (cJSON_IsObject(args)) a = cJSON_PrintUnformatted(args);
        else return srv_fail(err, en, "messages[%d].tool_calls[%d].function.arguments must be a string or an object", mi, k);
        calls[k].arguments = a;
        calls[k].name = dup_n(name->valuestring, strlen(name->valuestring));
        m->n_tool_calls = (size_t)k + 1;
        if (!a || !calls[k].name) return srv_fail(err, en, "out of memory");
    }
    return 0;
}

static int parse_messages(const cJSON *root, srv_request *r, char *err, size_t en) {
    const cJSON *ms = field(root, "messages");
    if (!ms) return srv_fail(err, en, "'messages' is required");
    if (!cJSON_IsArray(ms)) return srv_fail(err, en, "'messages' must be an array");
    int n = cJSON_GetArraySize(ms);
    if (n == 0) return srv_fail(err, en, "'messages' must not be empty");
    if (n > SRV_MAX_MESSAGES) return srv_fail(err, en, "'messages' has more than %d entries", SRV_MAX_MESSAGES);
    r->msgs = calloc((size_t)n, sizeof *r->msgs);
    if (!r->msgs) return srv_fail(err, en, "out of memory");
    int i = 0;
    for (const cJSON *m = ms->child; m; m = m->next, i++) {
        if (!cJSON_IsObject(m)) return srv_fail(err, en, "messages[%d] must be an object", i);
        tern_chat_msg *cm = &r->msgs[i];
        r->n_msgs = (size_t)i + 1;
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsString(role)) return srv_fail(err, en, "messages[%d].role must be a string", i);
        const char *rs = role->valuestring;
        if (!strcmp(rs, "developer")) rs = "system";
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") && strcmp(rs, "tool"))
            return srv_fail(err, en, "messages[%d].role must be system, developer, user, assistant or tool", i);
        if (!(cm->role = dup_n(rs, strlen(rs)))) return srv_fail(err, en, "out of memory");
        char what[48];
        snprintf(what, sizeof what, "messages[%d].content", i);
        char *content;
        int rc = get_content(cJSON_GetObjectItemCaseSensitive(m, "content"), what, &content, err, en);
        if (rc) return rc;
        cm->content = content;
        if (!strcmp(rs, "assistant")) {
            const cJSON *rc_ = field(m, "reasoning_content");
            if (rc_) {
                if (!cJSON_IsString(rc_)) return srv_fail(err, en, "messages[%d].reasoning_content must be a string", i);
                if (!(cm->reasoning_content = dup_n(rc_->valuestring, strlen(rc_->valuestring))))
                    return srv_fail(err, en, "out of memory");
            }
            const cJSON *tc = field(m, "tool_calls");
            if (tc && (rc = parse_tool_calls(tc, cm, i, err, en))) return rc;
        }
    }
    return 0;
}

static int parse_tools(const cJSON *root, srv_request *r, char *err, size_t en) {
    const cJSON *tools = field(root, "tools");
    const cJSON *choice = field(root, "tool_choice");
    bool none = false;
    const char *named = NULL;       /* tool_choice {"type":"function","function":{"name":...}} */
    bool required = false;
    if (choice) {
        if (cJSON_IsString(choice)) {
            const char *c = choice->valuestring;
            if (!strcmp(c, "none")) none = true;
            else if (!strcmp(c, "required")) required = true;
            else if (strcmp(c, "auto"))
                return srv_fail(err, en, "'tool_choice' must be \"none\", \"auto\", \"required\" or an object");
        } else if (cJSON_IsObject(choice)) {
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(choice, "function");
            const cJSON *nm = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
            if (!cJSON_IsString(nm)) return srv_fail(err, en, "'tool_choice.function.name' must be a string");
            named = nm->valuestring;
        } else {
            return srv_fail(err, en, "'tool_choice' must be \"none\", \"auto\", \"required\" or an object");
        }
    }
    if (tools && !cJSON_IsArray(tools)) return srv_fail(err, en, "'tools' must be an array");
    int k = 0;
    bool found = false;
    for (const cJSON *t = tools ? tools->child : NULL; t; t = t->next, k++) {
        const cJSON *fn = cJSON_IsObject(t) ? cJSON_GetObjectItemCaseSensitive(t, "function") : NULL;
        const cJSON *name = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
        if (!cJSON_IsString(name)) return srv_fail(err, en, "tools[%d].function.name must be a string", k);
        if (named && !strcmp(named, name->valuestring)) found = true;
    }
    if ((required || named) && k == 0) return srv_fail(err, en, "'tool_choice' needs 'tools'");
    if (named && !found)
        return srv_fail(err, en, "'tool_choice' names the function '%.64s', which is not in 'tools'", named);
    /* forced: the output is constrained to a call (constrain.c) */
    if (required) r->tool_force = 1;
    if (named) {
        r->tool_force = 2;
        if (!(r->tool_name = dup_n(named, strlen(named)))) return srv_fail(err, en, "out of memory");
    }
    if (!tools) return 0;
    if (k == 0 || none) return 0;
    if (!(r->tools_json = cJSON_PrintUnformatted(tools))) return srv_fail(err, en, "out of memory");
    return 0;
}

/* "speculative": false opts a request out of serve --spec (true or absent: the server's
 * setting). */
static int parse_speculative(const cJSON *root, srv_request *r, char *err, size_t en) {
    bool on = true;
    int rc = get_bool(root, "speculative", &on, NULL, err, en);
    if (!rc) r->no_spec = !on;
    return rc;
}

static int parse_stop(const cJSON *root, srv_request *r, char *err, size_t en) {
    const cJSON *st = field(root, "stop");
    if (!st) return 0;
    const cJSON *one = cJSON_IsString(st) ? st : NULL;
    if (!one && !cJSON_IsArray(st)) return srv_fail(err, en, "'stop' must be a string or an array of strings");
    int n = one ? 1 : cJSON_GetArraySize(st);
    if (n > SRV_MAX_STOP) return srv_fail(err, en, "'stop' has more than %d strings", SRV_MAX_STOP);
    if (!n) return 0;
    if (!(r->stop = calloc((size_t)n, sizeof *r->stop))) return srv_fail(err, en, "out of memory");
    for (const cJSON *s = one ? one : st->child; s; s = one ? NULL : s->next) {
        if (!cJSON_IsString(s)) return srv_fail(err, en, "'stop' must be a string or an array of strings");
        size_t l = strlen(s->valuestring);
        if (l > SRV_MAX_STOP_LEN) return srv_fail(err, en, "a stop string is longer than %d bytes", SRV_MAX_STOP_LEN);
        if (!l) continue;   /* an empty stop string never matches */
        if (!(r->stop[r->n_stop] = dup_n(s->valuestring, l))) return srv_fail(err, en, "out of memory");
        r->n_stop++;
    }
    return 0;
}

/* logit_bias: {"token id": bias}, bias in [-100, 100] (OpenAI). */
static int parse_logit_bias(const cJSON *root, srv_request *r, char *err, size_t en) {
    const cJSON *lb = field(root, "logit_bias");
    if (!lb || cJSON_IsNull(lb)) return 0;
    if (!cJSON_IsObject(lb)) return srv_fail(err, en, "'logit_bias' must be an object of token id -> bias");
    int n = cJSON_GetArraySize(lb);
    if (n > SRV_MAX_LOGIT_BIAS) return srv_fail(err, en, "'logit_bias' has more than %d entries", SRV_MAX_LOGIT_BIAS);
    if (!n) return 0;
    r->bias_ids = calloc((size_t)n, sizeof *r->bias_ids);
    r->bias = calloc((size_t)n, sizeof *r->bias);
    if (!r->bias_ids || !r->bias) return srv_fail(err, en, "out of memory");
    for (const cJSON *e = lb->child; e; e = e->next) {
        const char *k = e->string ? e->string : "";
        char *end = NULL;
        long id = (*k >= '0' && *k <= '9') ? strtol(k, &end, 10) : -1;
        if (id < 0 || id > INT32_MAX || !end || *end)
            return srv_fail(err, en, "'logit_bias' key '%.32s' is not a token id", k);
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= -100 && e->valuedouble <= 100))
            return srv_fail(err, en, "'logit_bias' value for %ld must be a number in -100 … 100", id);
        r->bias_ids[r->n_bias] = (int32_t)id;
        r->bias[r->n_bias] = (float)e->valuedouble;
        r->n_bias++;
    }
    return 0;
}

static int parse_llama_sampling(const cJSON *root, srv_request *r, char *err, size_t en);

static int parse_sampling(const cJSON *root, srv_request *r, char *err, size_t en) {
    tern_sampler_params *sp = &r->sp;
    double v;
    bool set;
    int rc;
    if ((rc = get_num(root, "temperature", 0, 100, false, &v, &r->temp_set, err, en))) return rc;
    if (r->temp_set) sp->temperature = (float)v;
    if ((rc = get_num(root, "top_p", 0, 1, false, &v, &r->top_p_set, err, en))) return rc;
    if (r->top_p_set) sp->top_p = v < 1e-6 ? 1e-6f : (float)v;
    if ((rc = get_num(root, "top_k", -1, 1 << 24, true, &v, &r->top_k_set, err, en))) return rc;
    if (r->top_k_set) sp->top_k = v < 0 ? 0 : (int)v;
    if ((rc = get_num(root, "min_p", 0, 1, false, &v, &r->min_p_set, err, en))) return rc;
    if (r->min_p_set) sp->min_p = (float)v;
    if ((rc = get_num(root, "presence_penalty", -2, 2, false, &v, &r->presence_set, err, en))) return rc;
    if (r->presence_set) sp->presence_penalty = (float)v;
    if ((rc = get_num(root, "frequency_penalty", -2, 2, false, &v, &r->freq_set, err, en))) return rc;
    if (r->freq_set) sp->frequency_penalty = (float)v;
    const char *rp = field(root, "repetition_penalty") ? "repetition_penalty" : "repeat_penalty";
    if ((rc = get_num(root, rp, 0, 100, false, &v, &set, err, en))) return rc;
    r->repeat_set = set;
    if (set) {
        if (v <= 0 || (float)v <= 0) return srv_fail(err, en, "'%s' must be > 0", rp);
        sp->repeat_penalty = (float)v;
    }
    /* seed: any integer; negative means "random" (llama.cpp's -1) */
    if ((rc = get_num(root, "seed", -9.2e18, 1.8e19, true, &v, &set, err, en))) return rc;
    if (set && v >= 0) {
        sp->seed = v >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)v;
        r->seed_set = true;
    }
    /* llama.cpp's penalty window */
    if ((rc = get_num(root, "repeat_last_n", -1, 1 << 16, true, &v, &set, err, en))) return rc;
    if (set && v > 0) { sp->penalty_last_n = (int)v; r->last_n_set = true; }
    return parse_llama_sampling(root, r, err, en);
}

/* One token-id list (non-negative integers; the vocabulary is checked by the caller). */
static int get_ids(const cJSON *a, srv_prompt *p, const char *what, char *err, size_t en) {
    int n = cJSON_GetArraySize(a);
    if (n == 0) return srv_fail(err, en, "%s is an empty token list", what);
    if (n > SRV_MAX_TOKENS_LIMIT) return srv_fail(err, en, "%s has too many tokens", what);
    if (!(p->ids = malloc((size_t)n * sizeof *p->ids))) return srv_fail(err, en, "out of memory");
    for (const cJSON *e = a->child; e; e = e->next) {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 ||
            e->valuedouble > INT32_MAX)
            return srv_fail(err, en, "%s must hold token ids (integers >= 0)", what);
        p->ids[p->n_ids++] = (int32_t)e->valuedouble;
    }
    return 0;
}

/* 'prompt': a string, an array of token ids, or an array of strings / token-id arrays (one
 * prompt each, at most SRV_MAX_PROMPTS). */
static int parse_prompts(const cJSON *root, srv_request *r, char *err, size_t en) {
    const cJSON *p = field(root, "prompt");
    if (r->api == SRV_API_NATIVE) {     /* /infill: input_prefix, input_suffix; the prompt optional */
        static const char *const k[2] = {"input_prefix", "input_suffix"};
        for (int i = 0; i < 2; i++) {
            const cJSON *v = field(root, k[i]);
            if (v && !cJSON_IsString(v)) return srv_fail(err, en, "'%s' must be a string", k[i]);
            char **dst = i ? &r->input_suffix : &r->input_prefix;
            if (v && !(*dst = dup_n(v->valuestring, strlen(v->valuestring)))) return srv_fail(err, en, "out of memory");
        }
        const cJSON *ex = field(root, "input_extra");
        if (ex && !(cJSON_IsArray(ex) && !ex->child))
            return srv_fail(err, en, "'input_extra' (extra context files) is not supported (only [])");
        if (!p && (r->input_prefix || r->input_suffix)) {
            if (!(r->prompts = calloc(1, sizeof *r->prompts)) || !(r->prompts[0].text = dup_n("", 0)) ||
                !(r->prompt = dup_n("", 0)))
                return srv_fail(err, en, "out of memory");
            r->n_prompts = 1;
            return 0;
        }
    }
    if (!p) return srv_fail(err, en, "'prompt' is required");
    bool list = cJSON_IsArray(p) && p->child && (cJSON_IsString(p->child) || cJSON_IsArray(p->child));
    int n = list ? cJSON_GetArraySize(p) : 1;
    if (!cJSON_IsString(p) && !cJSON_IsArray(p))
        return srv_fail(err, en, "'prompt' must be a string, an array of token ids, or an array of those");
    if (cJSON_IsArray(p) && !p->child) return srv_fail(err, en, "'prompt' must not be an empty array");
    if (n > SRV_MAX_PROMPTS) return srv_fail(err, en, "'prompt' holds more than %d prompts", SRV_MAX_PROMPTS);
    if (!(r->prompts = calloc((size_t)n, sizeof *r->prompts))) return srv_fail(err, en, "out of memory");
    int k = 0;
    for (const cJSON *e = list ? p->child : p; e && k < n; e = list ? e->next : NULL, k++) {
        srv_prompt *q = &r->prompts[k];
        r->n_prompts = (size_t)k + 1;
        char what[32];
        snprintf(what, sizeof what, list ? "'prompt'[%d]" : "'prompt'", k);
        if (cJSON_IsString(e)) {
            if (!(q->text = dup_n(e->valuestring, strlen(e->valuestring)))) return srv_fail(err, en, "out of memory");
        } else if (cJSON_IsArray(e)) {
            int rc = get_ids(e, q, what, err, en);
            if (rc) return rc;
        } else {
            return srv_fail(err, en, "%s must be a string or an array of token ids", what);
        }
    }
    if (r->prompts[0].text && !(r->prompt = dup_n(r->prompts[0].text, strlen(r->prompts[0].text))))
        return srv_fail(err, en, "out of memory");
    return 0;
}

/* llama.cpp's sampler fields (src/text/sampler.c implements them). */
static int parse_llama_sampling(const cJSON *root, srv_request *r, char *err, size_t en) {
    tern_sampler_params *sp = &r->sp;
    double v;
    bool set;
    int rc;
    const char *tp = field(root, "typ_p") ? "typ_p" : "typical_p";
    if ((rc = get_num(root, tp, 0, 1, false, &v, &set, err, en))) return rc;
    if (set) sp->typical_p = v <= 0 ? 1e-6f : (float)v;
    if ((rc = get_num(root, "min_keep", 0, 1 << 20, true, &v, &set, err, en))) return rc;
    if (set) sp->min_keep = (int)v;
    if ((rc = get_num(root, "top_n_sigma", -1, 1000, false, &v, &set, err, en))) return rc;
    if (set) sp->top_n_sigma = v > 0 ? (float)v : 0;
    if ((rc = get_num(root, "xtc_probability", 0, 1, false, &v, &set, err, en))) return rc;
    if (set) sp->xtc_probability = (float)v;
    if ((rc = get_num(root, "xtc_threshold", 0, 1, false, &v, &set, err, en))) return rc;
    if (set) sp->xtc_threshold = (float)v;
    if ((rc = get_num(root, "dry_multiplier", 0, 1000, false, &v, &set, err, en))) return rc;
    if (set) sp->dry_multiplier = (float)v;
    if ((rc = get_num(root, "dry_base", 1, 100, false, &v, &set, err, en))) return rc;
    if (set) sp->dry_base = (float)v;
    if ((rc = get_num(root, "dry_allowed_length", 0, 1 << 16, true, &v, &set, err, en))) return rc;
    if (set) sp->dry_allowed_length = (int)v;
    /* -1: the whole context (llama.cpp); here 8192 tokens at most */
    if ((rc = get_num(root, "dry_penalty_last_n", -1, 8192, true, &v, &set, err, en))) return rc;
    if (set) sp->dry_penalty_last_n = v < 0 ? 8192 : (int)v;
    if (set && v == 0) sp->dry_multiplier = 0;  /* llama.cpp: 0 disables DRY */
    const cJSON *br = field(root, "dry_sequence_breakers");
    if (br) {
        if (!cJSON_IsArray(br)) return srv_fail(err, en, "'dry_sequence_breakers' must be an array of strings");
        int n = cJSON_GetArraySize(br);
        if (n > SRV_MAX_DRY_BREAKERS)
            return srv_fail(err, en, "'dry_sequence_breakers' has more than %d strings", SRV_MAX_DRY_BREAKERS);
        r->dry_breakers_set = true;
        if (n && !(r->dry_breakers = calloc((size_t)n, sizeof *r->dry_breakers))) return srv_fail(err, en, "out of memory");
        for (const cJSON *e = br->child; e; e = e->next) {
            if (!cJSON_IsString(e) || !e->valuestring[0] || strlen(e->valuestring) > 64)
                return srv_fail(err, en, "'dry_sequence_breakers' must hold non-empty strings of at most 64 bytes");
            if (!(r->dry_breakers[r->n_dry_breakers] = dup_n(e->valuestring, strlen(e->valuestring))))
                return srv_fail(err, en, "out of memory");
            r->n_dry_breakers++;
        }
    }
    /* samplers: an array of stage names, or llama.cpp's one-letter string ("dkypmxt") */
    const cJSON *sm = field(root, "samplers");
    if (!sm) sm = field(root, "samplers_sequence");
    if (sm) {
        tern_str o = {0};
        if (tern_str_append(&o, "", 0)) return srv_fail(err, en, "out of memory");
        static const char *const letters[][2] = {{"d", "dry"}, {"k", "top_k"}, {"y", "typ_p"}, {"p", "top_p"},
                                                 {"m", "min_p"}, {"x", "xtc"}, {"t", "temperature"},
                                                 {"s", "top_n_sigma"}};
        int bad = 0;
        if (cJSON_IsString(sm)) {
            for (const char *c = sm->valuestring; *c && !bad; c++) {
                const char *nm = NULL;
                for (size_t i = 0; i < sizeof letters / sizeof letters[0]; i++)
                    if (*c == letters[i][0][0]) nm = letters[i][1];
                if (!nm || o.len > 200) bad = 1;
                else if ((o.len && tern_str_append(&o, ";", 1)) || tern_str_append(&o, nm, strlen(nm))) bad = 2;
            }
        } else if (cJSON_IsArray(sm)) {
            for (const cJSON *e = sm->child; e && !bad; e = e->next) {
                if (!cJSON_IsString(e) || strchr(e->valuestring, ';') || strchr(e->valuestring, ',') ||
                    strchr(e->valuestring, ' ') || !e->valuestring[0] || o.len > 200) bad = 1;
                else if ((o.len && tern_str_append(&o, ";", 1)) ||
                         tern_str_append(&o, e->valuestring, strlen(e->valuestring))) bad = 2;
            }
        } else {
            bad = 1;
        }
        if (bad) {
            tern_str_free(&o);
            return bad == 2 ? srv_fail(err, en, "out of memory")
                            : srv_fail(err, en, "'samplers' must be an array of stage names (dry, top_k, typ_p, top_p, "
                                            "min_p, xtc, top_n_sigma, temperature) or a string of their letters");
        }
        r->samplers = o.data;
        /* the names are checked here, with the sampler's own parser */
        tern_sampler_params t;
        tern_sampler_params_default(&t);
        t.samplers = r->samplers;
        tern_sampler *ts = NULL;
        if (tern_sampler_new(&t, 1, &ts)) return srv_fail(err, en, "'samplers': %s", tern_last_error());
        tern_sampler_free(ts);
    }
    return 0;
}

static bool in_list(const char *k, const char *const *list) {
    for (; *list; list++) if (!strcmp(k, *list)) return true;
    return false;
}

/* The fields each endpoint accepts (docs/server.md lists them). Any other field is a 400
 * naming it: silently ignoring what a client asked for gives it output it did not ask for. */
static const char *const F_COMMON[] = {
    "model", "max_tokens", "max_completion_tokens", "n_predict", "temperature", "top_p", "top_k", "min_p",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "repeat_penalty", "repeat_last_n", "seed",
    "stop", "n", "stream", "stream_options", "ignore_eos", "cache_prompt", "logit_bias", "logprobs", "n_probs",
    "speculative",                  /* false: no speculative decoding for this request (serve --spec) */
    "response_format", "grammar", "json_schema", "typical_p", "typ_p", "min_keep", "top_n_sigma",
    "xtc_probability", "xtc_threshold", "dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n",
    "dry_sequence_breakers", "samplers", "samplers_sequence",
    /* accepted, no effect (docs/server.md says why) */
    "user", "metadata", "store", "service_tier", "id_slot", "timings_per_token",
    "best_of", "suffix", "functions", "function_call", NULL};
static const char *const F_CHAT[] = {"messages", "tools", "tool_choice", "chat_template_kwargs", "enable_thinking",
                                     "top_logprobs", "parallel_tool_calls", NULL};
static const char *const F_COMPLETION[] = {"prompt", "echo", NULL};
static const char *const F_NATIVE[] = {"input_prefix", "input_suffix", "input_extra", NULL};
/* llama.cpp fields accepted at their neutral value only */
static int neutral_only(const cJSON *root, const char *k, char *err, size_t en, bool *ok) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, k);
    *ok = true;
    if (!strcmp(k, "mirostat") || !strcmp(k, "dynatemp_range") || !strcmp(k, "n_keep")) {
        if (cJSON_IsNull(v) || (cJSON_IsNumber(v) && (v->valuedouble == 0 || (!strcmp(k, "n_keep") && v->valuedouble == -1))))
            return 0;
        return srv_fail(err, en, "'%s' is not supported (only %s)", k, !strcmp(k, "n_keep") ? "0 or -1" : "0");
    }
    if (!strcmp(k, "mirostat_tau") || !strcmp(k, "mirostat_eta") || !strcmp(k, "dynatemp_exponent"))
        return 0;                   /* no effect while their switch is off; the switch on is refused above */
    if (!strcmp(k, "top_logprobs")) {   /* completions (chat parses it) */
        if (cJSON_IsNull(v) || (cJSON_IsNumber(v) && v->valuedouble == 0)) return 0;
        return srv_fail(err, en, "'top_logprobs' is a chat field: /v1/completions takes 'logprobs' (0 … 5)");
    }
    if (!strcmp(k, "penalize_nl") || !strcmp(k, "post_sampling_probs") || !strcmp(k, "return_tokens")) {
        if (cJSON_IsNull(v) || cJSON_IsFalse(v)) return 0;
        return srv_fail(err, en, "'%s' is not supported (only false)", k);
    }
    *ok = false;
    return 0;
}

static int check_fields(const cJSON *root, srv_kind kind, srv_api api, char *err, size_t en) {
    for (const cJSON *e = root->child; e; e = e->next) {
        const char *k = e->string ? e->string : "";
        if (in_list(k, F_COMMON) || in_list(k, kind == SRV_CHAT ? F_CHAT : F_COMPLETION)) continue;
        if (api == SRV_API_NATIVE && kind == SRV_COMPLETION && in_list(k, F_NATIVE)) continue;
        bool ok;
        int rc = neutral_only(root, k, err, en, &ok);
        if (rc) return rc;
        if (ok) continue;
        return srv_fail(err, en, "unknown field '%.64s' (not supported by tern; docs/server.md lists the accepted fields)", k);
    }
    return 0;
}

/* Fields of the OpenAI / llama.cpp APIs that the server does not implement:
 * a 400 naming the field instead of silently ignoring it. A field given with
 * its neutral value (null, false, 1 for best_of, "" for suffix, an empty
 * logit_bias, response_format "text", top_logprobs 0) is accepted. */
/* response_format, grammar, json_schema: the constraint (at most one). */
static int parse_constraint(const cJSON *root, srv_request *r, char *err, size_t en) {
    const cJSON *f;
    int n = 0;
    if ((f = field(root, "response_format"))) {
        const cJSON *t = cJSON_IsObject(f) ? cJSON_GetObjectItemCaseSensitive(f, "type") : NULL;
        if (!cJSON_IsString(t)) return srv_fail(err, en, "'response_format' must be an object with a string 'type'");
        const cJSON *sc = NULL;
        if (!strcmp(t->valuestring, "json_object")) {
            sc = field(f, "schema");            /* llama.cpp's extension */
            if (sc && !cJSON_IsObject(sc)) return srv_fail(err, en, "'response_format.schema' must be an object");
            if (!(r->schema = sc ? cJSON_PrintUnformatted(sc) : dup_n("{\"type\":\"object\"}", 17)))
                return srv_fail(err, en, "out of memory");
            n++;
        } else if (!strcmp(t->valuestring, "json_schema")) {
            const cJSON *js = field(f, "json_schema");
            if (!cJSON_IsObject(js)) return srv_fail(err, en, "'response_format.json_schema' must be an object");
            const cJSON *nm = field(js, "name");
            if (nm && !cJSON_IsString(nm)) return srv_fail(err, en, "'response_format.json_schema.name' must be a string");
            const cJSON *st = field(js, "strict");
            if (st && !cJSON_IsBool(st)) return srv_fail(err, en, "'response_format.json_schema.strict' must be a boolean");
            sc = field(js, "schema");
            if (sc && !cJSON_IsObject(sc) && !cJSON_IsTrue(sc))
                return srv_fail(err, en, "'response_format.json_schema.schema' must be an object");
            if (!(r->schema = sc ? cJSON_PrintUnformatted(sc) : dup_n("{}", 2))) return srv_fail(err, en, "out of memory");
            n++;
        } else if (strcmp(t->valuestring, "text")) {
            return srv_fail(err, en, "'response_format' type \"%.32s\" is unknown (\"text\", \"json_object\", \"json_schema\")",
                        t->valuestring);
        }
    }
    if ((f = field(root, "json_schema"))) {     /* llama.cpp's top-level extension */
        if (!cJSON_IsObject(f)) return srv_fail(err, en, "'json_schema' must be an object");
        if (n++) return srv_fail(err, en, "give one of 'response_format', 'json_schema' and 'grammar'");
        if (!(r->schema = cJSON_PrintUnformatted(f))) return srv_fail(err, en, "out of memory");
    }
    if ((f = field(root, "grammar"))) {
        if (!cJSON_IsString(f)) return srv_fail(err, en, "'grammar' must be a string (GBNF)");
        if (n++) return srv_fail(err, en, "give one of 'response_format', 'json_schema' and 'grammar'");
        if (strlen(f->valuestring) > SRV_MAX_GRAMMAR) return srv_fail(err, en, "'grammar' is longer than %d bytes", SRV_MAX_GRAMMAR);
        if (!(r->grammar = dup_n(f->valuestring, strlen(f->valuestring)))) return srv_fail(err, en, "out of memory");
    }
    if (n && r->tool_force)
        return srv_fail(err, en, "'tool_choice' \"required\" or a named function cannot be combined with '%s'",
                    r->grammar ? "grammar" : "response_format");
    return 0;
}

static int reject_unsupported(const cJSON *root, char *err, size_t en) {
    const cJSON *f;
    if ((f = field(root, "best_of")) && !cJSON_IsNull(f) && !(cJSON_IsNumber(f) && f->valuedouble == 1))
        return srv_fail(err, en, "'best_of' is not supported (only 1)");
    if ((f = field(root, "suffix")) && !cJSON_IsNull(f) && !(cJSON_IsString(f) && !f->valuestring[0]))
        return srv_fail(err, en, "'suffix' is not supported");
    static const char *const never[] = {"functions", "function_call"};
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        if ((f = field(root, never[i])) && !cJSON_IsNull(f))
            return srv_fail(err, en, "'%s' is not supported yet", never[i]);
    return 0;
}

cJSON *srv_json_parse_whole(const char *body, size_t len, size_t *bad_at) {
    const char *end = NULL;
    if (bad_at) *bad_at = 0;
    cJSON *root = body ? cJSON_ParseWithLengthOpts(body, len, &end, false) : NULL;
    if (!root) return NULL;
    size_t k = end ? (size_t)(end - body) : len;
    while (k < len && (body[k] == ' ' || body[k] == '\t' || body[k] == '\n' || body[k] == '\r')) k++;
    if (k < len) { /* a value, then more: `{...}xyz` is not one JSON document */
        cJSON_Delete(root);
        if (bad_at) *bad_at = k + 1;
        return NULL;
    }
    return root;
}

int srv_parse_request(srv_kind kind, const char *body, size_t len, srv_request *r, char *err, size_t en) {
    return srv_parse_request_api(kind, SRV_API_OPENAI, body, len, r, err, en);
}

int srv_parse_request_api(srv_kind kind, srv_api api, const char *body, size_t len, srv_request *r, char *err,
                          size_t en) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->api = api;
    r->thinking = -1;
    tern_sampler_params_default(&r->sp);
    if (err && en) err[0] = 0;
    if (!body) return srv_fail(err, en, "empty body");
    size_t bad_at = 0;
    cJSON *root = srv_json_parse_whole(body, len, &bad_at);
    if (!root && bad_at) return srv_fail(err, en, "the body has more after its JSON value (at byte %zu)", bad_at);
    if (!root) return srv_fail(err, en, "the body is not valid JSON");
    int rc = 0;
    double v;
    bool set, b;
    if (!cJSON_IsObject(root)) { rc = srv_fail(err, en, "the body must be a JSON object"); goto out; }
    if (kind == SRV_CHAT) {
        if ((rc = parse_messages(root, r, err, en)) || (rc = parse_tools(root, r, err, en))) goto out;
        const cJSON *kw = field(root, "chat_template_kwargs");
        if (kw && !cJSON_IsObject(kw)) { rc = srv_fail(err, en, "'chat_template_kwargs' must be an object"); goto out; }
        if ((rc = get_bool(kw ? kw : root, "enable_thinking", &b, &set, err, en))) goto out;
        if (!set && kw && (rc = get_bool(root, "enable_thinking", &b, &set, err, en))) goto out;
        if (set) r->thinking = b;
    } else {
        if ((rc = parse_prompts(root, r, err, en))) goto out;
        if ((rc = get_bool(root, "echo", &b, &set, err, en))) goto out;
        if (set && b) { rc = srv_fail(err, en, "'echo' is not supported"); goto out; }
    }
    if ((rc = check_fields(root, kind, api, err, en))) goto out;
    const char *mt = field(root, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if ((rc = get_num(root, mt, 1, SRV_MAX_TOKENS_LIMIT, true, &v, &set, err, en))) goto out;
    if (set) r->max_tokens = (int)v;
    /* llama.cpp's n_predict: the same as max_tokens (-1: no limit); both given must agree */
    if ((rc = get_num(root, "n_predict", -1, SRV_MAX_TOKENS_LIMIT, true, &v, &set, err, en))) goto out;
    if (set && v != 0 && (v > 0 ? (int)v : 0) != r->max_tokens && field(root, mt)) {
        rc = srv_fail(err, en, "'n_predict' (%d) and '%s' (%d) disagree: give one", (int)v, mt, r->max_tokens);
        goto out;
    }
    if (set && v > 0) r->max_tokens = (int)v;
    if (set && v == 0) { rc = srv_fail(err, en, "'n_predict' must be -1 (no limit) or at least 1"); goto out; }
    r->n = 1;
    if ((rc = get_num(root, "n", 1, SRV_MAX_N, true, &v, &set, err, en))) goto out;
    if (set) r->n = (int)v;
    if ((rc = parse_sampling(root, r, err, en)) || (rc = parse_stop(root, r, err, en)) ||
        (rc = parse_logit_bias(root, r, err, en))) goto out;
    if ((rc = get_bool(root, "stream", &r->stream, NULL, err, en))) goto out;
    if ((rc = get_bool(root, "ignore_eos", &r->ignore_eos, NULL, err, en))) goto out;
    if ((rc = parse_speculative(root, r, err, en))) goto out;
    r->cache_prompt = true;         /* llama.cpp's field: false = no prefix reuse */
    if ((rc = get_bool(root, "cache_prompt", &r->cache_prompt, NULL, err, en))) goto out;
    const cJSON *so = field(root, "stream_options");
    if (so && !cJSON_IsObject(so)) { rc = srv_fail(err, en, "'stream_options' must be an object"); goto out; }
    if (so && (rc = get_bool(so, "include_usage", &r->include_usage, NULL, err, en))) goto out;
    if ((rc = reject_unsupported(root, err, en)) || (rc = parse_constraint(root, r, err, en))) goto out;
    if ((r->grammar || r->schema || r->tool_force) && r->thinking == 1) {
        rc = srv_fail(err, en, "'enable_thinking' cannot be combined with a constrained output (%s)",
                  r->grammar ? "grammar" : r->schema ? "response_format" : "tool_choice");
        goto out;
    }
    /* logprobs: chat: logprobs (bool) + top_logprobs (0..20); completions: logprobs (int 0..5) */
    r->logprobs = -1;
    if (kind == SRV_CHAT) {
        if ((rc = get_bool(root, "logprobs", &b, &set, err, en))) goto out;
        bool on = set && b;
        if ((rc = get_num(root, "top_logprobs", 0, SRV_MAX_TOP_LOGPROBS, true, &v, &set, err, en))) goto out;
        if (set && !on && v > 0) { rc = srv_fail(err, en, "'top_logprobs' needs 'logprobs': true"); goto out; }
        if (on) r->logprobs = set ? (int)v : 0;
    } else {
        const cJSON *lp = field(root, "logprobs");
        if (lp && !cJSON_IsNull(lp) && !cJSON_IsFalse(lp)) {
            if ((rc = get_num(root, "logprobs", 0, 5, true, &v, &set, err, en))) goto out;
            r->logprobs = (int)v;
        }
    }
    /* llama.cpp's n_probs: the probabilities of the n most likely tokens at each step */
    if ((rc = get_num(root, "n_probs", 0, SRV_MAX_TOP_LOGPROBS, true, &v, &set, err, en))) goto out;
    if (set && v > 0) {
        r->n_probs = (int)v;
        if (r->logprobs < 0 || r->logprobs < r->n_probs) r->logprobs = r->n_probs;
    }
out:
    cJSON_Delete(root);
    return rc;
}

/* ------------------------------------------------------------ request line */

/* RFC 7230 tchar: a method is a token. */
static bool is_tchar(unsigned char c) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

srv_reqline srv_request_line_verdict(const char *buf, size_t n) {
    const unsigned char *b = (const unsigned char *)buf;
    size_t i = 0;
    if (n > SRV_REQLINE_PEEK) n = SRV_REQLINE_PEEK;
    /* undecided with the whole window seen: no target in sight, refuse */
    srv_reqline more = n == SRV_REQLINE_PEEK ? SRV_REQLINE_INVALID : SRV_REQLINE_PENDING;
    for (;;) {                      /* empty lines (CRLF or a bare LF) before the request line */
        if (i < n && b[i] == '\n') i++;
        else if (i + 1 < n && b[i] == '\r' && b[i + 1] == '\n') i += 2;
        else break;
    }
    if (i + 1 == n && b[i] == '\r') return more;  /* maybe another empty line */
    size_t m = i;
    while (i < n && is_tchar(b[i])) i++;
    if (i == n) return more;
    if (b[i] != ' ' || i == m) return SRV_REQLINE_INVALID;
    while (i < n && b[i] == ' ') i++;   /* libmicrohttpd tolerates several spaces */
    if (i == n) return more;
    return b[i] == '\r' || b[i] == '\n' ? SRV_REQLINE_INVALID : SRV_REQLINE_VALID;
}

/* --------------------------------------------------------------- responses */

const char *srv_finish_str(srv_finish f) {
    switch (f) {
    case SRV_FINISH_STOP: return "stop";
    case SRV_FINISH_LENGTH: return "length";
    case SRV_FINISH_TOOL_CALLS: return "tool_calls";
    default: return NULL;
    }
}

static void add_str(cJSON *o, const char *key, const char *s) {
    tern_str c = {0};
    tern_status st = tern_utf8_sanitize(s ? s : "", s ? strlen(s) : 0, &c);
    cJSON_AddStringToObject(o, key, !st && c.data ? c.data : "");
    tern_str_free(&c);
}

static char *print_free(cJSON *o) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

char *srv_json_error(int status, const char *message) {
    const char *type = status == 401 ? "authentication_error" : status == 404 ? "not_found_error"
                     : status == 503 ? "unavailable_error" : status >= 500 ? "server_error" : "invalid_request_error";
    const char *code = status == 400 ? "invalid_request" : status == 401 ? "invalid_api_key" : status == 404 ? "not_found"
                     : status == 405 ? "method_not_allowed" : status == 413 ? "request_too_large"
                     : status == 503 ? "unavailable" : "internal_error";
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    if (!e) { cJSON_Delete(o); return NULL; }
    add_str(e, "message", message);
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddStringToObject(e, "code", code);
    return print_free(o);
}

static void add_head(cJSON *o, const srv_resp_id *id, const char *object) {
    cJSON_AddStringToObject(o, "id", id->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)id->created);
    add_str(o, "model", id->model ? id->model : "");
}

static void add_usage(cJSON *o, const srv_usage *u) {
    cJSON *us = cJSON_AddObjectToObject(o, "usage");
    if (!us) return;
    cJSON_AddNumberToObject(us, "prompt_tokens", (double)u->prompt_tokens);
    cJSON_AddNumberToObject(us, "completion_tokens", (double)u->completion_tokens);
    cJSON_AddNumberToObject(us, "total_tokens", (double)(u->prompt_tokens + u->completion_tokens));
    cJSON *pd = cJSON_AddObjectToObject(us, "prompt_tokens_details");
    if (pd) cJSON_AddNumberToObject(pd, "cached_tokens", (double)u->cached_tokens);
    /* llama.cpp's timings object */
    cJSON *t = cJSON_AddObjectToObject(o, "timings");
    if (!t) return;
    /* as llama.cpp: prompt_n counts the evaluated prompt tokens, cache_n the reused ones */
    size_t evaluated = u->prompt_tokens - (u->cached_tokens < u->prompt_tokens ? u->cached_tokens : u->prompt_tokens);
    cJSON_AddNumberToObject(t, "cache_n", (double)u->cached_tokens);
    cJSON_AddNumberToObject(t, "prompt_n", (double)evaluated);
    cJSON_AddNumberToObject(t, "prompt_ms", u->prompt_ms);
    cJSON_AddNumberToObject(t, "prompt_per_second", u->prompt_ms > 0 ? evaluated * 1e3 / u->prompt_ms : 0);
    cJSON_AddNumberToObject(t, "predicted_n", (double)u->completion_tokens);
    cJSON_AddNumberToObject(t, "predicted_ms", u->gen_ms);
    cJSON_AddNumberToObject(t, "predicted_per_second", u->gen_ms > 0 ? u->completion_tokens * 1e3 / u->gen_ms : 0);
}

static void add_finish(cJSON *c, srv_finish f) {
    const char *s = srv_finish_str(f);
    if (s) cJSON_AddStringToObject(c, "finish_reason", s);
    else cJSON_AddNullToObject(c, "finish_reason");
}

static cJSON *tool_calls_json(const srv_resp_id *id, const tern_tool_call *tc, size_t n, bool with_index) {
    cJSON *arr = cJSON_CreateArray();
    for (size_t k = 0; arr && k < n; k++) {
        cJSON *c = cJSON_CreateObject(), *fn;
        if (!c) break;
        cJSON_AddItemToArray(arr, c);
        char cid[80];
        snprintf(cid, sizeof cid, "call_%s_%zu", strchr(id->id, '-') ? strchr(id->id, '-') + 1 : id->id, k);
        if (with_index) cJSON_AddNumberToObject(c, "index", (double)k);
        cJSON_AddStringToObject(c, "id", cid);
        cJSON_AddStringToObject(c, "type", "function");
        if (!(fn = cJSON_AddObjectToObject(c, "function"))) break;
        add_str(fn, "name", tc[k].name);
        add_str(fn, "arguments", tc[k].arguments);
    }
    return arr;
}

char *srv_json_response(const srv_resp_id *id, const char *text, const tern_chat_reply *reply, srv_finish finish,
                        const srv_usage *u) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    bool chat = id->kind == SRV_CHAT;
    add_head(o, id, chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    if (!choices || !c) { cJSON_Delete(c); cJSON_Delete(o); return NULL; }
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    if (chat) {
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        bool tools = reply && reply->n_tool_calls > 0;
        if (m) {
            cJSON_AddStringToObject(m, "role", "assistant");
            if (tools && !*reply->content) cJSON_AddNullToObject(m, "content");
            else add_str(m, "content", reply ? reply->content : text);
            if (reply && *reply->reasoning) add_str(m, "reasoning_content", reply->reasoning);
            if (tools) cJSON_AddItemToObject(m, "tool_calls", tool_calls_json(id, reply->tool_calls, reply->n_tool_calls, false));
        }
        if (tools && finish == SRV_FINISH_STOP) finish = SRV_FINISH_TOOL_CALLS;
    } else {
        add_str(c, "text", text);
        cJSON_AddNullToObject(c, "logprobs");
    }
    add_finish(c, finish);
    add_usage(o, u);
    return print_free(o);
}

tern_status srv_sse_chunk(const srv_resp_id *id, const srv_delta *d, const srv_usage *usage, tern_str *out) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return TERN_ERR_NOMEM;
    bool chat = id->kind == SRV_CHAT;
    add_head(o, id, chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    if (usage) {
        add_usage(o, usage);
    } else if (choices) {
        cJSON *c = cJSON_CreateObject();
        if (c) {
            cJSON_AddItemToArray(choices, c);
            cJSON_AddNumberToObject(c, "index", d->index);
            if (chat) {
                cJSON *dl = cJSON_AddObjectToObject(c, "delta");
                if (dl && d->role) {
                    cJSON_AddStringToObject(dl, "role", "assistant");
                    cJSON_AddStringToObject(dl, "content", "");
                }
                if (dl && d->reasoning) add_str(dl, "reasoning_content", d->reasoning);
                if (dl && d->content) add_str(dl, "content", d->content);
                if (dl && d->n_tool_calls)
                    cJSON_AddItemToObject(dl, "tool_calls", tool_calls_json(id, d->tool_calls, d->n_tool_calls, true));
                if (d->logprobs) cJSON_AddItemToObject(c, "logprobs", cJSON_Duplicate(d->logprobs, true));
            } else {
                add_str(c, "text", d->content ? d->content : "");
                if (d->logprobs) cJSON_AddItemToObject(c, "logprobs", cJSON_Duplicate(d->logprobs, true));
                else cJSON_AddNullToObject(c, "logprobs");
            }
            add_finish(c, d->finish);
        }
    }
    char *s = print_free(o);
    if (!s) return TERN_ERR_NOMEM;
    tern_status st = tern_str_append(out, "data: ", 6);
    if (!st) st = tern_str_append(out, s, strlen(s));
    if (!st) st = tern_str_append(out, "\n\n", 2);
    free(s);
    return st;
}
