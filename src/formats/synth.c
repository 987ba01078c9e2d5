/*
 * synth.c - random-weight ternary GGUF models with real shapes (`tern synth`),
 * streamed through the GGUF writer's fill callback. Presets and value ranges in
 * synth.h; metadata through hf_meta (the converter's key order).
 */
#include "formats/synth.h"

#include "formats/codecs.h"
#include "formats/gguf.h"
#include "formats/hf_meta.h"
#include "formats/quantize.h"
#include "formats/arch/arch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct preset {
    const char *name;
    tern_hf_arch arch;
    int64_t layers, embd, ff, heads, kv, hd, vocab, ctx;
    bool tied, hadamard;
    double theta;
} preset;

static const preset g_presets[] = {
    {"bonsai2-27b", TERN_HF_QWEN35, 64, 5120, 17408, 24, 4, 256, 248320, 262144, false, true, 1e7},
    {"ternary-bonsai-27b", TERN_HF_QWEN35, 64, 5120, 17408, 24, 4, 256, 248320, 262144, false, false, 1e7},
    {"ternary-bonsai-8b", TERN_HF_QWEN3, 36, 4096, 12288, 32, 8, 128, 151936, 40960, false, false, 1e6},
    {"ternary-bonsai-4b", TERN_HF_QWEN3, 36, 2560, 9728, 32, 8, 128, 151936, 40960, true, false, 1e6},
    {"ternary-bonsai-1.7b", TERN_HF_QWEN3, 28, 2048, 6144, 16, 8, 128, 151936, 40960, true, false, 1e6},
    {"qwen35-tiny", TERN_HF_QWEN35, 4, 1024, 2048, 12, 2, 256, 4096, 4096, false, true, 1e7},
    {"qwen3-tiny", TERN_HF_QWEN3, 4, 512, 1536, 8, 2, 128, 4096, 4096, true, false, 1e6},
    {"long-tiny", TERN_HF_QWEN3, 1, 128, 256, 2, 1, 64, 512, 262144, true, false, 1e7},
};
#define N_PRESETS (sizeof g_presets / sizeof g_presets[0])

const char *const *tern_synth_presets(void) {
    static const char *names[N_PRESETS + 1];
    for (size_t i = 0; i < N_PRESETS; i++) names[i] = g_presets[i].name;
    names[N_PRESETS] = NULL;
    return names;
}

/* ------------------------------------------------------------ random */

static uint64_t sm64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static uint64_t name_seed(uint64_t seed, const char *name) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    uint64_t s = seed ^ h;
    return sm64(&s);
}
static double unif(uint64_t *s) { return (double)(sm64(s) >> 11) * (1.0 / 9007199254740992.0); }

typedef enum skind { S_TERN, S_NORM, S_NORM1, S_SSM_A, S_DT, S_CONV, S_BF16 } skind;

typedef struct sjob {
    char name[64];
    skind kind;
    uint32_t n_dims;
    uint64_t ne[4];
    tern_dtype type;
    uint64_t seed;
    tm_had had;
} sjob;

/* 81 bytes holding 4 codes in {0,1,2}. */
static uint8_t g_valid[81];

