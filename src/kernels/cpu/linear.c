/*
 * linear.c - the public ternary linear layer of tern.h (the mlx_ternary
 * equivalent): construction from trits + scales, from MLX affine 2-bit words
 * (bias == -scale enforced) or from packed GGUF rows (PQ2_0 / Q2_0 / Q2_0_G64 /
 * Q1_0), and the forward y = x W^T + b on the library's thread pool.
 *
 * Storage: the layer owns one packed copy in the file layout of kernels.h
 * (group 128 -> PQ2_0 34-byte blocks, group 64 -> mainline Q2_0 18-byte blocks,
 * Q1_0 stays Q1_0; on AVX-512 PQ2_0 then moves to the 16-row layout of
 * tern_qmat_repack) and an optional float bias.
 */
#include "kernels/cpu/internal.h"

#include <math.h>
#include <pthread.h>
#include <unistd.h>

struct tern_linear {
    tern_qmat w;
    uint8_t *buf;
    size_t buf_size;
    float *bias;     /* [n_out] or NULL */
};

/* ------------------------------------------------------------ threads */
static pthread_mutex_t g_pool_mu = PTHREAD_MUTEX_INITIALIZER;
static tern_pool *g_pool;
static int g_threads = 1;

tern_status tern_set_threads(int n) {
    if (n < 0 || n > 1024) return tern_fail(TERN_ERR_INVALID_ARG, "tern_set_threads: %d threads (0..1024)", n);
    if (n == 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)(c > 1024 ? 1024 : c) : 1;
    }
    pthread_mutex_lock(&g_pool_mu);
    tern_status st = TERN_OK;
    if (n != g_threads || (n > 1 && !g_pool)) {
        tern_pool_free(g_pool);
        g_pool = NULL;
        g_threads = 1;
        if (n > 1) {
            st = tern_pool_new(n, &g_pool);
            if (st == TERN_OK) g_threads = n;
        }
    }
    pthread_mutex_unlock(&g_pool_mu);
    return st;
}

int tern_get_threads(void) { return g_threads; }

double tern_linear_pool_read_ceiling_gbps(size_t bytes, int passes) {
    pthread_mutex_lock(&g_pool_mu);
    double r = tern_read_ceiling_gbps(g_pool, g_pool ? g_threads : 1, bytes, passes);
    pthread_mutex_unlock(&g_pool_mu);
    return r;
}

const char *tern_kernel_isa(void) { return tern_isa_name(tern_kernels_isa()); }

tern_status tern_set_kernel_isa(const char *name) {
    tern_isa isa = tern_kernels_best();
    if (name && *name && !tern_isa_parse(name, &isa))
        return tern_fail(TERN_ERR_INVALID_ARG, "kernel ISA '%s' is not one of scalar|avx2|avx512|neon|i8mm",
                         name);
    if (!tern_kernels_force(isa))
        return tern_fail(TERN_ERR_UNSUPPORTED, "kernel ISA '%s': this CPU/OS lacks it (best here: %s)", name,
                         tern_isa_name(tern_kernels_best()));
    tern_log(TERN_LOG_INFO, "kernels: %s", tern_isa_name(isa));
    return TERN_OK;
}

/* ------------------------------------------------------------ creation */
static tern_status lin_alloc(tern_dtype type, int64_t n, int64_t k, const float *bias,
                             tern_linear **out) {
    size_t be = tern_dtype_block_elems(type), bb = tern_dtype_block_bytes(type);
    size_t rb = (size_t)k / be * bb, total;
    if (!tern_mul_ok(rb, (size_t)n, &total))
        return tern_fail(TERN_ERR_SHAPE, "tern_linear: %lld x %lld is too large", (long long)n, (long long)k);
    tern_linear *l = tern_calloc(1, sizeof *l);
    if (!l) return tern_fail(TERN_ERR_NOMEM, "tern_linear: out of memory");
    l->buf_size = total ? total : 1;
    l->buf = tern_alloc_aligned(l->buf_size);
    if (bias) l->bias = tern_malloc((size_t)n * sizeof(float));
    if (!l->buf || (bias && !l->bias)) {
        tern_linear_free(l);
        return tern_fail(TERN_ERR_NOMEM, "tern_linear: out of memory for %zu bytes", total);
    }
    memset(l->buf, 0, l->buf_size);
    if (bias) memcpy(l->bias, bias, (size_t)n * sizeof(float));
    l->w.type = type;
    l->w.n = n;
    l->w.k = k;
    l->w.data = l->buf;
    l->w.row_bytes = rb;
    *out = l;
    return TERN_OK;
}

