/*
 * backend_cuda.c - the CUDA back-end table (backend.h): C wrappers over the
 * extern "C" launchers of src/kernels/cuda (cuda.h). Every pointer is device
 * memory (the hooks alloc .. sync), except embed's token ids. Work is queued on
 * one stream; errors are sticky in the kernels and come back from sync (the
 * forward pass syncs once per chunk, when the logits come home).
 * Without TERN_HAVE_CUDA the table does not exist (tm_backend_cuda() is NULL).
 */
#include "model/backend.h"

#if defined(TERN_HAVE_CUDA)

#include "kernels/cuda/cuda.h"

static tern_status cu_status(int err, const char *what) {
    if (!err) return TERN_OK;
    return tern_fail(err == TC_ERR_UNSUPPORTED ? TERN_ERR_UNSUPPORTED : TERN_ERR_INTERNAL,
                     "CUDA: %s: %s", what, tc_error_string(err));
}

static int kind_of(tern_dtype t) {
    switch (t) {
    case TERN_DT_PQ2_0: case TERN_DT_Q2_0: return TC_TERN128;
    case TERN_DT_Q2_0_G64: return TC_TERN64;
    case TERN_DT_Q1_0: return TC_Q1;
    case TERN_DT_F32: return TC_F32;
    case TERN_DT_F16: return TC_F16;
    case TERN_DT_BF16: return TC_BF16;
    default: TERN_ASSERT(!"matrix type not handled by the CUDA back-end"); return -1;
    }
}

static tc_mat to_mat(const tern_qmat *w) {
    TERN_ASSERT(w->layout == TERN_LAYOUT_ROWS);
    tc_mat m = {.kind = kind_of(w->type), .data = w->data, .n = w->n, .k = w->k,
                .row_bytes = w->row_bytes};
    return m;
}

static void cu_matmul(tern_pool *pool, const tern_qmat *w, const float *x, size_t batch,
                      size_t xs, float *y, size_t ys) {
    (void)pool;
    tc_mat m = to_mat(w);
    tc_matmul_multi(1, &m, x, batch, xs, &y, &ys);
}

static void cu_matmul_multi(tern_pool *pool, int n, const tern_qmat *const *w, const float *x,
                            size_t batch, size_t xs, float *const *y, const size_t *ys) {
    (void)pool;
    tc_mat m[8];
    TERN_ASSERT(n > 0 && n <= 8);
    for (int i = 0; i < n; i++) m[i] = to_mat(w[i]);
    /* the integer path quantises the activation once for all matrices of one kind */
    tc_matmul_multi(n, m, x, batch, xs, y, ys);
}

static void cu_hadamard(tern_pool *pool, float *x, size_t rows, size_t n, size_t block,
                        const float *signs) {
    (void)pool;
    tc_hadamard(x, rows, n, block, signs, 0);
}

static void cu_add_rmsnorm_hadamard(tern_pool *pool, float *r, const float *d, const float *gain,
                                    float eps, float *normed, float *rotated, size_t rows,
                                    size_t n, size_t block, const float *signs) {
    (void)pool;
    tc_add_rmsnorm_hadamard(r, d, gain, eps, normed, rotated, rows, n, block, signs);
}

static void cu_swiglu_hadamard(tern_pool *pool, const float *gate, const float *up, float *out,
                               size_t rows, size_t n, size_t block, const float *signs) {
    (void)pool;
    tc_swiglu_hadamard(gate, up, out, rows, n, block, signs);
}

static tern_status cu_embed(tern_pool *pool, const tern_qmat *emb, const int32_t *ids, size_t n,
                            float *out, size_t block, const float *signs) {
    (void)pool;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= emb->n)
            return tern_fail(TERN_ERR_RANGE, "token id %d out of range [0, %lld)", (int)ids[i],
                             (long long)emb->n);
    tc_mat m = to_mat(emb);
    tc_embed(&m, ids, n, out, block, signs);
    return TERN_OK;
}

static void cu_head_rmsnorm(tern_pool *pool, float *x, size_t rows, size_t stride, int n_heads,
                            int hd, const float *gain, float eps) {
    (void)pool;
    tc_head_rmsnorm(x, rows, stride, n_heads, hd, gain, eps);
}

static void cu_rope(tern_pool *pool, float *x, size_t rows, size_t stride, int n_heads, int hd,
                    int rot, int pos0, float theta) {
    (void)pool;
    tc_rope(x, rows, stride, n_heads, hd, rot, pos0, theta);
}

static void cu_attention(tern_pool *pool, const tm_attn_args *a) {
    (void)pool;
    tc_attention(a->q, a->q_stride, a->kcache, a->vcache, a->out, a->rows, a->pos0, a->n_head,
                 a->n_head_kv, a->head_dim, a->scale);
}

