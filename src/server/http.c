/*
 * http.c - the HTTP side of `tern serve` on libmicrohttpd (one thread per
 * connection, an internal listening thread). Handler threads only parse,
 * tokenize, submit a job to the scheduler and move its text to the client.
 *
 *   GET  /health                  {"status":"ok","model",...,"slots_busy",...}
 *   GET  /v1/models               one model (id = --alias or the file name)
 *   GET  /v1/models/{id}          that model, or 404
 *   POST /v1/chat/completions     OpenAI chat completions (stream: SSE)
 *   POST /v1/completions          OpenAI raw completions  (stream: SSE)
 *   POST /tokenize, /detokenize   llama.cpp's shapes (endpoints.c)
 *   POST /completion, /infill     llama-server's native completion and fill-in-the-middle
 *   POST /apply-template          the chat prompt as text
 *   POST /v1/messages(/count_tokens) Anthropic's Messages API } compat.c translates them to
 *   POST /v1/responses            OpenAI's Responses API     } chat and their replies back
 *   POST /v1/embeddings, /embedding embeddings (off with --no-embedding; http_embed.c)
 *   GET  /props, /slots, /metrics server properties, slot states, Prometheus text
 *   GET  /, /webui/<file>         the web chat (webui.c)
 *   OPTIONS any path              204 (CORS preflight with --cors)
 * (the same paths without /v1 are accepted). Errors are OpenAI error objects:
 * 400 bad JSON / fields / prompt too long, 401 bad API key, 404 unknown path,
 * 405 wrong method, 413 body over --max-body, 503 queue full or shutting down
 * (with Retry-After). Keep-alive: replies are queued once the request is
 * complete; a watcher thread cuts connections past their header/body deadlines.
 *
 * A client that goes away is noticed while its handler waits (a peek at the
 * socket every 100 ms, and failed writes while streaming): its job is
 * cancelled and the slot freed at the scheduler's next round.
 *
 * This file routes and answers the small requests; the ones that run the model
 * (and /apply-template, /v1/messages/count_tokens) are http_gen.c's.
 *
 * The listening socket is ours, not libmicrohttpd's: a front-door thread
 * accepts, answers a request line that can never be one with 400 itself, and
 * hands every other connection to libmicrohttpd (http_conn.c, with the deadline
 * watcher and the server's start and stop).
 */
#define _GNU_SOURCE                 /* accept4, pipe2 */
#include "server/http_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include <time.h>

static bool route_post(int r) {
    return r == R_CHAT || r == R_COMPLETIONS || r == R_TOKENIZE || r == R_DETOKENIZE || r == R_NATIVE || r == R_INFILL ||
           r == R_APPLY_TEMPLATE || r == R_MESSAGES || r == R_RESPONSES || r == R_COUNT_TOKENS || r == R_EMBEDDINGS ||
           r == R_EMBEDDING_NATIVE;
}
static srv_api route_api(int r) {
    return r == R_NATIVE || r == R_INFILL ? SRV_API_NATIVE : r == R_MESSAGES || r == R_COUNT_TOKENS ? SRV_API_ANTHROPIC
         : r == R_RESPONSES ? SRV_API_RESPONSES : SRV_API_OPENAI;
}

