/*
 * verify.c - speculative verification (tern.h tern_session_verify, _keep): the target
 * model evaluates n positions of one sequence (the pending token and the drafts) in
 * one pass and returns every row's logits; afterwards the caller keeps a prefix.
 *
 * Exactness: the pass runs with tm_step.exact, so each row is bit-identical to
 * evaluating the tokens one at a time (the GDN recurrence walks token by token instead
 * of the block scan; the matmuls run in pieces whose rows the kernels compute as alone:
 * tm_ops.matmul_exact_batch; tests/unit/test_spec.c compares the bytes). Greedy text
 * with speculation is then byte-identical to plain greedy. A back-end without
 * TM_CAP_EXACT_ROWS (CUDA today: its multi-row kernels accumulate in another order than
 * its decode GEMV) runs each row as the decode step itself (on CUDA its graph replay):
 * still exact, no faster than decoding them.
 *
 * Rollback: attention rows after the kept prefix are simply overwritten later (the
 * position goes back). The GDN conv and recurrent states cannot be rewound, so one
 * snapshot of them (tern_session_snapshot, in the back-end's memory: device memory on
 * CUDA) is retaken before every verify into the same storage; keeping fewer than n
 * restores it and evaluates the kept tokens again (exact: the same rows). Memory: one
 * set of GDN states (151 MB for the 27B in fp32) instead of one per drafted position.
 */
#include "model/session.h"

#include <stdlib.h>
#include <string.h>

static bool has_gdn(const tern_session *s) { return s->m->hp.n_gdn_layers > 0; }

/* Evaluate tokens [0, n) exactly, in pieces of at most n_chunk rows (one row at a time on
 * a back-end without TM_CAP_EXACT_ROWS); advances pos. */
static tern_status eval_exact(tern_session *s, const int32_t *tokens, size_t n, float *logits) {
    return tm_session_run(s, tokens, n, logits, TM_RUN_EXACT, !(s->m->be->vt->caps & TM_CAP_EXACT_ROWS));
}

/* The session's own rows for a verify given no buffer: grow-only, counted in its bytes. */
static tern_status own_rows(tern_session *s, size_t n) {
    if ((size_t)s->vown_rows >= n) return TERN_OK;
    const size_t V = (size_t)s->m->hp.n_vocab;
    float *p = tern_alloc_aligned(n * V * sizeof(float));
    if (!p) return tern_fail(TERN_ERR_NOMEM, "tern_session_verify: out of memory (%zu rows of logits)", n);
    if (s->vown) {
        tern_free_aligned(s->vown, (size_t)s->vown_rows * V * sizeof(float));
        s->bytes -= (uint64_t)s->vown_rows * V * sizeof(float);
    }
    s->vown = p;
    s->vown_rows = (int)n;
    s->bytes += (uint64_t)n * V * sizeof(float);
    return TERN_OK;
}

tern_status tern_session_verify(tern_session *s, const int32_t *tokens, size_t n, float *logits) {
    if (!s || !tokens) return tern_fail(TERN_ERR_INVALID_ARG, "tern_session_verify: NULL argument");
    if (n == 0) return tern_fail(TERN_ERR_INVALID_ARG, "tern_session_verify: no tokens");
    tern_status st = tm_session_check(s, tokens, n);
    if (st) return st;
    if (s->m->be->vt->caps & TM_CAP_PRIVATE_STATE)
        return tern_fail(TERN_ERR_UNSUPPORTED, "tern_session_verify: not supported on a tensor-parallel model (--tp)");
    if (!logits && (st = own_rows(s, n))) return st;
    if ((int)n > s->vcap) {
        int cap = (int)n < 16 ? 16 : (int)n;
        int32_t *t = realloc(s->vtok, (size_t)cap * sizeof *t);
        if (!t) return tern_fail(TERN_ERR_NOMEM, "tern_session_verify: out of memory");
        s->vtok = t;
        s->vcap = cap;
    }
    if (has_gdn(s)) {
        if (!s->vsnap) {
            st = tern_session_snapshot_take_in(s, TERN_SNAPSHOT_BACKEND, &s->vsnap);
            if (!st) s->bytes += tern_session_snapshot_bytes(s->vsnap);
        } else {
            st = tern_session_snapshot_retake(s, s->vsnap);
        }
        if (st) return st;
    } else {
        if (!s->vlog0 && !(s->vlog0 = malloc((size_t)s->m->hp.n_vocab * sizeof(float))))
            return tern_fail(TERN_ERR_NOMEM, "tern_session_verify: out of memory");
        memcpy(s->vlog0, s->logits, (size_t)s->m->hp.n_vocab * sizeof(float));
    }
    s->vn = 0;
    float *rows = logits ? logits : s->vown;
    s->vrows = rows;
    s->vpos0 = s->pos;
    memcpy(s->vtok, tokens, n * sizeof *tokens);
    s->vborrow = !logits; /* the back-end may point s->vrows at rows of its own instead */
    st = eval_exact(s, tokens, n, rows);
    s->vborrow = false;
    if (st) return st;
    s->vn = (int)n;
    return TERN_OK;
}

tern_status tern_session_verify_keep(tern_session *s, int n_keep) {
    if (!s) return tern_fail(TERN_ERR_INVALID_ARG, "tern_session_verify_keep: NULL session");
    if (!s->vn || s->pos != s->vpos0 + s->vn)
        return tern_fail(TERN_ERR_INVALID_ARG,
                         "tern_session_verify_keep: the session was not just verified (or was evaluated since)");
    if (n_keep < 0 || n_keep > s->vn)
        return tern_fail(TERN_ERR_RANGE, "tern_session_verify_keep: %d outside [0, %d]", n_keep, s->vn);
    const int n = s->vn;
    s->vn = 0;
    if (n_keep == n) return TERN_OK;
    if (!has_gdn(s)) { /* attention reads [0, pos) only: the rows after are overwritten later */
        s->pos = s->vpos0 + n_keep;
        const size_t V = (size_t)s->m->hp.n_vocab;
        memcpy(s->logits, n_keep ? s->vrows + (size_t)(n_keep - 1) * V : s->vlog0, V * sizeof(float));
        return TERN_OK;
    }
    tern_status st = tern_session_snapshot_restore(s, s->vsnap);
    if (st) return st;
    /* the kept tokens again, from the restored states: the same rows as the verify's */
    return n_keep ? eval_exact(s, s->vtok, (size_t)n_keep, NULL) : TERN_OK;
}

const float *tern_session_verify_rows(const tern_session *s) { return s && s->vn ? s->vrows : NULL; }

uint64_t tern_session_verify_bytes(const tern_session *s) {
    if (!s || !has_gdn(s)) return 0;
    const tm_hparams *hp = &s->m->hp;
    size_t C = 2 * (size_t)hp->ssm_n_k * hp->ssm_dk + (size_t)hp->ssm_n_v * hp->ssm_dv;
    return (uint64_t)hp->n_gdn_layers *
           ((uint64_t)(hp->conv_k - 1) * C + s->m->be->vt->gdn_state_floats(s->m->be, hp)) * sizeof(float);
}
