/*
 * tc_rope.cu - NEOX RoPE of q/k heads (positions pos0.., or the step graph's device
 * word while capturing).
 */
#include "kernels/cuda/internal.cuh"

#include <math.h>

__global__ void k_rope(float *__restrict__ x, size_t rows, size_t stride, int nh, int hd, int rot,
                       int pos0, const int *__restrict__ dpos, float theta) {
    tc_pdl_trigger();
    tc_pdl_wait();
    const int half = rot / 2;
    if (dpos) pos0 = *dpos;
    size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= rows * (size_t)half) return;
    size_t r = id / half;
    int i = (int)(id % half);
    double inv = pow((double)theta, -2.0 * i / rot);
    double ang = (double)(pos0 + (int)r) * inv;
    float cs = (float)cos(ang), sn = (float)sin(ang);
    for (int h = 0; h < nh; h++) {
        float *v = x + r * stride + (size_t)h * hd;
        float x0 = v[i], x1 = v[i + half];
        v[i] = x0 * cs - x1 * sn;
        v[i + half] = x1 * cs + x0 * sn;
    }
}

extern "C" void tc_rope(tc_ctx *cx, float *x, size_t rows, size_t stride, int n_heads, int hd, int rot,
                        int pos0, float theta) {
    TC_CTX(cx);
    TC_PROF(TC_FAM_ROPE);
    size_t total = rows * (size_t)(rot / 2);
    if (!total) return;
    tc_launch(k_rope, dim3(tc_blocks(total, 128)), dim3(128), 0, 1, x, rows, stride, n_heads, hd, rot,
              pos0, tc_cur->dyn_pos, theta);
}
