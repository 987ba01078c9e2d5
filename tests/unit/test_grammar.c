/*
 * test_grammar.c - the GBNF parser and matcher (src/text/grammar.c, grammar_match.c), the JSON
 * Schema converter (src/text/json_schema.c) and the token mask on the embedded
 * model's vocabulary: every allowed token must be accepted by the byte matcher
 * and every refused one rejected (an independent per-token check), plus the
 * mask's cost per step.
 */
#include "check.h"
#include "tern.h"

#include <stdint.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static tern_grammar *parse(const char *g) {
    tern_grammar *G = NULL;
    if (tern_grammar_parse(g, strlen(g), NULL, &G)) return NULL;
    return G;
}

/* does grammar g accept the whole of s (and is it complete there)? */
static int full(const char *g, const char *s, size_t n) {
    tern_grammar *G = parse(g);
    if (!G) return -1;
    tern_grammar_matcher *m = NULL;
    int r = -1;
    if (!tern_grammar_matcher_new(G, NULL, &m)) r = tern_grammar_matcher_accept_bytes(m, s, n) && tern_grammar_matcher_is_done(m);
    tern_grammar_matcher_free(m);
    tern_grammar_free(G);
    return r;
}
#define ACCEPT(g, s) CHECK(full(g, s, strlen(s)) == 1)
#define REJECT(g, s) CHECK(full(g, s, strlen(s)) == 0)

/* a prefix that can still be completed (accepted, not done) */
static int prefix_ok(const char *g, const char *s) {
    tern_grammar *G = parse(g);
    if (!G) return -1;
    tern_grammar_matcher *m = NULL;
    int r = -1;
    if (!tern_grammar_matcher_new(G, NULL, &m)) r = tern_grammar_matcher_accept_bytes(m, s, strlen(s));
    tern_grammar_matcher_free(m);
    tern_grammar_free(G);
    return r;
}

TEST(literals_and_alternation) {
    ACCEPT("root ::= \"hello\"", "hello");
    REJECT("root ::= \"hello\"", "hell");
    REJECT("root ::= \"hello\"", "hello!");
    REJECT("root ::= \"hello\"", "");
    const char *g = "root ::= \"cat\" | \"dog\" | \"cow\" \"boy\"";
    ACCEPT(g, "cat");
    ACCEPT(g, "dog");
    ACCEPT(g, "cowboy");
    REJECT(g, "cow");
    REJECT(g, "catdog");
    CHECK(prefix_ok(g, "co") == 1);
    CHECK(prefix_ok(g, "cx") == 0);
    /* escapes */
    ACCEPT("root ::= \"a\\nb\\t\\\"\\\\\"", "a\nb\t\"\\");
    ACCEPT("root ::= \"\\x41\\u00e9\\U0001F600\"", "A\xc3\xa9\xf0\x9f\x98\x80");
    /* empty alternative, comments, rules across lines */
    g = "# a comment\nroot ::= x y # trailing\nx ::= \"a\" |\n  \"b\"\ny ::= | \"c\"\n";
    ACCEPT(g, "a");
    ACCEPT(g, "bc");
    REJECT(g, "c");
}

TEST(repetition) {
    const char *g = "root ::= \"a\"* \"b\"+ \"c\"?";
    ACCEPT(g, "b");
    ACCEPT(g, "aaabbbc");
    ACCEPT(g, "bc");
    REJECT(g, "aaa");
    REJECT(g, "abcc");
    REJECT(g, "");
    g = "root ::= [0-9]{2,4}";
    REJECT(g, "1");
    ACCEPT(g, "12");
    ACCEPT(g, "1234");
    REJECT(g, "12345");
    g = "root ::= \"x\"{3}";
    ACCEPT(g, "xxx");
    REJECT(g, "xx");
    REJECT(g, "xxxx");
    g = "root ::= (\"ab\" | \"c\"){2,} \"!\"";
    ACCEPT(g, "abc!");
    ACCEPT(g, "ccab!");
    REJECT(g, "ab!");
    /* the repetition applies to the whole literal */
    ACCEPT("root ::= \"ab\"*", "ababab");
    REJECT("root ::= \"ab\"*", "aba");
    ACCEPT("root ::= \"ab\"*", "");
    /* nested groups with repetition: ambiguous but fine; (x*)* is left recursion once desugared */
    CHECK(full("root ::= ((\"a\")*)* \"b\"", "b", 1) == -1);
    g = "root ::= ((\"a\" | \"aa\")+)* \"b\"";
    ACCEPT(g, "aaaaab");
    ACCEPT(g, "b");
}

