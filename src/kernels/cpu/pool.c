/*
 * pool.c - the persistent worker pool the kernels split their rows over.
 *
 * n_threads - 1 pthreads wait for work; the calling thread is worker 0 and
 * takes tasks too. Tasks are claimed from one 64-bit word that holds the run's
 * generation, task count and next task index, so a helper that
 * wakes late can never claim a task of another run, and the caller waits only
 * for the tasks to be done, never for every helper to check in: on a shared
 * CPU where a helper is descheduled, the caller simply runs its tasks itself.
 *
 * Waiting is spin-then-sleep on both sides. A helper spins on the generation
 * for at most tern_set_spin_us() microseconds (default 100; the value when the
 * pool was made) after its last run, then
 * sleeps on a futex (Linux) or a condition variable (elsewhere); the caller
 * spins as long for the last tasks to finish, then sleeps until the helper
 * that finishes the last task wakes it. Back-to-back kernels of a token thus
 * never make a system call on a quiet machine, and a busy machine never has a
 * thread burning a core while the one it waits for cannot run.
 *
 * On a shared CPU (issue 11) a thread that finds itself preempted turns
 * spinning off for a while (contention, below), and the caller watches whether
 * sharing its runs pays at all; when it does not, it runs them alone for a
 * while (solo mode, below; tern_pool_set_adaptive).
 */
#define _GNU_SOURCE
#include "kernels/kernels.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#define TERN_POOL_FUTEX 1
#endif
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
    _Alignas(64) atomic_uint_least64_t state;   /* claim word: gen, n_tasks, next index */
    _Alignas(64) atomic_uint gen;               /* futex word: bumped once per run */
    atomic_int sleeping;                        /* helpers asleep (or about to be) on gen */
    atomic_bool stop;
    /* the run (written by the caller before it publishes state; read by
     * helpers only through a successful claim) */
    _Atomic(tern_task_fn) fn;   /* the task count is in the claim word */
    _Atomic(void *) ctx;
    _Alignas(64) atomic_uint done;              /* futex word: tasks finished in this run */
    atomic_int caller_waiting;
    double spin_s;
    /* Contention (another process wants our cores): until this time (tern_now_s)
     * nobody spins; set when a thread of the pool finds it was preempted. */
    _Alignas(64) _Atomic double quiet_after;
    long caller_nivcsw;         /* the caller's involuntary context switches at its last check */
    double caller_nivcsw_t;     /* and when it last saw one */
    unsigned caller_checks;
    /* Does sharing pay? (caller-only state but helper_ns.) Per run: the tasks'
     * time on helpers, on the caller, and the run's wall time; summed over a
     * window, and while the helpers save less than SOLO_MIN_GAIN of it the
     * caller runs alone (helpers asleep) for solo_s, then tries again. */
    _Alignas(64) atomic_uint_least64_t helper_ns;
    bool adapt;
    int win_runs;
    double win_work, win_wall;
    double solo_until, solo_s;
#if !defined(TERN_POOL_FUTEX)
    pthread_mutex_t mu;
    pthread_cond_t cv;
#endif
};

