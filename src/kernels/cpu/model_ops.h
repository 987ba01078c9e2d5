/*
 * model_ops.h - the per-head hot loops of the model ops (kernels.h: tern_gdn,
 * tern_attention): the GDN delta-rule recurrence of one value head over a chunk,
 * token by token or block-wise, and causal attention of one query head. Written
 * once and compiled three times: model_ops.c (the reference: portable C with GCC
 * vector extensions, no ISA flags; also the NEON build's path), model_ops_avx2.c and
 * model_ops_avx512.c (own ISA flags, see CMakeLists.txt). dispatch.c puts the
 * variant of the active ISA into the kernel table once. Include after defining TK_SFX.
 *
 * Token walk and attention: summation order is fixed (16 partial sums for dot
 * products), so every variant computes the same sums; results differ only by FMA
 * contraction. Block scan: vectors of the build's width and explicit FMAs, so its
 * sums differ per ISA at rounding level (test_kernels_gdn bounds both scans against a
 * float64 reference).
 */
#include "kernels/cpu/internal.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define TK_CAT2(a, b) a##b
#define TK_CAT(a, b) TK_CAT2(a, b)
#define TK_FN(name) TK_CAT(name, TK_SFX)

void TK_FN(tern_gdn_head)(const tern_gdn_args *a, int conv_ch, int p);
void TK_FN(tern_gdn_head_blocks)(const tern_gdn_args *a, int conv_ch, int p);
void TK_FN(tern_attn_head)(const tern_attn_args *a, int h);

