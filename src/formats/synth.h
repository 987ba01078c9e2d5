/*
 * synth.h - `tern synth`: random-weight ternary GGUF models with the exact shapes
 * of real ones, for benchmarks and loader tests. Streamed to disk tensor by
 * tensor (a 27B is ~7.2 GB; only one tensor is in memory at a time).
 *
 * Presets (shapes from the real configs):
 *   bonsai2-27b         qwen35, PQ2_0 + Hadamard (signs [5120, 6144, 17408]), 64 layers,
 *                       hidden 5120, ffn 17408, 24 heads / 4 kv / head_dim 256,
 *                       GDN n_k 16, n_v 48, dk = dv 128, conv 4, vocab 248320, untied
 *   ternary-bonsai-27b  the same shapes, Q2_0 (fork g128), no rotation
 *   ternary-bonsai-8b   qwen3: hidden 4096, 36 layers, 32 heads / 8 kv / 128, ffn 12288,
 *                       vocab 151936, untied
 *   ternary-bonsai-4b   qwen3: 2560, 36 layers, 32/8/128, ffn 9728, tied
 *   ternary-bonsai-1.7b qwen3: 2048, 28 layers, 16/8/128, ffn 6144, tied
 *   qwen35-tiny, qwen3-tiny  the fixture shapes (tests)
 *   long-tiny           qwen3, 1 layer, hidden 128, 2 heads / 1 kv / 64, ffn 256, vocab
 *                       512, context 262144, theta 1e7: long-context tests in seconds
 * Weights: codes uniform over {-1,0,+1} (a third zeros), fp16 scales uniform in
 * [0.004, 0.03]; norms near 1 (qwen35 stores w+1), ssm_a = -exp(U[-2,1]), dt bias,
 * conv and BF16 alpha/beta small uniform values. Metadata as tern quantize writes
 * it, with a minimal byte-level tokenizer (256 byte tokens, fillers, the five Qwen
 * added tokens). Deterministic per seed (splitmix64 keyed by seed and tensor name).
 */
#ifndef TERN_FORMATS_SYNTH_H
#define TERN_FORMATS_SYNTH_H

#include "core/common.h"

typedef struct tern_synth_opts {
    const char *preset;
    uint64_t seed;
    int n_layers;                 /* 0: the preset's */
    tern_dtype out_type;          /* TERN_DT_COUNT: the preset's */
    tern_progress_fn progress;
    void *progress_user;
} tern_synth_opts;

/* NULL-terminated list of preset names. */
const char *const *tern_synth_presets(void);
tern_status tern_synth(const char *out_gguf, const tern_synth_opts *o);

#endif
