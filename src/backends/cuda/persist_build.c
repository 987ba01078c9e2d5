/*
 * persist_build.c - the persistent decode step's program from the step plan
 * (cu_persist.h, kernels/cuda/persist.h, docs/persistent.md). Plain C: a CPU test
 * checks it (tests/unit/test_persist_build.c).
 *
 * The plan of a qwen3 layer
 *   SITE MATMUL(q,k,v) HEAD_NORM HEAD_NORM ROPE ROPE KV_STORE ATTENTION HADAMARD
 *   MATMUL(o -> delta) SITE MATMUL(gate,up) ACT MATMUL(down -> delta)
 * becomes the stages
 *   MATMUL qkv (input: the norm site)  ATTN  MATMUL o (x += y)
 *   MATMUL gate,up -> SwiGLU (input: the norm site)  MATMUL down (x += y)
 * after EMBED, and the head (LOGITS: norm site + MATMUL) and ARGMAX at the end.
 *
 * qwen35 (Hadamard, gated attention, GDN layers): the same five stages a layer. The
 * transforms go into the stage that reads their output (a matmul's input: the norm site's
 * rotation, the HADAMARD before o / out, SwiGLU's before down; EMBED's inverse); the
 * attention stage reads q|gate per head and applies the gate; a GDN layer's mixer is
 *   MATMUL qkv,z (qkv through the causal conv + SiLU: each channel's conv state belongs
 *   to the task that computes its row)  GDN (one task per value head: a, b from the
 *   un-rotated normed x, the delta rule, the gated norm, the permutation to grouped order)
 *   MATMUL out (x += y)
 * The kernel (tc_persist.cu) refuses what it does not run yet (tc_persist_new).
 */
#include "backends/cuda/cu_persist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct pb {
    const tern_model *m;
    const tm_plan *plan;
    int n_cta, layout;
    tp_stage *st;
    int n_st, cap_st;
    int cursor;       /* the CTA the next task goes to */
    int last_resid;   /* the last stage that wrote x (EMBED or a residual matmul) */
    int max_in_k;
    int n_gdn;        /* GDN stages */
    char why[200];
} pb;

static tp_stage *new_stage(pb *b, int kind, int op, int layer) {
    if (b->n_st == b->cap_st) {
        int cap = b->cap_st ? 2 * b->cap_st : 64;
        tp_stage *s = realloc(b->st, (size_t)cap * sizeof *s);
        if (!s) return NULL;
        b->st = s;
        b->cap_st = cap;
    }
    tp_stage *s = &b->st[b->n_st];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->plan_op = op;
    s->layer = layer;
    s->dep = b->n_st - 1; /* every stage waits for the one before (docs/persistent.md) */
    s->norm_src = -1;
    s->in_buf = -1;
    for (int i = 0; i < TP_MAX_MATS; i++) s->out_buf[i] = -1;
    b->n_st++;
    return s;
}

static bool mat_ok(pb *b, const tern_qmat *w, int64_t k, const char *what) {
    if (!w || !w->data) {
        snprintf(b->why, sizeof b->why, "%s: no matrix", what);
        return false;
    }
    if (w->layout != b->layout || (w->type != TERN_DT_Q2_0 && w->type != TERN_DT_PQ2_0) || w->k != k ||
        w->k % 128 || w->n < 1) {
        snprintf(b->why, sizeof b->why, "%s: %s %lldx%lld layout %d (the kernel takes 128-group ternary "
                 "matrices in the tiled layout)", what, tern_dtype_name(w->type), (long long)w->n,
                 (long long)w->k, w->layout);
        return false;
    }
    return true;
}

static int64_t strips(int64_t n) { return (n + 15) / 16; }
static int64_t ktiles(int64_t k) { return (k / 128 + 1) / 2; }

