/*
 * backend_tp.c - tensor parallel as a back-end (backend.h): an instance that owns N
 * child back-ends ("shards"), each with its own slice of the weights (a shard model)
 * and its own slice of every session's caches and states (shard sessions), and runs
 * each layer-sized operation as N shard operations followed by one all-reduce of the
 * residual update (comm.h). It executes the model's plan (plan.h): op i of the plan is
 * op i of each shard model's plan (the same rules over the shard's local widths), run
 * through the generic walker on the shard's op table; after every matmul into the
 * residual update the shards' partial sums are all-reduced.
 * docs/multi-gpu.md has the plan; this is its CPU simulation (`--tp N --device cpu`).
 *
 * Partition (shard r of N):
 *   attention  q heads [r*NH/N, ..) with their kv heads: kv heads split N ways when
 *              N <= n_kv, else each kv head is replicated on the N/n_kv shards whose q
 *              heads read it (k/v projections computed twice; the KV cache per shard is
 *              its one kv head). Rows of wq (per head [q | gate] when gated), wk, wv;
 *              the columns of wo those heads feed.
 *   GDN        key heads [r*n_k/N, ..) and the value heads that read them (tiled or
 *              grouped order, kept in the shard's own order of the same kind): rows of
 *              attn_qkv (q, k of its key heads, v of its value heads), conv channels,
 *              z, alpha/beta, ssm_a, dt_bias; the columns of ssm_out they feed.
 *   FFN        intermediate channels in units of 128, as evenly as they go: rows of
 *              gate/up, columns of down.
 *   head       vocabulary rows [r*V/N, ..) of output.weight (a copy; also when tied),
 *              the logits gathered by columns on the host.
 *   replicated embedding (a gather), every norm, the residual stream.
 * All-reduces: after each mixer's output projection and after down (two per layer):
 * every shard's delta (T x n_embd) := the sum over shards, so each shard's copy of the
 * residual stays the same bits (the CPU communicator sums in rank order).
 *
 * K-split sites and the Hadamard blocks. A column slice of o_proj / ssm_out / down is
 * exact only if its activation slice can be transformed alone, i.e. the slice sits on
 * Hadamard block boundaries (and on the 128-weight blocks). When it does not (qwen35
 * 27B at N = 4: 1536-wide slices of 1024-wide blocks), the shard takes the hull of the
 * blocks its slice touches: it writes its activation into a zeroed hull-wide row,
 * transforms that, and multiplies by the hull's columns. By linearity
 * sum_r W[:,hull_r] H(pad_r(o_r)) = W H(sum_r pad(o_r)) = W H(o): exact, at the cost of
 * the extra columns. The shard's op table (the sh_* wrappers below) does this around
 * the plan's HADAMARD/ACT + MATMUL pairs, and resolves each Hadamard site
 * by the op that names it (embed and norms: n_embd; hadamard: the mixer output;
 * swiglu_hadamard: the FFN), never by width, since local widths may collide.
 *
 * Limits: children must be host-memory back-ends today ("cpu"); the CUDA back-end
 * keeps one stream and one workspace per process, so N instances cannot coexist yet
 * (the NCCL communicator, comm_nccl.c, is ready for when they can). The shards run one
 * after the other here (a simulation of the partition, not a speed-up).
 */
#include "backends/backends.h"
#include "backends/tp/comm.h"
#include "model/loader.h"
#include "model/session.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#define TP_MAX 64

typedef struct tp_backend tp_backend;

/* A K-split site of one shard: the owned columns [own0, own0+own) of a K-wide
 * activation, and the hull [hull0, hull0+hull) the shard's matrix covers. */
typedef struct tp_site {
    int K;
    int own0, own;
    int hull0, hull;
    bool pad;            /* hull != owned: pad into a zeroed hull row first */
    const float *signs;  /* hull's sign slice (child memory), NULL: no transform */
    size_t signs_n;      /* floats allocated for signs in child memory (0: not owned) */
} tp_site;

typedef struct tp_shard {
    tm_backend base;     /* what the plan walker sees: vt g_shard_vt, ops g_shard_ops */
    tp_backend *tp;
    int rank;
    tm_backend *child;   /* the shard's back-end (sm->be) */
    tern_model *sm;      /* the shard model */
    tp_site att, gdn, ffn;
    const float *signs_e; /* n_embd signs in child memory (NULL: none) */
    size_t signs_e_n;
    float *pad;          /* [rows][hull] (child memory) */
    size_t pad_n;
    const float *pending_x; /* the matmul that reads this activation reads pad instead */
    const tp_site *pending;
    const tp_site *mixer; /* the site of the mixer now running (att or gdn) */
    float *lbuf;         /* logits rows [rows][n_vocab local] (child memory) */
    size_t lbuf_n;
    int v0, nv;          /* vocabulary rows */
} tp_shard;

/* What a main session keeps (its be_state). */
typedef struct tp_sess {
    int pos;             /* the position the next pass should find (reset detection) */
    tern_session *sh[];  /* [n] shard sessions */
} tp_sess;

struct tp_backend {
    tm_backend base;
    tm_backend_vt vt;    /* g_tp_vt with the children's kv_types */
    int n;
    tm_backend_params cp;
    tp_shard sh[TP_MAX];
    tern_comm *comm;
    tm_step steps[TP_MAX];
    const tm_step *cur;  /* the pass the steps were built for */
    tern_session **ss_buf; /* [n][ss_cap] */
    int ss_cap;
    float *host_rows;    /* host staging of device logits */
    size_t host_n;
    tern_status err;     /* first error of the pass (mixers return nothing) */
};

