/*
 * internal.h - the CPU kernel table shared by dispatch.c (fills it once), the
 * driver (matmul.c: threading, activation preparation, multi-matrix calls),
 * the scalar reference ref.c and the ISA files (*_avx2.c, *_avx512.c, *_neon.c).
 *
 * A matmul is split in two steps so the activation is prepared once per call:
 *   act_prep  : one batch row of fp32 x (k values) -> ISA-private bytes
 *               (act_bytes(k) per row; NULL act_prep: kernels read fp32 x directly)
 *   rows      : y[b, r] for r in [r0, r1), every b < batch, reading the prepared
 *               activation rows act + b*act_stride (bytes).
 * Every slot always holds a valid function: the reference first, then the ISA
 * replaces what it implements (the BLIS context pattern).
 */
#ifndef TERN_KERNELS_CPU_INTERNAL_H
#define TERN_KERNELS_CPU_INTERNAL_H

#include "kernels/kernels.h"
#include "core/blocks.h"

typedef size_t (*tern_act_bytes_fn)(int64_t k);
typedef void (*tern_act_prep_fn)(const float *x, int64_t k, void *act);
typedef void (*tern_rows_fn)(const tern_qmat *w, const void *act, size_t act_stride,
                             size_t batch, float *y, size_t y_stride, int64_t r0, int64_t r1);

typedef struct tern_mm_ops {
    tern_act_bytes_fn act_bytes;   /* NULL together with act_prep: raw fp32 x */
    tern_act_prep_fn act_prep;
    tern_rows_fn rows;
    int row_tile;                  /* preferred multiple of rows per task */
    /* Optional large-batch path on raw fp32 x (act = x, act_stride = x_stride*4):
     * used when batch >= gemm_min_batch and k % gemm_k_align == 0. */
    tern_rows_fn gemm_rows;
    int gemm_min_batch;
    int gemm_k_align;
    /* Optional batch-wide preparation for gemm_rows (NULL: gemm_rows reads raw x).
     * gemm_prep fills batch rows [b0, b1) of a gemm_act_bytes(k, batch) buffer
     * (tasks run in parallel on disjoint ranges; the task with b1 == batch also
     * writes any padding). gemm_rows then gets act = that buffer. */
    size_t (*gemm_act_bytes)(int64_t k, size_t batch);
    void (*gemm_prep)(const float *x, size_t x_stride, size_t batch, int64_t k, void *act,
                      size_t b0, size_t b1);
} tern_mm_ops;

/* One row of n floats: forward (inverse=false): x <- H(x*s)/sqrt(block);
 * inverse: x <- s * H(x)/sqrt(block). signs may be NULL (all +1). */
typedef void (*tern_fwht_fn)(float *x, size_t n, size_t block, const float *signs, bool inverse);
/* Fused sites, one row (the driver loops rows). */
typedef void (*tern_addnorm_fn)(float *r, const float *d, const float *gain, float eps,
                                float *normed, float *rotated, size_t n, size_t block,
                                const float *signs);
typedef void (*tern_swiglu_fn)(const float *gate, const float *up, float *out, size_t n,
                               size_t block, const float *signs);

/* Model ops (model_ops.h / model_ops.c): one value head p of a GDN call (work already
 * holds the conv'd, L2-normed rows; conv_ch floats apart), one query head h of an
 * attention call, one head vector of hd floats normalised in place, one row of
 * n_heads heads (hd apart) rotated at position pos. */
typedef void (*tern_gdn_head_fn)(const tern_gdn_args *a, int conv_ch, int p);
typedef void (*tern_attn_head_fn)(const tern_attn_args *a, int h);
typedef void (*tern_head_norm_fn)(float *v, int hd, const float *gain, float eps);
typedef void (*tern_rope_row_fn)(float *x, int n_heads, int hd, int rot, double pos,
                                 float theta);

/* GDN calls of at least this many rows take the block scan with an FMA table
 * (docs/performance.md, "GDN prefill": break-even at 3-4 rows there). The reference
 * (no FMA) keeps the walk: its blocks measured 0.5-0.9x of it. */
#define TERN_GDN_BLOCK_MIN_FMA 8

typedef struct tern_kern_table {
    tern_isa isa;
    tern_mm_ops mm[TERN_DT_COUNT];
    tern_mm_ops mm_r16;            /* PQ2_0 / Q2_0 in TERN_LAYOUT_R16 */
    tern_mm_ops mm_r16q1;          /* Q1_0 in TERN_LAYOUT_R16 */
    tern_fwht_fn fwht;
    tern_addnorm_fn addnorm;
    tern_swiglu_fn swiglu;
    tern_gdn_head_fn gdn_head;     /* token walk */
    tern_gdn_head_fn gdn_blocks;   /* block scan */
    int gdn_block_min;             /* tern_gdn: block scan from this many rows (0: never) */
    tern_attn_head_fn attn_head;
    tern_head_norm_fn head_norm;
    tern_rope_row_fn rope_row;
    /* Groups [g0, g1) of w (file layout PQ2_0 / Q2_0 / Q1_0) into buf in TERN_LAYOUT_R16. */
    void (*repack_r16)(const tern_qmat *w, uint8_t *buf, int64_t g0, int64_t g1);
} tern_kern_table;