/* a matmul stage over the matrices of op (input width k) */
static tp_stage *mm_stage(pb *b, int opi, const tm_plan_op *op, int n, const tern_qmat *const *w, int64_t k) {
    tp_stage *s = new_stage(b, TP_MATMUL, opi, op->layer);
    if (!s) return NULL;
    s->n_mat = n;
    s->in_k = (int32_t)k;
    s->strip0[0] = 0;
    for (int i = 0; i < n; i++) {
        s->w[i] = w[i]->data;
        s->n[i] = w[i]->n;
        s->kt[i] = ktiles(k);
        s->rb[i] = (int64_t)w[i]->row_bytes;
        s->strip0[i + 1] = s->strip0[i] + strips(w[i]->n);
    }
    for (int i = n; i < TP_MAX_MATS; i++) s->strip0[i + 1] = s->strip0[n];
    int kp = (int)(ktiles(k) * 256);
    if (kp > b->max_in_k) b->max_in_k = kp;
    return s;
}

/* the signs of a transform of width k, or NULL (no Hadamard, or none of that width) */
static const float *signs_of(const tern_model *m, int64_t k) {
    return m->hadamard && k > 0 ? tm_model_signs(m, k) : NULL;
}

/* a transform of width k: its signs, and the block must divide it */
static bool had_ok(pb *b, const float *signs, int64_t k, const char *what) {
    const int B = b->m->had_block;
    if (!signs) return true;
    if (B < 2 || (B & (B - 1)) || k % B) {
        snprintf(b->why, sizeof b->why, "%s: a transform of width %lld in blocks of %d", what, (long long)k, B);
        return false;
    }
    return true;
}

