/*
 * test_cuda_gdn.c - the GDN kernels with the state stored in bf16 (tc_gdn_step_args /
 * tc_gdn_args .state_bf16; the model parameter gdn_state) against a plain float64
 * reference: the decode step for n sessions (the one-kernel step and the two-kernel
 * fallback) and the prefill call (the scan and the older walk), on random data of
 * awkward shapes. The reference starts from the device's bf16 state (exact in float64),
 * runs the recurrence in float64 and is compared with what the kernel wrote: outputs
 * within 1e-4 of the largest (the fp32 kernels' bound), states within half a bf16 ulp of
 * each element (the one rounding at the end of the call) plus the fp32 bound, conv
 * states exact. Without a CUDA build or device every test prints "SKIP: no CUDA device".
 */
#include "check.h"
#include "core/common.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if defined(TERN_HAVE_CUDA)
#include "kernels/cuda/lab.h"

static int g_gpu;
static tc_ctx *g_tc;
#define NEED_GPU() do { if (!g_gpu) SKIP("no CUDA device"); } while (0)

static void *up(const void *h, size_t n) {
    void *d = tc_malloc(g_tc, n);
    CHECK(d != NULL);
    if (d) CHECK(tc_upload(g_tc, d, h, n) == 0);
    return d;
}
static float *rnd(float *h, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) h[i] = check_rand_normal() * scale;
    return up(h, n * 4);
}

/* The plain reference: one token of one sequence in float64. cs [K-1][C] conv state,
 * S [nv][dk][dv], out [nv*dv]. conv + SiLU; q, k L2-normed (q / sqrt(dk)); per value
 * head: decay = exp(A softplus(a + dt)), beta = sigmoid(b), S = decay S, d = (v - S^T k)
 * beta, S += k d^T, o = S^T q; out = o / rms(o) * norm * silu(z). */
typedef struct {
    int nk, nv, dk, dv, K, tiled;
    const float *cw, *A, *dt, *norm;
} shape;

static void ref_token(const shape *h, const float *x, const float *z, const float *a, const float *b,
                      double *cs, double *S, double *out) {
    const int nk = h->nk, nv = h->nv, dk = h->dk, dv = h->dv, K = h->K;
    const int C = 2 * nk * dk + nv * dv;
    double *w = malloc((size_t)C * sizeof(double));
    for (int c = 0; c < C; c++) {
        double s = h->cw[(size_t)c * K + K - 1] * (double)x[c];
        for (int j = 0; j < K - 1; j++) s += h->cw[(size_t)c * K + j] * cs[(size_t)j * C + c];
        for (int j = 0; j < K - 2; j++) cs[(size_t)j * C + c] = cs[(size_t)(j + 1) * C + c];
        if (K > 1) cs[(size_t)(K - 2) * C + c] = x[c];
        w[c] = s / (1.0 + exp(-s));
    }
    for (int hh = 0; hh < 2 * nk; hh++) {
        double *v = w + (size_t)hh * dk, ss = 0;
        for (int e = 0; e < dk; e++) ss += v[e] * v[e];
        const double f = 1.0 / sqrt(ss + 1e-6) / (hh < nk ? sqrt((double)dk) : 1.0);
        for (int e = 0; e < dk; e++) v[e] *= f;
    }
    for (int p = 0; p < nv; p++) {
        const int kh = h->tiled ? p % nk : p / (nv / nk);
        const double *q = w + (size_t)kh * dk, *k = w + (size_t)(nk + kh) * dk;
        const double *v = w + (size_t)2 * nk * dk + (size_t)p * dv;
        const double xa = (double)a[p] + h->dt[p];
        const double decay = exp(h->A[p] * (xa > 20 ? xa : log1p(exp(xa))));
        const double beta = 1.0 / (1.0 + exp(-(double)b[p]));
        double *Sp = S + (size_t)p * dk * dv, *o = out + (size_t)p * dv, ss = 0;
        for (size_t e = 0; e < (size_t)dk * dv; e++) Sp[e] *= decay;
        for (int j = 0; j < dv; j++) {
            double kv = 0;
            for (int e = 0; e < dk; e++) kv += Sp[(size_t)e * dv + j] * k[e];
            const double d = (v[j] - kv) * beta;
            double oj = 0;
            for (int e = 0; e < dk; e++) {
                Sp[(size_t)e * dv + j] += k[e] * d;
                oj += Sp[(size_t)e * dv + j] * q[e];
            }
            o[j] = oj;
            ss += oj * oj;
        }
        const double inv = 1.0 / sqrt(ss / dv + 1e-6);
        for (int j = 0; j < dv; j++) {
            const double zz = z[(size_t)p * dv + j];
            o[j] = o[j] * inv * h->norm[j] * zz / (1.0 + exp(-zz));
        }
    }
    free(w);
}

