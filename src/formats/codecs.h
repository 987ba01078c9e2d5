/*
 * codecs.h - lossless codecs between every ternary row layout tern reads or
 * writes, plus dequantisation of any tensor row to float.
 *
 * The common intermediate form of one row of K weights is
 *   codes[K]    uint8, code = trit + 1 in {0,1,2} (trit -1/0/+1); 3 is never valid
 *   d[K/128]    uint16 fp16 bits, one scale per group of 128 (value = (code-1)*d)
 * Layouts (see core/blocks.h for the structs):
 *   PQ2_0 (142) and fork Q2_0 (42, g128): 34 B blocks, fp16 d then 32 B, element j
 *       at byte j/4 bits 2*(j%4).  Identical bytes.
 *   mainline Q2_0 (42, g64): 18 B blocks of 64, same element rule. g128 -> g64
 *       writes the group scale in both halves; g64 -> g128 needs both halves of
 *       every 128-group to carry the same scale bits, else it is refused naming the
 *       tensor, row and group.
 *   PTQ1_0 (143): 28 B blocks: qs[24] (5 trits/byte), qh[2] (4 trits/byte), fp16 d
 *       LAST. Non-positional order: element 16n+m = trit n of qs[m] (m<16),
 *       80+8n+m = trit n of qs[16+m] (m<8), 120+2n+h = trit n of qh[h]. A byte holds
 *       ceil(256*v/243) with v = t0*81+t1*27+t2*9+t3*3+t4 (qh: v = (t0*27+t1*9+t2*3+t3)*3),
 *       trit n = ((q*3^n) & 255)*3 >> 8. This is exactly what PrismML's quantizer writes.
 *   MLX affine 2-bit: uint32 words [N, K/16], element j of each 16 at bits 2j
 *       (the PQ2_0 qs bytes read as little-endian u32), fp16 scales [N, K/128],
 *       fp16 biases = -scales (bit-exact sign flip of the scale).
 *   Q1_0 (41): decode only; bit j%8 of qs[j/8]: 1 -> +d, 0 -> -d.
 *
 * Every decoder refuses code 3 with TERN_ERR_FORMAT naming tensor, row and element.
 * `tensor` may be NULL (messages then say "?").
 */
#ifndef TERN_FORMATS_CODECS_H
#define TERN_FORMATS_CODECS_H

#include "core/common.h"
#include "core/blocks.h"

/* True for the ternary g128/g64 layouts the codecs transcode between
 * (PQ2_0, PTQ1_0, Q2_0, Q2_0_G64). */
bool tern_codec_is_ternary(tern_dtype t);
/* A ternary layout by its command-line name: pq2_0, ptq1_0, q2_0 (g128) or q2_0_g64.
 * false when unknown. */
bool tern_codec_type_parse(const char *s, tern_dtype *out);
/* Bytes of one row of K elements in `t` (0 when K is not a multiple of the block). */
size_t tern_codec_row_bytes(tern_dtype t, uint64_t K);

/* int8 trits (-1/0/+1) <-> codes. Refuses values outside -1..1 / codes > 2. */
tern_status tern_trits_to_codes(const int8_t *t, size_t n, uint8_t *codes, const char *tensor,
                                uint64_t row);
tern_status tern_codes_to_trits(const uint8_t *codes, size_t n, int8_t *t, const char *tensor,
                                uint64_t row);

/* Row encoders: codes must be valid (0..2; checked, TERN_ERR_FORMAT otherwise);
 * K a multiple of 128. d has K/128 entries. */
tern_status tern_encode_pq2_0_row(const uint8_t *codes, const uint16_t *d, uint64_t K, void *dst,
                                  const char *tensor, uint64_t row);
tern_status tern_encode_ptq1_0_row(const uint8_t *codes, const uint16_t *d, uint64_t K, void *dst,
                                   const char *tensor, uint64_t row);
tern_status tern_encode_q2_0_g64_row(const uint8_t *codes, const uint16_t *d, uint64_t K,
                                     void *dst, const char *tensor, uint64_t row);
/* MLX: words[K/16]; scales/biases are separate (biases = scale ^ 0x8000). */
tern_status tern_encode_mlx_row(const uint8_t *codes, uint64_t K, uint32_t *words,
                                const char *tensor, uint64_t row);

/* Row decoders to codes (+ g128 scales). */
tern_status tern_decode_pq2_0_row(const void *src, uint64_t K, uint8_t *codes, uint16_t *d,
                                  const char *tensor, uint64_t row);
tern_status tern_decode_ptq1_0_row(const void *src, uint64_t K, uint8_t *codes, uint16_t *d,
                                   const char *tensor, uint64_t row);
tern_status tern_decode_q2_0_g64_row(const void *src, uint64_t K, uint8_t *codes, uint16_t *d,
                                     const char *tensor, uint64_t row);
tern_status tern_decode_mlx_row(const uint32_t *words, uint64_t K, uint8_t *codes,
                                const char *tensor, uint64_t row);
/* MLX biases must be exactly -scales (bit-level sign flip); n groups. */
tern_status tern_mlx_check_biases(const uint16_t *scales, const uint16_t *biases, uint64_t n,
                                  const char *tensor, uint64_t row);

/* Generic: decode/encode a row in any ternary layout (tern_codec_is_ternary). */
tern_status tern_decode_row(tern_dtype t, const void *src, uint64_t K, uint8_t *codes, uint16_t *d,
                            const char *tensor, uint64_t row);
tern_status tern_encode_row(tern_dtype t, const uint8_t *codes, const uint16_t *d, uint64_t K,
                            void *dst, const char *tensor, uint64_t row);
/* Transcode `rows` rows between two ternary layouts. scratch: NULL (allocated
 * internally). PQ2_0 <-> Q2_0 is a validated copy. */
tern_status tern_transcode_rows(tern_dtype from, const void *src, tern_dtype to, void *dst,
                                uint64_t K, uint64_t rows, const char *tensor);

/* Dequantize one row of K elements of any supported type (F32, F16, BF16, F64,
 * Q8_0, Q1_0, PQ2_0, Q2_0, Q2_0_G64, PTQ1_0) to float. */
tern_status tern_dequant_row(tern_dtype t, const void *src, uint64_t K, float *out,
                             const char *tensor, uint64_t row);

#endif
