/*
 * qwen35.c - the qwen35 tensor schema (hybrid Gated DeltaNet + gated attention),
 * and the home of every tensor-name string of the architectures tern knows:
 * the descriptors other tables share are exported through roles.h (qwen3.c
 * lists the dense-transformer ones by pointer). Fields in arch.h.
 *
 * Conventions recorded here: qwen35 stores the five RMSNorm gains as w+1 (not the
 * GDN output norm); GGUF GDN per-value-head tensors are in tiled V order (vo);
 * the GDN alpha/beta projections read the un-rotated normed input (had NONE);
 * every other ternary matrix has its input width's signs folded in, the
 * embedding stores R e (inverse).
 */
#include "formats/arch/roles.h"

#define ROLE(var, rid, gg, hfn, lkind, v, kk, nn, h, vok, grp, opt)                        \
    const tm_role var = {.id = rid, .gguf = gg, .hf = hfn, .lk = lkind, .val = v, .k = kk,     \
                         .n = nn, .had = h, .vo = vok, .group = grp, .optional = opt}

/* top level */
ROLE(tm_r_token_embd, TM_ROLE_TOKEN_EMBD, "token_embd.weight", "model.embed_tokens.weight", TM_LK_TOP,
     TM_VAL_TERNARY, TM_D_EMBD, TM_D_VOCAB, TM_HAD_INVERSE, TERN_VO_NONE, 1, false);
ROLE(tm_r_output, TM_ROLE_OUTPUT, "output.weight", "lm_head.weight", TM_LK_TOP, TM_VAL_TERNARY, TM_D_EMBD,
     TM_D_VOCAB, TM_HAD_FOLDED, TERN_VO_NONE, 0, true);
ROLE(tm_r_output_norm, TM_ROLE_OUTPUT_NORM, "output_norm.weight", "model.norm.weight", TM_LK_TOP, TM_VAL_NORM,
     TM_D_EMBD, TM_D_NONE, TM_HAD_NONE, TERN_VO_NONE, 3, false);
/* every layer */
ROLE(tm_r_attn_norm, TM_ROLE_ATTN_NORM, "attn_norm.weight", "input_layernorm.weight", TM_LK_ALL, TM_VAL_NORM,
     TM_D_EMBD, TM_D_NONE, TM_HAD_NONE, TERN_VO_NONE, 2, false);
static ROLE(r_post_norm, TM_ROLE_POST_NORM, "post_attention_norm.weight", "post_attention_layernorm.weight",
            TM_LK_ALL, TM_VAL_NORM, TM_D_EMBD, TM_D_NONE, TM_HAD_NONE, TERN_VO_NONE, 2, false);
/* GDN layers */
static ROLE(r_qkv, TM_ROLE_WQKV, "attn_qkv.weight", "linear_attn.in_proj_qkv.weight", TM_LK_GDN, TM_VAL_TERNARY,
            TM_D_EMBD, TM_D_GDN_C, TM_HAD_FOLDED, TERN_VO_QKV, 2, false);
static ROLE(r_gate, TM_ROLE_WZ, "attn_gate.weight", "linear_attn.in_proj_z.weight", TM_LK_GDN, TM_VAL_TERNARY,
            TM_D_EMBD, TM_D_GDN_V, TM_HAD_FOLDED, TERN_VO_ROWS, 2, false);
static ROLE(r_alpha, TM_ROLE_WA, "ssm_alpha.weight", "linear_attn.in_proj_a.weight", TM_LK_GDN, TM_VAL_DENSE,
            TM_D_EMBD, TM_D_GDN_NV, TM_HAD_NONE, TERN_VO_ROWS, 2, false);
static ROLE(r_beta, TM_ROLE_WB, "ssm_beta.weight", "linear_attn.in_proj_b.weight", TM_LK_GDN, TM_VAL_DENSE,
            TM_D_EMBD, TM_D_GDN_NV, TM_HAD_NONE, TERN_VO_ROWS, 2, false);
static ROLE(r_out, TM_ROLE_WOUT, "ssm_out.weight", "linear_attn.out_proj.weight", TM_LK_GDN, TM_VAL_TERNARY,
            TM_D_GDN_V, TM_D_EMBD, TM_HAD_FOLDED, TERN_VO_COLS, 2, false);
static ROLE(r_conv, TM_ROLE_CONV, "ssm_conv1d.weight", "linear_attn.conv1d.weight", TM_LK_GDN, TM_VAL_CONV,
            TM_D_CONV_K, TM_D_GDN_C, TM_HAD_NONE, TERN_VO_CONV, 2, false);
static ROLE(r_ssm_a, TM_ROLE_SSM_A, "ssm_a", "linear_attn.A_log", TM_LK_GDN, TM_VAL_SSM_A, TM_D_GDN_NV, TM_D_NONE,
            TM_HAD_NONE, TERN_VO_ELEMS, 2, false);
