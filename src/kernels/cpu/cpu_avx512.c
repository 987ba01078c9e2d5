/*
 * cpu_avx512.c - AVX-512 (F/BW/VL/DQ + VNNI + VBMI) products on the file layout.
 * The 16-row layout's products and repack are in cpu_r16_avx512.c, the Hadamard
 * transform and fused sites in model_ops_avx512.c, what they share in avx512.h.
 *
 * GEMV (batch < GEMM_MIN) for PQ2_0 / Q2_0 (g128) and Q2_0_G64:
 *   int8 VNNI on the packed codes in place. The activation is quantised ONCE
 *   per call to 14-bit integers x_q = round(x / sx), |x_q| <= 16256, with one
 *   scale sx per 128 inputs (SEG; per 1024 an outlier 300x the rest broke
 *   the error bound), split x_q = 128*hi + lo (hi,
 *   lo signed bytes), and permuted into the order in which vpmultishiftqb
 *   unpacks a block's codes, so a block costs one broadcast load, two
 *   multishifts and two ANDs (codes 0..2 as unsigned bytes), then four
 *   vpdpbusd (hi and lo against the two code vectors). Codes are unsigned, so
 *   sum((q-1) x) = sum(q x) - sum(x): the per-block sum(x_q) is precomputed and
 *   seeds the lo accumulator. Per block: T = accL + 128*accH (one vpdpwssd),
 *   converted to float and scaled by the
 *   block's fp16 d (a 64K-entry table lookup); per SEG inputs the sum is
 *   scaled by sx; with SEG == 128 (one scale per block) d*sx is folded into
 *   one per-block FMA. Error ~1e-4 of max|y| (see docs/performance.md).
 *
 * fp32 GEMM (Q1_0, dense types; any batch): fp32 FMA on
 *   dequantised weight panels (8 rows x 1024 inputs, 32 KB) reused over the
 *   whole batch: 8 rows x 3 batch rows of 16-wide accumulators per step. The
 *   unpack costs one pass per row tile; the activation stays fp32 (exact up to
 *   fp32 rounding).
 *
 * Activation layout (act_prep for g128; g64 is the same with 64-blocks and
 * 128 bytes per block):
 *   [nb blocks x 256 B: hiA 64 | hiB 64 | loA 64 | loB 64][nb x int32 sum(x_q)]
 *   [nseg x float sx]
 */
#include "kernels/cpu/avx512.h"

#include <x86intrin.h>

#ifndef TERN_AVX512_PF
#define TERN_AVX512_PF 4096   /* software prefetch distance in bytes (measured best of 0..8192) */
#endif
#ifndef TERN_AVX512_PF_EVERY
#define TERN_AVX512_PF_EVERY 2   /* one prefetch per this many 34-byte blocks */
#endif
#ifndef GEMM_MIN
#define GEMM_MIN 10  /* file layout: GEMV below (hot, per batch row: GEMV 6.4-7.7 cycles per block at 7-9 rows, the 16-lane GEMM 10 at 8 rows, 6.4 at 12) */
#endif

/* acc += u8 x s8 dot products (vpdpbusd). Inline asm: GCC 12 copies the
 * accumulator of the intrinsic through extra registers and the stack. */
static inline __attribute__((always_inline)) __m512i dpbusd(__m512i acc, __m512i u8, __m512i s8) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "vm"(s8));
    return acc;
}

/* Permutations: byte p of the A / B code vectors holds element eA(p) / eB(p). */
static uint8_t g_permA128[64], g_permB128[64], g_perm64[64];
static __m512i g_ctlA128, g_ctlB128, g_ctl64, g_shl8;

static void init_tables(void) {
    uint8_t ca[64], cb[64], c64[64];
    for (int p = 0; p < 64; p++) {
        int lane = p / 8, t = p % 8;
        /* g128: source qwords Q0..Q3 Q0..Q3 (32 code bytes broadcast) */
        ca[p] = (uint8_t)(lane < 4 ? 2 * t : 16 + 2 * t);
        cb[p] = (uint8_t)(lane < 4 ? 32 + 2 * t : 48 + 2 * t);
        g_permA128[p] = (uint8_t)(lane < 4 ? 32 * lane + t : 32 * (lane - 4) + 8 + t);
        g_permB128[p] = (uint8_t)(lane < 4 ? 32 * lane + 16 + t : 32 * (lane - 4) + 24 + t);
        /* g64: source qwords Q0 Q1 Q0 Q1 Q0 Q1 Q0 Q1 (16 code bytes broadcast);
         * lane pair (2m, 2m+1) takes codes 8m..8m+7 of Q0 / Q1 */
        int m = lane / 2, q = lane % 2;
        c64[p] = (uint8_t)(16 * m + 2 * t);
        g_perm64[p] = (uint8_t)(32 * q + 8 * m + t);
    }
    memcpy(&g_ctlA128, ca, 64);
    memcpy(&g_ctlB128, cb, 64);
    memcpy(&g_ctl64, c64, 64);
    uint8_t sh[64];
    for (int p = 0; p < 64; p++) sh[p] = (uint8_t)(p % 4 == 0 ? 0x80 : (p % 16) - 1);
    memcpy(&g_shl8, sh, 64);
}

/* ------------------------------------------------------ activation prep */
static size_t act_layout(int64_t k, int qk, size_t *off_corr, size_t *off_sx) {
    size_t nb = (size_t)k / (size_t)qk, nseg = ((size_t)k + SEG - 1) / SEG;
    size_t blk_bytes = (size_t)qk * 2;
    *off_corr = nb * blk_bytes;
    *off_sx = *off_corr + nb * 4;
    return *off_sx + nseg * 4;
}
static size_t act_bytes64(int64_t k) { size_t a, b; return act_layout(k, 64, &a, &b); }


/* lo + 128*hi with |hi| < 2^15 (hi as int16 pairs (value, sign) is exact). */
static inline __m512i combine_hilo7(__m512i lo, __m512i hi) {
    return _mm512_dpwssd_epi32(lo, hi, _mm512_set1_epi32(128));
}