static tern_status fill_synth(void *dst, uint64_t nbytes, void *user) {
    sjob *j = user;
    uint64_t s = j->seed;
    uint64_t K = j->ne[0], N = j->ne[1] * j->ne[2] * j->ne[3];
    uint8_t *o = dst;
    if (j->kind == S_TERN) {
        size_t rb = tern_codec_row_bytes(j->type, K);
        if (rb * N != nbytes) return tern_fail(TERN_ERR_INTERNAL, "synth: '%s' size mismatch", j->name);
        if (j->type == TERN_DT_PQ2_0 || j->type == TERN_DT_Q2_0) {
            for (uint64_t b = 0; b < N * (K / 128); b++, o += 34) {
                uint16_t d = tern_f32_to_f16((float)(0.004 + 0.026 * unif(&s)));
                memcpy(o, &d, 2);
                for (int i = 0; i < 32; i += 4) {
                    uint64_t r = sm64(&s);
                    for (int k = 0; k < 4; k++) o[2 + i + k] = g_valid[((r >> (16 * k)) & 0xffff) % 81];
                }
            }
            return TERN_OK;
        }
        uint8_t *codes = tern_malloc(K);
        uint16_t *d = tern_malloc(K / 128 * 2);
        if (!codes || !d) {
            tern_free(codes, K);
            tern_free(d, K / 128 * 2);
            return tern_fail(TERN_ERR_NOMEM, "synth: out of memory");
        }
        tern_status st = TERN_OK;
        for (uint64_t r = 0; r < N && !st; r++) {
            for (uint64_t g = 0; g < K / 128; g++) d[g] = tern_f32_to_f16((float)(0.004 + 0.026 * unif(&s)));
            for (uint64_t c = 0; c < K; c += 16) {
                uint64_t x = sm64(&s);
                for (int k = 0; k < 16; k++) codes[c + k] = (uint8_t)(((x >> (4 * k)) & 0xf) % 3);
            }
            st = tern_encode_row(j->type, codes, d, K, o + r * rb, j->name, r);
        }
        tern_free(codes, K);
        tern_free(d, K / 128 * 2);
        return st;
    }
    uint64_t n = K * N;
    for (uint64_t i = 0; i < n; i++) {
        double u = unif(&s);
        float v;
        switch (j->kind) {
        case S_NORM: v = (float)(0.6 + 0.8 * u); break;
        case S_NORM1: v = (float)(1.0 + (-0.4 + 1.0 * u)); break;
        case S_SSM_A: v = (float)-exp((double)(float)(-2.0 + 3.0 * u)); break; /* f32 A_log, as converters do */
        case S_DT: v = (float)(-2.0 + 2.5 * u); break;
        case S_CONV: v = (float)(-0.6 + 1.2 * u); break;
        default: v = (float)(-0.06 + 0.12 * u); break;
        }
        if (j->type == TERN_DT_BF16) {
            uint16_t h = tern_f32_to_bf16(v);
            memcpy(o + 2 * i, &h, 2);
        } else {
            memcpy(o + 4 * i, &v, 4);
        }
    }
    return TERN_OK;
}

typedef struct plan {
    sjob *jobs;
    size_t n, cap;
} plan;

static tern_status add(plan *p, const char *name, skind k, tern_dtype type, uint64_t ne0, uint64_t ne1,
                       uint64_t seed) {
    if (!tern_grow(&p->jobs, &p->cap, p->n, sizeof *p->jobs, 256)) return tern_fail(TERN_ERR_NOMEM, "synth: out of memory");
    sjob *j = &p->jobs[p->n++];
    memset(j, 0, sizeof *j);
    snprintf(j->name, sizeof j->name, "%s", name);
    j->kind = k;
    j->type = type;
    j->n_dims = ne1 ? 2 : 1;
    j->ne[0] = ne0;
    j->ne[1] = ne1 ? ne1 : 1;
    j->ne[2] = j->ne[3] = 1;
    j->seed = name_seed(seed, name);
    return TERN_OK;
}