/* Has the peer closed its side? (a non-destructive peek, never blocks) */
bool srv_http_client_gone(int fd) {
    if (fd < 0) return false;
    char c;
    ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

const char *srv_http_cors;

void srv_http_add_cors(struct MHD_Response *r) {
    if (!srv_http_cors) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", srv_http_cors);
    if (strcmp(srv_http_cors, "*")) MHD_add_response_header(r, "Vary", "Origin");
}

static enum MHD_Result send_body(struct MHD_Connection *conn, conn_state *cs, int status, const char *type,
                                 char *body) {
    if (!body) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) { free(body); return MHD_NO; }
    MHD_add_response_header(r, "Content-Type", type);
    srv_http_add_cors(r);
    cs->status = status;
    srv_http_record(cs, status);             /* a client that has its reply sees it counted */
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result srv_http_send_json(struct MHD_Connection *conn, conn_state *cs, int status, char *json) {
    if (!json) { status = 500; json = NULL; }
    const char *body = json ? json : "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"code\":\"internal_error\"}}";
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    free(json);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "application/json");
    srv_http_add_cors(r);
    if (status == 405) MHD_add_response_header(r, "Allow", route_post(cs->route) ? "POST, OPTIONS" : "GET, HEAD, OPTIONS");
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (status == 503) MHD_add_response_header(r, "Retry-After", "1");
    cs->status = status;
    srv_http_record(cs, status);             /* a client that has its reply sees it counted */
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result srv_http_send_error(struct MHD_Connection *conn, conn_state *cs, int status, const char *msg) {
    return srv_http_send_json(conn, cs, status, srv_compat_error(cs->api, status, msg));
}


/* ------------------------------------------------------------------ routes */

static enum MHD_Result handle_health(srv_http *h, struct MHD_Connection *conn, conn_state *cs) {
    int busy, queued, n_slots, n_ctx;
    srv_sched_stats(h->sched, &busy, &queued, &n_slots, &n_ctx);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", "ok");
    cJSON_AddStringToObject(o, "model", h->c.alias);
    cJSON_AddBoolToObject(o, "model_loaded", true);
    cJSON_AddNumberToObject(o, "slots_total", n_slots);
    cJSON_AddNumberToObject(o, "slots_busy", busy);
    cJSON_AddNumberToObject(o, "slots_idle", n_slots - busy);
    cJSON_AddNumberToObject(o, "queued", queued);
    cJSON_AddNumberToObject(o, "n_ctx", n_ctx);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return srv_http_send_json(conn, cs, 200, s);
}

static enum MHD_Result handle_models(srv_http *h, struct MHD_Connection *conn, conn_state *cs) {
    cJSON *o = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(o, "data"), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddStringToObject(m, "id", h->c.alias);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)h->started);
    cJSON_AddStringToObject(m, "owned_by", "tern");
    cJSON_AddItemToArray(data, m);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return srv_http_send_json(conn, cs, 200, s);
}

static enum MHD_Result handle_model_id(srv_http *h, struct MHD_Connection *conn, conn_state *cs) {
    if (strcmp(cs->model_id, h->c.alias)) return srv_http_send_error(conn, cs, 404, "no such model");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", h->c.alias);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)h->started);
    cJSON_AddStringToObject(m, "owned_by", "tern");
    char *s = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    return srv_http_send_json(conn, cs, 200, s);
}

static enum MHD_Result handle_props(srv_http *h, struct MHD_Connection *conn, conn_state *cs) {
    int n_slots, n_ctx;
    srv_sched_stats(h->sched, NULL, NULL, &n_slots, &n_ctx);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", h->c.alias);
    cJSON_AddNumberToObject(o, "total_slots", n_slots);
    cJSON_AddNumberToObject(o, "n_ctx", n_ctx);
    cJSON_AddNumberToObject(o, "n_vocab", tern_tokenizer_n_vocab(h->tok));
    cJSON_AddStringToObject(o, "chat_format", h->fmt == TERN_CHAT_QWEN35 ? "qwen35" : "qwen3");
    cJSON_AddBoolToObject(o, "thinking_default", h->think_default);
    cJSON_AddBoolToObject(o, "prefix_cache", srv_sched_prefix_cache(h->sched));
    cJSON_AddBoolToObject(o, "batch_invariant", h->c.batch_invariant);
    srv_snap_stats ss;
    srv_sched_snap_stats(h->sched, &ss);
    cJSON *ps = cJSON_AddObjectToObject(o, "prefix_cache_snapshots");
    if (ps) {
        cJSON_AddBoolToObject(ps, "used", ss.used);
        cJSON_AddNumberToObject(ps, "budget_bytes", (double)ss.budget);
        cJSON_AddNumberToObject(ps, "bytes", (double)ss.bytes);
        cJSON_AddNumberToObject(ps, "count", ss.count);
        cJSON_AddNumberToObject(ps, "snapshot_bytes", (double)ss.each);
    }
    /* the sampling a request gets when it gives none (thinking off / on where they differ) */
    cJSON *ds = cJSON_AddObjectToObject(o, "default_generation_settings");
    if (ds) {
        const srv_config *c = &h->c;
        cJSON_AddNumberToObject(ds, "temperature", c->default_temp >= 0 ? c->default_temp : h->think_default ? 0.6 : 0.7);
        cJSON_AddNumberToObject(ds, "top_p", c->default_top_p >= 0 ? c->default_top_p : h->think_default ? 0.95 : 0.8);
        cJSON_AddNumberToObject(ds, "top_k", c->default_top_k >= 0 ? c->default_top_k : 20);
        cJSON_AddNumberToObject(ds, "min_p", c->default_min_p >= 0 ? c->default_min_p : 0);
        cJSON_AddNumberToObject(ds, "repeat_penalty", c->default_repeat_penalty > 0 ? c->default_repeat_penalty : 1);
        cJSON_AddNumberToObject(ds, "repeat_last_n", c->default_penalty_last_n > 0 ? c->default_penalty_last_n : 64);
        cJSON_AddNumberToObject(ds, "frequency_penalty", c->has_default_freq ? c->default_freq : 0);
        cJSON_AddNumberToObject(ds, "presence_penalty", c->has_default_presence ? c->default_presence : 0);
        cJSON_AddNumberToObject(ds, "max_tokens", c->default_max_tokens);
        cJSON_AddStringToObject(ds, "source", c->sampling_source ? c->sampling_source : "built-in");
    }
    cJSON_AddStringToObject(o, "build", "tern");
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return srv_http_send_json(conn, cs, 200, s);
}

