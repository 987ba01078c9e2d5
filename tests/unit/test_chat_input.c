/*
 * test_chat_input.c - `tern chat`'s message assembler (bracketed paste, """ blocks,
 * trailing backslashes) and the choice of turns a full context drops
 * (src/cli/chat_input.c), on hand-written input with the expected messages
 * written out here.
 */
#include "check.h"
#include "cli/chat_input.h"

#define PB CHAT_PASTE_BEGIN
#define PE CHAT_PASTE_END

/* Feed lines (each ended by Enter); the result of the last one. */
static int feed_lines(chat_input *ci, const char *const *lines, size_t n) {
    int r = CHAT_IN_MORE;
    for (size_t i = 0; i < n; i++) r = chat_input_feed(ci, lines[i], strlen(lines[i]), true);
    return r;
}

TEST(plain_line) {
    chat_input ci;
    chat_input_init(&ci);
    CHECK(!chat_input_pending(&ci));
    CHECK_EQ_INT(chat_input_feed(&ci, "hello there", 11, true), CHAT_IN_DONE);
    CHECK(!strcmp(ci.buf, "hello there"));
    chat_input_reset(&ci);
    CHECK_EQ_INT(chat_input_feed(&ci, "", 0, true), CHAT_IN_DONE);
    CHECK(!strcmp(ci.buf, ""));
    chat_input_reset(&ci);
    /* a backslash inside the line is text */
    CHECK_EQ_INT(chat_input_feed(&ci, "a\\b", 3, true), CHAT_IN_DONE);
    CHECK(!strcmp(ci.buf, "a\\b"));
    chat_input_free(&ci);
}

TEST(backslash_continues) {
    chat_input ci;
    chat_input_init(&ci);
    CHECK_EQ_INT(chat_input_feed(&ci, "first\\", 6, true), CHAT_IN_MORE);
    CHECK(chat_input_pending(&ci));
    CHECK_EQ_INT(chat_input_feed(&ci, "second \\", 8, true), CHAT_IN_MORE);
    CHECK_EQ_INT(chat_input_feed(&ci, "third", 5, true), CHAT_IN_DONE);
    CHECK(!strcmp(ci.buf, "first\nsecond \nthird"));
    CHECK(!chat_input_pending(&ci));
    chat_input_free(&ci);
}

TEST(quote_block) {
    chat_input ci;
    chat_input_init(&ci);
    const char *l[] = {"\"\"\"", "def f():", "    return 1 \\", "", "\"\"\""};
    CHECK_EQ_INT(feed_lines(&ci, l, 4), CHAT_IN_MORE);
    CHECK(chat_input_pending(&ci));
    CHECK_EQ_INT(chat_input_feed(&ci, l[4], strlen(l[4]), true), CHAT_IN_DONE);
    /* inside the block a trailing backslash is text; the blank last line is trimmed */
    CHECK(!strcmp(ci.buf, "def f():\n    return 1 \\"));
    chat_input_reset(&ci);
    /* spaces around the marker; an empty block is an empty message */
    const char *e[] = {"  \"\"\" ", "\"\"\""};
    CHECK_EQ_INT(feed_lines(&ci, e, 2), CHAT_IN_DONE);
    CHECK(!strcmp(ci.buf, ""));
    chat_input_reset(&ci);
    /* """ inside a line is text */
    CHECK_EQ_INT(chat_input_feed(&ci, "say \"\"\"", 7, true), CHAT_IN_DONE);
    CHECK(!strcmp(ci.buf, "say \"\"\""));
    chat_input_reset(&ci);
    /* a continued line may open a block */
    const char *c[] = {"intro\\", "\"\"\"", "x", "\"\"\""};
    CHECK_EQ_INT(feed_lines(&ci, c, 4), CHAT_IN_DONE);
    CHECK(!strcmp(ci.buf, "intro\nx"));
    chat_input_free(&ci);
}

/* a raw-mode terminal: the whole paste arrives in one piece (CRs for newlines),
 * then Enter sends it */
