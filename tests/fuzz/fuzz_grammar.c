/*
 * fuzz_grammar.c - libFuzzer target for the GBNF parser and matcher
 * (src/text/grammar.c, grammar_match.c) and the JSON Schema converter (src/text/json_schema.c).
 * Input: grammar text, a 0 byte, then a string to match. The grammar must parse
 * or fail cleanly; when it parses, the string is fed whole and then byte by byte
 * (the two must agree on acceptance and completion), and a rejected byte must
 * leave the state unchanged. If the first byte is '{', the grammar part is also
 * tried as a JSON Schema, and a converted schema must always parse as a grammar.
 */
#include "tern.h"

#include <stdlib.h>
#include <string.h>

static void match(const tern_grammar *G, const char *s, size_t n) {
    tern_grammar_matcher *a = NULL, *b = NULL;
    if (tern_grammar_matcher_new(G, NULL, &a)) return;
    if (tern_grammar_matcher_new(G, NULL, &b)) { tern_grammar_matcher_free(a); return; }
    bool whole = tern_grammar_matcher_accept_bytes(a, s, n);
    bool each = true;
    size_t i = 0;
    for (; i < n; i++)
        if (!tern_grammar_matcher_accept_bytes(b, s + i, 1)) { each = false; break; }
    /* a byte-wise failure may be a resource limit; acceptance must never differ the other way */
    if (each && !whole) __builtin_trap();
    if (whole && each && tern_grammar_matcher_is_done(a) != tern_grammar_matcher_is_done(b)) __builtin_trap();
    if (!each) {
        /* the refused byte changed nothing: the rest of the prefix still works from here */
        bool done = tern_grammar_matcher_is_done(b);
        if (tern_grammar_matcher_accept_bytes(b, s + i, 1)) __builtin_trap();
        if (tern_grammar_matcher_is_done(b) != done) __builtin_trap();
    }
    tern_grammar_matcher_free(a);
    tern_grammar_matcher_free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *d = (const char *)data;
    const char *z = memchr(d, 0, size);
    size_t gl = z ? (size_t)(z - d) : size;
    const char *s = z ? z + 1 : "";
    size_t sl = z ? size - gl - 1 : 0;
    tern_grammar *G = NULL;
    if (!tern_grammar_parse(d, gl, NULL, &G)) match(G, s, sl);
    tern_grammar_free(G);
    if (gl && d[0] == '{') {
        tern_str g = {0};
        if (!tern_json_schema_to_grammar(d, gl, NULL, &g)) {
            tern_grammar *S = NULL;
            if (tern_grammar_parse(g.data, g.len, NULL, &S)) __builtin_trap();
            match(S, s, sl);
            tern_grammar_free(S);
        }
        tern_str_free(&g);
    }
    return 0;
}