static bool walk(pb *b) {
    const tern_model *m = b->m;
    const tm_hparams *hp = &m->hp;
    const tm_plan *p = b->plan;
    const int E = hp->n_embd, HD = hp->head_dim, NH = hp->n_head, NKV = hp->n_head_kv;
    const int qw = NH * HD, kvw = NKV * HD, qrows = qw * (hp->attn_gate ? 2 : 1);
    const int nk = hp->ssm_n_k, nv = hp->ssm_n_v, dk = hp->ssm_dk, dv = hp->ssm_dv;
    const int C = 2 * nk * dk + nv * dv, VW = nv * dv;
    if (m->hadamard && !m->signs) {
        snprintf(b->why, sizeof b->why, "a Hadamard model without sign vectors");
        return false;
    }
    if (E < 1 || HD < 2 || HD > 256 || HD % 32 || NH < 1 || NKV < 1 || NH % NKV || hp->rope_dims > HD ||
        hp->rope_dims % 2) {
        snprintf(b->why, sizeof b->why, "attention shape: head_dim %d, heads %d/%d, rope %d", HD, NH, NKV,
                 hp->rope_dims);
        return false;
    }
    if (hp->n_gdn_layers && (nk < 1 || nv < 1 || nv % nk || dk < 1 || dk > 256 || dv < 1 || dv > 256 ||
                             hp->conv_k < 1 || hp->conv_k > 4)) {
        snprintf(b->why, sizeof b->why, "GDN shape: heads %d/%d, dk %d, dv %d, conv %d", nk, nv, dk, dv,
                 hp->conv_k);
        return false;
    }
    const float *gain = NULL, *site_gain = NULL; /* a pending norm site's gain; the last site's */
    const float *site_signs = NULL;              /* its transform (the ternary matmuls' input) */
    const float *in_signs = NULL;                /* a pending HADAMARD / ACT transform */
    float eps = 0, site_eps = 0;
    const float *qn = NULL, *kn = NULL;
    const tern_qmat *ab[2] = {NULL, NULL};       /* the GDN's a, b projections */
    for (int i = 0; i < p->n_ops; i++) {
        const tm_plan_op *op = &p->ops[i];
        switch (op->kind) {
        case TM_OP_EMBED: {
            const tern_qmat *w = tm_plan_mat(m, op->mat[0], false);
            const float *sg = op->had ? signs_of(m, op->had) : NULL;
            if (!mat_ok(b, w, E, "token_embd")) return false;
            if (op->had && (!sg || op->had != E || !had_ok(b, sg, E, "token_embd"))) {
                snprintf(b->why, sizeof b->why, "token_embd: no inverse transform of width %d", op->had);
                return false;
            }
            tp_stage *s = new_stage(b, TP_EMBED, i, -1);
            if (!s) return false;
            s->n_mat = 1;
            s->w[0] = w->data;
            s->n[0] = w->n;
            s->kt[0] = ktiles(E);
            s->rb[0] = (int64_t)w->row_bytes;
            s->in_k = E;
            s->rope_dims = hp->rope_dims;
            s->theta = hp->rope_theta;
            s->signs = sg;
            s->had_block = sg ? m->had_block : 0;
            s->out_mode = TP_OUT_RESID;
            b->last_resid = b->n_st - 1;
            break;
        }
        case TM_OP_SITE:
            site_signs = signs_of(m, op->had);
            if (m->hadamard && (!site_signs || !had_ok(b, site_signs, op->had, "norm site"))) {
                snprintf(b->why, sizeof b->why, "op %d: a norm site without its transform", i);
                return false;
            }
            if (!m->hadamard && tm_model_signs(m, op->had)) {
                snprintf(b->why, sizeof b->why, "op %d: a norm site with a transform", i);
                return false;
            }
            gain = site_gain = tm_plan_vec(m, op->vec);
            eps = site_eps = op->eps;
            break;
        case TM_OP_MATMUL: {
            const tern_qmat *w[TM_PLAN_MAX_MATS];
            char what[64];
            if (op->n_mat == 2 && op->in == TM_BUF_NORMED && op->out_buf[0] == TM_BUF_A &&
                op->out_buf[1] == TM_BUF_B) { /* the GDN's a, b: dense rows, in the GDN stage */
                for (int j = 0; j < 2; j++) {
                    ab[j] = tm_plan_mat(m, op->mat[j], false);
                    if (!ab[j] || !ab[j]->data || ab[j]->k != E || ab[j]->n != nv || ab[j]->layout != TERN_LAYOUT_ROWS ||
                        ab[j]->type != ab[0]->type || ab[j]->row_bytes != ab[0]->row_bytes) {
                        snprintf(b->why, sizeof b->why, "op %d: the GDN's a/b projections", i);
                        return false;
                    }
                }
                break;
            }
            for (int j = 0; j < op->n_mat; j++) {
                w[j] = tm_plan_mat(m, op->mat[j], true);
                snprintf(what, sizeof what, "op %d matrix %d", i, j);
                if (!mat_ok(b, w[j], op->width, what)) return false;
            }
            if (gain) { /* input: the norm site */
                tp_stage *s = mm_stage(b, i, op, op->n_mat, w, op->width);
                if (!s) return false;
                s->in_mode = TP_IN_NORM;
                s->norm_src = b->last_resid;
                s->gain = gain;
                s->eps = eps;
                s->signs = site_signs;
                s->had_block = site_signs ? m->had_block : 0;
                gain = NULL;
                if (op->n_mat == 3 && op->out_buf[0] == TM_BUF_BIG0 && w[0]->n == qrows && w[1]->n == kvw &&
                    w[2]->n == kvw) {
                    s->out_mode = TP_OUT_ROWS;
                    for (int j = 0; j < 3; j++) s->out_buf[j] = TP_BUF_QKV;
                    s->out_off[0] = 0;
                    s->out_off[1] = qrows;
                    s->out_off[2] = qrows + kvw;
                } else if (op->n_mat == 2 && op->out_buf[0] == TM_BUF_BIG0 && op->out_buf[1] == TM_BUF_BIG1 &&
                           hp->n_gdn_layers && op->layer >= 0 && !m->layers[op->layer].is_attn &&
                           w[0]->n == C && w[1]->n == VW) { /* the GDN's q|k|v (through the conv), z */
                    const tm_layer *l = &m->layers[op->layer];
                    s->out_mode = TP_OUT_CONV;
                    s->out_buf[0] = TP_BUF_QKV;
                    s->out_buf[1] = TP_BUF_Z;
                    s->gdn_index = l->gdn_index;
                    s->conv_k = hp->conv_k;
                    s->conv_w = l->conv;
                    s->n_k = nk;
                    s->n_v = nv;
                    s->dk = dk;
                    s->dv = dv;
                    if (!l->conv) {
                        snprintf(b->why, sizeof b->why, "op %d: no conv weights", i);
                        return false;
                    }
                } else if (op->n_mat == 2 && i + 1 < p->n_ops && p->ops[i + 1].kind == TM_OP_ACT &&
                           p->ops[i + 1].act == TM_ACT_SWIGLU && w[0]->n == w[1]->n && w[0]->n == hp->n_ff) {
                    in_signs = signs_of(m, p->ops[i + 1].had); /* the down matmul's input */
                    if (m->hadamard && p->ops[i + 1].had && !in_signs) {
                        snprintf(b->why, sizeof b->why, "op %d: no signs for a transform of %d", i + 1,
                                 p->ops[i + 1].had);
                        return false;
                    }
                    if (!had_ok(b, in_signs, hp->n_ff, "SwiGLU")) return false;
                    s->out_mode = TP_OUT_SWIGLU;
                    s->out_buf[0] = TP_BUF_ACT;
                    i++; /* the ACT */
                } else {
                    snprintf(b->why, sizeof b->why, "op %d: a matmul after a norm site that is neither q,k,v, "
                             "the GDN's qkv,z nor gate,up + SwiGLU", i);
                    return false;
                }
            } else if (op->n_mat == 1 && op->out_buf[0] == TM_BUF_DELTA && w[0]->n == E && b->n_st > 0 &&
                       (b->st[b->n_st - 1].kind == TP_ATTN || b->st[b->n_st - 1].kind == TP_GDN ||
                        b->st[b->n_st - 1].out_mode == TP_OUT_SWIGLU)) {
                const int prev = b->st[b->n_st - 1].kind;
                const int want = prev == TP_ATTN ? qw : prev == TP_GDN ? VW : hp->n_ff;
                if (op->width != want) {
                    snprintf(b->why, sizeof b->why, "op %d: input width %d", i, op->width);
                    return false;
                }
                if (in_signs && in_signs != signs_of(m, want)) {
                    snprintf(b->why, sizeof b->why, "op %d: a transform of another width before it", i);
                    return false;
                }
                tp_stage *s = mm_stage(b, i, op, 1, w, op->width);
                if (!s) return false;
                s->in_mode = TP_IN_BUF;
                s->in_buf = prev == TP_MATMUL ? TP_BUF_ACT : TP_BUF_ATT;
                s->signs = in_signs;
                s->had_block = in_signs ? m->had_block : 0;
                in_signs = NULL;
                s->out_mode = TP_OUT_RESID;
                b->last_resid = b->n_st - 1;
            } else {
                snprintf(b->why, sizeof b->why, "op %d: a matmul the kernel does not place", i);
                return false;
            }
            break;
        }
        case TM_OP_SPLIT_HEADS: /* the attention stage reads q|gate per head */
            if (!hp->attn_gate || op->n_head != NH || op->head_dim != HD) {
                snprintf(b->why, sizeof b->why, "op %d: a head split the kernel does not run", i);
                return false;
            }
            break;
        case TM_OP_HEAD_NORM:
            if (op->head_dim != HD) {
                snprintf(b->why, sizeof b->why, "op %d: head norm of width %d", i, op->head_dim);
                return false;
            }
            if (op->in == TM_BUF_K) kn = tm_plan_vec(m, op->vec);
            else qn = tm_plan_vec(m, op->vec);
            break;
        case TM_OP_ROPE:
        case TM_OP_KV_STORE:
            break; /* in the attention stage */
        case TM_OP_ATTENTION: {
            const bool gated = (op->flags & TM_OPF_GATED) != 0;
            if (gated != hp->attn_gate || !qn || !kn || op->n_head != NH || op->n_head_kv != NKV) {
                snprintf(b->why, sizeof b->why, "op %d: attention the kernel does not run", i);
                return false;
            }
            tp_stage *s = new_stage(b, TP_ATTN, i, op->layer);
            if (!s) return false;
            s->n_head = NH;
            s->n_head_kv = NKV;
            s->head_dim = HD;
            s->gated = gated;
            s->rope_dims = op->rope_dims;
            s->theta = op->theta;
            s->scale = op->scale;
            s->eps = op->eps;
            s->kv_index = op->cache;
            s->q_norm = qn;
            s->k_norm = kn;
            s->in_buf = TP_BUF_QKV;
            s->out_buf[0] = TP_BUF_ATT;
            qn = kn = NULL;
            break;
        }
        case TM_OP_MUL_SIGMOID: /* the gate: in the attention stage */
            if (!b->n_st || b->st[b->n_st - 1].kind != TP_ATTN || !b->st[b->n_st - 1].gated) {
                snprintf(b->why, sizeof b->why, "op %d: a gate without a gated attention before it", i);
                return false;
            }
            break;
        case TM_OP_GDN: {
            const tm_layer *l = op->layer >= 0 && op->layer < hp->n_layer ? &m->layers[op->layer] : NULL;
            const tp_stage *cv = b->n_st ? &b->st[b->n_st - 1] : NULL;
            if (!l || l->is_attn || !ab[0] || !ab[1] || !site_gain || !cv || cv->out_mode != TP_OUT_CONV ||
                cv->layer != op->layer || op->n_head != nk || op->n_head_kv != nv || op->head_dim != dk ||
                op->dv != dv || op->conv_k != hp->conv_k || op->eps != site_eps || !l->ssm_a || !l->dt_bias ||
                !l->ssm_norm) {
                snprintf(b->why, sizeof b->why, "op %d: a GDN step the kernel does not place", i);
                return false;
            }
            tp_stage *s = new_stage(b, TP_GDN, i, op->layer);
            if (!s) return false;
            s->in_k = E;
            s->norm_src = b->last_resid;
            s->gain = site_gain;
            s->eps = op->eps;
            s->gdn_index = op->cache;
            s->conv_k = op->conv_k;
            s->conv_w = l->conv;
            s->n_k = nk;
            s->n_v = nv;
            s->dk = dk;
            s->dv = dv;
            s->v_tiled = m->v_tiled;
            s->ssm_a = l->ssm_a;
            s->dt_bias = l->dt_bias;
            s->gdn_norm = l->ssm_norm;
            s->wab[0] = ab[0]->data;
            s->wab[1] = ab[1]->data;
            s->ab_type = ab[0]->type;
            s->ab_kind = ab[0]->type == TERN_DT_F32 ? TP_AB_F32 : ab[0]->type == TERN_DT_F16 ? TP_AB_F16
                       : ab[0]->type == TERN_DT_BF16 ? TP_AB_BF16 : -1;
            s->ab_rb = (int64_t)ab[0]->row_bytes;
            s->in_buf = TP_BUF_QKV;
            s->out_buf[0] = TP_BUF_ATT;
            ab[0] = ab[1] = NULL;
            b->n_gdn++;
            break;
        }
        case TM_OP_PERMUTE:
            if (!b->n_st || b->st[b->n_st - 1].kind != TP_GDN || op->n_head != nk || op->n_head_kv != nv ||
                op->dv != dv) {
                snprintf(b->why, sizeof b->why, "op %d: a permutation without the GDN step before it", i);
                return false;
            }
            b->st[b->n_st - 1].out_grouped = 1;
            break;
        case TM_OP_HADAMARD:
            in_signs = signs_of(m, op->had);
            if (m->hadamard && op->had && !in_signs) {
                snprintf(b->why, sizeof b->why, "op %d: no signs for a transform of %d", i, op->had);
                return false;
            }
            if (!had_ok(b, in_signs, op->width, "Hadamard")) return false;
            break;
        case TM_OP_LOGITS: {
            const tern_qmat *w = tm_plan_mat(m, op->mat[0], true);
            const float *sg = signs_of(m, op->had);
            if (!mat_ok(b, w, E, "output") || w->n != hp->n_vocab) return false;
            if ((m->hadamard && !sg) || !had_ok(b, sg, E, "output norm")) {
                snprintf(b->why, sizeof b->why, "op %d: the head's input transform", i);
                return false;
            }
            tp_stage *s = mm_stage(b, i, op, 1, &w, E);
            if (!s) return false;
            s->in_mode = TP_IN_NORM;
            s->norm_src = b->last_resid;
            s->gain = tm_plan_vec(m, op->vec);
            s->eps = op->eps;
            s->signs = sg;
            s->had_block = sg ? m->had_block : 0;
            s->out_mode = TP_OUT_LOGITS;
            s->out_buf[0] = TP_BUF_LOGITS;
            tp_stage *a = new_stage(b, TP_ARGMAX, i, -1);
            if (!a) return false;
            a->norm_src = b->n_st - 2; /* the head's partial slots */
            break;
        }
        default:
            snprintf(b->why, sizeof b->why, "op %d: kind %d not in the persistent kernel", i, op->kind);
            return false;
        }
    }
    if (!b->n_st || b->st[b->n_st - 1].kind != TP_ARGMAX) {
        snprintf(b->why, sizeof b->why, "the plan does not end with the head");
        return false;
    }
    return true;
}