static inline tp_shard *SH(tm_backend *be) { return (tp_shard *)be; }
static inline tp_backend *TP(tm_backend *be) { return (tp_backend *)be; }

static void tp_err(tp_backend *tp, tern_status s) {
    if (s && !tp->err) tp->err = s;
}

/* ------------------------------------------------ the shards' op table */

static void sh_matmul(tm_backend *be, const tern_qmat *w, const float *x, size_t batch, size_t xs,
                      float *y, size_t ys) {
    tp_shard *s = SH(be);
    tm_backend *c = s->child;
    if (s->pending && x == s->pending_x) {
        size_t hull = (size_t)s->pending->hull;
        s->pending = NULL;
        s->pending_x = NULL;
        c->ops->matmul(c, w, s->pad, batch, hull, y, ys);
        return;
    }
    c->ops->matmul(c, w, x, batch, xs, y, ys);
}

static void sh_matmul_multi(tm_backend *be, int n, const tern_qmat *const *w, const float *x,
                            size_t batch, size_t xs, float *const *y, const size_t *ys) {
    tm_backend *c = SH(be)->child;
    c->ops->matmul_multi(c, n, w, x, batch, xs, y, ys);
}

/* The padded input of a site: x [rows][own] into pad [rows][hull] at own0-hull0, zeros
 * elsewhere, then the hull's transform; the next matmul of x reads pad. */
static void pad_site(tp_shard *s, const tp_site *site, const float *x, size_t rows, size_t block) {
    tm_backend *c = s->child;
    size_t need = rows * (size_t)site->hull;
    if (need > s->pad_n) {
        if (s->pad) tm_be_free(c, s->pad, s->pad_n * sizeof(float));
        s->pad = tm_be_alloc(c, need * sizeof(float));
        s->pad_n = s->pad ? need : 0;
        if (!s->pad) {
            tp_err(s->tp, tern_fail(TERN_ERR_NOMEM, "tp: shard %d: out of memory for a %zu x %d "
                                    "padded activation", s->rank, rows, site->hull));
            return;
        }
    }
    tp_err(s->tp, tm_be_zero(c, s->pad, need * sizeof(float)));
    c->ops->copy_rows(c, s->pad + (site->own0 - site->hull0), (size_t)site->hull, x,
                      (size_t)site->own, rows, (size_t)site->own);
    if (site->signs) c->ops->hadamard(c, s->pad, rows, (size_t)site->hull, block, site->signs);
    s->pending = site;
    s->pending_x = x;
}

/* The plan's HADAMARD ops are only on a mixer's output (attention or GDN), before its
 * output projection. */
static void sh_hadamard(tm_backend *be, float *x, size_t rows, size_t n, size_t block,
                        const float *signs) {
    tp_shard *s = SH(be);
    (void)signs;
    const tp_site *site = s->mixer;
    TERN_ASSERT(site && site->own == (int)n);
    if (site->pad) {
        pad_site(s, site, x, rows, block);
        return;
    }
    if (site->signs) s->child->ops->hadamard(s->child, x, rows, n, block, site->signs);
}

static void sh_add_rmsnorm_hadamard(tm_backend *be, float *r, const float *d, const float *gain,
                                    float eps, float *normed, float *rotated, size_t rows,
                                    size_t n, size_t block, const float *signs) {
    tp_shard *s = SH(be);
    tm_backend *c = s->child;
    c->ops->add_rmsnorm_hadamard(c, r, d, gain, eps, normed, rotated, rows, n, block,
                                 signs ? s->signs_e : NULL);
}

static void sh_swiglu_hadamard(tm_backend *be, const float *gate, const float *up, float *out,
                               size_t rows, size_t n, size_t block, const float *signs) {
    tp_shard *s = SH(be);
    tm_backend *c = s->child;
    (void)signs;
    if (s->ffn.pad) {
        c->ops->swiglu_hadamard(c, gate, up, out, rows, n, block, NULL);
        pad_site(s, &s->ffn, out, rows, block);
        return;
    }
    c->ops->swiglu_hadamard(c, gate, up, out, rows, n, block, s->ffn.signs);
}

static tern_status sh_embed(tm_backend *be, const tern_qmat *emb, const int32_t *ids, size_t n,
                            float *out, size_t block, const float *signs) {
    tp_shard *s = SH(be);
    return s->child->ops->embed(s->child, emb, ids, n, out, block, signs ? s->signs_e : NULL);
}

static void sh_head_rmsnorm(tm_backend *be, float *x, size_t rows, size_t stride, int n_heads,
                            int hd, const float *gain, float eps) {
    tm_backend *c = SH(be)->child;
    c->ops->head_rmsnorm(c, x, rows, stride, n_heads, hd, gain, eps);
}

static void sh_rope(tm_backend *be, float *x, size_t rows, size_t stride, int n_heads, int hd,
                    int rot, int pos0, float theta) {
    tm_backend *c = SH(be)->child;
    c->ops->rope(c, x, rows, stride, n_heads, hd, rot, pos0, theta);
}

static void sh_attention(tm_backend *be, const tm_attn_args *a) {
    tm_backend *c = SH(be)->child;
    c->ops->attention(c, a);
}

static void sh_gdn(tm_backend *be, const tm_gdn_args *a) {
    tm_backend *c = SH(be)->child;
    c->ops->gdn(c, a);
}

static void sh_copy_rows(tm_backend *be, float *dst, size_t ds, const float *src, size_t ss,
                         size_t rows, size_t n) {
    tm_backend *c = SH(be)->child;
    c->ops->copy_rows(c, dst, ds, src, ss, rows, n);
}

static void sh_split_heads(tm_backend *be, const float *src, size_t rows, int n_heads, int hd,
                           float *a, float *b) {
    tm_backend *c = SH(be)->child;
    c->ops->split_heads(c, src, rows, n_heads, hd, a, b);
}

