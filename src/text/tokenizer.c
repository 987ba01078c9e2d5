/*
 * tokenizer.c - byte-level BPE encode/decode as Hugging Face `tokenizers` does
 * for the Qwen2/Qwen3 and Qwen3.5 vocabularies.
 *
 * Encode pipeline (HF order):
 *   1. added tokens (control + user-defined) are cut out of the raw text,
 *      leftmost-longest (only when parse_special is set);
 *   2. each remaining segment is NFC-normalised (utf8proc; ASCII fast path);
 *   3. the segment is split by the pre-tokenizer regex (PCRE2, UTF + UCP + JIT;
 *      the unmatched gaps between matches are pieces too, HF "Isolated");
 *   4. each piece's bytes become GPT-2 byte-mapped symbols, and adjacent pairs
 *      are merged lowest merge rank first (ties: leftmost), using a binary heap.
 * Decode concatenates the tokens' raw bytes (byte-exact); the streaming
 * detokenizer holds back an incomplete UTF-8 sequence at the end.
 *
 * GPT-2 byte mapping: bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF map to the code
 * point of the same value; the other 68 bytes map to U+0100, U+0101, ... in byte
 * order (space -> U+0120 'Ġ', '\n' -> U+010A 'Ċ').
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/tok_internal.h"

#include <pcre2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

const char *const tern_tok_regex_qwen2 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char *const tern_tok_regex_qwen35 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* ------------------------------------------------------------ byte mapping */

static uint16_t g_byte_to_cp[256];
static int16_t g_cp_to_byte[0x144];   /* every mapped code point is < 0x144 */

static void byte_map_build(void) {
    int n = 0;
    for (int i = 0; i < 0x144; i++) g_cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        g_byte_to_cp[b] = (uint16_t)(keep ? b : 256 + n++);
    }
    for (int b = 0; b < 256; b++) g_cp_to_byte[g_byte_to_cp[b]] = (int16_t)b;
}
static void byte_map_init(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, byte_map_build);
}


/* Length of a valid UTF-8 sequence starting at s (n bytes available), 0 if invalid/incomplete. */
static size_t utf8_seq(const unsigned char *s, size_t n, uint32_t *cp) {
    utf8proc_int32_t c;
    utf8proc_ssize_t r = utf8proc_iterate(s, (utf8proc_ssize_t)(n > 4 ? 4 : n), &c);
    if (r <= 0) return 0;
    *cp = (uint32_t)c;
    return (size_t)r;
}

/* ------------------------------------------------------------------ hashing */

static uint32_t hash_bytes(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 16777619u; }
    return h ? h : 1;
}
static uint64_t mix64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return x;
}
static inline uint64_t merge_key(int32_t l, int32_t r) {
    return ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;  /* never 0 */
}

static const char *tok_text(const tern_tokenizer *t, int32_t id, size_t *len) {
    *len = t->tok[id].text_len;
    return t->pool + t->tok[id].text_off;
}

static int32_t map_find(const tern_tokenizer *t, const char *s, size_t n) {
    if (!t->map) return -1;
    uint32_t h = hash_bytes(s, n), mask = t->map_cap - 1;
    for (uint32_t i = h & mask;; i = (i + 1) & mask) {
        const tok_slot *sl = &t->map[i];
        if (!sl->hash) return -1;
        if (sl->hash == h) {
            size_t l;
            const char *x = tok_text(t, sl->id, &l);
            if (l == n && !memcmp(x, s, n)) return sl->id;
        }
    }
}

static const merge_slot *merge_find(const tern_tokenizer *t, int32_t l, int32_t r) {
    if (!t->merges) return NULL;
    uint64_t k = merge_key(l, r);
    uint32_t mask = t->merges_cap - 1;
    for (uint32_t i = (uint32_t)mix64(k) & mask;; i = (i + 1) & mask) {
        const merge_slot *m = &t->merges[i];
        if (!m->key) return NULL;
        if (m->key == k) return m;
    }
}

/* --------------------------------------------------------------- building */

