/*
 * session.c - sessions: the KV cache and GDN states of one sequence, scratch
 * buffers, chunked evaluation (tern_session_eval splits the batch into chunks of
 * n_chunk tokens; chunk 1 is the token-by-token walk), batched decode (one token
 * of each of several sessions per pass) and memory accounting.
 * Buffers live in the model's back-end memory (tm_be_alloc: host for the CPU,
 * the GPU for CUDA); `logits` is always host memory.
 */
#include "model/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tern_session_params_default(tern_session_params *p) {
    memset(p, 0, sizeof *p);
}

static float *s_alloc(tern_session *s, size_t n_floats) {
    TERN_ASSERT(s->n_allocs < (int)(sizeof s->allocs / sizeof s->allocs[0]));
    size_t n;
    if (!tern_mul_ok(n_floats ? n_floats : 1, sizeof(float), &n)) return NULL;
    float *p = tm_be_alloc(s->m->be, n);
    if (!p) return NULL;
    s->allocs[s->n_allocs] = p;
    s->alloc_n[s->n_allocs++] = n;
    s->bytes += n;
    return p;
}

void tern_session_free(tern_session *s) {
    if (!s) return;
    if (s->counted) __atomic_fetch_sub(&s->m->sessions_bytes, s->counted, __ATOMIC_RELAXED);
    tern_session_snapshot_free(s->vsnap); /* the verify's rollback states (verify.c) */
    if (s->m->be->vt->session_release) s->m->be->vt->session_release(s->m->be, s);
    for (int i = 0; i < s->n_allocs; i++) tm_be_free(s->m->be, s->allocs[i], s->alloc_n[i]);
    if (s->logits_host) tern_free_aligned(s->logits, s->logits_host);
    if (s->blogits)
        tern_free_aligned(s->blogits, (size_t)s->blogits_rows * s->m->hp.n_vocab * sizeof(float));
    free(s->row_stamp);
    free(s->vtok);
    free(s->vlog0);
    if (s->vown) tern_free_aligned(s->vown, (size_t)s->vown_rows * s->m->hp.n_vocab * sizeof(float));
    free(s);
}

/* ------------------------------------------------------------ cache types */

static const char *const g_cache_names[] = {"default", "f32", "f16", "bf16", "q8_0"};

const char *tern_cache_type_name(tern_cache_type t) {
    return (unsigned)t < sizeof g_cache_names / sizeof *g_cache_names ? g_cache_names[t] : NULL;
}

tern_status tern_cache_type_parse(const char *name, tern_cache_type *out) {
    if (!name || !out) return tern_fail(TERN_ERR_INVALID_ARG, "tern_cache_type_parse: NULL argument");
    for (int i = 1; i < (int)(sizeof g_cache_names / sizeof *g_cache_names); i++)
        if (!strcmp(name, g_cache_names[i])) {
            *out = (tern_cache_type)i;
            return TERN_OK;
        }
    return tern_fail(TERN_ERR_INVALID_ARG, "unknown cache type '%s' (choose f32, f16, bf16 or q8_0)", name);
}

static tern_kv_type kv_of(tern_cache_type t) {
    switch (t) {
    case TERN_CACHE_F16: return TERN_KV_F16;
    case TERN_CACHE_BF16: return TERN_KV_BF16;
    case TERN_CACHE_Q8_0: return TERN_KV_Q8_0;
    default: return TERN_KV_F32;
    }
}
static tern_cache_type cache_of(tern_kv_type t) {
    switch (t) {
    case TERN_KV_F16: return TERN_CACHE_F16;
    case TERN_KV_BF16: return TERN_CACHE_BF16;
    case TERN_KV_Q8_0: return TERN_CACHE_Q8_0;
    default: return TERN_CACHE_F32;
    }
}
static const char *kv_name(tern_kv_type t) { return tern_cache_type_name(cache_of(t)); }

static bool be_reads(const tm_backend *be, tern_kv_type t) {
    return t == TERN_KV_F32 || (be->vt->kv_types >> t & 1u);
}

/* The session's key / value types from the parameters: DEFAULT is f16 where the back-end
 * reads it, else f32; an explicit type the back-end or the model's head size cannot
 * take is refused. */
static tern_status resolve_types(const tern_model *m, const tern_session_params *p, tern_kv_type *kt,
                                 tern_kv_type *vt) {
    tern_cache_type req[2] = {p->cache_type_k, p->cache_type_v};
    tern_kv_type *out[2] = {kt, vt};
    for (int i = 0; i < 2; i++) {
        if ((unsigned)req[i] > TERN_CACHE_Q8_0)
            return tern_fail(TERN_ERR_INVALID_ARG, "tern_session_new: cache type %d out of range", (int)req[i]);
        tern_kv_type t = req[i] == TERN_CACHE_DEFAULT ? (be_reads(m->be, TERN_KV_F16) ? TERN_KV_F16 : TERN_KV_F32)
                                                      : kv_of(req[i]);
        if (!be_reads(m->be, t))
            return tern_fail(TERN_ERR_UNSUPPORTED,
                             "the %s back-end does not read a %s KV cache: --cache-type %s is not "
                             "supported there (use --cache-type f32)",
                             m->be->vt->name, kv_name(t), kv_name(t));
        if (t == TERN_KV_Q8_0 && m->hp.head_dim % TERN_KV_Q8_BLOCK)
            return tern_fail(TERN_ERR_UNSUPPORTED,
                             "a q8_0 KV cache needs a head size that is a multiple of %d (this model's is %d)",
                             TERN_KV_Q8_BLOCK, m->hp.head_dim);
        *out[i] = t;
    }
    return TERN_OK;
}

/* Bytes of one position of the KV cache, all attention layers, keys + values. */
static uint64_t kv_per_pos(const tern_model *m, tern_kv_type kt, tern_kv_type vt) {
    const size_t kvw = (size_t)m->hp.n_head_kv * m->hp.head_dim;
    return (uint64_t)m->hp.n_attn_layers * (tern_kv_row_bytes(kt, kvw) + tern_kv_row_bytes(vt, kvw));
}