#ifndef TK_V16_DEFINED
#define TK_V16_DEFINED
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi" /* static inline helpers only: no ABI crosses */
#elif defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi" /* static inline helpers only: no ABI crosses */
#endif
/* 16 floats as a GCC/clang vector: each ISA build lowers it to its widest registers. */
typedef float tk_v16 __attribute__((vector_size(64)));
static inline tk_v16 tk_v16_load(const float *p) { tk_v16 v; memcpy(&v, p, sizeof v); return v; }
static inline void tk_v16_store(float *p, tk_v16 v) { memcpy(p, &v, sizeof v); }
static inline tk_v16 tk_v16_set1(float x) { return (tk_v16){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }
/* The block scan's vectors: the build's widest register (TK_VW floats) as a GCC/clang
 * vector, so broadcasts and FMAs stay in registers (a 16-float vector with FMA intrinsics
 * goes through memory on AVX2). tk_vf_fma is c + a*b, fused where the build has FMA (ISO C
 * mode never contracts a*b + c by itself). GEMM tiles are 4 rows x TK_NP vectors. */
#if defined(__AVX512F__)
#include <immintrin.h>
#define TK_VW 16
#define TK_NP 4 /* 4 x 4 zmm sums of the 32 registers */
typedef float tk_vf __attribute__((vector_size(64)));
typedef int32_t tk_vi __attribute__((vector_size(64)));
static inline tk_vf tk_vf_fma(tk_vf a, tk_vf b, tk_vf c) {
    return (tk_vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
}
#elif defined(__FMA__)
#include <immintrin.h>
#define TK_VW 8
#define TK_NP 2 /* 4 x 2 ymm sums of the 16 registers */
typedef float tk_vf __attribute__((vector_size(32)));
typedef int32_t tk_vi __attribute__((vector_size(32)));
static inline tk_vf tk_vf_fma(tk_vf a, tk_vf b, tk_vf c) {
    return (tk_vf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
}
#else
#define TK_VW 8
#define TK_NP 1
typedef float tk_vf __attribute__((vector_size(32)));
typedef int32_t tk_vi __attribute__((vector_size(32)));
static inline tk_vf tk_vf_fma(tk_vf a, tk_vf b, tk_vf c) { return c + a * b; }
#endif
static inline tk_vf tk_vf_load(const float *p) { tk_vf v; memcpy(&v, p, sizeof v); return v; }
static inline void tk_vf_store(float *p, tk_vf v) { memcpy(p, &v, sizeof v); }
static inline tk_vf tk_vf_set1(float x) { return x - (tk_vf){0}; } /* x - 0 keeps -0.0 */

/* z / (1 + e^-z), TK_VW at a time. e^x: x clamped to [-87, 88] (no inf/NaN: silu's tails
 * are z and ~0 there), x = n ln2 + r with |r| <= ln2/2 (n rounded by the 1.5*2^23 trick,
 * ln2 in two parts), e^r by its degree-7 Taylor polynomial (truncation < 2e-9 relative),
 * times 2^n built in the exponent bits. ~2 ulp against expf. */
static inline tk_vf tk_vf_silu(tk_vf z) {
    tk_vf x = -z;
    const tk_vi lo = x < tk_vf_set1(-87.0f), hi = x > tk_vf_set1(88.0f);
    x = (tk_vf)(((tk_vi)x & ~(lo | hi)) | ((tk_vi)tk_vf_set1(-87.0f) & lo) |
                ((tk_vi)tk_vf_set1(88.0f) & hi));
    const tk_vf magic = tk_vf_set1(12582912.0f);
    const tk_vf t = tk_vf_fma(x, tk_vf_set1(1.44269504f), magic);
    const tk_vf nf = t - magic;
    const tk_vi n = (tk_vi)t - (tk_vi)magic;
    tk_vf r = tk_vf_fma(nf, tk_vf_set1(-0.693145752f), x);
    r = tk_vf_fma(nf, tk_vf_set1(-1.42860677e-6f), r);
    tk_vf p = tk_vf_set1(1.0f / 5040.0f);
    p = tk_vf_fma(p, r, tk_vf_set1(1.0f / 720.0f));
    p = tk_vf_fma(p, r, tk_vf_set1(1.0f / 120.0f));
    p = tk_vf_fma(p, r, tk_vf_set1(1.0f / 24.0f));
    p = tk_vf_fma(p, r, tk_vf_set1(1.0f / 6.0f));
    p = tk_vf_fma(p, r, tk_vf_set1(0.5f));
    p = tk_vf_fma(p, r, tk_vf_set1(1.0f));
    p = tk_vf_fma(p, r, tk_vf_set1(1.0f));
    const tk_vf e = p * (tk_vf)((n + 127) << 23);
    return z / (tk_vf_set1(1.0f) + e);
}
#endif

static inline float TK_FN(silu_)(float x) { return x / (1.0f + expf(-x)); }

static inline float TK_FN(dot_)(const float *restrict x, const float *restrict y, int n) {
    tk_v16 acc = tk_v16_set1(0.0f);
    int j = 0;
    for (; j + 16 <= n; j += 16) acc += tk_v16_load(x + j) * tk_v16_load(y + j);
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
 * which is HF's S = S*g; delta = (v - S^T k) beta; S += k delta^T; o = S^T q.
 *
 * Every column j of S (a value channel) evolves on its own: its pass needs pdl[j] and
 * the token's scalars and k, q only. So the walk takes up to TK_GDN_WALK_T tokens at a
 * time column block by column block (16 columns: dk x 64 bytes, in L1), and S is read
 * and written once per group of tokens instead of once per token (a 64 KiB head state
 * otherwise streams from L2/L3 for every token of a speculative verify). Each element
 * still gets exactly the operations of a one-token call, in the same order (kv and sq
 * summed over i = 0..dk-1), so any grouping gives the same bits as single steps. */
#define TK_GDN_WALK_T 16

/* The per-token tail: o -> out by the gated RMSNorm rmsnorm(o) * norm * silu(z). */
static inline void TK_FN(gdn_gated_norm_)(const tern_gdn_args *a, int t, int p, const float *o) {
    const int dv = a->dv, nv = a->n_v;
    float ss = TK_FN(dot_)(o, o, dv);
    const float inv = 1.0f / sqrtf(ss / (float)dv + a->eps);
    const float *z = a->z + (size_t)t * nv * dv + (size_t)p * dv;
    float *out = a->out + (size_t)t * nv * dv + (size_t)p * dv;
    for (int j = 0; j < dv; j++) out[j] = o[j] * inv * a->norm[j] * TK_FN(silu_)(z[j]);
}

/* Columns [jb, jb + 16 nc) of S (nc a constant after inlining) over the group's nt tokens. */
static inline __attribute__((always_inline)) void TK_FN(gdn_walk_cols_)(
    const int nc, float *restrict S, float *restrict pdl, int dk, int dv, int jb, int nt,
    const float *const *ks, const float *const *qs, const float *const *vs, const float *const *pks,
    const float *pds, const float *dec, const float *bet, const float *kqs, float (*o)[512]) {
    tk_v16 dl[4];
#pragma GCC unroll 4
    for (int c = 0; c < nc; c++) dl[c] = tk_v16_load(pdl + jb + 16 * c);
    for (int u = 0; u < nt; u++) {
        const float *k = ks[u], *q = qs[u], *ai = pks[u];
        const tk_v16 pdv = tk_v16_set1(pds[u]);
        tk_v16 kvv[4], sqv[4];
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++) kvv[c] = sqv[c] = tk_v16_set1(0.0f);
        float *Si = S + jb;
        for (int i = 0; i < dk; i++, Si += dv) {
            const tk_v16 av = tk_v16_set1(ai[i]), kvi = tk_v16_set1(k[i]), qvi = tk_v16_set1(q[i]);
#pragma GCC unroll 4
            for (int c = 0; c < nc; c++) {
                tk_v16 sv = tk_v16_load(Si + 16 * c) * pdv + av * dl[c];
                tk_v16_store(Si + 16 * c, sv);
                kvv[c] = kvv[c] + sv * kvi;
                sqv[c] = sqv[c] + sv * qvi;
            }
        }
        const tk_v16 decv = tk_v16_set1(dec[u]), betv = tk_v16_set1(bet[u]), kqv = tk_v16_set1(kqs[u]);
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++) {
            const tk_v16 d = (tk_v16_load(vs[u] + jb + 16 * c) - decv * kvv[c]) * betv;
            tk_v16_store(o[u] + jb + 16 * c, decv * sqv[c] + kqv * d);
            dl[c] = d;
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < nc; c++) tk_v16_store(pdl + jb + 16 * c, dl[c]);
}

void TK_FN(tern_gdn_head)(const tern_gdn_args *a, int conv_ch, int p) {
    const int dk = a->dk, dv = a->dv, C = conv_ch, nv = a->n_v, nk = a->n_k;
    const int r = nv / nk;
    const int kh = a->v_tiled ? p % nk : p / r;
    float *restrict S = a->state + (size_t)p * dk * dv;
    float *restrict pend = a->pending + (size_t)p * (1 + dk + dv);
    float *restrict pk = pend + 1, *restrict pdl = pend + 1 + dk;
    float kv[512] __attribute__((aligned(64))), sq[512] __attribute__((aligned(64)));
    float o[TK_GDN_WALK_T][512] __attribute__((aligned(64)));
    for (int t0 = 0; t0 < a->rows; t0 += TK_GDN_WALK_T) {
        const int nt = a->rows - t0 < TK_GDN_WALK_T ? a->rows - t0 : TK_GDN_WALK_T;
        /* the tokens' scalars; token t's pending update is token t-1's (the stored one for
         * the group's first) */
        const float *qs[TK_GDN_WALK_T], *ks[TK_GDN_WALK_T], *vs[TK_GDN_WALK_T], *pks[TK_GDN_WALK_T];
        float dec[TK_GDN_WALK_T], bet[TK_GDN_WALK_T], kqs[TK_GDN_WALK_T], pds[TK_GDN_WALK_T];
        for (int u = 0; u < nt; u++) {
            const int t = t0 + u;
            const float *row = a->work + (size_t)t * C;
            qs[u] = row + (size_t)kh * dk;
            ks[u] = row + (size_t)nk * dk + (size_t)kh * dk;
            vs[u] = row + (size_t)2 * nk * dk + (size_t)p * dv;
            float x = a->a[(size_t)t * nv + p] + a->dt_bias[p];
            float sp = x > 20.0f ? x : log1pf(expf(x));
            dec[u] = expf(a->ssm_a[p] * sp);
            bet[u] = 1.0f / (1.0f + expf(-a->b[(size_t)t * nv + p]));
            kqs[u] = TK_FN(dot_)(ks[u], qs[u], dk);
            pds[u] = u ? dec[u - 1] : pend[0];
            pks[u] = u ? ks[u - 1] : pk;
        }
        if (dv % 16 == 0) {
            /* 16-wide vector extension (zmm / 2 ymm / 4 xmm per ISA build); 4 column blocks
             * at a time where they fit, so 8 independent sums hide the add latency */
            int jb = 0;
            for (; jb + 64 <= dv; jb += 64) TK_FN(gdn_walk_cols_)(4, S, pdl, dk, dv, jb, nt, ks, qs, vs, pks, pds, dec, bet, kqs, o);
            for (; jb < dv; jb += 16) TK_FN(gdn_walk_cols_)(1, S, pdl, dk, dv, jb, nt, ks, qs, vs, pks, pds, dec, bet, kqs, o);
        } else {
            for (int u = 0; u < nt; u++) {
                const float *k = ks[u], *q = qs[u], *ai = pks[u];
                const float pd = pds[u], decay = dec[u], beta = bet[u], kq = kqs[u];
                for (int j = 0; j < dv; j++) kv[j] = sq[j] = 0;
                for (int i = 0; i < dk; i++) {
                    float *restrict Si = S + (size_t)i * dv;
                    const float aii = ai[i], ki = k[i], qi = q[i];
                    for (int j = 0; j < dv; j++) {
                        float sv = Si[j] * pd + aii * pdl[j];
                        Si[j] = sv;
                        kv[j] += sv * ki;
                        sq[j] += sv * qi;
                    }
                }
                for (int j = 0; j < dv; j++) {
                    float d = (vs[u][j] - decay * kv[j]) * beta;
                    pdl[j] = d;
                    o[u][j] = decay * sq[j] + kq * d;
                }
            }
        }
        pend[0] = dec[nt - 1];
        for (int i = 0; i < dk; i++) pk[i] = ks[nt - 1][i];
        for (int u = 0; u < nt; u++) TK_FN(gdn_gated_norm_)(a, t0 + u, p, o[u]);
    }
}

/* ------------------------------------------- block-wise (chunked) GDN scan */

/* One tile of gemm_: rows r < mr (<= 4) x TK_VW*np columns (np = TK_NP or 1, a constant
 * after inlining, so the 4 x np sums live in registers); rows past mr repeat row 0 and
 * are not stored. */
static inline __attribute__((always_inline)) void TK_FN(gemm_tile_)(
    const int np, int mr, int kd, const float *A, size_t lda, const float *B, size_t ldb,
    float *C, size_t ldc, const float *cs, const float *as) {
    const float *ar[4];
    for (int r = 0; r < 4; r++) ar[r] = A + (size_t)(r < mr ? r : 0) * lda;
    tk_vf acc[4][TK_NP];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
        for (int u = 0; u < np; u++) acc[r][u] = tk_vf_set1(0.0f);
    for (int d = 0; d < kd; d++) {
        const float *b = B + (size_t)d * ldb;
        tk_vf bv[TK_NP];
#pragma GCC unroll 4
        for (int u = 0; u < np; u++) bv[u] = tk_vf_load(b + TK_VW * u);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            const tk_vf av = tk_vf_set1(ar[r][d]);
#pragma GCC unroll 4
            for (int u = 0; u < np; u++) acc[r][u] = tk_vf_fma(av, bv[u], acc[r][u]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        if (r >= mr) break;
        float *c = C + (size_t)r * ldc;
        const tk_vf sa = tk_vf_set1(as[r]);
#pragma GCC unroll 4
        for (int u = 0; u < np; u++) {
            tk_vf y = acc[r][u] * sa;
            if (cs) y = tk_vf_fma(tk_vf_set1(cs[r]), tk_vf_load(c + TK_VW * u), y);
            tk_vf_store(c + TK_VW * u, y);
        }
    }
}

/* C[r][c] = (cs ? cs[r]*C[r][c] : 0) + as[r] * sum_{d<kd} A[r*lda + d] * B[d*ldb + c] for
 * r < m, c < nc: the block scan's products (A, B, C row-major with strides in floats). Column
 * panels outside, so a panel of B stays in L1 across the row tiles; the last < TK_VW columns
 * are scalar. */
static void TK_FN(gemm_)(int m, int nc, int kd, const float *A, size_t lda, const float *B,
                         size_t ldb, float *C, size_t ldc, const float *cs, const float *as) {
    int c = 0;
    for (; c + TK_VW * TK_NP <= nc; c += TK_VW * TK_NP)
        for (int r = 0; r < m; r += 4)
            TK_FN(gemm_tile_)(TK_NP, m - r < 4 ? m - r : 4, kd, A + (size_t)r * lda, lda, B + c,
                              ldb, C + (size_t)r * ldc + c, ldc, cs ? cs + r : NULL, as + r);
    for (; c + TK_VW <= nc; c += TK_VW)
        for (int r = 0; r < m; r += 4)
            TK_FN(gemm_tile_)(1, m - r < 4 ? m - r : 4, kd, A + (size_t)r * lda, lda, B + c,
                              ldb, C + (size_t)r * ldc + c, ldc, cs ? cs + r : NULL, as + r);
    for (; c < nc; c++)
        for (int r = 0; r < m; r++) {
            float s = 0;
            for (int d = 0; d < kd; d++) s += A[(size_t)r * lda + d] * B[(size_t)d * ldb + c];
            float *y = C + (size_t)r * ldc + c;
            *y = (cs ? cs[r] * *y : 0.0f) + as[r] * s;
        }
}

/* Columns [c, c+TK_VW*np) of row i in the block's forward substitution (see below):
 *   V'_i = beta_i R_i - sum_{j<i} A_ij V'_j   (R_i, then V'_i, in row i of V)
 *   O_i += sum_{j<=i} M_ij V'_j */
static inline __attribute__((always_inline)) void TK_FN(subst_panel_)(
    const int np, int i, int c, float *V, size_t ldv, float *O, const float *ai,
    const float *mi, float beta) {
    tk_vf av[TK_NP], ao[TK_NP];
    float *vi = V + (size_t)i * ldv + c, *oi = O + c;
    const tk_vf bv = tk_vf_set1(beta);
#pragma GCC unroll 4
    for (int u = 0; u < np; u++) {
        av[u] = tk_vf_load(vi + TK_VW * u) * bv;
        ao[u] = tk_vf_load(oi + TK_VW * u);
    }
    for (int j = 0; j < i; j++) {
        const float *vj = V + (size_t)j * ldv + c;
        const tk_vf na = tk_vf_set1(-ai[j]), m = tk_vf_set1(mi[j]);
#pragma GCC unroll 4
        for (int u = 0; u < np; u++) {
            const tk_vf x = tk_vf_load(vj + TK_VW * u);
            av[u] = tk_vf_fma(na, x, av[u]);
            ao[u] = tk_vf_fma(m, x, ao[u]);
        }
    }
    const tk_vf mii = tk_vf_set1(mi[i]);
#pragma GCC unroll 4
    for (int u = 0; u < np; u++) {
        tk_vf_store(vi + TK_VW * u, av[u]);
        tk_vf_store(oi + TK_VW * u, tk_vf_fma(mii, av[u], ao[u]));
    }
}

/* A block holds at most min(TK_GDN_BLK, TK_GDN_KV / max(dk, dv)) tokens (a multiple of 16:
 * 64 for 128-wide heads, 16 for 512), so its K^T (dk x block), V' (block x dv) and two
 * block x block matrices take 96 KiB of stack whatever the head size (the back-end uses
 * blocks for dk, dv <= 512). */
#define TK_GDN_KV 8192
#define TK_GDN_BLK 64

/* The same recurrence as tern_gdn_head over the chunk's rows, block by block (the WY / UT
 * form of the delta rule, as in transformers' torch_chunk_gated_delta_rule). In a block
 * of n tokens with incoming state S0, decay products E_ij = prod_{j<s<=i} decay_s (<= 1;
 * running products, never a quotient) and e_i = E_i,-1 = prod_{s<=i} decay_s:
 *   A_ij = beta_i (k_i.k_j) E_ij (j < i),  M_ij = (q_i.k_j) E_ij (j <= i)
 *   V'   = (I + A)^-1 (beta * (V - diag(e) K S0))      (forward substitution; V'_i is
 *          exactly the token's delta of the sequential walk)
 *   O    = diag(e) Q S0 + M V'
 *   S    = e_{n-1} S0 + K^T diag(E_{n-1,j}) V'
 * so S is read three times and written once per block, and the work is GEMMs with the
 * sums in registers. The pending update is folded into S first and left empty
 * (pd = 1, pk = pdl = 0), so decode steps continue from it. */
void TK_FN(tern_gdn_head_blocks)(const tern_gdn_args *a, int conv_ch, int p) {
    const int dk = a->dk, dv = a->dv, C = conv_ch, nv = a->n_v, nk = a->n_k;
    const int r = nv / nk;
    const int kh = a->v_tiled ? p % nk : p / r;
    const size_t ov = (size_t)nv * dv;
    float *restrict S = a->state + (size_t)p * dk * dv;
    float *restrict pend = a->pending + (size_t)p * (1 + dk + dv);
    float *restrict pk = pend + 1, *restrict pdl = pend + 1 + dk;
    /* fold the pending rank-1 update (none after a block scan: pd = 1, pk = pdl = 0) */
    bool folded = pend[0] == 1.0f;
    for (int i = 0; i < dk + dv && folded; i++) folded = pk[i] == 0.0f;
    if (!folded) {
        const float pd = pend[0];
        for (int i = 0; i < dk; i++) {
            float *Si = S + (size_t)i * dv;
            const float ai = pk[i];
            int j = 0;
            for (; j + TK_VW <= dv; j += TK_VW)
                tk_vf_store(Si + j, tk_vf_fma(tk_vf_set1(ai), tk_vf_load(pdl + j),
                                              tk_vf_load(Si + j) * tk_vf_set1(pd)));
            for (; j < dv; j++) Si[j] = Si[j] * pd + ai * pdl[j];
        }
        pend[0] = 1.0f;
        memset(pk, 0, (size_t)(dk + dv) * sizeof(float));
    }

    int bmax = TK_GDN_KV / (dk > dv ? dk : dv) / 16 * 16;
    if (bmax > TK_GDN_BLK) bmax = TK_GDN_BLK;
    const int ldk = bmax;
    /* V' lives in vb (rows dv apart): the work rows are conv_ch apart, often a multiple of
     * 4 KiB, and a block of them would share a handful of L1 sets */
    float kt[TK_GDN_KV] __attribute__((aligned(64)));
    float vb[TK_GDN_KV] __attribute__((aligned(64)));
    float kk[TK_GDN_BLK * TK_GDN_BLK] __attribute__((aligned(64)));
    float qk[TK_GDN_BLK * TK_GDN_BLK] __attribute__((aligned(64)));
    float dec[TK_GDN_BLK], beta[TK_GDN_BLK], eg[TK_GDN_BLK], neg[TK_GDN_BLK], ecol[TK_GDN_BLK];
    float ones[512], glast[512];
    for (int i = 0; i < 512; i++) ones[i] = 1.0f;
    const int nblk = (a->rows + bmax - 1) / bmax;
    for (int b = 0, t0 = 0; b < nblk; b++) {
        /* balanced blocks: 65 rows -> 33 + 32, not 64 + 1 */
        const int n = (a->rows - t0 + (nblk - b) - 1) / (nblk - b);
        const float *Q = a->work + (size_t)t0 * C + (size_t)kh * dk;
        const float *K = Q + (size_t)nk * dk;
        const float *Vin = a->work + (size_t)t0 * C + (size_t)2 * nk * dk + (size_t)p * dv;
        float *V = vb;
        float *O = a->out + (size_t)t0 * ov + (size_t)p * dv;
        float e = 1.0f;
        for (int i = 0; i < n; i++) {
            const size_t t = (size_t)(t0 + i);
            float x = a->a[t * nv + p] + a->dt_bias[p];
            float sp = x > 20.0f ? x : log1pf(expf(x));
            dec[i] = expf(a->ssm_a[p] * sp);
            beta[i] = 1.0f / (1.0f + expf(-a->b[t * nv + p]));
            e *= dec[i];
            if (e < 1e-30f) e = 0.0f; /* no denormals: below this nothing of S0 is left */
            eg[i] = e;
            neg[i] = -e;
        }
        const int n16 = (n + 15) / 16 * 16;
        for (int j = 0; j < n16; j++) {
            const float *kj = K + (size_t)j * C;
            if (j < n)
                for (int d = 0; d < dk; d++) kt[(size_t)d * ldk + j] = kj[d];
            else
                for (int d = 0; d < dk; d++) kt[(size_t)d * ldk + j] = 0.0f;
        }
        for (int j = 0; j < n; j++)
            memcpy(V + (size_t)j * dv, Vin + (size_t)j * C, dv * sizeof(float));
        /* R (unscaled by beta) = V - diag(e) K S0;  O = diag(e) Q S0 */
        TK_FN(gemm_)(n, dv, dk, K, C, S, dv, V, dv, ones, neg);
        TK_FN(gemm_)(n, dv, dk, Q, C, S, dv, O, ov, NULL, eg);
        /* k_i.k_j and q_i.k_j on and below the diagonal (4-row tiles; columns up to the
         * next multiple of 16, K^T's zero padding) */
        for (int i0 = 0; i0 < n; i0 += 4) {
            const int mr = n - i0 < 4 ? n - i0 : 4, nc = (i0 + mr + 15) / 16 * 16;
            TK_FN(gemm_)(mr, nc, dk, K + (size_t)i0 * C, C, kt, ldk, kk + (size_t)i0 * ldk, ldk,
                         NULL, ones);
            TK_FN(gemm_)(mr, nc, dk, Q + (size_t)i0 * C, C, kt, ldk, qk + (size_t)i0 * ldk, ldk,
                         NULL, ones);
        }
        for (int i = 0; i < n; i++) {
            float *ki = kk + (size_t)i * ldk, *qi = qk + (size_t)i * ldk;
            float w = 1.0f; /* E_ij, walking j down from i */
            for (int j = i; j >= 0; j--) {
                if (j < i) ki[j] *= beta[i] * w;
                qi[j] *= w;
                if (i == n - 1) ecol[j] = w;
                w *= dec[j];
                if (w < 1e-30f) w = 0.0f;
            }
        }
        /* V' and O, row by row */
        for (int i = 0; i < n; i++) {
            const float *ai = kk + (size_t)i * ldk, *mi = qk + (size_t)i * ldk;
            float *oi = O + (size_t)i * ov;
            int c = 0;
            for (; c + TK_VW * TK_NP <= dv; c += TK_VW * TK_NP)
                TK_FN(subst_panel_)(TK_NP, i, c, V, dv, oi, ai, mi, beta[i]);
            for (; c + TK_VW <= dv; c += TK_VW)
                TK_FN(subst_panel_)(1, i, c, V, dv, oi, ai, mi, beta[i]);
            for (; c < dv; c++) {
                float sv = beta[i] * V[(size_t)i * dv + c], so = oi[c];
                for (int j = 0; j < i; j++) {
                    const float x = V[(size_t)j * dv + c];
                    sv -= ai[j] * x;
                    so += mi[j] * x;
                }
                V[(size_t)i * dv + c] = sv;
                oi[c] = so + mi[i] * sv;
            }
        }
        /* S = e_{n-1} S0 + K^T diag(E_{n-1,j}) V' */
        for (int j = 0; j < n; j++) {
            float *vj = V + (size_t)j * dv;
            int c = 0;
            for (; c + TK_VW <= dv; c += TK_VW)
                tk_vf_store(vj + c, tk_vf_load(vj + c) * tk_vf_set1(ecol[j]));
            for (; c < dv; c++) vj[c] *= ecol[j];
        }
        for (int i = 0; i < dk; i++) glast[i] = eg[n - 1];
        TK_FN(gemm_)(dk, dv, n, kt, ldk, V, dv, S, dv, glast, ones);
        /* gated RMSNorm: rmsnorm(o) * norm * silu(z) */
        for (int i = 0; i < n; i++) {
            float *o = O + (size_t)i * ov;
            const float ss = TK_FN(dot_)(o, o, dv);
            const float inv = 1.0f / sqrtf(ss / (float)dv + a->eps);
            const float *z = a->z + (size_t)(t0 + i) * ov + (size_t)p * dv;
            int j = 0;
            for (; j + TK_VW <= dv; j += TK_VW)
                tk_vf_store(o + j, tk_vf_load(o + j) * tk_vf_set1(inv) *
                                       tk_vf_load(a->norm + j) * tk_vf_silu(tk_vf_load(z + j)));
            for (; j < dv; j++) o[j] = o[j] * inv * a->norm[j] * TK_FN(silu_)(z[j]);
        }
        t0 += n;
    }
}

/* ------------------------------------------------------ KV cache reads
 * 16 stored values as a tk_v16: F16C / AVX-512 conversions where the build has them,
 * else the exact scalar conversions (the reference; bit-identical results, conversions
 * to float are exact). */
#ifndef TK_KV_DEFINED
#define TK_KV_DEFINED
static inline float tk_h2f(uint16_t h) {
    const uint32_t sg = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint32_t u;
    float f;
    if (e == 0) {
        f = (float)m * (1.0f / 16777216.0f); /* zero or subnormal: m * 2^-24, exact */
        memcpy(&u, &f, 4);
        u |= sg;
    } else if (e == 31) {
        u = sg | 0x7f800000u | (m << 13);
    } else {
        u = sg | ((e + 112u) << 23) | (m << 13);
    }
    memcpy(&f, &u, 4);
    return f;
}
static inline float tk_b2f(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline tk_v16 tk_ld16_f16(const uint16_t *p) {
#if defined(__AVX512F__)
    return (tk_v16)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
#elif defined(__F16C__) && defined(__AVX2__)
    const __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
    const __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p + 8)));
    tk_v16 v;
    memcpy(&v, &lo, 32);
    memcpy((char *)&v + 32, &hi, 32);
    return v;
#else
    tk_v16 v;
    for (int u = 0; u < 16; u++) v[u] = tk_h2f(p[u]);
    return v;
#endif
}
static inline tk_v16 tk_ld16_bf16(const uint16_t *p) {
#if defined(__AVX512F__)
    const __m512i w = _mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)p)), 16);
    return (tk_v16)_mm512_castsi512_ps(w);
