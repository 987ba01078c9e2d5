/*
 * quantize.c - `tern quantize`: Hugging Face checkpoint (safetensors) -> ternary
 * GGUF with the Bonsai conventions (Hadamard fold, g128 ternarisation, qwen35
 * norm/V-order/ssm conventions, fork-converter metadata). Rules in quantize.h.
 */
#include "formats/quantize.h"

#include "formats/codecs.h"
#include "formats/gguf.h"
#include "formats/hadamard.h"
#include "formats/hf_meta.h"
#include "formats/json_util.h"
#include "formats/safetensors.h"
#include "formats/vorder.h"
#include "formats/arch/arch.h"

#include <dirent.h>
#include <pthread.h>
#include <unistd.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------ numerics */

void tern_fold_row(double *x, const float *signs, uint64_t K, uint32_t n) {
    for (uint64_t j = 0; j < K; j++) x[j] *= signs[j];
    double sc = 1.0 / sqrt((double)n);
    for (uint64_t b = 0; b < K; b += n) {
        double *v = x + b;
        for (uint32_t h = 1; h < n; h <<= 1)
            for (uint32_t i = 0; i < n; i += 2 * h)
                for (uint32_t j = i; j < i + h; j++) {
                    double a = v[j], c = v[j + h];
                    v[j] = a + c;
                    v[j + h] = a - c;
                }
        for (uint32_t j = 0; j < n; j++) v[j] *= sc;
    }
}

void tern_ternarize_row(const float *w, uint64_t K, uint8_t *codes, uint16_t *d) {
    for (uint64_t g = 0; g < K / 128; g++) {
        const float *x = w + g * 128;
        float amax = 0.0f;
        for (int j = 0; j < 128; j++)
            if (fabsf(x[j]) > amax) amax = fabsf(x[j]);
        float id = amax > 0.0f ? 1.0f / amax : 0.0f;
        d[g] = tern_f32_to_f16(amax);
        for (int j = 0; j < 128; j++) {
            float q = roundf(x[j] * id); /* half away from zero */
            int c = q > 0.5f ? 2 : q < -0.5f ? 0 : 1;
            codes[g * 128 + j] = (uint8_t)c;
        }
    }
}

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void tern_signs_from_seed(uint64_t seed, uint64_t width, int32_t *out) {
    uint64_t s = seed ^ (width * 0xD1B54A32D192ED03ull);
    for (uint64_t i = 0; i < width; i++) out[i] = (splitmix64(&s) >> 63) ? -1 : 1;
}

/* ------------------------------------------------------------ the plan */

typedef enum jkind { J_TERN, J_NORM1, J_F32, J_SSM_A, J_BF16 } jkind;

typedef struct qctx qctx;

typedef struct job {
    char name[128];
    const tern_st_tensor *src;
    char hf[192];             /* normalised HF name (sort key) */
    int group, layer;
    jkind kind;
    tern_vorder_kind vo;      /* row permutation (grouped -> tiled), or COLS */
    bool cols_tiled;          /* permute ssm_out columns grouped -> tiled */
    bool fold;                /* Hadamard fold (ternary only) */
    uint32_t n_dims;
    uint64_t ne[4];
    uint64_t K, N;            /* row length and rows as processed */
    tern_dtype type;
    qctx *q;
    const tm_role *role;      /* the tensor's role in the architecture table */
} job;

struct qctx {
    tern_st **shards;
    size_t n_shards;
    tern_hf_hparams hp;
    tern_gdn_dims gdn;
    /* signs */
    uint32_t block;
    size_t n_widths;
    uint64_t widths[16];
    int32_t *signs[16];
    float *fsigns[16];
    job *jobs;
    size_t n_jobs;
};

static const float *signs_for(qctx *q, uint64_t K) {
    for (size_t i = 0; i < q->n_widths; i++)
        if (q->widths[i] == K) return q->fsigns[i];
    return NULL;
}

/* Source row for destination row r (grouped HF -> tiled GGUF). */
static uint64_t src_row(const job *j, uint64_t r) {
    const tern_gdn_dims *g = &j->q->gdn;
    uint64_t base = 0, unit;
    switch (j->vo) {
    case TERN_VO_QKV:
    case TERN_VO_CONV:
        base = 2 * g->n_k * g->head_k_dim;
        unit = g->head_v_dim;
        break;
    case TERN_VO_ROWS: unit = j->N == g->n_v ? 1 : g->head_v_dim; break;
    case TERN_VO_ELEMS: unit = 1; break;
    default: return r;
    }
    if (r < base) return r;
    uint64_t p = (r - base) / unit, within = (r - base) % unit;
    uint64_t rr = g->n_v / g->n_k, jj = p / g->n_k, kk = p % g->n_k;
    return base + (kk * rr + jj) * unit + within;
}