/* The arena of a session (session.h): each plan buffer, the attention scores and, on a
 * device, the chunk's logits at 256-byte aligned offsets (off[b] for b < TM_BUF_COUNT,
 * off[TM_BUF_COUNT] the scores, off[TM_BUF_COUNT + 1] dlogits; SIZE_MAX: none);
 * returns the bytes. */
#define ARENA_ALIGN 256
static size_t arena_layout(const tern_model *m, int n_ctx, int n_chunk, size_t off[TM_BUF_COUNT + 2]) {
    const size_t T = (size_t)n_chunk;
    size_t at = 0;
    for (int b = 0; b < TM_BUF_COUNT + 2; b++) {
        size_t floats = b < TM_BUF_COUNT           ? T * (size_t)m->plan.buf_width[b]
                        : b == TM_BUF_COUNT        ? (size_t)m->hp.n_head * (size_t)n_ctx
                        : tm_be_device(m->be)      ? T * (size_t)m->hp.n_vocab
                                                   : 0;
        if (!floats) {
            off[b] = SIZE_MAX;
            continue;
        }
        at = (at + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
        off[b] = at;
        at += floats * sizeof(float);
    }
    return at ? at : ARENA_ALIGN;
}

/* Bytes a session of n_ctx positions and n_chunk-row scratch takes (what
 * tern_session_new allocates, to the float): KV cache, GDN states, arena and logits. */
static void session_sizes(const tern_model *m, int n_ctx, int n_chunk, tern_kv_type kt, tern_kv_type vt,
                          uint64_t *kv, uint64_t *states, uint64_t *rest) {
    const tm_hparams *hp = &m->hp;
    uint64_t C = 0;
    if (hp->n_gdn_layers) C = 2 * (uint64_t)hp->ssm_n_k * hp->ssm_dk + (uint64_t)hp->ssm_n_v * hp->ssm_dv;
    *kv = (uint64_t)n_ctx * kv_per_pos(m, kt, vt);
    *states = hp->n_gdn_layers ? (uint64_t)hp->n_gdn_layers *
                                     ((uint64_t)(hp->conv_k - 1) * C + m->be->vt->gdn_state_floats(m->be, hp)) * 4
                               : 0;
    size_t off[TM_BUF_COUNT + 2];
    *rest = arena_layout(m, n_ctx, n_chunk, off) + (uint64_t)hp->n_vocab * 4;
}

/* Memory the back-end can still give: host MemAvailable, or the device's free memory. */
static uint64_t mem_available(const tern_model *m) {
    if (m->be->vt->mem_available) return m->be->vt->mem_available(m->be);
    return 0; /* unknown: no check */
}

/* Refuse a session that cannot fit before allocating anything, naming the sizes and the
 * context that would fit at the chosen cache type (and at q8_0 when that is smaller and
 * the back-end reads it). The KV cache is the part that grows with n_ctx. Sessions of
 * one model count against each other (m->sessions_bytes): pages are backed lazily, so
 * the OS's figure does not yet show what earlier sessions will use. On the host the
 * model's mapped weights come off too (mapped_weights). */
static int64_t ctx_fitting(uint64_t free_, uint64_t fixed, uint64_t per_pos) {
    int64_t fit = per_pos && free_ > fixed ? (int64_t)((free_ - fixed) / per_pos) : 0;
    if (fit > (1 << 24)) fit = 1 << 24;
    return fit / 256 * 256;
}

/* Host weights the pass reads from the file mapping (not a copy the model allocated):
 * MemAvailable counts their pages as reclaimable page cache once read (and not at all
 * before), but a session that evicts them re-reads the file every token. */
static uint64_t mapped_weights(const tern_model *m) {
    if (tm_be_device(m->be)) return 0; /* on the device: already out of its free memory */
    uint64_t w = m->info.decode_bytes_per_token, a = m->info.alloc_bytes;
    return w > a ? w - a : 0;
}

uint64_t tern_model_memory_free(const tern_model *m) {
    if (!m) return 0;
    uint64_t avail = mem_available(m);
    if (!avail) return 0;
    const uint64_t mapped = mapped_weights(m);
    avail = avail > mapped ? avail - mapped : 0;
    const uint64_t held = tm_be_device(m->be) ? 0 : __atomic_load_n(&m->sessions_bytes, __ATOMIC_RELAXED);
    return avail > held ? avail - held : 1; /* 1: known, nothing left (0 means unknown) */
}

static tern_status check_fit(tern_model *m, int n_ctx, int n_chunk, tern_kv_type kt, tern_kv_type vt) {
    uint64_t avail = mem_available(m);
    if (!avail) return TERN_OK;
    const uint64_t mapped = mapped_weights(m);
    avail = avail > mapped ? avail - mapped : 0;
    uint64_t kv, states, rest;
    session_sizes(m, n_ctx, n_chunk, kt, vt, &kv, &states, &rest);
    /* the host backs a session's pages lazily: count the earlier sessions; a device
     * allocated them whole, so its free figure already excludes them */
    uint64_t need = kv + states + rest,
             held = tm_be_device(m->be) ? 0 : __atomic_load_n(&m->sessions_bytes, __ATOMIC_RELAXED);
    uint64_t free_ = avail > held ? avail - held : 0;
    if (need <= free_) return TERN_OK;
    /* scratch grows with n_ctx too (attention scores: n_head floats a position) */
    const uint64_t score = (uint64_t)m->hp.n_head * 4;
    const uint64_t fixed = states + rest - score * (uint64_t)n_ctx;
    int64_t fit = ctx_fitting(free_, fixed, kv_per_pos(m, kt, vt) + score);
    char alt[160] = "";
    if ((kt != TERN_KV_Q8_0 || vt != TERN_KV_Q8_0) && be_reads(m->be, TERN_KV_Q8_0) &&
        m->hp.head_dim % TERN_KV_Q8_BLOCK == 0) {
        int64_t fq = ctx_fitting(free_, fixed, kv_per_pos(m, TERN_KV_Q8_0, TERN_KV_Q8_0) + score);
        if (fq >= n_ctx)
            snprintf(alt, sizeof alt, ", or --cache-type q8_0 with this --ctx %d", n_ctx);
        else if (fq > fit)
            snprintf(alt, sizeof alt, ", or --cache-type q8_0 --ctx %lld", (long long)fq);
    }
    const double MiB = 1048576.0;
    char wbuf[64];
    snprintf(wbuf, sizeof wbuf, "%s the model's %.0f MiB of mapped weights", held ? " and" : " after",
             mapped / MiB);
    char types[32];
    if (kt == vt) snprintf(types, sizeof types, "%s", kv_name(kt));
    else snprintf(types, sizeof types, "%s keys, %s values", kv_name(kt), kv_name(vt));
    return tern_fail(TERN_ERR_NOMEM,
                     "a context of %d tokens needs %.0f MiB (KV cache %.0f MiB in %s, GDN states %.0f MiB, "
                     "scratch and logits %.0f MiB) but %.0f MiB of %s memory are available%s%s; "
                     "%s%lld would fit%s",
                     n_ctx, need / MiB, kv / MiB, types, states / MiB, rest / MiB, free_ / MiB,
                     tm_be_device(m->be) ? "device" : "host", held ? " after this model's other sessions" : "",
                     mapped ? wbuf : "",
                     fit > 0 ? "--ctx " : "no context: at most ", (long long)(fit > 0 ? fit : 0), alt);
}
#define TRY_FIT(m, n_ctx, n_chunk, kt, vt) do { tern_status st_ = check_fit((m), (n_ctx), (n_chunk), (kt), (vt)); if (st_) return st_; } while (0)

tern_status tern_session_new(tern_model *m, const tern_session_params *p, tern_session **out) {
    if (!m || !out) return tern_fail(TERN_ERR_INVALID_ARG, "tern_session_new: NULL argument");
    *out = NULL;
    tern_session_params def;
    if (!p) {
        tern_session_params_default(&def);
        p = &def;
    }
    const tm_hparams *hp = &m->hp;
    int n_ctx = p->n_ctx;
    if (n_ctx <= 0) n_ctx = hp->n_ctx_train > 0 && hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (n_ctx > (1 << 24))
        return tern_fail(TERN_ERR_INVALID_ARG, "tern_session_new: n_ctx %d too large", n_ctx);
    int n_chunk = p->n_chunk > 0 ? p->n_chunk : m->be->vt->chunk_hint ? m->be->vt->chunk_hint(m->be) : 64;
    if (n_chunk > 4096) n_chunk = 4096;
    if (n_chunk > n_ctx) n_chunk = n_ctx;
    tern_kv_type kt, vt;
    tern_status tst = resolve_types(m, p, &kt, &vt);
    if (tst) return tst;
    TRY_FIT(m, n_ctx, n_chunk, kt, vt);
    tern_session *s = calloc(1, sizeof *s);
    if (!s) return tern_fail(TERN_ERR_NOMEM, "out of memory");
    s->m = m;
    s->bytes = sizeof *s;
    s->n_ctx = n_ctx;
    s->n_chunk = n_chunk;
    s->k_type = kt;
    s->v_type = vt;
    size_t kvw = (size_t)hp->n_head_kv * hp->head_dim, C = 0;
    if (hp->n_gdn_layers) C = 2 * (size_t)hp->ssm_n_k * hp->ssm_dk + (size_t)hp->ssm_n_v * hp->ssm_dv;
    s->k_row = tern_kv_row_bytes(kt, kvw);
    s->v_row = tern_kv_row_bytes(vt, kvw);
    const size_t kv_pos = (size_t)hp->n_attn_layers * n_ctx; /* rows per cache */
    bool ok = true;
#define A(ptr, n) do { if (ok && !((ptr) = s_alloc(s, (n)))) ok = false; } while (0)
    if (hp->n_attn_layers) { /* s_alloc counts floats: the byte sizes are multiples of 4 */
        A(s->kcache, kv_pos * s->k_row / sizeof(float) + 1);
        A(s->vcache, kv_pos * s->v_row / sizeof(float) + 1);
    }
    if (hp->n_gdn_layers) {
        A(s->conv_state, (size_t)hp->n_gdn_layers * (hp->conv_k - 1) * C);
        A(s->ssm_state, (size_t)hp->n_gdn_layers * m->be->vt->gdn_state_floats(m->be, hp));
    }
    /* the per-step scratch: one arena sized from the plan, carved once (stable
     * pointers for recorded graphs and a persistent kernel) */
    size_t off[TM_BUF_COUNT + 2];
    const size_t ab = arena_layout(m, n_ctx, n_chunk, off);
    float *arena = NULL;
    A(arena, ab / sizeof(float));
    if (ok) {
        s->arena = arena;
        s->arena_bytes = ab;
        for (int b = 0; b < TM_BUF_COUNT; b++)
            s->buf[b] = off[b] == SIZE_MAX ? NULL : (float *)((char *)arena + off[b]);
        s->att_scratch = off[TM_BUF_COUNT] == SIZE_MAX ? NULL : (float *)((char *)arena + off[TM_BUF_COUNT]);
        s->dlogits = off[TM_BUF_COUNT + 1] == SIZE_MAX ? NULL : (float *)((char *)arena + off[TM_BUF_COUNT + 1]);
    }
    if (tm_be_device(m->be)) {
        /* logits of a whole chunk on the device (in the arena); the host copy of the
         * last row apart */
        size_t lb = (size_t)hp->n_vocab * sizeof(float);
        if (ok && (s->logits = tern_alloc_aligned(lb))) {
            memset(s->logits, 0, lb);
            s->logits_host = lb;
            s->bytes += lb;
        } else {
            ok = false;
        }
    } else {
        A(s->logits, (size_t)hp->n_vocab);
    }
#undef A
    if (ok && (s->row_stamp = calloc((size_t)n_ctx, sizeof *s->row_stamp)))
        s->bytes += (uint64_t)n_ctx * sizeof *s->row_stamp;
    else
        ok = false;
    static uint64_t next_id;
    s->id = __atomic_add_fetch(&next_id, 1, __ATOMIC_RELAXED);
    if (ok && m->be->vt->session_init) {
        tern_status is = m->be->vt->session_init(m->be, s);
        if (is) {
            tern_session_free(s);
            return is;
        }
    }
    if (!ok) {
        uint64_t b = s->bytes;
        tern_session_free(s);
        return tern_fail(TERN_ERR_NOMEM, "tern_session_new: out of memory (n_ctx %d, %llu bytes so far)",
                         n_ctx, (unsigned long long)b);
    }
    s->counted = s->bytes; /* s->bytes grows later (batch logits rows): subtract what was added */
    __atomic_fetch_add(&m->sessions_bytes, s->counted, __ATOMIC_RELAXED);
    *out = s;
    return TERN_OK;
}

void tern_session_reset(tern_session *s) {
    if (!s) return;
    const tm_hparams *hp = &s->m->hp;
    tm_backend *be = s->m->be;
    /* device errors surface at the next evaluation (sticky until a sync) */
    if (s->kcache) {
        size_t n = (size_t)hp->n_attn_layers * s->n_ctx;
        (void)tm_be_zero(be, s->kcache, n * s->k_row);
        (void)tm_be_zero(be, s->vcache, n * s->v_row);
    }
    if (s->conv_state) {
        size_t C = 2 * (size_t)hp->ssm_n_k * hp->ssm_dk + (size_t)hp->ssm_n_v * hp->ssm_dv;
        (void)tm_be_zero(be, s->conv_state, (size_t)hp->n_gdn_layers * (hp->conv_k - 1) * C * sizeof(float));
        (void)tm_be_zero(be, s->ssm_state,
                         (size_t)hp->n_gdn_layers * be->vt->gdn_state_floats(be, hp) * sizeof(float));
    }
    memset(s->logits, 0, (size_t)hp->n_vocab * sizeof(float));
    s->pos = 0;
}

int tern_session_pos(const tern_session *s) { return s ? s->pos : 0; }
int tern_session_chunk(const tern_session *s) { return s ? s->n_chunk : 0; }

bool tern_session_can_truncate(const tern_session *s) { return s && s->m->hp.n_gdn_layers == 0; }

tern_status tern_session_truncate(tern_session *s, int n_pos) {
    if (!s) return tern_fail(TERN_ERR_INVALID_ARG, "tern_session_truncate: NULL session");
    if (n_pos < 0 || n_pos > s->pos)
        return tern_fail(TERN_ERR_RANGE, "tern_session_truncate: position %d outside [0, %d]", n_pos, s->pos);
    if (n_pos == s->pos) return TERN_OK;
    if (s->m->hp.n_gdn_layers)
        return tern_fail(TERN_ERR_UNSUPPORTED,
                         "tern_session_truncate: this model has recurrent (GDN) state, which cannot be rewound");
    /* attention reads positions [0, pos) only: the rows after n_pos are overwritten
     * by the next evaluation */
    s->pos = n_pos;
    return TERN_OK;
}
int tern_session_n_ctx(const tern_session *s) { return s ? s->n_ctx : 0; }
const float *tern_session_logits(const tern_session *s) { return s ? s->logits : NULL; }
uint64_t tern_session_memory(const tern_session *s) { return s ? s->bytes : 0; }

uint64_t tern_session_cache_bytes(const tern_session *s, int n_pos) {
    if (!s) return 0;
    if (n_pos < 0) n_pos = 0;
    if (n_pos > s->n_ctx) n_pos = s->n_ctx;
    return (uint64_t)n_pos * s->m->hp.n_attn_layers * ((uint64_t)s->k_row + s->v_row);
}

tern_cache_type tern_session_cache_type(const tern_session *s, bool value) {
    return s ? cache_of(value ? s->v_type : s->k_type) : TERN_CACHE_DEFAULT;
}

/* ------------------------------------------------ random fill (bench model) */

/* splitmix64: the stream of one (seed, what, layer) */
static uint64_t fill_mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
/* n values of mean 0 and standard deviation sd: the sum of four 16-bit uniforms of one
 * xorshift64 word (Irwin-Hall, variance 4/12), centred and scaled */
static void fill_values(uint64_t *st, float *out, size_t n, float sd) {
    const float k = sd * 1.7320508f / 65536.0f; /* sqrt(3) / 2^16 */
    uint64_t x = *st;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        float u = (float)(x & 0xffff) + (float)((x >> 16) & 0xffff) + (float)((x >> 32) & 0xffff) +
                  (float)(x >> 48);
        out[i] = (u - 131070.0f) * k;
    }
    *st = x;
}

