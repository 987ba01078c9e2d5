/*
 * cmd_chat.c - `tern chat`: interactive multi-turn chat in the terminal.
 *
 * Line editing and history through libedit's readline API when stdin is a
 * terminal (history in $TERN_HISTORY or ~/.tern_history), plain line reads
 * otherwise (scripts). One message is one line, a bracketed paste (the terminal
 * is asked for ESC[?2004h; the pasted block, newlines included, joins the message
 * and Enter sends it), a `"""` ... `"""` block or lines ended by `\`
 * (src/cli/chat_input.c assembles them).
 *
 * The conversation lives in the session's KV cache and grows append-only: each
 * turn adds "<|im_end|>\n" after the previous reply and then the user turn plus
 * the generation prompt, rendered by the Qwen3 / Qwen3.5 template
 * (tern_chat_tokenize: no control tokens from typed text). The turns are also
 * kept as text: when the next turn (with room for its reply, -n) would not fit,
 * or a reply fills the context, the oldest whole turns are dropped (the system
 * prompt kept) until the conversation fits in half the context, a notice goes to
 * stderr, and the session is re-evaluated from the re-rendered conversation (a
 * reply cut by the full context goes on from where it stopped). With
 * --no-context-shift the chat stops at a full context and asks for /reset.
 * Reasoning (<think> ... </think>) is shown dimmed on a terminal, or hidden with
 * --hide-thinking. Ctrl-C during a reply stops that reply; the conversation,
 * including the part already generated, is kept.
 *
 * Commands: /reset, /system TEXT, /think [on|off], /info, /history, /help, /exit (or Ctrl-D).
 */
#include "cli/chat_input.h"
#include "cli/cli_gen.h"

#include <errno.h>
#include <locale.h>
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
            "Interactive chat. Commands: /reset  /system TEXT  /think [on|off]  /info  /history  /help\n"
            "  /exit (Ctrl-D). Ctrl-C stops the current reply and keeps the conversation.\n"
            "A message is one line; pasted text (bracketed paste) joins the message whole and Enter\n"
            "sends it; a line of \"\"\" opens a block that the next \"\"\" line closes; a line ending in \\\n"
            "goes on on the next line.\n"
            "When the context is full the oldest turns are dropped (the system prompt is kept), a\n"
            "notice goes to stderr and the rest is evaluated again.\n\n"
            "  --hide-thinking          do not show the reasoning (shown dimmed by default)\n"
            "  --no-context-shift       stop at a full context (/reset to go on) instead of\n"
            "                           dropping the oldest turns (--context-shift: the default)\n");
    gen_opts_help(f);
}

typedef struct view {
    bool tty, hide, in_think;
    bool skip_nl;                   /* drop the blank lines right after </think> */
} view;

#define DIM "\x1b[2m"
#define RESET "\x1b[0m"
#define PASTE_ON "\x1b[?2004h"
#define PASTE_OFF "\x1b[?2004l"

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

/* ---- terminal input -------------------------------------------------------
 * libedit reads keys through rl_getc_function: ours takes a bracketed paste
 * (ESC[200~ ... ESC[201~) out of the key stream into g_paste whole (libedit
 * would end the line at its first newline and read the rest as more lines),
 * then gives libedit a newline, so readline() returns what was typed before the
 * paste. Other bytes go through, UTF-8 decoded to one code point per key. */
static struct {
    char *s;
    size_t n, cap;
    bool have;
} g_paste;
#ifdef TERN_HAVE_LIBEDIT
static unsigned char g_back[16]; /* bytes read ahead and not taken: read again first */
static int g_nback;

static int next_byte(void) {
    if (g_nback) {
        int c = g_back[0];
        memmove(g_back, g_back + 1, (size_t)--g_nback);
        return c;
    }
    for (;;) {
        unsigned char c;
        ssize_t r = read(0, &c, 1);
        if (r == 1) return c;
        if (r < 0 && errno == EINTR && !atomic_load(&gen_cancel)) continue; /* a resize, not Ctrl-C */
        return -1;
    }
}

