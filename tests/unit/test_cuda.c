/*
 * test_cuda.c - the CUDA back-end (backend_cuda.c, src/kernels/cuda) against
 * the CPU back-end and float64 oracles, on random data of awkward sizes, and
 * the model parity of the fixtures run with device "cuda" (same criteria as
 * test_model.c: max|logit - ref| < 0.02, argmax equal where the reference
 * top-2 margin > 0.02, identical greedy continuations).
 * Without a CUDA build or device every test prints "SKIP: no CUDA device".
 */
#include "check.h"
#include "model_check.h"
#include "kern_check.h"
#include "backends/backends.h" /* tm_backend_cuda_device */
#include "model/session.h" /* tm_session_fill_random, the session's buffers */
#include "lab.h"           /* tern_device_read_ceiling_gbps */
#include "formats/codecs.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>

static tm_backend *G; /* CUDA (NULL: none) */
static tm_backend *H; /* CPU */

#define NEED_GPU() do { if (!G) SKIP("no CUDA device"); } while (0)

/* ------------------------------------------------------------ helpers */

static float *rand_f(size_t n, float scale) {
    float *x = malloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++) x[i] = check_rand_normal() * scale;
    return x;
}

static void *dev_dup(const void *h, size_t bytes) {
    void *d = tm_be_alloc(G, bytes);
    CHECK(d != NULL);
    if (d) CHECK(tm_be_upload(G, d, h, bytes) == TERN_OK);
    return d;
}

static float *host_of(const void *d, size_t n) {
    float *h = malloc(n * sizeof(float) + 4);
    CHECK(tm_be_download(G, h, d, n * sizeof(float)) == TERN_OK);
    return h;
}

/* max|a-b| / max|b| (NaN -> inf) */
static double rel_diff(const float *a, const float *b, size_t n) {
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= md)) md = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > mr) mr = fabs(b[i]);
    }
    return mr > 0 ? md / mr : md;
}

static void gfree(void *p, size_t bytes) { tm_be_free(G, p, bytes); }

/* ------------------------------------------------------------ products */

static tern_qmat dev_mat(const tmat *t, size_t off, void **base, size_t *bytes) {
    size_t n = t->q.row_bytes * (size_t)t->q.n;
    *bytes = n + off;
    uint8_t *d = tm_be_alloc(G, *bytes);
    CHECK(d && tm_be_upload(G, d + off, t->buf, n) == TERN_OK);
    *base = d;
    tern_qmat q = t->q;
    q.data = d + off;
    return q;
}

TEST(matmul_types_batches_offsets) {
    NEED_GPU();
    const struct { tern_dtype t; int64_t k; } cases[] = {
        {TERN_DT_PQ2_0, 384}, {TERN_DT_Q2_0, 1152}, {TERN_DT_Q2_0_G64, 192},
        {TERN_DT_Q1_0, 256},  {TERN_DT_F32, 100},   {TERN_DT_F16, 130}, {TERN_DT_BF16, 96}};
    /* 130 and 517: prefill chunks (the dense few-row kernel's grid of 8-row groups) */
    const size_t batches[] = {1, 2, 3, 5, 8, 33, 130, 517};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t n = 37 + (int64_t)c * 11;
        tmat t = make_mat(cases[c].t, n, cases[c].k, 0);
        for (size_t off = 0; off <= 2; off += 2) {
            if (off && cases[c].t == TERN_DT_F32) continue; /* F32 rows are 4-byte aligned */
            void *base;
            size_t wb;
            tern_qmat q = dev_mat(&t, off, &base, &wb);
            for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
                size_t B = batches[bi], K = (size_t)t.q.k, ys = (size_t)n + 3;
                float *x = rand_f(B * K, 1.0f);
                if (bi == 2) x[K / 2] = 300.0f; /* an outlier stays local to its block */
                float *dx = dev_dup(x, B * K * 4);
                float *dy = tm_be_alloc(G, B * ys * 4);
                G->ops->matmul(G, &q, dx, B, K, dy, ys);
                CHECK(tm_be_sync(G) == TERN_OK);
                float *y = host_of(dy, B * ys);
                double e = rel_err_vs_f64(&t, x, B, (size_t)t.q.k, y, ys);
                CHECK_MSG(e < 1e-3, "%s n %lld k %lld batch %zu off %zu: rel err %g",
                          tern_dtype_name(cases[c].t), (long long)n, (long long)K, B, off, e);
                /* the padding between n and ys is never written */
                for (size_t b = 0; b < B; b++) CHECK(y[b * ys + (size_t)n] == 0.0f);
                free(x); free(y);
                gfree(dx, B * K * 4);
                gfree(dy, B * ys * 4);
            }
            gfree(base, wb);
        }
        free(t.buf); free(t.deq);
    }
}

TEST(matmul_multi_equals_separate) {
    NEED_GPU();
    tmat a = make_mat(TERN_DT_PQ2_0, 70, 512, 0), b = make_mat(TERN_DT_BF16, 9, 512, 0),
         c = make_mat(TERN_DT_PQ2_0, 33, 512, 0);
    void *ba, *bb, *bc;
    size_t na, nb, nc;
    tern_qmat qa = dev_mat(&a, 0, &ba, &na), qb = dev_mat(&b, 0, &bb, &nb),
              qc = dev_mat(&c, 2, &bc, &nc);
    for (size_t B = 1; B <= 6; B += 5) {
        float *x = rand_f(B * 512, 1.0f), *dx = dev_dup(x, B * 512 * 4);
        float *y[3], *y2[3];
        size_t ys[3] = {70, 9, 40};
        for (int i = 0; i < 3; i++) {
            y[i] = tm_be_alloc(G, B * ys[i] * 4);
            y2[i] = tm_be_alloc(G, B * ys[i] * 4);
        }
        const tern_qmat *w[3] = {&qa, &qb, &qc};
        G->ops->matmul_multi(G, 3, w, dx, B, 512, y, ys);
        for (int i = 0; i < 3; i++) G->ops->matmul(G, w[i], dx, B, 512, y2[i], ys[i]);
        CHECK(tm_be_sync(G) == TERN_OK);
        for (int i = 0; i < 3; i++) {
            float *h1 = host_of(y[i], B * ys[i]), *h2 = host_of(y2[i], B * ys[i]);
            CHECK(memcmp(h1, h2, B * ys[i] * 4) == 0);
            free(h1); free(h2);
            gfree(y[i], B * ys[i] * 4);
            gfree(y2[i], B * ys[i] * 4);
        }
        free(x);
        gfree(dx, B * 512 * 4);
    }
    gfree(ba, na); gfree(bb, nb); gfree(bc, nc);
    free(a.buf); free(a.deq); free(b.buf); free(b.deq); free(c.buf); free(c.deq);
}

/* ------------------------------------------------------------ row ops */

static float *signs_of(size_t n) {
    float *s = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) s[i] = (check_rand_u64() >> 20) & 1 ? 1.0f : -1.0f;
    return s;
}

