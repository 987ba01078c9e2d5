/*
 * test_first_program.c - the "first program" of include/tern.h's opening comment is
 * real code: the block between the markers below is that comment's text (checked line
 * by line against the header at run time, so the two cannot drift apart), compiled
 * here with main renamed, and run on the embedded model (models/tern-default.gguf,
 * found through $TERN_SOURCE_DIR as the other default-model tests do). Its greedy
 * reply must equal tern_generate's with the same prompt, sampler and 16 tokens.
 */
#include "check.h"
#include "tern.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define main first_program
/* >>> first program */
#include <stdio.h>
#include <string.h>
#include "tern.h"

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "model.gguf";
    const char *prompt = "The capital of France is";
    tern_model *m = NULL;
    tern_tokenizer *tok = NULL;
    tern_session *s = NULL;
    tern_sampler *smp = NULL;
    tern_tokens ids = {0};
    tern_str text = {0};
    tern_model_params mp;
    tern_model_params_default(&mp);
    tern_sampler_params sp;
    tern_sampler_params_default(&sp);
    sp.temperature = 0;                                  // greedy
    tern_status st = tern_model_load(path, &mp, &m);
    if (st == TERN_OK) st = tern_tokenizer_load(path, &tok);
    if (st == TERN_OK) st = tern_session_new(m, NULL, &s);  // NULL: default params
    if (st == TERN_OK) st = tern_sampler_new(&sp, tern_model_get_info(m)->n_vocab, &smp);
    if (st == TERN_OK) st = tern_tokenize(tok, prompt, strlen(prompt), false, &ids);
    if (st == TERN_OK) st = tern_session_eval(s, ids.ids, ids.n, NULL);
    for (int i = 0; st == TERN_OK && i < 16; i++) {
        int32_t id = tern_sampler_sample(smp, tern_session_logits(s));
        if (tern_token_is_eog(tok, id)) break;
        st = tern_detokenize(tok, &id, 1, &text);
        if (st == TERN_OK) st = tern_session_eval(s, &id, 1, NULL);
    }
    if (st == TERN_OK) printf("%s%s\n", prompt, text.data ? text.data : "");
    else fprintf(stderr, "%s: %s\n", tern_status_str(st), tern_last_error());
    tern_str_free(&text);
    tern_tokens_free(&ids);
    tern_sampler_free(smp);
    tern_session_free(s);
    tern_tokenizer_free(tok);
    tern_model_free(m);
    return st == TERN_OK ? 0 : 1;
}
/* <<< first program */
#undef main

/* The code lines of the header's block: after "A first program", the lines
 * " *     X" (X kept) and " *" (an empty line) up to the first other line. */
static char *header_block(const char *path) {
    char *text = NULL;
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    text = calloc(cap, 1);
    char line[512];
    bool in = false, seen = false;
    while (text && fgets(line, sizeof line, f)) {
        if (!seen) {
            seen = strstr(line, "A first program") != NULL;
            continue;
        }
        const char *add = NULL;
        if (!strncmp(line, " *     ", 7)) add = line + 7, in = true;
        else if (in && !strcmp(line, " *\n")) add = "\n";
        else if (in) break;
        if (add && n + strlen(add) + 1 < cap) memcpy(text + n, add, strlen(add) + 1), n += strlen(add);
    }
    fclose(f);
    while (text && n > 0 && text[n - 1] == '\n' && n > 1 && text[n - 2] == '\n') text[--n] = 0;
    return text;
}

/* The lines between this file's markers. */
static char *file_block(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *text = calloc(cap, 1), line[512];
    bool in = false;
    while (text && fgets(line, sizeof line, f)) {
        if (strstr(line, "/* >>> first program */")) { in = true; continue; }
        if (strstr(line, "/* <<< first program */")) break;
        if (in && n + strlen(line) + 1 < cap) memcpy(text + n, line, strlen(line) + 1), n += strlen(line);
    }
    fclose(f);
    return text;
}

static char g_src[1024];

TEST(header_comment_is_this_program) {
    char h[1200], t[1200];
    snprintf(h, sizeof h, "%s/include/tern.h", g_src);
    snprintf(t, sizeof t, "%s/tests/unit/test_first_program.c", g_src);
    char *a = header_block(h), *b = file_block(t);
    CHECK_MSG(a && b && strlen(a) > 500, "could not read the blocks of %s and %s", h, t);
    if (a && b) {
        size_t i = 0;
        while (a[i] && a[i] == b[i]) i++;
        CHECK_MSG(!strcmp(a, b), "tern.h's first program and this file differ at byte %zu: \"%.40s\" vs \"%.40s\"",
                  i, a + i, b + i);
    }
    free(a), free(b);
}

TEST(runs_on_the_embedded_model) {
    char model[1200];
    snprintf(model, sizeof model, "%s/models/tern-default.gguf", g_src);
    if (access(model, R_OK) != 0) SKIP("no embedded model at %s", model);
    /* run it with stdout in a temporary file */
    FILE *tmp = tmpfile();
    CHECK(tmp != NULL);
    if (!tmp) return;
    fflush(stdout);
    int saved = dup(1);
    dup2(fileno(tmp), 1);
    char *argv[] = {"first_program", model, NULL};
    int rc = first_program(2, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    CHECK_EQ_INT(rc, 0);
    char out[4096] = {0};
    rewind(tmp);
    size_t n = fread(out, 1, sizeof out - 1, tmp);
    fclose(tmp);
    out[n] = 0;
    fprintf(stderr, "  first program printed: %s", out);
    /* the same reply from tern_generate */
    const char *prompt = "The capital of France is";
    tern_model_params mp;
    tern_model_params_default(&mp);
    tern_model *m = NULL;
    tern_tokenizer *tok = NULL;
    tern_session *s = NULL;
    tern_sampler *smp = NULL;
    tern_tokens ids = {0};
    tern_sampler_params sp;
    tern_sampler_params_default(&sp);
    sp.temperature = 0;
    CHECK(tern_model_load(model, &mp, &m) == TERN_OK);
    CHECK(tern_tokenizer_load(model, &tok) == TERN_OK);
    if (m && tok) {
        CHECK(tern_session_new(m, NULL, &s) == TERN_OK);
        CHECK(tern_sampler_new(&sp, tern_model_get_info(m)->n_vocab, &smp) == TERN_OK);
        CHECK(tern_tokenize(tok, prompt, strlen(prompt), false, &ids) == TERN_OK);
        tern_gen_params gp = {.max_tokens = 16};
        tern_gen_result r = {0};
        CHECK(tern_generate(s, tok, smp, ids.ids, ids.n, &gp, &r) == TERN_OK);
        char want[4096];
        snprintf(want, sizeof want, "%s%s\n", prompt, r.text.data ? r.text.data : "");
        CHECK_MSG(!strcmp(out, want), "first program: \"%s\", tern_generate: \"%s\"", out, want);
        CHECK(strlen(out) > strlen(prompt) + 1); /* it generated something */
        tern_gen_result_free(&r);
    }
    tern_tokens_free(&ids);
    tern_sampler_free(smp);
    tern_session_free(s);
    tern_tokenizer_free(tok);
    tern_model_free(m);
}

int main(void) {
    const char *src = getenv("TERN_SOURCE_DIR");
    if (!src || !*src) {
        fprintf(stderr, "\n*** TERN_SOURCE_DIR not set: the first-program tests are SKIPPED ***\n\n");
        return 77;
    }
    snprintf(g_src, sizeof g_src, "%s", src);
    RUN(header_comment_is_this_program);
    RUN(runs_on_the_embedded_model);
    return check_summary();
}
