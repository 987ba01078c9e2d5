/*
 * backend_cuda.c - the CUDA back-end (backend.h): an instance on GPU 0 whose op table
 * wraps the extern "C" launchers of src/kernels/cuda (cuda.h), whose layer-sized
 * operations are layers.c's over those ops, whose head brings the logits home once per
 * step, and whose run_step records and replays single-token steps as CUDA graphs
 * (off with the model parameter cuda_graphs = false). Every pointer is device memory, except token ids. Work is queued
 * on one stream; errors are sticky in the kernels and come back from sync.
 * Without TERN_HAVE_CUDA, creating it fails with a message saying so.
 */
#include "model/session.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#if defined(TERN_HAVE_CUDA)

#include "kernels/cuda/cuda.h"

/* the back-end's CUDA context (every launcher takes it first) */
static tc_ctx *tcx(const tm_backend *be);

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
    (void)be;
    tc_mat m = to_mat(w);
    tc_matmul_multi(tcx(be), 1, &m, x, batch, xs, &y, &ys);
}

static void cu_matmul_multi(tm_backend *be, int n, const tern_qmat *const *w, const float *x,
                            size_t batch, size_t xs, float *const *y, const size_t *ys) {
    (void)be;
    tc_mat m[8];
    TERN_ASSERT(n > 0 && n <= 8);
    for (int i = 0; i < n; i++) m[i] = to_mat(w[i]);
    /* the integer path quantises the activation once for all matrices of one kind */
    tc_matmul_multi(tcx(be), n, m, x, batch, xs, y, ys);
}

static void cu_hadamard(tm_backend *be, float *x, size_t rows, size_t n, size_t block,
                        const float *signs) {
    (void)be;
    tc_hadamard(tcx(be), x, rows, n, block, signs, 0);
}

static void cu_add_rmsnorm_hadamard(tm_backend *be, float *r, const float *d, const float *gain,
                                    float eps, float *normed, float *rotated, size_t rows,
                                    size_t n, size_t block, const float *signs) {
    (void)be;
    tc_add_rmsnorm_hadamard(tcx(be), r, d, gain, eps, normed, rotated, rows, n, block, signs);
}

static void cu_swiglu_hadamard(tm_backend *be, const float *gate, const float *up, float *out,
                               size_t rows, size_t n, size_t block, const float *signs) {
    (void)be;
    tc_swiglu_hadamard(tcx(be), gate, up, out, rows, n, block, signs);
}

static tern_status cu_embed(tm_backend *be, const tern_qmat *emb, const int32_t *ids, size_t n,
                            float *out, size_t block, const float *signs) {
    (void)be;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= emb->n)
            return tern_fail(TERN_ERR_RANGE, "token id %d out of range [0, %lld)", (int)ids[i],
                             (long long)emb->n);
    tc_mat m = to_mat(emb);
    if (m.kind == TC_TERN128T) tc_embed_tiled(tcx(be), &m, ids, n, out, block, signs);
    else tc_embed(tcx(be), &m, ids, n, out, block, signs);
    return TERN_OK;
}

static void cu_head_rmsnorm(tm_backend *be, float *x, size_t rows, size_t stride, int n_heads,
                            int hd, const float *gain, float eps) {
    (void)be;
    tc_head_rmsnorm(tcx(be), x, rows, stride, n_heads, hd, gain, eps);
}

static void cu_rope(tm_backend *be, float *x, size_t rows, size_t stride, int n_heads, int hd,
                    int rot, int pos0, float theta) {
    (void)be;
    tc_rope(tcx(be), x, rows, stride, n_heads, hd, rot, pos0, theta);
}

static void cu_attention(tm_backend *be, const tm_attn_args *a) {
    (void)be;
    tc_attention(tcx(be), a->q, a->q_stride, a->kcache, a->vcache, (int)a->k_type, (int)a->v_type, a->out,
                 a->rows, a->pos0, a->n_head, a->n_head_kv, a->head_dim, a->scale);
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
    tc_gdn(tcx(be), &g);
}

