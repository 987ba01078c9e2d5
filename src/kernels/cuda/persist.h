/*
 * persist.h - the persistent decode step (docs/persistent.md): the program one
 * cooperative kernel runs for one single-token step (tc_persist.cu), made on the host
 * from the model's step plan (src/backends/cuda/persist_build.c). Plain C, the same
 * structs on the host and in device memory (no host pointers inside: every pointer is
 * device memory, or anything at all in a CPU test of the builder).
 *
 * A program is a list of stages in execution order; stage s has n_tasks tasks; every
 * task belongs to one CTA (one per SM), and each CTA runs its tasks in stage order.
 * A task of stage s first waits until stage dep has signalled all its tasks (a counter
 * per stage in global memory), then runs, then signals s. Every dep is an earlier stage,
 * so with all CTAs resident (cooperative launch) the step always completes.
 *
 * Matmul stages split the 16-row strips of their matrices (the tiled layout,
 * gemv_tiled.h) over the tasks: task i covers strips [a, b) of the stage's strip space
 * (matrix 0's strips, then matrix 1's, ...; a SwiGLU stage's strip space is the gate's
 * strips, each strip computing the gate and up rows of the same index).
 */
#ifndef TERN_KERNELS_CUDA_PERSIST_H
#define TERN_KERNELS_CUDA_PERSIST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TP_MAX_MATS 3
#define TP_THREADS 256 /* per CTA: 8 warps */
#define TP_WARPS (TP_THREADS / 32)

enum tp_kind {
    TP_EMBED = 0, /* x = row `token` of w[0] (width in_k); partial sums of squares; task 0
                   * also the position's RoPE table (rope_dims, theta) */
    TP_MATMUL,    /* out rows = W in (see in_mode / out_mode) */
    TP_ATTN,      /* one query head per task: q/k head norm + RoPE, k/v to the cache, attention */
    TP_ARGMAX,    /* one task: the argmax of the logits from the head's partial slots */
    TP_GDN,       /* one value head per task: a, b (dense rows on the normed x), q/k L2 norms,
                   * the delta rule on the head's state, the gated norm; out_buf[0] gets the
                   * head's dv outputs at its slot (grouped order when out_grouped) */
    TP_KIND_COUNT
};

enum tp_ab { TP_AB_F32 = 0, TP_AB_F16, TP_AB_BF16 }; /* tp_stage.ab_kind */

enum tp_in {
    TP_IN_NORM = 0, /* rmsnorm(x) * gain, the norm from the partial slots of norm_src */
    TP_IN_BUF,      /* the buffer in_buf as is */
};

enum tp_out {
    TP_OUT_ROWS = 0, /* out_buf[i] + out_off[i] gets matrix i's rows */
    TP_OUT_RESID,    /* x[row] += y (one matrix); partial sum of squares of the new rows */
    TP_OUT_SWIGLU,   /* out_buf[0][row] = silu(gate row) * up row (matrices 0 and 1) */
    TP_OUT_LOGITS,   /* out_buf[0][row] = y; partial (max, index) for TP_ARGMAX */
    TP_OUT_CONV,     /* matrix 0 (the GDN's q|k|v channels): out_buf[0][row] = silu(causal conv of
                      * the channel's conv state and y), the state shifted; matrix 1 (z) as ROWS */
};

/* Activation buffers: float offsets into the program's scratch (tp_prog.buf_off). */
enum tp_buf { TP_BUF_X = 0,
              TP_BUF_QKV,  /* q|k|v rows (attention; q|gate per head when gated), or the GDN's
                            * conv'd q|k|v channels */
              TP_BUF_ATT,  /* the attention's output, or the GDN's */
              TP_BUF_ACT, TP_BUF_LOGITS,
              TP_BUF_ROPE, /* the step's RoPE cos[rope_dims/2], sin[rope_dims/2] (EMBED task 0 writes it) */
              TP_BUF_Z,    /* the GDN's output gate z [n_v*dv] */
              TP_BUF_COUNT };

typedef struct tp_stage {
    int32_t kind;        /* tp_kind */
    int32_t plan_op;     /* the plan op this stage starts at (errors name it) */
    int32_t layer;       /* -1: embed / head */
    int32_t n_tasks;
    int32_t dep;         /* the stage waited for (-1: none) */
    int32_t task0;       /* this stage's first partial slot (tasks numbered in stage order) */
    int32_t in_mode, in_buf, in_k; /* matmul input; in_k: its width (EMBED: n_embd) */
    int32_t norm_src;    /* TP_IN_NORM: the stage whose partial slots hold x's sum of squares */
    int32_t out_mode, n_mat;
    int32_t out_buf[TP_MAX_MATS];
    int32_t out_off[TP_MAX_MATS];    /* float offset of matrix i's rows in out_buf[i] */
    int64_t strip0[TP_MAX_MATS + 1]; /* matrix i owns strips [strip0[i], strip0[i+1]) */
    const void *w[TP_MAX_MATS];      /* tiled ternary data (TC_TERN128T) */
    int64_t n[TP_MAX_MATS];          /* rows */
    int64_t kt[TP_MAX_MATS];         /* 256-input tiles per strip */
    int64_t rb[TP_MAX_MATS];         /* bytes per row in the file layout (the host reference's) */
    const float *gain;   /* TP_IN_NORM (and TP_GDN's a, b input): the site's gain [in_k] */
    float eps;
    /* The blockwise Hadamard transform (docs/formats.md): MATMUL: of the input before it is
     * quantised, x <- FWHT_block(x * signs) / sqrt(block); EMBED: the inverse of the
     * gathered row, x <- signs * FWHT_block(x) / sqrt(block) (tasks cover whole blocks).
     * NULL: none. */
    const float *signs;  /* [in_k] */
    int32_t had_block;
    /* TP_ATTN */
    int32_t n_head, n_head_kv, head_dim, rope_dims, kv_index;
    int32_t gated;       /* q rows are q|gate per head; the output times sigmoid(gate) */
    float theta, scale;
    const float *q_norm, *k_norm; /* [head_dim] */
    /* TP_OUT_CONV and TP_GDN: the layer's GDN shape and vectors */
    int32_t gdn_index, conv_k, n_k, n_v, dk, dv;
    int32_t v_tiled;     /* value head p reads key head p % n_k (else p / (n_v / n_k)) */
    int32_t out_grouped; /* head p's output at slot (p % n_k) * r + p / n_k (tiled -> grouped) */
    const float *conv_w; /* [C][conv_k], C = 2 n_k dk + n_v dv */
    const float *ssm_a, *dt_bias, *gdn_norm; /* [n_v], [n_v], [dv] */
    const void *wab[2];  /* TP_GDN: the a and b projections, dense rows [n_v][in_k] */
    int32_t ab_type;     /* their tern_dtype (the host reference reads any) */
    int32_t ab_kind;     /* TP_AB_*: what the kernel reads (-1: another type) */
    int64_t ab_rb;       /* bytes per row */
} tp_stage;

