/*
 * backend_cpu.c - the CPU back-end (backend.h): an instance holding its thread pool,
 * whose op table is the kernel library's (kernels.h): ternary matmuls, Hadamard and
 * fused sites, and the model ops (tern_attention, tern_gdn, tern_rope,
 * tern_head_rmsnorm; math and layouts documented there, per-ISA loops in
 * src/kernels/cpu/model_ops*, chosen once through the kernel table). It runs a step
 * by walking the model's plan op by op through that table (tm_plan_exec). Here: the embedding lookup, the small data movers, host
 * memory (large buffers backed lazily) and the GDN state layout: S then the pending
 * rank-1 update the CPU scan keeps apart (tern_gdn_args.pending).
 */
#include "backends/backends.h"
#include "formats/codecs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* --------------------------------------------------------- kernel wrappers */

static void cpu_matmul(tm_backend *be, const tern_qmat *w, const float *x, size_t batch,
                       size_t xs, float *y, size_t ys) {
    tern_pool *pool = tm_backend_cpu_pool(be);
    tern_matmul(w, x, batch, xs, y, ys, pool);
}

static void cpu_matmul_multi(tm_backend *be, int n, const tern_qmat *const *w, const float *x,
                             size_t batch, size_t xs, float *const *y, const size_t *ys) {
    tern_pool *pool = tm_backend_cpu_pool(be);
    tern_matmul_multi(n, w, x, batch, xs, y, ys, pool);
}

static size_t cpu_matmul_exact_batch(tm_backend *be, const tern_qmat *w) {
    (void)be;
    return tern_matmul_exact_batch(w);
}

static void cpu_hadamard(tm_backend *be, float *x, size_t rows, size_t n, size_t block,
                         const float *signs) {
    (void)be;
    if (signs) tern_hadamard(x, rows, n, block, signs);
}

static void cpu_add_rmsnorm_hadamard(tm_backend *be, float *r, const float *d, const float *gain,
                                     float eps, float *normed, float *rotated, size_t rows,
                                     size_t n, size_t block, const float *signs) {
    (void)be;
    tern_add_rmsnorm_hadamard(r, d, gain, eps, normed, rotated, rows, n, block, signs);
}

static void cpu_swiglu_hadamard(tm_backend *be, const float *gate, const float *up, float *out,
                                size_t rows, size_t n, size_t block, const float *signs) {
    (void)be;
    tern_swiglu_hadamard(gate, up, out, rows, n, block, signs);
}