static void sh_mul_sigmoid(tm_backend *be, float *x, const float *g, size_t rows, size_t n) {
    tm_backend *c = SH(be)->child;
    c->ops->mul_sigmoid(c, x, g, rows, n);
}

static void sh_permute(tm_backend *be, const float *src, float *dst, size_t rows, int n_k,
                       int n_v, int dv) {
    tm_backend *c = SH(be)->child;
    c->ops->permute_tiled_grouped(c, src, dst, rows, n_k, n_v, dv);
}

static void sh_kv_store(tm_backend *be, void *kc, void *vc, tern_kv_type kt, tern_kv_type vt,
                        const float *k, const float *v, size_t kvw, size_t rows, int pos0) {
    tm_backend *c = SH(be)->child;
    c->ops->kv_store(c, kc, vc, kt, vt, k, v, kvw, rows, pos0);
}

static const tm_ops g_shard_ops = {
    .matmul = sh_matmul,
    .matmul_multi = sh_matmul_multi,
    .hadamard = sh_hadamard,
    .add_rmsnorm_hadamard = sh_add_rmsnorm_hadamard,
    .swiglu_hadamard = sh_swiglu_hadamard,
    .embed = sh_embed,
    .head_rmsnorm = sh_head_rmsnorm,
    .rope = sh_rope,
    .attention = sh_attention,
    .gdn = sh_gdn,
    .copy_rows = sh_copy_rows,
    .split_heads = sh_split_heads,
    .mul_sigmoid = sh_mul_sigmoid,
    .permute_tiled_grouped = sh_permute,
    .kv_store = sh_kv_store,
};

/* The walker asks the shard's table only for the GDN state size (and its name). */
static size_t sh_gdn_state_floats(const tm_backend *be, const tm_hparams *hp) {
    const tp_shard *s = (const tp_shard *)be;
    return s->child->vt->gdn_state_floats(s->child, hp);
}

static const tm_backend_vt g_shard_vt = {
    .name = "tp-shard",
    .gdn_state_floats = sh_gdn_state_floats,
};

/* ------------------------------------------------ shard sessions, steps */

static void sess_free(tp_backend *tp, tp_sess *t) {
    if (!t) return;
    for (int r = 0; r < tp->n; r++) tern_session_free(t->sh[r]);
    free(t);
}

/* The shard sessions of s (made at its first pass), reset when s was. */
static tern_status sess_of(tp_backend *tp, tern_session *s, tp_sess **out) {
    tp_sess *t = s->be_state;
    if (!t) {
        t = calloc(1, sizeof *t + (size_t)tp->n * sizeof t->sh[0]);
        if (!t) return tern_fail(TERN_ERR_NOMEM, "out of memory");
        tern_session_params p = {.n_ctx = s->n_ctx, .n_chunk = s->n_chunk,
                                 .cache_type_k = tern_session_cache_type(s, false),
                                 .cache_type_v = tern_session_cache_type(s, true)};
        for (int r = 0; r < tp->n; r++) {
            tern_status st = tern_session_new(tp->sh[r].sm, &p, &t->sh[r]);
            if (st) {
                sess_free(tp, t);
                return tern_fail_prefix(st, "tp: shard %d of %d", r, tp->n);
            }
        }
        s->be_state = t;
    } else if (s->pos == 0 && t->pos != 0) {
        for (int r = 0; r < tp->n; r++) tern_session_reset(t->sh[r]);
    }
    t->pos = s->pos;
    for (int r = 0; r < tp->n; r++) t->sh[r]->pos = s->pos;
    *out = t;
    return TERN_OK;
}

static tern_status build_steps(tp_backend *tp, const tm_step *st) {
    if (st->n_seq > tp->ss_cap) {
        tern_session **b = realloc(tp->ss_buf, (size_t)tp->n * st->n_seq * sizeof *b);
        if (!b) return tern_fail(TERN_ERR_NOMEM, "out of memory");
        tp->ss_buf = b;
        tp->ss_cap = st->n_seq;
    }
    tp_sess *tw;
    TRY(sess_of(tp, st->w, &tw));
    for (int i = 0; i < st->n_seq; i++) {
        tp_sess *ti;
        TRY(sess_of(tp, st->ss[i], &ti));
        ti->pos = st->ss[i]->pos + st->R;
        for (int r = 0; r < tp->n; r++) tp->ss_buf[(size_t)r * tp->ss_cap + i] = ti->sh[r];
    }
    for (int r = 0; r < tp->n; r++) {
        tm_step *p = &tp->steps[r];
        *p = *st;
        p->w = tw->sh[r];
        p->ss = tp->ss_buf + (size_t)r * tp->ss_cap;
        p->rows_out = NULL;
    }
    tp->cur = st;
    return TERN_OK;
}

/* ------------------------------------------------ the plan, sharded */

static void allreduce_delta(tp_backend *tp, const tm_step *st) {
    float *bufs[TP_MAX];
    for (int r = 0; r < tp->n; r++) bufs[r] = tp->steps[r].w->buf[TM_BUF_DELTA];
    tp_err(tp, tern_comm_allreduce_sum(tp->comm, bufs, (size_t)st->T * tp->base.m->hp.n_embd));
}

/* Each shard's vocabulary rows (op i of its plan, LOGITS), gathered by columns into the
 * host rows. */
