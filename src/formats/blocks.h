/*
 * blocks.h - the packed block layouts, the single source of truth.
 * All multi-byte fields are little endian; structs are packed to the file bytes.
 */
#ifndef TERN_FORMATS_BLOCKS_H
#define TERN_FORMATS_BLOCKS_H

#include <stdint.h>
#include <assert.h>

#define TERN_QK128 128
#define TERN_QK64 64

/* PQ2_0 (ggml 142) and the fork's Q2_0 (ggml 42, 128 per block): 34 bytes.
 * Element j: byte qs[j/4], bits 2*(j%4); code q in {0,1,2} -> (q-1)*d. */
typedef struct {
    uint16_t d;                 /* fp16 scale */
    uint8_t qs[TERN_QK128 / 4];
} tern_block_pq2_0;
static_assert(sizeof(tern_block_pq2_0) == 34, "PQ2_0 block is 34 bytes");

/* Mainline Q2_0 (ggml 42, QK2_0 = 64): 18 bytes, same element rule.
 * Checked against ggml-org/llama.cpp ggml/src/ggml-common.h (01243c587fec):
 * `#define QK2_0 64`, `block_q2_0 { ggml_half d; uint8_t qs[QK2_0 / 4]; }`. */
typedef struct {
    uint16_t d;
    uint8_t qs[TERN_QK64 / 4];
} tern_block_q2_0_g64;
static_assert(sizeof(tern_block_q2_0_g64) == 18, "mainline Q2_0 block is 18 bytes");

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
static_assert(sizeof(tern_block_ptq1_0) == 28, "PTQ1_0 block is 28 bytes");

/* Q1_0 (ggml 41, 1-bit, 128 per block): 18 bytes; bit j%8 of qs[j/8]: 1 -> +d, 0 -> -d.
 * Checked against ggml-org/llama.cpp ggml-common.h (`#define QK1_0 128`,
 * `block_q1_0 { ggml_half d; uint8_t qs[QK1_0 / 8]; }`) and ggml-quants.c
 * dequantize_row_q1_0 (bit ? d : -d). Early Prism builds used QK1_0 = 32 (6 B)
 * under other ids; those files are not supported. */
typedef struct {
    uint16_t d;
    uint8_t qs[TERN_QK128 / 8];
} tern_block_q1_0;
static_assert(sizeof(tern_block_q1_0) == 18, "Q1_0 block is 18 bytes");

/* Q8_0 (ggml 8): 34 bytes. */
typedef struct {
    uint16_t d;
    int8_t qs[32];
} tern_block_q8_0;
static_assert(sizeof(tern_block_q8_0) == 34, "Q8_0 block is 34 bytes");

#endif
