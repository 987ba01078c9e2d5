/*
 * backend_cpu.c - the CPU back-end table (backend.h): every numeric step is the
 * kernel library's (kernels.h): ternary matmuls, Hadamard and fused sites, and the
 * model ops (tern_attention, tern_gdn, tern_rope, tern_head_rmsnorm; math and
 * layouts documented there, per-ISA loops in src/kernels/cpu/model_ops*, chosen once
 * through the kernel table). Here: the embedding lookup and the small data movers.
 */
#include "model/backend.h"
#include "formats/codecs.h"

#include <math.h>

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

/* ------------------------------------------------------- model ops */

static void cpu_head_rmsnorm(tern_pool *pool, float *x, size_t rows, size_t stride, int n_heads,
                             int hd, const float *gain, float eps) {
    tern_head_rmsnorm(x, rows, stride, n_heads, hd, gain, eps, pool);
}

static void cpu_rope(tern_pool *pool, float *x, size_t rows, size_t stride, int n_heads, int hd,
                     int rot, int pos0, float theta) {
    tern_rope(x, rows, stride, n_heads, hd, rot, pos0, theta, pool);
}

static void cpu_attention(tern_pool *pool, const tm_attn_args *a) { tern_attention(a, pool); }

static void cpu_gdn(tern_pool *pool, const tm_gdn_args *a) { tern_gdn(a, pool); }

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

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
