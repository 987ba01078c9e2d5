/*
 * plan_rules.c - the plan rules of each architecture (plan.h): which ops one layer of
 * each kind runs, in which order, on which buffers, with which parameters. This is
 * the one place the architectures' compute is written; every back-end executes what
 * these rules emit (the CPU op by op, CUDA with its fusions, tensor parallel sharded).
 *
 * Adding an architecture: its tensor schema (src/formats/arch/) and an entry in
 * g_rules below (mixer rules per layer kind, the FFN's activation).
 *
 *   qwen35  hybrid: GDN mixer, every full_attention_interval-th layer gated attention
 *           (q|gate per head, partial NEOX RoPE); SwiGLU FFN
 *   qwen3   dense: attention everywhere (no gate, RoPE over the whole head); SwiGLU FFN
 */
#include "model/plan_build.h"

#include <math.h>

/* site norm (+ transform) of a layer: r += delta (not on layer 0's first); returns the
 * ternary matmuls' input buffer */
static int site(tm_plan_b *b, int il, tm_role_id gain, bool first) {
    const tern_model *m = b->m;
    const int E = m->hp.n_embd;
    tm_plan_op *o = tm_plan_emit(b, TM_OP_SITE, il);
    if (!o) return TM_BUF_ROT;
    o->flags = first ? TM_OPF_FIRST : 0;
    o->in = TM_BUF_X;
    o->in2 = first ? TM_BUF_NONE : TM_BUF_DELTA;
    o->out = TM_BUF_NORMED;
    o->out2 = TM_BUF_ROT;
    o->vec = tm_mat_make(il, gain);
    o->width = E;
    o->had = E;
    o->eps = m->hp.eps;
    tm_plan_use(b, TM_BUF_X, E);
    tm_plan_use(b, TM_BUF_DELTA, E);
    tm_plan_use(b, TM_BUF_NORMED, E);
    tm_plan_use(b, TM_BUF_ROT, E);
    return m->hadamard ? TM_BUF_ROT : TM_BUF_NORMED;
}

/* out[i] = mat[i] in (k = width) */
static void matmul(tm_plan_b *b, int il, int in, int width, int n, const tm_role_id *roles,
                   const int *outs, const int *ws) {
    tm_plan_op *o = tm_plan_emit(b, TM_OP_MATMUL, il);
    if (!o) return;
    o->in = (int8_t)in;
    o->width = width;
    o->n_mat = (int8_t)n;
    o->out = (int8_t)outs[0];
    for (int i = 0; i < n; i++) {
        o->mat[i] = tm_mat_make(il, roles[i]);
        o->out_buf[i] = (int8_t)outs[i];
        o->out_w[i] = ws[i];
        tm_plan_use(b, outs[i], ws[i]);
    }
    tm_plan_use(b, in, width);
}

static void hadamard(tm_plan_b *b, int il, int buf, int width) {
    tm_plan_op *o = tm_plan_emit(b, TM_OP_HADAMARD, il);
    if (!o) return;
    o->in = o->out = (int8_t)buf;
    o->width = width;
    o->had = width;
}

static void out_proj(tm_plan_b *b, int il, int in, int width, tm_role_id role) {
    const int E = b->m->hp.n_embd, out = TM_BUF_DELTA;
    hadamard(b, il, in, width);
    matmul(b, il, in, width, 1, &role, &out, &E);
}

static void head_norm(tm_plan_b *b, int il, int buf, int heads, tm_role_id gain) {
    const tm_hparams *hp = &b->m->hp;
    tm_plan_op *o = tm_plan_emit(b, TM_OP_HEAD_NORM, il);
    if (!o) return;
    o->in = o->out = (int8_t)buf;
    o->width = heads * hp->head_dim;
    o->n_head = heads;
    o->head_dim = hp->head_dim;
    o->vec = tm_mat_make(il, gain);
    o->eps = hp->eps;
}

static void rope(tm_plan_b *b, int il, int buf, int heads) {
    const tm_hparams *hp = &b->m->hp;
    tm_plan_op *o = tm_plan_emit(b, TM_OP_ROPE, il);
    if (!o) return;
    o->flags = TM_OPF_PER_SEQ;
    o->in = o->out = (int8_t)buf;
    o->width = heads * hp->head_dim;
    o->n_head = heads;
    o->head_dim = hp->head_dim;
    o->rope_dims = hp->rope_dims;
    o->theta = hp->rope_theta;
}

