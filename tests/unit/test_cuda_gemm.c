/*
 * test_cuda_gemm.c - the tensor-core ternary GEMM (src/kernels/cuda/tc_gemm_tc.cu) with
 * split-K and its batched-decode tiles (16 tokens), called directly (lab.h): rows off
 * the 128-row tile (1,000, 129, 5,120, 17,408), K from one stage to 17,408 (odd stage
 * counts too), M = 9, 15, 16, 17, 31, 64, 100, 300, 513; the file layout (both 2-byte
 * alignments) and the tiled one (TC_TERN128T); exact and int8 modes; unsplit (the path
 * before split-K), the split rule, and forced splits. Oracles come from the random
 * trits and scales the test draws and the activation it downloads (kern_check.h),
 * never from the kernels:
 *   (1) against float64 of the integers the GEMM is given (x_q = 128*hi + lo, or
 *       128*hi in int8 mode, and the scales) within fp32 rounding;
 *   (2) exact mode against float64 of the float input within the activation rounding's
 *       own bound, int8 within 3e-2 of max|ref|;
 *   (3) split and unsplit equal within fp32 summation order, tiled equal to the file
 *       layout bit for bit when both take the same plan;
 *   (4) a second run, and the same call replayed from a CUDA graph, equal bit for bit;
 *   (5) nothing written outside the n x M outputs.
 * Large shapes check a sample of rows (the float64 oracle's time). K not a multiple of
 * 256 (128, 384) is refused by the GEMM and served by the GEMV through the chooser.
 * Without a CUDA build or device every test prints "SKIP: no CUDA device".
 * Then the same oracles on the wgmma GEMM (tc_gemm_wg.cu): wg_small, wg_vs_f64_and_mma (also
 * bit-equal to tc_gemm_tc where both take the same plan), wg_deterministic, wg_chooser.
 * On the GPU: TERN_TEST_DEVICE=cuda build-cuda/test_cuda_gemm (TERN_TEST_ONLY=NAME for one).
 */
#include "check.h"
#include "kern_check.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if defined(TERN_HAVE_CUDA)
#include "kernels/cuda/lab.h"

static int g_gpu;
static tc_ctx *g_tc;
#define NEED_GPU() do { if (!g_gpu) SKIP("no CUDA device"); } while (0)

/* the file-layout matrix t uploaded at byte offset off (0 or 2: the file's 2-byte alignment) */
static tc_mat up_mat(const tmat *t, size_t off, uint8_t **base, size_t *bytes) {
    size_t n = t->q.row_bytes * (size_t)t->q.n;
    *bytes = n + off;
    *base = tc_malloc(g_tc, *bytes);
    CHECK(*base && tc_upload(g_tc, *base + off, t->buf, n) == 0);
    tc_mat m = {.kind = TC_TERN128, .data = *base + off, .n = t->q.n, .k = t->q.k, .row_bytes = t->q.row_bytes};
    return m;
}

/* x_q of input j of token b from the downloaded activation (layout: tc_matmul.cu) */
static int act_xq(const int8_t *q, int64_t k, size_t b, int64_t j, int hi_only) {
    int64_t u = j / 32, w = j % 32, i = w / 16, kk = (w % 16) / 4, s = w % 4;
    size_t p = (size_t)b * (size_t)k * 2 + (size_t)u * 64 + (size_t)(16 * i + 4 * s + kk);
    return hi_only ? 128 * q[p] : 128 * q[p] + q[p + 32];
}

/* The rows the oracles check: all of them up to 300, else the tile edges and a
 * random sample (about 48). */
static int64_t pick_rows(int64_t n, int64_t *rows) {
    if (n <= 300) {
        for (int64_t r = 0; r < n; r++) rows[r] = r;
        return n;
    }
    int64_t c = 0;
    const int64_t edge[] = {0, 1, 127, 128, 255, n - 129, n - 128, n - 2, n - 1};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++)
        if (edge[i] >= 0 && edge[i] < n) rows[c++] = edge[i];
    while (c < 48) rows[c++] = (int64_t)(check_rand_u64() % (uint64_t)n);
    return c;
}

/* One shape and batch: its matrix, float input, activation (device and host copies),
 * float64 references on the picked rows. */
typedef struct gcase {
    int64_t n, k;
    size_t M, ys, yn;
    tmat t;
    uint8_t *base;
    size_t wb;
    tc_mat fm, tm;
    float *x;
    void *abuf;
    tc_act act;
    int8_t *hq;
    float *hsx;
    int64_t nr, rows[304]; /* pick_rows: every row up to 300 */
    double *ref_int[2]; /* [mode-1][b*nr + i]: float64 of the integers given */
    double *ref_f;      /* [b*nr + i]: float64 of the float input */
    double *qbound;     /* [b*nr + i]: the exact mode's rounding bound (kern_check.h's measure) */
    float *dy;
} gcase;