/* lo + 256*hi for int32 lanes with |hi| < 2^23: a byte shuffle (port 5)
 * instead of a shift or multiply (port 0, where the vpdpbusd already queue). */
static inline __m512i combine_hilo8(__m512i lo, __m512i hi) {
    return _mm512_add_epi32(lo, _mm512_shuffle_epi8(hi, g_shl8));
}


static inline __attribute__((always_inline)) void act_prep_qk(const float *x, int64_t k, void *act, int qk) {
    size_t off_corr, off_sx;
    act_layout(k, qk, &off_corr, &off_sx);
    uint8_t *blk = act;
    int32_t *corr = (int32_t *)((uint8_t *)act + off_corr);
    float *sxs = (float *)((uint8_t *)act + off_sx);
    for (int64_t s0 = 0, seg = 0; s0 < k; s0 += SEG, seg++) {
        int64_t s1 = s0 + SEG < k ? s0 + SEG : k;
        __m512 inv = _mm512_set1_ps(seg_scale(x, s0, s1, &sxs[seg]));
        for (int64_t b0 = s0; b0 < s1; b0 += qk) {
            uint8_t hib[128], lob[128];
            __m512i csum = _mm512_setzero_si512();
            for (int j = 0; j < qk; j += 16) {
                __m512i h, l;
                csum = _mm512_add_epi32(csum, quant16(_mm512_loadu_ps(x + b0 + j), inv, &h, &l, 7));
                _mm_storeu_si128((__m128i *)(hib + j), _mm512_cvtepi32_epi8(h));
                _mm_storeu_si128((__m128i *)(lob + j), _mm512_cvtepi32_epi8(l));
            }
            corr[b0 / qk] = -_mm512_reduce_add_epi32(csum);
            uint8_t *o = blk + (size_t)(b0 / qk) * (size_t)qk * 2;
            if (qk == 128) {
                __m512i h0 = _mm512_loadu_si512(hib), h1 = _mm512_loadu_si512(hib + 64);
                __m512i l0 = _mm512_loadu_si512(lob), l1 = _mm512_loadu_si512(lob + 64);
                __m512i pa = _mm512_loadu_si512(g_permA128), pb = _mm512_loadu_si512(g_permB128);
                _mm512_storeu_si512(o, _mm512_permutex2var_epi8(h0, pa, h1));
                _mm512_storeu_si512(o + 64, _mm512_permutex2var_epi8(h0, pb, h1));
                _mm512_storeu_si512(o + 128, _mm512_permutex2var_epi8(l0, pa, l1));
                _mm512_storeu_si512(o + 192, _mm512_permutex2var_epi8(l0, pb, l1));
            } else {
                __m512i p = _mm512_loadu_si512(g_perm64);
                _mm512_storeu_si512(o, _mm512_permutexvar_epi8(p, _mm512_loadu_si512(hib)));
                _mm512_storeu_si512(o + 64, _mm512_permutexvar_epi8(p, _mm512_loadu_si512(lob)));
            }
        }
    }
}
static void act_prep64(const float *x, int64_t k, void *act) { act_prep_qk(x, k, act, 64); }

/* ---------------------------------------------------------------- GEMV */
#define NBMAX 4

/* One row, nbt (1..4) batch rows; qk 128 (34-byte blocks) or 64 (18-byte). */
static inline __attribute__((always_inline)) void gemv_row(const uint8_t *row, int64_t k, const uint8_t *const *acts, int nbt,
                            const int32_t *const *corrs, const float *const *sxs, float *out, int qk) {
    const size_t bb = TERN_BLOCK_QS + (size_t)qk / 4;
    const int bps = SEG / qk; /* blocks per segment */
    const __m512i m3 = _mm512_set1_epi8(3);
    const int64_t nb = k / qk;
    __m512 Y[NBMAX], F[NBMAX];
#pragma GCC unroll 4
    for (int b = 0; b < NBMAX; b++) { Y[b] = _mm512_setzero_ps(); F[b] = _mm512_setzero_ps(); }
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *blk = row + (size_t)i * bb;
#if TERN_AVX512_PF > 0
        if (i % TERN_AVX512_PF_EVERY == 0) _mm_prefetch((const char *)blk + TERN_AVX512_PF, _MM_HINT_T0);
#endif
        const float ds = tern_f16_table[tern_rd16(blk)];
        __m512 d = _mm512_set1_ps(ds);
        __m512i A, B = _mm512_setzero_si512();
        if (qk == 128) {
            __m512i src = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + TERN_BLOCK_QS)));
            A = _mm512_and_si512(_mm512_multishift_epi64_epi8(g_ctlA128, src), m3);
            B = _mm512_and_si512(_mm512_multishift_epi64_epi8(g_ctlB128, src), m3);
        } else {
            __m512i src = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(blk + TERN_BLOCK_QS)));
            A = _mm512_and_si512(_mm512_multishift_epi64_epi8(g_ctl64, src), m3);
        }
#pragma GCC unroll 4
        for (int b = 0; b < nbt; b++) {
            const uint8_t *a = acts[b] + (size_t)i * (size_t)qk * 2;
            __m512i accL = _mm512_castsi128_si512(_mm_cvtsi32_si128(corrs[b][i]));
            __m512i accH;
            if (qk == 128) {
                accH = dpbusd(_mm512_setzero_si512(), A, _mm512_loadu_si512(a));
                accH = dpbusd(accH, B, _mm512_loadu_si512(a + 64));
                accL = dpbusd(accL, A, _mm512_loadu_si512(a + 128));
                accL = dpbusd(accL, B, _mm512_loadu_si512(a + 192));
            } else {
                accH = dpbusd(_mm512_setzero_si512(), A, _mm512_loadu_si512(a));
                accL = dpbusd(accL, A, _mm512_loadu_si512(a + 64));
            }
            __m512i T = combine_hilo7(accL, accH);
            /* one activation scale per block (bps == 1): fold it into d, so the
             * block costs one FMA and no per-segment epilogue */
            __m512 sc = bps == 1 ? _mm512_set1_ps(ds * sxs[b][i]) : d;
            F[b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(T), sc, F[b]);
        }
        if (bps > 1 && ((i + 1) % bps == 0 || i + 1 == nb)) {
            int64_t seg = i / bps;
#pragma GCC unroll 4
            for (int b = 0; b < nbt; b++) {
                Y[b] = _mm512_fmadd_ps(F[b], _mm512_set1_ps(sxs[b][seg]), Y[b]);
                F[b] = _mm512_setzero_ps();
            }
        }
    }
    for (int b = 0; b < nbt; b++) out[b] = _mm512_reduce_add_ps(bps == 1 ? F[b] : Y[b]);
}

