/*
 * layers.c - the layer-sized operations of the seam (backend.h), written once on top of
 * a back-end's op-sized building blocks (be->ops). The CPU back-end's table uses these
 * as they are; a GPU back-end uses them for whatever it does not fuse.
 *
 * Per layer (pre-norm residual; the residual add is deferred into the next norm):
 *   site 1: r += delta; n = rmsnorm(r)*attn_norm; x' = H(n)        (x' = n without Hadamard)
 *   attention: q|gate, k, v = W x'; per-head q/k norm; RoPE; cache; softmax;
 *              o *= sigmoid(gate); delta = Wo H(o)
 *   GDN:       qkv, z = W x'; a, b = W n (un-rotated); conv+SiLU, delta rule,
 *              gated norm; [permute tiled->grouped]; delta = Wout H(o)
 *   site 2: r += delta; n = rmsnorm(r)*post_norm; x' = H(n)
 *   MLP:       gate, up = W x'; act = H(silu(gate)*up); delta = Wdown act
 * Head: r += delta; n = rmsnorm(r)*output_norm; logits = Wout H(n).
 * Layer 0's site 1 has no delta (the embedding is the residual).
 */
#include "model/session.h"

#include <math.h>

/* The repacked copy when the model has one (tern_model_params.repack): its kernels
 * serve every batch size, and the file pages of a repacked matrix are dropped. */
static inline const tern_qmat *pick(const tern_qmat *file, const tern_qmat *fast, bool decode) {
    (void)decode;
    return fast->data ? fast : file;
}

static inline float *mm_in(const tern_model *m, tern_session *w) {
    return m->hadamard ? w->rot : w->normed; /* input of the ternary matmuls */
}

tern_status tm_layers_embed(tm_backend *be, const tm_step *st) {
    const tern_model *m = st->w->m;
    const int E = m->hp.n_embd;
    return be->ops->embed(be, &m->tok_embd, st->tokens, (size_t)st->T, st->w->x,
                          (size_t)m->had_block, m->embd_inverse ? tm_model_signs(m, E) : NULL);
}

static void site(tm_backend *be, const tm_step *st, const float *gain, bool first) {
    tern_session *w = st->w;
    const tern_model *m = w->m;
    const int E = m->hp.n_embd;
    be->ops->add_rmsnorm_hadamard(be, w->x, first ? NULL : w->delta, gain, m->hp.eps, w->normed,
                                  w->rot, (size_t)st->T, (size_t)E, (size_t)m->had_block,
                                  tm_model_signs(m, E));
}

