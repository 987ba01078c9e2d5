/*
 * codecs.c - lossless ternary row codecs (PQ2_0 / fork Q2_0, mainline Q2_0 g64,
 * PTQ1_0 base-3 trits, MLX affine 2-bit words) and row dequantisation.
 * Layout rules are in codecs.h and core/blocks.h; this file is their only encoder.
 */
#include "formats/codecs.h"

#include <pthread.h>
#include <stdlib.h>

#define TN(t) ((t) ? (t) : "?")

bool tern_codec_is_ternary(tern_dtype t) {
    return t == TERN_DT_PQ2_0 || t == TERN_DT_PTQ1_0 || t == TERN_DT_Q2_0 ||
           t == TERN_DT_Q2_0_G64;
}

size_t tern_codec_row_bytes(tern_dtype t, uint64_t K) {
    size_t be = tern_dtype_block_elems(t), bb = tern_dtype_block_bytes(t);
    if (!be || K % be) return 0;
    return (size_t)(K / be) * bb;
}

static tern_status bad_code(const char *tensor, uint64_t row, uint64_t elem, unsigned code) {
    return tern_fail(TERN_ERR_FORMAT,
                     "tensor '%s' row %llu element %llu: code %u is not ternary "
                     "(only 0,1,2 = -1,0,+1 are valid; code 3 is refused)",
                     TN(tensor), (unsigned long long)row, (unsigned long long)elem, code);
}

static tern_status bad_k(const char *tensor, uint64_t K, unsigned mult) {
    return tern_fail(TERN_ERR_SHAPE, "tensor '%s': row length %llu is not a multiple of %u",
                     TN(tensor), (unsigned long long)K, mult);
}

/* What every encoder checks first: K a multiple of the group, every code 0..2. */
static tern_status check_codes(const uint8_t *codes, uint64_t K, unsigned group, const char *tensor,
                               uint64_t row) {
    if (K % group) return bad_k(tensor, K, group);
    for (uint64_t j = 0; j < K; j++)
        if (TERN_UNLIKELY(codes[j] > 2)) return bad_code(tensor, row, j, codes[j]);
    return TERN_OK;
}

tern_status tern_trits_to_codes(const int8_t *t, size_t n, uint8_t *codes, const char *tensor,
                                uint64_t row) {
    for (size_t j = 0; j < n; j++) {
        if (t[j] < -1 || t[j] > 1)
            return tern_fail(TERN_ERR_FORMAT, "tensor '%s' row %llu element %zu: trit %d not in -1..1",
                             TN(tensor), (unsigned long long)row, j, t[j]);
        codes[j] = (uint8_t)(t[j] + 1);
    }
    return TERN_OK;
}

tern_status tern_codes_to_trits(const uint8_t *codes, size_t n, int8_t *t, const char *tensor,
                                uint64_t row) {
    for (size_t j = 0; j < n; j++) {
        if (codes[j] > 2) return bad_code(tensor, row, j, codes[j]);
        t[j] = (int8_t)((int)codes[j] - 1);
    }
    return TERN_OK;
}

/* ------------------------------------------------------------ 2-bit blocks */

/* Pack n (multiple of 4) codes LSB-first, 4 per byte. */
static void pack2(const uint8_t *c, size_t n, uint8_t *q) {
    for (size_t i = 0; i < n / 4; i++)
        q[i] = (uint8_t)(c[4 * i] | c[4 * i + 1] << 2 | c[4 * i + 2] << 4 | c[4 * i + 3] << 6);
}