TEST(hadamard_norm_swiglu_vs_cpu) {
    NEED_GPU();
    /* one-row decode sites (5120 with 1024- and 128-blocks), blocks under a warp, n not
     * a multiple of 32 (no in-warp stages) */
    const size_t cases[][3] = {{3, 3072, 1024}, {2, 192, 64}, {5, 1024, 1024}, {1, 5120, 1024},
                               {1, 5120, 128}, {2, 96, 8}, {3, 40, 8}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t rows = cases[c][0], n = cases[c][1], blk = cases[c][2], N = rows * n;
        float *s = signs_of(n), *ds = dev_dup(s, n * 4);
        for (int inv = 0; inv < 2; inv++) {
            float *x = rand_f(N, 1.0f), *dx = dev_dup(x, N * 4);
            if (inv) tern_hadamard_inv(x, rows, n, blk, s);
            else H->ops->hadamard(H, x, rows, n, blk, s);
            if (inv) {
                /* the embedding's inverse goes through embed; test the launcher via an
                 * F32 "embedding" of the same rows */
                tern_qmat e = {.type = TERN_DT_F32, .n = (int64_t)rows, .k = (int64_t)n,
                               .row_bytes = n * 4};
                e.data = (const uint8_t *)dx;
                int32_t ids[8];
                for (size_t r = 0; r < rows; r++) ids[r] = (int32_t)r;
                float *dout = tm_be_alloc(G, N * 4);
                CHECK(G->ops->embed(G, &e, ids, rows, dout, blk, ds) == TERN_OK);
                CHECK(tm_be_sync(G) == TERN_OK);
                float *g = host_of(dout, N);
                double d = rel_diff(g, x, N);
                CHECK_MSG(d < 1e-5, "inverse rows %zu n %zu block %zu: %g", rows, n, blk, d);
                free(g);
                gfree(dout, N * 4);
            } else {
                G->ops->hadamard(G, dx, rows, n, blk, ds);
                CHECK(tm_be_sync(G) == TERN_OK);
                float *g = host_of(dx, N);
                double d = rel_diff(g, x, N);
                CHECK_MSG(d < 1e-5, "forward rows %zu n %zu block %zu: %g", rows, n, blk, d);
                free(g);
            }
            free(x);
            gfree(dx, N * 4);
        }
        /* add + rmsnorm + hadamard, and swiglu + hadamard */
        float *r = rand_f(N, 2.0f), *d = rand_f(N, 0.5f), *gain = rand_f(n, 1.0f);
        float *dr = dev_dup(r, N * 4), *dd = dev_dup(d, N * 4), *dg = dev_dup(gain, n * 4);
        float *dn = tm_be_alloc(G, N * 4), *drot = tm_be_alloc(G, N * 4);
        float *hn = malloc(N * 4), *hrot = malloc(N * 4);
        H->ops->add_rmsnorm_hadamard(H, r, d, gain, 1e-6f, hn, hrot, rows, n, blk, s);
        G->ops->add_rmsnorm_hadamard(G, dr, dd, dg, 1e-6f, dn, drot, rows, n, blk, ds);
        CHECK(tm_be_sync(G) == TERN_OK);
        float *gr = host_of(dr, N), *gn = host_of(dn, N), *grot = host_of(drot, N);
        CHECK(rel_diff(gr, r, N) < 1e-6);
        CHECK_MSG(rel_diff(gn, hn, N) < 1e-5, "normed %g", rel_diff(gn, hn, N));
        CHECK_MSG(rel_diff(grot, hrot, N) < 1e-5, "rotated %g", rel_diff(grot, hrot, N));
        float *out = malloc(N * 4), *dout = tm_be_alloc(G, N * 4);
        H->ops->swiglu_hadamard(H, r, d, out, rows, n, blk, s);
        G->ops->swiglu_hadamard(G, dr, dd, dout, rows, n, blk, ds);
        CHECK(tm_be_sync(G) == TERN_OK);
        float *gout = host_of(dout, N);
        CHECK_MSG(rel_diff(gout, out, N) < 1e-5, "swiglu %g", rel_diff(gout, out, N));
        free(gr); free(gn); free(grot); free(gout); free(out); free(hn); free(hrot);
        free(r); free(d); free(gain); free(s);
        gfree(dr, N * 4); gfree(dd, N * 4); gfree(dg, n * 4); gfree(dn, N * 4);
        gfree(drot, N * 4); gfree(dout, N * 4); gfree(ds, n * 4);
    }
}

TEST(embed_ternary_vs_cpu_and_range) {
    NEED_GPU();
    tmat t = make_mat(TERN_DT_PQ2_0, 50, 256, 0);
    void *base;
    size_t wb;
    tern_qmat q = dev_mat(&t, 2, &base, &wb);
    int32_t ids[5] = {3, 49, 0, 3, 17};
    float *h = malloc(5 * 256 * 4), *dout = tm_be_alloc(G, 5 * 256 * 4);
    CHECK(H->ops->embed(H, &t.q, ids, 5, h, 256, NULL) == TERN_OK);
    CHECK(G->ops->embed(G, &q, ids, 5, dout, 256, NULL) == TERN_OK);
    CHECK(tm_be_sync(G) == TERN_OK);
    float *g = host_of(dout, 5 * 256);
    CHECK(memcmp(g, h, 5 * 256 * 4) == 0);
    int32_t bad = 50;
    CHECK_EQ_INT(G->ops->embed(G, &q, &bad, 1, dout, 256, NULL), TERN_ERR_RANGE);
    free(g); free(h);
    gfree(dout, 5 * 256 * 4);
    gfree(base, wb);
    free(t.buf); free(t.deq);
}

/* head rmsnorm on the decode shapes (one row, hd 256 in registers) and past 256 / odd hd */
TEST(head_norm_sizes_vs_cpu) {
    NEED_GPU();
    const int shapes[][3] = {{1, 24, 256}, {1, 4, 256}, {3, 5, 80}, {2, 3, 320}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        size_t rows = (size_t)shapes[c][0];
        int nh = shapes[c][1], hd = shapes[c][2];
        size_t stride = (size_t)nh * hd + 7, N = rows * stride;
        float *x = rand_f(N, 1.5f), *gain = rand_f((size_t)hd, 1.0f);
        float *dx = dev_dup(x, N * 4), *dg = dev_dup(gain, (size_t)hd * 4);
        H->ops->head_rmsnorm(H, x, rows, stride, nh, hd, gain, 1e-6f);
        G->ops->head_rmsnorm(G, dx, rows, stride, nh, hd, dg, 1e-6f);
        CHECK(tm_be_sync(G) == TERN_OK);
        float *g = host_of(dx, N);
        CHECK_MSG(rel_diff(g, x, N) < 1e-5, "head norm rows %zu nh %d hd %d: %g", rows, nh, hd,
                  rel_diff(g, x, N));
        free(g); free(x); free(gain);
        gfree(dx, N * 4); gfree(dg, (size_t)hd * 4);
    }
}

TEST(head_norm_rope_movers_vs_cpu) {
    NEED_GPU();
    const size_t rows = 5;
    const int nh = 6, hd = 64, rot = 32;
    size_t stride = (size_t)nh * hd + 10, N = rows * stride;
    float *x = rand_f(N, 1.5f), *gain = rand_f((size_t)hd, 1.0f);
    float *dx = dev_dup(x, N * 4), *dg = dev_dup(gain, (size_t)hd * 4);
    H->ops->head_rmsnorm(H, x, rows, stride, nh, hd, gain, 1e-6f);
    G->ops->head_rmsnorm(G, dx, rows, stride, nh, hd, dg, 1e-6f);
    H->ops->rope(H, x, rows, stride, nh, hd, rot, 1000, 1e7f);
    G->ops->rope(G, dx, rows, stride, nh, hd, rot, 1000, 1e7f);
    CHECK(tm_be_sync(G) == TERN_OK);
    float *g = host_of(dx, N);
    CHECK_MSG(rel_diff(g, x, N) < 1e-5, "head norm + rope %g", rel_diff(g, x, N));
    /* movers */
    size_t W = (size_t)nh * 2 * hd, M = rows * W;
    float *src = rand_f(M, 1.0f), *dsrc = dev_dup(src, M * 4);
    float *a = malloc(M / 2 * 4), *b = malloc(M / 2 * 4);
    float *da = tm_be_alloc(G, M / 2 * 4), *db = tm_be_alloc(G, M / 2 * 4);
    H->ops->split_heads(H, src, rows, nh, hd, a, b);
    G->ops->split_heads(G, dsrc, rows, nh, hd, da, db);
    H->ops->mul_sigmoid(H, a, b, rows, (size_t)nh * hd);
    G->ops->mul_sigmoid(G, da, db, rows, (size_t)nh * hd);
    float *p = malloc(M / 2 * 4), *dp = tm_be_alloc(G, M / 2 * 4);
    H->ops->permute_tiled_grouped(H, a, p, rows, 2, 6, hd);
    G->ops->permute_tiled_grouped(G, da, dp, rows, 2, 6, hd);
    float *cr = calloc(rows * 100, 4), *dcr = tm_be_alloc(G, rows * 100 * 4);
    H->ops->copy_rows(H, cr + 3, 100, src + 1, W, rows, 50);
    G->ops->copy_rows(G, dcr + 3, 100, dsrc + 1, W, rows, 50);
    CHECK(tm_be_sync(G) == TERN_OK);
    float *gp = host_of(dp, M / 2), *gb = host_of(db, M / 2), *gc = host_of(dcr, rows * 100);
    CHECK(memcmp(gb, b, M / 2 * 4) == 0);
    CHECK_MSG(rel_diff(gp, p, M / 2) < 1e-6, "split/sigmoid/permute %g", rel_diff(gp, p, M / 2));
    CHECK(memcmp(gc, cr, rows * 100 * 4) == 0);
    free(g); free(x); free(gain); free(src); free(a); free(b); free(p); free(cr);
    free(gp); free(gb); free(gc);
    gfree(dx, N * 4); gfree(dg, (size_t)hd * 4); gfree(dsrc, M * 4); gfree(da, M / 2 * 4);
    gfree(db, M / 2 * 4); gfree(dp, M / 2 * 4); gfree(dcr, rows * 100 * 4);
}

