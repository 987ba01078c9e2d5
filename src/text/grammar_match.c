/*
 * grammar_match.c - the matching half of constrained output: the vocabulary's
 * token trie, the pushdown matcher built lazily as a byte DFA, and the token mask
 * at each sampling step (design: the top of grammar.c; the compiled grammar:
 * grammar_internal.h).
 */
#include "text/grammar_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* =============================================================== token trie */

struct tern_token_trie {
    int32_t n_nodes, n_vocab, max_depth;
    uint8_t *byte;
    uint16_t *depth;                /* 1-based */
    int32_t *skip;                  /* index after the subtree */
    int32_t *tok_begin;             /* tokens ending at this node: ids[tok_begin .. tok_begin + tok_n) */
    uint16_t *tok_n;
    int32_t *ids;                   /* token ids in trie order */
    int32_t *eog;                   /* end-of-generation ids */
    int32_t n_eog;
};

typedef struct { const uint8_t *b; uint32_t n; int32_t id; } tokref;

static int tokref_cmp(const void *a, const void *b) {
    const tokref *x = a, *y = b;
    uint32_t n = x->n < y->n ? x->n : y->n;
    int c = gcmp(x->b, y->b, n);
    if (c) return c;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

void tern_token_trie_free(tern_token_trie *T) {
    if (!T) return;
    free(T->byte);
    free(T->depth);
    free(T->skip);
    free(T->tok_begin);
    free(T->tok_n);
    free(T->ids);
    free(T->eog);
    free(T);
}

tern_status tern_token_trie_new(const tern_tokenizer *t, int n_vocab, tern_token_trie **out) {
    if (!out || !t) return tern_fail(TERN_ERR_INVALID_ARG, "tern_token_trie_new: NULL argument");
    *out = NULL;
    int32_t nt = tern_tokenizer_n_vocab(t);
    if (n_vocab <= 0) n_vocab = nt;
    if (nt > n_vocab) nt = n_vocab;
    tern_token_trie *T = calloc(1, sizeof *T);
    tokref *tr = malloc(((size_t)nt + 1) * sizeof *tr);
    int32_t n = 0, ne = 0;
    if (!T || !tr || !(T->eog = malloc(((size_t)nt + 1) * sizeof *T->eog))) goto oom;
    T->n_vocab = n_vocab;
    size_t total = 0;
    for (int32_t id = 0; id < nt; id++) {
        if (tern_token_is_eog(t, id)) { T->eog[ne++] = id; continue; }
        tern_token_type ty = tern_token_get_type(t, id);
        if (ty == TERN_TOKEN_CONTROL || ty == TERN_TOKEN_UNUSED || ty == TERN_TOKEN_UNKNOWN) continue;
        size_t bl = 0;
        const char *b = tern_token_bytes(t, id, &bl);
        if (!b || !bl || bl > 65535) continue;
        tr[n++] = (tokref){(const uint8_t *)b, (uint32_t)bl, id};
        total += bl;
    }
    T->n_eog = ne;
    qsort(tr, (size_t)n, sizeof *tr, tokref_cmp);
    /* nodes: for each string, the suffix past its common prefix with the previous one */
    size_t cap = total + 1;
    T->byte = malloc(cap);
    T->depth = malloc(cap * sizeof *T->depth);
    T->skip = malloc(cap * sizeof *T->skip);
    T->tok_begin = malloc(cap * sizeof *T->tok_begin);
    T->tok_n = calloc(cap, sizeof *T->tok_n);
    T->ids = malloc(((size_t)n + 1) * sizeof *T->ids);
    int32_t *path = malloc(65537 * sizeof *path);       /* node at each depth of the current string */
    if (!T->byte || !T->depth || !T->skip || !T->tok_begin || !T->tok_n || !T->ids || !path) { free(path); goto oom; }
    int32_t nn = 0;
    uint32_t open = 0;                                  /* depth of path[] that is valid */
    for (int32_t i = 0; i < n; i++) {
        uint32_t l = 0;
        if (i) {
            uint32_t m = tr[i].n < tr[i - 1].n ? tr[i].n : tr[i - 1].n;
            while (l < m && tr[i].b[l] == tr[i - 1].b[l]) l++;
        }
        /* nodes deeper than the common prefix are closed: their subtrees end here */
        for (uint32_t d = l + 1; d <= open; d++) T->skip[path[d]] = nn;
        open = l;
        for (uint32_t d = l; d < tr[i].n; d++) {
            T->byte[nn] = tr[i].b[d];
            T->depth[nn] = (uint16_t)(d + 1);
            T->tok_begin[nn] = i;
            path[d + 1] = nn;
            nn++;
        }
        open = tr[i].n;
        int32_t end = path[tr[i].n];
        if (!T->tok_n[end]) T->tok_begin[end] = i;
        T->tok_n[end]++;
        T->ids[i] = tr[i].id;
        if ((int32_t)tr[i].n > T->max_depth) T->max_depth = (int32_t)tr[i].n;
    }
    for (uint32_t d = 1; d <= open; d++) T->skip[path[d]] = nn;
    free(path);
    T->n_nodes = nn;
    free(tr);
    *out = T;
    return TERN_OK;
oom:
    free(tr);
    tern_token_trie_free(T);
    return tern_fail(TERN_ERR_NOMEM, "tern_token_trie_new: out of memory");
}

/* ================================================================= matcher */

/* A state: the sorted, deduplicated set of stacks plus a partial UTF-8 code
 * point, serialised as int32s: [pend_n, pend_len, pend_v, n_stacks, (len, pos...)...]. */
typedef struct gstate {
    int32_t *blob;
    int32_t blob_n;
    uint32_t hash;
    int32_t *trans;                 /* 256, lazily: -2 unknown, -1 dead */
    uint64_t *mask;                 /* allowed tokens (bit per id), lazily */
    bool accept;                    /* an empty stack and no partial code point */
} gstate;

struct tern_grammar_matcher {
    const tern_grammar *G;
    const tern_token_trie *T;
    gstate *st;
    int32_t n_st, cap_st;
    int32_t *ht;                    /* open addressing: state index or -1 */
    int32_t ht_cap;
    int32_t cur, start;
    size_t mask_bytes;
    int32_t *walk;                  /* state per trie depth */
    /* scratch for building states */
    int32_t *sbuf;                  /* stacks being collected: concatenated */
    int32_t sbuf_n, sbuf_cap;
    int32_t *soff, *slen;           /* offset, length of each collected stack */
    int32_t s_n, s_cap;
    int32_t *tmp;
    int32_t tmp_cap;
    tern_status err;
};

static uint32_t hash_blob(const int32_t *b, int32_t n) {
    uint32_t h = 2166136261u;
    for (int32_t i = 0; i < n; i++) {
        h ^= (uint32_t)b[i];
        h *= 16777619u;
        h ^= h >> 15;
    }
    return h;
}

static bool class_has(const tern_grammar *G, int32_t k, uint32_t c) {
    const gclass *cl = &G->cl[k];
    bool in = false;
    for (int32_t i = 0; i < cl->n && !in; i++) in = c >= G->rg[cl->first + i].lo && c <= G->rg[cl->first + i].hi;
    return in != cl->neg;
}

/* Can the class match some code point in [lo, hi]? */
static bool class_meets(const tern_grammar *G, int32_t k, uint32_t lo, uint32_t hi) {
    const gclass *cl = &G->cl[k];
    if (!cl->neg) {
        for (int32_t i = 0; i < cl->n; i++) {
            const grange *r = &G->rg[cl->first + i];
            if (r->lo <= hi && r->hi >= lo) return true;
        }
        return false;
    }
    /* negated: is [lo, hi] not covered by the excluded ranges? */
    uint32_t c = lo;
    for (;;) {
        bool moved = false;
        for (int32_t i = 0; i < cl->n; i++) {
            const grange *r = &G->rg[cl->first + i];
            if (r->lo <= c && r->hi >= c) {
                if (r->hi >= hi) return false;
                c = r->hi + 1;
                moved = true;
            }
        }
        if (!moved) return true;
    }
}

static void merr(tern_grammar_matcher *m, tern_status s, const char *what) {
    if (!m->err) m->err = tern_fail(s, "grammar: %s", what);
}

/* add stk[0..n) to the collected set */
static void collect_push(tern_grammar_matcher *m, const int32_t *stk, int32_t n) {
    if (m->err) return;
    if (m->s_n >= G_MAX_STACKS) { merr(m, TERN_ERR_UNSUPPORTED, "too many live alternatives (ambiguous grammar)"); return; }
    if (m->s_n >= m->s_cap) {
        int32_t nc = m->s_cap ? m->s_cap * 2 : 64;
        int32_t *a = realloc(m->soff, (size_t)nc * sizeof *a);
        if (a) m->soff = a;
        int32_t *b = a ? realloc(m->slen, (size_t)nc * sizeof *b) : NULL;
        if (b) m->slen = b;
        if (!a || !b) { merr(m, TERN_ERR_NOMEM, "out of memory"); return; }
        m->s_cap = nc;
    }
    if (!grow((void **)&m->sbuf, &m->sbuf_cap, m->sbuf_n + n, sizeof *m->sbuf)) { merr(m, TERN_ERR_NOMEM, "out of memory"); return; }
    if (n) memcpy(m->sbuf + m->sbuf_n, stk, (size_t)n * sizeof *stk);
    m->soff[m->s_n] = m->sbuf_n;
    m->slen[m->s_n] = n;
    m->sbuf_n += n;
    m->s_n++;
}

/* Expand stk[0..n) (top at n-1; room for cap) until every top is a CHAR and add
 * the results. A REF at the top is replaced by the position after it (unless
 * that is END: a tail call) and each alternative's first element is pushed. The
 * recursion may rewrite stk below n (an empty alternative pops), so the frame
 * restores its stack before each alternative. */
static void expand(tern_grammar_matcher *m, int32_t *stk, int32_t n, int32_t cap, int depth) {
    if (m->err) return;
    if (n == 0) { collect_push(m, stk, 0); return; }
    const tern_grammar *G = m->G;
    int32_t pos = stk[n - 1];
    const gelem *e = &G->el[pos];
    if (e->type == GE_CHAR) { collect_push(m, stk, n); return; }
    if (depth > G_MAX_STACK_LEN) { merr(m, TERN_ERR_UNSUPPORTED, "the grammar nests too deeply"); return; }
    int32_t r = e->v, nalt = G->rule_nalt[r];
    int32_t *orig = NULL;
    if (nalt > 1) {
        if (!(orig = malloc((size_t)n * sizeof *orig))) { merr(m, TERN_ERR_NOMEM, "out of memory"); return; }
        gcopy(orig, stk, (size_t)n * sizeof *orig);
    }
    for (int32_t a = 0; a < nalt && !m->err; a++) {
        if (a) gcopy(stk, orig, (size_t)n * sizeof *orig);
        int32_t base = n - 1;
        if (G->el[pos + 1].type != GE_END) stk[base++] = pos + 1;
        int32_t sp = G->alt[G->rule_alt[r] + a];
        if (G->el[sp].type != GE_END) {
            if (base >= cap) { merr(m, TERN_ERR_UNSUPPORTED, "the grammar nests too deeply"); break; }
            stk[base++] = sp;
        }
        expand(m, stk, base, cap, depth + 1);
    }
    free(orig);
}

static int stack_cmp_ctx(const tern_grammar_matcher *m, int32_t a, int32_t b) {
    int32_t la = m->slen[a], lb = m->slen[b];
    if (la != lb) return la < lb ? -1 : 1;
    return la ? gcmp(m->sbuf + m->soff[a], m->sbuf + m->soff[b], (size_t)la * sizeof(int32_t)) : 0;
}

static tern_grammar_matcher *g_sort_m;  /* qsort has no context argument */
static int stack_cmp(const void *x, const void *y) {
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    int c = stack_cmp_ctx(g_sort_m, a, b);
    if (c) return c;
    return a < b ? -1 : a > b;
}

static void ht_insert(tern_grammar_matcher *m, int32_t idx) {
    uint32_t mask = (uint32_t)m->ht_cap - 1;
    uint32_t h = m->st[idx].hash & mask;
    while (m->ht[h] >= 0) h = (h + 1) & mask;
    m->ht[h] = idx;
}

/* Intern the collected stacks with a partial code point; returns a state index or -1. */
static int32_t intern(tern_grammar_matcher *m, int32_t pend_n, int32_t pend_len, int32_t pend_v) {
    if (m->err) return -1;
    if (!m->s_n) return -1;
    /* order and dedupe */
    int32_t *ord = malloc((size_t)m->s_n * sizeof *ord);
    if (!ord) { merr(m, TERN_ERR_NOMEM, "out of memory"); return -1; }
    for (int32_t i = 0; i < m->s_n; i++) ord[i] = i;
    g_sort_m = m;
    if (m->s_n > 1) qsort(ord, (size_t)m->s_n, sizeof *ord, stack_cmp);
    int32_t need = 4;
    int32_t kept = 0;
    bool accept = false;
    for (int32_t i = 0; i < m->s_n; i++) {
        if (i && !stack_cmp_ctx(m, ord[i], ord[i - 1])) { ord[i - 1] = -1 - ord[i - 1]; }
    }
    /* (marked duplicates are the earlier copies: keep the last of each run) */
    for (int32_t i = 0; i < m->s_n; i++)
        if (ord[i] >= 0) { need += 1 + m->slen[ord[i]]; kept++; }
    if (!grow((void **)&m->tmp, &m->tmp_cap, need, sizeof *m->tmp)) { free(ord); merr(m, TERN_ERR_NOMEM, "out of memory"); return -1; }
    int32_t *b = m->tmp, w = 0;
    b[w++] = pend_n;
    b[w++] = pend_len;
    b[w++] = pend_v;
    b[w++] = kept;
    for (int32_t i = 0; i < m->s_n; i++) {
        if (ord[i] < 0) continue;
        int32_t s = ord[i];
        b[w++] = m->slen[s];
        if (!m->slen[s]) accept = true;
        if (m->slen[s]) gcopy(b + w, m->sbuf + m->soff[s], (size_t)m->slen[s] * sizeof *b);
        w += m->slen[s];
    }
    free(ord);
    uint32_t h = hash_blob(b, w);
    uint32_t hm = (uint32_t)m->ht_cap - 1;
    for (uint32_t k = h & hm; m->ht[k] >= 0; k = (k + 1) & hm) {
        gstate *s = &m->st[m->ht[k]];
        if (s->hash == h && s->blob_n == w && !gcmp(s->blob, b, (size_t)w * sizeof *b)) return m->ht[k];
    }
    if (m->n_st >= G_MAX_STATES) { merr(m, TERN_ERR_UNSUPPORTED, "too many grammar states"); return -1; }
    if (!grow((void **)&m->st, &m->cap_st, m->n_st + 1, sizeof *m->st)) { merr(m, TERN_ERR_NOMEM, "out of memory"); return -1; }
    gstate *s = &m->st[m->n_st];
    memset(s, 0, sizeof *s);
    if (!(s->blob = malloc((size_t)w * sizeof *b))) { merr(m, TERN_ERR_NOMEM, "out of memory"); return -1; }
    gcopy(s->blob, b, (size_t)w * sizeof *b);
    s->blob_n = w;
    s->hash = h;
    s->accept = accept && pend_n == 0;
    int32_t idx = m->n_st++;
    if (m->n_st * 2 > m->ht_cap) {
        int32_t nc = m->ht_cap * 2;
        int32_t *nh = malloc((size_t)nc * sizeof *nh);
        if (!nh) { m->n_st--; free(s->blob); merr(m, TERN_ERR_NOMEM, "out of memory"); return -1; }
        free(m->ht);
        m->ht = nh;
        m->ht_cap = nc;
        memset(m->ht, 0xff, (size_t)nc * sizeof *nh);
        for (int32_t i = 0; i < m->n_st; i++) ht_insert(m, i);
    } else {
        ht_insert(m, idx);
    }
    return idx;
}

static void collect_reset(tern_grammar_matcher *m) { m->s_n = 0; m->sbuf_n = 0; }

/* Stacks of state s (blob) iterated: calls back per stack. */
#define FOR_STACKS(blob, i, len, stk)                                              \
    for (int32_t _k = 0, _p = 4, len = 0; _k < (blob)[3] && ((len = (blob)[_p]), 1); \
         _k++, _p += 1 + len)                                                      \
        for (const int32_t *stk = (blob) + _p + 1, *_once = stk; _once; _once = NULL)

/* Whether the class meets [lo, hi] at a Unicode scalar value: the surrogates
 * D800..DFFF are never encoded, so a partial code point whose range lies there
 * cannot complete. */
static bool meets_scalar(const tern_grammar *G, int32_t k, uint32_t lo, uint32_t hi) {
    if (hi < 0xD800 || lo > 0xDFFF) return class_meets(G, k, lo, hi);
    return (lo < 0xD800 && class_meets(G, k, lo, 0xD7FF)) || (hi > 0xDFFF && class_meets(G, k, 0xE000, hi));
}

/* Advance state si by a complete code point (or check the partial prefix range
 * when lo < hi: the stacks are kept as they are). Returns the new state or -1. */
static int32_t step_cp(tern_grammar_matcher *m, int32_t si, uint32_t lo, uint32_t hi, int32_t pend_n,
                       int32_t pend_len, int32_t pend_v) {
    const tern_grammar *G = m->G;
    collect_reset(m);
    int32_t *blob = m->st[si].blob;
    int32_t cap = G_MAX_STACK_LEN;
    int32_t *stk = NULL;
    bool partial = pend_n > 0;
    FOR_STACKS(blob, i, len, s) {
        if (!len) continue;
        int32_t top = s[len - 1];
        int32_t k = G->el[top].v;
        if (partial) {
            if (meets_scalar(G, k, lo, hi)) collect_push(m, s, len);
            continue;
        }
        if (!class_has(G, k, lo)) continue;
        if (!stk && !(stk = malloc((size_t)cap * sizeof *stk))) { merr(m, TERN_ERR_NOMEM, "out of memory"); break; }
        gcopy(stk, s, (size_t)(len - 1) * sizeof *stk);
        int32_t n = len - 1;
        if (G->el[top + 1].type != GE_END) stk[n++] = top + 1;
        expand(m, stk, n, cap, 0);
        if (m->err) break;
    }
    free(stk);
    if (m->err) return -1;
    return intern(m, pend_n, pend_len, pend_v);
}

static int32_t trans(tern_grammar_matcher *m, int32_t si, uint8_t b) {
    gstate *s = &m->st[si];
    if (!s->trans) {
        if (!(s->trans = malloc(256 * sizeof *s->trans))) { merr(m, TERN_ERR_NOMEM, "out of memory"); return -1; }
        for (int i = 0; i < 256; i++) s->trans[i] = -2;
    }
    if (s->trans[b] != -2) return s->trans[b];
    int32_t pn = s->blob[0], plen = s->blob[1], pv = s->blob[2];
    int32_t r = -1;
    /* the smallest code point of each encoded length: a partial sequence's range
     * starts there, not below (E0 80.. and F0 80.. would be overlong forms, which can
     * never complete; allowing their lead bytes let a sampled E0 / F0 token walk into
     * a dead state) */
    static const uint32_t minv[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (pn == 0) {
        if (b < 0x80) r = step_cp(m, si, b, b, 0, 0, 0);
        else {
            int n = (b >> 5) == 6 ? 1 : (b >> 4) == 14 ? 2 : (b >> 3) == 30 ? 3 : -1;
            if (n > 0 && b >= 0xC2 && b <= 0xF4) {
                uint32_t v = n == 1 ? b & 31u : n == 2 ? b & 15u : b & 7u;
                uint32_t lo = v << (6 * n), hi = lo | ((1u << (6 * n)) - 1);
                if (lo < minv[n + 1]) lo = minv[n + 1];
                if (hi > 0x10FFFF) hi = 0x10FFFF;
                if (lo <= hi) r = step_cp(m, si, lo, hi, n, n + 1, (int32_t)v);
            }
        }
    } else if ((b & 0xC0) == 0x80) {
        uint32_t v = (uint32_t)pv << 6 | (b & 63u);
        int32_t left = pn - 1;
        if (left == 0) {
            if (v >= minv[plen] && v <= 0x10FFFF && !(v >= 0xD800 && v <= 0xDFFF)) r = step_cp(m, si, v, v, 0, 0, 0);
        } else {
            uint32_t lo = v << (6 * left), hi = lo | ((1u << (6 * left)) - 1);
            if (lo < minv[plen]) lo = minv[plen];
            if (hi > 0x10FFFF) hi = 0x10FFFF;
            if (lo <= hi) r = step_cp(m, si, lo, hi, left, plen, (int32_t)v);
        }
    }
    s = &m->st[si];                 /* st may have moved */
    if (m->err) return -1;
    s->trans[b] = r;
    return r;
}

static void matcher_clear_states(tern_grammar_matcher *m) {
    for (int32_t i = 0; i < m->n_st; i++) {
        free(m->st[i].blob);
        free(m->st[i].trans);
        free(m->st[i].mask);
    }
    m->n_st = 0;
    m->mask_bytes = 0;
    if (m->ht) memset(m->ht, 0xff, (size_t)m->ht_cap * sizeof *m->ht);
}

void tern_grammar_matcher_free(tern_grammar_matcher *m) {
    if (!m) return;
    matcher_clear_states(m);
    free(m->st);
    free(m->ht);
    free(m->walk);
    free(m->sbuf);
    free(m->soff);
    free(m->slen);
    free(m->tmp);
    free(m);
}

static int32_t start_state(tern_grammar_matcher *m) {
    const tern_grammar *G = m->G;
    collect_reset(m);
    int32_t r = G->root;
    int32_t *stk = malloc(G_MAX_STACK_LEN * sizeof *stk);
    if (!stk) { merr(m, TERN_ERR_NOMEM, "out of memory"); return -1; }
    for (int32_t a = 0; a < G->rule_nalt[r] && !m->err; a++) {
        int32_t sp = G->alt[G->rule_alt[r] + a], n = 0;
        if (G->el[sp].type != GE_END) stk[n++] = sp;
        expand(m, stk, n, G_MAX_STACK_LEN, 0);
    }
    free(stk);
    return intern(m, 0, 0, 0);
}

/* Re-intern the current state after a flush (its blob is saved first). */
static tern_status matcher_flush(tern_grammar_matcher *m) {
    gstate *c = &m->st[m->cur];
    int32_t n = c->blob_n;
    int32_t *saved = malloc((size_t)n * sizeof *saved);
    if (!saved) return tern_fail(TERN_ERR_NOMEM, "grammar: out of memory");
    gcopy(saved, c->blob, (size_t)n * sizeof *saved);
    matcher_clear_states(m);
    m->start = start_state(m);
    /* rebuild the current state's stacks from the saved blob */
    collect_reset(m);
    FOR_STACKS(saved, i, len, s) collect_push(m, s, len);
    m->cur = intern(m, saved[0], saved[1], saved[2]);
    free(saved);
    if (m->cur < 0 || m->start < 0) return m->err ? m->err : tern_fail(TERN_ERR_INTERNAL, "grammar: flush failed");
    return TERN_OK;
}

tern_status tern_grammar_matcher_new(const tern_grammar *G, const tern_token_trie *T, tern_grammar_matcher **out) {
    if (!out || !G) return tern_fail(TERN_ERR_INVALID_ARG, "tern_grammar_matcher_new: NULL argument");
    *out = NULL;
    tern_grammar_matcher *m = calloc(1, sizeof *m);
    if (!m) return tern_fail(TERN_ERR_NOMEM, "grammar: out of memory");
    m->G = G;
    m->T = T;
    m->ht_cap = 1024;
    m->ht = malloc((size_t)m->ht_cap * sizeof *m->ht);
    m->s_cap = 0;
    if (!m->ht) { tern_grammar_matcher_free(m); return tern_fail(TERN_ERR_NOMEM, "grammar: out of memory"); }
    memset(m->ht, 0xff, (size_t)m->ht_cap * sizeof *m->ht);
    m->start = m->cur = start_state(m);
    if (m->cur < 0) {
        tern_status st = m->err ? m->err : tern_fail(TERN_ERR_FORMAT, "grammar: the start rule matches nothing");
        tern_grammar_matcher_free(m);
        return st;
    }
    *out = m;
    return TERN_OK;
}

void tern_grammar_matcher_reset(tern_grammar_matcher *m) {
    if (m) m->cur = m->start;
}

bool tern_grammar_matcher_is_done(const tern_grammar_matcher *m) { return m && m->st[m->cur].accept; }

/* Feed bytes; on a rejection (or an error) the state is left unchanged. */
bool tern_grammar_matcher_accept_bytes(tern_grammar_matcher *m, const char *s, size_t n) {
    if (!m || (!s && n)) return false;
    if (m->n_st > G_MAX_STATES / 2 && matcher_flush(m)) return false;
    int32_t c = m->cur;
    for (size_t i = 0; i < n && c >= 0; i++) c = trans(m, c, (uint8_t)s[i]);
    if (m->err) { m->err = TERN_OK; return false; }
    if (c < 0) return false;
    m->cur = c;
    return true;
}

tern_status tern_grammar_matcher_accept_token(tern_grammar_matcher *m, const tern_tokenizer *t, int32_t id) {
    if (!m || !t) return tern_fail(TERN_ERR_INVALID_ARG, "tern_grammar_matcher_accept_token: NULL argument");
    if (tern_token_is_eog(t, id)) {
        if (m->st[m->cur].accept) return TERN_OK;
        return tern_fail(TERN_ERR_INVALID_ARG, "grammar: end of generation before the grammar is complete");
    }
    size_t n = 0;
    const char *b = tern_token_bytes(t, id, &n);
    if (!b) return tern_fail(TERN_ERR_RANGE, "grammar: token %d is not in the vocabulary", (int)id);
    m->err = TERN_OK;
    if (!tern_grammar_matcher_accept_bytes(m, b, n))
        return tern_fail(TERN_ERR_INVALID_ARG, "grammar: token %d does not continue the grammar", (int)id);
    return TERN_OK;
}

/* the allowed-token bitmap of the current state (cached) */
static const uint64_t *state_mask(tern_grammar_matcher *m) {
    const tern_token_trie *T = m->T;
    size_t words = ((size_t)T->n_vocab + 63) / 64;
    if (m->st[m->cur].mask) return m->st[m->cur].mask;
    if (m->n_st > G_MAX_STATES / 2 && matcher_flush(m)) return NULL;
    uint64_t *bits = calloc(words, sizeof *bits);
    if (!bits) { merr(m, TERN_ERR_NOMEM, "out of memory"); return NULL; }
    if (!m->walk && !(m->walk = malloc(((size_t)T->max_depth + 2) * sizeof *m->walk))) {
        free(bits);
        merr(m, TERN_ERR_NOMEM, "out of memory");
        return NULL;
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        m->err = TERN_OK;
        memset(bits, 0, words * sizeof *bits);
        int32_t *w = m->walk;
        w[0] = m->cur;
        for (int32_t i = 0; i < T->n_nodes;) {
            int32_t ns = trans(m, w[T->depth[i] - 1], T->byte[i]);
            if (ns < 0) {
                if (m->err) break;
                i = T->skip[i];
                continue;
            }
            w[T->depth[i]] = ns;
            for (int32_t k = 0; k < T->tok_n[i]; k++) {
                int32_t id = T->ids[T->tok_begin[i] + k];
                bits[id >> 6] |= 1ull << (id & 63);
            }
            i++;
        }
        if (!m->err) break;
        /* too many states for one walk: flush and try once more from a clean table */
        if (attempt == 0 && m->err == TERN_ERR_UNSUPPORTED) {
            tern_clear_error();
            m->err = TERN_OK;
            if (matcher_flush(m)) break;
            continue;
        }
        break;
    }
    if (m->err) { free(bits); return NULL; }
    if (m->st[m->cur].accept)
        for (int32_t k = 0; k < T->n_eog; k++)
            if (T->eog[k] < T->n_vocab) bits[T->eog[k] >> 6] |= 1ull << (T->eog[k] & 63);
    if (m->mask_bytes + words * 8 <= G_MASK_CACHE_BYTES) {
        m->st[m->cur].mask = bits;
        m->mask_bytes += words * 8;
        return bits;
    }
    /* over the cache budget: keep it in the scratch of the current state anyway, freed on flush */
    m->st[m->cur].mask = bits;
    m->mask_bytes += words * 8;
    return bits;
}

tern_status tern_grammar_matcher_mask(tern_grammar_matcher *m, float *logits, int n_vocab, int *n_allowed) {
    if (!m || !logits) return tern_fail(TERN_ERR_INVALID_ARG, "tern_grammar_matcher_mask: NULL argument");
    if (!m->T) return tern_fail(TERN_ERR_INVALID_ARG, "tern_grammar_matcher_mask: the matcher has no vocabulary");
    if (m->mask_bytes > G_MASK_CACHE_BYTES && !m->st[m->cur].mask) {
        tern_status st = matcher_flush(m);
        if (st) return st;
    }
    m->err = TERN_OK;
    const uint64_t *bits = state_mask(m);
    if (!bits) {
        tern_status st = m->err ? m->err : tern_fail(TERN_ERR_NOMEM, "grammar: out of memory");
        m->err = TERN_OK;
        return st;
    }
    int lim = n_vocab < m->T->n_vocab ? n_vocab : m->T->n_vocab;
    int allowed = 0;
    int i = 0;
    for (; i + 64 <= lim; i += 64) {
        uint64_t w = bits[i >> 6];
        if (w == ~0ull) { allowed += 64; continue; }
        if (!w) { for (int k = 0; k < 64; k++) logits[i + k] = -INFINITY; continue; }
        for (int k = 0; k < 64; k++) {
            if (w >> k & 1) allowed++;
            else logits[i + k] = -INFINITY;
        }
    }
    for (; i < lim; i++) {
        if (bits[i >> 6] >> (i & 63) & 1) allowed++;
        else logits[i] = -INFINITY;
    }
    for (; i < n_vocab; i++) logits[i] = -INFINITY;
    if (n_allowed) *n_allowed = allowed;
    if (!allowed) return tern_fail(TERN_ERR_INVALID_ARG, "grammar: no token of the vocabulary can continue the grammar here");
    return TERN_OK;
}