static void cu_gdn(tern_pool *pool, const tm_gdn_args *a) {
    (void)pool;
    /* the state is kept fully applied: `pending` is not used on the GPU */
    tc_gdn_args g = {.qkv = a->qkv, .z = a->z, .a = a->a, .b = a->b, .conv_w = a->conv_w,
                     .ssm_a = a->ssm_a, .dt_bias = a->dt_bias, .norm = a->norm,
                     .conv_state = a->conv_state, .state = a->state, .out = a->out,
                     .work = a->work, .rows = a->rows, .n_k = a->n_k, .n_v = a->n_v,
                     .dk = a->dk, .dv = a->dv, .conv_k = a->conv_k, .v_tiled = a->v_tiled,
                     .eps = a->eps};
    tc_gdn(&g);
}

static void *cu_alloc(size_t n) { return tc_malloc(n); }
static void cu_free(void *p, size_t n) { tc_free(p, n); }
static tern_status cu_upload(void *dst, const void *src, size_t n) {
    return cu_status(tc_upload(dst, src, n), "upload");
}
static tern_status cu_download(void *dst, const void *src, size_t n) {
    return cu_status(tc_download(dst, src, n), "download");
}
static tern_status cu_zero(void *p, size_t n) { return cu_status(tc_zero(p, n), "memset"); }
static tern_status cu_sync(void) { return cu_status(tc_sync(), "forward pass"); }

static tern_status cu_graph_begin(int pos0, int32_t token, size_t n_vocab, void **graph) {
    *graph = NULL;
    if (!tc_graph_enabled()) return TERN_ERR_UNSUPPORTED; /* no message: a mode, not a failure */
    tc_graph *g = NULL;
    tern_status st = cu_status(tc_graph_begin(pos0, token, n_vocab, &g), "graph capture");
    *graph = g;
    return st;
}
static tern_status cu_graph_end(void *graph, const float *dlogits) {
    return cu_status(tc_graph_end(graph, dlogits), "graph capture");
}
static tern_status cu_graph_run(void *graph, int pos0, int32_t token, float *logits_host,
                                bool *ran) {
    int r = 0;
    tern_status st = cu_status(tc_graph_run(graph, pos0, token, logits_host, &r), "graph replay");
    *ran = r != 0;
    return st;
}
static void cu_graph_free(void *graph) { tc_graph_free(graph); }

static const tern_backend g_cuda = {
    .name = "cuda",
    .matmul = cu_matmul,
    .matmul_multi = cu_matmul_multi,
    .hadamard = cu_hadamard,
    .add_rmsnorm_hadamard = cu_add_rmsnorm_hadamard,
    .swiglu_hadamard = cu_swiglu_hadamard,
    .embed = cu_embed,
    .head_rmsnorm = cu_head_rmsnorm,
    .rope = cu_rope,
    .attention = cu_attention,
    .gdn = cu_gdn,
    .copy_rows = tc_copy_rows,
    .split_heads = tc_split_heads,
    .mul_sigmoid = tc_mul_sigmoid,
    .permute_tiled_grouped = tc_permute_tiled_grouped,
    .alloc = cu_alloc,
    .free = cu_free,
    .upload = cu_upload,
    .download = cu_download,
    .zero = cu_zero,
    .sync = cu_sync,
    .kv_store = tc_kv_store,
    .graph_begin = cu_graph_begin,
    .graph_end = cu_graph_end,
    .graph_run = cu_graph_run,
    .graph_free = cu_graph_free,
};

const tern_backend *tm_backend_cuda(void) { return &g_cuda; }

tern_status tm_backend_cuda_init(void) {
    if (tc_device_count() < 1)
        return tern_fail(TERN_ERR_UNSUPPORTED, "CUDA: no CUDA device found");
    return cu_status(tc_init(), "initialising device 0");
}

const char *tm_backend_cuda_device(void) { return tc_device_name(); }

double tern_device_read_ceiling_gbps(const char *device, size_t bytes, int passes) {
    if (device && !strcmp(device, "cpu")) return tern_linear_pool_read_ceiling_gbps(bytes, passes);
    if (!device || strcmp(device, "cuda") || tc_device_count() < 1) return 0;
    return tc_read_ceiling_gbps(bytes, passes);
}

#else

const tern_backend *tm_backend_cuda(void) { return NULL; }

tern_status tm_backend_cuda_init(void) {
    return tern_fail(TERN_ERR_UNSUPPORTED,
                     "CUDA: this build has no CUDA back-end (configure with nvcc available, "
                     "or -DTERN_CUDA=ON)");
}

const char *tm_backend_cuda_device(void) { return ""; }

double tern_device_read_ceiling_gbps(const char *device, size_t bytes, int passes) {
    if (device && !strcmp(device, "cpu")) return tern_linear_pool_read_ceiling_gbps(bytes, passes);
    return 0;
}

#endif
