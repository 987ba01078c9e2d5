/*
 * tc_attn_prefill.cu - causal attention over the cache (prefill chunks): one CTA per
 * query row and head, each warp walks positions with an online softmax, then the warps'
 * partial states are merged.
 */
#include "kernels/cuda/attn.cuh"

/* One CTA per (query row, head): each warp walks positions w, w+4, ... with an
 * online softmax, then the warps' partial states are merged. */
template <typename KT, typename VT>
__global__ void __launch_bounds__(ATT_WARPS * 32) k_attention(const float *__restrict__ q, size_t qs,
                            const KT *__restrict__ kc, const VT *__restrict__ vc,
                            float *__restrict__ out, int pos0, const int *__restrict__ dpos,
                            int nh, int nkv, int hd, float scale) {
    tc_pdl_trigger();
    tc_pdl_wait();
    if (dpos) pos0 = *dpos;
    const int i = blockIdx.x, h = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    att_warp w;
    att_begin(w, q + (size_t)i * qs + (size_t)h * hd, hd, lane);
    att_walk(w, kc, vc, warp, pos0 + i + 1, (size_t)nkv * hd, h / (nh / nkv), hd, scale, lane);
    att_merge_warps(w, hd, out + (size_t)i * nh * hd + (size_t)h * hd, true, NULL, NULL);
}

extern "C" void tc_attention(tc_ctx *cx, const float *q, size_t q_stride, const void *kcache,
                             const void *vcache, int k_type, int v_type, float *out, int rows,
                             int pos0, int n_head, int n_head_kv, int head_dim, float scale) {
    TC_CTX(cx);
    TC_PROF(TC_FAM_ATTENTION);
    if (rows <= 0) return;
    if (head_dim > ATT_EPL * 32 || n_head > 65535 || !att_types_ok(k_type, v_type, head_dim)) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    dim3 grid((unsigned)rows, (unsigned)n_head);
    att_dispatch(k_type, v_type, [&](auto *k0, auto *v0) {
        using KT = typename std::remove_pointer<decltype(k0)>::type;
        using VT = typename std::remove_pointer<decltype(v0)>::type;
        tc_launch(k_attention<KT, VT>, grid, dim3(ATT_WARPS * 32), 0, 1,
            q, q_stride, (const KT *)kcache, (const VT *)vcache, out, pos0, tc_cur->dyn_pos, n_head,
            n_head_kv, head_dim, scale);
    });
}