static inline __attribute__((always_inline)) void gemv_rows_qk(const tern_qmat *w, const void *act, size_t act_stride, size_t batch,
                                float *y, size_t y_stride, int64_t r0, int64_t r1, int qk) {
    size_t off_corr, off_sx;
    act_layout(w->k, qk, &off_corr, &off_sx);
    for (size_t b0 = 0; b0 < batch; b0 += NBMAX) {
        int nbt = batch - b0 < NBMAX ? (int)(batch - b0) : NBMAX;
        const uint8_t *acts[NBMAX];
        const int32_t *corrs[NBMAX];
        const float *sxs[NBMAX];
        for (int b = 0; b < nbt; b++) {
            acts[b] = (const uint8_t *)act + (b0 + (size_t)b) * act_stride;
            corrs[b] = (const int32_t *)(acts[b] + off_corr);
            sxs[b] = (const float *)(acts[b] + off_sx);
        }
        for (int64_t r = r0; r < r1; r++) {
            float out[NBMAX];
            const uint8_t *row = w->data + (size_t)r * w->row_bytes;
            switch (nbt) { /* constant trip counts for the compiler */
            case 1: gemv_row(row, w->k, acts, 1, corrs, sxs, out, qk); break;
            case 2: gemv_row(row, w->k, acts, 2, corrs, sxs, out, qk); break;
            case 3: gemv_row(row, w->k, acts, 3, corrs, sxs, out, qk); break;
            default: gemv_row(row, w->k, acts, 4, corrs, sxs, out, qk); break;
            }
            for (int b = 0; b < nbt; b++) y[(b0 + (size_t)b) * y_stride + (size_t)r] = out[b];
        }
    }
}
static void gemv_rows64(const tern_qmat *w, const void *act, size_t act_stride, size_t batch, float *y,
                        size_t y_stride, int64_t r0, int64_t r1) {
    gemv_rows_qk(w, act, act_stride, batch, y, y_stride, r0, r1, 64);
}

/* ------------------------------------------------- GEMV, g128, grouped
 * PQ2_0 / Q2_0 in the file layout, batch < GEMM_MIN. Measured on Zen 4: every
 * zmm op counts (about two per cycle in all) and vpmultishiftqb, vpdpwssd and
 * FMA share the two pipes of vpdpbusd, so the kernel keeps the multiply
 * pipes for vpdpbusd and spends as few other ops as it can per block:
 *  - 4 consecutive blocks form a group; raw vector R0 holds code bytes 0..15
 *    of block q in its 128-bit lane q, R1 bytes 16..31 (two vpermt2w from 4
 *    loads); the field s of byte p is element 4p+s (+64 in R1), so
 *    (Rj >> 2s) & 3 (a word shift and an AND) are 8 unsigned code vectors
 *    whose lane q holds only block q's codes;
 *  - activation: 14-bit x_q = 128*hi + lo, one scale per block; per group 8
 *    hi and 8 lo vectors laid out to match (act_prep_g), so all 16 vpdpbusd
 *    of a group accumulate into one H and one L vector with no reduction:
 *    128-bit lane q of L + (H << 7) is block q's sum, L seeded with the
 *    group's -sum(x_q) vector (codes are 0..2: sum((c-1)x) = sum(cx) - sum x);
 *  - per group: convert, one multiply by [sx_q x4] and one FMA by [d_q x4]
 *    (vpermt2w + vcvtph2ps of the 4 blocks' fp16 scales);
 *  - two weight rows share each activation load at batch 1.
 * A partial last group is copied to a zeroed stack group (scales 0). Exact
 * integer sums: |T| <= 128 * 2 * 16256 < 2^22.
 * Activation layout per group of 4 blocks (GQ_BYTES):
 *   [8 x (64 B hi, 64 B lo)][16 x int32 corr][16 x float sx]               */
#define GQ_BYTES (1024 + 64 + 64)
static __m512i g_gq_i0, g_gq_i1, g_gq_dp, g_gq_sel;

static size_t gq_act_bytes(int64_t k) { return (size_t)((k / 128 + 3) / 4) * GQ_BYTES; }

static void gq_act_prep(const float *x, int64_t k, void *act) {
    const int64_t nb = k / 128, ng = (nb + 3) / 4;
    memset((uint8_t *)act + (size_t)(nb / 4) * GQ_BYTES, 0, (size_t)(ng - nb / 4) * GQ_BYTES);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *grp = (uint8_t *)act + (size_t)(b / 4) * GQ_BYTES;
        int q = (int)(b % 4);
        float sx;
        __m512 inv = _mm512_set1_ps(seg_scale(x, b * 128, b * 128 + 128, &sx));
        uint8_t hib[128], lob[128];
        __m512i csum = _mm512_setzero_si512();
        for (int j = 0; j < 128; j += 16) {
            __m512i h, l;
            csum = _mm512_add_epi32(csum, quant16(_mm512_loadu_ps(x + b * 128 + j), inv, &h, &l, 7));
            _mm_storeu_si128((__m128i *)(hib + j), _mm512_cvtepi32_epi8(h));
            _mm_storeu_si128((__m128i *)(lob + j), _mm512_cvtepi32_epi8(l));
        }
        int32_t *corr = (int32_t *)(grp + 1024);
        float *sxs = (float *)(grp + 1088);
        for (int c = 0; c < 4; c++) { corr[4 * q + c] = 0; sxs[4 * q + c] = sx; }
        corr[4 * q] = -_mm512_reduce_add_epi32(csum);
        for (int j = 0; j < 2; j++) {
            /* byte 16s + p of the permuted vector = element 64j + 4p + s */
            __m512i hv = _mm512_permutexvar_epi8(g_gq_sel, _mm512_loadu_si512(hib + 64 * j));
            __m512i lv = _mm512_permutexvar_epi8(g_gq_sel, _mm512_loadu_si512(lob + 64 * j));
            uint8_t hb[64], lb[64];
            _mm512_storeu_si512(hb, hv);
            _mm512_storeu_si512(lb, lv);
            for (int s = 0; s < 4; s++) {
                uint8_t *o = grp + 128 * (4 * j + s) + 16 * q;
                memcpy(o, hb + 16 * s, 16);
                memcpy(o + 64, lb + 16 * s, 16);
            }
        }
    }
}

