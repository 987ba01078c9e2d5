/*
 * embed.c - the embeddings endpoints of `tern serve` without sockets or a model: the
 * request body (OpenAI's /v1/embeddings and llama-server's native /embedding) to the
 * token lists to embed, and the vectors to the reply JSON (float arrays or base64 of the
 * little-endian float32 bytes). Parsed from untrusted bytes: bounded, fuzzed
 * (tests/fuzz/fuzz_server.c), every bad field a 400 naming it. The model side (the
 * worker thread that owns the embedding session) is embed_run.c.
 */
#include "server/server.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void srv_embed_req_free(srv_embed_req *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n; i++) free(r->ids[i]);
    free(r->ids);
    free(r->n_ids);
    memset(r, 0, sizeof *r);
}

/* One input (a string, or an array of token ids) -> its ids, appended as r->ids[r->n]. */
static int add_input(const cJSON *v, const char *where, const tern_tokenizer *tok, int n_vocab, int n_ctx,
                     srv_embed_req *r, char *err, size_t en) {
    tern_tokens t = {0};
    if (cJSON_IsString(v)) {
        const char *s = v->valuestring;
        size_t len = strlen(s);
        if (!len) return srv_fail(err, en, "'%s' is an empty string (nothing to embed)", where);
        if (!tok) return srv_fail(err, en, "'%s': text needs the tokenizer", where);
        /* the text is plain text: no control token is made from it (give ids for those) */
        if (tern_tokenize(tok, s, len, false, &t) != TERN_OK) {
            tern_tokens_free(&t);
            return srv_fail(err, en, "'%s' cannot be tokenized", where);
        }
    } else if (cJSON_IsArray(v)) {
        for (const cJSON *e = v->child; e; e = e->next) {
            double d = cJSON_IsNumber(e) ? e->valuedouble : -1;
            if (!cJSON_IsNumber(e) || d != floor(d) || d < 0 || d >= n_vocab) {
                tern_tokens_free(&t);
                return srv_fail(err, en, "'%s' holds %s: token ids are integers in [0, %d)", where,
                                cJSON_IsNumber(e) ? "an id out of range" : "a value that is not a token id", n_vocab);
            }
            if (t.n >= (size_t)n_ctx) break; /* counted below, without holding more */
            if (tern_tokens_push(&t, (int32_t)d) != TERN_OK) {
                tern_tokens_free(&t);
                return srv_fail(err, en, "out of memory");
            }
        }
        if (!t.n) return srv_fail(err, en, "'%s' is an empty list of token ids (nothing to embed)", where);
    } else {
        return srv_fail(err, en, "'%s' must be a string or an array of token ids", where);
    }
    if (t.n > (size_t)n_ctx || (cJSON_IsArray(v) && (size_t)cJSON_GetArraySize(v) > (size_t)n_ctx)) {
        size_t n = cJSON_IsArray(v) ? (size_t)cJSON_GetArraySize(v) : t.n;
        tern_tokens_free(&t);
        return srv_fail(err, en, "'%s' has %zu tokens, more than the embedding context of %d (--ctx)", where, n, n_ctx);
    }
    r->ids[r->n] = t.ids;
    r->n_ids[r->n] = t.n;
    r->n++;
    r->n_tokens += t.n;
    return 0;
}

static bool is_id_list(const cJSON *v) {
    return cJSON_IsArray(v) && v->child && cJSON_IsNumber(v->child);
}

