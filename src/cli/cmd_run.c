/*
 * cmd_run.c - `tern run`: one prompt in, the reply streamed to stdout.
 * The prompt goes through the model's chat template (Qwen3 / Qwen3.5 ChatML,
 * with --system and --think/--no-think) unless --raw; stderr gets the load
 * line, the prompt / generation speeds, token counts and the stop reason.
 * --json prints one object instead: text, reasoning, content, tool_calls,
 * tokens (ids), stop_reason, prompt_tokens, generated_tokens, pp_tok_s,
 * tg_tok_s, seed.
 */
#include "cli/cli_gen.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: tern run [-m MODEL] -p TEXT [options]\n"
            "Generate a reply to TEXT and stream it to stdout (stats on stderr).\n\n"
            "  -p, --prompt TEXT        the prompt (the user message in chat mode); '-' reads stdin\n"
            "  --tools FILE             JSON array of tool definitions for the chat template\n"
            "  --chat | --raw           through the chat template (default when the model has one) / as is\n"
            "  --stop STR               stop before STR (repeatable)\n"
            "  --grammar FILE           constrain the reply to a GBNF grammar (llama.cpp's format)\n"
            "  --json-schema FILE       constrain the reply to JSON valid under a JSON Schema\n"
            "                           (either turns thinking off unless --think)\n"
            "  --json                   print one JSON object (text, tokens, stop_reason, prompt_tokens,\n"
            "                           pp_tok_s, tg_tok_s, ...) instead of streaming\n");
    gen_opts_help(f);
}

static void add_text(cJSON *j, const char *key, const char *s) {
    tern_str c = {0}; /* JSON needs valid UTF-8: invalid bytes become U+FFFD */
    tern_status st = tern_utf8_sanitize(s ? s : "", s ? strlen(s) : 0, &c);
    cJSON_AddStringToObject(j, key, !st && c.data ? c.data : "");
    tern_str_free(&c);
}

static bool on_text(const char *s, size_t n, void *user) {
    (void)user;
    fwrite(s, 1, n, stdout);
    fflush(stdout);
    return true;
}

