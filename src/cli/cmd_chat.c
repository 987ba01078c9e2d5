/*
 * cmd_chat.c - `tern chat`: interactive multi-turn chat in the terminal.
 *
 * Line editing and history through libedit's readline API when stdin is a
 * terminal (history in $TERN_HISTORY or ~/.tern_history), plain line reads
 * otherwise (scripts). The conversation lives in the session's KV cache and
 * grows append-only: each turn adds "<|im_end|>\n" after the previous reply and
 * then the user turn plus the generation prompt, rendered by the Qwen3 /
 * Qwen3.5 template (tern_chat_tokenize: no control tokens from typed text).
 * Reasoning (<think> ... </think>) is shown dimmed on a terminal, or hidden with
 * --hide-thinking. Ctrl-C during a reply stops that reply; the conversation,
 * including the part already generated, is kept.
 *
 * Commands: /reset, /system TEXT, /think [on|off], /info, /help, /exit (or Ctrl-D).
 */
#include "cli/cli_gen.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef TERN_HAVE_LIBEDIT
#include <editline/readline.h>
#endif

static void usage(FILE *f) {
    fprintf(f,
            "usage: tern chat [-m MODEL] [options]\n"
            "Interactive chat. Commands: /reset  /system TEXT  /think [on|off]  /info  /help  /exit (Ctrl-D)\n"
            "Ctrl-C stops the current reply and keeps the conversation.\n\n"
            "  --hide-thinking          do not show the reasoning (shown dimmed by default)\n");
    gen_opts_help(f);
}

typedef struct view {
    bool tty, hide, in_think;
    bool skip_nl;                   /* drop the blank lines right after </think> */
} view;

#define DIM "\x1b[2m"
#define RESET "\x1b[0m"

/* Print reply text, switching the dim style at <think> / </think>. */
static bool on_text(const char *s, size_t n, void *user) {
    view *v = user;
    while (n) {
        if (!v->in_think && v->skip_nl) {
            while (n && *s == '\n') { s++; n--; }
            if (!n) break;
            v->skip_nl = false;
        }
        const char *tag = v->in_think ? "</think>" : "<think>";
        size_t tl = strlen(tag), i = 0;
        while (i + tl <= n && memcmp(s + i, tag, tl)) i++;
        size_t take = i + tl <= n ? i : n;
        if (take && !(v->in_think && v->hide)) fwrite(s, 1, take, stdout);
        if (take == n) break;
        /* crossing the tag */
        v->in_think = !v->in_think;
        if (v->tty && !v->hide) fputs(v->in_think ? DIM : RESET, stdout);
        else if (!v->hide) fputs(tag, stdout);
        s += take + tl;
        n -= take + tl;
        if (!v->in_think) v->skip_nl = true;
    }
    fflush(stdout);
    return true;
}

static char *read_line(bool tty, const char *prompt) {
#ifdef TERN_HAVE_LIBEDIT
    if (tty) {
        char *l = readline(prompt);
        if (l && *l) add_history(l);
        return l;
    }
#endif
    if (tty) { fputs(prompt, stdout); fflush(stdout); }
    size_t cap = 256, n = 0;
    char *b = malloc(cap);
    if (!b) return NULL;
    int c;
    while ((c = getchar()) != EOF && c != '\n') {
        if (n + 1 >= cap) {
            char *nb = realloc(b, cap * 2);
            if (!nb) { free(b); return NULL; }
            b = nb; cap *= 2;
        }
        b[n++] = (char)c;
    }
    if (c == EOF && n == 0) { free(b); return NULL; }
    b[n] = 0;
    return b;
}

int tern_cmd_chat(int argc, char **argv) {
    gen_opts o;
    gen_opts_default(&o);
    bool hide = false;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) { usage(stdout); return 0; }
        int r = gen_opts_parse("chat", &o, argc, argv, &i);
        if (r == 2) return 2;
        if (r == 1) continue;
        if (!strcmp(argv[i], "--hide-thinking")) hide = true;
        else return cli_usage_error("chat", "unknown option '%s'", argv[i]);
    }
    gen_ctx g;
    int rc = gen_ctx_open("chat", &o, &g);
    if (rc) return rc;
    bool tty_in = isatty(0), tty_out = isatty(1);
    char *system = o.system ? strdup(o.system) : NULL;
    bool think = g.think;
    char hist_path[4096] = "";
#ifdef TERN_HAVE_LIBEDIT
    if (tty_in) {
        rl_catch_signals = 0; /* our SIGINT handler decides */
        const char *hp = getenv("TERN_HISTORY"), *home = getenv("HOME");
        if (hp && *hp) snprintf(hist_path, sizeof hist_path, "%s", hp);
        else if (home) snprintf(hist_path, sizeof hist_path, "%s/.tern_history", home);
        using_history();
        if (*hist_path) read_history(hist_path);
    }
