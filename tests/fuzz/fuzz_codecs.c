/*
 * fuzz_codecs.c - libFuzzer target for the ternary row codecs (codecs.h): the
 * input bytes are one row in each layout (PQ2_0, PTQ1_0, mainline g64, MLX
 * words). Whatever decodes must re-encode losslessly (PTQ1_0: to the same codes;
 * non-canonical trit bytes need not come back byte-identical), transcode to every
 * other layout and back to the same codes, and dequantize without error.
 * Code 3 and g64 halves with different scales must be refused, never crash.
 */
#include "formats/codecs.h"

#include <stdlib.h>

static const tern_dtype T[4] = {TERN_DT_PQ2_0, TERN_DT_PTQ1_0, TERN_DT_Q2_0_G64, TERN_DT_Q2_0};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t codes[1024], c2[1024], buf[1024], buf2[1024];
    uint16_t d[8], d2[8];
    float f[1024];
    for (int t = 0; t < 4; t++) {
        size_t bb = tern_dtype_block_bytes(T[t]) * (T[t] == TERN_DT_Q2_0_G64 ? 2 : 1);
        uint64_t K = (uint64_t)(size / bb) * 128;
        if (K == 0 || K > 1024) continue;
        if (tern_decode_row(T[t], data, K, codes, d, "fuzz", 0) != TERN_OK) continue;
        for (uint64_t j = 0; j < K; j++)
            if (codes[j] > 2) __builtin_trap();
        if (tern_dequant_row(T[t], data, K, f, "fuzz", 0) != TERN_OK) __builtin_trap();
        for (int u = 0; u < 4; u++) {
            if (tern_encode_row(T[u], codes, d, K, buf, "fuzz", 0) != TERN_OK) __builtin_trap();
            if (tern_decode_row(T[u], buf, K, c2, d2, "fuzz", 0) != TERN_OK) __builtin_trap();
            if (memcmp(codes, c2, K) || memcmp(d, d2, K / 128 * 2)) __builtin_trap();
            if (tern_transcode_rows(T[t], data, T[u], buf2, K, 1, "fuzz") != TERN_OK) __builtin_trap();
            if (memcmp(buf, buf2, tern_codec_row_bytes(T[u], K))) __builtin_trap();
        }
        if (T[t] != TERN_DT_PTQ1_0) { /* 2-bit layouts are canonical: same bytes back */
            if (tern_encode_row(T[t], codes, d, K, buf, "fuzz", 0) != TERN_OK) __builtin_trap();
            if (memcmp(buf, data, tern_codec_row_bytes(T[t], K))) __builtin_trap();
        }
    }
    if (size >= 4 && size % 4 == 0 && size / 4 * 16 <= 1024) { /* MLX words */
        uint32_t w[64];
        memcpy(w, data, size);
        uint64_t K = size / 4 * 16;
        if (tern_decode_mlx_row(w, K, codes, "fuzz", 0) == TERN_OK) {
            uint32_t w2[64];
            if (tern_encode_mlx_row(codes, K, w2, "fuzz", 0) != TERN_OK || memcmp(w, w2, size)) __builtin_trap();
        }
    }
    return 0;
}