int tern_cmd_run(int argc, char **argv) {
    gen_opts o;
    gen_opts_default(&o);
    const char *prompt = NULL, *tools_file = NULL, *grammar_file = NULL, *schema_file = NULL;
    char *prompt_buf = NULL, *tools = NULL;
    int mode = -1; /* -1 default, 0 raw, 1 chat */
    bool json = false;
    const char *stops[64];
    size_t n_stop = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) { usage(stdout); return 0; }
        int r = gen_opts_parse("run", &o, argc, argv, &i);
        if (r == 2) return 2;
        if (r == 1) continue;
        if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (i + 1 >= argc) return cli_usage_error("run", "%s needs a value", a);
            prompt = argv[++i];
        } else if (!strcmp(a, "--tools")) {
            if (i + 1 >= argc) return cli_usage_error("run", "--tools needs a file");
            tools_file = argv[++i];
        } else if (!strcmp(a, "--stop")) {
            if (i + 1 >= argc) return cli_usage_error("run", "--stop needs a value");
            if (!*argv[i + 1]) return cli_usage_error("run", "--stop needs a non-empty string");
            if (n_stop == 64) return cli_usage_error("run", "at most 64 --stop strings");
            stops[n_stop++] = argv[++i];
        } else if (!strcmp(a, "--grammar") || !strcmp(a, "--json-schema")) {
            if (i + 1 >= argc) return cli_usage_error("run", "%s needs a file", a);
            if (grammar_file || schema_file) return cli_usage_error("run", "give one of --grammar and --json-schema");
            *(a[2] == 'g' ? &grammar_file : &schema_file) = argv[++i];
        } else if (!strcmp(a, "--chat")) {
            mode = 1;
        } else if (!strcmp(a, "--raw")) {
            mode = 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else {
            return cli_usage_error("run", "unknown option '%s'", a);
        }
    }
    if (!prompt) return cli_usage_error("run", "-p TEXT is required");
    if (!strcmp(prompt, "-")) {
        if (!(prompt_buf = cli_read_stream(stdin, NULL))) { fprintf(stderr, "tern run: cannot read stdin\n"); return 1; }
        prompt = prompt_buf;
    }
    if (tools_file) {
        FILE *f = fopen(tools_file, "rb");
        if (!f) { free(prompt_buf); return cli_usage_error("run", "cannot open --tools file '%s'", tools_file); }
        tools = cli_read_stream(f, NULL);
        fclose(f);
        if (!tools) { free(prompt_buf); fprintf(stderr, "tern run: cannot read %s\n", tools_file); return 1; }
    }
    /* constrained output: the grammar (a JSON Schema converted), checked before loading */
    tern_str gbnf = {0};
    tern_grammar *grammar = NULL;
    if (grammar_file || schema_file) {
        const char *gf = grammar_file ? grammar_file : schema_file;
        FILE *f = fopen(gf, "rb");
        char *text = f ? cli_read_stream(f, NULL) : NULL;
        if (f) fclose(f);
        if (!text) { free(prompt_buf); free(tools); return cli_usage_error("run", "cannot read '%s'", gf); }
        tern_status gs = grammar_file ? tern_str_append(&gbnf, text, strlen(text))
                                      : tern_json_schema_to_grammar(text, strlen(text), NULL, &gbnf);
        free(text);
        if (!gs) gs = tern_grammar_parse(gbnf.data, gbnf.len, NULL, &grammar);
        tern_str_free(&gbnf);
        if (gs) { free(prompt_buf); free(tools); return cli_lib_error("run", gs); }
        if (o.think < 0) o.think = 0;
    }
    gen_ctx g;
    int rc = gen_ctx_open("run", &o, &g);
    if (rc) { free(prompt_buf); free(tools); tern_grammar_free(grammar); return rc; }
    bool chat = mode < 0 ? g.has_template : mode == 1;
    tern_tokens ids = {0};
    tern_status st;
    if (chat) {
        tern_chat_msg m[2];
        size_t n = 0;
        if (o.system) m[n++] = (tern_chat_msg){"system", o.system, NULL, NULL, 0};
        m[n++] = (tern_chat_msg){"user", prompt, NULL, NULL, 0};
        tern_chat_opts co = {tools, true, g.think};
        st = tern_chat_tokenize(g.tok, g.fmt, m, n, &co, &ids);
    } else {
        st = tern_tokenize(g.tok, prompt, strlen(prompt), true, &ids);
    }
    free(tools);
    tools = NULL;
    if (!st && ids.n == 0) {
        free(prompt_buf);
        gen_ctx_close(&g);
        return cli_usage_error("run", "the prompt is empty after tokenization");
    }
    if (st) { free(prompt_buf); tern_tokens_free(&ids); gen_ctx_close(&g); return cli_lib_error("run", st); }
    tern_gen_params gp = {o.n_predict, stops, n_stop, json ? NULL : on_text, NULL, &gen_cancel};
    tern_token_trie *trie = NULL;
    tern_grammar_matcher *gm = NULL;
    if (grammar && !(st = tern_token_trie_new(g.tok, 0, &trie))) st = tern_grammar_matcher_new(grammar, trie, &gm);
    gp.grammar = gm;
    gen_ctx_spec(&g, &o, &gp);
    tern_gen_result res;
    memset(&res, 0, sizeof res);
    gen_sigint_arm();
    if (!st) st = tern_generate(g.sess, g.tok, g.smp, ids.ids, ids.n, &gp, &res);
    gen_sigint_disarm();
    tern_grammar_matcher_free(gm);
    tern_token_trie_free(trie);
    tern_grammar_free(grammar);
    if (st) {
        if (!json) fputc('\n', stdout);
        tern_gen_result_free(&res);
        tern_tokens_free(&ids);
        free(prompt_buf);
        gen_ctx_close(&g);
        return cli_lib_error("run", st);
    }
    size_t n_gen = res.tokens.n;
    double pp = res.prompt_s > 0 ? res.n_prompt / res.prompt_s : 0, tg = res.gen_s > 0 ? n_gen / res.gen_s : 0;
    if (json) {
        cJSON *j = cJSON_CreateObject();
        add_text(j, "text", res.text.data);
        tern_chat_reply rep;
        bool thinking_open = chat && g.think && g.fmt == TERN_CHAT_QWEN35;
        if (chat && tern_chat_parse(g.fmt, res.text.data, res.text.len, thinking_open, &rep) == TERN_OK) {
            add_text(j, "reasoning", rep.reasoning);
            add_text(j, "content", rep.content);
            cJSON *calls = cJSON_AddArrayToObject(j, "tool_calls");
            for (size_t k = 0; k < rep.n_tool_calls; k++) {
                cJSON *c = cJSON_CreateObject();
                add_text(c, "name", rep.tool_calls[k].name);
                add_text(c, "arguments", rep.tool_calls[k].arguments);
                cJSON_AddItemToArray(calls, c);
            }
            tern_chat_reply_free(&rep);
        }
        cJSON *toks = cJSON_AddArrayToObject(j, "tokens");
        for (size_t k = 0; k < n_gen; k++) cJSON_AddItemToArray(toks, cJSON_CreateNumber(res.tokens.ids[k]));
        cJSON_AddStringToObject(j, "stop_reason", tern_stop_reason_str(res.reason));
        cJSON_AddNumberToObject(j, "prompt_tokens", (double)res.n_prompt);
        cJSON_AddNumberToObject(j, "generated_tokens", (double)n_gen);
        cJSON_AddNumberToObject(j, "pp_tok_s", pp);
        cJSON_AddNumberToObject(j, "tg_tok_s", tg);
        cJSON_AddNumberToObject(j, "prompt_s", res.prompt_s);
        cJSON_AddNumberToObject(j, "gen_s", res.gen_s);
        cJSON_AddBoolToObject(j, "chat", chat);
        char *s = cJSON_PrintUnformatted(j);
        if (s) { puts(s); free(s); }
        cJSON_Delete(j);
    } else {
        fputc('\n', stdout);
        fflush(stdout);
    }
    if (!o.quiet)
        fprintf(stderr, "tern run: prompt %zu tokens in %.3f s (%.1f tok/s), generated %zu tokens in %.3f s (%.1f tok/s), "
                        "stop: %s\n", res.n_prompt, res.prompt_s, pp, n_gen, res.gen_s, tg,
                tern_stop_reason_str(res.reason));
    gen_spec_report("run", &g, &res, o.quiet);
    if (!o.quiet) {
        char line[160];
        cli_cache_line(g.sess, line, sizeof line);
        fprintf(stderr, "tern run: %s\n", line);
    }
    tern_gen_result_free(&res);
    tern_tokens_free(&ids);
    free(prompt_buf);
    gen_ctx_close(&g);
    return 0;
}
