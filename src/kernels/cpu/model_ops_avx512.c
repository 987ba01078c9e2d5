/* model_ops_avx512.c - the model ops compiled with avx512 flags: the per-head loops
 * (model_ops.h), the blockwise Hadamard transform and the fused sites (add + RMSNorm +
 * Hadamard, SwiGLU + Hadamard). */
#define TK_SFX _avx512
#include "kernels/cpu/model_ops.h"

#include <immintrin.h>

/* ---------------------------------------------------- Hadamard, fused sites
 * Blockwise FWHT, block >= 16: the four stages inside a 16-float vector use
 * lane permutes (partner i^1, i^2, i^4, i^8) and a masked subtract; the
 * stages h >= 16 are plain vector butterflies over the block (in L1). The sign
 * flip is fused into the first pass and the 1/sqrt(block) scale into the last. */
static inline __m512 fwht16(__m512 x) {
    __m512 p = _mm512_permute_ps(x, 0xB1);
    x = _mm512_mask_sub_ps(_mm512_add_ps(x, p), 0xAAAA, p, x);
    p = _mm512_permute_ps(x, 0x4E);
    x = _mm512_mask_sub_ps(_mm512_add_ps(x, p), 0xCCCC, p, x);
    p = _mm512_shuffle_f32x4(x, x, 0xB1);
    x = _mm512_mask_sub_ps(_mm512_add_ps(x, p), 0xF0F0, p, x);
    p = _mm512_shuffle_f32x4(x, x, 0x4E);
    return _mm512_mask_sub_ps(_mm512_add_ps(x, p), 0xFF00, p, x);
}

static void fwht512(float *x, size_t n, size_t block, const float *signs, bool inverse) {
    if (block < 16) { tern_ref_fwht(x, n, block, signs, inverse); return; }
    const __m512 sc = _mm512_set1_ps(1.0f / sqrtf((float)block));
    for (size_t o = 0; o < n; o += block) {
        float *b = x + o;
        const float *sg = signs ? signs + o : NULL;
        for (size_t i = 0; i < block; i += 16) {
            __m512 v = _mm512_loadu_ps(b + i);
            if (sg && !inverse) v = _mm512_mul_ps(v, _mm512_loadu_ps(sg + i));
            v = fwht16(v);
            if (block == 16) {
                v = _mm512_mul_ps(v, sc);
                if (sg && inverse) v = _mm512_mul_ps(v, _mm512_loadu_ps(sg + i));
            }
            _mm512_storeu_ps(b + i, v);
        }
        for (size_t h = 16; h < block; h <<= 1) {
            bool last = 2 * h == block;
            for (size_t i = 0; i < block; i += 2 * h)
                for (size_t j = i; j < i + h; j += 16) {
                    __m512 a = _mm512_loadu_ps(b + j), c = _mm512_loadu_ps(b + j + h);
                    __m512 s0 = _mm512_add_ps(a, c), s1 = _mm512_sub_ps(a, c);
                    if (last) {
                        s0 = _mm512_mul_ps(s0, sc);
                        s1 = _mm512_mul_ps(s1, sc);
                        if (sg && inverse) {
                            s0 = _mm512_mul_ps(s0, _mm512_loadu_ps(sg + j));
                            s1 = _mm512_mul_ps(s1, _mm512_loadu_ps(sg + j + h));
                        }
                    }
                    _mm512_storeu_ps(b + j, s0);
                    _mm512_storeu_ps(b + j + h, s1);
                }
        }
    }
}

static void addnorm512(float *r, const float *d, const float *gain, float eps, float *normed, float *rotated,
                       size_t n, size_t block, const float *signs) {
    if (n % 16) { tern_ref_addnorm(r, d, gain, eps, normed, rotated, n, block, signs); return; }
    __m512d ss0 = _mm512_setzero_pd(), ss1 = _mm512_setzero_pd();
    for (size_t i = 0; i < n; i += 16) {
        __m512 v = _mm512_loadu_ps(r + i);
        if (d) { v = _mm512_add_ps(v, _mm512_loadu_ps(d + i)); _mm512_storeu_ps(r + i, v); }
        __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
        ss0 = _mm512_fmadd_pd(lo, lo, ss0);
        ss1 = _mm512_fmadd_pd(hi, hi, ss1);
    }
    double ss = _mm512_reduce_add_pd(_mm512_add_pd(ss0, ss1));
    __m512 inv = _mm512_set1_ps((float)(1.0 / sqrt(ss / (double)n + (double)eps)));
    bool rot = rotated && signs;
    float *out = normed ? normed : (rot ? rotated : NULL);
    if (!out) return;
    for (size_t i = 0; i < n; i += 16) {
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(r + i), inv);
        if (gain) v = _mm512_mul_ps(v, _mm512_loadu_ps(gain + i));
        _mm512_storeu_ps(out + i, v);
        if (rot && rotated != out) _mm512_storeu_ps(rotated + i, v);
    }
    if (rot) fwht512(rotated, n, block, signs, false);
}

/* exp(x) for x in float range, ~1 ulp (Cephes-style polynomial, scalef for 2^n). */
static inline __m512 exp512(__m512 x) {
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.5f)), _mm512_set1_ps(-104.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

static void swiglu512(const float *gate, const float *up, float *out, size_t n, size_t block, const float *signs) {
    if (n % 16) { tern_ref_swiglu(gate, up, out, n, block, signs); return; }
    const __m512 one = _mm512_set1_ps(1.0f);
    for (size_t i = 0; i < n; i += 16) {
        __m512 g = _mm512_loadu_ps(gate + i);
        __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), _mm512_loadu_ps(up + i)));
    }
    if (signs) fwht512(out, n, block, signs, false);
}

void tern_model_avx512_fill(tern_kern_table *t) {
    t->fwht = fwht512;
    t->addnorm = addnorm512;
    t->swiglu = swiglu512;
    t->gdn_head = tern_gdn_head_avx512;
    t->gdn_blocks = tern_gdn_head_blocks_avx512;
    t->attn_head = tern_attn_head_avx512;
    t->gdn_block_min = TERN_GDN_BLOCK_MIN_FMA;
}
