/*
 * cpu_neon_i8mm.c - AArch64 int8 matrix-multiply (FEAT_I8MM, HWCAP2_I8MM) GEMV
 * for PQ2_0 / Q2_0 (g128) and Q2_0_G64, the "i8mm" kernel level (dispatch.c:
 * the neon level plus this file's products).
 *
 * SMMLA (vmmlaq_s32) multiplies a 2x8 by an 8x2 signed byte matrix into a 2x2
 * int32 tile. Here the 2x8 operand is 8 codes of each of two weight rows and
 * the 8x2 one the same 8 inputs' hi and lo activation bytes, so one SMMLA gives
 * [row0.hi, row0.lo, row1.hi, row1.lo]: 32 multiply-adds, twice SDOT's 16, and
 * the 14-bit activation's two planes need no second pass. Same activation
 * precision as the SDOT and AVX-512 kernels: per block of qk inputs one scale
 * sx = max|x| / 16256, x_q = round(x / sx) = 128*hi + lo. Codes stay 0..2
 * (field s of code byte p = element 4p+s): the two rows' 16-byte code vectors
 * are interleaved by 64-bit halves (ZIP1/ZIP2) once, then each field is one
 * shift and one AND of that; sum((c-1) x) = sum(c x) - sum(x), the block's
 * -sum(x_q) seeds the lo lanes. Per block and batch row: T = 128*H + L per row
 * (one multiply by [128,1,128,1] and a pairwise add), converted and FMAed with
 * [d0, d1] * sx. Exact integer sums (|T| < 2^22).
 *
 * Prepared activation row (mm_layout): per block, for raw code vector j < qk/64,
 * field s, half h: 16 bytes = hi of positions p = 8h..8h+7 (elements
 * 64j + 4p + s), then lo of the same; then [nb x int32 -sum(x_q)][nb x float sx].
 */
#include "kernels/cpu/internal.h"

#include <arm_neon.h>
#include <math.h>

static size_t mm_bytes(int64_t k, int qk) { return (size_t)k * 2 + (size_t)(k / qk) * 8; }
static size_t mm_bytes128(int64_t k) { return mm_bytes(k, 128); }
static size_t mm_bytes64(int64_t k) { return mm_bytes(k, 64); }

static inline __attribute__((always_inline)) void mm_prep(const float *x, int64_t k, void *act, int qk) {
    const int64_t nb = k / qk;
    int8_t *q8 = act;
    int32_t *corr = (int32_t *)(q8 + (size_t)nb * (size_t)qk * 2);
    float *sxs = (float *)(corr + nb);
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + b * qk;
        float32x4_t mx = vdupq_n_f32(0);
        for (int e = 0; e < qk; e += 4) mx = vmaxq_f32(mx, vabsq_f32(vld1q_f32(xb + e)));
        float amax = vmaxvq_f32(mx);
        float sx = amax / 16256.0f, inv = amax > 0 ? 16256.0f / amax : 0.0f;
        if (!isfinite(inv) || !(sx > 0)) { sx = 0; inv = 0; }
        int8_t *o = q8 + (size_t)b * (size_t)qk * 2;
        int32_t sum = 0;
        for (int e = 0; e < qk; e++) {
            int32_t q = (int32_t)lrintf(xb[e] * inv);
            if (q > 16256) q = 16256;
            if (q < -16256) q = -16256;
            int32_t hi = (q + 64) >> 7, lo = q - 128 * hi;
            int j = e / 64, p = (e % 64) / 4, s = e % 4, h = p / 8;
            int8_t *u = o + (((j * 4 + s) * 2 + h) * 16);
            u[p % 8] = (int8_t)hi;
            u[8 + p % 8] = (int8_t)lo;
            sum += q;
        }
        corr[b] = -sum;
        sxs[b] = sx;
    }
}
static void mm_prep128(const float *x, int64_t k, void *act) { mm_prep(x, k, act, 128); }
static void mm_prep64(const float *x, int64_t k, void *act) { mm_prep(x, k, act, 64); }