static void unread(const unsigned char *b, int k) { /* in front of what is queued */
    if (k <= 0 || g_nback + k > (int)sizeof g_back) return;
    memmove(g_back + k, g_back, (size_t)g_nback);
    memcpy(g_back, b, (size_t)k);
    g_nback += k;
}

static bool paste_put(char c) {
    if (g_paste.n + 2 > g_paste.cap) {
        size_t cap = g_paste.cap ? g_paste.cap * 2 : 4096;
        char *s = realloc(g_paste.s, cap);
        if (!s) return false;
        g_paste.s = s;
        g_paste.cap = cap;
    }
    g_paste.s[g_paste.n++] = c;
    g_paste.s[g_paste.n] = 0;
    return true;
}

/* After ESC[200~: the pasted bytes up to ESC[201~. */
static bool read_paste(void) {
    static const char end[] = CHAT_PASTE_END;
    size_t m = 0; /* bytes of `end` matched */
    g_paste.n = 0;
    for (;;) {
        int c = next_byte();
        if (c < 0) return false;
        if (c == (unsigned char)end[m]) {
            if (++m == sizeof end - 1) return true;
            continue;
        }
        for (size_t i = 0; i < m; i++)
            if (!paste_put(end[i])) return false;
        m = 0;
        if (c == (unsigned char)end[0]) m = 1;
        else if (!paste_put((char)c)) return false;
    }
}

static bool g_utf8;              /* the locale is UTF-8: keys are decoded to code points */
static char g_locale[256] = "C"; /* the user's LC_CTYPE, for the line editor */

static int chat_getc(FILE *f) {
    (void)f;
    int c = next_byte();
    if (c == 0x1b) {
        static const char begin[] = CHAT_PASTE_BEGIN;
        unsigned char got[8];
        int k = 0;
        for (size_t i = 1; i < sizeof begin - 1; i++) {
            int d = next_byte();
            if (d < 0) break;
            got[k++] = (unsigned char)d;
            if (d != (unsigned char)begin[i]) break;
        }
        if (k < (int)sizeof begin - 2 || got[k - 1] != '~') { /* an ordinary escape sequence */
            unread(got, k);
            return c;
        }
        if (!read_paste()) { g_paste.n = 0; return -1; }
        g_paste.have = true;
        return '\n';
    }
    if (g_utf8 && c >= 0xc0 && c < 0xf8) {
        int len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
        int cp = c & (0x7f >> len);
        for (int i = 1; i < len; i++) {
            int d = next_byte();
            if (d < 0) return -1;
            if ((d & 0xc0) != 0x80) {
                unsigned char b = (unsigned char)d;
                unread(&b, 1);
                return 0xfffd;
            }
            cp = cp << 6 | (d & 0x3f);
        }
        return cp;
    }
    return c;
}
#endif