/* The 8 code vectors of a group at blk (4 blocks of 34 bytes, all readable). */
static inline __attribute__((always_inline)) void gq_codes(const uint8_t *blk, __m512i C[8]) {
    const __m512i m3 = _mm512_set1_epi8(3);
    __m512i r0 = _mm512_permutex2var_epi16(_mm512_loadu_si512(blk + 2), g_gq_i0, _mm512_loadu_si512(blk + 70));
    __m512i r1 = _mm512_permutex2var_epi16(_mm512_loadu_si512(blk + 4), g_gq_i1, _mm512_loadu_si512(blk + 72));
    C[0] = _mm512_and_si512(r0, m3);
    C[1] = _mm512_and_si512(_mm512_srli_epi16(r0, 2), m3);
    C[2] = _mm512_and_si512(_mm512_srli_epi16(r0, 4), m3);
    C[3] = _mm512_and_si512(_mm512_srli_epi16(r0, 6), m3);
    C[4] = _mm512_and_si512(r1, m3);
    C[5] = _mm512_and_si512(_mm512_srli_epi16(r1, 2), m3);
    C[6] = _mm512_and_si512(_mm512_srli_epi16(r1, 4), m3);
    C[7] = _mm512_and_si512(_mm512_srli_epi16(r1, 6), m3);
}
static inline __attribute__((always_inline)) __m512 gq_scales(const uint8_t *blk) {
    return _mm512_cvtph_ps(_mm512_castsi512_si256(
        _mm512_permutex2var_epi16(_mm512_loadu_si512(blk), g_gq_dp, _mm512_loadu_si512(blk + 64))));
}

/* NR rows (1 or 2) x NB batch rows (1..NBMAX). */
static inline __attribute__((always_inline)) void gq_rows(const uint8_t *const *rows, int64_t nb, const uint8_t *const *acts,
                                                          float *out, int NR, int NB) {
    __m512 F[2][NBMAX];
#pragma GCC unroll 2
    for (int r = 0; r < 2; r++)
#pragma GCC unroll 4
        for (int b = 0; b < NBMAX; b++) F[r][b] = _mm512_setzero_ps();
    const int64_t ng = (nb + 3) / 4;
    uint8_t tail[2][4 * TERN_PQ2_0_BYTES + 64] __attribute__((aligned(64)));
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *blk[2];
#pragma GCC unroll 2
        for (int r = 0; r < NR; r++) {
            blk[r] = rows[r] + (size_t)g * 4 * TERN_PQ2_0_BYTES;
            if (g * 4 + 4 > nb) { /* partial group: zero scales and codes, never read past the row */
                memset(tail[r], 0, sizeof tail[r]);
                memcpy(tail[r], blk[r], (size_t)(nb - g * 4) * TERN_PQ2_0_BYTES);
                blk[r] = tail[r];
            }
#if TERN_AVX512_PF > 0
            /* 136 bytes per group: 3 lines, so no line is left to the hardware
             * prefetcher (2 per group left one in 17, and no software prefetch
             * measured 2.5x slower from memory) */
            _mm_prefetch((const char *)blk[r] + TERN_AVX512_PF, _MM_HINT_T0);
            _mm_prefetch((const char *)blk[r] + TERN_AVX512_PF + 64, _MM_HINT_T0);
            _mm_prefetch((const char *)blk[r] + TERN_AVX512_PF + 128, _MM_HINT_T0);
#endif
        }
        __m512i C[2][8];
        __m512 D[2];
#pragma GCC unroll 2
        for (int r = 0; r < NR; r++) { gq_codes(blk[r], C[r]); D[r] = gq_scales(blk[r]); }
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++) {
            const uint8_t *a = acts[b] + (size_t)g * GQ_BYTES;
            /* two chains per plane: 8 dependent vpdpbusd were latency-bound */
            __m512i H[2][2], L[2][2];
            __m512i cv = _mm512_loadu_si512(a + 1024);
#pragma GCC unroll 2
            for (int r = 0; r < NR; r++) {
                H[r][0] = H[r][1] = L[r][1] = _mm512_setzero_si512();
                L[r][0] = cv;
            }
#pragma GCC unroll 8
            for (int v = 0; v < 8; v++) {
                __m512i xh = _mm512_loadu_si512(a + 128 * v), xl = _mm512_loadu_si512(a + 128 * v + 64);
#pragma GCC unroll 2
                for (int r = 0; r < NR; r++) {
                    H[r][v & 1] = dpbusd(H[r][v & 1], C[r][v], xh);
                    L[r][v & 1] = dpbusd(L[r][v & 1], C[r][v], xl);
                }
            }
            __m512 sx = _mm512_loadu_ps((const float *)(a + 1088));
#pragma GCC unroll 2
            for (int r = 0; r < NR; r++) {
                __m512i hh = _mm512_add_epi32(H[r][0], H[r][1]), ll = _mm512_add_epi32(L[r][0], L[r][1]);
                __m512 t = _mm512_cvtepi32_ps(_mm512_add_epi32(ll, _mm512_slli_epi32(hh, 7)));
                F[r][b] = _mm512_fmadd_ps(_mm512_mul_ps(t, sx), D[r], F[r][b]);
            }
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++) out[r * NBMAX + b] = _mm512_reduce_add_ps(F[r][b]);
}