static tern_status tp_head(tp_backend *tp, const tm_step *st, int i) {
    TERN_ASSERT(tp->cur == st);
    const size_t V = (size_t)tp->base.m->hp.n_vocab;
    const bool all = st->rows_out != NULL;
    const size_t rows = all ? (size_t)st->T : 1;
    float *dst = all ? st->rows_out : st->w->logits;
    if (!all) TERN_ASSERT(st->n_seq == 1 && st->ss[0] == st->w);
    for (int r = 0; r < tp->n; r++) {
        tp_shard *s = &tp->sh[r];
        size_t need = rows * (size_t)s->nv;
        if (need > s->lbuf_n) {
            if (s->lbuf) tm_be_free(s->child, s->lbuf, s->lbuf_n * sizeof(float));
            s->lbuf = tm_be_alloc(s->child, need * sizeof(float));
            s->lbuf_n = s->lbuf ? need : 0;
            if (!s->lbuf) return tern_fail(TERN_ERR_NOMEM, "tp: shard %d: out of memory for logits", r);
        }
        TRY(tm_plan_run_op(&s->base, &tp->steps[r], &s->sm->plan.ops[i], s->lbuf, all));
        const float *src = s->lbuf;
        if (tm_be_device(s->child)) {
            if (need > tp->host_n) {
                float *h = realloc(tp->host_rows, need * sizeof(float));
                if (!h) return tern_fail(TERN_ERR_NOMEM, "out of memory");
                tp->host_rows = h;
                tp->host_n = need;
            }
            TRY(tm_be_sync(s->child));
            TRY(tm_be_download(s->child, tp->host_rows, s->lbuf, need * sizeof(float)));
            src = tp->host_rows;
        }
        for (size_t t = 0; t < rows; t++)
            memcpy(dst + t * V + s->v0, src + t * s->nv, (size_t)s->nv * sizeof(float));
    }
    if (all)
        for (int k = 0; k < st->n_seq; k++)
            memcpy(st->ss[k]->logits, st->rows_out + (size_t)(k + st->R - 1) * V, V * sizeof(float));
    return TERN_OK;
}

/* The step: op i of the model's plan is op i of every shard's plan (the same rules
 * over the shard's local widths), run on each shard through its op table (the sh_*
 * wrappers: padded K-split sites); after every matmul into the residual update (an
 * output projection or down) the shards' partial sums are all-reduced; the head
 * gathers vocabulary slices. */
static tern_status tp_exec(tm_backend *be, const tm_step *st) {
    tp_backend *tp = TP(be);
    const tern_model *m = tp->base.m;
    const tm_plan *p = &m->plan;
    tp->err = TERN_OK;
    tp->cur = NULL;
    if (st->hidden_out) /* the shards hold slices of the head, not the normed rows' owner */
        return tern_fail(TERN_ERR_UNSUPPORTED, "hidden states (embeddings) on a tensor-parallel model");
    TRY(build_steps(tp, st));
    for (int i = 0; i < p->n_ops; i++) {
        const tm_plan_op *op = &p->ops[i];
        if (op->kind == TM_OP_LOGITS) {
            TRY(tp_head(tp, st, i));
            continue;
        }
        for (int r = 0; r < tp->n; r++) {
            tp_shard *s = &tp->sh[r];
            const tm_plan *sp = &s->sm->plan;
            TERN_ASSERT(sp->n_ops == p->n_ops && sp->ops[i].kind == op->kind);
            s->mixer = op->layer < 0 ? NULL : m->layers[op->layer].is_attn ? &s->att : &s->gdn;
            tern_status e = tm_plan_run_op(&s->base, &tp->steps[r], &sp->ops[i], NULL, false);
            s->mixer = NULL;
            TRY(e);
        }
        if (op->kind == TM_OP_MATMUL && op->out == TM_BUF_DELTA) allreduce_delta(tp, st);
    }
    return tp->err;
}

/* ------------------------------------------------ the instance's table */

#define TP_LAZY_BYTES ((size_t)1 << 22)

static void *tp_alloc(tm_backend *be, size_t n) {
    (void)be;
    if (n >= TP_LAZY_BYTES) return tern_alloc_lazy(n);
    void *p = tern_alloc_aligned(n);
    if (p) memset(p, 0, n);
    return p;
}
static void tp_free(tm_backend *be, void *p, size_t n) {
    (void)be;
    if (n >= TP_LAZY_BYTES) tern_free_lazy(p, n);
    else tern_free_aligned(p, n);
}
static tern_status tp_copy(tm_backend *be, void *dst, const void *src, size_t n) {
    (void)be;
    if (n && dst != src) memcpy(dst, src, n);
    return TERN_OK;
}
static tern_status tp_zero(tm_backend *be, void *p, size_t n) {
    (void)be;
    if (n >= TP_LAZY_BYTES) tern_zero_lazy(p, n);
    else if (n) memset(p, 0, n);
    return TERN_OK;
}
static tern_status tp_sync(tm_backend *be) {
    tp_backend *tp = TP(be);
    tern_status s = tp->err;
    for (int r = 0; r < tp->n; r++)
        if (tp->sh[r].child) {
            tern_status c = tm_be_sync(tp->sh[r].child);
            if (!s) s = c;
        }
    tp->err = TERN_OK;
    return s;
}
static uint64_t tp_mem_available(const tm_backend *be) {
    const tp_backend *tp = (const tp_backend *)be;
    tm_backend *c = tp->sh[0].child;
    return c && c->vt->mem_available ? c->vt->mem_available(c) : 0;
}
static size_t tp_gdn_state_floats(const tm_backend *be, const tm_hparams *hp) {
    const tp_backend *tp = (const tp_backend *)be;
    tm_backend *c = tp->sh[0].child;
    return c->vt->gdn_state_floats(c, hp);
}
static int tp_batch_hint(const tm_backend *be) {
    const tp_backend *tp = (const tp_backend *)be;
    tm_backend *c = tp->sh[0].child;
    return c->vt->batch_hint(c);
}
static int tp_chunk_hint(const tm_backend *be) {
    const tp_backend *tp = (const tp_backend *)be;
    tm_backend *c = tp->sh[0].child;
    return c->vt->chunk_hint ? c->vt->chunk_hint(c) : 64;
}
static void tp_session_release(tm_backend *be, tern_session *s) {
    sess_free(TP(be), s->be_state);
    s->be_state = NULL;
}

