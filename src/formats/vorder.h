/*
 * vorder.h - the Gated DeltaNet V-head order conventions (qwen35).
 *
 * Hugging Face / MLX use GROUPED order: value head g = k*r + j for key head k < n_k
 * and j < r = n_v/n_k. llama.cpp's converter stores TILED order in GGUF: file slot
 * p = j*n_k + k holds grouped head k*r + j. Tiled order applies, in a GGUF, to
 *   - the V rows of attn_qkv (rows 2*n_k*head_k_dim .. end, head_v_dim rows per head)
 *   - all rows of attn_gate (head_v_dim rows per head)
 *   - ssm_alpha, ssm_beta (one row per head), ssm_a, ssm_dt.bias (one element)
 *   - the V channels of ssm_conv1d (ne [kernel, C]: one row of `kernel` per channel)
 * ssm_out's input columns (head_v_dim columns per head) are tiled in a GGUF only
 * when prism.hadamard.gdn_v_grouped is false/absent (llama.cpp converter output);
 * with gdn_v_grouped = true they stay grouped. The caller decides (kind COLS).
 *
 * All functions permute raw bytes, so they work for any element type as long as
 * a head unit is whole rows (ROWS kinds) or, for COLS, whole blocks of a packed
 * row (head_v_dim a multiple of the block size: 128 for g128 types).
 */
#ifndef TERN_FORMATS_VORDER_H
#define TERN_FORMATS_VORDER_H

#include "core/common.h"

typedef struct tern_gdn_dims {
    uint64_t n_k;          /* key heads (ssm.group_count) */
    uint64_t n_v;          /* value heads (ssm.time_step_rank), a multiple of n_k */
    uint64_t head_k_dim;   /* ssm.state_size */
    uint64_t head_v_dim;   /* ssm.inner_size / n_v */
} tern_gdn_dims;

typedef enum tern_vorder_dir {
    TERN_VORDER_TO_TILED = 0,    /* grouped (HF/MLX) -> tiled (GGUF) */
    TERN_VORDER_TO_GROUPED = 1   /* tiled (GGUF) -> grouped (HF/MLX) */
} tern_vorder_dir;

typedef enum tern_vorder_kind {
    TERN_VO_NONE = 0,
    TERN_VO_QKV,       /* attn_qkv.weight: V rows only */
    TERN_VO_ROWS,      /* attn_gate.weight, ssm_alpha.weight, ssm_beta.weight: all rows */
    TERN_VO_ELEMS,     /* ssm_a, ssm_dt.bias: n_v elements */
    TERN_VO_CONV,      /* ssm_conv1d.weight: V channel rows */
    TERN_VO_COLS       /* ssm_out.weight: input columns (caller checks gdn_v_grouped) */
} tern_vorder_kind;

/* The kind for a GGUF tensor name ("blk.N.attn_qkv.weight" ...). */
tern_vorder_kind tern_vorder_kind_of(const char *gguf_name);
/* The same for a Hugging Face name (...linear_attn.in_proj_qkv.weight, in_proj_z,
 * in_proj_a, in_proj_b, A_log, dt_bias, conv1d.weight, out_proj.weight). */
tern_vorder_kind tern_vorder_kind_of_hf(const char *hf_name);

/* Validate dims (n_v multiple of n_k, non-zero). */
tern_status tern_gdn_dims_check(const tern_gdn_dims *g);

/* Permute n_v consecutive units of unit_bytes each: dst != src. */
void tern_vorder_units(void *dst, const void *src, const tern_gdn_dims *g, size_t unit_bytes,
                       tern_vorder_dir dir);

/* Apply `kind` to a whole tensor: n_rows rows of row_bytes bytes (row = ne[0]
 * elements). For COLS, the row holds n_v head units of row_bytes/n_v bytes each
 * (the caller guarantees a head is whole blocks). dst != src. Checks that the
 * shape matches the dims and fails naming the tensor otherwise. */
tern_status tern_vorder_tensor(tern_vorder_kind kind, const tern_gdn_dims *g, const void *src,
                               void *dst, uint64_t n_rows, uint64_t row_bytes, tern_vorder_dir dir,
                               const char *name);

/* Check that a tensor of n_rows rows of k elements fits `kind` (row counts for
 * QKV/CONV/ROWS/ELEMS, k == n_v * head_v_dim for COLS); fails naming the tensor. */
tern_status tern_vorder_check(tern_vorder_kind kind, const tern_gdn_dims *g, uint64_t n_rows, uint64_t k,
                              const char *name);

/* Row-streaming form: the source row of destination row r of a tensor of n_rows
 * rows (units as in tern_vorder_tensor: QKV/CONV V rows, ROWS in head_v_dim or
 * single-row units, ELEMS one row per head). Rows outside the V region map to
 * themselves; kind NONE/COLS is the identity. */
uint64_t tern_vorder_src_row(tern_vorder_kind kind, const tern_gdn_dims *g, uint64_t n_rows, uint64_t r,
                             tern_vorder_dir dir);

#endif
