/*
 * grammar_internal.h - the compiled GBNF grammar that grammar.c (the parser)
 * builds and grammar_match.c (the token trie, the matcher and the mask) reads;
 * the whole design is told at the top of grammar.c. Library-internal.
 */
#ifndef TERN_TEXT_GRAMMAR_INTERNAL_H
#define TERN_TEXT_GRAMMAR_INTERNAL_H

#include "core/common.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* memcpy/memcmp for counts that may be 0 with a NULL pointer (an empty list): the C
 * library's are undefined on NULL even for 0 bytes. */
static inline void gcopy(void *d, const void *s, size_t n) {
    if (n) memcpy(d, s, n);
}
static inline int gcmp(const void *a, const void *b, size_t n) { return n ? memcmp(a, b, n) : 0; }

/* ------------------------------------------------------------- limits */
#define G_MAX_ELEMS (1 << 20)       /* compiled elements */
#define G_MAX_REPEAT 4096           /* m, n of {m,n} */
#define G_MAX_DEPTH 128             /* nesting of ( ) */
#define G_MAX_STACKS 4096           /* live stacks in one state */
#define G_MAX_STACK_LEN 4096        /* elements on one stack */
#define G_MAX_STATES 16384          /* interned states before the caches are flushed */
#define G_MASK_CACHE_BYTES (64u << 20)

enum { GE_END = 0, GE_CHAR = 1, GE_REF = 2 };
typedef struct { int32_t type, v; } gelem;
typedef struct { uint32_t lo, hi; } grange;
typedef struct { int32_t first, n; bool neg; } gclass;

struct tern_grammar {
    gelem *el;                      /* flat: alternatives, each ended by END */
    int32_t n_el;
    int32_t *alt;                   /* start of each alternative in el */
    int32_t *rule_alt, *rule_nalt;  /* per rule: first index into alt, count */
    int32_t n_rules, n_alt;
    grange *rg;
    int32_t n_rg;
    gclass *cl;
    int32_t n_cl;
    int32_t root;
};

/* Make room for `need` elements in a realloc'd array of *cap (doubling from 8). */
static inline bool grow(void **p, int32_t *cap, int32_t need, size_t elem) {
    if (need <= *cap) return true;
    int32_t nc = *cap ? *cap : 8;
    while (nc < need) {
        if (nc > INT32_MAX / 2) return false;
        nc *= 2;
    }
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q) return false;
    *p = q;
    *cap = nc;
    return true;
}

#endif