static void shard_free(tp_shard *s) {
    if (s->child) {
        if (s->pad) tm_be_free(s->child, s->pad, s->pad_n * sizeof(float));
        if (s->lbuf) tm_be_free(s->child, s->lbuf, s->lbuf_n * sizeof(float));
        tp_site *sites[3] = {&s->att, &s->gdn, &s->ffn};
        for (int i = 0; i < 3; i++)
            if (sites[i]->signs_n) tm_be_free(s->child, (void *)sites[i]->signs, sites[i]->signs_n * 4);
        if (s->signs_e_n) tm_be_free(s->child, (void *)s->signs_e, s->signs_e_n * 4);
    }
    if (s->sm) tern_model_free(s->sm); /* destroys the child */
    else tm_backend_destroy(s->child);
    memset(s, 0, sizeof *s);
}

static void tp_destroy(tm_backend *be) {
    tp_backend *tp = TP(be);
    for (int r = 0; r < tp->n; r++) shard_free(&tp->sh[r]);
    tern_comm_free(tp->comm);
    free(tp->ss_buf);
    free(tp->host_rows);
    free(tp);
}

static tern_status tp_model_loaded(tm_backend *be, tern_model *m);

static const tm_backend_vt g_tp_vt = {
    .name = "tp",
    .device_memory = false,
    .caps = TM_CAP_PRIVATE_STATE,
    .destroy = tp_destroy,
    .batch_hint = tp_batch_hint,
    .chunk_hint = tp_chunk_hint,
    .alloc = tp_alloc,
    .free = tp_free,
    .upload = tp_copy,
    .download = tp_copy,
    .zero = tp_zero,
    .sync = tp_sync,
    .mem_available = tp_mem_available,
    .gdn_state_floats = tp_gdn_state_floats,
    .session_release = tp_session_release,
    .model_loaded = tp_model_loaded,
    .exec = tp_exec,
};

tern_status tm_backend_tp_create(const char *spec, int n, const tm_backend_params *p,
                                 tm_backend **out) {
    *out = NULL;
    if (n < 1 || n > TP_MAX)
        return tern_fail(TERN_ERR_INVALID_ARG, "--tp %d: expected a number of shards from 1 to %d",
                         n, TP_MAX);
    tp_backend *tp = calloc(1, sizeof *tp);
    if (!tp) return tern_fail(TERN_ERR_NOMEM, "out of memory");
    tp->vt = g_tp_vt;
    tp->base.vt = &tp->vt;
    tp->base.ops = NULL; /* the table's layer operations never use op-sized ones */
    tp->n = n;
    if (p) tp->cp = *p;
    tern_status st = TERN_OK;
    for (int r = 0; r < n && !st; r++) {
        st = tm_backend_create(spec, &tp->cp, &tp->sh[r].child);
        if (!st && tm_be_device(tp->sh[r].child))
            st = tern_fail(TERN_ERR_UNSUPPORTED,
                           "--tp %d --device %s: tensor parallel runs on host-memory back-ends "
                           "only for now (the CUDA back-end keeps one stream and workspace per "
                           "process, so %d GPU instances cannot coexist yet); use --device cpu",
                           n, spec ? spec : "cpu", n);
        tp->sh[r].tp = tp;
        tp->sh[r].rank = r;
        tp->sh[r].base.vt = &g_shard_vt;
        tp->sh[r].base.ops = &g_shard_ops;
    }
    if (!st) tp->vt.kv_types = tp->sh[0].child->vt->kv_types; /* the shards' caches */
    if (!st) st = tern_comm_cpu_new(n, &tp->comm);
    if (st) {
        tp_destroy(&tp->base);
        return st;
    }
    *out = &tp->base;
    return TERN_OK;
}

/* ------------------------------------------------ sharding the weights */

typedef struct piece {
    int64_t src0, n, dst0; /* rows or columns [src0, src0+n) -> [dst0, dst0+n) */
} piece;

static tern_status no_mem(const char *what) {
    return tern_fail(TERN_ERR_NOMEM, "tp: out of memory sharding %s", what);
}

/* dst = the rows of src listed in pieces (in order), a model-owned copy. */
static tern_status rows_gather(tern_model *sm, const tern_qmat *src, const piece *pc, int np,
                               tern_qmat *dst, const char *what) {
    memset(dst, 0, sizeof *dst);
    if (!src->data) return TERN_OK;
    int64_t rows = 0;
    for (int i = 0; i < np; i++) rows += pc[i].n;
    uint8_t *d = tm_model_alloc(sm, (size_t)rows * src->row_bytes);
    if (!d) return no_mem(what);
    for (int i = 0; i < np; i++) {
        TERN_ASSERT(pc[i].src0 >= 0 && pc[i].src0 + pc[i].n <= src->n);
        memcpy(d + (size_t)pc[i].dst0 * src->row_bytes, src->data + (size_t)pc[i].src0 * src->row_bytes,
               (size_t)pc[i].n * src->row_bytes);
    }
    *dst = *src;
    dst->n = rows;
    dst->data = d;
    return TERN_OK;
}