#endif
    tern_tokens end_turn = {0};
    tern_tokenize(g.tok, "<|im_end|>\n", 11, true, &end_turn);
    if (!o.quiet)
        fprintf(stderr, "tern chat: /help for commands, Ctrl-C stops a reply, Ctrl-D quits\n");
    const char *prompt = "> "; /* plain: libedit does not skip escape sequences in prompts */
    for (;;) {
        /* Ctrl-C at the prompt drops the line being typed (it does not quit) */
        gen_sigint_arm();
        char *line = read_line(tty_in, prompt);
        bool interrupted = atomic_load(&gen_cancel);
        gen_sigint_disarm();
        if (interrupted && tty_in) {
            free(line);
            fputs("^C\n", stdout);
            continue;
        }
        if (!line) break;
        if (!tty_in) { printf("> %s\n", line); fflush(stdout); }
        if (!*line) { free(line); continue; }
        if (line[0] == '/') {
            if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) { free(line); break; }
            if (!strcmp(line, "/reset")) {
                tern_session_reset(g.sess);
                tern_sampler_reset(g.smp);
                printf("[conversation cleared]\n");
            } else if (!strncmp(line, "/system", 7) && (line[7] == ' ' || !line[7])) {
                free(system);
                const char *t = line + 7;
                while (*t == ' ') t++;
                system = *t ? strdup(t) : NULL;
                tern_session_reset(g.sess);
                printf(system ? "[system prompt set; conversation cleared]\n" : "[system prompt removed; conversation cleared]\n");
            } else if (!strncmp(line, "/think", 6) && (line[6] == ' ' || !line[6])) {
                const char *t = line + 6;
                while (*t == ' ') t++;
                think = !strcmp(t, "on") ? true : !strcmp(t, "off") ? false : !think;
                printf("[thinking %s]\n", think ? "on" : "off");
            } else if (!strcmp(line, "/info")) {
                printf("[context: %d of %d tokens; thinking %s; system prompt %s]\n", tern_session_pos(g.sess),
                       tern_session_n_ctx(g.sess), think ? "on" : "off", system ? "set" : "none");
            } else if (!strcmp(line, "/help")) {
                printf("/reset  clear the conversation\n/system TEXT  set the system prompt (clears)\n"
                       "/think [on|off]  toggle thinking\n/info  context use and settings\n/exit  quit (or Ctrl-D)\n"
                       "Ctrl-C stops a reply\n");
            } else {
                printf("[unknown command %s; /help lists them]\n", line);
            }
            fflush(stdout);
            free(line);
            continue;
        }
        /* this turn's tokens */
        tern_tokens ids = {0};
        tern_chat_msg m[2];
        size_t nm = 0;
        bool first = tern_session_pos(g.sess) == 0;
        if (first && system) m[nm++] = (tern_chat_msg){"system", system, NULL, NULL, 0};
        m[nm++] = (tern_chat_msg){"user", line, NULL, NULL, 0};
        tern_chat_opts co = {NULL, true, think};
        tern_status st = TERN_OK;
        if (!first)
            for (size_t k = 0; k < end_turn.n && !st; k++) st = tern_tokens_push(&ids, end_turn.ids[k]);
        if (!st) st = tern_chat_tokenize(g.tok, g.fmt, m, nm, &co, &ids);
        if (st) { cli_lib_error("chat", st); tern_tokens_free(&ids); free(line); continue; }
        if ((size_t)tern_session_pos(g.sess) + ids.n >= (size_t)tern_session_n_ctx(g.sess)) {
            printf("[context full: %d of %d positions used; /reset to start over]\n", tern_session_pos(g.sess),
                   tern_session_n_ctx(g.sess));
            fflush(stdout);
            tern_tokens_free(&ids);
            free(line);
            continue;
        }
        view v = {tty_out, hide, think && g.fmt == TERN_CHAT_QWEN35, false};
        if (v.in_think && !hide) fputs(v.tty ? DIM : "<think>\n", stdout); /* opened by the prompt */
        tern_gen_params gp = {o.n_predict, NULL, 0, on_text, &v, &gen_cancel};
        tern_gen_result res;
        gen_sigint_arm();
        st = tern_generate(g.sess, g.tok, g.smp, ids.ids, ids.n, &gp, &res);
        gen_sigint_disarm();
        if (v.tty) fputs(RESET, stdout);
        fputc('\n', stdout);
        if (st) cli_lib_error("chat", st);
        else if (res.reason == TERN_STOP_CANCELLED) printf("[stopped]\n");
        else if (res.reason == TERN_STOP_CONTEXT_FULL) printf("[context full; /reset to start over]\n");
        else if (res.reason == TERN_STOP_MAX_TOKENS) printf("[reply cut at %d tokens]\n", o.n_predict);
        fflush(stdout);
        if (!st && !o.quiet)
            fprintf(stderr, "[%zu prompt tokens %.1f tok/s, %zu generated %.1f tok/s, %s]\n", res.n_prompt,
                    res.prompt_s > 0 ? res.n_prompt / res.prompt_s : 0.0, res.tokens.n,
                    res.gen_s > 0 ? res.tokens.n / res.gen_s : 0.0, tern_stop_reason_str(res.reason));
        tern_gen_result_free(&res);
        tern_tokens_free(&ids);
        free(line);
    }
#ifdef TERN_HAVE_LIBEDIT
    if (tty_in && *hist_path) write_history(hist_path);
#endif
    if (tty_out) putchar('\n');
    tern_tokens_free(&end_turn);
    free(system);
    gen_ctx_close(&g);
    return 0;
}