/* a random state as bf16 on the device, its exact values in *ref */
static uint16_t *state_bf16(size_t n, float scale, double *ref) {
    uint16_t *h = malloc(n * 2);
    for (size_t e = 0; e < n; e++) {
        h[e] = tern_f32_to_bf16(check_rand_normal() * scale);
        ref[e] = tern_bf16_to_f32(h[e]);
    }
    uint16_t *d = up(h, n * 2);
    free(h);
    return d;
}

/* The device's bf16 state against float64, element by element: the one rounding of an
 * fp32 value to bf16 moves it by at most half an ulp, 2^-9 of the value; allowed: 2^-8 of
 * the element plus tol of the largest (the fp32 arithmetic before the rounding). Returns
 * the largest |g - r| / allowance: <= 1 passes; a value of another element, another type
 * or a lost update is off by far more (a state read as fp32 gives ~1e30). */
static double state_err(const uint16_t *dev, const double *r, size_t n, double tol) {
    uint16_t *h = malloc(n * 2);
    CHECK(tc_download(g_tc, h, dev, n * 2) == 0);
    double mr = 0, worst = 0;
    for (size_t e = 0; e < n; e++)
        if (fabs(r[e]) > mr) mr = fabs(r[e]);
    for (size_t e = 0; e < n; e++) {
        const double g = tern_bf16_to_f32(h[e]), d = fabs(g - r[e]);
        const double q = d / (fabs(r[e]) / 256.0 + tol * mr + 1e-30);
        if (!(q <= worst)) worst = isnan(q) ? INFINITY : q;
    }
    free(h);
    return worst;
}

static double out_err(const float *g, const double *r, size_t n) {
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs(g[i] - r[i]);
        if (!(d <= md)) md = isnan(d) ? INFINITY : d;
        if (fabs(r[i]) > mr) mr = fabs(r[i]);
    }
    return mr > 0 ? md / mr : md;
}

/* Decode: n sessions with bf16 states, three steps, the one-kernel step and (old) the
 * two-kernel fallback: awkward dk (not a multiple of the row groups), dv not a
 * multiple of 32 or of 4 (the fallback), conv 1..4, batches 1..9, strided rows; the
 * 27B heads at batch 3. */
