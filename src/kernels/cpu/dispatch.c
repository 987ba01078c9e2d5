/*
 * dispatch.c - picks the kernel ISA once at start and fills the kernel table:
 * the scalar reference first, then the best ISA the CPU and the OS support
 * replaces the slots it implements.
 *
 * x86-64: cpuid for the instruction sets, xgetbv for the OS saving the AVX
 * (XMM|YMM) and AVX-512 (opmask|ZMM_Hi256|Hi16_ZMM) register state.
 *   avx2   = AVX2 + FMA + F16C + BMI2
 *   avx512 = avx2 + AVX-512 F/BW/VL/DQ + VNNI + VBMI
 * aarch64: neon = armv8.2 dot product (HWCAP_ASIMDDP); i8mm = neon + the int8
 *   matrix multiply (HWCAP2_I8MM: SMMLA products, cpu_neon_i8mm.c).
 * No AMX level: AMX tiles (amx_int8) are not used yet, so an AMX machine runs the
 * avx512 level (VNNI); there is no AMX kernel to fall back from.
 * The table is written under the pthread_once and afterwards only by
 * tern_kernels_force (tern_set_kernel_isa, tests, benches) and the NEON fp32 lab
 * knob, never while kernels run.
 */
#include "kernels/cpu/internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <strings.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1 << 13)
#endif
#endif

static tern_kern_table g_table;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static bool g_has[TERN_ISA_COUNT];
/* tern_kernels_set_neon_fp32: the NEON levels' fp32 products (lab knob). */
static bool g_neon_fp32;

static void detect(void) {
    g_has[TERN_ISA_SCALAR] = true;
#if defined(__x86_64__) && defined(TERN_HAVE_X86)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    bool osxsave = c & (1u << 27), fma = c & (1u << 12), f16c = c & (1u << 29), avx = c & (1u << 28);
    if (!osxsave || !avx) return;
    unsigned xlo, xhi;
    __asm__ __volatile__("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    bool os_avx = (xlo & 6) == 6, os_avx512 = (xlo & 0xe6) == 0xe6;
    if (__get_cpuid_max(0, NULL) < 7) return;
    __cpuid_count(7, 0, a, b, c, d);
    bool avx2 = b & (1u << 5), bmi2 = b & (1u << 8);
    bool f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31);
    bool vbmi = c & (1u << 1), vnni = c & (1u << 11);
    g_has[TERN_ISA_AVX2] = os_avx && avx2 && fma && f16c && bmi2;
    g_has[TERN_ISA_AVX512] = g_has[TERN_ISA_AVX2] && os_avx512 && f && dq && bw && vl && vbmi && vnni;
#endif
#if defined(__aarch64__) && defined(TERN_HAVE_ARM)
#if defined(__linux__)
    g_has[TERN_ISA_NEON] = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
    g_has[TERN_ISA_I8MM] = g_has[TERN_ISA_NEON] && (getauxval(AT_HWCAP2) & HWCAP2_I8MM) != 0;
#endif
#endif
}

static void fill(tern_isa isa) {
    tern_kern_table t;
    tern_ref_fill(&t);
    tern_model_ref_fill(&t);
#if defined(TERN_HAVE_X86)
    if (isa == TERN_ISA_AVX2 || isa == TERN_ISA_AVX512) {
        tern_avx2_fill(&t);
        tern_model_avx2_fill(&t);
    }
    if (isa == TERN_ISA_AVX512) {
        tern_avx512_fill(&t);
        tern_model_avx512_fill(&t);
    }
#endif
#if defined(TERN_HAVE_ARM)
    if (isa == TERN_ISA_NEON || isa == TERN_ISA_I8MM) tern_neon_fill(&t, g_neon_fp32);
    if (isa == TERN_ISA_I8MM) tern_neon_i8mm_fill(&t);
#endif
    t.isa = isa;
    g_table = t;
}

static tern_isa best(void) {
    if (g_has[TERN_ISA_AVX512]) return TERN_ISA_AVX512;
    if (g_has[TERN_ISA_AVX2]) return TERN_ISA_AVX2;
    if (g_has[TERN_ISA_I8MM]) return TERN_ISA_I8MM;
    if (g_has[TERN_ISA_NEON]) return TERN_ISA_NEON;
    return TERN_ISA_SCALAR;
}

static void init_once(void) {
    for (uint32_t h = 0; h < 65536; h++) tern_f16_table[h] = tern_f16_to_f32((uint16_t)h);
    detect();
    tern_isa isa = best();
    fill(isa);
    tern_log(TERN_LOG_INFO, "kernels: %s", tern_isa_name(isa));
}

void tern_kernels_init(void) { pthread_once(&g_once, init_once); }

const tern_kern_table *tern_kern_get(void) {
    pthread_once(&g_once, init_once);
    return &g_table;
}

tern_isa tern_kernels_isa(void) { return tern_kern_get()->isa; }

const char *tern_isa_name(tern_isa isa) {
    switch (isa) {
    case TERN_ISA_SCALAR: return "scalar";
    case TERN_ISA_AVX2: return "avx2";
    case TERN_ISA_AVX512: return "avx512";
    case TERN_ISA_NEON: return "neon";
    case TERN_ISA_I8MM: return "i8mm";
    }
    return "?";
}

bool tern_isa_parse(const char *name, tern_isa *out) {
    for (int i = 0; name && i < TERN_ISA_COUNT; i++)
        if (!strcasecmp(name, tern_isa_name((tern_isa)i))) {
            *out = (tern_isa)i;
            return true;
        }
    return false;
}

tern_isa tern_kernels_best(void) {
    tern_kernels_init();
    return best();
}

void tern_kernels_set_neon_fp32(bool on) {
    tern_kernels_init();
    g_neon_fp32 = on;
    fill(g_table.isa);
}

bool tern_kernels_force(tern_isa isa) {
    tern_kernels_init();
    if ((unsigned)isa >= TERN_ISA_COUNT || !g_has[isa]) return false;
    fill(isa);
    return true;
}
