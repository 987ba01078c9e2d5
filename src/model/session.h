/*
 * session.h - internal session state shared by session.c (API, allocation) and
 * forward.c (the forward pass over one chunk of tokens).
 *
 * Memory (allocated once in tern_session_new, counted in `bytes`; float32 except the KV
 * cache):
 *   kcache, vcache  [n_attn_layers][n_ctx] rows of n_head_kv*head_dim values in k_type /
 *                   v_type (kernels.h tern_kv_type: f32, f16, bf16 or q8_0), k_row /
 *                   v_row bytes per position; pages backed as positions fill (CPU)
 *   conv_state      [n_gdn_layers][conv_k-1][conv_ch]
 *   ssm_state       [n_gdn_layers][gdn_state_floats]: the back-end's GDN state of each
 *                   layer (backend.h; the CPU keeps a pending rank-1 update beside S)
 *   the arena: one allocation holding every scratch buffer the plan names
 *                   (n_chunk rows of buf_width[b] floats each, 256-byte aligned), the
 *                   attention scores [n_head][n_ctx] and, on a device, dlogits
 *   logits          [n_vocab] (last evaluated row; always host memory)
 *   dlogits         [n_chunk][n_vocab] (back-ends with their own memory only: the
 *                   chunk's logits there, downloaded once per chunk)
 *   blogits         [blogits_rows][n_vocab] host, allocated by the first batched step
 *                   this session leads without a caller's logits buffer (grow-only,
 *                   at most n_chunk rows): the batch's logits rows before they are
 *                   copied to each member's `logits`
 * The buffers are the back-end's memory (tm_be_alloc), except logits and blogits.
 *
 * Batched decode (tern_session_eval_batch): one pass advances n sessions by one
 * token each. It borrows the scratch (x .. ab, dlogits) of one member, the lead
 * (the first with the largest n_chunk), and runs in pieces of at most lead->n_chunk
 * rows; each member's own caches, states, att_scratch and logits are used for its row.
 */
#ifndef TERN_MODEL_SESSION_H
#define TERN_MODEL_SESSION_H

#include "model/backend.h"

struct tern_session {
    tern_model *m;
    int n_ctx, n_chunk, pos;
    void *kcache, *vcache;
    tern_kv_type k_type, v_type;
    size_t k_row, v_row;  /* bytes of one position's row (all KV heads of one layer) */
    float *conv_state, *ssm_state; /* ssm_state: n_gdn_layers x be->vt->gdn_state_floats() */
    /* scratch: buffer b (plan.h tm_buf) is [n_chunk][m->plan.buf_width[b]], carved with
     * att_scratch and dlogits from one arena (arena, arena_bytes) */
    float *buf[TM_BUF_COUNT];
    float *att_scratch; /* [n_head][n_ctx] */
    float *logits;   /* [n_vocab] host */
    float *dlogits;  /* [n_chunk][n_vocab] device (NULL on the CPU) */
    size_t logits_host; /* bytes of logits when allocated apart from allocs[] */
    float *blogits;  /* [blogits_rows][n_vocab] host, batched steps (NULL: none yet) */
    int blogits_rows;
    bool batch_mark; /* set while tern_session_eval_batch checks for duplicates */
    /* the back-end's own per-session state (vt->session_init / session_release) */
    void *be_state;
    void *arena;     /* the scratch (back-end memory) */
    size_t arena_bytes;
    /* snapshots (tern_session_snapshot_*): a process-unique id, and for each position
     * the value of `stamp` when its KV row was last written (host; rows [0, pos) are the
     * session's current history, so a row before pos rewritten since a snapshot implies
     * the snapshot's last row was rewritten too) */
    uint64_t id;
    uint64_t *row_stamp;
    uint64_t stamp;
    /* speculative verification (tern_session_verify / _keep): one snapshot of the GDN
     * states taken before each verify (reused; NULL until the first verify of a model
     * with GDN layers), where the verify started, its tokens (vn = 0: nothing to settle) */
    struct tern_session_snapshot *vsnap;
    int vpos0, vn, vcap;
    int32_t *vtok;
    const float *vrows;   /* the logits rows of the last verify (read by _keep): the caller's,
                           * vown, or the back-end's own (vborrow) */
    float *vown;          /* [vown_rows][n_vocab] host: the rows when the caller gives none */
    int vown_rows;
    bool vborrow;         /* this verify may leave its rows in the back-end's memory */
    float *vlog0;         /* [n_vocab] host: the logits before it (models without GDN) */
    uint64_t bytes;
    uint64_t counted; /* bytes added to m->sessions_bytes (0: none) */
    void *allocs[24];
    size_t alloc_n[24];
    int n_allocs;
};