static void case_make(gcase *c, int64_t n, int64_t k, size_t off, size_t M, int oracle) {
    memset(c, 0, sizeof *c);
    c->n = n;
    c->k = k;
    c->M = M;
    c->ys = (size_t)n + 3;
    c->yn = (M + 1) * c->ys;
    c->t = make_mat(TERN_DT_PQ2_0, n, k, off ? 8 : 0);
    c->fm = up_mat(&c->t, off, &c->base, &c->wb);
    CHECK_EQ_INT(tc_repack_tiled(g_tc, &c->fm, &c->tm), 0);
    c->x = rand_x(M * (size_t)k, 1.0f);
    if (M > 1) c->x[k + 5] = 300.0f; /* an outlier in one block of token 1 */
    float *dx = tc_malloc(g_tc, M * (size_t)k * 4);
    CHECK(dx && tc_upload(g_tc, dx, c->x, M * (size_t)k * 4) == 0);
    c->abuf = tc_malloc(g_tc, tc_act_bytes(M, k));
    CHECK(c->abuf != NULL);
    c->act = tc_act_view(c->abuf, M, k);
    tc_quantize(g_tc, dx, (size_t)k, &c->act);
    c->hq = malloc(M * (size_t)k * 2);
    c->hsx = malloc(M * (size_t)(k / 128) * 4);
    CHECK_EQ_INT(tc_sync(g_tc), 0);
    CHECK(tc_download(g_tc, c->hq, c->act.q, M * (size_t)k * 2) == 0);
    CHECK(tc_download(g_tc, c->hsx, c->act.sx, M * (size_t)(k / 128) * 4) == 0);
    tc_free(g_tc, dx, M * (size_t)k * 4);
    c->dy = tc_malloc(g_tc, c->yn * 4);
    CHECK(c->dy != NULL);
    c->nr = oracle ? pick_rows(n, c->rows) : 0;
    const size_t nref = M * (size_t)c->nr;
    c->ref_int[0] = malloc((nref + 1) * sizeof(double));
    c->ref_int[1] = malloc((nref + 1) * sizeof(double));
    c->ref_f = malloc((nref + 1) * sizeof(double));
    c->qbound = malloc((nref + 1) * sizeof(double));
    const int64_t G = k / 128;
    double *sxb = malloc((size_t)G * sizeof(double));
    for (size_t b = 0; b < M; b++) {
        const float *xb = c->x + b * (size_t)k;
        for (int64_t g = 0; g < G; g++) {
            double mx = 0;
            for (int64_t j = g * 128; j < g * 128 + 128; j++) mx = fmax(mx, fabs((double)xb[j]));
            sxb[g] = mx / 16256.0;
        }
        for (int64_t i = 0; i < c->nr; i++) {
            const double *w = c->t.deq + c->rows[i] * k;
            double e0 = 0, e1 = 0, s = 0, a = 0, v = 0;
            for (int64_t g = 0; g < G; g++) {
                double s0 = 0, s1 = 0;
                for (int64_t j = g * 128; j < g * 128 + 128; j++) {
                    s0 += w[j] * act_xq(c->hq, k, b, j, 0);
                    s1 += w[j] * act_xq(c->hq, k, b, j, 1);
                    s += w[j] * (double)xb[j];
                    a += fabs(w[j] * (double)xb[j]);
                    v += w[j] * w[j] * sxb[g] * sxb[g] / 12.0;
                }
                e0 += s0 * c->hsx[b * (size_t)G + (size_t)g];
                e1 += s1 * c->hsx[b * (size_t)G + (size_t)g];
            }
            c->ref_int[0][b * (size_t)c->nr + (size_t)i] = e0;
            c->ref_int[1][b * (size_t)c->nr + (size_t)i] = e1;
            c->ref_f[b * (size_t)c->nr + (size_t)i] = s;
            c->qbound[b * (size_t)c->nr + (size_t)i] = 6.0 * sqrt(v) + 2e-5 * a + 1e-30;
        }
    }
    free(sxb);
}

static void case_free(gcase *c) {
    tc_free(g_tc, c->base, c->wb);
    tc_free(g_tc, (void *)c->tm.data, tc_tiled_bytes(c->n, c->k));
    tc_free(g_tc, c->abuf, tc_act_bytes(c->M, c->k));
    tc_free(g_tc, c->dy, c->yn * 4);
    free_mat(&c->t);
    free(c->x);
    free(c->hq);
    free(c->hsx);
    free(c->ref_int[0]);
    free(c->ref_int[1]);
    free(c->ref_f);
    free(c->qbound);
}

/* y (host, yn floats) after one GEMM with the padding preset to 7; 1 when launched */
static int run_gemm(gcase *c, int tiled, int mode, float *y) {
    for (size_t i = 0; i < c->yn; i++) y[i] = 7.0f;
    CHECK(tc_upload(g_tc, c->dy, y, c->yn * 4) == 0);
    int ok = tc_gemm_tc(g_tc, tiled ? &c->tm : &c->fm, &c->act, c->dy, c->ys, mode);
    CHECK_EQ_INT(tc_sync(g_tc), 0);
    CHECK(tc_download(g_tc, y, c->dy, c->yn * 4) == 0);
    return ok;
}

/* checks (1), (2), (5) of one output; what names the run in messages */
static void check_out(const gcase *c, int mode, const float *y, const char *what) {
    const double *ri = c->ref_int[mode == TC_GEMM_INT8];
    double md = 0, mr = 0, fd = 0, fr = 0, qr = 0;
    for (size_t b = 0; b < c->M; b++)
        for (int64_t i = 0; i < c->nr; i++) {
            const size_t o = b * (size_t)c->nr + (size_t)i;
            const double v = y[b * c->ys + (size_t)c->rows[i]];
            double d = fabs(v - ri[o]);
            if (!(d <= md)) md = isnan(d) ? INFINITY : d;
            if (fabs(ri[o]) > mr) mr = fabs(ri[o]);
            d = fabs(v - c->ref_f[o]);
            if (!(d <= fd)) fd = isnan(d) ? INFINITY : d;
            if (fabs(c->ref_f[o]) > fr) fr = fabs(c->ref_f[o]);
            d /= c->qbound[o];
            if (!(d <= qr)) qr = isnan(d) ? INFINITY : d;
        }
    CHECK_MSG(md <= 1e-5 * mr, "%s: %g of %g vs its integers", what, md, mr);
    if (mode == TC_GEMM_EXACT) CHECK_MSG(qr <= 1.0, "%s: error %.3g x its rounding bound", what, qr);
    else {
        /* int8: no float bound in the outlier's block (its step is 2.4); token 1 skipped */
        double d8 = 0, r8 = 0;
        for (size_t b = 0; b < c->M; b++)
            for (int64_t i = 0; i < c->nr && b != 1; i++) {
                const size_t o = b * (size_t)c->nr + (size_t)i;
                const double d = fabs(y[b * c->ys + (size_t)c->rows[i]] - c->ref_f[o]);
                if (!(d <= d8)) d8 = isnan(d) ? INFINITY : d;
                if (fabs(c->ref_f[o]) > r8) r8 = fabs(c->ref_f[o]);
            }
        CHECK_MSG(c->n < 16 || d8 <= 3e-2 * r8, "%s: int8 rel err %g", what, r8 > 0 ? d8 / r8 : d8);
    }
    int untouched = 1;
    for (size_t b = 0; b <= c->M; b++)
        for (size_t p = b < c->M ? (size_t)c->n : 0; p < c->ys; p++) untouched &= y[b * c->ys + p] == 7.0f;
    CHECK_MSG(untouched, "%s: wrote outside its n x M outputs", what);
}