static void cu_copy_rows(tm_backend *be, float *dst, size_t ds, const float *src, size_t ss,
                         size_t rows, size_t n) {
    (void)be;
    tc_copy_rows(tcx(be), dst, ds, src, ss, rows, n);
}
static void cu_split_heads(tm_backend *be, const float *src, size_t rows, int n_heads, int hd,
                           float *a, float *b) {
    (void)be;
    tc_split_heads(tcx(be), src, rows, n_heads, hd, a, b);
}
static void cu_mul_sigmoid(tm_backend *be, float *x, const float *g, size_t rows, size_t n) {
    (void)be;
    tc_mul_sigmoid(tcx(be), x, g, rows, n);
}
static void cu_permute(tm_backend *be, const float *src, float *dst, size_t rows, int n_k, int n_v,
                       int dv) {
    (void)be;
    tc_permute_tiled_grouped(tcx(be), src, dst, rows, n_k, n_v, dv);
}
/* f32, f16, bf16 and q8_0 caches (kv_types below; TC_KV_* numbering = tern_kv_type) */
static void cu_kv_store(tm_backend *be, void *kc, void *vc, tern_kv_type kt, tern_kv_type vt,
                        const float *k, const float *v, size_t kvw, size_t rows, int pos0) {
    (void)be;
    tc_kv_store(tcx(be), kc, vc, (int)kt, (int)vt, k, v, kvw, rows, pos0);
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
    /* the quantised activation of one site, shared by the matmuls reading it
     * (grow-only; sized by a step run op by op before any graph is recorded) */
    void *act_buf;
    size_t act_bytes;
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
} cuda_backend;

static tc_ctx *tcx(const tm_backend *be) { return ((const cuda_backend *)be)->tc; }

static void cu_destroy(tm_backend *be) {
    cuda_backend *c = (cuda_backend *)be;
    if (c->act_buf) tc_free(tcx(be), c->act_buf, c->act_bytes);
    if (c->ptr_dev) tc_free(tcx(be), c->ptr_dev, c->ptr_n * sizeof(float *));
    free(c->ptr_pin);
    free(c->ptr_tmp);
    if (c->attn_dev) tc_free(tcx(be), c->attn_dev, c->attn_cap * sizeof(tc_attn_seq));
    free(c->attn_host);
    tc_ctx_free(c->tc);
    free(be);
}
/* One pass reads the weights once for all its rows (docs/performance.md, H200). */
static int cu_batch_hint(const tm_backend *be) {
    (void)be;
    return 16;
}
/* Prefill chunks of 512 rows: the tensor-core GEMM reads each weight once per chunk
 * (at 64 rows it is weight-bound: docs/performance.md, H200 prefill profile). */
static int cu_chunk_hint(const tm_backend *be) {
    (void)be;
    return 512;
}
static void *cu_alloc(tm_backend *be, size_t n) {
    (void)be;
    return tc_malloc(tcx(be), n);
}
static void cu_free(tm_backend *be, void *p, size_t n) {
    (void)be;
    tc_free(tcx(be), p, n);
}
static tern_status cu_upload(tm_backend *be, void *dst, const void *src, size_t n) {
    (void)be;
    return cu_status(tc_upload(tcx(be), dst, src, n), "upload");
}
static tern_status cu_download(tm_backend *be, void *dst, const void *src, size_t n) {
    (void)be;
    return cu_status(tc_download(tcx(be), dst, src, n), "download");
}
static tern_status cu_zero(tm_backend *be, void *p, size_t n) {
    (void)be;
    return cu_status(tc_zero(tcx(be), p, n), "memset");
}
static uint64_t cu_mem_available(const tm_backend *be) {
    (void)be;
    return tc_mem_free(tcx(be));
}
static tern_status cu_sync(tm_backend *be) {
    (void)be;
    return cu_status(tc_sync(tcx(be)), "forward pass");
}
/* the state is kept fully applied: nothing beside S */
static size_t cu_gdn_state_floats(const tm_backend *be, const tm_hparams *hp) {
    (void)be;
    return (size_t)hp->ssm_n_v * hp->ssm_dk * hp->ssm_dv;
}
/* A session's step graph and the device table of GDN state pointers it reads. */
typedef struct cu_graph {
    tc_graph *g;
    float **ptrs; /* device, ptr_bytes (NULL: no GDN layers) */
    size_t ptr_bytes;
} cu_graph;

static void cu_graph_free(tc_ctx *tc, cu_graph *cg) {
    if (!cg) return;
    if (cg->g) tc_graph_free(cg->g);
    if (cg->ptrs) tc_free(tc, cg->ptrs, cg->ptr_bytes);
    free(cg);
}

static void cu_session_release(tm_backend *be, tern_session *s) {
    (void)be;
    cu_graph_free(tcx(be), s->graph);
    s->graph = NULL;
}

/* Weights: a 128-group ternary matrix is repacked on the device into the decode GEMV's
 * tiled layout (tc_repack_tiled: 16-row strips in mma fragment order; same bytes) and the
 * uploaded copy freed, as the matmul chooser says (tc_mm_repack_tiled: not when a
 * file-layout family is forced for an A/B run). */
