/*
 * backend.h - the seam between the model and the back-ends (CPU, CUDA).
 *
 * A back-end is an instance (tm_backend) made by the registry (tm_backend_create, by
 * name) with a context of its own: the CPU back-end holds its thread pool, the CUDA
 * back-end its device, stream, step graphs and memory. Nothing of one back-end crosses
 * the table: the model hands it weights, sessions and rows, the back-end decides how the
 * work is split, queued, graphed and read back.
 *
 * Two levels:
 *   tm_backend_vt  the instance: memory, per-session state, and `exec`, which runs one
 *                  step of the model's plan (plan.h: the ordered ops of the
 *                  architecture, built once at load); `run_step` may graph it.
 *                  forward.c only builds the step and calls run_step / exec.
 *   tm_ops         op-sized building blocks (matmul, Hadamard sites, norms, RoPE,
 *                  attention, GDN, movers): what one plan op runs on. The generic
 *                  walker (tm_plan_run_op, tm_plan_exec) runs every op through them; the
 *                  CPU back-end uses exactly that, a GPU back-end matches runs of plan
 *                  ops to its fused code and walks the rest (tm_plan_match).
 * Adding a back-end: a folder src/backends/<name>/ with its table and one line in
 * src/backends/registry.c; nothing outside src/backends/ names it (capabilities and
 * hooks above instead).
 *
 * Memory: every pointer the table gets (weights, activations, caches, states) is the
 * back-end's memory (alloc/upload; host memory for the CPU), except token ids and the
 * logits rows the head writes (host). All activations are float32 rows; `rows`
 * activations of width n, row stride n unless stated. Weights are tern_qmat (kernels.h);
 * signs NULL means "no Hadamard at this site".
 *
 * Per-session state private to a back-end: the GDN recurrent state of one layer is
 * gdn_state_floats() floats; the first n_v*dk*dv are the state S [n_v][dk][dv] as the
 * model defines it after applying whatever the back-end keeps beside it (the CPU keeps
 * the last token's rank-1 update apart, see backend_cpu.c). All zeros is the empty
 * state on every back-end.
 */
#ifndef TERN_MODEL_BACKEND_H
#define TERN_MODEL_BACKEND_H

#include "model/model.h"
#include "model/plan.h"

typedef struct tm_backend tm_backend;
typedef struct tm_step tm_step;

/* Causal attention of `rows` queries at positions pos0.. over a cache (kernels.h). */
typedef tern_attn_args tm_attn_args;

/* One GDN layer over `rows` tokens of one sequence. */
typedef struct tm_gdn_args {
    const float *qkv;      /* [rows][conv_ch] projected (pre-conv) q|k|v */
    const float *z;        /* [rows][n_v*dv] output gate */
    const float *a, *b;    /* [rows][n_v] un-activated alpha and beta */
    const float *conv_w;   /* [conv_ch][conv_k] */
    const float *ssm_a;    /* [n_v] */
    const float *dt_bias;  /* [n_v] */
    const float *norm;     /* [dv] */
    float *conv_state;     /* [conv_k-1][conv_ch]: the last conv_k-1 inputs, oldest first */
    float *state;          /* gdn_state_floats() floats: the back-end's state of this layer */
    float *out;            /* [rows][n_v*dv] gated-normed output, in run order */
    float *work;           /* [rows][conv_ch] scratch */
    int rows;
    int n_k, n_v, dk, dv, conv_k;
    bool v_tiled;          /* value head p reads key head p % n_k (else p / (n_v/n_k)) */
    float eps;
    bool walk;             /* token by token, exactly as `rows` single-row calls would
                            * (tm_step.exact); else the back-end's choice of scan */
    bool state_bf16;       /* the model's gdn_bf16: S rounded to bf16 at the end of the call
                            * (the back-end's gdn_state_floats says how it is stored) */
} tm_gdn_args;