/* tasks of stage s: how many, and the range of task i */
static int n_tasks_of(const pb *b, const tp_stage *s) {
    switch (s->kind) {
    case TP_EMBED: { /* element ranges; whole blocks with the inverse transform */
        int n = s->signs ? s->in_k / s->had_block : (s->in_k + TP_THREADS - 1) / TP_THREADS;
        return n < b->n_cta ? n : b->n_cta;
    }
    case TP_MATMUL: {
        int64_t S = s->out_mode == TP_OUT_SWIGLU ? s->strip0[1] : s->strip0[s->n_mat];
        return S < b->n_cta ? (int)S : b->n_cta;
    }
    case TP_ATTN: return s->n_head;
    case TP_GDN: return s->n_v;
    default: return 1;
    }
}

static void range_of(const tp_stage *s, int i, int64_t *a, int64_t *e) {
    int64_t total = 0;
    switch (s->kind) {
    case TP_EMBED:
        if (s->signs) { /* whole blocks */
            const int64_t nb = s->in_k / s->had_block;
            *a = nb * i / s->n_tasks * s->had_block;
            *e = nb * (i + 1) / s->n_tasks * s->had_block;
            return;
        }
        total = s->in_k;
        break;
    case TP_MATMUL: total = s->out_mode == TP_OUT_SWIGLU ? s->strip0[1] : s->strip0[s->n_mat]; break;
    case TP_ATTN:
    case TP_GDN: *a = i; *e = i + 1; return;
    default: *a = 0; *e = 1; return;
    }
    *a = total * i / s->n_tasks;
    *e = total * (i + 1) / s->n_tasks;
}

