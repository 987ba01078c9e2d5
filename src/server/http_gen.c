/*
 * http_gen.c - the requests of `tern serve` that run the model (http.c routes them
 * here): POST /v1/chat/completions, /v1/completions, llama-server's /completion and
 * /infill, Anthropic's /v1/messages and OpenAI's /v1/responses (compat.c translates
 * those two to chat and their replies back). A request is parsed, its prompt built
 * (chat template, token ids, lists of prompts, prefill, fill-in-the-middle), its
 * job(s) submitted to the scheduler; the reply is one JSON body or an SSE stream
 * (n choices per prompt interleaved), with logprobs when asked. Also
 * POST /apply-template and /v1/messages/count_tokens (the chat prompt, not run).
 */
#define _GNU_SOURCE                 /* clock_gettime under -std=c11 */
#include "server/http_internal.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void make_id(srv_http *h, srv_kind kind, srv_resp_id *id) {
    unsigned long long n = __atomic_add_fetch(&h->counter, 1, __ATOMIC_RELAXED);
    id->kind = kind;
    id->created = (long long)time(NULL);
    id->model = h->c.alias;
    snprintf(id->id, sizeof id->id, "%s-%llx%06llx", kind == SRV_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)h->started & 0xffffffffffULL, n & 0xffffff);
}

/* --------------------------------------------------------------- streaming */

/* A streamed reply of n choices (n > 1: one job per choice, chunks interleaved
 * with their choice index). */
typedef struct stream {
    srv_http *h;
    srv_api api;
    srv_compat_stream cst;          /* api != OPENAI: the chunks translated */
    srv_job *job[SRV_MAX_CHOICES];
    int n;
    conn_state *cs;                 /* valid while the reader runs (freed after completion) */
    int fd;
    srv_resp_id id;
    int n_choice;                   /* choices per prompt (job k is prompt k / n_choice) */
    bool thinking_open, include_usage;
    srv_split split[SRV_MAX_CHOICES];
    size_t seen[SRV_MAX_CHOICES];
    bool ended[SRV_MAX_CHOICES];
    int n_ended;
    tern_str out;                   /* SSE bytes not yet handed to MHD */
    size_t out_off;
    double last_out_ms;             /* now_ms() when bytes were last handed to MHD */
    bool finished;
    srv_usage total;
    size_t lp_sent[SRV_MAX_CHOICES]; /* logprob entries already streamed */
    size_t lp_off[SRV_MAX_CHOICES];  /* completions: text_offset of the next one */
} stream;

/* One chunk of the reply: OpenAI's SSE event, or (other APIs) its translation. */
static void emit_chunk(stream *s, const srv_delta *d, const srv_usage *u) {
    if (s->api == SRV_API_OPENAI) { srv_sse_chunk(&s->id, d, u, &s->out); return; }
    tern_str t = {0};
    if (!srv_sse_chunk(&s->id, d, u, &t) && t.len > 8) {
        t.data[t.len - 2] = 0;      /* "data: {...}\n\n" -> the JSON */
        srv_compat_stream_chunk(&s->cst, t.data + 6, &s->out);
    }
    tern_str_free(&t);
}

static cJSON *logprobs_json(srv_http *h, srv_kind kind, const srv_logprob *es, size_t n, size_t *off);

/* The logprobs of choice k not yet streamed whose text the client has (all of
 * them once the choice is done); NULL: none or not asked for. Marks them sent:
 * the caller puts the object into the chunk it writes now. */
static cJSON *stream_logprobs(stream *s, int k, bool all) {
    srv_job *j = s->job[k];
    if (j->logprobs < 0) return NULL;
    pthread_mutex_lock(&j->mu);
    size_t a = s->lp_sent[k], b = a;
    if (all) b = j->n_lp;
    else while (b < j->n_lp_placed && j->lp[b].end <= s->seen[k]) b++;
    srv_logprob *copy = b > a ? malloc((b - a) * sizeof *copy) : NULL;
    if (copy) memcpy(copy, j->lp + a, (b - a) * sizeof *copy);
    pthread_mutex_unlock(&j->mu);
    if (!copy) return NULL;  /* nothing new (or out of memory: they go with a later chunk) */
    size_t off = s->lp_off[k];
    cJSON *o = logprobs_json(s->h, s->api == SRV_API_NATIVE ? SRV_CHAT : s->id.kind, copy, b - a, &off);
    free(copy);
    if (o) { s->lp_sent[k] = b; s->lp_off[k] = off; }
    return o;
}

/* Turn new reply text of choice k into SSE chunks. */
static void stream_text(stream *s, int k, const char *text, size_t len, bool final) {
    srv_delta d = {0};
    d.index = k;
    if (s->id.kind == SRV_COMPLETION) {
        if (!len) return;
        char *t = malloc(len + 1);
        if (!t) return;
        memcpy(t, text, len);
        t[len] = 0;
        d.content = t;
        cJSON *lp = stream_logprobs(s, k, final);
        d.logprobs = lp;
        emit_chunk(s, &d, NULL);
        cJSON_Delete(lp);
        free(t);
        return;
    }
    tern_str c = {0}, r = {0};
    tern_str_append(&c, "", 0);
    tern_str_append(&r, "", 0);
    srv_split_push(&s->split[k], text, len, &c, &r);
    if (final) srv_split_finish(&s->split[k], &c, &r);
    /* the logprobs so far go with the last chunk written now (the content one) */
    cJSON *lp = r.len || c.len ? stream_logprobs(s, k, final) : NULL;
    if (r.len) {
        d.reasoning = r.data;
        d.logprobs = c.len ? NULL : lp;
        emit_chunk(s, &d, NULL);
        d.reasoning = NULL;
    }
    if (c.len) { d.content = c.data; d.logprobs = lp; emit_chunk(s, &d, NULL); }
    cJSON_Delete(lp);
    tern_str_free(&c);
    tern_str_free(&r);
}