TEST(classes) {
    const char *g = "root ::= [a-cx-z_]+";
    ACCEPT(g, "abzx_");
    REJECT(g, "abd");
    g = "root ::= [^a-c\\n]+";
    ACCEPT(g, "xyz!");
    REJECT(g, "xya");
    REJECT(g, "x\n");
    ACCEPT(g, "\xc3\xa9\xe4\xb8\xad");         /* non-ASCII is outside a-c */
    g = "root ::= [\\u00e0-\\u00ff]";
    ACCEPT(g, "\xc3\xa9");                      /* é */
    REJECT(g, "\xc3\x80");                      /* À: below the range */
    REJECT(g, "e");
    CHECK(prefix_ok(g, "\xc3") == 1);           /* a lead byte that can still become é */
    CHECK(prefix_ok(g, "\xe4") == 0);           /* 3-byte sequences are all above the range */
    ACCEPT("root ::= [-a]+", "-a-");            /* '-' first or last is literal */
    ACCEPT("root ::= [a-]+", "a-");
    ACCEPT("root ::= .+", "any\xe2\x82\xac thing");
    REJECT("root ::= .", "\xff");               /* invalid UTF-8 is never matched */
    REJECT("root ::= .", "\xc0\xaf");           /* overlong */
    ACCEPT("root ::= [\\]\\[]+", "][");
    /* UTF-8 literal in the grammar */
    ACCEPT("root ::= \"\xe4\xb8\xad\xe6\x96\x87\"", "\xe4\xb8\xad\xe6\x96\x87");
    REJECT("root ::= \"\xe4\xb8\xad\"", "\xe4\xb8");
    /* a partial sequence is a prefix only when it can still become a code point the
     * grammar allows: not the overlong starts E0 80..9F / F0 80..8F (which once let a
     * sampled E0 or F0 token into a dead state after "ci" of a literal "city"), not a
     * surrogate (ED A0..BF), not above U+10FFFF (F4 90..) */
    CHECK(prefix_ok("root ::= \"city\"", "ci") == 1);
    CHECK(prefix_ok("root ::= \"city\"", "ci\xe0") == 0);
    CHECK(prefix_ok("root ::= \"city\"", "ci\xf0") == 0);
    CHECK(prefix_ok("root ::= [a-z]+", "\xe0") == 0);
    CHECK(prefix_ok("root ::= [^\"]+", "\xe0") == 1);       /* U+0800.. can follow */
    CHECK(prefix_ok("root ::= [^\"]+", "\xe0\x80") == 0);   /* overlong */
    CHECK(prefix_ok("root ::= [^\"]+", "\xe0\xa0") == 1);
    CHECK(prefix_ok("root ::= [^\"]+", "\xf0\x8f") == 0);   /* overlong */
    CHECK(prefix_ok("root ::= [^\"]+", "\xf0\x90") == 1);
    CHECK(prefix_ok("root ::= [^\"]+", "\xed\xa0") == 0);   /* a surrogate */
    CHECK(prefix_ok("root ::= [^\"]+", "\xed\x9f") == 1);
    CHECK(prefix_ok("root ::= [^\"]+", "\xf4\x90") == 0);   /* above U+10FFFF */
    CHECK(prefix_ok("root ::= [\\u0000-\\u07ff]", "\xe0") == 0); /* 3-byte forms start at U+0800 */
    ACCEPT("root ::= [^\"]+", "\xe0\xa0\x80\xf0\x90\x80\x80\xed\x9f\xbf");
}

TEST(recursion) {
    const char *g = "root ::= \"(\" root \")\" | \"\"";
    ACCEPT(g, "((()))");
    ACCEPT(g, "");
    REJECT(g, "(()");
    REJECT(g, "())");
    /* a JSON-ish list */
    g = "root ::= \"[\" (v (\",\" v)*)? \"]\"\nv ::= [0-9]+ | root";
    ACCEPT(g, "[1,[2,[]],33]");
    REJECT(g, "[1,]");
    REJECT(g, "[1 2]");
}

