/*
 * cuda_device.c - the CUDA back-end's device queries, which need no back-end instance:
 * whether a device is there (the registry's `present`), its name, and the device read
 * ceiling that benchmarks divide by. Without TERN_HAVE_CUDA: no device.
 */
#include "backends/backends.h"
#include "lab.h" /* tern_device_read_ceiling_gbps */

#include <stdlib.h>
#include <string.h>

#if defined(TERN_HAVE_CUDA)

#include "kernels/cuda/cuda.h"

bool tm_backend_cuda_present(const char **what) {
    static _Thread_local char name[256];
    if (tc_device_count() < 1) {
        if (what) *what = "no CUDA device";
        return false;
    }
    if (what) *what = tc_device_describe(0, name, sizeof name) == 0 ? name : "CUDA device not usable";
    return true;
}

const char *tm_backend_cuda_device(void) {
    static _Thread_local char name[256];
    return tc_device_describe(0, name, sizeof name) == 0 ? name : "";
}

double tern_device_read_ceiling_gbps(const char *device, size_t bytes, int passes) {
    if (device && !strcmp(device, "cpu")) return tern_linear_pool_read_ceiling_gbps(bytes, passes);
    if (!device || strncmp(device, "cuda", 4) || tc_device_count() < 1) return 0;
    int dev = device[4] == ':' ? atoi(device + 5) : 0;
    tc_ctx *tc = NULL;
    if (tc_ctx_new(dev, &tc)) return 0;
    double g = tc_read_ceiling_gbps(tc, bytes, passes);
    tc_ctx_free(tc);
    return g;
}

double tern_device_int8_tops(const char *device, int passes) {
    if (!device || strncmp(device, "cuda", 4) || tc_device_count() < 1) return 0;
    int dev = device[4] == ':' ? atoi(device + 5) : 0;
    tc_ctx *tc = NULL;
    if (tc_ctx_new(dev, &tc)) return 0;
    double t = tc_int8_mma_tops(tc, passes);
    tc_ctx_free(tc);
    return t;
}

#else

bool tm_backend_cuda_present(const char **what) {
    if (what) *what = "not compiled in";
    return false;
}

const char *tm_backend_cuda_device(void) { return ""; }

double tern_device_read_ceiling_gbps(const char *device, size_t bytes, int passes) {
    if (device && !strcmp(device, "cpu")) return tern_linear_pool_read_ceiling_gbps(bytes, passes);
    return 0;
}

double tern_device_int8_tops(const char *device, int passes) {
    (void)device;
    (void)passes;
    return 0;
}

#endif