#define MM_NB 2
/* Rows row0, row1 (may be the same row) x nbt (1..MM_NB) batch rows -> out[n][0..1]. */
static inline __attribute__((always_inline)) void mm_pair(const uint8_t *row0, const uint8_t *row1, int64_t nb,
                                                          const int8_t *const *acts, int nbt, float (*out)[2],
                                                          int qk) {
    const size_t bb = TERN_BLOCK_QS + (size_t)qk / 4, ab = (size_t)qk * 2;
    const int nj = qk / 64;
    const uint8x16_t m3 = vdupq_n_u8(3);
    const int32_t kv[4] = {128, 1, 128, 1}, lov[4] = {0, -1, 0, -1};
    const int32x4_t k128 = vld1q_s32(kv), lomask = vld1q_s32(lov);
    const int32_t *corr[MM_NB];
    const float *sxs[MM_NB];
    float32x4_t F[MM_NB];
    for (int n = 0; n < MM_NB; n++) {
        F[n] = vdupq_n_f32(0);
        corr[n] = (const int32_t *)(acts[n < nbt ? n : 0] + (size_t)nb * ab);
        sxs[n] = (const float *)(corr[n] + nb);
    }
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *b0 = row0 + (size_t)i * bb, *b1 = row1 + (size_t)i * bb;
        const float dv[4] = {tern_f16_table[tern_rd16(b0)], tern_f16_table[tern_rd16(b1)], 0.0f, 0.0f};
        const float32x4_t dd = vld1q_f32(dv);
        int8x16_t C[2][4][2];
#pragma GCC unroll 2
        for (int j = 0; j < nj; j++) {
            uint64x2_t r0 = vreinterpretq_u64_u8(vld1q_u8(b0 + TERN_BLOCK_QS + 16 * j));
            uint64x2_t r1 = vreinterpretq_u64_u8(vld1q_u8(b1 + TERN_BLOCK_QS + 16 * j));
            uint8x16_t z[2] = {vreinterpretq_u8_u64(vzip1q_u64(r0, r1)), vreinterpretq_u8_u64(vzip2q_u64(r0, r1))};
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                C[j][0][h] = vreinterpretq_s8_u8(vandq_u8(z[h], m3));
                C[j][1][h] = vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(z[h], 2), m3));
                C[j][2][h] = vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(z[h], 4), m3));
                C[j][3][h] = vreinterpretq_s8_u8(vshrq_n_u8(z[h], 6));
            }
        }
#pragma GCC unroll 2
        for (int n = 0; n < MM_NB; n++) {
            if (n >= nbt) break;
            const int8_t *a = acts[n] + (size_t)i * ab;
            int32x4_t A0 = vandq_s32(vdupq_n_s32(corr[n][i]), lomask), A1 = vdupq_n_s32(0);
#pragma GCC unroll 2
            for (int j = 0; j < nj; j++)
#pragma GCC unroll 4
                for (int s = 0; s < 4; s++) {
                    const int8_t *u = a + ((j * 4 + s) * 2) * 16;
                    A0 = vmmlaq_s32(A0, C[j][s][0], vld1q_s8(u));
                    A1 = vmmlaq_s32(A1, C[j][s][1], vld1q_s8(u + 16));
                }
            int32x4_t m = vmulq_s32(vaddq_s32(A0, A1), k128);
            float32x4_t t = vcvtq_f32_s32(vpaddq_s32(m, m)); /* [T0, T1, T0, T1] */
            F[n] = vfmaq_f32(F[n], t, vmulq_n_f32(dd, sxs[n][i]));
        }
    }
    for (int n = 0; n < nbt; n++) {
        out[n][0] = vgetq_lane_f32(F[n], 0);
        out[n][1] = vgetq_lane_f32(F[n], 1);
    }
}

static inline __attribute__((always_inline)) void mm_rows_qk(const tern_qmat *w, const void *act, size_t as,
                                                             size_t batch, float *y, size_t ys, int64_t r0,
                                                             int64_t r1, int qk) {
    const int64_t nb = w->k / qk;
    for (int64_t r = r0; r < r1; r += 2) {
        bool two = r + 1 < r1;
        const uint8_t *row0 = w->data + (size_t)r * w->row_bytes;
        const uint8_t *row1 = two ? row0 + w->row_bytes : row0;
        for (size_t b0 = 0; b0 < batch; b0 += MM_NB) {
            int nbt = batch - b0 < MM_NB ? (int)(batch - b0) : MM_NB;
            const int8_t *acts[MM_NB];
            for (int n = 0; n < nbt; n++) acts[n] = (const int8_t *)act + (b0 + (size_t)n) * as;
            float out[MM_NB][2];
            if (nbt == 2) mm_pair(row0, row1, nb, acts, 2, out, qk);
            else mm_pair(row0, row1, nb, acts, 1, out, qk);
            for (int n = 0; n < nbt; n++) {
                y[(b0 + (size_t)n) * ys + (size_t)r] = out[n][0];
                if (two) y[(b0 + (size_t)n) * ys + (size_t)r + 1] = out[n][1];
            }
        }
    }
}
static void mm_rows128(const tern_qmat *w, const void *act, size_t as, size_t batch, float *y, size_t ys,
                       int64_t r0, int64_t r1) {
    mm_rows_qk(w, act, as, batch, y, ys, r0, r1, 128);
}
static void mm_rows64(const tern_qmat *w, const void *act, size_t as, size_t batch, float *y, size_t ys,
                      int64_t r0, int64_t r1) {
    mm_rows_qk(w, act, as, batch, y, ys, r0, r1, 64);
}

void tern_neon_i8mm_fill(tern_kern_table *t) {
    tern_mm_ops m128 = {mm_bytes128, mm_prep128, mm_rows128, 4, NULL, 0, 1, NULL, NULL};
    tern_mm_ops m64 = {mm_bytes64, mm_prep64, mm_rows64, 4, NULL, 0, 1, NULL, NULL};
    t->mm[TERN_DT_PQ2_0] = m128;
    t->mm[TERN_DT_Q2_0] = m128;
    t->mm[TERN_DT_Q2_0_G64] = m64;
}