TEST(parse_errors) {
    tern_grammar *G = NULL;
    static const char *const bad[] = {
        "root ::= undefined-rule",  "root ::= \"unterminated", "root ::= [a-", "root ::= (\"a\"",
        "root ::= \"a\" )",         "root := \"a\"",           "root ::= *",  "root ::= \"\\q\"",
        "root ::= [z-a]",           "x ::= \"a\"",              "root ::= \"a\"\nroot ::= \"b\"",
        "root ::= root \"a\"",      "root ::= a\na ::= b? root", "root ::= \"a\"{5,2}",
        "root ::= \"a\"{99999}",    "root ::= \"\xff\"",         "root ::= \"a\"{",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tern_status st = tern_grammar_parse(bad[i], strlen(bad[i]), NULL, &G);
        if (st == TERN_OK) fprintf(stderr, "  accepted bad grammar: %s\n", bad[i]);
        CHECK(st != TERN_OK && G == NULL);
        tern_grammar_free(G);
        G = NULL;
    }
    /* the message names the line */
    CHECK(tern_grammar_parse("root ::= \"a\"\nb ::= [", 20, NULL, &G) == TERN_ERR_FORMAT);
    CHECK(strstr(tern_last_error(), "line 2") != NULL);
    /* another start rule */
    CHECK(tern_grammar_parse("a ::= \"x\"", 9, "a", &G) == TERN_OK);
    tern_grammar_free(G);
    /* a huge expansion is refused, not built */
    char huge[1024] = "root ::=";
    for (int i = 0; i < 30; i++) strcat(huge, " \"abcdefghij\"{4000}");
    CHECK(tern_grammar_parse(huge, strlen(huge), NULL, &G) != TERN_OK);
    CHECK(strstr(tern_last_error(), "too large") != NULL);
}

static int schema_accepts(const char *schema, const char *json) {
    tern_str g = {0};
    if (tern_json_schema_to_grammar(schema, strlen(schema), NULL, &g)) { fprintf(stderr, "  schema: %s\n", tern_last_error()); return -1; }
    int r = full(g.data, json, strlen(json));
    if (r < 0) fprintf(stderr, "  grammar: %s\n%s\n", tern_last_error(), g.data);
    tern_str_free(&g);
    return r;
}

