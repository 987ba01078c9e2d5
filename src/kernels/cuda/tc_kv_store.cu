/*
 * tc_kv_store.cu - the KV cache store: float k/v rows to positions pos0.. of the
 * layer's caches in their element types (f16/bf16 rounded to nearest even, q8_0 per 32
 * values as the CPU does).
 */
#include "kernels/cuda/attn.cuh"

__global__ void k_kv_store(void *__restrict__ kc, void *__restrict__ vc, int kt, int vt,
                           const float *__restrict__ k, const float *__restrict__ v, size_t kvw,
                           size_t total, int pos0, const int *__restrict__ dpos) {
    tc_pdl_trigger();
    tc_pdl_wait();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; /* over rows*kvw */
    if (i >= total) return;
    if (dpos) pos0 = *dpos;
    size_t o = (size_t)pos0 * kvw + i; /* q8_0: kvw % 32 == 0, so a warp is one block */
    att_store(kc, kt, o, k[i]);
    att_store(vc, vt, o, v[i]);
}

extern "C" void tc_kv_store(tc_ctx *cx, void *kc, void *vc, int k_type, int v_type, const float *k,
                            const float *v, size_t kvw, size_t rows, int pos0) {
    TC_CTX(cx);
    TC_PROF(TC_FAM_MOVERS);
    size_t total = rows * kvw;
    if (!total) return;
    /* whole warps per 32 values (256-thread blocks, total a multiple of 32): the q8_0
     * store's warp is one block of the row */
    if (!att_types_ok(k_type, v_type, kvw > (size_t)INT_MAX ? 0 : (int)kvw)) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    tc_launch(k_kv_store, dim3(tc_blocks(total, 256)), dim3(256), 0, 1, kc, vc, k_type, v_type, k, v,
              kvw, total, pos0, tc_cur->dyn_pos);
}