/* byte -> its 4 codes (LSB first); a byte with a code 3 has (b & b >> 1 & 0x55) != 0 */
static uint8_t g_unpack[256][4];
static uint8_t g_trits[256][5]; /* PTQ1_0 byte -> trit n */
static void fill_tables(void) {
    for (int b = 0; b < 256; b++) {
        for (int k = 0; k < 4; k++) g_unpack[b][k] = (uint8_t)((b >> (2 * k)) & 3);
        static const uint8_t p3[5] = {1, 3, 9, 27, 81};
        for (int n = 0; n < 5; n++) g_trits[b][n] = (uint8_t)(((uint16_t)(uint8_t)(b * p3[n]) * 3) >> 8);
    }
}
static void init_tables(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, fill_tables);
}

static tern_status unpack2(const uint8_t *q, size_t n, uint8_t *c, const char *tensor,
                           uint64_t row, uint64_t base) {
    init_tables();
    for (size_t i = 0; i < n / 4; i++) {
        uint8_t b = q[i];
        if (TERN_UNLIKELY(b & (b >> 1) & 0x55)) {
            for (int k = 0; k < 4; k++)
                if (((b >> (2 * k)) & 3) == 3) return bad_code(tensor, row, base + 4 * i + k, 3);
        }
        memcpy(c + 4 * i, g_unpack[b], 4);
    }
    return TERN_OK;
}

/* 2-bit blocks of `group` codes after their fp16 scale (one scale per 128 codes in d). */
static tern_status encode_2bit(const uint8_t *codes, const uint16_t *d, uint64_t K, unsigned group,
                               size_t block_bytes, void *dst, const char *tensor, uint64_t row) {
    tern_status st = check_codes(codes, K, 128, tensor, row);
    if (st) return st;
    uint8_t *o = dst;
    for (uint64_t b = 0; b < K / group; b++, o += block_bytes) {
        memcpy(o, &d[b * group / 128], 2);
        pack2(codes + b * group, group, o + TERN_BLOCK_QS);
    }
    return TERN_OK;
}

tern_status tern_encode_pq2_0_row(const uint8_t *codes, const uint16_t *d, uint64_t K, void *dst,
                                  const char *tensor, uint64_t row) {
    return encode_2bit(codes, d, K, 128, TERN_PQ2_0_BYTES, dst, tensor, row);
}

tern_status tern_decode_pq2_0_row(const void *src, uint64_t K, uint8_t *codes, uint16_t *d,
                                  const char *tensor, uint64_t row) {
    if (K % 128) return bad_k(tensor, K, 128);
    const uint8_t *p = src;
    for (uint64_t b = 0; b < K / 128; b++, p += TERN_PQ2_0_BYTES) {
        d[b] = tern_rd16(p);
        tern_status st = unpack2(p + TERN_BLOCK_QS, 128, codes + b * 128, tensor, row, b * 128);
        if (st) return st;
    }
    return TERN_OK;
}

tern_status tern_encode_q2_0_g64_row(const uint8_t *codes, const uint16_t *d, uint64_t K,
                                     void *dst, const char *tensor, uint64_t row) {
    return encode_2bit(codes, d, K, 64, TERN_Q2_0_G64_BYTES, dst, tensor, row);
}

tern_status tern_decode_q2_0_g64_row(const void *src, uint64_t K, uint8_t *codes, uint16_t *d,
                                     const char *tensor, uint64_t row) {
    if (K % 128)
        return tern_fail(TERN_ERR_UNSUPPORTED,
                         "tensor '%s': row length %llu is not a multiple of 128, so its "
                         "g64 blocks cannot be regrouped to g128",
                         TN(tensor), (unsigned long long)K);
    const uint8_t *p = src;
    for (uint64_t g = 0; g < K / 128; g++, p += 2 * TERN_Q2_0_G64_BYTES) {
        uint16_t d0 = tern_rd16(p), d1 = tern_rd16(p + TERN_Q2_0_G64_BYTES);
        if (d0 != d1)
            return tern_fail(TERN_ERR_UNSUPPORTED,
                             "tensor '%s' row %llu group %llu: the two 64-blocks carry different "
                             "scales (0x%04x vs 0x%04x), so g64 -> g128 would lose information; "
                             "refused",
                             TN(tensor), (unsigned long long)row, (unsigned long long)g, d0, d1);
        d[g] = d0;
        tern_status st = unpack2(p + TERN_BLOCK_QS, 64, codes + g * 128, tensor, row, g * 128);
        if (!st) st = unpack2(p + TERN_Q2_0_G64_BYTES + TERN_BLOCK_QS, 64, codes + g * 128 + 64, tensor, row, g * 128 + 64);
        if (st) return st;
    }
    return TERN_OK;
}

