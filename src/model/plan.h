/*
 * plan.h - the step plan: the ordered operations of one forward step of a model, built
 * once at load from the architecture (hyper-parameters and layer kinds) by the
 * architecture's plan rules (plan_rules.c), and executed by every back-end.
 *
 * One plan serves a decode step and a prefill chunk alike: every op works on `rows`
 * rows, a run-time argument (a chunk of one sequence, or one row of each of n
 * sequences in a batch). Ops marked positional (TM_OPF_PER_SEQ: RoPE, KV store,
 * attention, GDN) run once per sequence at its own position on its own caches; the
 * others run over all rows at once.
 *
 * An op names its weights by matrix id (tm_mat_id: layer x role, resolved against the
 * model by tm_plan_mat), its activations by buffer id (tm_buf: a session's scratch rows),
 * and carries its parameters (widths, heads, eps, RoPE, activation kind, Hadamard
 * width). There is no host pointer in a tm_plan_op: the op table itself is the plan's
 * device-memory form (tm_plan_flatten writes it, with the buffer widths, as one
 * versioned blob a persistent kernel can read).
 *
 * Buffers: tm_plan.buf_width[b] floats per row (0: the plan never names b); a session
 * holds rows x width of each (session.c carves them from one arena).
 *
 * Execution: tm_plan_run_op runs one op through be->ops (the generic walker: the CPU
 * runs every op so; a back-end that fuses a run of ops runs the rest through it);
 * tm_plan_exec runs the whole plan and puts the logits where the step says (host-memory
 * back-ends). Reading order of one layer (pre-norm residual, the add deferred into the
 * next norm):
 *   SITE(attn_norm)  MATMUL(q|k|v)  [SPLIT_HEADS]  HEAD_NORM(q)  HEAD_NORM(k)
 *   ROPE(q) ROPE(k) KV_STORE ATTENTION  [MUL_SIGMOID]  HADAMARD  MATMUL(o -> delta)
 * or
 *   SITE(attn_norm)  MATMUL(qkv|z)  MATMUL(a|b, un-rotated input)  GDN  [PERMUTE]
 *   HADAMARD  MATMUL(out -> delta)
 * then
 *   SITE(post_norm)  MATMUL(gate|up)  ACT(+transform)  MATMUL(down -> delta)
 * with EMBED first and LOGITS (output norm + head matmul) last. A step with hidden_out
 * (backend.h: embeddings) runs LOGITS as the output norm alone, over every row, and
 * takes the normed rows (TM_BUF_NORMED) instead of logits.
 */
#ifndef TERN_MODEL_PLAN_H
#define TERN_MODEL_PLAN_H

#include "core/common.h"
#include "formats/arch/arch.h"
#include "kernels/kernels.h"

typedef struct tm_backend tm_backend;
typedef struct tm_step tm_step;

/* Activation buffers (per row widths in tm_plan.buf_width). */
typedef enum tm_buf {
    TM_BUF_NONE = -1,
    TM_BUF_X = 0,    /* residual stream [n_embd] */
    TM_BUF_DELTA,    /* pending residual update [n_embd] */
    TM_BUF_NORMED,   /* normed, un-rotated [n_embd] */
    TM_BUF_ROT,      /* normed, rotated [n_embd] (the ternary matmuls' input with Hadamard) */
    TM_BUF_BIG0,
    TM_BUF_BIG1,
    TM_BUF_BIG2,
    TM_BUF_BIG3,
    TM_BUF_K,        /* keys [n_head_kv*hd] */
    TM_BUF_V,        /* values [n_head_kv*hd] */
    TM_BUF_A,        /* GDN alpha [n_v] */
    TM_BUF_B,        /* GDN beta [n_v] */
    TM_BUF_COUNT
} tm_buf;