void tm_layers_attn_mixer(tm_backend *be, const tm_step *st, const tm_layer *l) {
    tern_session *w = st->w;
    const tern_model *m = w->m;
    const tm_hparams *hp = &m->hp;
    const tm_ops *o = be->ops;
    const int E = hp->n_embd, HD = hp->head_dim, NH = hp->n_head, NKV = hp->n_head_kv;
    const int T = st->T, R = st->R;
    const bool dec = st->dec;
    const size_t blk = (size_t)m->had_block;
    site(be, st, l->attn_norm, l == &m->layers[0]);
    float *in = mm_in(m, w);
    const int qw = NH * HD, kvw = NKV * HD;
    const int qrows = (int)l->wq.n;
    const tern_qmat *w3[3] = {pick(&l->wq, &l->fast_wq, dec), pick(&l->wk, &l->fast_wk, dec),
                              pick(&l->wv, &l->fast_wv, dec)};
    float *y3[3] = {w->big0, w->kbuf, w->vbuf};
    size_t ys3[3] = {(size_t)qrows, (size_t)kvw, (size_t)kvw};
    o->matmul_multi(be, 3, w3, in, (size_t)T, (size_t)E, y3, ys3);
    float *q = w->big0, *gate = NULL;
    if (hp->attn_gate) {
        o->split_heads(be, w->big0, (size_t)T, NH, HD, w->big1, w->big2);
        q = w->big1;
        gate = w->big2;
    }
    o->head_rmsnorm(be, q, (size_t)T, (size_t)qw, NH, HD, l->q_norm, hp->eps);
    o->head_rmsnorm(be, w->kbuf, (size_t)T, (size_t)kvw, NKV, HD, l->k_norm, hp->eps);
    for (int i = 0; i < st->n_seq; i++) {
        tern_session *s = st->ss[i];
        const int r0 = i, pos0 = s->pos;
        float *qi = q + (size_t)r0 * qw, *ki = w->kbuf + (size_t)r0 * kvw;
        float *vi = w->vbuf + (size_t)r0 * kvw;
        o->rope(be, qi, (size_t)R, (size_t)qw, NH, HD, hp->rope_dims, pos0, hp->rope_theta);
        o->rope(be, ki, (size_t)R, (size_t)kvw, NKV, HD, hp->rope_dims, pos0, hp->rope_theta);
        uint8_t *kc = (uint8_t *)s->kcache + (size_t)l->kv_index * s->n_ctx * s->k_row;
        uint8_t *vc = (uint8_t *)s->vcache + (size_t)l->kv_index * s->n_ctx * s->v_row;
        o->kv_store(be, kc, vc, s->k_type, s->v_type, ki, vi, (size_t)kvw, (size_t)R, pos0);
        tm_attn_args aa = {.q = qi, .q_stride = (size_t)qw, .kcache = kc, .vcache = vc,
                           .k_type = s->k_type, .v_type = s->v_type,
                           .out = w->big3 + (size_t)r0 * qw, .rows = R, .pos0 = pos0,
                           .n_head = NH, .n_head_kv = NKV, .head_dim = HD,
                           .scale = 1.0f / sqrtf((float)HD), .scratch = s->att_scratch};
        o->attention(be, &aa);
    }
    if (gate) o->mul_sigmoid(be, w->big3, gate, (size_t)T, (size_t)qw);
    o->hadamard(be, w->big3, (size_t)T, (size_t)qw, blk, tm_model_signs(m, qw));
    o->matmul(be, pick(&l->wo, &l->fast_wo, dec), w->big3, (size_t)T, (size_t)qw, w->delta,
              (size_t)E);
}

void tm_layers_gdn_mixer(tm_backend *be, const tm_step *st, const tm_layer *l) {
    tern_session *w = st->w;
    const tern_model *m = w->m;
    const tm_hparams *hp = &m->hp;
    const tm_ops *o = be->ops;
    const int E = hp->n_embd, T = st->T, R = st->R;
    const bool dec = st->dec;
    const size_t blk = (size_t)m->had_block;
    site(be, st, l->attn_norm, l == &m->layers[0]);
    float *in = mm_in(m, w);
    const int nk = hp->ssm_n_k, nv = hp->ssm_n_v, dk = hp->ssm_dk, dv = hp->ssm_dv;
    const int C = 2 * nk * dk + nv * dv, VW = nv * dv;
    const tern_qmat *w2[2] = {pick(&l->wqkv, &l->fast_wqkv, dec), pick(&l->wz, &l->fast_wz, dec)};
    float *y2[2] = {w->big0, w->big1};
    size_t ys2[2] = {(size_t)C, (size_t)VW};
    o->matmul_multi(be, 2, w2, in, (size_t)T, (size_t)E, y2, ys2);
    float *a = w->ab, *b = w->ab + (size_t)T * nv;
    const tern_qmat *wab[2] = {&l->wa, &l->wb};
    float *yab[2] = {a, b};
    size_t ysab[2] = {(size_t)nv, (size_t)nv};
    o->matmul_multi(be, 2, wab, w->normed, (size_t)T, (size_t)E, yab, ysab);
    size_t conv_n = (size_t)(hp->conv_k - 1) * C;
    size_t st_n = be->vt->gdn_state_floats(be, hp);
    for (int i = 0; i < st->n_seq; i++) {
        tern_session *s = st->ss[i];
        const size_t r0 = (size_t)i;
        tm_gdn_args ga = {.qkv = w->big0 + r0 * C, .z = w->big1 + r0 * VW,
                          .a = a + r0 * nv, .b = b + r0 * nv, .conv_w = l->conv,
                          .ssm_a = l->ssm_a, .dt_bias = l->dt_bias, .norm = l->ssm_norm,
                          .conv_state = s->conv_state + (size_t)l->gdn_index * conv_n,
                          .state = s->ssm_state + (size_t)l->gdn_index * st_n,
                          .out = w->big3 + r0 * VW, .work = w->big2 + r0 * C,
                          .rows = R, .n_k = nk, .n_v = nv, .dk = dk, .dv = dv,
                          .conv_k = hp->conv_k, .v_tiled = m->v_tiled, .eps = hp->eps};
        o->gdn(be, &ga);
    }
    float *out = w->big3;
    if (m->out_permute) {
        o->permute_tiled_grouped(be, w->big3, w->big2, (size_t)T, nk, nv, dv);
        out = w->big2;
    }
    o->hadamard(be, out, (size_t)T, (size_t)VW, blk, tm_model_signs(m, VW));
    o->matmul(be, pick(&l->wout, &l->fast_wout, dec), out, (size_t)T, (size_t)VW, w->delta,
              (size_t)E);
}

