/*
 * cpu_r16_avx512.c - AVX-512 (F/BW/VL/DQ + VNNI + VBMI) products on the 16-row
 * layout (TERN_LAYOUT_R16, kernels.h): the GEMV of ternary and Q1_0 matrices at
 * every batch size, and the repacks from the file layout. The file-layout kernels
 * are in cpu_avx512.c, the shared quantisation in avx512.h.
 */
#include "kernels/cpu/avx512.h"

#ifndef TERN_AVX512_PF16
#define TERN_AVX512_PF16 4096  /* prefetch distance of the 16-row layout GEMV (3072-6144 best of 0..32768, cold 1 thread) */
#endif

/* ------------------------------------------------- GEMV, 16-row layout
 * TERN_LAYOUT_R16 (kernels.h): per 16-row group and 128-input block, 8 vectors
 * of 64 bytes; lane L (4 bytes) of vector v holds row L's elements 16v + 4s + j
 * in field s (bits 2s) of byte j. So the four fields of a vector need no shift:
 * W & (3 << 2s) is 16 rows x 4 inputs as unsigned bytes code * 4^s, and one
 * vpdpbusd multiplies them by the 4 activation bytes 16v+4s.. broadcast from
 * memory ({1to16}, natural order). Each field keeps its own accumulator (hi
 * and lo planes: 8 per batch row), so the block's exact sum is
 * sum_s (L_s + 128 H_s) >> 2s (every term of field s is a multiple of 4^s),
 * plus -sum(x_q) seeded into L_0; per block one convert and one FMA with the
 * 16 rows' scales times the block's sx. Per 128-weight row-block: 4 vpdpbusd
 * (the Zen 4 floor with 14-bit activations: 1 per cycle), 2 ANDs, half a
 * load and ~1.3 epilogue ops: vpdpbusd-bound at ~4.1 cycles.
 * Activation: natural order, 14-bit hi/lo split as the file-layout GEMV:
 *   [k B hi][k B lo][nb x int32 -sum(x_q)][nb x float sx]                   */
static size_t r16_act_bytes(int64_t k) {
    return (size_t)k * 2 + (size_t)(k / 128) * 4 + (((size_t)k + SEG - 1) / SEG) * 4;
}

static void r16_act_prep(const float *x, int64_t k, void *act) {
    uint8_t *hi = act, *lo = hi + k;
    int32_t *corr = (int32_t *)(lo + k);
    float *sxs = (float *)(corr + k / 128);
    for (int64_t s0 = 0, seg = 0; s0 < k; s0 += SEG, seg++) {
        int64_t s1 = s0 + SEG < k ? s0 + SEG : k;
        __m512 inv = _mm512_set1_ps(seg_scale(x, s0, s1, &sxs[seg]));
        for (int64_t b0 = s0; b0 < s1; b0 += 128) {
            __m512i csum = _mm512_setzero_si512();
            for (int j = 0; j < 128; j += 16) {
                __m512i h, l;
                csum = _mm512_add_epi32(csum, quant16(_mm512_loadu_ps(x + b0 + j), inv, &h, &l, 7));
                _mm_storeu_si128((__m128i *)(hi + b0 + j), _mm512_cvtepi32_epi8(h));
                _mm_storeu_si128((__m128i *)(lo + b0 + j), _mm512_cvtepi32_epi8(l));
            }
            corr[b0 / 128] = -_mm512_reduce_add_epi32(csum);
        }
    }
}

/* acc += u8 x (4 s8 bytes at p broadcast to every lane) */
static inline __attribute__((always_inline)) __m512i dpbusd_b(__m512i acc, __m512i u8, const uint8_t *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u8), "m"(*(const int32_t *)p));
    return acc;
}

typedef struct r16_act { const uint8_t *hi, *lo; const int32_t *corr; const float *sx; } r16_act;