/* ------------------------------------------------------------------ PTQ1_0 */

static inline uint8_t ptq_byte(unsigned v) { return (uint8_t)((v * 256 + 242) / 243); } /* ceil(256 v / 243) */

tern_status tern_encode_ptq1_0_row(const uint8_t *codes, const uint16_t *d, uint64_t K, void *dst,
                                   const char *tensor, uint64_t row) {
    tern_status st = check_codes(codes, K, 128, tensor, row);
    if (st) return st;
    uint8_t *o = dst;
    for (uint64_t b = 0; b < K / 128; b++, o += TERN_PTQ1_0_BYTES) {
        const uint8_t *c = codes + b * 128;
        for (unsigned m = 0; m < 16; m++)
            o[m] = ptq_byte(c[m] * 81u + c[16 + m] * 27u + c[32 + m] * 9u + c[48 + m] * 3u + c[64 + m]);
        for (unsigned m = 0; m < 8; m++)
            o[16 + m] = ptq_byte(c[80 + m] * 81u + c[88 + m] * 27u + c[96 + m] * 9u + c[104 + m] * 3u + c[112 + m]);
        for (unsigned h = 0; h < 2; h++)
            o[TERN_PTQ1_0_QH + h] = ptq_byte((c[120 + h] * 27u + c[122 + h] * 9u + c[124 + h] * 3u + c[126 + h]) * 3u);
        memcpy(o + TERN_PTQ1_0_D, &d[b], 2);
    }
    return TERN_OK;
}

tern_status tern_decode_ptq1_0_row(const void *src, uint64_t K, uint8_t *codes, uint16_t *d,
                                   const char *tensor, uint64_t row) {
    if (K % 128) return bad_k(tensor, K, 128);
    init_tables();
    const uint8_t *p = src;
    for (uint64_t b = 0; b < K / 128; b++, p += TERN_PTQ1_0_BYTES) {
        uint8_t *c = codes + b * 128;
        /* every byte decodes to trits 0..2 (((q*3^n) & 255) * 3 >> 8 <= 2): no code 3 here */
        for (unsigned m = 0; m < 16; m++)
            for (unsigned n = 0; n < 5; n++) c[16 * n + m] = g_trits[p[m]][n];
        for (unsigned m = 0; m < 8; m++)
            for (unsigned n = 0; n < 5; n++) c[80 + 8 * n + m] = g_trits[p[16 + m]][n];
        for (unsigned h = 0; h < 2; h++)
            for (unsigned n = 0; n < 4; n++) c[120 + 2 * n + h] = g_trits[p[TERN_PTQ1_0_QH + h]][n];
        d[b] = tern_rd16(p + TERN_PTQ1_0_D);
    }
    (void)tensor;
    (void)row;
    return TERN_OK;
}

/* --------------------------------------------------------------------- MLX */

tern_status tern_encode_mlx_row(const uint8_t *codes, uint64_t K, uint32_t *words,
                                const char *tensor, uint64_t row) {
    tern_status st = check_codes(codes, K, 16, tensor, row);
    if (st) return st;
    for (uint64_t i = 0; i < K / 16; i++) {
        uint32_t w = 0;
        for (int j = 0; j < 16; j++) w |= (uint32_t)codes[16 * i + j] << (2 * j);
        uint8_t le[4] = {(uint8_t)w, (uint8_t)(w >> 8), (uint8_t)(w >> 16), (uint8_t)(w >> 24)};
        memcpy(&words[i], le, 4); /* little endian in memory, whatever the host */
    }
    return TERN_OK;
}