/* max |a - b| over the n x M outputs, relative to max |b| */
static double rel_diff(const gcase *c, const float *a, const float *b) {
    double md = 0, mr = 0;
    for (size_t t = 0; t < c->M; t++)
        for (int64_t r = 0; r < c->n; r++) {
            const size_t o = t * c->ys + (size_t)r;
            const double d = fabs((double)a[o] - (double)b[o]);
            if (!(d <= md)) md = isnan(d) ? INFINITY : d;
            if (fabs((double)b[o]) > mr) mr = fabs((double)b[o]);
        }
    return mr > 0 ? md / mr : md;
}

static size_t n_differ(const gcase *c, const float *a, const float *b) {
    size_t nd = 0;
    for (size_t i = 0; i < c->yn; i++) nd += memcmp(&a[i], &b[i], 4) != 0;
    return nd;
}

/* The split rule, forced splits and the path before split-K on every layout and mode:
 * each against the oracles, each split result within fp32 order of the unsplit one,
 * tiled equal to file when their plans agree. */
TEST(gemm_split_vs_f64) {
    NEED_GPU();
    /* n, k, file offset; M list index range */
    static const int64_t shapes[][3] = {
        {1000, 5120, 2}, {129, 17408, 0}, {5120, 5120, 0}, {37, 2304, 2},
        {300, 256, 0},   {17408, 512, 2}, {1, 768, 0},
    };
    static const size_t Ms[] = {9, 15, 16, 17, 31, 64, 100, 300, 513};
    const int splits_cfg[] = {1, 0, 3}; /* before split-K, the rule, 3 forced */
    int nsplit_runs = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
            const int64_t n = shapes[s][0], k = shapes[s][1];
            const size_t M = Ms[mi];
            /* the float64 oracle's time: big shapes at a few batches */
            if (n >= 5120 && !(M == 9 || M == 16 || M == 17 || M == 64 || M == 513)) continue;
            if (k >= 17408 && !(M == 9 || M == 16 || M == 17 || M == 64)) continue;
            gcase c;
            case_make(&c, n, k, (size_t)shapes[s][2], M, 1);
            float *y = malloc(c.yn * 4), *y1[2][2], *yf = malloc(c.yn * 4);
            for (int a = 0; a < 2; a++)
                for (int b = 0; b < 2; b++) y1[a][b] = malloc(c.yn * 4);
            for (size_t sc = 0; sc < sizeof splits_cfg / sizeof splits_cfg[0]; sc++) {
                tc_gemm_set_splits(g_tc, splits_cfg[sc]);
                for (int mode = TC_GEMM_EXACT; mode <= TC_GEMM_INT8; mode++) {
                    int plan[2][2];
                    for (int tiled = 0; tiled < 2; tiled++) {
                        char what[160];
                        CHECK_EQ_INT(tc_gemm_plan(g_tc, tiled ? &c.tm : &c.fm, &c.act, mode, &plan[tiled][0],
                                                  &plan[tiled][1]),
                                     1);
                        snprintf(what, sizeof what, "n %lld k %lld M %zu %s %s splits %d (cfg %d, tok %d)",
                                 (long long)n, (long long)k, M, tiled ? "tiled" : "file",
                                 mode == TC_GEMM_EXACT ? "exact" : "int8", plan[tiled][1], splits_cfg[sc],
                                 plan[tiled][0]);
                        CHECK_EQ_INT(run_gemm(&c, tiled, mode, y), 1);
                        check_out(&c, mode, y, what);
                        if (splits_cfg[sc] == 1) {
                            CHECK_MSG(plan[tiled][1] == 1 && plan[tiled][0] >= 32, "%s: not the unsplit path", what);
                            memcpy(y1[mode - 1][tiled], y, c.yn * 4);
                        } else {
                            const double d = rel_diff(&c, y, y1[mode - 1][tiled]);
                            /* fp32 order of the group sums only (each is held to float64 by check_out) */
                            CHECK_MSG(d <= 5e-5, "%s: split differs from unsplit by %g", what, d);
                            nsplit_runs += plan[tiled][1] > 1;
                        }
                        if (splits_cfg[sc] == 3) { /* 3, unless K has fewer stages or the partials do not fit */
                            const int tok = plan[tiled][0];
                            const int64_t tiles = (int64_t)((M + (size_t)tok - 1) / (size_t)tok) * ((n + 127) / 128);
                            int64_t smax = (int64_t)(TC_GEMM_WS_FLOATS / ((size_t)tiles * (size_t)tok * 128));
                            if (smax > k / 256) smax = k / 256;
                            if (tiles > TC_GEMM_MAX_TILES) smax = 1;
                            const int want = smax < 2 ? 1 : smax < 3 ? 2 : 3;
                            CHECK_MSG(plan[tiled][1] == want, "%s: 3 forced, want %d", what, want);
                        }
                        if (!tiled) memcpy(yf, y, c.yn * 4);
                        else if (plan[0][0] == plan[1][0] && plan[0][1] == plan[1][1]) {
                            size_t nd = n_differ(&c, y, yf);
                            CHECK_MSG(nd == 0, "%s: tiled differs from file in %zu values", what, nd);
                        }
                    }
                }
            }
            tc_gemm_set_splits(g_tc, 0);
            for (int a = 0; a < 2; a++)
                for (int b = 0; b < 2; b++) free(y1[a][b]);
            free(y);
            free(yf);
            case_free(&c);
        }
    /* the split path ran (on the H200 the rule splits every batched-decode shape here) */
    CHECK_MSG(nsplit_runs > 0, "no launch was split");
    fprintf(stderr, "  gemm split runs: %d\n", nsplit_runs);
}