static enum MHD_Result handle_slots(srv_http *h, struct MHD_Connection *conn, conn_state *cs) {
    srv_slot_info info[256];
    int n = srv_sched_slots(h->sched, info, 256);
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "id", info[i].id);
        cJSON_AddBoolToObject(e, "is_processing", info[i].busy);
        cJSON_AddNumberToObject(e, "n_prompt_tokens", (double)info[i].n_prompt);
        cJSON_AddNumberToObject(e, "n_ctx", info[i].n_ctx);
        cJSON_AddNumberToObject(e, "n_cached_tokens", (double)info[i].n_cached);
        cJSON_AddNumberToObject(e, "n_snapshots", info[i].n_snapshots);
        cJSON_AddItemToArray(a, e);
    }
    char *s = cJSON_PrintUnformatted(a);
    cJSON_Delete(a);
    return srv_http_send_json(conn, cs, 200, s);
}

static enum MHD_Result handle_metrics(srv_http *h, struct MHD_Connection *conn, conn_state *cs) {
    int busy, queued, n_slots;
    srv_sched_stats(h->sched, &busy, &queued, &n_slots, NULL);
    srv_snap_stats ss;
    srv_sched_snap_stats(h->sched, &ss);
    srv_step_stats st;
    srv_sched_step_stats(h->sched, &st);
    return send_body(conn, cs, 200, "text/plain; version=0.0.4; charset=utf-8",
                     srv_metrics_render(&h->metrics, busy, queued, n_slots, &ss, &st));
}

static enum MHD_Result handle_tok(srv_http *h, struct MHD_Connection *conn, conn_state *cs) {
    char err[256], *out = NULL;
    int rc = cs->route == R_TOKENIZE ? srv_tokenize_json(h->tok, cs->body.data, cs->body.len, &out, err, sizeof err)
                                     : srv_detokenize_json(h->tok, cs->body.data, cs->body.len, &out, err, sizeof err);
    if (rc) return srv_http_send_error(conn, cs, rc, err);
    return srv_http_send_json(conn, cs, 200, out);
}

static enum MHD_Result handle_get(srv_http *h, struct MHD_Connection *conn, conn_state *cs) {
    switch (cs->route) {
    case R_HEALTH: return handle_health(h, conn, cs);
    case R_MODELS: return handle_models(h, conn, cs);
    case R_MODEL_ID: return handle_model_id(h, conn, cs);
    case R_PROPS: return handle_props(h, conn, cs);
    case R_ROOT: return srv_webui_send(conn, cs, "index.html");
    case R_WEBUI: return srv_webui_send(conn, cs, cs->model_id);
    case R_SLOTS: return handle_slots(h, conn, cs);
    default: return handle_metrics(h, conn, cs);
    }
}

/* OPTIONS (a CORS preflight): 204 with the allowed methods and headers. */
static enum MHD_Result handle_options(struct MHD_Connection *conn, conn_state *cs) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    srv_http_add_cors(r);
    MHD_add_response_header(r, "Allow", route_post(cs->route) ? "POST, OPTIONS" : "GET, HEAD, OPTIONS");
    if (srv_http_cors) {
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    }
    cs->status = 204;
    enum MHD_Result ret = MHD_queue_response(conn, 204, r);
    MHD_destroy_response(r);
    return ret;
}