/* NEOX RoPE at the end of the trained context (positions 262,139..262,143; the 27B's
 * partial rotary, 64 of 256 dims, theta 1e7) on both back-ends vs float64: an angle
 * computed in float (an ulp of 262,143 rad is 0.016) would miss by ~1e-2. */
TEST(rope_long_positions_vs_f64) {
    NEED_GPU();
    const size_t rows = 5;
    const int nh = 3, hd = 256, rot = 64, pos0 = 262139;
    const double theta = 1e7;
    size_t stride = (size_t)nh * hd, N = rows * stride;
    float *x = rand_f(N, 1.0f), *dx = dev_dup(x, N * 4), *hx = malloc(N * 4);
    double *want = malloc(N * 8);
    memcpy(hx, x, N * 4);
    for (size_t i = 0; i < N; i++) want[i] = x[i];
    for (size_t r = 0; r < rows; r++)
        for (int h = 0; h < nh; h++)
            for (int i = 0; i < rot / 2; i++) {
                double ang = (double)(pos0 + (int)r) * pow(theta, -2.0 * i / rot);
                size_t o = r * stride + (size_t)h * hd;
                double x0 = x[o + i], x1 = x[o + i + rot / 2];
                want[o + i] = x0 * cos(ang) - x1 * sin(ang);
                want[o + i + rot / 2] = x1 * cos(ang) + x0 * sin(ang);
            }
    H->ops->rope(H, hx, rows, stride, nh, hd, rot, pos0, (float)theta);
    G->ops->rope(G, dx, rows, stride, nh, hd, rot, pos0, (float)theta);
    CHECK(tm_be_sync(G) == TERN_OK);
    float *g = host_of(dx, N);
    for (int b = 0; b < 2; b++) {
        const float *y = b ? hx : g;
        double md = 0, mr = 0;
        for (size_t i = 0; i < N; i++) {
            double d = fabs(y[i] - want[i]);
            if (!(d <= md)) md = d;
            if (fabs(want[i]) > mr) mr = fabs(want[i]);
        }
        CHECK_MSG(md / mr < 1e-5, "%s rope at %d: max rel %g", b ? "cpu" : "cuda", pos0, md / mr);
    }
    free(x); free(hx); free(want); free(g);
    gfree(dx, N * 4);
}

/* prefill attention on both back-ends, the caches f32, f16, bf16, q8_0 or mixed (both
 * read the same stored values: the CPU's tern_kv_store wrote them) */
TEST(attention_gqa_vs_cpu) {
    NEED_GPU();
    /* nh, nkv, hd, pos0, k type, v type (0 f32, 1 f16, 2 bf16, 3 q8_0) */
    const int cfg[][6] = {{6, 2, 64, 7, 0, 0}, {4, 1, 256, 0, 0, 0}, {3, 3, 48, 40, 0, 0},
                          {6, 2, 64, 7, 1, 1}, {4, 1, 256, 0, 2, 2}, {3, 3, 48, 40, 1, 2},
                          {6, 2, 64, 7, 2, 1}, {3, 3, 48, 40, 1, 1},
                          {6, 2, 64, 7, 3, 3}, {4, 1, 256, 0, 3, 3}, {8, 4, 96, 61, 3, 1},
                          {6, 2, 64, 30, 0, 3}, {4, 2, 128, 3, 3, 2}};
    for (int c = 0; c < (int)(sizeof cfg / sizeof cfg[0]); c++) {
        int nh = cfg[c][0], nkv = cfg[c][1], hd = cfg[c][2], pos0 = cfg[c][3], rows = 5;
        tern_kv_type kt = (tern_kv_type)cfg[c][4], vt = (tern_kv_type)cfg[c][5];
        int L = pos0 + rows;
        size_t qs = (size_t)nh * hd + 8, kvw = (size_t)nkv * hd;
        size_t kr = tern_kv_row_bytes(kt, kvw), vr = tern_kv_row_bytes(vt, kvw);
        float *q = rand_f((size_t)rows * qs, 1.0f), *kf = rand_f((size_t)L * kvw, 1.0f),
              *vf = rand_f((size_t)L * kvw, 1.0f);
        uint8_t *k = malloc((size_t)L * kr), *v = malloc((size_t)L * vr);
        tern_kv_store(kt, k, kr, kf, kvw, (size_t)L, kvw);
        tern_kv_store(vt, v, vr, vf, kvw, (size_t)L, kvw);
        float *o = malloc((size_t)rows * nh * hd * 4), *sc = malloc((size_t)nh * L * 4);
        tm_attn_args a = {.q = q, .q_stride = qs, .kcache = k, .vcache = v, .k_type = kt,
                          .v_type = vt, .out = o, .rows = rows,
                          .pos0 = pos0, .n_head = nh, .n_head_kv = nkv, .head_dim = hd,
                          .scale = 1.0f / sqrtf((float)hd), .scratch = sc};
        H->ops->attention(H, &a);
        float *dq = dev_dup(q, (size_t)rows * qs * 4);
        void *dk = dev_dup(k, (size_t)L * kr), *dv = dev_dup(v, (size_t)L * vr);
        float *dout = tm_be_alloc(G, (size_t)rows * nh * hd * 4);
        tm_attn_args b = a;
        b.q = dq; b.kcache = dk; b.vcache = dv; b.out = dout; b.scratch = NULL;
        G->ops->attention(G, &b);
        CHECK(tm_be_sync(G) == TERN_OK);
        float *g = host_of(dout, (size_t)rows * nh * hd);
        double d = rel_diff(g, o, (size_t)rows * nh * hd);
        /* f16 or q8_0 caches (K and V of one type) at head dims 64/128/256 take the tensor-core
         * kernel, whose q and softmax weights are f16 (q8_0 dequantised into f16 tiles;
         * test_cuda_attn: ~1e-3 of the largest value vs float64) */
        const bool tcore = kt == vt && (kt == TERN_KV_F16 || kt == TERN_KV_Q8_0) && (hd == 64 || hd == 128 || hd == 256);
        CHECK_MSG(d < (tcore ? 4e-3 : 1e-5), "attention nh %d nkv %d hd %d pos0 %d kv %d/%d: %g", nh, nkv, hd, pos0,
                  (int)kt, (int)vt, d);
        free(q); free(kf); free(vf); free(k); free(v); free(o); free(sc); free(g);
        gfree(dq, (size_t)rows * qs * 4); gfree(dk, (size_t)L * kr);
        gfree(dv, (size_t)L * vr); gfree(dout, (size_t)rows * nh * hd * 4);
    }
}

