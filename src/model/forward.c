/*
 * forward.c - the qwen35 (hybrid GDN + gated attention) and qwen3 (dense)
 * forward pass over one chunk of T tokens (or one token of each of n sessions),
 * written against the back-end table (backend.h) only. Matmuls run batched over
 * the chunk; the GDN recurrence (block-wise scan or token walk, the back-end's
 * choice) and causal attention run inside the back-end.
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
 *
 * Batched decode (tm_forward_batch): the same pass over n rows that are n sessions'
 * next tokens, one each; the matmuls, norms, Hadamard sites and SwiGLU run over all
 * n rows (the weights are read once for all of them), while RoPE, the KV-cache store,
 * attention and the GDN conv + recurrence run once per session with rows = 1 at its
 * own position, on its own caches and states. The scratch is the lead session's.
 *
 * Single-token steps on a back-end with step graphs (CUDA, TERN_CUDA_GRAPH=1): the
 * first step of a session runs op by op (it sizes the workspaces), the second is
 * recorded into a graph, and every later step replays it (tm_forward_chunk).
 */
#include "model/session.h"

#include <math.h>

/* The decode-layout copy for single-token steps when the model has one. */
static inline const tern_qmat *pick(const tern_qmat *file, const tern_qmat *fast, bool decode) {
    return decode && fast->data ? fast : file;
}

/* One pass of T rows through the model, using w's scratch buffers. The rows are
 * either one sequence (n_seq == 1: ss[0]'s tokens at positions pos..pos+T-1, a
 * chunk) or T sequences of one row each (n_seq == T: row i is ss[i]'s token at its
 * own position, a batch). Everything positional (RoPE, KV cache, attention, GDN
 * conv + state) runs per sequence; everything else over all T rows at once.
 * rows_out (host, may be NULL): all T rows of logits go there and each sequence's
 * last row to its s->logits; NULL (one sequence only): the last row alone is
 * computed, into s->logits.
 * recording: queue a single-token step into a graph being recorded (no download,
 * no sync: graph_end adds the logits copy). */
