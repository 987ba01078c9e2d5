/*
 * http_internal.h - what http.c (requests, routes, replies), http_gen.c (generation,
 * streaming, the prompts of the other APIs) and http_conn.c (front door, deadline
 * watcher, start and stop) share: the server state, the connection tracking, the
 * per-request state, the libmicrohttpd callbacks. Not for use outside src/server.
 */
#ifndef TERN_SERVER_HTTP_INTERNAL_H
#define TERN_SERVER_HTTP_INTERNAL_H

#include "server/server.h"

#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <sys/select.h>
#include <time.h>

/* Every open connection, for the deadline watcher: a connection must deliver
 * its headers within header_timeout_s of being accepted (or of its last
 * reply, for keep-alive) and its body within body_timeout_s of its headers;
 * one that does not is shut down, so clients dripping bytes cannot hold the
 * connection slots. */
enum { PH_HEADERS = 0, PH_BODY, PH_ANSWER };
typedef struct conn_track {
    int fd, phase;
    double since;                   /* ms: start of the phase */
    bool cut;
    struct conn_track *prev, *next;
} conn_track;

typedef struct door_conn door_conn;

struct srv_http {
    pthread_mutex_t tmu;            /* guards the connection list and accepted_at */
    conn_track *conns;
    /* accept time (ms, 0: none) of each socket handed to libmicrohttpd, by fd,
     * until its connection starts: the header deadline counts from the accept.
     * libmicrohttpd refuses fds >= FD_SETSIZE in this threading mode anyway. */
    double accepted_at[FD_SETSIZE];
    /* the front door: the listening socket, its thread, the connections it holds */
    int listen_fd, wake[2];         /* wake: a pipe that stops the thread */
    pthread_t door;
    bool door_on;
    door_conn *pend;
    int n_pend, max_pend;
    struct pollfd *pfd;             /* 2 + max_pend */
    pthread_t watcher;
    bool watcher_on, watcher_stop;
    int active;                     /* requests being answered (atomic) */
    srv_metrics metrics;
    struct MHD_Daemon *d;
    srv_config c;
    srv_sched *sched;
    const tern_tokenizer *tok;
    tern_chat_format fmt;
    bool think_default;
    unsigned long long counter;     /* response ids (atomic) */
    tern_token_trie *trie;          /* grammar masks: built on first use (under tmu) */
    bool tls;                       /* HTTPS: the front door hands connections over unread */
    long long started;
};

/* The routes (http.c's route_of). */
enum { R_NONE = 0, R_HEALTH, R_MODELS, R_CHAT, R_COMPLETIONS, R_MODEL_ID, R_TOKENIZE, R_DETOKENIZE, R_PROPS,
       R_SLOTS, R_METRICS, R_ROOT, R_NATIVE, R_INFILL, R_APPLY_TEMPLATE, R_MESSAGES, R_RESPONSES, R_COUNT_TOKENS,
       R_WEBUI, R_EMBEDDINGS, R_EMBEDDING_NATIVE };

/* Per-connection request state (MHD's con_cls). */
typedef struct conn_state {
    int route;
    srv_api api;                    /* the route's API: its error shape */
    tern_str body;
    bool too_big, options;
    double t0;
    int status;
    size_t n_prompt, n_gen;
    char method[12], path[96];
    char model_id[256];             /* GET /v1/models/{id} */
    srv_usage usage;                /* generation requests: for the log line */
    bool has_usage;
    bool recorded;                  /* counted in /metrics (once: when its reply is published) */
    struct srv_http *h;
} conn_state;

/* --cors ORIGIN (one server per process; set by srv_http_start). */
extern const char *srv_http_cors;

static inline double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static inline int conn_fd(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* http.c: libmicrohttpd's request and completion callbacks (cls = the srv_http). */
enum MHD_Result srv_http_on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                    const char *version, const char *upload_data, size_t *upload_size, void **con_cls);
void srv_http_on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                           enum MHD_RequestTerminationCode toe);
/* http.c: replies. srv_http_send_json takes json (malloc'd; NULL: a 500 "out of memory");
 * srv_http_send_error sends msg in the route's API's error shape; both count the
 * request in /metrics (srv_http_record, once) before the reply is published. */
enum MHD_Result srv_http_send_json(struct MHD_Connection *conn, conn_state *cs, int status, char *json);
enum MHD_Result srv_http_send_error(struct MHD_Connection *conn, conn_state *cs, int status, const char *msg);
void srv_http_record(conn_state *cs, int status);
void srv_http_add_cors(struct MHD_Response *r);
/* webui.c: the web chat's embedded files (name: "index.html", "chat.js", ...). */
bool srv_webui_exists(const char *name);
enum MHD_Result srv_webui_send(struct MHD_Connection *conn, conn_state *cs, const char *name);
/* Has the peer closed its side? (a non-destructive peek, never blocks) */
bool srv_http_client_gone(int fd);
/* http_gen.c: the POST routes that run the model (chat, completions, /completion, /infill,
 * /v1/messages, /v1/responses), and /apply-template and /v1/messages/count_tokens. */
enum MHD_Result srv_http_generate(srv_http *h, struct MHD_Connection *conn, conn_state *cs);
enum MHD_Result srv_http_apply_template(srv_http *h, struct MHD_Connection *conn, conn_state *cs);
/* http_embed.c: POST /v1/embeddings and llama-server's /embedding (--embedding). */
enum MHD_Result srv_http_embeddings(srv_http *h, struct MHD_Connection *conn, conn_state *cs);
/* http_conn.c: a connection enters phase PH_* (its deadline counts from now). */
void srv_http_track_phase(struct MHD_Connection *conn, int phase);

#endif