static tern_status cu_prepare_matrix(tm_backend *be, tern_qmat *w, size_t *bytes) {
    cuda_backend *c = (cuda_backend *)be;
    if (w->layout != TERN_LAYOUT_ROWS) return TERN_OK;
    const int kind = kind_of(w->type);
    /* the matmul's quantised activation for a whole prefill chunk, sized now (workspace
     * 0 then does not move under a recorded step graph) */
    if (kind == TC_TERN128 && w->k % 128 == 0 &&
        tc_ctx_reserve(c->tc, 0, tc_act_bytes((size_t)cu_chunk_hint(be), w->k)))
        return tern_fail(TERN_ERR_NOMEM, "CUDA: out of device memory for the activation workspace");
    if (!tc_mm_repack_tiled(kind, w->n, w->k, &c->mm)) return TERN_OK;
    tc_mat src = to_mat(w), dst;
    int e = tc_repack_tiled(tcx(be), &src, &dst);
    if (e == TC_ERR_UNSUPPORTED) return TERN_OK;
    if (e) return cu_status(e, "repacking a matrix on the device");
    tc_free(tcx(be), (void *)w->data, *bytes);
    *bytes = tc_tiled_bytes(w->n, w->k);
    w->data = dst.data;
    w->row_bytes = dst.row_bytes;
    w->layout = CU_LAYOUT_T;
    return TERN_OK;
}

/* ---------------------------------------------------- layer-sized operations */

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

/* The activation view for rows x k (NULL: no room yet, or k not in 128-blocks). Grows
 * only outside a recording. */
static const tc_act *act_for(cuda_backend *c, size_t rows, int64_t k, tc_act *view) {
    if (k % 128) return NULL;
    size_t need = tc_act_bytes(rows, k);
    if (need > c->act_bytes) {
        if (c->recording) return NULL;
        if (c->act_buf) tc_free(c->tc, c->act_buf, c->act_bytes);
        tc_graphs_invalidate(c->tc); /* recorded graphs hold the old address */
        c->act_buf = tc_malloc(c->tc, need);
        c->act_bytes = c->act_buf ? need : 0;
        if (!c->act_buf) return NULL;
    }
    *view = tc_act_view(c->act_buf, rows, k);
    return view;
}

static inline float *mm_in(const tern_model *m, tern_session *w) {
    return m->hadamard ? w->rot : w->normed;
}
static inline const tern_qmat *pickw(const tern_qmat *file, const tern_qmat *fast, bool d) {
    return d && fast->data ? fast : file;
}

/* site norm (+ transform) with the matmul input quantised inside the kernel */
static const tc_act *cu_site(cuda_backend *c, const tm_step *st, const float *gain, bool first,
                             tc_act *view) {
    tern_session *w = st->w;
    const tern_model *m = w->m;
    const size_t E = (size_t)m->hp.n_embd;
    const tc_act *act = act_for(c, (size_t)st->T, (int64_t)E, view);
    tc_add_rmsnorm_hadamard_q(c->tc, w->x, first ? NULL : w->delta, gain, m->hp.eps, w->normed, w->rot,
                              (size_t)st->T, E, (size_t)m->had_block, tm_model_signs(m, (int64_t)E),
                              act);
    return act;
}

static void mm(cuda_backend *c, int n, const tern_qmat *const *w, const tc_act *act, const float *x, size_t batch,
               size_t xs, float *const *y, const size_t *ys) {
    tc_mat mt[8];
    for (int i = 0; i < n; i++) mt[i] = to_mat(w[i]);
    if (act && all_int(n, w)) tc_matmul_multi_q(c->tc, n, mt, act, x, xs, y, ys);
    else tc_matmul_multi(c->tc, n, mt, x, batch, xs, y, ys);
}

static void attn_ops(const tm_step *st, const tm_layer *l);