/* Choice k is over: its finish chunk (or an error event); after the last one, usage and [DONE]. */
static void stream_end(stream *s, int k) {
    srv_job *j = s->job[k];
    pthread_mutex_lock(&j->mu);
    srv_finish f = j->finish;
    srv_usage u = j->usage;
    char err[256];
    snprintf(err, sizeof err, "%s", j->error);
    pthread_mutex_unlock(&j->mu);
    /* as the non-streamed reply: the prompt's figures from choice 0, the others summed */
    if (k % (s->n_choice ? s->n_choice : 1) == 0) {
        s->total.prompt_tokens += u.prompt_tokens;
        s->total.cached_tokens += u.cached_tokens;
        s->total.prompt_ms += u.prompt_ms;
    }
    s->total.completion_tokens += u.completion_tokens;
    s->total.evaluated_tokens += u.evaluated_tokens;
    if (u.gen_ms > s->total.gen_ms) s->total.gen_ms = u.gen_ms;
    s->ended[k] = true;
    s->n_ended++;
    bool failed = f == SRV_FINISH_ERROR || f == SRV_FINISH_CANCELLED;
    if (failed) {
        s->cst.api = s->api;
        srv_compat_stream_error(&s->cst, f == SRV_FINISH_ERROR ? err : "cancelled", &s->out);
        /* the other choices will not be read: end the stream now */
        for (int i = 0; i < s->n; i++) srv_job_cancel(s->job[i]);
    } else {
        srv_delta d = {0};
        d.finish = f;
        d.index = k;
        tern_chat_reply rep = {0};
        if (s->id.kind == SRV_CHAT && s->split[k].tool &&
            tern_chat_parse(s->h->fmt, j->text.data, j->text.len, s->thinking_open, &rep) == TERN_OK &&
            rep.n_tool_calls) {
            srv_delta t = {0};
            t.index = k;
            t.tool_calls = rep.tool_calls;
            t.n_tool_calls = rep.n_tool_calls;
            emit_chunk(s, &t, NULL);
            if (f == SRV_FINISH_STOP) d.finish = SRV_FINISH_TOOL_CALLS;
        }
        tern_chat_reply_free(&rep);
        cJSON *lp = stream_logprobs(s, k, true);  /* what no text chunk carried (held back, stop string) */
        d.logprobs = lp;
        emit_chunk(s, &d, NULL);
        cJSON_Delete(lp);
    }
    if (failed || s->n_ended == s->n) {
        s->cs->n_prompt = s->total.prompt_tokens;
        s->cs->n_gen = s->total.completion_tokens;
        s->cs->usage = s->total;
        s->cs->has_usage = true;
        if (!failed && (s->include_usage || s->api != SRV_API_OPENAI)) {
            srv_delta d = {0};
            emit_chunk(s, &d, &s->total);
        }
        srv_http_record(s->cs, 200);         /* before the client can read [DONE] */
        if (s->api == SRV_API_OPENAI) tern_str_append(&s->out, "data: [DONE]\n\n", 14);
        else if (!failed) srv_compat_stream_end(&s->cst, &s->out);
        s->finished = true;
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream *s = cls;
    for (;;) {
        if (s->out_off < s->out.len) {
            size_t n = s->out.len - s->out_off < max ? s->out.len - s->out_off : max;
            memcpy(buf, s->out.data + s->out_off, n);
            s->out_off += n;
            if (s->out_off == s->out.len) s->out.len = s->out_off = 0;
            s->last_out_ms = now_ms();
            return (ssize_t)n;
        }
        if (s->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        if (s->h->c.sse_ping_s > 0 && now_ms() - s->last_out_ms >= s->h->c.sse_ping_s * 1e3) {
            /* an SSE comment: clients skip it; the connection is not idle (libmicrohttpd
             * closes one idle for 120 s: 64 prompts of 8K tokens queue longer than that) */
            tern_str_append(&s->out, ": ping\n\n", 8);
            continue;
        }
        /* one choice: wait on it; several: poll each, then wait a little on the first one open */
        bool any = false;
        int first_open = -1;
        for (int k = 0; k < s->n && !s->finished; k++) {
            if (s->ended[k]) continue;
            if (first_open < 0) first_open = k;
            tern_str nt = {0};
            size_t before = s->seen[k];
            bool done = srv_job_wait(s->job[k], s->n == 1 ? 100 : 0, &s->seen[k], &nt);
            if (s->seen[k] > before || done) { stream_text(s, k, nt.data ? nt.data : "", nt.len, done); any = true; }
            tern_str_free(&nt);
            if (done) stream_end(s, k);
        }
        if (any || s->finished) continue;
        if (s->n > 1 && first_open >= 0) {
            size_t seen = s->seen[first_open];
            srv_job_wait(s->job[first_open], 20, &seen, NULL);  /* only to sleep; the text is read above */
        }
        if (srv_http_client_gone(s->fd)) {
            for (int k = 0; k < s->n; k++) srv_job_cancel(s->job[k]);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

static void stream_free(void *cls) {
    stream *s = cls;
    for (int k = 0; k < s->n; k++) {
        srv_job_cancel(s->job[k]);  /* no-op when it already finished */
        srv_job_unref(s->job[k]);
        srv_split_free(&s->split[k]);
    }
    tern_str_free(&s->out);
    srv_compat_stream_free(&s->cst);
    free(s);
}

/* -------------------------------------------------------------- generation */

static cJSON *token_obj(srv_http *h, int32_t id, float lp, bool chat) {
    size_t n = 0;
    const char *b = tern_token_bytes(h->tok, id, &n);
    tern_str t = {0};
    tern_utf8_sanitize(b ? b : "", b ? n : 0, &t);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "token", t.data ? t.data : "");
    cJSON_AddNumberToObject(o, "logprob", lp);
    if (chat) {
        cJSON *a = cJSON_AddArrayToObject(o, "bytes");
        for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)b[i]));
    }
    tern_str_free(&t);
    return o;
}

/* The logprobs object of entries e[0 .. n): chat: {content: [...]}; completions:
 * the legacy {tokens, token_logprobs, top_logprobs, text_offset}, offsets counted
 * from *off (advanced). */
static cJSON *logprobs_json(srv_http *h, srv_kind kind, const srv_logprob *es, size_t n, size_t *off) {
    cJSON *lp = cJSON_CreateObject();
    if (!lp) return NULL;
    if (kind == SRV_CHAT) {
        cJSON *content = cJSON_AddArrayToObject(lp, "content");
        for (size_t i = 0; i < n; i++) {
            const srv_logprob *e = &es[i];
            cJSON *o = token_obj(h, e->id, e->lp, true);
            cJSON *top = cJSON_AddArrayToObject(o, "top_logprobs");
            for (int k = 0; k < e->n_top; k++) cJSON_AddItemToArray(top, token_obj(h, e->top_id[k], e->top_lp[k], true));
            cJSON_AddItemToArray(content, o);
        }
    } else {
        cJSON *toks = cJSON_AddArrayToObject(lp, "tokens"), *lps = cJSON_AddArrayToObject(lp, "token_logprobs");
        cJSON *tops = cJSON_AddArrayToObject(lp, "top_logprobs"), *offs = cJSON_AddArrayToObject(lp, "text_offset");
        for (size_t i = 0; i < n; i++) {
            const srv_logprob *e = &es[i];
            cJSON *o = token_obj(h, e->id, e->lp, false);
            cJSON_AddItemToArray(toks, cJSON_CreateString(cJSON_GetStringValue(cJSON_GetObjectItem(o, "token"))));
            cJSON_Delete(o);
            cJSON_AddItemToArray(lps, cJSON_CreateNumber(e->lp));
            cJSON *m = cJSON_CreateObject();
            for (int k = 0; k < e->n_top; k++) {
                cJSON *t = token_obj(h, e->top_id[k], e->top_lp[k], false);
                const char *key = cJSON_GetStringValue(cJSON_GetObjectItem(t, "token"));
                if (!cJSON_GetObjectItemCaseSensitive(m, key)) cJSON_AddNumberToObject(m, key, e->top_lp[k]);
                cJSON_Delete(t);
            }
            cJSON_AddItemToArray(tops, m);
            cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)*off));
            size_t nb = 0;
            tern_token_bytes(h->tok, e->id, &nb);
            *off += nb;
        }
    }
    return lp;
}

