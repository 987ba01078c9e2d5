/*
 * tc_bench.cu - the decode ops' fallback switch for tests and benches (tc_set_ops_old) and
 * tc_bench_us, the event timing `tern bench kernels --device cuda --ops` uses
 * (plain launches or the same launches replayed as one CUDA graph).
 */
#include "kernels/cuda/internal.cuh"

#include <stdlib.h>
#include <string.h>

/* tc_set_ops_old: the fallback kernels forced (tests, benches); per context */

extern "C" int tc_ops_old(tc_ctx *cx) { return cx->ops_old; }

extern "C" void tc_set_ops_old(tc_ctx *cx, int old) { cx->ops_old = old > 0; }

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

extern "C" double tc_bench_us(tc_ctx *cx, tc_bench_fn fn, void *ctx, int calls, int reps, int graph) {
    TC_CTX(cx);
    if (calls < 1 || reps < 1) return -1;
    if (reps > 1000) reps = 1000;
    double *t = (double *)malloc((size_t)reps * sizeof(double));
    cudaEvent_t e0 = NULL, e1 = NULL;
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    int err = (int)cudaEventCreate(&e0);
    if (!err) err = (int)cudaEventCreate(&e1);
    if (!t && !err) err = (int)cudaErrorMemoryAllocation;
    if (!err && graph) {
        err = (int)cudaStreamBeginCapture(tc_cur->stream, cudaStreamCaptureModeThreadLocal);
        if (!err) {
            for (int c = 0; c < calls; c++) fn(ctx);
            err = (int)cudaStreamEndCapture(tc_cur->stream, &g);
        }
        if (!err) err = (int)cudaGraphInstantiate(&ge, g, 0);
    }
    /* one warm-up round, then the timed ones */
    for (int r = -1; r < reps && !err; r++) {
        cudaEventRecord(e0, tc_cur->stream);
        if (graph) err = (int)cudaGraphLaunch(ge, tc_cur->stream);
        else
            for (int c = 0; c < calls; c++) fn(ctx);
        cudaEventRecord(e1, tc_cur->stream);
        if (!err) err = (int)cudaEventSynchronize(e1);
        float ms = 0;
        if (!err) err = (int)cudaEventElapsedTime(&ms, e0, e1);
        if (r >= 0) t[r] = ms * 1e3 / calls;
    }
    double med = -1;
    if (!err) {
        qsort(t, (size_t)reps, sizeof(double), cmp_d);
        med = t[reps / 2];
    } else {
        cudaGetLastError();
        tc_note(err);
    }
    if (ge) cudaGraphExecDestroy(ge);
    if (g) cudaGraphDestroy(g);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    free(t);
    return med;
}