tern_status tern_tok_init(tern_tokenizer *t, int32_t n_vocab) {
    byte_map_init();
    memset(t, 0, sizeof *t);
    if (n_vocab <= 0 || n_vocab > (1 << 24))
        return tern_fail(TERN_ERR_FORMAT, "tokenizer: vocabulary size %d out of range", n_vocab);
    t->n_vocab = n_vocab;
    t->tok = tern_calloc((size_t)n_vocab, sizeof *t->tok);
    t->eog = tern_calloc((size_t)n_vocab, 1);
    if (!t->tok || !t->eog) return tern_fail(TERN_ERR_NOMEM, "tokenizer: out of memory");
    t->bos = t->eos = t->pad = -1;
    for (int i = 0; i < 256; i++) t->byte_id[i] = -1;
    return TERN_OK;
}

static tern_status pool_add(tern_tokenizer *t, const char *s, size_t n, uint32_t *off) {
    if (t->pool_len + n + 1 > t->pool_cap) {
        size_t cap = t->pool_cap ? t->pool_cap : 1 << 16;
        while (cap < t->pool_len + n + 1) cap *= 2;
        if (cap > UINT32_MAX) return tern_fail(TERN_ERR_FORMAT, "tokenizer: token strings exceed 4 GiB");
        char *p = tern_realloc(t->pool, t->pool_cap, cap);
        if (!p) return tern_fail(TERN_ERR_NOMEM, "tokenizer: out of memory");
        t->pool = p; t->pool_cap = cap;
    }
    *off = (uint32_t)t->pool_len;
    memcpy(t->pool + t->pool_len, s, n);
    t->pool_len += n;
    t->pool[t->pool_len++] = 0;
    return TERN_OK;
}

tern_status tern_tok_set(tern_tokenizer *t, int32_t id, const char *text, size_t len, int type) {
    if (id < 0 || id >= t->n_vocab) return tern_fail(TERN_ERR_FORMAT, "tokenizer: token id %d out of range", id);
    if (len > (1u << 20)) return tern_fail(TERN_ERR_FORMAT, "tokenizer: token %d is %zu bytes long", id, len);
    tok_entry *e = &t->tok[id];
    tern_status st = pool_add(t, text, len, &e->text_off);
    if (st) return st;
    e->text_len = (uint32_t)len;
    e->type = (uint8_t)type;
    if (type == TERN_TOKEN_CONTROL || type == TERN_TOKEN_USER_DEFINED) {
        e->bytes_off = e->text_off;
        e->bytes_len = e->text_len;
        return TERN_OK;
    }
    /* un-map the GPT-2 byte characters; other characters are kept as UTF-8 */
    char tmp[512];
    char *buf = len <= sizeof tmp ? tmp : tern_malloc(len);
    if (!buf) return tern_fail(TERN_ERR_NOMEM, "tokenizer: out of memory");
    size_t o = 0;
    const unsigned char *s = (const unsigned char *)t->pool + e->text_off;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t k = utf8_seq(s + i, len - i, &cp);
        if (!k) { buf[o++] = (char)s[i++]; continue; }
        if (cp < 0x144 && g_cp_to_byte[cp] >= 0) buf[o++] = (char)g_cp_to_byte[cp];
        else { memcpy(buf + o, s + i, k); o += k; }
        i += k;
    }
    st = pool_add(t, buf, o, &e->bytes_off);
    e->bytes_len = (uint32_t)o;
    if (buf != tmp) tern_free(buf, len);
    return st;
}

static tern_status build_map(tern_tokenizer *t) {
    uint32_t cap = 16;
    while (cap < (uint32_t)t->n_vocab * 2u) cap <<= 1;
    t->map = tern_calloc(cap, sizeof *t->map);
    if (!t->map) return tern_fail(TERN_ERR_NOMEM, "tokenizer: out of memory");
    t->map_cap = cap;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t n;
        const char *s = tok_text(t, id, &n);
        if (!n || t->tok[id].type == TERN_TOKEN_UNUSED) continue;
        uint32_t h = hash_bytes(s, n), mask = cap - 1, i;
        bool dup = false;
        for (i = h & mask; t->map[i].hash; i = (i + 1) & mask) {
            size_t l;
            const char *x = tok_text(t, t->map[i].id, &l);
            if (t->map[i].hash == h && l == n && !memcmp(x, s, n)) { dup = true; break; }
        }
        if (dup) continue; /* first id wins, as in HF's vocab map */
        t->map[i].hash = h;
        t->map[i].id = id;
    }
    return TERN_OK;
}

tern_status tern_tok_index(tern_tokenizer *t) { return t->map ? TERN_OK : build_map(t); }