typedef enum tm_op_kind {
    TM_OP_EMBED,       /* out[r] = row tokens[r] of mat[0] (+ inverse transform: had) */
    TM_OP_SITE,        /* in (x) += in2 (delta, absent on layer 0); out (normed) =
                        * rmsnorm*gain; out2 (rot) = H(normed) when had */
    TM_OP_MATMUL,      /* out[i] (stride out_w[i]) = mat[i] in, i < n_mat (one input) */
    TM_OP_SPLIT_HEADS, /* in [n_head x (hd q | hd gate)] -> out (q), out2 (gate) */
    TM_OP_HEAD_NORM,   /* per-head RMSNorm of in, in place (vec gain: q_norm/k_norm) */
    TM_OP_ROPE,        /* NEOX RoPE of in in place, first rope_dims of each head; per seq */
    TM_OP_KV_STORE,    /* in (k), in2 (v) into the layer's caches; per seq */
    TM_OP_ATTENTION,   /* in (q) over the layer's caches -> out; per seq */
    TM_OP_MUL_SIGMOID, /* in *= sigmoid(in2) */
    TM_OP_HADAMARD,    /* in = H(in), width width (no-op without a sign vector) */
    TM_OP_GDN,         /* in (qkv), in2 (z), in3 (a), in4 (b) -> out; work: out2; per seq */
    TM_OP_PERMUTE,     /* in (tiled order) -> out (grouped order) */
    TM_OP_ACT,         /* out = act(in gate, in2 up), then H(out) when had */
    TM_OP_LOGITS,      /* in (x) += in2; output norm (out normed, out2 rot); logits =
                        * mat[0] (input rot/normed) -> the step's logits rows */
    TM_OP_KIND_COUNT
} tm_op_kind;

/* Activation kinds of TM_OP_ACT. */
typedef enum tm_act_kind {
    TM_ACT_SWIGLU = 0, /* silu(gate) * up */
    TM_ACT_GEGLU_TANH, /* gelu_tanh(gate) * up (no architecture uses it yet: a test's) */
} tm_act_kind;

/* Matrix and vector ids: layer * TM_ROLE_COUNT + role; the model's top tensors
 * (token_embd, output, output_norm) at layer -1 (id = role). TM_MAT_NONE: absent. */
typedef int32_t tm_mat_id;
#define TM_MAT_NONE (-1)
static inline tm_mat_id tm_mat_make(int layer, tm_role_id role) {
    return layer < 0 ? (tm_mat_id)role : (tm_mat_id)((layer + 1) * TM_ROLE_COUNT + role);
}
static inline int tm_mat_layer(tm_mat_id id) { return id / TM_ROLE_COUNT - 1; }
static inline tm_role_id tm_mat_role(tm_mat_id id) { return (tm_role_id)(id % TM_ROLE_COUNT); }

enum {
    TM_OPF_PER_SEQ = 1u << 0, /* positional: once per sequence of the step */
    TM_OPF_FIRST = 1u << 1,   /* SITE: layer 0's first site (no delta to add) */
    TM_OPF_GATED = 1u << 2,   /* ATTENTION: a gate follows (MUL_SIGMOID) */
};

#define TM_PLAN_MAX_MATS 3

/* One operation: plain old data, the same on the host and in device memory. */
typedef struct tm_plan_op {
    int16_t kind;          /* tm_op_kind */
    int16_t flags;         /* TM_OPF_* */
    int32_t layer;         /* -1: embed / head */
    int8_t in, in2, in3, in4; /* tm_buf */
    int8_t out, out2;      /* tm_buf */
    int8_t n_mat;
    int8_t act;            /* TM_OP_ACT: tm_act_kind */
    tm_mat_id mat[TM_PLAN_MAX_MATS];
    int32_t out_w[TM_PLAN_MAX_MATS]; /* MATMUL: row stride of out[i] (its rows) */
    int8_t out_buf[TM_PLAN_MAX_MATS]; /* MATMUL: output buffers */
    int8_t pad_;
    tm_mat_id vec;         /* a gain / the layer's GDN vectors (role of the first) */
    int32_t width;         /* elements per row of in (MATMUL: k; SITE/LOGITS: n_embd) */
    int32_t had;           /* Hadamard width (signs of this width), 0: no transform */
    int32_t n_head, n_head_kv, head_dim; /* attention / head norm / rope (n_head: heads
                            * of in); GDN: n_head = n_k, n_head_kv = n_v, head_dim = dk */
    int32_t rope_dims;
    int32_t dv, conv_k;    /* GDN */
    int32_t cache;         /* KV_STORE/ATTENTION: kv_index; GDN: gdn_index */
    float eps;
    float theta;           /* RoPE base */
    float scale;           /* attention score scale */
} tm_plan_op;