void tm_layers_ffn(tm_backend *be, const tm_step *st, const tm_layer *l) {
    tern_session *w = st->w;
    const tern_model *m = w->m;
    const tm_ops *o = be->ops;
    const int E = m->hp.n_embd, F = m->hp.n_ff, T = st->T;
    const bool dec = st->dec;
    site(be, st, l->post_norm, false);
    float *in = mm_in(m, w);
    const tern_qmat *wgu[2] = {pick(&l->wgate, &l->fast_wgate, dec), pick(&l->wup, &l->fast_wup, dec)};
    float *ygu[2] = {w->big0, w->big1};
    size_t ysgu[2] = {(size_t)F, (size_t)F};
    o->matmul_multi(be, 2, wgu, in, (size_t)T, (size_t)E, ygu, ysgu);
    o->swiglu_hadamard(be, w->big0, w->big1, w->big2, (size_t)T, (size_t)F,
                       (size_t)m->had_block, tm_model_signs(m, F));
    o->matmul(be, pick(&l->wdown, &l->fast_wdown, dec), w->big2, (size_t)T, (size_t)F, w->delta,
              (size_t)E);
}

void tm_layers_head_rows(tm_backend *be, const tm_step *st, float *logits, bool all_rows) {
    tern_session *w = st->w;
    const tern_model *m = w->m;
    const tm_hparams *hp = &m->hp;
    const tm_ops *o = be->ops;
    const size_t E = (size_t)hp->n_embd, V = (size_t)hp->n_vocab, blk = (size_t)m->had_block;
    const float *sE = tm_model_signs(m, (int64_t)E);
    float *in = mm_in(m, w);
    if (all_rows) {
        o->add_rmsnorm_hadamard(be, w->x, w->delta, m->output_norm, hp->eps, w->normed, w->rot,
                                (size_t)st->T, E, blk, sE);
        o->matmul(be, pick(&m->output, &m->fast_output, st->dec), in, (size_t)st->T, E, logits, V);
    } else {
        size_t lo = (size_t)(st->T - 1) * E;
        o->add_rmsnorm_hadamard(be, w->x + lo, w->delta + lo, m->output_norm, hp->eps,
                                w->normed + lo, w->rot + lo, 1, E, blk, sE);
        o->matmul(be, pick(&m->output, &m->fast_output, true), in + lo, 1, E, logits, V);
    }
}

/* Host memory: the logits go straight to the caller's rows or the session's row. */
tern_status tm_layers_head_host(tm_backend *be, const tm_step *st) {
    const size_t V = (size_t)st->w->m->hp.n_vocab;
    if (!st->rows_out) {
        TERN_ASSERT(st->n_seq == 1 && st->ss[0] == st->w);
        tm_layers_head_rows(be, st, st->w->logits, false);
        return TERN_OK;
    }
    tm_layers_head_rows(be, st, st->rows_out, true);
    for (int i = 0; i < st->n_seq; i++) {
        const float *last = st->rows_out + (size_t)(i + st->R - 1) * V;
        be->ops->copy_rows(be, st->ss[i]->logits, V, last, V, 1, V);
    }
    return TERN_OK;
}