/* Rows [r0, r1) of job j into dst (row stride rb). */
static tern_status fill_rows(job *j, uint8_t *dst, size_t rb, uint64_t r0, uint64_t r1) {
    qctx *q = j->q;
    uint64_t K = j->K;
    float *row = tern_malloc(K * sizeof(float)), *tmp = tern_malloc(K * sizeof(float));
    double *dr = j->fold ? tern_malloc(K * sizeof(double)) : NULL;
    uint8_t *codes = tern_malloc(K);
    uint16_t *d = tern_malloc((K / 128 + 1) * 2);
    tern_status st = TERN_OK;
    if (!row || !tmp || !codes || !d || (j->fold && !dr)) {
        st = tern_fail(TERN_ERR_NOMEM, "tensor '%s': out of memory", j->name);
        goto done;
    }
    const float *signs = j->fold ? signs_for(q, K) : NULL;
    for (uint64_t r = r0; r < r1 && !st; r++) {
        uint64_t sr = src_row(j, r);
        const uint8_t *sp = j->src->data + sr * K * j->src->elem_size;
        st = tern_dequant_row(j->src->type, sp, K, row, j->src->name, sr);
        if (st) break;
        uint8_t *o = dst + r * rb;
        switch (j->kind) {
        case J_TERN:
            if (j->cols_tiled) {
                tern_vorder_units(tmp, row, &q->gdn, q->gdn.head_v_dim * sizeof(float), TERN_VORDER_TO_TILED);
                memcpy(row, tmp, K * sizeof(float));
            }
            if (signs) {
                for (uint64_t c = 0; c < K; c++) dr[c] = row[c];
                tern_fold_row(dr, signs, K, q->block);
                for (uint64_t c = 0; c < K; c++) row[c] = (float)dr[c];
            }
            for (uint64_t c = 0; c < K; c++)
                if (!isfinite(row[c])) {
                    st = tern_fail(TERN_ERR_FORMAT, "tensor '%s' row %llu element %llu: not finite",
                                   j->src->name, (unsigned long long)sr, (unsigned long long)c);
                    break;
                }
            if (st) break;
            tern_ternarize_row(row, K, codes, d);
            st = tern_encode_row(j->type, codes, d, K, o, j->name, r);
            break;
        case J_NORM1:
            for (uint64_t c = 0; c < K; c++) row[c] += 1.0f;
            memcpy(o, row, K * 4);
            break;
        case J_F32: memcpy(o, row, K * 4); break;
        case J_SSM_A:
            for (uint64_t c = 0; c < K; c++) row[c] = (float)-exp((double)row[c]);
            memcpy(o, row, K * 4);
            break;
        case J_BF16:
            for (uint64_t c = 0; c < K; c++) {
                uint16_t h = tern_f32_to_bf16(row[c]);
                memcpy(o + 2 * c, &h, 2);
            }
            break;
        }
    }
done:
    tern_free(row, K * sizeof(float));
    tern_free(tmp, K * sizeof(float));
    tern_free(dr, K * sizeof(double));
    tern_free(codes, K);
    tern_free(d, (K / 128 + 1) * 2);
    return st;
}

typedef struct worker {
    job *j;
    uint8_t *dst;
    size_t rb;
    uint64_t r0, r1;
    tern_status st;
    char msg[1024];               /* the worker's error message (errors are thread-local) */
} worker;

static void *worker_main(void *arg) {
    worker *w = arg;
    w->st = fill_rows(w->j, w->dst, w->rb, w->r0, w->r1);
    if (w->st) snprintf(w->msg, sizeof w->msg, "%s", tern_last_error());
    return NULL;
}

