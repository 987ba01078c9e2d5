/*
 * embed_run.c - the embedding worker of `tern serve` (on unless --no-embedding): one thread
 * that owns one session of the served model, made at the first embedding request (a server
 * that is never asked for one spends nothing on it; a session that cannot be made then is
 * a 503 naming why, and is tried again at the next request), and embeds the requests' inputs one after another
 * (each from an empty session: tern_session_reset, then tern_session_embed). Handler
 * threads hand it a request and wait; the library serialises its evaluation with the
 * scheduler's per model, so embeddings and generation interleave chunk by chunk. One
 * thread (not the handlers: one per connection) keeps the library's per-thread scratch
 * to one more thread.
 */
#include "server/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct embed_job {
    const srv_embed_req *r;
    float *out;
    int rc;
    char err[256];
    bool done;
    struct embed_job *next;
} embed_job;

struct srv_embedder {
    tern_model *m;
    tern_session_params sp; /* the session made at the first job */
    tern_session *s;
    tern_pooling pooling;
    int dim, n_ctx;
    pthread_t th;
    bool started, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* work queued / a job done */
    embed_job *head, *tail;
};

static void run_job(srv_embedder *e, embed_job *j) {
    const srv_embed_req *r = j->r;
    if (!e->s) {
        tern_status st = tern_session_new(e->m, &e->sp, &e->s);
        if (st) {
            e->s = NULL;
            j->rc = st == TERN_ERR_NOMEM ? 503 : 500;
            snprintf(j->err, sizeof j->err, "the embedding session (%d tokens) could not be made: %s", e->n_ctx,
                     tern_last_error());
            return;
        }
    }
    for (size_t i = 0; i < r->n; i++) {
        tern_session_reset(e->s);
        tern_status st = tern_session_embed(e->s, r->ids[i], r->n_ids[i], e->pooling, r->normalize,
                                            j->out + i * (size_t)e->dim);
        if (st) {
            j->rc = st == TERN_ERR_CONTEXT_FULL || st == TERN_ERR_RANGE ? 400 : st == TERN_ERR_UNSUPPORTED ? 501 : 500;
            snprintf(j->err, sizeof j->err, "input %zu: %s", i, tern_last_error());
            return;
        }
    }
    j->rc = 0;
}

static void *worker(void *arg) {
    srv_embedder *e = arg;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->head && !e->stop) pthread_cond_wait(&e->cv, &e->mu);
        if (!e->head) break;  /* stop, nothing queued */
        embed_job *j = e->head;
        e->head = j->next;
        if (!e->head) e->tail = NULL;
        pthread_mutex_unlock(&e->mu);
        run_job(e, j);
        pthread_mutex_lock(&e->mu);
        j->done = true;
        pthread_cond_broadcast(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

tern_status srv_embedder_new(tern_model *m, int n_ctx, tern_cache_type ck, tern_cache_type cv, tern_pooling pooling,
                             srv_embedder **out) {
    *out = NULL;
    if (pooling == TERN_POOLING_NONE || !tern_pooling_name(pooling))
        return TERN_ERR_INVALID_ARG;  /* the CLI offers mean, last and cls only */
    srv_embedder *e = calloc(1, sizeof *e);
    if (!e) return TERN_ERR_NOMEM;
    tern_session_params_default(&e->sp);
    e->sp.n_ctx = n_ctx;
    e->sp.cache_type_k = ck;
    e->sp.cache_type_v = cv;
    e->m = m;
    e->pooling = pooling;
    e->dim = tern_model_get_info(m)->n_embd;
    e->n_ctx = n_ctx;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    if (pthread_create(&e->th, NULL, worker, e)) {
        srv_embedder_free(e);
        return TERN_ERR_NOMEM;
    }
    e->started = true;
    *out = e;
    return TERN_OK;
}

int srv_embedder_dim(const srv_embedder *e) { return e ? e->dim : 0; }
int srv_embedder_n_ctx(const srv_embedder *e) { return e ? e->n_ctx : 0; }
tern_pooling srv_embedder_pooling(const srv_embedder *e) { return e ? e->pooling : TERN_POOLING_NONE; }

int srv_embedder_run(srv_embedder *e, const srv_embed_req *r, float *out, char *err, size_t en) {
    embed_job j = {.r = r, .out = out, .rc = 500};
    pthread_mutex_lock(&e->mu);
    if (e->stop) {
        pthread_mutex_unlock(&e->mu);
        snprintf(err, en, "shutting down");
        return 503;
    }
    if (e->tail) e->tail->next = &j;
    else e->head = &j;
    e->tail = &j;
    pthread_cond_broadcast(&e->cv);
    while (!j.done) pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    if (j.rc) snprintf(err, en, "%s", j.err);
    return j.rc;
}

void srv_embedder_free(srv_embedder *e) {
    if (!e) return;
    if (e->started) {
        pthread_mutex_lock(&e->mu);
        e->stop = true;             /* the queued jobs still run: their handlers wait on them */
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->th, NULL);
    }
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    tern_session_free(e->s);
    free(e);
}
