/*
 * forward.c - one forward pass of the qwen35 (hybrid GDN + gated attention) or qwen3
 * (dense) model over one chunk of T tokens, or one token of each of n sessions, as a
 * sequence of the back-end's layer-sized operations (backend.h): embed, then per layer
 * the mixer (attention or GDN) and the FFN block, then the head. What each operation
 * does is in layers.c; how the step is queued, graphed and read back is the back-end's
 * (tm_backend_vt.run_step). Nothing here knows which back-end runs.
 *
 * Batched decode (tm_forward_batch): the same pass over n rows that are n sessions'
 * next tokens, one each; matmuls, norms, Hadamard sites and SwiGLU run over all n rows
 * (the weights are read once for all of them), while RoPE, the KV-cache store,
 * attention and the GDN conv + recurrence run once per session at its own position, on
 * its own caches and states. The scratch is the lead session's.
 */
#include "model/session.h"

static tern_status layers(tm_backend *be, const tm_step *st) {
    const tern_model *m = st->w->m;
    const tm_backend_vt *vt = be->vt;
    tern_status s = vt->embed(be, st);
    if (s) return s;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const tm_layer *l = &m->layers[il];
        if (l->is_attn) vt->attn_mixer(be, st, l);
        else vt->gdn_mixer(be, st, l);
        vt->ffn(be, st, l);
    }
    return vt->head(be, st);
}

static tern_status run(tm_step *st) {
    tm_backend *be = st->w->m->be;
    if (be->vt->run_step) return be->vt->run_step(be, st, layers);
    tern_status s = layers(be, st);
    tern_status ss = tm_be_sync(be);
    return s ? s : ss;
}

tern_status tm_forward_batch(tern_session *w, tern_session *const *s, const int32_t *tokens, int n,
                             float *logits_rows) {
    TERN_ASSERT(n >= 1 && n <= w->n_chunk && logits_rows);
    tm_step st = {.w = w, .ss = s, .n_seq = n, .T = n, .R = 1, .tokens = tokens, .dec = true,
                  .rows_out = logits_rows};
    return run(&st);
}

tern_status tm_forward_chunk(tern_session *s, const int32_t *tokens, int T, float *logits_out) {
    tm_step st = {.w = s, .ss = &s, .n_seq = 1, .T = T, .R = T, .tokens = tokens, .dec = T == 1,
                  .rows_out = logits_out};
    return run(&st);
}