void tp_buf_widths(const tern_model *m, size_t w[TP_BUF_COUNT]) {
    const tm_hparams *hp = &m->hp;
    const size_t qrows = (size_t)hp->n_head * hp->head_dim * (hp->attn_gate ? 2 : 1);
    const size_t qkv = qrows + 2 * (size_t)hp->n_head_kv * hp->head_dim;
    const size_t VW = hp->n_gdn_layers ? (size_t)hp->ssm_n_v * hp->ssm_dv : 0;
    const size_t C = hp->n_gdn_layers ? 2 * (size_t)hp->ssm_n_k * hp->ssm_dk + VW : 0;
    const size_t att = (size_t)hp->n_head * hp->head_dim;
    w[TP_BUF_X] = (size_t)hp->n_embd;
    w[TP_BUF_QKV] = qkv > C ? qkv : C;
    w[TP_BUF_ATT] = att > VW ? att : VW;
    w[TP_BUF_ACT] = (size_t)hp->n_ff;
    w[TP_BUF_LOGITS] = (size_t)hp->n_vocab;
    w[TP_BUF_ROPE] = (size_t)hp->head_dim;
    w[TP_BUF_Z] = VW;
}

tern_status tp_build(const tern_model *m, const tm_plan *plan, int n_cta, int layout, tp_prog *out) {
    memset(out, 0, sizeof *out);
    if (!m || !plan || n_cta < 1) return tern_fail(TERN_ERR_INVALID_ARG, "tp_build: bad arguments");
    pb b = {.m = m, .plan = plan, .n_cta = n_cta, .layout = layout, .last_resid = -1};
    if (!walk(&b)) {
        free(b.st);
        if (!b.why[0]) snprintf(b.why, sizeof b.why, "out of memory or an unexpected plan");
        return tern_fail(TERN_ERR_UNSUPPORTED, "persistent step: %s", b.why);
    }
    const tm_hparams *hp = &m->hp;
    int total = 0;
    for (int s = 0; s < b.n_st; s++) {
        b.st[s].task0 = total;
        b.st[s].n_tasks = n_tasks_of(&b, &b.st[s]);
        total += b.st[s].n_tasks;
    }
    tp_task *tasks = malloc((size_t)total * sizeof *tasks);
    int32_t *cta_of = malloc((size_t)total * sizeof *cta_of);
    int32_t *off = calloc((size_t)n_cta + 1, sizeof *off);
    if (!tasks || !cta_of || !off) {
        free(tasks); free(cta_of); free(off); free(b.st);
        return tern_fail(TERN_ERR_NOMEM, "out of memory");
    }
    /* each task to the next CTA in turn (a stage of n_cta tasks: one each), grouped
     * per CTA in stage order (a counting sort keeps the order) */
    int t = 0;
    for (int s = 0; s < b.n_st; s++)
        for (int i = 0; i < b.st[s].n_tasks; i++, t++) {
            cta_of[t] = b.cursor;
            b.cursor = (b.cursor + 1) % n_cta;
            off[cta_of[t] + 1]++;
        }
    for (int c = 0; c < n_cta; c++) off[c + 1] += off[c];
    int32_t *fill = malloc((size_t)n_cta * sizeof *fill);
    if (!fill) {
        free(tasks); free(cta_of); free(off); free(b.st);
        return tern_fail(TERN_ERR_NOMEM, "out of memory");
    }
    memcpy(fill, off, (size_t)n_cta * sizeof *fill);
    t = 0;
    for (int s = 0; s < b.n_st; s++)
        for (int i = 0; i < b.st[s].n_tasks; i++, t++) {
            tp_task *k = &tasks[fill[cta_of[t]]++];
            k->stage = s;
            k->idx = i;
            range_of(&b.st[s], i, &k->a, &k->b);
        }
    free(fill);
    free(cta_of);
    out->stages = b.st;
    out->n_stages = b.n_st;
    out->tasks = tasks;
    out->n_tasks = total;
    out->cta_off = off;
    out->n_cta = n_cta;
    size_t widths[TP_BUF_COUNT];
    tp_buf_widths(m, widths);
    size_t o = 0;
    for (int i = 0; i < TP_BUF_COUNT; i++) {
        out->buf_off[i] = o;
        o += (widths[i] + 63) / 64 * 64;
    }
    out->scratch_floats = o;
    out->max_in_k = b.max_in_k;
    out->n_vocab = hp->n_vocab;
    out->n_embd = hp->n_embd;
    out->head_dim_max = hp->head_dim;
    out->n_gdn = b.n_gdn;
    out->logits_stage = b.n_st - 2;
    out->argmax_stage = b.n_st - 1;
    return TERN_OK;
}

void tp_prog_free(tp_prog *p) {
    if (!p) return;
    void *own[] = {p->stages, p->tasks, p->cta_off};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) free(own[i]);
    memset(p, 0, sizeof *p);
}

void tp_describe_stage(const tp_prog *p, int s, char *buf, size_t n) {
    static const char *kinds[TP_KIND_COUNT] = {"embed", "matmul", "attention", "argmax", "GDN"};
    if (!p || s < 0 || s >= p->n_stages) {
        snprintf(buf, n, "stage %d (unknown)", s);
        return;
    }
    const tp_stage *st = &p->stages[s];
    snprintf(buf, n, "stage %d (plan op %d, %s, layer %d), waiting for stage %d", s, st->plan_op,
             st->kind >= 0 && st->kind < TP_KIND_COUNT ? kinds[st->kind] : "?", st->layer, st->dep);
}
