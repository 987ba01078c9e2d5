/*
 * test_kernels.c - the CPU kernels (kernels.h) against oracles computed here:
 * float64 products of the dequantized matrix (built from the random trits and
 * scales this test draws, never from the kernel's own unpacking), an explicit
 * Hadamard matrix, and the unfused composition of the fused sites. Every ISA
 * the machine has (forced with tern_kernels_force) at 1, 2 and 3 threads.
 * TERN_SANITIZED=1 shrinks the sizes.
 */
#if defined(__aarch64__) && defined(__GNUC__) && !defined(__clang__)
/* Debian's aarch64 gcc 12 hits an internal error vectorising the fmax
 * reductions below; the test does not need vectorisation. */
#pragma GCC optimize("no-tree-vectorize")
#endif
#include "check.h"
#include "kern_check.h"
#include "kernels/kernels.h"
#include "core/blocks.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>

static int g_small;

static const tern_isa all_isas[] = {TERN_ISA_SCALAR, TERN_ISA_AVX2, TERN_ISA_AVX512, TERN_ISA_NEON, TERN_ISA_I8MM};
#define N_ISAS (sizeof all_isas / sizeof all_isas[0])

static void restore_best(void) {
    if (!tern_kernels_force(TERN_ISA_AVX512) && !tern_kernels_force(TERN_ISA_AVX2) &&
        !tern_kernels_force(TERN_ISA_I8MM) && !tern_kernels_force(TERN_ISA_NEON))
        tern_kernels_force(TERN_ISA_SCALAR);
}

static void count_task(void *c, int t, int nn) {
    int *h = c;
    __atomic_fetch_add(&h[t], 1, __ATOMIC_RELAXED);
    (void)nn;
}

/* ---------------------------------------------------------------- tests */
TEST(pool_runs_every_task_once) {
    for (int nt = 1; nt <= 3; nt++) {
        tern_pool *p = NULL;
        CHECK(tern_pool_new(nt, &p) == TERN_OK);
        tern_pool_set_adaptive(p, false); /* every run shared: the parallel paths under test */
        CHECK_EQ_INT(tern_pool_size(p), nt);
        static int hits[1000];
        for (int rep = 0; rep < 50; rep++) {
            memset(hits, 0, sizeof hits);
            int n = 1 + rep * 17 % 997;
            tern_pool_run(p, count_task, hits, n);
            int bad = 0;
            for (int i = 0; i < 1000; i++) bad += hits[i] != (i < n);
            CHECK_EQ_INT(bad, 0);
        }
        tern_pool_free(p);
    }
    CHECK(tern_pool_new(0, &(tern_pool *){NULL}) != TERN_OK);
}

TEST(qmat_check_rejects_bad_shapes) {
    uint8_t buf[64];
    tern_qmat w = {TERN_DT_PQ2_0, 1, 100, buf, 34};
    CHECK(tern_qmat_check(&w, "w") == TERN_ERR_SHAPE);
    w.k = 128; w.row_bytes = 33;
    CHECK(tern_qmat_check(&w, "w") == TERN_ERR_SHAPE);
    w.row_bytes = 34;
    CHECK(tern_qmat_check(&w, "w") == TERN_OK);
    w.type = TERN_DT_PTQ1_0;
    CHECK(tern_qmat_check(&w, "w") == TERN_ERR_UNSUPPORTED);
    w.type = TERN_DT_Q2_0_G64; w.k = 64; w.row_bytes = 18;
    CHECK(tern_qmat_check(&w, "w") == TERN_OK);
}

static void run_matmul_case(tern_dtype type, int64_t n, int64_t k, size_t batch, tern_pool *pool,
                            const char *isa) {
    tmat t = make_mat(type, n, k, batch % 3 == 0 ? 6 : 0);
    size_t xs = (size_t)k + (batch % 2 ? 3 : 0);  /* non-contiguous rows on odd batches */
    size_t ys = (size_t)n + 5;
    float *x = rand_x(batch * xs + 1, 1.0f);
    float *y = malloc((batch * ys + 1) * sizeof(float));
    for (size_t i = 0; i < batch * ys + 1; i++) y[i] = -12345.0f;
    tern_matmul(&t.q, x, batch, xs, y, ys, pool);
    double e = rel_err_vs_f64(&t, x, batch, xs, y, ys);
    CHECK_MSG(e < 1e-3, "%s %s n=%lld k=%lld batch=%zu threads=%d: max_rel_err %.3g",
              isa, tern_dtype_name(type), (long long)n, (long long)k, batch, tern_pool_size(pool), e);
    /* padding between output rows untouched */
    int touched = 0;
    for (size_t b = 0; b < batch; b++)
        for (size_t i = (size_t)n; i < ys && b * ys + i < batch * ys; i++) touched += y[b * ys + i] != -12345.0f;
    CHECK_EQ_INT(touched, 0);
    free(x); free(y); free_mat(&t);
}

