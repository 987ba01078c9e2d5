/*
 * cli_gen.h - what `tern run` and `tern chat` share: the model / sampling
 * options, loading model + tokenizer + session + sampler, and the SIGINT flag
 * that stops a reply.
 */
#ifndef TERN_CLI_GEN_H
#define TERN_CLI_GEN_H

#include "cli/cli.h"

typedef struct gen_opts {
    const char *model;
    int n_predict;                  /* -n: max tokens (0 = until eog / full context) */
    tern_sampler_params sp;
    bool seed_set;
    bool temp_set, top_p_set;       /* explicit on the command line (else thinking defaults apply) */
    int threads, ctx;
    tern_cache_type cache_k, cache_v; /* --cache-type[-k|-v] (0: default) */
    const char *device;             /* --device cpu|cuda (NULL: cpu) */
    int tp;                         /* --tp N shards (0/1: off) */
    int think;                      /* -1 default (model family), 0 off, 1 on */
    const char *system;
    bool quiet;
} gen_opts;

void gen_opts_default(gen_opts *o);
/* Try to consume argv[*i] (and its value) as a shared option. Returns 1 if taken,
 * 0 if not a shared option, 2 after printing a usage error (exit code 2). */
int gen_opts_parse(const char *cmd, gen_opts *o, int argc, char **argv, int *i);
/* Help text for the shared options. */
void gen_opts_help(FILE *f);

typedef struct gen_ctx {
    tern_model *model;
    tern_tokenizer *tok;
    tern_session *sess;
    tern_sampler *smp;
    tern_chat_format fmt;
    bool has_template;              /* the file carries a chat template */
    bool think;                     /* resolved thinking setting */
    double load_s;
} gen_ctx;
/* Load everything; on failure prints the message and returns the exit code (1). */
int gen_ctx_open(const char *cmd, const gen_opts *o, gen_ctx *g);
void gen_ctx_close(gen_ctx *g);

/* SIGINT handling: while armed, Ctrl-C sets gen_cancel instead of killing. */
extern tern_atomic_int gen_cancel;  /* C11 atomic: set by the handler, polled by the token loop */
void gen_sigint_arm(void);
void gen_sigint_disarm(void);

#endif
