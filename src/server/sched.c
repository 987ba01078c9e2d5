/*
 * sched.c - the scheduler of `tern serve`: one thread (the one that calls
 * srv_sched_run: the main thread in `tern serve`) owns the model, the
 * slots (one tern_session each, with its own KV cache and GDN states) and a
 * bounded FIFO of waiting jobs.
 *
 * Each round:
 *   1. admit waiting jobs into idle slots (session reset, sampler created,
 *      prompt tokens recorded for the penalties);
 *   2. every decoding slot samples one token from its last logits and applies
 *      the stop rules (end of generation, stop strings, max tokens, full
 *      context, cancel), publishing the text that is safe to show;
 *   3. sched_forward() advances every active slot by one step: a prefill slot
 *      by one chunk of its prompt (so a long prompt does not starve the
 *      others), a decoding slot by the token it just sampled.
 * The stop rules and the text hold-back are those of tern_generate() (same
 * order of sample / accept / detokenize / stop check), and prefill chunks
 * start where a single tern_session_eval() call would split the prompt, so a
 * request gives the same tokens as `tern run` with the same settings.
 *
 * Continuous batching: sched_forward() is the only place that runs the model.
 * Decoding slots advance together through tern_session_eval_batch() (one
 * weight pass for up to SCHED_BATCH of them); a prefill chunk runs on its own.
 */
#include "server/server.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

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
    free(j->lp);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void srv_job_cancel(srv_job *j) { __atomic_store_n(&j->cancel, 1, __ATOMIC_RELAXED); }

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

/* ---------------------------------------------------------------- slots */

enum { SLOT_IDLE = 0, SLOT_PREFILL, SLOT_DECODE };

typedef struct slot {
    int id, phase;
    tern_session *sess;
    srv_job *job;
    tern_sampler *smp;
    size_t n_fed;                   /* prompt tokens evaluated */
    tern_tokens gen;                /* sampled ids */
    tern_str text;                  /* reply text (stop string cut) */
    size_t emitted;                 /* bytes of text published to the job */
    tern_detok_stream ds;
    int32_t last;                   /* the id to evaluate next (decode) */
    const int32_t *in;              /* this round's input: prefill chunk or &last */
    float *masked;                  /* [n_vocab] logits with eog masked (ignore_eos), lazily */
    size_t n_in;
    tern_status st;                 /* result of this round's forward */
    char err[256];
    double t_start, t_decode;       /* ms: admitted, prefill done */
    size_t info_prompt;             /* for srv_sched_slots (guarded by the scheduler's mu) */
    bool info_busy;
} slot;

struct srv_sched {
    tern_model *model;
    const tern_tokenizer *tok;
    int n_vocab, chunk;
    int32_t *eog;                   /* the end-of-generation ids (ignore_eos masks them) */
    int n_eog;
    srv_sched_params p;
    slot *slots;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_job **queue;                /* ring of p.queue_cap */
    int q_head, q_n;
    int busy;
    bool stop;
    bool draining;                  /* srv_sched_drain: no admissions; stop when idle or at drain_end */
    double drain_end;               /* ms (now_ms clock) */
};

