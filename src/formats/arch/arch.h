/*
 * arch.h - the tensor schema of each architecture: one table per architecture
 * (qwen35.c, qwen3.c), read by every reader and writer of model files: the GGUF
 * and MLX loaders (loader_bind.c), `tern convert` in both MLX directions
 * (convert_mlx.c), `tern quantize` (quantize.c), `tern synth` (synth.c) and the
 * V-head order rules (vorder.c).
 *
 * A role is one tensor of the model, described once:
 *   gguf   GGUF name; layer roles are "blk.<il>." + gguf
 *   hf     Hugging Face name; layer roles are "model.layers.<il>." + hf. The MLX
 *          pack uses the same name under TM_MLX_PREFIX; a ternary module's path
 *          is the HF name without ".weight" (tm_role_mlx_module)
 *   lk     top-level, every layer, attention layers, GDN layers
 *   val    value class (what the numbers are and how each format stores them)
 *   k, n   shape in GGUF ne order (k = row length, n = rows; n = TM_D_NONE for
 *          a vector of k elements), in terms of the hyperparameters (tm_dims)
 *   had    Hadamard site: folded (sign vector of width k folded in), inverse
 *          (the embedding table holds R e), none (reads the un-rotated input)
 *   vo     GDN V-head order rule (vorder.h): which rows/columns/elements are
 *          tiled in a GGUF and grouped in HF/MLX
 *   group  canonical GGUF tensor order of the converters: output (0),
 *          token_embd (1), layers (2) sorted by HF name, output_norm (3)
 *
 * Where the name strings live: every tensor name of every architecture is
 * written once, as a role descriptor in qwen35.c (the superset architecture).
 * qwen3.c lists the roles it shares by pointer (attention, MLP, norms,
 * embedding and head) and defines only its own (ffn_norm). A new architecture
 * adds one table file that reuses the roles it shares and defines the rest.
 * Nothing outside src/formats/arch spells a tensor name.
 */
#ifndef TERN_MODEL_ARCH_H
#define TERN_MODEL_ARCH_H

#include "core/common.h"
#include "formats/vorder.h"

#define TM_MLX_PREFIX "language_model."

typedef enum tm_arch { TM_ARCH_QWEN35 = 0, TM_ARCH_QWEN3 = 1, TM_ARCH_COUNT } tm_arch;

/* What a role is for the model (the loaders bind roles to tm_layer fields). */
typedef enum tm_role_id {
    TM_ROLE_TOKEN_EMBD, TM_ROLE_OUTPUT, TM_ROLE_OUTPUT_NORM,
    TM_ROLE_ATTN_NORM, TM_ROLE_POST_NORM,
    TM_ROLE_WQ, TM_ROLE_WK, TM_ROLE_WV, TM_ROLE_WO, TM_ROLE_Q_NORM, TM_ROLE_K_NORM,
    TM_ROLE_WQKV, TM_ROLE_WZ, TM_ROLE_WA, TM_ROLE_WB, TM_ROLE_WOUT,
    TM_ROLE_CONV, TM_ROLE_SSM_A, TM_ROLE_DT_BIAS, TM_ROLE_SSM_NORM,
    TM_ROLE_WGATE, TM_ROLE_WUP, TM_ROLE_WDOWN,
    TM_ROLE_COUNT
} tm_role_id;

typedef enum tm_layer_kind { TM_LK_TOP, TM_LK_ALL, TM_LK_ATTN, TM_LK_GDN } tm_layer_kind;

typedef enum tm_val {
    TM_VAL_TERNARY,   /* packed ternary matrix (quantize ternarises it) */
    TM_VAL_NORM,      /* RMSNorm gain; stored w+1 where the arch says norm_plus_one */
    TM_VAL_NORM_RAW,  /* RMSNorm gain always stored plain (the GDN output norm) */
    TM_VAL_SSM_A,     /* GGUF ssm_a = -exp(A_log); HF/MLX store A_log */
    TM_VAL_BIAS,      /* F32 vector (dt bias) */
    TM_VAL_CONV,      /* F32 conv weights: GGUF ne [conv_k, C], HF [C,1,k], MLX [C,k,1] */
    TM_VAL_DENSE      /* BF16 dense matrix (GDN alpha/beta; ternary on request) */
} tm_val;

