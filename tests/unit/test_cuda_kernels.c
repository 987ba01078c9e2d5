/*
 * test_cuda_kernels.c - the CUDA kernel layer called directly (src/kernels/cuda/cuda.h,
 * no back-end table): the repacked ternary layout (tc_repack) and its GEMV vs
 * float64 of the dequantized matrix on awkward sizes and batches, repacked ==
 * file-layout products, embed of repacked rows, the launch counter and the
 * per-family profile. Oracles come from the random trits and scales the test
 * draws (kern_check.h), never from the kernels.
 * Without a CUDA build or device every test prints "SKIP: no CUDA device".
 */
#include "check.h"
#include "kern_check.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#if defined(TERN_HAVE_CUDA)
#include "kernels/cuda/cuda.h"

static int g_gpu;
#define NEED_GPU() do { if (!g_gpu) SKIP("no CUDA device"); } while (0)

static void *dup_dev(const void *h, size_t n) {
    void *d = tc_malloc(n);
    CHECK(d != NULL);
    if (d) CHECK(tc_upload(d, h, n) == 0);
    return d;
}

/* the file-layout matrix t uploaded at byte offset off (0 or 2: the file's 2-byte alignment) */
static tc_mat up_mat(const tmat *t, size_t off, uint8_t **base, size_t *bytes) {
    size_t n = t->q.row_bytes * (size_t)t->q.n;
    *bytes = n + off;
    *base = tc_malloc(*bytes);
    CHECK(*base && tc_upload(*base + off, t->buf, n) == 0);
    tc_mat m = {.kind = TC_TERN128, .data = *base + off, .n = t->q.n, .k = t->q.k,
                .row_bytes = t->q.row_bytes};
    return m;
}

TEST(repack_gemv_vs_f64) {
    NEED_GPU();
    /* (n, k): row counts not multiple of any tile, k from one block up */
    const int64_t shapes[][2] = {{1, 128}, {37, 384}, {130, 1152}, {257, 5120}, {33, 17408},
                                 {40000, 256}};
    const size_t batches[] = {1, 2, 3, 5, 8, 9, 17};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t n = shapes[s][0], k = shapes[s][1];
        tmat t = make_mat(TERN_DT_PQ2_0, n, k, s & 1 ? 6 : 0); /* padded rows too */
        uint8_t *base;
        size_t wb;
        tc_mat src = up_mat(&t, s & 1 ? 2 : 0, &base, &wb), rp;
        CHECK_EQ_INT(tc_repack(&src, &rp), 0);
        CHECK(rp.kind == TC_TERN128R && rp.n == n && rp.k == k && rp.row_bytes == (size_t)k / 4);
        tc_free(base, wb); /* the repacked copy stands alone */
        for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
            size_t B = batches[bi];
            if ((size_t)n * k * B > (size_t)40000 * 256 * 3 && B > 3) continue; /* oracle time */
            size_t ys = (size_t)n + 5;
            float *x = rand_x(B * (size_t)k, 1.0f);
            if (bi == 3) x[k / 3] = 500.0f; /* an outlier stays local to its block */
            float *dx = dup_dev(x, B * (size_t)k * 4), *dy = tc_malloc(B * ys * 4);
            float *y = malloc(B * ys * 4);
            tc_matmul_multi(1, &rp, dx, B, (size_t)k, &dy, &ys);
            CHECK_EQ_INT(tc_sync(), 0);
            CHECK(tc_download(y, dy, B * ys * 4) == 0);
            double e = rel_err_vs_f64(&t, x, B, (size_t)k, y, ys);
            CHECK_MSG(e < 1e-3, "repacked n %lld k %lld batch %zu: rel err %g", (long long)n,
                      (long long)k, B, e);
            for (size_t b = 0; b < B; b++) CHECK(y[b * ys + (size_t)n] == 0.0f); /* padding */
            free(x); free(y);
            tc_free(dx, B * (size_t)k * 4);
            tc_free(dy, B * ys * 4);
        }
        tc_free((void *)rp.data, tc_repacked_bytes(n, k));
        free_mat(&t);
    }
}

/* Repacked and file-layout products of the same matrix in one multi call (one
 * activation quantisation) agree to float rounding of the per-block order. */
TEST(repack_multi_vs_file_layout) {
    NEED_GPU();
    tmat t = make_mat(TERN_DT_PQ2_0, 300, 1024, 0);
    uint8_t *base;
    size_t wb;
    tc_mat src = up_mat(&t, 0, &base, &wb), rp;
    CHECK_EQ_INT(tc_repack(&src, &rp), 0);
    for (size_t B = 1; B <= 4; B += 3) {
        float *x = rand_x(B * 1024, 1.0f), *dx = dup_dev(x, B * 1024 * 4);
        size_t ys[2] = {300, 301};
        float *dy[2] = {tc_malloc(B * 301 * 4), tc_malloc(B * 301 * 4)};
        tc_mat both[2] = {src, rp};
        tc_matmul_multi(2, both, dx, B, 1024, dy, ys);
        CHECK_EQ_INT(tc_sync(), 0);
        float *a = malloc(B * 301 * 4), *b = malloc(B * 301 * 4);
        CHECK(tc_download(a, dy[0], B * 301 * 4) == 0 && tc_download(b, dy[1], B * 301 * 4) == 0);
        double md = 0, mr = 0;
        for (size_t r = 0; r < B; r++)
            for (int i = 0; i < 300; i++) {
                double d = fabs((double)a[r * 300 + i] - b[r * 301 + i]);
                if (!(d <= md)) md = isnan(d) ? INFINITY : d;
                if (fabs(a[r * 300 + i]) > mr) mr = fabs(a[r * 300 + i]);
            }
        CHECK_MSG(md <= 1e-5 * mr, "batch %zu: file vs repacked %g of %g", B, md, mr);
        free(x); free(a); free(b);
        tc_free(dx, B * 1024 * 4); tc_free(dy[0], B * 301 * 4); tc_free(dy[1], B * 301 * 4);
    }
    tc_free(base, wb);
    tc_free((void *)rp.data, tc_repacked_bytes(300, 1024));
    free_mat(&t);
}