static tern_status cpu_embed(tm_backend *be, const tern_qmat *emb, const int32_t *ids, size_t n,
                             float *out, size_t block, const float *signs) {
    (void)be;
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

/* ------------------------------------------------------------- model ops */

static void cpu_head_rmsnorm(tm_backend *be, float *x, size_t rows, size_t stride, int n_heads,
                             int hd, const float *gain, float eps) {
    tern_head_rmsnorm(x, rows, stride, n_heads, hd, gain, eps, tm_backend_cpu_pool(be));
}

static void cpu_rope(tm_backend *be, float *x, size_t rows, size_t stride, int n_heads, int hd,
                     int rot, int pos0, float theta) {
    tern_rope(x, rows, stride, n_heads, hd, rot, pos0, theta, tm_backend_cpu_pool(be));
}

static void cpu_attention(tm_backend *be, const tm_attn_args *a) {
    tern_attention(a, tm_backend_cpu_pool(be));
}

/* The layer's state is S [n_v][dk][dv] then the pending update [n_v][1 + dk + dv]. */
static void cpu_gdn(tm_backend *be, const tm_gdn_args *a) {
    tern_gdn_args k = {.qkv = a->qkv, .z = a->z, .a = a->a, .b = a->b, .conv_w = a->conv_w,
                       .ssm_a = a->ssm_a, .dt_bias = a->dt_bias, .norm = a->norm,
                       .conv_state = a->conv_state, .state = a->state,
                       .pending = a->state + (size_t)a->n_v * a->dk * a->dv, .out = a->out,
                       .work = a->work, .rows = a->rows, .n_k = a->n_k, .n_v = a->n_v,
                       .dk = a->dk, .dv = a->dv, .conv_k = a->conv_k, .v_tiled = a->v_tiled,
                       .eps = a->eps, .state_bf16 = a->state_bf16};
    tern_gdn_with(&k, a->walk ? TERN_GDN_WALK : TERN_GDN_AUTO, tm_backend_cpu_pool(be));
}

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

/* ------------------------------------------------------------ data movers */

static void cpu_copy_rows(tm_backend *be, float *dst, size_t ds, const float *src, size_t ss,
                          size_t rows, size_t n) {
    (void)be;
    for (size_t r = 0; r < rows; r++) memcpy(dst + r * ds, src + r * ss, n * sizeof(float));
}

/* Keys and values are written in the cache's stored type here (converted / quantised
 * once per position); attention reads that type directly. */
static void cpu_kv_store(tm_backend *be, void *kc, void *vc, tern_kv_type kt, tern_kv_type vt,
                         const float *k, const float *v, size_t kvw, size_t rows, int pos0) {
    (void)be;
    const size_t kr = tern_kv_row_bytes(kt, kvw), vr = tern_kv_row_bytes(vt, kvw);
    tern_kv_store(kt, (uint8_t *)kc + (size_t)pos0 * kr, kr, k, kvw, rows, kvw);
    tern_kv_store(vt, (uint8_t *)vc + (size_t)pos0 * vr, vr, v, kvw, rows, kvw);
}

static void cpu_split_heads(tm_backend *be, const float *src, size_t rows, int n_heads, int hd,
                            float *a, float *b) {
    (void)be;
    for (size_t r = 0; r < rows; r++)
        for (int h = 0; h < n_heads; h++) {
            const float *s = src + (r * n_heads + h) * 2 * (size_t)hd;
            memcpy(a + (r * n_heads + h) * (size_t)hd, s, hd * sizeof(float));
            memcpy(b + (r * n_heads + h) * (size_t)hd, s + hd, hd * sizeof(float));
        }
}

static void cpu_mul_sigmoid(tm_backend *be, float *x, const float *g, size_t rows, size_t n) {
    (void)be;
    for (size_t i = 0; i < rows * n; i++) x[i] *= sigmoidf_(g[i]);
}

static void cpu_permute_tiled_grouped(tm_backend *be, const float *src, float *dst, size_t rows,
                                      int n_k, int n_v, int dv) {
    (void)be;
    int r = n_v / n_k;
    for (size_t t = 0; t < rows; t++)
        for (int k = 0; k < n_k; k++)
            for (int j = 0; j < r; j++)
                memcpy(dst + (t * n_v + (size_t)k * r + j) * dv,
                       src + (t * n_v + (size_t)j * n_k + k) * dv, dv * sizeof(float));
}

static const tm_ops g_cpu_ops = {
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
    .kv_store = cpu_kv_store,
    .matmul_exact_batch = cpu_matmul_exact_batch,
};

/* ------------------------------------------------------------- the instance */

typedef struct cpu_backend {
    tm_backend base;
    tern_pool *pool;
} cpu_backend;


static void cpu_destroy(tm_backend *be) {
    cpu_backend *c = (cpu_backend *)be;
    tern_pool_free(c->pool);
    free(c);
}

/* Below 6 rows a batched step is bit-identical to single steps and the GEMV path keeps
 * its speed; from 6 the GEMM tile takes over (docs/performance.md, "batched decode"). */
static int cpu_batch_hint(const tm_backend *be) {
    (void)be;
    return 5;
}

/* Buffers from this size on (KV caches, wide scratch) are backed by pages only as they
 * are touched, so RSS and load time follow the positions used, not n_ctx. */
#define CPU_LAZY_BYTES ((size_t)1 << 22)

static void *cpu_alloc(tm_backend *be, size_t n) {
    (void)be;
    if (n >= CPU_LAZY_BYTES) return tern_alloc_lazy(n);
    void *p = tern_alloc_aligned(n);
    if (p) memset(p, 0, n);
    return p;
}
static void cpu_free(tm_backend *be, void *p, size_t n) {
    (void)be;
    if (n >= CPU_LAZY_BYTES) tern_free_lazy(p, n);
    else tern_free_aligned(p, n);
}
static tern_status cpu_copy(tm_backend *be, void *dst, const void *src, size_t n) {
    (void)be;
    if (n && dst != src) memcpy(dst, src, n);
    return TERN_OK;
}
static tern_status cpu_zero(tm_backend *be, void *p, size_t n) {
    (void)be;
    if (n >= CPU_LAZY_BYTES) tern_zero_lazy(p, n);
    else if (n) memset(p, 0, n);
    return TERN_OK;
}
/* MemAvailable of /proc/meminfo (Linux; 0 elsewhere = no check). */
static uint64_t cpu_mem_available(const tm_backend *be) {
    (void)be;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

static tern_status cpu_sync(tm_backend *be) {
    (void)be;
    return TERN_OK;
}

/* The state S [n_v][dk][dv], then the pending rank-1 update [n_v][1 + dk + dv]
 * (kernels.h, tern_gdn_args.pending): S_true = pd*S + pk pdl^T. */
static size_t cpu_gdn_state_floats(const tm_backend *be, const tm_hparams *hp) {
    (void)be;
    return (size_t)hp->ssm_n_v * hp->ssm_dk * hp->ssm_dv +
           (size_t)hp->ssm_n_v * (1 + hp->ssm_dk + hp->ssm_dv);
}

/* the pending update of every value head empty: pd = 1, pk = pdl = 0 */
static void cpu_gdn_state_plain(const tm_backend *be, const tm_hparams *hp, float *state) {
    (void)be;
    const size_t per = 1 + (size_t)hp->ssm_dk + hp->ssm_dv;
    float *pend = state + (size_t)hp->ssm_n_v * hp->ssm_dk * hp->ssm_dv;
    memset(pend, 0, (size_t)hp->ssm_n_v * per * sizeof(float));
    for (int p = 0; p < hp->ssm_n_v; p++) pend[(size_t)p * per] = 1.0f;
}

static const tm_backend_vt g_cpu_vt = {
    .name = "cpu",
    .device_memory = false,
    .caps = TM_CAP_HOST_REPACK | TM_CAP_EXACT_ROWS,
    .destroy = cpu_destroy,
    .batch_hint = cpu_batch_hint,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .mem_available = cpu_mem_available,
    .kv_types = (1u << TERN_KV_F32) | (1u << TERN_KV_F16) | (1u << TERN_KV_BF16) | (1u << TERN_KV_Q8_0),
    .gdn_state_floats = cpu_gdn_state_floats,
    .gdn_state_plain = cpu_gdn_state_plain,
    .exec = tm_plan_exec, /* the plan op by op through g_cpu_ops */
};

tern_pool *tm_backend_cpu_pool(const tm_backend *be) {
    return be && be->vt == &g_cpu_vt ? ((const cpu_backend *)be)->pool : NULL;
}

tern_status tm_backend_cpu_create(const tm_backend_params *p, tm_backend **out) {
    *out = NULL;
    int nt = p ? p->n_threads : 0;
    if (nt <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        nt = c > 0 ? (int)c : 1;
    }
    if (nt > 256) nt = 256;
    cpu_backend *c = calloc(1, sizeof *c);
    if (!c) return tern_fail(TERN_ERR_NOMEM, "out of memory");
    c->base.vt = &g_cpu_vt;
    c->base.ops = &g_cpu_ops;
    tern_status st = tern_pool_new(nt, &c->pool);
    if (st) {
        free(c);
        return st;
    }
    *out = &c->base;
    return TERN_OK;
}