TEST(matmul_all_types_isas_threads) {
    static const tern_dtype types[] = {TERN_DT_PQ2_0, TERN_DT_Q2_0, TERN_DT_Q2_0_G64, TERN_DT_Q1_0,
                                       TERN_DT_F32, TERN_DT_F16, TERN_DT_BF16};
    /* 9 / 10: both sides of the AVX-512 file-layout GEMV -> GEMM switch (GEMM_MIN 10) */
    static const size_t batches_full[] = {1, 2, 3, 5, 7, 8, 9, 10, 31, 32, 33, 100, 129};
    static const size_t batches_small[] = {1, 3, 33};
    const size_t *batches = g_small ? batches_small : batches_full;
    size_t nb = g_small ? 3 : sizeof batches_full / sizeof batches_full[0];
    for (size_t ii = 0; ii < N_ISAS; ii++) {
        if (!tern_kernels_force(all_isas[ii])) continue;
        const char *isa = tern_isa_name(all_isas[ii]);
        for (int nt = 1; nt <= 3; nt++) {
            tern_pool *pool = NULL;
            CHECK(tern_pool_new(nt, &pool) == TERN_OK);
            tern_pool_set_adaptive(pool, false); /* every run shared: the parallel paths under test */
            for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
                int64_t kq = types[ti] == TERN_DT_Q2_0_G64 ? 64 : 128;
                for (size_t bi = 0; bi < nb; bi++) {
                    size_t batch = batches[bi];
                    if (nt > 1 && batch > 33 && bi % 2) continue;  /* keep it fast */
                    int64_t n = 37 + (int64_t)(bi * 13) % 29;       /* not a multiple of anything */
                    int64_t k = kq * (int64_t)(1 + (bi + ti) % 5);  /* e.g. 128*3 */
                    if (batch >= 100 && g_small) continue;
                    run_matmul_case(types[ti], n, k, batch, pool, isa);
                }
            }
            tern_pool_free(pool);
        }
    }
    tern_kernels_force(TERN_ISA_SCALAR);
    restore_best();
}

TEST(matmul_bonsai_like_k_and_big_batch) {
    /* A wider K (several Hadamard blocks) with larger activations, every ISA. */
    int64_t k = g_small ? 1024 : 5120, n = g_small ? 19 : 77;
    for (size_t ii = 0; ii < N_ISAS; ii++) {
        if (!tern_kernels_force(all_isas[ii])) continue;
        tern_pool *pool = NULL;
        CHECK(tern_pool_new(2, &pool) == TERN_OK);
        tern_pool_set_adaptive(pool, false); /* every run shared: the parallel paths under test */
        run_matmul_case(TERN_DT_PQ2_0, n, k, 1, pool, tern_isa_name(all_isas[ii]));
        run_matmul_case(TERN_DT_PQ2_0, n, k, g_small ? 33 : 64, pool, tern_isa_name(all_isas[ii]));
        run_matmul_case(TERN_DT_Q2_0_G64, n, k, 4, pool, tern_isa_name(all_isas[ii]));
        tern_pool_free(pool);
    }
    restore_best();
}

TEST(matmul_outlier_activation) {
    /* Activations with one element 200-300x larger than the rest (un-rotated
     * residual streams have these): the error bound must still hold, on every
     * path (GEMV batch 3, GEMM batch 20, both layouts where available). */
    for (size_t ii = 0; ii < N_ISAS; ii++) {
        if (!tern_kernels_force(all_isas[ii])) continue;
        for (int trial = 0; trial < 6; trial++) {
            size_t batch = trial % 2 ? 20 : 3;
            tmat t = make_mat(trial % 3 == 2 ? TERN_DT_Q2_0_G64 : TERN_DT_PQ2_0, g_small ? 64 : 256, 1024, 0);
            size_t n = (size_t)t.q.n;
            float *x = rand_x(1024 * batch, 1.0f), *y = malloc(n * batch * sizeof(float));
            x[5 + trial] = 200.0f;
            x[1024 + 700 - trial] = -300.0f;
            x[1024 * (batch - 1) + 128 * trial + 3] = 250.0f;
            tern_matmul(&t.q, x, batch, 1024, y, n, NULL);
            double e = rel_err_vs_f64(&t, x, batch, 1024, y, n);
            CHECK_MSG(e < 1e-3, "%s outlier trial %d: max_rel_err %.3g", tern_isa_name(all_isas[ii]), trial, e);
            free(x); free(y); free_mat(&t);
        }
    }
    restore_best();
}

