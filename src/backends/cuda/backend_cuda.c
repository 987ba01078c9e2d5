/*
 * backend_cuda.c - the CUDA back-end (backend.h): an instance on GPU 0 whose op table
 * wraps the extern "C" launchers of src/kernels/cuda (cuda.h), whose exec walks the
 * model's plan (plan.h) matching runs of ops to its fused kernels (site norm + matmul
 * input quantisation, the attention prologue + decode attention, the GDN step, SwiGLU
 * + down's quantisation, transform + out_proj; tm_plan_match) and the rest op by op
 * through that table, whose head brings the logits home once per step, and whose
 * run_step records and replays single-token steps as CUDA graphs
 * (off with the model parameter cuda_graphs = false). Every pointer is device memory, except token ids. Work is queued
 * on one stream; errors are sticky in the kernels and come back from sync.
 * Without TERN_HAVE_CUDA, creating it fails with a message saying so.
 */
#include "backends/backends.h"
#include "model/session.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#if defined(TERN_HAVE_CUDA)

#include "kernels/cuda/cuda.h"
#include "backends/cuda/cu_persist.h"

/* the back-end's CUDA context (every launcher takes it first) */
static tc_ctx *tcx(const tm_backend *be);
/* the model parameter gdn_state: GDN states stored in bf16 */
static bool cu_gdn_bf16(const tm_backend *be);
/* a verify step (tm_step.exact) is being queued: the matmuls give every row batch 1's bits */
static bool cu_exact_now(const tm_backend *be);

