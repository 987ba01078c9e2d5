/*
 * quantize.h - `tern quantize`: a Hugging Face checkpoint (config.json +
 * model.safetensors or a sharded model.safetensors.index.json; F32/F16/BF16/F64)
 * of a qwen35 (Qwen3_5ForCausalLM, model_type qwen3_5_text / qwen3_5) or qwen3
 * model to a ternary GGUF with the Bonsai conventions:
 *   - optional blockwise Hadamard fold, per row: W' = FWHT_1024(S * w) / 32
 *     (W' = W R^T with R = blockdiag(H) S / 32); the embedding table stores
 *     z = R e, which is the same per-row formula; prism.hadamard.* keys;
 *   - ternary g128: d = max|w'| over the group (float), code = round(w'/d) + 1
 *     (round half away from zero, on w' * (1/d) in float, as ggml/gguf-py do),
 *     d stored as fp16(d);
 *   - qwen35: norms stored w + 1 (not ssm_norm), V heads in tiled order, ssm_a =
 *     -exp(A_log), conv1d [C,1,4] -> ne [4, C], ssm_alpha/beta BF16 (or ternary,
 *     like the fork's converter, with alpha_beta_ternary), ssm_out columns tiled
 *     without Hadamard and grouped (gdn_v_grouped = true) with it;
 *   - metadata keys, their order and types as the fork's convert_hf_to_gguf.py
 *     writes them; tokenizer.ggml.* from tokenizer.json / tokenizer_config.json.
 * Tensors are converted one at a time while the GGUF is written (HF shards are
 * mmapped), so memory stays at about one tensor.
 *
 * SIGNS file (--hadamard): a GGUF with prism.hadamard.sign_widths/sign_values
 * (e.g. an existing Bonsai model), or JSON {"block_size": 1024, "sign_widths":
 * [...], "sign_values": [...]} (keys may also carry the "prism.hadamard." prefix,
 * as in an MLX pack's hadamard.json).
 */
#ifndef TERN_FORMATS_QUANTIZE_H
#define TERN_FORMATS_QUANTIZE_H

#include "core/common.h"

typedef enum tern_quant_hadamard {
    TERN_QH_NONE = 0,     /* no rotation */
    TERN_QH_FILE,         /* signs from signs_path */
    TERN_QH_SEED          /* signs drawn from seed */
} tern_quant_hadamard;

typedef struct tern_quantize_opts {
    tern_quant_hadamard hadamard;
    const char *signs_path;
    uint64_t seed;
    tern_dtype out_type;          /* TERN_DT_COUNT: PQ2_0 with Hadamard, Q2_0 without */
    const char *name;             /* general.name (NULL: the HF dir's base name) */
    bool alpha_beta_ternary;      /* ssm_alpha/beta ternary like the fork's converter (default BF16) */
    tern_progress_fn progress;
    void *progress_user;
} tern_quantize_opts;

tern_status tern_quantize_hf(const char *hf_dir, const char *out_gguf, const tern_quantize_opts *o);

/* Blockwise fold of one row in place (double precision): x = FWHT_n(S * x) / sqrt(n). */
void tern_fold_row(double *x, const float *signs, uint64_t K, uint32_t block);
/* Quantize one row of K floats (K % 128 == 0) to codes and fp16 scales. */
void tern_ternarize_row(const float *w, uint64_t K, uint8_t *codes, uint16_t *d);
/* Deterministic +-1 signs for `width` from a seed (splitmix64 of seed and width). */
void tern_signs_from_seed(uint64_t seed, uint64_t width, int32_t *out);

#endif
