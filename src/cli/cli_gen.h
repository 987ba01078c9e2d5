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
    bool top_k_set, min_p_set, repeat_set; /* explicit (else the model's general.sampling.* keys) */
    bool freq_set, presence_set;
    int threads, ctx;
    tern_cache_type cache_k, cache_v; /* --cache-type[-k|-v] (0: default) */
    const char *device;             /* --device cpu|cuda (NULL: cpu) */
    bool persistent;                /* --persistent: cuda_persistent (docs/persistent.md) */
    bool batch_invariant;           /* --batch-invariant: the model parameter batch_invariant */
    int gdn_state;                  /* --gdn-state: tern_model_params.gdn_state */
    int tp;                         /* --tp N shards (0/1: off) */
    int think;                      /* -1 default (model family), 0 off, 1 on */
    const char *system;
    bool quiet;
    const char *spec;               /* --spec ngram | draft:PATH (NULL: off) */
    int spec_k;                     /* --spec-k N (0: the library's default, 8) */
} gen_opts;

void gen_opts_default(gen_opts *o);

/* The model's recommended sampling: llama.cpp's general.sampling.* GGUF keys (temp,
 * top_k, top_p, min_p, penalty_repeat, penalty_last_n) and tern's penalty_freq /
 * penalty_present (OpenAI-style frequency / presence penalties; has_freq / has_present
 * say whether they were given). A field is < 0 when the key
 * is absent or out of range (a bad value is reported on stderr unless quiet).
 * Returns how many keys were taken. */
typedef struct cli_model_sampling {
    float temp, top_p, min_p, repeat_penalty;
    int top_k, penalty_last_n;
    float freq, present;
    bool has_freq, has_present;
} cli_model_sampling;
int cli_model_sampling_read(const char *cmd, const tern_model *m, bool quiet, cli_model_sampling *out);
/* Whether a chat thinks when nobody says: the model's tern.chat.thinking key (BOOL;
 * another type is ignored with a warning on stderr unless quiet), else on for qwen35
 * templates and off for qwen3 (the models' cards). */
bool cli_model_thinking(const char *cmd, const tern_model *m, tern_chat_format fmt, bool quiet);
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
    tern_drafter *drafter;          /* --spec (NULL: off) */
    tern_model *draft_model;        /* --spec draft:PATH */
    tern_tokenizer *draft_tok;
} gen_ctx;
/* Load everything; on failure prints the message and returns the exit code (1). */
int gen_ctx_open(const char *cmd, const gen_opts *o, gen_ctx *g);
void gen_ctx_close(gen_ctx *g);
/* The speculation fields of a tern_gen_params from the options (--spec, --spec-k). */
void gen_ctx_spec(const gen_ctx *g, const gen_opts *o, tern_gen_params *gp);
/* One line on stderr (unless quiet): drafted, accepted, verify passes of a reply. */
void gen_spec_report(const char *cmd, const gen_ctx *g, const tern_gen_result *r, bool quiet);

/* SIGINT handling: while armed, Ctrl-C sets gen_cancel instead of killing. */
extern tern_atomic_int gen_cancel;  /* C11 atomic: set by the handler, polled by the token loop */
void gen_sigint_arm(void);
void gen_sigint_disarm(void);

#endif