tern_status tern_tok_add_merge(tern_tokenizer *t, const char *a, size_t alen, const char *b,
                               size_t blen, int32_t rank) {
    if (!t->map) {
        tern_status st = build_map(t);
        if (st) return st;
    }
    if (!t->merges) {
        uint32_t cap = 1024;
        while (cap < (uint32_t)t->n_vocab * 2u) cap <<= 1;
        t->merges = tern_calloc(cap, sizeof *t->merges);
        if (!t->merges) return tern_fail(TERN_ERR_NOMEM, "tokenizer: out of memory");
        t->merges_cap = cap;
    }
    if ((uint32_t)(t->n_merges + 1) * 2u > t->merges_cap) {
        uint32_t cap = t->merges_cap * 2;
        merge_slot *m = tern_calloc(cap, sizeof *m);
        if (!m) return tern_fail(TERN_ERR_NOMEM, "tokenizer: out of memory");
        for (uint32_t j = 0; j < t->merges_cap; j++) {
            if (!t->merges[j].key) continue;
            uint32_t i = (uint32_t)mix64(t->merges[j].key) & (cap - 1);
            while (m[i].key) i = (i + 1) & (cap - 1);
            m[i] = t->merges[j];
        }
        tern_free(t->merges, t->merges_cap * sizeof *t->merges);
        t->merges = m; t->merges_cap = cap;
    }
    int32_t l = map_find(t, a, alen), r = map_find(t, b, blen);
    if (l < 0 || r < 0) return TERN_OK;
    char tmp[1024];
    size_t n = alen + blen;
    if (n > sizeof tmp) return TERN_OK;
    memcpy(tmp, a, alen);
    memcpy(tmp + alen, b, blen);
    int32_t res = map_find(t, tmp, n);
    if (res < 0) return TERN_OK;
    uint64_t k = merge_key(l, r);
    uint32_t mask = t->merges_cap - 1, i;
    for (i = (uint32_t)mix64(k) & mask; t->merges[i].key; i = (i + 1) & mask)
        if (t->merges[i].key == k) return TERN_OK; /* duplicate: the lower rank stays */
    t->merges[i].key = k;
    t->merges[i].rank = rank;
    t->merges[i].result = res;
    t->n_merges++;
    return TERN_OK;
}