/* Fill one output tensor; large ternary tensors are split over the online cores. */
static tern_status fill_job(void *dst, uint64_t nbytes, void *user) {
    job *j = user;
    uint64_t K = j->K;
    size_t rb = j->kind == J_TERN ? tern_codec_row_bytes(j->type, K)
                                  : K * tern_dtype_block_bytes(j->type);
    if (rb * j->N != nbytes) return tern_fail(TERN_ERR_INTERNAL, "tensor '%s': size mismatch", j->name);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = ncpu > 1 ? (int)(ncpu < 32 ? ncpu : 32) : 1;
    if (j->kind != J_TERN || j->N * K < ((uint64_t)1 << 20) || j->N < (uint64_t)nt) nt = 1;
    if (nt == 1) return fill_rows(j, dst, rb, 0, j->N);
    worker w[32];
    pthread_t th[32];
    bool started[32] = {0};
    for (int i = 0; i < nt; i++) {
        w[i] = (worker){j, dst, rb, j->N * i / nt, j->N * (i + 1) / nt, TERN_OK, {0}};
        started[i] = i > 0 && pthread_create(&th[i], NULL, worker_main, &w[i]) == 0;
    }
    for (int i = 0; i < nt; i++)
        if (!started[i]) worker_main(&w[i]); /* the caller's share, and any thread that did not start */
    for (int i = 1; i < nt; i++)
        if (started[i]) pthread_join(th[i], NULL);
    for (int i = 0; i < nt; i++)
        if (w[i].st) return tern_fail(w[i].st, "%s", w[i].msg);
    return TERN_OK;
}

/* Value class -> kind (norm gains stored w+1 where the architecture says so). */
static jkind kind_of_role(const tm_arch_desc *ad, const tm_role *r) {
    switch (r->val) {
    case TM_VAL_TERNARY: return J_TERN;
    case TM_VAL_NORM: return ad->norm_plus_one ? J_NORM1 : J_F32;
    case TM_VAL_SSM_A: return J_SSM_A;
    case TM_VAL_DENSE: return J_BF16;
    case TM_VAL_NORM_RAW:
    case TM_VAL_BIAS:
    case TM_VAL_CONV: break;
    }
    return J_F32;
}

static int job_cmp(const void *a, const void *b) {
    const job *x = a, *y = b;
    if (x->group != y->group) return x->group - y->group;
    if (x->layer != y->layer) return x->layer - y->layer;
    return strcmp(x->hf, y->hf);
}