static void cu_attn_mixer(tm_backend *be, const tm_step *st, const tm_layer *l) {
    cuda_backend *c = (cuda_backend *)be;
    tern_session *w = st->w;
    const tern_model *m = w->m;
    const tm_hparams *hp = &m->hp;
    const int E = hp->n_embd, HD = hp->head_dim, NH = hp->n_head, NKV = hp->n_head_kv;
    const int T = st->T, R = st->R, qw = NH * HD, kvw = NKV * HD;
    const bool dec = st->dec;
    tc_act view;
    const tc_act *act = cu_site(c, st, l->attn_norm, l == &m->layers[0], &view);
    const tern_qmat *w3[3] = {pickw(&l->wq, &l->fast_wq, dec), pickw(&l->wk, &l->fast_wk, dec),
                              pickw(&l->wv, &l->fast_wv, dec)};
    float *y3[3] = {w->big0, w->kbuf, w->vbuf};
    size_t ys3[3] = {(size_t)l->wq.n, (size_t)kvw, (size_t)kvw};
    mm(c, 3, w3, act, mm_in(m, w), (size_t)T, (size_t)E, y3, ys3);
    const bool dec_ops = R == 1 && HD <= 256 && hp->rope_dims <= HD && hp->rope_dims % 2 == 0;
    if (dec_ops && c->attn_cur) {
        /* a batch step (attn_tab took it): the same two ops for
         * all the sessions at once, positions and caches from the step's table */
        tern_session *s0 = st->ss[0];
        tc_attn_bat bt = {.seqs = c->attn_cur, .kv_index = l->kv_index, .k_row = s0->k_row, .v_row = s0->v_row,
                          .qg_stride = (size_t)l->wq.n, .kv_stride = (size_t)kvw, .q_stride = (size_t)qw};
        tc_attn_prep_args pa = {.qg = w->big0, .k = w->kbuf, .v = w->vbuf, .gated = hp->attn_gate,
                                .q_norm = l->q_norm, .k_norm = l->k_norm, .eps = hp->eps,
                                .theta = hp->rope_theta, .q_out = w->big1,
                                .gate_out = hp->attn_gate ? w->big2 : NULL, .n_head = NH, .n_head_kv = NKV,
                                .head_dim = HD, .rope_dims = hp->rope_dims, .k_type = (int)s0->k_type,
                                .v_type = (int)s0->v_type};
        tc_attn_prep_batch(tcx(be), &pa, st->n_seq, &bt);
        tc_attention_decode_batch(tcx(be), w->big1, (int)s0->k_type, (int)s0->v_type, hp->attn_gate ? w->big2 : NULL,
                                  w->big3, st->n_seq, &bt, c->attn_max_ctx, NH, NKV, HD, 1.0f / sqrtf((float)HD));
    } else if (dec_ops) {
        /* decode: per session the fused prologue (split, q/k norms, RoPE, KV store),
         * then split-K attention with the gate in its merge */
        for (int i = 0; i < st->n_seq; i++) {
            tern_session *s = st->ss[i];
            uint8_t *kc = (uint8_t *)s->kcache + (size_t)l->kv_index * s->n_ctx * s->k_row;
            uint8_t *vc = (uint8_t *)s->vcache + (size_t)l->kv_index * s->n_ctx * s->v_row;
            float *qi = w->big1 + (size_t)i * qw, *gi = hp->attn_gate ? w->big2 + (size_t)i * qw : NULL;
            tc_attn_prep_args pa = {.qg = w->big0 + (size_t)i * l->wq.n, .k = w->kbuf + (size_t)i * kvw,
                                    .v = w->vbuf + (size_t)i * kvw, .gated = hp->attn_gate,
                                    .q_norm = l->q_norm, .k_norm = l->k_norm, .eps = hp->eps,
                                    .theta = hp->rope_theta, .q_out = qi, .gate_out = gi,
                                    .kcache = kc, .vcache = vc, .pos0 = s->pos, .n_head = NH,
                                    .n_head_kv = NKV, .head_dim = HD, .rope_dims = hp->rope_dims,
                                    .k_type = (int)s->k_type, .v_type = (int)s->v_type};
            tc_attn_prep(tcx(be), &pa);
            tc_attention_decode(tcx(be), qi, kc, vc, (int)s->k_type, (int)s->v_type, gi, w->big3 + (size_t)i * qw, s->pos, s->n_ctx, NH, NKV,
                                HD, 1.0f / sqrtf((float)HD));
        }
    } else {
        attn_ops(st, l);
    }
    /* the transform quantises o_proj's input in its kernel (no quantise launch in mm) */
    const tern_qmat *wo = pickw(&l->wo, &l->fast_wo, dec);
    tc_act oview;
    const tc_act *oact = all_int(1, &wo) ? act_for(c, (size_t)T, (int64_t)qw, &oview) : NULL;
    tc_hadamard_q(tcx(be), w->big3, (size_t)T, (size_t)qw, (size_t)m->had_block, tm_model_signs(m, qw), oact);
    float *yo[1] = {w->delta};
    size_t yso[1] = {(size_t)E};
    mm(c, 1, &wo, oact, w->big3, (size_t)T, (size_t)qw, yo, yso);
}

/* the attention mixer's middle op by op (prefill chunks; decode shapes the fused
 * prologue does not take) */