typedef enum tm_had { TM_HAD_NONE, TM_HAD_FOLDED, TM_HAD_INVERSE } tm_had;

typedef enum tm_dim {
    TM_D_NONE = 0, TM_D_EMBD, TM_D_FF, TM_D_VOCAB, TM_D_HEAD_DIM,
    TM_D_Q,        /* n_head * head_dim (* 2 with the attention gate: q|gate per head) */
    TM_D_KV,       /* n_head_kv * head_dim */
    TM_D_ATTN_OUT, /* n_head * head_dim */
    TM_D_GDN_C,    /* 2 * n_k * dk + n_v * dv (q|k|v channels) */
    TM_D_GDN_V,    /* n_v * dv */
    TM_D_GDN_NV,   /* n_v */
    TM_D_GDN_DV,   /* dv */
    TM_D_CONV_K    /* conv kernel */
} tm_dim;

typedef struct tm_role {
    tm_role_id id;
    const char *gguf, *hf;
    tm_layer_kind lk;
    tm_val val;
    tm_dim k, n;
    tm_had had;
    tern_vorder_kind vo;
    int group;
    bool optional;            /* may be absent (the head: tied to the embedding) */
} tm_role;

typedef struct tm_arch_desc {
    tm_arch id;
    const char *name;         /* general.architecture and the hparam key prefix */
    bool hybrid;              /* GDN layers, attention every full_attention_interval-th */
    bool attn_gate;           /* q rows are [q | gate] per head */
    bool norm_plus_one;       /* TM_VAL_NORM gains stored w+1 */
    float rope_theta;         /* rope.freq_base when the key is absent */
    const tm_role *const *roles; /* model order within each group (config.json module order) */
    int n_roles;
    const char *const *hf_ignored; /* HF tensors that are not part of the text model (NULL-ended) */
} tm_arch_desc;

/* The hyperparameters the shapes are written in. vocab 0: unknown (any). */
typedef struct tm_dims {
    int64_t embd, ff, vocab, n_head, n_head_kv, head_dim;
    int64_t ssm_n_k, ssm_n_v, ssm_dk, ssm_dv, conv_k;
    bool attn_gate;
} tm_dims;

extern const tm_arch_desc tm_arch_qwen35, tm_arch_qwen3;

/* NULL for an unknown id / name. */
const tm_arch_desc *tm_arch_get(int id);
const tm_arch_desc *tm_arch_by_name(const char *name);

/* The role of an architecture with this id (NULL if it has none). */
const tm_role *tm_arch_role(const tm_arch_desc *a, tm_role_id id);
/* Position of r in a's table (model order), or -1. */
int tm_arch_role_index(const tm_arch_desc *a, const tm_role *r);
/* Does layer il run attention (else GDN)? */
bool tm_arch_layer_is_attn(const tm_arch_desc *a, int il, int full_attn_interval);
/* Does role r exist in a layer of this kind (is_attn)? Top roles: false. */
bool tm_role_in_layer(const tm_role *r, bool is_attn);

/* Names. il is ignored for top roles. Return false when the buffer is too small. */
bool tm_role_gguf_name(const tm_role *r, int il, char *buf, size_t n);
bool tm_role_hf_name(const tm_role *r, int il, char *buf, size_t n);
/* The MLX ternary module path: HF name without ".weight". */
bool tm_role_mlx_module(const tm_role *r, int il, char *buf, size_t n);
/* Parse a name of architecture a; *il = layer (0 for top roles). NULL: unknown. */
const tm_role *tm_arch_find_gguf(const tm_arch_desc *a, const char *name, int *il);
const tm_role *tm_arch_find_hf(const tm_arch_desc *a, const char *name, int *il);
/* HF tensors outside the text model (vision tower, MTP head, rotary tables). */
bool tm_arch_hf_ignored(const tm_arch_desc *a, const char *hf);

/* Shape of r: *k = row length (vector length), *n = rows (1 for vectors; -1
 * when the dim is unknown, i.e. the vocabulary before the embedding is read). */
int64_t tm_dim_value(tm_dim d, const tm_dims *x);
void tm_role_shape(const tm_role *r, const tm_dims *x, int64_t *k, int64_t *n);
bool tm_role_is_vector(const tm_role *r);

#endif