tern_status tm_session_fill_random(tern_session *s, int n_pos, uint64_t seed) {
    if (!s) return tern_fail(TERN_ERR_INVALID_ARG, "tm_session_fill_random: NULL session");
    if (n_pos < 0 || n_pos > s->n_ctx)
        return tern_fail(TERN_ERR_RANGE, "fill: %d positions outside the context [0, %d]", n_pos, s->n_ctx);
    tern_model *m = s->m;
    tm_backend *be = m->be;
    if (be->vt->caps & TM_CAP_PRIVATE_STATE)
        return tern_fail(TERN_ERR_UNSUPPORTED,
                         "a random depth fill is not supported on the %s back-end (it holds the caches "
                         "itself, e.g. in tensor-parallel shards): use a real prefill", be->vt->name);
    const tm_hparams *hp = &m->hp;
    const size_t kvw = (size_t)hp->n_head_kv * hp->head_dim;
    const size_t rows_per = 256; /* rows generated and uploaded at a time */
    const size_t row_max = s->k_row > s->v_row ? s->k_row : s->v_row;
    size_t C = 0, SN = 0, GF = 0, CS = 0;
    if (hp->n_gdn_layers) {
        C = 2 * (size_t)hp->ssm_n_k * hp->ssm_dk + (size_t)hp->ssm_n_v * hp->ssm_dv;
        SN = (size_t)hp->ssm_n_v * hp->ssm_dk * hp->ssm_dv;
        GF = be->vt->gdn_state_floats(be, hp);
        CS = (size_t)(hp->conv_k - 1) * C;
    }
    size_t nf = rows_per * kvw;
    if (GF > nf) nf = GF;
    if (SN > nf) nf = SN; /* a bf16 state (gdn_state) takes fewer floats than S */
    if (CS > nf) nf = CS;
    float *f = malloc(nf * sizeof(float));
    uint8_t *b = malloc(rows_per * (row_max ? row_max : 1));
    if (!f || !b) {
        free(f);
        free(b);
        return tern_fail(TERN_ERR_NOMEM, "fill: out of memory");
    }
    pthread_mutex_lock(&m->eval_mu);
    tern_session_reset(s); /* rows from n_pos on and the states start empty */
    tern_status st = TERN_OK;
    for (int l = 0; l < hp->n_attn_layers && !st; l++) {
        for (int c = 0; c < 2 && !st; c++) {
            const tern_kv_type t = c ? s->v_type : s->k_type;
            const size_t rb = c ? s->v_row : s->k_row;
            uint8_t *cache = (uint8_t *)(c ? s->vcache : s->kcache) + (size_t)l * s->n_ctx * rb;
            uint64_t x = fill_mix(seed ^ fill_mix(((uint64_t)l << 8 | (uint64_t)c) + 1)) | 1;
            for (size_t p0 = 0; p0 < (size_t)n_pos && !st; p0 += rows_per) {
                size_t r = (size_t)n_pos - p0 < rows_per ? (size_t)n_pos - p0 : rows_per;
                fill_values(&x, f, r * kvw, 1.0f);
                tern_kv_store(t, b, rb, f, kvw, r, kvw);
                st = tm_be_upload(be, cache + p0 * rb, b, r * rb);
            }
        }
    }
    for (int l = 0; l < hp->n_gdn_layers && !st; l++) {
        uint64_t x = fill_mix(seed ^ fill_mix(((uint64_t)l << 8 | 2u) + 1)) | 1;
        fill_values(&x, f, CS, 1.0f);
        st = tm_be_upload(be, s->conv_state + (size_t)l * CS, f, CS * sizeof(float));
        if (st) break;
        fill_values(&x, f, SN, 0.1f);
        if (GF > SN) memset(f + SN, 0, (GF - SN) * sizeof(float));
        if (be->vt->gdn_state_plain) be->vt->gdn_state_plain(be, hp, f);
        st = tm_be_upload(be, s->ssm_state + (size_t)l * GF, f, GF * sizeof(float));
    }
    if (!st) st = tm_be_sync(be);
    s->pos = st ? 0 : n_pos;
    pthread_mutex_unlock(&m->eval_mu);
    if (st) tern_session_reset(s);
    free(f);
    free(b);
    return st;
}