/* One line, without its newline; NULL at the end of the input. */
static char *read_line(bool tty, const char *prompt) {
#ifdef TERN_HAVE_LIBEDIT
    if (tty) {
        setlocale(LC_CTYPE, g_locale);
        char *l = readline(prompt);
        setlocale(LC_CTYPE, "C");
        if (l && *l && !g_paste.have) add_history(l);
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

/* ---- the conversation ---------------------------------------------------- */
typedef struct chat_turn {
    char *user, *content, *reasoning; /* the reply: its answer and reasoning */
    size_t cost;                    /* tokens it took in the session (an estimate for a re-render) */
    size_t no;                      /* 1, 2, ... since the last /reset */
} chat_turn;

typedef struct chat {
    gen_ctx *g;
    const gen_opts *o;
    char *system;
    bool think, shift;
    tern_tokens end_turn;           /* "<|im_end|>\n" */
    chat_turn *turns;               /* complete turns in the session, oldest first */
    size_t n_turns, cap_turns, next_no, n_dropped;
    tern_tokens spec_hist;          /* --spec: the session's tokens so far, for the drafter */
} chat;

static void turn_free(chat_turn *t) {
    free(t->user);
    free(t->content);
    free(t->reasoning);
}

static void chat_forget(chat *c) { /* /reset, /system */
    for (size_t i = 0; i < c->n_turns; i++) turn_free(&c->turns[i]);
    c->n_turns = c->n_dropped = 0;
    c->next_no = 1;
}

static void chat_drop(chat *c, size_t k) {
    for (size_t i = 0; i < k; i++) turn_free(&c->turns[i]);
    memmove(c->turns, c->turns + k, (c->n_turns - k) * sizeof *c->turns);
    c->n_turns -= k;
    c->n_dropped += k;
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) { memcpy(d, s, n); d[n] = 0; }
    return d;
}

/* Keep a finished turn: the reply text split at </think> (opened: the prompt opened
 * the think block). */
static void chat_keep(chat *c, const char *user, const char *text, bool opened, size_t cost) {
    if (c->n_turns == c->cap_turns) {
        size_t cap = c->cap_turns ? c->cap_turns * 2 : 16;
        chat_turn *t = realloc(c->turns, cap * sizeof *t);
        if (!t) return; /* the turn stays in the session; a later shift re-renders without it */
        c->turns = t;
        c->cap_turns = cap;
    }
    const char *r = NULL, *content = text;
    size_t rn = 0;
    while (!opened && (*content == ' ' || *content == '\n')) content++;
    if (!opened && !strncmp(content, "<think>", 7)) { opened = true; text = content + 7; }
    if (opened) {
        const char *e = strstr(text, "</think>");
        r = text;
        rn = e ? (size_t)(e - text) : strlen(text);
        content = e ? e + 8 : text + rn;
        while (*r == '\n') { r++; rn--; }
        while (rn && r[rn - 1] == '\n') rn--;
        while (*content == '\n') content++;
    }
    chat_turn t = {strdup(user), strdup(content), r ? dup_n(r, rn) : NULL, cost, c->next_no++};
    if (!t.user || !t.content || (r && !t.reasoning)) { turn_free(&t); return; }
    c->turns[c->n_turns++] = t;
}

/* The conversation from turn `from` on plus the message `user`, rendered with the
 * generation prompt, then `tail` (a reply begun). */
static tern_status chat_render(const chat *c, size_t from, const char *user, const tern_tokens *tail,
                               tern_tokens *ids) {
    tern_chat_msg *m = calloc(2 * (c->n_turns - from) + 2, sizeof *m);
    if (!m) return TERN_ERR_NOMEM;
    size_t nm = 0;
    if (c->system) m[nm++] = (tern_chat_msg){"system", c->system, NULL, NULL, 0};
    for (size_t i = from; i < c->n_turns; i++) {
        m[nm++] = (tern_chat_msg){"user", c->turns[i].user, NULL, NULL, 0};
        m[nm++] = (tern_chat_msg){"assistant", c->turns[i].content, c->turns[i].reasoning ? c->turns[i].reasoning : "",
                                  NULL, 0};
    }
    m[nm++] = (tern_chat_msg){"user", user, NULL, NULL, 0};
    tern_chat_opts co = {NULL, true, c->think};
    ids->n = 0;
    tern_status st = tern_chat_tokenize(c->g->tok, c->g->fmt, m, nm, &co, ids);
    free(m);
    for (size_t i = 0; tail && i < tail->n && !st; i++) st = tern_tokens_push(ids, tail->ids[i]);
    return st;
}

/* Room for `reserve` more tokens after the prompt: drop the oldest turns (at least
 * one) until the re-rendered conversation with `user` (and `tail`) fills at most
 * half the context, reset the session and leave the prompt to evaluate in ids.
 * `fixed` estimates the tokens of `user` and `tail`. false: it cannot fit (then
 * nothing changed and the caller says why). */
static bool chat_make_room(chat *c, const char *user, const tern_tokens *tail, size_t fixed, size_t reserve,
                           tern_tokens *ids) {
    size_t n_ctx = (size_t)tern_session_n_ctx(c->g->sess);
    size_t hard = n_ctx > reserve ? n_ctx - reserve : 0, soft = hard < n_ctx / 2 ? hard : n_ctx / 2;
    size_t *cost = malloc((c->n_turns + 1) * sizeof *cost);
    if (!cost) return false;
    for (size_t i = 0; i < c->n_turns; i++) cost[i] = c->turns[i].cost;
    size_t k = chat_turns_to_drop(cost, c->n_turns, fixed, soft, NULL);
    free(cost);
    if (k == 0 && c->n_turns) k = 1;
    if (tail && !c->n_turns) return false; /* nothing to drop: the turn alone fills the context */
    for (;;) {
        tern_status st = chat_render(c, k, user, tail, ids);
        if (st) { cli_lib_error("chat", st); return false; }
        if (ids->n <= soft || k >= c->n_turns) break;
        k++;
    }
    if (ids->n >= n_ctx) {
        printf("[message too long: %zu tokens with what must stay; the context holds %zu]\n", ids->n, n_ctx);
        fflush(stdout);
        return false;
    }
    if (k) {
        fflush(stdout);
        fprintf(stderr, "%s[context full: dropped the oldest %zu turn%s (%zu kept); re-evaluating %zu tokens]\n", tail ? "\n" : "", k,
                k == 1 ? "" : "s", c->n_turns - k, ids->n);
        chat_drop(c, k);
    }
    tern_session_reset(c->g->sess);
    return true;
}

/* --spec: what this generate fed the session (the prompt, the reply but a final
 * end-of-turn id, which the next turn's prompt brings again). */
static tern_status spec_hist_add(chat *c, const tern_tokens *prompt, const tern_gen_result *r) {
    size_t n = r->tokens.n - (r->reason == TERN_STOP_EOG && r->tokens.n ? 1 : 0);
    tern_status st = TERN_OK;
    for (size_t i = 0; i < prompt->n && !st; i++) st = tern_tokens_push(&c->spec_hist, prompt->ids[i]);
    for (size_t i = 0; i < n && !st; i++) st = tern_tokens_push(&c->spec_hist, r->tokens.ids[i]);
    return st;
}

/* One turn: the message, the reply streamed, the turn kept. */
static void chat_turn_run(chat *c, const char *msg, bool tty_out, bool hide) {
    gen_ctx *g = c->g;
    const gen_opts *o = c->o;
    size_t n_ctx = (size_t)tern_session_n_ctx(g->sess), pos = (size_t)tern_session_pos(g->sess);
    /* this turn's tokens, appended to the session */
    tern_tokens ids = {0}, reply = {0};
    tern_chat_msg m[2];
    size_t nm = 0;
    bool first = pos == 0;
    if (first && c->system) m[nm++] = (tern_chat_msg){"system", c->system, NULL, NULL, 0};
    m[nm++] = (tern_chat_msg){"user", msg, NULL, NULL, 0};
    tern_chat_opts co = {NULL, true, c->think};
    tern_status st = TERN_OK;
    if (!first)
        for (size_t k = 0; k < c->end_turn.n && !st; k++) st = tern_tokens_push(&ids, c->end_turn.ids[k]);
    if (!st) st = tern_chat_tokenize(g->tok, g->fmt, m, nm, &co, &ids);
    if (st) { cli_lib_error("chat", st); tern_tokens_free(&ids); return; }
    size_t user_cost = ids.n;
    /* room kept for the reply: -n, at most half the context (-n 0: a quarter) */
    size_t reserve = o->n_predict > 0 ? (size_t)o->n_predict : n_ctx / 4;
    if (reserve > n_ctx / 2) reserve = n_ctx / 2;
    if (!c->shift && pos + ids.n >= n_ctx) {
        printf("[context full: %zu of %zu positions used; /reset to start over]\n", pos, n_ctx);
        fflush(stdout);
        tern_tokens_free(&ids);
        return;
    }
    if (c->shift && pos + ids.n + reserve > n_ctx && !chat_make_room(c, msg, NULL, user_cost, reserve, &ids)) {
        tern_tokens_free(&ids);
        return;
    }
    bool opened = c->think && g->fmt == TERN_CHAT_QWEN35; /* the prompt opens <think> */
    view v = {tty_out, hide, opened, false};
    if (v.in_think && !hide) fputs(v.tty ? DIM : "<think>\n", stdout);
    tern_str text = {0};
    tern_gen_result res = {0};
    size_t n_prompt = 0;
    double prompt_s = 0, gen_s = 0;
    for (;;) {
        int left = o->n_predict > 0 ? o->n_predict - (int)reply.n : 0;
        tern_gen_params gp = {left, NULL, 0, on_text, &v, &gen_cancel};
        gen_ctx_spec(g, o, &gp);
        if (g->drafter && !tern_session_pos(g->sess)) c->spec_hist.n = 0; /* the session starts over */
        gp.spec_history = c->spec_hist.ids;
        gp.n_spec_history = c->spec_hist.n;
        gen_sigint_arm();
        st = tern_generate(g->sess, g->tok, g->smp, ids.ids, ids.n, &gp, &res);
        gen_sigint_disarm();
        if (st) break;
        n_prompt += res.n_prompt;
        prompt_s += res.prompt_s;
        gen_s += res.gen_s;
        for (size_t i = 0; i < res.tokens.n && !st; i++) st = tern_tokens_push(&reply, res.tokens.ids[i]);
        if (!st && g->drafter) st = spec_hist_add(c, &ids, &res);
        if (!st) st = tern_str_append(&text, res.text.data, res.text.len);
        if (st || res.reason != TERN_STOP_CONTEXT_FULL || !c->shift || !c->n_turns) break;
        if (o->n_predict > 0 && reply.n >= (size_t)o->n_predict) { res.reason = TERN_STOP_MAX_TOKENS; break; }
        /* the reply filled the context: drop old turns, go on from where it stopped */
        if (!chat_make_room(c, msg, &reply, user_cost + reply.n, reserve > reply.n ? reserve - reply.n : 0, &ids))
            break;
        tern_gen_result_free(&res);
    }
    if (v.tty) fputs(RESET, stdout);
    fputc('\n', stdout);
    if (st) cli_lib_error("chat", st);
    else if (res.reason == TERN_STOP_CANCELLED) printf("[stopped]\n");
    else if (res.reason == TERN_STOP_CONTEXT_FULL)
        printf(c->shift ? "[context full: this turn alone fills the context; the reply is cut]\n"
                        : "[context full; /reset to start over]\n");
    else if (res.reason == TERN_STOP_MAX_TOKENS) printf("[reply cut at %d tokens]\n", o->n_predict);
    fflush(stdout);
    if (!st && !o->quiet)
        fprintf(stderr, "[%zu prompt tokens %.1f tok/s, %zu generated %.1f tok/s, %s]\n", n_prompt,
                prompt_s > 0 ? n_prompt / prompt_s : 0.0, reply.n, gen_s > 0 ? reply.n / gen_s : 0.0,
                tern_stop_reason_str(res.reason));
    if (!st && g->drafter) gen_spec_report("chat", g, &res, o->quiet);
    if (!st) chat_keep(c, msg, text.data ? text.data : "", opened, user_cost + reply.n + c->end_turn.n);
    tern_gen_result_free(&res);
    tern_str_free(&text);
    tern_tokens_free(&reply);
    tern_tokens_free(&ids);
}

static void chat_history(const chat *c) {
    printf("[history: %zu turn%s kept, %zu dropped; system prompt %s]\n", c->n_turns, c->n_turns == 1 ? "" : "s",
           c->n_dropped, c->system ? "set" : "none");
    for (size_t i = 0; i < c->n_turns; i++) {
        const chat_turn *t = &c->turns[i];
        size_t lines = 1;
        for (const char *p = t->user; *p; p++) lines += *p == '\n';
        printf("[turn %zu user, %zu line%s]\n%s\n[turn %zu assistant]\n%s\n", t->no, lines, lines == 1 ? "" : "s",
               t->user, t->no, t->content);
    }
}

/* A line that starts with '/' and is not inside a message. true: quit. */
static bool chat_command(chat *c, const char *line) {
    gen_ctx *g = c->g;
    if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) return true;
    if (!strcmp(line, "/reset")) {
        tern_session_reset(g->sess);
        tern_sampler_reset(g->smp);
        chat_forget(c);
        printf("[conversation cleared]\n");
    } else if (!strncmp(line, "/system", 7) && (line[7] == ' ' || !line[7])) {
        free(c->system);
        const char *t = line + 7;
        while (*t == ' ') t++;
        c->system = *t ? strdup(t) : NULL;
        tern_session_reset(g->sess);
        chat_forget(c);
        printf(c->system ? "[system prompt set; conversation cleared]\n" : "[system prompt removed; conversation cleared]\n");
    } else if (!strncmp(line, "/think", 6) && (line[6] == ' ' || !line[6])) {
        const char *t = line + 6;
        while (*t == ' ') t++;
        c->think = !strcmp(t, "on") ? true : !strcmp(t, "off") ? false : !c->think;
        printf("[thinking %s]\n", c->think ? "on" : "off");
    } else if (!strcmp(line, "/info")) {
        printf("[context: %d of %d tokens; %zu turns kept, %zu dropped; context shift %s; thinking %s; system prompt %s]\n",
               tern_session_pos(g->sess), tern_session_n_ctx(g->sess), c->n_turns, c->n_dropped, c->shift ? "on" : "off",
               c->think ? "on" : "off", c->system ? "set" : "none");
    } else if (!strcmp(line, "/history")) {
        chat_history(c);
    } else if (!strcmp(line, "/help")) {
        printf("/reset  clear the conversation\n/system TEXT  set the system prompt (clears)\n"
               "/think [on|off]  toggle thinking\n/info  context use and settings\n"
               "/history  the turns the context holds\n/exit  quit (or Ctrl-D)\n"
               "Ctrl-C stops a reply. Paste freely: a pasted block is one message (Enter sends it);\n"
               "typed: a line of \"\"\" opens and closes a block, a line ending in \\ goes on.\n");
    } else {
        printf("[unknown command %s; /help lists them]\n", line);
    }
    fflush(stdout);
    return false;
}

