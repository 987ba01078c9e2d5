/*
 * avx512.h - what the *_avx512.c kernel files share (included only by them: the
 * intrinsics need their AVX-512 flags): the activation segment, its scale and the
 * 14-bit hi/lo quantisation of 16 floats.
 */
#ifndef TERN_KERNELS_CPU_AVX512_H
#define TERN_KERNELS_CPU_AVX512_H

#include "kernels/cpu/internal.h"

#include <immintrin.h>
#include <math.h>

#define SEG 128   /* inputs per activation scale (a block: outliers stay local) */

/* Quantise 16 floats with inverse scale inv: x_q = round(x*inv), split as
 * x_q = 2^sh * hi + lo with hi, lo signed bytes. The GEMV uses sh = 7
 * (|x_q| <= QMAX7, combined with vpdpwssd on port 0, where it measured faster),
 * the GEMM sh = 8 (|x_q| <= QMAX8, combined with a byte shuffle on port 5,
 * which is idle there). */
#define QMAX7 16256.0f
#define QMAX8 16000.0f
static inline __m512i quant16(__m512 v, __m512 inv, __m512i *hi32, __m512i *lo32, int sh) {
    __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(v, inv));  /* round to nearest even */
    __m512i h = _mm512_srai_epi32(_mm512_add_epi32(q, _mm512_set1_epi32(1 << (sh - 1))), sh);
    *hi32 = h;
    *lo32 = _mm512_sub_epi32(q, _mm512_slli_epi32(h, sh));
    return q;
}

/* Activation scale of x[s0, s1): stores sx = max|x| / QMAX7 (0 for an all-zero
 * or non-finite segment) and returns 1/sx (0 likewise). */
static inline float seg_scale(const float *x, int64_t s0, int64_t s1, float *sx_out) {
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    __m512 mx = _mm512_setzero_ps();
    for (int64_t j = s0; j < s1; j += 16) mx = _mm512_max_ps(mx, _mm512_and_ps(_mm512_loadu_ps(x + j), absmask));
    float amax = _mm512_reduce_max_ps(mx);
    float sx = amax / QMAX7, iv = amax > 0 ? QMAX7 / amax : 0.0f;
    if (!isfinite(iv) || !(sx > 0)) { sx = 0; iv = 0; }
    *sx_out = sx;
    return iv;
}

#endif
