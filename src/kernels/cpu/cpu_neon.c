/*
 * cpu_neon.c - AArch64 NEON kernels (armv8.2-a; the build enables dotprod):
 * ternary matmul for PQ2_0 / Q2_0 (g128) and Q2_0_G64 in int8 (SDOT, below; Q1_0
 * too) or, with tern_kernels_set_neon_fp32 (a lab knob), in fp32, the same
 * scheme as cpu_avx2.c: act_prep copies x and appends each block's sum(x), so
 * sum((q-1) x) = sum(q x) - sum(x) and 4 codes become floats with one
 * variable shift, an AND and a conversion. Up to 4 batch rows share an unpack.
 * Layout of a prepared row: [k floats x][k/qk floats sum(x) per block].
 */
#include "kernels/cpu/internal.h"

#include <arm_neon.h>
#include <math.h>
#include <stdlib.h>

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

/* ------------------------------------------------------- int8 SDOT path
 * (armv8.2 dotprod, HWCAP_ASIMDDP: the NEON level requires it.) Same
 * activation precision as the AVX-512 kernels: per block of qk inputs one
 * scale sx = max|x| / 16256, x_q = round(x / sx) = 128*hi + lo (hi in
 * [-127,127], lo in [-64,63], signed bytes). Codes stay 0..2 (field s of code
 * byte p = element 4p+s: one shift and one AND per 16 bytes and field, no
 * unpacking) and SDOT multiplies them as signed bytes; sum((c-1) x) =
 * sum(c x) - sum(x), the block's -sum(x_q) seeds the lo accumulator. Per
 * block T = L + (H << 7), exact in int32 (|T| < 2^22), converted and FMAed
 * with d * sx. Layout of a prepared row (dot_layout):
 *   [nb x 2qk B: for raw vector j < qk/64, field s: 16 B hi, 16 B lo]
 *   [nb x int32 -sum(x_q)][nb x float sx]                                   */
static size_t dot_bytes(int64_t k, int qk) { return (size_t)k * 2 + (size_t)(k / qk) * 8; }
static size_t dot_bytes128(int64_t k) { return dot_bytes(k, 128); }
static size_t dot_bytes64(int64_t k) { return dot_bytes(k, 64); }

static inline __attribute__((always_inline)) void dot_prep(const float *x, int64_t k, void *act, int qk) {
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
            int j = e / 64, p = (e % 64) / 4, f = e % 4;
            o[(4 * j + f) * 32 + p] = (int8_t)hi;
            o[(4 * j + f) * 32 + 16 + p] = (int8_t)lo;
            sum += q;
        }
        corr[b] = -sum;
        sxs[b] = sx;
    }
}
static void dot_prep128(const float *x, int64_t k, void *act) { dot_prep(x, k, act, 128); }
static void dot_prep64(const float *x, int64_t k, void *act) { dot_prep(x, k, act, 64); }

#define DOT_NB 4
static inline __attribute__((always_inline)) void dot_row(const uint8_t *row, int64_t nb, const int8_t *const *acts,
                                                          int nbt, float *out, int qk) {
    const size_t bb = TERN_BLOCK_QS + (size_t)qk / 4, ab = (size_t)qk * 2;
    const int nv = qk / 16; /* code vectors per block: 4 fields x qk/64 raw vectors */
    const uint8x16_t m3 = vdupq_n_u8(3);
    const int32_t *corr[DOT_NB];
    const float *sxs[DOT_NB];
    float32x4_t F[DOT_NB];
    for (int b = 0; b < DOT_NB; b++) {
        F[b] = vdupq_n_f32(0);
        corr[b] = (const int32_t *)(acts[b < nbt ? b : 0] + (size_t)nb * ab);
        sxs[b] = (const float *)(corr[b] + nb);
    }
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *blk = row + (size_t)i * bb;
        const float d = tern_f16_table[tern_rd16(blk)];
        int8x16_t C[8];
#pragma GCC unroll 2
        for (int j = 0; j < qk / 64; j++) {
            uint8x16_t raw = vld1q_u8(blk + TERN_BLOCK_QS + 16 * j);
            C[4 * j + 0] = vreinterpretq_s8_u8(vandq_u8(raw, m3));
            C[4 * j + 1] = vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(raw, 2), m3));
            C[4 * j + 2] = vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(raw, 4), m3));
            C[4 * j + 3] = vreinterpretq_s8_u8(vshrq_n_u8(raw, 6));
        }