int tern_cmd_chat(int argc, char **argv) {
    gen_opts o;
    gen_opts_default(&o);
    bool hide = false, shift = true;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) { usage(stdout); return 0; }
        int r = gen_opts_parse("chat", &o, argc, argv, &i);
        if (r == 2) return 2;
        if (r == 1) continue;
        if (!strcmp(argv[i], "--hide-thinking")) hide = true;
        else if (!strcmp(argv[i], "--no-context-shift")) shift = false;
        else if (!strcmp(argv[i], "--context-shift")) shift = true;
        else return cli_usage_error("chat", "unknown option '%s'", argv[i]);
    }
    gen_ctx g;
    int rc = gen_ctx_open("chat", &o, &g);
    if (rc) return rc;
    bool tty_in = isatty(0), tty_out = isatty(1);
    chat c = {&g, &o, o.system ? strdup(o.system) : NULL, g.think, shift, {0}, NULL, 0, 0, 1, 0};
#ifdef TERN_HAVE_LIBEDIT
    char hist_path[4096] = "";
    if (tty_in) {
        /* the user's character set for the line editor only: set around readline() */
        const char *loc = setlocale(LC_CTYPE, "");
        if (!loc || !strcmp(loc, "C") || !strcmp(loc, "POSIX")) { /* no locale set: take UTF-8 */
            const char *u = setlocale(LC_CTYPE, "C.UTF-8");
            if (u) loc = u;
        }
        g_utf8 = loc && MB_CUR_MAX > 1;
        if (loc) snprintf(g_locale, sizeof g_locale, "%s", loc);
        rl_getc_function = chat_getc; /* before libedit starts (using_history starts it) */
        rl_catch_signals = 0;         /* our SIGINT handler decides */
        const char *hp = getenv("TERN_HISTORY"), *home = getenv("HOME");
        if (hp && *hp) snprintf(hist_path, sizeof hist_path, "%s", hp);
        else if (home) snprintf(hist_path, sizeof hist_path, "%s/.tern_history", home);
        using_history();
        if (*hist_path) read_history(hist_path);
        setlocale(LC_CTYPE, "C");
    }