/* One 16-row group (blocks [0, nb) at grp) x NB batch rows -> out[n][16]. */
static inline __attribute__((always_inline)) void r16_group(const uint8_t *grp, int64_t nb, const r16_act *a,
                                                            float (*out)[16], int NB) {
    const __m512i f0 = _mm512_set1_epi8(0x03), f1 = _mm512_set1_epi8(0x0C);
    const __m512i f2 = _mm512_set1_epi8(0x30), f3 = _mm512_set1_epi8((char)0xC0);
    __m512 F[2];
#pragma GCC unroll 2
    for (int n = 0; n < NB; n++) F[n] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = grp + (size_t)b * TERN_R16_BLOCK_BYTES;
#if TERN_AVX512_PF16 > 0
#pragma GCC unroll 9
        for (int l = 0; l < 9; l++) _mm_prefetch((const char *)blk + TERN_AVX512_PF16 + 64 * l, _MM_HINT_T0);
#endif
        __m512i H[2][4], L[2][4];
#pragma GCC unroll 2
        for (int n = 0; n < NB; n++) {
            L[n][0] = _mm512_set1_epi32(a[n].corr[b]);
            L[n][1] = L[n][2] = L[n][3] = H[n][0] = H[n][1] = H[n][2] = H[n][3] = _mm512_setzero_si512();
        }
#pragma GCC unroll 8
        for (int v = 0; v < 8; v++) {
            __m512i W = _mm512_loadu_si512(blk + TERN_R16_SCALES + 64 * v);
            __m512i W0 = _mm512_and_si512(W, f0), W1 = _mm512_and_si512(W, f1);
            __m512i W2 = _mm512_and_si512(W, f2), W3 = _mm512_and_si512(W, f3);
#pragma GCC unroll 2
            for (int n = 0; n < NB; n++) {
                const uint8_t *hp = a[n].hi + 128 * b + 16 * v, *lp = a[n].lo + 128 * b + 16 * v;
                H[n][0] = dpbusd_b(H[n][0], W0, hp);
                L[n][0] = dpbusd_b(L[n][0], W0, lp);
                H[n][1] = dpbusd_b(H[n][1], W1, hp + 4);
                L[n][1] = dpbusd_b(L[n][1], W1, lp + 4);
                H[n][2] = dpbusd_b(H[n][2], W2, hp + 8);
                L[n][2] = dpbusd_b(L[n][2], W2, lp + 8);
                H[n][3] = dpbusd_b(H[n][3], W3, hp + 12);
                L[n][3] = dpbusd_b(L[n][3], W3, lp + 12);
            }
        }
        __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
#pragma GCC unroll 2
        for (int n = 0; n < NB; n++) {
            __m512i T3 = _mm512_add_epi32(L[n][3], _mm512_slli_epi32(H[n][3], 7));
            __m512i T2 = _mm512_add_epi32(L[n][2], _mm512_slli_epi32(H[n][2], 7));
            __m512i T1 = _mm512_add_epi32(L[n][1], _mm512_slli_epi32(H[n][1], 7));
            __m512i T0 = _mm512_add_epi32(L[n][0], _mm512_slli_epi32(H[n][0], 7));
            __m512i T = _mm512_add_epi32(_mm512_srai_epi32(T3, 2), T2);
            T = _mm512_add_epi32(_mm512_srai_epi32(T, 2), T1);
            T = _mm512_add_epi32(_mm512_srai_epi32(T, 2), T0);
            F[n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(T), _mm512_mul_ps(d, _mm512_set1_ps(a[n].sx[b])), F[n]);
        }
    }
#pragma GCC unroll 2
    for (int n = 0; n < NB; n++) _mm512_storeu_ps(out[n], F[n]);
}

static void r16_gemv_rows(const tern_qmat *w, const void *act, size_t act_stride, size_t batch, float *y,
                          size_t ys, int64_t r0, int64_t r1) {
    const int64_t k = w->k, nb = k / 128;
    for (int64_t g = r0 / 16; g * 16 < r1; g++) {
        const uint8_t *grp = w->data + (size_t)g * 16 * w->row_bytes;
        int64_t rs = g * 16 > r0 ? g * 16 : r0, re = g * 16 + 16 < r1 ? g * 16 + 16 : r1;
        for (size_t b0 = 0; b0 < batch; b0 += 2) {
            int nbt = batch - b0 < 2 ? (int)(batch - b0) : 2;
            r16_act a[2];
            for (int n = 0; n < nbt; n++) {
                const uint8_t *base = (const uint8_t *)act + (b0 + (size_t)n) * act_stride;
                a[n].hi = base;
                a[n].lo = base + k;
                a[n].corr = (const int32_t *)(base + 2 * k);
                a[n].sx = (const float *)(a[n].corr + nb);
            }
            float out[2][16];
            if (nbt == 2) r16_group(grp, nb, a, out, 2);
            else r16_group(grp, nb, a, out, 1);
            for (int n = 0; n < nbt; n++)
                for (int64_t r = rs; r < re; r++) y[(b0 + (size_t)n) * ys + (size_t)r] = out[n][r - g * 16];
        }
    }
}