TEST(gdn_step_bf16_vs_f64) {
    NEED_GPU();
    /* nk nv dk dv K tiled n */
    const int cfg[][7] = {{2, 4, 32, 48, 4, 1, 3},   {2, 6, 128, 128, 4, 0, 2}, {1, 3, 64, 40, 3, 1, 3},
                          {3, 6, 36, 52, 2, 1, 1},   {2, 4, 100, 50, 4, 0, 2},  {1, 2, 20, 8, 1, 1, 9},
                          {16, 48, 128, 128, 4, 1, 3}};
    const int ncfg = (int)(sizeof cfg / sizeof cfg[0]);
    for (int c = 0; c < 2 * ncfg; c++) {
        const int old = c >= ncfg, cc = c % ncfg;
        tc_set_ops_old(g_tc, old);
        const int nk = cfg[cc][0], nv = cfg[cc][1], dk = cfg[cc][2], dv = cfg[cc][3], K = cfg[cc][4];
        const int n = cfg[cc][6], C = 2 * nk * dk + nv * dv;
        const size_t csn = (size_t)(K - 1) * C, csa = csn ? csn : 1, stn = (size_t)nv * dk * dv;
        const size_t qs = (size_t)C + 3, zs = (size_t)nv * dv + 1, as = (size_t)nv + 2, os = (size_t)nv * dv + 4;
        float *hw = malloc((size_t)C * K * 4), *hA = malloc((size_t)nv * 4), *hdt = malloc((size_t)nv * 4),
              *hn = malloc((size_t)dv * 4);
        float *cw = rnd(hw, (size_t)C * K, 0.5f);
        for (int p = 0; p < nv; p++) hA[p] = p % 4 ? -fabsf(check_rand_normal()) - 0.1f : -0.002f;
        float *dA = up(hA, (size_t)nv * 4), *ddt = rnd(hdt, (size_t)nv, 0.5f), *dn = rnd(hn, (size_t)dv, 1.0f);
        shape h = {nk, nv, dk, dv, K, cfg[cc][5], hw, hA, hdt, hn};
        double *rcs = malloc((size_t)n * csa * 8), *rst = malloc((size_t)n * stn * 8);
        float *tmp = malloc((csa > stn ? csa : stn) * 4);
        float *dcs[9];
        uint16_t *dst[9];
        for (int i = 0; i < n; i++) {
            dcs[i] = rnd(tmp, csa, 1.0f);
            for (size_t e = 0; e < csa; e++) rcs[i * csa + e] = tmp[e];
            dst[i] = state_bf16(stn, 0.1f, rst + i * stn);
        }
        float *const *pcs = up(dcs, (size_t)n * sizeof(float *));
        float *const *pst = up(dst, (size_t)n * sizeof(float *));
        for (int step = 0; step < 3; step++) {
            float *hq = malloc((size_t)n * qs * 4), *hz = malloc((size_t)n * zs * 4),
                  *ha = malloc((size_t)n * as * 4), *hb = malloc((size_t)n * as * 4);
            float *dq = rnd(hq, (size_t)n * qs, 1.0f), *dz = rnd(hz, (size_t)n * zs, 1.0f),
                  *da = rnd(ha, (size_t)n * as, 1.0f), *db = rnd(hb, (size_t)n * as, 1.0f);
            float *dout = tc_malloc(g_tc, (size_t)n * os * 4), *dwork = tc_malloc(g_tc, (size_t)n * C * 4);
            tc_gdn_step_args g = {.n = n, .qkv = dq, .z = dz, .a = da, .b = db, .qkv_stride = qs,
                                  .z_stride = zs, .ab_stride = as, .out_stride = os, .conv_w = cw,
                                  .ssm_a = dA, .dt_bias = ddt, .norm = dn, .conv_state = pcs,
                                  .state = pst, .out = dout, .work = dwork, .n_k = nk, .n_v = nv,
                                  .dk = dk, .dv = dv, .conv_k = K, .v_tiled = h.tiled, .eps = 1e-6f,
                                  .state_bf16 = 1};
            tc_gdn_step(g_tc, &g);
            CHECK_EQ_INT(tc_sync(g_tc), 0);
            float *go = malloc((size_t)n * os * 4);
            CHECK(tc_download(g_tc, go, dout, (size_t)n * os * 4) == 0);
            double *ro = malloc((size_t)nv * dv * 8);
            for (int i = 0; i < n; i++) {
                ref_token(&h, hq + i * qs, hz + i * zs, ha + i * as, hb + i * as, rcs + i * csa,
                          rst + i * stn, ro);
                double e = out_err(go + i * os, ro, (size_t)nv * dv);
                CHECK_MSG(e < 1e-4, "step cfg %d old %d step %d session %d: out %g", cc, old, step, i, e);
                e = state_err(dst[i], rst + i * stn, stn, 1e-5);
                CHECK_MSG(e <= 1.0, "step cfg %d old %d step %d session %d: state %g of the allowance", cc, old,
                          step, i, e);
                /* the next step starts from the device's bf16 state (the reference's rounding
                 * may differ by an ulp where a value lies on a rounding boundary) */
                uint16_t *hs = malloc(stn * 2);
                CHECK(tc_download(g_tc, hs, dst[i], stn * 2) == 0);
                for (size_t e2 = 0; e2 < stn; e2++) rst[i * stn + e2] = tern_bf16_to_f32(hs[e2]);
                free(hs);
                if (csn) {
                    CHECK(tc_download(g_tc, tmp, dcs[i], csn * 4) == 0);
                    e = out_err(tmp, rcs + i * csa, csn);
                    CHECK_MSG(e == 0, "step cfg %d old %d step %d session %d: conv state %g", cc, old, step, i, e);
                }
            }
            free(go); free(ro); free(hq); free(hz); free(ha); free(hb);
            tc_free(g_tc, dq, (size_t)n * qs * 4); tc_free(g_tc, dz, (size_t)n * zs * 4);
            tc_free(g_tc, da, (size_t)n * as * 4); tc_free(g_tc, db, (size_t)n * as * 4);
            tc_free(g_tc, dout, (size_t)n * os * 4); tc_free(g_tc, dwork, (size_t)n * C * 4);
        }
        for (int i = 0; i < n; i++) { tc_free(g_tc, dcs[i], csa * 4); tc_free(g_tc, dst[i], stn * 2); }
        tc_free(g_tc, (void *)pcs, (size_t)n * sizeof(float *));
        tc_free(g_tc, (void *)pst, (size_t)n * sizeof(float *));
        tc_free(g_tc, cw, (size_t)C * K * 4); tc_free(g_tc, dA, (size_t)nv * 4);
        tc_free(g_tc, ddt, (size_t)nv * 4); tc_free(g_tc, dn, (size_t)dv * 4);
        free(hw); free(hA); free(hdt); free(hn); free(rcs); free(rst); free(tmp);
    }
    tc_set_ops_old(g_tc, -1);
}