tern_status tern_synth(const char *out, const tern_synth_opts *o) {
    const preset *pr = NULL;
    for (size_t i = 0; i < N_PRESETS; i++)
        if (o->preset && !strcmp(o->preset, g_presets[i].name)) pr = &g_presets[i];
    if (!pr) return tern_fail(TERN_ERR_INVALID_ARG, "synth: unknown preset '%s'", o->preset ? o->preset : "");
    for (int b = 0, n = 0; b < 256; b++)
        if ((b & 3) != 3 && ((b >> 2) & 3) != 3 && ((b >> 4) & 3) != 3 && ((b >> 6) & 3) != 3) g_valid[n++] = (uint8_t)b;
    tern_hf_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.arch = pr->arch;
    hp.n_layer = o->n_layers > 0 ? o->n_layers : pr->layers;
    if (hp.n_layer > 1024) return tern_fail(TERN_ERR_INVALID_ARG, "synth: --layers %lld > 1024", (long long)hp.n_layer);
    hp.n_ctx = pr->ctx;
    hp.n_embd = pr->embd;
    hp.n_ff = pr->ff;
    hp.n_head = pr->heads;
    hp.n_head_kv = pr->kv;
    hp.head_dim = pr->hd;
    hp.n_vocab = pr->vocab;
    hp.rope_theta = pr->theta;
    hp.rms_eps = 1e-6;
    hp.tie_embeddings = pr->tied;
    bool q35 = pr->arch == TERN_HF_QWEN35;
    if (q35) {
        bool tiny = pr->embd == 1024;
        hp.ssm_conv = 4;
        hp.ssm_dk = 128;
        hp.ssm_dv = 128;
        hp.ssm_n_k = tiny ? 8 : 16;
        hp.ssm_n_v = tiny ? 24 : 48;
        hp.full_attn_interval = 4;
        hp.rope_dim = pr->hd / 4;
        hp.partial_rotary = 0.25;
        hp.mrope[0] = 11; hp.mrope[1] = 11; hp.mrope[2] = 10;
        for (int i = 0; i < hp.n_layer; i++) hp.full_attn[i] = (i + 1) % 4 == 0;
    }
    tern_dtype tt = o->out_type != TERN_DT_COUNT ? o->out_type : pr->hadamard ? TERN_DT_PQ2_0 : TERN_DT_Q2_0;
    if (!tern_codec_is_ternary(tt)) return tern_fail(TERN_ERR_INVALID_ARG, "synth: type %s is not ternary", tern_dtype_name(tt));
    bool had = pr->hadamard;
    plan p = {0};
    tern_gguf_writer *w = NULL;
    tern_hf_tokenizer *tok = NULL;
    tern_status st = TERN_OK;
    uint64_t E = (uint64_t)hp.n_embd, F = (uint64_t)hp.n_ff, HD = (uint64_t)hp.head_dim;
    uint64_t s = o->seed;
    const tm_arch_desc *ad = tm_arch_get(hp.arch);
    tm_dims dm = {.embd = hp.n_embd, .ff = hp.n_ff, .vocab = hp.n_vocab, .n_head = hp.n_head,
                  .n_head_kv = hp.n_head_kv, .head_dim = hp.head_dim, .ssm_n_k = hp.ssm_n_k,
                  .ssm_n_v = hp.ssm_n_v, .ssm_dk = hp.ssm_dk, .ssm_dv = hp.ssm_dv, .conv_k = hp.ssm_conv,
                  .attn_gate = ad->attn_gate};
    /* File order: groups (head, embedding, layers, final norm), each layer's
     * tensors sorted by HF name (the converters' canonical order). */
    for (int grp = 0; grp < 4 && !st; grp++) {
        int64_t nl = grp == 2 ? hp.n_layer : 1;
        for (int64_t L = 0; L < nl && !st; L++) {
            bool is_attn = !ad->hybrid || hp.full_attn[L];
            const tm_role *rs[TM_ROLE_COUNT];
            int nr = 0;
            for (int i = 0; i < ad->n_roles; i++) {
                const tm_role *r = ad->roles[i];
                if (r->group != grp || (grp == 2 && !tm_role_in_layer(r, is_attn))) continue;
                if (r->optional && hp.tie_embeddings) continue;
                int at = nr++;
                while (at > 0 && strcmp(rs[at - 1]->hf, r->hf) > 0) { rs[at] = rs[at - 1]; at--; }
                rs[at] = r;
            }
            for (int i = 0; i < nr && !st; i++) {
                const tm_role *r = rs[i];
                skind k = S_TERN;
                tern_dtype type = TERN_DT_F32;
                switch (r->val) {
                case TM_VAL_TERNARY: k = S_TERN; type = tt; break;
                case TM_VAL_NORM: k = ad->norm_plus_one ? S_NORM1 : S_NORM; break;
                case TM_VAL_NORM_RAW: k = S_NORM; break;
                case TM_VAL_SSM_A: k = S_SSM_A; break;
                case TM_VAL_BIAS: k = S_DT; break;
                case TM_VAL_CONV: k = S_CONV; break;
                case TM_VAL_DENSE: k = S_BF16; type = TERN_DT_BF16; break;
                }
                int64_t rk, rn;
                tm_role_shape(r, &dm, &rk, &rn);
                char nm[64];
                if (!tm_role_gguf_name(r, (int)L, nm, sizeof nm))
                    st = tern_fail(TERN_ERR_INTERNAL, "synth: tensor name too long");
                if (!st)
                    st = add(&p, nm, k, type, (uint64_t)rk, tm_role_is_vector(r) ? 0 : (uint64_t)rn, s);
                if (!st) p.jobs[p.n - 1].had = r->had;
            }
        }
    }
    if (st) goto out;
    uint64_t n_params = 0;
    for (size_t i = 0; i < p.n; i++) n_params += p.jobs[i].ne[0] * p.jobs[i].ne[1];
    if ((st = tern_hf_tokenizer_synthetic(hp.n_vocab, &tok))) goto out;
    hp.bos_id = tok->bos_id;
    hp.eos_id = tok->eos_id;
    hp.pad_id = tok->pad_id;
    char name[96];
    snprintf(name, sizeof name, "synth-%s-seed%llu", pr->name, (unsigned long long)o->seed);
    if ((st = tern_gguf_writer_new(&w))) goto out;
    if ((st = tern_hf_write_meta(w, &hp, name, n_params, tt, tok))) goto out;
    if (had) {
        /* widths: hidden, attention-out / GDN value, intermediate (seed 000 sec. 4.1) */
        uint64_t widths[3] = {E, q35 ? (uint64_t)(hp.ssm_n_v * hp.ssm_dv) : (uint64_t)hp.n_head * HD, F};
        int32_t wd[3];
        uint64_t total = 0;
        for (int i = 0; i < 3; i++) { wd[i] = (int32_t)widths[i]; total += widths[i]; }
        if (q35 && (uint64_t)hp.n_head * HD != widths[1]) {
            st = tern_fail(TERN_ERR_INTERNAL, "synth: attention-out width differs from GDN value width");
            goto out;
        }
        int32_t *sv = tern_malloc(total * 4);
        const char **names = tern_calloc(p.n, sizeof *names);
        uint64_t *lens = tern_calloc(p.n, sizeof *lens);
        if (!sv || !names || !lens) st = tern_fail(TERN_ERR_NOMEM, "synth: out of memory");
        uint64_t off = 0;
        for (int i = 0; i < 3 && !st; i++) {
            tern_signs_from_seed(o->seed, widths[i], sv + off);
            off += widths[i];
        }
        size_t nn = 0;
        for (size_t i = 0; i < p.n && !st; i++)
            if (p.jobs[i].had == TM_HAD_FOLDED) {
                names[nn] = p.jobs[i].name;
                lens[nn++] = strlen(p.jobs[i].name);
            }
        if (!st) st = tern_gguf_w_set_u32(w, "prism.hadamard.version", 1);
        if (!st) st = tern_gguf_w_set_u32(w, "prism.hadamard.block_size", 1024);
        if (!st) st = tern_gguf_w_set_str(w, "prism.hadamard.transform", "normalized-sylvester-walsh-hadamard");
        if (!st) st = tern_gguf_w_set_str(w, "prism.hadamard.axis", "input-last-dimension");
        if (!st) st = tern_gguf_w_set_str(w, "prism.hadamard.sign_mode", "explicit");
        if (!st) st = tern_gguf_w_set_arr(w, "prism.hadamard.sign_widths", TERN_GGUF_INT32, wd, 3);
        if (!st) st = tern_gguf_w_set_arr(w, "prism.hadamard.sign_values", TERN_GGUF_INT32, sv, total);
        if (!st) st = tern_gguf_w_set_arr_str(w, "prism.hadamard.weight_names", names, lens, nn);
        const char *inv[TM_ROLE_COUNT];
        uint64_t invl[TM_ROLE_COUNT];
        size_t ni = 0;
        for (size_t i = 0; i < p.n && !st; i++)
            if (p.jobs[i].had == TM_HAD_INVERSE && ni < TM_ROLE_COUNT) {
                inv[ni] = p.jobs[i].name;
                invl[ni++] = strlen(p.jobs[i].name);
            }
        if (!st) st = tern_gguf_w_set_arr_str(w, "prism.hadamard.inverse_weight_names", inv, invl, ni);
        if (!st) st = tern_gguf_w_set_bool(w, "prism.hadamard.gdn_v_grouped", true); /* required by the contract parser, also for qwen3 */
        tern_free(sv, total * 4);
        tern_free(names, p.n * sizeof *names);
        tern_free(lens, p.n * sizeof *lens);
        if (st) goto out;
    }
    for (size_t i = 0; i < p.n && !st; i++)
        st = tern_gguf_w_add_tensor(w, p.jobs[i].name, p.jobs[i].n_dims, p.jobs[i].ne, p.jobs[i].type, NULL,
                                    fill_synth, &p.jobs[i]);
    if (!st) st = tern_gguf_w_write(w, out, o->progress, o->progress_user);
out:
    tern_gguf_writer_free(w);
    tern_hf_tokenizer_free(tok);
    tern_free(p.jobs, p.cap * sizeof *p.jobs);
    return st;
}

tern_status tern_synth_model(const char *preset, uint64_t seed, int n_layers, const char *out_gguf,
                             tern_progress_fn progress, void *user) {
    if (!out_gguf) return tern_fail(TERN_ERR_INVALID_ARG, "synth: NULL path");
    tern_synth_opts o = {0};
    o.preset = preset;
    o.seed = seed;
    o.n_layers = n_layers;
    o.out_type = TERN_DT_COUNT;
    o.progress = progress;
    o.progress_user = user;
    return tern_synth(out_gguf, &o);
}
