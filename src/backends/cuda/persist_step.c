/*
 * persist_step.c - the CUDA back-end's glue to the persistent decode step
 * (cu_persist.h, docs/persistent.md): at the first single-token step of a model with
 * cuda_persistent on, the program is built from the plan (persist_build.c) and put in
 * device memory (tc_persist_new); every eligible step then runs as one launch, and the
 * logits come home with the status word. A model or device it cannot serve is noted
 * once (log, INFO) and runs the per-op path.
 */
#include "backends/cuda/cu_persist.h"

#if defined(TERN_HAVE_CUDA)

#include "kernels/cuda/cuda.h"
#include "model/session.h"

#include <stdlib.h>
#include <string.h>

typedef struct cu_persist_st {
    int state;       /* 0 not tried yet, 1 ready, -1 not for this model or device */
    tp_prog prog;
    tc_persist *ps;
    int token;       /* the last step's argmax (device) */
} cu_persist_st;

static bool kv_ok(const tern_session *s) {
    return s->k_type == s->v_type &&
           (s->k_type == TERN_KV_F32 || s->k_type == TERN_KV_F16 || s->k_type == TERN_KV_BF16);
}

tern_status tm_cuda_persist_step(struct tc_ctx *tc, void **state, int layout, const tm_step *st, bool *took) {
    *took = false;
    if (st->n_seq != 1 || st->T != 1 || st->hidden_out || !kv_ok(st->ss[0])) return TERN_OK;
    tern_session *s = st->ss[0]; /* the sequence (st->w lends the scratch; this path uses its own) */
    const tern_model *m = s->m;
    cu_persist_st *p = *state;
    if (!p) {
        p = calloc(1, sizeof *p);
        if (!p) return TERN_OK; /* the per-op path */
        *state = p;
    }
    if (p->state == 0) {
        p->state = -1;
        const int n = tc_persist_sms(tc);
        if (n < 1) {
            tern_log(TERN_LOG_INFO, "CUDA persistent step off: the device has no cooperative launch");
            return TERN_OK;
        }
        if (tp_build(m, &m->plan, n, layout, &p->prog)) {
            tern_log(TERN_LOG_INFO, "CUDA persistent step off for this model: %s", tern_last_error());
            tern_clear_error();
            return TERN_OK;
        }
        const int e = tc_persist_new(tc, &p->prog, &p->ps);
        if (e) {
            tern_log(TERN_LOG_INFO, "CUDA persistent step off: %s (the kernel runs qwen3 without transforms, "
                     "head_dim <= 128; this program: %d GDN layers, %zu bytes of shared memory per SM)",
                     tc_error_string(e), p->prog.n_gdn, tp_smem_bytes(&p->prog));
            tp_prog_free(&p->prog);
            return TERN_OK;
        }
        p->state = 1;
    }
    if (p->state < 0) return TERN_OK;
    const int32_t tok = st->tokens[0];
    if (tok < 0 || tok >= m->hp.n_vocab)
        return tern_fail(TERN_ERR_RANGE, "token id %d out of range [0, %d)", (int)tok, m->hp.n_vocab);
    tc_persist_seq sq = {.kcache = s->kcache, .vcache = s->vcache, .k_row = s->k_row, .v_row = s->v_row,
                         .n_ctx = s->n_ctx, .pos = s->pos, .token = tok, .kv_type = (int)s->k_type,
                         .conv_state = s->conv_state, .gdn_state = s->ssm_state, .gdn_bf16 = m->gdn_bf16};
    float *dst = st->rows_out ? st->rows_out : s->logits;
    int failed = -1, argmax = -1;
    const int e = tc_persist_step(p->ps, &sq, dst, &argmax, &failed);
    if (e == TC_ERR_UNSUPPORTED) { /* the grid could not be co-resident: the per-op path from now on */
        tern_log(TERN_LOG_INFO, "CUDA persistent step off: the cooperative launch was refused");
        p->state = -1;
        return TERN_OK;
    }
    *took = true;
    if (e == TC_PERSIST_WATCHDOG) {
        char d[256];
        tp_describe_stage(&p->prog, failed, d, sizeof d);
        return tern_fail(TERN_ERR_INTERNAL, "CUDA persistent step: watchdog: %s: the wait spun past its budget "
                         "(a counter never signalled); the kernel left, the GPU is free", d);
    }
    if (e) return tern_fail(TERN_ERR_INTERNAL, "CUDA persistent step: %s", tc_error_string(e));
    if (st->rows_out) memcpy(s->logits, st->rows_out, (size_t)m->hp.n_vocab * sizeof(float));
    p->token = argmax;
    return TERN_OK;
}

void tm_cuda_persist_free(struct tc_ctx *tc, void *state) {
    (void)tc;
    cu_persist_st *p = state;
    if (!p) return;
    tc_persist_free(p->ps);
    tp_prog_free(&p->prog);
    free(p);
}

struct tc_persist *tm_cuda_persist_obj(void *state) {
    cu_persist_st *p = state;
    return p && p->state == 1 ? p->ps : NULL;
}

int tm_cuda_persist_token(void *state) {
    cu_persist_st *p = state;
    return p && p->state == 1 ? p->token : -1;
}

#endif
