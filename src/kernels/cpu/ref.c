/*
 * ref.c - the scalar reference of every CPU kernel: always compiled, the
 * fallback on any CPU and the oracle the ISA variants are tested against.
 * Plain C, fp32 accumulation, no tricks.
 *
 * Formats spoken (see kernels.h / core/blocks.h):
 *   PQ2_0 / Q2_0  : 34 B per 128 weights, fp16 d then codes, element j at byte
 *                   j/4 bits 2*(j%4), value (code-1)*d.
 *   Q2_0_G64      : 18 B per 64 weights, same rule.
 *   Q1_0          : 18 B per 128 weights, fp16 d then bits, bit j%8 of byte j/8:
 *                   1 -> +d, 0 -> -d.
 *   F32/F16/BF16  : dense rows.
 */
#include "kernels/cpu/internal.h"

#include <math.h>

float tern_f16_table[65536];

/* Dot product of one row of W with one fp32 vector x (k values). */
static float ref_dot_row(const tern_qmat *w, const uint8_t *row, const float *x) {
    int64_t k = w->k;
    float acc = 0.0f;
    switch (w->type) {
    case TERN_DT_PQ2_0:
    case TERN_DT_Q2_0:
    case TERN_DT_Q2_0_G64: {
        int64_t qk = w->type == TERN_DT_Q2_0_G64 ? 64 : 128;
        size_t bb = TERN_BLOCK_QS + (size_t)qk / 4;
        for (int64_t b = 0; b < k / qk; b++) {
            const uint8_t *blk = row + (size_t)b * bb;
            float d = tern_f16_to_f32(tern_rd16(blk));
            const uint8_t *qs = blk + TERN_BLOCK_QS;
            const float *xb = x + b * qk;
            float s = 0.0f;
            for (int64_t j = 0; j < qk; j++) {
                int code = (qs[j / 4] >> (2 * (j % 4))) & 3;
                s += (float)(code - 1) * xb[j];
            }
            acc += d * s;
        }
        break;
    }
    case TERN_DT_Q1_0: {
        for (int64_t b = 0; b < k / 128; b++) {
            const uint8_t *blk = row + (size_t)b * TERN_Q1_0_BYTES;
            float d = tern_f16_to_f32(tern_rd16(blk));
            const uint8_t *qs = blk + TERN_BLOCK_QS;
            const float *xb = x + b * 128;
            float s = 0.0f;
            for (int j = 0; j < 128; j++) s += ((qs[j / 8] >> (j % 8)) & 1) ? xb[j] : -xb[j];
            acc += d * s;
        }
        break;
    }
    case TERN_DT_F32: {
        for (int64_t j = 0; j < k; j++) {
            float v;
            memcpy(&v, row + 4 * j, 4);
            acc += v * x[j];
        }
        break;
    }
    case TERN_DT_F16:
        for (int64_t j = 0; j < k; j++) acc += tern_f16_to_f32(tern_rd16(row + 2 * j)) * x[j];
        break;
    case TERN_DT_BF16:
        for (int64_t j = 0; j < k; j++) acc += tern_bf16_to_f32(tern_rd16(row + 2 * j)) * x[j];
        break;
    default:
        TERN_ASSERT(!"unsupported matrix type reached a kernel");
    }
    return acc;
}

/* File layout -> TERN_LAYOUT_R16 (kernels.h), groups [g0, g1). */
/* Q1_0: file bytes 4v..4v+3 as a little-endian word hold elements 32v + f at bit f;
 * lane byte j bit t takes element 32v + 4t + j. */
static void ref_repack_r16q1(const tern_qmat *w, uint8_t *buf, int64_t g0, int64_t g1) {
    const size_t rb = (size_t)w->k / 128 * TERN_Q1_0_BYTES;
    const int64_t nb = w->k / 128;
    for (int64_t g = g0; g < g1; g++)
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *o = buf + (size_t)g * 16 * rb + (size_t)b * TERN_R16Q1_BLOCK_BYTES;
            for (int L = 0; L < 16; L++) {
                int64_t r = g * 16 + L;
                if (r >= w->n) { /* padding row: scale 0 (the bits do not matter) */
                    memset(o + 2 * L, 0, 2);
                    for (int v = 0; v < 4; v++) memset(o + tern_r16q1_byte(L, 32 * v), 0, 4);
                    continue;
                }
                const uint8_t *blk = w->data + (size_t)r * w->row_bytes + (size_t)b * TERN_Q1_0_BYTES;
                memcpy(o + 2 * L, blk, 2);
                for (int v = 0; v < 4; v++) {
                    uint32_t x = tern_rd32(blk + TERN_BLOCK_QS + 4 * v), y = 0;
                    for (int j = 0; j < 4; j++)
                        for (int t = 0; t < 8; t++) y |= ((x >> (4 * t + j)) & 1u) << (8 * j + t);
                    memcpy(o + tern_r16q1_byte(L, 32 * v), &y, 4);
                }
            }
        }
}