/* A thread that ran a matmul and exits leaves no scratch behind (servers and
 * other callers create and end threads). */
static tmat g_thr_mat;
static void *matmul_in_thread(void *arg) {
    float *x = rand_x(1024 * 3, 1.0f), *y = malloc((size_t)g_thr_mat.q.n * 3 * sizeof(float));
    tern_matmul(&g_thr_mat.q, x, 3, 1024, y, (size_t)g_thr_mat.q.n, NULL);
    *(float *)arg = y[0];
    free(x); free(y);
    return NULL;
}
TEST(matmul_thread_exit_frees_scratch) {
    g_thr_mat = make_mat(TERN_DT_PQ2_0, 64, 1024, 0);
    size_t before = tern_alloc_current();
    for (int i = 0; i < 3; i++) {
        pthread_t th;
        float out = NAN;
        CHECK(pthread_create(&th, NULL, matmul_in_thread, &out) == 0);
        pthread_join(th, NULL);
        CHECK(isfinite(out));
        CHECK_MSG(tern_alloc_current() == before, "thread %d left %zu bytes allocated", i,
                  tern_alloc_current() - before);
    }
    free_mat(&g_thr_mat);
}

TEST(matmul_zero_batch_and_zero_rows) {
    tmat t = make_mat(TERN_DT_PQ2_0, 4, 128, 0);
    float y = 7.0f;
    tern_matmul(&t.q, NULL, 0, 128, &y, 4, NULL);
    CHECK(y == 7.0f);
    t.q.n = 0;
    float x[128] = {0};
    tern_matmul(&t.q, x, 1, 128, &y, 4, NULL);
    CHECK(y == 7.0f);
    free_mat(&t);
}

TEST(multi_equals_separate_bitwise) {
    for (size_t ii = 0; ii < N_ISAS; ii++) {
        if (!tern_kernels_force(all_isas[ii])) continue;
        tern_pool *pool = NULL;
        CHECK(tern_pool_new(2, &pool) == TERN_OK);
        tern_pool_set_adaptive(pool, false); /* every run shared: the parallel paths under test */
        size_t batches[] = {1, 7, 40};
        for (int bi = 0; bi < 3; bi++) {
            size_t batch = batches[bi];
            int64_t k = 384;
            tmat a = make_mat(TERN_DT_PQ2_0, 61, k, 0), b = make_mat(TERN_DT_PQ2_0, 13, k, 0),
                 c = make_mat(TERN_DT_PQ2_0, 130, k, 0);
            float *x = rand_x(batch * (size_t)k, 1.0f);
            float *ys[3], *yr[3];
            int64_t ns[3] = {61, 13, 130};
            for (int m = 0; m < 3; m++) {
                ys[m] = calloc(batch * (size_t)ns[m], sizeof(float));
                yr[m] = calloc(batch * (size_t)ns[m], sizeof(float));
            }
            const tern_qmat *ws[3] = {&a.q, &b.q, &c.q};
            size_t st[3] = {61, 13, 130};
            tern_matmul_multi(3, ws, x, batch, (size_t)k, ys, st, pool);
            for (int m = 0; m < 3; m++) tern_matmul(ws[m], x, batch, (size_t)k, yr[m], st[m], NULL);
            for (int m = 0; m < 3; m++)
                CHECK_MSG(memcmp(ys[m], yr[m], batch * (size_t)ns[m] * sizeof(float)) == 0,
                          "%s batch %zu matrix %d differs", tern_isa_name(all_isas[ii]), batch, m);
            for (int m = 0; m < 3; m++) { free(ys[m]); free(yr[m]); }
            free(x); free_mat(&a); free_mat(&b); free_mat(&c);
        }
        tern_pool_free(pool);
    }
    restore_best();
}

