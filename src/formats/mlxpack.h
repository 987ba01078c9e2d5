/*
 * mlxpack.h - reader for PrismML's MLX 2-bit pack (seed 000 section 3.3):
 *
 *   DIR/config.json      model_type ("prism_hadamard_qwen35"), base_model_type,
 *                        quantization {bits 2, group_size G, mode "affine"},
 *                        modules [{path, block, embedding, dtype}], text_config
 *                        (the Hugging Face text config: hidden_size, ...)
 *   DIR/hadamard.json    the prism.hadamard contract (hadamard.h), names in the
 *                        pack's namespace ("language_model." + HF name)
 *   DIR/model.safetensors
 *
 * A ternary module P (a `modules` path; tensor names are P.* or
 * "language_model." + P.*) is
 *   P.weight  U32 [N, K/16]  element j of each 16 at bits 2j, code t+1 in {0,1,2}
 *                            (the PQ2_0 qs bytes read as little-endian u32)
 *   P.scales  F16 [N, K/G]
 *   P.biases  F16 [N, K/G]   exactly -scales (else the pack is not ternary: refused)
 *   P.signs   F16 [K]        the +-1 sign vector of its K width (folded modules)
 * Value of element (n, k): (code - 1) * scales[n, k/G]. Code 3 is refused.
 * Every other tensor (norms, A_log, conv1d, in_proj_a/b) is a plain
 * safetensors tensor under its HF name; V heads are in grouped order.
 */
#ifndef TERN_FORMATS_MLXPACK_H
#define TERN_FORMATS_MLXPACK_H

#include "core/common.h"
#include "formats/safetensors.h"
#include "formats/hadamard.h"

struct cJSON;

typedef struct tern_mlx_module {
    char *path;                 /* as in config.json, e.g. "model.layers.0.mlp.down_proj" */
    char *prefix;               /* resolved tensor prefix, e.g. "language_model.model.layers.0.mlp.down_proj" */
    uint32_t block;             /* Hadamard block (0 if absent) */
    bool embedding;
    char dtype[16];             /* "float16" */
} tern_mlx_module;

typedef struct tern_mlxpack {
    char *dir;
    struct cJSON *config;               /* config.json (owned) */
    const struct cJSON *text_config;    /* config.text_config, or config itself when absent */
    const char *model_type;             /* config.model_type */
    const char *text_model_type;        /* text_config.model_type ("qwen3_5_text", "qwen3") or "" */
    const char *tensor_prefix;          /* "language_model." or "" (how module paths map to tensors) */
    uint32_t bits, group_size;          /* 2, 128 */
    size_t n_modules;
    tern_mlx_module *modules;
    tern_st *st;                        /* model.safetensors */
    tern_hadamard_meta *hadamard;            /* NULL when the pack has no hadamard.json */
} tern_mlxpack;

/* Open and validate a pack directory: config.json, hadamard.json (when present,
 * validated against the tensors), model.safetensors, and every module's
 * weight/scales/biases shapes, dtypes and biases == -scales. Codes are checked
 * (never 3) by tern_mlxpack_ternary(). */
tern_status tern_mlxpack_open(const char *dir, tern_mlxpack **out);
void tern_mlxpack_close(tern_mlxpack *p);
/* True when dir looks like a pack (has config.json and model.safetensors). */
bool tern_mlxpack_is_dir(const char *dir);

/* A tensor by name: tries `name` as given, then tensor_prefix + name. NULL if absent. */
const tern_st_tensor *tern_mlxpack_tensor(const tern_mlxpack *p, const char *name);
/* The module whose path (or prefix) is `path`, NULL if none. */
const tern_mlx_module *tern_mlxpack_module(const tern_mlxpack *p, const char *path);

/* text_config getters (fail naming config.json and the key). */
tern_status tern_mlxpack_cfg_i64(const tern_mlxpack *p, const char *key, int64_t *out);
tern_status tern_mlxpack_cfg_i64_opt(const tern_mlxpack *p, const char *key, int64_t *out);
tern_status tern_mlxpack_cfg_f64(const tern_mlxpack *p, const char *key, double *out);
tern_status tern_mlxpack_cfg_f64_opt(const tern_mlxpack *p, const char *key, double *out);
tern_status tern_mlxpack_cfg_bool_opt(const tern_mlxpack *p, const char *key, bool *out);

/* A ternary module, validated (shapes, dtypes, biases == -scales, no code 3,
 * signs +-1 and equal to the contract's vector for K when both exist). All
 * pointers are into the mapping (unaligned: read with tern_rd32/tern_rd16). */
typedef struct tern_mlx_ternary {
    const tern_mlx_module *module;
    uint64_t N, K;              /* rows, reduction width */
    uint32_t group_size;
    const uint8_t *words;       /* U32 [N][K/16] */
    const uint8_t *scales;      /* F16 [N][K/G] */
    const uint8_t *biases;      /* F16 [N][K/G] */
    const uint8_t *signs;       /* F16 [K] or NULL */
} tern_mlx_ternary;
tern_status tern_mlxpack_ternary(const tern_mlxpack *p, const tern_mlx_module *m, tern_mlx_ternary *out);

/* Map text_config to GGUF metadata names for `arch` ("qwen35" or "qwen3"):
 * calls emit(gguf_key, value, user) for every hyperparameter it can derive
 * (e.g. "qwen35.block_count" <- num_hidden_layers). Integer values are passed
 * as doubles; arrays (rope.dimension_sections) as emit_arr. */
typedef void (*tern_mlx_emit_fn)(const char *gguf_key, double v, bool is_int, void *user);
typedef void (*tern_mlx_emit_arr_fn)(const char *gguf_key, const int64_t *v, size_t n, void *user);
tern_status tern_mlxpack_gguf_hparams(const tern_mlxpack *p, const char **arch, tern_mlx_emit_fn emit,
                                      tern_mlx_emit_arr_fn emit_arr, void *user);

#endif