tern_status tern_session_eval(tern_session *s, const int32_t *tokens, size_t n, float *all_logits) {
    if (!s || (!tokens && n)) return tern_fail(TERN_ERR_INVALID_ARG, "tern_session_eval: NULL argument");
    if (n == 0) return TERN_OK;
    tern_status st = tm_session_check(s, tokens, n);
    return st ? st : tm_session_run(s, tokens, n, all_logits, TM_RUN_LOGITS, false);
}

tern_status tm_session_check(const tern_session *s, const int32_t *tokens, size_t n) {
    const int V = s->m->hp.n_vocab;
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return tern_fail(TERN_ERR_RANGE, "token id %d at index %zu is out of range [0, %d)",
                             (int)tokens[i], i, V);
    if (n > (size_t)(s->n_ctx - s->pos))
        return tern_fail(TERN_ERR_CONTEXT_FULL,
                         "context full: %zu tokens at position %d exceed the context of %d", n,
                         s->pos, s->n_ctx);
    return TERN_OK;
}

tern_status tm_session_run(tern_session *s, const int32_t *tokens, size_t n, float *out, tm_run_kind kind, bool one) {
    const size_t W = (size_t)(kind == TM_RUN_HIDDEN ? s->m->hp.n_embd : s->m->hp.n_vocab);
    /* sessions of one model may be used from several threads: one at a time */
    pthread_mutex_lock(&s->m->eval_mu);
    tern_status st = TERN_OK;
    for (size_t i = 0; i < n && !st;) {
        int c = one ? 1 : (int)(n - i < (size_t)s->n_chunk ? n - i : (size_t)s->n_chunk);
        float *o = out ? out + i * W : NULL;
        /* exact one at a time: the decode step itself (a device may replay its graph), the
         * row copied from the session's logits */
        const bool step = kind == TM_RUN_EXACT && one;
        st = kind == TM_RUN_HIDDEN ? tm_forward_hidden(s, tokens + i, c, o)
             : kind == TM_RUN_EXACT && !one
                 ? tm_forward_verify(s, tokens + i, c, o, s->vborrow && i == 0 && (size_t)c == n ? &s->vrows : NULL)
                                            : tm_forward_chunk(s, tokens + i, c, step ? NULL : o);
        if (!st && step && o) memcpy(o, s->logits, W * sizeof(float));
        if (!st) {
            tm_session_stamp(s, s->pos, c);
            s->pos += c;
            i += (size_t)c;
        }
    }
    pthread_mutex_unlock(&s->m->eval_mu);
    return st;
}

