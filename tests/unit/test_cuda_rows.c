/*
 * test_cuda_rows.c - the exact R-row GEMV of a speculative verify (tc_gemv_rows.cu,
 * tc_gemv_tiled_exact_ks, tc_matmul_multi_exact): every row bit-identical to the decode GEMV with that row
 * alone (batch 1: tc_gemv_tiled for one matrix, tc_gemv_tiled_multi for the matrices of
 * one input, with a one-row activation quantised on its own), and within the quantiser's
 * bound of float64 of the dequantized matrix. Awkward sizes: one row, row counts off the
 * 16-row strips, an odd number of 128-blocks, K up to 17408, R = 1..17 (one pass holds
 * 8 rows: the NB4 build for 1..4, the exact 8-row build for 5..8), one to four matrices
 * per call; y padding untouched; one launch per chunk of 8 rows where batch 1 runs the
 * matrices as one grid and the chunk stages, one per matrix and chunk otherwise. TERN_TEST_QUICK=1 leaves
 * out the two largest sets (for compute-sanitizer). Oracles come from the
 * random trits and scales the test draws (kern_check.h).
 * Without a CUDA build or device every test prints "SKIP: no CUDA device".
 */
#include "check.h"
#include "kern_check.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if defined(TERN_HAVE_CUDA)
#include "kernels/cuda/lab.h"
#include "kernels/cuda/mm_choose.h"

static int g_gpu;
static tc_ctx *g_tc;
#define NEED_GPU() do { if (!g_gpu) SKIP("no CUDA device"); } while (0)

static void *dup_dev(const void *h, size_t n) {
    void *d = tc_malloc(g_tc, n);
    CHECK(d != NULL);
    if (d) CHECK(tc_upload(g_tc, d, h, n) == 0);
    return d;
}

typedef struct {
    int nm;
    tmat t[4];
    tc_mat tm[4];
    const tc_mat *tw[4];
    uint8_t *base[4];
    size_t wb[4];
} mats;

static void mats_make(mats *S, const int64_t *ns, int64_t k) {
    S->nm = 0;
    for (int i = 0; i < 4 && ns[i]; i++, S->nm++) {
        S->t[i] = make_mat(TERN_DT_PQ2_0, ns[i], k, 0);
        size_t n = S->t[i].q.row_bytes * (size_t)S->t[i].q.n;
        S->wb[i] = n;
        S->base[i] = dup_dev(S->t[i].buf, n);
        tc_mat src = {.kind = TC_TERN128, .data = S->base[i], .n = ns[i], .k = k, .row_bytes = S->t[i].q.row_bytes};
        CHECK_EQ_INT(tc_repack_tiled(g_tc, &src, &S->tm[i]), 0);
        S->tw[i] = &S->tm[i];
    }
}
static void mats_free(mats *S, int64_t k) {
    for (int i = 0; i < S->nm; i++) {
        tc_free(g_tc, S->base[i], S->wb[i]);
        tc_free(g_tc, (void *)S->tm[i].data, tc_tiled_bytes(S->t[i].q.n, k));
        free_mat(&S->t[i]);
    }
}

/* The row y of every matrix for R rows through path p: 0 tc_gemv_tiled_rows on a
 * quantised R-row activation (its launches counted), 1 tc_matmul_multi_exact (its own
 * quantisation), 2 tc_matmul_multi_q_exact, 3 (R <= 8) tc_gemv_tiled_exact_ks with batch
 * 1's KS; each row then against batch 1 of the same row. */