/* Op-sized building blocks. `be` is the instance the op runs on. */
typedef struct tm_ops {
    /* y = W x for `batch` rows (strides in floats). */
    void (*matmul)(tm_backend *be, const tern_qmat *w, const float *x, size_t batch,
                   size_t x_stride, float *y, size_t y_stride);
    void (*matmul_multi)(tm_backend *be, int n, const tern_qmat *const *w, const float *x,
                         size_t batch, size_t x_stride, float *const *y, const size_t *y_stride);
    void (*hadamard)(tm_backend *be, float *x, size_t rows, size_t n, size_t block,
                     const float *signs);
    /* r += d (d may be NULL); normed = rmsnorm(r)*gain; rotated = H(normed) or copy. */
    void (*add_rmsnorm_hadamard)(tm_backend *be, float *r, const float *d, const float *gain,
                                 float eps, float *normed, float *rotated, size_t rows,
                                 size_t n, size_t block, const float *signs);
    /* out = silu(gate)*up, then H(out) if signs. gate/up/out stride n. */
    void (*swiglu_hadamard)(tm_backend *be, const float *gate, const float *up, float *out,
                            size_t rows, size_t n, size_t block, const float *signs);
    /* out[i] = dequantized row ids[i] (host ids, checked) of emb, then the inverse
     * transform if signs. */
    tern_status (*embed)(tm_backend *be, const tern_qmat *emb, const int32_t *ids, size_t n,
                         float *out, size_t block, const float *signs);
    /* Per-head RMSNorm in place: x[r*stride + h*hd ..] for h < n_heads. */
    void (*head_rmsnorm)(tm_backend *be, float *x, size_t rows, size_t stride, int n_heads,
                         int hd, const float *gain, float eps);
    /* NEOX RoPE on the first rot dims of each head: pairs (i, i+rot/2). */
    void (*rope)(tm_backend *be, float *x, size_t rows, size_t stride, int n_heads, int hd,
                 int rot, int pos0, float theta);
    void (*attention)(tm_backend *be, const tm_attn_args *a);
    void (*gdn)(tm_backend *be, const tm_gdn_args *a);
    /* dst[r*ds + c] = src[r*ss + c] for c < n. */
    void (*copy_rows)(tm_backend *be, float *dst, size_t ds, const float *src, size_t ss,
                      size_t rows, size_t n);
    /* src row = n_heads x [hd a | hd b] -> a, b rows of n_heads*hd. */
    void (*split_heads)(tm_backend *be, const float *src, size_t rows, int n_heads, int hd,
                        float *a, float *b);
    /* x *= sigmoid(g), elementwise over rows x n (both stride n). */
    void (*mul_sigmoid)(tm_backend *be, float *x, const float *g, size_t rows, size_t n);
    /* GDN output tiled -> grouped: dst head k*r+j = src head j*n_k+k (rows of n_v*dv). */
    void (*permute_tiled_grouped)(tm_backend *be, const float *src, float *dst, size_t rows,
                                  int n_k, int n_v, int dv);
    /* Optional: the largest batch for which matmul gives every row bit-identical to a batch
     * of one (0: any; NULL: any). A step with `exact` splits larger batches by it. */
    size_t (*matmul_exact_batch)(tm_backend *be, const tern_qmat *w);
    /* store k/v rows (float) into the layer's caches kc/vc ([n_ctx] rows of kvw values
     * in types kt/vt, tern_kv_row_bytes apart) at positions pos0.. */
    void (*kv_store)(tm_backend *be, void *kc, void *vc, tern_kv_type kt, tern_kv_type vt,
                     const float *k, const float *v, size_t kvw, size_t rows, int pos0);
} tm_ops;

/* One forward pass: T rows that are either one sequence (n_seq == 1: ss[0]'s tokens
 * at positions pos..pos+T-1, a chunk) or T sequences of one row each (n_seq == T: row
 * i is ss[i]'s next token at its own position, a batch). Everything positional (RoPE,
 * KV cache, attention, GDN conv + state) runs per sequence; everything else over all T
 * rows. w is the session whose scratch the pass uses. */