TEST(repack_refusals_and_embed) {
    NEED_GPU();
    tc_mat bad = {.kind = TC_TERN64, .n = 4, .k = 128}, out;
    CHECK_EQ_INT(tc_repack(&bad, &out), TC_ERR_UNSUPPORTED);
    bad.kind = TC_TERN128;
    bad.k = 192;
    CHECK_EQ_INT(tc_repack(&bad, &out), TC_ERR_UNSUPPORTED);
    CHECK(out.data == NULL);
    /* embed of repacked rows == the float64 rows */
    tmat t = make_mat(TERN_DT_PQ2_0, 50, 384, 0);
    uint8_t *base;
    size_t wb;
    tc_mat src = up_mat(&t, 2, &base, &wb), rp;
    CHECK_EQ_INT(tc_repack(&src, &rp), 0);
    int32_t ids[4] = {49, 0, 7, 49};
    float *dout = tc_malloc(4 * 384 * 4), *h = malloc(4 * 384 * 4);
    tc_embed(&rp, ids, 4, dout, 128, NULL);
    CHECK_EQ_INT(tc_sync(), 0);
    CHECK(tc_download(h, dout, 4 * 384 * 4) == 0);
    int bad_n = 0;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 384; j++)
            if (h[i * 384 + j] != (float)t.deq[(size_t)ids[i] * 384 + j]) bad_n++;
    CHECK_MSG(bad_n == 0, "%d embedded values differ", bad_n);
    free(h);
    tc_free(dout, 4 * 384 * 4);
    tc_free(base, wb);
    tc_free((void *)rp.data, tc_repacked_bytes(50, 384));
    free_mat(&t);
}

TEST(launch_counter_and_profile) {
    NEED_GPU();
    tmat t = make_mat(TERN_DT_PQ2_0, 64, 256, 0);
    uint8_t *base;
    size_t wb;
    tc_mat m = up_mat(&t, 0, &base, &wb);
    float *x = rand_x(256, 1.0f), *dx = dup_dev(x, 256 * 4), *dy = tc_malloc(64 * 4);
    size_t ys = 64;
    tc_profile_enable(1);
    tc_launches_reset();
    for (int i = 0; i < 3; i++) tc_matmul_multi(1, &m, dx, 1, 256, &dy, &ys);
    tc_hadamard(dx, 1, 256, 256, NULL, 0); /* no signs: nothing launched */
    CHECK_EQ_INT(tc_sync(), 0);
    CHECK_MSG(tc_launches() == 6, "launches %llu (want 3 x (actq + gemv))",
              (unsigned long long)tc_launches());
    tc_profile_entry e[TC_FAM_N + 2];
    CHECK_EQ_INT(tc_profile_report(e, TC_FAM_N + 2), TC_FAM_N);
    CHECK_STR(e[TC_FAM_MATMUL].family, "matmul");
    CHECK(e[TC_FAM_MATMUL].calls == 3 && e[TC_FAM_ACTQ].calls == 3);
    CHECK(e[TC_FAM_MATMUL].ms > 0 && e[TC_FAM_ACTQ].ms > 0);
    CHECK(e[TC_FAM_HADAMARD].calls == 1 && e[TC_FAM_GDN].calls == 0);
    char buf[2048];
    int len = tc_profile_text(buf, sizeof buf);
    CHECK(len > 0 && (size_t)len < sizeof buf && strstr(buf, "matmul") && strstr(buf, "total"));
    fprintf(stderr, "%s", buf);
    tc_profile_enable(0);
    tc_matmul_multi(1, &m, dx, 1, 256, &dy, &ys);
    CHECK_EQ_INT(tc_profile_report(e, TC_FAM_N), TC_FAM_N);
    CHECK(e[TC_FAM_MATMUL].calls == 0); /* off: nothing recorded (enable reset the sums) */
    CHECK(tc_launches() == 8);
    free(x);
    tc_free(dx, 256 * 4); tc_free(dy, 64 * 4); tc_free(base, wb);
    free_mat(&t);
}

int main(void) {
    check_seed();
    tern_kernels_init();
    if (tc_device_count() > 0 && tc_init() == 0) {
        g_gpu = 1;
        fprintf(stderr, "CUDA device: %s\n", tc_device_name());
    } else {
        fprintf(stderr, "SKIP: no CUDA device\n");
    }
    RUN(repack_gemv_vs_f64);
    RUN(repack_multi_vs_file_layout);
    RUN(repack_refusals_and_embed);
    RUN(launch_counter_and_profile);
    return check_summary();
}
#else
int main(void) {
    fprintf(stderr, "SKIP: no CUDA device (built without CUDA)\n");
    return 0;
}
#endif