TEST(paste_one_piece) {
    chat_input ci;
    chat_input_init(&ci);
    const char *p = "Look: " PB "alpha\rbeta\r\ngamma\\" PE;
    CHECK_EQ_INT(chat_input_feed(&ci, p, strlen(p), false), CHAT_IN_MORE);
    CHECK(chat_input_pending(&ci));
    CHECK_EQ_INT(chat_input_feed(&ci, "", 0, true), CHAT_IN_DONE);
    CHECK(!strcmp(ci.buf, "Look: alpha\nbeta\ngamma\\"));
    chat_input_reset(&ci);
    /* text typed after the paste joins the message; a pasted """ line is text */
    const char *q = PB "\"\"\"\r" PE;
    CHECK_EQ_INT(chat_input_feed(&ci, q, strlen(q), false), CHAT_IN_MORE);
    CHECK_EQ_INT(chat_input_feed(&ci, "end", 3, true), CHAT_IN_DONE);
    CHECK(!strcmp(ci.buf, "\"\"\"\nend"));
    chat_input_reset(&ci);
    /* a backslash typed after the paste still continues */
    const char *r = PB "x" PE;
    CHECK_EQ_INT(chat_input_feed(&ci, r, strlen(r), false), CHAT_IN_MORE);
    CHECK_EQ_INT(chat_input_feed(&ci, " y\\", 3, true), CHAT_IN_MORE);
    CHECK_EQ_INT(chat_input_feed(&ci, "z", 1, true), CHAT_IN_DONE);
    CHECK(!strcmp(ci.buf, "x y\nz"));
    chat_input_free(&ci);
}

/* a line-buffered terminal: the paste spans lines, markers inside them */
TEST(paste_across_lines) {
    chat_input ci;
    chat_input_init(&ci);
    const char *l[] = {PB "one", "two \\", "\"\"\"", "three" PE " and more"};
    CHECK_EQ_INT(feed_lines(&ci, l, 3), CHAT_IN_MORE);
    CHECK_EQ_INT(chat_input_feed(&ci, l[3], strlen(l[3]), true), CHAT_IN_DONE);
    CHECK(!strcmp(ci.buf, "one\ntwo \\\n\"\"\"\nthree and more"));
    chat_input_reset(&ci);
    /* a paste ending in a newline: the trailing newline is dropped */
    const char *m[] = {PB "a", "b", PE};
    CHECK_EQ_INT(feed_lines(&ci, m, 3), CHAT_IN_DONE);
    CHECK(!strcmp(ci.buf, "a\nb"));
    chat_input_reset(&ci);
    /* an unterminated begin marker keeps asking */
    CHECK_EQ_INT(chat_input_feed(&ci, PB, strlen(PB), true), CHAT_IN_MORE);
    CHECK(chat_input_pending(&ci));
    chat_input_reset(&ci);
    CHECK(!chat_input_pending(&ci));
    CHECK_EQ_INT(chat_input_feed(&ci, "next", 4, true), CHAT_IN_DONE);
    CHECK(!strcmp(ci.buf, "next"));
    chat_input_free(&ci);
}

TEST(turns_to_drop) {
    size_t cost[] = {50, 30, 40, 20};
    bool fits = false;
    /* everything fits: none dropped */
    CHECK_EQ_INT((int)chat_turns_to_drop(cost, 4, 10, 150, &fits), 0);
    CHECK(fits);
    /* 10 + 140 = 150 > 149: the oldest goes */
    CHECK_EQ_INT((int)chat_turns_to_drop(cost, 4, 10, 149, &fits), 1);
    CHECK(fits);
    /* 10 + 60 = 70: the two oldest go (whole turns, oldest first) */
    CHECK_EQ_INT((int)chat_turns_to_drop(cost, 4, 10, 70, &fits), 2);
    CHECK(fits);
    CHECK_EQ_INT((int)chat_turns_to_drop(cost, 4, 10, 69, &fits), 3);
    CHECK_EQ_INT((int)chat_turns_to_drop(cost, 4, 10, 10, &fits), 4);
    CHECK(fits);
    /* the kept part alone is too big */
    CHECK_EQ_INT((int)chat_turns_to_drop(cost, 4, 11, 10, &fits), 4);
    CHECK(!fits);
    CHECK_EQ_INT((int)chat_turns_to_drop(NULL, 0, 5, 10, &fits), 0);
    CHECK(fits);
}

int main(void) {
    RUN(plain_line);
    RUN(backslash_continues);
    RUN(quote_block);
    RUN(paste_one_piece);
    RUN(paste_across_lines);
    RUN(turns_to_drop);
    return check_summary();
}