/* full attention: q|k|v, per-head norms, RoPE, cache, softmax, [gate], o_proj */
static void attn_mixer(tm_plan_b *b, int il) {
    const tern_model *m = b->m;
    const tm_hparams *hp = &m->hp;
    const tm_layer *l = &m->layers[il];
    const int E = hp->n_embd, HD = hp->head_dim, NH = hp->n_head, NKV = hp->n_head_kv;
    const int qw = NH * HD, kvw = NKV * HD, qrows = qw * (hp->attn_gate ? 2 : 1);
    int in = site(b, il, TM_ROLE_ATTN_NORM, il == 0);
    const tm_role_id r3[3] = {TM_ROLE_WQ, TM_ROLE_WK, TM_ROLE_WV};
    const int o3[3] = {TM_BUF_BIG0, TM_BUF_K, TM_BUF_V}, w3[3] = {qrows, kvw, kvw};
    matmul(b, il, in, E, 3, r3, o3, w3);
    int q = TM_BUF_BIG0, gate = TM_BUF_NONE;
    if (hp->attn_gate) {
        tm_plan_op *o = tm_plan_emit(b, TM_OP_SPLIT_HEADS, il);
        if (o) {
            o->in = TM_BUF_BIG0;
            o->out = TM_BUF_BIG1;
            o->out2 = TM_BUF_BIG2;
            o->width = qrows;
            o->n_head = NH;
            o->head_dim = HD;
        }
        tm_plan_use(b, TM_BUF_BIG1, qw);
        tm_plan_use(b, TM_BUF_BIG2, qw);
        q = TM_BUF_BIG1;
        gate = TM_BUF_BIG2;
    }
    head_norm(b, il, q, NH, TM_ROLE_Q_NORM);
    head_norm(b, il, TM_BUF_K, NKV, TM_ROLE_K_NORM);
    rope(b, il, q, NH);
    rope(b, il, TM_BUF_K, NKV);
    tm_plan_op *o = tm_plan_emit(b, TM_OP_KV_STORE, il);
    if (o) {
        o->flags = TM_OPF_PER_SEQ;
        o->in = TM_BUF_K;
        o->in2 = TM_BUF_V;
        o->width = kvw;
        o->cache = l->kv_index;
    }
    o = tm_plan_emit(b, TM_OP_ATTENTION, il);
    if (o) {
        o->flags = TM_OPF_PER_SEQ | (gate != TM_BUF_NONE ? TM_OPF_GATED : 0);
        o->in = (int8_t)q;
        o->in2 = (int8_t)gate;
        o->out = TM_BUF_BIG3;
        /* the q rows of a back-end's fused prologue (split + norms + RoPE into one) */
        o->out2 = TM_BUF_BIG1;
        o->width = qw;
        o->n_head = NH;
        o->n_head_kv = NKV;
        o->head_dim = HD;
        o->rope_dims = hp->rope_dims;
        o->theta = hp->rope_theta;
        o->eps = hp->eps;
        o->cache = l->kv_index;
        o->scale = 1.0f / sqrtf((float)HD);
    }
    tm_plan_use(b, TM_BUF_BIG1, qw);
    tm_plan_use(b, TM_BUF_BIG3, qw);
    if (gate != TM_BUF_NONE) {
        o = tm_plan_emit(b, TM_OP_MUL_SIGMOID, il);
        if (o) {
            o->in = o->out = TM_BUF_BIG3;
            o->in2 = (int8_t)gate;
            o->width = qw;
        }
    }
    out_proj(b, il, TM_BUF_BIG3, qw, TM_ROLE_WO);
}

/* Gated DeltaNet: qkv|z, a|b (un-rotated input), conv + delta rule + gated norm,
 * [permute tiled -> grouped], out_proj */
