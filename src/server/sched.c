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
 * Each slot drives one tern_gen (the library's generation step, the loop of
 * tern_generate() written once): tern_gen_prefill per chunk, tern_gen_choose
 * (stop rules, sampling, text hold-back), then the advance. Prefill chunks
 * start where a single tern_session_eval() call would split the prompt, so a
 * request gives the same tokens as `tern run` with the same settings.
 *
 * Continuous batching: sched_forward() is the only place that runs the model.
 * Decoding slots advance together through tern_gen_advance_batch() (one
 * weight pass for up to tern_model_batch_hint() of them); a prefill chunk runs
 * on its own.
 */
#include "server/server.h"

#include <errno.h>
#include <stdatomic.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* ---------------------------------------------------------------- slots */

/* SLOT_WAIT: a choice of n > 1 waiting for choice 0's slot to finish evaluating the
 * prompt, which it then copies (tern_session_copy) instead of evaluating it again */
enum { SLOT_IDLE = 0, SLOT_PREFILL, SLOT_DECODE, SLOT_WAIT };

/* A prefix-cache snapshot of a slot's session (models with recurrent state): valid while
 * the slot's cached tokens keep their first `pos` (the library checks it too). */
typedef struct srv_snap {
    tern_session_snapshot *snap;
    size_t pos;
    uint64_t used;                  /* LRU tick: taken or last restored */
} srv_snap;

/* tern_gen hooks' context (logit_bias, logprobs) */
typedef struct { struct srv_sched *s; srv_job *j; tern_gen *const *gen; } gen_hook;

typedef struct slot {
    int id, phase;
    tern_session *sess;
    srv_job *job;
    tern_sampler *smp;
    tern_gen *gen;                  /* this reply's generation state */
    size_t n_fed;                   /* prompt tokens evaluated */
    size_t emitted;                 /* bytes of the reply text published to the job */
    const int32_t *in;              /* this round's prefill chunk */
    size_t n_in;                    /* its length; 1 for a decoding slot with a pending token */
    tern_status st;                 /* result of this round's forward */
    char err[256];
    double t_start, t_decode;       /* ms: admitted, prefill done */
    size_t info_prompt;             /* for srv_sched_slots (guarded by the scheduler's mu) */
    size_t info_cached;
    bool info_busy;
    /* prefix cache: the tokens the session holds, in order (cached.n == the session's
     * position after every forward; appended only for what was evaluated) */
    tern_tokens cached;
    size_t n_reuse;                 /* this job's prompt tokens taken from the cache */
    int32_t pending;                /* the token chosen this round (decode), evaluated by the forward */
    double last_used;               /* ms: when its last job ended (LRU among idle slots) */
    gen_hook hook;
    bool recurrent;                 /* the session cannot be rewound (GDN): snapshots instead */
    srv_snap *snaps;                /* at message ends, prompt and reply ends, by pos (snap_planned) */
    int n_snaps, cap_snaps;
    int info_snaps;
    int wait;                       /* SLOT_WAIT: the slot of the job's lead */
    tern_drafter *drafter;          /* serve --spec draft:PATH: this slot's draft session */
    int32_t ch_id;                  /* slot_choose's result, used by slot_sample */
    tern_stop_reason ch_why;
    bool ch_fail;
} slot;

struct srv_sched {
    tern_model *model;
    const tern_tokenizer *tok;
    int n_vocab, chunk;
    int batch;                      /* decode group size: p.decode_batch or tern_model_batch_hint() */
    int budget;                     /* prompt tokens per round while a slot decodes (>= chunk) */
    srv_step_stats steps;           /* for /metrics (scheduler thread; read under snap_mu) */
    srv_sched_params p;
    slot *slots;
    slot **dec;                     /* [n_parallel] this round's decoding slots */
    srv_pool *pool;                 /* chooses their tokens in parallel (p.sample_threads) */
    bool par_sample;                /* use it: sample_threads > 1, or 0 and n_vocab >= 32768 */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_job **queue;                /* ring of q_size = p.queue_cap + p.n_parallel */
    int q_size;
    int q_head, q_n;
    int busy;
    bool stop;
    bool draining;                  /* srv_sched_drain: no admissions; stop when idle or at drain_end */
    double drain_end;               /* ms (now_ms clock) */
    /* prefix-cache snapshots of all slots (scheduler thread; the stats and each slot's
     * info_snaps under snap_mu, which may be taken while holding mu) */
    pthread_mutex_t snap_mu;
    uint64_t tick;
    srv_snap_stats snap;          /* count, bytes, each, taken, restored, evicted (under snap_mu) */
    uint64_t admit_free;            /* bytes free the back-end needs to admit a request (0: no check) */
    bool shed;                      /* a request was refused for memory: drop snapshots (under mu) */
    bool own_spec;                  /* srv_sched_new succeeded: p.drafter, draft_model, draft_tok are ours */
};

static slot *lead_slot(srv_sched *s, const srv_job *j);

/* serve --spec: the drafter for a request that did not opt out ("speculative": false).
 * A speculating slot's session moves several positions a pass, so the prefix cache does
 * not follow it (its tokens are not reused by the next request; correct, only colder). */
static void spec_params(const srv_sched *s, const slot *sl, const srv_job *j, tern_gen_params *gp) {
    if (j->no_spec) return;
    gp->drafter = sl->drafter ? sl->drafter : s->p.drafter;
    gp->spec_k = s->p.spec_k;
}
static void follower_cold(srv_sched *s, slot *sl);

/* ------------------------------------------------------- snapshots */

/* keep: the snapshot's storage goes there (for tern_session_snapshot_retake) instead of
 * being freed */
