/*
 * cpu_ops.h - the hot loops of the CPU back-end (GDN delta-rule recurrence of one
 * value head over a chunk, causal attention of one head), written once and
 * compiled three times: backend_cpu.c (baseline), cpu_ops_avx2.c and
 * cpu_ops_avx512.c (own ISA flags, see CMakeLists.txt). backend_cpu.c picks the
 * variant matching tern_kernels_isa() once. Include after defining TM_SFX.
 *
 * Summation order is fixed (16 partial sums for dot products), so every variant
 * computes the same sums; results differ only by FMA contraction.
 */
#include "model/backend.h"

#include <math.h>
#include <string.h>

#define TM_CAT2(a, b) a##b
#define TM_CAT(a, b) TM_CAT2(a, b)
#define TM_FN(name) TM_CAT(name, TM_SFX)

void TM_FN(tm_gdn_head)(const tm_gdn_args *a, int conv_ch, int p);
void TM_FN(tm_attn_head)(const tm_attn_args *a, int h);

#ifndef TM_V16_DEFINED
#define TM_V16_DEFINED
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi" /* static inline helpers only: no ABI crosses */
#endif
/* 16 floats as a GCC/clang vector: each ISA build lowers it to its widest registers. */
typedef float tm_v16 __attribute__((vector_size(64)));
static inline tm_v16 tm_v16_load(const float *p) { tm_v16 v; memcpy(&v, p, sizeof v); return v; }
static inline void tm_v16_store(float *p, tm_v16 v) { memcpy(p, &v, sizeof v); }
static inline tm_v16 tm_v16_set1(float x) { return (tm_v16){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }
#endif

static inline float TM_FN(silu_)(float x) { return x / (1.0f + expf(-x)); }

static inline float TM_FN(dot_)(const float *restrict x, const float *restrict y, int n) {
    tm_v16 acc = tm_v16_set1(0.0f);
    int j = 0;
    for (; j + 16 <= n; j += 16) acc += tm_v16_load(x + j) * tm_v16_load(y + j);
    float s = 0;
    for (; j < n; j++) s += x[j] * y[j];
    for (int u = 0; u < 16; u++) s += acc[u];
    return s;
}

/* One value head p over the chunk's rows: a->work holds conv+SiLU'd q|k|v rows with
 * q, k already L2-normalised (q also scaled).
 *
 * The state is kept as S_true = pd * S + pk pdl^T with the last token's rank-1
 * update pending (pd = decay, pk = k, pdl = delta; all zero = empty state), so a
 * token costs one read+write pass over S instead of two:
 *   pass:   S <- pd*S + pk pdl^T (= S_true);  kv = S_true^T k;  sq = S_true^T q
 *   delta = (v - decay*kv) * beta;  o = decay*sq + (k.q) delta
 *   pending <- (decay, k, delta)
 * which is HF's S = S*g; delta = (v - S^T k) beta; S += k delta^T; o = S^T q. */
void TM_FN(tm_gdn_head)(const tm_gdn_args *a, int conv_ch, int p) {
    const int dk = a->dk, dv = a->dv, C = conv_ch, nv = a->n_v, nk = a->n_k;
    const int r = nv / nk;
    const int kh = a->v_tiled ? p % nk : p / r;
    float *restrict S = a->state + (size_t)p * dk * dv;
    float *restrict pend = a->pending + (size_t)p * (1 + dk + dv);
    float *restrict pk = pend + 1, *restrict pdl = pend + 1 + dk;
    float kv[512] __attribute__((aligned(64))), sq[512] __attribute__((aligned(64)));
    float o[512] __attribute__((aligned(64)));
    for (int t = 0; t < a->rows; t++) {
        const float *row = a->work + (size_t)t * C;
        const float *q = row + (size_t)kh * dk;
        const float *k = row + (size_t)nk * dk + (size_t)kh * dk;
        const float *v = row + (size_t)2 * nk * dk + (size_t)p * dv;
        float x = a->a[(size_t)t * nv + p] + a->dt_bias[p];
        float sp = x > 20.0f ? x : log1pf(expf(x));
        const float decay = expf(a->ssm_a[p] * sp);
        const float beta = 1.0f / (1.0f + expf(-a->b[(size_t)t * nv + p]));
        const float pd = pend[0];
        for (int j = 0; j < dv; j++) kv[j] = sq[j] = 0;
        if (dv % 16 == 0) {
            /* 16-wide vector extension (zmm / 2 ymm / 4 xmm per ISA build) */
            const int nb = dv / 16;
            const tm_v16 pdv = tm_v16_set1(pd);
            for (int i = 0; i < dk; i++) {
                float *Si = S + (size_t)i * dv;
                const tm_v16 ai = tm_v16_set1(pk[i]), ki = tm_v16_set1(k[i]),
                             qi = tm_v16_set1(q[i]);
                for (int jb = 0; jb < nb; jb++) {
                    tm_v16 sv = tm_v16_load(Si + 16 * jb) * pdv + ai * tm_v16_load(pdl + 16 * jb);
                    tm_v16_store(Si + 16 * jb, sv);
                    tm_v16_store(kv + 16 * jb, tm_v16_load(kv + 16 * jb) + sv * ki);
                    tm_v16_store(sq + 16 * jb, tm_v16_load(sq + 16 * jb) + sv * qi);
                }
            }
        } else {
            for (int i = 0; i < dk; i++) {
                float *restrict Si = S + (size_t)i * dv;
                const float ai = pk[i], ki = k[i], qi = q[i];
                for (int j = 0; j < dv; j++) {
                    float sv = Si[j] * pd + ai * pdl[j];
                    Si[j] = sv;
                    kv[j] += sv * ki;
                    sq[j] += sv * qi;
                }
            }
        }
        const float kq = TM_FN(dot_)(k, q, dk);
        for (int j = 0; j < dv; j++) {
            float d = (v[j] - decay * kv[j]) * beta;
            pdl[j] = d;
            o[j] = decay * sq[j] + kq * d;
        }
        pend[0] = decay;
        for (int i = 0; i < dk; i++) pk[i] = k[i];
        /* gated RMSNorm: rmsnorm(o) * norm * silu(z) */
        float ss = TM_FN(dot_)(o, o, dv);
        const float inv = 1.0f / sqrtf(ss / (float)dv + a->eps);
        const float *z = a->z + (size_t)t * nv * dv + (size_t)p * dv;
        float *out = a->out + (size_t)t * nv * dv + (size_t)p * dv;
        for (int j = 0; j < dv; j++) out[j] = o[j] * inv * a->norm[j] * TM_FN(silu_)(z[j]);
    }
}

/* Causal softmax attention of query head h for every row of the chunk. */
void TM_FN(tm_attn_head)(const tm_attn_args *a, int h) {
    const int group = a->n_head / a->n_head_kv, kvh = h / group, hd = a->head_dim;
    const size_t kvw = (size_t)a->n_head_kv * hd;
    float *sc = a->scratch + (size_t)h * (a->pos0 + a->rows);
    for (int i = 0; i < a->rows; i++) {
        const float *q = a->q + i * a->q_stride + (size_t)h * hd;
        const int np = a->pos0 + i + 1;
        float mx = -INFINITY;
        for (int p = 0; p < np; p++) {
            float s = TM_FN(dot_)(q, a->kcache + p * kvw + (size_t)kvh * hd, hd) * a->scale;
            sc[p] = s;
            if (s > mx) mx = s;
        }
        float sum = 0;
        for (int p = 0; p < np; p++) {
            sc[p] = expf(sc[p] - mx);
            sum += sc[p];
        }
        const float inv = 1.0f / sum;
        float *restrict o = a->out + (size_t)i * a->n_head * hd + (size_t)h * hd;
        for (int j = 0; j < hd; j++) o[j] = 0;
        for (int p = 0; p < np; p++) {
            const float *restrict v = a->vcache + p * kvw + (size_t)kvh * hd;
            const float w = sc[p] * inv;
            int j = 0;
            const tm_v16 wv = tm_v16_set1(w);
            for (; j + 16 <= hd; j += 16)
                tm_v16_store(o + j, tm_v16_load(o + j) + wv * tm_v16_load(v + j));
            for (; j < hd; j++) o[j] += w * v[j];
        }
    }
}
