/*
 * blocks.h - the packed block layouts, the single source of truth: the codecs
 * (formats/codecs.c), the dtype table (core/common.c), the CPU kernels (src/kernels/cpu)
 * and the CUDA kernels (src/kernels/cuda) take block sizes and field offsets from here.
 * It sits in core, the bottom layer, because formats and kernels both build on it.
 * All multi-byte fields are little endian; the structs have no padding (every field
 * is bytes or one uint16), so sizeof is the file's block size (asserted below).
 * Plain C and C++ (nvcc includes it too).
 */
#ifndef TERN_CORE_BLOCKS_H
#define TERN_CORE_BLOCKS_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

/* weights per block */
#define TERN_QK128 128
#define TERN_QK64 64
#define TERN_QK8_0 32

/* bytes per block (= sizeof of the structs below) */
#define TERN_PQ2_0_BYTES 34      /* PQ2_0 and fork Q2_0 (g128) */
#define TERN_Q2_0_G64_BYTES 18   /* mainline Q2_0 (g64) */
#define TERN_PTQ1_0_BYTES 28
#define TERN_Q1_0_BYTES 18
#define TERN_Q8_0_BYTES 34
/* byte offset of qs after the leading fp16 d (PQ2_0, Q2_0 g64, Q1_0, Q8_0) */
#define TERN_BLOCK_QS 2
/* PTQ1_0 field offsets (scale last) */
#define TERN_PTQ1_0_QH 24
#define TERN_PTQ1_0_D 26

/* TERN_LAYOUT_R16 (kernels.h; made by tern_qmat_repack from PQ2_0 / Q2_0): per group of
 * 16 rows and 128-input block, the 16 fp16 scales then 8 vectors of 64 code bytes
 * (lane L = row L, fields transposed: kernels.h): 544 bytes, the same as 16 file blocks. */
#define TERN_R16_ROWS 16
#define TERN_R16_SCALES (2 * TERN_R16_ROWS)                      /* 32: code chunks start here */
#define TERN_R16_BLOCK_BYTES (TERN_R16_ROWS * TERN_PQ2_0_BYTES)  /* 544 */
static_assert(TERN_R16_BLOCK_BYTES == TERN_R16_SCALES + TERN_R16_ROWS * (TERN_QK128 / 4),
              "an R16 block is the 16 scales and 16 rows of codes");
/* The same layout for Q1_0 (kernels.h): 16 scales then 4 vectors of 64 bytes of bits. */
#define TERN_R16Q1_BLOCK_BYTES (TERN_R16_ROWS * TERN_Q1_0_BYTES)  /* 288 */
static_assert(TERN_R16Q1_BLOCK_BYTES == TERN_R16_SCALES + TERN_R16_ROWS * (TERN_QK128 / 8),
              "an R16 Q1_0 block is the 16 scales and 16 rows of bits");

/* PQ2_0 (ggml 142) and the fork's Q2_0 (ggml 42, 128 per block): 34 bytes.
 * Element j: byte qs[j/4], bits 2*(j%4); code q in {0,1,2} -> (q-1)*d. */
typedef struct {
    uint16_t d;                 /* fp16 scale */
    uint8_t qs[TERN_QK128 / 4];
} tern_block_pq2_0;
static_assert(sizeof(tern_block_pq2_0) == TERN_PQ2_0_BYTES, "PQ2_0 block is 34 bytes");

/* Mainline Q2_0 (ggml 42, QK2_0 = 64): 18 bytes, same element rule.
 * Checked against ggml-org/llama.cpp ggml/src/ggml-common.h (01243c587fec):
 * `#define QK2_0 64`, `block_q2_0 { ggml_half d; uint8_t qs[QK2_0 / 4]; }`. */
typedef struct {
    uint16_t d;
    uint8_t qs[TERN_QK64 / 4];
} tern_block_q2_0_g64;
static_assert(sizeof(tern_block_q2_0_g64) == TERN_Q2_0_G64_BYTES, "mainline Q2_0 block is 18 bytes");

/* PTQ1_0 (ggml 143): 28 bytes, scale LAST. Trit order is not positional:
 *   elements 0..79    : element 16n+m   = trit n of qs[m]      (m < 16, n < 5)
 *   elements 80..119  : element 80+8n+m = trit n of qs[16+m]   (m < 8,  n < 5)
 *   elements 120..127 : element 120+2n+h = trit n of qh[h]     (h < 2,  n < 4)
 * byte = ceil(256 * (t0*81 + t1*27 + t2*9 + t3*3 + t4) / 243) (first trit most
 * significant; qh holds 4 trits: value*3 before the same mapping);
 * trit n of byte q = ((q * 3^n) & 255) * 3 >> 8. Trit t in {0,1,2} -> (t-1)*d. */
typedef struct {
    uint8_t qs[24];
    uint8_t qh[2];
    uint16_t d;
} tern_block_ptq1_0;
static_assert(sizeof(tern_block_ptq1_0) == TERN_PTQ1_0_BYTES, "PTQ1_0 block is 28 bytes");

/* Q1_0 (ggml 41, 1-bit, 128 per block): 18 bytes; bit j%8 of qs[j/8]: 1 -> +d, 0 -> -d.
 * Checked against ggml-org/llama.cpp ggml-common.h (`#define QK1_0 128`,
 * `block_q1_0 { ggml_half d; uint8_t qs[QK1_0 / 8]; }`) and ggml-quants.c
 * dequantize_row_q1_0 (bit ? d : -d). Early Prism builds used QK1_0 = 32 (6 B)
 * under other ids; those files are not supported. */
typedef struct {
    uint16_t d;
    uint8_t qs[TERN_QK128 / 8];
} tern_block_q1_0;
static_assert(sizeof(tern_block_q1_0) == TERN_Q1_0_BYTES, "Q1_0 block is 18 bytes");

/* Q8_0 (ggml 8): 34 bytes. */
typedef struct {
    uint16_t d;
    int8_t qs[TERN_QK8_0];
} tern_block_q8_0;
static_assert(sizeof(tern_block_q8_0) == TERN_Q8_0_BYTES, "Q8_0 block is 34 bytes");

static_assert(offsetof(tern_block_pq2_0, qs) == TERN_BLOCK_QS, "qs after d");
static_assert(offsetof(tern_block_q2_0_g64, qs) == TERN_BLOCK_QS, "qs after d");
static_assert(offsetof(tern_block_q1_0, qs) == TERN_BLOCK_QS, "qs after d");
static_assert(offsetof(tern_block_q8_0, qs) == TERN_BLOCK_QS, "qs after d");
static_assert(offsetof(tern_block_ptq1_0, qh) == TERN_PTQ1_0_QH, "PTQ1_0 qh offset");
static_assert(offsetof(tern_block_ptq1_0, d) == TERN_PTQ1_0_D, "PTQ1_0 d offset");

#endif