static void snap_drop(srv_sched *s, slot *sl, int k, tern_session_snapshot **keep) {
    uint64_t b = tern_session_snapshot_bytes(sl->snaps[k].snap), bd = tern_session_snapshot_backend_bytes(sl->snaps[k].snap);
    if (keep) *keep = sl->snaps[k].snap;
    else tern_session_snapshot_free(sl->snaps[k].snap);
    memmove(&sl->snaps[k], &sl->snaps[k + 1], (size_t)(sl->n_snaps - k - 1) * sizeof *sl->snaps);
    sl->n_snaps--;
    pthread_mutex_lock(&s->snap_mu);
    s->snap.bytes -= b;
    s->snap.backend_bytes -= bd;
    s->snap.count--;
    sl->info_snaps = sl->n_snaps;
    pthread_mutex_unlock(&s->snap_mu);
}

/* The slot's session goes on from position pos with other tokens: snapshots beyond
 * it are void. */
static void snaps_keep_upto(srv_sched *s, slot *sl, size_t pos) {
    while (sl->n_snaps && sl->snaps[sl->n_snaps - 1].pos > pos) snap_drop(s, sl, sl->n_snaps - 1, NULL);
}

static bool evict_lru(srv_sched *s, tern_session_snapshot **keep) {
    slot *vs = NULL;
    int vk = -1;
    for (int i = 0; i < s->p.n_parallel; i++)
        for (int k = 0; k < s->slots[i].n_snaps; k++)
            if (!vs || s->slots[i].snaps[k].used < vs->snaps[vk].used) {
                vs = &s->slots[i];
                vk = k;
            }
    if (!vs) return false;
    snap_drop(s, vs, vk, keep);
    pthread_mutex_lock(&s->snap_mu);
    s->snap.evicted++;
    pthread_mutex_unlock(&s->snap_mu);
    return true;
}

/* The next message end of j after position pos (0: none). */
static size_t next_mark(const srv_job *j, size_t pos) {
    for (int k = 0; k < j->n_marks; k++)
        if (j->marks[k] > pos) return j->marks[k];
    return 0;
}

/* Where a prompt takes snapshots, besides its end (and its reply's end, slot_finish):
 *  - a chat prompt: at its message ends (j->marks: the system prompt's end, the last two
 *    turns'), where the next turn of the conversation or another conversation with the
 *    same system prompt goes on; never at chunk boundaries inside it;
 *  - a raw prompt of at least SNAP_RAW_CHUNKS chunks: at chunk boundaries 1, 2, 4, 8, ...
 *    chunks before its last one (and that last one), so a later prompt that shares all
 *    but its last d tokens finds one within about 2d + one chunk of the divergence, for a
 *    copy count logarithmic in the length (a shorter prompt takes only its end: evaluating
 *    it again costs less than keeping copies).
 * Whether pos (reached by the prefill) is such a point; *later: how many this prompt
 * takes after it (its end included). */
#define SNAP_RAW_CHUNKS 4
static bool snap_planned(const srv_sched *s, const srv_job *j, size_t pos, size_t *later) {
    const size_t n = j->prompt.n, c = (size_t)s->chunk;
    *later = 0;
    if (pos >= n) return true;
    if (j->chat || j->n_marks) {
        bool at = false;
        for (int k = 0; k < j->n_marks; k++) {
            if (j->marks[k] == pos) at = true;
            if (j->marks[k] > pos) ++*later;
        }
        ++*later;
        return at;
    }
    if (n < SNAP_RAW_CHUNKS * c || pos % c) return false;
    const size_t K = (n - 1) / c, k = pos / c;
    bool at = false;
    for (size_t d = 0; d < K; d = d ? d * 2 : 1) { /* boundaries K - d, d = 0, 1, 2, 4, ... */
        if (K - d == k) at = true;
        if (K - d > k) ++*later;
    }
    ++*later;
    return at;
}

/* Keep a snapshot of the slot's session, now at position pos, within the budget (least
 * recently used go first); later: the snapshots the prompt takes after this one. In the
 * back-end's memory (device memory on a GPU: a device-to-device copy), else on the host. */
static void snap_take(srv_sched *s, slot *sl, size_t pos, size_t later) {
    uint64_t budget = s->p.snapshot_budget;
    if (!budget || s->p.no_prefix_cache || !sl->recurrent || (s->snap.each && s->snap.each > budget)) return;
    /* when the snapshots this prompt takes after this one alone fill the budget, this one
     * would be dropped (least recently used) before the prompt ends: skip the copy (a
     * 27B's is 153 MiB: 6 fit in the default budget) */
    if (s->snap.each && later >= budget / s->snap.each) return;
    if (sl->n_snaps && sl->snaps[sl->n_snaps - 1].pos >= pos) return; /* kept in order; the same point */
    if (sl->n_snaps == sl->cap_snaps) {
        int cap = sl->cap_snaps ? sl->cap_snaps * 2 : 16;
        srv_snap *q = realloc(sl->snaps, (size_t)cap * sizeof *q);
        if (!q) return;
        sl->snaps = q;
        sl->cap_snaps = cap;
    }
    /* a full budget: the least recently used one's storage is taken again (on a GPU no
     * allocation, and no free, which waits for the whole device) */
    tern_session_snapshot *p = NULL, *v = NULL;
    if (s->snap.each)
        while (s->snap.bytes + s->snap.each > budget && evict_lru(s, &v)) {
            if (!p) p = v;
            else tern_session_snapshot_free(v);
        }
    double t0 = now_ms();
    if (p && tern_session_snapshot_retake(sl->sess, p)) {
        tern_session_snapshot_free(p);
        p = NULL;
    }
    /* out of device memory: the host copy; out of that too: no snapshot, no harm */
    if (!p && tern_session_snapshot_take_in(sl->sess, TERN_SNAPSHOT_BACKEND, &p) &&
        tern_session_snapshot_take_in(sl->sess, TERN_SNAPSHOT_HOST, &p)) {
        pthread_mutex_lock(&s->snap_mu);
        s->snap.skipped++;
        pthread_mutex_unlock(&s->snap_mu);
        return;
    }
    uint64_t b = tern_session_snapshot_bytes(p), bd = tern_session_snapshot_backend_bytes(p);
    s->snap.each = b;
    if (b > budget) { tern_session_snapshot_free(p); return; }
    while (s->snap.bytes + b > budget && evict_lru(s, NULL)) {}
    sl->snaps[sl->n_snaps++] = (srv_snap){p, pos, ++s->tick};
    pthread_mutex_lock(&s->snap_mu);
    s->snap.bytes += b;
    s->snap.backend_bytes += bd;
    s->snap.count++;
    s->snap.taken++;
    s->snap.take_s += (now_ms() - t0) / 1e3;
    sl->info_snaps = sl->n_snaps;
    pthread_mutex_unlock(&s->snap_mu);
}