/* Put the job's logprobs into choices[0].logprobs of a response body (frees body). */
static char *with_logprobs(srv_http *h, srv_kind kind, char *body, srv_job *j) {
    cJSON *root = cJSON_Parse(body);
    free(body);
    cJSON *ch = root ? cJSON_GetArrayItem(cJSON_GetObjectItem(root, "choices"), 0) : NULL;
    if (!ch) { cJSON_Delete(root); return NULL; }
    size_t off = 0;
    pthread_mutex_lock(&j->mu);
    cJSON *lp = logprobs_json(h, kind, j->lp, j->n_lp, &off);
    pthread_mutex_unlock(&j->mu);
    if (!lp) { cJSON_Delete(root); return NULL; }
    cJSON_DeleteItemFromObjectCaseSensitive(ch, "logprobs");
    cJSON_AddItemToObject(ch, "logprobs", lp);
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return out;
}

/* The vocabulary trie of the grammar masks, built on first use. */
static const tern_token_trie *get_trie(srv_http *h) {
    pthread_mutex_lock(&h->tmu);
    if (!h->trie && tern_token_trie_new(h->tok, 0, &h->trie)) h->trie = NULL;
    const tern_token_trie *t = h->trie;
    pthread_mutex_unlock(&h->tmu);
    return t;
}

