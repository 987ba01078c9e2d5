/*
 * test_cuda_attn.c - the prefill (causal, GQA) attention of the CUDA kernel layer
 * (tc_attention): the tensor-core kernel (k_attn_flash: f16 caches, head dims 64/128/256)
 * and the plain kernel (tc_set_attn_old(1): the reference and fallback) against float64
 * computed here from the same f16 cache values, at awkward shapes: query rows not a
 * multiple of the 64-row tile, a cache already holding pos0 positions, GQA groups of 1,
 * 4 and 6, sharp and flat softmaxes. Without a CUDA build or device: skipped.
 */
#include "check.h"
#include "kern_check.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(TERN_HAVE_CUDA)
#include "kernels/cuda/lab.h"

static int g_gpu;
static tc_ctx *g_tc;
#define NEED_GPU() do { if (!g_gpu) SKIP("no CUDA device"); } while (0)

/* out[i][h][d] for query rows i at positions pos0 + i over cache positions 0..pos0+i */
static void attn_ref(const float *q, const float *k, const float *v, double *out, int rows, int pos0, int nh,
                     int nkv, int hd, double scale) {
    const int G = nh / nkv;
    double *w = malloc((size_t)(pos0 + rows) * sizeof *w);
    for (int i = 0; i < rows; i++)
        for (int h = 0; h < nh; h++) {
            const float *qi = q + ((size_t)i * nh + h) * hd;
            const int kvh = h / G, np = pos0 + i + 1;
            double mx = -INFINITY;
            for (int p = 0; p < np; p++) {
                const float *kp = k + ((size_t)p * nkv + kvh) * hd;
                double s = 0;
                for (int d = 0; d < hd; d++) s += (double)qi[d] * kp[d];
                w[p] = s * scale;
                if (w[p] > mx) mx = w[p];
            }
            double l = 0;
            for (int p = 0; p < np; p++) l += (w[p] = exp(w[p] - mx));
            double *o = out + ((size_t)i * nh + h) * hd;
            for (int d = 0; d < hd; d++) o[d] = 0;
            for (int p = 0; p < np; p++) {
                const float *vp = v + ((size_t)p * nkv + kvh) * hd;
                for (int d = 0; d < hd; d++) o[d] += w[p] / l * vp[d];
            }
        }
    free(w);
}

TEST(prefill_attention_vs_f64) {
    NEED_GPU();
    /* rows, pos0, nh, nkv, hd, q scale */
    const int cases[][6] = {{2, 0, 4, 1, 64, 1},      {17, 0, 8, 2, 128, 1},  {64, 0, 12, 2, 256, 1},
                            {100, 37, 24, 4, 256, 1}, {300, 0, 8, 2, 128, 3}, {65, 500, 6, 6, 64, 1},
                            {129, 64, 12, 2, 256, 4}, {512, 0, 8, 2, 128, 1}, {31, 1000, 24, 4, 256, 2}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int rows = cases[c][0], pos0 = cases[c][1], nh = cases[c][2], nkv = cases[c][3], hd = cases[c][4];
        const float qsc = (float)cases[c][5];
        const int L = pos0 + rows;
        const size_t nq = (size_t)rows * nh * hd, nkvv = (size_t)L * nkv * hd;
        float *q = malloc(nq * 4), *k = malloc(nkvv * 4), *v = malloc(nkvv * 4), *got = malloc(nq * 4);
        uint16_t *kh = malloc(nkvv * 2), *vh = malloc(nkvv * 2);
        double *ref = malloc(nq * sizeof *ref);
        for (size_t i = 0; i < nq; i++) q[i] = check_rand_normal() * qsc;
        for (size_t i = 0; i < nkvv; i++) { /* the cache holds f16: the reference sees those values */
            kh[i] = tern_f32_to_f16(check_rand_normal());
            vh[i] = tern_f32_to_f16(check_rand_normal());
            k[i] = tern_f16_to_f32(kh[i]);
            v[i] = tern_f16_to_f32(vh[i]);
        }
        const double scale = 1.0 / sqrt((double)hd);
        attn_ref(q, k, v, ref, rows, pos0, nh, nkv, hd, scale);
        double rmax = 0;
        for (size_t i = 0; i < nq; i++) rmax = fmax(rmax, fabs(ref[i]));
        float *dq = tc_malloc(g_tc, nq * 4), *dout = tc_malloc(g_tc, nq * 4);
        void *dk = tc_malloc(g_tc, nkvv * 2), *dv = tc_malloc(g_tc, nkvv * 2);
        CHECK(dq && dout && dk && dv);
        CHECK(tc_upload(g_tc, dq, q, nq * 4) == 0);
        CHECK(tc_upload(g_tc, dk, kh, nkvv * 2) == 0);
        CHECK(tc_upload(g_tc, dv, vh, nkvv * 2) == 0);
        for (int old = 0; old < 2; old++) {
            tc_set_attn_old(g_tc, old);
            memset(got, 0xff, nq * 4); /* NaN: rows not written show */
            CHECK(tc_upload(g_tc, dout, got, nq * 4) == 0);
            tc_attention(g_tc, dq, (size_t)nh * hd, dk, dv, TC_KV_F16, TC_KV_F16, dout, rows, pos0, nh, nkv, hd,
                         (float)scale);
            CHECK_MSG(tc_sync(g_tc) == 0, "case %zu old %d: CUDA error", c, old);
            CHECK(tc_download(g_tc, got, dout, nq * 4) == 0);
            double md = 0;
            for (size_t i = 0; i < nq; i++) {
                double d = fabs((double)got[i] - ref[i]);
                if (!(d <= md)) md = isnan(d) ? INFINITY : d;
            }
            /* the plain kernel: fp32 throughout; the tensor-core one rounds q and the
             * softmax weights to f16 (11-bit significands): ~1e-3 of the largest value */
            const double bound = old ? 2e-5 : 4e-3;
            CHECK_MSG(md <= bound * rmax, "case %zu (rows %d pos0 %d nh %d nkv %d hd %d) old %d: max|diff| %g of %g",
                      c, rows, pos0, nh, nkv, hd, old, md, rmax);
            fprintf(stderr, "  rows %3d pos0 %4d heads %2d/%d hd %3d %s: max|diff| %.2e (largest %.2f)\n", rows,
                    pos0, nh, nkv, hd, old ? "plain" : "tensor-core", md, rmax);
        }
        tc_set_attn_old(g_tc, 0);
        tc_free(g_tc, dq, nq * 4);
        tc_free(g_tc, dout, nq * 4);
        tc_free(g_tc, dk, nkvv * 2);
        tc_free(g_tc, dv, nkvv * 2);
        free(q); free(k); free(v); free(got); free(kh); free(vh); free(ref);
    }
}

int main(void) {
    check_seed();
    if (tc_device_count() > 0 && tc_ctx_new(0, &g_tc) == 0) {
        g_gpu = 1;
        fprintf(stderr, "CUDA device: %s\n", tc_device_name(g_tc));
    } else {
        fprintf(stderr, "SKIP: no CUDA device\n");
    }
    RUN(prefill_attention_vs_f64);
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
