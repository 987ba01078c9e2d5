/*
 * loader_hparams.c - hyperparameters from the GGUF-named keys "<arch>.*" (the
 * architecture table names the prefix, the defaults and whether the GDN keys
 * are needed), checked for consistency before any tensor is read. The GGUF
 * loader reads them from the file, the MLX loader from text_config mapped to
 * the same names (mlxpack.h).
 */
#include "model/loader.h"

#include <stdio.h>

tern_status tm_hparams_load(tern_model *m, tm_key_get get, void *u, const char *path) {
    tm_hparams *hp = &m->hp;
    const tm_arch_desc *ad = tm_arch_get(hp->arch);
    if (!ad) return tern_fail(TERN_ERR_INTERNAL, "%s: unknown architecture %d", path, (int)hp->arch);
    const char *A = ad->name;
    char key[128];
    double v;
    bool found;
#define KEY(s) (snprintf(key, sizeof key, "%s.%s", A, s), key)
#define GETI(s, dst, req)                                                                     \
    do {                                                                                      \
        TRY(get(u, KEY(s), &v, &found));                                                      \
        if (!found && (req))                                                                  \
            return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' is missing", path, key);          \
        if (found) {                                                                          \
            if (!(v >= 0 && v <= (double)(1 << 30)) || v != (double)(int64_t)v)               \
                return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' = %g is out of range", path,  \
                                 key, v);                                                     \
            (dst) = (int)v;                                                                   \
        }                                                                                     \
    } while (0)
    GETI("block_count", hp->n_layer, true);
    GETI("embedding_length", hp->n_embd, true);
    GETI("feed_forward_length", hp->n_ff, true);
    GETI("attention.head_count", hp->n_head, true);
    GETI("attention.head_count_kv", hp->n_head_kv, true);
    hp->head_dim = hp->n_head ? hp->n_embd / hp->n_head : 0;
    GETI("attention.key_length", hp->head_dim, false);
    int vlen = hp->head_dim;
    GETI("attention.value_length", vlen, false);
    GETI("context_length", hp->n_ctx_train, false);
    hp->eps = 1e-6f;
    TRY(get(u, KEY("attention.layer_norm_rms_epsilon"), &v, &found));
    if (found) hp->eps = (float)v;
    hp->rope_theta = ad->rope_theta;
    TRY(get(u, KEY("rope.freq_base"), &v, &found));
    if (found) hp->rope_theta = (float)v;
    hp->rope_dims = hp->head_dim;
    GETI("rope.dimension_count", hp->rope_dims, false);
    if (hp->n_layer < 1 || hp->n_layer > 1024 || hp->n_embd < 1 || hp->n_embd > 65536 ||
        hp->n_ff < 1 || hp->n_ff > (1 << 20) || hp->n_head > 1024 || hp->head_dim > 1024 ||
        hp->n_head < 1 || hp->n_head_kv < 1 || hp->n_head % hp->n_head_kv || hp->head_dim < 2 ||
        hp->head_dim % 2 || vlen != hp->head_dim || hp->rope_dims < 2 || hp->rope_dims % 2 ||
        hp->rope_dims > hp->head_dim || !(hp->eps > 0) || !(hp->rope_theta > 0))
        return tern_fail(TERN_ERR_FORMAT,
                         "%s: inconsistent hyperparameters (layers %d, embd %d, ff %d, heads %d/%d, "
                         "head_dim %d, value_length %d, rope dims %d)",
                         path, hp->n_layer, hp->n_embd, hp->n_ff, hp->n_head, hp->n_head_kv,
                         hp->head_dim, vlen, hp->rope_dims);
    hp->attn_gate = ad->attn_gate;
    if (ad->hybrid) {
        GETI("full_attention_interval", hp->full_attn_interval, true);
        GETI("ssm.group_count", hp->ssm_n_k, true);
        GETI("ssm.time_step_rank", hp->ssm_n_v, true);
        GETI("ssm.state_size", hp->ssm_dk, true);
        GETI("ssm.conv_kernel", hp->conv_k, true);
        int inner = 0;
        GETI("ssm.inner_size", inner, true);
        if (hp->full_attn_interval < 1 || hp->ssm_n_k < 1 || hp->ssm_n_v < 1 ||
            hp->ssm_n_v % hp->ssm_n_k || inner % hp->ssm_n_v || hp->ssm_dk < 1 ||
            hp->ssm_dk > 512 || hp->conv_k < 2 || hp->conv_k > 16)
            return tern_fail(TERN_ERR_FORMAT,
                             "%s: inconsistent GDN hyperparameters (n_k %d, n_v %d, state %d, inner %d, conv %d, interval %d)",
                             path, hp->ssm_n_k, hp->ssm_n_v, hp->ssm_dk, inner, hp->conv_k,
                             hp->full_attn_interval);
        hp->ssm_dv = inner / hp->ssm_n_v;
        if (hp->ssm_dv > 512)
            return tern_fail(TERN_ERR_UNSUPPORTED, "%s: GDN value head dim %d > 512", path, hp->ssm_dv);
    }
#undef GETI
#undef KEY
    return TERN_OK;
}