#elif defined(__AVX2__)
    const __m256i lo = _mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)), 16);
    const __m256i hi = _mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p + 8))), 16);
    tk_v16 v;
    memcpy(&v, &lo, 32);
    memcpy((char *)&v + 32, &hi, 32);
    return v;
#else
    tk_v16 v;
    for (int u = 0; u < 16; u++) v[u] = tk_b2f(p[u]);
    return v;
#endif
}
static inline tk_v16 tk_ld16_i8(const int8_t *p) {
#if defined(__AVX512F__)
    return (tk_v16)_mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)));
#elif defined(__AVX2__)
    const __m256 lo = _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p)));
    const __m256 hi = _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(p + 8))));
    tk_v16 v;
    memcpy(&v, &lo, 32);
    memcpy((char *)&v + 32, &hi, 32);
    return v;
#else
    tk_v16 v;
    for (int u = 0; u < 16; u++) v[u] = (float)p[u];
    return v;
#endif
}
static inline size_t tk_kv_bytes(tern_kv_type t, size_t n) {
    switch (t) {
    case TERN_KV_F16:
    case TERN_KV_BF16: return 2 * n;
    case TERN_KV_Q8_0: return n / 32 * 34;
    default: return 4 * n;
    }
}
static inline float tk_lanes_sum(tk_v16 acc, float s) {
    for (int u = 0; u < 16; u++) s += acc[u];
    return s;
}
#endif