static void gq_gemv_rows(const tern_qmat *w, const void *act, size_t act_stride, size_t batch, float *y,
                         size_t y_stride, int64_t r0, int64_t r1) {
    const int64_t nb = w->k / 128;
    for (int64_t r = r0; r < r1;) {
        int nr = batch == 1 && r + 1 < r1 ? 2 : 1;
        const uint8_t *rows[2] = {w->data + (size_t)r * w->row_bytes, w->data + (size_t)(r + nr - 1) * w->row_bytes};
        /* every batch group re-reads the row from L1 (a row is <= 4.6 KB on Bonsai) */
        for (size_t b0 = 0; b0 < batch; b0 += NBMAX) {
            int nbt = batch - b0 < NBMAX ? (int)(batch - b0) : NBMAX;
            const uint8_t *acts[NBMAX];
            for (int b = 0; b < nbt; b++) acts[b] = (const uint8_t *)act + (b0 + (size_t)b) * act_stride;
            float out[2 * NBMAX];
            if (nr == 2) gq_rows(rows, nb, acts, out, 2, 1);
            else switch (nbt) {
            case 1: gq_rows(rows, nb, acts, out, 1, 1); break;
            case 2: gq_rows(rows, nb, acts, out, 1, 2); break;
            case 3: gq_rows(rows, nb, acts, out, 1, 3); break;
            default: gq_rows(rows, nb, acts, out, 1, 4); break;
            }
            for (int q = 0; q < nr; q++)
                for (int b = 0; b < nbt; b++) y[(b0 + (size_t)b) * y_stride + (size_t)(r + q)] = out[q * NBMAX + b];
        }
        r += nr;
    }
}

static void gq_init_tables(void) {
    uint16_t i0[32], i1[32], dp[32];
    for (int p = 0; p < 32; p++) {
        int q = p / 8, w = p % 8;
        /* R0 lane q: bytes 0..15 of block q = words w of blk+2 (q<2: +17q words) or blk+70 */
        i0[p] = (uint16_t)(q < 2 ? 17 * q + w : 32 + 17 * (q - 2) + w);
        /* R1 lane q: bytes 16..31 of block q: blk+4 holds them at word 7 (+17q), blk+72 likewise */
        i1[p] = (uint16_t)(q < 2 ? 7 + 17 * q + w : 32 + 7 + 17 * (q - 2) + w);
        static const uint16_t dw[4] = {0, 17, 32 + 2, 32 + 19};
        dp[p] = p < 16 ? dw[p / 4] : 0;
    }
    memcpy(&g_gq_i0, i0, 64);
    memcpy(&g_gq_i1, i1, 64);
    memcpy(&g_gq_dp, dp, 64);
    uint8_t sel[64];
    for (int t = 0; t < 64; t++) sel[t] = (uint8_t)(4 * (t % 16) + t / 16);
    memcpy(&g_gq_sel, sel, 64);
}

/* ---------------------------------------------------------------- GEMM */
#define GR 8        /* rows per tile */
#define GB 3        /* batch rows per micro-tile */
#define KC 1024     /* inputs per panel */
#define BC 64       /* batch rows per chunk (vector partial sums on the stack) */

/* Dequantise row r, inputs [k0, k0+kc) to floats. */
static void dequant_panel(const tern_qmat *w, int64_t r, int64_t k0, int64_t kc, float *dst) {
    const uint8_t *row = w->data + (size_t)r * w->row_bytes;
    const __m512i sh2 = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i sh1 = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i m3 = _mm512_set1_epi32(3), m1 = _mm512_set1_epi32(1);
    const __m512 one = _mm512_set1_ps(1.0f);
    switch (w->type) {
    case TERN_DT_PQ2_0: case TERN_DT_Q2_0: case TERN_DT_Q2_0_G64: {
        int qk = w->type == TERN_DT_Q2_0_G64 ? 64 : 128;
        size_t bb = TERN_BLOCK_QS + (size_t)qk / 4;
        for (int64_t j = 0; j < kc; j += 16) {
            int64_t e = k0 + j;
            const uint8_t *blk = row + (size_t)(e / qk) * bb;
            const float ds = tern_f16_table[tern_rd16(blk)];
        __m512 d = _mm512_set1_ps(ds);
            __m512i v = _mm512_set1_epi32((int)tern_rd32(blk + TERN_BLOCK_QS + (e % qk) / 4));
            __m512i c = _mm512_and_si512(_mm512_srlv_epi32(v, sh2), m3);
            _mm512_storeu_ps(dst + j, _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(c), one), d));
        }
        break;
    }
    case TERN_DT_Q1_0:
        for (int64_t j = 0; j < kc; j += 16) {
            int64_t e = k0 + j;
            const uint8_t *blk = row + (size_t)(e / 128) * TERN_Q1_0_BYTES;
            const float ds = tern_f16_table[tern_rd16(blk)];
        __m512 d = _mm512_set1_ps(ds);
            __m512i v = _mm512_set1_epi32((int)tern_rd16(blk + TERN_BLOCK_QS + (e % 128) / 8));
            __m512i c = _mm512_and_si512(_mm512_srlv_epi32(v, sh1), m1);
            __m512 f = _mm512_sub_ps(_mm512_add_ps(_mm512_cvtepi32_ps(c), _mm512_cvtepi32_ps(c)), one);
            _mm512_storeu_ps(dst + j, _mm512_mul_ps(f, d));
        }
        break;
    case TERN_DT_F32:
        memcpy(dst, row + 4 * k0, (size_t)kc * 4);
        break;
    case TERN_DT_F16:
        for (int64_t j = 0; j < kc; j += 16)
            _mm512_storeu_ps(dst + j, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 2 * (k0 + j)))));
        break;
    case TERN_DT_BF16:
        for (int64_t j = 0; j < kc; j += 16) {
            __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(row + 2 * (k0 + j))));
            _mm512_storeu_ps(dst + j, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
        }
        break;
    default:
        TERN_ASSERT(!"unsupported type in dequant_panel");
    }
}

