/*
 * plan.c - the step plan (plan.h): building it (the architecture's rules are in
 * plan_rules.c), resolving its matrix ids, its flat device-memory form, the fusion
 * matcher back-ends use to find runs of ops they run as one, and the generic walker
 * that runs each op through a back-end's op table (be->ops).
 */
#include "model/plan_build.h"
#include "model/session.h"

#include <stdlib.h>
#include <string.h>

tm_plan_op *tm_plan_emit(tm_plan_b *b, tm_op_kind k, int il) {
    if (b->oom) return NULL;
    if (b->n == b->cap) {
        int cap = b->cap ? b->cap * 2 : 64;
        tm_plan_op *o = realloc(b->ops, (size_t)cap * sizeof *o);
        if (!o) {
            b->oom = true;
            return NULL;
        }
        b->ops = o;
        b->cap = cap;
    }
    tm_plan_op *o = &b->ops[b->n++];
    memset(o, 0, sizeof *o);
    o->kind = (int16_t)k;
    o->layer = il;
    o->in = o->in2 = o->in3 = o->in4 = o->out = o->out2 = TM_BUF_NONE;
    for (int i = 0; i < TM_PLAN_MAX_MATS; i++) {
        o->mat[i] = TM_MAT_NONE;
        o->out_buf[i] = TM_BUF_NONE;
    }
    o->vec = TM_MAT_NONE;
    return o;
}

void tm_plan_use(tm_plan_b *b, int buf, int width) {
    if (buf >= 0 && buf < TM_BUF_COUNT && width > b->width[buf]) b->width[buf] = width;
}

static tern_status build(const tern_model *m, int act_override, tm_plan *out) {
    memset(out, 0, sizeof *out);
    tm_plan_b b = {.m = m, .act_override = act_override};
    const int E = m->hp.n_embd;
    tm_plan_op *o = tm_plan_emit(&b, TM_OP_EMBED, -1);
    if (o) {
        o->out = TM_BUF_X;
        o->mat[0] = tm_mat_make(-1, TM_ROLE_TOKEN_EMBD);
        o->n_mat = 1;
        o->width = E;
        o->had = m->embd_inverse ? E : 0;
    }
    tm_plan_use(&b, TM_BUF_X, E);
    tern_status st = tm_plan_rules_layers(&b);
    o = tm_plan_emit(&b, TM_OP_LOGITS, -1);
    if (o) {
        o->in = TM_BUF_X;
        o->in2 = TM_BUF_DELTA;
        o->out = TM_BUF_NORMED;
        o->out2 = TM_BUF_ROT;
        o->mat[0] = tm_mat_make(-1, TM_ROLE_OUTPUT);
        o->n_mat = 1;
        o->vec = tm_mat_make(-1, TM_ROLE_OUTPUT_NORM);
        o->width = E;
        o->had = E;
        o->eps = m->hp.eps;
    }
    if (!st && b.oom) st = tern_fail(TERN_ERR_NOMEM, "out of memory for the step plan");
    if (st) {
        free(b.ops);
        return st;
    }
    out->ops = b.ops;
    out->n_ops = b.n;
    memcpy(out->buf_width, b.width, sizeof out->buf_width);
    out->n_layer_ops[0] = b.layer_ops[0];
    out->n_layer_ops[1] = b.layer_ops[1];
    return TERN_OK;
}

tern_status tm_plan_build(const tern_model *m, tm_plan *out) { return build(m, -1, out); }

tern_status tm_plan_build_act(const tern_model *m, tm_act_kind act, tm_plan *out) {
    return build(m, (int)act, out);
}

void tm_plan_free(tm_plan *p) {
    if (!p) return;
    free(p->ops);
    memset(p, 0, sizeof *p);
}

size_t tm_plan_row_floats(const tm_plan *p) {
    size_t n = 0;
    for (int b = 0; b < TM_BUF_COUNT; b++) n += (size_t)p->buf_width[b];
    return n;
}

/* ------------------------------------------------------------- resolving ids */

static const tern_qmat *fast_slot(const tern_model *m, int il, tm_role_id r) {
    if (il < 0) return r == TM_ROLE_OUTPUT ? &m->fast_output : NULL;
    const tm_layer *l = &m->layers[il];
    switch (r) {
    case TM_ROLE_WQ: return &l->fast_wq;
    case TM_ROLE_WK: return &l->fast_wk;
    case TM_ROLE_WV: return &l->fast_wv;
    case TM_ROLE_WO: return &l->fast_wo;
    case TM_ROLE_WQKV: return &l->fast_wqkv;
    case TM_ROLE_WZ: return &l->fast_wz;
    case TM_ROLE_WOUT: return &l->fast_wout;
    case TM_ROLE_WGATE: return &l->fast_wgate;
    case TM_ROLE_WUP: return &l->fast_wup;
    case TM_ROLE_WDOWN: return &l->fast_wdown;
    default: return NULL;
    }
}