int srv_embed_parse(bool native, const char *body, size_t len, const tern_tokenizer *tok, int n_vocab, int dim,
                    int n_ctx, srv_embed_req *r, char *err, size_t en) {
    memset(r, 0, sizeof *r);
    r->normalize = true;
    if (err && en) err[0] = 0;
    if (!body) return srv_fail(err, en, "empty body");
    size_t bad_at = 0;
    cJSON *root = srv_json_parse_whole(body, len, &bad_at);
    if (!root && bad_at) return srv_fail(err, en, "the body has more after its JSON value (at byte %zu)", bad_at);
    if (!root) return srv_fail(err, en, "the body is not valid JSON");
    int rc = 0;
    if (!cJSON_IsObject(root)) { rc = srv_fail(err, en, "the body must be a JSON object"); goto out; }
    /* the accepted fields; any other is named in a 400 */
    static const char *const known[] = {"input", "content", "model", "encoding_format", "dimensions", "user",
                                        "embd_normalize"};
    for (const cJSON *f = root->child; f; f = f->next) {
        size_t k = 0;
        while (k < sizeof known / sizeof known[0] && strcmp(f->string, known[k])) k++;
        if (k == sizeof known / sizeof known[0]) {
            rc = srv_fail(err, en, "unknown field '%.64s' (not supported by tern; docs/server.md lists the accepted fields)",
                          f->string);
            goto out;
        }
    }
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(root, "input");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(root, "content");
    const char *in_name = "input";
    if (native && !in) { in = content; in_name = "content"; }  /* llama-server's native field */
    else if (content) { rc = srv_fail(err, en, native ? "give 'input' or 'content', not both" : "unknown field 'content' (use 'input')"); goto out; }
    if (!in) { rc = srv_fail(err, en, "'%s' is required", in_name); goto out; }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (v && !cJSON_IsString(v)) { rc = srv_fail(err, en, "'model' must be a string"); goto out; }
    v = cJSON_GetObjectItemCaseSensitive(root, "user");
    if (v && !cJSON_IsString(v)) { rc = srv_fail(err, en, "'user' must be a string"); goto out; }
    v = cJSON_GetObjectItemCaseSensitive(root, "encoding_format");
    if (v) {
        if (!cJSON_IsString(v) || (strcmp(v->valuestring, "float") && strcmp(v->valuestring, "base64"))) {
            rc = srv_fail(err, en, "'encoding_format' must be \"float\" or \"base64\"");
            goto out;
        }
        r->base64 = !strcmp(v->valuestring, "base64");
    }
    v = cJSON_GetObjectItemCaseSensitive(root, "dimensions");
    if (v && (!cJSON_IsNumber(v) || v->valuedouble != dim)) {
        rc = cJSON_IsNumber(v) ? srv_fail(err, en, "'dimensions' %g is not supported: this model's embeddings have %d "
                                                   "(other sizes are not)", v->valuedouble, dim)
                               : srv_fail(err, en, "'dimensions' must be an integer");
        goto out;
    }
    v = cJSON_GetObjectItemCaseSensitive(root, "embd_normalize");  /* llama-server's: 2 Euclidean, -1 none */
    if (v) {
        if (!cJSON_IsNumber(v) || (v->valuedouble != 2 && v->valuedouble != -1)) {
            rc = srv_fail(err, en, "'embd_normalize' is supported only as 2 (Euclidean, the default) or -1 (none)");
            goto out;
        }
        r->normalize = v->valuedouble == 2;
    }
    /* input: a string, token ids, or an array of either */
    size_t n_in = cJSON_IsArray(in) && !is_id_list(in) ? (size_t)cJSON_GetArraySize(in) : 1;
    if (cJSON_IsArray(in) && n_in == 0) { rc = srv_fail(err, en, "'%s' is an empty array (nothing to embed)", in_name); goto out; }
    if (n_in > SRV_MAX_EMBED_INPUTS) {
        rc = srv_fail(err, en, "'%s' has %zu inputs, more than %d", in_name, n_in, SRV_MAX_EMBED_INPUTS);
        goto out;
    }
    r->ids = calloc(n_in, sizeof *r->ids);
    r->n_ids = calloc(n_in, sizeof *r->n_ids);
    if (!r->ids || !r->n_ids) { rc = srv_fail(err, en, "out of memory"); goto out; }
    if (!cJSON_IsArray(in) || is_id_list(in)) {
        rc = add_input(in, in_name, tok, n_vocab, n_ctx, r, err, en);
    } else {
        size_t i = 0;
        for (const cJSON *e = in->child; e && !rc; e = e->next, i++) {
            char where[48];
            snprintf(where, sizeof where, "%s[%zu]", in_name, i);
            if (!cJSON_IsString(e) && !cJSON_IsArray(e))
                rc = srv_fail(err, en, "'%s' must be a string or an array of token ids", where);
            else
                rc = add_input(e, where, tok, n_vocab, n_ctx, r, err, en);
        }
    }
out:
    cJSON_Delete(root);
    return rc;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* base64 (RFC 4648, padded) of n bytes appended to out */
static tern_status put_base64(tern_str *out, const unsigned char *p, size_t n) {
    char q[4];
    tern_status st = TERN_OK;
    for (size_t i = 0; i < n && !st; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        q[0] = b64[v >> 18 & 63];
        q[1] = b64[v >> 12 & 63];
        q[2] = i + 1 < n ? b64[v >> 6 & 63] : '=';
        q[3] = i + 2 < n ? b64[v & 63] : '=';
        st = tern_str_append(out, q, 4);
    }
    return st;
}

static tern_status put_vec(tern_str *out, const float *x, int dim, bool base64) {
    if (base64) {
        unsigned char *b = malloc((size_t)dim * 4 + 1);
        if (!b) return TERN_ERR_NOMEM;
        for (int k = 0; k < dim; k++) {
            uint32_t u;
            memcpy(&u, &x[k], 4);
            for (int j = 0; j < 4; j++) b[k * 4 + j] = (unsigned char)(u >> (8 * j)); /* little-endian */
        }
        tern_status st = tern_str_append(out, "\"", 1);
        if (!st) st = put_base64(out, b, (size_t)dim * 4);
        if (!st) st = tern_str_append(out, "\"", 1);
        free(b);
        return st;
    }
    tern_status st = tern_str_append(out, "[", 1);
    char num[32];
    for (int k = 0; k < dim && !st; k++) {
        int n = snprintf(num, sizeof num, "%s%.9g", k ? "," : "", isfinite(x[k]) ? (double)x[k] : 0.0);
        st = tern_str_append(out, num, (size_t)n);
    }
    if (!st) st = tern_str_append(out, "]", 1);
    return st;
}

/* JSON string contents of s (quotes and control bytes escaped) */
static tern_status put_json_str(tern_str *out, const char *s) {
    cJSON *j = cJSON_CreateString(s ? s : "");
    char *p = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!p) return TERN_ERR_NOMEM;
    tern_status st = tern_str_append(out, p, strlen(p));
    free(p);
    return st;
}