/* ------------------------------------------- GEMV, Q1_0 in the 16-row layout
 * Lane L (4 bytes) of vector v holds row L's elements 32v + 4t + j in bit t of
 * byte j: W & (1 << t) is 16 rows x 4 inputs as bytes b * 2^t, multiplied by the
 * 4 activation bytes 32v + 4t.. broadcast from memory (the ternary R16
 * activation, natural order). One accumulator per bit and plane; per block
 * sum(b x_q) = sum_t (L_t + 128 H_t) >> t (exact), and sum((2b-1) x_q) =
 * 2 sum(b x_q) - sum(x_q). Per 128-weight row-block: 4 vpdpbusd, 2 ANDs and
 * ~2.3 epilogue ops, as the ternary kernel; 18 bytes instead of 34. */
static void r16q1_group(const uint8_t *grp, int64_t nb, const r16_act *a, float *out) {
    __m512 F = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = grp + (size_t)b * TERN_R16Q1_BLOCK_BYTES;
#if TERN_AVX512_PF16 > 0
#pragma GCC unroll 5
        for (int l = 0; l < 5; l++) _mm_prefetch((const char *)blk + TERN_AVX512_PF16 + 64 * l, _MM_HINT_T0);
#endif
        __m512i H[8], L[8];
#pragma GCC unroll 8
        for (int t = 0; t < 8; t++) H[t] = L[t] = _mm512_setzero_si512();
        const uint8_t *hp = a->hi + 128 * b, *lp = a->lo + 128 * b;
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) {
            __m512i W = _mm512_loadu_si512(blk + TERN_R16_SCALES + 64 * v);
#pragma GCC unroll 8
            for (int t = 0; t < 8; t++) {
                __m512i Wt = _mm512_and_si512(W, _mm512_set1_epi8((char)(1 << t)));
                H[t] = dpbusd_b(H[t], Wt, hp + 32 * v + 4 * t);
                L[t] = dpbusd_b(L[t], Wt, lp + 32 * v + 4 * t);
            }
        }
        __m512i T = _mm512_add_epi32(L[7], _mm512_slli_epi32(H[7], 7));
#pragma GCC unroll 7
        for (int t = 6; t >= 0; t--)
            T = _mm512_add_epi32(_mm512_srai_epi32(T, 1), _mm512_add_epi32(L[t], _mm512_slli_epi32(H[t], 7)));
        T = _mm512_add_epi32(_mm512_slli_epi32(T, 1), _mm512_set1_epi32(a->corr[b]));
        __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
        F = _mm512_fmadd_ps(_mm512_cvtepi32_ps(T), _mm512_mul_ps(d, _mm512_set1_ps(a->sx[b])), F);
    }
    _mm512_storeu_ps(out, F);
}

static void r16q1_gemv_rows(const tern_qmat *w, const void *act, size_t act_stride, size_t batch, float *y,
                            size_t ys, int64_t r0, int64_t r1) {
    const int64_t k = w->k, nb = k / 128;
    for (int64_t g = r0 / 16; g * 16 < r1; g++) {
        const uint8_t *grp = w->data + (size_t)g * 16 * w->row_bytes;
        int64_t rs = g * 16 > r0 ? g * 16 : r0, re = g * 16 + 16 < r1 ? g * 16 + 16 : r1;
        for (size_t bi = 0; bi < batch; bi++) {
            const uint8_t *base = (const uint8_t *)act + bi * act_stride;
            r16_act a = {base, base + k, (const int32_t *)(base + 2 * k), (const float *)(base + 2 * k) + nb};
            float out[16];
            r16q1_group(grp, nb, &a, out);
            for (int64_t r = rs; r < re; r++) y[bi * ys + (size_t)r] = out[r - g * 16];
        }
    }
}

/* Q1_0 file layout -> TERN_LAYOUT_R16: per row and 32-element word, the 8 x 4 bit
 * transpose by four pext (tern_ref_repack_r16 spells it out). */
