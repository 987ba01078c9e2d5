/*
 * backend_cpu.c - the CPU back-end table (backend.h): ternary matmuls, Hadamard
 * and fused sites come from the kernel library (kernels.h); attention, the GDN
 * conv + delta-rule recurrence, RoPE and the small per-head ops are here, in
 * plain C, split over the kernel thread pool (per head).
 *
 * Math follows transformers' modeling_qwen3_5.py / modeling_qwen3.py:
 *   GDN: causal depthwise conv1d (kernel conv_k, state = last conv_k-1 inputs), SiLU;
 *        q,k L2-normalised (x * rsqrt(sum x^2 + 1e-6)), q *= 1/sqrt(dk);
 *        g = ssm_a * softplus(a + dt_bias) (ssm_a = -exp(A_log)), beta = sigmoid(b);
 *        S = S*exp(g); kv = S^T k; delta = (v - kv)*beta; S += k delta^T; o = S^T q;
 *        out = rmsnorm(o)*norm*silu(z) per value head (all in fp32).
 *   attention: causal softmax(q k^T * scale) v over the cache, GQA h -> h/(n_head/n_kv).
 * The per-head loops live in cpu_ops.h (compiled per ISA, picked by tm_backend_cpu_select):
 *   the GDN recurrence as a token walk (decode, short calls) or block-wise (prefill chunks).
 *   RoPE: NEOX pairs (i, i+rot/2), inv_freq_i = theta^(-2i/rot), angles in double.
 */
#include "model/backend.h"
#include "formats/codecs.h"

#define TM_SFX _generic
#include "model/cpu_ops.h"
#undef TM_SFX

#if defined(TERN_HAVE_X86)
void tm_gdn_head_avx2(const tm_gdn_args *a, int conv_ch, int p);
void tm_gdn_head_blocks_avx2(const tm_gdn_args *a, int conv_ch, int p);
void tm_attn_head_avx2(const tm_attn_args *a, int h);
void tm_gdn_head_avx512(const tm_gdn_args *a, int conv_ch, int p);
void tm_gdn_head_blocks_avx512(const tm_gdn_args *a, int conv_ch, int p);
void tm_attn_head_avx512(const tm_attn_args *a, int h);
#endif

#include <math.h>
#include <stdlib.h>

/* --------------------------------------------------------- kernel wrappers */

static void cpu_matmul(tern_pool *pool, const tern_qmat *w, const float *x, size_t batch,
                       size_t xs, float *y, size_t ys) {
    tern_matmul(w, x, batch, xs, y, ys, pool);
}

static void cpu_matmul_multi(tern_pool *pool, int n, const tern_qmat *const *w, const float *x,
                             size_t batch, size_t xs, float *const *y, const size_t *ys) {
    tern_matmul_multi(n, w, x, batch, xs, y, ys, pool);
}

static void cpu_hadamard(tern_pool *pool, float *x, size_t rows, size_t n, size_t block,
                         const float *signs) {
    (void)pool;
    if (signs) tern_hadamard(x, rows, n, block, signs);
}

static void cpu_add_rmsnorm_hadamard(tern_pool *pool, float *r, const float *d, const float *gain,
                                     float eps, float *normed, float *rotated, size_t rows,
                                     size_t n, size_t block, const float *signs) {
    (void)pool;
    tern_add_rmsnorm_hadamard(r, d, gain, eps, normed, rotated, rows, n, block, signs);
}

static void cpu_swiglu_hadamard(tern_pool *pool, const float *gate, const float *up, float *out,
                                size_t rows, size_t n, size_t block, const float *signs) {
    (void)pool;
    tern_swiglu_hadamard(gate, up, out, rows, n, block, signs);
}