tern_status tern_decode_mlx_row(const uint32_t *words, uint64_t K, uint8_t *codes,
                                const char *tensor, uint64_t row) {
    if (K % 16) return bad_k(tensor, K, 16);
    /* the words are little endian: the bytes are the PQ2_0 qs bytes */
    return unpack2((const uint8_t *)words, K, codes, tensor, row, 0);
}

tern_status tern_mlx_check_biases(const uint16_t *scales, const uint16_t *biases, uint64_t n,
                                  const char *tensor, uint64_t row) {
    for (uint64_t g = 0; g < n; g++) {
        uint16_t s = tern_rd16(&scales[g]), b = tern_rd16(&biases[g]);
        if ((uint16_t)(s ^ 0x8000u) != b)
            return tern_fail(TERN_ERR_FORMAT,
                             "tensor '%s' row %llu group %llu: bias 0x%04x is not -scale "
                             "(scale 0x%04x): not a ternary affine pack",
                             TN(tensor), (unsigned long long)row, (unsigned long long)g, b, s);
    }
    return TERN_OK;
}

/* ----------------------------------------------------------------- generic */

bool tern_codec_type_parse(const char *s, tern_dtype *out) {
    static const struct { const char *name; tern_dtype t; } names[] = {
        {"pq2_0", TERN_DT_PQ2_0}, {"ptq1_0", TERN_DT_PTQ1_0}, {"q2_0", TERN_DT_Q2_0}, {"q2_0_g64", TERN_DT_Q2_0_G64}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(s, names[i].name)) { *out = names[i].t; return true; }
    return false;
}

/* The per-layout row codecs (PQ2_0 and the fork's Q2_0 share one layout). */
static const struct {
    tern_status (*decode)(const void *src, uint64_t K, uint8_t *codes, uint16_t *d, const char *tensor, uint64_t row);
    tern_status (*encode)(const uint8_t *codes, const uint16_t *d, uint64_t K, void *dst, const char *tensor,
                          uint64_t row);
} g_row_codec[TERN_DT_COUNT] = {
    [TERN_DT_PQ2_0] = {tern_decode_pq2_0_row, tern_encode_pq2_0_row},
    [TERN_DT_Q2_0] = {tern_decode_pq2_0_row, tern_encode_pq2_0_row},
    [TERN_DT_PTQ1_0] = {tern_decode_ptq1_0_row, tern_encode_ptq1_0_row},
    [TERN_DT_Q2_0_G64] = {tern_decode_q2_0_g64_row, tern_encode_q2_0_g64_row},
};

tern_status tern_decode_row(tern_dtype t, const void *src, uint64_t K, uint8_t *codes, uint16_t *d,
                            const char *tensor, uint64_t row) {
    if ((unsigned)t >= TERN_DT_COUNT || !g_row_codec[t].decode)
        return tern_fail(TERN_ERR_UNSUPPORTED, "tensor '%s': type %s is not a ternary layout",
                         TN(tensor), tern_dtype_name(t));
    return g_row_codec[t].decode(src, K, codes, d, tensor, row);
}

tern_status tern_encode_row(tern_dtype t, const uint8_t *codes, const uint16_t *d, uint64_t K,
                            void *dst, const char *tensor, uint64_t row) {
    if ((unsigned)t >= TERN_DT_COUNT || !g_row_codec[t].encode)
        return tern_fail(TERN_ERR_UNSUPPORTED, "tensor '%s': cannot encode type %s",
                         TN(tensor), tern_dtype_name(t));
    return g_row_codec[t].encode(codes, d, K, dst, tensor, row);
}