/* dst [n][width] = the columns of src listed in pieces (whole blocks of its type). */
static tern_status cols_gather(tern_model *sm, const tern_qmat *src, const piece *pc, int np,
                               int64_t width, tern_qmat *dst, const char *what) {
    memset(dst, 0, sizeof *dst);
    if (!src->data) return TERN_OK;
    const int64_t qb = (int64_t)tern_dtype_block_elems(src->type);
    const size_t bb = tern_dtype_block_bytes(src->type);
    if (width % qb)
        return tern_fail(TERN_ERR_UNSUPPORTED, "tp: %s: a %lld-column slice is not whole %lld-weight blocks",
                         what, (long long)width, (long long)qb);
    for (int i = 0; i < np; i++)
        if (pc[i].src0 % qb || pc[i].n % qb || pc[i].dst0 % qb)
            return tern_fail(TERN_ERR_UNSUPPORTED,
                             "tp: %s: columns [%lld, %lld) do not sit on its %lld-weight blocks",
                             what, (long long)pc[i].src0, (long long)(pc[i].src0 + pc[i].n),
                             (long long)qb);
    size_t rb = (size_t)(width / qb) * bb;
    uint8_t *d = tm_model_alloc(sm, (size_t)src->n * rb);
    if (!d) return no_mem(what);
    memset(d, 0, (size_t)src->n * rb);
    for (int64_t r = 0; r < src->n; r++)
        for (int i = 0; i < np; i++)
            memcpy(d + (size_t)r * rb + (size_t)(pc[i].dst0 / qb) * bb,
                   src->data + (size_t)r * src->row_bytes + (size_t)(pc[i].src0 / qb) * bb,
                   (size_t)(pc[i].n / qb) * bb);
    *dst = *src;
    dst->k = width;
    dst->data = d;
    dst->row_bytes = rb;
    return TERN_OK;
}

/* dst[dst0 + j][w] = src[src0 + j][w] for the pieces (float rows of w). */
static tern_status vec_gather(tern_model *sm, const float *src, int w, const piece *pc, int np,
                              const float **dst, const char *what) {
    *dst = NULL;
    if (!src) return TERN_OK;
    int64_t rows = 0;
    for (int i = 0; i < np; i++) rows += pc[i].n;
    float *d = tm_model_alloc(sm, (size_t)rows * w * sizeof(float));
    if (!d) return no_mem(what);
    for (int i = 0; i < np; i++)
        memcpy(d + (size_t)pc[i].dst0 * w, src + (size_t)pc[i].src0 * w, (size_t)pc[i].n * w * sizeof(float));
    *dst = d;
    return TERN_OK;
}

static int64_t gcd64(int64_t a, int64_t b) { return b ? gcd64(b, a % b) : a; }

/* The site of owned columns [own0, own0+own) of a K-wide activation whose matrix has
 * blocks of qb; signs (host, K floats) or NULL. */
static void site_make(const tern_model *m, tp_site *s, int K, int own0, int own, int qb,
                      const float *signs) {
    int64_t al = qb;
    if (signs) al = (int64_t)m->had_block / gcd64(m->had_block, qb) * qb;
    int64_t h0 = own0 / al * al, h1 = (own0 + own + al - 1) / al * al;
    if (h1 > K) h1 = K;
    s->K = K;
    s->own0 = own0;
    s->own = own;
    s->hull0 = (int)h0;
    s->hull = (int)(h1 - h0);
    s->pad = s->hull0 != own0 || s->hull != own;
    s->signs = signs ? signs + h0 : NULL; /* host for now; moved to the child below */
}

static int mat_qb(const tern_qmat *w) {
    return w->data ? (int)tern_dtype_block_elems(w->type) : 1;
}

/* Largest block among the layers' matrices of one role (they share a type normally). */
static int role_qb(const tern_model *m, size_t field) {
    int q = 1;
    for (int i = 0; i < m->hp.n_layer; i++) {
        int b = mat_qb((const tern_qmat *)((const char *)&m->layers[i] + field));
        if (b > q) q = b;
    }
    return q;
}
#define ROLE_QB(m, f) role_qb((m), offsetof(tm_layer, f))

/* Refusals name the dimension that does not split. */
static tern_status check_split(const tern_model *m, int N) {
    const tm_hparams *hp = &m->hp;
    if (hp->n_attn_layers) {
        if (hp->n_head % N)
            return tern_fail(TERN_ERR_UNSUPPORTED,
                             "--tp %d: the %d attention heads (n_head) do not split into %d equal parts",
                             N, hp->n_head, N);
        int nkv = hp->n_head_kv;
        if (N <= nkv ? nkv % N : N % nkv)
            return tern_fail(TERN_ERR_UNSUPPORTED,
                             "--tp %d: the %d kv heads (n_head_kv) neither split into %d equal "
                             "parts nor replicate evenly over %d shards",
                             N, nkv, N, N);
        if (hp->n_head % hp->n_head_kv)
            return tern_fail(TERN_ERR_FORMAT, "--tp %d: %d heads for %d kv heads", N, hp->n_head, nkv);
    }
    if (hp->n_gdn_layers) {
        if (hp->ssm_n_k % N)
            return tern_fail(TERN_ERR_UNSUPPORTED,
                             "--tp %d: the %d GDN key heads (ssm.group_count) do not split into "
                             "%d equal parts",
                             N, hp->ssm_n_k, N);
        if (hp->ssm_n_v % hp->ssm_n_k)
            return tern_fail(TERN_ERR_FORMAT, "--tp %d: %d GDN value heads for %d key heads", N,
                             hp->ssm_n_v, hp->ssm_n_k);
        if (m->v_tiled && !m->out_permute && tm_model_signs(m, (int64_t)hp->ssm_n_v * hp->ssm_dv))
            return tern_fail(TERN_ERR_UNSUPPORTED,
                             "--tp %d: ssm_out columns in tiled order with a Hadamard transform "
                             "on them cannot be split by key heads",
                             N);
    }
    if (hp->n_ff % 128 || hp->n_ff / 128 < N)
        return tern_fail(TERN_ERR_UNSUPPORTED,
                         "--tp %d: the FFN width %d (n_ff) does not give each shard whole "
                         "128-channel units",
                         N, hp->n_ff);
    if (hp->n_vocab < N)
        return tern_fail(TERN_ERR_UNSUPPORTED, "--tp %d: a vocabulary of %d rows", N, hp->n_vocab);
    return TERN_OK;
}