/* Host rows for a batch's logits when the caller passes none: grow-only, counted in
 * the lead's bytes. */
static tern_status batch_rows(tern_session *w, int rows) {
    if (w->blogits_rows >= rows) return TERN_OK;
    size_t V = (size_t)w->m->hp.n_vocab, nb;
    if (!tern_mul_ok((size_t)rows * V, sizeof(float), &nb))
        return tern_fail(TERN_ERR_NOMEM, "tern_session_eval_batch: %d logits rows overflow", rows);
    float *p = tern_alloc_aligned(nb);
    if (!p)
        return tern_fail(TERN_ERR_NOMEM, "tern_session_eval_batch: out of memory (%zu bytes of logits rows)",
                         nb);
    if (w->blogits) {
        size_t old = (size_t)w->blogits_rows * V * sizeof(float);
        tern_free_aligned(w->blogits, old);
        w->bytes -= old;
    }
    w->blogits = p;
    w->blogits_rows = rows;
    w->bytes += nb;
    return TERN_OK;
}

/* Checks everything before any work: no state changes on an error. */
tern_status tern_session_eval_batch(tern_session *const *s, const int32_t *tokens, size_t n,
                                    float *logits) {
    if (n == 0) return TERN_OK;
    if (!s || !tokens) return tern_fail(TERN_ERR_INVALID_ARG, "tern_session_eval_batch: NULL argument");
    for (size_t i = 0; i < n; i++)
        if (!s[i]) return tern_fail(TERN_ERR_INVALID_ARG, "tern_session_eval_batch: session %zu is NULL", i);
    tern_model *m = s[0]->m;
    const int V = m->hp.n_vocab;
    size_t lead = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i]->m != m)
            return tern_fail(TERN_ERR_INVALID_ARG,
                             "tern_session_eval_batch: sessions 0 and %zu belong to different models", i);
        if (tokens[i] < 0 || tokens[i] >= V)
            return tern_fail(TERN_ERR_RANGE, "token id %d at index %zu is out of range [0, %d)",
                             (int)tokens[i], i, V);
        if (s[i]->pos >= s[i]->n_ctx)
            return tern_fail(TERN_ERR_CONTEXT_FULL,
                             "context full: session %zu is at position %d of a context of %d", i,
                             s[i]->pos, s[i]->n_ctx);
        if (s[i]->n_chunk > s[lead]->n_chunk) lead = i;
    }
    pthread_mutex_lock(&m->eval_mu);
    /* distinct sessions: mark each once (no allocation), then clear the marks */
    size_t dup = n;
    for (size_t i = 0; i < n && dup == n; i++) {
        if (s[i]->batch_mark) dup = i;
        else s[i]->batch_mark = true;
    }
    for (size_t i = 0; i < n; i++) s[i]->batch_mark = false;
    if (dup < n) {
        pthread_mutex_unlock(&m->eval_mu);
        return tern_fail(TERN_ERR_INVALID_ARG,
                         "tern_session_eval_batch: session %zu appears twice in the batch", dup);
    }
    tern_session *w = s[lead];
    tern_status st = TERN_OK;
    if (n == 1) {
        st = tm_forward_chunk(s[0], tokens, 1, logits);
        if (!st) {
            tm_session_stamp(s[0], s[0]->pos, 1);
            s[0]->pos++;
        }
    } else {
        size_t piece = n < (size_t)w->n_chunk ? n : (size_t)w->n_chunk;
        if (!logits) st = batch_rows(w, (int)piece);
        for (size_t i = 0; i < n && !st;) {
            int c = (int)(n - i < piece ? n - i : piece);
            float *rows = logits ? logits + i * (size_t)V : w->blogits;
            st = tm_forward_batch(w, s + i, tokens + i, c, rows);
            if (!st) {
                for (int j = 0; j < c; j++) {
                    tm_session_stamp(s[i + (size_t)j], s[i + (size_t)j]->pos, 1);
                    s[i + (size_t)j]->pos++;
                }
                i += (size_t)c;
            }
        }
    }
    pthread_mutex_unlock(&m->eval_mu);
    return st;
}