/* Evaluate tokens[0..n) at positions pos.. (n <= n_chunk; fits the context).
 * logits_out (may be NULL): n rows of n_vocab; the last row always goes to s->logits. */
tern_status tm_forward_chunk(tern_session *s, const int32_t *tokens, int n, float *logits_out);

/* tm_forward_chunk with tm_step.exact: every row bit-identical to single-token steps. */
tern_status tm_forward_verify(tern_session *s, const int32_t *tokens, int n, float *logits_out,
                              const float **rows_at);

/* The same chunk stopped before the head (embeddings): hidden_out (host) gets n rows of
 * n_embd floats, the output norm's result per token; s->logits is not touched. */
tern_status tm_forward_hidden(tern_session *s, const int32_t *tokens, int n, float *hidden_out);

/* One token of each of n distinct sessions of w's model (1 <= n <= w->n_chunk), each
 * at its own position, in one pass over w's scratch (w may be one of them). Row i of
 * logits_rows (host, n x n_vocab) and s[i]->logits get session i's logits. Positions
 * are not advanced here; the caller checked tokens and contexts. */
/* Evaluate tokens[0..n) (checked by the caller) in pieces of at most n_chunk rows (one
 * row a piece with `one`) under the model's eval lock, stamping the rows and advancing
 * pos after each: out (may be NULL but for HIDDEN) gets every row, n_vocab floats (the
 * logits) or n_embd (HIDDEN: the output norm's rows). EXACT: tm_forward_verify. */
/* The checks before evaluating n tokens: ids in the vocabulary (TERN_ERR_RANGE), room in
 * the context (TERN_ERR_CONTEXT_FULL). */
tern_status tm_session_check(const tern_session *s, const int32_t *tokens, size_t n);
typedef enum tm_run_kind { TM_RUN_LOGITS, TM_RUN_EXACT, TM_RUN_HIDDEN } tm_run_kind;
tern_status tm_session_run(tern_session *s, const int32_t *tokens, size_t n, float *out, tm_run_kind kind, bool one);

/* Mark rows [pos0, pos0 + n) of s as written now (a new stamp). */
void tm_session_stamp(tern_session *s, int pos0, int n);

tern_status tm_forward_batch(tern_session *w, tern_session *const *s, const int32_t *tokens, int n,
                             float *logits_rows);

/* Benchmark support, not in tern.h (`tern bench model --depth N --depth-fill random`;
 * the CLI links the static library): make the session look as if n_pos tokens had been
 * evaluated, without evaluating them. Attention layer l's key and value rows 0..n_pos-1
 * get deterministic pseudo-random values (unit variance, from seed, l and the row),
 * stored in the session's cache types by tern_kv_store (what kv_store writes); every GDN
 * layer's conv state gets unit-variance values and its recurrent state S values of
 * standard deviation 0.1 (the back-end's extra state, if any, made empty:
 * gdn_state_plain); pos = n_pos; the logits are zeroed. Rows from n_pos on are
 * zeroed. The same seed gives the same state on every back-end. The cost of
 * evaluating at a position depends on the cache length, not on what it holds, so
 * decode and prefill timed after this equal those after a real prefill of n_pos
 * tokens. TERN_ERR_RANGE unless 0 <= n_pos <= n_ctx; TERN_ERR_UNSUPPORTED on a
 * tensor-parallel model (its shards hold the caches). */
tern_status tm_session_fill_random(tern_session *s, int n_pos, uint64_t seed);

#endif
