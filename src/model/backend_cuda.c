/*
 * backend_cuda.c - the CUDA back-end (backend.h): an instance on GPU 0 whose op table
 * wraps the extern "C" launchers of src/kernels/cuda (cuda.h), whose layer-sized
 * operations are layers.c's over those ops, whose head brings the logits home once per
 * step, and whose run_step records and replays single-token steps as CUDA graphs
 * (off with TERN_CUDA_GRAPH=0). Every pointer is device memory, except token ids. Work is queued
 * on one stream; errors are sticky in the kernels and come back from sync.
 * Without TERN_HAVE_CUDA, creating it fails with a message saying so.
 */
#include "model/session.h"

#include <stdlib.h>

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

static void cu_matmul(tm_backend *be, const tern_qmat *w, const float *x, size_t batch,
                      size_t xs, float *y, size_t ys) {
    (void)be;
    tc_mat m = to_mat(w);
    tc_matmul_multi(1, &m, x, batch, xs, &y, &ys);
}

static void cu_matmul_multi(tm_backend *be, int n, const tern_qmat *const *w, const float *x,
                            size_t batch, size_t xs, float *const *y, const size_t *ys) {
    (void)be;
    tc_mat m[8];
    TERN_ASSERT(n > 0 && n <= 8);
    for (int i = 0; i < n; i++) m[i] = to_mat(w[i]);
    /* the integer path quantises the activation once for all matrices of one kind */
    tc_matmul_multi(n, m, x, batch, xs, y, ys);
}

static void cu_hadamard(tm_backend *be, float *x, size_t rows, size_t n, size_t block,
                        const float *signs) {
    (void)be;
    tc_hadamard(x, rows, n, block, signs, 0);
}

static void cu_add_rmsnorm_hadamard(tm_backend *be, float *r, const float *d, const float *gain,
                                    float eps, float *normed, float *rotated, size_t rows,
                                    size_t n, size_t block, const float *signs) {
    (void)be;
    tc_add_rmsnorm_hadamard(r, d, gain, eps, normed, rotated, rows, n, block, signs);
}

static void cu_swiglu_hadamard(tm_backend *be, const float *gate, const float *up, float *out,
                               size_t rows, size_t n, size_t block, const float *signs) {
    (void)be;
    tc_swiglu_hadamard(gate, up, out, rows, n, block, signs);
}

static tern_status cu_embed(tm_backend *be, const tern_qmat *emb, const int32_t *ids, size_t n,
                            float *out, size_t block, const float *signs) {
    (void)be;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= emb->n)
            return tern_fail(TERN_ERR_RANGE, "token id %d out of range [0, %lld)", (int)ids[i],
                             (long long)emb->n);
    tc_mat m = to_mat(emb);
    tc_embed(&m, ids, n, out, block, signs);
    return TERN_OK;
}

static void cu_head_rmsnorm(tm_backend *be, float *x, size_t rows, size_t stride, int n_heads,
                            int hd, const float *gain, float eps) {
    (void)be;
    tc_head_rmsnorm(x, rows, stride, n_heads, hd, gain, eps);
}

static void cu_rope(tm_backend *be, float *x, size_t rows, size_t stride, int n_heads, int hd,
                    int rot, int pos0, float theta) {
    (void)be;
    tc_rope(x, rows, stride, n_heads, hd, rot, pos0, theta);
}

static void cu_attention(tm_backend *be, const tm_attn_args *a) {
    (void)be;
    tc_attention(a->q, a->q_stride, a->kcache, a->vcache, a->out, a->rows, a->pos0, a->n_head,
                 a->n_head_kv, a->head_dim, a->scale);
}

static void cu_gdn(tm_backend *be, const tm_gdn_args *a) {
    (void)be;
    /* the state is kept fully applied: `pending` is not used on the GPU */
    tc_gdn_args g = {.qkv = a->qkv, .z = a->z, .a = a->a, .b = a->b, .conv_w = a->conv_w,
                     .ssm_a = a->ssm_a, .dt_bias = a->dt_bias, .norm = a->norm,
                     .conv_state = a->conv_state, .state = a->state, .out = a->out,
                     .work = a->work, .rows = a->rows, .n_k = a->n_k, .n_v = a->n_v,
                     .dk = a->dk, .dv = a->dv, .conv_k = a->conv_k, .v_tiled = a->v_tiled,
                     .eps = a->eps};
    tc_gdn(&g);
}