/* Build one job from an HF tensor; *skip when the tensor is not exported. */
static tern_status plan_tensor(qctx *q, const tern_st_tensor *t, const char *hfname,
                               const tern_quantize_opts *o, job *j, bool *skip) {
    const tern_hf_hparams *hp = &q->hp;
    bool q35 = hp->arch == TERN_HF_QWEN35;
    memset(j, 0, sizeof *j);
    *skip = false;
    j->q = q;
    j->src = t;
    snprintf(j->hf, sizeof j->hf, "%s", hfname);
    const tm_arch_desc *ad = tm_arch_get(hp->arch);
    int L = 0;
    const tm_role *r = tm_arch_find_hf(ad, hfname, &L);
    if (!r && !q35) {
        int L3;
        const tm_role *r35 = tm_arch_find_hf(&tm_arch_qwen35, hfname, &L3);
        if (r35 && r35->lk == TM_LK_GDN)
            return tern_fail(TERN_ERR_FORMAT, "tensor '%s': linear attention in a qwen3 model", t->name);
    }
    static const char layer_pfx[] = "model.layers.";
    size_t lpl = sizeof layer_pfx - 1;
    if (!r && !strncmp(hfname, layer_pfx, lpl)) {
        char *end;
        long l = strtol(hfname + lpl, &end, 10);
        if (end == hfname + lpl || *end != '.' || l < 0 || l >= hp->n_layer)
            return tern_fail(TERN_ERR_FORMAT, "tensor '%s': bad layer index", t->name);
        return tern_fail(TERN_ERR_UNSUPPORTED, "tensor '%s': not a known %s tensor", t->name,
                         q35 ? "qwen35" : "qwen3");
    }
    if (!r && tm_arch_hf_ignored(ad, hfname)) {
        *skip = true;
        return TERN_OK;
    }
    if (!r) return tern_fail(TERN_ERR_UNSUPPORTED, "tensor '%s': not a known tensor name", t->name);
    if (r->optional && hp->tie_embeddings) { *skip = true; return TERN_OK; }
    if (r->lk != TM_LK_TOP && L >= hp->n_layer)
        return tern_fail(TERN_ERR_FORMAT, "tensor '%s': bad layer index", t->name);
    if (!tm_role_gguf_name(r, L, j->name, sizeof j->name))
        return tern_fail(TERN_ERR_FORMAT, "tensor '%s': name too long", t->name);
    j->role = r;
    j->group = r->group;
    j->layer = r->lk == TM_LK_TOP ? 0 : L;
    j->kind = kind_of_role(ad, r);
    if (r->lk != TM_LK_TOP) {
        if (q35) {
            j->vo = r->vo;
            if (j->vo == TERN_VO_COLS) {
                j->vo = TERN_VO_NONE;
                j->cols_tiled = o->hadamard == TERN_QH_NONE;
            }
        }
        if (j->kind == J_BF16 && o->alpha_beta_ternary) j->kind = J_TERN;
    }
    if (t->type != TERN_DT_F32 && t->type != TERN_DT_F16 && t->type != TERN_DT_BF16 &&
        t->type != TERN_DT_F64)
        return tern_fail(TERN_ERR_UNSUPPORTED, "tensor '%s': dtype %s (need F32/F16/BF16/F64)",
                         t->name, t->dtype);
    /* shapes: HF [N, K] -> ne [K, N]; conv1d [C, 1, k] -> ne [k, C]; 1-D [n] -> ne [n] */
    if (t->n_dims == 2) {
        j->n_dims = 2;
        j->ne[0] = t->shape[1];
        j->ne[1] = t->shape[0];
    } else if (t->n_dims == 3 && t->shape[1] == 1) {
        j->n_dims = 2;
        j->ne[0] = t->shape[2];
        j->ne[1] = t->shape[0];
    } else if (t->n_dims == 1) {
        j->n_dims = 1;
        j->ne[0] = t->shape[0];
        j->ne[1] = 1;
    } else {
        return tern_fail(TERN_ERR_SHAPE, "tensor '%s': unexpected rank %u", t->name, t->n_dims);
    }
    j->ne[2] = j->ne[3] = 1;
    j->K = j->ne[0];
    j->N = j->ne[1];
    if (j->vo == TERN_VO_ELEMS) { /* n_v rows of one element */
        j->N = j->K;
        j->K = 1;
        if (j->N != q->gdn.n_v)
            return tern_fail(TERN_ERR_SHAPE, "tensor '%s': %llu elements, expected n_v = %llu",
                             t->name, (unsigned long long)j->N, (unsigned long long)q->gdn.n_v);
    }
    if (q35) {
        tern_status vs = tern_vorder_check(j->cols_tiled ? TERN_VO_COLS : j->vo, &q->gdn, j->N, j->K, t->name);
        if (vs) return vs;
    }
    if (j->kind == J_TERN) {
        if (j->n_dims != 2 || j->K % 128)
            return tern_fail(TERN_ERR_SHAPE, "tensor '%s': row length %llu is not a multiple of 128",
                             t->name, (unsigned long long)j->K);
        j->type = o->out_type;
        j->fold = o->hadamard != TERN_QH_NONE;
    } else {
        j->type = j->kind == J_BF16 ? TERN_DT_BF16 : TERN_DT_F32;
    }
    return TERN_OK;
}

/* ------------------------------------------------------------ signs */

static tern_status add_width(qctx *q, uint64_t w, const int32_t *vals, const char *src) {
    if (q->n_widths == 16) return tern_fail(TERN_ERR_FORMAT, "%s: more than 16 sign widths", src);
    size_t i = q->n_widths++;
    q->widths[i] = w;
    q->signs[i] = tern_malloc(w * sizeof(int32_t));
    q->fsigns[i] = tern_malloc(w * sizeof(float));
    if (!q->signs[i] || !q->fsigns[i]) return tern_fail(TERN_ERR_NOMEM, "signs: out of memory");
    for (uint64_t k = 0; k < w; k++) {
        if (vals[k] != 1 && vals[k] != -1)
            return tern_fail(TERN_ERR_FORMAT, "%s: sign value %d at width %llu index %llu is not +-1",
                             src, vals[k], (unsigned long long)w, (unsigned long long)k);
        q->signs[i][k] = vals[k];
        q->fsigns[i][k] = (float)vals[k];
    }
    return TERN_OK;
}