#pragma GCC unroll 4
        for (int b = 0; b < DOT_NB; b++) {
            if (b >= nbt) break;
            const int8_t *a = acts[b] + (size_t)i * ab;
            int32x4_t H0 = vdupq_n_s32(0), H1 = H0, L1 = H0;
            int32x4_t L0 = vsetq_lane_s32(corr[b][i], H0, 0);
#pragma GCC unroll 8
            for (int v = 0; v < nv; v += 2) {
                H0 = vdotq_s32(H0, C[v], vld1q_s8(a + 32 * v));
                L0 = vdotq_s32(L0, C[v], vld1q_s8(a + 32 * v + 16));
                H1 = vdotq_s32(H1, C[v + 1], vld1q_s8(a + 32 * v + 32));
                L1 = vdotq_s32(L1, C[v + 1], vld1q_s8(a + 32 * v + 48));
            }
            int32x4_t T = vaddq_s32(vaddq_s32(L0, L1), vshlq_n_s32(vaddq_s32(H0, H1), 7));
            F[b] = vfmaq_n_f32(F[b], vcvtq_f32_s32(T), d * sxs[b][i]);
        }
    }
    for (int b = 0; b < nbt; b++) out[b] = vaddvq_f32(F[b]);
}

static inline __attribute__((always_inline)) void dot_rows_qk(const tern_qmat *w, const void *act, size_t as,
                                                              size_t batch, float *y, size_t ys, int64_t r0,
                                                              int64_t r1, int qk) {
    const int64_t nb = w->k / qk;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = w->data + (size_t)r * w->row_bytes;
        for (size_t b0 = 0; b0 < batch; b0 += DOT_NB) {
            int nbt = batch - b0 < DOT_NB ? (int)(batch - b0) : DOT_NB;
            const int8_t *acts[DOT_NB];
            for (int b = 0; b < nbt; b++) acts[b] = (const int8_t *)act + (b0 + (size_t)b) * as;
            float out[DOT_NB];
            switch (nbt) {
            case 1: dot_row(row, nb, acts, 1, out, qk); break;
            case 2: dot_row(row, nb, acts, 2, out, qk); break;
            case 3: dot_row(row, nb, acts, 3, out, qk); break;
            default: dot_row(row, nb, acts, 4, out, qk); break;
            }
            for (int b = 0; b < nbt; b++) y[(b0 + (size_t)b) * ys + (size_t)r] = out[b];
        }
    }
}
static void dot_rows128(const tern_qmat *w, const void *act, size_t as, size_t batch, float *y, size_t ys,
                        int64_t r0, int64_t r1) {
    dot_rows_qk(w, act, as, batch, y, ys, r0, r1, 128);
}
static void dot_rows64(const tern_qmat *w, const void *act, size_t as, size_t batch, float *y, size_t ys,
                       int64_t r0, int64_t r1) {
    dot_rows_qk(w, act, as, batch, y, ys, r0, r1, 64);
}

/* ------------------------------------------------------- Q1_0 on SDOT
 * 1-bit blocks (18 bytes: fp16 d, 16 bytes; element 8p+t = bit t of byte p,
 * 1 -> +d, 0 -> -d). Same 14-bit hi/lo activation as above. Field t of the 16
 * code bytes is one CMTST against 1<<t: bytes 0 or -1 (= -b, signed), so
 * SDOT sums -sum(b x) and sum((2b-1) x) = -2 * (-sum(b x)) - sum(x):
 * T = corr - 2 * (L + 128 H) with corr = -sum(x_q). Activation per block:
 * for field t: 16 B hi (byte p = element 8p+t), 16 B lo; then nb x int32
 * -sum(x_q), nb x float sx (dot_bytes128's size). */
static inline __attribute__((always_inline)) void q1_prep(const float *x, int64_t k, void *act) {
    const int64_t nb = k / 128;
    int8_t *q8 = act;
    int32_t *corr = (int32_t *)(q8 + (size_t)nb * 256);
    float *sxs = (float *)(corr + nb);
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + b * 128;
        float32x4_t mx = vdupq_n_f32(0);
        for (int e = 0; e < 128; e += 4) mx = vmaxq_f32(mx, vabsq_f32(vld1q_f32(xb + e)));
        float amax = vmaxvq_f32(mx);
        float sx = amax / 16256.0f, inv = amax > 0 ? 16256.0f / amax : 0.0f;
        if (!isfinite(inv) || !(sx > 0)) { sx = 0; inv = 0; }
        int8_t *o = q8 + (size_t)b * 256;
        int32_t sum = 0;
        for (int e = 0; e < 128; e++) {
            int32_t q = (int32_t)lrintf(xb[e] * inv);
            if (q > 16256) q = 16256;
            if (q < -16256) q = -16256;
            int32_t hi = (q + 64) >> 7, lo = q - 128 * hi;
            int p = e / 8, t = e % 8;
            o[32 * t + p] = (int8_t)hi;
            o[32 * t + 16 + p] = (int8_t)lo;
            sum += q;
        }
        corr[b] = -sum;
        sxs[b] = sx;
    }
}
static void q1_prep128(const float *x, int64_t k, void *act) { q1_prep(x, k, act); }