TEST(rows_vs_batch1_and_f64) {
    NEED_GPU();
    const int64_t sets[][4] = {{1, 0, 0, 0},    {3, 0, 0, 0},        {17, 250, 0, 0}, {37, 0, 0, 0},
                               {130, 16, 1, 0}, {257, 17, 1000, 40}, {33, 0, 0, 0},   {4000, 1024, 0, 0},
                               {5120, 0, 0, 0}};
    const int64_t ks[] = {2560, 128, 384, 1152, 640, 5120, 17408, 2560, 6144};
    const size_t Rs[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 17};
    /* TERN_TEST_QUICK (a compute-sanitizer run): the sets up to 1000 rows only */
    const char *quick = getenv("TERN_TEST_QUICK");
    const size_t nsets = quick && *quick && strcmp(quick, "0") ? 7 : sizeof ks / sizeof ks[0];
    for (size_t si = 0; si < nsets; si++) {
        const int64_t k = ks[si];
        mats S;
        mats_make(&S, sets[si], k);
        for (size_t ri = 0; ri < sizeof Rs / sizeof Rs[0]; ri++) {
            const size_t R = Rs[ri];
            float *x = rand_x(R * (size_t)k, 1.0f);
            if (R == 5) x[k + k / 3] = 500.0f; /* an outlier in row 1 */
            float *dx = dup_dev(x, R * (size_t)k * 4);
            void *ab = tc_malloc(g_tc, tc_act_bytes(R, k)), *a1b = tc_malloc(g_tc, tc_act_bytes(1, k));
            tc_act act = tc_act_view(ab, R, k), a1 = tc_act_view(a1b, 1, k);
            float *dy[4], *dy1[4], *y[4], *y1[4];
            size_t ys[4];
            for (int i = 0; i < S.nm; i++) {
                ys[i] = (size_t)S.t[i].q.n + 3;
                y[i] = calloc(R * ys[i], 4);
                y1[i] = calloc(R * ys[i], 4);
                dy[i] = dup_dev(y[i], R * ys[i] * 4);
                dy1[i] = dup_dev(y[i], ys[i] * 4);
            }
            /* batch 1, row by row: what a decode step runs */
            unsigned long long l1 = 0;
            for (size_t r = 0; r < R; r++) {
                tc_quantize(g_tc, dx + r * (size_t)k, (size_t)k, &a1);
                CHECK_EQ_INT(tc_sync(g_tc), 0);
                tc_launches_reset(g_tc);
                if (S.nm == 1) tc_gemv_tiled(g_tc, &S.tm[0], &a1, dy1[0], ys[0]);
                else tc_gemv_tiled_multi(g_tc, S.nm, S.tw, &a1, dy1, ys);
                l1 = tc_launches(g_tc);
                CHECK_EQ_INT(tc_sync(g_tc), 0);
                for (int i = 0; i < S.nm; i++) CHECK(tc_download(g_tc, y1[i] + r * ys[i], dy1[i], ys[i] * 4) == 0);
            }
            for (int path = 0; path < 4; path++) {
                if (path == 3 && R > 8) break;
                tc_mat mt[4];
                for (int i = 0; i < S.nm; i++) mt[i] = S.tm[i];
                if (path == 0) {
                    tc_quantize(g_tc, dx, (size_t)k, &act);
                    CHECK_EQ_INT(tc_sync(g_tc), 0);
                    tc_launches_reset(g_tc);
                    tc_gemv_tiled_rows(g_tc, S.nm, S.tw, &act, dy, ys);
                    /* one launch per chunk of 8 and per launch of batch 1 (one grid or one
                     * per matrix), except a chunk too large to stage: one per matrix */
                    int ks1[4];
                    const int one = tc_gemv_tiled_ks1(g_tc, S.nm, S.tw, &act, ks1);
                    CHECK(one == (l1 == 1 && S.nm > 1));
                    unsigned long long want = 0;
                    for (size_t b0 = 0; b0 < R; b0 += 8) {
                        const int nb = (int)(R - b0 < 8 ? R - b0 : 8);
                        want += one && tc_mm_stage_bytes(nb, k) <= TC_MM_STAGE_MAX ? 1 : (unsigned long long)S.nm;
                    }
                    CHECK_MSG(tc_launches(g_tc) == want, "set %zu R %zu: %llu launches, want %llu", si, R,
                              (unsigned long long)tc_launches(g_tc), want);
                } else if (path == 1) {
                    tc_matmul_multi_exact(g_tc, S.nm, mt, dx, R, (size_t)k, dy, ys);
                } else if (path == 2) {
                    tc_quantize(g_tc, dx, (size_t)k, &act);
                    tc_matmul_multi_q_exact(g_tc, S.nm, mt, &act, NULL, 0, dy, ys);
                } else { /* one chunk through the exact builds with batch 1's KS */
                    int ks1[4];
                    tc_quantize(g_tc, dx, (size_t)k, &act);
                    const int one = tc_gemv_tiled_ks1(g_tc, S.nm, S.tw, &act, ks1);
                    CHECK(tc_gemv_tiled_exact_ks(g_tc, S.nm, S.tw, &act, dy, ys, ks1, one) == 1);
                }
                CHECK_EQ_INT(tc_sync(g_tc), 0);
                for (int i = 0; i < S.nm; i++) {
                    CHECK(tc_download(g_tc, y[i], dy[i], R * ys[i] * 4) == 0);
                    int bad = -1;
                    for (size_t r = 0; r < R && bad < 0; r++)
                        if (memcmp(y[i] + r * ys[i], y1[i] + r * ys[i], (size_t)S.t[i].q.n * 4)) bad = (int)r;
                    CHECK_MSG(bad < 0, "set %zu mat %d (n %lld k %lld) R %zu path %d: row %d differs from batch 1",
                              si, i, (long long)S.t[i].q.n, (long long)k, R, path, bad);
                    for (size_t r = 0; r < R; r++)
                        for (size_t p = (size_t)S.t[i].q.n; p < ys[i]; p++) CHECK(y[i][r * ys[i] + p] == 0.0f);
                    if (path == 0 && (R <= 5 || R == 13) && (size_t)S.t[i].q.n * k <= (size_t)4000 * 2560) {
                        double e = rel_err_vs_f64(&S.t[i], x, R, (size_t)k, y[i], ys[i]);
                        double eq = qerr_ratio_vs_f64(&S.t[i], x, R, (size_t)k, y[i], ys[i]);
                        CHECK_MSG(eq < 1.0 && (S.t[i].q.n < 16 || e < 1e-3),
                                  "set %zu mat %d R %zu: rel err %g, err / bound %g", si, i, R, e, eq);
                    }
                }
            }
            for (int i = 0; i < S.nm; i++) {
                tc_free(g_tc, dy[i], R * ys[i] * 4);
                tc_free(g_tc, dy1[i], ys[i] * 4);
                free(y[i]);
                free(y1[i]);
            }
            tc_free(g_tc, ab, tc_act_bytes(R, k));
            tc_free(g_tc, a1b, tc_act_bytes(1, k));
            tc_free(g_tc, dx, R * (size_t)k * 4);
            free(x);
        }
        mats_free(&S, k);
    }
    /* refusals: a file-layout matrix, a K that is not the activation's, five matrices */
    const tc_mat bad = {.kind = TC_TERN128, .n = 16, .k = 128}, badk = {.kind = TC_TERN128T, .n = 16, .k = 256};
    tc_act a1 = {.k = 128, .batch = 1};
    float *yy[5] = {0};
    size_t yys[5] = {0};
    tc_gemv_tiled_rows(g_tc, 1, (const tc_mat *const[]){&bad}, &a1, yy, yys);
    CHECK_EQ_INT(tc_sync(g_tc), TC_ERR_UNSUPPORTED);
    tc_gemv_tiled_rows(g_tc, 1, (const tc_mat *const[]){&badk}, &a1, yy, yys);
    CHECK_EQ_INT(tc_sync(g_tc), TC_ERR_UNSUPPORTED);
    tc_gemv_tiled_rows(g_tc, 5, (const tc_mat *const[]){&badk, &badk, &badk, &badk, &badk}, &a1, yy, yys);
    CHECK_EQ_INT(tc_sync(g_tc), TC_ERR_UNSUPPORTED);
}

int main(void) {
    check_seed();
    tern_kernels_init();
    if (tc_device_count() > 0 && tc_ctx_new(0, &g_tc) == 0) {
        g_gpu = 1;
        fprintf(stderr, "CUDA device: %s\n", tc_device_name(g_tc));
    } else {
        fprintf(stderr, "SKIP: no CUDA device\n");
    }
    RUN(rows_vs_batch1_and_f64);
    if (g_tc) tc_ctx_free(g_tc);
    return check_summary();
}
#else
int main(void) {
    fprintf(stderr, "SKIP: no CUDA device (built without CUDA)\n");
    printf("SKIPPED: built without CUDA\n");
    return 77;
}
#endif