/* A device child gets its own copy of a host float vector. */
static tern_status child_vec(tm_backend *c, const float **v, size_t n, size_t *owned) {
    *owned = 0;
    if (!*v || !tm_be_device(c)) return TERN_OK;
    float *d = tm_be_alloc(c, n * sizeof(float));
    if (!d) return tern_fail(TERN_ERR_NOMEM, "tp: out of device memory for sign vectors");
    TRY(tm_be_upload(c, d, *v, n * sizeof(float)));
    *v = d;
    *owned = n;
    return TERN_OK;
}

static tern_status shard_layer(const tern_model *m, tern_model *sm, tp_shard *s, int N,
                               const tm_layer *l, tm_layer *o, const char *what) {
    const tm_hparams *hp = &m->hp;
    const int r = s->rank;
    *o = (tm_layer){.is_attn = l->is_attn, .attn_norm = l->attn_norm, .post_norm = l->post_norm,
                    .kv_index = l->kv_index, .gdn_index = l->gdn_index};
    if (l->is_attn) {
        const int HD = hp->head_dim, nh = hp->n_head / N, h0 = r * nh;
        const int nkv = sm->hp.n_head_kv;
        const int kv0 = N <= hp->n_head_kv ? r * nkv : r / (N / hp->n_head_kv);
        const int qpr = HD * (hp->attn_gate ? 2 : 1);
        piece pq = {(int64_t)h0 * qpr, (int64_t)nh * qpr, 0};
        piece pkv = {(int64_t)kv0 * HD, (int64_t)nkv * HD, 0};
        TRY(rows_gather(sm, &l->wq, &pq, 1, &o->wq, what));
        TRY(rows_gather(sm, &l->wk, &pkv, 1, &o->wk, what));
        TRY(rows_gather(sm, &l->wv, &pkv, 1, &o->wv, what));
        piece po = {s->att.hull0, s->att.hull, 0};
        TRY(cols_gather(sm, &l->wo, &po, 1, s->att.hull, &o->wo, what));
        o->q_norm = l->q_norm;
        o->k_norm = l->k_norm;
    } else {
        const int nk = hp->ssm_n_k, nv = hp->ssm_n_v, dk = hp->ssm_dk, dv = hp->ssm_dv;
        const int rr = nv / nk, nk_i = nk / N, nv_i = nv / N, k0 = r * nk_i;
        const int C = 2 * nk * dk + nv * dv, Ci = 2 * nk_i * dk + nv_i * dv;
        (void)C;
        piece *ph = malloc((size_t)(nv_i + 2) * sizeof *ph); /* channel / row pieces */
        piece *pv = malloc((size_t)nv_i * sizeof *pv);       /* value heads */
        if (!ph || !pv) {
            free(ph);
            free(pv);
            return no_mem(what);
        }
        for (int p = 0; p < nv_i; p++) {
            int g; /* the global value head of local head p */
            if (m->v_tiled) g = (p / nk_i) * nk + k0 + p % nk_i;
            else g = k0 * rr + p;
            pv[p] = (piece){g, 1, p};
        }
        ph[0] = (piece){(int64_t)k0 * dk, (int64_t)nk_i * dk, 0};
        ph[1] = (piece){(int64_t)nk * dk + (int64_t)k0 * dk, (int64_t)nk_i * dk, (int64_t)nk_i * dk};
        for (int p = 0; p < nv_i; p++)
            ph[2 + p] = (piece){2LL * nk * dk + pv[p].src0 * dv, dv, 2LL * nk_i * dk + (int64_t)p * dv};
        tern_status st = rows_gather(sm, &l->wqkv, ph, nv_i + 2, &o->wqkv, what);
        if (!st) st = vec_gather(sm, l->conv, hp->conv_k, ph, nv_i + 2, &o->conv, what);
        for (int p = 0; p < nv_i; p++) ph[p] = (piece){pv[p].src0 * dv, dv, (int64_t)p * dv};
        if (!st) st = rows_gather(sm, &l->wz, ph, nv_i, &o->wz, what);
        if (!st) st = rows_gather(sm, &l->wa, pv, nv_i, &o->wa, what);
        if (!st) st = rows_gather(sm, &l->wb, pv, nv_i, &o->wb, what);
        if (!st) st = vec_gather(sm, l->ssm_a, 1, pv, nv_i, &o->ssm_a, what);
        if (!st) st = vec_gather(sm, l->dt_bias, 1, pv, nv_i, &o->dt_bias, what);
        o->ssm_norm = l->ssm_norm;
        if (!st) {
            if (m->v_tiled && !m->out_permute) /* ssm_out columns in the (tiled) run order */
                st = cols_gather(sm, &l->wout, ph, nv_i, (int64_t)nv_i * dv, &o->wout, what);
            else {
                piece po = {s->gdn.hull0, s->gdn.hull, 0};
                st = cols_gather(sm, &l->wout, &po, 1, s->gdn.hull, &o->wout, what);
            }
        }
        (void)Ci;
        free(ph);
        free(pv);
        TRY(st);
    }
    piece pf = {s->ffn.own0, s->ffn.own, 0};
    TRY(rows_gather(sm, &l->wgate, &pf, 1, &o->wgate, what));
    TRY(rows_gather(sm, &l->wup, &pf, 1, &o->wup, what));
    piece pd = {s->ffn.hull0, s->ffn.hull, 0};
    TRY(cols_gather(sm, &l->wdown, &pd, 1, s->ffn.hull, &o->wdown, what));
    return TERN_OK;
}