static int route_of(const char *url, char *model_id, size_t id_len) {
    if (!strcmp(url, "/") || !strcmp(url, "/index.html")) return R_ROOT;
    if (!strncmp(url, "/webui/", 7) && srv_webui_exists(url + 7)) {
        snprintf(model_id, id_len, "%s", url + 7);
        return R_WEBUI;
    }
    if (!strncmp(url, "/v1/", 4)) url += 3;
    if (!strcmp(url, "/health")) return R_HEALTH;
    if (!strcmp(url, "/models")) return R_MODELS;
    if (!strncmp(url, "/models/", 8) && url[8] && strlen(url + 8) < id_len) {
        snprintf(model_id, id_len, "%s", url + 8);
        return R_MODEL_ID;
    }
    if (!strcmp(url, "/tokenize")) return R_TOKENIZE;
    if (!strcmp(url, "/detokenize")) return R_DETOKENIZE;
    if (!strcmp(url, "/props")) return R_PROPS;
    if (!strcmp(url, "/slots")) return R_SLOTS;
    if (!strcmp(url, "/metrics")) return R_METRICS;
    if (!strcmp(url, "/chat/completions")) return R_CHAT;
    if (!strcmp(url, "/completions")) return R_COMPLETIONS;
    if (!strcmp(url, "/completion")) return R_NATIVE;
    if (!strcmp(url, "/infill")) return R_INFILL;
    if (!strcmp(url, "/apply-template")) return R_APPLY_TEMPLATE;
    if (!strcmp(url, "/messages")) return R_MESSAGES;
    if (!strcmp(url, "/messages/count_tokens")) return R_COUNT_TOKENS;
    if (!strcmp(url, "/responses")) return R_RESPONSES;
    if (!strcmp(url, "/embeddings")) return R_EMBEDDINGS;
    if (!strcmp(url, "/embedding")) return R_EMBEDDING_NATIVE;
    return R_NONE;
}

static bool authorized(srv_http *h, struct MHD_Connection *conn) {
    if (!h->c.api_key) return true;
    const char *a = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    const char *x = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "x-api-key");  /* Anthropic's clients */
    if (a && !strncasecmp(a, "Bearer ", 7)) a += 7;
    else if (x) a = x;
    else return false;
    while (*a == ' ') a++;
    /* compare without an early exit */
    size_t la = strlen(a), lk = strlen(h->c.api_key);
    unsigned diff = la != lk;
    for (size_t i = 0; i < la && i < lk; i++) diff |= (unsigned char)(a[i] ^ h->c.api_key[i]);
    return diff == 0;
}

/* A body over --max-body that is still arriving (chunked: no Content-Length to refuse up
 * front). libmicrohttpd takes no reply before the body has ended, and a client may never
 * end it, so the 413 is written to the socket here and the connection closed (MHD_NO):
 * an answer at once, never a wait for the body timeout. */
static enum MHD_Result reply_413_close(struct MHD_Connection *conn, conn_state *cs) {
    if (cs->h->tls) {               /* no plain bytes on a TLS connection: closed without a reply */
        cs->status = 413;
        srv_http_record(cs, 413);
        return MHD_NO;
    }
    char *body = srv_json_error(413, "the request body is larger than --max-body");
    char head[512];
    int hn = snprintf(head, sizeof head,
                      "HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                      "%s%s%sConnection: close\r\n\r\n",
                      body ? strlen(body) : 0, srv_http_cors ? "Access-Control-Allow-Origin: " : "", srv_http_cors ? srv_http_cors : "",
                      srv_http_cors ? "\r\n" : "");
    int fd = conn_fd(conn);
    if (fd >= 0 && hn > 0 && (size_t)hn < sizeof head) {
        (void)!send(fd, head, (size_t)hn, MSG_NOSIGNAL);
        if (body) (void)!send(fd, body, strlen(body), MSG_NOSIGNAL);
    }
    free(body);
    cs->status = 413;
    srv_http_record(cs, 413);
    return MHD_NO;
}