static inline __attribute__((always_inline)) void q1_row(const uint8_t *row, int64_t nb, const int8_t *const *acts,
                                                         int nbt, float *out) {
    const size_t bb = TERN_Q1_0_BYTES, ab = 256;
    const int32_t *corr[DOT_NB];
    const float *sxs[DOT_NB];
    float32x4_t F[DOT_NB];
    for (int b = 0; b < DOT_NB; b++) {
        F[b] = vdupq_n_f32(0);
        corr[b] = (const int32_t *)(acts[b < nbt ? b : 0] + (size_t)nb * ab);
        sxs[b] = (const float *)(corr[b] + nb);
    }
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *blk = row + (size_t)i * bb;
        const float d = tern_f16_table[tern_rd16(blk)];
        uint8x16_t raw = vld1q_u8(blk + TERN_BLOCK_QS);
        int8x16_t C[8];
#pragma GCC unroll 8
        for (int t = 0; t < 8; t++) C[t] = vreinterpretq_s8_u8(vtstq_u8(raw, vdupq_n_u8((uint8_t)(1u << t))));
#pragma GCC unroll 4
        for (int b = 0; b < DOT_NB; b++) {
            if (b >= nbt) break;
            const int8_t *a = acts[b] + (size_t)i * ab;
            int32x4_t H0 = vdupq_n_s32(0), H1 = H0, L0 = H0, L1 = H0;
#pragma GCC unroll 8
            for (int t = 0; t < 8; t += 2) {
                H0 = vdotq_s32(H0, C[t], vld1q_s8(a + 32 * t));
                L0 = vdotq_s32(L0, C[t], vld1q_s8(a + 32 * t + 16));
                H1 = vdotq_s32(H1, C[t + 1], vld1q_s8(a + 32 * t + 32));
                L1 = vdotq_s32(L1, C[t + 1], vld1q_s8(a + 32 * t + 48));
            }
            int32x4_t T = vaddq_s32(vaddq_s32(L0, L1), vshlq_n_s32(vaddq_s32(H0, H1), 7));
            int32_t tt = corr[b][i] - 2 * vaddvq_s32(T);
            F[b] = vfmaq_n_f32(F[b], vsetq_lane_f32((float)tt, vdupq_n_f32(0), 0), d * sxs[b][i]);
        }
    }
    for (int b = 0; b < nbt; b++) out[b] = vaddvq_f32(F[b]);
}

static void q1_rows128(const tern_qmat *w, const void *act, size_t as, size_t batch, float *y, size_t ys,
                       int64_t r0, int64_t r1) {
    const int64_t nb = w->k / 128;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = w->data + (size_t)r * w->row_bytes;
        for (size_t b0 = 0; b0 < batch; b0 += DOT_NB) {
            int nbt = batch - b0 < DOT_NB ? (int)(batch - b0) : DOT_NB;
            const int8_t *acts[DOT_NB];
            for (int b = 0; b < nbt; b++) acts[b] = (const int8_t *)act + (b0 + (size_t)b) * as;
            float out[DOT_NB];
            switch (nbt) {
            case 1: q1_row(row, nb, acts, 1, out); break;
            case 2: q1_row(row, nb, acts, 2, out); break;
            case 3: q1_row(row, nb, acts, 3, out); break;
            default: q1_row(row, nb, acts, 4, out); break;
            }
            for (int b = 0; b < nbt; b++) y[(b0 + (size_t)b) * ys + (size_t)r] = out[b];
        }
    }
}

void tern_neon_fill(tern_kern_table *t, bool fp32) {
    /* fp32 keeps the fp32 kernels (A/B on a real Arm machine) */
    if (!fp32) {
        tern_mm_ops d128 = {dot_bytes128, dot_prep128, dot_rows128, 4, NULL, 0, 1, NULL, NULL};
        tern_mm_ops d64 = {dot_bytes64, dot_prep64, dot_rows64, 4, NULL, 0, 1, NULL, NULL};
        t->mm[TERN_DT_PQ2_0] = d128;
        t->mm[TERN_DT_Q2_0] = d128;
        t->mm[TERN_DT_Q2_0_G64] = d64;
        tern_mm_ops q1 = {dot_bytes128, q1_prep128, q1_rows128, 4, NULL, 0, 1, NULL, NULL};
        t->mm[TERN_DT_Q1_0] = q1;
        return;
    }
    tern_mm_ops g128 = {act_bytes128, prep128, rows128, 4, NULL, 0, 1, NULL, NULL};
    tern_mm_ops g64 = {act_bytes64, prep64, rows64, 4, NULL, 0, 1, NULL, NULL};
    t->mm[TERN_DT_PQ2_0] = g128;
    t->mm[TERN_DT_Q2_0] = g128;
    t->mm[TERN_DT_Q2_0_G64] = g64;
}