/* The rule's plan at the batched-decode shapes of the 27B model: 16-token tiles at
 * M <= 16, and a grid of at least the SM count (the test's device), at 16 .. 64. */
TEST(gemm_plan_fills_sms) {
    NEED_GPU();
    static const int64_t shapes[][2] = {{5120, 5120}, {17408, 5120}, {5120, 17408}, {1024, 5120}, {6144, 5120}};
    static const size_t Ms[] = {9, 16, 32, 64};
    tc_gemm_set_splits(g_tc, 0);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
            const int64_t n = shapes[s][0], k = shapes[s][1];
            const size_t M = Ms[mi];
            /* the plan reads only the shape: a matrix and an activation that are never launched */
            tc_mat m = {.kind = TC_TERN128T, .data = (const uint8_t *)(uintptr_t)4096, .n = n, .k = k,
                        .row_bytes = (size_t)(k / 256) * 1088};
            tc_act act = {.q = (int8_t *)(uintptr_t)4096, .sx = (float *)(uintptr_t)4096, .k = k, .batch = M};
            int tok = 0, sp = 0;
            CHECK_EQ_INT(tc_gemm_plan(g_tc, &m, &act, TC_GEMM_EXACT, &tok, &sp), 1);
            const int64_t tiles = (int64_t)((M + (size_t)tok - 1) / (size_t)tok) * ((n + 127) / 128);
            const int64_t ctas = tiles * sp;
            CHECK_MSG(M > 16 || tok == 16, "n %lld k %lld M %zu: tok %d", (long long)n, (long long)k, M, tok);
            /* at most 48 output tiles: short of any sm_90 GPU's SMs, so split */
            CHECK_MSG(sp >= 1 && sp <= TC_GEMM_MAX_SPLITS && (tiles > 48 || sp > 1),
                      "n %lld k %lld M %zu: %lld CTAs (tok %d, %d splits)", (long long)n, (long long)k, M,
                      (long long)ctas, tok, sp);
            fprintf(stderr, "  plan n %5lld k %5lld M %2zu: tok %3d splits %2d CTAs %4lld\n", (long long)n,
                    (long long)k, M, tok, sp, (long long)ctas);
        }
}

typedef struct gcall {
    gcase *c;
    int tiled, mode;
} gcall;
static void gcall_fn(void *p) {
    gcall *g = p;
    tc_gemm_tc(g_tc, g->tiled ? &g->c->tm : &g->c->fm, &g->c->act, g->c->dy, g->c->ys, g->mode);
}

/* Determinism: the split GEMM twice, and replayed from a CUDA graph, gives the same
 * bits (the last-arriving CTA of a tile sums the partials in a fixed order); the
 * counters are left zero (a third run after the graph still equal). */
TEST(gemm_split_deterministic) {
    NEED_GPU();
    static const int64_t shapes[][2] = {{5120, 5120}, {1000, 17408}, {17408, 512}};
    static const size_t Ms[] = {9, 16, 64, 513};
    CHECK_EQ_INT(tc_gemm_reserve(g_tc), 0);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
            gcase c;
            const size_t M = Ms[mi];
            case_make(&c, shapes[s][0], shapes[s][1], 0, M, 0); /* compared with itself: no oracle */
            float *a = malloc(c.yn * 4), *b = malloc(c.yn * 4);
            for (int run = 0; run < 4; run++) {
                const int tiled = run & 1, mode = TC_GEMM_EXACT + (run >> 1);
                int tok, sp;
                CHECK_EQ_INT(tc_gemm_plan(g_tc, tiled ? &c.tm : &c.fm, &c.act, mode, &tok, &sp), 1);
                run_gemm(&c, tiled, mode, a);
                run_gemm(&c, tiled, mode, b);
                size_t nd = n_differ(&c, a, b);
                CHECK_MSG(nd == 0, "n %lld M %zu run %d (%d splits): second run differs in %zu values",
                          (long long)c.n, c.M, run, sp, nd);
                for (size_t i = 0; i < c.yn; i++) b[i] = 7.0f;
                CHECK(tc_upload(g_tc, c.dy, b, c.yn * 4) == 0);
                gcall gc = {&c, tiled, mode};
                CHECK(tc_bench_us(g_tc, gcall_fn, &gc, 1, 1, 1) > 0);
                CHECK_EQ_INT(tc_sync(g_tc), 0);
                CHECK(tc_download(g_tc, b, c.dy, c.yn * 4) == 0);
                nd = n_differ(&c, a, b);
                CHECK_MSG(nd == 0, "n %lld M %zu run %d (%d splits): the graph's output differs in %zu values",
                          (long long)c.n, c.M, run, sp, nd);
                run_gemm(&c, tiled, mode, b);
                nd = n_differ(&c, a, b);
                CHECK_MSG(nd == 0, "n %lld M %zu run %d: a run after the graph differs in %zu values", (long long)c.n,
                          c.M, run, nd);
            }
            free(a);
            free(b);
            case_free(&c);
        }
}

/* K not a multiple of 256 (128, 384): the GEMM refuses; the chooser's call at batch 16
 * and 33 serves it with the GEMV (within the exact bound). Through the chooser at
 * 5120 x 5120 batch 16 the GEMM runs split, the same bits as calling it directly. */