/* Publish the reply text that is safe to show (all of it when `all`) and the token
 * count to the job's channel. */
static void publish(slot *sl, bool all) {
    srv_job *j = sl->job;
    size_t len, safe, n_gen;
    const char *text = tern_gen_text(sl->gen, &len, &safe);
    size_t upto = all ? len : safe;
    tern_gen_tokens(sl->gen, &n_gen);
    pthread_mutex_lock(&j->mu);
    if (upto > sl->emitted && !tern_str_append(&j->text, text + sl->emitted, upto - sl->emitted))
        sl->emitted = upto;
    j->n_gen = n_gen;
    /* a token's logprob entry is placed once the text grew past where it began (a
     * token whose bytes the detokenizer holds back waits for the one completing them) */
    while (j->n_lp_placed < j->n_lp && (all || len > j->lp[j->n_lp_placed].start))
        j->lp[j->n_lp_placed++].end = len;
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

/* Start evaluating the job's prompt from the n_reuse tokens the session holds; the
 * penalties see the cached part of the prompt as tern_gen_prefill shows them the rest. */
static void slot_go_prefill(slot *sl) {
    sl->phase = SLOT_PREFILL;
    for (size_t i = 0; i < sl->n_reuse; i++) tern_sampler_accept(sl->smp, sl->job->prompt.ids[i]);
    if (sl->n_reuse == sl->job->prompt.n) { /* a snapshot at the prompt's end: its logits are restored */
        sl->phase = SLOT_DECODE;
        sl->t_decode = now_ms();
    }
}

static void slot_finish(srv_sched *s, slot *sl, srv_finish f, const char *err) {
    if (f != SRV_FINISH_ERROR && sl->gen && !tern_gen_finish(sl->gen)) publish(sl, true);
    double t = now_ms();
    size_t n_gen = 0;
    if (sl->gen) tern_gen_tokens(sl->gen, &n_gen);
    srv_usage u = {sl->job->prompt.n, n_gen, 0, 0, sl->n_reuse, sl->n_fed > sl->n_reuse ? sl->n_fed - sl->n_reuse : 0};
    u.prompt_ms = (sl->t_decode ? sl->t_decode : t) - sl->t_start;
    u.gen_ms = sl->t_decode ? t - sl->t_decode : 0;
    /* the end of the reply: the next turn of this conversation goes on from here (the
     * session as it is, or this snapshot once the slot went on with another request from
     * a later point) */
    if ((f == SRV_FINISH_STOP || f == SRV_FINISH_LENGTH || f == SRV_FINISH_TOOL_CALLS) && sl->phase == SLOT_DECODE &&
        sl->cached.n > sl->job->prompt.n && sl->cached.n == (size_t)tern_session_pos(sl->sess))
        snap_take(s, sl, sl->cached.n, 0);
    srv_job *j = sl->job;
    sl->job = NULL;
    int was = sl->phase;
    sl->phase = SLOT_IDLE;
    if (was == SLOT_PREFILL) /* choices waiting for this prompt evaluate it themselves */
        for (int i = 0; i < s->p.n_parallel; i++)
            if (s->slots[i].job && s->slots[i].phase == SLOT_WAIT && s->slots[i].wait == sl->id)
                follower_cold(s, &s->slots[i]);
    size_t sd = 0, sa = 0, sn = 0;
    tern_gen_spec_stats(sl->gen, &sd, &sa, &sn);
    tern_gen_free(sl->gen);
    sl->gen = NULL;
    tern_sampler_free(sl->smp);
    sl->smp = NULL;
    pthread_mutex_lock(&s->snap_mu); /* counted before the client hears of the end */
    s->steps.spec_drafted += sd;
    s->steps.spec_accepted += sa;
    s->steps.spec_steps += sn;
    s->steps.evaluated_tokens += u.evaluated_tokens;
    s->steps.gen_tokens += u.completion_tokens;
    if (!j->lead) { /* a request's prompt and times once (choice 0), as its usage shows them */
        s->steps.jobs++;
        s->steps.prompt_tokens += u.prompt_tokens;
        s->steps.cached_tokens += u.cached_tokens < u.prompt_tokens ? u.cached_tokens : u.prompt_tokens;
        s->steps.prompt_s += u.prompt_ms / 1e3;
        s->steps.gen_s += u.gen_ms / 1e3;
    }
    pthread_mutex_unlock(&s->snap_mu);
    pthread_mutex_lock(&s->mu);     /* the slot is free before the client hears of the end */
    s->busy--;
    sl->info_busy = false;
    sl->info_cached = sl->cached.n;
    sl->last_used = t;
    pthread_mutex_unlock(&s->mu);
    job_finish(j, f, err, &u);
}

/* Take a job into an idle slot. Called with s->mu held. */
static int sched_record_logprob(srv_sched *s, srv_job *j, const float *logits, int32_t id, size_t start) {
    pthread_mutex_lock(&j->mu);
    int rc = 0;
    if (j->n_lp == j->cap_lp) {
        size_t cap = j->cap_lp ? j->cap_lp * 2 : 64;
        srv_logprob *p = realloc(j->lp, cap * sizeof *p);
        if (!p) rc = 1;
        else { j->lp = p; j->cap_lp = cap; }
    }
    if (!rc) {
        srv_logprob *e = &j->lp[j->n_lp++];
        srv_logprob_of(logits, s->n_vocab, id, j->logprobs, e);
        e->start = start;
        e->end = start;
    }
    pthread_mutex_unlock(&j->mu);
    return rc;
}

/* tern_gen hooks: logit_bias before sampling, logprobs of each sampled token */
static void hook_bias(float *logits, int n_vocab, void *u) {
    srv_job *j = ((gen_hook *)u)->j;
    for (size_t i = 0; i < j->n_bias; i++) /* ids checked at submit */
        if (j->bias_ids[i] >= 0 && j->bias_ids[i] < n_vocab) logits[j->bias_ids[i]] += j->bias[i];
}
static bool hook_logprob(const float *logits, int n_vocab, int32_t id, void *u) {
    gen_hook *h = u;
    (void)n_vocab;
    size_t len = 0;     /* called before the token's text is added */
    if (*h->gen) tern_gen_text(*h->gen, &len, NULL);
    return sched_record_logprob(h->s, h->j, logits, id, len) == 0;
}

/* How many of prompt's tokens slot sl can take from its session: the longest common
 * prefix of its cached tokens and the prompt, keeping at least one prompt token to
 * evaluate (its logits start the reply). A session with recurrent (GDN) state cannot
 * be rewound: there the whole cached sequence counts when the prompt extends it, or
 * else the deepest snapshot within the common prefix (*snap: its index; -1 when the
 * session is used as it is). A snapshot at the prompt's whole length brings its
 * logits back, so nothing is evaluated then. */
static size_t usable_prefix(const srv_sched *s, const slot *sl, const srv_job *j, int *snap) {
    if (snap) *snap = -1;
    if (s->p.no_prefix_cache || j->no_cache || !sl->cached.n || !j->prompt.n) return 0;
    if (sl->cached.n != (size_t)tern_session_pos(sl->sess)) return 0; /* never expected */
    size_t n = sl->cached.n < j->prompt.n ? sl->cached.n : j->prompt.n, l = 0;
    while (l < n && sl->cached.ids[l] == j->prompt.ids[l]) l++;
    size_t live = l > j->prompt.n - 1 ? j->prompt.n - 1 : l, best = 0;
    if (!sl->recurrent || live == sl->cached.n) best = live;
    for (int k = sl->n_snaps - 1; k >= 0; k--)
        if (sl->snaps[k].pos <= l) {
            if (sl->snaps[k].pos > best) {
                best = sl->snaps[k].pos;
                if (snap) *snap = k;
            }
            break;
        }
    return best;
}

/* The idle slot for job j: the longest usable prefix; without any, an empty slot,
 * else the least recently used one. Called with s->mu held. */
static slot *pick_slot(srv_sched *s, const srv_job *j) {
    /* a choice that will copy choice 0's session needs no prefix: spare the cached ones */
    bool share = lead_slot(s, j) != NULL;
    slot *best = NULL;
    size_t best_n = 0;
    for (int i = 0; i < s->p.n_parallel; i++) {
        slot *sl = &s->slots[i];
        if (sl->job) continue;
        size_t u = share ? 0 : usable_prefix(s, sl, j, NULL);
        if (!best || u > best_n ||
            (u == best_n && !best_n &&
             (best->cached.n ? (!sl->cached.n || sl->last_used < best->last_used) : false))) {
            best = sl;
            best_n = u;
        }
    }
    return best;
}

/* The slot running job j's lead (n > 1), or NULL. */
static slot *lead_slot(srv_sched *s, const srv_job *j) {
    if (!j->lead) return NULL;
    for (int i = 0; i < s->p.n_parallel; i++)
        if (s->slots[i].job == j->lead) return &s->slots[i];
    return NULL;
}

/* The lead's session holds exactly its prompt (decoding, nothing sampled yet). */
static bool lead_fresh(const slot *ls) {
    size_t n = 0;
    if (ls->gen) tern_gen_tokens(ls->gen, &n);
    return n == 0 && ls->n_fed == ls->job->prompt.n && (size_t)tern_session_pos(ls->sess) == ls->job->prompt.n;
}

/* Choice sl takes the lead's evaluated prompt (tern_session_copy: KV rows, GDN states,
 * logits) and starts decoding: the same state as evaluating the prompt itself. When the
 * copy fails the slot evaluates the prompt itself (follower_cold) and false is returned. */
static void follower_cold(srv_sched *s, slot *sl) {
    snaps_keep_upto(s, sl, 0);
    tern_session_reset(sl->sess);
    sl->n_reuse = sl->n_fed = sl->cached.n = sl->info_cached = 0;
    slot_go_prefill(sl);
}

static bool follower_copy(srv_sched *s, slot *sl, slot *ls) {
    const srv_job *j = sl->job;
    snaps_keep_upto(s, sl, 0);      /* the copy voids them */
    if (tern_session_copy(sl->sess, ls->sess)) {
        follower_cold(s, sl);
        return false;
    }
    sl->cached.n = 0;
    for (size_t i = 0; i < j->prompt.n; i++)
        if (tern_tokens_push(&sl->cached, j->prompt.ids[i])) { sl->cached.n = 0; break; }
    sl->n_reuse = sl->n_fed = j->prompt.n;
    sl->info_cached = sl->n_reuse;
    slot_go_prefill(sl);            /* penalties see the prompt; straight to decoding */
    return true;
}

static void slot_start(srv_sched *s, slot *sl, srv_job *j) {
    sl->job = j;
    sl->n_fed = 0;
    sl->n_in = 0;
    sl->emitted = 0;
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
    /* n > 1: choice 0's slot evaluates the prompt (or has just done so), this one copies
     * its session (follower_copy) instead of evaluating the prompt again */
    slot *ls = lead_slot(s, j);
    bool share = ls && (ls->phase == SLOT_PREFILL || (ls->phase == SLOT_DECODE && lead_fresh(ls)));
    int si = -1;
    sl->n_reuse = share ? 0 : usable_prefix(s, sl, j, &si);
    if (si >= 0) {
        double t0 = now_ms();
        if (tern_session_snapshot_restore(sl->sess, sl->snaps[si].snap)) sl->n_reuse = 0;
        else {
            sl->snaps[si].used = ++s->tick;
            pthread_mutex_lock(&s->snap_mu);
            s->snap.restored++;
            s->snap.restore_s += (now_ms() - t0) / 1e3;
            pthread_mutex_unlock(&s->snap_mu);
        }
    } else if (sl->n_reuse && tern_session_truncate(sl->sess, (int)sl->n_reuse)) {
        sl->n_reuse = 0;
    }
    if (!sl->n_reuse && !share) tern_session_reset(sl->sess); /* share: the copy replaces it */
    snaps_keep_upto(s, sl, sl->n_reuse); /* the prompt goes on from there: the rest are void */
    sl->cached.n = sl->n_reuse;
    sl->n_fed = sl->n_reuse;
    sl->info_cached = sl->n_reuse;
    const char *why = NULL;
    if (!j->prompt.n) why = "empty prompt";
    else if (j->prompt.n > (size_t)tern_session_n_ctx(sl->sess)) why = "the prompt does not fit the context";
    else {
        tern_gen_params gp = {0};
        gp.max_tokens = j->max_tokens;
        gp.stop = (const char *const *)j->stop;
        gp.n_stop = j->n_stop;
        gp.cancel = &j->cancel;
        gp.ignore_eos = j->ignore_eos;
        gp.grammar = j->gm;
        spec_params(s, sl, j, &gp);
        sl->hook = (gen_hook){s, j, &sl->gen};
        if (j->n_bias) {
            gp.process = hook_bias;
            gp.process_user = &sl->hook;
        }
        if (j->logprobs >= 0) {
            gp.on_token = hook_logprob;
            gp.token_user = &sl->hook;
        }
        if (tern_sampler_new(&j->sp, s->n_vocab, &sl->smp) || tern_gen_new(sl->sess, s->tok, sl->smp, &gp, &sl->gen))
            why = tern_last_error();
    }
    if (why) {
        snprintf(sl->err, sizeof sl->err, "%s", why);
        sl->phase = SLOT_IDLE;  /* finished by the caller's round (outside the lock) */
        return;
    }
    if (share && ls->phase == SLOT_PREFILL) { /* copied when the lead's prompt is in */
        sl->phase = SLOT_WAIT;
        sl->wait = ls->id;
        return;
    }
    if (share && !follower_copy(s, sl, ls)) return; /* follower_copy went on cold itself */
    if (!share) slot_go_prefill(sl);
}

static srv_finish finish_of(tern_stop_reason r) {
    switch (r) {
    case TERN_STOP_EOG: case TERN_STOP_STRING: return SRV_FINISH_STOP;
    case TERN_STOP_MAX_TOKENS: case TERN_STOP_CONTEXT_FULL: return SRV_FINISH_LENGTH;
    case TERN_STOP_CANCELLED: return SRV_FINISH_CANCELLED;
    default: return SRV_FINISH_ERROR;
    }
}

/* Choose one token (the stop rules and sampling of tern_gen_choose); on going on,
 * the token is pending and the slot takes part in this round's forward. */
/* The part of it that touches only the slot's own state (sampler, grammar, logprobs,
 * text): run for all decoding slots at once on the pool, before slot_sample. */
static void slot_choose(void *ctx, int i) {
    slot *sl = ((slot **)ctx)[i];
    sl->ch_fail = tern_gen_choose(sl->gen, &sl->ch_id, &sl->ch_why) != TERN_OK;
    if (sl->ch_fail) snprintf(sl->err, sizeof sl->err, "%s", tern_last_error());
}
static void slot_sample(srv_sched *s, slot *sl) {
    sl->n_in = 0;
    int32_t id = sl->ch_id;
    tern_stop_reason why = sl->ch_why;
    if (sl->ch_fail) {
        char err[256];
        snprintf(err, sizeof err, "%s", sl->err);
        slot_finish(s, sl, SRV_FINISH_ERROR, err);
        return;
    }
    publish(sl, false);
    if (why != TERN_STOP_NONE) { slot_finish(s, sl, finish_of(why), NULL); return; }
    sl->pending = id;               /* the forward evaluates it: then it is in the session */
    sl->n_in = 1;
}

/* Advance the given slots by one step: evaluate each one's pending input (a
 * prefill chunk, or the token it just chose) so that its logits are ready.
 * Decoding slots step together: one tern_gen_advance_batch() per group of at
 * most tern_model_batch_hint() slots reads the weights once for the group. On the
 * CPU that is 5: below 6 rows the batched pass is bit-identical to stepping each
 * session alone (test_batch), so a request's text does not depend on what else is
 * running (docs/server.md). */
static void slot_eval_alone(slot *sl) {
    sl->st = sl->phase == SLOT_PREFILL ? tern_gen_prefill(sl->gen, sl->in, sl->n_in) : tern_gen_advance(sl->gen);
    if (sl->st) snprintf(sl->err, sizeof sl->err, "%s", tern_last_error());
}

static void eval_group(srv_sched *s, slot **g, tern_gen **gens, int n) {
    if (n == 1) { slot_eval_alone(g[0]); return; }
    for (int k = 0; k < n; k++) gens[k] = g[k]->gen;
    if (tern_gen_advance_batch(gens, (size_t)n) == TERN_OK)
        for (int k = 0; k < n; k++) g[k]->st = TERN_OK;
    else /* a refused batch changed nothing: step each alone to find the culprit */
        for (int k = 0; k < n; k++) slot_eval_alone(g[k]);
}

static void count_pass(srv_sched *s, bool prefill, size_t tokens, double ms) {
    pthread_mutex_lock(&s->snap_mu);
    s->steps.passes++;
    if (prefill) {
        s->steps.prefill_tokens += tokens;
        s->steps.prefill_s += ms / 1e3;
    } else {
        int b = 0;
        while (b < SRV_BATCH_BUCKETS && (int)tokens > SRV_BATCH_LE[b]) b++;
        s->steps.batch_bucket[b]++;
        s->steps.decode_tokens += tokens;
        s->steps.decode_s += ms / 1e3;
    }
    pthread_mutex_unlock(&s->snap_mu);
}

static void sched_forward(srv_sched *s, slot **act, int n, slot **g, tern_gen **gens) {
    int ng = 0;
    for (int i = 0; i < n; i++) {
        if (act[i]->phase != SLOT_DECODE) {
            double t0 = now_ms();
            slot_eval_alone(act[i]);
            count_pass(s, true, act[i]->n_in, now_ms() - t0);
            continue;
        }
        g[ng++] = act[i];
        if (ng == s->batch) {
            double t0 = now_ms();
            eval_group(s, g, gens, ng);
            count_pass(s, false, (size_t)ng, now_ms() - t0);
            ng = 0;
        }
    }
    if (ng) {
        double t0 = now_ms();
        eval_group(s, g, gens, ng);
        count_pass(s, false, (size_t)ng, now_ms() - t0);
    }
}

void srv_sched_step_stats(srv_sched *s, srv_step_stats *out) {
    pthread_mutex_lock(&s->snap_mu);
    *out = s->steps;
    pthread_mutex_unlock(&s->snap_mu);
    out->mem_free = tern_model_memory_free(s->model);
    out->admit_free = s->admit_free;
}

/* prefill slots, longest-waiting first (admission time, then slot id) */
static int by_admission(const void *a, const void *b) {
    const slot *x = *(slot *const *)a, *y = *(slot *const *)b;
    if (x->t_start != y->t_start) return x->t_start < y->t_start ? -1 : 1;
    return x->id - y->id;
}

void srv_sched_run(srv_sched *s) {
    int N = s->p.n_parallel;
    slot **act = calloc((size_t)N, sizeof *act), **grp = calloc((size_t)s->batch, sizeof *grp);
    slot **pre = calloc((size_t)N, sizeof *pre);
    tern_gen **gens = calloc((size_t)s->batch, sizeof *gens);
    if (!act || !grp || !gens || !pre) { srv_sched_stop(s); N = 0; }
    for (;;) {
        pthread_mutex_lock(&s->mu);
        if (s->draining && !s->stop) {
            while (s->q_n) {        /* waiting jobs will not run: 503 at once */
                srv_job *j = s->queue[s->q_head];
                s->q_head = (s->q_head + 1) % s->q_size;
                s->q_n--;
                job_finish(j, SRV_FINISH_ERROR, "the server is shutting down", NULL);
            }
            if (!s->busy || now_ms() >= s->drain_end) s->stop = true;
        }
        while (s->q_n && !s->stop && !s->draining) {
            srv_job *j = s->queue[s->q_head];
            slot *sl = pick_slot(s, j);
            if (!sl) break;
            s->q_head = (s->q_head + 1) % s->q_size;
            s->q_n--;
            slot_start(s, sl, j);
        }
        if (s->stop) { pthread_mutex_unlock(&s->mu); break; }
        bool shed = s->shed, idle = !s->busy;
        s->shed = false;
        if (idle && !shed) {
            pthread_cond_wait(&s->cv, &s->mu);
            pthread_mutex_unlock(&s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        /* a request was refused for lack of memory: the snapshots are what the server
         * itself holds beyond its sessions; drop them (least recently used first) until
         * the floor is free again */
        for (uint64_t fr; shed && (fr = tern_model_memory_free(s->model)) && fr < s->admit_free && evict_lru(s, NULL);) {}
        if (idle) continue;
        /* jobs that failed at admission */
        for (int i = 0; i < N; i++)
            if (s->slots[i].job && s->slots[i].phase == SLOT_IDLE) slot_finish(s, &s->slots[i], SRV_FINISH_ERROR, s->slots[i].err);
        double ts = now_ms();
        int nd = 0;
        for (int i = 0; i < N; i++)
            if (s->slots[i].job && s->slots[i].phase == SLOT_DECODE) s->dec[nd++] = &s->slots[i];
        /* each choice reads the slot's logits (n_vocab floats): in parallel where that is
         * worth a wake-up (large vocabularies), else here */
        if (s->par_sample) srv_pool_run(s->pool, nd, slot_choose, s->dec);
        else for (int k = 0; k < nd; k++) slot_choose(s->dec, k);
        for (int k = 0; k < nd; k++) slot_sample(s, s->dec[k]);
        ts = now_ms() - ts;
        pthread_mutex_lock(&s->snap_mu);
        s->steps.sample_s += ts / 1e3;
        pthread_mutex_unlock(&s->snap_mu);
        int n = 0, n_pre = 0;
        bool decoding = false;
        for (int i = 0; i < N; i++) {
            slot *sl = &s->slots[i];
            if (!sl->job) continue;
            if (sl->phase == SLOT_WAIT && atomic_load_explicit(&sl->job->cancel, memory_order_relaxed)) {
                slot_finish(s, sl, SRV_FINISH_CANCELLED, NULL);
                continue;
            }
            if (sl->phase == SLOT_PREFILL) {
                if (atomic_load_explicit(&sl->job->cancel, memory_order_relaxed)) { slot_finish(s, sl, SRV_FINISH_CANCELLED, NULL); continue; }
                pre[n_pre++] = sl;
                continue;
            }
            if (sl->n_in) {
                act[n++] = sl;
                decoding = true;
            }
        }
        /* Prefill beside decode: while a slot decodes, the round evaluates at most
         * s->budget prompt tokens (at least one chunk), the longest-waiting prompts
         * first, so a long prompt delays each stream by a bounded amount; with nobody
         * decoding every prompt takes a chunk. Chunks end at multiples of the chunk
         * size (as one tern_session_eval from position 0 splits) and at a chat prompt's
         * message ends (j->marks: where it takes snapshots), so a prompt resumed from a
         * snapshot at a chunk boundary is evaluated in the same pieces as from scratch. */
        if (n_pre > 1) qsort(pre, (size_t)n_pre, sizeof *pre, by_admission);
        size_t spent = 0;
        for (int k = 0; k < n_pre; k++) {
            slot *sl = pre[k];
            size_t rem = sl->job->prompt.n - sl->n_fed, room = (size_t)s->chunk - sl->n_fed % (size_t)s->chunk;
            size_t mark = next_mark(sl->job, sl->n_fed); /* a chunk also ends at a message end */
            if (mark && mark - sl->n_fed < room) room = mark - sl->n_fed;
            size_t take = rem < room ? rem : room;
            if (decoding && spent && spent + take > (size_t)s->budget) break;
            sl->in = sl->job->prompt.ids + sl->n_fed;
            sl->n_in = take;
            spent += take;
            if (sl->n_in) act[n++] = sl;
        }
        pthread_mutex_lock(&s->snap_mu);
        s->steps.rounds++;
        if (decoding && spent > s->steps.max_prefill_decoding) s->steps.max_prefill_decoding = spent;
        pthread_mutex_unlock(&s->snap_mu);
        sched_forward(s, act, n, grp, gens);
        for (int i = 0; i < n; i++) {
            slot *sl = act[i];
            if (sl->st) {
                sl->cached.n = 0;   /* unknown state: the next job resets the session */
                if (sl->st == TERN_ERR_NOMEM) sl->job->retry = true; /* 503 with Retry-After */
                slot_finish(s, sl, SRV_FINISH_ERROR, sl->err);
                continue;
            }
            /* what was evaluated is now in the session (the prefix cache's tokens) */
            const int32_t *fed = sl->phase == SLOT_DECODE ? &sl->pending : sl->in;
            if (sl->cached.n + sl->n_in == (size_t)tern_session_pos(sl->sess))
                for (size_t k = 0; k < sl->n_in; k++)
                    if (tern_tokens_push(&sl->cached, fed[k])) break;
            if (sl->cached.n != (size_t)tern_session_pos(sl->sess)) sl->cached.n = 0; /* never expected */
            if (sl->phase == SLOT_DECODE) sl->n_in = 0;
            else {
                sl->n_fed += sl->n_in;
                bool end = sl->n_fed == sl->job->prompt.n;
                size_t later = 0;
                if (snap_planned(s, sl->job, sl->n_fed, &later) && sl->cached.n == sl->n_fed)
                    snap_take(s, sl, sl->n_fed, later);
                if (end) {
                    sl->phase = SLOT_DECODE;
                    sl->t_decode = now_ms();
                    /* choices of this request waiting for its prompt take it now */
                    for (int k = 0; k < N; k++) {
                        slot *f = &s->slots[k];
                        if (f->job && f->phase == SLOT_WAIT && f->wait == sl->id) follower_copy(s, f, sl);
                    }
                }
            }
        }
    }
    /* shutting down: every running and waiting job ends */
    for (int i = 0; i < N; i++)
        if (s->slots[i].job) slot_finish(s, &s->slots[i], SRV_FINISH_ERROR, "the server is shutting down");
    pthread_mutex_lock(&s->mu);
    while (s->q_n) {
        srv_job *j = s->queue[s->q_head];
        s->q_head = (s->q_head + 1) % s->q_size;
        s->q_n--;
        job_finish(j, SRV_FINISH_ERROR, "the server is shutting down", NULL);
    }
    pthread_mutex_unlock(&s->mu);
    free(act);
    free(pre);
    free(grp);
    free(gens);
}

/* ---------------------------------------------------------------- api */

static void sched_free(srv_sched *s) {
    if (!s) return;
    srv_pool_free(s->pool);
    free(s->dec);
    for (int i = 0; s->slots && i < s->p.n_parallel; i++) {
        tern_session_free(s->slots[i].sess);
        tern_gen_free(s->slots[i].gen);
        tern_drafter_free(s->slots[i].drafter);
        tern_sampler_free(s->slots[i].smp);
        tern_tokens_free(&s->slots[i].cached);
        for (int k = 0; k < s->slots[i].n_snaps; k++) tern_session_snapshot_free(s->slots[i].snaps[k].snap);
        free(s->slots[i].snaps);
    }
    free(s->slots);
    free(s->queue);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->snap_mu);
    pthread_cond_destroy(&s->cv);
    if (s->own_spec) { /* after the slots' draft sessions */
        tern_drafter_free(s->p.drafter);
        tern_model_free(s->p.draft_model);
        tern_tokenizer_free(s->p.draft_tok);
    }
    free(s);
}

tern_status srv_sched_new(tern_model *m, const tern_tokenizer *tok, const srv_sched_params *p, srv_sched **out) {
    *out = NULL;
    srv_sched_fit(NULL, NULL, 0, 0, 0); /* no message yet */
    if (!m || !tok || !p || p->n_parallel < 1 || p->queue_cap < 1) return TERN_ERR_INVALID_ARG;
    srv_sched *s = calloc(1, sizeof *s);
    if (!s) return TERN_ERR_NOMEM;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->snap_mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->model = m;
    s->tok = tok;
    s->p = *p;
    s->n_vocab = tern_model_get_info(m)->n_vocab;
    s->slots = calloc((size_t)p->n_parallel, sizeof *s->slots);
    s->q_size = p->queue_cap + p->n_parallel;
    s->queue = calloc((size_t)s->q_size, sizeof *s->queue);
    s->dec = calloc((size_t)p->n_parallel, sizeof *s->dec);
    int st_n = p->sample_threads;
    if (st_n <= 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        st_n = cpus < 1 ? 1 : cpus > 8 ? 8 : (int)cpus;
    }
    if (st_n > p->n_parallel) st_n = p->n_parallel;
    s->pool = srv_pool_new(st_n);
    s->par_sample = p->sample_threads > 1 || (p->sample_threads == 0 && s->n_vocab >= 32768);
    if (!s->slots || !s->queue || !s->dec || !s->pool) { sched_free(s); return TERN_ERR_NOMEM; }
    s->batch = p->decode_batch > 0 ? p->decode_batch : tern_model_batch_hint(m);
    if (s->batch < 1) s->batch = 1;
    tern_session_params sp;
    tern_session_params_default(&sp);
    sp.n_ctx = p->n_ctx;
    sp.cache_type_k = p->cache_k;
    sp.cache_type_v = p->cache_v;
    sp.n_chunk = p->prefill_chunk;  /* 0: the back-end's */
    s->admit_free = p->admit_free ? p->admit_free
                  : strcmp(tern_model_get_info(m)->device, "cpu") ? (uint64_t)256 << 20 : 0;
    const uint64_t free0 = tern_model_memory_free(m);
    for (int i = 0; i < p->n_parallel; i++) {
        s->slots[i].id = i;
        tern_status st = tern_session_new(m, &sp, &s->slots[i].sess);
        if (st) { sched_free(s); return st; }
        s->slots[i].recurrent = !tern_session_can_truncate(s->slots[i].sess);
        if (p->draft_model && (st = tern_drafter_model_new(p->draft_model, p->draft_tok, tok, tern_session_n_ctx(s->slots[i].sess),
                                                          &s->slots[i].drafter))) {
            sched_free(s);
            return st;
        }
        if (!i && (st = srv_sched_fit(m, s->slots[0].sess, p->n_parallel,
                                      s->slots[0].recurrent && !p->no_prefix_cache ? p->snapshot_budget : 0,
                                      free0))) {
            sched_free(s);
            return st;
        }
    }
    /* the size of one snapshot (and whether the back-end takes them: not with --tp) */
    if (s->slots[0].recurrent && s->p.snapshot_budget && !s->p.no_prefix_cache) {
        tern_session_snapshot *p0 = NULL;
        if (tern_session_snapshot_take_in(s->slots[0].sess, TERN_SNAPSHOT_BACKEND, &p0)) s->p.snapshot_budget = 0;
        else s->snap.each = tern_session_snapshot_bytes(p0);
        tern_session_snapshot_free(p0);
    }
    s->p.n_ctx = tern_session_n_ctx(s->slots[0].sess);
    /* prefill steps of the session's own chunk size (the back-end's: 64 on the CPU, 512 on
     * CUDA, where the tensor-core GEMM reads each weight once per chunk): the same splits
     * as one eval call */
    s->chunk = tern_session_chunk(s->slots[0].sess);
    if (s->chunk < 1 || s->chunk > s->p.n_ctx) s->chunk = s->p.n_ctx;
    /* a decode pass holds at most the lead session's chunk rows (tern_session_eval_batch) */
    if (s->batch > s->chunk) s->batch = s->chunk;
    s->budget = p->prefill_budget > s->chunk ? p->prefill_budget : s->chunk;
    s->steps.prefill_budget = s->budget;
    s->steps.decode_batch = s->batch;
    s->steps.chunk = s->chunk;
    s->own_spec = true;
    *out = s;
    return TERN_OK;
}

int srv_sched_submit(srv_sched *s, srv_job *j) { return srv_sched_submit_all(s, &j, 1); }

int srv_sched_submit_all(srv_sched *s, srv_job *const *jobs, int n) {
    const uint64_t fr = s->admit_free ? tern_model_memory_free(s->model) : 0; /* 0: unknown or no check */
    pthread_mutex_lock(&s->mu);
    /* the queue holds --queue requests beyond the busy slots: a request that an idle slot
     * will take at the scheduler's next round (it may be inside a long step now) waits here
     * too, rather than get a 503 while slots are free */
    const int idle = s->p.n_parallel - s->busy > 0 ? s->p.n_parallel - s->busy : 0;
    if (s->stop || s->draining || n > s->p.queue_cap + idle - s->q_n || s->q_n + n > s->q_size) {
        pthread_mutex_unlock(&s->mu);
        return 503;
    }
    /* admission by memory: the sessions were made whole at start; what grows at run time is
     * the snapshots and the back-end's own buffers. Below the floor the request is refused
     * (503, Retry-After) and the scheduler drops snapshots. */
    if (fr && fr < s->admit_free) {
        s->shed = true;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_mutex_lock(&s->snap_mu);
        s->steps.refused_memory++;
        pthread_mutex_unlock(&s->snap_mu);
        return SRV_SUBMIT_MEMORY;
    }
    for (int k = 0; k < n; k++) {
        srv_job *j = jobs[k];
        pthread_mutex_lock(&j->mu);
        j->refs++;
        pthread_mutex_unlock(&j->mu);
        s->queue[(s->q_head + s->q_n) % s->q_size] = j;
        s->q_n++;
    }
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void srv_sched_cache(srv_sched *s, uint64_t *now, uint64_t *max, const tern_session **slot0) {
    uint64_t a = 0, b = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->p.n_parallel; i++) {
        a += tern_session_cache_bytes(s->slots[i].sess, tern_session_pos(s->slots[i].sess));
        b += tern_session_cache_bytes(s->slots[i].sess, tern_session_n_ctx(s->slots[i].sess));
    }
    pthread_mutex_unlock(&s->mu);
    if (now) *now = a;
    if (max) *max = b;
    if (slot0) *slot0 = s->slots[0].sess;
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
        out[i].n_cached = s->slots[i].info_cached;
        pthread_mutex_lock(&s->snap_mu);
        out[i].n_snapshots = s->slots[i].info_snaps;
        pthread_mutex_unlock(&s->snap_mu);
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

bool srv_sched_prefix_cache(const srv_sched *s) { return s && !s->p.no_prefix_cache; }

void srv_sched_snap_stats(srv_sched *s, srv_snap_stats *o) {
    memset(o, 0, sizeof *o);
    if (!s) return;
    pthread_mutex_lock(&s->snap_mu);
    *o = s->snap;
    pthread_mutex_unlock(&s->snap_mu);
    o->used = !s->p.no_prefix_cache && s->slots[0].recurrent;
    o->budget = o->used ? s->p.snapshot_budget : 0;
}