/* ------------------------------------------------------------ snapshots, copies */

void tm_session_stamp(tern_session *s, int pos0, int n) {
    uint64_t v = ++s->stamp;
    for (int i = 0; i < n; i++) s->row_stamp[pos0 + i] = v;
}

struct tern_session_snapshot {
    const tern_model *m;
    uint64_t session_id;    /* the session it was taken from */
    int pos;
    uint64_t stamp;         /* row_stamp[pos - 1] then (0 when pos == 0) */
    size_t conv_bytes, ssm_bytes, logits_bytes;
    unsigned char *data;    /* conv states | recurrent states | logits row (host); with dev, the
                             * logits row only */
    void *dev;              /* TERN_SNAPSHOT_BACKEND on a device: conv | recurrent states in the
                             * back-end's memory (conv_bytes + ssm_bytes; NULL: in data) */
};

static size_t conv_state_bytes(const tern_model *m) {
    const tm_hparams *hp = &m->hp;
    if (!hp->n_gdn_layers) return 0;
    size_t C = 2 * (size_t)hp->ssm_n_k * hp->ssm_dk + (size_t)hp->ssm_n_v * hp->ssm_dv;
    return (size_t)hp->n_gdn_layers * (hp->conv_k - 1) * C * sizeof(float);
}
static size_t ssm_state_bytes(const tern_model *m) {
    const tm_hparams *hp = &m->hp;
    if (!hp->n_gdn_layers) return 0;
    return (size_t)hp->n_gdn_layers * m->be->vt->gdn_state_floats(m->be, hp) * sizeof(float);
}

/* A back-end that keeps the caches and states itself (TM_CAP_PRIVATE_STATE: the
 * tensor-parallel shards) has none here to copy. */
static tern_status refuse_tp(const tern_session *s, const char *fn) {
    if (s->m->be->vt->caps & TM_CAP_PRIVATE_STATE)
        return tern_fail(TERN_ERR_UNSUPPORTED, "%s: not supported on a tensor-parallel model (--tp)", fn);
    return TERN_OK;
}

