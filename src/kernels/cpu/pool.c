/*
 * pool.c - the persistent worker pool the kernels split their rows over.
 *
 * n_threads - 1 pthreads wait for work; the calling thread is worker 0 and
 * takes tasks too. A run publishes (fn, ctx, n_tasks) and bumps a generation
 * counter; workers spin on it for a short while (TERN_SPIN_US, default 1000 us)
 * so back-to-back kernel calls in a token wake them in well under a
 * microsecond, then sleep on a condition variable. Tasks are claimed with an
 * atomic counter; the caller returns when every worker has left the run.
 */
#include "kernels/kernels.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#if defined(__x86_64__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

struct tern_pool {
    int n;                      /* workers including the caller */
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint gen;            /* bumped once per run */
    atomic_int next;            /* next task to claim */
    atomic_int active;          /* helper threads still inside the current run */
    atomic_int sleeping;        /* helpers blocked on cv */
    atomic_bool stop;
    tern_task_fn fn;
    void *ctx;
    int n_tasks;
    double spin_s;
};

static void pool_work(tern_pool *p) {
    int t;
    while ((t = atomic_fetch_add(&p->next, 1)) < p->n_tasks) p->fn(p->ctx, t, p->n_tasks);
}

static void *pool_main(void *arg) {
    tern_pool *p = arg;
    unsigned seen = 0;
    for (;;) {
        double t0 = 0.0;
        unsigned spins = 0;
        while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) {
            CPU_RELAX();
            if ((++spins & 255) == 0) {
                double now = tern_now_s();
                if (t0 == 0.0) t0 = now;
                else if (now - t0 > p->spin_s) break;
            }
        }
        if (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleeping, 1);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->sleeping, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) break;
        seen = atomic_load(&p->gen);
        pool_work(p);
        atomic_fetch_sub(&p->active, 1);
    }
    return NULL;
}

tern_status tern_pool_new(int n_threads, tern_pool **out) {
    *out = NULL;
    if (n_threads < 1 || n_threads > 1024)
        return tern_fail(TERN_ERR_INVALID_ARG, "thread pool: %d threads (need 1..1024)", n_threads);
    tern_pool *p = tern_calloc(1, sizeof *p);
    if (!p) return tern_fail(TERN_ERR_NOMEM, "thread pool: out of memory");
    p->n = n_threads;
    const char *e = getenv("TERN_SPIN_US");
    p->spin_s = (e && *e ? atof(e) : 1000.0) * 1e-6;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (n_threads > 1) {
        p->th = tern_calloc((size_t)n_threads - 1, sizeof(pthread_t));
        if (!p->th) {
            tern_free(p, sizeof *p);
            return tern_fail(TERN_ERR_NOMEM, "thread pool: out of memory");
        }
        for (int i = 0; i < n_threads - 1; i++) {
            if (pthread_create(&p->th[i], NULL, pool_main, p) != 0) {
                p->n = i + 1;   /* the ones started, plus the caller */
                tern_pool_free(p);
                return tern_fail(TERN_ERR_INTERNAL, "thread pool: pthread_create failed for thread %d", i + 1);
            }
        }
    }
    *out = p;
    return TERN_OK;
}

void tern_pool_free(tern_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n - 1; i++) pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    if (p->th) tern_free(p->th, ((size_t)p->n - 1) * sizeof(pthread_t));
    tern_free(p, sizeof *p);
}

int tern_pool_size(const tern_pool *p) { return p ? p->n : 1; }

void tern_pool_run(tern_pool *p, tern_task_fn fn, void *ctx, int n_tasks) {
    if (n_tasks <= 0) return;
    if (!p || p->n == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, n_tasks);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store(&p->next, 0);
    atomic_store(&p->active, p->n - 1);
    atomic_fetch_add(&p->gen, 1);
    if (atomic_load(&p->sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    pool_work(p);
    /* Wait for the helpers; yield now and then so a helper that the OS has
     * descheduled (an oversubscribed machine) gets the core back. */
    unsigned spins = 0;
    while (atomic_load(&p->active) > 0) {
        CPU_RELAX();
        if ((++spins & 4095) == 0) sched_yield();
    }
}