typedef struct tm_plan {
    tm_plan_op *ops;       /* [n_ops] */
    int n_ops;
    int32_t buf_width[TM_BUF_COUNT];
    int n_layer_ops[2];    /* ops of one attention layer, one GDN layer (mixer + FFN) */
} tm_plan;

/* The plan of model m (hyper-parameters, layer kinds, Hadamard widths present);
 * free with tm_plan_free. TERN_ERR_NOMEM, or UNSUPPORTED for an architecture without
 * plan rules. */
tern_status tm_plan_build(const tern_model *m, tm_plan *out);
void tm_plan_free(tm_plan *p);
/* floats of one row of every buffer together (the scratch of one row) */
size_t tm_plan_row_floats(const tm_plan *p);

/* The matrix an id names (the decode copy when the model has one and `fast`), or
 * NULL; a vector (norm gain, GDN conv / ssm_a / dt_bias / norm) by id. */
const tern_qmat *tm_plan_mat(const tern_model *m, tm_mat_id id, bool fast);
const float *tm_plan_vec(const tern_model *m, tm_mat_id id);

/* The device-memory form: a header {magic "TPLN", version, n_ops, TM_BUF_COUNT,
 * the buffer widths} then the ops, in one blob of tm_plan_flat_bytes(p) bytes
 * (8-byte aligned, no pointers). tm_plan_flatten returns the bytes written (0: cap too
 * small); tm_plan_unflatten checks the header and gives a plan whose ops point into a
 * new allocation (tm_plan_free). */
#define TM_PLAN_MAGIC 0x4e4c5054u /* "TPLN" */
#define TM_PLAN_VERSION 1u
size_t tm_plan_flat_bytes(const tm_plan *p);
size_t tm_plan_flatten(const tm_plan *p, void *dst, size_t cap);
tern_status tm_plan_unflatten(const void *src, size_t n, tm_plan *out);

/* The plan with every FFN's activation `act` instead of the architecture's (tests: a
 * back-end must run what it does not fuse op by op). */
tern_status tm_plan_build_act(const tern_model *m, tm_act_kind act, tm_plan *out);

/* ------------------------------------------------- fusion matcher (plan.c) */
/* Runs of ops a back-end may run as one; tm_plan_match gives how many ops starting at
 * op i the run covers (0: the ops there are not that run). */
typedef enum tm_fuse {
    TM_FUSE_SITE_MATMUL, /* SITE, then the MATMUL reading its output (quantise in the norm) */
    TM_FUSE_HAD_MATMUL,  /* HADAMARD, then the one-matrix MATMUL reading it */
    TM_FUSE_ACT_MATMUL,  /* ACT of kind SwiGLU, then the MATMUL reading it */
    TM_FUSE_ATTN_CORE,   /* [SPLIT_HEADS] HEAD_NORM x2 ROPE x2 KV_STORE ATTENTION [MUL_SIGMOID] */
    TM_FUSE_GDN_CORE,    /* MATMUL(a|b) GDN [PERMUTE] HADAMARD MATMUL(out) */
} tm_fuse;
int tm_plan_match(const tm_plan *p, int i, tm_fuse f);

/* ------------------------------------------------- the generic walker (plan.c) */
/* The buffer of id b of the step (the scratch session's rows). */
float *tm_step_buf(const tm_step *st, int b);
/* Run op i of the plan through be->ops. `logits`: where LOGITS writes (back-end memory,
 * rows of n_vocab: all T rows when all_rows, else the last row only). */
tern_status tm_plan_run_op(tm_backend *be, const tm_step *st, const tm_plan_op *op, float *logits,
                           bool all_rows);
/* The whole plan through be->ops, logits into the host rows the step names (st->rows_out
 * or the session's row) and every member's logits row: a host-memory back-end's exec.
 * A step with hidden_out gets the output norm's rows there instead (no logits). */
tern_status tm_plan_exec(tm_backend *be, const tm_step *st);

#endif
