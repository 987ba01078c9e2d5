/*
 * test_cuda_attn.c - the prefill (causal, GQA) attention of the CUDA kernel layer
 * (tc_attention): the tensor-core kernel (k_attn_flash: f16 and q8_0 caches, head dims 64/128/256)
 * and the plain kernel (tc_set_attn_old(1): the reference and fallback) against float64
 * computed here from the same f16 cache values, at awkward shapes: query rows not a
 * multiple of the 64-row tile, a cache already holding pos0 positions, GQA groups of 1,
 * 4 and 6, sharp and flat softmaxes. And the batch step's decode attention
 * (tc_attention_decode_batch) at the 27B bench's shape against float64. Without a CUDA
 * build or device: skipped.
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

/* a cache of n values (n % 32 == 0 for q8_0) in type t (TC_KV_F16 or TC_KV_Q8_0) from
 * normal draws; x gets the values the cache holds (what the reference sees); bytes in *nb */
static uint8_t *make_cache(int t, size_t n, float *x, size_t *nb) {
    if (t == TC_KV_F16) {
        uint16_t *h = malloc(n * 2);
        for (size_t i = 0; i < n; i++) {
            h[i] = tern_f32_to_f16(check_rand_normal());
            x[i] = tern_f16_to_f32(h[i]);
        }
        *nb = n * 2;
        return (uint8_t *)h;
    }
    /* q8_0 blocks: fp16 d, then 32 int8 q (formats.md); value q * d */
    uint8_t *b = malloc(n / 32 * 34);
    for (size_t blk = 0; blk < n / 32; blk++) {
        float v[32], amax = 0;
        for (int j = 0; j < 32; j++) {
            v[j] = check_rand_normal();
            amax = fmaxf(amax, fabsf(v[j]));
        }
        const uint16_t dh = tern_f32_to_f16(amax / 127.0f);
        const float d = tern_f16_to_f32(dh);
        uint8_t *o = b + blk * 34;
        memcpy(o, &dh, 2);
        for (int j = 0; j < 32; j++) {
            long qv = lrintf(d > 0 ? v[j] / d : 0.0f);
            qv = qv > 127 ? 127 : qv < -127 ? -127 : qv;
            o[2 + j] = (uint8_t)(int8_t)qv;
            x[blk * 32 + (size_t)j] = d * (float)qv;
        }
    }
    *nb = n / 32 * 34;
    return b;
}