TEST(gemm_refusals_and_chooser) {
    NEED_GPU();
    static const int64_t ks[] = {128, 384};
    static const size_t Bs[] = {16, 33};
    for (size_t i = 0; i < 2; i++)
        for (size_t bi = 0; bi < 2; bi++) {
            const int64_t n = 300, k = ks[i];
            const size_t B = Bs[bi];
            tmat t = make_mat(TERN_DT_PQ2_0, n, k, 0);
            uint8_t *base;
            size_t wb;
            tc_mat fm = up_mat(&t, 0, &base, &wb), tm;
            CHECK_EQ_INT(tc_repack_tiled(g_tc, &fm, &tm), 0);
            float *x = rand_x(B * (size_t)k, 1.0f);
            float *dx = tc_malloc(g_tc, B * (size_t)k * 4);
            CHECK(dx && tc_upload(g_tc, dx, x, B * (size_t)k * 4) == 0);
            void *abuf = tc_malloc(g_tc, tc_act_bytes(B, k));
            tc_act act = tc_act_view(abuf, B, k);
            tc_quantize(g_tc, dx, (size_t)k, &act);
            size_t ys = (size_t)n;
            float *dy = tc_malloc(g_tc, B * ys * 4), *y = malloc(B * ys * 4);
            CHECK_EQ_INT(tc_gemm_tc(g_tc, &tm, &act, dy, ys, TC_GEMM_EXACT), 0);
            CHECK_EQ_INT(tc_gemm_tc(g_tc, &fm, &act, dy, ys, TC_GEMM_INT8), 0);
            for (int tiled = 0; tiled < 2; tiled++) {
                tc_matmul_multi(g_tc, 1, tiled ? &tm : &fm, dx, B, (size_t)k, &dy, &ys);
                CHECK_EQ_INT(tc_sync(g_tc), 0);
                CHECK(tc_download(g_tc, y, dy, B * ys * 4) == 0);
                const double q = qerr_ratio_vs_f64(&t, x, B, (size_t)k, y, ys);
                CHECK_MSG(q <= 1.0, "k %lld batch %zu %s: error %.3g x its rounding bound", (long long)k, B,
                          tiled ? "tiled" : "file", q);
            }
            free(x); free(y);
            tc_free(g_tc, dx, B * (size_t)k * 4);
            tc_free(g_tc, dy, B * ys * 4);
            tc_free(g_tc, abuf, tc_act_bytes(B, k));
            tc_free(g_tc, base, wb);
            tc_free(g_tc, (void *)tm.data, tc_tiled_bytes(n, k));
            free_mat(&t);
        }
    /* the chooser's mma.sync GEMM (forced: the default is wgmma, wg_chooser) at batch 16 is
     * the split GEMM */
    tc_mm_set_caps(g_tc, TC_GEMM_EXACT, TC_MM_GEMM_MMA);
    gcase c;
    case_make(&c, 5120, 5120, 0, 16, 0);
    int tok, sp;
    CHECK_EQ_INT(tc_gemm_plan(g_tc, &c.tm, &c.act, TC_GEMM_EXACT, &tok, &sp), 1);
    CHECK_MSG(tok == 16 && sp > 1, "5120 x 5120 batch 16: tok %d splits %d", tok, sp);
    float *a = malloc(c.yn * 4), *b = malloc(c.yn * 4);
    run_gemm(&c, 1, TC_GEMM_EXACT, a);
    for (size_t i = 0; i < c.yn; i++) b[i] = 7.0f;
    CHECK(tc_upload(g_tc, c.dy, b, c.yn * 4) == 0);
    tc_matmul_multi_q(g_tc, 1, &c.tm, &c.act, NULL, 0, &c.dy, &c.ys);
    CHECK_EQ_INT(tc_sync(g_tc), 0);
    CHECK(tc_download(g_tc, b, c.dy, c.yn * 4) == 0);
    size_t nd = n_differ(&c, a, b);
    CHECK_MSG(nd == 0, "the chooser's GEMM differs from the direct call in %zu values", nd);
    tc_mm_set_caps(g_tc, TC_GEMM_EXACT, TC_MM_NONE);
    free(a); free(b);
    case_free(&c);
}

/* ------------------------------------------------------------ the wgmma GEMM (tc_gemm_wg.cu)
 * The same oracles on the Hopper kernel (tiled matrices, exact mode): float64 of its
 * integers and of the float input, the padding untouched, tc_gemm_tc's exact mode equal
 * bit for bit when both take the same plan (tokens per CTA and K splits: the same integers
 * per group, the same fp32 order), else within fp32 order; determinism and a graph replay;
 * the chooser under the wgmma force. The split rule's default is stream-K (plan splits < 0:
 * every CTA an even share of all the tiles' stages, the split tiles summed in CTA order),
 * forced splits the classic split-K. A launch it refuses on an H100/H200 is a failure
 * (the sm_90a image or the tensor-map entry point missing). */

/* y after one wgmma GEMM with the padding preset to 7; 1 when launched */
static int run_wg(gcase *c, float *y) {
    for (size_t i = 0; i < c->yn; i++) y[i] = 7.0f;
    CHECK(tc_upload(g_tc, c->dy, y, c->yn * 4) == 0);
    int ok = tc_gemm_wg(g_tc, &c->tm, &c->act, c->dy, c->ys);
    CHECK_EQ_INT(tc_sync(g_tc), 0);
    CHECK(tc_download(g_tc, y, c->dy, c->yn * 4) == 0);
    return ok;
}

/* the first few outputs that differ from the float64 of the integers (a layout slip shows
 * as a pattern here) */
static void wg_dump(const gcase *c, const float *y, const char *what) {
    int shown = 0;
    for (size_t b = 0; b < c->M && shown < 12; b++)
        for (int64_t i = 0; i < c->nr && shown < 12; i++) {
            const double ref = c->ref_int[0][b * (size_t)c->nr + (size_t)i];
            const double v = y[b * c->ys + (size_t)c->rows[i]];
            if (!(fabs(v - ref) <= 1e-4 * (fabs(ref) + 1e-3))) {
                fprintf(stderr, "  %s: token %zu row %lld: %.6g, want %.6g\n", what, b, (long long)c->rows[i], v, ref);
                shown++;
            }
        }
    if (shown) {
        fprintf(stderr, "  %s: token 0, rows 0..7:", what);
        for (int64_t i = 0; i < 8 && i < c->nr; i++) fprintf(stderr, " %.4g/%.4g", y[(size_t)c->rows[i]], c->ref_int[0][(size_t)i]);
        fprintf(stderr, " (got/want)\n");
    }
}

