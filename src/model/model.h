/*
 * model.h - internal model structures shared by the loader (loader.c,
 * loader_mlx.c), the back-end table (backend.h, backend_cpu.c), the forward
 * passes (forward.c) and sessions (session.c).
 *
 * Two architectures:
 *   qwen35  hybrid: GDN (Gated DeltaNet) layers and every full_attention_interval-th
 *           layer full attention (q|gate interleaved per head, partial NEOX RoPE),
 *           norm gains stored +1 (used directly), untied head, optional blockwise
 *           Hadamard folded into every ternary matrix (prism.hadamard.*).
 *   qwen3   dense: full attention everywhere (NEOX RoPE over the whole head),
 *           plain norm gains, tied head when output.weight is absent.
 *
 * Weight matrices (tern_qmat) point into the read-only mapping; PTQ1_0 and the
 * MLX pack's words+scales are repacked to PQ2_0 at load (counted in alloc_bytes).
 *
 * GDN value-head order: a GGUF stores the per-value-head tensors in "tiled" order
 * (file slot p = j*n_k + k for key head k, j < n_v/n_k); the MLX pack in "grouped"
 * order (g = k*r + j). The model runs in the file's order: v_tiled says which, and
 * fixes the key head each value head reads (tiled: p % n_k; grouped: g / r).
 * out_permute says the GDN output must be permuted tiled->grouped before out_proj
 * (GGUF with gdn_v_grouped = true); otherwise ssm_out columns match the run order.
 */
#ifndef TERN_MODEL_MODEL_H
#define TERN_MODEL_MODEL_H

#include "core/common.h"
#include "kernels/kernels.h"
#include "formats/arch/arch.h"
#include "model/plan.h"

#include <pthread.h>

typedef struct tm_layer {
    bool is_attn;                 /* full attention (else GDN) */
    const float *attn_norm;       /* [n_embd] gain as used (x/rms * gain) */
    const float *post_norm;       /* [n_embd] (qwen3: ffn_norm) */
    /* full attention */
    tern_qmat wq;                 /* [n_head*head_dim*(gate?2:1), n_embd] */
    tern_qmat wk, wv;             /* [n_head_kv*head_dim, n_embd] */
    tern_qmat wo;                 /* [n_embd, n_head*head_dim] */
    const float *q_norm, *k_norm; /* [head_dim] */
    int kv_index;                 /* index among attention layers (KV cache slot) */
    /* GDN */
    tern_qmat wqkv;               /* [2*n_k*dk + n_v*dv, n_embd] */
    tern_qmat wz;                 /* [n_v*dv, n_embd] */
    tern_qmat wa, wb;             /* [n_v, n_embd] (BF16 dense or ternary), un-rotated input */
    tern_qmat wout;               /* [n_embd, n_v*dv] */
    const float *conv;            /* [conv_ch][conv_k] */
    const float *ssm_a;           /* [n_v] = -exp(A_log) */
    const float *dt_bias;         /* [n_v] */
    const float *ssm_norm;        /* [dv] plain gain */
    int gdn_index;                /* index among GDN layers (state slot) */
    /* MLP */
    tern_qmat wgate, wup;         /* [n_ff, n_embd] */
    tern_qmat wdown;              /* [n_embd, n_ff] */
    /* Optional copies in the kernels' fastest layout (tern_model_params.repack), used
     * for every product (the file pages are dropped); data NULL when absent. */
    tern_qmat fast_wq, fast_wk, fast_wv, fast_wo, fast_wqkv, fast_wz, fast_wout;
    tern_qmat fast_wgate, fast_wup, fast_wdown;
} tm_layer;

typedef struct tm_hparams {
    tm_arch arch;
    int n_layer, n_embd, n_ff, n_vocab;
    int n_head, n_head_kv, head_dim;
    bool attn_gate;               /* qwen35: q rows are per head [q | gate] */
    int rope_dims;                /* rotated dims per head (first rope_dims), NEOX pairs */
    float rope_theta;
    float eps;
    int n_ctx_train;
    /* GDN (qwen35) */
    int full_attn_interval;
    int ssm_n_k, ssm_n_v, ssm_dk, ssm_dv, conv_k;
    int n_attn_layers, n_gdn_layers;
} tm_hparams;

/* One sign vector per K width. */
typedef struct tm_signs {
    int width;
    float *s;                     /* [width] +-1 */
} tm_signs;

struct tern_model {
    tern_model_info info;
    tm_hparams hp;
    char *path;
    char *name;
    uint64_t mat_elems;           /* elements of every matrix loaded (tm_fill_info: info.matmul_weights) */
    void *gguf;                   /* tern_gguf* (NULL for an MLX pack) */
    void *mlx;                    /* tern_mlxpack* (NULL for a GGUF) */
    tm_layer *layers;
    tern_qmat tok_embd;           /* [n_vocab, n_embd] */
    tern_qmat output;             /* [n_vocab, n_embd] (may alias tok_embd: tied) */
    tern_qmat fast_output;        /* decode-layout copy (data NULL when absent) */
    const float *output_norm;     /* [n_embd] */
    /* Hadamard */
    bool hadamard;
    int had_block;
    tm_signs *signs;              /* [n_signs] (calloc; the vectors are model allocations) */
    int n_signs;
    bool v_tiled, out_permute;
    bool gdn_bf16;                /* tern_model_params.gdn_state == TERN_GDN_STATE_BF16 */
    bool embd_inverse;            /* token_embd holds R e (inverse after gather) */
    bool repacked;                /* some fast_* copies exist (freed at the end) */
    /* owned allocations (repacks, converted tensors): a list, freed at the end */
    void **owned;
    size_t *owned_n;
    int n_owned, cap_owned;
    tern_progress_fn progress;    /* during load only */
    void *progress_user;
    pthread_mutex_t eval_mu;      /* serialises evaluation: the pool is not reentrant */
    uint64_t sessions_bytes;      /* bytes of this model's live sessions (atomic) */
    struct tm_backend *be;        /* the back-end instance (owned; backend.h) */
    tm_plan plan;                 /* the step plan (plan.h), built once the model is bound */
    /* device copies (be->alloc), freed with be->free at the end */
    void **dev;
    size_t *dev_n;
    int n_dev, cap_dev;
};

/* Allocation owned by the model (counted in info.alloc_bytes). NULL on failure. */
void *tm_model_alloc(tern_model *m, size_t n);
/* Sign vector for width k (NULL when the model has no Hadamard or none for k). */
const float *tm_model_signs(const tern_model *m, int64_t k);

/* Hyperparameters from GGUF-named keys ("<arch>.block_count", ...); hp.arch set
 * first. get() sets *found and *out (numbers as double). */
typedef tern_status (*tm_key_get)(void *u, const char *key, double *out, bool *found);
tern_status tm_hparams_load(tern_model *m, tm_key_get get, void *u, const char *path);
void tm_fill_info(tern_model *m);
/* The architecture table of the model (arch/arch.h). */
const tm_arch_desc *tm_model_arch(const tern_model *m);
/* The field role `id` binds to in layer l (l NULL: the top-level tensors), or NULL. */
tern_qmat *tm_model_mat_slot(tern_model *m, tm_layer *l, tm_role_id id);
const float **tm_model_vec_slot(tern_model *m, tm_layer *l, tm_role_id id);
/* Report layer il of n loaded; TERN_ERR_CANCELLED when the callback says stop. */
tern_status tm_load_progress(tern_model *m, int il, int n);

/* loader_mlx.c */
tern_status tm_load_mlx(tern_model *m, const char *dir);
void tm_mlx_close(void *pack);

#endif