/* Two chunks through the GDN block (state carried over) on both back-ends. */
TEST(gdn_two_chunks_vs_cpu) {
    NEED_GPU();
    const int cfg[][6] = {{2, 4, 32, 48, 4, 1}, {2, 6, 128, 128, 4, 0}, {1, 3, 64, 40, 3, 1}};
    for (int c = 0; c < 3; c++) {
        int nk = cfg[c][0], nv = cfg[c][1], dk = cfg[c][2], dv = cfg[c][3], K = cfg[c][4];
        bool tiled = cfg[c][5];
        int C = 2 * nk * dk + nv * dv;
        size_t cs_n = (size_t)(K - 1) * C, st_n = (size_t)nv * dk * dv,
               pe_n = (size_t)nv * (1 + dk + dv);
        float *conv_w = rand_f((size_t)C * K, 0.5f), *ssm_a = rand_f((size_t)nv, 1.0f),
              *dt = rand_f((size_t)nv, 0.5f), *norm = rand_f((size_t)dv, 1.0f);
        for (int i = 0; i < nv; i++) ssm_a[i] = -fabsf(ssm_a[i]) - 0.1f;
        float *cs = calloc(cs_n, 4), *st = calloc(st_n + pe_n, 4); /* CPU: S then pending */
        float *g_cw = dev_dup(conv_w, (size_t)C * K * 4), *g_a = dev_dup(ssm_a, (size_t)nv * 4),
              *g_dt = dev_dup(dt, (size_t)nv * 4), *g_n = dev_dup(norm, (size_t)dv * 4);
        float *g_cs = tm_be_alloc(G, cs_n * 4), *g_st = tm_be_alloc(G, st_n * 4);
        const int chunk_rows[2] = {5, 1};
        for (int ch = 0; ch < 2; ch++) {
            int T = chunk_rows[ch];
            float *qkv = rand_f((size_t)T * C, 1.0f), *z = rand_f((size_t)T * nv * dv, 1.0f),
                  *aa = rand_f((size_t)T * nv, 1.0f), *bb = rand_f((size_t)T * nv, 1.0f);
            float *out = malloc((size_t)T * nv * dv * 4), *work = malloc((size_t)T * C * 4);
            tm_gdn_args h = {.qkv = qkv, .z = z, .a = aa, .b = bb, .conv_w = conv_w,
                             .ssm_a = ssm_a, .dt_bias = dt, .norm = norm, .conv_state = cs,
                             .state = st, .out = out, .work = work, .rows = T,
                             .n_k = nk, .n_v = nv, .dk = dk, .dv = dv, .conv_k = K,
                             .v_tiled = tiled, .eps = 1e-6f};
            H->ops->gdn(H, &h);
            float *g_qkv = dev_dup(qkv, (size_t)T * C * 4), *g_z = dev_dup(z, (size_t)T * nv * dv * 4),
                  *g_aa = dev_dup(aa, (size_t)T * nv * 4), *g_bb = dev_dup(bb, (size_t)T * nv * 4),
                  *g_out = tm_be_alloc(G, (size_t)T * nv * dv * 4), *g_work = tm_be_alloc(G, (size_t)T * C * 4);
            tm_gdn_args g = h;
            g.qkv = g_qkv; g.z = g_z; g.a = g_aa; g.b = g_bb; g.conv_w = g_cw; g.ssm_a = g_a;
            g.dt_bias = g_dt; g.norm = g_n; g.conv_state = g_cs; g.state = g_st;
            g.out = g_out; g.work = g_work;
            G->ops->gdn(G, &g);
            CHECK(tm_be_sync(G) == TERN_OK);
            float *go = host_of(g_out, (size_t)T * nv * dv), *gc = host_of(g_cs, cs_n);
            double d = rel_diff(go, out, (size_t)T * nv * dv);
            CHECK_MSG(d < 1e-4, "gdn cfg %d chunk %d: out %g", c, ch, d);
            CHECK(memcmp(gc, cs, cs_n * 4) == 0);
            free(go); free(gc); free(qkv); free(z); free(aa); free(bb); free(out); free(work);
            gfree(g_qkv, (size_t)T * C * 4); gfree(g_z, (size_t)T * nv * dv * 4);
            gfree(g_aa, (size_t)T * nv * 4); gfree(g_bb, (size_t)T * nv * 4);
            gfree(g_out, (size_t)T * nv * dv * 4); gfree(g_work, (size_t)T * C * 4);
        }
        free(conv_w); free(ssm_a); free(dt); free(norm); free(cs); free(st);
        gfree(g_cw, (size_t)C * K * 4); gfree(g_a, (size_t)nv * 4); gfree(g_dt, (size_t)nv * 4);
        gfree(g_n, (size_t)dv * 4); gfree(g_cs, cs_n * 4); gfree(g_st, st_n * 4);
    }
}

/* ------------------------------------------------------------ model parity */

static void parity(const char *fixture, const char *file, const char *model_key, int chunk,
                   tern_cache_type ct) {
    char rel[256];
    snprintf(rel, sizeof rel, "%s/reference.json", fixture);
    const char *rp = fixture_path(rel);
    char *txt = rp ? check_slurp(rp, NULL) : NULL;
    snprintf(rel, sizeof rel, "%s/%s", fixture, file);
    const char *mp_path = fixture_path(rel);
    FILE *probe = mp_path ? fopen(mp_path, "rb") : NULL;
    if (!txt || !probe) {
        free(txt);
        if (probe) fclose(probe);
        SKIP("fixture %s/%s missing", fixture, file);
    }
    fclose(probe);
    cJSON *ref = cJSON_Parse(txt);
    free(txt);
    tern_model_params mp;
    tern_model_params_default(&mp);
    mp.device = "cuda";
    mp.n_threads = 1;
    tern_model *m = NULL;
    tern_status st = tern_model_load(mp_path, &mp, &m);
    CHECK_MSG(st == TERN_OK, "load %s: %s", mp_path, tern_last_error());
    if (st) { cJSON_Delete(ref); return; }
    const tern_model_info *info = tern_model_get_info(m);
    CHECK_STR(info->device, "cuda");
    CHECK(info->device_bytes >= info->weight_bytes / 2);
    const cJSON *seqs = cJSON_GetObjectItem(ref, "sequences");
    const cJSON *logits = model_key
        ? cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "models"), model_key), "logits")
        : cJSON_GetObjectItem(ref, "logits");
    int V = info->n_vocab, n_seq = cJSON_GetArraySize(seqs);
    for (int si = 0; si < n_seq; si++) {
        const cJSON *seq = cJSON_GetArrayItem(seqs, si), *ent = cJSON_GetArrayItem(logits, si);
        size_t T;
        int32_t *ids = json_ids(cJSON_GetObjectItem(seq, "ids"), &T);
        snprintf(rel, sizeof rel, "%s/%s", fixture, cJSON_GetObjectItem(ent, "logits_file")->valuestring);
        size_t nb = 0;
        float *rl = check_slurp(fixture_path(rel), &nb);
        CHECK(rl && nb == T * (size_t)V * 4);
        tern_session_params sp;
        tern_session_params_default(&sp);
        sp.n_ctx = (int)T + 24;
        sp.n_chunk = chunk;
        sp.cache_type_k = sp.cache_type_v = ct;
        tern_session *s = NULL;
        CHECK_MSG(tern_session_new(m, &sp, &s) == TERN_OK, "%s", tern_last_error());
        if (!s) { free(rl); free(ids); break; }
        CHECK(tern_session_cache_type(s, false) == ct && tern_session_cache_type(s, true) == ct);
        float *got = malloc(T * (size_t)V * sizeof(float));
        st = tern_session_eval(s, ids, T, got);
        CHECK_MSG(st == TERN_OK, "%s", tern_last_error());
        double maxd = 0;
        int bad = 0, checked = 0;
        for (size_t t = 0; t < T && rl && !st; t++) {
            const float *g = got + t * V, *r = rl + t * V;
            for (int i = 0; i < V; i++) {
                double d = fabs((double)g[i] - r[i]);
                if (!(d <= maxd)) maxd = isnan(d) ? INFINITY : d;
            }
            if (check_top2_margin(r, V) > 0.02f) {
                checked++;
                if (check_argmax(g, V) != check_argmax(r, V)) bad++;
            }
        }
        CHECK_MSG(maxd < 0.02, "%s %s seq %d chunk %d cache %s: max|diff| %g", fixture, file, si,
                  chunk, tern_cache_type_name(ct), maxd);
        CHECK_MSG(bad == 0, "%s %s seq %d: %d/%d argmax differ", fixture, file, si, bad, checked);
        const cJSON *cont = cJSON_GetObjectItem(ent, "greedy_continuation");
        size_t nc;
        int32_t *want = json_ids(cont, &nc);
        int same = check_greedy_steps(s, want, nc, V);
        CHECK_MSG(same == (int)nc, "%s %s seq %d: continuation diverges at step %d", fixture, file,
                  si, same);
        fprintf(stderr, "  cuda %s/%s seq %d chunk %d cache %s: T %zu, max|diff| %.2e, argmax ok on %d "
                        "rows, continuation %d/%zu\n", fixture, file, si, chunk, tern_cache_type_name(ct),
                T, maxd, checked, same, nc);
        /* a reset session gives the same logits again */
        if (si == 0) {
            tern_session_reset(s);
            float *again = malloc(T * (size_t)V * sizeof(float));
            CHECK(tern_session_eval(s, ids, T, again) == TERN_OK);
            CHECK(rel_diff(again, got, T * (size_t)V) < 1e-5);
            free(again);
        }
        free(want); free(got); free(rl); free(ids);
        tern_session_free(s);
    }
    tern_model_free(m);
    cJSON_Delete(ref);
}