const tern_qmat *tm_plan_mat(const tern_model *m, tm_mat_id id, bool fast) {
    if (id < 0) return NULL;
    const int il = tm_mat_layer(id);
    const tm_role_id r = tm_mat_role(id);
    if (il >= m->hp.n_layer) return NULL;
    tern_model *mm = (tern_model *)m; /* the slot lookup does not write */
    const tern_qmat *file = tm_model_mat_slot(mm, il < 0 ? NULL : &mm->layers[il], r);
    const tern_qmat *f = fast ? fast_slot(m, il, r) : NULL;
    return f && f->data ? f : file;
}

const float *tm_plan_vec(const tern_model *m, tm_mat_id id) {
    if (id < 0) return NULL;
    const int il = tm_mat_layer(id);
    if (il >= m->hp.n_layer) return NULL;
    tern_model *mm = (tern_model *)m;
    const float **v = tm_model_vec_slot(mm, il < 0 ? NULL : &mm->layers[il], tm_mat_role(id));
    return v ? *v : NULL;
}

/* ------------------------------------------------------------- the flat form */

typedef struct flat_hdr {
    uint32_t magic, version;
    uint32_t n_ops, n_bufs;
    uint32_t op_bytes, hdr_bytes;
    int32_t layer_ops[2];
    int32_t buf_width[TM_BUF_COUNT];
} flat_hdr;

_Static_assert(sizeof(tm_plan_op) % 4 == 0, "tm_plan_op: 4-byte fields only");
#define HDR_BYTES ((sizeof(flat_hdr) + 7) / 8 * 8)

size_t tm_plan_flat_bytes(const tm_plan *p) {
    return HDR_BYTES + (size_t)p->n_ops * sizeof(tm_plan_op);
}

size_t tm_plan_flatten(const tm_plan *p, void *dst, size_t cap) {
    size_t n = tm_plan_flat_bytes(p);
    if (!dst || cap < n) return 0;
    flat_hdr h;
    memset(&h, 0, sizeof h);
    h.magic = TM_PLAN_MAGIC;
    h.version = TM_PLAN_VERSION;
    h.n_ops = (uint32_t)p->n_ops;
    h.n_bufs = TM_BUF_COUNT;
    h.op_bytes = (uint32_t)sizeof(tm_plan_op);
    h.hdr_bytes = (uint32_t)HDR_BYTES;
    h.layer_ops[0] = p->n_layer_ops[0];
    h.layer_ops[1] = p->n_layer_ops[1];
    memcpy(h.buf_width, p->buf_width, sizeof h.buf_width);
    memset(dst, 0, HDR_BYTES);
    memcpy(dst, &h, sizeof h);
    if (p->n_ops) memcpy((char *)dst + HDR_BYTES, p->ops, (size_t)p->n_ops * sizeof(tm_plan_op));
    return n;
}

tern_status tm_plan_unflatten(const void *src, size_t n, tm_plan *out) {
    memset(out, 0, sizeof *out);
    flat_hdr h;
    if (!src || n < sizeof h) return tern_fail(TERN_ERR_FORMAT, "step plan: %zu bytes, no header", n);
    memcpy(&h, src, sizeof h);
    if (h.magic != TM_PLAN_MAGIC || h.version != TM_PLAN_VERSION)
        return tern_fail(TERN_ERR_FORMAT, "step plan: magic %08x version %u (expected %08x version %u)",
                         h.magic, h.version, TM_PLAN_MAGIC, TM_PLAN_VERSION);
    if (h.n_bufs != TM_BUF_COUNT || h.op_bytes != sizeof(tm_plan_op) || h.hdr_bytes != HDR_BYTES)
        return tern_fail(TERN_ERR_FORMAT, "step plan: %u buffers, %u-byte ops (expected %d, %zu)", h.n_bufs,
                         h.op_bytes, TM_BUF_COUNT, sizeof(tm_plan_op));
    if (h.n_ops > (n - HDR_BYTES) / sizeof(tm_plan_op) || HDR_BYTES > n)
        return tern_fail(TERN_ERR_FORMAT, "step plan: %u ops in %zu bytes", h.n_ops, n);
    tm_plan_op *ops = malloc((size_t)(h.n_ops ? h.n_ops : 1) * sizeof *ops);
    if (!ops) return tern_fail(TERN_ERR_NOMEM, "out of memory");
    memcpy(ops, (const char *)src + HDR_BYTES, (size_t)h.n_ops * sizeof *ops);
    out->ops = ops;
    out->n_ops = (int)h.n_ops;
    memcpy(out->buf_width, h.buf_width, sizeof out->buf_width);
    out->n_layer_ops[0] = h.layer_ops[0];
    out->n_layer_ops[1] = h.layer_ops[1];
    return TERN_OK;
}