typedef struct tp_task {
    int32_t stage;
    int32_t idx;         /* the task's index in its stage */
    int64_t a, b;        /* MATMUL: strips [a, b); ATTN: query head a; EMBED: elements [a, b) */
} tp_task;

typedef struct tp_prog {
    tp_stage *stages;
    int n_stages;
    tp_task *tasks;      /* grouped by CTA: CTA c runs tasks[cta_off[c] .. cta_off[c+1]) */
    int n_tasks;
    int32_t *cta_off;    /* [n_cta + 1] */
    int n_cta;
    size_t buf_off[TP_BUF_COUNT]; /* float offsets in the scratch */
    size_t scratch_floats;
    int max_in_k;        /* widest matmul input, padded to 256: shared memory of a CTA */
    int n_vocab, n_embd, head_dim_max;
    int n_gdn;           /* GDN layers (their states: the session's) */
    int logits_stage, argmax_stage;
} tp_prog;

/* Shared memory (bytes) a CTA of the program needs. */
static inline size_t tp_smem_bytes(const tp_prog *p) {
    /* the matmul (tc_persist_mm.cuh): q, sx, corr, {sx, corr} pairs, partials */
    size_t mm = (size_t)p->max_in_k * 2 + (size_t)p->max_in_k / 128 * 28 + (size_t)TP_WARPS * 2 * 32 * 4 + 256;
    size_t at = (size_t)(3 + TP_WARPS) * (size_t)p->head_dim_max * 4 + 2 * TP_WARPS * 4 + 256;
    /* a GDN task: q and k (128 each, padded to 8 x 17), its a and b rows (n_embd elements,
     * f32 at most) */
    size_t gd = p->n_gdn ? 2 * 8 * 17 * 4 + 2 * (size_t)p->n_embd * 4 + 256 : 0;
    if (gd > mm) mm = gd;
    return mm > at ? mm : at;
}

/* ------------------------------------------------------------ the launcher (tc_persist.cu) */
struct tc_ctx;
typedef struct tc_persist tc_persist;

/* One sequence's step: its caches (all layers, rows of k_row / v_row bytes, n_ctx
 * positions per layer), its position and token. kv_type: TC_KV_F32/F16/BF16 (q8_0 is
 * refused), the same for k and v. */
typedef struct tc_persist_seq {
    void *kcache, *vcache;
    size_t k_row, v_row;
    int n_ctx, pos, token, kv_type;
    /* GDN layers (qwen35): the session's conv states (fp32, [conv_k - 1][C] a layer) and
     * recurrent states ([n_v][dk][dv] a layer, fp32, or bf16 when gdn_bf16), layer g at
     * g times the layer's size (the CUDA back-end's session layout) */
    float *conv_state;
    void *gdn_state;
    int gdn_bf16;
} tc_persist_seq;

/* tc_persist_step's answer when a wait ran out of budget (*failed_stage: the stage). */
#define TC_PERSIST_WATCHDOG 100100

/* CTAs the device can run co-resident (its SMs), or 0 without cooperative launch. */
int tc_persist_sms(struct tc_ctx *cx);
/* The program in device memory (p->n_cta CTAs), its scratch and counters; 0,
 * TC_ERR_UNSUPPORTED (one CTA with tp_smem_bytes(p) does not fit on an SM), or a CUDA
 * error. The weights and gains p points to must outlive it. */
int tc_persist_new(struct tc_ctx *cx, const tp_prog *p, tc_persist **out);
void tc_persist_free(tc_persist *ps);
/* One step: launch, then the status (and the argmax token) and the logits (n_vocab
 * floats) into host memory (logits_host may be NULL). 0, TC_PERSIST_WATCHDOG,
 * TC_ERR_UNSUPPORTED (the grid cannot be co-resident: nothing ran, nothing noted), or a
 * CUDA error (also noted in the context's sticky error). Synchronous. */
int tc_persist_step(tc_persist *ps, const tc_persist_seq *sq, float *logits_host, int *token_out, int *failed_stage);

#ifdef __cplusplus
}
#endif

#endif