static tern_status check_dims(const char *fn, int64_t n, int64_t k, int group, tern_linear **out) {
    if (!out) return tern_fail(TERN_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (group != 64 && group != 128)
        return tern_fail(TERN_ERR_SHAPE, "%s: group %d (must be 64 or 128)", fn, group);
    if (n <= 0 || k <= 0 || k % group)
        return tern_fail(TERN_ERR_SHAPE, "%s: n_out=%lld n_in=%lld (need n_out > 0, n_in a positive multiple of %d)",
                         fn, (long long)n, (long long)k, group);
    if (n > ((int64_t)1 << 40) || k > ((int64_t)1 << 40))
        return tern_fail(TERN_ERR_SHAPE, "%s: n_out=%lld n_in=%lld too large", fn, (long long)n, (long long)k);
    return TERN_OK;
}

/* Last step of every constructor: on AVX-512, PQ2_0 layers move to the 16-row
 * layout (same bytes, a faster GEMV); l->buf stays the file layout until then. */
static tern_linear *lin_finish(tern_linear *l) {
    if (l->w.type != TERN_DT_PQ2_0 || tern_kernels_isa() != TERN_ISA_AVX512) return l;
    tern_qmat r;
    if (tern_qmat_repack(&l->w, &r) != TERN_OK) { tern_clear_error(); return l; } /* keep the file layout */
    tern_free_aligned(l->buf, l->buf_size);
    l->buf = (uint8_t *)r.data;
    l->buf_size = (size_t)((l->w.n + 15) / 16) * 16 * r.row_bytes;
    if (!l->buf_size) l->buf_size = 64;
    l->w = r;
    return l;
}

/* Put code c (0..2) of element j of row r. */
static inline void put_code(tern_linear *l, int64_t r, int64_t j, int c) {
    int64_t g = l->w.type == TERN_DT_Q2_0_G64 ? 64 : 128;
    uint8_t *blk = l->buf + (size_t)r * l->w.row_bytes + (size_t)(j / g) * (2 + (size_t)g / 4);
    int64_t e = j % g;
    blk[2 + e / 4] |= (uint8_t)(c << (2 * (e % 4)));
}
static inline void put_scale(tern_linear *l, int64_t r, int64_t b, uint16_t h) {
    int64_t g = l->w.type == TERN_DT_Q2_0_G64 ? 64 : 128;
    uint8_t *blk = l->buf + (size_t)r * l->w.row_bytes + (size_t)b * (2 + (size_t)g / 4);
    memcpy(blk, &h, 2);
}

tern_status tern_linear_from_trits(const int8_t *trits, const float *scales, const float *bias,
                                   int64_t n, int64_t k, int group, tern_linear **out) {
    tern_status st = check_dims("tern_linear_from_trits", n, k, group, out);
    if (st) return st;
    if (!trits || !scales) return tern_fail(TERN_ERR_INVALID_ARG, "tern_linear_from_trits: NULL trits or scales");
    tern_linear *l;
    st = lin_alloc(group == 128 ? TERN_DT_PQ2_0 : TERN_DT_Q2_0_G64, n, k, bias, &l);
    if (st) return st;
    int64_t ng = k / group;
    for (int64_t r = 0; r < n; r++) {
        for (int64_t b = 0; b < ng; b++) {
            float s = scales[r * ng + b];
            if (!isfinite(s)) {
                tern_linear_free(l);
                return tern_fail(TERN_ERR_INVALID_ARG, "tern_linear_from_trits: scale [%lld, %lld] is not finite",
                                 (long long)r, (long long)b);
            }
            put_scale(l, r, b, tern_f32_to_f16(s));
        }
        for (int64_t j = 0; j < k; j++) {
            int t = trits[r * k + j];
            if (t < -1 || t > 1) {
                tern_linear_free(l);
                return tern_fail(TERN_ERR_INVALID_ARG, "tern_linear_from_trits: trit [%lld, %lld] = %d (must be -1, 0 or 1)",
                                 (long long)r, (long long)j, t);
            }
            put_code(l, r, j, t + 1);
        }
    }
    *out = lin_finish(l);
    return TERN_OK;
}

tern_status tern_linear_from_mlx_2bit(const uint32_t *words, const uint16_t *scales,
                                      const uint16_t *biases, const float *bias, int64_t n,
                                      int64_t k, int group, tern_linear **out) {
    tern_status st = check_dims("tern_linear_from_mlx_2bit", n, k, group, out);
    if (st) return st;
    if (!words || !scales || !biases)
        return tern_fail(TERN_ERR_INVALID_ARG, "tern_linear_from_mlx_2bit: NULL words, scales or biases");
    int64_t ng = k / group;
    for (int64_t i = 0; i < n * ng; i++) {
        uint16_t s = scales[i], b = biases[i];
        /* bias == -scale exactly: same magnitude bits, opposite sign (and not NaN) */
        if ((uint16_t)(s ^ 0x8000u) != b || (s & 0x7c00u) == 0x7c00u)
            return tern_fail(TERN_ERR_FORMAT,
                             "tern_linear_from_mlx_2bit: group %lld of row %lld has bias %g != -scale %g "
                             "(not a ternary checkpoint)", (long long)(i % ng), (long long)(i / ng),
                             tern_f16_to_f32(b), -tern_f16_to_f32(s));
    }
    tern_linear *l;
    st = lin_alloc(group == 128 ? TERN_DT_PQ2_0 : TERN_DT_Q2_0_G64, n, k, bias, &l);
    if (st) return st;
    int64_t wpr = k / 16;
    for (int64_t r = 0; r < n; r++) {
        for (int64_t b = 0; b < ng; b++) put_scale(l, r, b, scales[r * ng + b]);
        for (int64_t wi = 0; wi < wpr; wi++) {
            uint32_t w = words[r * wpr + wi];
            /* a code 3 has both bits set */
            if (w & (w >> 1) & 0x55555555u) {
                int lane = __builtin_ctz(w & (w >> 1) & 0x55555555u) / 2;
                tern_linear_free(l);
                return tern_fail(TERN_ERR_FORMAT, "tern_linear_from_mlx_2bit: row %lld element %lld has code 3 "
                                 "(ternary codes are 0, 1, 2)", (long long)r, (long long)(wi * 16 + lane));
            }
            /* the word is 16 codes, element 16wi+j at bits 2j: the same little-endian
             * byte sequence as four packed bytes; blocks never split a word. */
            int64_t j0 = wi * 16, g = group;
            uint8_t *dst = l->buf + (size_t)r * l->w.row_bytes + (size_t)(j0 / g) * (2 + (size_t)g / 4) + 2 +
                           (size_t)(j0 % g) / 4;
            uint8_t le[4] = {(uint8_t)w, (uint8_t)(w >> 8), (uint8_t)(w >> 16), (uint8_t)(w >> 24)};
            memcpy(dst, le, 4);
        }
    }
    *out = lin_finish(l);
    return TERN_OK;
}

tern_status tern_linear_from_packed(tern_dtype type, const void *data, size_t size, const float *bias,
                                    int64_t n, int64_t k, tern_linear **out) {
    const char *fn = "tern_linear_from_packed";
    if (!out) return tern_fail(TERN_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (type != TERN_DT_PQ2_0 && type != TERN_DT_Q2_0 && type != TERN_DT_Q2_0_G64 && type != TERN_DT_Q1_0)
        return tern_fail(TERN_ERR_UNSUPPORTED, "%s: type %s (need PQ2_0, Q2_0, Q2_0_G64 or Q1_0)", fn,
                         tern_dtype_name(type));
    int group = (int)tern_dtype_block_elems(type);
    tern_status st = check_dims(fn, n, k, group, out);
    if (st) return st;
    if (!data) return tern_fail(TERN_ERR_INVALID_ARG, "%s: NULL data", fn);
    size_t rb = (size_t)k / (size_t)group * tern_dtype_block_bytes(type), need;
    if (!tern_mul_ok(rb, (size_t)n, &need) || size != need)
        return tern_fail(TERN_ERR_SHAPE, "%s: %zu bytes given, %s %lld x %lld needs %zu", fn, size,
                         tern_dtype_name(type), (long long)n, (long long)k, need);
    tern_linear *l;
    st = lin_alloc(type == TERN_DT_Q2_0 ? TERN_DT_PQ2_0 : type, n, k, bias, &l);
    if (st) return st;
    memcpy(l->buf, data, need);
    if (type != TERN_DT_Q1_0) {
        size_t bb = tern_dtype_block_bytes(type);
        for (size_t off = 0; off < need; off += bb) {
            for (size_t i = 2; i < bb; i++) {
                uint8_t c = l->buf[off + i];
                if (c & (c >> 1) & 0x55) {
                    size_t blk = off / bb;
                    tern_linear_free(l);
                    return tern_fail(TERN_ERR_FORMAT, "%s: code 3 in block %zu (row %zu) at byte offset %zu",
                                     fn, blk, blk / ((size_t)k / (size_t)group), off + i);
                }
            }
        }
    }
    *out = lin_finish(l);
    return TERN_OK;
}

void tern_linear_free(tern_linear *l) {
    if (!l) return;
    if (l->buf) tern_free_aligned(l->buf, l->buf_size);  /* both layouts: buf_size is the block size */
    if (l->bias) tern_free(l->bias, (size_t)l->w.n * sizeof(float));
    tern_free(l, sizeof *l);
}

int64_t tern_linear_n_in(const tern_linear *l) { return l ? l->w.k : 0; }
int64_t tern_linear_n_out(const tern_linear *l) { return l ? l->w.n : 0; }

tern_status tern_linear_forward(const tern_linear *l, const float *x, size_t batch, size_t x_stride,
                                float *y, size_t y_stride) {
    if (!l) return tern_fail(TERN_ERR_INVALID_ARG, "tern_linear_forward: NULL layer");
    if (x_stride < (size_t)l->w.k || y_stride < (size_t)l->w.n)
        return tern_fail(TERN_ERR_SHAPE, "tern_linear_forward: x_stride %zu < n_in %lld or y_stride %zu < n_out %lld",
                         x_stride, (long long)l->w.k, y_stride, (long long)l->w.n);
    if (batch == 0) return TERN_OK;
    if (!x || !y) return tern_fail(TERN_ERR_INVALID_ARG, "tern_linear_forward: NULL x or y");
    size_t tmp;
    if (!tern_mul_ok(batch, x_stride, &tmp) || !tern_mul_ok(batch, y_stride, &tmp))
        return tern_fail(TERN_ERR_SHAPE, "tern_linear_forward: batch %zu too large", batch);
    /* The pool is not reentrant: concurrent callers run single-threaded. */
    if (g_pool && pthread_mutex_trylock(&g_pool_mu) == 0) {
        tern_matmul(&l->w, x, batch, x_stride, y, y_stride, g_pool);
        pthread_mutex_unlock(&g_pool_mu);
    } else {
        tern_matmul(&l->w, x, batch, x_stride, y, y_stride, NULL);
    }
    if (l->bias)
        for (size_t b = 0; b < batch; b++)
            for (int64_t i = 0; i < l->w.n; i++) y[b * y_stride + (size_t)i] += l->bias[i];
    return TERN_OK;
}

tern_status tern_linear_dequantize(const tern_linear *l, float *out) {
    if (!l || !out) return tern_fail(TERN_ERR_INVALID_ARG, "tern_linear_dequantize: NULL argument");
    int64_t n = l->w.n, k = l->w.k;
    bool q1 = l->w.type == TERN_DT_Q1_0;
    int64_t g = l->w.type == TERN_DT_Q2_0_G64 ? 64 : 128;
    size_t bb = tern_dtype_block_bytes(l->w.type);
    for (int64_t r = 0; r < n; r++)
        for (int64_t j = 0; j < k; j++) {
            int64_t e = j % g;
            float v;
            if (l->w.layout == TERN_LAYOUT_R16) {
                float d = tern_f16_to_f32(tern_r16_scale(&l->w, r, j / 128));
                v = (float)(tern_r16_code(&l->w, r, j / 128, (int)e) - 1) * d;
            } else {
                const uint8_t *blk = l->buf + (size_t)r * l->w.row_bytes + (size_t)(j / g) * bb;
                float d = tern_f16_to_f32(tern_rd16(blk));
                v = q1 ? (((blk[2 + e / 8] >> (e % 8)) & 1) ? d : -d)
                       : (float)(((blk[2 + e / 4] >> (2 * (e % 4))) & 3) - 1) * d;
            }
            out[r * k + j] = v;
        }
    return TERN_OK;
}
