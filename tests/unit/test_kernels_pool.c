/*
 * test_kernels_pool.c - the worker pool (src/kernels/cpu/pool.c): every task
 * of every run runs exactly once with that run's context, at 1..4 threads;
 * helpers asleep on the futex are woken (work does spread over threads after
 * a pause longer than the spin), the caller asleep waiting for a slow helper
 * is woken, and thousands of back-to-back runs with no spin at all (every wait
 * a sleep) finish: a lost wakeup hangs, and the alarm turns a hang into a
 * failure. Solo mode: runs whose helpers do not pay stay on the caller's thread
 * (and runs that pay are shared).
 */
#define _GNU_SOURCE
#include "check.h"
#include "kernels/kernels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static atomic_int g_next_tid;
static _Thread_local int t_tid = -1;
static int my_tid(void) {
    if (t_tid < 0) t_tid = atomic_fetch_add(&g_next_tid, 1);
    return t_tid;
}

typedef struct run_ctx {
    int run;            /* id of the run this context belongs to */
    int n;
    atomic_int *hits;   /* [n] */
    atomic_int wrong;   /* task saw n_tasks != n */
    long task_us;       /* each task sleeps this long (0: none) */
    int slow_task;      /* this task sleeps slow_us (-1: none) */
    long slow_us;
    atomic_int finished;
    atomic_uint_least64_t tids;  /* bit per thread id that ran a task */
} run_ctx;

static void task(void *c, int t, int n) {
    run_ctx *r = c;
    if (n != r->n || t < 0 || t >= n) { atomic_fetch_add(&r->wrong, 1); return; }
    if (r->task_us) sleep_us(r->task_us);
    if (t == r->slow_task) sleep_us(r->slow_us);
    atomic_fetch_add(&r->hits[t], 1);
    atomic_fetch_or(&r->tids, (uint64_t)1 << (my_tid() & 63));
    atomic_fetch_add(&r->finished, 1);
}

static int check_run(run_ctx *r) {
    int bad = atomic_load(&r->wrong);
    for (int i = 0; i < r->n; i++) bad += atomic_load(&r->hits[i]) != 1;
    bad += atomic_load(&r->finished) != r->n;
    return bad;
}

/* spin_us < 0: the default (100). */
static void new_pool(int nt, int spin_us, tern_pool **p) {
    CHECK(tern_set_spin_us(spin_us < 0 ? 100 : spin_us) == TERN_OK);
    *p = NULL;
    CHECK(tern_pool_new(nt, p) == TERN_OK);
    tern_set_spin_us(100);
    /* every run shared: these tests are about claims and wake-ups (solo mode has its own) */
    if (*p) tern_pool_set_adaptive(*p, false);
}

TEST(every_task_once_with_its_context) {
    static atomic_int hits[2][2000];
    for (int nt = 1; nt <= 4; nt++) {
        tern_pool *p;
        new_pool(nt, -1, &p);
        if (!p) return;
        CHECK_EQ_INT(tern_pool_size(p), nt);
        for (int i = 0; i < 2000; i++) atomic_store(&hits[0][i], 0), atomic_store(&hits[1][i], 0);
        /* Two contexts alternate so a helper that ran a task with the previous
         * run's context (or n) would show up as a double or a missing hit. */
        int bad = 0;
        for (int rep = 0; rep < 400; rep++) {
            int w = rep & 1, n = 1 + (rep * 37) % 1999;
            for (int i = 0; i < 2000; i++) atomic_store(&hits[w][i], 0);
            run_ctx r = {.run = rep, .n = n, .hits = hits[w], .slow_task = -1};
            tern_pool_run(p, task, &r, n);
            bad += check_run(&r);
            for (int i = n; i < 2000; i++) bad += atomic_load(&hits[w][i]) != 0;
            for (int i = 0; i < 2000; i++) bad += atomic_load(&hits[w ^ 1][i]) != 0 && rep == 0;
        }
        CHECK_MSG(bad == 0, "%d threads: %d wrong task executions", nt, bad);
        tern_pool_run(p, task, NULL, 0); /* no tasks: nothing runs, ctx never read */
        /* more tasks than one claim word counts (2^18 - 1): run in slices */
        static atomic_int many[600000];
        for (int i = 0; i < 600000; i++) atomic_store(&many[i], 0);
        run_ctx big = {.n = 600000, .hits = many, .slow_task = -1};
        tern_pool_run(p, task, &big, big.n);
        CHECK_MSG(check_run(&big) == 0, "%d threads: 600000 tasks: %d wrong", nt, check_run(&big));
        tern_pool_free(p);
    }
    tern_pool *p = NULL;
    CHECK(tern_pool_new(0, &p) != TERN_OK && p == NULL);
    CHECK(tern_pool_new(1025, &p) != TERN_OK && p == NULL);
    CHECK(tern_set_spin_us(-1) == TERN_ERR_INVALID_ARG);
    CHECK(tern_set_spin_us(1000001) == TERN_ERR_INVALID_ARG);
    /* NULL pool runs inline */
    static atomic_int h[5];
    run_ctx r = {.n = 5, .hits = h, .slow_task = -1};
    tern_pool_run(NULL, task, &r, 5);
    CHECK_EQ_INT(check_run(&r), 0);
}