typedef struct added_key { uint32_t len; int32_t id; } added_key;
static int cmp_added(const void *a, const void *b) {
    const added_key *x = a, *y = b; /* longest first, then lowest id */
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

tern_status tern_tok_finish(tern_tokenizer *t, const char *name) {
    tern_status st;
    if (!t->map && (st = build_map(t))) return st;
    for (int b = 0; b < 256; b++) {
        char u[4];
        size_t n = tern_utf8_put(g_byte_to_cp[b], u);
        t->byte_id[b] = map_find(t, u, n);
    }
    /* added tokens, longest first (leftmost-longest matching) */
    int32_t n_added = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        int ty = t->tok[id].type;
        if ((ty == TERN_TOKEN_CONTROL || ty == TERN_TOKEN_USER_DEFINED) && t->tok[id].text_len) n_added++;
    }
    if (n_added) {
        t->added = tern_malloc((size_t)n_added * sizeof *t->added);
        if (!t->added) return tern_fail(TERN_ERR_NOMEM, "tokenizer: out of memory");
        for (int32_t id = 0; id < t->n_vocab; id++) {
            int ty = t->tok[id].type;
            if ((ty == TERN_TOKEN_CONTROL || ty == TERN_TOKEN_USER_DEFINED) && t->tok[id].text_len) {
                t->added[t->n_added++] = id;
                t->added_first[(unsigned char)t->pool[t->tok[id].text_off]] = 1;
            }
        }
        added_key *keys = tern_malloc((size_t)t->n_added * sizeof *keys);
        if (!keys) return tern_fail(TERN_ERR_NOMEM, "tokenizer: out of memory");
        for (int32_t i = 0; i < t->n_added; i++) keys[i] = (added_key){t->tok[t->added[i]].text_len, t->added[i]};
        qsort(keys, (size_t)t->n_added, sizeof *keys, cmp_added);
        for (int32_t i = 0; i < t->n_added; i++) t->added[i] = keys[i].id;
        tern_free(keys, (size_t)t->n_added * sizeof *keys);
    }
    /* end-of-generation ids */
    static const char *const eog_names[] = {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>",
                                            "<|end|>", "<end_of_turn>", "<|return|>", "<|eom_id|>"};
    if (t->eos >= 0 && t->eos < t->n_vocab) t->eog[t->eos] = 1;
    for (size_t i = 0; i < sizeof eog_names / sizeof eog_names[0]; i++) {
        int32_t id = map_find(t, eog_names[i], strlen(eog_names[i]));
        if (id >= 0 && (t->tok[id].type == TERN_TOKEN_CONTROL || t->tok[id].type == TERN_TOKEN_USER_DEFINED))
            t->eog[id] = 1;
    }
    /* the split regex */
    if (!t->regex) {
        const char *re = !strcmp(t->pre, "qwen35") ? tern_tok_regex_qwen35 : tern_tok_regex_qwen2;
        t->regex = tern_strdup(re);
        if (!t->regex) return tern_fail(TERN_ERR_NOMEM, "tokenizer: out of memory");
    }
    int err;
    PCRE2_SIZE eoff;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)t->regex, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &eoff, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return tern_fail(TERN_ERR_UNSUPPORTED, "%s: split regex does not compile at offset %zu: %s",
                         name, (size_t)eoff, (const char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter on failure */
    t->re_code = re;
    return TERN_OK;
}

void tern_tok_destroy(tern_tokenizer *t) {
    if (t->tok) tern_free(t->tok, (size_t)t->n_vocab * sizeof *t->tok);
    if (t->eog) tern_free(t->eog, (size_t)t->n_vocab);
    if (t->pool) tern_free(t->pool, t->pool_cap);
    if (t->map) tern_free(t->map, t->map_cap * sizeof *t->map);
    if (t->merges) tern_free(t->merges, t->merges_cap * sizeof *t->merges);
    if (t->added) tern_free(t->added, (size_t)t->n_added * sizeof *t->added);
    if (t->regex) tern_free(t->regex, strlen(t->regex) + 1);
    if (t->chat_template) tern_free(t->chat_template, strlen(t->chat_template) + 1);
    if (t->re_code) pcre2_code_free((pcre2_code *)t->re_code);
    memset(t, 0, sizeof *t);
}

void tern_tokenizer_free(tern_tokenizer *t) {
    if (!t) return;
    tern_tok_destroy(t);
    tern_free(t, sizeof *t);
}

/* ------------------------------------------------------------------ BPE */

typedef struct bpe_sym { int32_t id, prev, next; } bpe_sym;
typedef struct bpe_cand { int32_t rank, pos, lid, rid; } bpe_cand;

/* Per-call cache of short pieces -> ids (text repeats words; exact: the bytes
 * are compared on a hit). Fixed size; once half full nothing more is added. */
#define CACHE_SLOTS 8192
#define CACHE_MAX_PIECE 32
typedef struct cache_slot { uint32_t hash, ids_off; uint8_t len, n_ids; char bytes[CACHE_MAX_PIECE]; } cache_slot;

typedef struct enc_scratch {
    bpe_sym *sym; size_t sym_cap;
    bpe_cand *heap; size_t heap_n, heap_cap;
    cache_slot *cache; size_t cache_used;
    tern_tokens cache_ids;
} enc_scratch;

static void scratch_free(enc_scratch *sc) {
    if (sc->sym) tern_free(sc->sym, sc->sym_cap * sizeof *sc->sym);
    if (sc->heap) tern_free(sc->heap, sc->heap_cap * sizeof *sc->heap);
    if (sc->cache) tern_free(sc->cache, CACHE_SLOTS * sizeof *sc->cache);
    tern_tokens_free(&sc->cache_ids);
}

static inline bool cand_less(const bpe_cand *a, const bpe_cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static tern_status heap_push(enc_scratch *sc, bpe_cand c) {
    if (!tern_grow(&sc->heap, &sc->heap_cap, sc->heap_n, sizeof *sc->heap, 256))
        return tern_fail(TERN_ERR_NOMEM, "tokenizer: out of memory");
    size_t i = sc->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &sc->heap[p])) break;
        sc->heap[i] = sc->heap[p];
        i = p;
    }
    sc->heap[i] = c;
    return TERN_OK;
}

