/*
 * chat_input.h - what `tern chat` reads as one message, from the lines a user
 * types or pastes, and which old turns leave the conversation when the context
 * is full. Pure code (no terminal, no model): tests/unit/test_chat_input.c.
 *
 * A message is one line, unless:
 *   - it holds a bracketed paste: the terminal wraps pasted text in ESC[200~ ...
 *     ESC[201~ (once the program has sent ESC[?2004h); everything inside is text,
 *     newlines included, and the message ends at the next Enter;
 *   - a line of `"""` alone opens a block that the next such line closes;
 *   - a typed line ends with `\`: the backslash is dropped and the next line follows.
 */
#ifndef TERN_CLI_CHAT_INPUT_H
#define TERN_CLI_CHAT_INPUT_H

#include <stdbool.h>
#include <stddef.h>

#define CHAT_PASTE_BEGIN "\x1b[200~"
#define CHAT_PASTE_END "\x1b[201~"

enum { CHAT_IN_NOMEM = -1, CHAT_IN_DONE = 0, CHAT_IN_MORE = 1 };

typedef struct chat_input {
    char *buf;                      /* the message so far, NUL-terminated */
    size_t n, cap;
    size_t line_start;              /* where the current line begins in buf */
    bool quote;                     /* inside a """ block */
    bool paste;                     /* inside ESC[200~ ... ESC[201~ */
    bool line_pasted;               /* the current line holds (part of) a paste */
    bool tail_typed;                /* buf's last byte was typed (not pasted) */
    bool pending;                   /* a message has begun (the next line continues it) */
} chat_input;

void chat_input_init(chat_input *ci);
void chat_input_free(chat_input *ci);
/* Forget the message (after taking it, or on Ctrl-C). */
void chat_input_reset(chat_input *ci);
/* Feed what the terminal gave: text without its newline; eol says the line ended
 * (Enter). Returns CHAT_IN_DONE when ci->buf holds a whole message (trailing
 * newlines removed), CHAT_IN_MORE when more is needed, CHAT_IN_NOMEM. A pasted
 * CR or CR LF counts as one newline. */
int chat_input_feed(chat_input *ci, const char *text, size_t n, bool eol);
/* A message has begun and is not complete (the caller shows a "... " prompt). */
bool chat_input_pending(const chat_input *ci);

/* How many of the oldest turns to drop so that `fixed` tokens (the system prompt
 * and the turn being asked) plus the kept turns' costs fit in `budget`: the least
 * k with fixed + cost[k] + ... + cost[n-1] <= budget, or n when none does (then
 * *fits is false if even fixed alone exceeds budget). */
size_t chat_turns_to_drop(const size_t *cost, size_t n, size_t fixed, size_t budget, bool *fits);

#endif