static tern_status cpu_embed(tern_pool *pool, const tern_qmat *emb, const int32_t *ids, size_t n,
                             float *out, size_t block, const float *signs) {
    (void)pool;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= emb->n)
            return tern_fail(TERN_ERR_RANGE, "token id %d out of range [0, %lld)", (int)ids[i],
                             (long long)emb->n);
        tern_status st = tern_dequant_row(emb->type, emb->data + (size_t)ids[i] * emb->row_bytes,
                                          (uint64_t)emb->k, out + i * emb->k, "token_embd.weight",
                                          (uint64_t)ids[i]);
        if (st) return st;
    }
    if (signs) tern_hadamard_inv(out, n, (size_t)emb->k, block, signs);
    return TERN_OK;
}

/* --------------------------------------------------------- per-head norm */

typedef struct {
    float *x;
    size_t rows, stride;
    int n_heads, hd;
    const float *gain;
    float eps;
} hn_ctx;

static void hn_task(void *vc, int task, int n_tasks) {
    hn_ctx *c = vc;
    size_t total = c->rows * (size_t)c->n_heads;
    size_t a = total * task / n_tasks, b = total * (task + 1) / n_tasks;
    for (size_t i = a; i < b; i++) {
        size_t r = i / c->n_heads, h = i % c->n_heads;
        float *v = c->x + r * c->stride + h * c->hd;
        double ss = 0;
        for (int j = 0; j < c->hd; j++) ss += (double)v[j] * v[j];
        float inv = (float)(1.0 / sqrt(ss / c->hd + c->eps));
        for (int j = 0; j < c->hd; j++) v[j] = v[j] * inv * c->gain[j];
    }
}

static void cpu_head_rmsnorm(tern_pool *pool, float *x, size_t rows, size_t stride, int n_heads,
                             int hd, const float *gain, float eps) {
    hn_ctx c = {x, rows, stride, n_heads, hd, gain, eps};
    int nt = pool ? tern_pool_size(pool) : 1;
    if (rows * n_heads < 8) nt = 1;
    tern_pool_run(nt > 1 ? pool : NULL, hn_task, &c, nt);
}

/* ------------------------------------------------------------------ RoPE */

static void cpu_rope(tern_pool *pool, float *x, size_t rows, size_t stride, int n_heads, int hd,
                     int rot, int pos0, float theta) {
    (void)pool;
    int half = rot / 2;
    for (size_t r = 0; r < rows; r++) {
        double pos = (double)(pos0 + (int)r);
        for (int i = 0; i < half; i++) {
            double inv = pow((double)theta, -2.0 * i / rot);
            double ang = pos * inv;
            float cs = (float)cos(ang), sn = (float)sin(ang);
            for (int h = 0; h < n_heads; h++) {
                float *v = x + r * stride + (size_t)h * hd;
                float x0 = v[i], x1 = v[i + half];
                v[i] = x0 * cs - x1 * sn;
                v[i + half] = x1 * cs + x0 * sn;
            }
        }
    }
}

/* ------------------------------------------------------------- attention */

/* Rows from which a GDN call runs the block-wise scan instead of the token walk, with
 * AVX2 / AVX-512 (docs/performance.md, "GDN prefill": break-even at 3-4 rows there). The
 * baseline build (no FMA) keeps the walk: its blocks measured 0.5-0.9x of it. */
#define TM_GDN_BLOCK_MIN 8

typedef void (*gdn_head_fn)(const tm_gdn_args *a, int conv_ch, int p);
typedef void (*attn_head_fn)(const tm_attn_args *a, int h);
static gdn_head_fn g_gdn_head = tm_gdn_head_generic;
static gdn_head_fn g_gdn_blocks = tm_gdn_head_blocks_generic;
static attn_head_fn g_attn_head = tm_attn_head_generic;
/* GDN calls of at least this many rows use the block-wise scan (0: never). */
static int g_gdn_block_min = 0;

/* Pick the hot-loop variant for the kernels' ISA (once per model load), and the
 * block-scan threshold (TERN_GDN_BLOCKS=N overrides it: calls of >= N rows take the
 * block scan, whatever the ISA; 0 keeps the token walk). */