/* f32 caches; the f16 ones (the default) below within the same bound, as on the CPU */
TEST(parity_qwen35_pq2_0) { NEED_GPU(); parity("qwen35-tiny", "model-pq2_0.gguf", "A", 64, TERN_CACHE_F32); }
TEST(parity_qwen35_pq2_0_token_by_token) { NEED_GPU(); parity("qwen35-tiny", "model-pq2_0.gguf", "A", 1, TERN_CACHE_F32); }
TEST(parity_qwen35_nohadamard) { NEED_GPU(); parity("qwen35-tiny", "model-q2_0-nohadamard.gguf", "C", 7, TERN_CACHE_F32); }
TEST(parity_qwen3_q2_0) { NEED_GPU(); parity("qwen3-tiny", "model-q2_0.gguf", NULL, 64, TERN_CACHE_F32); }
TEST(parity_qwen3_q2_0_g64) { NEED_GPU(); parity("qwen3-tiny", "model-q2_0_g64.gguf", NULL, 5, TERN_CACHE_F32); }
/* f16 caches: prefill chunks (tc_kv_store + k_attention) and token by token (the fused
 * prologue + split-K decode); qwen3-tiny is attention in every layer */
TEST(parity_qwen35_f16_cache) { NEED_GPU(); parity("qwen35-tiny", "model-pq2_0.gguf", "A", 64, TERN_CACHE_F16); }
TEST(parity_qwen35_f16_cache_token_by_token) { NEED_GPU(); parity("qwen35-tiny", "model-pq2_0.gguf", "A", 1, TERN_CACHE_F16); }
TEST(parity_qwen3_f16_cache) { NEED_GPU(); parity("qwen3-tiny", "model-q2_0.gguf", NULL, 64, TERN_CACHE_F16); }
TEST(parity_qwen3_f16_cache_token_by_token) { NEED_GPU(); parity("qwen3-tiny", "model-q2_0.gguf", NULL, 1, TERN_CACHE_F16); }

/* A q8_0 cache on the GPU, as test_model's cache_types_vs_f32 checks it on the CPU:
 * against the same back-end's f32 cache on every reference sequence, all-position
 * logits within 0.6, argmax equal where the f32 top-2 margin exceeds 0.25, the
 * 24-token greedy continuation identical except where the f32 path itself was nearly
 * tied (margin < 2 x bound) - the bounds are the CPU's (about twice the largest
 * q8_0-vs-f32 difference measured there, 0.31 on qwen3-tiny; a wrong scale, block or
 * head gives O(1..10)). The f32 GPU run is the parity tests' path above. The same
 * sequences with a q8_0 cache on the CPU back-end are compared too (same bound): both
 * store the same bytes for the same inputs (test_cuda_kernels checks the stores bit
 * for bit), so they differ by the f32 paths' rounding plus the q8_0 roundings that it
 * tips; the figure is printed. chunk 64: tc_kv_store + prefill attention; chunk 1: the
 * fused prologue + split-K decode (and step graphs for the continuation). */
static void q8_vs_f32(const char *fixture, const char *file, int chunk) {
    const double bound = 0.6;
    const float margin = 0.25f;
    char rel[256];
    snprintf(rel, sizeof rel, "%s/reference.json", fixture);
    const char *rp = fixture_path(rel);
    char *txt = rp ? check_slurp(rp, NULL) : NULL;
    snprintf(rel, sizeof rel, "%s/%s", fixture, file);
    const char *mp_path = fixture_path(rel);
    FILE *probe = mp_path ? fopen(mp_path, "rb") : NULL;
    if (!txt || !probe) {
        free(txt);
        if (probe) fclose(probe);
        SKIP("fixture %s/%s missing", fixture, file);
    }
    fclose(probe);
    cJSON *ref = cJSON_Parse(txt);
    free(txt);
    tern_model *m[2] = {NULL, NULL}; /* cuda, cpu */
    for (int d = 0; d < 2; d++) {
        tern_model_params mp;
        tern_model_params_default(&mp);
        mp.device = d ? "cpu" : "cuda";
        mp.n_threads = 2;
        CHECK_MSG(tern_model_load(mp_path, &mp, &m[d]) == TERN_OK, "load %s: %s", mp_path, tern_last_error());
    }
    if (!m[0] || !m[1]) {
        tern_model_free(m[0]);
        tern_model_free(m[1]);
        cJSON_Delete(ref);
        return;
    }
    const int V = tern_model_get_info(m[0])->n_vocab, NC = 24;
    const cJSON *seqs = cJSON_GetObjectItem(ref, "sequences");
    int n_seq = cJSON_GetArraySize(seqs);
    for (int si = 0; si < n_seq; si++) {
        size_t T;
        int32_t *ids = json_ids(cJSON_GetObjectItem(cJSON_GetArrayItem(seqs, si), "ids"), &T);
        /* runs: 0 GPU f32, 1 GPU q8_0, 2 CPU q8_0 */
        float *lg[3], cmargin[24];
        int32_t cont[3][24];
        for (int k = 0; k < 3; k++) {
            tern_session_params sp;
            tern_session_params_default(&sp);
            sp.n_ctx = (int)T + NC;
            sp.n_chunk = chunk;
            sp.cache_type_k = sp.cache_type_v = k ? TERN_CACHE_Q8_0 : TERN_CACHE_F32;
            tern_session *s = NULL;
            lg[k] = calloc(T * (size_t)V, sizeof(float));
            CHECK_MSG(tern_session_new(m[k == 2], &sp, &s) == TERN_OK, "%s", tern_last_error());
            if (!s) continue;
            CHECK(tern_session_cache_type(s, false) == sp.cache_type_k &&
                  tern_session_cache_type(s, true) == sp.cache_type_v);
            CHECK_MSG(tern_session_eval(s, ids, T, lg[k]) == TERN_OK, "%s", tern_last_error());
            for (int i = 0; i < NC; i++) {
                cont[k][i] = (int32_t)check_argmax(tern_session_logits(s), V);
                if (k == 0) cmargin[i] = check_top2_margin(tern_session_logits(s), V);
                if (i + 1 < NC) CHECK(tern_session_eval(s, &cont[k][i], 1, NULL) == TERN_OK);
            }
            tern_session_free(s);
        }
        const char *what[3] = {"", "cuda q8_0 vs cuda f32", "cuda q8_0 vs cpu q8_0"};
        for (int k = 1; k < 3; k++) {
            const float *A = k == 1 ? lg[0] : lg[2]; /* the reference of this comparison */
            double maxd = 0;
            int checked = 0, bad = 0, same = 0;
            for (size_t t = 0; t < T; t++) {
                const float *a = A + t * V, *b = lg[1] + t * V;
                for (int i = 0; i < V; i++) {
                    double d = fabs((double)a[i] - b[i]);
                    if (!(d <= maxd)) maxd = isnan(d) ? INFINITY : d;
                }
                if (check_top2_margin(a, V) > margin) {
                    checked++;
                    if (check_argmax(a, V) != check_argmax(b, V)) bad++;
                }
            }
            const int32_t *c0 = k == 1 ? cont[0] : cont[2];
            while (same < NC && c0[same] == cont[1][same]) same++;
            CHECK_MSG(maxd < bound, "%s %s chunk %d seq %d: %s max|diff| %g (bound %g)", fixture, file, chunk,
                      si, what[k], maxd, bound);
            CHECK_MSG(bad == 0, "%s chunk %d seq %d: %s: %d/%d argmax differ", fixture, chunk, si, what[k], bad,
                      checked);
            if (k == 1) /* a divergence only where the f32 path itself was nearly tied */
                CHECK_MSG(same == NC || cmargin[same] < 2 * bound,
                          "%s chunk %d seq %d: %s: continuation diverges at step %d (f32 margin %.3f)",
                          fixture, chunk, si, what[k], same, same < NC ? cmargin[same] : 0.0f);
            fprintf(stderr, "  %s/%s seq %d chunk %d %s: T %zu, max|diff| %.2e, argmax ok on %d "
                            "margin>%.2f rows, continuation %d/%d\n", fixture, file, si, chunk, what[k], T,
                    maxd, checked, margin, same, NC);
        }
        for (int k = 0; k < 3; k++) free(lg[k]);
        free(ids);
    }
    tern_model_free(m[0]);
    tern_model_free(m[1]);
    cJSON_Delete(ref);
}