/* ------------------------------------------------------------- fusion matcher */

int tm_plan_match(const tm_plan *p, int i, tm_fuse f) {
    if (i < 0 || i >= p->n_ops) return 0;
    const tm_plan_op *o = &p->ops[i];
    const tm_plan_op *nx = i + 1 < p->n_ops ? &p->ops[i + 1] : NULL;
    int j = i;
    switch (f) {
    case TM_FUSE_SITE_MATMUL:
        return o->kind == TM_OP_SITE && nx && nx->kind == TM_OP_MATMUL && nx->layer == o->layer &&
                       (nx->in == o->out || nx->in == o->out2)
                   ? 2
                   : 0;
    case TM_FUSE_HAD_MATMUL:
        return o->kind == TM_OP_HADAMARD && nx && nx->kind == TM_OP_MATMUL && nx->n_mat == 1 &&
                       nx->in == o->out && nx->layer == o->layer
                   ? 2
                   : 0;
    case TM_FUSE_ACT_MATMUL:
        return o->kind == TM_OP_ACT && o->act == TM_ACT_SWIGLU && nx && nx->kind == TM_OP_MATMUL &&
                       nx->n_mat == 1 && nx->in == o->out && nx->layer == o->layer
                   ? 2
                   : 0;
    case TM_FUSE_ATTN_CORE: {
        /* [SPLIT_HEADS] HEAD_NORM(q) HEAD_NORM(k) ROPE(q) ROPE(k) KV_STORE ATTENTION
         * [MUL_SIGMOID] */
        static const int16_t core[] = {TM_OP_HEAD_NORM, TM_OP_HEAD_NORM, TM_OP_ROPE, TM_OP_ROPE,
                                       TM_OP_KV_STORE, TM_OP_ATTENTION};
        if (p->ops[j].kind == TM_OP_SPLIT_HEADS) j++;
        else if (i > 0 && p->ops[i - 1].kind == TM_OP_SPLIT_HEADS) return 0; /* mid-run */
        for (size_t k = 0; k < sizeof core / sizeof core[0]; k++, j++)
            if (j >= p->n_ops || p->ops[j].kind != core[k] || p->ops[j].layer != o->layer) return 0;
        if (p->ops[j - 1].flags & TM_OPF_GATED) {
            if (j >= p->n_ops || p->ops[j].kind != TM_OP_MUL_SIGMOID) return 0;
            j++;
        }
        return j - i;
    }
    case TM_FUSE_GDN_CORE: {
        /* MATMUL(a|b) GDN [PERMUTE] HADAMARD MATMUL(out) */
        if (o->kind != TM_OP_MATMUL || o->n_mat != 2 || !nx || nx->kind != TM_OP_GDN) return 0;
        j = i + 2;
        if (j < p->n_ops && p->ops[j].kind == TM_OP_PERMUTE) j++;
        if (tm_plan_match(p, j, TM_FUSE_HAD_MATMUL) != 2 || p->ops[j].layer != o->layer) return 0;
        return j + 2 - i;
    }
    }
    return 0;
}

/* ------------------------------------------------------------- the walker */

float *tm_step_buf(const tm_step *st, int b) {
    return b >= 0 && b < TM_BUF_COUNT ? st->w->buf[b] : NULL;
}

static inline const float *signs_of(const tern_model *m, int had) {
    return had > 0 ? tm_model_signs(m, had) : NULL;
}

/* The rows of a batch the back-end computes each as alone, for every matrix (T: all). */
static size_t exact_piece(tm_backend *be, const tern_qmat *const *w, int n, size_t T) {
    size_t piece = T;
    for (int i = 0; i < n && be->ops->matmul_exact_batch; i++) {
        size_t e = be->ops->matmul_exact_batch(be, w[i]);
        if (e && e < piece) piece = e;
    }
    return piece ? piece : 1;
}