/* The smallest case first: one CTA (128 rows, 16 tokens, one stage), then one more stage,
 * rows and tokens off the tile; a slip in the fragment or descriptor layout shows here. */
TEST(wg_small) {
    NEED_GPU();
    static const int64_t shapes[][2] = {{128, 256}, {128, 512}, {200, 1024}, {64, 256}};
    static const size_t Ms[] = {16, 9, 32, 64, 70};
    tc_gemm_set_splits(g_tc, 1);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
            gcase c;
            case_make(&c, shapes[s][0], shapes[s][1], 0, Ms[mi], 1);
            float *y = malloc(c.yn * 4);
            char what[96];
            snprintf(what, sizeof what, "wg n %lld k %lld M %zu unsplit", (long long)c.n, (long long)c.k, c.M);
            CHECK_MSG(tc_gemm_wg_supported(g_tc, &c.tm, &c.act), "%s: refused", what);
            if (run_wg(&c, y)) {
                wg_dump(&c, y, what);
                check_out(&c, TC_GEMM_EXACT, y, what);
            }
            free(y);
            case_free(&c);
        }
    tc_gemm_set_splits(g_tc, 0);
}

TEST(wg_vs_f64_and_mma) {
    NEED_GPU();
    static const int64_t shapes[][2] = {
        {1000, 5120}, {129, 17408}, {5120, 5120}, {37, 2304}, {300, 256},
        {17408, 512}, {1, 768},     {200, 1280},  {130, 3328},
    };
    static const size_t Ms[] = {9, 15, 16, 17, 31, 33, 64, 65, 100, 300};
    const int splits_cfg[] = {0, 1, 3};
    int same_plan = 0, nsplit = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
            const int64_t n = shapes[s][0], k = shapes[s][1];
            const size_t M = Ms[mi];
            if (n >= 5120 && !(M == 9 || M == 16 || M == 17 || M == 64 || M == 300)) continue;
            if (k >= 17408 && !(M == 9 || M == 16 || M == 33 || M == 64)) continue;
            gcase c;
            case_make(&c, n, k, 0, M, 1);
            float *y = malloc(c.yn * 4), *ym = malloc(c.yn * 4);
            for (size_t sc = 0; sc < sizeof splits_cfg / sizeof splits_cfg[0]; sc++) {
                tc_gemm_set_splits(g_tc, splits_cfg[sc]);
                int tok = 0, sp = 0, mtok = 0, msp = 0;
                char what[160];
                snprintf(what, sizeof what, "wg n %lld k %lld M %zu splits cfg %d", (long long)n, (long long)k, M,
                         splits_cfg[sc]);
                CHECK_MSG(tc_gemm_wg_plan(g_tc, &c.tm, &c.act, &tok, &sp) == 1, "%s: refused", what);
                CHECK_EQ_INT(tc_gemm_plan(g_tc, &c.tm, &c.act, TC_GEMM_EXACT, &mtok, &msp), 1);
                snprintf(what, sizeof what, "wg n %lld k %lld M %zu splits cfg %d (tok %d, %d splits)", (long long)n,
                         (long long)k, M, splits_cfg[sc], tok, sp);
                CHECK_MSG(run_wg(&c, y) == 1, "%s: not launched", what);
                wg_dump(&c, y, what);
                check_out(&c, TC_GEMM_EXACT, y, what);
                nsplit += sp > 1 || sp < 0; /* < 0: stream-K over -sp CTAs */
                CHECK_EQ_INT(run_gemm(&c, 1, TC_GEMM_EXACT, ym), 1);
                if (tok == mtok && sp == msp) {
                    const size_t nd = n_differ(&c, y, ym);
                    CHECK_MSG(nd == 0, "%s: differs from tc_gemm_tc (same plan) in %zu values", what, nd);
                    same_plan++;
                } else {
                    const double d = rel_diff(&c, y, ym);
                    CHECK_MSG(d <= 5e-5, "%s: differs from tc_gemm_tc (tok %d, %d splits) by %g", what, mtok, msp, d);
                }
            }
            tc_gemm_set_splits(g_tc, 0);
            free(y);
            free(ym);
            case_free(&c);
        }
    CHECK_MSG(same_plan > 0 && nsplit > 0, "same-plan comparisons %d, split launches %d", same_plan, nsplit);
    fprintf(stderr, "  wg: %d runs bit-equal to tc_gemm_tc, %d split launches\n", same_plan, nsplit);
}

/* The loads (lab.h tc_gemm_wg_ex: 3D TMA, 2D boxes, bulk copies) give the same bits, one
 * CTA per cluster (the default stream-K) and in 2-CTA clusters (TC_WG_PAIRS: the
 * activation multicast to row-tile pairs; odd row tiles leave a pair's second CTA without
 * a tile; the same bits among its load modes; against the default, other stream-K shares,
 * so fp32 order only). */