TEST(sleeping_helpers_are_woken) {
    /* After a pause far longer than the spin the helpers sleep on the futex;
     * a run of tasks that take a while must still spread over the threads. */
    for (int nt = 2; nt <= 4; nt++) {
        tern_pool *p;
        new_pool(nt, 50, &p);
        if (!p) return;
        int spread = 0, bad = 0;
        for (int rep = 0; rep < 5; rep++) {
            sleep_us(20000);
            static atomic_int hits[64];
            for (int i = 0; i < 64; i++) atomic_store(&hits[i], 0);
            run_ctx r = {.n = 8 * nt, .hits = hits, .task_us = 2000, .slow_task = -1};
            tern_pool_run(p, task, &r, r.n);
            bad += check_run(&r);
            spread += __builtin_popcountll(atomic_load(&r.tids)) > 1;
        }
        CHECK_MSG(bad == 0, "%d threads: %d wrong task executions", nt, bad);
        CHECK_MSG(spread >= 3, "%d threads: only %d of 5 runs used more than the caller's thread", nt, spread);
        tern_pool_free(p);
    }
}

TEST(caller_sleeping_on_a_slow_task_is_woken) {
    /* One task sleeps 30 ms (far past the caller's spin): the caller must
     * sleep and be woken by the helper that finishes it, and must not return
     * before it has. */
    for (int nt = 2; nt <= 4; nt++) {
        tern_pool *p;
        new_pool(nt, 20, &p);
        if (!p) return;
        int bad = 0;
        for (int rep = 0; rep < 4; rep++) {
            static atomic_int hits[16];
            for (int i = 0; i < 16; i++) atomic_store(&hits[i], 0);
            run_ctx r = {.n = 16, .hits = hits, .slow_task = rep % 16, .slow_us = 30000};
            double t0 = tern_now_s();
            tern_pool_run(p, task, &r, r.n);
            bad += check_run(&r);            /* every task finished before return */
            bad += tern_now_s() - t0 < 0.029;
        }
        CHECK_MSG(bad == 0, "%d threads: %d errors", nt, bad);
        tern_pool_free(p);
    }
}