tern_status tm_plan_run_op(tm_backend *be, const tm_step *st, const tm_plan_op *op, float *logits,
                           bool all_rows) {
    tern_session *w = st->w;
    const tern_model *m = w->m;
    const tm_hparams *hp = &m->hp;
    const tm_ops *o = be->ops;
    const size_t T = (size_t)st->T, R = (size_t)st->R, W = (size_t)op->width;
    const size_t blk = (size_t)m->had_block;
    const tm_layer *l = op->layer >= 0 ? &m->layers[op->layer] : NULL;
    float *in = tm_step_buf(st, op->in), *in2 = tm_step_buf(st, op->in2);
    float *out = tm_step_buf(st, op->out), *out2 = tm_step_buf(st, op->out2);
    switch ((tm_op_kind)op->kind) {
    case TM_OP_EMBED:
        return o->embed(be, tm_plan_mat(m, op->mat[0], false), st->tokens, T, out, blk,
                        signs_of(m, op->had));
    case TM_OP_SITE:
        o->add_rmsnorm_hadamard(be, in, in2, tm_plan_vec(m, op->vec), op->eps, out, out2, T, W, blk,
                                signs_of(m, op->had));
        return TERN_OK;
    case TM_OP_MATMUL: {
        const tern_qmat *wm[TM_PLAN_MAX_MATS];
        float *y[TM_PLAN_MAX_MATS];
        size_t ys[TM_PLAN_MAX_MATS];
        for (int i = 0; i < op->n_mat; i++) {
            wm[i] = tm_plan_mat(m, op->mat[i], true);
            y[i] = tm_step_buf(st, op->out_buf[i]);
            ys[i] = (size_t)op->out_w[i];
        }
        /* exact: in pieces each row of which the kernels compute as alone */
        const size_t piece = st->exact ? exact_piece(be, wm, op->n_mat, T) : T;
        for (size_t r = 0; r < T; r += piece) {
            const size_t c = T - r < piece ? T - r : piece;
            float *yr[TM_PLAN_MAX_MATS];
            for (int i = 0; i < op->n_mat; i++) yr[i] = y[i] + r * ys[i];
            if (op->n_mat == 1) o->matmul(be, wm[0], in + r * W, c, W, yr[0], ys[0]);
            else o->matmul_multi(be, op->n_mat, wm, in + r * W, c, W, yr, ys);
        }
        return TERN_OK;
    }
    case TM_OP_SPLIT_HEADS:
        o->split_heads(be, in, T, op->n_head, op->head_dim, out, out2);
        return TERN_OK;
    case TM_OP_HEAD_NORM:
        o->head_rmsnorm(be, in, T, W, op->n_head, op->head_dim, tm_plan_vec(m, op->vec), op->eps);
        return TERN_OK;
    case TM_OP_MUL_SIGMOID:
        o->mul_sigmoid(be, in, in2, T, W);
        return TERN_OK;
    case TM_OP_HADAMARD:
        o->hadamard(be, in, T, W, blk, signs_of(m, op->had));
        return TERN_OK;
    case TM_OP_PERMUTE:
        o->permute_tiled_grouped(be, in, out, T, op->n_head, op->n_head_kv, op->dv);
        return TERN_OK;
    case TM_OP_ACT:
        if (op->act != TM_ACT_SWIGLU)
            return tern_fail(TERN_ERR_UNSUPPORTED, "the %s back-end has no activation kind %d", be->vt->name,
                             (int)op->act);
        o->swiglu_hadamard(be, in, in2, out, T, W, blk, signs_of(m, op->had));
        return TERN_OK;
    case TM_OP_LOGITS: {
        const size_t V = (size_t)hp->n_vocab;
        const bool rot = m->hadamard;
        if (st->hidden_out) { /* embeddings: every row's output norm, no head */
            o->add_rmsnorm_hadamard(be, in, in2, tm_plan_vec(m, op->vec), op->eps, out, out2, T, W, blk,
                                    signs_of(m, op->had));
            return TERN_OK;
        }
        if (all_rows) {
            o->add_rmsnorm_hadamard(be, in, in2, tm_plan_vec(m, op->vec), op->eps, out, out2, T, W, blk,
                                    signs_of(m, op->had));
            const tern_qmat *head = tm_plan_mat(m, op->mat[0], true);
            const size_t piece = st->exact ? exact_piece(be, &head, 1, T) : T;
            for (size_t r = 0; r < T; r += piece)
                o->matmul(be, head, (rot ? out2 : out) + r * W, T - r < piece ? T - r : piece, W, logits + r * V, V);
        } else {
            const size_t lo = (T - 1) * W;
            o->add_rmsnorm_hadamard(be, in + lo, in2 + lo, tm_plan_vec(m, op->vec), op->eps, out + lo,
                                    out2 + lo, 1, W, blk, signs_of(m, op->had));
            o->matmul(be, tm_plan_mat(m, op->mat[0], true), (rot ? out2 : out) + lo, 1, W, logits, V);
        }
        return TERN_OK;
    }
    case TM_OP_ROPE:
    case TM_OP_KV_STORE:
    case TM_OP_ATTENTION:
    case TM_OP_GDN:
        break;
    case TM_OP_KIND_COUNT:
        TERN_ASSERT(!"not an op");
    }
    /* positional ops: once per sequence, rows [i*R, (i+1)*R) */
    const size_t gdn_conv = op->kind == TM_OP_GDN ? (size_t)(op->conv_k - 1) * W : 0;
    const size_t gdn_st = op->kind == TM_OP_GDN ? be->vt->gdn_state_floats(be, hp) : 0;
    for (int i = 0; i < st->n_seq; i++) {
        tern_session *s = st->ss[i];
        const size_t r0 = (size_t)i * R;
        const int pos0 = s->pos;
        if (op->kind == TM_OP_ROPE) {
            o->rope(be, in + r0 * W, R, W, op->n_head, op->head_dim, op->rope_dims, pos0, op->theta);
            continue;
        }
        if (op->kind == TM_OP_GDN) {
            const size_t VW = (size_t)op->n_head_kv * op->dv, nv = (size_t)op->n_head_kv;
            tm_gdn_args ga = {.qkv = in + r0 * W, .z = in2 + r0 * VW,
                              .a = tm_step_buf(st, op->in3) + r0 * nv, .b = tm_step_buf(st, op->in4) + r0 * nv,
                              .conv_w = l->conv, .ssm_a = l->ssm_a, .dt_bias = l->dt_bias, .norm = l->ssm_norm,
                              .conv_state = s->conv_state + (size_t)op->cache * gdn_conv,
                              .state = s->ssm_state + (size_t)op->cache * gdn_st,
                              .out = out + r0 * VW, .work = out2 + r0 * W,
                              .rows = (int)R, .n_k = op->n_head, .n_v = op->n_head_kv, .dk = op->head_dim,
                              .dv = op->dv, .conv_k = op->conv_k, .v_tiled = m->v_tiled, .eps = op->eps,
                              .walk = st->exact, .state_bf16 = m->gdn_bf16};
            o->gdn(be, &ga);
            continue;
        }
        uint8_t *kc = (uint8_t *)s->kcache + (size_t)op->cache * s->n_ctx * s->k_row;
        uint8_t *vc = (uint8_t *)s->vcache + (size_t)op->cache * s->n_ctx * s->v_row;
        if (op->kind == TM_OP_KV_STORE) {
            o->kv_store(be, kc, vc, s->k_type, s->v_type, in + r0 * W, in2 + r0 * W, W, R, pos0);
            continue;
        }
        tm_attn_args aa = {.q = in + r0 * W, .q_stride = W, .kcache = kc, .vcache = vc,
                           .k_type = s->k_type, .v_type = s->v_type, .out = out + r0 * W,
                           .rows = (int)R, .pos0 = pos0, .n_head = op->n_head, .n_head_kv = op->n_head_kv,
                           .head_dim = op->head_dim, .scale = op->scale, .scratch = s->att_scratch};
        o->attention(be, &aa);
    }
    return TERN_OK;
}