/* A signs file: its sign vectors parsed by formats/hadamard.c (one parser, one set of limits). */
static tern_status load_signs(qctx *q, const char *path) {
    tern_hadamard_meta *h = NULL;
    tern_status st = tern_hadamard_signs_from_file(path, &h);
    if (st) return st;
    q->block = h->block_size;
    for (uint32_t i = 0; i < h->n_widths && !st; i++) {
        int32_t *tmp = tern_malloc((size_t)h->widths[i] * 4);
        if (!tmp) { st = tern_fail(TERN_ERR_NOMEM, "signs: out of memory"); break; }
        for (uint32_t k = 0; k < h->widths[i]; k++) tmp[k] = h->signs[i][k] > 0 ? 1 : -1;
        st = add_width(q, h->widths[i], tmp, path);
        tern_free(tmp, (size_t)h->widths[i] * 4);
    }
    tern_hadamard_free(h);
    return st;
}

/* ------------------------------------------------------------ shards */

static tern_status add_shard(qctx *q, const char *path) {
    for (size_t i = 0; i < q->n_shards; i++)
        if (!strcmp(q->shards[i]->map.path, path)) return TERN_OK;
    tern_st **n = tern_realloc(q->shards, q->n_shards * sizeof *n, (q->n_shards + 1) * sizeof *n);
    if (!n) return tern_fail(TERN_ERR_NOMEM, "out of memory");
    q->shards = n;
    tern_status st = tern_st_open(path, &q->shards[q->n_shards]);
    if (st) return st;
    q->n_shards++;
    return TERN_OK;
}

static tern_status open_shards(qctx *q, const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "rb");
    if (f) {
        fclose(f);
        cJSON *root = NULL;
        tern_status st = tern_json_parse_file(path, 256u << 20, &root);
        if (st) return st;
        const cJSON *wm = NULL;
        st = tern_json_req_obj(root, "weight_map", path, &wm);
        const cJSON *e;
        if (!st)
            cJSON_ArrayForEach(e, wm) {
                if (!cJSON_IsString(e) || strchr(e->valuestring, '/')) {
                    st = tern_fail(TERN_ERR_FORMAT, "%s: weight_map['%s'] is not a file name", path, e->string);
                    break;
                }
                char p2[4096];
                snprintf(p2, sizeof p2, "%s/%s", dir, e->valuestring);
                if ((st = add_shard(q, p2))) break;
            }
        cJSON_Delete(root);
        return st;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    f = fopen(path, "rb");
    if (f) {
        fclose(f);
        return add_shard(q, path);
    }
    DIR *d = opendir(dir);
    if (!d) return tern_fail(TERN_ERR_IO, "%s: cannot open directory", dir);
    struct dirent *de;
    tern_status st = TERN_OK;
    while ((de = readdir(d)) && !st) {
        size_t l = strlen(de->d_name);
        if (l > 12 && !strcmp(de->d_name + l - 12, ".safetensors")) {
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            st = add_shard(q, path);
        }
    }
    closedir(d);
    if (!st && !q->n_shards) st = tern_fail(TERN_ERR_IO, "%s: no *.safetensors files", dir);
    return st;
}

/* "model.language_model.x" -> "model.x", "language_model.x" -> "x". */
static void norm_name(const char *in, char *out, size_t n) {
    if (!strncmp(in, "model.language_model.", 21)) snprintf(out, n, "model.%s", in + 21);
    else if (!strncmp(in, "language_model.", 15)) snprintf(out, n, "%s", in + 15);
    else snprintf(out, n, "%s", in);
}

/* ------------------------------------------------------------ main */

