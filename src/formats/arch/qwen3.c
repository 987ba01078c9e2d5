/*
 * qwen3.c - the qwen3 tensor schema (dense transformer: attention in every
 * layer, plain norm gains, head tied to the embedding when output.weight is
 * absent). It shares qwen35's descriptors for the tensors both have (roles.h)
 * and defines only the post-attention norm, which qwen3 files call ffn_norm.
 */
#include "formats/arch/roles.h"

static const tm_role r_ffn_norm = {
    .id = TM_ROLE_POST_NORM, .gguf = "ffn_norm.weight", .hf = "post_attention_layernorm.weight",
    .lk = TM_LK_ALL, .val = TM_VAL_NORM, .k = TM_D_EMBD, .n = TM_D_NONE, .had = TM_HAD_NONE,
    .vo = TERN_VO_NONE, .group = 2, .optional = false};

static const tm_role *const k_roles[] = {
    &tm_r_token_embd, &tm_r_output, &tm_r_output_norm,
    &tm_r_attn_norm, &r_ffn_norm,
    &tm_r_attn_q, &tm_r_attn_k, &tm_r_attn_v, &tm_r_attn_output, &tm_r_attn_q_norm, &tm_r_attn_k_norm,
    &tm_r_ffn_gate, &tm_r_ffn_up, &tm_r_ffn_down,
};

const tm_arch_desc tm_arch_qwen3 = {
    .id = TM_ARCH_QWEN3,
    .name = "qwen3",
    .hybrid = false,
    .attn_gate = false,
    .norm_plus_one = false,
    .rope_theta = 1e6f,
    .roles = k_roles,
    .n_roles = (int)(sizeof k_roles / sizeof k_roles[0]),
    .hf_ignored = tm_hf_ignored_qwen,
};