/* The active table (initialised on first use). */
const tern_kern_table *tern_kern_get(void);

/* Fill the table with the scalar reference (ref.c). */
void tern_ref_fill(tern_kern_table *t);
/* ISA fills (only defined when compiled for the architecture). */
void tern_avx2_fill(tern_kern_table *t);
void tern_avx512_fill(tern_kern_table *t);
/* The 16-row layout's products and repack (cpu_r16_avx512.c; called by tern_avx512_fill). */
void tern_avx512_r16_fill(tern_kern_table *t);
/* fp32: the fp32 products (tern_kernels_set_neon_fp32) instead of int8 SDOT. */
void tern_neon_fill(tern_kern_table *t, bool fp32);
void tern_neon_i8mm_fill(tern_kern_table *t);
/* The model ops' slots: reference (model_ops.c), then the ISA builds of model_ops.h. */
void tern_model_ref_fill(tern_kern_table *t);
void tern_model_avx2_fill(tern_kern_table *t);
void tern_model_avx512_fill(tern_kern_table *t);
/* The reference build's per-head loops (the tests' oracle for the ISA builds). */
void tern_gdn_head_ref(const tern_gdn_args *a, int conv_ch, int p);
void tern_gdn_head_blocks_ref(const tern_gdn_args *a, int conv_ch, int p);
void tern_attn_head_ref(const tern_attn_args *a, int h);

/* Reference pieces other files reuse (fallbacks for odd cases). */
void tern_ref_rows(const tern_qmat *w, const void *act, size_t act_stride, size_t batch,
                   float *y, size_t y_stride, int64_t r0, int64_t r1);
void tern_ref_fwht(float *x, size_t n, size_t block, const float *signs, bool inverse);
void tern_ref_addnorm(float *r, const float *d, const float *gain, float eps, float *normed,
                      float *rotated, size_t n, size_t block, const float *signs);
void tern_ref_swiglu(const float *gate, const float *up, float *out, size_t n, size_t block,
                     const float *signs);
void tern_ref_repack_r16(const tern_qmat *w, uint8_t *buf, int64_t g0, int64_t g1);

/* TERN_LAYOUT_R16 addressing (kernels.h, blocks.h): the 544-byte block b of row r's
 * group; the byte of block b that holds row r's element e (0..127) and the field
 * (bits 2*field) it is in: lane L = r % 16 of 64-byte vector e/16, byte e%4 of the
 * lane's 4, field (e%16)/4; row r's scale of block b. */
static inline const uint8_t *tern_r16_block(const tern_qmat *w, int64_t r, int64_t b) {
    return w->data + (size_t)(r / 16) * 16 * w->row_bytes + (size_t)b * TERN_R16_BLOCK_BYTES;
}
static inline int tern_r16_byte(int L, int e) { return TERN_R16_SCALES + 64 * (e / 16) + 4 * L + e % 4; }
static inline int tern_r16_code(const tern_qmat *w, int64_t r, int64_t b, int e) {
    return (tern_r16_block(w, r, b)[tern_r16_byte((int)(r % 16), e)] >> (2 * ((e % 16) / 4))) & 3;
}
static inline uint16_t tern_r16_scale(const tern_qmat *w, int64_t r, int64_t b) {
    return tern_rd16(tern_r16_block(w, r, b) + 2 * (r % 16));
}
/* Q1_0 in TERN_LAYOUT_R16 (288-byte blocks): the bit of row r's element e of block b. */
static inline const uint8_t *tern_r16q1_block(const tern_qmat *w, int64_t r, int64_t b) {
    return w->data + (size_t)(r / 16) * 16 * w->row_bytes + (size_t)b * TERN_R16Q1_BLOCK_BYTES;
}
static inline int tern_r16q1_byte(int L, int e) { return TERN_R16_SCALES + 64 * (e / 32) + 4 * L + e % 4; }
static inline int tern_r16q1_bit(const tern_qmat *w, int64_t r, int64_t b, int e) {
    return (tern_r16q1_block(w, r, b)[tern_r16q1_byte((int)(r % 16), e)] >> ((e % 32) / 4)) & 1;
}
static inline uint16_t tern_r16q1_scale(const tern_qmat *w, int64_t r, int64_t b) {
    return tern_rd16(tern_r16q1_block(w, r, b) + 2 * (r % 16));
}

/* fp16 -> fp32 table (65536 entries), filled by dispatch before any kernel runs. */
extern float tern_f16_table[65536];

#endif