TEST(q8_cache_qwen35) { NEED_GPU(); q8_vs_f32("qwen35-tiny", "model-pq2_0.gguf", 64); }
TEST(q8_cache_qwen35_token_by_token) { NEED_GPU(); q8_vs_f32("qwen35-tiny", "model-pq2_0.gguf", 1); }
TEST(q8_cache_qwen3) { NEED_GPU(); q8_vs_f32("qwen3-tiny", "model-q2_0.gguf", 64); }
TEST(q8_cache_qwen3_token_by_token) { NEED_GPU(); q8_vs_f32("qwen3-tiny", "model-q2_0.gguf", 1); }

/* The random depth fill (`bench model --depth-fill random`, tm_session_fill_random) on
 * the GPU: the same seed gives the same bytes as on the CPU back-end in every attention
 * layer's key and value cache (rows 0..D-1 filled, the rest zero) and the same GDN conv
 * states and S; decoding 8 tokens from there (the CPU's greedy choices fed to both)
 * then gives the same logits within the parity bound (0.02; q8_0 0.1: the filled rows
 * are the same bytes, the 8 new rows may round a value to the neighbouring step). */
static void fill_vs_cpu(const char *fixture, const char *file, tern_cache_type ct, double bound) {
    char rel[256];
    snprintf(rel, sizeof rel, "%s/%s", fixture, file);
    const char *p = fixture_path(rel);
    FILE *probe = p ? fopen(p, "rb") : NULL;
    if (!probe) SKIP("fixture %s missing", rel);
    fclose(probe);
    tern_model *m[2] = {NULL, NULL}; /* cuda, cpu */
    tern_session *s[2] = {NULL, NULL};
    const int D = 300, N = 8;
    for (int d = 0; d < 2; d++) {
        tern_model_params mp;
        tern_model_params_default(&mp);
        mp.device = d ? "cpu" : "cuda";
        mp.n_threads = 2;
        CHECK_MSG(tern_model_load(p, &mp, &m[d]) == TERN_OK, "%s", tern_last_error());
        if (!m[d]) break;
        tern_session_params sp;
        tern_session_params_default(&sp);
        sp.n_ctx = D + N + 4;
        sp.cache_type_k = sp.cache_type_v = ct;
        CHECK_MSG(tern_session_new(m[d], &sp, &s[d]) == TERN_OK, "%s", tern_last_error());
        if (!s[d]) break;
        CHECK_MSG(tm_session_fill_random(s[d], D, 11) == TERN_OK, "%s", tern_last_error());
        CHECK_EQ_INT(tern_session_pos(s[d]), D);
    }
    if (s[0] && s[1]) {
        const tm_hparams *hp = &m[1]->hp;
        tm_backend *gb = m[0]->be;
        /* caches: byte-equal, layer by layer (the whole context: the tail is zero on both) */
        for (int c = 0; c < 2; c++) {
            size_t n = (size_t)hp->n_attn_layers * s[1]->n_ctx * (c ? s[1]->v_row : s[1]->k_row);
            if (!n) continue;
            uint8_t *g = malloc(n);
            CHECK(tm_be_download(gb, g, c ? s[0]->vcache : s[0]->kcache, n) == TERN_OK);
            CHECK_MSG(memcmp(g, c ? s[1]->vcache : s[1]->kcache, n) == 0, "%s %s: filled %s caches differ",
                      fixture, tern_cache_type_name(ct), c ? "value" : "key");
            free(g);
        }
        if (hp->n_gdn_layers) {
            const size_t C = 2 * (size_t)hp->ssm_n_k * hp->ssm_dk + (size_t)hp->ssm_n_v * hp->ssm_dv;
            const size_t CS = (size_t)(hp->conv_k - 1) * C, SN = (size_t)hp->ssm_n_v * hp->ssm_dk * hp->ssm_dv;
            const size_t GG = m[0]->be->vt->gdn_state_floats(m[0]->be, &m[0]->hp);
            const size_t GC = m[1]->be->vt->gdn_state_floats(m[1]->be, hp);
            float *g = malloc((CS > GG ? CS : GG) * sizeof(float));
            for (int l = 0; l < hp->n_gdn_layers; l++) {
                CHECK(tm_be_download(gb, g, s[0]->conv_state + (size_t)l * CS, CS * 4) == TERN_OK);
                CHECK_MSG(memcmp(g, s[1]->conv_state + (size_t)l * CS, CS * 4) == 0, "gdn %d conv states differ", l);
                CHECK(tm_be_download(gb, g, s[0]->ssm_state + (size_t)l * GG, GG * 4) == TERN_OK);
                CHECK_MSG(memcmp(g, s[1]->ssm_state + (size_t)l * GC, SN * 4) == 0, "gdn %d states differ", l);
            }
            free(g);
        }
        const int V = hp->n_vocab;
        int32_t tok = 17;
        double worst = 0;
        for (int i = 0; i < N; i++) {
            for (int d = 0; d < 2; d++) CHECK_MSG(tern_session_eval(s[d], &tok, 1, NULL) == TERN_OK, "%s", tern_last_error());
            double e = 0;
            const float *a = tern_session_logits(s[0]), *b = tern_session_logits(s[1]);
            for (int j = 0; j < V; j++) {
                double x = fabs((double)a[j] - b[j]);
                if (!(x <= e)) e = isnan(x) ? INFINITY : x;
            }
            if (!(e <= worst)) worst = e;
            tok = (int32_t)check_argmax(b, V);
        }
        CHECK_MSG(worst < bound, "%s %s: after the fill, cuda vs cpu decode max|diff| %g (bound %g)", fixture,
                  tern_cache_type_name(ct), worst, bound);
        fprintf(stderr, "  %s %s: depth %d filled on both, %d decode steps, cuda vs cpu max|diff| %.2e\n", fixture,
                tern_cache_type_name(ct), D, N, worst);
    }
    for (int d = 0; d < 2; d++) {
        tern_session_free(s[d]);
        tern_model_free(m[d]);
    }
}

TEST(random_fill_qwen35) {
    NEED_GPU();
    fill_vs_cpu("qwen35-tiny", "model-pq2_0.gguf", TERN_CACHE_F16, 0.02);
    fill_vs_cpu("qwen35-tiny", "model-pq2_0.gguf", TERN_CACHE_Q8_0, 0.1);
}
TEST(random_fill_qwen3) {
    NEED_GPU();
    fill_vs_cpu("qwen3-tiny", "model-q2_0.gguf", TERN_CACHE_F16, 0.02);
    fill_vs_cpu("qwen3-tiny", "model-q2_0.gguf", TERN_CACHE_Q8_0, 0.1);
}

/* Decode steps replayed from a step graph (cuda_graphs, the default) give the same logits
 * as op-by-op steps, across a session reset and past the recorded position. */
