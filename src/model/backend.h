/*
 * backend.h - the back-end table the forward passes call (CPU, CUDA).
 * The forward pass (forward.c) holds no CPU specifics: every numeric step goes
 * through one of these function pointers. All activations are float32 rows.
 *
 * Memory: a back-end with its own memory (a GPU) fills the hooks alloc ..
 * sync; then every pointer the table's functions get (weights, activations,
 * caches, states) is its memory, except embed's ids (host). NULL hooks mean
 * host memory; callers use the tm_be_* wrappers below, which fall back to
 * tern_alloc_aligned / memcpy / memset.
 *
 * Conventions: `rows` activations of width n, row stride n unless stated.
 * Weights are tern_qmat (kernels.h); signs NULL means "no Hadamard at this site".
 */
#ifndef TERN_MODEL_BACKEND_H
#define TERN_MODEL_BACKEND_H

#include "model/model.h"

typedef struct tm_attn_args {
    const float *q;        /* [rows][n_head*head_dim] (after norm + RoPE) */
    size_t q_stride;
    const float *kcache;   /* [n_ctx][n_head_kv*head_dim], positions 0..pos0+rows-1 filled */
    const float *vcache;
    float *out;            /* [rows][n_head*head_dim] */
    int rows, pos0;        /* query i is at position pos0 + i; causal */
    int n_head, n_head_kv, head_dim;
    float scale;
    float *scratch;        /* >= n_head * (pos0 + rows) floats */
} tm_attn_args;

typedef struct tm_gdn_args {
    const float *qkv;      /* [rows][conv_ch] projected (pre-conv) q|k|v */
    const float *z;        /* [rows][n_v*dv] output gate */
    const float *a, *b;    /* [rows][n_v] un-activated alpha and beta */
    const float *conv_w;   /* [conv_ch][conv_k] */
    const float *ssm_a;    /* [n_v] */
    const float *dt_bias;  /* [n_v] */
    const float *norm;     /* [dv] */
    float *conv_state;     /* [conv_k-1][conv_ch]: the last conv_k-1 inputs, oldest first */
    float *state;          /* [n_v][dk][dv] (see pending) */
    float *pending;        /* [n_v][1 + dk + dv]: the last token's rank-1 update, not yet in
                              state: S_true = pd*state + pk pdl^T (zeros: empty) */
    float *out;            /* [rows][n_v*dv] gated-normed output, in run order */
    float *work;           /* [rows][conv_ch] scratch */
    int rows;
    int n_k, n_v, dk, dv, conv_k;
    bool v_tiled;          /* value head p reads key head p % n_k (else p / (n_v/n_k)) */
    float eps;
} tm_gdn_args;