static void gemm_rows(const tern_qmat *w, const void *act, size_t act_stride, size_t batch, float *y,
                      size_t y_stride, int64_t r0, int64_t r1) {
    const int64_t k = w->k;
    const float *x = act;
    const size_t xs = act_stride / sizeof(float);
    float panel[GR][KC] __attribute__((aligned(64)));
    static _Thread_local __m512 part[GR][BC];
    for (int64_t rt = r0; rt < r1; rt += GR) {
        int nr = r1 - rt < GR ? (int)(r1 - rt) : GR;
        for (size_t b0 = 0; b0 < batch; b0 += BC) {
            int nbc = batch - b0 < BC ? (int)(batch - b0) : BC;
            for (int r = 0; r < GR; r++)
                for (int b = 0; b < nbc; b++) part[r][b] = _mm512_setzero_ps();
            for (int64_t k0 = 0; k0 < k; k0 += KC) {
                int64_t kc = k - k0 < KC ? k - k0 : KC;
                int64_t kv = kc & ~(int64_t)15;  /* vector part; k is a multiple of 16 except dense types */
                for (int r = 0; r < nr; r++) dequant_panel(w, rt + r, k0, kv, panel[r]);
                for (int r = nr; r < GR; r++) memset(panel[r], 0, (size_t)kv * 4);
                int b = 0;
                for (; b + GB <= nbc; b += GB) {
                    __m512 acc[GR][GB];
#pragma GCC unroll 8
                    for (int r = 0; r < GR; r++)
#pragma GCC unroll 4
                        for (int q = 0; q < GB; q++) acc[r][q] = _mm512_setzero_ps();
                    const float *x0 = x + (b0 + (size_t)b) * xs + k0;
                    for (int64_t j = 0; j < kv; j += 16) {
                        __m512 xv[GB];
#pragma GCC unroll 4
                        for (int q = 0; q < GB; q++) xv[q] = _mm512_loadu_ps(x0 + (size_t)q * xs + j);
#pragma GCC unroll 8
                        for (int r = 0; r < GR; r++) {
                            __m512 wv = _mm512_load_ps(&panel[r][j]);
#pragma GCC unroll 4
                            for (int q = 0; q < GB; q++) acc[r][q] = _mm512_fmadd_ps(wv, xv[q], acc[r][q]);
                        }
                    }
#pragma GCC unroll 8
                    for (int r = 0; r < GR; r++)
#pragma GCC unroll 4
                        for (int q = 0; q < GB; q++) part[r][b + q] = _mm512_add_ps(part[r][b + q], acc[r][q]);
                }
                for (; b < nbc; b++) {
                    __m512 acc[GR];
#pragma GCC unroll 8
                    for (int r = 0; r < GR; r++) acc[r] = _mm512_setzero_ps();
                    const float *x0 = x + (b0 + (size_t)b) * xs + k0;
                    for (int64_t j = 0; j < kv; j += 16) {
                        __m512 xv = _mm512_loadu_ps(x0 + j);
#pragma GCC unroll 8
                        for (int r = 0; r < GR; r++) acc[r] = _mm512_fmadd_ps(_mm512_load_ps(&panel[r][j]), xv, acc[r]);
                    }
#pragma GCC unroll 8
                    for (int r = 0; r < GR; r++) part[r][b] = _mm512_add_ps(part[r][b], acc[r]);
                }
            }
            for (int r = 0; r < nr; r++)
                for (int b = 0; b < nbc; b++)
                    y[(b0 + (size_t)b) * y_stride + (size_t)(rt + r)] = _mm512_reduce_add_ps(part[r][b]);
        }
    }
}

/* ------------------------------------------------------- VNNI GEMM
 * Batch rows in vector lanes: a tile of 16 batch rows, each lane a batch row.
 * Layout of the prepared activation (gemm_prep), per tile t of 16 rows:
 *   X   [k/4][128 B]: 64 B hi (lane l: x_q hi of inputs 4q..4q+3 of row 16t+l)
 *                     then 64 B lo, same order
 *   corr[k/qk][16] int32  -sum(x_q) of each block, per lane
 *   sx  [nseg][16] float  scale per SEG (128) inputs, per lane
 * Weights: per 4 rows x 2048 inputs the codes are unpacked to bytes once
 * (natural order) and each 4-code group is broadcast to all lanes, so one
 * vpdpbusd does 16 batch rows x 4 inputs. The activation split is x_q =
 * 256*hi + lo, |x_q| <= 16000; per block T = lo + (hi << 8) by a byte shuffle. */
#define VR 4
#define VKC 2048

typedef struct vlay { size_t x, corr, sx, tile; } vlay;
static vlay vnni_layout(int64_t k, int qk) {
    vlay L;
    L.x = 0;
    L.corr = (size_t)k / 4 * 128;
    L.sx = L.corr + (size_t)(k / qk) * 64;
    L.tile = L.sx + (((size_t)k + SEG - 1) / SEG) * 64;
    return L;
}
static size_t vnni_bytes(int64_t k, size_t batch, int qk) {
    return vnni_layout(k, qk).tile * ((batch + 15) / 16);
}
static size_t vnni_bytes128(int64_t k, size_t batch) { return vnni_bytes(k, batch, 128); }
static size_t vnni_bytes64(int64_t k, size_t batch) { return vnni_bytes(k, batch, 64); }