/* Prefill: tc_gdn with a bf16 state, the scan (path 1) and the older walk (path 0),
 * chained calls of awkward row counts; the reference runs the call's tokens in float64
 * from the bf16 state (the kernels round once, at the end of the call). */
TEST(gdn_prefill_bf16_vs_f64) {
    NEED_GPU();
    static const struct {
        int nk, nv, dk, dv, K, tiled;
        int rows[4];
    } cfg[] = {
        {16, 48, 128, 128, 4, 1, {7, 64}}, /* the 27B heads */
        {2, 6, 128, 128, 4, 0, {1, 65}},
        {1, 3, 30, 50, 3, 1, {7, 33}},     /* 4-byte copies, odd columns */
        {1, 2, 8, 72, 2, 1, {20}},
        {1, 1, 16, 16, 1, 0, {5}},         /* no conv state */
    };
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++)
        for (int path = 0; path < 2; path++) {
            const int nk = cfg[c].nk, nv = cfg[c].nv, dk = cfg[c].dk, dv = cfg[c].dv, K = cfg[c].K;
            const int C = 2 * nk * dk + nv * dv, VW = nv * dv;
            const size_t csn = (size_t)(K - 1) * C, csa = csn ? csn : 1, stn = (size_t)nv * dk * dv;
            float *hw = malloc((size_t)C * K * 4), *hA = malloc((size_t)nv * 4), *hdt = malloc((size_t)nv * 4),
                  *hn = malloc((size_t)dv * 4);
            float *cw = rnd(hw, (size_t)C * K, 0.5f);
            for (int p = 0; p < nv; p++) hA[p] = p % 4 ? -fabsf(check_rand_normal()) - 0.1f : -0.002f;
            float *dA = up(hA, (size_t)nv * 4), *ddt = rnd(hdt, (size_t)nv, 0.5f), *dn = rnd(hn, (size_t)dv, 1.0f);
            shape h = {nk, nv, dk, dv, K, cfg[c].tiled, hw, hA, hdt, hn};
            float *tmp = malloc((csa > stn ? csa : stn) * 4);
            double *rcs = malloc(csa * 8), *rst = malloc(stn * 8);
            float *dcs = rnd(tmp, csa, 1.0f);
            for (size_t e = 0; e < csa; e++) rcs[e] = tmp[e];
            uint16_t *dst = state_bf16(stn, 0.1f, rst);
            CHECK_EQ_INT(tc_gdn_config(g_tc, path, 0, 0), 0);
            for (int call = 0; call < 4 && cfg[c].rows[call]; call++) {
                const int T = cfg[c].rows[call];
                const size_t nq = (size_t)T * C, nz = (size_t)T * VW, nab = (size_t)T * nv;
                float *hq = malloc(nq * 4), *hz = malloc(nz * 4), *ha = malloc(nab * 4), *hb = malloc(nab * 4);
                float *dq = rnd(hq, nq, 1.0f), *dz = rnd(hz, nz, 1.0f), *da = rnd(ha, nab, 1.0f),
                      *db = rnd(hb, nab, 1.0f);
                float *dout = tc_malloc(g_tc, nz * 4), *dwork = tc_malloc(g_tc, nq * 4);
                tc_gdn_args g = {.qkv = dq, .z = dz, .a = da, .b = db, .conv_w = cw, .ssm_a = dA,
                                 .dt_bias = ddt, .norm = dn, .conv_state = dcs, .state = (float *)dst,
                                 .out = dout, .work = dwork, .rows = T, .n_k = nk, .n_v = nv, .dk = dk,
                                 .dv = dv, .conv_k = K, .v_tiled = h.tiled, .eps = 1e-6f, .state_bf16 = 1};
                tc_gdn(g_tc, &g);
                CHECK_EQ_INT(tc_sync(g_tc), 0);
                double *ro = malloc(nz * 8);
                for (int t = 0; t < T; t++)
                    ref_token(&h, hq + (size_t)t * C, hz + (size_t)t * VW, ha + (size_t)t * nv,
                              hb + (size_t)t * nv, rcs, rst, ro + (size_t)t * VW);
                float *go = malloc(nz * 4);
                CHECK(tc_download(g_tc, go, dout, nz * 4) == 0);
                double e = out_err(go, ro, nz);
                CHECK_MSG(e < 1e-4, "prefill cfg %zu path %d rows %d: out %g", c, path, T, e);
                e = state_err(dst, rst, stn, 1e-4);
                CHECK_MSG(e <= 1.0, "prefill cfg %zu path %d rows %d: state %g of the allowance", c, path, T, e);
                uint16_t *hs = malloc(stn * 2);
                CHECK(tc_download(g_tc, hs, dst, stn * 2) == 0);
                for (size_t e2 = 0; e2 < stn; e2++) rst[e2] = tern_bf16_to_f32(hs[e2]);
                free(hs);
                if (csn) {
                    CHECK(tc_download(g_tc, tmp, dcs, csn * 4) == 0);
                    e = out_err(tmp, rcs, csn);
                    CHECK_MSG(e == 0, "prefill cfg %zu path %d rows %d: conv state %g", c, path, T, e);
                }
                free(ro); free(go); free(hq); free(hz); free(ha); free(hb);
                tc_free(g_tc, dq, nq * 4); tc_free(g_tc, dz, nz * 4); tc_free(g_tc, da, nab * 4);
                tc_free(g_tc, db, nab * 4); tc_free(g_tc, dout, nz * 4); tc_free(g_tc, dwork, nq * 4);
            }
            tc_free(g_tc, dcs, csa * 4); tc_free(g_tc, dst, stn * 2);
            tc_free(g_tc, cw, (size_t)C * K * 4); tc_free(g_tc, dA, (size_t)nv * 4);
            tc_free(g_tc, ddt, (size_t)nv * 4); tc_free(g_tc, dn, (size_t)dv * 4);
            free(hw); free(hA); free(hdt); free(hn); free(tmp); free(rcs); free(rst);
        }
    CHECK_EQ_INT(tc_gdn_config(g_tc, -1, 0, 0), 0); /* back to the default (the scan) */
}