/* n bytes from src to dst, both the back-end's memory, queued on its stream (vt->copy; a
 * plain copy on the host). TERN_ERR_UNSUPPORTED on a device back-end without one. */
static tern_status be_copy_dev(tm_backend *be, void *dst, const void *src, size_t n) {
    if (!n) return TERN_OK;
    if (!tm_be_device(be)) {
        memcpy(dst, src, n);
        return TERN_OK;
    }
    if (!be->vt->copy) return tern_fail(TERN_ERR_UNSUPPORTED, "the %s back-end has no device copy", be->vt->name);
    return be->vt->copy(be, dst, src, n);
}

tern_status tern_session_snapshot_take(const tern_session *s, tern_session_snapshot **out) {
    return tern_session_snapshot_take_in(s, TERN_SNAPSHOT_HOST, out);
}

tern_status tern_session_snapshot_take_in(const tern_session *s, tern_snapshot_memory where,
                                          tern_session_snapshot **out) {
    if (!s || !out) return tern_fail(TERN_ERR_INVALID_ARG, "tern_session_snapshot_take: NULL argument");
    *out = NULL;
    if (where != TERN_SNAPSHOT_HOST && where != TERN_SNAPSHOT_BACKEND)
        return tern_fail(TERN_ERR_INVALID_ARG, "tern_session_snapshot_take_in: unknown memory %d", (int)where);
    tern_status st = refuse_tp(s, "tern_session_snapshot_take");
    if (st) return st;
    tern_session_snapshot *p = calloc(1, sizeof *p);
    if (!p) return tern_fail(TERN_ERR_NOMEM, "tern_session_snapshot_take: out of memory");
    p->m = s->m;
    p->session_id = s->id;
    p->pos = s->pos;
    p->stamp = s->pos ? s->row_stamp[s->pos - 1] : 0;
    p->conv_bytes = conv_state_bytes(s->m);
    p->ssm_bytes = ssm_state_bytes(s->m);
    p->logits_bytes = (size_t)s->m->hp.n_vocab * sizeof(float);
    tm_backend *be = s->m->be;
    /* in the back-end's memory: a device-to-device copy queued on its stream (ordered
     * before the session's next step), nothing crosses to the host but the logits row */
    const size_t states = p->conv_bytes + p->ssm_bytes;
    const bool on_dev = where == TERN_SNAPSHOT_BACKEND && tm_be_device(be) && be->vt->copy && states;
    size_t n = (on_dev ? 0 : states) + p->logits_bytes;
    if (!(p->data = malloc(n))) {
        free(p);
        return tern_fail(TERN_ERR_NOMEM, "tern_session_snapshot_take: out of memory (%zu bytes)", n);
    }
    if (on_dev && !(p->dev = tm_be_alloc(be, states))) {
        free(p->data);
        free(p);
        return tern_fail(TERN_ERR_NOMEM, "tern_session_snapshot_take: out of %s memory (%zu bytes)", be->vt->name,
                         states);
    }
    if (on_dev) {
        if (p->conv_bytes) st = be_copy_dev(be, p->dev, s->conv_state, p->conv_bytes);
        if (!st && p->ssm_bytes) st = be_copy_dev(be, (char *)p->dev + p->conv_bytes, s->ssm_state, p->ssm_bytes);
    } else {
        if (p->conv_bytes) st = tm_be_download(be, p->data, s->conv_state, p->conv_bytes);
        if (!st && p->ssm_bytes) st = tm_be_download(be, p->data + p->conv_bytes, s->ssm_state, p->ssm_bytes);
    }
    if (st) {
        tern_session_snapshot_free(p);
        return st;
    }
    memcpy(p->data + (on_dev ? 0 : states), s->logits, p->logits_bytes);
    *out = p;
    return TERN_OK;
}

tern_status tern_session_snapshot_restore(tern_session *s, const tern_session_snapshot *p) {
    if (!s || !p) return tern_fail(TERN_ERR_INVALID_ARG, "tern_session_snapshot_restore: NULL argument");
    if (p->m != s->m || p->session_id != s->id)
        return tern_fail(TERN_ERR_INVALID_ARG, "tern_session_snapshot_restore: the snapshot was taken from another session");
    if (p->pos > s->pos)
        return tern_fail(TERN_ERR_RANGE,
                         "tern_session_snapshot_restore: the snapshot is at position %d, beyond the session's %d",
                         p->pos, s->pos);
    if (p->pos && s->row_stamp[p->pos - 1] != p->stamp)
        return tern_fail(TERN_ERR_INVALID_ARG,
                         "tern_session_snapshot_restore: the session's tokens before position %d were evaluated "
                         "again since the snapshot was taken",
                         p->pos);
    tm_backend *be = s->m->be;
    tern_status st = TERN_OK;
    if (p->dev) {
        if (p->conv_bytes) st = be_copy_dev(be, s->conv_state, p->dev, p->conv_bytes);
        if (!st && p->ssm_bytes) st = be_copy_dev(be, s->ssm_state, (const char *)p->dev + p->conv_bytes, p->ssm_bytes);
    } else {
        if (p->conv_bytes) st = tm_be_upload(be, s->conv_state, p->data, p->conv_bytes);
        if (!st && p->ssm_bytes) st = tm_be_upload(be, s->ssm_state, p->data + p->conv_bytes, p->ssm_bytes);
    }
    if (st) { /* the states are partly written: the session starts over */
        char msg[256];
        snprintf(msg, sizeof msg, "%s", tern_last_error());
        tern_session_reset(s);
        return tern_fail(st, "tern_session_snapshot_restore: %s", msg);
    }
    memcpy(s->logits, p->data + (p->dev ? 0 : p->conv_bytes + p->ssm_bytes), p->logits_bytes);
    s->pos = p->pos;
    return TERN_OK;
}

