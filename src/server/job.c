/*
 * job.c - a request in flight (srv_job, server.h): made and filled by an HTTP handler,
 * run by the scheduler (sched.c), reference counted between the two; the text channel the
 * handler waits on; the message ends of a chat prompt (where the scheduler splits the
 * prefill and keeps prefix-cache snapshots).
 */
#include "server/server.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- jobs */

srv_job *srv_job_new(void) {
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->slot = -1;
    if (tern_str_append(&j->text, "", 0)) { free(j); return NULL; }
    return j;
}

void srv_job_unref(srv_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    tern_tokens_free(&j->prompt);
    tern_str_free(&j->text);
    for (size_t i = 0; i < j->n_stop; i++) free(j->stop[i]);
    free(j->stop);
    free(j->bias_ids);
    free(j->bias);
    free(j->samplers);
    free(j->dry_ids);
    free(j->lp);
    free(j->marks);
    tern_grammar_matcher_free(j->gm);
    tern_grammar_free(j->grammar);
    srv_job_unref(j->lead);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void srv_job_follow(srv_job *f, srv_job *lead) {
    pthread_mutex_lock(&lead->mu);
    lead->refs++;
    pthread_mutex_unlock(&lead->mu);
    f->lead = lead;
    /* a choice that evaluates the prompt itself (follower_cold) splits it as the lead does */
    if (!f->marks && lead->n_marks && (f->marks = malloc((size_t)lead->n_marks * sizeof *f->marks))) {
        memcpy(f->marks, lead->marks, (size_t)lead->n_marks * sizeof *f->marks);
        f->n_marks = lead->n_marks;
    }
    f->chat = lead->chat;
}

static bool tok_is(const tern_tokenizer *t, int32_t id, const char *s) {
    size_t n = 0;
    const char *b = tern_token_bytes(t, id, &n);
    return b && n == strlen(s) && !memcmp(b, s, n);
}

void srv_job_chat_marks(srv_job *j, const tern_tokenizer *tok, bool chat) {
    j->chat = chat;
    free(j->marks);
    j->marks = NULL;
    j->n_marks = 0;
    const int32_t end = tern_token_lookup(tok, "<|im_end|>", 10);
    if (end < 0) return;
    /* the first, the last but one and the last message end below the prompt's end: the
     * system prompt (shared by conversations), the turn a regenerated or edited last message
     * goes on from, and the turn the next request of this conversation goes on from */
    size_t e[3] = {0, 0, 0}, n_e = 0, first = 0;
    for (size_t i = 0; i < j->prompt.n; i++) {
        if (j->prompt.ids[i] != end) continue;
        size_t at = i + 1;
        if (at < j->prompt.n && tok_is(tok, j->prompt.ids[at], "\n")) at++;
        if (at >= j->prompt.n) break;
        if (!n_e++) first = at;
        e[0] = e[1];
        e[1] = e[2];
        e[2] = at;
    }
    if (n_e) j->chat = true; /* a raw prompt in ChatML (a client that renders the template) */
    if (!n_e || !(j->marks = malloc(3 * sizeof *j->marks))) return;
    const size_t cand[3] = {first, n_e > 1 ? e[1] : 0, e[2]};
    for (int k = 0; k < 3; k++) /* ascending, distinct */
        if (cand[k] && (!j->n_marks || cand[k] > j->marks[j->n_marks - 1])) j->marks[j->n_marks++] = (uint32_t)cand[k];
}

void srv_job_cancel(srv_job *j) { atomic_store_explicit(&j->cancel, 1, memory_order_relaxed); }

bool srv_job_wait(srv_job *j, int timeout_ms, size_t *seen, tern_str *out) {
    pthread_mutex_lock(&j->mu);
    if (j->text.len == *seen && !j->done && timeout_ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        while (j->text.len == *seen && !j->done)
            if (pthread_cond_timedwait(&j->cv, &j->mu, &ts) == ETIMEDOUT) break;
    }
    if (j->text.len > *seen && out) tern_str_append(out, j->text.data + *seen, j->text.len - *seen);
    *seen = j->text.len;
    bool done = j->done;
    pthread_mutex_unlock(&j->mu);
    return done;
}
