/*
 * cli_env.c - the one place the environment steers tern: the library reads no
 * environment variable (its parameters and process-wide setters do that job), so
 * the CLI maps these onto them.
 *   TERN_ISA=scalar|avx2|avx512|neon|i8mm   tern_set_kernel_isa (a level this machine
 *                                           lacks: a warning, the best is kept)
 *   TERN_SPIN_US=N                          tern_set_spin_us
 *   TERN_REPACK=0                           tern_model_params.repack = false (--no-repack)
 *   TERN_NEON_FP32=1                        the NEON fp32 products (lab knob, Arm A/B)
 *   TERN_CUDA_GRAPH=0, TERN_CUDA_PDL=0      cuda_graphs / cuda_pdl = false (debug)
 *   TERN_CUDA_PROFILE=1                     cuda_profile = true
 *   TERN_CUDA_TC=int8                       cuda_prefill = TERN_CUDA_PREFILL_INT8
 *   TERN_CUDA_GDN=chunk|scan                cuda_gdn_chunk = true / false (the tensor-core GDN
 *                                           prefill or the token scan; A/B)
 *   TERN_CUDA_GEMV=NAME                     cuda_matmul = NAME (A/B; "old" = t128)
 *   TERN_CUDA_GEMM=mma                      cuda_matmul = "mma" (the mma.sync GEMM for batch > 8
 *                                           in place of the default wgmma one; A/B; "wgmma"
 *                                           names the default; "wgmma2" the default with the wgmma
 *                                           GEMM's stream-K in 2-CTA clusters (activation multicast);
 *                                           TERN_CUDA_GEMV wins when both are set)
 * TERN_MODEL (the default model) is read by cli_default_model.c.
 */
#include "cli/cli.h"
#include "kernels/kernels.h"

#include <stdlib.h>
#include <string.h>

static const char *env(const char *name) {
    const char *e = getenv(name);
    return e && *e ? e : NULL;
}

void cli_env_apply(void) {
    const char *e;
    if ((e = env("TERN_ISA")) && tern_set_kernel_isa(e))
        fprintf(stderr, "tern: TERN_ISA: %s; using %s\n", tern_last_error(), tern_kernel_isa());
    if ((e = env("TERN_SPIN_US"))) {
        int64_t us;
        if (!cli_parse_i64(e, 0, 1000000, &us) || tern_set_spin_us((int)us))
            fprintf(stderr, "tern: TERN_SPIN_US=%s is not 0..1000000 microseconds; ignored\n", e);
    }
    if ((e = env("TERN_NEON_FP32")) && !strcmp(e, "1")) tern_kernels_set_neon_fp32(true);
}

void cli_env_model_params(tern_model_params *p) {
    const char *e = env("TERN_REPACK");
    if (e && !strcmp(e, "0")) p->repack = false;
    if ((e = env("TERN_CUDA_GRAPH")) && !strcmp(e, "0")) p->cuda_graphs = false;
    if ((e = env("TERN_CUDA_PDL")) && !strcmp(e, "0")) p->cuda_pdl = false;
    if ((e = env("TERN_CUDA_PROFILE")) && strcmp(e, "0") != 0) p->cuda_profile = true;
    if ((e = env("TERN_CUDA_TC"))) {
        if (!strcmp(e, "int8")) p->cuda_prefill = TERN_CUDA_PREFILL_INT8;
        else if (strcmp(e, "exact") != 0) fprintf(stderr, "tern: TERN_CUDA_TC=%s is not int8 or exact; ignored\n", e);
    }
    if ((e = env("TERN_CUDA_GDN"))) {
        if (!strcmp(e, "chunk") || !strcmp(e, "scan")) p->cuda_gdn_chunk = !strcmp(e, "chunk");
        else fprintf(stderr, "tern: TERN_CUDA_GDN=%s is not chunk or scan; ignored\n", e);
    }
    if ((e = env("TERN_CUDA_GEMM"))) {
        if (!strcmp(e, "wgmma") || !strcmp(e, "mma") || !strcmp(e, "wgmma2"))
            p->cuda_matmul = !strcmp(e, "mma") ? "mma" : !strcmp(e, "wgmma2") ? "wgmma2" : "wgmma";
        else fprintf(stderr, "tern: TERN_CUDA_GEMM=%s is not wgmma, mma or wgmma2; ignored\n", e);
    }
    if ((e = env("TERN_CUDA_GEMV"))) p->cuda_matmul = !strcmp(e, "old") ? "t128" : e;
}