TEST(multi_mixed_types_equals_separate) {
    /* matrices of different types share one call: preparations are shared
     * only between matrices that use the same one */
    static const tern_dtype types[] = {TERN_DT_PQ2_0, TERN_DT_Q2_0_G64, TERN_DT_BF16, TERN_DT_Q2_0, TERN_DT_Q1_0};
    for (size_t ii = 0; ii < N_ISAS; ii++) {
        if (!tern_kernels_force(all_isas[ii])) continue;
        tern_pool *pool = NULL;
        CHECK(tern_pool_new(3, &pool) == TERN_OK);
        tern_pool_set_adaptive(pool, false); /* every run shared: the parallel paths under test */
        size_t batches[] = {1, 9, 37};
        for (int bi = 0; bi < 3; bi++) {
            size_t batch = batches[bi];
            int64_t k = 256;
            tmat m[5];
            const tern_qmat *ws[5];
            float *ys[5], *yr[5];
            size_t st[5];
            for (int q = 0; q < 5; q++) {
                m[q] = make_mat(types[q], 20 + q * 7, k, 0);
                ws[q] = &m[q].q;
                st[q] = (size_t)m[q].q.n + 1;
                ys[q] = calloc(batch * st[q], sizeof(float));
                yr[q] = calloc(batch * st[q], sizeof(float));
            }
            float *x = rand_x(batch * (size_t)k, 1.0f);
            tern_matmul_multi(5, ws, x, batch, (size_t)k, ys, st, pool);
            for (int q = 0; q < 5; q++) tern_matmul(ws[q], x, batch, (size_t)k, yr[q], st[q], NULL);
            for (int q = 0; q < 5; q++) {
                CHECK_MSG(memcmp(ys[q], yr[q], batch * st[q] * sizeof(float)) == 0, "%s batch %zu %s differs",
                          tern_isa_name(all_isas[ii]), batch, tern_dtype_name(types[q]));
                double e = rel_err_vs_f64(&m[q], x, batch, (size_t)k, ys[q], st[q]);
                CHECK_MSG(e < 1e-3, "%s batch %zu %s: max_rel_err %g", tern_isa_name(all_isas[ii]), batch,
                          tern_dtype_name(types[q]), e);
                free(ys[q]); free(yr[q]); free_mat(&m[q]);
            }
            free(x);
        }
        tern_pool_free(pool);
    }
    restore_best();
}

/* The 16-row layout written from kernels.h's description (independent of
 * tern_qmat_repack): per group of 16 rows and 128-input block, 16 fp16 scales
 * then 8 vectors of 64 bytes; row L's element e is in byte 4L + e%4 of vector
 * e/16, bits 2*((e%16)/4). */
static uint8_t *pack_r16(const tmat *t, size_t *size) {
    int64_t nb = t->q.k / 128, groups = (t->q.n + 15) / 16;
    size_t rb = (size_t)nb * 34;
    *size = (size_t)groups * 16 * rb;
    uint8_t *o = calloc(*size, 1);
    for (int64_t r = 0; r < groups * 16; r++)
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *blk = o + (size_t)(r / 16) * 16 * rb + (size_t)b * 544;
            int L = (int)(r % 16);
            for (int e = 0; e < 128; e++) {
                int code = 1; /* padding rows: zero weights */
                if (r < t->q.n)
                    code = (t->buf[(size_t)r * t->q.row_bytes + (size_t)b * 34 + 2 + (size_t)(e / 4)] >> (2 * (e % 4))) & 3;
                blk[32 + 64 * (e / 16) + 4 * L + e % 4] |= (uint8_t)(code << (2 * ((e % 16) / 4)));
            }
            if (r < t->q.n) memcpy(blk + 2 * L, t->buf + (size_t)r * t->q.row_bytes + (size_t)b * 34, 2);
        }
    return o;
}

TEST(layout_r16_every_isa) {
    tmat t = make_mat(TERN_DT_PQ2_0, 29, 256 + 128, 3);
    size_t sz;
    uint8_t *buf = pack_r16(&t, &sz);
    tern_qmat r = {TERN_DT_PQ2_0, t.q.n, t.q.k, buf, (size_t)(t.q.k / 128) * 34, TERN_LAYOUT_R16};
    CHECK(tern_qmat_check(&r, "r16") == TERN_OK);
    tern_qmat bad = r;
    bad.type = TERN_DT_Q2_0_G64;
    CHECK(tern_qmat_check(&bad, "r16") != TERN_OK);
    bad = r;
    bad.layout = 7;
    CHECK(tern_qmat_check(&bad, "r16") == TERN_ERR_INVALID_ARG);
    for (size_t ii = 0; ii < N_ISAS; ii++) {
        if (!tern_kernels_force(all_isas[ii])) continue;
        size_t batches[] = {1, 3, 17};
        for (int bi = 0; bi < 3; bi++) {
            size_t batch = batches[bi];
            float *x = rand_x(batch * (size_t)t.q.k, 1.0f), *y = malloc(batch * 29 * sizeof(float));
            tern_matmul(&r, x, batch, (size_t)t.q.k, y, 29, NULL);
            double e = rel_err_vs_f64(&t, x, batch, (size_t)t.q.k, y, 29);
            CHECK_MSG(e < 1e-3, "%s r16 (test packer) batch %zu: max_rel_err %g", tern_isa_name(all_isas[ii]), batch, e);
            free(x); free(y);
        }
    }
    /* where repack is available, it must write exactly these bytes (partial last
     * groups, a single row, a whole group, padded rows; large enough for the
     * huge-page buffer) */
    if (tern_kernels_force(TERN_ISA_AVX512)) {
        tern_qmat rp;
        CHECK(tern_qmat_repack(&t.q, &rp) == TERN_OK);
        CHECK(memcmp(rp.data, buf, sz) == 0);
        tern_qmat_free_repacked(&rp);
        static const int64_t shapes[][3] = {{1, 128, 0}, {16, 256, 0}, {47, 1024, 7}, {33, 640, 1}, {1300, 4096, 0}};
        for (int si = 0; si < 5; si++) {
            if (g_small && shapes[si][0] > 100) continue;
            tmat u = make_mat(TERN_DT_PQ2_0, shapes[si][0], shapes[si][1], (size_t)shapes[si][2]);
            size_t usz;
            uint8_t *ub = pack_r16(&u, &usz);
            CHECK(tern_qmat_repack(&u.q, &rp) == TERN_OK);
            CHECK_MSG(memcmp(rp.data, ub, usz) == 0, "repack of %lld x %lld differs from the description",
                      (long long)shapes[si][0], (long long)shapes[si][1]);
            tern_qmat_free_repacked(&rp);
            free(ub);
            free_mat(&u);
        }
    }
    free(buf);
    free_mat(&t);
    restore_best();
}