static void r16q1_repack(const tern_qmat *w, uint8_t *buf, int64_t g0, int64_t g1) {
    const size_t rb = (size_t)w->k / 128 * TERN_Q1_0_BYTES;
    const int64_t nb = w->k / 128;
    for (int64_t g = g0; g < g1; g++) {
        uint8_t *o = buf + (size_t)g * 16 * rb;
        for (int64_t b = 0; b < nb; b++, o += TERN_R16Q1_BLOCK_BYTES)
            for (int L = 0; L < 16; L++) {
                int64_t r = g * 16 + L;
                uint32_t *lane = (uint32_t *)(o + TERN_R16_SCALES + 4 * L);
                if (r >= w->n) {
                    memset(o + 2 * L, 0, 2);
                    for (int v = 0; v < 4; v++) lane[16 * v] = 0;
                    continue;
                }
                const uint8_t *blk = w->data + (size_t)r * w->row_bytes + (size_t)b * TERN_Q1_0_BYTES;
                memcpy(o + 2 * L, blk, 2);
                for (int v = 0; v < 4; v++) {
                    uint32_t x = tern_rd32(blk + TERN_BLOCK_QS + 4 * v);
                    lane[16 * v] = _pext_u32(x, 0x11111111u) | _pext_u32(x, 0x22222222u) << 8 |
                                   _pext_u32(x, 0x44444444u) << 16 | _pext_u32(x, 0x88888888u) << 24;
                }
            }
    }
}

/* File layout -> TERN_LAYOUT_R16, groups [g0, g1): per 16-row block, 9 gathers
 * (16 rows' dword v of their code bytes, and their scales) and the 2-bit field
 * transpose as two vector delta swaps (tern_ref_repack_r16 spells it out). */
static void r16_repack(const tern_qmat *w, uint8_t *buf, int64_t g0, int64_t g1) {
    if (w->type == TERN_DT_Q1_0) { r16q1_repack(w, buf, g0, g1); return; }
    const size_t rb = (size_t)w->k / 128 * TERN_PQ2_0_BYTES;
    const int64_t nb = w->k / 128;
    if ((int64_t)w->row_bytes * 16 > INT32_MAX / 2) { tern_ref_repack_r16(w, buf, g0, g1); return; }
    const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32((int)w->row_bytes));
    const __m512i m1 = _mm512_set1_epi32(0x00CC00CC), m2 = _mm512_set1_epi32(0x0000F0F0);
    const __m512i pad = _mm512_set1_epi32(0x55555555);
    for (int64_t g = g0; g < g1; g++) {
        int64_t left = w->n - g * 16;
        __mmask16 valid = left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1);
        const uint8_t *src = w->data + (size_t)g * 16 * w->row_bytes;
        uint8_t *o = buf + (size_t)g * 16 * rb;
        for (int64_t b = 0; b < nb; b++, src += TERN_PQ2_0_BYTES, o += TERN_R16_BLOCK_BYTES) {
            if (b % 2 == 0) /* the 16 row streams, ~8 blocks ahead (one line per 2 blocks) */
                for (int L = 0; L < 16 && L < left; L++)
                    _mm_prefetch((const char *)src + (size_t)L * w->row_bytes + 272, _MM_HINT_T0);
            __m512i d = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, rows, src, 1);
            _mm256_storeu_si256((__m256i *)o, _mm512_cvtepi32_epi16(d));
#pragma GCC unroll 8
            for (int v = 0; v < 8; v++) {
                __m512i x = _mm512_mask_i32gather_epi32(pad, valid, rows, src + TERN_BLOCK_QS + 4 * v, 1);
                __m512i t = _mm512_and_si512(_mm512_xor_si512(_mm512_srli_epi32(x, 6), x), m1);
                x = _mm512_xor_si512(x, _mm512_xor_si512(t, _mm512_slli_epi32(t, 6)));
                t = _mm512_and_si512(_mm512_xor_si512(_mm512_srli_epi32(x, 12), x), m2);
                x = _mm512_xor_si512(x, _mm512_xor_si512(t, _mm512_slli_epi32(t, 12)));
                _mm512_storeu_si512(o + TERN_R16_SCALES + 64 * v, x);
            }
        }
    }
}

void tern_avx512_r16_fill(tern_kern_table *t) {
    tern_mm_ops r16 = {r16_act_bytes, r16_act_prep, r16_gemv_rows, 16, NULL, 0, 1, NULL, NULL};
    t->mm_r16 = r16;
    tern_mm_ops r16q1 = {r16_act_bytes, r16_act_prep, r16q1_gemv_rows, 16, NULL, 0, 1, NULL, NULL};
    t->mm_r16q1 = r16q1;
    t->repack_r16 = r16_repack;
}