void tern_ref_repack_r16(const tern_qmat *w, uint8_t *buf, int64_t g0, int64_t g1) {
    if (w->type == TERN_DT_Q1_0) { ref_repack_r16q1(w, buf, g0, g1); return; }
    const size_t rb = (size_t)w->k / 128 * TERN_PQ2_0_BYTES;
    const int64_t nb = w->k / 128;
    for (int64_t g = g0; g < g1; g++)
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *o = buf + (size_t)g * 16 * rb + (size_t)b * TERN_R16_BLOCK_BYTES;
            for (int L = 0; L < 16; L++) {
                int64_t r = g * 16 + L;
                if (r >= w->n) { /* padding row: scale 0, codes 1 (zero weights) */
                    memset(o + 2 * L, 0, 2);
                    for (int v = 0; v < 8; v++) memset(o + tern_r16_byte(L, 16 * v), 0x55, 4);
                    continue;
                }
                const uint8_t *blk = w->data + (size_t)r * w->row_bytes + (size_t)b * TERN_PQ2_0_BYTES;
                memcpy(o + 2 * L, blk, 2);
                /* file bytes 4v..4v+3 (elements 16v..16v+15, element 4q+t at byte q field t)
                 * -> lane bytes j = 0..3 holding elements 16v + 4s + j in field s: a
                 * transpose of the 4 x 4 matrix of 2-bit fields (two delta swaps) */
                for (int v = 0; v < 8; v++) {
                    uint32_t x = tern_rd32(blk + TERN_BLOCK_QS + 4 * v), t;
                    t = ((x >> 6) ^ x) & 0x00CC00CCu;
                    x ^= t ^ (t << 6);
                    t = ((x >> 12) ^ x) & 0x0000F0F0u;
                    x ^= t ^ (t << 12);
                    memcpy(o + tern_r16_byte(L, 16 * v), &x, 4);
                }
            }
        }
}

/* The same product for a TERN_LAYOUT_R16 matrix. */
static float ref_dot_r16(const tern_qmat *w, int64_t r, const float *x) {
    float acc = 0.0f;
    if (w->type == TERN_DT_Q1_0) {
        for (int64_t b = 0; b < w->k / 128; b++) {
            float d = tern_f16_to_f32(tern_r16q1_scale(w, r, b));
            const float *xb = x + b * 128;
            float s = 0.0f;
            for (int j = 0; j < 128; j++) s += tern_r16q1_bit(w, r, b, j) ? xb[j] : -xb[j];
            acc += d * s;
        }
        return acc;
    }
    for (int64_t b = 0; b < w->k / 128; b++) {
        float d = tern_f16_to_f32(tern_r16_scale(w, r, b));
        const float *xb = x + b * 128;
        float s = 0.0f;
        for (int j = 0; j < 128; j++) {
            int code = tern_r16_code(w, r, b, j);
            s += (float)(code - 1) * xb[j];
        }
        acc += d * s;
    }
    return acc;
}

void tern_ref_rows(const tern_qmat *w, const void *act, size_t act_stride, size_t batch,
                   float *y, size_t y_stride, int64_t r0, int64_t r1) {
    if (w->layout == TERN_LAYOUT_R16) {
        for (int64_t r = r0; r < r1; r++)
            for (size_t b = 0; b < batch; b++)
                y[b * y_stride + (size_t)r] =
                    ref_dot_r16(w, r, (const float *)((const uint8_t *)act + b * act_stride));
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = w->data + (size_t)r * w->row_bytes;
        for (size_t b = 0; b < batch; b++) {
            const float *x = (const float *)((const uint8_t *)act + b * act_stride);
            y[b * y_stride + (size_t)r] = ref_dot_row(w, row, x);
        }
    }
}

/* In-place unnormalised Walsh-Hadamard transform (Sylvester order) of n = 2^m floats. */
static void ref_fwht_block(float *x, size_t n) {
    for (size_t h = 1; h < n; h <<= 1)
        for (size_t i = 0; i < n; i += 2 * h)
            for (size_t j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
}

void tern_ref_fwht(float *x, size_t n, size_t block, const float *signs, bool inverse) {
    float scale = 1.0f / sqrtf((float)block);
    if (!inverse && signs)
        for (size_t i = 0; i < n; i++) x[i] *= signs[i];
    for (size_t o = 0; o < n; o += block) ref_fwht_block(x + o, block);
    for (size_t i = 0; i < n; i++) x[i] *= scale;
    if (inverse && signs)
        for (size_t i = 0; i < n; i++) x[i] *= signs[i];
}

void tern_ref_addnorm(float *r, const float *d, const float *gain, float eps, float *normed,
                      float *rotated, size_t n, size_t block, const float *signs) {
    if (d)
        for (size_t i = 0; i < n; i++) r[i] += d[i];
    double ss = 0.0;
    for (size_t i = 0; i < n; i++) ss += (double)r[i] * r[i];
    float inv = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    bool rot = rotated && signs;
    float *out = normed ? normed : (rot ? rotated : NULL);
    if (!out) return;
    for (size_t i = 0; i < n; i++) out[i] = r[i] * inv * (gain ? gain[i] : 1.0f);
    if (rot) {
        if (rotated != out) memcpy(rotated, out, n * sizeof(float));
        tern_ref_fwht(rotated, n, block, signs, false);
    }
}

void tern_ref_swiglu(const float *gate, const float *up, float *out, size_t n, size_t block,
                     const float *signs) {
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
    if (signs) tern_ref_fwht(out, n, block, signs, false);
}

void tern_ref_fill(tern_kern_table *t) {
    memset(t, 0, sizeof *t);
    t->isa = TERN_ISA_SCALAR;
    for (int i = 0; i < TERN_DT_COUNT; i++) {
        t->mm[i].act_bytes = NULL;
        t->mm[i].act_prep = NULL;
        t->mm[i].rows = tern_ref_rows;
        t->mm[i].row_tile = 1;
    }
    t->mm_r16 = t->mm[TERN_DT_PQ2_0];
    t->mm_r16q1 = t->mm[TERN_DT_PQ2_0];
    t->repack_r16 = tern_ref_repack_r16;
    t->fwht = tern_ref_fwht;
    t->addnorm = tern_ref_addnorm;
    t->swiglu = tern_ref_swiglu;
}