/* Give a job its own grammar and match state. */
static tern_status job_constrain(srv_http *h, srv_job *j, const tern_str *gbnf, const char *root) {
    if (!gbnf->len) return TERN_OK;
    const tern_token_trie *t = get_trie(h);
    if (!t) return TERN_ERR_NOMEM;
    tern_status st = tern_grammar_parse(gbnf->data, gbnf->len, root, &j->grammar);
    if (!st) st = tern_grammar_matcher_new(j->grammar, t, &j->gm);
    if (!st) { /* the first mask now: a grammar past the engine's limits fails here, before the
                * request is queued (a 400), not at its first token (a 500); later masks of the
                * same state come from the matcher's cache */
        int nv = tern_tokenizer_n_vocab(h->tok), n_allowed = 0;
        float *l = calloc((size_t)nv, sizeof *l);
        if (!l) return TERN_ERR_NOMEM;
        st = tern_grammar_matcher_mask(j->gm, l, nv, &n_allowed);
        free(l);
    }
    return st;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

/* Choice k of an n > 1 request: a job with the same inputs (seed + k); prompt: another
 * prompt's tokens instead of j's (a list of prompts; NULL: j's). */
static srv_job *job_clone(srv_http *h, const srv_job *j, int k, const tern_str *gbnf, const char *root,
                          const tern_tokens *prompt) {
    srv_job *c = srv_job_new();
    if (!c) return NULL;
    bool ok = true;
    if (!prompt) prompt = &j->prompt;
    c->no_spec = j->no_spec; /* the choices of one request speculate alike */
    for (size_t i = 0; ok && i < prompt->n; i++) ok = !tern_tokens_push(&c->prompt, prompt->ids[i]);
    c->sp = j->sp;
    c->sp.seed = j->sp.seed + (uint64_t)k;
    c->sp.samplers = NULL;
    c->sp.dry_breakers = NULL;
    if (ok && j->samplers) ok = (c->sp.samplers = c->samplers = dup_str(j->samplers)) != NULL;
    if (ok && j->dry_ids && j->sp.n_dry_breakers) {
        ok = (c->dry_ids = malloc((size_t)j->sp.n_dry_breakers * sizeof *c->dry_ids)) != NULL;
        if (ok) memcpy(c->dry_ids, j->dry_ids, (size_t)j->sp.n_dry_breakers * sizeof *c->dry_ids);
        c->sp.dry_breakers = c->dry_ids;
    }
    c->max_tokens = j->max_tokens;
    c->stream = j->stream;
    c->ignore_eos = j->ignore_eos;
    c->no_cache = j->no_cache;
    c->logprobs = j->logprobs;
    if (ok && j->n_bias) {
        c->bias_ids = malloc(j->n_bias * sizeof *c->bias_ids);
        c->bias = malloc(j->n_bias * sizeof *c->bias);
        ok = c->bias_ids && c->bias;
        if (ok) {
            memcpy(c->bias_ids, j->bias_ids, j->n_bias * sizeof *c->bias_ids);
            memcpy(c->bias, j->bias, j->n_bias * sizeof *c->bias);
            c->n_bias = j->n_bias;
        }
    }
    if (ok && j->n_stop) {
        ok = (c->stop = calloc(j->n_stop, sizeof *c->stop)) != NULL;
        for (size_t i = 0; ok && i < j->n_stop; i++) {
            ok = (c->stop[i] = dup_str(j->stop[i])) != NULL;
            if (ok) c->n_stop = i + 1;
        }
    }
    if (ok) ok = !job_constrain(h, c, gbnf, root);
    if (!ok) { srv_job_unref(c); return NULL; }
    return c;
}

/* The non-streamed body of choice k (choices[0] of a one-choice response). */
static char *choice_body(srv_http *h, srv_kind kind, srv_api api, const srv_resp_id *id, srv_job *j,
                         bool thinking_open, const srv_usage *u, srv_finish f, char *err, size_t en) {
    tern_chat_reply rep = {0};
    bool parsed = kind == SRV_CHAT && tern_chat_parse(h->fmt, j->text.data, j->text.len, thinking_open, &rep) == TERN_OK;
    char *body = NULL;
    if (kind == SRV_CHAT && !parsed) snprintf(err, en, "%s", tern_last_error());
    else {
        body = srv_json_response(id, j->text.data, parsed ? &rep : NULL, f, u);
        /* llama-server's completion_probabilities have the chat shape (token, logprob, bytes, top_logprobs) */
        if (body && j->logprobs >= 0) body = with_logprobs(h, api == SRV_API_NATIVE ? SRV_CHAT : kind, body, j);
        if (!body) snprintf(err, en, "out of memory");
    }
    tern_chat_reply_free(&rep);
    return body;
}

/* A byte string inside a token's bytes. */
static bool token_has(const char *b, size_t n, const char *s) {
    size_t l = strlen(s);
    for (size_t i = 0; i + l <= n; i++) if (!memcmp(b + i, s, l)) return true;
    return false;
}

/* DRY sequence breakers as token ids: every token whose bytes hold one of the strings
 * (llama.cpp's defaults "\n", ":", "\"", "*" when the request gives none). */
static tern_status dry_breaker_ids(srv_http *h, const srv_request *r, srv_job *j) {
    static const char *const def[] = {"\n", ":", "\"", "*"};
    const char *const *bs = r->dry_breakers_set ? (const char *const *)r->dry_breakers : def;
    size_t nb = r->dry_breakers_set ? r->n_dry_breakers : 4;
    int32_t nv = tern_tokenizer_n_vocab(h->tok), cnt = 0;
    if (!nb) return TERN_OK;
    if (!(j->dry_ids = malloc((size_t)nv * sizeof *j->dry_ids))) return TERN_ERR_NOMEM;
    for (int32_t id = 0; id < nv; id++) {
        size_t n = 0;
        const char *b = tern_token_bytes(h->tok, id, &n);
        for (size_t k = 0; b && k < nb; k++)
            if (token_has(b, n, bs[k])) { j->dry_ids[cnt++] = id; break; }
    }
    j->sp.dry_breakers = j->dry_ids;
    j->sp.n_dry_breakers = cnt;
    return TERN_OK;
}

/* The last message is the assistant's: render without closing it, so the reply continues its
 * text (llama-server's prefill). Drops the template's end of turn (<|im_end|> and "\n"). */
static bool is_prefill(const srv_request *r) {
    return r->kind == SRV_CHAT && r->n_msgs > 1 && !strcmp(r->msgs[r->n_msgs - 1].role, "assistant") &&
           !r->msgs[r->n_msgs - 1].n_tool_calls;
}
static bool token_is(const tern_tokenizer *t, int32_t id, const char *s) {
    size_t n = 0;
    const char *b = tern_token_bytes(t, id, &n);
    return b && n == strlen(s) && !memcmp(b, s, n);
}
static void strip_turn_end(const tern_tokenizer *t, tern_tokens *p) {
    if (p->n >= 2 && token_is(t, p->ids[p->n - 1], "\n") && token_is(t, p->ids[p->n - 2], "<|im_end|>")) p->n -= 2;
}

/* /infill: the FIM prompt <fim_prefix> prefix <fim_suffix> suffix <fim_middle> prompt, with the
 * tokenizer's own FIM tokens; 400 when it has none. */
static int infill_prompt(srv_http *h, const srv_request *r, tern_tokens *out, char *err, size_t en) {
    static const char *const names[][3] = {{"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"},
                                           {"<fim_prefix>", "<fim_suffix>", "<fim_middle>"},
                                           {"<PRE>", "<SUF>", "<MID>"}};
    int32_t ids[3] = {-1, -1, -1};
    for (size_t v = 0; v < sizeof names / sizeof names[0] && ids[2] < 0; v++) {
        for (int i = 0; i < 3; i++) ids[i] = tern_token_lookup(h->tok, names[v][i], strlen(names[v][i]));
        if (ids[0] < 0 || ids[1] < 0 || ids[2] < 0) ids[2] = -1;
    }
    if (ids[2] < 0) {
        snprintf(err, en, "/infill needs fill-in-the-middle tokens (<|fim_prefix|>, <|fim_suffix|>, <|fim_middle|>), "
                          "which this model's tokenizer does not have");
        return 400;
    }
    const char *parts[3] = {r->input_prefix ? r->input_prefix : "", r->input_suffix ? r->input_suffix : "",
                            r->prompt ? r->prompt : ""};
    tern_status st = TERN_OK;
    for (int i = 0; i < 3 && !st; i++) {
        st = tern_tokens_push(out, ids[i]);
        if (!st) st = tern_tokenize(h->tok, parts[i], strlen(parts[i]), false, out);
    }
    if (st) { snprintf(err, en, "%s", tern_last_error()); return st == TERN_ERR_NOMEM ? 500 : 400; }
    return 0;
}

/* POST /apply-template: the chat request's prompt as text, {"prompt": "..."} (llama-server);
 * POST /v1/messages/count_tokens: an Anthropic request's prompt tokens, {"input_tokens": n}. */
enum MHD_Result srv_http_apply_template(srv_http *h, struct MHD_Connection *conn, conn_state *cs) {
    srv_request req;
    char err[512], *tbody = NULL;
    const char *body = cs->body.data;
    size_t blen = cs->body.len;
    bool count = cs->route == R_COUNT_TOKENS;
    if (count) {
        /* count_tokens takes a Messages body without max_tokens */
        cJSON *root = srv_json_parse_whole(body, blen, NULL);
        if (cJSON_IsObject(root) && !cJSON_GetObjectItemCaseSensitive(root, "max_tokens"))
            cJSON_AddNumberToObject(root, "max_tokens", 1);
        char *b2 = root ? cJSON_PrintUnformatted(root) : NULL;
        cJSON_Delete(root);
        int trc = srv_compat_request(SRV_API_ANTHROPIC, b2 ? b2 : body ? body : "", b2 ? strlen(b2) : body ? blen : 0,
                                     &tbody, err, sizeof err);
        free(b2);
        if (trc) return srv_http_send_error(conn, cs, trc, err);
        body = tbody;
        blen = strlen(tbody);
    }
    int rc = srv_parse_request(SRV_CHAT, body, blen, &req, err, sizeof err);
    free(tbody);
    if (rc) { srv_request_free(&req); return srv_http_send_error(conn, cs, rc, err); }
    if (count) {
        bool think = req.thinking < 0 ? h->think_default && !is_prefill(&req) : req.thinking == 1;
        tern_chat_opts co = {req.tools_json, !is_prefill(&req), think};
        tern_tokens t = {0};
        tern_status st = tern_chat_tokenize(h->tok, h->fmt, req.msgs, req.n_msgs, &co, &t);
        if (!st && !co.add_generation_prompt) strip_turn_end(h->tok, &t);
        srv_request_free(&req);
        size_t n = t.n;
        tern_tokens_free(&t);
        if (st) return srv_http_send_error(conn, cs, st == TERN_ERR_NOMEM ? 500 : 400, tern_last_error());
        char out[64];
        snprintf(out, sizeof out, "{\"input_tokens\":%zu}", n);
        return srv_http_send_json(conn, cs, 200, dup_str(out));
    }
    bool think = req.thinking < 0 ? h->think_default : req.thinking == 1, pre = is_prefill(&req);
    tern_chat_opts co = {req.tools_json, !pre, think};
    tern_str out = {0};
    tern_status st = tern_str_append(&out, "", 0);
    if (!st) st = tern_chat_render(h->fmt, req.msgs, req.n_msgs, &co, &out);
    if (!st && pre && out.len >= 11 && !memcmp(out.data + out.len - 11, "<|im_end|>\n", 11)) out.data[out.len -= 11] = 0;
    srv_request_free(&req);
    if (st) { tern_str_free(&out); return srv_http_send_error(conn, cs, st == TERN_ERR_NOMEM ? 500 : 400, tern_last_error()); }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "prompt", out.data);
    tern_str_free(&out);
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return srv_http_send_json(conn, cs, 200, js);
}

