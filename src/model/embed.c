/*
 * embed.c - embeddings (tern.h): the step plan run to the output norm, not through the
 * head (tm_forward_hidden: the step's hidden_out), per token or pooled over a call's
 * tokens (mean, last, first "cls"), optionally L2-normalised.
 */
#include "model/session.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const pool_names[] = {"none", "mean", "last", "cls"};

const char *tern_pooling_name(tern_pooling p) {
    return (unsigned)p < sizeof pool_names / sizeof pool_names[0] ? pool_names[p] : NULL;
}

tern_status tern_pooling_parse(const char *name, tern_pooling *out) {
    if (!name || !out) return tern_fail(TERN_ERR_INVALID_ARG, "tern_pooling_parse: NULL argument");
    for (unsigned i = 0; i < sizeof pool_names / sizeof pool_names[0]; i++)
        if (!strcmp(name, pool_names[i])) {
            *out = (tern_pooling)i;
            return TERN_OK;
        }
    return tern_fail(TERN_ERR_INVALID_ARG, "unknown pooling '%s' (none, mean, last or cls)", name);
}

tern_status tern_session_eval_hidden(tern_session *s, const int32_t *tokens, size_t n, float *hidden) {
    if (!s || (!tokens && n) || (!hidden && n))
        return tern_fail(TERN_ERR_INVALID_ARG, "tern_session_eval_hidden: NULL argument");
    if (n == 0) return TERN_OK;
    tern_status cst = tm_session_check(s, tokens, n);
    if (cst) return cst;
    return tm_session_run(s, tokens, n, hidden, TM_RUN_HIDDEN, false);
}

static void l2_normalize(float *v, size_t n) {
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)v[i] * v[i];
    if (!(ss > 0)) return;
    const double inv = 1.0 / sqrt(ss);
    for (size_t i = 0; i < n; i++) v[i] = (float)(v[i] * inv);
}

tern_status tern_session_embed(tern_session *s, const int32_t *tokens, size_t n, tern_pooling pooling,
                               bool normalize, float *out) {
    if (!s || !tokens || !out) return tern_fail(TERN_ERR_INVALID_ARG, "tern_session_embed: NULL argument");
    if (n == 0) return tern_fail(TERN_ERR_INVALID_ARG, "tern_session_embed: no tokens");
    if (!tern_pooling_name(pooling)) return tern_fail(TERN_ERR_INVALID_ARG, "tern_session_embed: pooling %d", (int)pooling);
    const size_t E = (size_t)s->m->hp.n_embd;
    if (pooling == TERN_POOLING_NONE) {
        tern_status st = tern_session_eval_hidden(s, tokens, n, out);
        if (!st && normalize)
            for (size_t t = 0; t < n; t++) l2_normalize(out + t * E, E);
        return st;
    }
    /* one chunk at a time: the rows are pooled as they come */
    const size_t C = n < (size_t)s->n_chunk ? n : (size_t)s->n_chunk;
    float *rows = malloc(C * E * sizeof *rows);
    double *sum = pooling == TERN_POOLING_MEAN ? calloc(E, sizeof *sum) : NULL;
    if (!rows || (pooling == TERN_POOLING_MEAN && !sum)) {
        free(rows);
        free(sum);
        return tern_fail(TERN_ERR_NOMEM, "out of memory for %zu hidden rows", C);
    }
    /* every check (ids, context) before any work, as tern_session_eval_hidden does */
    tern_status st = TERN_OK;
    const int V = s->m->hp.n_vocab;
    for (size_t i = 0; i < n && !st; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            st = tern_fail(TERN_ERR_RANGE, "token id %d at index %zu is out of range [0, %d)", (int)tokens[i], i, V);
    if (!st && n > (size_t)(s->n_ctx - s->pos))
        st = tern_fail(TERN_ERR_CONTEXT_FULL, "context full: %zu tokens at position %d exceed the context of %d", n,
                       s->pos, s->n_ctx);
    for (size_t i = 0; i < n && !st;) {
        const size_t c = n - i < C ? n - i : C;
        st = tern_session_eval_hidden(s, tokens + i, c, rows);
        if (st) break;
        if (pooling == TERN_POOLING_MEAN) {
            for (size_t t = 0; t < c; t++)
                for (size_t k = 0; k < E; k++) sum[k] += rows[t * E + k];
        } else if (pooling == TERN_POOLING_CLS && i == 0) {
            memcpy(out, rows, E * sizeof *out);
        } else if (pooling == TERN_POOLING_LAST && i + c == n) {
            memcpy(out, rows + (c - 1) * E, E * sizeof *out);
        }
        i += c;
    }
    if (!st && pooling == TERN_POOLING_MEAN)
        for (size_t k = 0; k < E; k++) out[k] = (float)(sum[k] / (double)n);
    if (!st && normalize) l2_normalize(out, E);
    free(rows);
    free(sum);
    return st;
}