TEST(wg_load_modes) {
    NEED_GPU();
    static const int64_t shapes[][2] = {{1000, 5120}, {129, 2304}, {5120, 512}, {37, 256}, {300, 2304}};
    static const size_t Ms[] = {9, 16, 40, 100};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
            gcase c;
            case_make(&c, shapes[s][0], shapes[s][1], 0, Ms[mi], 1);
            float *a = malloc(c.yn * 4), *b = malloc(c.yn * 4), *a1 = malloc(c.yn * 4);
            if (s == 0 && mi == 0)
                fprintf(stderr, "  wg default loads: lmode %d\n", tc_gemm_wg_lmode(g_tc, &c.tm, &c.act, 0));
            int tok = 0, sp = 0;
            CHECK_EQ_INT(tc_gemm_wg_plan_ex(g_tc, &c.tm, &c.act, 0, &tok, &sp), 1);
            const int pairs = tc_gemm_wg_plan_ex(g_tc, &c.tm, &c.act, TC_WG_PAIRS, &tok, &sp);
            CHECK_MSG(pairs == 2 || sp > 0, "wg n %lld M %zu: stream-K (%d splits) without clusters", (long long)c.n,
                      c.M, sp);
            for (int lm = 0; lm < 8; lm++) { /* TC_WG_ACT_2D | TC_WG_W_BULK | TC_WG_PAIRS */
                char what[96];
                snprintf(what, sizeof what, "wg n %lld k %lld M %zu lmode %d (takes %d)", (long long)c.n, (long long)c.k,
                         c.M, lm, tc_gemm_wg_lmode(g_tc, &c.tm, &c.act, lm));
                for (size_t i = 0; i < c.yn; i++) b[i] = 7.0f;
                CHECK(tc_upload(g_tc, c.dy, b, c.yn * 4) == 0);
                CHECK_MSG(tc_gemm_wg_ex(g_tc, &c.tm, &c.act, c.dy, c.ys, lm) == 1, "%s: refused", what);
                CHECK_EQ_INT(tc_sync(g_tc), 0);
                CHECK(tc_download(g_tc, b, c.dy, c.yn * 4) == 0);
                wg_dump(&c, b, what);
                check_out(&c, TC_GEMM_EXACT, b, what);
                if (lm == 0) memcpy(a, b, c.yn * 4);
                else if (lm == TC_WG_PAIRS) {
                    memcpy(a1, b, c.yn * 4);
                    const double d = rel_diff(&c, a, b);
                    CHECK_MSG(d <= 5e-5, "%s: differs from the default's by %g", what, d);
                } else {
                    const size_t nd = n_differ(&c, lm & TC_WG_PAIRS ? a1 : a, b);
                    CHECK_MSG(nd == 0, "%s: differs from lmode %d in %zu values", what, lm & TC_WG_PAIRS, nd);
                }
            }
            free(a);
            free(a1);
            free(b);
            case_free(&c);
        }
}

static void wgcall_fn(void *p) {
    gcase *c = p;
    tc_gemm_wg(g_tc, &c->tm, &c->act, c->dy, c->ys);
}

/* Twice, from a CUDA graph, and once more after it: the same bits. */
TEST(wg_deterministic) {
    NEED_GPU();
    static const int64_t shapes[][2] = {{5120, 5120}, {1000, 17408}};
    static const size_t Ms[] = {9, 16, 64, 300};
    CHECK_EQ_INT(tc_gemm_reserve(g_tc), 0);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
            gcase c;
            case_make(&c, shapes[s][0], shapes[s][1], 0, Ms[mi], 0);
            float *a = malloc(c.yn * 4), *b = malloc(c.yn * 4);
            run_wg(&c, a);
            run_wg(&c, b);
            size_t nd = n_differ(&c, a, b);
            CHECK_MSG(nd == 0, "wg n %lld M %zu: second run differs in %zu values", (long long)c.n, c.M, nd);
            for (size_t i = 0; i < c.yn; i++) b[i] = 7.0f;
            CHECK(tc_upload(g_tc, c.dy, b, c.yn * 4) == 0);
            CHECK(tc_bench_us(g_tc, wgcall_fn, &c, 1, 1, 1) > 0);
            CHECK_EQ_INT(tc_sync(g_tc), 0);
            CHECK(tc_download(g_tc, b, c.dy, c.yn * 4) == 0);
            nd = n_differ(&c, a, b);
            CHECK_MSG(nd == 0, "wg n %lld M %zu: the graph's output differs in %zu values", (long long)c.n, c.M, nd);
            run_wg(&c, b);
            nd = n_differ(&c, a, b);
            CHECK_MSG(nd == 0, "wg n %lld M %zu: a run after the graph differs in %zu values", (long long)c.n, c.M, nd);
            free(a);
            free(b);
            case_free(&c);
        }
}

/* The chooser (default, and the wgmma force: the same) runs it at batch > 8 (the same bits
 * as the direct call), keeps the GEMV at 8, and serves K = 384 (refused by both GEMMs)
 * with the GEMV. */