struct tm_step {
    tern_session *w;
    tern_session *const *ss;
    int n_seq, T, R;       /* R: rows per sequence (T when n_seq == 1, else 1) */
    const int32_t *tokens; /* host, T ids */
    bool dec;              /* single-token rows: use the decode-layout weight copies */
    bool exact;            /* a speculative verify (tern_session_verify): every row must
                            * come out bit-identical to evaluating the tokens one at a time
                            * (the GDN recurrence walks token by token: tm_gdn_args.walk) */
    float *rows_out;       /* host [T][n_vocab] or NULL: only the last row, into w->logits */
    const float **rows_at; /* exact steps, or NULL: the back-end may leave the rows in host
                            * memory of its own (valid until the session's next step) and
                            * point *rows_at at them instead of copying them to rows_out
                            * (w->logits still gets the last); it leaves *rows_at alone
                            * when it copies */
    float *hidden_out;     /* host [T][n_embd] or NULL. Set: the head stops after the output
                            * norm (no logits, w->logits untouched, rows_out NULL): the T normed
                            * rows (TM_BUF_NORMED, un-rotated) come here (embeddings) */
};

/* Capabilities (tm_backend_vt.caps). */
enum {
    /* weights stay in host memory in the file's layout, which the loader may copy into
     * the CPU kernels' fastest layout (tern_model_params.repack) */
    TM_CAP_HOST_REPACK = 1u << 0,
    /* the sessions' caches and states live in the back-end's own per-session state
     * (be_state), not in the session's buffers: snapshots, truncation of states and
     * the random depth fill are refused */
    TM_CAP_PRIVATE_STATE = 1u << 1,
    /* exec honours tm_step.exact: a chunk's rows come out bit-identical to single-token
     * steps (the CPU: the GDN walk, matmuls split by matmul_exact_batch).
     * Without it a speculative verify (tern_session_verify) runs its rows as single-token
     * steps: exact, but the weights are read once per row */
    TM_CAP_EXACT_ROWS = 1u << 2,
};

typedef struct tm_backend_vt {
    const char *name;
    bool device_memory;    /* the table's pointers are not host memory */
    unsigned caps;         /* TM_CAP_* */
    void (*destroy)(tm_backend *be);
    /* Rows a batched decode step should hold for the best aggregate speed. */
    int (*batch_hint)(const tm_backend *be);
    /* The default prefill chunk (NULL: 64). */
    int (*chunk_hint)(const tm_backend *be);
    /* memory (alloc returns zeroed memory or NULL; free gets the size given to alloc;
     * upload/download are complete on return) */
    void *(*alloc)(tm_backend *be, size_t bytes);
    void (*free)(tm_backend *be, void *p, size_t bytes);
    tern_status (*upload)(tm_backend *be, void *dst, const void *src_host, size_t n);
    tern_status (*download)(tm_backend *be, void *dst_host, const void *src, size_t n);
    tern_status (*zero)(tm_backend *be, void *p, size_t n);
    /* wait for queued work; the first error of the work since the last sync */
    tern_status (*sync)(tm_backend *be);
    /* bytes this back-end's memory can still give (0: unknown), for the fit check of
     * tern_session_new */
    uint64_t (*mem_available)(const tm_backend *be);
    /* KV cache types this back-end reads, one bit per tern_kv_type (1u << t); 0 means
     * F32 only. tern_session_new refuses the others; the default type is F16 where
     * the bit is set, else F32. */
    unsigned kv_types;
    /* floats of one GDN layer's recurrent state (see above) */
    size_t (*gdn_state_floats)(const tm_backend *be, const tm_hparams *hp);
    /* Optional: a host copy of one layer's state (gdn_state_floats floats) whose first
     * n_v*dk*dv hold a state S is made to mean exactly S (the CPU: nothing pending).
     * NULL: S is all the back-end keeps. Used by tm_session_fill_random. */
    void (*gdn_state_plain)(const tm_backend *be, const tm_hparams *hp, float *state);
    /* Optional: what the back-end keeps per session (s->be_state: graphs, activation
     * buffers sized from the plan, shard sessions): made once the session's memory is
     * (session_init; an error fails tern_session_new), released with the session
     * (session_release). */
    tern_status (*session_init)(tm_backend *be, tern_session *s);
    void (*session_release)(tm_backend *be, tern_session *s);
    /* Optional: a weight matrix just uploaded (w->data, *bytes in the back-end's memory)
     * may be replaced by a layout of the back-end's (it frees the old bytes, sets w and
     * *bytes); TERN_OK leaving w as it is means "used as stored". */
    tern_status (*prepare_matrix)(tm_backend *be, tern_qmat *w, size_t *bytes);
    /* Optional: the model is loaded (uploaded when device_memory) and its plan built;
     * the back-end may derive what it runs from it (tensor parallel: the shards). */
    tern_status (*model_loaded)(tm_backend *be, tern_model *m);
    /* Optional: the device this instance drives ("NVIDIA H200 ..."; NULL: ""). */
    const char *(*device_name)(const tm_backend *be);
    /* Queue one step: every op of the model's plan (m->plan, plan.h) over st's rows, and
     * the logits where the step says (st->rows_out and every member's `logits`, or the
     * last row into st->w->logits); how (op by op, fused, sharded) is the back-end's.
     * NULL: tm_plan_exec (be->ops op by op; host-memory back-ends). */
    tern_status (*exec)(tm_backend *be, const tm_step *st);
    /* Optional: run one step and finish it; a back-end may record the step into a graph
     * and replay it for a later identical step. NULL: exec, then sync. */
    tern_status (*run_step)(tm_backend *be, const tm_step *st);
    /* Optional (device_memory back-ends): copy n bytes between two buffers of the
     * back-end's memory, queued in order with the steps (complete before the next step
     * reads dst; an error may show at the next sync). NULL: through the host. Used by
     * tern_session_copy and snapshots kept in the back-end's memory. */
    tern_status (*copy)(tm_backend *be, void *dst, const void *src, size_t n);
} tm_backend_vt;