/* q . k for a stored key row of n values: 16 partial sums (the order of dot_), scalar
 * tail, then the lanes. */
static inline float TK_FN(dot_f16_)(const float *restrict q, const uint16_t *restrict k, int n) {
    tk_v16 acc = tk_v16_set1(0.0f);
    int j = 0;
    for (; j + 16 <= n; j += 16) acc += tk_v16_load(q + j) * tk_ld16_f16(k + j);
    float s = 0;
    for (; j < n; j++) s += q[j] * tk_h2f(k[j]);
    return tk_lanes_sum(acc, s);
}
static inline float TK_FN(dot_bf16_)(const float *restrict q, const uint16_t *restrict k, int n) {
    tk_v16 acc = tk_v16_set1(0.0f);
    int j = 0;
    for (; j + 16 <= n; j += 16) acc += tk_v16_load(q + j) * tk_ld16_bf16(k + j);
    float s = 0;
    for (; j < n; j++) s += q[j] * tk_b2f(k[j]);
    return tk_lanes_sum(acc, s);
}
/* Q8_0: per block of 32, t = q[0:16]*k[0:16] + q[16:32]*k[16:32] in integer-valued
 * floats, then acc += d * t. */
static inline float TK_FN(dot_q8_)(const float *restrict q, const uint8_t *restrict k, int n) {
    tk_v16 acc = tk_v16_set1(0.0f);
    for (int b = 0; b < n / 32; b++, k += 34, q += 32) {
        uint16_t dh;
        memcpy(&dh, k, 2);
        const int8_t *qs = (const int8_t *)(k + 2);
        const tk_v16 t = tk_v16_load(q) * tk_ld16_i8(qs) + tk_v16_load(q + 16) * tk_ld16_i8(qs + 16);
        acc += tk_v16_set1(tk_h2f(dh)) * t;
    }
    return tk_lanes_sum(acc, 0.0f);
}