static bpe_cand heap_pop(enc_scratch *sc) {
    bpe_cand top = sc->heap[0], last = sc->heap[--sc->heap_n];
    size_t i = 0, n = sc->heap_n;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const bpe_cand *best = &last;
        if (l < n && cand_less(&sc->heap[l], best)) { m = l; best = &sc->heap[l]; }
        if (r < n && cand_less(&sc->heap[r], best)) { m = r; }
        if (m == i) break;
        sc->heap[i] = sc->heap[m];
        i = m;
    }
    if (n) sc->heap[i] = last;
    return top;
}

static tern_status try_pair(const tern_tokenizer *t, enc_scratch *sc, int32_t pos) {
    int32_t nx = sc->sym[pos].next;
    if (nx < 0) return TERN_OK;
    const merge_slot *m = merge_find(t, sc->sym[pos].id, sc->sym[nx].id);
    if (!m) return TERN_OK;
    bpe_cand c = {m->rank, pos, sc->sym[pos].id, sc->sym[nx].id};
    return heap_push(sc, c);
}

/* BPE one pre-tokenized piece (raw bytes), appending ids. */
static tern_status bpe_piece_uncached(const tern_tokenizer *t, enc_scratch *sc, const unsigned char *p, size_t n,
                                      tern_tokens *out);

static tern_status bpe_piece(const tern_tokenizer *t, enc_scratch *sc, const unsigned char *p, size_t n,
                             tern_tokens *out) {
    if (n > CACHE_MAX_PIECE || n < 2) return bpe_piece_uncached(t, sc, p, n, out);
    if (!sc->cache) {
        sc->cache = tern_calloc(CACHE_SLOTS, sizeof *sc->cache);
        if (!sc->cache) return bpe_piece_uncached(t, sc, p, n, out);
    }
    uint32_t h = hash_bytes((const char *)p, n), i = h & (CACHE_SLOTS - 1);
    for (;; i = (i + 1) & (CACHE_SLOTS - 1)) {
        cache_slot *c = &sc->cache[i];
        if (!c->hash) break;
        if (c->hash == h && c->len == n && !memcmp(c->bytes, p, n)) {
            for (uint32_t k = 0; k < c->n_ids; k++) {
                tern_status st = tern_tokens_push(out, sc->cache_ids.ids[c->ids_off + k]);
                if (st) return st;
            }
            return TERN_OK;
        }
    }
    size_t before = out->n;
    tern_status st = bpe_piece_uncached(t, sc, p, n, out);
    if (st || sc->cache_used * 2 >= CACHE_SLOTS || out->n - before > 255) return st;
    cache_slot *c = &sc->cache[i];
    c->ids_off = (uint32_t)sc->cache_ids.n;
    for (size_t k = before; k < out->n; k++)
        if (tern_tokens_push(&sc->cache_ids, out->ids[k])) { tern_clear_error(); return TERN_OK; }
    c->hash = h;
    c->len = (uint8_t)n;
    c->n_ids = (uint8_t)(out->n - before);
    memcpy(c->bytes, p, n);
    sc->cache_used++;
    return TERN_OK;
}

static tern_status bpe_piece_uncached(const tern_tokenizer *t, enc_scratch *sc, const unsigned char *p, size_t n,
                                      tern_tokens *out) {
    tern_status st;
    if (n + 1 > sc->sym_cap) {
        size_t cap = sc->sym_cap ? sc->sym_cap : 256;
        while (cap < n + 1) cap *= 2;
        bpe_sym *s = tern_realloc(sc->sym, sc->sym_cap * sizeof *s, cap * sizeof *s);
        if (!s) return tern_fail(TERN_ERR_NOMEM, "tokenizer: out of memory");
        sc->sym = s; sc->sym_cap = cap;
    }
    int32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[p[i]];
        if (id < 0) continue; /* not in the vocabulary and no unk token: HF drops it */
        sc->sym[m].id = id;
        sc->sym[m].prev = m - 1;
        sc->sym[m].next = m + 1;
        m++;
    }
    if (!m) return TERN_OK;
    sc->sym[m - 1].next = -1;
    if (m == 1) return tern_tokens_push(out, sc->sym[0].id);
    sc->heap_n = 0;
    for (int32_t i = 0; i + 1 < m; i++)
        if ((st = try_pair(t, sc, i))) return st;
    while (sc->heap_n) {
        bpe_cand c = heap_pop(sc);
        bpe_sym *a = &sc->sym[c.pos];
        if (a->id != c.lid || a->next < 0) continue;   /* stale */
        bpe_sym *b = &sc->sym[a->next];
        if (b->id != c.rid) continue;
        const merge_slot *ms = merge_find(t, c.lid, c.rid);
        a->id = ms->result;
        b->id = -1;                                     /* dead */
        a->next = b->next;
        if (b->next >= 0) sc->sym[b->next].prev = c.pos;
        if (a->prev >= 0 && (st = try_pair(t, sc, a->prev))) return st;
        if ((st = try_pair(t, sc, c.pos))) return st;
    }
    for (int32_t i = 0; i >= 0; i = sc->sym[i].next)
        if ((st = tern_tokens_push(out, sc->sym[i].id))) return st;
    return TERN_OK;
}