char *srv_embed_response(const srv_embed_req *r, const float *vecs, int dim, const char *model, bool native) {
    tern_str o = {0};
    char num[64];
    tern_status st = tern_str_append(&o, native ? "[" : "{\"object\":\"list\",\"data\":[", native ? 1 : 25);
    for (size_t i = 0; i < r->n && !st; i++) {
        int n = native ? snprintf(num, sizeof num, "%s{\"index\":%zu,\"embedding\":[", i ? "," : "", i)
                       : snprintf(num, sizeof num, "%s{\"object\":\"embedding\",\"index\":%zu,\"embedding\":",
                                  i ? "," : "", i);
        st = tern_str_append(&o, num, (size_t)n);
        if (!st) st = put_vec(&o, vecs + i * (size_t)dim, dim, r->base64 && !native);
        if (!st) st = tern_str_append(&o, native ? "]}" : "}", native ? 2 : 1);
    }
    if (native) {
        if (!st) st = tern_str_append(&o, "]", 1);
    } else {
        if (!st) st = tern_str_append(&o, "],\"model\":", 10);
        if (!st) st = put_json_str(&o, model);
        int n = snprintf(num, sizeof num, ",\"usage\":{\"prompt_tokens\":%zu,\"total_tokens\":%zu}}", r->n_tokens,
                         r->n_tokens);
        if (!st) st = tern_str_append(&o, num, (size_t)n);
    }
    if (st) {
        tern_str_free(&o);
        return NULL;
    }
    return o.data;
}