tern_status tern_transcode_rows(tern_dtype from, const void *src, tern_dtype to, void *dst,
                                uint64_t K, uint64_t rows, const char *tensor) {
    if (!tern_codec_is_ternary(from) || !tern_codec_is_ternary(to))
        return tern_fail(TERN_ERR_UNSUPPORTED, "tensor '%s': no ternary transcode %s -> %s",
                         TN(tensor), tern_dtype_name(from), tern_dtype_name(to));
    if (K % 128) return bad_k(tensor, K, 128);
    size_t sb = tern_codec_row_bytes(from, K), db = tern_codec_row_bytes(to, K);
    bool pq_from = from == TERN_DT_PQ2_0 || from == TERN_DT_Q2_0, pq_to = to == TERN_DT_PQ2_0 || to == TERN_DT_Q2_0;
    if (pq_from && pq_to) { /* same bytes: validated copy */
        const uint8_t *p = src;
        for (uint64_t r = 0; r < rows; r++)
            for (uint64_t b = 0; b < K / 128; b++) {
                const uint8_t *q = p + r * sb + b * TERN_PQ2_0_BYTES + TERN_BLOCK_QS;
                for (int i = 0; i < 32; i++)
                    if (TERN_UNLIKELY(q[i] & (q[i] >> 1) & 0x55)) {
                        uint8_t c[128];
                        return unpack2(q, 128, c, tensor, r, b * 128);
                    }
            }
        memcpy(dst, src, sb * rows);
        return TERN_OK;
    }
    if (from == TERN_DT_PTQ1_0 && pq_to) { /* direct: every PTQ1_0 byte holds valid trits */
        init_tables();
        const uint8_t *p = src;
        uint8_t *o = dst;
        for (uint64_t blk = 0; blk < rows * (K / 128); blk++, p += TERN_PTQ1_0_BYTES, o += TERN_PQ2_0_BYTES) {
            o[0] = p[TERN_PTQ1_0_D];
            o[1] = p[TERN_PTQ1_0_D + 1];
            uint8_t *q = o + TERN_BLOCK_QS;
            for (int i = 0; i < 20; i++) { /* elements 4i..4i+3 = trit i/4 of qs[4(i%4) + k] */
                const uint8_t *m = p + 4 * (i % 4);
                int n = i / 4;
                q[i] = (uint8_t)(g_trits[m[0]][n] | g_trits[m[1]][n] << 2 | g_trits[m[2]][n] << 4 | g_trits[m[3]][n] << 6);
            }
            for (int i = 20; i < 30; i++) { /* elements 80+8n+m from qs[16+m] */
                const uint8_t *m = p + 16 + 4 * ((i - 20) % 2);
                int n = (i - 20) / 2;
                q[i] = (uint8_t)(g_trits[m[0]][n] | g_trits[m[1]][n] << 2 | g_trits[m[2]][n] << 4 | g_trits[m[3]][n] << 6);
            }
            for (int i = 30; i < 32; i++) { /* elements 120+2n+h from qh[h] */
                int n = 2 * (i - 30);
                const uint8_t *qh = p + TERN_PTQ1_0_QH;
                q[i] = (uint8_t)(g_trits[qh[0]][n] | g_trits[qh[1]][n] << 2 | g_trits[qh[0]][n + 1] << 4 |
                                 g_trits[qh[1]][n + 1] << 6);
            }
        }
        return TERN_OK;
    }
    uint8_t *codes = tern_malloc((size_t)K);
    uint16_t *d = tern_malloc((size_t)(K / 128) * 2);
    if (!codes || !d) {
        tern_free(codes, (size_t)K);
        tern_free(d, (size_t)(K / 128) * 2);
        return tern_fail(TERN_ERR_NOMEM, "tensor '%s': out of memory", TN(tensor));
    }
    tern_status st = TERN_OK;
    for (uint64_t r = 0; r < rows && !st; r++) {
        st = tern_decode_row(from, (const uint8_t *)src + r * sb, K, codes, d, tensor, r);
        if (!st) st = tern_encode_row(to, codes, d, K, (uint8_t *)dst + r * db, tensor, r);
    }
    tern_free(codes, (size_t)K);
    tern_free(d, (size_t)(K / 128) * 2);
    return st;
}