/* ------------------------------------------------- sleep on a 32-bit word */
#if defined(TERN_POOL_FUTEX)
static void word_wait(tern_pool *p, atomic_uint *w, unsigned val) {
    (void)p;
    syscall(SYS_futex, (void *)w, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}
static void word_wake(tern_pool *p, atomic_uint *w) {
    (void)p;
    syscall(SYS_futex, (void *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}
#else
/* One mutex/condvar pair for both words: the waker changes the word before
 * it locks, the waiter re-checks it under the lock, so no wakeup is lost. */
static void word_wait(tern_pool *p, atomic_uint *w, unsigned val) {
    pthread_mutex_lock(&p->mu);
    while (atomic_load(w) == val) pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
static void word_wake(tern_pool *p, atomic_uint *w) {
    (void)w;
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}
#endif

/* ------------------------------------------------------------ contention
 * Spinning only pays while nobody else wants the core: a thread that spins
 * beside another runnable process spends its share of the core on the spin
 * and is then preempted in the middle of a task, which every other thread of
 * the run waits for (issue 11: --threads 2 beside one busy process ran below
 * --threads 1). So a thread that finds it was preempted - a gap of more than
 * PREEMPT_GAP_S between two clock reads of a spin, or two involuntary context
 * switches within PREEMPT_PAIR_S on Linux - marks the pool contended for CONTENDED_S, and
 * while it is, waits are futex sleeps right away (a sleeper that wakes is
 * also the one the scheduler favours over a CPU-bound process). */
#define PREEMPT_GAP_S 50e-6
#define CONTENDED_S 0.05
/* solo mode (below) */
#define SOLO_WINDOW_RUNS 32
#define SOLO_WINDOW_S 0.004
#define SOLO_MIN_GAIN 0.05
#define SOLO_FIRST_S 0.05
#define SOLO_MAX_S 0.8

static inline bool pool_contended(tern_pool *p, double now) {
    return now < atomic_load_explicit(&p->quiet_after, memory_order_relaxed);
}
static inline void pool_mark_contended(tern_pool *p, double now) {
    atomic_store_explicit(&p->quiet_after, now + CONTENDED_S, memory_order_relaxed);
}

/* Involuntary context switches of the calling thread so far (-1: unknown). */
static long thread_nivcsw(void) {
#if defined(TERN_POOL_FUTEX) && defined(RUSAGE_THREAD)
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) == 0) return ru.ru_nivcsw;
#endif
    return -1;
}
/* Mark the pool contended when this thread was preempted twice within
 * PREEMPT_PAIR_S (a stray kernel thread now and then is not contention; a
 * process sharing the core preempts every few milliseconds). */
#define PREEMPT_PAIR_S 0.02
static void check_preempted(tern_pool *p, long *last, double *last_t) {
    long v = thread_nivcsw();
    if (v > *last && *last >= 0) {
        double now = tern_now_s();
        if (now - *last_t < PREEMPT_PAIR_S || v > *last + 1) pool_mark_contended(p, now);
        *last_t = now;
    }
    *last = v;
}

/* The spin budget now: spin_s, or 0 while the pool is contended. */
static double spin_budget(tern_pool *p) {
    if (p->spin_s <= 0.0) return 0.0;
    return pool_contended(p, tern_now_s()) ? 0.0 : p->spin_s;
}

/* Spin while (*w == val) == equal, for at most the spin budget; true when that
 * ended. A gap between two clock reads means this thread was preempted: give up
 * and mark the pool contended. */
static bool spin_while(tern_pool *p, atomic_uint *w, unsigned val, bool equal) {
    double budget = spin_budget(p), t0 = 0.0, last = 0.0;
    unsigned spins = 0;
    while ((atomic_load_explicit(w, memory_order_acquire) == val) == equal) {
        if (budget <= 0.0) return false;
        CPU_RELAX();
        if ((++spins & 63) == 0) {
            double now = tern_now_s();
            if (t0 == 0.0) t0 = now;
            else if (now - last > PREEMPT_GAP_S) { pool_mark_contended(p, now); return false; }
            else if (now - t0 > budget) return false;
            last = now;
        }
    }
    return true;
}

/* Spin until *w != val; true when it changed. */
static bool spin_until_changed(tern_pool *p, atomic_uint *w, unsigned val) { return spin_while(p, w, val, true); }

/* Spin until done == n; true when it is. */
static bool spin_until_done(tern_pool *p, unsigned n) {
    return spin_while(p, (atomic_uint *)&p->done, n, false);
}

/* The claim word: generation (28 bits), the run's task count (18 bits) and
 * the next task index (18 bits). The count lives in the word, not beside it,
 * so a claim can only succeed while its run has tasks left: a helper that
 * loaded the word of a run that has just finished (index == count) can never
 * succeed at claiming once the caller has started writing the next run. */
#define ST_IDX_BITS 18
#define ST_MAX_TASKS ((1 << ST_IDX_BITS) - 1)
#define ST_GEN_MASK ((1u << 28) - 1)
static inline uint64_t st_make(uint32_t g, uint32_t n) {
    return (uint64_t)(g & ST_GEN_MASK) << 36 | (uint64_t)n << ST_IDX_BITS;
}
static inline uint32_t st_gen(uint64_t s) { return (uint32_t)(s >> 36); }
static inline int st_n(uint64_t s) { return (int)((s >> ST_IDX_BITS) & ST_MAX_TASKS); }
static inline int st_idx(uint64_t s) { return (int)(s & ST_MAX_TASKS); }

/* Claim and run tasks of generation g until none is left. While the word
 * still shows run g with tasks left, the caller has not started the next run,
 * so fn/ctx read between the load and a successful claim are run g's. */
static void pool_work(tern_pool *p, uint32_t g, double *caller_s) {
    g &= ST_GEN_MASK;
    for (;;) {
        uint64_t s = atomic_load_explicit(&p->state, memory_order_acquire);
        if (st_gen(s) != g) return;
        int t = st_idx(s), n = st_n(s);
        if (t >= n) return;
        tern_task_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&p->ctx, memory_order_relaxed);
        if (!atomic_compare_exchange_weak_explicit(&p->state, &s, s + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        double t0 = tern_now_s();
        fn(ctx, t, n);
        double dt = tern_now_s() - t0;
        if (caller_s) *caller_s += dt;
        else atomic_fetch_add_explicit(&p->helper_ns, (uint64_t)(dt * 1e9), memory_order_relaxed);
        unsigned d = atomic_fetch_add(&p->done, 1) + 1;
        if (d == (unsigned)n && atomic_load(&p->caller_waiting)) word_wake(p, &p->done);
    }
}

static void *pool_main(void *arg) {
    tern_pool *p = arg;
    unsigned seen = 0;
    long nivcsw = thread_nivcsw();
    double nivcsw_t = -1.0;
    for (;;) {
        if (!spin_until_changed(p, &p->gen, seen)) {
            atomic_fetch_add(&p->sleeping, 1);
            while (atomic_load(&p->gen) == seen) word_wait(p, &p->gen, seen);
            atomic_fetch_sub(&p->sleeping, 1);
        }
        if (atomic_load(&p->stop)) break;
        seen = atomic_load(&p->gen);
        pool_work(p, seen, NULL);
        check_preempted(p, &nivcsw, &nivcsw_t);
    }
    return NULL;
}

/* The spin budget of pools made from now on (tern_set_spin_us, tern.h). */
static atomic_int g_spin_us = 100;

tern_status tern_set_spin_us(int us) {
    if (us < 0 || us > 1000000)
        return tern_fail(TERN_ERR_INVALID_ARG, "tern_set_spin_us: %d microseconds (0..1000000)", us);
    atomic_store(&g_spin_us, us);
    return TERN_OK;
}

tern_status tern_pool_new(int n_threads, tern_pool **out) {
    *out = NULL;
    if (n_threads < 1 || n_threads > 1024)
        return tern_fail(TERN_ERR_INVALID_ARG, "thread pool: %d threads (need 1..1024)", n_threads);
    tern_pool *p = tern_alloc_aligned(sizeof *p);
    if (!p) return tern_fail(TERN_ERR_NOMEM, "thread pool: out of memory");
    memset(p, 0, sizeof *p);
    p->n = n_threads;
    p->spin_s = atomic_load(&g_spin_us) * 1e-6;
    p->caller_nivcsw = -1;
    p->caller_nivcsw_t = -1.0;
    p->adapt = true;
    p->solo_s = SOLO_FIRST_S;
#if !defined(TERN_POOL_FUTEX)
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
#endif
    if (n_threads > 1) {
        p->th = tern_calloc((size_t)n_threads - 1, sizeof(pthread_t));
        if (!p->th) {
            tern_free_aligned(p, sizeof *p);
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
    atomic_store(&p->stop, true);
    atomic_fetch_add(&p->gen, 1);
    word_wake(p, &p->gen);
    for (int i = 0; i < p->n - 1; i++) pthread_join(p->th[i], NULL);
#if !defined(TERN_POOL_FUTEX)
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
#endif
    if (p->th) tern_free(p->th, ((size_t)p->n - 1) * sizeof(pthread_t));
    tern_free_aligned(p, sizeof *p);
}

int tern_pool_size(const tern_pool *p) { return p ? p->n : 1; }

bool tern_pool_set_adaptive(tern_pool *p, bool on) {
    if (!p) return false;
    bool was = p->adapt;
    p->adapt = on;
    p->solo_until = 0.0;
    p->solo_s = SOLO_FIRST_S;
    p->win_runs = 0;
    p->win_work = p->win_wall = 0.0;
    return was;
}

/* ------------------------------------------------------------ solo mode
 * Sharing a run costs the caller a wake-up and, when a helper is descheduled
 * with a task in hand, a wait; it pays back the helpers' task time. Summed
 * over a window of runs: when the helpers' time minus the caller's overhead
 * (wall time beyond its own task time) is below SOLO_MIN_GAIN of the work,
 * the caller runs the next runs alone for solo_s (helpers asleep: on a core
 * shared with another process that is exactly --threads 1), doubling up to
 * SOLO_MAX_S while the trials keep failing, back to SOLO_FIRST_S when one
 * pays. On a quiet machine the helpers do about their share and this never
 * triggers. tern_pool_set_adaptive(p, false) turns it off. */

static void pool_judge(tern_pool *p, double t_start, double caller_s) {
    double now = tern_now_s(), wall = now - t_start;
    double helper_s = (double)atomic_load_explicit(&p->helper_ns, memory_order_relaxed) * 1e-9;
    p->win_work += caller_s + helper_s;
    p->win_wall += wall;
    if (++p->win_runs < SOLO_WINDOW_RUNS && p->win_wall < SOLO_WINDOW_S) return;
    /* saved = (work done alone would take win_work) - (it took win_wall) */
    double saved = p->win_work - p->win_wall;
    if (saved < SOLO_MIN_GAIN * p->win_work) {
        p->solo_until = now + p->solo_s;
        p->solo_s = p->solo_s * 2 < SOLO_MAX_S ? p->solo_s * 2 : SOLO_MAX_S;
    } else {
        p->solo_s = SOLO_FIRST_S;
    }
    p->win_runs = 0;
    p->win_work = p->win_wall = 0.0;
}

/* More tasks than the claim word counts: run them in slices. */
typedef struct slice_ctx {
    tern_task_fn fn;
    void *ctx;
    int base, n;
} slice_ctx;
static void slice_task(void *c, int t, int n) {
    (void)n;
    slice_ctx *s = c;
    s->fn(s->ctx, s->base + t, s->n);
}

void tern_pool_run(tern_pool *p, tern_task_fn fn, void *ctx, int n_tasks) {
    if (n_tasks <= 0) return;
    if (!p || p->n == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, n_tasks);
        return;
    }
    if (n_tasks > ST_MAX_TASKS) {
        for (int b = 0; b < n_tasks; b += ST_MAX_TASKS) {
            slice_ctx s = {fn, ctx, b, n_tasks};
            tern_pool_run(p, slice_task, &s, n_tasks - b < ST_MAX_TASKS ? n_tasks - b : ST_MAX_TASKS);
        }
        return;
    }
    /* Running alone for now (helpers did not pay on this machine lately). */
    double t_start = p->adapt ? tern_now_s() : 0.0;
    if (p->adapt && t_start < p->solo_until) {
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, n_tasks);
        return;
    }
    /* Publish the run: its data, then the claim word, then the wake word.
     * The gen word (what helpers sleep on) moves in step with the claim word's
     * generation. */
    uint32_t g = atomic_load(&p->gen) + 1;
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_store_explicit(&p->helper_ns, 0, memory_order_relaxed);
    atomic_store(&p->state, st_make(g, (uint32_t)n_tasks));
    atomic_fetch_add(&p->gen, 1);
    if (atomic_load(&p->sleeping) > 0) word_wake(p, &p->gen);
    double caller_s = 0.0;
    pool_work(p, g, &caller_s);
    /* The caller's own preemptions count too (checked every 8th run: a
     * system call). */
    if ((p->caller_checks++ & 7) == 0) check_preempted(p, &p->caller_nivcsw, &p->caller_nivcsw_t);
    /* The remaining tasks are running on helpers: spin a while, then sleep
     * until the one that finishes the last task wakes us. */
    unsigned d;
    if (!spin_until_done(p, (unsigned)n_tasks)) {
        atomic_store(&p->caller_waiting, 1);
        while ((d = atomic_load(&p->done)) != (unsigned)n_tasks) word_wait(p, &p->done, d);
        atomic_store(&p->caller_waiting, 0);
    }
    if (p->adapt) pool_judge(p, t_start, caller_s);
}