static void attn_ops(const tm_step *st, const tm_layer *l) {
    tern_session *w = st->w;
    const tern_model *m = w->m;
    const tm_hparams *hp = &m->hp;
    const int HD = hp->head_dim, NH = hp->n_head, NKV = hp->n_head_kv;
    const int T = st->T, R = st->R, qw = NH * HD, kvw = NKV * HD;
    float *q = w->big0, *gate = NULL;
    if (hp->attn_gate) {
        tc_split_heads(tcx(st->w->m->be), w->big0, (size_t)T, NH, HD, w->big1, w->big2);
        q = w->big1;
        gate = w->big2;
    }
    tc_head_rmsnorm(tcx(st->w->m->be), q, (size_t)T, (size_t)qw, NH, HD, l->q_norm, hp->eps);
    tc_head_rmsnorm(tcx(st->w->m->be), w->kbuf, (size_t)T, (size_t)kvw, NKV, HD, l->k_norm, hp->eps);
    bool gated = false;
    for (int i = 0; i < st->n_seq; i++) {
        tern_session *s = st->ss[i];
        const int pos0 = s->pos;
        float *qi = q + (size_t)i * qw, *ki = w->kbuf + (size_t)i * kvw, *vi = w->vbuf + (size_t)i * kvw;
        tc_rope(tcx(st->w->m->be), qi, (size_t)R, (size_t)qw, NH, HD, hp->rope_dims, pos0, hp->rope_theta);
        tc_rope(tcx(st->w->m->be), ki, (size_t)R, (size_t)kvw, NKV, HD, hp->rope_dims, pos0, hp->rope_theta);
        uint8_t *kc = (uint8_t *)s->kcache + (size_t)l->kv_index * s->n_ctx * s->k_row;
        uint8_t *vc = (uint8_t *)s->vcache + (size_t)l->kv_index * s->n_ctx * s->v_row;
        const int kt = (int)s->k_type, vt = (int)s->v_type;
        tc_kv_store(tcx(st->w->m->be), kc, vc, kt, vt, ki, vi, (size_t)kvw, (size_t)R, pos0);
        float *oi = w->big3 + (size_t)i * qw;
        if (R == 1) { /* split-K decode attention, the gate fused; grid fixed by n_ctx */
            tc_attention_decode(tcx(st->w->m->be), qi, kc, vc, kt, vt, gate ? gate + (size_t)i * qw : NULL, oi, pos0, s->n_ctx,
                                NH, NKV, HD, 1.0f / sqrtf((float)HD));
            gated = true;
        } else {
            tc_attention(tcx(st->w->m->be), qi, (size_t)qw, kc, vc, kt, vt, oi, R, pos0, NH, NKV, HD, 1.0f / sqrtf((float)HD));
        }
    }
    if (gate && !gated) tc_mul_sigmoid(tcx(st->w->m->be), w->big3, gate, (size_t)T, (size_t)qw);
}

/* The GDN state pointers of a step's sessions, [n_gdn][2][n], as a device table for
 * the fused step kernels (c->ptr_cur; NULL when the step does not use them). For a
 * step run op by op it is c->ptr_dev, allocated once for CU_MAX_SEQ sessions and
 * uploaded (synchronously, outside any recording) only when the sessions differ
 * from the last upload's; for a recorded graph, *own (allocated here, uploaded once,
 * freed with the graph): its address is what the graph keeps. */