/* ------------------------------------------------------------- dequantize */

tern_status tern_dequant_row(tern_dtype t, const void *src, uint64_t K, float *out,
                             const char *tensor, uint64_t row) {
    const uint8_t *p = src;
    switch (t) {
    case TERN_DT_F32: memcpy(out, p, K * 4); return TERN_OK;
    case TERN_DT_F16:
        for (uint64_t j = 0; j < K; j++) out[j] = tern_f16_to_f32(tern_rd16(p + 2 * j));
        return TERN_OK;
    case TERN_DT_BF16:
        for (uint64_t j = 0; j < K; j++) out[j] = tern_bf16_to_f32(tern_rd16(p + 2 * j));
        return TERN_OK;
    case TERN_DT_F64:
        for (uint64_t j = 0; j < K; j++) {
            double v;
            memcpy(&v, p + 8 * j, 8);
            out[j] = (float)v;
        }
        return TERN_OK;
    case TERN_DT_Q8_0:
        if (K % TERN_QK8_0) return bad_k(tensor, K, TERN_QK8_0);
        for (uint64_t b = 0; b < K / TERN_QK8_0; b++, p += TERN_Q8_0_BYTES) {
            float d = tern_f16_to_f32(tern_rd16(p));
            for (int j = 0; j < TERN_QK8_0; j++)
                out[b * TERN_QK8_0 + j] = d * (float)(int8_t)p[TERN_BLOCK_QS + j];
        }
        return TERN_OK;
    case TERN_DT_Q1_0:
        if (K % 128) return bad_k(tensor, K, 128);
        for (uint64_t b = 0; b < K / 128; b++, p += TERN_Q1_0_BYTES) {
            float d = tern_f16_to_f32(tern_rd16(p));
            for (int j = 0; j < 128; j++)
                out[b * 128 + j] = ((p[TERN_BLOCK_QS + j / 8] >> (j % 8)) & 1) ? d : -d;
        }
        return TERN_OK;
    case TERN_DT_Q2_0_G64:
        /* decoded directly (K need only be a multiple of 64; per-block scales) */
        if (K % 64) return bad_k(tensor, K, 64);
        for (uint64_t b = 0; b < K / 64; b++, p += TERN_Q2_0_G64_BYTES) {
            float d = tern_f16_to_f32(tern_rd16(p));
            for (int j = 0; j < 64; j++) {
                unsigned c = (p[TERN_BLOCK_QS + j / 4] >> (2 * (j % 4))) & 3;
                if (c == 3) return bad_code(tensor, row, b * 64 + j, c);
                out[b * 64 + j] = (float)((int)c - 1) * d;
            }
        }
        return TERN_OK;
    case TERN_DT_PQ2_0:
    case TERN_DT_Q2_0:
    case TERN_DT_PTQ1_0: {
        if (K % 128) return bad_k(tensor, K, 128);
        uint8_t codes[128];
        uint16_t d;
        size_t bb = tern_dtype_block_bytes(t);
        for (uint64_t b = 0; b < K / 128; b++, p += bb) {
            tern_status st = tern_decode_row(t, p, 128, codes, &d, tensor, row);
            if (st) return tern_fail_prefix(st, "block %llu", (unsigned long long)b);
            float df = tern_f16_to_f32(d);
            for (int j = 0; j < 128; j++) out[b * 128 + j] = (float)((int)codes[j] - 1) * df;
        }
        return TERN_OK;
    }
    default:
        return tern_fail(TERN_ERR_UNSUPPORTED, "tensor '%s': cannot dequantize type %s",
                         TN(tensor), tern_dtype_name(t));
    }
}