struct tm_backend {
    const tm_backend_vt *vt;
    const tm_ops *ops;
    const tern_model *m;   /* set by the loader once the model is bound (may be NULL) */
};

/* ------------------------------------------------------------ the registry */
typedef struct tm_backend_params {
    int n_threads;         /* CPU: <= 0 = one per online core */
    int device_index;      /* CUDA: GPU ordinal */
    int tp;                /* 0, 1: one instance; else tensor parallel over tp (2..64) */
    /* CUDA: tern_model_params' cuda_* fields, zero = the default */
    int cuda_prefill;      /* TERN_CUDA_PREFILL_* */
    bool cuda_graphs_off, cuda_pdl_off, cuda_profile;
    const char *cuda_matmul; /* NULL: the chooser decides */
    bool cuda_persistent;  /* single-token steps through the persistent kernel */
    bool gdn_bf16;         /* tern_model_params.gdn_state BF16 (CUDA: bf16 state storage) */
    bool cuda_gdn_chunk;   /* GDN prefill by the chunked tensor-core form */
    bool batch_invariant;  /* tern_model_params.batch_invariant */
} tm_backend_params;

typedef struct tm_backend_entry {
    const char *name;      /* "cpu", "cuda" */
    bool compiled;         /* built into this library */
    /* present on this machine; *what gets a description ("NVIDIA H200 ...") */
    bool (*present)(const char **what);
    tern_status (*create)(const tm_backend_params *p, tm_backend **out);
} tm_backend_entry;

/* The entries compiled in or not, in a fixed order; n set to their count. */
const tm_backend_entry *tm_backends(int *n);
/* "cuda:1" -> the cuda entry with device_index 1; p->tp other than 0 and 1: that many under
 * the tensor-parallel back-end. Errors name what exists. */
tern_status tm_backend_create(const char *spec, const tm_backend_params *p, tm_backend **out);
static inline void tm_backend_destroy(tm_backend *be) {
    if (be) be->vt->destroy(be);
}

/* ------------------------------------------------ memory through a table */
static inline void *tm_be_alloc(tm_backend *be, size_t n) { return be->vt->alloc(be, n ? n : 1); }
static inline void tm_be_free(tm_backend *be, void *p, size_t n) {
    if (p) be->vt->free(be, p, n ? n : 1);
}
static inline tern_status tm_be_upload(tm_backend *be, void *dst, const void *src, size_t n) {
    return be->vt->upload(be, dst, src, n);
}
static inline tern_status tm_be_download(tm_backend *be, void *dst, const void *src, size_t n) {
    return be->vt->download(be, dst, src, n);
}
static inline tern_status tm_be_zero(tm_backend *be, void *p, size_t n) {
    return be->vt->zero(be, p, n);
}
static inline tern_status tm_be_sync(tm_backend *be) { return be->vt->sync(be); }
static inline bool tm_be_device(const tm_backend *be) { return be->vt->device_memory; }

#endif