/* Q1_0 in the 16-row layout, from kernels.h's description: 16 scales, then 4
 * vectors of 64 bytes; row L's element e in byte 4L + e%4 of vector e/32, bit
 * (e%32)/4. */
static uint8_t *pack_r16q1(const tmat *t, size_t *size) {
    int64_t nb = t->q.k / 128, groups = (t->q.n + 15) / 16;
    size_t rb = (size_t)nb * 18;
    *size = (size_t)groups * 16 * rb;
    uint8_t *o = calloc(*size, 1);
    for (int64_t r = 0; r < t->q.n; r++)
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *blk = o + (size_t)(r / 16) * 16 * rb + (size_t)b * 288;
            const uint8_t *src = t->buf + (size_t)r * t->q.row_bytes + (size_t)b * 18;
            int L = (int)(r % 16);
            memcpy(blk + 2 * L, src, 2);
            for (int e = 0; e < 128; e++)
                if ((src[2 + e / 8] >> (e % 8)) & 1) blk[32 + 64 * (e / 32) + 4 * L + e % 4] |= (uint8_t)(1 << ((e % 32) / 4));
        }
    return o;
}

TEST(layout_r16_q1_0) {
    /* the description's bytes, on every ISA (the reference reads the layout too),
     * threads 1 and 3, batches 1..40, and tern_qmat_repack's bytes where it exists */
    static const int64_t shapes[][3] = {{29, 384, 3}, {16, 128, 0}, {1, 256, 0}, {47, 1024, 7}, {700, 2048, 0}};
    for (int si = 0; si < 5; si++) {
        if (g_small && shapes[si][0] > 100) continue;
        tmat t = make_mat(TERN_DT_Q1_0, shapes[si][0], shapes[si][1], (size_t)shapes[si][2]);
        size_t sz;
        uint8_t *buf = pack_r16q1(&t, &sz);
        tern_qmat r = {TERN_DT_Q1_0, t.q.n, t.q.k, buf, (size_t)(t.q.k / 128) * 18, TERN_LAYOUT_R16};
        CHECK(tern_qmat_check(&r, "r16 q1") == TERN_OK);
        /* products only where max|ref| is over enough rows: the bound is relative to
         * the largest output, and one row of +-1 weights can cancel to near zero
         * (a 1-row product measured 2.3e-3 in 2 of 60 runs, with 14-bit activations) */
        for (size_t ii = 0; ii < N_ISAS && t.q.n >= 16; ii++) {
            if (!tern_kernels_force(all_isas[ii])) continue;
            for (int nt = 1; nt <= 3; nt += 2) {
                tern_pool *pool = NULL;
                CHECK(tern_pool_new(nt, &pool) == TERN_OK);
                tern_pool_set_adaptive(pool, false);
                size_t batches[] = {1, 2, 7, 40};
                for (int bi = 0; bi < 4; bi++) {
                    size_t batch = batches[bi], n = (size_t)t.q.n;
                    if (si == 4 && bi != 0 && all_isas[ii] == TERN_ISA_SCALAR) continue; /* keep it fast */
                    float *x = rand_x(batch * (size_t)t.q.k, 1.0f), *y = malloc(batch * n * sizeof(float));
                    tern_matmul(&r, x, batch, (size_t)t.q.k, y, n, pool);
                    double e = rel_err_vs_f64(&t, x, batch, (size_t)t.q.k, y, n);
                    CHECK_MSG(e < 1e-3, "%s r16 q1_0 %lld x %lld batch %zu threads %d: max_rel_err %g",
                              tern_isa_name(all_isas[ii]), (long long)t.q.n, (long long)t.q.k, batch, nt, e);
                    free(x); free(y);
                }
                tern_pool_free(pool);
            }
        }
        if (tern_kernels_force(TERN_ISA_AVX512)) {
            tern_qmat rp;
            CHECK(tern_qmat_repack(&t.q, &rp) == TERN_OK);
            CHECK(rp.layout == TERN_LAYOUT_R16 && rp.type == TERN_DT_Q1_0);
            CHECK_MSG(memcmp(rp.data, buf, sz) == 0, "q1_0 repack of %lld x %lld differs from the description",
                      (long long)t.q.n, (long long)t.q.k);
            tern_qmat_free_repacked(&rp);
        }
        free(buf);
        free_mat(&t);
    }
    restore_best();
}

