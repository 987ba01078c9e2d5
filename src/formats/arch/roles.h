/*
 * roles.h - the role descriptors qwen35.c defines and other architecture tables
 * share by pointer (see arch.h: every tensor name is written once).
 */
#ifndef TERN_MODEL_ARCH_ROLES_H
#define TERN_MODEL_ARCH_ROLES_H

#include "formats/arch/arch.h"

extern const tm_role tm_r_token_embd, tm_r_output, tm_r_output_norm, tm_r_attn_norm;
extern const tm_role tm_r_attn_q, tm_r_attn_k, tm_r_attn_v, tm_r_attn_output, tm_r_attn_q_norm,
    tm_r_attn_k_norm;
extern const tm_role tm_r_ffn_gate, tm_r_ffn_up, tm_r_ffn_down;
extern const char *const tm_hf_ignored_qwen[];

#endif
