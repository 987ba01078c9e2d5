/*
 * main.c - `tern` entry point: dispatches to the subcommands in src/cli/cmd_*.c.
 */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

int tern_cmd_serve(int argc, char **argv); /* src/cli/cmd_serve.c */

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} subcommand;

static const subcommand g_cmds[] = {
    {"run", tern_cmd_run, "generate text from a prompt (streams to stdout)"},
    {"chat", tern_cmd_chat, "interactive multi-turn chat"},
    {"serve", tern_cmd_serve, "OpenAI-compatible HTTP server (chat, completions, streaming)"},
    {"eval", tern_cmd_eval, "all-position logits for token ids (parity checks)"},
    {"perplexity", tern_cmd_perplexity, "perplexity of a model on a text file"},
    {"tokenize", tern_cmd_tokenize, "text to token ids"},
    {"detokenize", tern_cmd_detokenize, "token ids to text"},
    {"inspect", tern_cmd_inspect, "describe a GGUF file or MLX pack"},
    {"convert", tern_cmd_convert, "convert between ternary formats (GGUF, MLX pack)"},
    {"quantize", tern_cmd_quantize, "Hugging Face checkpoint to ternary GGUF"},
    {"synth", tern_cmd_synth, "write a random-weight model with real shapes"},
    {"bench", tern_cmd_bench, "benchmarks: `bench kernels`, `bench model`"},
};

static void usage(FILE *f) {
    fprintf(f, "tern %s - inference engine for ternary LLMs (Bonsai qwen35 / qwen3)\n\n", tern_version());
    fprintf(f, "usage: tern <command> [options]    (tern <command> --help for details)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof g_cmds / sizeof g_cmds[0]; i++)
        fprintf(f, "  %-12s %s\n", g_cmds[i].name, g_cmds[i].summary);
    fprintf(f, "\n  --version    print the version\n\n%s", CLI_ENV_HELP);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (cli_is_help(argv[1]) || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("tern %s\n", tern_version());
        for (int i = 0; i < tern_backend_count(); i++) {
            const char *name, *what;
            bool compiled, present;
            if (tern_backend_describe(i, &name, &compiled, &present, &what)) continue;
            printf("  device %-5s %s%s\n", name,
                   !compiled ? "" : present ? "present: " : "compiled in, absent: ", what);
        }
        return 0;
    }
    cli_env_apply();
    for (size_t i = 0; i < sizeof g_cmds / sizeof g_cmds[0]; i++)
        if (!strcmp(argv[1], g_cmds[i].name)) return g_cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "tern: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