TEST(repacked_16row_layout) {
    /* tern_qmat_repack: refused off AVX-512; on AVX-512 the repacked matrix
     * gives the same products (within the bound) on every ISA, every path
     * (GEMV, GEMM), thread counts and row ranges not multiple of 16 */
    tmat t = make_mat(TERN_DT_PQ2_0, 37, 384, 5);
    tern_qmat r;
    if (!tern_kernels_force(TERN_ISA_AVX512)) {
        tern_kernels_force(TERN_ISA_SCALAR);
        CHECK(tern_qmat_repack(&t.q, &r) == TERN_ERR_UNSUPPORTED);
        free_mat(&t);
        restore_best();
        SKIP_OPTIONAL("no AVX-512 here: the 16-row layout is refused (checked) and not exercised");
    }
    CHECK(tern_qmat_repack(&t.q, &r) == TERN_OK);
    CHECK(r.layout == TERN_LAYOUT_R16);
    CHECK(tern_qmat_check(&r, "r16") == TERN_OK);
    tmat g = make_mat(TERN_DT_Q2_0_G64, 4, 128, 0);
    tern_qmat bad;
    CHECK(tern_qmat_repack(&g.q, &bad) == TERN_ERR_UNSUPPORTED);
    free_mat(&g);
    for (size_t ii = 0; ii < N_ISAS; ii++) {
        if (!tern_kernels_force(all_isas[ii])) continue;
        for (int nt = 1; nt <= 3; nt += 2) {
            tern_pool *pool = NULL;
            CHECK(tern_pool_new(nt, &pool) == TERN_OK);
            tern_pool_set_adaptive(pool, false); /* every run shared: the parallel paths under test */
            size_t batches[] = {1, 2, 7, 40};
            for (int bi = 0; bi < 4; bi++) {
                size_t batch = batches[bi], xs = 384 + 3, ys = 40;
                float *x = rand_x(batch * xs, 1.0f), *y = malloc(batch * ys * sizeof(float));
                for (size_t i = 0; i < batch * ys; i++) y[i] = -777.0f;
                tern_matmul(&r, x, batch, xs, y, ys, pool);
                double e = rel_err_vs_f64(&t, x, batch, xs, y, ys);
                CHECK_MSG(e < 1e-3, "%s r16 batch %zu threads %d: max_rel_err %g", tern_isa_name(all_isas[ii]), batch,
                          nt, e);
                int touched = 0;
                for (size_t b = 0; b < batch; b++) touched += y[b * ys + 37] != -777.0f || y[b * ys + 39] != -777.0f;
                CHECK_EQ_INT(touched, 0);
                free(x); free(y);
            }
            tern_pool_free(pool);
        }
    }
    tern_qmat_free_repacked(&r);
    CHECK(r.data == NULL);
    free_mat(&t);
    restore_best();
}

/* ------------------------------------------------------------- Hadamard */
static double had_entry(size_t i, size_t j) { return (__builtin_popcountll(i & j) & 1) ? -1.0 : 1.0; }