/* o[0..n) += w * v for a stored value row. */
static inline void TK_FN(axpy_f32_)(float *restrict o, float w, const float *restrict v, int n) {
    const tk_v16 wv = tk_v16_set1(w);
    int j = 0;
    for (; j + 16 <= n; j += 16) tk_v16_store(o + j, tk_v16_load(o + j) + wv * tk_v16_load(v + j));
    for (; j < n; j++) o[j] += w * v[j];
}
static inline void TK_FN(axpy_f16_)(float *restrict o, float w, const uint16_t *restrict v, int n) {
    const tk_v16 wv = tk_v16_set1(w);
    int j = 0;
    for (; j + 16 <= n; j += 16) tk_v16_store(o + j, tk_v16_load(o + j) + wv * tk_ld16_f16(v + j));
    for (; j < n; j++) o[j] += w * tk_h2f(v[j]);
}
static inline void TK_FN(axpy_bf16_)(float *restrict o, float w, const uint16_t *restrict v, int n) {
    const tk_v16 wv = tk_v16_set1(w);
    int j = 0;
    for (; j + 16 <= n; j += 16) tk_v16_store(o + j, tk_v16_load(o + j) + wv * tk_ld16_bf16(v + j));
    for (; j < n; j++) o[j] += w * tk_b2f(v[j]);
}
static inline void TK_FN(axpy_q8_)(float *restrict o, float w, const uint8_t *restrict v, int n) {
    for (int b = 0; b < n / 32; b++, v += 34, o += 32) {
        uint16_t dh;
        memcpy(&dh, v, 2);
        const int8_t *qs = (const int8_t *)(v + 2);
        const tk_v16 wd = tk_v16_set1(w * tk_h2f(dh));
        tk_v16_store(o, tk_v16_load(o) + wd * tk_ld16_i8(qs));
        tk_v16_store(o + 16, tk_v16_load(o + 16) + wd * tk_ld16_i8(qs + 16));
    }
}