static tern_status forward_pass(tern_session *w, tern_session *const *ss, int n_seq,
                                const int32_t *tokens, int T, bool dec, float *rows_out,
                                bool recording) {
    tern_model *m = w->m;
    const tm_hparams *hp = &m->hp;
    const tern_backend *be = m->be;
    tern_pool *pool = m->pool;
    const int E = hp->n_embd, HD = hp->head_dim, NH = hp->n_head, NKV = hp->n_head_kv;
    const size_t blk = (size_t)m->had_block;
    const bool had = m->hadamard;
    float *in = had ? w->rot : w->normed; /* input of the ternary matmuls */
    TERN_ASSERT(n_seq == 1 || n_seq == T);
    const int R = n_seq == 1 ? T : 1;     /* rows per sequence; sequence i starts at row i */

    tern_status st = be->embed(pool, &m->tok_embd, tokens, (size_t)T, w->x, blk,
                               m->embd_inverse ? tm_model_signs(m, E) : NULL);
    if (st) return st;

    const float *sE = tm_model_signs(m, E);
    for (int il = 0; il < hp->n_layer; il++) {
        const tm_layer *l = &m->layers[il];
        be->add_rmsnorm_hadamard(pool, w->x, il ? w->delta : NULL, l->attn_norm, hp->eps,
                                 w->normed, w->rot, (size_t)T, (size_t)E, blk, sE);
        if (l->is_attn) {
            const int qw = NH * HD, kvw = NKV * HD;
            const int qrows = (int)l->wq.n;
            const tern_qmat *w3[3] = {pick(&l->wq, &l->fast_wq, dec), pick(&l->wk, &l->fast_wk, dec),
                                      pick(&l->wv, &l->fast_wv, dec)};
            float *y3[3] = {w->big0, w->kbuf, w->vbuf};
            size_t ys3[3] = {(size_t)qrows, (size_t)kvw, (size_t)kvw};
            be->matmul_multi(pool, 3, w3, in, (size_t)T, (size_t)E, y3, ys3);
            float *q = w->big0, *gate = NULL;
            if (hp->attn_gate) {
                be->split_heads(w->big0, (size_t)T, NH, HD, w->big1, w->big2);
                q = w->big1;
                gate = w->big2;
            }
            be->head_rmsnorm(pool, q, (size_t)T, (size_t)qw, NH, HD, l->q_norm, hp->eps);
            be->head_rmsnorm(pool, w->kbuf, (size_t)T, (size_t)kvw, NKV, HD, l->k_norm, hp->eps);
            for (int i = 0; i < n_seq; i++) {
                tern_session *s = ss[i];
                const int r0 = i, pos0 = s->pos;
                float *qi = q + (size_t)r0 * qw, *ki = w->kbuf + (size_t)r0 * kvw;
                float *vi = w->vbuf + (size_t)r0 * kvw;
                be->rope(pool, qi, (size_t)R, (size_t)qw, NH, HD, hp->rope_dims, pos0,
                         hp->rope_theta);
                be->rope(pool, ki, (size_t)R, (size_t)kvw, NKV, HD, hp->rope_dims, pos0,
                         hp->rope_theta);
                size_t layer_off = (size_t)l->kv_index * s->n_ctx * kvw;
                float *kc = s->kcache + layer_off, *vc = s->vcache + layer_off;
                if (be->kv_store) {
                    be->kv_store(kc, vc, ki, vi, (size_t)kvw, (size_t)R, pos0);
                } else {
                    be->copy_rows(kc + (size_t)pos0 * kvw, (size_t)kvw, ki, (size_t)kvw,
                                  (size_t)R, (size_t)kvw);
                    be->copy_rows(vc + (size_t)pos0 * kvw, (size_t)kvw, vi, (size_t)kvw,
                                  (size_t)R, (size_t)kvw);
                }
                tm_attn_args aa = {.q = qi, .q_stride = (size_t)qw, .kcache = kc, .vcache = vc,
                                   .out = w->big3 + (size_t)r0 * qw, .rows = R, .pos0 = pos0,
                                   .n_head = NH, .n_head_kv = NKV, .head_dim = HD,
                                   .scale = 1.0f / sqrtf((float)HD), .scratch = s->att_scratch};
                be->attention(pool, &aa);
            }
            if (gate) be->mul_sigmoid(w->big3, gate, (size_t)T, (size_t)qw);
            be->hadamard(pool, w->big3, (size_t)T, (size_t)qw, blk, tm_model_signs(m, qw));
            be->matmul(pool, pick(&l->wo, &l->fast_wo, dec), w->big3, (size_t)T, (size_t)qw, w->delta, (size_t)E);
        } else {
            const int nk = hp->ssm_n_k, nv = hp->ssm_n_v, dk = hp->ssm_dk, dv = hp->ssm_dv;
            const int C = 2 * nk * dk + nv * dv, VW = nv * dv;
            const tern_qmat *w2[2] = {pick(&l->wqkv, &l->fast_wqkv, dec), pick(&l->wz, &l->fast_wz, dec)};
            float *y2[2] = {w->big0, w->big1};
            size_t ys2[2] = {(size_t)C, (size_t)VW};
            be->matmul_multi(pool, 2, w2, in, (size_t)T, (size_t)E, y2, ys2);
            float *a = w->ab, *b = w->ab + (size_t)T * nv;
            const tern_qmat *wab[2] = {&l->wa, &l->wb};
            float *yab[2] = {a, b};
            size_t ysab[2] = {(size_t)nv, (size_t)nv};
            be->matmul_multi(pool, 2, wab, w->normed, (size_t)T, (size_t)E, yab, ysab);
            size_t conv_n = (size_t)(hp->conv_k - 1) * C;
            size_t st_n = (size_t)nv * dk * dv;
            for (int i = 0; i < n_seq; i++) {
                tern_session *s = ss[i];
                const size_t r0 = (size_t)i;
                tm_gdn_args ga = {.qkv = w->big0 + r0 * C, .z = w->big1 + r0 * VW,
                                  .a = a + r0 * nv, .b = b + r0 * nv, .conv_w = l->conv,
                                  .ssm_a = l->ssm_a, .dt_bias = l->dt_bias, .norm = l->ssm_norm,
                                  .conv_state = s->conv_state + (size_t)l->gdn_index * conv_n,
                                  .state = s->ssm_state + (size_t)l->gdn_index * st_n,
                                  .pending = s->ssm_pending + (size_t)l->gdn_index * nv * (1 + dk + dv),
                                  .out = w->big3 + r0 * VW, .work = w->big2 + r0 * C,
                                  .rows = R, .n_k = nk, .n_v = nv, .dk = dk, .dv = dv,
                                  .conv_k = hp->conv_k, .v_tiled = m->v_tiled, .eps = hp->eps};
                be->gdn(pool, &ga);
            }
            float *o = w->big3;
            if (m->out_permute) {
                be->permute_tiled_grouped(w->big3, w->big2, (size_t)T, nk, nv, dv);
                o = w->big2;
            }
            be->hadamard(pool, o, (size_t)T, (size_t)VW, blk, tm_model_signs(m, VW));
            be->matmul(pool, pick(&l->wout, &l->fast_wout, dec), o, (size_t)T, (size_t)VW, w->delta, (size_t)E);
        }
        /* MLP */
        be->add_rmsnorm_hadamard(pool, w->x, w->delta, l->post_norm, hp->eps, w->normed, w->rot,
                                 (size_t)T, (size_t)E, blk, sE);
        const int F = hp->n_ff;
        const tern_qmat *wgu[2] = {pick(&l->wgate, &l->fast_wgate, dec), pick(&l->wup, &l->fast_wup, dec)};
        float *ygu[2] = {w->big0, w->big1};
        size_t ysgu[2] = {(size_t)F, (size_t)F};
        be->matmul_multi(pool, 2, wgu, in, (size_t)T, (size_t)E, ygu, ysgu);
        be->swiglu_hadamard(pool, w->big0, w->big1, w->big2, (size_t)T, (size_t)F, blk,
                            tm_model_signs(m, F));
        be->matmul(pool, pick(&l->wdown, &l->fast_wdown, dec), w->big2, (size_t)T, (size_t)F, w->delta, (size_t)E);
    }
    /* head: on a device back-end the logits land in dlogits and come home once */
    const size_t V = (size_t)hp->n_vocab;
    const bool dev = w->dlogits != NULL;
    if (rows_out) {
        float *lg = dev ? w->dlogits : rows_out;
        be->add_rmsnorm_hadamard(pool, w->x, w->delta, m->output_norm, hp->eps, w->normed, w->rot,
                                 (size_t)T, (size_t)E, blk, sE);
        be->matmul(pool, pick(&m->output, &m->fast_output, dec), in, (size_t)T, (size_t)E, lg, V);
        if (dev) st = tm_be_download(be, rows_out, w->dlogits, (size_t)T * V * sizeof(float));
        for (int i = 0; i < n_seq && !st; i++) {
            const float *last = rows_out + (size_t)(i + R - 1) * V;
            if (dev) memcpy(ss[i]->logits, last, V * sizeof(float));
            else be->copy_rows(ss[i]->logits, V, last, V, 1, V);
        }
    } else {
        TERN_ASSERT(n_seq == 1 && ss[0] == w);
        size_t lo = (size_t)(T - 1) * E;
        be->add_rmsnorm_hadamard(pool, w->x + lo, w->delta + lo, m->output_norm, hp->eps,
                                 w->normed + lo, w->rot + lo, 1, (size_t)E, blk, sE);
        be->matmul(pool, pick(&m->output, &m->fast_output, true), in + lo, 1, (size_t)E,
                   dev ? w->dlogits : w->logits, V);
        if (recording) return TERN_OK;
        if (dev) st = tm_be_download(be, w->logits, w->dlogits, V * sizeof(float));
    }
    tern_status sst = tm_be_sync(be);
    return st ? st : sst;
}