void tm_backend_cpu_select(void) {
    tern_isa isa = tern_kernels_isa();
    g_gdn_head = tm_gdn_head_generic;
    g_gdn_blocks = tm_gdn_head_blocks_generic;
    g_attn_head = tm_attn_head_generic;
    int block_min = 0;
#if defined(TERN_HAVE_X86)
    if (isa == TERN_ISA_AVX512) {
        g_gdn_head = tm_gdn_head_avx512;
        g_gdn_blocks = tm_gdn_head_blocks_avx512;
        g_attn_head = tm_attn_head_avx512;
        block_min = TM_GDN_BLOCK_MIN;
    } else if (isa == TERN_ISA_AVX2) {
        g_gdn_head = tm_gdn_head_avx2;
        g_gdn_blocks = tm_gdn_head_blocks_avx2;
        g_attn_head = tm_attn_head_avx2;
        block_min = TM_GDN_BLOCK_MIN;
    }
#endif
    (void)isa;
    const char *e = getenv("TERN_GDN_BLOCKS");
    g_gdn_block_min = e && *e ? atoi(e) : block_min;
}

static void attn_task(void *vc, int h, int n_tasks) {
    (void)n_tasks;
    g_attn_head(vc, h);
}

static void cpu_attention(tern_pool *pool, const tm_attn_args *a) {
    tern_pool_run(pool, attn_task, (void *)a, a->n_head);
}

/* ------------------------------------------------------------------- GDN */

static inline float silu(float x) { return x / (1.0f + expf(-x)); }
static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

typedef struct {
    const tm_gdn_args *a;
    int conv_ch;
} gdn_ctx;

/* Conv + SiLU per channel range; also advances the conv state. Then L2-norms
 * q and k rows (done per key head in the second half of the task list). */
static void gdn_conv_task(void *vc, int task, int n_tasks) {
    gdn_ctx *c = vc;
    const tm_gdn_args *a = c->a;
    int C = c->conv_ch, K = a->conv_k, T = a->rows;
    int c0 = (int)((int64_t)C * task / n_tasks), c1 = (int)((int64_t)C * (task + 1) / n_tasks);
    for (int ch = c0; ch < c1; ch++) {
        const float *w = a->conv_w + (size_t)ch * K;
        for (int t = 0; t < T; t++) {
            float s = 0;
            for (int i = 0; i < K; i++) {
                int src = t - (K - 1) + i; /* input index; negative: from the state */
                float x = src >= 0 ? a->qkv[(size_t)src * C + ch]
                                   : a->conv_state[(size_t)(K - 1 + src) * C + ch];
                s += w[i] * x;
            }
            a->work[(size_t)t * C + ch] = silu(s);
        }
        /* new state: the last K-1 inputs of (state ++ rows) */
        for (int i = 0; i < K - 1; i++) {
            int src = T - (K - 1) + i;
            float x = src >= 0 ? a->qkv[(size_t)src * C + ch]
                               : a->conv_state[(size_t)(K - 1 + src) * C + ch];
            /* src < 0 reads state slot K-1+src >= i: ascending order is safe */
            a->conv_state[(size_t)i * C + ch] = x;
        }
    }
}

static void gdn_l2_task(void *vc, int task, int n_tasks) {
    gdn_ctx *c = vc;
    const tm_gdn_args *a = c->a;
    size_t total = (size_t)a->rows * 2 * a->n_k;
    size_t lo = total * task / n_tasks, hi = total * (task + 1) / n_tasks;
    float qscale = 1.0f / sqrtf((float)a->dk);
    for (size_t i = lo; i < hi; i++) {
        size_t t = i / (2 * a->n_k), hk = i % (2 * a->n_k);
        float *v = a->work + t * c->conv_ch + hk * a->dk;
        double ss = 0;
        for (int j = 0; j < a->dk; j++) ss += (double)v[j] * v[j];
        float inv = (float)(1.0 / sqrt(ss + 1e-6));
        if (hk < (size_t)a->n_k) inv *= qscale; /* query heads first */
        for (int j = 0; j < a->dk; j++) v[j] *= inv;
    }
}