tern_status tern_quantize_hf(const char *dir, const char *out, const tern_quantize_opts *o_in) {
    tern_quantize_opts o = *o_in;
    qctx q = {0};
    tern_gguf_writer *w = NULL;
    tern_hf_tokenizer *tok = NULL;
    size_t cap = 0;
    char path[4096];
    tern_status st;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if ((st = tern_hf_hparams_load(path, &q.hp))) return st;
    bool q35 = q.hp.arch == TERN_HF_QWEN35;
    if (o.out_type == TERN_DT_COUNT) o.out_type = o.hadamard ? TERN_DT_PQ2_0 : TERN_DT_Q2_0;
    if (!tern_codec_is_ternary(o.out_type))
        return tern_fail(TERN_ERR_INVALID_ARG, "quantize: output type %s is not ternary", tern_dtype_name(o.out_type));
    if (o.hadamard && o.alpha_beta_ternary)
        return tern_fail(TERN_ERR_INVALID_ARG,
                         "quantize: ternary GDN alpha/beta cannot be combined with a Hadamard fold "
                         "(they read the un-rotated input)");
    if (q35) {
        q.gdn.n_k = q.hp.ssm_n_k;
        q.gdn.n_v = q.hp.ssm_n_v;
        q.gdn.head_k_dim = q.hp.ssm_dk;
        q.gdn.head_v_dim = q.hp.ssm_dv;
        if ((st = tern_gdn_dims_check(&q.gdn))) return tern_fail_prefix(st, "%s", path);
    }
    if ((st = open_shards(&q, dir))) goto out;
    if ((st = tern_hf_tokenizer_load(dir, &q.hp, &tok))) goto out;

    /* plan */
    for (size_t s = 0; s < q.n_shards; s++) cap += q.shards[s]->n_tensors;
    q.jobs = tern_calloc(cap ? cap : 1, sizeof *q.jobs);
    if (!q.jobs) { st = tern_fail(TERN_ERR_NOMEM, "quantize: out of memory"); goto out; }
    for (size_t s = 0; s < q.n_shards && !st; s++)
        for (size_t i = 0; i < q.shards[s]->n_tensors && !st; i++) {
            const tern_st_tensor *t = &q.shards[s]->tensors[i];
            char hf[192];
            norm_name(t->name, hf, sizeof hf);
            bool skip;
            st = plan_tensor(&q, t, hf, &o, &q.jobs[q.n_jobs], &skip);
            if (!st && !skip) {
                for (size_t k = 0; k < q.n_jobs; k++)
                    if (!strcmp(q.jobs[k].name, q.jobs[q.n_jobs].name)) {
                        st = tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s' appears twice", dir, t->name);
                        break;
                    }
                q.n_jobs++;
            }
        }
    if (st) goto out;
    qsort(q.jobs, q.n_jobs, sizeof *q.jobs, job_cmp);

    /* signs */
    if (o.hadamard == TERN_QH_FILE) {
        if ((st = load_signs(&q, o.signs_path))) goto out;
    } else {
        q.block = 1024;
    }
    if (o.hadamard) {
        if (q.block < 2 || (q.block & (q.block - 1))) {
            st = tern_fail(TERN_ERR_FORMAT, "hadamard block size %u is not a power of two", q.block);
            goto out;
        }
        for (size_t i = 0; i < q.n_jobs && !st; i++) {
            job *j = &q.jobs[i];
            if (!j->fold) continue;
            if (j->K % q.block) {
                st = tern_fail(TERN_ERR_SHAPE, "tensor '%s': K = %llu is not a multiple of the Hadamard block %u",
                               j->name, (unsigned long long)j->K, q.block);
                break;
            }
            if (signs_for(&q, j->K)) continue;
            if (o.hadamard == TERN_QH_FILE) {
                st = tern_fail(TERN_ERR_FORMAT, "%s: no sign vector of width %llu (needed by '%s')",
                               o.signs_path, (unsigned long long)j->K, j->name);
                break;
            }
            int32_t *tmp = tern_malloc(j->K * 4);
            if (!tmp) { st = tern_fail(TERN_ERR_NOMEM, "out of memory"); break; }
            tern_signs_from_seed(o.seed, j->K, tmp);
            st = add_width(&q, j->K, tmp, "seed");
            tern_free(tmp, j->K * 4);
        }
        if (st) goto out;
    }

    /* metadata */
    uint64_t n_params = 0;
    for (size_t i = 0; i < q.n_jobs; i++) n_params += q.jobs[i].ne[0] * q.jobs[i].ne[1];
    const char *name = o.name;
    char base[256];
    if (!name) {
        const char *b = strrchr(dir, '/');
        b = b && b[1] ? b + 1 : dir;
        snprintf(base, sizeof base, "%s", b);
        size_t l = strlen(base);
        while (l > 1 && base[l - 1] == '/') base[--l] = 0;
        name = base;
    }
    if ((st = tern_gguf_writer_new(&w))) goto out;
    if ((st = tern_hf_write_meta(w, &q.hp, name, n_params, o.out_type, tok)))
        goto out;
    if (o.hadamard) {
        /* prism.hadamard.* in the order PrismML's files carry them */
        st = tern_gguf_w_set_u32(w, "prism.hadamard.version", 1);
        if (!st) st = tern_gguf_w_set_u32(w, "prism.hadamard.block_size", q.block);
        if (!st) st = tern_gguf_w_set_str(w, "prism.hadamard.transform", "normalized-sylvester-walsh-hadamard");
        if (!st) st = tern_gguf_w_set_str(w, "prism.hadamard.axis", "input-last-dimension");
        if (!st) st = tern_gguf_w_set_str(w, "prism.hadamard.sign_mode", "explicit");
        uint64_t total = 0;
        int32_t wd[16];
        for (size_t i = 0; i < q.n_widths; i++) { wd[i] = (int32_t)q.widths[i]; total += q.widths[i]; }
        if (!st) st = tern_gguf_w_set_arr(w, "prism.hadamard.sign_widths", TERN_GGUF_INT32, wd, q.n_widths);
        int32_t *all = tern_malloc(total * 4);
        if (!all && !st) st = tern_fail(TERN_ERR_NOMEM, "out of memory");
        if (!st) {
            uint64_t off = 0;
            for (size_t i = 0; i < q.n_widths; i++) {
                memcpy(all + off, q.signs[i], q.widths[i] * 4);
                off += q.widths[i];
            }
            st = tern_gguf_w_set_arr(w, "prism.hadamard.sign_values", TERN_GGUF_INT32, all, total);
        }
        tern_free(all, total * 4);
        const char **names = tern_calloc(q.n_jobs + 1, sizeof *names);
        uint64_t *lens = tern_calloc(q.n_jobs + 1, sizeof *lens);
        size_t nn = 0;
        if ((!names || !lens) && !st) st = tern_fail(TERN_ERR_NOMEM, "out of memory");
        for (size_t i = 0; !st && i < q.n_jobs; i++)
            if (q.jobs[i].fold && q.jobs[i].role->had != TM_HAD_INVERSE) {
                names[nn] = q.jobs[i].name;
                lens[nn++] = strlen(q.jobs[i].name);
            }
        if (!st) st = tern_gguf_w_set_arr_str(w, "prism.hadamard.weight_names", names, lens, nn);
        char embd[64] = "";
        const char *inv[1] = {embd};
        if (!st && !tm_role_gguf_name(tm_arch_role(tm_arch_get(q.hp.arch), TM_ROLE_TOKEN_EMBD), 0, embd, sizeof embd))
            st = tern_fail(TERN_ERR_INTERNAL, "embedding name too long");
        uint64_t invl[1] = {strlen(embd)};
        if (!st) st = tern_gguf_w_set_arr_str(w, "prism.hadamard.inverse_weight_names", inv, invl, 1);
        if (!st) st = tern_gguf_w_set_bool(w, "prism.hadamard.gdn_v_grouped", true); /* required by the contract parser, also for qwen3 */
        tern_free(names, (q.n_jobs + 1) * sizeof *names);
        tern_free(lens, (q.n_jobs + 1) * sizeof *lens);
        if (st) goto out;
    }
    for (size_t i = 0; i < q.n_jobs && !st; i++) {
        job *j = &q.jobs[i];
        st = tern_gguf_w_add_tensor(w, j->name, j->n_dims, j->ne, j->type, NULL, fill_job, j);
    }
    if (!st) st = tern_gguf_w_write(w, out, o.progress, o.progress_user);
out:
    tern_gguf_writer_free(w);
    tern_hf_tokenizer_free(tok);
    for (size_t i = 0; i < q.n_widths; i++) {
        tern_free(q.signs[i], q.widths[i] * 4);
        tern_free(q.fsigns[i], q.widths[i] * 4);
    }
    tern_free(q.jobs, (cap ? cap : 1) * sizeof *q.jobs);
    for (size_t s = 0; s < q.n_shards; s++) tern_st_close(q.shards[s]);
    tern_free(q.shards, q.n_shards * sizeof *q.shards);
    return st;
}

tern_status tern_quantize_model(const char *hf_dir, const char *out_gguf, const char *signs_path,
                                int64_t hadamard_seed, const char *name, tern_progress_fn progress,
                                void *user) {
    if (!hf_dir || !out_gguf) return tern_fail(TERN_ERR_INVALID_ARG, "quantize: NULL path");
    tern_quantize_opts o = {0};
    o.out_type = TERN_DT_COUNT;
    if (signs_path) {
        o.hadamard = TERN_QH_FILE;
        o.signs_path = signs_path;
    } else if (hadamard_seed >= 0) {
        o.hadamard = TERN_QH_SEED;
        o.seed = (uint64_t)hadamard_seed;
    }
    o.name = name;
    o.progress = progress;
    o.progress_user = user;
    return tern_quantize_hf(hf_dir, out_gguf, &o);
}