/* Causal softmax attention of query head h for every row of the chunk, the caches read
 * in their stored types (the type switch outside the position loops). */
void TK_FN(tern_attn_head)(const tern_attn_args *a, int h) {
    const int group = a->n_head / a->n_head_kv, kvh = h / group, hd = a->head_dim;
    const size_t kvw = (size_t)a->n_head_kv * hd;
    const size_t krs = tk_kv_bytes(a->k_type, kvw), vrs = tk_kv_bytes(a->v_type, kvw);
    const uint8_t *k0 = (const uint8_t *)a->kcache + (size_t)kvh * tk_kv_bytes(a->k_type, hd);
    const uint8_t *v0 = (const uint8_t *)a->vcache + (size_t)kvh * tk_kv_bytes(a->v_type, hd);
    const float scale = a->scale;
    float *sc = a->scratch + (size_t)h * (a->pos0 + a->rows);
    for (int i = 0; i < a->rows; i++) {
        const float *q = a->q + i * a->q_stride + (size_t)h * hd;
        const int np = a->pos0 + i + 1;
        float mx = -INFINITY;
#define TK_SCORES(DOT)                                                                   \
    for (int p = 0; p < np; p++) {                                                       \
        const uint8_t *kr = k0 + (size_t)p * krs;                                        \
        const float s = (DOT) * scale;                                                   \
        sc[p] = s;                                                                       \
        if (s > mx) mx = s;                                                              \
    }
        switch (a->k_type) {
        case TERN_KV_F16: TK_SCORES(TK_FN(dot_f16_)(q, (const uint16_t *)(const void *)kr, hd)) break;
        case TERN_KV_BF16: TK_SCORES(TK_FN(dot_bf16_)(q, (const uint16_t *)(const void *)kr, hd)) break;
        case TERN_KV_Q8_0: TK_SCORES(TK_FN(dot_q8_)(q, kr, hd)) break;
        default: TK_SCORES(TK_FN(dot_)(q, (const float *)(const void *)kr, hd)) break;
        }
#undef TK_SCORES
        float sum = 0;
        for (int p = 0; p < np; p++) {
            sc[p] = expf(sc[p] - mx);
            sum += sc[p];
        }
        const float inv = 1.0f / sum;
        float *restrict o = a->out + (size_t)i * a->n_head * hd + (size_t)h * hd;
        for (int j = 0; j < hd; j++) o[j] = 0;
#define TK_ACC(AXPY)                                                                     \
    for (int p = 0; p < np; p++) {                                                       \
        const uint8_t *vr = v0 + (size_t)p * vrs;                                        \
        AXPY;                                                                            \
    }
        switch (a->v_type) {
        case TERN_KV_F16: TK_ACC(TK_FN(axpy_f16_)(o, sc[p] * inv, (const uint16_t *)(const void *)vr, hd)) break;
        case TERN_KV_BF16: TK_ACC(TK_FN(axpy_bf16_)(o, sc[p] * inv, (const uint16_t *)(const void *)vr, hd)) break;
        case TERN_KV_Q8_0: TK_ACC(TK_FN(axpy_q8_)(o, sc[p] * inv, vr, hd)) break;
        default: TK_ACC(TK_FN(axpy_f32_)(o, sc[p] * inv, (const float *)(const void *)vr, hd)) break;
        }
#undef TK_ACC
    }
}