static tern_status cu_status(int err, const char *what) {
    if (!err) return TERN_OK;
    return tern_fail(err == TC_ERR_UNSUPPORTED || err == TC_ERR_OLD_GPU ? TERN_ERR_UNSUPPORTED : TERN_ERR_INTERNAL,
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

/* tern_qmat.layout of a matrix repacked on the device (tc_repack_tiled, TC_TERN128T) */
#define CU_LAYOUT_T 0x54

static tc_mat to_mat(const tern_qmat *w) {
    TERN_ASSERT(w->layout == TERN_LAYOUT_ROWS || w->layout == CU_LAYOUT_T);
    tc_mat m = {.kind = w->layout == CU_LAYOUT_T ? TC_TERN128T : kind_of(w->type),
                .data = w->data, .n = w->n, .k = w->k, .row_bytes = w->row_bytes};
    return m;
}

static void cu_matmul(tm_backend *be, const tern_qmat *w, const float *x, size_t batch,
                      size_t xs, float *y, size_t ys) {
    tc_ctx *tcc = tcx(be);
    (void)be;
    tc_mat m = to_mat(w);
    if (cu_exact_now(be)) tc_matmul_multi_exact(tcc, 1, &m, x, batch, xs, &y, &ys);
    else tc_matmul_multi(tcc, 1, &m, x, batch, xs, &y, &ys);
}

static void cu_matmul_multi(tm_backend *be, int n, const tern_qmat *const *w, const float *x,
                            size_t batch, size_t xs, float *const *y, const size_t *ys) {
    tc_ctx *tcc = tcx(be);
    (void)be;
    tc_mat m[8];
    TERN_ASSERT(n > 0 && n <= 8);
    for (int i = 0; i < n; i++) m[i] = to_mat(w[i]);
    /* the integer path quantises the activation once for all matrices of one kind */
    if (cu_exact_now(be)) tc_matmul_multi_exact(tcc, n, m, x, batch, xs, y, ys);
    else tc_matmul_multi(tcc, n, m, x, batch, xs, y, ys);
}

static void cu_hadamard(tm_backend *be, float *x, size_t rows, size_t n, size_t block,
                        const float *signs) {
    tc_ctx *tcc = tcx(be);
    (void)be;
    tc_hadamard(tcc, x, rows, n, block, signs, 0);
}

static void cu_add_rmsnorm_hadamard(tm_backend *be, float *r, const float *d, const float *gain,
                                    float eps, float *normed, float *rotated, size_t rows,
                                    size_t n, size_t block, const float *signs) {
    tc_ctx *tcc = tcx(be);
    (void)be;
    tc_add_rmsnorm_hadamard(tcc, r, d, gain, eps, normed, rotated, rows, n, block, signs);
}

static void cu_swiglu_hadamard(tm_backend *be, const float *gate, const float *up, float *out,
                               size_t rows, size_t n, size_t block, const float *signs) {
    tc_ctx *tcc = tcx(be);
    (void)be;
    tc_swiglu_hadamard(tcc, gate, up, out, rows, n, block, signs);
}

static tern_status cu_embed(tm_backend *be, const tern_qmat *emb, const int32_t *ids, size_t n,
                            float *out, size_t block, const float *signs) {
    tc_ctx *tcc = tcx(be);
    (void)be;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= emb->n)
            return tern_fail(TERN_ERR_RANGE, "token id %d out of range [0, %lld)", (int)ids[i],
                             (long long)emb->n);
    tc_mat m = to_mat(emb);
    if (m.kind == TC_TERN128T) tc_embed_tiled(tcc, &m, ids, n, out, block, signs);
    else tc_embed(tcc, &m, ids, n, out, block, signs);
    return TERN_OK;
}

static void cu_head_rmsnorm(tm_backend *be, float *x, size_t rows, size_t stride, int n_heads,
                            int hd, const float *gain, float eps) {
    tc_ctx *tcc = tcx(be);
    (void)be;
    tc_head_rmsnorm(tcc, x, rows, stride, n_heads, hd, gain, eps);
}

static void cu_rope(tm_backend *be, float *x, size_t rows, size_t stride, int n_heads, int hd,
                    int rot, int pos0, float theta) {
    tc_ctx *tcc = tcx(be);
    (void)be;
    tc_rope(tcc, x, rows, stride, n_heads, hd, rot, pos0, theta);
}

static void cu_attention(tm_backend *be, const tm_attn_args *a) {
    tc_ctx *tcc = tcx(be);
    (void)be;
    tc_attention(tcc, a->q, a->q_stride, a->kcache, a->vcache, (int)a->k_type, (int)a->v_type, a->out,
                 a->rows, a->pos0, a->n_head, a->n_head_kv, a->head_dim, a->scale);
}

static void cu_gdn(tm_backend *be, const tm_gdn_args *a) {
    tc_ctx *tcc = tcx(be);
    (void)be;
    /* the state is kept fully applied: `pending` is not used on the GPU */
    tc_gdn_args g = {.qkv = a->qkv, .z = a->z, .a = a->a, .b = a->b, .conv_w = a->conv_w,
                     .ssm_a = a->ssm_a, .dt_bias = a->dt_bias, .norm = a->norm,
                     .conv_state = a->conv_state, .state = a->state, .out = a->out,
                     .work = a->work, .rows = a->rows, .n_k = a->n_k, .n_v = a->n_v,
                     .dk = a->dk, .dv = a->dv, .conv_k = a->conv_k, .v_tiled = a->v_tiled,
                     .eps = a->eps, .state_bf16 = cu_gdn_bf16(be)};
    tc_gdn(tcc, &g);
}

static void cu_copy_rows(tm_backend *be, float *dst, size_t ds, const float *src, size_t ss,
                         size_t rows, size_t n) {
    tc_ctx *tcc = tcx(be);
    (void)be;
    tc_copy_rows(tcc, dst, ds, src, ss, rows, n);
}
static void cu_split_heads(tm_backend *be, const float *src, size_t rows, int n_heads, int hd,
                           float *a, float *b) {
    tc_ctx *tcc = tcx(be);
    (void)be;
    tc_split_heads(tcc, src, rows, n_heads, hd, a, b);
}
static void cu_mul_sigmoid(tm_backend *be, float *x, const float *g, size_t rows, size_t n) {
    tc_ctx *tcc = tcx(be);
    (void)be;
    tc_mul_sigmoid(tcc, x, g, rows, n);
}
static void cu_permute(tm_backend *be, const float *src, float *dst, size_t rows, int n_k, int n_v,
                       int dv) {
    tc_ctx *tcc = tcx(be);
    (void)be;
    tc_permute_tiled_grouped(tcc, src, dst, rows, n_k, n_v, dv);
}
/* f32, f16, bf16 and q8_0 caches (kv_types below; TC_KV_* numbering = tern_kv_type) */
static void cu_kv_store(tm_backend *be, void *kc, void *vc, tern_kv_type kt, tern_kv_type vt,
                        const float *k, const float *v, size_t kvw, size_t rows, int pos0) {
    tc_ctx *tcc = tcx(be);
    (void)be;
    tc_kv_store(tcc, kc, vc, (int)kt, (int)vt, k, v, kvw, rows, pos0);
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
    tc_ctx *tc;       /* the device's context: stream, error, workspaces, caches */
    int device;
    bool graphs;      /* the model parameter cuda_graphs */
    tc_mm_caps mm;    /* the matmul chooser's caps (prefill mode, forced family) */
    bool recording;   /* a step is being recorded into a graph: no download, no sync */
    /* device tables of the GDN state pointers of a step's sessions, [n_gdn][2][n]:
     * ptr_dev serves steps run op by op and is uploaded only when its contents
     * change (ptr_pin: what it holds); a recorded graph has its own (cu_graph) */
    float **ptr_dev, **ptr_pin, **ptr_tmp;
    size_t ptr_n, ptr_used;
    float *const *ptr_cur; /* the table of the step being queued (NULL: none) */
    /* the sessions' positions and caches of a batch step run
     * op by op ([n], uploaded per step; attn_cur NULL: attention per session) */
    tc_attn_seq *attn_dev, *attn_host;
    size_t attn_cap;
    const tc_attn_seq *attn_cur;
    int attn_max_ctx;
    bool exact;       /* queuing a tm_step.exact step (cu_exec_exact) */
    bool persistent;  /* the model parameter cuda_persistent */
    bool gdn_bf16;    /* the model parameter gdn_state: GDN states stored in bf16 */
    void *persist;    /* its state (persist_step.c) */
} cuda_backend;

static tc_ctx *tcx(const tm_backend *be) { return ((const cuda_backend *)be)->tc; }
static bool cu_gdn_bf16(const tm_backend *be) { return ((const cuda_backend *)be)->gdn_bf16; }
static bool cu_exact_now(const tm_backend *be) { return ((const cuda_backend *)be)->exact; }

static void cu_destroy(tm_backend *be) {
    cuda_backend *c = (cuda_backend *)be;
    tc_ctx *tcc = c->tc;
    if (c->ptr_dev) tc_free(tcc, c->ptr_dev, c->ptr_n * sizeof(float *));
    free(c->ptr_pin);
    free(c->ptr_tmp);
    if (c->attn_dev) tc_free(tcc, c->attn_dev, c->attn_cap * sizeof(tc_attn_seq));
    free(c->attn_host);
    tm_cuda_persist_free(tcc, c->persist);
    tc_ctx_free(c->tc);
    free(be);
}
/* One pass reads the weights once for all its rows: a server's 64 streams in one pass of 64
 * (408.8 output tok/s) beat four passes of 16 (370.0): docs/performance.md, H200, 2026-12-04. */
static int cu_batch_hint(const tm_backend *be) {
    (void)be;
    return 64;
}
/* Prefill chunks of 512 rows: the tensor-core GEMM reads each weight once per chunk
 * (at 64 rows it is weight-bound: docs/performance.md, H200 prefill profile). */
static int cu_chunk_hint(const tm_backend *be) {
    (void)be;
    return 512;
}
static void *cu_alloc(tm_backend *be, size_t n) {
    tc_ctx *tcc = tcx(be);
    (void)be;
    return tc_malloc(tcc, n);
}
static void cu_free(tm_backend *be, void *p, size_t n) {
    tc_ctx *tcc = tcx(be);
    (void)be;
    tc_free(tcc, p, n);
}
static tern_status cu_upload(tm_backend *be, void *dst, const void *src, size_t n) {
    tc_ctx *tcc = tcx(be);
    (void)be;
    return cu_status(tc_upload(tcc, dst, src, n), "upload");
}
static tern_status cu_download(tm_backend *be, void *dst, const void *src, size_t n) {
    tc_ctx *tcc = tcx(be);
    (void)be;
    return cu_status(tc_download(tcc, dst, src, n), "download");
}
static tern_status cu_zero(tm_backend *be, void *p, size_t n) {
    tc_ctx *tcc = tcx(be);
    (void)be;
    return cu_status(tc_zero(tcc, p, n), "memset");
}
static tern_status cu_copy(tm_backend *be, void *dst, const void *src, size_t n) {
    return cu_status(tc_copy(tcx(be), dst, src, n), "device copy");
}
static uint64_t cu_mem_available(const tm_backend *be) {
    tc_ctx *tcc = tcx(be);
    (void)be;
    return tc_mem_free(tcc);
}
static tern_status cu_sync(tm_backend *be) {
    tc_ctx *tcc = tcx(be);
    (void)be;
    return cu_status(tc_sync(tcc), "forward pass");
}
/* the state is kept fully applied: nothing beside S; in bf16 (gdn_state), S takes half
 * the floats (n_v*dk*dv bf16 values, rounded up to whole floats) */
static size_t cu_gdn_state_floats(const tm_backend *be, const tm_hparams *hp) {
    const size_t n = (size_t)hp->ssm_n_v * hp->ssm_dk * hp->ssm_dv;
    return ((const cuda_backend *)be)->gdn_bf16 ? (n + 1) / 2 : n;
}
/* a host state S (fp32, n_v*dk*dv floats) to the back-end's storage: bf16 in place */
static void cu_gdn_state_plain(const tm_backend *be, const tm_hparams *hp, float *state) {
    if (!((const cuda_backend *)be)->gdn_bf16) return;
    const size_t n = (size_t)hp->ssm_n_v * hp->ssm_dk * hp->ssm_dv;
    uint16_t *h = (uint16_t *)state;
    for (size_t i = 0; i < n; i++) h[i] = tern_f32_to_bf16(state[i]); /* h[i] lies below state[i] */
}
/* A session's step graph and the device table of GDN state pointers it reads. */
typedef struct cu_graph {
    tc_graph *g;
    float **ptrs; /* device, ptr_bytes (NULL: no GDN layers) */
    size_t ptr_bytes;
} cu_graph;

static void cu_graph_free(tc_ctx *tcc, cu_graph *cg) {
    if (!cg) return;
    if (cg->g) tc_graph_free(cg->g);
    if (cg->ptrs) tc_free(tcc, cg->ptrs, cg->ptr_bytes);
    free(cg);
}

/* Weights: a 128-group ternary matrix is repacked on the device into the decode GEMV's
 * tiled layout (tc_repack_tiled: 16-row strips in mma fragment order; same bytes) and the
 * uploaded copy freed, as the matmul chooser says (tc_mm_repack_tiled: not when a
 * file-layout family is forced for an A/B run). */
static tern_status cu_prepare_matrix(tm_backend *be, tern_qmat *w, size_t *bytes) {
    cuda_backend *c = (cuda_backend *)be;
    tc_ctx *tcc = c->tc;
    if (w->layout != TERN_LAYOUT_ROWS) return TERN_OK;
    const int kind = kind_of(w->type);
    /* the matmul's quantised activation for a whole prefill chunk, sized now (workspace
     * 0 then does not move under a recorded step graph), and the GEMM's split-K
     * partials (fixed size: no step allocates them, captured or not) */
    if (kind == TC_TERN128 && w->k % 128 == 0 &&
        tc_ctx_reserve(c->tc, 0, tc_act_bytes((size_t)cu_chunk_hint(be), w->k)))
        return tern_fail(TERN_ERR_NOMEM, "CUDA: out of device memory for the activation workspace");
    if (kind == TC_TERN128 && w->k % 256 == 0 && tc_gemm_reserve(c->tc))
        return tern_fail(TERN_ERR_NOMEM, "CUDA: out of device memory for the GEMM's split-K workspace");
    if (!tc_mm_repack_tiled(kind, w->n, w->k, &c->mm)) return TERN_OK;
    tc_mat src = to_mat(w), dst;
    int e = tc_repack_tiled(tcc, &src, &dst);
    if (e == TC_ERR_UNSUPPORTED) return TERN_OK;
    if (e) return cu_status(e, "repacking a matrix on the device");
    tc_free(tcc, (void *)w->data, *bytes);
    *bytes = tc_tiled_bytes(w->n, w->k);
    w->data = dst.data;
    w->row_bytes = dst.row_bytes;
    w->layout = CU_LAYOUT_T;
    return TERN_OK;
}

/* ------------------------------------------------------------ the plan, fused */

/* What a session keeps here (s->be_state): its step graph and the quantised
 * activation buffer of its steps, sized from the plan when the session is made. */
typedef struct cu_sess {
    cu_graph *graph;  /* single-token step graph (NULL: none yet) */
    int graph_state;  /* 0 no step yet, 1 record at the next step, -1 graphs off */
    /* verify graphs by row count (cu_exec_exact): vgraph[R], vstate[R] as graph_state */
    cu_graph *vgraph[TC_GRAPH_ROWS + 1];
    signed char vstate[TC_GRAPH_ROWS + 1];
    void *act_buf;    /* the quantised activation of one site, shared by the matmuls
                       * reading it: tc_act_bytes(n_chunk, k) for the widest matmul input k */
    size_t act_bytes;
    bool pinned;      /* the session's host logits are page-locked (tc_host_pin) */
} cu_sess;

static tern_status cu_session_init(tm_backend *be, tern_session *s) {
    tc_ctx *tcc = tcx(be);
    (void)be;
    cu_sess *cs = calloc(1, sizeof *cs);
    if (!cs) return tern_fail(TERN_ERR_NOMEM, "out of memory");
    s->be_state = cs;
    const tm_plan *p = &s->m->plan;
    size_t need = 0;
    for (int i = 0; i < p->n_ops; i++) {
        const tm_plan_op *op = &p->ops[i];
        if (op->kind != TM_OP_MATMUL || op->width % 128) continue;
        size_t b = tc_act_bytes((size_t)s->n_chunk, op->width);
        if (b > need) need = b;
    }
    if (need) {
        cs->act_buf = tc_malloc(tcc, need);
        if (!cs->act_buf)
            return tern_fail(TERN_ERR_NOMEM, "CUDA: out of device memory for a %zu-byte activation buffer", need);
        cs->act_bytes = need;
        s->bytes += need;
    }
    /* what the kernels would otherwise allocate at the first step (then inside a graph
     * capture, which cannot allocate): the decode attention's partials for this session's
     * context, the pinned ids of a prefill chunk */
    const tm_hparams *hp = &s->m->hp;
    if (hp->n_head > 0 && hp->n_head_kv > 0 && hp->head_dim > 0 &&
        tc_ctx_reserve(tcc, 2, tc_attention_decode_ws_bytes(tcc, (int)s->k_type, (int)s->v_type, s->n_ctx, hp->n_head,
                                                             hp->n_head_kv, hp->head_dim)))
        return tern_fail(TERN_ERR_NOMEM, "CUDA: out of device memory for the attention workspace (n_ctx %d)", s->n_ctx);
    if (tc_ctx_reserve_ids(tcc, (size_t)s->n_chunk))
        return tern_fail(TERN_ERR_NOMEM, "CUDA: out of pinned host memory for %d token ids", s->n_chunk);
    /* the host logits page-locked: every step's row comes home by DMA (a batch step's rows
     * straight into each session's logits: cu_head) */
    cs->pinned = s->logits && !tc_host_pin(tcc, s->logits, (size_t)hp->n_vocab * sizeof(float));
    return TERN_OK;
}

static void cu_session_release(tm_backend *be, tern_session *s) {
    tc_ctx *tcc = tcx(be);
    (void)be;
    cu_sess *cs = s->be_state;
    if (!cs) return;
    cu_graph_free(tcc, cs->graph);
    for (int r = 0; r <= TC_GRAPH_ROWS; r++) cu_graph_free(tcc, cs->vgraph[r]);
    if (cs->act_buf) tc_free(tcc, cs->act_buf, cs->act_bytes);
    if (cs->pinned) tc_host_unpin(tcc, s->logits);
    free(cs);
    s->be_state = NULL;
}

/* a dense matrix in the file's row layout (f32, f16, bf16) */
static bool dense_rows(const tern_qmat *w) {
    return w->layout == TERN_LAYOUT_ROWS &&
           (w->type == TERN_DT_F32 || w->type == TERN_DT_F16 || w->type == TERN_DT_BF16);
}

static bool all_int(int n, const tern_qmat *const *w) {
    for (int i = 0; i < n; i++)
        if (w[i]->layout != CU_LAYOUT_T) return false;
    return true;
}

/* The activation view for rows x k in the step's session buffer (NULL: k not in
 * 128-blocks). Sized up front (cu_session_init): it never moves. */
static const tc_act *act_for(const tm_step *st, size_t rows, int64_t k, tc_act *view) {
    const cu_sess *cs = st->w->be_state;
    if (k % 128 || !cs || tc_act_bytes(rows, k) > cs->act_bytes) return NULL;
    *view = tc_act_view(cs->act_buf, rows, k);
    return view;
}

#define CU_TRY(x) do { tern_status e_ = (x); if (e_) return e_; } while (0)

static inline float *B(const tm_step *st, int b) { return tm_step_buf(st, b); }
/* a verify step of one sequence (tm_step.exact): every row with the bits of a decode step */
static inline bool ex1(const tm_step *st) { return st->exact && st->n_seq == 1; }
static inline const tern_qmat *matw(const tm_step *st, tm_mat_id id) {
    return tm_plan_mat(st->w->m, id, st->dec || st->exact);
}

/* site norm (+ transform) with the matmul input quantised inside the kernel */
static const tc_act *cu_site(const tm_step *st, const tm_plan_op *op, tc_act *view) {
    tc_ctx *tcc = tcx(st->w->m->be);
    tern_session *w = st->w;
    const tern_model *m = w->m;
    const size_t E = (size_t)op->width;
    const tc_act *act = act_for(st, (size_t)st->T, (int64_t)E, view);
    tc_add_rmsnorm_hadamard_q(tcc, B(st, op->in), B(st, op->in2), tm_plan_vec(m, op->vec), op->eps, B(st, op->out),
                              B(st, op->out2), (size_t)st->T, E, (size_t)m->had_block,
                              tm_model_signs(m, (int64_t)E), act);
    return act;
}

/* ex: a verify step's rows, each with batch 1's bits (tc_matmul_multi_exact) */
static void mm(tc_ctx *tcc, bool ex, int n, const tern_qmat *const *w, const tc_act *act, const float *x,
               size_t batch, size_t xs, float *const *y, const size_t *ys) {
    tc_mat mt[8];
    for (int i = 0; i < n; i++) mt[i] = to_mat(w[i]);
    if (act && all_int(n, w)) {
        if (ex) tc_matmul_multi_q_exact(tcc, n, mt, act, x, xs, y, ys);
        else tc_matmul_multi_q(tcc, n, mt, act, x, xs, y, ys);
    } else if (ex) {
        tc_matmul_multi_exact(tcc, n, mt, x, batch, xs, y, ys);
    } else {
        tc_matmul_multi(tcc, n, mt, x, batch, xs, y, ys);
    }
}

/* a MATMUL op through mm (act: its input already quantised, or NULL) */
static void mm_op(const tm_step *st, const tm_plan_op *op, const tc_act *act) {
    tc_ctx *tcc = tcx(st->w->m->be);
    const tern_qmat *w[TM_PLAN_MAX_MATS];
    float *y[TM_PLAN_MAX_MATS];
    size_t ys[TM_PLAN_MAX_MATS];
    for (int i = 0; i < op->n_mat; i++) {
        w[i] = matw(st, op->mat[i]);
        y[i] = B(st, op->out_buf[i]);
        ys[i] = (size_t)op->out_w[i];
    }
    mm(tcc, st->exact, op->n_mat, w, act, B(st, op->in), (size_t)st->T, (size_t)op->width, y, ys);
}

/* The attention core (plan ops [SPLIT_HEADS] .. ATTENTION [MUL_SIGMOID]): decode rows
 * run the fused prologue (split, q/k norms, RoPE, KV store) and split-K attention with
 * the gate in its merge, for all sessions at once when the step has a batch table;
 * prefill chunks the ops one by one (attn_ops). */
static void attn_ops(const tm_step *st, const tm_plan_op *a, int gate_buf);

static void cu_attn_core(cuda_backend *c, const tm_step *st, const tm_plan_op *first, const tm_plan_op *a) {
    tc_ctx *tcc = c->tc;
    tern_session *w = st->w;
    const tern_model *m = w->m;
    const tm_hparams *hp = &m->hp;
    const tm_layer *l = &m->layers[a->layer];
    const int HD = a->head_dim, NH = a->n_head, NKV = a->n_head_kv;
    const int R = st->R, qw = NH * HD, kvw = NKV * HD;
    const bool gated = first->kind == TM_OP_SPLIT_HEADS;
    float *big0 = B(st, gated ? first->in : a->in), *kbuf = B(st, TM_BUF_K), *vbuf = B(st, TM_BUF_V);
    float *qo = B(st, a->out2), *go = gated ? B(st, first->out2) : NULL, *big3 = B(st, a->out);
    const bool dec_ops = (R == 1 || ex1(st)) && HD <= 256 && a->rope_dims <= HD && a->rope_dims % 2 == 0;
    if (dec_ops && c->attn_cur) {
        /* a batch step (attn_tab took it): the same two ops for
         * all the sessions at once, positions and caches from the step's table */
        tern_session *s0 = st->ss[0];
        tc_attn_bat bt = {.seqs = c->attn_cur, .kv_index = l->kv_index, .k_row = s0->k_row, .v_row = s0->v_row,
                          .qg_stride = (size_t)l->wq.n, .kv_stride = (size_t)kvw, .q_stride = (size_t)qw};
        tc_attn_prep_args pa = {.qg = big0, .k = kbuf, .v = vbuf, .gated = hp->attn_gate,
                                .q_norm = l->q_norm, .k_norm = l->k_norm, .eps = a->eps,
                                .theta = a->theta, .q_out = qo,
                                .gate_out = hp->attn_gate ? go : NULL, .n_head = NH, .n_head_kv = NKV,
                                .head_dim = HD, .rope_dims = a->rope_dims, .k_type = (int)s0->k_type,
                                .v_type = (int)s0->v_type};
        tc_attn_prep_batch(tcc, &pa, st->n_seq, &bt);
        tc_attention_decode_batch(tcc, qo, (int)s0->k_type, (int)s0->v_type, hp->attn_gate ? go : NULL,
                                  big3, st->n_seq, &bt, c->attn_max_ctx, NH, NKV, HD, 1.0f / sqrtf((float)HD));
    } else if (dec_ops) {
        /* one session: its rows (a verify step, ex1) at positions pos.. in one launch per op
         * (every row's K/V stored before the attention; row i reads positions <= pos + i), each
         * row's bits those of a decode step at its position; else a session per row */
        const bool one = st->n_seq == 1;
        tc_graph_row(tcc, 0); /* a verify graph: the rows' position words from row 0's */
        for (int i = 0; i < (one ? 1 : st->T); i++) {
            tern_session *s = st->ss[i];
            const int rows = one ? st->T : 1;
            uint8_t *kc = (uint8_t *)s->kcache + (size_t)l->kv_index * s->n_ctx * s->k_row;
            uint8_t *vc = (uint8_t *)s->vcache + (size_t)l->kv_index * s->n_ctx * s->v_row;
            float *qi = qo + (size_t)i * qw, *gi = hp->attn_gate ? go + (size_t)i * qw : NULL;
            const tc_attn_bat rs = {.qg_stride = (size_t)l->wq.n, .kv_stride = (size_t)kvw, .q_stride = (size_t)qw};
            tc_attn_prep_args pa = {.qg = big0 + (size_t)i * l->wq.n, .k = kbuf + (size_t)i * kvw,
                                    .v = vbuf + (size_t)i * kvw, .gated = hp->attn_gate,
                                    .q_norm = l->q_norm, .k_norm = l->k_norm, .eps = a->eps,
                                    .theta = a->theta, .q_out = qi, .gate_out = gi,
                                    .kcache = kc, .vcache = vc, .pos0 = s->pos, .n_head = NH,
                                    .n_head_kv = NKV, .head_dim = HD, .rope_dims = a->rope_dims,
                                    .k_type = (int)s->k_type, .v_type = (int)s->v_type};
            tc_attn_prep_rows(tcc, &pa, rows, &rs);
            tc_attention_decode_rows(tcc, qi, kc, vc, (int)s->k_type, (int)s->v_type, gi, big3 + (size_t)i * qw, rows,
                                     (size_t)qw, s->pos, s->n_ctx, NH, NKV, HD, 1.0f / sqrtf((float)HD));
        }
    } else {
        if (gated) tc_split_heads(tcc, big0, (size_t)st->T, NH, HD, B(st, first->out), B(st, first->out2));
        attn_ops(st, a, gated ? first->out2 : TM_BUF_NONE);
    }
}

/* the attention core's ops after the split, one by one (prefill chunks; decode
 * shapes the fused prologue does not take) */
static void attn_ops(const tm_step *st, const tm_plan_op *a, int gate_buf) {
    tc_ctx *tcc = tcx(st->w->m->be);
    tern_session *w = st->w;
    const tern_model *m = w->m;
    const tm_layer *l = &m->layers[a->layer];
    const int HD = a->head_dim, NH = a->n_head, NKV = a->n_head_kv;
    const int T = st->T, R = st->R, qw = NH * HD, kvw = NKV * HD;
    float *q = B(st, a->in), *gate = gate_buf >= 0 ? B(st, gate_buf) : NULL;
    float *kbuf = B(st, TM_BUF_K), *vbuf = B(st, TM_BUF_V), *big3 = B(st, a->out);
    tc_head_rmsnorm(tcc, q, (size_t)T, (size_t)qw, NH, HD, l->q_norm, a->eps);
    tc_head_rmsnorm(tcc, kbuf, (size_t)T, (size_t)kvw, NKV, HD, l->k_norm, a->eps);
    bool gated = false;
    for (int i = 0; i < st->n_seq; i++) {
        tern_session *s = st->ss[i];
        const int pos0 = s->pos;
        float *qi = q + (size_t)i * qw, *ki = kbuf + (size_t)i * kvw, *vi = vbuf + (size_t)i * kvw;
        tc_rope(tcc, qi, (size_t)R, (size_t)qw, NH, HD, a->rope_dims, pos0, a->theta);
        tc_rope(tcc, ki, (size_t)R, (size_t)kvw, NKV, HD, a->rope_dims, pos0, a->theta);
        uint8_t *kc = (uint8_t *)s->kcache + (size_t)l->kv_index * s->n_ctx * s->k_row;
        uint8_t *vc = (uint8_t *)s->vcache + (size_t)l->kv_index * s->n_ctx * s->v_row;
        const int kt = (int)s->k_type, vt = (int)s->v_type;
        tc_kv_store(tcc, kc, vc, kt, vt, ki, vi, (size_t)kvw, (size_t)R, pos0);
        float *oi = big3 + (size_t)i * qw;
        if (R == 1) { /* split-K decode attention, the gate fused; grid fixed by n_ctx */
            tc_attention_decode(tcc, qi, kc, vc, kt, vt, gate ? gate + (size_t)i * qw : NULL, oi, pos0, s->n_ctx,
                                NH, NKV, HD, 1.0f / sqrtf((float)HD));
            gated = true;
        } else {
            tc_attention(tcc, qi, (size_t)qw, kc, vc, kt, vt, oi, R, pos0, NH, NKV, HD, 1.0f / sqrtf((float)HD));
        }
    }
    if (gate && !gated) tc_mul_sigmoid(tcc, big3, gate, (size_t)T, (size_t)qw);
}

/* HADAMARD + the projection reading it: the transform quantises the matmul's input in
 * its kernel (no quantise launch in mm) */
static void cu_had_mm(const tm_step *st, const tm_plan_op *h, const tm_plan_op *op) {
    tc_ctx *tcc = tcx(st->w->m->be);
    const tern_model *m = st->w->m;
    const tern_qmat *wo = matw(st, op->mat[0]);
    tc_act oview;
    const tc_act *oact = all_int(1, &wo) ? act_for(st, (size_t)st->T, (int64_t)h->width, &oview) : NULL;
    tc_hadamard_q(tcc, B(st, h->in), (size_t)st->T, (size_t)h->width, (size_t)m->had_block,
                  tm_model_signs(m, h->had), oact);
    mm_op(st, op, oact);
}

/* SwiGLU (+ transform) + down: the activation quantises down's input in its kernel */
static void cu_act_mm(const tm_step *st, const tm_plan_op *a, const tm_plan_op *op) {
    tc_ctx *tcc = tcx(st->w->m->be);
    const tern_model *m = st->w->m;
    const tern_qmat *wd = matw(st, op->mat[0]);
    const size_t T = (size_t)st->T, F = (size_t)a->width;
    tc_act view2;
    const tc_act *act2 = (wd->layout == CU_LAYOUT_T) ? act_for(st, T, (int64_t)F, &view2) : NULL;
    tc_swiglu_hadamard_q(tcc, B(st, a->in), B(st, a->in2), B(st, a->out), T, F, (size_t)m->had_block,
                         tm_model_signs(m, a->had), act2);
    mm_op(st, op, act2);
}

/* The GDN state pointers of a step's sessions, [n_gdn][2][n], as a device table for
 * the fused step kernels (c->ptr_cur; NULL when the step does not use them). For a
 * step run op by op it is c->ptr_dev, allocated once for CU_MAX_SEQ sessions and
 * uploaded (synchronously, outside any recording) only when the sessions differ
 * from the last upload's; for a recorded graph, *own (allocated here, uploaded once,
 * freed with the graph): its address is what the graph keeps. */
#define CU_MAX_SEQ 64
static bool gdn_ptrs(cuda_backend *c, const tm_step *st, cu_graph *own) {
    tc_ctx *tcc = c->tc;
    const tern_model *m = st->w->m;
    const tm_hparams *hp = &m->hp;
    c->ptr_cur = NULL;
    if (!hp->n_gdn_layers || (st->R != 1 && !ex1(st)) || st->n_seq > CU_MAX_SEQ) return false;
    size_t n = (size_t)st->n_seq, L = (size_t)hp->n_gdn_layers, need = L * 2 * n;
    if (!c->ptr_dev) {
        size_t cap = L * 2 * CU_MAX_SEQ;
        c->ptr_dev = tc_malloc(tcc, cap * sizeof(float *));
        c->ptr_pin = malloc(cap * sizeof(float *));
        c->ptr_tmp = malloc(cap * sizeof(float *));
        if (!c->ptr_dev || !c->ptr_pin || !c->ptr_tmp) {
            if (c->ptr_dev) tc_free(tcc, c->ptr_dev, cap * sizeof(float *));
            free(c->ptr_pin);
            free(c->ptr_tmp);
            c->ptr_dev = c->ptr_pin = c->ptr_tmp = NULL;
            return false;
        }
        c->ptr_n = cap;
        c->ptr_used = 0;
    }
    if (need > c->ptr_n) return false;
    const size_t C = 2 * (size_t)hp->ssm_n_k * hp->ssm_dk + (size_t)hp->ssm_n_v * hp->ssm_dv;
    const size_t conv_n = (size_t)(hp->conv_k - 1) * C, st_n = cu_gdn_state_floats(&c->base, hp);
    float **t = c->ptr_tmp;
    for (size_t g = 0; g < L; g++)
        for (size_t i = 0; i < n; i++) {
            t[(g * 2 + 0) * n + i] = st->ss[i]->conv_state + g * conv_n;
            t[(g * 2 + 1) * n + i] = st->ss[i]->ssm_state + g * st_n;
        }
    const size_t bytes = need * sizeof(float *);
    if (own) {
        own->ptrs = tc_malloc(tcc, bytes);
        if (!own->ptrs) return false;
        own->ptr_bytes = bytes;
        if (tc_upload(tcc, own->ptrs, t, bytes)) return false;
        c->ptr_cur = own->ptrs;
        return true;
    }
    if (c->ptr_used != need || memcmp(c->ptr_pin, t, bytes)) {
        c->ptr_used = 0;
        if (tc_upload(tcc, c->ptr_dev, t, bytes)) return false;
        memcpy(c->ptr_pin, t, bytes);
        c->ptr_used = need;
    }
    c->ptr_cur = c->ptr_dev;
    return true;
}

/* May this step run the GDN mixers fused (decode rows, the kernels' head sizes, the
 * state table made)? Otherwise their ops run one by one from the site on. */
static bool gdn_fused(const cuda_backend *c, const tm_step *st) {
    const tm_hparams *hp = &st->w->m->hp;
    return (st->R == 1 || ex1(st)) && hp->ssm_dk <= 128 && hp->ssm_dv <= 256 && c->ptr_cur;
}

/* The GDN core (plan ops MATMUL(a|b) GDN [PERMUTE] HADAMARD MATMUL(out)): the two
 * kernels of tc_gdn_step (conv + delta rule + gated norm, then the output's permute,
 * transform and quantisation), then out_proj from the quantised rows. */
static void cu_gdn_core(cuda_backend *c, const tm_step *st, const tm_plan_op *ab, const tm_plan_op *g,
                        const tm_plan_op *out) {
    tc_ctx *tcc = c->tc;
    tern_session *w = st->w;
    const tern_model *m = w->m;
    const tm_layer *l = &m->layers[g->layer];
    const int E = ab->width, T = st->T;
    const int nk = g->n_head, nv = g->n_head_kv, dk = g->head_dim, dv = g->dv;
    const int C = 2 * nk * dk + nv * dv, VW = nv * dv;
    float *a = B(st, ab->out_buf[0]), *b = B(st, ab->out_buf[1]);
    const tern_qmat *wab[2] = {matw(st, ab->mat[0]), matw(st, ab->mat[1])};
    /* dense a/b gates (f32/f16/bf16): projected inside the step's kernel (ab_w below);
     * otherwise by the matmul here */
    const bool ab_dense = dense_rows(wab[0]) && dense_rows(wab[1]);
    if (!ab_dense) {
        float *yab[2] = {a, b};
        size_t ysab[2] = {(size_t)nv, (size_t)nv};
        mm(tcc, st->exact, 2, wab, NULL, B(st, ab->in), (size_t)T, (size_t)E, yab, ysab);
    }
    const size_t n = (size_t)st->n_seq, gi = (size_t)g->cache;
    /* the output's permute, transform and quantisation in the step's second kernel */
    tc_act oview;
    const tc_act *oact = act_for(st, (size_t)T, (int64_t)VW, &oview);
    tc_gdn_step_args ga = {.n = (int)n, .qkv = B(st, g->in), .z = B(st, g->in2), .a = a, .b = b,
                           .qkv_stride = (size_t)C, .z_stride = (size_t)VW, .ab_stride = (size_t)nv,
                           .out_stride = (size_t)VW, .conv_w = l->conv, .ssm_a = l->ssm_a,
                           .dt_bias = l->dt_bias, .norm = l->ssm_norm,
                           .conv_state = c->ptr_cur + (gi * 2 + 0) * n,
                           .state = c->ptr_cur + (gi * 2 + 1) * n, .out = B(st, g->out), .work = B(st, g->out2),
                           .n_k = nk, .n_v = nv, .dk = dk, .dv = dv, .conv_k = g->conv_k,
                           .v_tiled = m->v_tiled, .eps = g->eps, .out_grouped = m->out_permute,
                           .signs = tm_model_signs(m, VW), .block = m->had_block,
                           .state_bf16 = c->gdn_bf16};
    if (oact) ga.act = *oact;
    if (ab_dense) {
        ga.ab_w[0] = to_mat(wab[0]);
        ga.ab_w[1] = to_mat(wab[1]);
        ga.ab_x = B(st, ab->in);
        ga.ab_x_stride = (size_t)E;
    }
    if (ex1(st) && T > 1) ga.rows = T; /* a verify step: the session's rows, the state advanced by each */
    tc_gdn_step(tcc, &ga);
    const tern_qmat *wo = matw(st, out->mat[0]);
    float *yo[1] = {B(st, out->out_buf[0])};
    size_t yso[1] = {(size_t)out->out_w[0]};
    mm(tcc, st->exact, 1, &wo, oact, B(st, g->out), (size_t)T, (size_t)VW, yo, yso);
}

/* The logits land in the session's device rows and come home once per step. */
static tern_status cu_head(cuda_backend *c, const tm_step *st, const tm_plan_op *op) {
    tm_backend *be = &c->base;
    tern_session *w = st->w;
    const size_t V = (size_t)w->m->hp.n_vocab;
    if (st->hidden_out) { /* embeddings: the output norm of every row, no head (never recorded) */
        const size_t E = (size_t)w->m->hp.n_embd;
        CU_TRY(tm_plan_run_op(be, st, op, NULL, true));
        return tm_be_download(be, st->hidden_out, tm_step_buf(st, TM_BUF_NORMED), (size_t)st->T * E * sizeof(float));
    }
    if (!st->rows_out) {
        TERN_ASSERT(st->n_seq == 1 && st->ss[0] == w);
        CU_TRY(tm_plan_run_op(be, st, op, w->dlogits, false));
        if (c->recording) return TERN_OK; /* graph_end adds the copy */
        return tm_be_download(be, w->logits, w->dlogits, V * sizeof(float));
    }
    CU_TRY(tm_plan_run_op(be, st, op, w->dlogits, true));
    if (c->recording) return TERN_OK; /* a verify graph: graph_end adds the rows' copy */
    enum { ROWS_DIRECT = 512 };
    if (st->rows_out == w->blogits && st->R == 1 && st->n_seq == st->T && st->n_seq <= ROWS_DIRECT) {
        /* a batch step whose rows nobody asked for: each row straight into its session's
         * (page-locked) logits, no pass through the rows buffer (64 rows of 248,320 floats
         * are 64 MB a step) */
        float *dst[ROWS_DIRECT];
        for (int i = 0; i < st->n_seq; i++) dst[i] = st->ss[i]->logits;
        return cu_status(tc_download_rows(tcx(be), dst, w->dlogits, V, st->n_seq), "download");
    }
    tern_status s = tm_be_download(be, st->rows_out, w->dlogits, (size_t)st->T * V * sizeof(float));
    for (int i = 0; i < st->n_seq && !s; i++)
        memcpy(st->ss[i]->logits, st->rows_out + (size_t)(i + st->R - 1) * V, V * sizeof(float));
    return s;
}

/* One step of the plan: runs of ops matched to the fused code above, the rest op by
 * op through g_cuda_ops (tm_plan_run_op). A GDN mixer this step cannot fuse runs op by
 * op from its site to its output projection. */
static tern_status cu_exec(tm_backend *be, const tm_step *st) {
    cuda_backend *c = (cuda_backend *)be;
    const tern_model *m = st->w->m;
    const tm_plan *p = &m->plan;
    int plain_to = -1; /* ops up to this index run one by one */
    for (int i = 0; i < p->n_ops;) {
        const tm_plan_op *op = &p->ops[i];
        int n = 0;
        if (i <= plain_to) {
            CU_TRY(tm_plan_run_op(be, st, op, NULL, false));
            i++;
            continue;
        }
        if (op->kind == TM_OP_SITE && op->layer >= 0 && !m->layers[op->layer].is_attn &&
            tm_mat_role(op->vec) == TM_ROLE_ATTN_NORM && !gdn_fused(c, st)) {
            for (plain_to = i; plain_to < p->n_ops; plain_to++) /* to the mixer's out_proj */
                if (p->ops[plain_to].kind == TM_OP_MATMUL && p->ops[plain_to].out == TM_BUF_DELTA) break;
            continue;
        }
        if ((n = tm_plan_match(p, i, TM_FUSE_SITE_MATMUL))) {
            tc_act view;
            const tc_act *act = cu_site(st, op, &view);
            mm_op(st, op + 1, act);
        } else if ((n = tm_plan_match(p, i, TM_FUSE_ATTN_CORE))) {
            cu_attn_core(c, st, op, &p->ops[i + n - 1 - (p->ops[i + n - 1].kind == TM_OP_MUL_SIGMOID)]);
        } else if ((n = tm_plan_match(p, i, TM_FUSE_GDN_CORE))) {
            cu_gdn_core(c, st, op, op + 1, &p->ops[i + n - 1]);
        } else if ((n = tm_plan_match(p, i, TM_FUSE_HAD_MATMUL))) {
            cu_had_mm(st, op, op + 1);
        } else if ((n = tm_plan_match(p, i, TM_FUSE_ACT_MATMUL))) {
            cu_act_mm(st, op, op + 1);
        } else if (op->kind == TM_OP_LOGITS) {
            CU_TRY(cu_head(c, st, op));
            n = 1;
        } else {
            CU_TRY(tm_plan_run_op(be, st, op, NULL, false));
            n = 1;
        }
        i += n;
    }
    return TERN_OK;
}

/* Step graphs are on unless the model parameter cuda_graphs is false (they passed
 * parity on the H200). */
static bool graphs_on(const cuda_backend *c) { return c->graphs; }

/* The step's attention table (c->attn_cur) for a batch step run op by op, when
 * the batched kernels take the shape (the default since 2026-12-03), and the sessions can
 * share them (same cache types and rows, 16-byte aligned caches and layer strides for
 * the unquantised types); else attn_cur stays NULL and attention runs per session.
 * Decided once per step; uploaded synchronously. */
static void attn_tab(cuda_backend *c, const tm_step *st) {
    tc_ctx *tcc = c->tc;
    c->attn_cur = NULL;
    const tm_hparams *hp = &st->w->m->hp;
    if (st->n_seq < 2 || st->R != 1 || !hp->n_attn_layers) return;
    const tern_session *s0 = st->ss[0];
    int max_ctx = 0;
    for (int i = 0; i < st->n_seq; i++) {
        const tern_session *s = st->ss[i];
        if (s->k_type != s0->k_type || s->v_type != s0->v_type || s->k_row != s0->k_row || s->v_row != s0->v_row)
            return;
        if (s->k_type != TERN_KV_Q8_0 &&
            (((uintptr_t)s->kcache | (uintptr_t)s->vcache | (s->n_ctx * s->k_row) | (s->n_ctx * s->v_row)) & 15))
            return;
        if (s->n_ctx > max_ctx) max_ctx = s->n_ctx;
    }
    if (!tc_attention_decode_batch_ok(tcc, (int)s0->k_type, (int)s0->v_type, max_ctx, hp->n_head, hp->n_head_kv,
                                      hp->head_dim))
        return;
    if ((size_t)st->n_seq > c->attn_cap) {
        if (c->attn_dev) tc_free(tcc, c->attn_dev, c->attn_cap * sizeof(tc_attn_seq));
        free(c->attn_host);
        c->attn_cap = 0;
        c->attn_dev = tc_malloc(tcc, (size_t)st->n_seq * sizeof(tc_attn_seq));
        c->attn_host = malloc((size_t)st->n_seq * sizeof(tc_attn_seq));
        if (!c->attn_dev || !c->attn_host) {
            if (c->attn_dev) tc_free(tcc, c->attn_dev, (size_t)st->n_seq * sizeof(tc_attn_seq));
            free(c->attn_host);
            c->attn_dev = c->attn_host = NULL;
            return;
        }
        c->attn_cap = (size_t)st->n_seq;
    }
    for (int i = 0; i < st->n_seq; i++) {
        const tern_session *s = st->ss[i];
        c->attn_host[i] = (tc_attn_seq){.kcache = s->kcache, .vcache = s->vcache, .pos0 = s->pos, .n_ctx = s->n_ctx};
    }
    if (tc_upload(tcc, c->attn_dev, c->attn_host, (size_t)st->n_seq * sizeof(tc_attn_seq))) return;
    c->attn_cur = c->attn_dev;
    c->attn_max_ctx = max_ctx;
}

static tern_status plain(tm_backend *be, const tm_step *st) {
    cuda_backend *c = (cuda_backend *)be;
    gdn_ptrs(c, st, NULL);
    attn_tab(c, st);
    c->exact = ex1(st);
    tern_status s = cu_exec(be, st);
    c->exact = false;
    c->ptr_cur = NULL;
    c->attn_cur = NULL;
    tern_status ss = tm_be_sync(be);
    return s ? s : ss;
}

static tern_status cu_run_step(tm_backend *be, const tm_step *st);

/* A verify step of T <= TC_GRAPH_ROWS rows whose logits rows are asked for, as a graph
 * per T (the rule of cu_run_step: the first step of a T op by op, the second recorded,
 * later ones replayed with the positions and tokens in the graph's words; the per-row
 * kernels read their row's position word: tc_graph_row). Otherwise op by op. */
/* After a verify graph's replay: the rows left in its page-locked buffer for the caller
 * (st->rows_at: no host copy of them) or already copied to rows_out; the last row is the
 * session's logits either way. */
static tern_status exact_rows_home(const tm_step *st, const tc_graph *g, size_t V) {
    const float *rows = st->rows_out;
    if (st->rows_at) rows = *st->rows_at = tc_graph_logits(g);
    memcpy(st->w->logits, rows + (size_t)(st->T - 1) * V, V * sizeof(float));
    return TERN_OK;
}

static tern_status exact_graph(tm_backend *be, const tm_step *st) {
    tc_ctx *tcc = tcx(be);
    cuda_backend *c = (cuda_backend *)be;
    tern_session *s = st->w;
    cu_sess *cs = s->be_state;
    const int T = st->T;
    if (!st->rows_out || T > TC_GRAPH_ROWS || !graphs_on(c) || !cs || cs->graph_state < 0 || cs->vstate[T] < 0)
        return plain(be, st);
    const size_t V = (size_t)s->m->hp.n_vocab;
    int ran = 0;
    tern_status e;
    if (cs->vgraph[T]) {
        e = cu_status(tc_graph_run_rows(tcc, cs->vgraph[T]->g, s->pos, st->tokens, st->rows_at ? NULL : st->rows_out,
                                        &ran),
                      "verify graph replay");
        if (e) return e;
        if (ran) return exact_rows_home(st, cs->vgraph[T]->g, V);
        cu_graph_free(tcc, cs->vgraph[T]); /* stale: record again */
        cs->vgraph[T] = NULL;
    }
    if (cs->vstate[T] == 0) { /* the first of this T: op by op */
        cs->vstate[T] = 1;
        return plain(be, st);
    }
    cu_graph *cg = calloc(1, sizeof *cg);
    if (!cg) return tern_fail(TERN_ERR_NOMEM, "out of memory");
    if (s->m->hp.n_gdn_layers > 0 && !gdn_ptrs(c, st, cg)) {
        e = tern_fail(TERN_ERR_INTERNAL, "CUDA: GDN state table for a verify graph");
    } else {
        e = cu_status(tc_graph_begin_rows(tcc, s->pos, st->tokens, T, V, &cg->g), "verify graph capture");
        if (!e) {
            c->recording = true;
            c->exact = true;
            e = cu_exec(be, st);
            c->exact = false;
            c->recording = false;
            tern_status e2 = cu_status(tc_graph_end(tcc, cg->g, s->dlogits), "verify graph capture");
            if (e2) cg->g = NULL;
            if (!e) e = e2;
        } else {
            cg->g = NULL;
        }
    }
    c->ptr_cur = NULL;
    if (e) {
        cu_graph_free(tcc, cg);
        tern_log(TERN_LOG_WARN, "verify graphs of %d rows off for this session: %s", T, tern_last_error());
        cs->vstate[T] = -1;
        tern_clear_error();
        return plain(be, st);
    }
    cs->vgraph[T] = cg;
    e = cu_status(tc_graph_run_rows(tcc, cg->g, s->pos, st->tokens, st->rows_at ? NULL : st->rows_out, &ran),
                  "verify graph replay");
    if (e) return e;
    if (ran) return exact_rows_home(st, cg->g, V);
    return plain(be, st);
}

/* Does the fused code take every mixer of this model in a verify step (cu_exec_exact)?
 * The decode shapes of the GDN step and of the attention prologue; else the rows run as
 * decode steps. */
static bool exact_fused_ok(const tern_model *m) {
    const tm_hparams *hp = &m->hp;
    if (hp->n_gdn_layers && (hp->ssm_dk > 128 || hp->ssm_dv > 256)) return false;
    const tm_plan *p = &m->plan;
    for (int i = 0; i < p->n_ops; i++) {
        const tm_plan_op *op = &p->ops[i];
        if (op->kind == TM_OP_ATTENTION && (op->head_dim > 256 || op->rope_dims > op->head_dim || op->rope_dims % 2))
            return false;
    }
    return true;
}

/* A verify step (tm_step.exact, one sequence, T rows): one pass over the weights whose
 * rows come out bit-identical to T decode steps. The norms, quantisation, transforms and
 * SwiGLU run over the T rows with the decode step's kernels (one CTA or cluster per row:
 * the same arithmetic per row at any row count); the matmuls read each weight tile once
 * per 8 rows with batch 1's float order (tc_matmul_multi_exact); the attention prologue,
 * the decode attention and the GDN step take the T rows in one launch per op, each row's
 * arithmetic the decode kernel's (tc_attn_prep_rows, tc_attention_decode_rows,
 * tc_gdn_step .rows; cu_attn_core, cu_gdn_core). A model those
 * fused kernels do not take, and the persistent decode kernel (cuda_persistent), run the
 * rows as decode steps (exact, no faster). */
static tern_status cu_exec_exact(tm_backend *be, const tm_step *st) {
    tern_session *s = st->ss[0];
    /* the persistent kernel's decode steps are its own arithmetic: rows as its steps */
    if (st->T == 1 || ((cuda_backend *)be)->persistent || !exact_fused_ok(s->m)) {
        const size_t V = (size_t)s->m->hp.n_vocab;
        const int p0 = s->pos;
        tern_status e = TERN_OK;
        for (int r = 0; r < st->T && !e; r++) {
            tm_step one = {.w = st->w, .ss = st->ss, .n_seq = 1, .T = 1, .R = 1, .tokens = st->tokens + r,
                           .dec = true};
            s->pos = p0 + r;
            e = cu_run_step(be, &one);
            if (!e && st->rows_out) memcpy(st->rows_out + (size_t)r * V, s->logits, V * sizeof(float));
        }
        s->pos = p0;
        return e;
    }
    return exact_graph(be, st);
}

/* Single-token steps of a session (unless cuda_graphs is false): the first runs op by op,
 * the second is recorded into a graph (position and token read from device words the
 * graph fills, the GDN state pointers from the graph's own table), every later step
 * replays it with no host-to-device copy; a stale graph is recorded again. The session's
 * buffers and the kernels' workspaces are all sized before the first step (the arena,
 * the activation buffer, the attention partials and ids: cu_session_init), so nothing is
 * allocated inside a capture; the first step stays op by op because it fills the
 * context's launch-shape and occupancy caches with plain launches: recorded from the
 * first step (H200, 2026-12-03), the graph's logits differed from op by op by 1.2e-4 (the
 * caches' first queries made inside the capture), where op by op first they are bitwise
 * equal (test_cuda graph_steps). A recording that fails runs the step op by op and turns
 * graphs off for the session. */
static tern_status cu_run_step(tm_backend *be, const tm_step *st) {
    tc_ctx *tcc = tcx(be);
    cuda_backend *c = (cuda_backend *)be;
    tern_session *s = st->w;
    cu_sess *cs = s->be_state;
    bool took = false;
    /* a verify step (before the persistent kernel, which writes no rows) */
    if (ex1(st) && !st->hidden_out) return cu_exec_exact(be, st);
    if (c->persistent) { /* a single-token step of a model it runs: one launch (persist_step.c) */
        tern_status pe = tm_cuda_persist_step(tcc, &c->persist, CU_LAYOUT_T, st, &took);
        if (took) return pe;
    }
    if (st->n_seq != 1 || st->T != 1 || st->rows_out || st->hidden_out || !graphs_on(c) || !cs || cs->graph_state < 0)
        return plain(be, st);
    const size_t V = (size_t)s->m->hp.n_vocab;
    const int32_t token = st->tokens[0];
    int ran = 0;
    tern_status e;
    if (cs->graph) {
        cu_graph *cg = cs->graph;
        e = cu_status(tc_graph_run(tcc, cg->g, s->pos, token, s->logits, &ran), "graph replay");
        if (e || ran) return e;
        cu_graph_free(tcc, cg); /* stale: record again */
        cs->graph = NULL;
    }
    if (cs->graph_state == 0) { /* the first step: op by op, the caches filled outside a capture */
        cs->graph_state = 1;
        return plain(be, st);
    }
    cu_graph *cg = calloc(1, sizeof *cg);
    if (!cg) return tern_fail(TERN_ERR_NOMEM, "out of memory");
    const bool need_ptrs = s->m->hp.n_gdn_layers > 0;
    if (need_ptrs && !gdn_ptrs(c, st, cg)) {
        e = tern_fail(TERN_ERR_INTERNAL, "CUDA: GDN state table for a step graph");
    } else {
        e = cu_status(tc_graph_begin(tcc, s->pos, token, V, &cg->g), "graph capture");
        if (!e) {
            c->recording = true;
            e = cu_exec(be, st);
            c->recording = false;
            tern_status e2 = cu_status(tc_graph_end(tcc, cg->g, s->dlogits), "graph capture");
            if (e2) cg->g = NULL; /* freed by tc_graph_end */
            if (!e) e = e2;
        } else {
            cg->g = NULL;
        }
    }
    c->ptr_cur = NULL;
    if (e) {
        cu_graph_free(tcc, cg);
        tern_log(TERN_LOG_WARN, "step graphs off for this session: %s", tern_last_error());
        cs->graph_state = -1;
        tern_clear_error();
        return plain(be, st);
    }
    cs->graph = cg;
    e = cu_status(tc_graph_run(tcc, cg->g, s->pos, token, s->logits, &ran), "graph replay");
    if (e || ran) return e;
    return plain(be, st);
}

/* the kernels' cache type numbering is tern_kv_type's */
_Static_assert(TC_KV_F32 == (int)TERN_KV_F32 && TC_KV_F16 == (int)TERN_KV_F16 &&
                   TC_KV_BF16 == (int)TERN_KV_BF16 && TC_KV_Q8_0 == (int)TERN_KV_Q8_0 &&
                   TC_KV_Q8_BLOCK == TERN_KV_Q8_BLOCK,
               "TC_KV_* must match tern_kv_type");

static const char *cu_device_name(const tm_backend *be) { return tc_device_name(tcx(be)); }


static const tm_backend_vt g_cuda_vt = {
    .name = "cuda",
    .device_memory = true,
    /* verify steps: one pass, each row a decode step's bits (cu_exec_exact) */
    .caps = TM_CAP_EXACT_ROWS,
    .destroy = cu_destroy,
    .batch_hint = cu_batch_hint,
    .chunk_hint = cu_chunk_hint,
    .alloc = cu_alloc,
    .free = cu_free,
    .upload = cu_upload,
    .download = cu_download,
    .zero = cu_zero,
    .sync = cu_sync,
    .mem_available = cu_mem_available,
    .kv_types = 1u << TERN_KV_F32 | 1u << TERN_KV_F16 | 1u << TERN_KV_BF16 | 1u << TERN_KV_Q8_0, /* default f16 */
    .gdn_state_floats = cu_gdn_state_floats,
    .gdn_state_plain = cu_gdn_state_plain,
    .session_init = cu_session_init,
    .session_release = cu_session_release,
    .prepare_matrix = cu_prepare_matrix,
    .device_name = cu_device_name,
    .exec = cu_exec,
    .run_step = cu_run_step,
    .copy = cu_copy,
};

tern_status tm_backend_cuda_create(const tm_backend_params *p, tm_backend **out) {
    *out = NULL;
    int dev = p ? p->device_index : 0;
    int n = tc_device_count();
    if (n < 1) return tern_fail(TERN_ERR_UNSUPPORTED, "CUDA: no CUDA device found");
    if (dev < 0 || dev >= n) { /* name the devices there are */
        char list[1024] = "", one[300];
        for (int i = 0; i < n && i < 16; i++) {
            char nm[256];
            tc_device_describe(i, nm, sizeof nm);
            snprintf(one, sizeof one, "%scuda:%d %s", i ? ", " : "", i, nm);
            strncat(list, one, sizeof list - strlen(list) - 1);
        }
        return tern_fail(TERN_ERR_INVALID_ARG, "CUDA: device cuda:%d: this machine has %d CUDA device%s: %s", dev, n,
                         n == 1 ? "" : "s", list);
    }
    int force = TC_MM_NONE;
    if (p && p->cuda_matmul && *p->cuda_matmul && (force = tc_mm_family_of(p->cuda_matmul)) <= TC_MM_NONE)
        return tern_fail(TERN_ERR_INVALID_ARG,
                         "CUDA: cuda_matmul '%s': not a kernel family (tiled_multi, tiled, gemm, t128k, "
                         "t128, generic_sk, generic, gemm_nosplit, wgmma, mma, wgmma2)", p->cuda_matmul);
    if (p && p->cuda_prefill != TERN_CUDA_PREFILL_EXACT && p->cuda_prefill != TERN_CUDA_PREFILL_INT8)
        return tern_fail(TERN_ERR_INVALID_ARG, "CUDA: cuda_prefill %d: not a prefill mode", p->cuda_prefill);
    if (p && p->batch_invariant && p->cuda_persistent)
        return tern_fail(TERN_ERR_INVALID_ARG, "CUDA: batch_invariant and cuda_persistent together: the persistent "
                                               "kernel's products are not the batch pass's (use one of them)");
    tc_ctx *tc = NULL;
    char what[64];
    snprintf(what, sizeof what, "initialising device cuda:%d", dev);
    tern_status st = cu_status(tc_ctx_new(dev, &tc), what);
    if (st) return st;
    cuda_backend *c = calloc(1, sizeof *c);
    if (!c) {
        tc_ctx_free(tc);
        return tern_fail(TERN_ERR_NOMEM, "out of memory");
    }
    c->base.vt = &g_cuda_vt;
    c->base.ops = &g_cuda_ops;
    c->tc = tc;
    c->device = dev;
    c->graphs = !(p && p->cuda_graphs_off);
    c->persistent = p && p->cuda_persistent;
    c->gdn_bf16 = p && p->gdn_bf16;
    c->mm = (tc_mm_caps){.gemm_mode = p && p->cuda_prefill == TERN_CUDA_PREFILL_INT8 ? TC_GEMM_INT8 : TC_GEMM_EXACT,
                         .force = force};
    tc_mm_set_caps(c->tc, c->mm.gemm_mode, c->mm.force);
    c->mm.invariant = p && p->batch_invariant;
    tc_mm_set_invariant(c->tc, c->mm.invariant);
    /* embed's ids for a whole prefill chunk (workspace 1, sized up front) */
    if (tc_ctx_reserve(c->tc, 1, (size_t)cu_chunk_hint(&c->base) * sizeof(int32_t))) {
        tc_ctx_free(c->tc);
        free(c);
        return tern_fail(TERN_ERR_NOMEM, "CUDA: out of device memory for the ids workspace");
    }
    tc_set_pdl(c->tc, !(p && p->cuda_pdl_off));
    if (p && p->cuda_gdn_chunk) tc_gdn_use_chunk(c->tc, 1);
    if (p && p->cuda_profile) tc_profile_enable(c->tc, 1);
    if (force != TC_MM_NONE)
        tern_log(TERN_LOG_INFO, "CUDA: matmul family forced to %s (cuda_matmul, an A/B run)", tc_mm_name(force));
    *out = &c->base;
    return TERN_OK;
}

struct tc_ctx *tm_backend_cuda_ctx(tm_backend *be) {
    return be && be->vt == &g_cuda_vt ? ((cuda_backend *)be)->tc : NULL;
}

/* A benchmark's session stepped op by op (no step graph): launches counted, profiled. */
void tm_backend_cuda_session_no_graph(tern_session *s) {
    cu_sess *cs = s && s->m && s->m->be && s->m->be->vt == &g_cuda_vt ? s->be_state : NULL;
    if (cs) cs->graph_state = -1;
}

struct tc_persist *tm_backend_cuda_persist(tm_backend *be) {
    return be && be->vt == &g_cuda_vt ? tm_cuda_persist_obj(((cuda_backend *)be)->persist) : NULL;
}
int tm_backend_cuda_persist_token(tm_backend *be) {
    return be && be->vt == &g_cuda_vt ? tm_cuda_persist_token(((cuda_backend *)be)->persist) : -1;
}

#else

tern_status tm_backend_cuda_create(const tm_backend_params *p, tm_backend **out) {
    (void)p;
    *out = NULL;
    return tern_fail(TERN_ERR_UNSUPPORTED,
                     "CUDA: this build has no CUDA back-end (configure with nvcc available, "
                     "or -DTERN_CUDA=ON)");
}

struct tc_ctx *tm_backend_cuda_ctx(tm_backend *be) {
    (void)be;
    return NULL;
}

void tm_backend_cuda_session_no_graph(tern_session *s) { (void)s; }
struct tc_persist *tm_backend_cuda_persist(tm_backend *be) {
    (void)be;
    return NULL;
}
int tm_backend_cuda_persist_token(tm_backend *be) {
    (void)be;
    return -1;
}

#endif