/* One session's chunk of T tokens at its position. */
static tern_status chunk_pass(tern_session *s, const int32_t *tokens, int T, float *logits_out,
                              bool recording) {
    return forward_pass(s, &s, 1, tokens, T, T == 1, logits_out, recording);
}

tern_status tm_forward_batch(tern_session *w, tern_session *const *s, const int32_t *tokens, int n,
                             float *logits_rows) {
    TERN_ASSERT(n >= 1 && n <= w->n_chunk && logits_rows);
    return forward_pass(w, s, n, tokens, n, true, logits_rows, false);
}

tern_status tm_forward_chunk(tern_session *s, const int32_t *tokens, int T, float *logits_out) {
    const tern_backend *be = s->m->be;
    if (T != 1 || logits_out || !be->graph_begin || !s->dlogits || s->graph_state < 0)
        return chunk_pass(s, tokens, T, logits_out, false);
    const size_t V = (size_t)s->m->hp.n_vocab;
    bool ran = false;
    tern_status st;
    if (s->graph) {
        st = be->graph_run(s->graph, s->pos, tokens[0], s->logits, &ran);
        if (st || ran) return st;
        be->graph_free(s->graph); /* stale: record again */
        s->graph = NULL;
    } else if (s->graph_state == 0) {
        s->graph_state = 1; /* the first step runs op by op: it sizes the workspaces */
        return chunk_pass(s, tokens, 1, NULL, false);
    }
    void *g = NULL;
    st = be->graph_begin(s->pos, tokens[0], V, &g);
    if (!st) {
        st = chunk_pass(s, tokens, 1, NULL, true);
        tern_status e = be->graph_end(g, s->dlogits); /* ends the recording in any case */
        if (!st) st = e;
        else if (!e) be->graph_free(g);
    }
    if (st) {
        /* graphs off (or not recordable) for this session: op by op from here on */
        if (st != TERN_ERR_UNSUPPORTED)
            tern_log(TERN_LOG_WARN, "step graphs off for this session: %s", tern_last_error());
        tern_clear_error();
        s->graph_state = -1;
        return chunk_pass(s, tokens, 1, NULL, false);
    }
    s->graph = g;
    st = be->graph_run(g, s->pos, tokens[0], s->logits, &ran);
    if (st || ran) return st;
    return chunk_pass(s, tokens, 1, NULL, false);
}
