/*
 * cpu_avx2.c - AVX2 + FMA kernels (x86-64 without AVX-512): ternary matmul
 * for PQ2_0 / Q2_0 (g128) and Q2_0_G64 in fp32 (no activation quantisation,
 * so the error is fp32 rounding only).
 *
 * Codes are unsigned, so sum((q-1) x) = sum(q x) - sum(x): act_prep copies x
 * and stores each block's sum(x) after it; the kernel then turns 8 codes into
 * floats with one variable shift, an AND and a conversion, and FMAs them with
 * x. Up to 4 batch rows share one unpack. Layout of a prepared row:
 *   [k floats x][k/qk floats sum(x) per block]
 */
#include "kernels/cpu/internal.h"

#include <immintrin.h>

static size_t act_bytes128(int64_t k) { return (size_t)k * 4 + (size_t)(k / 128) * 4; }
static size_t act_bytes64(int64_t k) { return (size_t)k * 4 + (size_t)(k / 64) * 4; }

static inline __attribute__((always_inline)) void prep_qk(const float *x, int64_t k, void *act, int qk) {
    float *o = act, *sums = o + k;
    memcpy(o, x, (size_t)k * 4);
    for (int64_t b = 0; b < k / qk; b++) {
        __m256 s = _mm256_setzero_ps();
        for (int j = 0; j < qk; j += 8) s = _mm256_add_ps(s, _mm256_loadu_ps(x + b * qk + j));
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
        sums[b] = _mm_cvtss_f32(h);
    }
}
static void prep128(const float *x, int64_t k, void *act) { prep_qk(x, k, act, 128); }
static void prep64(const float *x, int64_t k, void *act) { prep_qk(x, k, act, 64); }

static inline float hsum8(__m256 s) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    return _mm_cvtss_f32(h);
}

static inline __attribute__((always_inline)) void rows_qk(const tern_qmat *w, const void *act, size_t act_stride,
                                                          size_t batch, float *y, size_t ys, int64_t r0,
                                                          int64_t r1, int qk) {
    const int64_t k = w->k, nb = k / qk;
    const size_t bb = TERN_BLOCK_QS + (size_t)qk / 4;
    const __m256i sh = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    const __m256i m3 = _mm256_set1_epi32(3);
    for (size_t b0 = 0; b0 < batch; b0 += 4) {
        int nbt = batch - b0 < 4 ? (int)(batch - b0) : 4;
        const float *xs[4];
        for (int b = 0; b < 4; b++) xs[b] = (const float *)((const uint8_t *)act + (b0 + (size_t)(b < nbt ? b : 0)) * act_stride);
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *row = w->data + (size_t)r * w->row_bytes;
            __m256 Y[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
            float corr[4] = {0, 0, 0, 0};
            for (int64_t i = 0; i < nb; i++) {
                const uint8_t *blk = row + (size_t)i * bb;
                float d = tern_f16_table[tern_rd16(blk)];
                __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
                for (int j = 0; j < qk; j += 8) {
                    __m256i v = _mm256_set1_epi32((int)tern_rd16(blk + TERN_BLOCK_QS + j / 4));
                    __m256 c = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(v, sh), m3));
#pragma GCC unroll 4
                    for (int b = 0; b < 4; b++)
                        if (b < nbt) acc[b] = _mm256_fmadd_ps(c, _mm256_loadu_ps(xs[b] + i * qk + j), acc[b]);
                }
                __m256 dv = _mm256_set1_ps(d);
#pragma GCC unroll 4
                for (int b = 0; b < 4; b++)
                    if (b < nbt) {
                        Y[b] = _mm256_fmadd_ps(acc[b], dv, Y[b]);
                        corr[b] += d * xs[b][k + i];
                    }
            }
            for (int b = 0; b < nbt; b++) y[(b0 + (size_t)b) * ys + (size_t)r] = hsum8(Y[b]) - corr[b];
        }
    }
}
static void rows128(const tern_qmat *w, const void *act, size_t as, size_t batch, float *y, size_t ys,
                    int64_t r0, int64_t r1) {
    rows_qk(w, act, as, batch, y, ys, r0, r1, 128);
}
static void rows64(const tern_qmat *w, const void *act, size_t as, size_t batch, float *y, size_t ys,
                   int64_t r0, int64_t r1) {
    rows_qk(w, act, as, batch, y, ys, r0, r1, 64);
}

void tern_avx2_fill(tern_kern_table *t) {
    tern_mm_ops g128 = {act_bytes128, prep128, rows128, 4, NULL, 0, 1, NULL, NULL};
    tern_mm_ops g64 = {act_bytes64, prep64, rows64, 4, NULL, 0, 1, NULL, NULL};
    t->mm[TERN_DT_PQ2_0] = g128;
    t->mm[TERN_DT_Q2_0] = g128;
    t->mm[TERN_DT_Q2_0_G64] = g64;
}