static inline __attribute__((always_inline)) void vnni_prep(const float *x, size_t xs, size_t batch, int64_t k,
                                                            void *act, size_t b0, size_t b1, int qk) {
    vlay L = vnni_layout(k, qk);
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    for (size_t b = b0; b < b1; b++) {
        uint8_t *tile = (uint8_t *)act + (b / 16) * L.tile;
        int lane = (int)(b % 16);
        const float *xr = x + b * xs;
        for (int64_t s0 = 0, seg = 0; s0 < k; s0 += SEG, seg++) {
            int64_t s1 = s0 + SEG < k ? s0 + SEG : k;
            __m512 mx = _mm512_setzero_ps();
            for (int64_t j = s0; j < s1; j += 16) mx = _mm512_max_ps(mx, _mm512_and_ps(_mm512_loadu_ps(xr + j), absmask));
            float amax = _mm512_reduce_max_ps(mx);
            float sx = amax / QMAX8, iv = amax > 0 ? QMAX8 / amax : 0.0f;
            if (!isfinite(iv) || !(sx > 0)) { sx = 0; iv = 0; }
            ((float *)(tile + L.sx))[seg * 16 + lane] = sx;
            __m512 inv = _mm512_set1_ps(iv);
            for (int64_t b0k = s0; b0k < s1; b0k += qk) {
                __m512i csum = _mm512_setzero_si512();
                for (int j = 0; j < qk; j += 16) {
                    __m512i h, l;
                    csum = _mm512_add_epi32(csum, quant16(_mm512_loadu_ps(xr + b0k + j), inv, &h, &l, 8));
                    uint32_t hb[4], lb[4];
                    _mm_storeu_si128((__m128i *)hb, _mm512_cvtepi32_epi8(h));
                    _mm_storeu_si128((__m128i *)lb, _mm512_cvtepi32_epi8(l));
                    uint8_t *xq = tile + L.x + (size_t)((b0k + j) / 4) * 128 + (size_t)lane * 4;
                    for (int q = 0; q < 4; q++) {
                        memcpy(xq + (size_t)q * 128, &hb[q], 4);
                        memcpy(xq + (size_t)q * 128 + 64, &lb[q], 4);
                    }
                }
                ((int32_t *)(tile + L.corr))[(b0k / qk) * 16 + lane] = -_mm512_reduce_add_epi32(csum);
            }
        }
    }
    if (b1 == batch && batch % 16) { /* zero the padding lanes of the last tile */
        uint8_t *tile = (uint8_t *)act + (batch / 16) * L.tile;
        int l0 = (int)(batch % 16);
        for (size_t q = 0; q < (size_t)k / 4; q++) {
            memset(tile + L.x + q * 128 + (size_t)l0 * 4, 0, (size_t)(16 - l0) * 4);
            memset(tile + L.x + q * 128 + 64 + (size_t)l0 * 4, 0, (size_t)(16 - l0) * 4);
        }
        for (size_t q = 0; q < (size_t)(k / qk); q++) memset(tile + L.corr + q * 64 + (size_t)l0 * 4, 0, (size_t)(16 - l0) * 4);
        for (size_t q = 0; q < ((size_t)k + SEG - 1) / SEG; q++)
            memset(tile + L.sx + q * 64 + (size_t)l0 * 4, 0, (size_t)(16 - l0) * 4);
    }
}
static void vnni_prep128(const float *x, size_t xs, size_t batch, int64_t k, void *act, size_t b0, size_t b1) {
    vnni_prep(x, xs, batch, k, act, b0, b1, 128);
}
static void vnni_prep64(const float *x, size_t xs, size_t batch, int64_t k, void *act, size_t b0, size_t b1) {
    vnni_prep(x, xs, batch, k, act, b0, b1, 64);
}

/* Codes of row `row` (2-bit layout, blocks of qk), inputs [k0, k0+kc) -> bytes. */
static inline __attribute__((always_inline)) void unpack_codes(const uint8_t *row, int64_t k0, int64_t kc,
                                                               uint8_t *dst, float *dd, int qk) {
    const size_t bb = TERN_BLOCK_QS + (size_t)qk / 4;
    /* natural order: dest qword i holds elements 8i..8i+7 = source qword i/4, offsets 2*(8*(i%4)+t) */
    const __m512i perm = _mm512_setr_epi64(0, 0, 0, 0, 1, 1, 1, 1);
    __m512i ctl;
    {
        uint8_t c[64];
        for (int p = 0; p < 64; p++) c[p] = (uint8_t)(2 * (8 * ((p / 8) % 4) + p % 8));
        memcpy(&ctl, c, 64);
    }
    const __m512i m3 = _mm512_set1_epi8(3);
    for (int64_t e = 0; e < kc; e += qk) {
        const uint8_t *blk = row + (size_t)((k0 + e) / qk) * bb;
        dd[e / qk] = tern_f16_table[tern_rd16(blk)];
        for (int h = 0; h < qk; h += 64) {
            __m512i src = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(blk + TERN_BLOCK_QS + h / 4)));
            __m512i v = _mm512_permutexvar_epi64(perm, src);
            _mm512_storeu_si512(dst + e + h, _mm512_and_si512(_mm512_multishift_epi64_epi8(ctl, v), m3));
        }
    }
}

/* Codes of row r of a TERN_LAYOUT_R16 matrix, inputs [k0, k0+kc) -> bytes. */
static void unpack_codes_r16(const tern_qmat *w, int64_t r, int64_t k0, int64_t kc, uint8_t *dst, float *dd) {
    for (int64_t e = 0; e < kc; e += 128) {
        int64_t b = (k0 + e) / 128;
        dd[e / 128] = tern_f16_table[tern_r16_scale(w, r, b)];
        for (int q = 0; q < 128; q++) dst[e + q] = (uint8_t)tern_r16_code(w, r, b, q);
    }
}

