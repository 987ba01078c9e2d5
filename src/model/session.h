/*
 * session.h - internal session state shared by session.c (API, allocation) and
 * forward.c (the forward pass over one chunk of tokens).
 *
 * Memory (all float32, allocated once in tern_session_new, counted in `bytes`):
 *   kcache, vcache  [n_attn_layers][n_ctx][n_head_kv*head_dim]
 *   conv_state      [n_gdn_layers][conv_k-1][conv_ch]
 *   ssm_state       [n_gdn_layers][n_v][dk][dv] (+ ssm_pending [n_gdn_layers][n_v][1+dk+dv],
 *                   the last token's rank-1 update, applied in the next pass)
 *   scratch buffers sized for n_chunk rows of the widest activation
 *   logits          [n_vocab] (last evaluated row; always host memory)
 *   dlogits         [n_chunk][n_vocab] (back-ends with their own memory only: the
 *                   chunk's logits there, downloaded once per chunk)
 * The buffers are the back-end's memory (tm_be_alloc), except logits.
 */
#ifndef TERN_MODEL_SESSION_H
#define TERN_MODEL_SESSION_H

#include "model/backend.h"

struct tern_session {
    tern_model *m;
    int n_ctx, n_chunk, pos;
    float *kcache, *vcache;
    float *conv_state, *ssm_state, *ssm_pending;
    /* scratch, each [n_chunk][width] */
    float *x;        /* residual stream [n_embd] */
    float *delta;    /* pending residual update [n_embd] */
    float *normed;   /* normed, un-rotated [n_embd] */
    float *rot;      /* normed, rotated [n_embd] */
    float *big0;     /* [max(q rows, qkv, n_ff)] */
    float *big1;     /* [max(n_head*hd, n_v*dv, n_ff)] */
    float *big2;     /* [max(n_head*hd, n_v*dv)] */
    float *big3;     /* [max(n_head*hd, n_v*dv)] */
    float *kbuf, *vbuf; /* [n_head_kv*hd] */
    float *ab;       /* [2][n_v] */
    float *att_scratch; /* [n_head][n_ctx] */
    float *logits;   /* [n_vocab] host */
    float *dlogits;  /* [n_chunk][n_vocab] device (NULL on the CPU) */
    size_t logits_host; /* bytes of logits when allocated apart from allocs[] */
    void *graph;     /* the back-end's single-token step graph (NULL: none yet) */
    int graph_state; /* 0: no step yet, 1: stepped once (record next), -1: graphs off */
    uint64_t bytes;
    void *allocs[24];
    size_t alloc_n[24];
    int n_allocs;
};

/* Evaluate tokens[0..n) at positions pos.. (n <= n_chunk; fits the context).
 * logits_out (may be NULL): n rows of n_vocab; the last row always goes to s->logits. */
tern_status tm_forward_chunk(tern_session *s, const int32_t *tokens, int n, float *logits_out);

#endif