static void gdn_head_task(void *vc, int p, int n_tasks) {
    (void)n_tasks;
    gdn_ctx *c = vc;
    g_gdn_head(c->a, c->conv_ch, p);
}

static void gdn_blocks_task(void *vc, int p, int n_tasks) {
    (void)n_tasks;
    gdn_ctx *c = vc;
    g_gdn_blocks(c->a, c->conv_ch, p);
}

static void cpu_gdn(tern_pool *pool, const tm_gdn_args *a) {
    gdn_ctx c = {a, 2 * a->n_k * a->dk + a->n_v * a->dv};
    int nt = pool ? tern_pool_size(pool) : 1;
    /* conv and L2 norms are a few microseconds for a decode step: inline */
    tern_pool *small = a->rows <= 4 ? NULL : pool;
    if (!small) nt = 1;
    tern_pool_run(small, gdn_conv_task, &c, nt);
    tern_pool_run(small, gdn_l2_task, &c, nt);
    const bool blocks = g_gdn_block_min > 0 && a->rows >= g_gdn_block_min && a->dk <= 512 &&
                        a->dv <= 512;
    tern_pool_run(pool, blocks ? gdn_blocks_task : gdn_head_task, &c, a->n_v);
}

/* ------------------------------------------------------------ data movers */

static void cpu_copy_rows(float *dst, size_t ds, const float *src, size_t ss, size_t rows,
                          size_t n) {
    for (size_t r = 0; r < rows; r++) memcpy(dst + r * ds, src + r * ss, n * sizeof(float));
}

static void cpu_split_heads(const float *src, size_t rows, int n_heads, int hd, float *a,
                            float *b) {
    for (size_t r = 0; r < rows; r++)
        for (int h = 0; h < n_heads; h++) {
            const float *s = src + (r * n_heads + h) * 2 * (size_t)hd;
            memcpy(a + (r * n_heads + h) * (size_t)hd, s, hd * sizeof(float));
            memcpy(b + (r * n_heads + h) * (size_t)hd, s + hd, hd * sizeof(float));
        }
}

static void cpu_mul_sigmoid(float *x, const float *g, size_t rows, size_t n) {
    for (size_t i = 0; i < rows * n; i++) x[i] *= sigmoidf_(g[i]);
}

static void cpu_permute_tiled_grouped(const float *src, float *dst, size_t rows, int n_k,
                                      int n_v, int dv) {
    int r = n_v / n_k;
    for (size_t t = 0; t < rows; t++)
        for (int k = 0; k < n_k; k++)
            for (int j = 0; j < r; j++)
                memcpy(dst + (t * n_v + (size_t)k * r + j) * dv,
                       src + (t * n_v + (size_t)j * n_k + k) * dv, dv * sizeof(float));
}

static const tern_backend g_cpu = {
    .name = "cpu",
    .matmul = cpu_matmul,
    .matmul_multi = cpu_matmul_multi,
    .hadamard = cpu_hadamard,
    .add_rmsnorm_hadamard = cpu_add_rmsnorm_hadamard,
    .swiglu_hadamard = cpu_swiglu_hadamard,
    .embed = cpu_embed,
    .head_rmsnorm = cpu_head_rmsnorm,
    .rope = cpu_rope,
    .attention = cpu_attention,
    .gdn = cpu_gdn,
    .copy_rows = cpu_copy_rows,
    .split_heads = cpu_split_heads,
    .mul_sigmoid = cpu_mul_sigmoid,
    .permute_tiled_grouped = cpu_permute_tiled_grouped,
};

const tern_backend *tm_backend_cpu(void) { return &g_cpu; }

/* Batched decode groups of 5: below 6 rows the kernels' GEMV path is used, so a
 * batch is bit-identical to stepping each session alone (test_batch), and from 6
 * the AVX-512 matmul switches to its GEMM kernel (within 1e-3, not identical);
 * on 2 cores 5 was also the fastest group (docs/performance.md). */
int tm_backend_cpu_batch_hint(void) { return 5; }