TEST(hadamard_vs_explicit_matrix_and_inverse) {
    size_t blocks[] = {1, 2, 16, 64, 256, 1024};
    for (size_t ii = 0; ii < N_ISAS; ii++) {
        if (!tern_kernels_force(all_isas[ii])) continue;
        for (size_t bi = 0; bi < 6; bi++) {
            size_t blk = blocks[bi];
            size_t n = blk * (bi % 2 ? 3 : 2), rows = 2;
            if (g_small && blk > 256) continue;
            float *x = rand_x(rows * n, 2.0f), *x0 = malloc(rows * n * sizeof(float));
            float *s = malloc(n * sizeof(float));
            for (size_t i = 0; i < n; i++) s[i] = (check_rand_u64() >> 20) & 1 ? 1.0f : -1.0f;
            memcpy(x0, x, rows * n * sizeof(float));
            tern_hadamard(x, rows, n, blk, s);
            double maxe = 0, maxv = 0;
            for (size_t r = 0; r < rows; r++)
                for (size_t o = 0; o < n; o += blk)
                    for (size_t i = 0; i < blk; i++) {
                        double acc = 0;
                        for (size_t j = 0; j < blk; j++)
                            acc += had_entry(i, j) * s[o + j] * (double)x0[r * n + o + j];
                        acc /= sqrt((double)blk);
                        double e = fabs(acc - x[r * n + o + i]);
                        if (!(e <= maxe)) maxe = e;
                        if (fabs(acc) > maxv) maxv = fabs(acc);
                    }
            /* fp32 rounding: log2(block) stages of additions */
            double tol = 1e-6 * (1 + log2((double)blk)) * (maxv > 1 ? maxv : 1);
            CHECK_MSG(maxe <= tol, "%s block %zu: max err %.3g > %.3g", tern_isa_name(all_isas[ii]), blk, maxe, tol);
            tern_hadamard_inv(x, rows, n, blk, s);
            double back = 0;
            for (size_t i = 0; i < rows * n; i++) { double e = fabs(x[i] - x0[i]); if (!(e <= back)) back = e; }
            CHECK_MSG(back <= 1e-5 * (1 + log2((double)blk)) * 4, "%s block %zu: round trip err %.3g",
                      tern_isa_name(all_isas[ii]), blk, back);
            free(x); free(x0); free(s);
        }
    }
    restore_best();
}

/* ----------------------------------------------------------- fused sites */
TEST(fused_sites_match_composition) {
    size_t n = 2048, rows = 3, blk = 1024;
    for (size_t ii = 0; ii < N_ISAS; ii++) {
        if (!tern_kernels_force(all_isas[ii])) continue;
        const char *isa = tern_isa_name(all_isas[ii]);
        float *r = rand_x(rows * n, 1.0f), *d = rand_x(rows * n, 0.5f), *g = rand_x(n, 1.0f);
        float *s = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) s[i] = (check_rand_u64() >> 20) & 1 ? 1.0f : -1.0f;
        float *r2 = malloc(rows * n * sizeof(float)), *nr = malloc(rows * n * sizeof(float));
        float *rot = malloc(rows * n * sizeof(float)), *ex = malloc(rows * n * sizeof(float));
        memcpy(r2, r, rows * n * sizeof(float));
        tern_add_rmsnorm_hadamard(r, d, g, 1e-6f, nr, rot, rows, n, blk, s);
        /* composition in float64 */
        double maxe_r = 0, maxe_n = 0, maxe_t = 0;
        for (size_t row = 0; row < rows; row++) {
            double *v = malloc(n * sizeof(double)), ss = 0;
            for (size_t i = 0; i < n; i++) { v[i] = (double)r2[row * n + i] + d[row * n + i]; ss += v[i] * v[i]; }
            double inv = 1.0 / sqrt(ss / n + 1e-6);
            for (size_t i = 0; i < n; i++) {
                maxe_r = fmax(maxe_r, fabs(v[i] - r[row * n + i]));
                double nv = v[i] * inv * g[i];
                maxe_n = fmax(maxe_n, fabs(nv - nr[row * n + i]));
                ex[row * n + i] = (float)nv;
            }
            for (size_t o = 0; o < n; o += blk)
                for (size_t i = 0; i < blk; i++) {
                    double acc = 0;
                    for (size_t j = 0; j < blk; j++) acc += had_entry(i, j) * s[o + j] * (double)ex[row * n + o + j];
                    maxe_t = fmax(maxe_t, fabs(acc / 32.0 - rot[row * n + o + i]));
                }
            free(v);
        }
        CHECK_MSG(maxe_r < 1e-6, "%s residual err %g", isa, maxe_r);
        CHECK_MSG(maxe_n < 1e-5, "%s normed err %g", isa, maxe_n);
        CHECK_MSG(maxe_t < 1e-4, "%s rotated err %g", isa, maxe_t);
        /* rotated without normed, no add */
        memcpy(r2, r, rows * n * sizeof(float));
        float *rot2 = malloc(rows * n * sizeof(float));
        tern_add_rmsnorm_hadamard(r2, NULL, g, 1e-6f, NULL, rot2, rows, n, blk, s);
        CHECK(memcmp(r2, r, rows * n * sizeof(float)) == 0);
        float *nr2 = malloc(rows * n * sizeof(float));
        tern_add_rmsnorm_hadamard(r2, NULL, g, 1e-6f, nr2, NULL, rows, n, blk, s);
        memcpy(ex, nr2, rows * n * sizeof(float));
        tern_hadamard(ex, rows, n, blk, s);
        double e2 = 0;
        for (size_t i = 0; i < rows * n; i++) e2 = fmax(e2, fabs(ex[i] - rot2[i]));
        CHECK_MSG(e2 < 1e-5, "%s norm-only rotated vs composition %g", isa, e2);
        /* swiglu */
        float *out = malloc(rows * n * sizeof(float));
        tern_swiglu_hadamard(r, d, out, rows, n, blk, s);
        for (size_t i = 0; i < rows * n; i++) {
            double gg = r[i];
            ex[i] = (float)(gg / (1 + exp(-gg)) * d[i]);
        }
        tern_hadamard(ex, rows, n, blk, s);
        double e3 = 0;
        for (size_t i = 0; i < rows * n; i++) e3 = fmax(e3, fabs(ex[i] - out[i]));
        CHECK_MSG(e3 < 1e-5, "%s swiglu vs composition %g", isa, e3);
        tern_swiglu_hadamard(r, d, out, rows, n, blk, NULL);
        double e4 = 0;
        for (size_t i = 0; i < rows * n; i++) {
            double gg = r[i];
            e4 = fmax(e4, fabs(gg / (1 + exp(-gg)) * d[i] - out[i]));
        }
        CHECK_MSG(e4 < 1e-5, "%s swiglu (no transform) %g", isa, e4);
        free(r); free(d); free(g); free(s); free(r2); free(nr); free(rot); free(ex); free(rot2);
        free(nr2); free(out);
    }
    restore_best();
}