static void graph_vs_plain(const char *fixture, const char *file) {
    char rel[256];
    snprintf(rel, sizeof rel, "%s/%s", fixture, file);
    const char *p = fixture_path(rel);
    FILE *probe = p ? fopen(p, "rb") : NULL;
    if (!probe) SKIP("fixture %s missing", rel);
    fclose(probe);
    /* the same file twice: model 0 op by op (cuda_graphs false), model 1 with graphs */
    tern_model *m[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        tern_model_params mp;
        tern_model_params_default(&mp);
        mp.device = "cuda";
        mp.cuda_graphs = i == 1;
        CHECK_MSG(tern_model_load(p, &mp, &m[i]) == TERN_OK, "%s", tern_last_error());
    }
    if (!m[0] || !m[1]) {
        tern_model_free(m[0]);
        tern_model_free(m[1]);
        return;
    }
    int V = tern_model_get_info(m[0])->n_vocab;
    tern_session *s[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        CHECK(tern_session_new(m[i], NULL, &s[i]) == TERN_OK);
        int32_t prompt[3] = {1, 7, 11};
        CHECK(tern_session_eval(s[i], prompt, 3, NULL) == TERN_OK);
    }
    float *l0 = malloc((size_t)V * 4);
    int32_t tok = 5;
    for (int step = 0; step < 12; step++) {
        if (step == 6)
            for (int i = 0; i < 2; i++) tern_session_reset(s[i]);
        for (int i = 0; i < 2; i++)
            CHECK_MSG(tern_session_eval(s[i], &tok, 1, NULL) == TERN_OK, "%s", tern_last_error());
        memcpy(l0, tern_session_logits(s[0]), (size_t)V * 4);
        double d = rel_diff(tern_session_logits(s[1]), l0, (size_t)V);
        CHECK_MSG(d < 1e-6, "%s step %d: graph vs plain %g", file, step, d);
        tok = (int32_t)check_argmax(l0, V);
    }
    free(l0);
    tern_session_free(s[0]);
    tern_session_free(s[1]);
    tern_model_free(m[0]);
    tern_model_free(m[1]);
}

TEST(graph_steps_qwen35) { NEED_GPU(); graph_vs_plain("qwen35-tiny", "model-pq2_0.gguf"); }
TEST(graph_steps_qwen3) { NEED_GPU(); graph_vs_plain("qwen3-tiny", "model-q2_0.gguf"); }

/* Session snapshots and copies on the device (session.c moves the states with the
 * back-end's download/upload for a host snapshot, with device-to-device copies for one in
 * device memory (TERN_SNAPSHOT_BACKEND) and for a copy): a restored or copied session
 * continues exactly like the session it came from, also through step graphs (default on). */
static void snapshot_copy_on(const char *fixture, const char *file, tern_snapshot_memory where) {
    char rel[256];
    snprintf(rel, sizeof rel, "%s/%s", fixture, file);
    const char *p = fixture_path(rel);
    FILE *probe = p ? fopen(p, "rb") : NULL;
    if (!probe) SKIP("fixture %s missing", rel);
    fclose(probe);
    tern_model_params mp;
    tern_model_params_default(&mp);
    mp.device = "cuda";
    tern_model *m = NULL;
    CHECK_MSG(tern_model_load(p, &mp, &m) == TERN_OK, "%s", tern_last_error());
    if (!m) return;
    const int V = tern_model_get_info(m)->n_vocab;
    tern_session_params sp;
    tern_session_params_default(&sp);
    sp.n_ctx = 64;
    tern_session *a = NULL, *b = NULL, *c = NULL;
    tern_session_snapshot *s24 = NULL;
    CHECK(tern_session_new(m, &sp, &a) == TERN_OK && tern_session_new(m, &sp, &b) == TERN_OK &&
          tern_session_new(m, &sp, &c) == TERN_OK);
    float *l24 = malloc((size_t)V * 4), *la = malloc((size_t)V * 4);
    if (!a || !b || !c || !l24 || !la) goto done;
    int32_t t[40];
    for (int i = 0; i < 40; i++) t[i] = (int32_t)((i * 7919u + 13u) % (unsigned)V);
    CHECK(tern_session_eval(a, t, 16, NULL) == TERN_OK && tern_session_eval(a, t + 16, 8, NULL) == TERN_OK);
    CHECK(tern_session_eval(b, t, 16, NULL) == TERN_OK && tern_session_eval(b, t + 16, 8, NULL) == TERN_OK);
    const uint64_t free0 = tern_model_memory_free(m);
    CHECK_MSG(tern_session_snapshot_take_in(b, where, &s24) == TERN_OK, "%s", tern_last_error());
    CHECK_MSG(tern_session_copy(c, a) == TERN_OK, "%s", tern_last_error());
    if (!s24) goto done;
    {   /* a device snapshot holds the GDN states in device memory (qwen3 has none) */
        const bool gdn = !strcmp(tern_model_get_info(m)->arch, "qwen35");
        const uint64_t dev = tern_session_snapshot_backend_bytes(s24), all = tern_session_snapshot_bytes(s24);
        CHECK_MSG(where == TERN_SNAPSHOT_BACKEND && gdn ? dev > 0 && dev + (uint64_t)V * 4 <= all : dev == 0,
                  "%s: %llu of %llu bytes on the device", file, (unsigned long long)dev, (unsigned long long)all);
        if (dev) CHECK_MSG(tern_model_memory_free(m) + dev <= free0 + (2u << 20), "%s: free %llu -> %llu", file,
                           (unsigned long long)free0, (unsigned long long)tern_model_memory_free(m));
    }
    memcpy(l24, tern_session_logits(b), (size_t)V * 4);
    /* b wanders off token by token (graphs recorded and replayed), then comes back */
    for (int i = 0; i < 6; i++) CHECK(tern_session_eval(b, t + 30 + i, 1, NULL) == TERN_OK);
    CHECK_MSG(tern_session_snapshot_restore(b, s24) == TERN_OK, "%s", tern_last_error());
    CHECK_EQ_INT(tern_session_pos(b), 24);
    CHECK(!memcmp(tern_session_logits(b), l24, (size_t)V * 4));
    CHECK(!memcmp(tern_session_logits(c), tern_session_logits(a), (size_t)V * 4));
    /* a, b (restored) and c (copied) take the same steps: the same logits */
    for (int i = 24; i < 34; i++) {
        tern_session *ss[3] = {a, b, c};
        for (int k = 0; k < 3; k++) CHECK_MSG(tern_session_eval(ss[k], t + i, 1, NULL) == TERN_OK, "%s", tern_last_error());
        memcpy(la, tern_session_logits(a), (size_t)V * 4);
        double db = rel_diff(tern_session_logits(b), la, (size_t)V), dc = rel_diff(tern_session_logits(c), la, (size_t)V);
        CHECK_MSG(db < 1e-6 && dc < 1e-6, "%s step %d: restored %g, copied %g", file, i, db, dc);
    }
    /* the snapshot's storage taken again from another session (a, at 34): it restores a there */
    CHECK_MSG(tern_session_snapshot_retake(a, s24) == TERN_OK, "%s", tern_last_error());
    CHECK_EQ_INT(tern_session_snapshot_pos(s24), 34);
    memcpy(l24, tern_session_logits(a), (size_t)V * 4);
    for (int i = 34; i < 37; i++) CHECK(tern_session_eval(a, t + i, 1, NULL) == TERN_OK);
    CHECK_MSG(tern_session_snapshot_restore(a, s24) == TERN_OK, "%s", tern_last_error());
    CHECK_EQ_INT(tern_session_pos(a), 34);
    CHECK(!memcmp(tern_session_logits(a), l24, (size_t)V * 4));
    CHECK_EQ_INT(tern_session_snapshot_restore(b, s24), TERN_ERR_INVALID_ARG); /* a's now */
    CHECK_MSG(tern_session_eval(a, t + 34, 1, NULL) == TERN_OK && tern_session_eval(c, t + 34, 1, NULL) == TERN_OK,
              "%s", tern_last_error());
    CHECK_MSG(rel_diff(tern_session_logits(a), tern_session_logits(c), (size_t)V) < 1e-6, "%s: after a retake", file);
done:
    tern_session_snapshot_free(s24);
    free(l24);
    free(la);
    tern_session_free(a);
    tern_session_free(b);
    tern_session_free(c);
    tern_model_free(m);
}