TEST(prefill_attention_vs_f64) {
    NEED_GPU();
    /* rows, pos0, nh, nkv, hd, q scale */
    const int cases[][6] = {{2, 0, 4, 1, 64, 1},      {17, 0, 8, 2, 128, 1},  {64, 0, 12, 2, 256, 1},
                            {100, 37, 24, 4, 256, 1}, {300, 0, 8, 2, 128, 3}, {65, 500, 6, 6, 64, 1},
                            {129, 64, 12, 2, 256, 4}, {512, 0, 8, 2, 128, 1}, {31, 1000, 24, 4, 256, 2}};
    /* f16 caches, then q8_0 (the tensor-core kernel dequantises its tiles to f16) */
    for (int ti = 0; ti < 2; ti++)
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int t = ti ? TC_KV_Q8_0 : TC_KV_F16;
        const int rows = cases[c][0], pos0 = cases[c][1], nh = cases[c][2], nkv = cases[c][3], hd = cases[c][4];
        const float qsc = (float)cases[c][5];
        const int L = pos0 + rows;
        const size_t nq = (size_t)rows * nh * hd, nkvv = (size_t)L * nkv * hd;
        float *q = malloc(nq * 4), *k = malloc(nkvv * 4), *v = malloc(nkvv * 4), *got = malloc(nq * 4);
        double *ref = malloc(nq * sizeof *ref);
        for (size_t i = 0; i < nq; i++) q[i] = check_rand_normal() * qsc;
        size_t kb = 0, vb = 0;
        uint8_t *kh = make_cache(t, nkvv, k, &kb), *vh = make_cache(t, nkvv, v, &vb);
        const double scale = 1.0 / sqrt((double)hd);
        attn_ref(q, k, v, ref, rows, pos0, nh, nkv, hd, scale);
        double rmax = 0;
        for (size_t i = 0; i < nq; i++) rmax = fmax(rmax, fabs(ref[i]));
        float *dq = tc_malloc(g_tc, nq * 4), *dout = tc_malloc(g_tc, nq * 4);
        void *dk = tc_malloc(g_tc, kb), *dv = tc_malloc(g_tc, vb);
        CHECK(dq && dout && dk && dv);
        CHECK(tc_upload(g_tc, dq, q, nq * 4) == 0);
        CHECK(tc_upload(g_tc, dk, kh, kb) == 0);
        CHECK(tc_upload(g_tc, dv, vh, vb) == 0);
        for (int old = 0; old < 2; old++) {
            tc_set_attn_old(g_tc, old);
            memset(got, 0xff, nq * 4); /* NaN: rows not written show */
            CHECK(tc_upload(g_tc, dout, got, nq * 4) == 0);
            tc_attention(g_tc, dq, (size_t)nh * hd, dk, dv, t, t, dout, rows, pos0, nh, nkv, hd, (float)scale);
            CHECK_MSG(tc_sync(g_tc) == 0, "case %zu old %d: CUDA error", c, old);
            CHECK(tc_download(g_tc, got, dout, nq * 4) == 0);
            double md = 0;
            for (size_t i = 0; i < nq; i++) {
                double d = fabs((double)got[i] - ref[i]);
                if (!(d <= md)) md = isnan(d) ? INFINITY : d;
            }
            /* the plain kernel: fp32 throughout; the tensor-core one rounds q, the
             * softmax weights (and q8_0's dequantised K / V) to f16 (11-bit
             * significands): ~1e-3 of the largest value */
            const double bound = old ? 2e-5 : 4e-3;
            CHECK_MSG(md <= bound * rmax,
                      "%s case %zu (rows %d pos0 %d nh %d nkv %d hd %d) old %d: max|diff| %g of %g",
                      ti ? "q8_0" : "f16", c, rows, pos0, nh, nkv, hd, old, md, rmax);
            fprintf(stderr, "  %s rows %3d pos0 %4d heads %2d/%d hd %3d %s: max|diff| %.2e (largest %.2f)\n",
                    ti ? "q8_0" : "f16 ", rows, pos0, nh, nkv, hd, old ? "plain" : "tensor-core", md, rmax);
        }
        tc_set_attn_old(g_tc, 0);
        tc_free(g_tc, dq, nq * 4);
        tc_free(g_tc, dout, nq * 4);
        tc_free(g_tc, dk, kb);
        tc_free(g_tc, dv, vb);
        free(q); free(k); free(v); free(got); free(kh); free(vh); free(ref);
    }
}

/* The batch step's decode attention (tc_attention_decode_batch: one launch of the GQA
 * kernel and one of the merge for all the sequences) at the 27B bench's shape - 24 q / 4 kv
 * heads of 256, n sequences at positions 400..600, each with its own two-layer cache of
 * its own n_ctx (layer 1 read) - against float64 softmax attention of the stored cache
 * values (f16, q8_0: the prefetching walk; f32: the other), gated and not, within 1e-5
 * of the largest reference value (fp32 sums over <= 601 positions, as test_cuda_kernels'
 * decode cases). n 64 and 16: the bench's batches (3 and 9 splits, the merge with a CTA
 * per head); n 3 (44 splits) and n 5 at 2 kv heads (53): the merge per 32 columns; group
 * sizes 1, 2, 4, 6, 8. */