TEST(isa_names_and_setter) {
    tern_kernels_init();
    CHECK(tern_kernels_isa() == tern_kernels_best());
    CHECK_STR(tern_isa_name(TERN_ISA_SCALAR), "scalar");
    for (int i = 0; i < TERN_ISA_COUNT; i++) {
        tern_isa back = TERN_ISA_COUNT;
        CHECK(tern_isa_parse(tern_isa_name((tern_isa)i), &back) && back == (tern_isa)i);
    }
    CHECK(tern_kernels_force(TERN_ISA_SCALAR));
    CHECK(tern_kernels_isa() == TERN_ISA_SCALAR);
#if defined(__x86_64__)
    CHECK(!tern_kernels_force(TERN_ISA_NEON));
    CHECK(tern_set_kernel_isa("neon") == TERN_ERR_UNSUPPORTED);
    CHECK(tern_kernels_isa() == TERN_ISA_SCALAR); /* unchanged */
#endif
#if defined(__aarch64__)
    CHECK(!tern_kernels_force(TERN_ISA_AVX2));
    CHECK(tern_set_kernel_isa("avx2") == TERN_ERR_UNSUPPORTED);
#endif
    /* the public setter: names case-insensitive, NULL / "" = the best */
    CHECK(tern_set_kernel_isa("fast") == TERN_ERR_INVALID_ARG);
    CHECK(tern_set_kernel_isa("SCALAR") == TERN_OK);
    CHECK_STR(tern_kernel_isa(), "scalar");
    CHECK(tern_set_kernel_isa(NULL) == TERN_OK);
    CHECK(tern_kernels_isa() == tern_kernels_best());
    CHECK(tern_set_kernel_isa("scalar") == TERN_OK);
    CHECK(tern_set_kernel_isa("") == TERN_OK);
    CHECK(tern_kernels_isa() == tern_kernels_best());
    restore_best();
    fprintf(stderr, "  best ISA here: %s\n", tern_isa_name(tern_kernels_isa()));
}

int main(void) {
    check_seed();
    /* smaller sizes under sanitizers and on aarch64 (CI runs it under qemu) */
    g_small = getenv("TERN_SANITIZED") != NULL;
#if defined(__aarch64__)
    g_small = 1;
#endif
    RUN(pool_runs_every_task_once);
    RUN(qmat_check_rejects_bad_shapes);
    RUN(isa_names_and_setter);
    RUN(matmul_all_types_isas_threads);
    RUN(matmul_bonsai_like_k_and_big_batch);
    RUN(matmul_outlier_activation);
    RUN(matmul_zero_batch_and_zero_rows);
    RUN(matmul_thread_exit_frees_scratch);
    RUN(multi_equals_separate_bitwise);
    RUN(multi_mixed_types_equals_separate);
    RUN(layout_r16_every_isa);
    RUN(repacked_16row_layout);
    RUN(layout_r16_q1_0);
    RUN(hadamard_vs_explicit_matrix_and_inverse);
    RUN(fused_sites_match_composition);
    return check_summary();
}