TEST(json_schema) {
    const char *s = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
                    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]},\"maxItems\":2}},"
                    "\"required\":[\"name\"]}";
    CHECK(schema_accepts(s, "{\"name\":\"x\"}") == 1);
    CHECK(schema_accepts(s, "{ \"name\": \"J\\u00e9 \\\"q\\\"\", \"age\": -12, \"tags\": [\"a\", \"b\"] }") == 1);
    CHECK(schema_accepts(s, "{\"name\":\"x\",\"tags\":[]}") == 1);
    CHECK(schema_accepts(s, "{\"age\":1}") == 0);                       /* required missing */
    CHECK(schema_accepts(s, "{\"name\":\"x\",\"age\":1.5}") == 0);      /* not an integer */
    CHECK(schema_accepts(s, "{\"name\":\"x\",\"tags\":[\"a\",\"b\",\"a\"]}") == 0);   /* maxItems */
    CHECK(schema_accepts(s, "{\"name\":\"x\",\"tags\":[\"c\"]}") == 0); /* enum */
    CHECK(schema_accepts(s, "{\"name\":\"x\",}") == 0);
    CHECK(schema_accepts(s, "{\"name\":\"x\",\"extra\":1}") == 0);
    CHECK(schema_accepts(s, "{\"name\":\"a\nb\"}") == 0);              /* raw control char */
    /* all optional: empty object, any subset in order */
    const char *o = "{\"properties\":{\"a\":{\"type\":\"boolean\"},\"b\":{\"type\":\"null\"},\"c\":{\"const\":7}}}";
    CHECK(schema_accepts(o, "{}") == 1);
    CHECK(schema_accepts(o, "{\"b\":null}") == 1);
    CHECK(schema_accepts(o, "{\"a\":true,\"c\":7}") == 1);
    CHECK(schema_accepts(o, "{\"c\":8}") == 0);
    CHECK(schema_accepts(o, "{,\"a\":true}") == 0);
    /* anyOf, type lists, numbers, $ref recursion, strings with bounds */
    CHECK(schema_accepts("{\"anyOf\":[{\"type\":\"number\"},{\"type\":\"string\",\"maxLength\":2}]}", "-1.5e+3") == 1);
    CHECK(schema_accepts("{\"anyOf\":[{\"type\":\"number\"},{\"type\":\"string\",\"maxLength\":2}]}", "\"abc\"") == 0);
    CHECK(schema_accepts("{\"type\":[\"integer\",\"null\"]}", "null") == 1);
    CHECK(schema_accepts("{\"type\":[\"integer\",\"null\"]}", "01") == 0);
    const char *tree = "{\"$ref\":\"#/$defs/node\",\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{"
                       "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"kids\"]}}}";
    CHECK(schema_accepts(tree, "{\"kids\":[{\"kids\":[]},{\"kids\":[{\"kids\":[]}]}]}") == 1);
    CHECK(schema_accepts(tree, "{\"kids\":[{}]}") == 0);
    CHECK(schema_accepts("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "[\"a\", 1]") == 1);
    CHECK(schema_accepts("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2}", "[1]") == 0);
    CHECK(schema_accepts("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2}", "[1,2,3]") == 1);
    CHECK(schema_accepts("{}", "[1,{\"a\":[true,null]},\"s\"]") == 1);
    CHECK(schema_accepts("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", "{\"x\":1,\"y\":2}") == 1);
    CHECK(schema_accepts("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", "{\"x\":\"1\"}") == 0);
    /* unsupported keywords are named */
    tern_str g = {0};
    const char *pat = "{\"type\":\"string\",\"pattern\":\"^a\"}";
    CHECK(tern_json_schema_to_grammar(pat, strlen(pat), NULL, &g) == TERN_ERR_UNSUPPORTED);
    CHECK(strstr(tern_last_error(), "pattern") != NULL);
    tern_str_free(&g);
    const char *mn = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":0}}}";
    CHECK(tern_json_schema_to_grammar(mn, strlen(mn), NULL, &g) == TERN_ERR_UNSUPPORTED);
    CHECK(strstr(tern_last_error(), "minimum") != NULL);
    tern_str_free(&g);
    CHECK(tern_json_schema_to_grammar("{\"type\":\"strin\"}", 16, NULL, &g) == TERN_ERR_UNSUPPORTED);
    tern_str_free(&g);
    CHECK(tern_json_schema_to_grammar("{bad json", 9, NULL, &g) == TERN_ERR_FORMAT);
    tern_str_free(&g);
    CHECK(tern_json_schema_to_grammar("{\"enum\":[\"\xab\"]}", 13, NULL, &g) == TERN_ERR_FORMAT);   /* invalid UTF-8 */
    tern_str_free(&g);
}

/* ------------------------------------------------------------ token mask */

static tern_tokenizer *T;

static bool load_tok(void) {
    const char *src = getenv("TERN_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/tern-default.gguf", src ? src : ".");
    if (access(path, R_OK)) return false;
    return tern_tokenizer_load(path, &T) == TERN_OK;
}

