/*
 * fuzz_server.c - libFuzzer target for the request side of `tern serve`
 * (src/server/request.c): the first input byte picks the endpoint (chat or
 * completions), the rest is the JSON body. A body that parses must give a
 * consistent request (bounded counts, non-empty stop strings, known roles,
 * sampler values in range); the response and SSE builders must turn its text
 * into valid JSON; the streaming splitter must accept the body as reply text
 * in any two-way split and agree with itself. The body's bytes are also the
 * first bytes of a connection for the front door's request-line verdict: it
 * decides within SRV_REQLINE_PEEK bytes, and a verdict holds for every longer
 * prefix.
 * A first byte 'A' or 'R' instead sends the body through the compatibility layer
 * (src/server/compat.c: Anthropic's /v1/messages, OpenAI's /v1/responses): it is
 * translated to a chat body (which must be JSON the chat parser answers with 0 or a 400
 * that says why) or refused with a 4xx that says why.
 * A first byte 'E' (OpenAI's /v1/embeddings) or 'e' (llama-server's /embedding) sends the
 * body to the embeddings parser (src/server/embed.c, no tokenizer: text inputs are refused
 * with a reason): accepted inputs are non-empty id lists within the vocabulary and the
 * context, and the reply built from them (float and base64) is valid JSON.
 */
#include "server/server.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static void must_parse(const char *s) {
    cJSON *j = s ? cJSON_Parse(s) : NULL;
    if (!j) __builtin_trap();
    cJSON_Delete(j);
}

static void split_all(const char *t, size_t n, size_t cut, bool open, tern_str *c, tern_str *r, bool *tool) {
    srv_split sp;
    srv_split_init(&sp, open);
    tern_str_append(c, "", 0);
    tern_str_append(r, "", 0);
    srv_split_push(&sp, t, cut, c, r);
    srv_split_push(&sp, t + cut, n - cut, c, r);
    srv_split_finish(&sp, c, r);
    *tool = sp.tool;
    srv_split_free(&sp);
}

static int fuzz_compat(srv_api api, const char *body, size_t len) {
    char *chat = NULL, err[256] = "";
    int rc = srv_compat_request(api, body, len, &chat, err, sizeof err);
    if (rc != 0 && (rc < 400 || rc > 499 || !err[0])) __builtin_trap();
    if (rc == 0) {
        if (!chat) __builtin_trap();
        must_parse(chat);
        srv_request r;
        char e2[256] = "";
        int prc = srv_parse_request(SRV_CHAT, chat, strlen(chat), &r, e2, sizeof e2);
        if (prc != 0 && (prc != 400 || !e2[0])) __builtin_trap();
        srv_request_free(&r);
        free(chat);
    }
    char *e = srv_compat_error(api, 400, body && len ? "x" : "");
    must_parse(e);
    free(e);
    return 0;
}