TEST(wg_chooser) {
    NEED_GPU();
    tc_mm_set_caps(g_tc, TC_GEMM_EXACT, TC_MM_NONE);
    static const size_t Bs[] = {8, 16, 33};
    for (size_t bi = 0; bi < 3; bi++) {
        gcase c;
        case_make(&c, 1000, 5120, 0, Bs[bi], 1);
        float *a = malloc(c.yn * 4), *b = malloc(c.yn * 4);
        for (size_t i = 0; i < c.yn; i++) b[i] = 7.0f;
        CHECK(tc_upload(g_tc, c.dy, b, c.yn * 4) == 0);
        tc_matmul_multi_q(g_tc, 1, &c.tm, &c.act, NULL, 0, &c.dy, &c.ys);
        CHECK_EQ_INT(tc_sync(g_tc), 0);
        CHECK(tc_download(g_tc, b, c.dy, c.yn * 4) == 0);
        check_out(&c, TC_GEMM_EXACT, b, Bs[bi] > 8 ? "chooser, wgmma force" : "chooser, wgmma force, batch 8");
        if (Bs[bi] > 8) {
            CHECK_EQ_INT(run_wg(&c, a), 1);
            const size_t nd = n_differ(&c, a, b);
            CHECK_MSG(nd == 0, "batch %zu: the chooser's wgmma GEMM differs from the direct call in %zu values", Bs[bi], nd);
        }
        free(a);
        free(b);
        case_free(&c);
    }
    {
        const int64_t n = 300, k = 384;
        const size_t B = 16;
        tmat t = make_mat(TERN_DT_PQ2_0, n, k, 0);
        uint8_t *base;
        size_t wb;
        tc_mat fm = up_mat(&t, 0, &base, &wb), tm;
        CHECK_EQ_INT(tc_repack_tiled(g_tc, &fm, &tm), 0);
        float *x = rand_x(B * (size_t)k, 1.0f);
        float *dx = tc_malloc(g_tc, B * (size_t)k * 4);
        CHECK(dx && tc_upload(g_tc, dx, x, B * (size_t)k * 4) == 0);
        void *abuf = tc_malloc(g_tc, tc_act_bytes(B, k));
        tc_act act = tc_act_view(abuf, B, k);
        tc_quantize(g_tc, dx, (size_t)k, &act);
        size_t ys = (size_t)n;
        float *dy = tc_malloc(g_tc, B * ys * 4), *y = malloc(B * ys * 4);
        CHECK_EQ_INT(tc_gemm_wg(g_tc, &tm, &act, dy, ys), 0);
        tc_matmul_multi(g_tc, 1, &tm, dx, B, (size_t)k, &dy, &ys);
        CHECK_EQ_INT(tc_sync(g_tc), 0);
        CHECK(tc_download(g_tc, y, dy, B * ys * 4) == 0);
        const double q = qerr_ratio_vs_f64(&t, x, B, (size_t)k, y, ys);
        CHECK_MSG(q <= 1.0, "k 384 under the wgmma force: error %.3g x its rounding bound", q);
        free(x); free(y);
        tc_free(g_tc, dx, B * (size_t)k * 4);
        tc_free(g_tc, dy, B * ys * 4);
        tc_free(g_tc, abuf, tc_act_bytes(B, k));
        tc_free(g_tc, base, wb);
        tc_free(g_tc, (void *)tm.data, tc_tiled_bytes(n, k));
        free_mat(&t);
    }
    tc_mm_set_caps(g_tc, TC_GEMM_EXACT, TC_MM_NONE);
}

/* Batch-invariant products (tc_mm_set_invariant): through the chooser, each row of a call
 * of M rows is the same bits as the same row in a call of 64 (and of 1), at M = 1..64, on
 * the wgmma GEMM and on the mma.sync GEMM (the same bits as each other: the fixed splits
 * are the only part of the launch a row depends on); within the rounding bound of float64.
 * Without it the rule's splits move with M (the default is not checked for equality). */
TEST(gemm_invariant_rows) {
    NEED_GPU();
    static const int64_t shapes[][2] = {{1000, 5120}, {5120, 1024}, {300, 17408}};
    static const size_t Ms[] = {1, 2, 3, 5, 8, 9, 16, 17, 31, 33, 48, 64};
    for (size_t si = 0; si < 3; si++) {
        gcase c;
        case_make(&c, shapes[si][0], shapes[si][1], 0, 64, 1);
        float *full = malloc(c.yn * 4), *y = malloc(c.yn * 4), *ymma = malloc(c.yn * 4);
        for (int pass = 0; pass < 2; pass++) {
            tc_mm_set_caps(g_tc, TC_GEMM_EXACT, pass ? TC_MM_GEMM_MMA : TC_MM_NONE);
            tc_mm_set_invariant(g_tc, 1);
            float *dst = pass ? ymma : full;
            for (size_t i = 0; i < c.yn; i++) dst[i] = 7.0f;
            CHECK(tc_upload(g_tc, c.dy, dst, c.yn * 4) == 0);
            tc_matmul_multi_q(g_tc, 1, &c.tm, &c.act, NULL, 0, &c.dy, &c.ys);
            CHECK_EQ_INT(tc_sync(g_tc), 0);
            CHECK(tc_download(g_tc, dst, c.dy, c.yn * 4) == 0);
            check_out(&c, TC_GEMM_EXACT, dst, pass ? "invariant, mma, M 64" : "invariant, wgmma, M 64");
            /* each M against the M = 64 result */
            for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
                const size_t M = Ms[mi];
                tc_act sub = c.act;
                sub.batch = M;
                for (size_t i = 0; i < c.yn; i++) y[i] = 7.0f;
                CHECK(tc_upload(g_tc, c.dy, y, c.yn * 4) == 0);
                tc_matmul_multi_q(g_tc, 1, &c.tm, &sub, NULL, 0, &c.dy, &c.ys);
                CHECK_EQ_INT(tc_sync(g_tc), 0);
                CHECK(tc_download(g_tc, y, c.dy, c.yn * 4) == 0);
                size_t nd = 0;
                for (size_t i = 0; i < M * c.ys; i++) nd += memcmp(&y[i], &dst[i], 4) != 0;
                CHECK_MSG(nd == 0, "n %lld k %lld M %zu (%s): %zu values differ from the same rows at M 64",
                          (long long)c.n, (long long)c.k, M, pass ? "mma" : "wgmma", nd);
            }
        }
        size_t nd = 0;
        for (size_t i = 0; i < 64 * c.ys; i++) nd += memcmp(&ymma[i], &full[i], 4) != 0;
        CHECK_MSG(nd == 0, "n %lld k %lld: mma.sync and wgmma differ in %zu values under the fixed splits",
                  (long long)c.n, (long long)c.k, nd);
        free(full);
        free(y);
        free(ymma);
        case_free(&c);
    }
    tc_mm_set_invariant(g_tc, 0);
    tc_mm_set_caps(g_tc, TC_GEMM_EXACT, TC_MM_NONE);
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
    RUN(gemm_split_vs_f64);
    RUN(gemm_plan_fills_sms);
    RUN(gemm_split_deterministic);
    RUN(gemm_refusals_and_chooser);
    RUN(wg_small);
    RUN(wg_load_modes);
    RUN(wg_vs_f64_and_mma);
    RUN(wg_deterministic);
    RUN(wg_chooser);
    RUN(gemm_invariant_rows);
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