TEST(snapshot_copy_qwen35) { NEED_GPU(); snapshot_copy_on("qwen35-tiny", "model-pq2_0.gguf", TERN_SNAPSHOT_HOST); }
TEST(snapshot_copy_qwen3) { NEED_GPU(); snapshot_copy_on("qwen3-tiny", "model-q2_0.gguf", TERN_SNAPSHOT_HOST); }
TEST(snapshot_device_qwen35) { NEED_GPU(); snapshot_copy_on("qwen35-tiny", "model-pq2_0.gguf", TERN_SNAPSHOT_BACKEND); }
TEST(snapshot_device_qwen3) { NEED_GPU(); snapshot_copy_on("qwen3-tiny", "model-q2_0.gguf", TERN_SNAPSHOT_BACKEND); }

/* Two models, each with its own CUDA context, driven from two threads at once on one
 * GPU: every step's logits equal those of the same model run alone (issue 21: no
 * process-global CUDA state). Model 0 decodes op by op, model 1 with step graphs, so
 * both paths overlap; each thread compares against its own single-threaded run. */
typedef struct two_run {
    const char *path;
    bool graphs;
    int steps;
    float *logits; /* [steps][V] */
    int V;
    tern_status st;
} two_run;

static void *two_run_fn(void *arg) {
    two_run *r = arg;
    tern_model_params mp;
    tern_model_params_default(&mp);
    mp.device = "cuda";
    mp.cuda_graphs = r->graphs;
    tern_model *m = NULL;
    tern_session *s = NULL;
    if ((r->st = tern_model_load(r->path, &mp, &m))) return NULL;
    r->V = tern_model_get_info(m)->n_vocab;
    if (!r->logits) r->logits = malloc((size_t)r->steps * r->V * sizeof(float));
    if ((r->st = tern_session_new(m, NULL, &s))) goto done;
    int32_t prompt[5] = {1, 7, 11, 3, 9}, tok = 5;
    if ((r->st = tern_session_eval(s, prompt, 5, NULL))) goto done;
    for (int i = 0; i < r->steps; i++) {
        if ((r->st = tern_session_eval(s, &tok, 1, NULL))) goto done;
        const float *l = tern_session_logits(s);
        memcpy(r->logits + (size_t)i * r->V, l, (size_t)r->V * sizeof(float));
        tok = (int32_t)((tok * 31 + i) % 97); /* a fixed token sequence, not the argmax */
    }
done:
    tern_session_free(s);
    tern_model_free(m);
    return NULL;
}

static void two_models_two_threads(const char *fixture, const char *file) {
    char rel[256];
    snprintf(rel, sizeof rel, "%s/%s", fixture, file);
    const char *p = fixture_path(rel);
    FILE *probe = p ? fopen(p, "rb") : NULL;
    if (!probe) SKIP("fixture %s missing", rel);
    fclose(probe);
    enum { STEPS = 24 };
    two_run alone[2] = {{.path = p, .graphs = false, .steps = STEPS}, {.path = p, .graphs = true, .steps = STEPS}};
    two_run both[2] = {{.path = p, .graphs = false, .steps = STEPS}, {.path = p, .graphs = true, .steps = STEPS}};
    for (int i = 0; i < 2; i++) {
        two_run_fn(&alone[i]);
        CHECK_MSG(alone[i].st == TERN_OK, "%s alone %d: %s", rel, i, tern_last_error());
    }
    pthread_t th[2];
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&th[i], NULL, two_run_fn, &both[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        CHECK_MSG(both[i].st == TERN_OK, "%s thread %d failed", rel, i);
        if (alone[i].st || both[i].st || !alone[i].logits || !both[i].logits) continue;
        for (int k = 0; k < STEPS; k++) {
            const size_t o = (size_t)k * alone[i].V;
            /* the same kernels in the same order on the same inputs (as graph_vs_plain's
             * bound: a race or a shared buffer would be far outside it) */
            const double d = rel_diff(both[i].logits + o, alone[i].logits + o, (size_t)alone[i].V);
            CHECK_MSG(d < 1e-6, "%s model %d step %d: beside the other model %g", rel, i, k, d);
        }
    }
    for (int i = 0; i < 2; i++) {
        free(alone[i].logits);
        free(both[i].logits);
    }
}

TEST(two_models_two_threads_qwen35) { NEED_GPU(); two_models_two_threads("qwen35-tiny", "model-pq2_0.gguf"); }
TEST(two_models_two_threads_qwen3) { NEED_GPU(); two_models_two_threads("qwen3-tiny", "model-q2_0.gguf"); }

TEST(device_selection_errors) {
    tern_model_params mp;
    tern_model_params_default(&mp);
    mp.device = "tpu";
    tern_model *m = NULL;
    CHECK_EQ_INT(tern_model_load("/nonexistent.gguf", &mp, &m), TERN_ERR_INVALID_ARG);
    if (!G) {
        mp.device = "cuda";
        CHECK_EQ_INT(tern_model_load("/nonexistent.gguf", &mp, &m), TERN_ERR_UNSUPPORTED);
        CHECK(strstr(tern_last_error(), "CUDA") != NULL);
        CHECK(tern_device_read_ceiling_gbps("cuda", 1 << 20, 1) == 0);
    } else {
        /* an index past the devices found: a clear error naming them */
        mp.device = "cuda:64";
        CHECK_EQ_INT(tern_model_load("/nonexistent.gguf", &mp, &m), TERN_ERR_INVALID_ARG);
        CHECK(strstr(tern_last_error(), "cuda:0") != NULL);
        double gbps = tern_device_read_ceiling_gbps("cuda", (size_t)1 << 30, 3);
        fprintf(stderr, "  device read ceiling %.0f GB/s\n", gbps);
        CHECK(gbps > 100);
    }
}

int main(void) {
    check_seed();
    tern_kernels_init();
    tm_backend_params bp = {.n_threads = 2};
    if (tm_backend_create("cpu", &bp, &H) != TERN_OK) return 1;
    if (tm_backend_create("cuda", NULL, &G) == TERN_OK) {
        fprintf(stderr, "CUDA device: %s\n", tm_backend_cuda_device());
    } else {
        G = NULL;
        fprintf(stderr, "SKIP: no CUDA device (%s)\n", tern_last_error());
        tern_clear_error();
    }
    RUN(device_selection_errors);
    RUN(matmul_types_batches_offsets);
    RUN(matmul_multi_equals_separate);
    RUN(hadamard_norm_swiglu_vs_cpu);
    RUN(embed_ternary_vs_cpu_and_range);
    RUN(head_norm_sizes_vs_cpu);
    RUN(head_norm_rope_movers_vs_cpu);
    RUN(rope_long_positions_vs_f64);
    RUN(attention_gqa_vs_cpu);
    RUN(gdn_two_chunks_vs_cpu);
    RUN(parity_qwen35_pq2_0);
    RUN(parity_qwen35_pq2_0_token_by_token);
    RUN(parity_qwen35_nohadamard);
    RUN(parity_qwen3_q2_0);
    RUN(parity_qwen3_q2_0_g64);
    RUN(parity_qwen35_f16_cache);
    RUN(parity_qwen35_f16_cache_token_by_token);
    RUN(parity_qwen3_f16_cache);
    RUN(parity_qwen3_f16_cache_token_by_token);
    RUN(q8_cache_qwen35);
    RUN(q8_cache_qwen35_token_by_token);
    RUN(q8_cache_qwen3);
    RUN(q8_cache_qwen3_token_by_token);
    RUN(two_models_two_threads_qwen35);
    RUN(two_models_two_threads_qwen3);
    RUN(graph_steps_qwen35);
    RUN(graph_steps_qwen3);
    RUN(snapshot_copy_qwen35);
    RUN(snapshot_copy_qwen3);
    RUN(snapshot_device_qwen35);
    RUN(snapshot_device_qwen3);
    RUN(random_fill_qwen35);
    RUN(random_fill_qwen3);
    tm_backend_destroy(G);
    tm_backend_destroy(H);
    return check_summary();
}