TEST(back_to_back_runs_without_spin) {
    /* spin 0 (tern_set_spin_us): every wait is a futex sleep, so a lost wakeup on either
     * side (helper waiting for a run, caller waiting for the last task) hangs. */
    static atomic_int hits[8];
    for (int nt = 2; nt <= 4; nt++) {
        for (int spin = 0; spin < 2; spin++) {
            tern_pool *p;
            new_pool(nt, spin ? 5 : 0, &p);
            if (!p) return;
            int bad = 0, rep = 0;
            /* 20,000 runs, or as many as 10 s allow (at least 500): on a machine whose cores
             * are taken by other work (CI beside busy loops, qemu) each futex wake-up waits
             * for a time slice, and 120,000 runs outlast the alarm without anything lost; a
             * lost wakeup still hangs, and the alarm still fails it */
            const double until = tern_now_s() + 10.0;
            for (; rep < 20000 && (rep < 500 || tern_now_s() < until); rep++) {
                int n = 1 + rep % 8;
                for (int i = 0; i < n; i++) atomic_store(&hits[i], 0);
                run_ctx r = {.n = n, .hits = hits, .slow_task = -1};
                tern_pool_run(p, task, &r, n);
                bad += check_run(&r);
            }
            CHECK_MSG(bad == 0, "%d threads, spin %d: %d errors in %d runs", nt, spin, bad, rep);
            tern_pool_free(p);
        }
    }
    /* a pool freed while its helpers sleep, and one freed right after a run */
    tern_pool *p;
    new_pool(3, 0, &p);
    if (p) { sleep_us(5000); tern_pool_free(p); }
    new_pool(3, -1, &p);
    if (p) {
        run_ctx r = {.n = 3, .hits = hits, .slow_task = -1};
        for (int i = 0; i < 3; i++) atomic_store(&hits[i], 0);
        tern_pool_run(p, task, &r, 3);
        tern_pool_free(p);
        CHECK_EQ_INT(check_run(&r), 0);
    }
}

TEST(solo_mode_when_helpers_do_not_pay) {
    /* Runs of trivial tasks: the helpers' wake-ups cost more than their share of
     * the work, so after a window the caller runs alone (every task on its thread)
     * for a while; with adaptation off every run is shared again, and tasks that
     * take a while keep being shared with it on. */
    tern_pool *p;
    new_pool(2, -1, &p);
    if (!p) return;
    CHECK(tern_pool_set_adaptive(p, true) == false);
    static atomic_int hits[8];
    uint64_t me = (uint64_t)1 << (my_tid() & 63);
    int solo = 0, bad = 0;
    for (int rep = 0; rep < 200; rep++) {
        for (int i = 0; i < 8; i++) atomic_store(&hits[i], 0);
        run_ctx r = {.n = 8, .hits = hits, .slow_task = -1};
        tern_pool_run(p, task, &r, 8);
        bad += check_run(&r);
        if (rep >= 100) solo += atomic_load(&r.tids) == me;
    }
    CHECK_MSG(bad == 0, "%d wrong task executions", bad);
    CHECK_MSG(solo >= 90, "only %d of 100 trivial runs ran on the caller alone", solo);
    CHECK(tern_pool_set_adaptive(p, false) == true);
    int spread = 0;
    for (int rep = 0; rep < 5; rep++) {
        for (int i = 0; i < 8; i++) atomic_store(&hits[i], 0);
        run_ctx r = {.n = 8, .hits = hits, .task_us = 2000, .slow_task = -1};
        tern_pool_run(p, task, &r, 8);
        bad += check_run(&r);
        spread += atomic_load(&r.tids) != me;
    }
    CHECK_MSG(spread >= 3, "adaptation off: only %d of 5 runs shared", spread);
    CHECK(tern_pool_set_adaptive(p, true) == false);
    spread = 0;
    for (int rep = 0; rep < 40; rep++) {
        for (int i = 0; i < 8; i++) atomic_store(&hits[i], 0);
        run_ctx r = {.n = 8, .hits = hits, .task_us = 1000, .slow_task = -1};
        tern_pool_run(p, task, &r, 8);
        bad += check_run(&r);
        spread += atomic_load(&r.tids) != me;
    }
    CHECK_MSG(spread >= 30, "tasks of 1 ms: only %d of 40 runs shared", spread);
    CHECK_MSG(bad == 0, "%d wrong task executions", bad);
    CHECK(tern_pool_set_adaptive(NULL, true) == false);
    tern_pool_free(p);
}

int main(void) {
    alarm(300); /* a lost wakeup is a hang: the default SIGALRM action fails the test */
    RUN(every_task_once_with_its_context);
    RUN(sleeping_helpers_are_woken);
    RUN(caller_sleeping_on_a_slow_task_is_woken);
    RUN(back_to_back_runs_without_spin);
    RUN(solo_mode_when_helpers_do_not_pay);
    return check_summary();
}