static void decode_batch_case(int n, int nh, int nkv, tern_kv_type t, int gated) {
    const int hd = 256, G = nh / nkv;
    const size_t qw = (size_t)nh * hd, kvw = (size_t)nkv * hd, rb = tern_kv_row_bytes(t, kvw);
    const float scale = 1.0f / sqrtf((float)hd);
    int *pos = malloc(n * sizeof *pos), *ctx = malloc(n * sizeof *ctx), max_ctx = 0;
    float *q = malloc(n * qw * 4), *g = malloc(n * qw * 4);
    float **kf = malloc(n * sizeof *kf), **vf = malloc(n * sizeof *vf);
    void **kc = malloc(n * sizeof *kc), **vc = malloc(n * sizeof *vc);
    tc_attn_seq *tab = malloc(n * sizeof *tab);
    double *ref = malloc(n * qw * sizeof *ref), *w = malloc(1024 * sizeof *w), rmax = 0;
    for (size_t i = 0; i < n * qw; i++) {
        q[i] = check_rand_normal();
        g[i] = check_rand_normal();
    }
    for (int i = 0; i < n; i++) {
        pos[i] = 400 + (int)(check_rand_unit() * 201.0); /* 400..600 */
        if (pos[i] > 600) pos[i] = 600;
        ctx[i] = i % 3 == 0 ? 1024 : i % 3 == 1 ? 608 : pos[i] + 1 + (i & 7); /* per-sequence layer stride */
        if (ctx[i] > max_ctx) max_ctx = ctx[i];
        const size_t np = (size_t)pos[i] + 1;
        float *f = malloc(np * kvw * 4);
        uint8_t *b = calloc((size_t)2 * ctx[i], rb);
        kf[i] = malloc(np * kvw * 4);
        vf[i] = malloc(np * kvw * 4);
        for (int kv = 0; kv < 2; kv++) { /* layer 1 of two: rows ctx .. ctx + np */
            float *dst = kv ? vf[i] : kf[i];
            for (size_t j = 0; j < np * kvw; j++) f[j] = check_rand_normal() * (kv ? 1.0f : 2.0f);
            tern_kv_store(t, b + (size_t)ctx[i] * rb, rb, f, kvw, np, kvw);
            for (size_t p = 0; p < np; p++) tern_kv_load(t, b + ((size_t)ctx[i] + p) * rb, kvw, dst + p * kvw);
            void *d = tc_malloc(g_tc, (size_t)2 * ctx[i] * rb);
            CHECK(d && tc_upload(g_tc, d, b, (size_t)2 * ctx[i] * rb) == 0);
            if (kv) vc[i] = d;
            else kc[i] = d;
        }
        free(f);
        free(b);
        tab[i] = (tc_attn_seq){.kcache = kc[i], .vcache = vc[i], .pos0 = pos[i], .n_ctx = ctx[i]};
        for (int h = 0; h < nh; h++) {
            const float *qh = q + i * qw + (size_t)h * hd;
            const int kh = h / G;
            double mx = -INFINITY, l = 0;
            for (size_t p = 0; p < np; p++) {
                double sd = 0;
                for (int j = 0; j < hd; j++) sd += (double)qh[j] * kf[i][p * kvw + (size_t)kh * hd + j];
                w[p] = sd * scale;
                if (w[p] > mx) mx = w[p];
            }
            for (size_t p = 0; p < np; p++) l += (w[p] = exp(w[p] - mx));
            for (int j = 0; j < hd; j++) {
                double o = 0;
                for (size_t p = 0; p < np; p++) o += w[p] * vf[i][p * kvw + (size_t)kh * hd + j];
                o /= l;
                if (gated) o /= 1 + exp(-(double)g[i * qw + (size_t)h * hd + j]);
                ref[i * qw + (size_t)h * hd + j] = o;
                if (fabs(o) > rmax) rmax = fabs(o);
            }
        }
    }
    tc_attn_seq *dtab = tc_malloc(g_tc, n * sizeof *tab);
    float *dq = tc_malloc(g_tc, n * qw * 4), *dg = tc_malloc(g_tc, n * qw * 4), *dout = tc_malloc(g_tc, n * qw * 4);
    CHECK(dtab && dq && dg && dout);
    CHECK(tc_upload(g_tc, dtab, tab, n * sizeof *tab) == 0);
    CHECK(tc_upload(g_tc, dq, q, n * qw * 4) == 0);
    CHECK(tc_upload(g_tc, dg, g, n * qw * 4) == 0);
    CHECK(tc_attention_decode_batch_ok(g_tc, (int)t, (int)t, max_ctx, nh, nkv, hd));
    tc_attn_bat bt = {.seqs = dtab, .kv_index = 1, .k_row = rb, .v_row = rb, .qg_stride = 2 * qw, .kv_stride = kvw,
                      .q_stride = qw};
    float *got = malloc(n * qw * 4);
    memset(got, 0xff, n * qw * 4); /* NaN: outputs not written show */
    CHECK(tc_upload(g_tc, dout, got, n * qw * 4) == 0);
    tc_launches_reset(g_tc);
    tc_attention_decode_batch(g_tc, dq, (int)t, (int)t, gated ? dg : NULL, dout, n, &bt, max_ctx, nh, nkv, hd, scale);
    CHECK_MSG(tc_sync(g_tc) == 0, "decode batch n %d type %d: CUDA error", n, (int)t);
    CHECK_EQ_INT((int)tc_launches(g_tc), 2); /* the GQA kernel and the merge, for all n */
    CHECK(tc_download(g_tc, got, dout, n * qw * 4) == 0);
    double md = 0;
    for (size_t i = 0; i < n * qw; i++) {
        double d = fabs((double)got[i] - ref[i]);
        if (!(d <= md)) md = isnan(d) ? INFINITY : d;
    }
    CHECK_MSG(md <= 1e-5 * rmax, "decode batch n %d heads %d:%d type %d gated %d: max|diff| %g of %g", n, nh, nkv,
              (int)t, gated, md, rmax);
    fprintf(stderr, "  decode batch n %2d heads %2d:%d %s gated %d: max|diff| %.2e (largest %.2f)\n", n, nh, nkv,
            t == TERN_KV_F16 ? "f16 " : t == TERN_KV_Q8_0 ? "q8_0" : "f32 ", gated, md, rmax);
    for (int i = 0; i < n; i++) {
        tc_free(g_tc, kc[i], (size_t)2 * ctx[i] * rb);
        tc_free(g_tc, vc[i], (size_t)2 * ctx[i] * rb);
        free(kf[i]);
        free(vf[i]);
    }
    tc_free(g_tc, dtab, n * sizeof *tab);
    tc_free(g_tc, dq, n * qw * 4);
    tc_free(g_tc, dg, n * qw * 4);
    tc_free(g_tc, dout, n * qw * 4);
    free(pos); free(ctx); free(q); free(g); free(got); free(kf); free(vf); free(kc); free(vc);
    free(tab); free(ref); free(w);
}

TEST(decode_batch_vs_f64) {
    NEED_GPU();
    decode_batch_case(64, 24, 4, TERN_KV_F16, 1);
    decode_batch_case(64, 24, 4, TERN_KV_Q8_0, 1);
    decode_batch_case(16, 24, 4, TERN_KV_F16, 0);
    decode_batch_case(16, 24, 4, TERN_KV_Q8_0, 1);
    decode_batch_case(3, 24, 4, TERN_KV_F16, 1);
    decode_batch_case(3, 24, 4, TERN_KV_Q8_0, 0);
    /* the other group sizes (ag_fold2's slot counts 2, 4, 8, 16) */
    decode_batch_case(5, 4, 4, TERN_KV_F16, 1);
    decode_batch_case(5, 8, 4, TERN_KV_Q8_0, 0);
    decode_batch_case(5, 8, 2, TERN_KV_F16, 0);
    decode_batch_case(5, 16, 2, TERN_KV_Q8_0, 1);
    /* f32 caches: the other walk (ag_fold, not prefetching) */
    decode_batch_case(16, 24, 4, TERN_KV_F32, 1);
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
    RUN(decode_batch_vs_f64);
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