tern_status tm_plan_exec(tm_backend *be, const tm_step *st) {
    const tm_plan *p = &st->w->m->plan;
    const size_t V = (size_t)st->w->m->hp.n_vocab;
    if (st->hidden_out) { /* embeddings: the plan up to the output norm, its rows out */
        for (int i = 0; i < p->n_ops; i++) {
            tern_status e = tm_plan_run_op(be, st, &p->ops[i], NULL, true);
            if (e) return e;
        }
        const size_t E = (size_t)st->w->m->hp.n_embd;
        be->ops->copy_rows(be, st->hidden_out, E, tm_step_buf(st, TM_BUF_NORMED), E, (size_t)st->T, E);
        return TERN_OK;
    }
    const bool all = st->rows_out != NULL;
    float *logits = all ? st->rows_out : st->w->logits;
    if (!all) TERN_ASSERT(st->n_seq == 1 && st->ss[0] == st->w);
    for (int i = 0; i < p->n_ops; i++) {
        tern_status e = tm_plan_run_op(be, st, &p->ops[i], logits, all);
        if (e) return e;
    }
    if (all)
        for (int i = 0; i < st->n_seq; i++) {
            const float *last = st->rows_out + (size_t)(i + st->R - 1) * V;
            be->ops->copy_rows(be, st->ss[i]->logits, V, last, V, 1, V);
        }
    return TERN_OK;
}
