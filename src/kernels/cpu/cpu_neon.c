/*
 * cpu_neon.c - AArch64 NEON kernels (armv8.2-a; the build enables dotprod):
 * ternary matmul for PQ2_0 / Q2_0 (g128) and Q2_0_G64 in fp32, the same
 * scheme as cpu_avx2.c: act_prep copies x and appends each block's sum(x), so
 * sum((q-1) x) = sum(q x) - sum(x) and 4 codes become floats with one
 * variable shift, an AND and a conversion. Up to 4 batch rows share an unpack.
 * Layout of a prepared row: [k floats x][k/qk floats sum(x) per block].
 */
#include "kernels/cpu/internal.h"

#include <arm_neon.h>

static size_t act_bytes128(int64_t k) { return (size_t)k * 4 + (size_t)(k / 128) * 4; }
static size_t act_bytes64(int64_t k) { return (size_t)k * 4 + (size_t)(k / 64) * 4; }

static inline __attribute__((always_inline)) void prep_qk(const float *x, int64_t k, void *act, int qk) {
    float *o = act, *sums = o + k;
    memcpy(o, x, (size_t)k * 4);
    for (int64_t b = 0; b < k / qk; b++) {
        float32x4_t s = vdupq_n_f32(0);
        for (int j = 0; j < qk; j += 4) s = vaddq_f32(s, vld1q_f32(x + b * qk + j));
        sums[b] = vaddvq_f32(s);
    }
}
static void prep128(const float *x, int64_t k, void *act) { prep_qk(x, k, act, 128); }
static void prep64(const float *x, int64_t k, void *act) { prep_qk(x, k, act, 64); }

static inline __attribute__((always_inline)) void rows_qk(const tern_qmat *w, const void *act, size_t act_stride,
                                                          size_t batch, float *y, size_t ys, int64_t r0,
                                                          int64_t r1, int qk) {
    const int64_t k = w->k, nb = k / qk;
    const size_t bb = TERN_BLOCK_QS + (size_t)qk / 4;
    const int32_t shv[4] = {0, -2, -4, -6};  /* vshlq with negative counts shifts right */
    const int32x4_t sh = vld1q_s32(shv);
    const uint32x4_t m3 = vdupq_n_u32(3);
    for (size_t b0 = 0; b0 < batch; b0 += 4) {
        int nbt = batch - b0 < 4 ? (int)(batch - b0) : 4;
        const float *xs[4];
        for (int b = 0; b < 4; b++) xs[b] = (const float *)((const uint8_t *)act + (b0 + (size_t)(b < nbt ? b : 0)) * act_stride);
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *row = w->data + (size_t)r * w->row_bytes;
            float32x4_t Y[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
            float corr[4] = {0, 0, 0, 0};
            for (int64_t i = 0; i < nb; i++) {
                const uint8_t *blk = row + (size_t)i * bb;
                float d = tern_f16_table[tern_rd16(blk)];
                float32x4_t acc[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
                for (int j = 0; j < qk; j += 4) {
                    uint32x4_t v = vdupq_n_u32(blk[2 + j / 4]);
                    float32x4_t c = vcvtq_f32_u32(vandq_u32(vshlq_u32(v, sh), m3));
#pragma GCC unroll 4
                    for (int b = 0; b < 4; b++)
                        if (b < nbt) acc[b] = vfmaq_f32(acc[b], c, vld1q_f32(xs[b] + i * qk + j));
                }
#pragma GCC unroll 4
                for (int b = 0; b < 4; b++)
                    if (b < nbt) {
                        Y[b] = vfmaq_n_f32(Y[b], acc[b], d);
                        corr[b] += d * xs[b][k + i];
                    }
            }
            for (int b = 0; b < nbt; b++) y[(b0 + (size_t)b) * ys + (size_t)r] = vaddvq_f32(Y[b]) - corr[b];
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

void tern_neon_fill(tern_kern_table *t) {
    tern_mm_ops g128 = {act_bytes128, prep128, rows128, 4, NULL, 0, 1, NULL, NULL};
    tern_mm_ops g64 = {act_bytes64, prep64, rows64, 4, NULL, 0, 1, NULL, NULL};
    t->mm[TERN_DT_PQ2_0] = g128;
    t->mm[TERN_DT_Q2_0] = g128;
    t->mm[TERN_DT_Q2_0_G64] = g64;
}