/* The chunked form on tensor cores (tc_gdn_config(2, ..): conv + L2, k_gdn_kk,
 * k_gdn_chunk, k_gdn_onorm; four launches, from 16 rows: fewer take the scan) against float64 token by token and against the walk
 * (path 0, the exact reference) on the same inputs, calls chained (states carry over):
 * outputs and fp32 states within 1e-4 of the largest value (the scan's bound: the
 * three-pass TF32 products are fp32-level), conv states exact; with a bf16 state, the
 * state within half a bf16 ulp. Shapes: the 27B heads at 7, 64, 65 and 512 rows (one
 * partial chunk, one whole, a whole and one token, eight), dk not a multiple of 8 and
 * below 128 (zero rows), dv not a multiple of the 32 columns of a CTA, one key head for
 * three value heads (grouped and tiled), conv 1 and 2, single rows. */
TEST(gdn_chunk_vs_f64_and_walk) {
    NEED_GPU();
    static const struct {
        int nk, nv, dk, dv, K, tiled, bf;
        int rows[4];
    } cfg[] = {
        {16, 48, 128, 128, 4, 1, 0, {7, 64, 65, 512}}, /* the 27B heads */
        {16, 48, 128, 128, 4, 1, 1, {65, 130}},        /* bf16 state */
        {2, 6, 128, 128, 4, 0, 0, {1, 129}},
        {1, 3, 30, 50, 3, 1, 0, {7, 70}},
        {1, 3, 30, 50, 3, 0, 1, {70}},
        {2, 4, 64, 72, 2, 1, 0, {33, 1}},
        {1, 1, 8, 16, 1, 0, 0, {5, 100}},
    };
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        const int nk = cfg[c].nk, nv = cfg[c].nv, dk = cfg[c].dk, dv = cfg[c].dv, K = cfg[c].K, bf = cfg[c].bf;
        const int C = 2 * nk * dk + nv * dv, VW = nv * dv;
        const size_t csn = (size_t)(K - 1) * C, csa = csn ? csn : 1, stn = (size_t)nv * dk * dv;
        const size_t sb = bf ? 2 : 4;
        float *hw = malloc((size_t)C * K * 4), *hA = malloc((size_t)nv * 4), *hdt = malloc((size_t)nv * 4),
              *hn = malloc((size_t)dv * 4);
        float *cw = rnd(hw, (size_t)C * K, 0.5f);
        for (int p = 0; p < nv; p++) hA[p] = p % 4 ? -fabsf(check_rand_normal()) - 0.1f : -0.002f;
        float *dA = up(hA, (size_t)nv * 4), *ddt = rnd(hdt, (size_t)nv, 0.5f), *dn = rnd(hn, (size_t)dv, 1.0f);
        shape h = {nk, nv, dk, dv, K, cfg[c].tiled, hw, hA, hdt, hn};
        float *tmp = malloc((csa > stn ? csa : stn) * 4);
        double *rcs = malloc(csa * 8), *rst = malloc(stn * 8);
        float *dcs[2];
        void *dst[2]; /* [0] the chunked path, [1] the walk */
        dcs[0] = rnd(tmp, csa, 1.0f);
        dcs[1] = up(tmp, csa * 4);
        for (size_t e = 0; e < csa; e++) rcs[e] = tmp[e];
        if (bf) {
            dst[0] = state_bf16(stn, 0.1f, rst);
            uint16_t *hs = malloc(stn * 2);
            CHECK(tc_download(g_tc, hs, dst[0], stn * 2) == 0);
            dst[1] = up(hs, stn * 2);
            free(hs);
        } else {
            dst[0] = rnd(tmp, stn, 0.1f);
            dst[1] = up(tmp, stn * 4);
            for (size_t e = 0; e < stn; e++) rst[e] = tmp[e];
        }
        for (int call = 0; call < 4 && cfg[c].rows[call]; call++) {
            const int T = cfg[c].rows[call];
            const size_t nq = (size_t)T * C, nz = (size_t)T * VW, nab = (size_t)T * nv;
            float *hq = malloc(nq * 4), *hz = malloc(nz * 4), *ha = malloc(nab * 4), *hb = malloc(nab * 4);
            float *dq = rnd(hq, nq, 1.0f), *dz = rnd(hz, nz, 1.0f), *da = rnd(ha, nab, 1.0f),
                  *db = rnd(hb, nab, 1.0f);
            float *go[2];
            for (int k = 0; k < 2; k++) {
                float *dout = tc_malloc(g_tc, nz * 4), *dwork = tc_malloc(g_tc, nq * 4);
                CHECK_EQ_INT(tc_gdn_config(g_tc, k ? 0 : 2, 0, 0), 0);
                tc_gdn_args g = {.qkv = dq, .z = dz, .a = da, .b = db, .conv_w = cw, .ssm_a = dA,
                                 .dt_bias = ddt, .norm = dn, .conv_state = dcs[k], .state = dst[k],
                                 .out = dout, .work = dwork, .rows = T, .n_k = nk, .n_v = nv, .dk = dk,
                                 .dv = dv, .conv_k = K, .v_tiled = h.tiled, .eps = 1e-6f, .state_bf16 = bf};
                tc_launches_reset(g_tc);
                tc_gdn(g_tc, &g);
                CHECK_EQ_INT(tc_sync(g_tc), 0);
                /* the walk 3; the chunked form 4 (conv + L2, K K^T, chunks, norm) from 16 rows,
                 * else the scan's 2 */
                const uint64_t want = k ? 3u : T >= 16 ? 4u : 2u;
                CHECK_MSG(tc_launches(g_tc) == want, "chunk cfg %zu rows %d path %d: %llu launches", c, T, k,
                          (unsigned long long)tc_launches(g_tc));
                go[k] = malloc(nz * 4);
                CHECK(tc_download(g_tc, go[k], dout, nz * 4) == 0);
                tc_free(g_tc, dout, nz * 4);
                tc_free(g_tc, dwork, nq * 4);
            }
            double *ro = malloc(nz * 8);
            for (int t = 0; t < T; t++)
                ref_token(&h, hq + (size_t)t * C, hz + (size_t)t * VW, ha + (size_t)t * nv, hb + (size_t)t * nv,
                          rcs, rst, ro + (size_t)t * VW);
            for (int k = 0; k < 2; k++) {
                const char *pn = k ? "walk" : "chunk";
                double e = out_err(go[k], ro, nz);
                CHECK_MSG(e < 1e-4, "chunk cfg %zu rows %d %s: out vs f64 %g", c, T, pn, e);
                if (bf) { /* per element: half a bf16 ulp + 1e-4 of the largest */
                    e = state_err(dst[k], rst, stn, 1e-4);
                    CHECK_MSG(e <= 1.0, "chunk cfg %zu rows %d %s: state vs f64 %g of the allowance", c, T, pn, e);
                } else {
                    CHECK(tc_download(g_tc, tmp, dst[k], stn * 4) == 0);
                    e = out_err(tmp, rst, stn);
                    CHECK_MSG(e < 1e-4, "chunk cfg %zu rows %d %s: state vs f64 %g", c, T, pn, e);
                }
                if (csn) {
                    CHECK(tc_download(g_tc, tmp, dcs[k], csn * 4) == 0);
                    e = out_err(tmp, rcs, csn);
                    CHECK_MSG(e == 0, "chunk cfg %zu rows %d %s: conv state %g", c, T, pn, e);
                }
            }
            {
                double md = 0, mr = 0;
                for (size_t i = 0; i < nz; i++) {
                    const double d = fabs((double)go[0][i] - go[1][i]);
                    if (!(d <= md)) md = d;
                    if (fabs(go[1][i]) > mr) mr = fabs(go[1][i]);
                }
                CHECK_MSG(md <= 1e-4 * mr, "chunk cfg %zu rows %d: out chunk vs walk %g", c, T, md / mr);
                fprintf(stderr, "  chunk cfg %zu rows %d: out chunk vs walk %.2e of the largest\n", c, T, md / mr);
            }
            /* the next call starts from the chunked path's state (both paths get it) */
            if (bf) {
                uint16_t *hs = malloc(stn * 2);
                CHECK(tc_download(g_tc, hs, dst[0], stn * 2) == 0);
                CHECK(tc_upload(g_tc, dst[1], hs, stn * 2) == 0);
                for (size_t e2 = 0; e2 < stn; e2++) rst[e2] = tern_bf16_to_f32(hs[e2]);
                free(hs);
            } else {
                CHECK(tc_download(g_tc, tmp, dst[0], stn * 4) == 0);
                CHECK(tc_upload(g_tc, dst[1], tmp, stn * 4) == 0);
                for (size_t e2 = 0; e2 < stn; e2++) rst[e2] = tmp[e2];
            }
            free(ro); free(go[0]); free(go[1]); free(hq); free(hz); free(ha); free(hb);
            tc_free(g_tc, dq, nq * 4); tc_free(g_tc, dz, nz * 4); tc_free(g_tc, da, nab * 4); tc_free(g_tc, db, nab * 4);
        }
        for (int k = 0; k < 2; k++) { tc_free(g_tc, dcs[k], csa * 4); tc_free(g_tc, dst[k], stn * sb); }
        tc_free(g_tc, cw, (size_t)C * K * 4); tc_free(g_tc, dA, (size_t)nv * 4);
        tc_free(g_tc, ddt, (size_t)nv * 4); tc_free(g_tc, dn, (size_t)dv * 4);
        free(hw); free(hA); free(hdt); free(hn); free(tmp); free(rcs); free(rst);
    }
    CHECK_EQ_INT(tc_gdn_config(g_tc, -1, 0, 0), 0); /* back to the default (the scan) */
}

int main(void) {
    check_seed();
    if (tc_device_count() > 0 && tc_ctx_new(0, &g_tc) == 0) {
        g_gpu = 1;
        fprintf(stderr, "CUDA device: %s\n", tc_device_name(g_tc));
    } else {
        fprintf(stderr, "SKIP: no CUDA device\n");
    }
    RUN(gdn_step_bf16_vs_f64);
    RUN(gdn_prefill_bf16_vs_f64);
    RUN(gdn_chunk_vs_f64_and_walk);
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