/* Pre-tokenize one normalized segment and BPE each piece. */
static tern_status encode_segment(const tern_tokenizer *t, enc_scratch *sc, pcre2_match_data *md,
                                  const char *s, size_t n, tern_tokens *out) {
    tern_status st;
    const pcre2_code *re = t->re_code;
    size_t pos = 0;
    while (pos < n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, 0, md, NULL);
        if (rc < 0) {
            if (rc == PCRE2_ERROR_NOMATCH) break;
            return tern_fail(TERN_ERR_INTERNAL, "tokenizer: regex match failed (%d) at byte %zu", rc, pos);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t a = ov[0], b = ov[1];
        if (a > pos && (st = bpe_piece(t, sc, (const unsigned char *)s + pos, a - pos, out))) return st;
        if (b == a) { /* empty match: cannot happen with the Qwen regexes; step one byte */
            b = a + 1;
            if ((st = bpe_piece(t, sc, (const unsigned char *)s + a, 1, out))) return st;
        } else if ((st = bpe_piece(t, sc, (const unsigned char *)s + a, b - a, out))) {
            return st;
        }
        pos = b;
    }
    if (pos < n) return bpe_piece(t, sc, (const unsigned char *)s + pos, n - pos, out);
    return TERN_OK;
}

static tern_status encode_plain(const tern_tokenizer *t, enc_scratch *sc, pcre2_match_data *md,
                                const char *s, size_t n, tern_tokens *out) {
    if (!n) return TERN_OK;
    bool ascii = true;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80) { ascii = false; break; }
    if (ascii) return encode_segment(t, sc, md, s, n, out);
    utf8proc_uint8_t *nfc = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &nfc,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    tern_status st;
    if (r < 0) /* invalid UTF-8: no normalisation, bytes go through as they are */
        st = encode_segment(t, sc, md, s, n, out);
    else
        st = encode_segment(t, sc, md, (const char *)nfc, (size_t)r, out);
    free(nfc); /* allocated by utf8proc */
    return st;
}

static tern_status encode_impl(const tern_tokenizer *t, const char *text, size_t len, bool parse_special,
                               const size_t (*plain)[2], size_t n_plain, tern_tokens *out) {
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md) return tern_fail(TERN_ERR_NOMEM, "tokenizer: out of memory");
    enc_scratch sc = {0};
    tern_status st = TERN_OK;
    size_t seg = 0, pr = 0;
    if (parse_special && t->n_added) {
        for (size_t i = 0; i < len && !st; i++) {
            if (!t->added_first[(unsigned char)text[i]]) continue;
            while (pr < n_plain && plain[pr][1] <= i) pr++;
            if (pr < n_plain && plain[pr][0] <= i) continue;           /* inside caller text */
            size_t limit = pr < n_plain ? plain[pr][0] : len;          /* a match may not reach into it */
            int32_t hit = -1;
            for (int32_t k = 0; k < t->n_added; k++) { /* longest first */
                int32_t id = t->added[k];
                size_t l = t->tok[id].text_len;
                if (l <= limit - i && !memcmp(text + i, t->pool + t->tok[id].text_off, l)) { hit = id; break; }
            }
            if (hit < 0) continue;
            st = encode_plain(t, &sc, md, text + seg, i - seg, out);
            if (!st) st = tern_tokens_push(out, hit);
            i += t->tok[hit].text_len - 1;
            seg = i + 1;
        }
    }
    if (!st) st = encode_plain(t, &sc, md, text + seg, len - seg, out);
    pcre2_match_data_free(md);
    scratch_free(&sc);
    return st;
}

tern_status tern_tokenize(const tern_tokenizer *t, const char *text, size_t len, bool parse_special,
                          tern_tokens *out) {
    if (!t || !out || (!text && len)) return tern_fail(TERN_ERR_INVALID_ARG, "tern_tokenize: NULL argument");
    return encode_impl(t, text, len, parse_special, NULL, 0, out);
}