enum MHD_Result srv_http_on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                    const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    srv_http *h = cls;
    conn_state *cs = *con_cls;
    if (!cs) {
        if (!(cs = calloc(1, sizeof *cs))) return MHD_NO;
        cs->h = h;
        *con_cls = cs;
        __atomic_add_fetch(&h->active, 1, __ATOMIC_RELAXED);
        srv_http_track_phase(conn, PH_BODY);
        cs->t0 = now_ms();
        cs->route = route_of(url, cs->model_id, sizeof cs->model_id);
        cs->api = route_api(cs->route);
        snprintf(cs->method, sizeof cs->method, "%s", method);
        snprintf(cs->path, sizeof cs->path, "%s", url);
        bool post = !strcmp(method, "POST"), get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
        if (cs->route == R_NONE) return srv_http_send_error(conn, cs, 404, "unknown path");
        bool gen = route_post(cs->route);
        if (!strcmp(method, "OPTIONS")) { cs->options = true; return MHD_YES; }
        if (gen ? !post : !get) return srv_http_send_error(conn, cs, 405, gen ? "use POST" : "use GET");
        if (cs->route != R_HEALTH && cs->route != R_ROOT && cs->route != R_WEBUI && !authorized(h, conn)) return srv_http_send_error(conn, cs, 401, "invalid or missing API key");
        if (gen) {
            const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
            if (cl && strtoull(cl, NULL, 10) > h->c.max_body) {
                cs->too_big = true;
                return srv_http_send_error(conn, cs, 413, "the request body is larger than --max-body");
            }
        }
        return MHD_YES;             /* answered once the (possibly empty) body is in: keeps the connection alive */
    }
    if (cs->status) { *upload_size = 0; return MHD_YES; }   /* answered early; drop the rest */
    bool gen = route_post(cs->route);
    if (!gen || cs->options) {
        if (*upload_size) { *upload_size = 0; return MHD_YES; }    /* a GET body is ignored */
        srv_http_track_phase(conn, PH_ANSWER);
        return cs->options ? handle_options(conn, cs) : handle_get(h, conn, cs);
    }
    if (*upload_size) {
        if (!cs->too_big && cs->body.len + *upload_size > h->c.max_body) {
            /* over the limit while the body still arrives (chunked, no Content-Length to
             * refuse up front): answer 413 now and close, rather than wait for an end that a
             * client may never send */
            cs->too_big = true;
            tern_str_free(&cs->body);
            *upload_size = 0;
            return reply_413_close(conn, cs);
        }
        if (!cs->too_big && tern_str_append(&cs->body, upload, *upload_size)) cs->too_big = true;
        *upload_size = 0;
        return MHD_YES;
    }
    if (cs->too_big) return srv_http_send_error(conn, cs, 413, "the request body is larger than --max-body");
    srv_http_track_phase(conn, PH_ANSWER);
    if (cs->route == R_TOKENIZE || cs->route == R_DETOKENIZE) return handle_tok(h, conn, cs);
    if (cs->route == R_APPLY_TEMPLATE || cs->route == R_COUNT_TOKENS) return srv_http_apply_template(h, conn, cs);
    if (cs->route == R_EMBEDDINGS || cs->route == R_EMBEDDING_NATIVE) return srv_http_embeddings(h, conn, cs);
    return srv_http_generate(h, conn, cs);
}

void srv_http_record(conn_state *cs, int status) {
    if (cs->recorded) return;
    cs->recorded = true;
    srv_metrics_record(&cs->h->metrics, status, cs->route == R_CHAT || cs->route == R_COMPLETIONS, now_ms() - cs->t0);
}

void srv_http_on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)conn;
    srv_http *h = cls;
    conn_state *cs = *con_cls;
    if (!cs) return;
    int status = cs->status;
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && status == 200) status = 499;
    srv_http_record(cs, status);             /* replies that were never published (a client gone mid-stream) */
    if (!h->c.quiet) {
        fprintf(stderr, "%s %s %d %zu+%zu tokens %.1f ms\n", cs->method, cs->path, status, cs->n_prompt, cs->n_gen,
                now_ms() - cs->t0);
    }
    tern_str_free(&cs->body);
    free(cs);
    *con_cls = NULL;
    srv_http_track_phase(conn, PH_HEADERS);  /* keep-alive: the next request's headers are due */
    __atomic_sub_fetch(&h->active, 1, __ATOMIC_RELAXED);
}