static tern_status shard_model(tern_model *m, tp_shard *s, int N) {
    const tm_hparams *hp = &m->hp;
    const int r = s->rank;
    tern_model *sm = calloc(1, sizeof *sm);
    if (!sm) return no_mem("the model");
    pthread_mutex_init(&sm->eval_mu, NULL);
    sm->path = tern_strdup(m->path);
    sm->be = s->child;
    s->sm = sm; /* owns the child from here on */
    s->child->m = sm;
    sm->hp = *hp;
    tm_hparams *sh = &sm->hp;
    sh->n_head = hp->n_head / N;
    sh->n_head_kv = N <= hp->n_head_kv ? hp->n_head_kv / N : 1;
    if (hp->n_gdn_layers) {
        sh->ssm_n_k = hp->ssm_n_k / N;
        sh->ssm_n_v = hp->ssm_n_v / N;
    }
    const int units = hp->n_ff / 128, u0 = (int)((int64_t)r * units / N),
              u1 = (int)((int64_t)(r + 1) * units / N);
    sh->n_ff = (u1 - u0) * 128;
    s->v0 = (int)((int64_t)r * hp->n_vocab / N);
    s->nv = (int)((int64_t)(r + 1) * hp->n_vocab / N) - s->v0;
    sh->n_vocab = s->nv;
    sm->hadamard = m->hadamard;
    sm->had_block = m->had_block;
    sm->v_tiled = m->v_tiled;
    sm->out_permute = m->out_permute;
    sm->embd_inverse = m->embd_inverse;
    /* sites */
    const int E = hp->n_embd;
    if (hp->n_attn_layers) {
        const int qw = hp->n_head * hp->head_dim, own = sh->n_head * hp->head_dim;
        site_make(m, &s->att, qw, r * own, own, ROLE_QB(m, wo), tm_model_signs(m, qw));
    }
    if (hp->n_gdn_layers) {
        const int VW = hp->ssm_n_v * hp->ssm_dv, own = sh->ssm_n_v * hp->ssm_dv;
        if (m->v_tiled && !m->out_permute) /* column gather, no transform (checked) */
            s->gdn = (tp_site){.K = VW, .own0 = 0, .own = own, .hull0 = 0, .hull = own};
        else site_make(m, &s->gdn, VW, r * own, own, ROLE_QB(m, wout), tm_model_signs(m, VW));
    }
    site_make(m, &s->ffn, hp->n_ff, u0 * 128, sh->n_ff, ROLE_QB(m, wdown), tm_model_signs(m, hp->n_ff));
    s->signs_e = tm_model_signs(m, E);
    /* the shard model's sign table: one entry per local width, so the walker's lookups
     * find a vector (the wrappers above use the sites' own). */
    if (m->hadamard) {
        int widths[4] = {E, s->att.own, s->gdn.own, s->ffn.own};
        sm->signs = calloc(4, sizeof *sm->signs);
        if (!sm->signs) return no_mem("sign vectors");
        for (int i = 0; i < 4; i++) {
            if (widths[i] <= 0) continue;
            float *v = tm_model_alloc(sm, (size_t)widths[i] * sizeof(float));
            if (!v) return no_mem("sign vectors");
            for (int j = 0; j < widths[i]; j++) v[j] = 1.0f;
            sm->signs[sm->n_signs++] = (tm_signs){.width = widths[i], .s = v};
        }
    }
    /* weights */
    sm->layers = calloc((size_t)hp->n_layer, sizeof *sm->layers);
    if (!sm->layers) return no_mem("layers");
    for (int il = 0; il < hp->n_layer; il++) {
        char what[64];
        snprintf(what, sizeof what, "layer %d (shard %d of %d)", il, r, N);
        TRY(shard_layer(m, sm, s, N, &m->layers[il], &sm->layers[il], what));
    }
    sm->tok_embd = m->tok_embd; /* replicated (a gather per token) */
    piece pvoc = {s->v0, s->nv, 0};
    TRY(rows_gather(sm, &m->output, &pvoc, 1, &sm->output, "output.weight"));
    sm->output_norm = m->output_norm;
    if (tm_be_device(s->child)) TRY(tm_upload_model(sm));
    TRY(tm_plan_build(sm, &sm->plan)); /* the same rules over the local widths */
    tp_site *sites[3] = {&s->att, &s->gdn, &s->ffn};
    for (int i = 0; i < 3; i++)
        TRY(child_vec(s->child, &sites[i]->signs, (size_t)sites[i]->hull, &sites[i]->signs_n));
    TRY(child_vec(s->child, &s->signs_e, (size_t)E, &s->signs_e_n));
    return TERN_OK;
}

static tern_status tp_model_loaded(tm_backend *be, tern_model *m) {
    tp_backend *tp = TP(be);
    TERN_ASSERT(m->be == be);
    tern_status st = check_split(m, tp->n);
    for (int r = 0; r < tp->n && !st; r++) {
        st = shard_model(m, &tp->sh[r], tp->n);
        if (tp->sh[r].sm) m->info.alloc_bytes += tp->sh[r].sm->info.alloc_bytes;
    }
    if (st) return tern_fail_prefix(st, "%s", m->path);
    return TERN_OK;
}