static void cu_copy_rows(tm_backend *be, float *dst, size_t ds, const float *src, size_t ss,
                         size_t rows, size_t n) {
    (void)be;
    tc_copy_rows(dst, ds, src, ss, rows, n);
}
static void cu_split_heads(tm_backend *be, const float *src, size_t rows, int n_heads, int hd,
                           float *a, float *b) {
    (void)be;
    tc_split_heads(src, rows, n_heads, hd, a, b);
}
static void cu_mul_sigmoid(tm_backend *be, float *x, const float *g, size_t rows, size_t n) {
    (void)be;
    tc_mul_sigmoid(x, g, rows, n);
}
static void cu_permute(tm_backend *be, const float *src, float *dst, size_t rows, int n_k, int n_v,
                       int dv) {
    (void)be;
    tc_permute_tiled_grouped(src, dst, rows, n_k, n_v, dv);
}
static void cu_kv_store(tm_backend *be, float *kc, float *vc, const float *k, const float *v,
                        size_t kvw, size_t rows, int pos0) {
    (void)be;
    tc_kv_store(kc, vc, k, v, kvw, rows, pos0);
}

static const tm_ops g_cuda_ops = {
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
    .copy_rows = cu_copy_rows,
    .split_heads = cu_split_heads,
    .mul_sigmoid = cu_mul_sigmoid,
    .permute_tiled_grouped = cu_permute,
    .kv_store = cu_kv_store,
};

/* ------------------------------------------------------------- the instance */

typedef struct cuda_backend {
    tm_backend base;
    int device;
    bool recording;   /* a step is being recorded into a graph: no download, no sync */
} cuda_backend;

static void cu_destroy(tm_backend *be) { free(be); }
/* One pass reads the weights once for all its rows; the GEMV path holds its speed to
 * 8 rows and more (not yet measured: docs/performance.md). */
static int cu_batch_hint(const tm_backend *be) {
    (void)be;
    return 16;
}
static void *cu_alloc(tm_backend *be, size_t n) {
    (void)be;
    return tc_malloc(n);
}
static void cu_free(tm_backend *be, void *p, size_t n) {
    (void)be;
    tc_free(p, n);
}
static tern_status cu_upload(tm_backend *be, void *dst, const void *src, size_t n) {
    (void)be;
    return cu_status(tc_upload(dst, src, n), "upload");
}
static tern_status cu_download(tm_backend *be, void *dst, const void *src, size_t n) {
    (void)be;
    return cu_status(tc_download(dst, src, n), "download");
}
static tern_status cu_zero(tm_backend *be, void *p, size_t n) {
    (void)be;
    return cu_status(tc_zero(p, n), "memset");
}
static tern_status cu_sync(tm_backend *be) {
    (void)be;
    return cu_status(tc_sync(), "forward pass");
}
/* the state is kept fully applied: nothing beside S */
static size_t cu_gdn_state_floats(const tm_backend *be, const tm_hparams *hp) {
    (void)be;
    return (size_t)hp->ssm_n_v * hp->ssm_dk * hp->ssm_dv;
}
static void cu_session_release(tm_backend *be, tern_session *s) {
    (void)be;
    if (s->graph) tc_graph_free(s->graph);
    s->graph = NULL;
}

/* The logits land in the session's device rows and come home once per step. */
static tern_status cu_head(tm_backend *be, const tm_step *st) {
    cuda_backend *c = (cuda_backend *)be;
    tern_session *w = st->w;
    const size_t V = (size_t)w->m->hp.n_vocab;
    if (!st->rows_out) {
        TERN_ASSERT(st->n_seq == 1 && st->ss[0] == w);
        tm_layers_head_rows(be, st, w->dlogits, false);
        if (c->recording) return TERN_OK; /* graph_end adds the copy */
        return tm_be_download(be, w->logits, w->dlogits, V * sizeof(float));
    }
    tm_layers_head_rows(be, st, w->dlogits, true);
    tern_status s = tm_be_download(be, st->rows_out, w->dlogits, (size_t)st->T * V * sizeof(float));
    for (int i = 0; i < st->n_seq && !s; i++)
        memcpy(st->ss[i]->logits, st->rows_out + (size_t)(i + st->R - 1) * V, V * sizeof(float));
    return s;
}

/* Step graphs are on unless TERN_CUDA_GRAPH=0 (they passed parity on the H200). */
static bool graphs_on(void) {
    const char *e = getenv("TERN_CUDA_GRAPH");
    return !e || !*e || strcmp(e, "0") != 0;
}

static tern_status plain(tm_backend *be, const tm_step *st, tm_layers_fn layers) {
    tern_status s = layers(be, st);
    tern_status ss = tm_be_sync(be);
    return s ? s : ss;
}

/* Single-token steps of a session (unless TERN_CUDA_GRAPH=0): the first runs op by op (it
 * sizes the workspaces), the second is recorded into a graph (position and token read
 * from device words the graph fills), every later one replays it; a stale graph is
 * recorded again; a failure to record turns graphs off for the session. */