static void gdn_mixer(tm_plan_b *b, int il) {
    const tern_model *m = b->m;
    const tm_hparams *hp = &m->hp;
    const tm_layer *l = &m->layers[il];
    const int E = hp->n_embd, nk = hp->ssm_n_k, nv = hp->ssm_n_v, dk = hp->ssm_dk, dv = hp->ssm_dv;
    const int C = 2 * nk * dk + nv * dv, VW = nv * dv;
    int in = site(b, il, TM_ROLE_ATTN_NORM, il == 0);
    const tm_role_id r2[2] = {TM_ROLE_WQKV, TM_ROLE_WZ};
    const int o2[2] = {TM_BUF_BIG0, TM_BUF_BIG1}, w2[2] = {C, VW};
    matmul(b, il, in, E, 2, r2, o2, w2);
    const tm_role_id rab[2] = {TM_ROLE_WA, TM_ROLE_WB};
    const int oab[2] = {TM_BUF_A, TM_BUF_B}, wab[2] = {nv, nv};
    matmul(b, il, TM_BUF_NORMED, E, 2, rab, oab, wab);
    tm_plan_op *o = tm_plan_emit(b, TM_OP_GDN, il);
    if (o) {
        o->flags = TM_OPF_PER_SEQ;
        o->in = TM_BUF_BIG0;
        o->in2 = TM_BUF_BIG1;
        o->in3 = TM_BUF_A;
        o->in4 = TM_BUF_B;
        o->out = TM_BUF_BIG3;
        o->out2 = TM_BUF_BIG2;
        o->width = C;
        o->vec = tm_mat_make(il, TM_ROLE_CONV);
        o->n_head = nk;
        o->n_head_kv = nv;
        o->head_dim = dk;
        o->dv = dv;
        o->conv_k = hp->conv_k;
        o->cache = l->gdn_index;
        o->eps = hp->eps;
    }
    tm_plan_use(b, TM_BUF_BIG2, C);
    tm_plan_use(b, TM_BUF_BIG3, VW);
    int out = TM_BUF_BIG3;
    if (m->out_permute) {
        o = tm_plan_emit(b, TM_OP_PERMUTE, il);
        if (o) {
            o->in = TM_BUF_BIG3;
            o->out = TM_BUF_BIG2;
            o->width = VW;
            o->n_head = nk;
            o->n_head_kv = nv;
            o->dv = dv;
        }
        out = TM_BUF_BIG2;
    }
    out_proj(b, il, out, VW, TM_ROLE_WOUT);
}

/* the FFN block: gate|up, act (+ transform), down */
static void ffn(tm_plan_b *b, int il, tm_act_kind act) {
    const tern_model *m = b->m;
    const int E = m->hp.n_embd, F = m->hp.n_ff;
    int in = site(b, il, TM_ROLE_POST_NORM, false);
    const tm_role_id r2[2] = {TM_ROLE_WGATE, TM_ROLE_WUP};
    const int o2[2] = {TM_BUF_BIG0, TM_BUF_BIG1}, w2[2] = {F, F};
    matmul(b, il, in, E, 2, r2, o2, w2);
    tm_plan_op *o = tm_plan_emit(b, TM_OP_ACT, il);
    if (o) {
        o->in = TM_BUF_BIG0;
        o->in2 = TM_BUF_BIG1;
        o->out = TM_BUF_BIG2;
        o->width = F;
        o->had = F;
        o->act = (int8_t)act;
    }
    tm_plan_use(b, TM_BUF_BIG2, F);
    const tm_role_id rd = TM_ROLE_WDOWN;
    const int od = TM_BUF_DELTA;
    matmul(b, il, TM_BUF_BIG2, F, 1, &rd, &od, &E);
}

typedef struct tm_plan_rules {
    tm_arch arch;
    void (*attn)(tm_plan_b *b, int il);  /* the attention layers' mixer */
    void (*gdn)(tm_plan_b *b, int il);   /* the GDN layers' mixer (NULL: none) */
    tm_act_kind act;                     /* the FFN's activation */
} tm_plan_rules;

static const tm_plan_rules g_rules[] = {
    {TM_ARCH_QWEN35, attn_mixer, gdn_mixer, TM_ACT_SWIGLU},
    {TM_ARCH_QWEN3, attn_mixer, NULL, TM_ACT_SWIGLU},
};

tern_status tm_plan_rules_layers(tm_plan_b *b) {
    const tern_model *m = b->m;
    const tm_plan_rules *r = NULL;
    for (size_t i = 0; i < sizeof g_rules / sizeof g_rules[0]; i++)
        if (g_rules[i].arch == m->hp.arch) r = &g_rules[i];
    if (!r) return tern_fail(TERN_ERR_UNSUPPORTED, "architecture %d has no plan rules", (int)m->hp.arch);
    const tm_act_kind act = b->act_override >= 0 ? (tm_act_kind)b->act_override : r->act;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const int n0 = b->n;
        const bool attn = m->layers[il].is_attn;
        if (!attn && !r->gdn)
            return tern_fail(TERN_ERR_UNSUPPORTED, "layer %d: a GDN layer in an architecture without them", il);
        (attn ? r->attn : r->gdn)(b, il);
        ffn(b, il, act);
        b->layer_ops[attn ? 0 : 1] = b->n - n0;
    }
    return TERN_OK;
}