tern_status tern_tok_encode_plain_ranges(const tern_tokenizer *t, const char *text, size_t len,
                                         const size_t (*plain)[2], size_t n_plain, tern_tokens *out) {
    if (!t || !out || (!text && len)) return tern_fail(TERN_ERR_INVALID_ARG, "tern_tokenize: NULL argument");
    return encode_impl(t, text, len, true, plain, n_plain, out);
}

/* ------------------------------------------------------------------ decode */

const char *tern_token_bytes(const tern_tokenizer *t, int32_t id, size_t *len) {
    if (!t || id < 0 || id >= t->n_vocab) { if (len) *len = 0; return NULL; }
    if (len) *len = t->tok[id].bytes_len;
    return t->pool + t->tok[id].bytes_off;
}

tern_status tern_detokenize(const tern_tokenizer *t, const int32_t *ids, size_t n, tern_str *out) {
    tern_status st = tern_str_reserve(out, 0);
    if (st) return st;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return tern_fail(TERN_ERR_RANGE, "detokenize: token id %d at index %zu is outside the vocabulary (%d)",
                             ids[i], i, t->n_vocab);
        size_t l;
        const char *b = tern_token_bytes(t, ids[i], &l);
        if ((st = tern_str_append(out, b, l))) return st;
    }
    return TERN_OK;
}

/* Bytes needed by a UTF-8 lead byte (1 for invalid leads: emitted as they are). */
static int utf8_need(unsigned char c) {
    if (c < 0xC2) return 1;
    if (c < 0xE0) return 2;
    if (c < 0xF0) return 3;
    if (c < 0xF5) return 4;
    return 1;
}

tern_status tern_detok_stream_push_bytes(tern_detok_stream *st, const char *b, size_t n, tern_str *out) {
    tern_status s = tern_str_reserve(out, n + (size_t)st->n_held);
    if (s) return s;
    /* concatenate held bytes and the new ones, emit all complete sequences */
    unsigned char tmp[8];
    size_t held = (size_t)st->n_held;
    memcpy(tmp, st->held, held);
    st->n_held = 0;
    /* the combined stream is tmp[0..held) + b[0..n) */
    size_t total = held + n, i = 0;
#define AT(k) ((k) < held ? tmp[k] : (unsigned char)b[(k) - held])
    while (i < total) {
        unsigned char c = AT(i);
        size_t need = (size_t)utf8_need(c), k = 1;
        if (need > 1)
            while (k < need && i + k < total && (AT(i + k) & 0xC0) == 0x80) k++;
        if (need > 1 && k < need && i + k == total) { /* incomplete so far: hold back */
            for (size_t j = i; j < total; j++) st->held[st->n_held++] = AT(j);
            break;
        }
        size_t emit = (k == need) ? need : 1;     /* an invalid sequence passes through bytewise */
        for (size_t e = 0; e < emit; e++) out->data[out->len++] = (char)AT(i + e);
        i += emit;
    }
    out->data[out->len] = 0;
#undef AT
    return TERN_OK;
}

tern_status tern_detok_stream_push(tern_detok_stream *st, const tern_tokenizer *t, int32_t id, tern_str *out) {
    size_t l;
    const char *b = tern_token_bytes(t, id, &l);
    if (!b) return tern_fail(TERN_ERR_RANGE, "detokenize: token id %d is outside the vocabulary (%d)", id,
                             t ? t->n_vocab : 0);
    return tern_detok_stream_push_bytes(st, b, l, out);
}

tern_status tern_detok_stream_flush(tern_detok_stream *st, tern_str *out) {
    tern_status s = tern_str_append(out, (const char *)st->held, (size_t)st->n_held);
    st->n_held = 0;
    return s;
}

/* ---------------------------------------------------------------- lookups */