static inline __attribute__((always_inline)) void vnni_rows(const tern_qmat *w, const void *act, size_t batch,
                                                            float *y, size_t ys, int64_t r0, int64_t r1, int qk) {
    const int64_t k = w->k;
    vlay L = vnni_layout(k, qk);
    const size_t nbt = (batch + 15) / 16;
    uint8_t cbuf[VR][VKC] __attribute__((aligned(64)));
    float dd[VR][VKC / 64];
    for (int64_t kc0 = 0; kc0 < k; kc0 += VKC) {
        int64_t kc = k - kc0 < VKC ? k - kc0 : VKC;
        for (int64_t rt = r0; rt < r1; rt += VR) {
            int nr = r1 - rt < VR ? (int)(r1 - rt) : VR;
            for (int r = 0; r < VR; r++) {
                if (r < nr && w->layout == TERN_LAYOUT_R16) unpack_codes_r16(w, rt + r, kc0, kc, cbuf[r], dd[r]);
                else if (r < nr) unpack_codes(w->data + (size_t)(rt + r) * w->row_bytes, kc0, kc, cbuf[r], dd[r], qk);
                else { memset(cbuf[r], 0, (size_t)kc); memset(dd[r], 0, sizeof dd[r]); }
            }
            for (size_t t = 0; t < nbt; t++) {
                const uint8_t *tile = (const uint8_t *)act + t * L.tile;
                const uint8_t *X = tile + L.x + (size_t)(kc0 / 4) * 128;
                const int32_t *corr = (const int32_t *)(tile + L.corr) + (kc0 / qk) * 16;
                const float *sx = (const float *)(tile + L.sx) + (kc0 / SEG) * 16;
                __m512 Yv[VR];
#pragma GCC unroll 4
                for (int r = 0; r < VR; r++) Yv[r] = _mm512_setzero_ps();
                for (int64_t s0 = 0; s0 < kc; s0 += SEG) {
                    int64_t s1 = s0 + SEG < kc ? s0 + SEG : kc;
                    __m512 F[VR];
#pragma GCC unroll 4
                    for (int r = 0; r < VR; r++) F[r] = _mm512_setzero_ps();
                    for (int64_t e0 = s0; e0 < s1; e0 += qk) {
                        __m512i cv = _mm512_loadu_si512(corr + (e0 / qk) * 16);
                        __m512i h0 = _mm512_setzero_si512(), h1 = h0, h2 = h0, h3 = h0;
                        __m512i l0 = cv, l1 = cv, l2 = cv, l3 = cv;
                        const uint8_t *xp = X + (size_t)(e0 / 4) * 128;
                        const uint8_t *c0 = &cbuf[0][e0], *c1 = &cbuf[1][e0], *c2 = &cbuf[2][e0], *c3 = &cbuf[3][e0];
                        for (int e = 0; e < qk; e += 4, xp += 128) {
                            __m512i xh = _mm512_load_si512(xp), xl = _mm512_load_si512(xp + 64);
                            __m512i w0 = _mm512_set1_epi32((int)tern_rd32(c0 + e));
                            __m512i w1 = _mm512_set1_epi32((int)tern_rd32(c1 + e));
                            __m512i w2 = _mm512_set1_epi32((int)tern_rd32(c2 + e));
                            __m512i w3 = _mm512_set1_epi32((int)tern_rd32(c3 + e));
                            h0 = dpbusd(h0, w0, xh); l0 = dpbusd(l0, w0, xl);
                            h1 = dpbusd(h1, w1, xh); l1 = dpbusd(l1, w1, xl);
                            h2 = dpbusd(h2, w2, xh); l2 = dpbusd(l2, w2, xl);
                            h3 = dpbusd(h3, w3, xh); l3 = dpbusd(l3, w3, xl);
                        }
                        int bi = (int)(e0 / qk);
                        F[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(combine_hilo8(l0, h0)), _mm512_set1_ps(dd[0][bi]), F[0]);
                        F[1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(combine_hilo8(l1, h1)), _mm512_set1_ps(dd[1][bi]), F[1]);
                        F[2] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(combine_hilo8(l2, h2)), _mm512_set1_ps(dd[2][bi]), F[2]);
                        F[3] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(combine_hilo8(l3, h3)), _mm512_set1_ps(dd[3][bi]), F[3]);
                    }
                    __m512 sv = _mm512_loadu_ps(sx + (s0 / SEG) * 16);
#pragma GCC unroll 4
                    for (int r = 0; r < VR; r++) Yv[r] = _mm512_fmadd_ps(F[r], sv, Yv[r]);
                }
                float out[VR][16];
#pragma GCC unroll 4
                for (int r = 0; r < VR; r++) _mm512_storeu_ps(out[r], Yv[r]);
                int nl = batch - t * 16 < 16 ? (int)(batch - t * 16) : 16;
                for (int l = 0; l < nl; l++) {
                    float *yy = y + (t * 16 + (size_t)l) * ys + (size_t)rt;
                    for (int r = 0; r < nr; r++) yy[r] = kc0 == 0 ? out[r][l] : yy[r] + out[r][l];
                }
            }
        }
    }
}
static void vnni_rows128(const tern_qmat *w, const void *act, size_t act_stride, size_t batch, float *y,
                         size_t ys, int64_t r0, int64_t r1) {
    (void)act_stride;
    vnni_rows(w, act, batch, y, ys, r0, r1, 128);
}
static void vnni_rows64(const tern_qmat *w, const void *act, size_t act_stride, size_t batch, float *y,
                        size_t ys, int64_t r0, int64_t r1) {
    (void)act_stride;
    vnni_rows(w, act, batch, y, ys, r0, r1, 64);
}

void tern_avx512_fill(tern_kern_table *t) {
    init_tables();
    gq_init_tables();
    for (int i = 0; i < TERN_DT_COUNT; i++) {
        bool dense = i == TERN_DT_F32 || i == TERN_DT_F16 || i == TERN_DT_BF16;
        if (dense || i == TERN_DT_Q1_0) {
            t->mm[i].gemm_rows = gemm_rows;
            t->mm[i].gemm_min_batch = 1;
            t->mm[i].gemm_k_align = dense ? 16 : 1;
            t->mm[i].row_tile = GR;
        }
    }
    tern_mm_ops g128 = {gq_act_bytes, gq_act_prep, gq_gemv_rows, GR, vnni_rows128, GEMM_MIN, 1, vnni_bytes128, vnni_prep128};
    tern_mm_ops g64 = {act_bytes64, act_prep64, gemv_rows64, GR, vnni_rows64, GEMM_MIN, 1, vnni_bytes64, vnni_prep64};
    t->mm[TERN_DT_PQ2_0] = g128;
    t->mm[TERN_DT_Q2_0] = g128;
    t->mm[TERN_DT_Q2_0_G64] = g64;
    tern_avx512_r16_fill(t);
}