#define CU_MAX_SEQ 64
static bool gdn_ptrs(cuda_backend *c, const tm_step *st, cu_graph *own) {
    const tern_model *m = st->w->m;
    const tm_hparams *hp = &m->hp;
    c->ptr_cur = NULL;
    if (!hp->n_gdn_layers || st->R != 1 || st->n_seq > CU_MAX_SEQ) return false;
    size_t n = (size_t)st->n_seq, L = (size_t)hp->n_gdn_layers, need = L * 2 * n;
    if (!c->ptr_dev) {
        size_t cap = L * 2 * CU_MAX_SEQ;
        c->ptr_dev = tc_malloc(c->tc, cap * sizeof(float *));
        c->ptr_pin = malloc(cap * sizeof(float *));
        c->ptr_tmp = malloc(cap * sizeof(float *));
        if (!c->ptr_dev || !c->ptr_pin || !c->ptr_tmp) {
            if (c->ptr_dev) tc_free(c->tc, c->ptr_dev, cap * sizeof(float *));
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
    const size_t conv_n = (size_t)(hp->conv_k - 1) * C, st_n = (size_t)hp->ssm_n_v * hp->ssm_dk * hp->ssm_dv;
    float **t = c->ptr_tmp;
    for (size_t g = 0; g < L; g++)
        for (size_t i = 0; i < n; i++) {
            t[(g * 2 + 0) * n + i] = st->ss[i]->conv_state + g * conv_n;
            t[(g * 2 + 1) * n + i] = st->ss[i]->ssm_state + g * st_n;
        }
    const size_t bytes = need * sizeof(float *);
    if (own) {
        own->ptrs = tc_malloc(c->tc, bytes);
        if (!own->ptrs) return false;
        own->ptr_bytes = bytes;
        if (tc_upload(c->tc, own->ptrs, t, bytes)) return false;
        c->ptr_cur = own->ptrs;
        return true;
    }
    if (c->ptr_used != need || memcmp(c->ptr_pin, t, bytes)) {
        c->ptr_used = 0;
        if (tc_upload(c->tc, c->ptr_dev, t, bytes)) return false;
        memcpy(c->ptr_pin, t, bytes);
        c->ptr_used = need;
    }
    c->ptr_cur = c->ptr_dev;
    return true;
}

static void cu_gdn_mixer(tm_backend *be, const tm_step *st, const tm_layer *l) {
    cuda_backend *c = (cuda_backend *)be;
    const tern_model *m = st->w->m;
    const tm_hparams *hp = &m->hp;
    if (st->R != 1 || hp->ssm_dk > 128 || hp->ssm_dv > 256 || !c->ptr_cur) {
        tm_layers_gdn_mixer(be, st, l);
        return;
    }
    tern_session *w = st->w;
    const int E = hp->n_embd, T = st->T;
    const bool dec = st->dec;
    const int nk = hp->ssm_n_k, nv = hp->ssm_n_v, dk = hp->ssm_dk, dv = hp->ssm_dv;
    const int C = 2 * nk * dk + nv * dv, VW = nv * dv;
    tc_act view;
    const tc_act *act = cu_site(c, st, l->attn_norm, l == &m->layers[0], &view);
    const tern_qmat *w2[2] = {pickw(&l->wqkv, &l->fast_wqkv, dec), pickw(&l->wz, &l->fast_wz, dec)};
    float *y2[2] = {w->big0, w->big1};
    size_t ys2[2] = {(size_t)C, (size_t)VW};
    mm(c, 2, w2, act, mm_in(m, w), (size_t)T, (size_t)E, y2, ys2);
    float *a = w->ab, *b = w->ab + (size_t)T * nv;
    const tern_qmat *wab[2] = {&l->wa, &l->wb};
    /* dense a/b gates (f32/f16/bf16): projected inside the step's kernel (ab_w below);
     * otherwise by the matmul here */
    const bool ab_dense = dense_rows(&l->wa) && dense_rows(&l->wb);
    if (!ab_dense) {
        float *yab[2] = {a, b};
        size_t ysab[2] = {(size_t)nv, (size_t)nv};
        mm(c, 2, wab, NULL, w->normed, (size_t)T, (size_t)E, yab, ysab);
    }
    const size_t n = (size_t)st->n_seq, g = (size_t)l->gdn_index;
    /* the output's permute, transform and quantisation in the step's second kernel */
    tc_act oview;
    const tc_act *oact = act_for(c, (size_t)T, (int64_t)VW, &oview);
    tc_gdn_step_args ga = {.n = (int)n, .qkv = w->big0, .z = w->big1, .a = a, .b = b,
                           .qkv_stride = (size_t)C, .z_stride = (size_t)VW, .ab_stride = (size_t)nv,
                           .out_stride = (size_t)VW, .conv_w = l->conv, .ssm_a = l->ssm_a,
                           .dt_bias = l->dt_bias, .norm = l->ssm_norm,
                           .conv_state = c->ptr_cur + (g * 2 + 0) * n,
                           .state = c->ptr_cur + (g * 2 + 1) * n, .out = w->big3, .work = w->big2,
                           .n_k = nk, .n_v = nv, .dk = dk, .dv = dv, .conv_k = hp->conv_k,
                           .v_tiled = m->v_tiled, .eps = hp->eps, .out_grouped = m->out_permute,
                           .signs = tm_model_signs(m, VW), .block = m->had_block};
    if (oact) ga.act = *oact;
    if (ab_dense) {
        ga.ab_w[0] = to_mat(&l->wa);
        ga.ab_w[1] = to_mat(&l->wb);
        ga.ab_x = w->normed;
        ga.ab_x_stride = (size_t)E;
    }
    tc_gdn_step(tcx(be), &ga);
    const tern_qmat *wo = pickw(&l->wout, &l->fast_wout, dec);
    float *yo[1] = {w->delta};
    size_t yso[1] = {(size_t)E};
    mm(c, 1, &wo, oact, w->big3, (size_t)T, (size_t)VW, yo, yso);
}

static void cu_ffn(tm_backend *be, const tm_step *st, const tm_layer *l) {
    cuda_backend *c = (cuda_backend *)be;
    tern_session *w = st->w;
    const tern_model *m = w->m;
    const int E = m->hp.n_embd, F = m->hp.n_ff, T = st->T;
    const bool dec = st->dec;
    tc_act view;
    const tc_act *act = cu_site(c, st, l->post_norm, false, &view);
    const tern_qmat *wgu[2] = {pickw(&l->wgate, &l->fast_wgate, dec), pickw(&l->wup, &l->fast_wup, dec)};
    float *ygu[2] = {w->big0, w->big1};
    size_t ysgu[2] = {(size_t)F, (size_t)F};
    mm(c, 2, wgu, act, mm_in(m, w), (size_t)T, (size_t)E, ygu, ysgu);
    const tern_qmat *wd = pickw(&l->wdown, &l->fast_wdown, dec);
    tc_act view2;
    const tc_act *act2 = (wd->layout == CU_LAYOUT_T) ? act_for(c, (size_t)T, F, &view2) : NULL;
    tc_swiglu_hadamard_q(tcx(be), w->big0, w->big1, w->big2, (size_t)T, (size_t)F, (size_t)m->had_block,
                         tm_model_signs(m, F), act2);
    float *yd[1] = {w->delta};
    size_t ysd[1] = {(size_t)E};
    mm(c, 1, &wd, act2, w->big2, (size_t)T, (size_t)F, yd, ysd);
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

/* Step graphs are on unless the model parameter cuda_graphs is false (they passed
 * parity on the H200). */
static bool graphs_on(const cuda_backend *c) { return c->graphs; }

/* The step's attention table (c->attn_cur) for a batch step run op by op, when
 * the batched kernels take the shape (the default since 2026-12-03), and the sessions can
 * share them (same cache types and rows, 16-byte aligned caches and layer strides for
 * the unquantised types); else attn_cur stays NULL and attention runs per session.
 * Decided once per step; uploaded synchronously. */
static void attn_tab(cuda_backend *c, const tm_step *st) {
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
    if (!tc_attention_decode_batch_ok(c->tc, (int)s0->k_type, (int)s0->v_type, max_ctx, hp->n_head, hp->n_head_kv,
                                      hp->head_dim))
        return;
    if ((size_t)st->n_seq > c->attn_cap) {
        if (c->attn_dev) tc_free(c->tc, c->attn_dev, c->attn_cap * sizeof(tc_attn_seq));
        free(c->attn_host);
        c->attn_cap = 0;
        c->attn_dev = tc_malloc(c->tc, (size_t)st->n_seq * sizeof(tc_attn_seq));
        c->attn_host = malloc((size_t)st->n_seq * sizeof(tc_attn_seq));
        if (!c->attn_dev || !c->attn_host) {
            if (c->attn_dev) tc_free(c->tc, c->attn_dev, (size_t)st->n_seq * sizeof(tc_attn_seq));
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
    if (tc_upload(c->tc, c->attn_dev, c->attn_host, (size_t)st->n_seq * sizeof(tc_attn_seq))) return;
    c->attn_cur = c->attn_dev;
    c->attn_max_ctx = max_ctx;
}

static tern_status plain(tm_backend *be, const tm_step *st, tm_layers_fn layers) {
    cuda_backend *c = (cuda_backend *)be;
    gdn_ptrs(c, st, NULL);
    attn_tab(c, st);
    tern_status s = layers(be, st);
    c->ptr_cur = NULL;
    c->attn_cur = NULL;
    tern_status ss = tm_be_sync(be);
    return s ? s : ss;
}

/* Single-token steps of a session (unless cuda_graphs is false): the first runs op by op (it
 * sizes the workspaces), the second is recorded into a graph (position and token read
 * from device words the graph fills; the GDN state pointers from the graph's own
 * table), every later one replays it with no host-to-device copy; a stale graph is
 * recorded again; a failure to record turns graphs off for the session. */
static tern_status cu_run_step(tm_backend *be, const tm_step *st, tm_layers_fn layers) {
    cuda_backend *c = (cuda_backend *)be;
    tern_session *s = st->w;
    if (st->n_seq != 1 || st->T != 1 || st->rows_out || !graphs_on(c) || s->graph_state < 0)
        return plain(be, st, layers);
    const size_t V = (size_t)s->m->hp.n_vocab;
    const int32_t token = st->tokens[0];
    int ran = 0;
    tern_status e;
    if (s->graph) {
        cu_graph *cg = s->graph;
        e = cu_status(tc_graph_run(tcx(be), cg->g, s->pos, token, s->logits, &ran), "graph replay");
        if (e || ran) return e;
        cu_graph_free(tcx(be), cg); /* stale: record again */
        s->graph = NULL;
    } else if (s->graph_state == 0) {
        s->graph_state = 1;
        return plain(be, st, layers);
    }
    cu_graph *cg = calloc(1, sizeof *cg);
    if (!cg) return tern_fail(TERN_ERR_NOMEM, "out of memory");
    const bool need_ptrs = s->m->hp.n_gdn_layers > 0;
    if (need_ptrs && !gdn_ptrs(c, st, cg)) {
        e = tern_fail(TERN_ERR_INTERNAL, "CUDA: GDN state table for a step graph");
    } else {
        e = cu_status(tc_graph_begin(tcx(be), s->pos, token, V, &cg->g), "graph capture");
        if (!e) {
            c->recording = true;
            e = layers(be, st);
            c->recording = false;
            tern_status e2 = cu_status(tc_graph_end(tcx(be), cg->g, s->dlogits), "graph capture");
            if (e2) cg->g = NULL; /* freed by tc_graph_end */
            if (!e) e = e2;
        } else {
            cg->g = NULL;
        }
    }
    c->ptr_cur = NULL;
    if (e) {
        cu_graph_free(tcx(be), cg);
        tern_log(TERN_LOG_WARN, "step graphs off for this session: %s", tern_last_error());
        tern_clear_error();
        s->graph_state = -1;
        return plain(be, st, layers);
    }
    s->graph = cg;
    e = cu_status(tc_graph_run(tcx(be), cg->g, s->pos, token, s->logits, &ran), "graph replay");
    if (e || ran) return e;
    return plain(be, st, layers);
}

/* the kernels' cache type numbering is tern_kv_type's */
_Static_assert(TC_KV_F32 == (int)TERN_KV_F32 && TC_KV_F16 == (int)TERN_KV_F16 &&
                   TC_KV_BF16 == (int)TERN_KV_BF16 && TC_KV_Q8_0 == (int)TERN_KV_Q8_0 &&
                   TC_KV_Q8_BLOCK == TERN_KV_Q8_BLOCK,
               "TC_KV_* must match tern_kv_type");

static const tm_backend_vt g_cuda_vt = {
    .name = "cuda",
    .device_memory = true,
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
    .session_release = cu_session_release,
    .prepare_matrix = cu_prepare_matrix,
    .embed = tm_layers_embed,
    .attn_mixer = cu_attn_mixer,
    .gdn_mixer = cu_gdn_mixer,
    .ffn = cu_ffn,
    .head = cu_head,
    .run_step = cu_run_step,
};

bool tm_backend_cuda_present(const char **what) {
    static _Thread_local char name[256];
    if (tc_device_count() < 1) {
        if (what) *what = "no CUDA device";
        return false;
    }
    if (what) *what = tc_device_describe(0, name, sizeof name) == 0 ? name : "CUDA device not usable";
    return true;
}

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
                         "t128, generic_sk, generic)", p->cuda_matmul);
    if (p && p->cuda_prefill != TERN_CUDA_PREFILL_EXACT && p->cuda_prefill != TERN_CUDA_PREFILL_INT8)
        return tern_fail(TERN_ERR_INVALID_ARG, "CUDA: cuda_prefill %d: not a prefill mode", p->cuda_prefill);
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
    c->mm = (tc_mm_caps){.gemm_mode = p && p->cuda_prefill == TERN_CUDA_PREFILL_INT8 ? TC_GEMM_INT8 : TC_GEMM_EXACT,
                         .force = force};
    tc_mm_set_caps(c->tc, c->mm.gemm_mode, c->mm.force);
    /* embed's ids for a whole prefill chunk (workspace 1, sized up front) */
    if (tc_ctx_reserve(c->tc, 1, (size_t)cu_chunk_hint(&c->base) * sizeof(int32_t))) {
        tc_ctx_free(c->tc);
        free(c);
        return tern_fail(TERN_ERR_NOMEM, "CUDA: out of device memory for the ids workspace");
    }
    tc_set_pdl(c->tc, !(p && p->cuda_pdl_off));
    if (p && p->cuda_profile) tc_profile_enable(c->tc, 1);
    if (force != TC_MM_NONE)
        tern_log(TERN_LOG_INFO, "CUDA: matmul family forced to %s (cuda_matmul, an A/B run)", tc_mm_name(force));
    *out = &c->base;
    return TERN_OK;
}

const char *tm_backend_cuda_device(void) {
    static _Thread_local char name[256];
    return tc_device_describe(0, name, sizeof name) == 0 ? name : "";
}

struct tc_ctx *tm_backend_cuda_ctx(tm_backend *be) {
    return be && be->vt == &g_cuda_vt ? ((cuda_backend *)be)->tc : NULL;
}

double tern_device_read_ceiling_gbps(const char *device, size_t bytes, int passes) {
    if (device && !strcmp(device, "cpu")) return tern_linear_pool_read_ceiling_gbps(bytes, passes);
    if (!device || strncmp(device, "cuda", 4) || tc_device_count() < 1) return 0;
    int dev = device[4] == ':' ? atoi(device + 5) : 0;
    tc_ctx *tc = NULL;
    if (tc_ctx_new(dev, &tc)) return 0;
    double g = tc_read_ceiling_gbps(tc, bytes, passes);
    tc_ctx_free(tc);
    return g;
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

struct tc_ctx *tm_backend_cuda_ctx(tm_backend *be) {
    (void)be;
    return NULL;
}

double tern_device_read_ceiling_gbps(const char *device, size_t bytes, int passes) {
    if (device && !strcmp(device, "cpu")) return tern_linear_pool_read_ceiling_gbps(bytes, passes);
    return 0;
}

#endif