static int fuzz_embed(bool native, const char *body, size_t len) {
    enum { NV = 4096, DIM = 8, CTX = 64 };
    srv_embed_req r;
    char err[256] = "";
    int rc = srv_embed_parse(native, body, len, NULL, NV, DIM, CTX, &r, err, sizeof err);
    if (rc != 0 && (rc != 400 || !err[0])) __builtin_trap();
    if (rc == 0) {
        if (r.n < 1 || r.n > SRV_MAX_EMBED_INPUTS) __builtin_trap();
        size_t total = 0;
        for (size_t i = 0; i < r.n; i++) {
            if (r.n_ids[i] < 1 || r.n_ids[i] > CTX) __builtin_trap();
            for (size_t k = 0; k < r.n_ids[i]; k++)
                if (r.ids[i][k] < 0 || r.ids[i][k] >= NV) __builtin_trap();
            total += r.n_ids[i];
        }
        if (total != r.n_tokens) __builtin_trap();
        float *v = malloc(r.n * DIM * sizeof *v);
        if (!v) __builtin_trap();
        for (size_t i = 0; i < r.n * DIM; i++) v[i] = (float)((int)(i * 2654435761u % 2001) - 1000) / 7.0f;
        for (int b = 0; b < 2; b++) {
            r.base64 = b;
            char *s = srv_embed_response(&r, v, DIM, "m\"odel", native);
            must_parse(s);
            free(s);
        }
        free(v);
    }
    srv_embed_req_free(&r);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (data[0] == 'E' || data[0] == 'e') return fuzz_embed(data[0] == 'e', (const char *)data + 1, size - 1);
    if (data[0] == 'A' || data[0] == 'R')
        return fuzz_compat(data[0] == 'A' ? SRV_API_ANTHROPIC : SRV_API_RESPONSES, (const char *)data + 1, size - 1);
    srv_kind kind = data[0] & 1 ? SRV_COMPLETION : SRV_CHAT;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    srv_request r;
    char err[256];
    int rc = srv_parse_request(kind, body, len, &r, err, sizeof err);
    if (rc != 0 && rc != 400) __builtin_trap();
    if (rc == 400 && !err[0]) __builtin_trap();          /* every refusal says why */
    if (rc == 0) {
        if (r.n_stop > SRV_MAX_STOP || r.n_msgs > SRV_MAX_MESSAGES) __builtin_trap();
        for (size_t i = 0; i < r.n_stop; i++)
            if (!r.stop[i][0] || strlen(r.stop[i]) > SRV_MAX_STOP_LEN) __builtin_trap();
        if (kind == SRV_CHAT && !r.n_msgs) __builtin_trap();
        if (kind == SRV_COMPLETION && !r.prompt) __builtin_trap();
        for (size_t i = 0; i < r.n_msgs; i++) {
            const char *role = r.msgs[i].role;
            if (!role || !r.msgs[i].content) __builtin_trap();
            if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "tool"))
                __builtin_trap();
        }
        if (!(r.sp.temperature >= 0 && r.sp.top_p > 0 && r.sp.top_p <= 1 && r.sp.top_k >= 0 && r.sp.min_p >= 0 &&
              r.sp.min_p <= 1 && r.sp.repeat_penalty > 0 && r.max_tokens >= 0))
            __builtin_trap();
        if (r.tools_json) must_parse(r.tools_json);
        if (r.n < 1 || r.n > SRV_MAX_N || ((r.grammar != NULL) + (r.schema != NULL) > 1)) __builtin_trap();
        /* the constraint's grammar: built (and then parses) or refused with a reason, for both formats */
        for (int fmt = 0; fmt < 2; fmt++) {
            tern_str g = {0};
            const char *root = NULL;
            char gerr[256] = "";
            int grc = srv_constraint_grammar(&r, fmt ? TERN_CHAT_QWEN35 : TERN_CHAT_QWEN3, &g, &root, gerr, sizeof gerr);
            if ((grc != 0 && grc != 400) || (grc == 400 && !gerr[0])) __builtin_trap();
            if (grc == 0 && g.len) {
                tern_grammar *G = NULL;
                if (tern_grammar_parse(g.data, g.len, root, &G)) __builtin_trap();
                tern_grammar_free(G);
            }
            tern_str_free(&g);
        }
        /* (logprobs with stream: supported since streamed logprobs) */
        if (r.n_bias > SRV_MAX_LOGIT_BIAS || r.logprobs < -1 || r.logprobs > SRV_MAX_TOP_LOGPROBS)
            __builtin_trap();
        for (size_t i = 0; i < r.n_bias; i++)
            if (r.bias_ids[i] < 0 || !(r.bias[i] >= -100 && r.bias[i] <= 100)) __builtin_trap();
        /* echo the request's text through the builders */
        srv_resp_id id = {kind, "chatcmpl-fuzz", 1, "m"};
        srv_usage u = {1, 2, 3, 4};
        const char *text = kind == SRV_CHAT ? r.msgs[r.n_msgs - 1].content : r.prompt;
        char *s = srv_json_response(&id, text, NULL, SRV_FINISH_STOP, &u);
        must_parse(s);
        free(s);
        tern_str out = {0};
        srv_delta d = {0};
        d.content = text;
        d.reasoning = r.n_stop ? r.stop[0] : NULL;
        if (srv_sse_chunk(&id, &d, NULL, &out) == TERN_OK) {
            if (out.len < 8 || memcmp(out.data, "data: ", 6) || memcmp(out.data + out.len - 2, "\n\n", 2)) __builtin_trap();
            out.data[out.len - 2] = 0;
            must_parse(out.data + 6);
        }
        tern_str_free(&out);
    }
    srv_request_free(&r);
    /* logprobs of a vocabulary made of the body's bytes: <= 0, alternatives sorted, the best first */
    if (len >= 2) {
        size_t nv = len < 512 ? len : 512;
        float lg[512];
        for (size_t i = 0; i < nv; i++) lg[i] = (float)(signed char)body[i] * 0.25f;
        srv_logprob e;
        srv_logprob_of(lg, (int)nv, (int32_t)(data[0] % nv), data[0] % (SRV_MAX_TOP_LOGPROBS + 1), &e);
        if (!(e.lp <= 1e-6f) || e.n_top > SRV_MAX_TOP_LOGPROBS || e.n_top > (int)nv) __builtin_trap();
        for (int k = 0; k < e.n_top; k++) {
            if (e.top_id[k] < 0 || e.top_id[k] >= (int)nv || !(e.top_lp[k] <= 1e-6f)) __builtin_trap();
            if (k && e.top_lp[k] > e.top_lp[k - 1]) __builtin_trap();
        }
        if (e.n_top && e.top_lp[0] < e.lp) __builtin_trap();
    }
    char *e = srv_json_error(400, err);
    must_parse(e);
    free(e);
    /* the request-line verdict on every prefix of the body */
    srv_reqline first = SRV_REQLINE_PENDING;
    for (size_t k = 0; k <= len && k <= SRV_REQLINE_PEEK + 1; k++) {
        srv_reqline v = srv_request_line_verdict(body, k);
        if (v != SRV_REQLINE_PENDING && v != SRV_REQLINE_VALID && v != SRV_REQLINE_INVALID) __builtin_trap();
        if (first != SRV_REQLINE_PENDING ? v != first : k >= SRV_REQLINE_PEEK && v == SRV_REQLINE_PENDING)
            __builtin_trap();
        /* a valid line has its method and a space in the window */
        if (v == SRV_REQLINE_VALID && !memchr(body, ' ', k < SRV_REQLINE_PEEK ? k : SRV_REQLINE_PEEK)) __builtin_trap();
        first = v;
    }
    /* the splitter: the cut point must not matter */
    bool open = data[0] & 2;
    size_t cut = len ? (size_t)data[0] % (len + 1) : 0;
    tern_str c1 = {0}, r1 = {0}, c2 = {0}, r2 = {0};
    bool t1, t2;
    split_all(body, len, 0, open, &c1, &r1, &t1);
    split_all(body, len, cut, open, &c2, &r2, &t2);
    if (c1.len != c2.len || r1.len != r2.len || t1 != t2 || memcmp(c1.data, c2.data, c1.len) ||
        memcmp(r1.data, r2.data, r1.len))
        __builtin_trap();
    tern_str_free(&c1);
    tern_str_free(&r1);
    tern_str_free(&c2);
    tern_str_free(&r2);
    return 0;
}