static ROLE(r_dt, TM_ROLE_DT_BIAS, "ssm_dt.bias", "linear_attn.dt_bias", TM_LK_GDN, TM_VAL_BIAS, TM_D_GDN_NV,
            TM_D_NONE, TM_HAD_NONE, TERN_VO_ELEMS, 2, false);
static ROLE(r_ssm_norm, TM_ROLE_SSM_NORM, "ssm_norm.weight", "linear_attn.norm.weight", TM_LK_GDN,
            TM_VAL_NORM_RAW, TM_D_GDN_DV, TM_D_NONE, TM_HAD_NONE, TERN_VO_NONE, 2, false);
/* attention layers */
ROLE(tm_r_attn_q, TM_ROLE_WQ, "attn_q.weight", "self_attn.q_proj.weight", TM_LK_ATTN, TM_VAL_TERNARY, TM_D_EMBD,
     TM_D_Q, TM_HAD_FOLDED, TERN_VO_NONE, 2, false);
ROLE(tm_r_attn_k, TM_ROLE_WK, "attn_k.weight", "self_attn.k_proj.weight", TM_LK_ATTN, TM_VAL_TERNARY, TM_D_EMBD,
     TM_D_KV, TM_HAD_FOLDED, TERN_VO_NONE, 2, false);
ROLE(tm_r_attn_v, TM_ROLE_WV, "attn_v.weight", "self_attn.v_proj.weight", TM_LK_ATTN, TM_VAL_TERNARY, TM_D_EMBD,
     TM_D_KV, TM_HAD_FOLDED, TERN_VO_NONE, 2, false);
ROLE(tm_r_attn_output, TM_ROLE_WO, "attn_output.weight", "self_attn.o_proj.weight", TM_LK_ATTN, TM_VAL_TERNARY,
     TM_D_ATTN_OUT, TM_D_EMBD, TM_HAD_FOLDED, TERN_VO_NONE, 2, false);
ROLE(tm_r_attn_q_norm, TM_ROLE_Q_NORM, "attn_q_norm.weight", "self_attn.q_norm.weight", TM_LK_ATTN, TM_VAL_NORM,
     TM_D_HEAD_DIM, TM_D_NONE, TM_HAD_NONE, TERN_VO_NONE, 2, false);
ROLE(tm_r_attn_k_norm, TM_ROLE_K_NORM, "attn_k_norm.weight", "self_attn.k_norm.weight", TM_LK_ATTN, TM_VAL_NORM,
     TM_D_HEAD_DIM, TM_D_NONE, TM_HAD_NONE, TERN_VO_NONE, 2, false);
/* MLP, every layer */
ROLE(tm_r_ffn_gate, TM_ROLE_WGATE, "ffn_gate.weight", "mlp.gate_proj.weight", TM_LK_ALL, TM_VAL_TERNARY,
     TM_D_EMBD, TM_D_FF, TM_HAD_FOLDED, TERN_VO_NONE, 2, false);
ROLE(tm_r_ffn_up, TM_ROLE_WUP, "ffn_up.weight", "mlp.up_proj.weight", TM_LK_ALL, TM_VAL_TERNARY, TM_D_EMBD,
     TM_D_FF, TM_HAD_FOLDED, TERN_VO_NONE, 2, false);
ROLE(tm_r_ffn_down, TM_ROLE_WDOWN, "ffn_down.weight", "mlp.down_proj.weight", TM_LK_ALL, TM_VAL_TERNARY, TM_D_FF,
     TM_D_EMBD, TM_HAD_FOLDED, TERN_VO_NONE, 2, false);

/* HF tensors outside the text model: prefixes ending in '.', matched at the
 * start of the name or after a '.' (the multi-token-prediction head, the
 * vision tower of the VL layout, precomputed rotary tables). */
const char *const tm_hf_ignored_qwen[] = {"mtp.", "visual.", "vision_tower.", "rotary_emb.", NULL};

/* Model order: embedding first (it fixes the vocabulary), then per layer the
 * config.json module order (GDN, attention, MLP). */
static const tm_role *const k_roles[] = {
    &tm_r_token_embd, &tm_r_output, &tm_r_output_norm,
    &tm_r_attn_norm, &r_post_norm,
    &r_qkv, &r_gate, &r_alpha, &r_beta, &r_out, &r_conv, &r_ssm_a, &r_dt, &r_ssm_norm,
    &tm_r_attn_q, &tm_r_attn_k, &tm_r_attn_v, &tm_r_attn_output, &tm_r_attn_q_norm, &tm_r_attn_k_norm,
    &tm_r_ffn_gate, &tm_r_ffn_up, &tm_r_ffn_down,
};

const tm_arch_desc tm_arch_qwen35 = {
    .id = TM_ARCH_QWEN35,
    .name = "qwen35",
    .hybrid = true,
    .attn_gate = true,
    .norm_plus_one = true,
    .rope_theta = 1e7f,
    .roles = k_roles,
    .n_roles = (int)(sizeof k_roles / sizeof k_roles[0]),
    .hf_ignored = tm_hf_ignored_qwen,
};
