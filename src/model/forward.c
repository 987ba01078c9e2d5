/*
 * forward.c - one forward pass over one chunk of T tokens of a sequence, or one token
 * of each of n sessions, as one step of the model's plan (plan.h): the back-end runs it
 * (tm_backend_vt.run_step / exec: op by op, fused, sharded or graphed, its business).
 * Nothing here knows which back-end runs.
 *
 * Batched decode (tm_forward_batch): the same pass over n rows that are n sessions'
 * next tokens, one each; matmuls, norms, Hadamard sites and SwiGLU run over all n rows
 * (the weights are read once for all of them), while RoPE, the KV-cache store,
 * attention and the GDN conv + recurrence run once per session at its own position, on
 * its own caches and states. The scratch is the lead session's.
 */
#include "model/session.h"

static tern_status run(tm_step *st) {
    tm_backend *be = st->w->m->be;
    const tm_backend_vt *vt = be->vt;
    if (vt->run_step) return vt->run_step(be, st);
    tern_status s = vt->exec ? vt->exec(be, st) : tm_plan_exec(be, st);
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

tern_status tm_forward_verify(tern_session *s, const int32_t *tokens, int T, float *logits_out,
                              const float **rows_at) {
    tm_step st = {.w = s, .ss = &s, .n_seq = 1, .T = T, .R = T, .tokens = tokens, .dec = T == 1,
                  .exact = true, .rows_out = logits_out, .rows_at = rows_at};
    return run(&st);
}

tern_status tm_forward_hidden(tern_session *s, const int32_t *tokens, int T, float *hidden_out) {
    TERN_ASSERT(hidden_out);
    tm_step st = {.w = s, .ss = &s, .n_seq = 1, .T = T, .R = T, .tokens = tokens, .dec = T == 1,
                  .hidden_out = hidden_out};
    return run(&st);
}