/* Publish text[emitted, upto) and the token count to the job's channel. */
static void publish(slot *sl, size_t upto) {
    srv_job *j = sl->job;
    pthread_mutex_lock(&j->mu);
    if (upto > sl->emitted && !tern_str_append(&j->text, sl->text.data + sl->emitted, upto - sl->emitted))
        sl->emitted = upto;
    j->n_gen = sl->gen.n;
    /* a streaming handler wants every piece; a waiting one only the end (a wake-up
     * per token costs a context switch on a machine whose cores the kernels fill) */
    if (j->stream) pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static void job_finish(srv_job *j, srv_finish f, const char *err, const srv_usage *u) {
    pthread_mutex_lock(&j->mu);
    j->finish = f;
    if (err) snprintf(j->error, sizeof j->error, "%s", err);
    if (u) j->usage = *u;
    j->done = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    srv_job_unref(j);
}

static void slot_finish(srv_sched *s, slot *sl, srv_finish f, const char *err) {
    if (f != SRV_FINISH_ERROR && !tern_detok_stream_flush(&sl->ds, &sl->text)) publish(sl, sl->text.len);
    double t = now_ms();
    srv_usage u = {sl->job->prompt.n, sl->gen.n, 0, 0};
    u.prompt_ms = (sl->t_decode ? sl->t_decode : t) - sl->t_start;
    u.gen_ms = sl->t_decode ? t - sl->t_decode : 0;
    srv_job *j = sl->job;
    sl->job = NULL;
    sl->phase = SLOT_IDLE;
    tern_sampler_free(sl->smp);
    sl->smp = NULL;
    pthread_mutex_lock(&s->mu);     /* the slot is free before the client hears of the end */
    s->busy--;
    sl->info_busy = false;
    pthread_mutex_unlock(&s->mu);
    job_finish(j, f, err, &u);
}

/* Take a job into an idle slot. Called with s->mu held. */
static void slot_start(srv_sched *s, slot *sl, srv_job *j) {
    sl->job = j;
    sl->n_fed = 0;
    sl->gen.n = 0;
    sl->text.len = 0;
    if (sl->text.data) sl->text.data[0] = 0;
    sl->emitted = 0;
    memset(&sl->ds, 0, sizeof sl->ds);
    sl->t_start = now_ms();
    sl->t_decode = 0;
    sl->phase = SLOT_PREFILL;
    s->busy++;
    sl->info_busy = true;
    sl->info_prompt = j->prompt.n;
    pthread_mutex_lock(&j->mu);
    j->started = true;
    j->slot = sl->id;
    pthread_mutex_unlock(&j->mu);
    tern_session_reset(sl->sess);
    const char *why = NULL;
    if (!j->prompt.n) why = "empty prompt";
    else if (j->prompt.n > (size_t)tern_session_n_ctx(sl->sess)) why = "the prompt does not fit the context";
    else if (tern_str_append(&sl->text, "", 0) || tern_sampler_new(&j->sp, s->n_vocab, &sl->smp)) why = tern_last_error();
    if (why) {
        snprintf(sl->err, sizeof sl->err, "%s", why);
        sl->phase = SLOT_IDLE;  /* finished by the caller's round (outside the lock) */
        return;
    }
    for (size_t i = 0; i < j->prompt.n; i++) tern_sampler_accept(sl->smp, j->prompt.ids[i]); /* as tern_generate */
}

static int sched_record_logprob(srv_sched *s, srv_job *j, const float *logits, int32_t id) {
    pthread_mutex_lock(&j->mu);
    int rc = 0;
    if (j->n_lp == j->cap_lp) {
        size_t cap = j->cap_lp ? j->cap_lp * 2 : 64;
        srv_logprob *p = realloc(j->lp, cap * sizeof *p);
        if (!p) rc = 1;
        else { j->lp = p; j->cap_lp = cap; }
    }
    if (!rc) srv_logprob_of(logits, s->n_vocab, id, j->logprobs, &j->lp[j->n_lp++]);
    pthread_mutex_unlock(&j->mu);
    return rc;
}

/* Sample one token and apply the stop rules; on going on, sets the next input. */
static void slot_sample(srv_sched *s, slot *sl) {
    srv_job *j = sl->job;
    sl->n_in = 0;
    if (__atomic_load_n(&j->cancel, __ATOMIC_RELAXED)) { slot_finish(s, sl, SRV_FINISH_CANCELLED, NULL); return; }
    if (j->max_tokens > 0 && sl->gen.n >= (size_t)j->max_tokens) { slot_finish(s, sl, SRV_FINISH_LENGTH, NULL); return; }
    const float *logits = tern_session_logits(sl->sess);
    if ((j->ignore_eos && s->n_eog) || j->n_bias) {
        if (!sl->masked && !(sl->masked = malloc((size_t)s->n_vocab * sizeof(float)))) {
            slot_finish(s, sl, SRV_FINISH_ERROR, "out of memory");
            return;
        }
        memcpy(sl->masked, logits, (size_t)s->n_vocab * sizeof(float));
        for (size_t i = 0; i < j->n_bias; i++)    /* logit_bias (ids checked at submit) */
            if (j->bias_ids[i] >= 0 && j->bias_ids[i] < s->n_vocab) sl->masked[j->bias_ids[i]] += j->bias[i];
        if (j->ignore_eos)
            for (int i = 0; i < s->n_eog; i++) sl->masked[s->eog[i]] = -INFINITY;
        logits = sl->masked;
    }
    int32_t id = tern_sampler_sample(sl->smp, logits);
    tern_sampler_accept(sl->smp, id);
    if (tern_tokens_push(&sl->gen, id)) { slot_finish(s, sl, SRV_FINISH_ERROR, "out of memory"); return; }
    if (tern_token_is_eog(s->tok, id)) { slot_finish(s, sl, SRV_FINISH_STOP, NULL); return; }
    if (j->logprobs >= 0 && sched_record_logprob(s, j, logits, id)) {
        slot_finish(s, sl, SRV_FINISH_ERROR, "out of memory");
        return;
    }
    size_t before = sl->text.len;
    if (tern_detok_stream_push(&sl->ds, s->tok, id, &sl->text)) { slot_finish(s, sl, SRV_FINISH_ERROR, "out of memory"); return; }
    bool stopped;
    size_t safe = tern_stop_scan(sl->text.data, sl->text.len, before, (const char *const *)j->stop, j->n_stop, &stopped);
    if (stopped) { sl->text.len = safe; sl->text.data[safe] = 0; }
    publish(sl, safe);
    if (stopped) {
        /* the cut text is final: nothing held back may be flushed after it */
        memset(&sl->ds, 0, sizeof sl->ds);
        slot_finish(s, sl, SRV_FINISH_STOP, NULL);
        return;
    }
    if (tern_session_pos(sl->sess) >= tern_session_n_ctx(sl->sess)) { slot_finish(s, sl, SRV_FINISH_LENGTH, NULL); return; }
    sl->last = id;
    sl->in = &sl->last;
    sl->n_in = 1;
}

/* Advance the given slots by one step: evaluate each one's pending input (a
 * prefill chunk, or the token it just sampled) so that its logits are ready.
 * Decoding slots step together: one tern_session_eval_batch() per group of at
 * most SCHED_BATCH reads the weights once for the group. Below 6 rows the
 * batched pass is bit-identical to stepping each session alone (test_batch), so
 * a request's text does not depend on what else is running; larger groups
 * would switch the AVX-512 matmul to its GEMM kernel (results within 1e-3, not
 * identical) and, on 2 cores, run slower than 5 (docs/performance.md). */
#define SCHED_BATCH 5

static void slot_eval_alone(slot *sl) {
    sl->st = tern_session_eval(sl->sess, sl->in, sl->n_in, NULL);
    if (sl->st) snprintf(sl->err, sizeof sl->err, "%s", tern_last_error());
}

static void eval_group(slot **g, int n) {
    if (n == 1) { slot_eval_alone(g[0]); return; }
    tern_session *ss[SCHED_BATCH] = {0};
    int32_t ids[SCHED_BATCH] = {0};
    for (int k = 0; k < n; k++) { ss[k] = g[k]->sess; ids[k] = g[k]->in[0]; }
    if (tern_session_eval_batch(ss, ids, (size_t)n, NULL) == TERN_OK)
        for (int k = 0; k < n; k++) g[k]->st = TERN_OK;
    else /* a refused batch changed nothing: step each alone to find the culprit */
        for (int k = 0; k < n; k++) slot_eval_alone(g[k]);
}

static void sched_forward(srv_sched *s, slot **act, int n) {
    (void)s;
    slot *g[SCHED_BATCH];
    int ng = 0;
    for (int i = 0; i < n; i++) {
        if (act[i]->phase != SLOT_DECODE || act[i]->n_in != 1) { slot_eval_alone(act[i]); continue; }
        g[ng++] = act[i];
        if (ng == SCHED_BATCH) { eval_group(g, ng); ng = 0; }
    }
    if (ng) eval_group(g, ng);
}

void srv_sched_run(srv_sched *s) {
    int N = s->p.n_parallel;
    slot **act = calloc((size_t)N, sizeof *act);
    if (!act) { srv_sched_stop(s); N = 0; }
    for (;;) {
        pthread_mutex_lock(&s->mu);
        if (s->draining && !s->stop) {
            while (s->q_n) {        /* waiting jobs will not run: 503 at once */
                srv_job *j = s->queue[s->q_head];
                s->q_head = (s->q_head + 1) % s->p.queue_cap;
                s->q_n--;
                job_finish(j, SRV_FINISH_ERROR, "the server is shutting down", NULL);
            }
            if (!s->busy || now_ms() >= s->drain_end) s->stop = true;
        }
        for (int i = 0; i < N && s->q_n && !s->stop && !s->draining; i++) {
            slot *sl = &s->slots[i];
            if (sl->job) continue;
            srv_job *j = s->queue[s->q_head];
            s->q_head = (s->q_head + 1) % s->p.queue_cap;
            s->q_n--;
            slot_start(s, sl, j);
        }
        if (s->stop) { pthread_mutex_unlock(&s->mu); break; }
        if (!s->busy) {
            pthread_cond_wait(&s->cv, &s->mu);
            pthread_mutex_unlock(&s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        /* jobs that failed at admission */
        for (int i = 0; i < N; i++)
            if (s->slots[i].job && s->slots[i].phase == SLOT_IDLE) slot_finish(s, &s->slots[i], SRV_FINISH_ERROR, s->slots[i].err);
        for (int i = 0; i < N; i++)
            if (s->slots[i].job && s->slots[i].phase == SLOT_DECODE) slot_sample(s, &s->slots[i]);
        int n = 0;
        for (int i = 0; i < N; i++) {
            slot *sl = &s->slots[i];
            if (!sl->job) continue;
            if (sl->phase == SLOT_PREFILL) {
                if (__atomic_load_n(&sl->job->cancel, __ATOMIC_RELAXED)) { slot_finish(s, sl, SRV_FINISH_CANCELLED, NULL); continue; }
                size_t rem = sl->job->prompt.n - sl->n_fed;
                sl->in = sl->job->prompt.ids + sl->n_fed;
                sl->n_in = rem < (size_t)s->chunk ? rem : (size_t)s->chunk;
            }
            if (sl->n_in) act[n++] = sl;
        }
        sched_forward(s, act, n);
        for (int i = 0; i < n; i++) {
            slot *sl = act[i];
            if (sl->st) { slot_finish(s, sl, SRV_FINISH_ERROR, sl->err); continue; }
            if (sl->phase == SLOT_PREFILL && (sl->n_fed += sl->n_in) == sl->job->prompt.n) {
                sl->phase = SLOT_DECODE;
                sl->t_decode = now_ms();
            }
        }
    }
    /* shutting down: every running and waiting job ends */
    for (int i = 0; i < N; i++)
        if (s->slots[i].job) slot_finish(s, &s->slots[i], SRV_FINISH_ERROR, "the server is shutting down");
    pthread_mutex_lock(&s->mu);
    while (s->q_n) {
        srv_job *j = s->queue[s->q_head];
        s->q_head = (s->q_head + 1) % s->p.queue_cap;
        s->q_n--;
        job_finish(j, SRV_FINISH_ERROR, "the server is shutting down", NULL);
    }
    pthread_mutex_unlock(&s->mu);
    free(act);
}

/* ---------------------------------------------------------------- api */

static void sched_free(srv_sched *s) {
    if (!s) return;
    for (int i = 0; s->slots && i < s->p.n_parallel; i++) {
        tern_session_free(s->slots[i].sess);
        tern_sampler_free(s->slots[i].smp);
        tern_tokens_free(&s->slots[i].gen);
        tern_str_free(&s->slots[i].text);
        free(s->slots[i].masked);
    }
    free(s->slots);
    free(s->queue);
    free(s->eog);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

tern_status srv_sched_new(tern_model *m, const tern_tokenizer *tok, const srv_sched_params *p, srv_sched **out) {
    *out = NULL;
    if (!m || !tok || !p || p->n_parallel < 1 || p->queue_cap < 1) return TERN_ERR_INVALID_ARG;
    srv_sched *s = calloc(1, sizeof *s);
    if (!s) return TERN_ERR_NOMEM;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->model = m;
    s->tok = tok;
    s->p = *p;
    s->n_vocab = tern_model_get_info(m)->n_vocab;
    s->slots = calloc((size_t)p->n_parallel, sizeof *s->slots);
    s->queue = calloc((size_t)p->queue_cap, sizeof *s->queue);
    if (!s->slots || !s->queue) { sched_free(s); return TERN_ERR_NOMEM; }
    for (int pass = 0; pass < 2; pass++) { /* count, then fill */
        s->n_eog = 0;
        for (int32_t id = 0; id < s->n_vocab; id++)
            if (tern_token_is_eog(tok, id)) {
                if (pass) s->eog[s->n_eog] = id;
                s->n_eog++;
            }
        if (!pass && s->n_eog && !(s->eog = malloc((size_t)s->n_eog * sizeof *s->eog))) {
            sched_free(s);
            return TERN_ERR_NOMEM;
        }
    }
    tern_session_params sp;
    tern_session_params_default(&sp);
    sp.n_ctx = p->n_ctx;
    for (int i = 0; i < p->n_parallel; i++) {
        s->slots[i].id = i;
        tern_status st = tern_session_new(m, &sp, &s->slots[i].sess);
        if (st) { sched_free(s); return st; }
    }
    s->p.n_ctx = tern_session_n_ctx(s->slots[0].sess);
    /* prefill steps of the session's own chunk size: the same splits as one eval call */
    s->chunk = s->p.n_ctx < 64 ? s->p.n_ctx : 64;
    *out = s;
    return TERN_OK;
}

int srv_sched_submit(srv_sched *s, srv_job *j) {
    pthread_mutex_lock(&s->mu);
    if (s->stop || s->draining || s->q_n >= s->p.queue_cap) { pthread_mutex_unlock(&s->mu); return 503; }
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
    s->queue[(s->q_head + s->q_n) % s->p.queue_cap] = j;
    s->q_n++;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void srv_sched_stats(srv_sched *s, int *busy, int *queued, int *n_slots, int *n_ctx) {
    pthread_mutex_lock(&s->mu);
    if (busy) *busy = s->busy;
    if (queued) *queued = s->q_n;
    if (n_slots) *n_slots = s->p.n_parallel;
    if (n_ctx) *n_ctx = s->p.n_ctx;
    pthread_mutex_unlock(&s->mu);
}

int srv_sched_slots(srv_sched *s, srv_slot_info *out, int max) {
    pthread_mutex_lock(&s->mu);
    int n = s->p.n_parallel < max ? s->p.n_parallel : max;
    for (int i = 0; i < n; i++) {
        out[i].id = i;
        out[i].busy = s->slots[i].info_busy;
        out[i].n_prompt = s->slots[i].info_busy ? s->slots[i].info_prompt : 0;
        out[i].n_ctx = s->p.n_ctx;
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

void srv_sched_drain(srv_sched *s, double grace_ms) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    if (!s->draining) {
        s->draining = true;
        s->drain_end = now_ms() + (grace_ms > 0 ? grace_ms : 0);
    }
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void srv_sched_stop(srv_sched *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void srv_sched_free(srv_sched *s) { sched_free(s); }
