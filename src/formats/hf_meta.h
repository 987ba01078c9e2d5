/*
 * hf_meta.h - Hugging Face config.json / tokenizer files <-> GGUF metadata for
 * qwen35 and qwen3 (used by quantize, synth and the MLX pack conversion).
 *
 * config.json: flat (model_type qwen3_5_text / qwen3) or nested (qwen3_5 with
 * text_config). GGUF keys are written in the order and with the types of the
 * fork's convert_hf_to_gguf.py (the fixtures' converter output):
 *   general.architecture, general.type, general.name, general.size_label,
 *   A.block_count, A.context_length, A.embedding_length, A.feed_forward_length,
 *   A.attention.head_count, A.attention.head_count_kv, [qwen35: A.rope.dimension_sections],
 *   A.rope.freq_base, A.attention.layer_norm_rms_epsilon, A.attention.key_length,
 *   A.attention.value_length, general.file_type, [qwen35: A.ssm.conv_kernel,
 *   A.ssm.state_size, A.ssm.group_count, A.ssm.time_step_rank, A.ssm.inner_size,
 *   A.full_attention_interval, A.rope.dimension_count], general.quantization_version,
 *   tokenizer.ggml.{model, pre, tokens, token_type, merges, eos_token_id,
 *   padding_token_id, bos_token_id, add_bos_token, add_eos_token}, tokenizer.chat_template.
 * Tokenizer: tokenizer.json (BPE vocab + added_tokens + merges) and
 * tokenizer_config.json (special tokens, add_bos/eos, chat_template). Token types:
 * NORMAL 1, CONTROL 3 (special added tokens), USER_DEFINED 4 (other added
 * tokens), UNUSED 5 ("[PADn]" fillers up to vocab_size). pre = "qwen35" when the
 * split regex has \p{M} in its letter classes, else "qwen2".
 */
#ifndef TERN_FORMATS_HF_META_H
#define TERN_FORMATS_HF_META_H

#include "core/common.h"
#include "formats/gguf.h"
#include <cjson/cJSON.h>

#define TERN_HF_MAX_VOCAB ((int64_t)1 << 24)   /* vocab_size above this is refused */

typedef enum tern_hf_arch { TERN_HF_QWEN35 = 0, TERN_HF_QWEN3 = 1 } tern_hf_arch;

typedef struct tern_hf_hparams {
    tern_hf_arch arch;
    int64_t n_layer, n_ctx, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab;
    double rope_theta, rms_eps;
    bool tie_embeddings;
    int64_t bos_id, eos_id, pad_id;        /* from config.json, -1 when absent */
    /* qwen35 */
    int64_t ssm_conv, ssm_dk, ssm_n_k, ssm_n_v, ssm_dv;
    int64_t full_attn_interval, rope_dim;
    double partial_rotary;
    int32_t mrope[4];
    uint8_t full_attn[1024];               /* per layer: 1 = full attention */
} tern_hf_hparams;

/* partial_rotary_factor of a Qwen3.5 text config c, overridden by its rope_parameters
 * rp (may be NULL): *out keeps its value when neither has the key; TERN_ERR_FORMAT
 * naming the field when a value present is not in (0, 1] (head_dim x it is the rotary
 * width: a huge factor would overflow the conversion). */
tern_status tern_hf_partial_rotary(const cJSON *c, const cJSON *rp, const char *src, double *out);
tern_status tern_hf_hparams_load(const char *config_path, tern_hf_hparams *hp);
tern_status tern_hf_hparams_from_json(const cJSON *root, const char *src, tern_hf_hparams *hp);
/* Read the hyperparameters back from GGUF keys (arch qwen35 / qwen3). */
tern_status tern_hf_hparams_from_gguf(const tern_gguf *g, tern_hf_hparams *hp);
/* text_config JSON object for an MLX pack / HF config (caller owns). */
cJSON *tern_hf_hparams_to_json(const tern_hf_hparams *hp);

typedef struct tern_hf_tokenizer {
    uint64_t n_tokens;
    char **tokens;
    int32_t *types;
    uint64_t n_merges;
    char **merges;
    char pre[32];
    int64_t eos_id, pad_id, bos_id;        /* -1: absent */
    int add_bos, add_eos;                  /* -1: absent */
    char *chat_template;                   /* NULL: absent */
} tern_hf_tokenizer;

/* From dir/tokenizer.json and dir/tokenizer_config.json (+ chat_template.jinja). */
tern_status tern_hf_tokenizer_load(const char *dir, const tern_hf_hparams *hp, tern_hf_tokenizer **out);
/* The same from parsed tokenizer.json (tj) and tokenizer_config.json (cj, may be NULL). */
tern_status tern_hf_tokenizer_from_json(const cJSON *tj, const cJSON *cj, const tern_hf_hparams *hp,
                                        const char *src, tern_hf_tokenizer **out);
/* A minimal valid byte-level tokenizer: the 256 byte tokens, filler tokens up to
 * n_vocab - 5 and the five Qwen added tokens (<|endoftext|>, <|im_start|>,
 * <|im_end|>, <think>, </think>) at the end; no merges. */
tern_status tern_hf_tokenizer_synthetic(int64_t n_vocab, tern_hf_tokenizer **out);
void tern_hf_tokenizer_free(tern_hf_tokenizer *t);

/* Write every general.* / arch / tokenizer key, in the converter's order;
 * general.file_type from the ternary weight type (tern_hf_file_type). */
tern_status tern_hf_write_meta(tern_gguf_writer *w, const tern_hf_hparams *hp, const char *name,
                               uint64_t n_params, tern_dtype weight_type, const tern_hf_tokenizer *tok);
/* general.file_type for a ternary tensor type (PQ2_0 141, PTQ1_0 143, Q2_0 41; 0 otherwise). */
uint32_t tern_hf_file_type(tern_dtype t);
/* "79M"-style size label of a parameter count (gguf-py's rounded notation). */
void tern_hf_size_label(uint64_t n_params, char *buf, size_t n);
const char *tern_hf_arch_name(tern_hf_arch a);

#endif