typedef struct tern_backend {
    const char *name;
    /* y = W x for `batch` rows (strides in floats). */
    void (*matmul)(tern_pool *pool, const tern_qmat *w, const float *x, size_t batch,
                   size_t x_stride, float *y, size_t y_stride);
    void (*matmul_multi)(tern_pool *pool, int n, const tern_qmat *const *w, const float *x,
                         size_t batch, size_t x_stride, float *const *y, const size_t *y_stride);
    void (*hadamard)(tern_pool *pool, float *x, size_t rows, size_t n, size_t block,
                     const float *signs);
    /* r += d (d may be NULL); normed = rmsnorm(r)*gain; rotated = H(normed) or copy. */
    void (*add_rmsnorm_hadamard)(tern_pool *pool, float *r, const float *d, const float *gain,
                                 float eps, float *normed, float *rotated, size_t rows,
                                 size_t n, size_t block, const float *signs);
    /* out = silu(gate)*up, then H(out) if signs. gate/up/out stride n. */
    void (*swiglu_hadamard)(tern_pool *pool, const float *gate, const float *up, float *out,
                            size_t rows, size_t n, size_t block, const float *signs);
    /* out[i] = dequantized row ids[i] of emb, then the inverse transform if signs. */
    tern_status (*embed)(tern_pool *pool, const tern_qmat *emb, const int32_t *ids, size_t n,
                         float *out, size_t block, const float *signs);
    /* Per-head RMSNorm in place: x[r*stride + h*hd ..] for h < n_heads. */
    void (*head_rmsnorm)(tern_pool *pool, float *x, size_t rows, size_t stride, int n_heads,
                         int hd, const float *gain, float eps);
    /* NEOX RoPE on the first rot dims of each head: pairs (i, i+rot/2). */
    void (*rope)(tern_pool *pool, float *x, size_t rows, size_t stride, int n_heads, int hd,
                 int rot, int pos0, float theta);
    void (*attention)(tern_pool *pool, const tm_attn_args *a);
    void (*gdn)(tern_pool *pool, const tm_gdn_args *a);
    /* Small data movers (device memory on a GPU back-end). */
    /* dst[r*ds + c] = src[r*ss + c] for c < n. */
    void (*copy_rows)(float *dst, size_t ds, const float *src, size_t ss, size_t rows, size_t n);
    /* src row = n_heads x [hd a | hd b] -> a, b rows of n_heads*hd. */
    void (*split_heads)(const float *src, size_t rows, int n_heads, int hd, float *a, float *b);
    /* x *= sigmoid(g), elementwise over rows x n (both stride n). */
    void (*mul_sigmoid)(float *x, const float *g, size_t rows, size_t n);
    /* GDN output tiled -> grouped: dst head k*r+j = src head j*n_k+k (rows of n_v*dv). */
    void (*permute_tiled_grouped)(const float *src, float *dst, size_t rows, int n_k, int n_v,
                                  int dv);
    /* Optional memory hooks (NULL: host memory). alloc returns zeroed memory or NULL;
     * free gets the size given to alloc; upload/download are complete on return. */
    void *(*alloc)(size_t bytes);
    void (*free)(void *p, size_t bytes);
    tern_status (*upload)(void *dst, const void *src_host, size_t n);
    tern_status (*download)(void *dst_host, const void *src, size_t n);
    tern_status (*zero)(void *p, size_t n);
    /* Wait for queued work; returns the first error of the work since the last sync. */
    tern_status (*sync)(void);
    /* Optional: store k/v rows into the layer's caches kc/vc [n_ctx][kvw] at positions
     * pos0.. (NULL: two copy_rows). */
    void (*kv_store)(float *kc, float *vc, const float *k, const float *v, size_t kvw,
                     size_t rows, int pos0);
    /* Optional single-token step graphs (NULL: none). graph_begin starts recording one
     * step (TERN_ERR_UNSUPPORTED: graphs are off); the step is then queued as usual and
     * graph_end(.., dlogits) finishes it into *graph (the logits row goes to host memory
     * inside the graph). graph_run replays it for (pos0, token), filling logits_host, and
     * says *ran = false when the graph is stale (record again). */
    tern_status (*graph_begin)(int pos0, int32_t token, size_t n_vocab, void **graph);
    tern_status (*graph_end)(void *graph, const float *dlogits);
    tern_status (*graph_run)(void *graph, int pos0, int32_t token, float *logits_host, bool *ran);
    void (*graph_free)(void *graph);
} tern_backend;

/* ------------------------------------------------ memory through a table */
static inline void *tm_be_alloc(const tern_backend *be, size_t n) {
    if (be->alloc) return be->alloc(n ? n : 1);
    void *p = tern_alloc_aligned(n ? n : 1);
    if (p) memset(p, 0, n ? n : 1);
    return p;
}
static inline void tm_be_free(const tern_backend *be, void *p, size_t n) {
    if (!p) return;
    if (be->free) be->free(p, n ? n : 1);
    else tern_free_aligned(p, n ? n : 1);
}
static inline tern_status tm_be_upload(const tern_backend *be, void *dst, const void *src, size_t n) {
    if (be->upload) return be->upload(dst, src, n);
    if (n) memcpy(dst, src, n);
    return TERN_OK;
}
static inline tern_status tm_be_download(const tern_backend *be, void *dst, const void *src, size_t n) {
    if (be->download) return be->download(dst, src, n);
    if (n && dst != src) memcpy(dst, src, n);
    return TERN_OK;
}
static inline tern_status tm_be_zero(const tern_backend *be, void *p, size_t n) {
    if (be->zero) return be->zero(p, n);
    if (n) memset(p, 0, n);
    return TERN_OK;
}
static inline tern_status tm_be_sync(const tern_backend *be) {
    return be->sync ? be->sync() : TERN_OK;
}
/* True when the table's pointers are not host memory. */
static inline bool tm_be_device(const tern_backend *be) { return be->alloc != NULL; }

const tern_backend *tm_backend_cpu(void);
/* The CUDA table, or NULL when the library was built without CUDA. */
const tern_backend *tm_backend_cuda(void);
/* Make the CUDA device ready (TERN_ERR_UNSUPPORTED: not compiled in or no device). */
tern_status tm_backend_cuda_init(void);
/* Device description ("" when none). */
const char *tm_backend_cuda_device(void);
/* How many sessions a batched decode step (tern_session_eval_batch) should group
 * on this back-end: tern_model_batch_hint(). */
int tm_backend_cpu_batch_hint(void);
int tm_backend_cuda_batch_hint(void);
/* Choose the CPU hot-loop variant for tern_kernels_isa() (called at model load). */
void tm_backend_cpu_select(void);

#endif