enum MHD_Result srv_http_generate(srv_http *h, struct MHD_Connection *conn, conn_state *cs) {
    srv_kind kind = cs->route == R_COMPLETIONS || cs->route == R_NATIVE || cs->route == R_INFILL ? SRV_COMPLETION
                                                                                                  : SRV_CHAT;
    srv_api api = cs->api;
    srv_request req;
    char err[512];
    const char *body = cs->body.data;
    size_t blen = cs->body.len;
    char *tbody = NULL;
    if (api == SRV_API_ANTHROPIC || api == SRV_API_RESPONSES) {
        int trc = srv_compat_request(api, body ? body : "", body ? blen : 0, &tbody, err, sizeof err);
        if (trc) return srv_http_send_error(conn, cs, trc, err);
        body = tbody;
        blen = strlen(tbody);
    }
    int rc = srv_parse_request_api(kind, api == SRV_API_NATIVE ? SRV_API_NATIVE : SRV_API_OPENAI, body, blen, &req, err,
                                   sizeof err);
    free(tbody);
    if (!rc && cs->route == R_NATIVE && (req.input_prefix || req.input_suffix)) {
        snprintf(err, sizeof err, "'input_prefix' and 'input_suffix' are /infill's fields");
        rc = 400;
    }
    int n_prompts = kind == SRV_CHAT ? 1 : (int)req.n_prompts;
    if (!rc && n_prompts * req.n > SRV_MAX_CHOICES) {
        snprintf(err, sizeof err, "%d prompts x n = %d is more than %d choices", n_prompts, req.n, SRV_MAX_CHOICES);
        rc = 400;
    }
    if (!rc && cs->route == R_INFILL && n_prompts != 1) {
        snprintf(err, sizeof err, "/infill takes one prompt");
        rc = 400;
    }
    if (rc) { srv_request_free(&req); return srv_http_send_error(conn, cs, rc, err); }
    tern_str gbnf = {0};
    const char *groot = "root";
    if ((rc = srv_constraint_grammar(&req, h->fmt, &gbnf, &groot, err, sizeof err))) {
        tern_str_free(&gbnf);
        srv_request_free(&req);
        return srv_http_send_error(conn, cs, rc, err);
    }
    bool constrained = gbnf.len > 0;
    srv_job *j = srv_job_new();
    if (!j) { tern_str_free(&gbnf); srv_request_free(&req); return srv_http_send_error(conn, cs, 500, "out of memory"); }
    bool think = false, thinking_open = false;
    tern_status st = TERN_OK;
    int32_t nv = tern_tokenizer_n_vocab(h->tok);
    tern_tokens ptoks[SRV_MAX_PROMPTS];
    memset(ptoks, 0, sizeof ptoks);
    int prc = 0;                    /* a 400 found while building the prompts */
    if (kind == SRV_CHAT) {
        /* a constrained reply is all content: thinking is off unless asked for (refused then) */
        bool pre = is_prefill(&req);
        think = req.thinking < 0 ? (!constrained && h->think_default && !pre) : req.thinking == 1;
        thinking_open = think && h->fmt == TERN_CHAT_QWEN35 && !pre;
        tern_chat_opts co = {req.tools_json, !pre, think};
        st = tern_chat_tokenize(h->tok, h->fmt, req.msgs, req.n_msgs, &co, &j->prompt);
        if (!st && pre) strip_turn_end(h->tok, &j->prompt);
        if (!st) srv_job_chat_marks(j, h->tok, true);
    } else if (cs->route == R_INFILL) {
        prc = infill_prompt(h, &req, &j->prompt, err, sizeof err);
    } else {
        for (int p = 0; p < n_prompts && !st && !prc; p++) {
            const srv_prompt *q = &req.prompts[p];
            tern_tokens *dst = p ? &ptoks[p] : &j->prompt;
            if (q->text) st = tern_tokenize(h->tok, q->text, strlen(q->text), true, dst);
            for (size_t i = 0; !q->text && i < q->n_ids && !st && !prc; i++) {
                if (q->ids[i] >= nv) {
                    snprintf(err, sizeof err, "token id %d in 'prompt'%s is not in the vocabulary (%d tokens)",
                             (int)q->ids[i], n_prompts > 1 ? " (a list)" : "", (int)nv);
                    prc = 400;
                } else {
                    st = tern_tokens_push(dst, q->ids[i]);
                }
            }
        }
    }
    if (!st && !prc && kind != SRV_CHAT && cs->route != R_INFILL) srv_job_chat_marks(j, h->tok, false);
    int n_ctx = 0;
    srv_sched_stats(h->sched, NULL, NULL, NULL, &n_ctx);
    cs->n_prompt = j->prompt.n;
    size_t bad = 0;                 /* a prompt (1-based) that is empty or too long */
    for (int p = 0; p < n_prompts && !st && !prc && !bad; p++) {
        size_t pn = p ? ptoks[p].n : j->prompt.n;
        if (!pn || pn > (size_t)n_ctx) bad = (size_t)p + 1;
    }
    if (st || prc || bad) {
        size_t pn = bad ? (bad > 1 ? ptoks[bad - 1].n : j->prompt.n) : 0;
        if (st) snprintf(err, sizeof err, "%s", tern_last_error());
        else if (bad && !pn) snprintf(err, sizeof err, "the prompt is empty");
        else if (bad) snprintf(err, sizeof err, "the prompt (%zu tokens) does not fit the context of %d tokens", pn, n_ctx);
        for (int p = 0; p < SRV_MAX_PROMPTS; p++) tern_tokens_free(&ptoks[p]);
        srv_job_unref(j);
        srv_request_free(&req);
        tern_str_free(&gbnf);
        return srv_http_send_error(conn, cs, st == TERN_ERR_NOMEM ? 500 : prc ? prc : 400, err);
    }
    /* sampling defaults: the model's general.sampling.* keys, else the Qwen3 model card
     * as `tern run` (thinking: 0.6 / 0.95) */
    j->sp = req.sp;
    if (!req.temp_set) j->sp.temperature = h->c.default_temp >= 0 ? h->c.default_temp : think ? 0.6f : 0.7f;
    if (!req.top_p_set) j->sp.top_p = h->c.default_top_p >= 0 ? h->c.default_top_p : think ? 0.95f : 0.8f;
    if (!req.top_k_set) j->sp.top_k = h->c.default_top_k >= 0 ? h->c.default_top_k : 20;
    if (!req.min_p_set) j->sp.min_p = h->c.default_min_p >= 0 ? h->c.default_min_p : 0.0f;
    if (!req.repeat_set && h->c.default_repeat_penalty > 0) j->sp.repeat_penalty = h->c.default_repeat_penalty;
    if (h->c.default_penalty_last_n > 0 && !req.last_n_set) j->sp.penalty_last_n = h->c.default_penalty_last_n;
    if (!req.freq_set && h->c.has_default_freq) j->sp.frequency_penalty = h->c.default_freq;
    if (!req.presence_set && h->c.has_default_presence) j->sp.presence_penalty = h->c.default_presence;
    if (!req.seed_set) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        j->sp.seed = (uint64_t)ts.tv_sec * 1000000007ULL ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)(uintptr_t)j << 17);
    }
    /* llama.cpp's stages: the job owns the strings and ids the params point at */
    j->samplers = req.samplers;
    req.samplers = NULL;
    j->sp.samplers = j->samplers;
    j->sp.dry_breakers = NULL;
    j->sp.n_dry_breakers = 0;
    tern_status dst = j->sp.dry_multiplier > 0 ? dry_breaker_ids(h, &req, j) : TERN_OK;
    tern_sampler *probe = NULL;
    if (!dst && tern_sampler_new(&j->sp, 1, &probe)) {
        snprintf(err, sizeof err, "%s", tern_last_error());
        dst = TERN_ERR_INVALID_ARG;
    }
    tern_sampler_free(probe);
    j->no_spec = req.no_spec; /* "speculative": false (serve --spec) */
    if (dst) {
        for (int p = 0; p < SRV_MAX_PROMPTS; p++) tern_tokens_free(&ptoks[p]);
        srv_job_unref(j);
        srv_request_free(&req);
        tern_str_free(&gbnf);
        return srv_http_send_error(conn, cs, dst == TERN_ERR_NOMEM ? 500 : 400, dst == TERN_ERR_NOMEM ? "out of memory" : err);
    }
    j->max_tokens = req.max_tokens ? req.max_tokens : h->c.default_max_tokens;
    j->ignore_eos = req.ignore_eos;
    j->no_cache = !req.cache_prompt;
    for (size_t i = 0; i < req.n_bias; i++)
        if (req.bias_ids[i] >= nv) {
            snprintf(err, sizeof err, "'logit_bias' key %d is not a token id (vocabulary of %d)", (int)req.bias_ids[i], (int)nv);
            for (int p = 0; p < SRV_MAX_PROMPTS; p++) tern_tokens_free(&ptoks[p]);
            srv_job_unref(j);
            srv_request_free(&req);
            tern_str_free(&gbnf);
            return srv_http_send_error(conn, cs, 400, err);
        }
    j->logprobs = req.logprobs;
    j->bias_ids = req.bias_ids;
    j->bias = req.bias;
    j->n_bias = req.n_bias;
    req.bias_ids = NULL;
    req.bias = NULL;
    req.n_bias = 0;
    j->stream = req.stream;
    j->stop = req.stop;
    j->n_stop = req.n_stop;
    req.stop = NULL;
    req.n_stop = 0;
    bool streamed = req.stream, include_usage = req.include_usage;
    int n_choice = req.n, n = n_prompts * req.n;
    srv_request_free(&req);
    srv_job *jobs[SRV_MAX_CHOICES] = {j};
    /* a grammar the constraint engine refuses (too large, too ambiguous: its limits) is
     * the client's fault: 400 with the engine's reason; only running out of memory is ours */
    tern_status cst = job_constrain(h, j, &gbnf, groot);
    if (cst && cst != TERN_ERR_NOMEM) {
        snprintf(err, sizeof err, "the output constraint (response_format, grammar or tools) was refused: %s",
                 tern_last_error());
        for (int p = 0; p < SRV_MAX_PROMPTS; p++) tern_tokens_free(&ptoks[p]);
        tern_str_free(&gbnf);
        srv_job_unref(j);
        return srv_http_send_error(conn, cs, 400, err);
    }
    bool ok = !cst;
    /* choice (p, k) is jobs[p * n_choice + k]: prompt p's first choice leads, its others copy
     * its evaluated prompt */
    for (int p = 0; ok && p < n_prompts; p++) {
        srv_job *lead = jobs[0];
        if (p) {
            ok = (lead = jobs[p * n_choice] = job_clone(h, j, 0, &gbnf, groot, &ptoks[p])) != NULL;
            tern_tokens_free(&ptoks[p]);
        }
        for (int k = 1; ok && k < n_choice; k++) {
            ok = (jobs[p * n_choice + k] = job_clone(h, lead, k, &gbnf, groot, NULL)) != NULL;
            if (ok) srv_job_follow(jobs[p * n_choice + k], lead);
        }
    }
    for (int p = 0; p < SRV_MAX_PROMPTS; p++) tern_tokens_free(&ptoks[p]);
    tern_str_free(&gbnf);
    if (!ok) {
        for (int k = 0; k < n; k++) srv_job_unref(jobs[k]);
        return srv_http_send_error(conn, cs, 500, "out of memory");
    }
    int qrc = srv_sched_submit_all(h->sched, jobs, n);
    if (qrc) {
        for (int k = 0; k < n; k++) srv_job_unref(jobs[k]);
        return srv_http_send_error(conn, cs, 503, qrc == SRV_SUBMIT_MEMORY
                                   ? "not enough free memory for another request now (--admit-free-mib); retry later"
                                   : "the server is busy (request queue full); retry later");
    }
    srv_resp_id id;
    make_id(h, kind, &id);
    char cid[64];                   /* the id other APIs show */
    snprintf(cid, sizeof cid, "%s%s", api == SRV_API_ANTHROPIC ? "msg_" : "", strchr(id.id, '-') + 1);
    int fd = conn_fd(conn);
    if (streamed) {
        stream *s = calloc(1, sizeof *s);
        if (!s) {
            for (int k = 0; k < n; k++) { srv_job_cancel(jobs[k]); srv_job_unref(jobs[k]); }
            return srv_http_send_error(conn, cs, 500, "out of memory");
        }
        s->h = h;
        s->n = n;
        s->n_choice = n_choice;
        s->api = api;
        srv_compat_stream_init(&s->cst, api, cid, cs->n_prompt);
        s->cs = cs;
        s->fd = fd;
        s->last_out_ms = now_ms();
        s->id = id;
        s->thinking_open = thinking_open;
        s->include_usage = include_usage;
        tern_str_append(&s->out, "", 0);
        for (int k = 0; k < n; k++) {
            s->job[k] = jobs[k];
            srv_split_init(&s->split[k], thinking_open);
            if (kind == SRV_CHAT) {
                srv_delta d = {0};
                d.role = true;
                d.index = k;
                emit_chunk(s, &d, NULL);
            }
        }
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, s, stream_free);
        if (!r) { stream_free(s); return MHD_NO; }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        srv_http_add_cors(r);
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        cs->status = 200;
        enum MHD_Result ret = MHD_queue_response(conn, 200, r);
        MHD_destroy_response(r);
        return ret;
    }
    bool cancelled = false;
    for (int k = 0; k < n; k++) {
        size_t seen = 0;
        while (!srv_job_wait(jobs[k], 100, &seen, NULL))
            if (!cancelled && srv_http_client_gone(fd)) {
                for (int i = 0; i < n; i++) srv_job_cancel(jobs[i]);
                cancelled = true;
            }
    }
    srv_finish f[SRV_MAX_CHOICES] = {0};
    srv_usage u[SRV_MAX_CHOICES], tot = {0};
    int failed = -1;
    for (int k = 0; k < n; k++) {
        pthread_mutex_lock(&jobs[k]->mu);
        f[k] = jobs[k]->finish;
        u[k] = jobs[k]->usage;
        pthread_mutex_unlock(&jobs[k]->mu);
        if (!k) tot = u[k];
        else {
            if (k % n_choice == 0) {    /* another prompt's lead: its prompt counts too */
                tot.prompt_tokens += u[k].prompt_tokens;
                tot.cached_tokens += u[k].cached_tokens;
                tot.prompt_ms += u[k].prompt_ms;
            }
            tot.completion_tokens += u[k].completion_tokens;
            tot.evaluated_tokens += u[k].evaluated_tokens;
            if (u[k].gen_ms > tot.gen_ms) tot.gen_ms = u[k].gen_ms;
        }
        if (failed < 0 && (f[k] == SRV_FINISH_ERROR || f[k] == SRV_FINISH_CANCELLED)) failed = k;
    }
    cs->n_prompt = tot.prompt_tokens;
    cs->n_gen = tot.completion_tokens;
    cs->usage = tot;
    cs->has_usage = true;
    enum MHD_Result ret;
    if (cancelled || (failed >= 0 && f[failed] == SRV_FINISH_CANCELLED)) {
        cs->status = 499;           /* nginx's "client closed request", for the log */
        ret = MHD_NO;
    } else if (failed >= 0) {
        ret = srv_http_send_error(conn, cs, jobs[failed]->retry || strstr(jobs[failed]->error, "shutting down") ? 503 : 500,
                                  jobs[failed]->error);
    } else {
        /* choice 0's body, the other choices' objects appended (index k), usage summed */
        char *body = choice_body(h, kind, api, &id, jobs[0], thinking_open, &tot, f[0], err, sizeof err);
        cJSON *root = body && n > 1 ? cJSON_Parse(body) : NULL;
        cJSON *choices = root ? cJSON_GetObjectItemCaseSensitive(root, "choices") : NULL;
        for (int k = 1; body && k < n; k++) {
            char *bk = choice_body(h, kind, api, &id, jobs[k], thinking_open, &u[k], f[k], err, sizeof err);
            cJSON *rk = bk ? cJSON_Parse(bk) : NULL;
            free(bk);
            cJSON *ck = rk ? cJSON_DetachItemFromArray(cJSON_GetObjectItemCaseSensitive(rk, "choices"), 0) : NULL;
            cJSON_Delete(rk);
            if (!ck || !choices) { cJSON_Delete(ck); free(body); body = NULL; break; }
            cJSON_ReplaceItemInObjectCaseSensitive(ck, "index", cJSON_CreateNumber(k));
            cJSON_AddItemToArray(choices, ck);
        }
        if (body && root) {
            free(body);
            body = cJSON_PrintUnformatted(root);
        }
        cJSON_Delete(root);
        if (body && api != SRV_API_OPENAI) {
            char *b2 = srv_compat_reply(api, body, cid);
            free(body);
            body = b2;
            if (!body) snprintf(err, sizeof err, "out of memory");
        }
        ret = body ? srv_http_send_json(conn, cs, 200, body) : srv_http_send_error(conn, cs, 500, err);
    }
    for (int k = 0; k < n; k++) srv_job_unref(jobs[k]);
    return ret;
}
