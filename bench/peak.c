/*
 * peak.c - kernel-lab probe: sustained throughput of the instructions the
 * kernels are built on (512-bit FMA, VNNI vpdpbusd/vpdpwssd, vpmultishiftqb)
 * and an estimate of the core clock, so the GEMV/GEMM figures in
 * docs/performance.md can be read against the machine's real peaks.
 * Build: gcc -O2 -mavx512f -mavx512bw -mavx512vnni -mavx512vbmi bench/peak.c
 */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec a;
    clock_gettime(CLOCK_MONOTONIC, &a);
    return a.tv_sec + a.tv_nsec * 1e-9;
}

int main(void) {
    long n = 100000000;
    double t = now();
    long x = 0;
    x = 1;
    /* a chain of dependent 3-cycle multiplies (adds with immediates can be
     * folded at rename on recent cores, so they do not time the clock) */
    for (long i = 0; i < n; i++) __asm__ volatile("imul %0, %0\n\timul %0, %0\n\timul %0, %0\n\timul %0, %0" : "+r"(x));
    t = now() - t;
    double ghz = 12.0 * n / t / 1e9;
    printf("clock ~%.2f GHz (dependent imul chain, 3 cycles each)\n", ghz);

    __m512 f0 = _mm512_set1_ps(1), f1 = f0, f2 = f0, f3 = f0, f4 = f0, f5 = f0, f6 = f0, f7 = f0, f8 = f0, f9 = f0;
    __m512 m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(0.001f);
    t = now();
    for (long i = 0; i < n; i++) {
        f0 = _mm512_fmadd_ps(f0, m, c); f1 = _mm512_fmadd_ps(f1, m, c); f2 = _mm512_fmadd_ps(f2, m, c);
        f3 = _mm512_fmadd_ps(f3, m, c); f4 = _mm512_fmadd_ps(f4, m, c); f5 = _mm512_fmadd_ps(f5, m, c);
        f6 = _mm512_fmadd_ps(f6, m, c); f7 = _mm512_fmadd_ps(f7, m, c); f8 = _mm512_fmadd_ps(f8, m, c);
        f9 = _mm512_fmadd_ps(f9, m, c);
        __asm__ volatile("" : "+v"(f0), "+v"(f1), "+v"(f2), "+v"(f3), "+v"(f4), "+v"(f5), "+v"(f6), "+v"(f7), "+v"(f8), "+v"(f9));
    }
    t = now() - t;
    printf("zmm FMA: %.2f per ns = %.2f per cycle (%.1f GFLOP/s)\n", 10.0 * n / t / 1e9, 10.0 * n / t / 1e9 / ghz,
           10.0 * n * 32 / t / 1e9);

    __m512i v0 = _mm512_set1_epi32(1), v1 = v0, v2 = v0, v3 = v0, v4 = v0, v5 = v0, v6 = v0, v7 = v0, v8 = v0, v9 = v0;
    __m512i w = _mm512_set1_epi8(1);
    t = now();
    for (long i = 0; i < n; i++) {
        v0 = _mm512_dpbusd_epi32(v0, w, w); v1 = _mm512_dpbusd_epi32(v1, w, w); v2 = _mm512_dpbusd_epi32(v2, w, w);
        v3 = _mm512_dpbusd_epi32(v3, w, w); v4 = _mm512_dpbusd_epi32(v4, w, w); v5 = _mm512_dpbusd_epi32(v5, w, w);
        v6 = _mm512_dpbusd_epi32(v6, w, w); v7 = _mm512_dpbusd_epi32(v7, w, w); v8 = _mm512_dpbusd_epi32(v8, w, w);
        v9 = _mm512_dpbusd_epi32(v9, w, w);
        __asm__ volatile("" : "+v"(v0), "+v"(v1), "+v"(v2), "+v"(v3), "+v"(v4), "+v"(v5), "+v"(v6), "+v"(v7), "+v"(v8), "+v"(v9));
    }
    t = now() - t;
    printf("zmm vpdpbusd: %.2f per ns = %.2f per cycle\n", 10.0 * n / t / 1e9, 10.0 * n / t / 1e9 / ghz);

    __m512i ctl = _mm512_set1_epi8(2);
    t = now();
    for (long i = 0; i < n; i++) {
        v0 = _mm512_multishift_epi64_epi8(ctl, v0); v1 = _mm512_multishift_epi64_epi8(ctl, v1);
        v2 = _mm512_multishift_epi64_epi8(ctl, v2); v3 = _mm512_multishift_epi64_epi8(ctl, v3);
        v4 = _mm512_multishift_epi64_epi8(ctl, v4); v5 = _mm512_multishift_epi64_epi8(ctl, v5);
        __asm__ volatile("" : "+v"(v0), "+v"(v1), "+v"(v2), "+v"(v3), "+v"(v4), "+v"(v5));
    }
    t = now() - t;
    printf("zmm vpmultishiftqb: %.2f per cycle\n", 6.0 * n / t / 1e9 / ghz);
    __m512i s = _mm512_add_epi32(_mm512_add_epi32(v0, v1), _mm512_add_epi32(v2, v3));
    s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(v4, v5), _mm512_add_epi32(v6, v7)));
    s = _mm512_add_epi32(s, _mm512_add_epi32(v8, v9));
    __m512 fs = _mm512_add_ps(_mm512_add_ps(f0, f1), _mm512_add_ps(f2, f3));
    fs = _mm512_add_ps(fs, _mm512_add_ps(_mm512_add_ps(f4, f5), _mm512_add_ps(f6, f7)));
    fs = _mm512_add_ps(fs, _mm512_add_ps(f8, f9));
    printf("(sinks %d %f)\n", _mm512_reduce_add_epi32(s), _mm512_reduce_add_ps(fs));
    return 0;
}