/* mask == the per-token byte check, for every token, along a JSON text */
static void mask_check(void) {
    const char *s = "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"},"
                    "\"ok\":{\"type\":\"boolean\"}},\"required\":[\"city\",\"n\",\"ok\"]}";
    tern_str g = {0};
    CHECK(tern_json_schema_to_grammar(s, strlen(s), NULL, &g) == TERN_OK);
    tern_grammar *G = NULL;
    CHECK(tern_grammar_parse(g.data, g.len, NULL, &G) == TERN_OK);
    int nv = tern_tokenizer_n_vocab(T);
    tern_token_trie *V = NULL;
    double t0 = now_s();
    CHECK(tern_token_trie_new(T, nv, &V) == TERN_OK);
    double t_trie = now_s() - t0;
    tern_grammar_matcher *m = NULL, *chk = NULL;
    CHECK(tern_grammar_matcher_new(G, V, &m) == TERN_OK);
    CHECK(tern_grammar_matcher_new(G, NULL, &chk) == TERN_OK);
    if (!m || !chk) return;
    const char *text = "{\"city\": \"Z\xc3\xbcrich\", \"n\": 42, \"ok\": true}";
    tern_tokens ids = {0};
    CHECK(tern_tokenize(T, text, strlen(text), false, &ids) == TERN_OK);
    float *lg = malloc((size_t)nv * sizeof *lg);
    int checked = 0, bad = 0;
    double t_miss = 0, t_hit = 0;
    int n_miss = 0, n_hit = 0;
    for (size_t k = 0; k <= ids.n; k++) {
        for (int pass = 0; pass < 2; pass++) {      /* first: a walk (maybe cached), second: cached */
            for (int i = 0; i < nv; i++) lg[i] = 0;
            double a = now_s();
            int allowed = 0;
            CHECK(tern_grammar_matcher_mask(m, lg, nv, &allowed) == TERN_OK);
            double dt = now_s() - a;
            if (pass) { t_hit += dt; n_hit++; } else { t_miss += dt; n_miss++; }
            CHECK(allowed > 0);
        }
        /* every token: allowed iff the byte matcher (from the same prefix) accepts its bytes */
        if (k % 4 == 0 || k == ids.n) {
            for (int id = 0; id < nv; id++) {
                size_t bl = 0;
                const char *b = tern_token_bytes(T, id, &bl);
                bool allow = isfinite(lg[id]);
                bool want;
                tern_token_type ty = tern_token_get_type(T, id);
                if (tern_token_is_eog(T, id)) want = tern_grammar_matcher_is_done(chk);
                else if (ty == TERN_TOKEN_CONTROL || ty == TERN_TOKEN_UNUSED || ty == TERN_TOKEN_UNKNOWN || !bl) want = false;
                else {
                    /* a copy of the checker's state: feed, then rewind by re-feeding the prefix */
                    tern_grammar_matcher_reset(chk);
                    for (size_t q = 0; q < k; q++) {
                        size_t pl = 0;
                        const char *pb = tern_token_bytes(T, ids.ids[q], &pl);
                        tern_grammar_matcher_accept_bytes(chk, pb, pl);
                    }
                    want = tern_grammar_matcher_accept_bytes(chk, b, bl);
                }
                if (allow != want && bad++ < 5) fprintf(stderr, "  step %zu token %d: mask %d, bytes %d\n", k, id, allow, want);
                checked++;
            }
            tern_grammar_matcher_reset(chk);
            for (size_t q = 0; q < k; q++) {
                size_t pl = 0;
                const char *pb = tern_token_bytes(T, ids.ids[q], &pl);
                tern_grammar_matcher_accept_bytes(chk, pb, pl);
            }
        }
        if (k < ids.n) {
            CHECK(isfinite(lg[ids.ids[k]]));       /* the text's own next token is allowed */
            CHECK(tern_grammar_matcher_accept_token(m, T, ids.ids[k]) == TERN_OK);
        }
    }
    CHECK(tern_grammar_matcher_is_done(m));
    CHECK(bad == 0);
    fprintf(stderr, "  vocab %d: trie %.1f ms; mask per step: first %.3f ms, cached %.3f ms (%d steps, %d tokens checked; noisy machine)\n",
            nv, t_trie * 1e3, t_miss * 1e3 / n_miss, t_hit * 1e3 / n_hit, n_miss, checked);
    free(lg);
    tern_tokens_free(&ids);
    tern_grammar_matcher_free(m);
    tern_grammar_matcher_free(chk);
    tern_token_trie_free(V);
    tern_grammar_free(G);
    tern_str_free(&g);
}

TEST(mask_matches_bytes) {
    if (!T && !load_tok()) SKIP("models/tern-default.gguf unavailable");
    mask_check();
}

/* the real Qwen3.5 vocabulary (248,320 ids) when test_tokenizer_oracle_real has
 * built it ($TERN_VOCAB_CACHE or /tmp/tern-vocab-UID/vocab-qwen35.gguf) */
TEST(mask_real_vocab) {
    char path[1024];
    const char *c = getenv("TERN_VOCAB_CACHE");
    if (c) snprintf(path, sizeof path, "%s/vocab-qwen35.gguf", c);
    else snprintf(path, sizeof path, "/tmp/tern-vocab-%u/vocab-qwen35.gguf", (unsigned)getuid());
    if (access(path, R_OK)) SKIP_OPTIONAL("no real Qwen3.5 vocabulary built (test_tokenizer_oracle_real makes it)");
    tern_tokenizer *keep = T;
    T = NULL;
    if (tern_tokenizer_load(path, &T)) { T = keep; SKIP_OPTIONAL("cannot load the Qwen3.5 vocabulary"); }
    mask_check();
    tern_tokenizer_free(T);
    T = keep;
}

int main(void) {
    RUN(literals_and_alternation);
    RUN(repetition);
    RUN(classes);
    RUN(recursion);
    RUN(parse_errors);
    RUN(json_schema);
    RUN(mask_matches_bytes);
    RUN(mask_real_vocab);
    tern_tokenizer_free(T);
    return check_summary();
}