int32_t tern_token_lookup(const tern_tokenizer *t, const char *s, size_t len) {
    return t ? map_find(t, s, len) : -1;
}
tern_token_type tern_token_get_type(const tern_tokenizer *t, int32_t id) {
    if (!t || id < 0 || id >= t->n_vocab) return TERN_TOKEN_UNDEFINED;
    return (tern_token_type)t->tok[id].type;
}
int32_t tern_tokenizer_n_vocab(const tern_tokenizer *t) { return t ? t->n_vocab : 0; }
int32_t tern_tokenizer_bos(const tern_tokenizer *t) { return t ? t->bos : -1; }
int32_t tern_tokenizer_eos(const tern_tokenizer *t) { return t ? t->eos : -1; }
bool tern_token_is_eog(const tern_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_vocab && t->eog[id];
}
const char *tern_tokenizer_pre(const tern_tokenizer *t) { return t ? t->pre : ""; }
const char *tern_tokenizer_chat_template(const tern_tokenizer *t) { return t ? t->chat_template : NULL; }

/* ------------------------------------------------------------- comparing */

/* A token's stored text for a message: printable ASCII kept, the rest as \xNN, cut. */
static void text_for_msg(const tern_tokenizer *t, int32_t id, char *out, size_t cap) {
    size_t n, o = 0;
    const char *s = tok_text(t, id, &n);
    for (size_t i = 0; i < n && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 32 && c < 127 && c != '"' && c != '\\') out[o++] = (char)c;
        else o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
    }
    out[o] = 0;
}

tern_status tern_tokenizer_compare(const tern_tokenizer *a, const tern_tokenizer *b) {
    if (!a || !b) return tern_fail(TERN_ERR_INVALID_ARG, "tern_tokenizer_compare: NULL argument");
    if (a->n_vocab != b->n_vocab)
        return tern_fail(TERN_ERR_INVALID_ARG, "the tokenizers differ: vocabulary of %d vs %d tokens", a->n_vocab,
                         b->n_vocab);
    for (int32_t id = 0; id < a->n_vocab; id++) {
        size_t la, lb;
        const char *ta = tok_text(a, id, &la), *tb = tok_text(b, id, &lb);
        if (la != lb || memcmp(ta, tb, la) || a->tok[id].type != b->tok[id].type) {
            char xa[96], xb[96];
            text_for_msg(a, id, xa, sizeof xa);
            text_for_msg(b, id, xb, sizeof xb);
            return tern_fail(TERN_ERR_INVALID_ARG, "the tokenizers differ: token %d is \"%s\" (type %d) vs \"%s\" (type %d)",
                             (int)id, xa, a->tok[id].type, xb, b->tok[id].type);
        }
        if (!!a->eog[id] != !!b->eog[id])
            return tern_fail(TERN_ERR_INVALID_ARG, "the tokenizers differ: token %d ends generation in %s only", (int)id,
                             a->eog[id] ? "the first" : "the second");
    }
    if (a->n_merges != b->n_merges)
        return tern_fail(TERN_ERR_INVALID_ARG, "the tokenizers differ: %d vs %d merges", (int)a->n_merges,
                         (int)b->n_merges);
    for (uint32_t i = 0; a->merges && i < a->merges_cap; i++) {
        const merge_slot *m = &a->merges[i];
        if (!m->key) continue;
        int32_t l = (int32_t)((m->key - 1) >> 32), r = (int32_t)(uint32_t)(m->key - 1);
        const merge_slot *o = merge_find(b, l, r);
        if (!o || o->rank != m->rank || o->result != m->result) {
            char xl[96], xr[96];
            text_for_msg(a, l, xl, sizeof xl);
            text_for_msg(a, r, xr, sizeof xr);
            if (!o)
                return tern_fail(TERN_ERR_INVALID_ARG, "the tokenizers differ: merge \"%s %s\" (rank %d) is missing from the second",
                                 xl, xr, (int)m->rank);
            return tern_fail(TERN_ERR_INVALID_ARG, "the tokenizers differ: merge \"%s %s\" has rank %d vs %d", xl, xr,
                             (int)m->rank, (int)o->rank);
        }
    }
    static const char *const what[3] = {"bos", "eos", "pad"};
    const int32_t va[3] = {a->bos, a->eos, a->pad}, vb[3] = {b->bos, b->eos, b->pad};
    for (int i = 0; i < 3; i++)
        if (va[i] != vb[i])
            return tern_fail(TERN_ERR_INVALID_ARG, "the tokenizers differ: special token %s is %d vs %d", what[i],
                             (int)va[i], (int)vb[i]);
    if (strcmp(a->pre, b->pre))
        return tern_fail(TERN_ERR_INVALID_ARG, "the tokenizers differ: pre-tokenizer \"%s\" vs \"%s\"", a->pre, b->pre);
    return TERN_OK;
}
