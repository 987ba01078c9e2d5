/*
 * gdn_bf16.c - the bf16 GDN state on the CPU (tern_gdn_args.state_bf16; the model
 * parameter gdn_state): after the call, the pending rank-1 update is folded in and S is
 * rounded to bf16 (nearest even), kept in its fp32 slots. The floats are then those of a
 * back-end that stores S in bf16 and updates it in fp32 (the CUDA kernels' read-once /
 * write-once step): the CPU measures the option's error, it does not save memory.
 */
#include "kernels/kernels.h"

#include "core/common.h"

void tern_gdn_state_round_bf16(float *state, float *pending, int n_v, int dk, int dv) {
    const size_t per = 1 + (size_t)dk + (size_t)dv;
    for (int p = 0; p < n_v; p++) {
        float *S = state + (size_t)p * dk * dv, *pd = pending + (size_t)p * per;
        const float d = pd[0], *pk = pd + 1, *pdl = pd + 1 + dk;
        for (int i = 0; i < dk; i++)
            for (int j = 0; j < dv; j++) {
                const float s = d * S[(size_t)i * dv + j] + pk[i] * pdl[j];
                S[(size_t)i * dv + j] = tern_bf16_to_f32(tern_f32_to_bf16(s));
            }
        pd[0] = 1.0f; /* nothing pending */
        for (size_t e = 1; e < per; e++) pd[e] = 0.0f;
    }
}