#endif
    bool paste_mode = tty_in && tty_out; /* the terminal marks pasted text */
    if (paste_mode) { fputs(PASTE_ON, stdout); fflush(stdout); }
    tern_tokenize(g.tok, "<|im_end|>\n", 11, true, &c.end_turn);
    if (!o.quiet)
        fprintf(stderr, "tern chat: /help for commands, Ctrl-C stops a reply, Ctrl-D quits; context shift %s\n",
                shift ? "on" : "off");
    chat_input in;
    chat_input_init(&in);
    for (;;) {
        /* plain prompts: libedit does not skip escape sequences in prompts */
        const char *prompt = chat_input_pending(&in) ? "... " : "> ";
        /* Ctrl-C at the prompt drops the message being typed (it does not quit) */
        gen_sigint_arm();
        char *line = read_line(tty_in, prompt);
        bool interrupted = atomic_load(&gen_cancel);
        gen_sigint_disarm();
        bool pasted = g_paste.have;
        g_paste.have = false;
        if (interrupted && tty_in) {
            free(line);
            chat_input_reset(&in);
            fputs("^C\n", stdout);
            continue;
        }
        if (!line) {
            if (chat_input_pending(&in)) printf("[the input ended inside a message; not sent]\n");
            break;
        }
        if (!tty_in) { printf("%s%s\n", prompt, line); fflush(stdout); }
        if (!pasted && !chat_input_pending(&in) && line[0] == '/') {
            bool quit = chat_command(&c, line);
            free(line);
            if (quit) break;
            continue;
        }
        int r;
        if (pasted) { /* what was typed before the paste, the paste; Enter sends */
            r = chat_input_feed(&in, line, strlen(line), false);
            if (r >= 0) r = chat_input_feed(&in, CHAT_PASTE_BEGIN, strlen(CHAT_PASTE_BEGIN), false);
            if (r >= 0) r = chat_input_feed(&in, g_paste.s, g_paste.n, false);
            if (r >= 0) r = chat_input_feed(&in, CHAT_PASTE_END, strlen(CHAT_PASTE_END), false);
            /* libedit did not show the paste: show it */
            for (size_t i = 0; i < g_paste.n; i++) {
                char ch = g_paste.s[i];
                if (ch == '\r' && i + 1 < g_paste.n && g_paste.s[i + 1] == '\n') continue;
                putchar(ch == '\r' ? '\n' : ch);
            }
            if (g_paste.n && g_paste.s[g_paste.n - 1] != '\n' && g_paste.s[g_paste.n - 1] != '\r') putchar('\n');
            fflush(stdout);
        } else {
            r = chat_input_feed(&in, line, strlen(line), true);
        }
        free(line);
        if (r == CHAT_IN_NOMEM) { fprintf(stderr, "tern chat: out of memory\n"); chat_input_reset(&in); continue; }
        if (r == CHAT_IN_MORE) continue;
        char *msg = strdup(in.buf);
        chat_input_reset(&in);
        if (msg && *msg) chat_turn_run(&c, msg, tty_out, hide);
        free(msg);
    }
    if (paste_mode) { fputs(PASTE_OFF, stdout); fflush(stdout); }
#ifdef TERN_HAVE_LIBEDIT
    if (tty_in && *hist_path) write_history(hist_path);
#endif
    if (tty_out) putchar('\n');
    chat_input_free(&in);
    chat_forget(&c);
    free(c.turns);
    free(g_paste.s);
    tern_tokens_free(&c.end_turn);
    tern_tokens_free(&c.spec_hist);
    free(c.system);
    gen_ctx_close(&g);
    return 0;
}