static tern_status cu_run_step(tm_backend *be, const tm_step *st, tm_layers_fn layers) {
    cuda_backend *c = (cuda_backend *)be;
    tern_session *s = st->w;
    if (st->n_seq != 1 || st->T != 1 || st->rows_out || !graphs_on() || s->graph_state < 0)
        return plain(be, st, layers);
    const size_t V = (size_t)s->m->hp.n_vocab;
    const int32_t token = st->tokens[0];
    int ran = 0;
    tern_status e;
    if (s->graph) {
        e = cu_status(tc_graph_run(s->graph, s->pos, token, s->logits, &ran), "graph replay");
        if (e || ran) return e;
        tc_graph_free(s->graph); /* stale: record again */
        s->graph = NULL;
    } else if (s->graph_state == 0) {
        s->graph_state = 1;
        return plain(be, st, layers);
    }
    tc_graph *g = NULL;
    e = cu_status(tc_graph_begin(s->pos, token, V, &g), "graph capture");
    if (!e) {
        c->recording = true;
        e = layers(be, st);
        c->recording = false;
        tern_status e2 = cu_status(tc_graph_end(g, s->dlogits), "graph capture");
        if (!e) e = e2;
        else if (!e2) tc_graph_free(g);
    }
    if (e) {
        tern_log(TERN_LOG_WARN, "step graphs off for this session: %s", tern_last_error());
        tern_clear_error();
        s->graph_state = -1;
        return plain(be, st, layers);
    }
    s->graph = g;
    e = cu_status(tc_graph_run(g, s->pos, token, s->logits, &ran), "graph replay");
    if (e || ran) return e;
    return plain(be, st, layers);
}

static const tm_backend_vt g_cuda_vt = {
    .name = "cuda",
    .device_memory = true,
    .destroy = cu_destroy,
    .batch_hint = cu_batch_hint,
    .alloc = cu_alloc,
    .free = cu_free,
    .upload = cu_upload,
    .download = cu_download,
    .zero = cu_zero,
    .sync = cu_sync,
    .gdn_state_floats = cu_gdn_state_floats,
    .session_release = cu_session_release,
    .embed = tm_layers_embed,
    .attn_mixer = tm_layers_attn_mixer,
    .gdn_mixer = tm_layers_gdn_mixer,
    .ffn = tm_layers_ffn,
    .head = cu_head,
    .run_step = cu_run_step,
};

bool tm_backend_cuda_present(const char **what) {
    if (tc_device_count() < 1) {
        if (what) *what = "no CUDA device";
        return false;
    }
    if (what) *what = tc_init() == 0 ? tc_device_name() : "CUDA device not usable";
    return true;
}

tern_status tm_backend_cuda_create(const tm_backend_params *p, tm_backend **out) {
    *out = NULL;
    int dev = p ? p->device_index : 0;
    int n = tc_device_count();
    if (n < 1) return tern_fail(TERN_ERR_UNSUPPORTED, "CUDA: no CUDA device found");
    if (dev != 0)
        return tern_fail(TERN_ERR_UNSUPPORTED, "CUDA: device %d: this build drives GPU 0 only (%d present)",
                         dev, n);
    tern_status st = cu_status(tc_init(), "initialising device 0");
    if (st) return st;
    cuda_backend *c = calloc(1, sizeof *c);
    if (!c) return tern_fail(TERN_ERR_NOMEM, "out of memory");
    c->base.vt = &g_cuda_vt;
    c->base.ops = &g_cuda_ops;
    c->device = dev;
    *out = &c->base;
    return TERN_OK;
}

const char *tm_backend_cuda_device(void) { return tc_device_name(); }

double tern_device_read_ceiling_gbps(const char *device, size_t bytes, int passes) {
    if (!device || strncmp(device, "cuda", 4) || tc_device_count() < 1) return 0;
    return tc_read_ceiling_gbps(bytes, passes);
}

#else

bool tm_backend_cuda_present(const char **what) {
    if (what) *what = "not compiled in";
    return false;
}

tern_status tm_backend_cuda_create(const tm_backend_params *p, tm_backend **out) {
    (void)p;
    *out = NULL;
    return tern_fail(TERN_ERR_UNSUPPORTED,
                     "CUDA: this build has no CUDA back-end (configure with nvcc available, "
                     "or -DTERN_CUDA=ON)");
}

const char *tm_backend_cuda_device(void) { return ""; }

double tern_device_read_ceiling_gbps(const char *device, size_t bytes, int passes) {
    (void)device;
    (void)bytes;
    (void)passes;
    return 0;
}

#endif
