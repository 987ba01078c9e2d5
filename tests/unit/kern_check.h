/*
 * kern_check.h - random ternary / 1-bit / dense test matrices with their exact
 * float64 values, and the error measure of the kernel library's bound
 * (max|y - ref| / max|ref| against float64), shared by the CPU and CUDA kernel
 * tests. Include after check.h.
 */
#ifndef TERN_TEST_KERN_CHECK_H
#define TERN_TEST_KERN_CHECK_H

#include "kernels/kernels.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct tmat {
    tern_qmat q;
    uint8_t *buf;
    double *deq;      /* n x k dequantized values, float64 */
} tmat;

static inline uint16_t rand_scale_f16(void) {
    /* scales like Bonsai's (0.004 .. 0.03), exact in fp16 by construction */
    float s = 0.004f + 0.026f * (float)check_rand_unit();
    return tern_f32_to_f16(s);
}

/* Draw a random matrix of `type` with row padding `pad` bytes (non-minimal row_bytes). */
static inline tmat make_mat(tern_dtype type, int64_t n, int64_t k, size_t pad) {
    tmat t;
    memset(&t, 0, sizeof t);
    size_t be = tern_dtype_block_elems(type), bb = tern_dtype_block_bytes(type);
    size_t rb = (size_t)k / be * bb + pad;
    t.buf = calloc((size_t)n * rb + 16, 1); /* slack: kernels may read a word past the end */
    t.deq = calloc((size_t)(n * k), sizeof(double));
    t.q.type = type; t.q.n = n; t.q.k = k; t.q.data = t.buf; t.q.row_bytes = rb;
    for (int64_t r = 0; r < n; r++) {
        uint8_t *row = t.buf + (size_t)r * rb;
        double *dq = t.deq + r * k;
        if (type == TERN_DT_F32 || type == TERN_DT_F16 || type == TERN_DT_BF16) {
            for (int64_t j = 0; j < k; j++) {
                float v = check_rand_normal() * 0.05f;
                if (type == TERN_DT_F32) { memcpy(row + 4 * j, &v, 4); dq[j] = v; }
                else if (type == TERN_DT_F16) {
                    uint16_t h = tern_f32_to_f16(v); memcpy(row + 2 * j, &h, 2); dq[j] = tern_f16_to_f32(h);
                } else {
                    uint16_t h = tern_f32_to_bf16(v); memcpy(row + 2 * j, &h, 2); dq[j] = tern_bf16_to_f32(h);
                }
            }
            continue;
        }
        for (int64_t b = 0; b < k / (int64_t)be; b++) {
            uint8_t *blk = row + (size_t)b * bb;
            uint16_t d = rand_scale_f16();
            memcpy(blk, &d, 2);
            double dd = tern_f16_to_f32(d);
            for (size_t j = 0; j < be; j++) {
                double *o = &dq[b * (int64_t)be + (int64_t)j];
                if (type == TERN_DT_Q1_0) {
                    int bit = (int)(check_rand_u64() >> 40) & 1;
                    blk[2 + j / 8] |= (uint8_t)(bit << (j % 8));
                    *o = bit ? dd : -dd;
                } else {
                    int trit = (int)((check_rand_u64() >> 33) % 3); /* 0,1,2 */
                    blk[2 + j / 4] |= (uint8_t)(trit << (2 * (j % 4)));
                    *o = (trit - 1) * dd;
                }
            }
        }
    }
    return t;
}
static inline void free_mat(tmat *t) { free(t->buf); free(t->deq); }

static inline double rel_err_vs_f64(const tmat *t, const float *x, size_t batch, size_t xs,
                             const float *y, size_t ys) {
    double maxref = 0, maxdiff = 0;
    for (size_t b = 0; b < batch; b++)
        for (int64_t r = 0; r < t->q.n; r++) {
            double s = 0;
            for (int64_t j = 0; j < t->q.k; j++) s += t->deq[r * t->q.k + j] * (double)x[b * xs + (size_t)j];
            double dlt = fabs(s - (double)y[b * ys + (size_t)r]);
            if (!(dlt <= maxdiff)) maxdiff = isnan(dlt) ? INFINITY : dlt; /* NaN fails */
            if (fabs(s) > maxref) maxref = fabs(s);
        }
    return maxref > 0 ? maxdiff / maxref : maxdiff;
}

/* Per-output bound for the integer path (tc_act: x_q = round(x / sx), sx = max|x| /
 * 16256 per 128-input block of a batch row). Its error is the rounding of x_q, a sum
 * of independent errors uniform in +-sx/2: std sigma_r = sqrt(sum_j w_rj^2 sx_j^2 / 12),
 * plus fp32 rounding of the per-group float sum (<= ~G * 6e-8 of sum |w x|). Returns
 * max over outputs of |y - ref| / (6 sigma_r + 2e-5 sum_j |w_rj x_j|): < 1 for a
 * correct kernel (a 6-sigma tail), while a wrong code, scale or column is an error
 * of order |w x| >> sigma. Unlike max|err| / max|ref| this stays well-posed when
 * there are few outputs and one of them cancels (n 1 with an outlier x = 500: its
 * block's step is 0.031, the dot products of the other columns are ~sqrt(k)). */
static inline double qerr_ratio_vs_f64(const tmat *t, const float *x, size_t batch, size_t xs,
                                       const float *y, size_t ys) {
    const int64_t k = t->q.k, G = k / 128;
    double worst = 0, *sxb = malloc((size_t)(G > 0 ? G : 1) * sizeof(double));
    for (size_t b = 0; b < batch; b++) {
        for (int64_t g = 0; g < G; g++) {
            double m = 0;
            for (int64_t j = g * 128; j < g * 128 + 128; j++) m = fmax(m, fabs((double)x[b * xs + (size_t)j]));
            sxb[g] = m / 16256.0;
        }
        for (int64_t r = 0; r < t->q.n; r++) {
            double s = 0, a = 0, v = 0;
            for (int64_t j = 0; j < k; j++) {
                double w = t->deq[r * k + j], xv = (double)x[b * xs + (size_t)j], q = sxb[j >> 7];
                s += w * xv;
                a += fabs(w * xv);
                v += w * w * q * q / 12.0;
            }
            double r_ = fabs(s - (double)y[b * ys + (size_t)r]) / (6.0 * sqrt(v) + 2e-5 * a + 1e-30);
            if (!(r_ <= worst)) worst = isnan(r_) ? INFINITY : r_;
        }
    }
    free(sxb);
    return worst;
}

static inline float *rand_x(size_t n, float scale) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = check_rand_normal() * scale;
    return x;
}

#endif
