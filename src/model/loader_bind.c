/*
 * loader_bind.c - one walk over the architecture table (arch/arch.h) that binds
 * every role to its tm_model / tm_layer field, for any tensor source (GGUF,
 * MLX pack): shapes come from the table and the hyperparameters, the layer kind
 * (attention or GDN) from the table's rule, the tied head from the optional
 * output role.
 */
#include "model/loader.h"

#include <stdlib.h>

tm_dims tm_model_dims(const tern_model *m) {
    const tm_hparams *hp = &m->hp;
    tm_dims d = {.embd = hp->n_embd, .ff = hp->n_ff, .vocab = hp->n_vocab, .n_head = hp->n_head,
                 .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim, .ssm_n_k = hp->ssm_n_k,
                 .ssm_n_v = hp->ssm_n_v, .ssm_dk = hp->ssm_dk, .ssm_dv = hp->ssm_dv,
                 .conv_k = hp->conv_k, .attn_gate = hp->attn_gate};
    return d;
}

const tm_arch_desc *tm_model_arch(const tern_model *m) { return tm_arch_get(m->hp.arch); }

/* The field a role binds to (l NULL: top level). */
tern_qmat *tm_model_mat_slot(tern_model *m, tm_layer *l, tm_role_id id) {
    switch (id) {
    case TM_ROLE_TOKEN_EMBD: return &m->tok_embd;
    case TM_ROLE_OUTPUT: return &m->output;
    default: break;
    }
    if (!l) return NULL;
    switch (id) {
    case TM_ROLE_WQ: return &l->wq;
    case TM_ROLE_WK: return &l->wk;
    case TM_ROLE_WV: return &l->wv;
    case TM_ROLE_WO: return &l->wo;
    case TM_ROLE_WQKV: return &l->wqkv;
    case TM_ROLE_WZ: return &l->wz;
    case TM_ROLE_WA: return &l->wa;
    case TM_ROLE_WB: return &l->wb;
    case TM_ROLE_WOUT: return &l->wout;
    case TM_ROLE_WGATE: return &l->wgate;
    case TM_ROLE_WUP: return &l->wup;
    case TM_ROLE_WDOWN: return &l->wdown;
    default: return NULL;
    }
}

const float **tm_model_vec_slot(tern_model *m, tm_layer *l, tm_role_id id) {
    if (id == TM_ROLE_OUTPUT_NORM) return &m->output_norm;
    if (!l) return NULL;
    switch (id) {
    case TM_ROLE_ATTN_NORM: return &l->attn_norm;
    case TM_ROLE_POST_NORM: return &l->post_norm;
    case TM_ROLE_Q_NORM: return &l->q_norm;
    case TM_ROLE_K_NORM: return &l->k_norm;
    case TM_ROLE_CONV: return &l->conv;
    case TM_ROLE_SSM_A: return &l->ssm_a;
    case TM_ROLE_DT_BIAS: return &l->dt_bias;
    case TM_ROLE_SSM_NORM: return &l->ssm_norm;
    default: return NULL;
    }
}

static tern_status bind(tern_model *m, const tm_src *s, tm_layer *l, const tm_role *r, int il, const tm_dims *d) {
    int64_t k, n;
    tm_role_shape(r, d, &k, &n);
    if (r->val == TM_VAL_TERNARY || r->val == TM_VAL_DENSE) {
        tern_qmat *q = tm_model_mat_slot(m, l, r->id);
        if (!q) return tern_fail(TERN_ERR_INTERNAL, "%s: role %d has no matrix slot", s->path, (int)r->id);
        tern_status st = s->mat(s->u, r, il, k, n, q);
        if (!st) m->mat_elems += (uint64_t)q->k * (uint64_t)q->n; /* an optional one absent: 0 x 0 */
        return st;
    }
    const float **v = tm_model_vec_slot(m, l, r->id);
    if (!v) return tern_fail(TERN_ERR_INTERNAL, "%s: role %d has no vector slot", s->path, (int)r->id);
    return s->vec(s->u, r, il, k * n, v);
}

tern_status tm_bind_tensors(tern_model *m, const tm_src *s) {
    const tm_arch_desc *a = tm_model_arch(m);
    tm_hparams *hp = &m->hp;
    if (!a) return tern_fail(TERN_ERR_INTERNAL, "%s: unknown architecture", s->path);
    tm_dims d = tm_model_dims(m);
    d.vocab = 0;
    for (int i = 0; i < a->n_roles; i++) {
        const tm_role *r = a->roles[i];
        if (r->lk != TM_LK_TOP) continue;
        TRY(bind(m, s, NULL, r, 0, &d));
        if (r->id == TM_ROLE_TOKEN_EMBD) {
            hp->n_vocab = (int)m->tok_embd.n;
            d.vocab = hp->n_vocab;
        }
    }
    if (!m->output.data) { /* tied head */
        if (m->hadamard)
            return tern_fail(TERN_ERR_UNSUPPORTED, "%s: tied head with a Hadamard rotation is not supported",
                             s->path);
        m->output = m->tok_embd;
    }
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    m->info.alloc_bytes += (uint64_t)hp->n_layer * sizeof *m->layers;
    if (!m->layers) return tern_fail(TERN_ERR_NOMEM, "out of memory");
    for (int il = 0; il < hp->n_layer; il++) {
        tm_layer *l = &m->layers[il];
        l->is_attn = tm_arch_layer_is_attn(a, il, hp->full_attn_interval);
        if (l->is_attn) l->kv_index = hp->n_attn_layers++;
        else l->gdn_index = hp->n_gdn_layers++;
        for (int i = 0; i < a->n_roles; i++)
            if (tm_role_in_layer(a->roles[i], l->is_attn)) TRY(bind(m, s, l, a->roles[i], il, &d));
        TRY(tm_load_progress(m, il + 1, hp->n_layer));
    }
    if (a->hybrid && hp->n_attn_layers == 0 && hp->n_layer >= hp->full_attn_interval)
        return tern_fail(TERN_ERR_INTERNAL, "no attention layers");
    return TERN_OK;
}
