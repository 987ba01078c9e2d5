/*
 * bandwidth.c - the machine's memory read ceiling, measured the same way for
 * every benchmark (`tern bench kernels`, `tern bench model`): a buffer much
 * larger than the last-level cache is read by `threads` workers with the
 * widest loads the CPU has (AVX-512, AVX2, else 64-bit), with and without
 * software prefetch; the best pass is the ceiling. Ratios reported against it
 * are therefore against the fastest plain read this run could do.
 */
#include "kernels/kernels.h"

#include <stdlib.h>
#include <string.h>

typedef struct bw_job {
    const uint8_t *buf;
    size_t n, pf;
    int width; /* 512, 256 or 64 */
    uint64_t sink[64];
} bw_job;

static uint64_t read_plain(const uint8_t *p, size_t n, size_t pf) {
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i + 32 <= n; i += 32) {
        if (pf) __builtin_prefetch(p + i + pf);
        uint64_t x[4];
        memcpy(x, p + i, 32);
        a ^= x[0]; b ^= x[1]; c ^= x[2]; d ^= x[3];
    }
    return a ^ b ^ c ^ d;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
__attribute__((target("avx2"))) static uint64_t read_256(const uint8_t *p, size_t n, size_t pf) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        if (pf) {
            _mm_prefetch((const char *)p + i + pf, _MM_HINT_T0);
            _mm_prefetch((const char *)p + i + pf + 64, _MM_HINT_T0);
        }
        a = _mm256_xor_si256(a, _mm256_loadu_si256((const __m256i *)(p + i)));
        b = _mm256_xor_si256(b, _mm256_loadu_si256((const __m256i *)(p + i + 32)));
        c = _mm256_xor_si256(c, _mm256_loadu_si256((const __m256i *)(p + i + 64)));
        d = _mm256_xor_si256(d, _mm256_loadu_si256((const __m256i *)(p + i + 96)));
    }
    a = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
    return (uint64_t)_mm256_extract_epi64(a, 0) ^ (uint64_t)_mm256_extract_epi64(a, 3);
}
__attribute__((target("avx512f"))) static uint64_t read_512(const uint8_t *p, size_t n, size_t pf) {
    __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
    for (size_t i = 0; i + 256 <= n; i += 256) {
        if (pf) {
            _mm_prefetch((const char *)p + i + pf, _MM_HINT_T0);
            _mm_prefetch((const char *)p + i + pf + 64, _MM_HINT_T0);
            _mm_prefetch((const char *)p + i + pf + 128, _MM_HINT_T0);
            _mm_prefetch((const char *)p + i + pf + 192, _MM_HINT_T0);
        }
        a = _mm512_xor_si512(a, _mm512_loadu_si512(p + i));
        b = _mm512_xor_si512(b, _mm512_loadu_si512(p + i + 64));
        c = _mm512_xor_si512(c, _mm512_loadu_si512(p + i + 128));
        d = _mm512_xor_si512(d, _mm512_loadu_si512(p + i + 192));
    }
    a = _mm512_xor_si512(_mm512_xor_si512(a, b), _mm512_xor_si512(c, d));
    return (uint64_t)_mm512_reduce_add_epi64(a);
}
#endif

static void bw_task(void *ctx, int t, int nt) {
    bw_job *j = ctx;
    size_t chunk = (j->n / (size_t)nt) & ~(size_t)255;
    /* prefetches run pf bytes past a chunk's end: keep the last chunk inside the buffer */
    size_t len = (t == nt - 1 && chunk > j->pf + 256) ? chunk - j->pf - 256 : chunk;
    const uint8_t *p = j->buf + chunk * (size_t)t;
    uint64_t s;
#if defined(__x86_64__) && defined(__GNUC__)
    if (j->width == 512) s = read_512(p, len, j->pf);
    else if (j->width == 256) s = read_256(p, len, j->pf);
    else
#endif
        s = read_plain(p, len, j->pf);
    j->sink[t & 63] += s;
}

double tern_read_ceiling_gbps(tern_pool *pool, int threads, size_t bytes, int passes) {
    if (threads < 1) threads = 1;
    if (passes < 1) passes = 1;
    if (bytes < ((size_t)1 << 20)) bytes = (size_t)1 << 20;
    uint8_t *buf = tern_alloc_aligned(bytes);
    if (!buf) return 0;
    memset(buf, 1, bytes); /* fault every page in before timing */
    bw_job j = {buf, bytes, 0, 64, {0}};
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && tern_kernels_isa() == TERN_ISA_AVX512) j.width = 512;
    else if (__builtin_cpu_supports("avx2")) j.width = 256;
#endif
    double best = 0;
    bool adapt = tern_pool_set_adaptive(pool, false); /* every pass on every thread */
    for (int p = 0; p < 2 * passes; p++) {
        j.pf = p % 2 ? 4096 : 0;
        size_t chunk = (bytes / (size_t)threads) & ~(size_t)255;
        size_t total = chunk * (size_t)threads - j.pf - 256;
        double t0 = tern_now_s();
        tern_pool_run(threads > 1 ? pool : NULL, bw_task, &j, threads);
        double dt = tern_now_s() - t0;
        double gbps = (double)total / dt / 1e9;
        if (gbps > best) best = gbps;
    }
    tern_pool_set_adaptive(pool, adapt);
    tern_free_aligned(buf, bytes);
    return best;
}
