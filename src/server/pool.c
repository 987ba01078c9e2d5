/*
 * pool.c - a small fork-join pool for the scheduler: run fn(ctx, i) for i in [0, n) on
 * the calling thread and the pool's workers, return when all are done. The scheduler
 * chooses every decoding slot's next token with it (sampling, stop rules, logprobs and
 * grammar masks are per slot; on a 248,320-token vocabulary each choice reads 1 MB of
 * logits), so at 64 streams the host's share of a step is divided by the threads.
 */
#include "server/server.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

struct srv_pool {
    int n_threads;                  /* workers (the caller is one more) */
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned long gen;              /* bumped per run */
    void (*fn)(void *ctx, int i);
    void *ctx;
    int n;
    atomic_int next;                /* the next index to take */
    int busy;                       /* workers still in this run */
};

static void take(srv_pool *p) {
    for (int i; (i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed)) < p->n;) p->fn(p->ctx, i);
}

static void *worker(void *u) {
    srv_pool *p = u;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->gen == seen) pthread_cond_wait(&p->go, &p->mu);
        seen = p->gen;
        if (!p->fn) break;          /* srv_pool_free */
        pthread_mutex_unlock(&p->mu);
        take(p);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Hand the workers a new run (fn NULL: leave). */
static void wake(srv_pool *p, void (*fn)(void *ctx, int i), void *ctx, int n) {
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->busy = p->n_threads;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
}

srv_pool *srv_pool_new(int threads) {
    srv_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    int w = threads > 1 ? threads - 1 : 0;
    if (w && !(p->th = calloc((size_t)w, sizeof *p->th))) w = 0;
    for (int i = 0; i < w; i++) {
        if (pthread_create(&p->th[i], NULL, worker, p)) break;
        p->n_threads++;
    }
    return p;
}

int srv_pool_threads(const srv_pool *p) { return p ? p->n_threads + 1 : 1; }

void srv_pool_run(srv_pool *p, int n, void (*fn)(void *ctx, int i), void *ctx) {
    if (n <= 0) return;
    if (!p || !p->n_threads || n == 1) {
        for (int i = 0; i < n; i++) fn(ctx, i);
        return;
    }
    wake(p, fn, ctx, n);
    take(p);
    pthread_mutex_lock(&p->mu);
    while (p->busy) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void srv_pool_free(srv_pool *p) {
    if (!p) return;
    if (p->n_threads) wake(p, NULL, NULL, 0);
    for (int i = 0; i < p->n_threads; i++) pthread_join(p->th[i], NULL);
    free(p->th);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->go);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