tern_status tern_session_snapshot_retake(const tern_session *s, tern_session_snapshot *p) {
    if (!s || !p) return tern_fail(TERN_ERR_INVALID_ARG, "tern_session_snapshot_retake: NULL argument");
    tern_status st = refuse_tp(s, "tern_session_snapshot_retake");
    if (st) return st;
    if (p->m != s->m)
        return tern_fail(TERN_ERR_INVALID_ARG, "tern_session_snapshot_retake: the snapshot is of another model");
    p->session_id = 0; /* void until complete (ids start at 1) */
    tm_backend *be = s->m->be;
    if (p->dev) {
        if (p->conv_bytes) st = be_copy_dev(be, p->dev, s->conv_state, p->conv_bytes);
        if (!st && p->ssm_bytes) st = be_copy_dev(be, (char *)p->dev + p->conv_bytes, s->ssm_state, p->ssm_bytes);
    } else {
        if (p->conv_bytes) st = tm_be_download(be, p->data, s->conv_state, p->conv_bytes);
        if (!st && p->ssm_bytes) st = tm_be_download(be, p->data + p->conv_bytes, s->ssm_state, p->ssm_bytes);
    }
    if (st) return st;
    memcpy(p->data + (p->dev ? 0 : p->conv_bytes + p->ssm_bytes), s->logits, p->logits_bytes);
    p->session_id = s->id;
    p->pos = s->pos;
    p->stamp = s->pos ? s->row_stamp[s->pos - 1] : 0;
    return TERN_OK;
}

void tern_session_snapshot_free(tern_session_snapshot *p) {
    if (!p) return;
    if (p->dev) tm_be_free(p->m->be, p->dev, p->conv_bytes + p->ssm_bytes);
    free(p->data);
    free(p);
}
int tern_session_snapshot_pos(const tern_session_snapshot *p) { return p ? p->pos : 0; }
uint64_t tern_session_snapshot_bytes(const tern_session_snapshot *p) {
    return p ? sizeof *p + p->conv_bytes + p->ssm_bytes + p->logits_bytes : 0;
}
uint64_t tern_session_snapshot_backend_bytes(const tern_session_snapshot *p) {
    return p && p->dev ? p->conv_bytes + p->ssm_bytes : 0;
}

/* n bytes from src to dst, both the back-end's memory: a plain copy on the host, the
 * back-end's device copy where it has one, else through a host bounce buffer (download,
 * upload). */
static tern_status be_copy(tm_backend *be, void *dst, const void *src, size_t n, void *bounce, size_t nb) {
    if (!n) return TERN_OK;
    if (!tm_be_device(be)) {
        memcpy(dst, src, n);
        return TERN_OK;
    }
    if (be->vt->copy) return be_copy_dev(be, dst, src, n);
    for (size_t off = 0; off < n;) {
        size_t c = n - off < nb ? n - off : nb;
        tern_status st = tm_be_download(be, bounce, (const char *)src + off, c);
        if (!st) st = tm_be_upload(be, (char *)dst + off, bounce, c);
        if (st) return st;
        off += c;
    }
    return TERN_OK;
}

tern_status tern_session_copy(tern_session *dst, const tern_session *src) {
    if (!dst || !src) return tern_fail(TERN_ERR_INVALID_ARG, "tern_session_copy: NULL argument");
    if (dst == src) return TERN_OK;
    if (dst->m != src->m)
        return tern_fail(TERN_ERR_INVALID_ARG, "tern_session_copy: the sessions belong to different models");
    tern_status st = refuse_tp(src, "tern_session_copy");
    if (st) return st;
    if (dst->k_type != src->k_type || dst->v_type != src->v_type)
        return tern_fail(TERN_ERR_INVALID_ARG, "tern_session_copy: the sessions' KV cache types differ (%s/%s and %s/%s)",
                         kv_name(dst->k_type), kv_name(dst->v_type), kv_name(src->k_type), kv_name(src->v_type));
    if (src->pos > dst->n_ctx)
        return tern_fail(TERN_ERR_CONTEXT_FULL, "tern_session_copy: %d positions do not fit a context of %d",
                         src->pos, dst->n_ctx);
    tern_model *m = src->m;
    tm_backend *be = m->be;
    size_t nb = tm_be_device(be) ? (size_t)4 << 20 : 0;
    void *bounce = nb ? malloc(nb) : NULL;
    if (nb && !bounce) return tern_fail(TERN_ERR_NOMEM, "tern_session_copy: out of memory");
    /* the states first, then each attention layer's rows [0, pos) */
    st = be_copy(be, dst->conv_state, src->conv_state, conv_state_bytes(m), bounce, nb);
    if (!st) st = be_copy(be, dst->ssm_state, src->ssm_state, ssm_state_bytes(m), bounce, nb);
    for (int l = 0; l < m->hp.n_attn_layers && !st; l++) {
        st = be_copy(be, (char *)dst->kcache + (size_t)l * dst->n_ctx * dst->k_row,
                     (const char *)src->kcache + (size_t)l * src->n_ctx * src->k_row, (size_t)src->pos * src->k_row,
                     bounce, nb);
        if (!st)
            st = be_copy(be, (char *)dst->vcache + (size_t)l * dst->n_ctx * dst->v_row,
                         (const char *)src->vcache + (size_t)l * src->n_ctx * src->v_row,
                         (size_t)src->pos * src->v_row, bounce, nb);
    }
    free(bounce);
    if (st) { /* partly copied: the session starts over */
        char msg[256];
        snprintf(msg, sizeof msg, "%s", tern_last_error());
        tern_session_reset(dst);
        return tern_fail(st, "tern_session_copy: %s", msg);
    }
    memcpy(dst->logits, src->logits, (size_t)m->hp.n_vocab * sizeof(float));
    dst->pos = src->pos;
    if (dst->pos) tm_session_stamp(dst, 0, dst->pos); /* its rows changed: its snapshots are void */
    return TERN_OK;
}
