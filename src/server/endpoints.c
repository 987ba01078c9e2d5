/*
 * endpoints.c - the bodies of the auxiliary endpoints of `tern serve`, kept
 * apart from the sockets so they can be tested alone:
 *   POST /tokenize, POST /detokenize  (llama.cpp's shapes)
 *   GET  /metrics                     Prometheus text format 0.0.4
 * and srv_logprob_of (the log-softmax and top alternatives of one step).
 */
#include "server/server.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void add_text(cJSON *o, const char *key, const char *s, size_t n) {
    tern_str c = {0};
    tern_status st = tern_utf8_sanitize(s ? s : "", s ? n : 0, &c);
    cJSON_AddStringToObject(o, key, !st && c.data ? c.data : "");
    tern_str_free(&c);
}

int srv_tokenize_json(const tern_tokenizer *tok, const char *body, size_t len, char **out, char *err, size_t en) {
    *out = NULL;
    cJSON *root = srv_json_parse_whole(body, len, NULL);
    if (!cJSON_IsObject(root)) { cJSON_Delete(root); return srv_fail(err, en, "the body must be a JSON object"); }
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "content");
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(root, "add_special");
    const cJSON *wp = cJSON_GetObjectItemCaseSensitive(root, "with_pieces");
    int rc = 0;
    if (!cJSON_IsString(c)) rc = srv_fail(err, en, "'content' must be a string");
    else if (sp && !cJSON_IsBool(sp)) rc = srv_fail(err, en, "'add_special' must be a boolean");
    else if (wp && !cJSON_IsBool(wp)) rc = srv_fail(err, en, "'with_pieces' must be a boolean");
    if (rc) { cJSON_Delete(root); return rc; }
    tern_tokens ids = {0};
    if (tern_tokenize(tok, c->valuestring, strlen(c->valuestring), sp && cJSON_IsTrue(sp), &ids)) {
        rc = srv_fail(err, en, "%s", tern_last_error());
    } else {
        cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "tokens");
        for (size_t i = 0; i < ids.n; i++) {
            if (wp && cJSON_IsTrue(wp)) {
                cJSON *e = cJSON_CreateObject();
                size_t bl = 0;
                const char *b = tern_token_bytes(tok, ids.ids[i], &bl);
                cJSON_AddNumberToObject(e, "id", ids.ids[i]);
                add_text(e, "piece", b, bl);
                cJSON_AddItemToArray(a, e);
            } else {
                cJSON_AddItemToArray(a, cJSON_CreateNumber(ids.ids[i]));
            }
        }
        *out = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
    }
    tern_tokens_free(&ids);
    cJSON_Delete(root);
    return rc;
}

int srv_detokenize_json(const tern_tokenizer *tok, const char *body, size_t len, char **out, char *err, size_t en) {
    *out = NULL;
    cJSON *root = srv_json_parse_whole(body, len, NULL);
    if (!cJSON_IsObject(root)) { cJSON_Delete(root); return srv_fail(err, en, "the body must be a JSON object"); }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    if (!cJSON_IsArray(t)) { cJSON_Delete(root); return srv_fail(err, en, "'tokens' must be an array of token ids"); }
    int n = cJSON_GetArraySize(t), nv = tern_tokenizer_n_vocab(tok), rc = 0;
    int32_t *ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
    if (!ids) { cJSON_Delete(root); return srv_fail(err, en, "out of memory"); }
    int k = 0;
    for (const cJSON *e = t->child; e; e = e->next, k++) {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 || e->valuedouble >= nv) {
            rc = srv_fail(err, en, "tokens[%d] must be a token id in 0..%d", k, nv - 1);
            break;
        }
        ids[k] = (int32_t)e->valuedouble;
    }
    if (!rc) {
        tern_str s = {0};
        if (tern_detokenize(tok, ids, (size_t)n, &s)) rc = srv_fail(err, en, "%s", tern_last_error());
        else {
            cJSON *o = cJSON_CreateObject();
            add_text(o, "content", s.data, s.len);
            *out = cJSON_PrintUnformatted(o);
            cJSON_Delete(o);
        }
        tern_str_free(&s);
    }
    free(ids);
    cJSON_Delete(root);
    return rc;
}

/* ----------------------------------------------------------------- logprobs */

void srv_logprob_of(const float *logits, int n_vocab, int32_t id, int top, srv_logprob *e) {
    float mx = -INFINITY;
    for (int i = 0; i < n_vocab; i++) if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (int i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    e->id = id;
    e->lp = (float)(logits[id] - lse);
    if (top > SRV_MAX_TOP_LOGPROBS) top = SRV_MAX_TOP_LOGPROBS;
    e->n_top = 0;
    for (int i = 0; i < n_vocab; i++) {     /* insertion into a short sorted list; ties: lower id first */
        float v = logits[i];
        if (e->n_top == top && (top == 0 || v <= logits[e->top_id[top - 1]])) continue;
        int k = e->n_top < top ? e->n_top++ : top - 1;
        while (k > 0 && logits[e->top_id[k - 1]] < v) { e->top_id[k] = e->top_id[k - 1]; k--; }
        e->top_id[k] = i;
    }
    for (int k = 0; k < e->n_top; k++) e->top_lp[k] = (float)(logits[e->top_id[k]] - lse);
}

/* ------------------------------------------------------------------ metrics */

static const double lat_le[SRV_LAT_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

/* Upper bounds of the decode batch-size histogram (server.h; the scheduler counts,
 * /metrics renders; here so that the fuzzed parser and endpoints link alone). */
const int SRV_BATCH_LE[SRV_BATCH_BUCKETS] = {1, 2, 4, 8, 16, 32, 64, 128, 256};

void srv_metrics_init(srv_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

void srv_metrics_record(srv_metrics *m, int status, bool generation, double wall_ms) {
    pthread_mutex_lock(&m->mu);
    int d = status / 100;
    m->by_status[d >= 1 && d <= 5 ? d : 0]++;
    if (generation) {
        m->n_gen_requests++;
        double s = wall_ms / 1e3;
        int b = 0;
        while (b < SRV_LAT_BUCKETS && s > lat_le[b]) b++;
        m->lat_bucket[b]++;
        m->lat_sum_s += s;
    }
    pthread_mutex_unlock(&m->mu);
}

static void put(tern_str *o, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0) tern_str_append(o, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

char *srv_metrics_render(srv_metrics *m, int busy, int queued, int n_slots, const srv_snap_stats *snap,
                         const srv_step_stats *st) {
    tern_str o = {0};
    tern_str_append(&o, "", 0);
    pthread_mutex_lock(&m->mu);
    put(&o, "# HELP tern_requests_total HTTP requests answered, by status class.\n# TYPE tern_requests_total counter\n");
    static const char *cls[6] = {"other", "1xx", "2xx", "3xx", "4xx", "5xx"};
    for (int i = 0; i < 6; i++) put(&o, "tern_requests_total{status=\"%s\"} %llu\n", cls[i], m->by_status[i]);
    /* token figures: the scheduler's, counted when a job ends, before its request hears of it */
    const srv_step_stats z = {0}, *t = st ? st : &z;
    put(&o, "# HELP tern_prompt_tokens_total Prompt tokens of the requests (cached ones included).\n"
            "# TYPE tern_prompt_tokens_total counter\ntern_prompt_tokens_total %llu\n", t->prompt_tokens);
    put(&o, "# HELP tern_prompt_tokens_cached_total Prompt tokens taken from a slot's prefix cache.\n"
            "# TYPE tern_prompt_tokens_cached_total counter\ntern_prompt_tokens_cached_total %llu\n", t->cached_tokens);
    put(&o, "# HELP tern_prompt_tokens_evaluated_total Prompt tokens run through the model (each choice of n > 1 "
            "that evaluated the prompt itself counts).\n"
            "# TYPE tern_prompt_tokens_evaluated_total counter\ntern_prompt_tokens_evaluated_total %llu\n",
        t->evaluated_tokens);
    put(&o, "# HELP tern_generated_tokens_total Tokens generated (requests that were cancelled or failed included).\n"
            "# TYPE tern_generated_tokens_total counter\ntern_generated_tokens_total %llu\n", t->gen_tokens);
    put(&o, "# HELP tern_prompt_seconds_total Time spent on prompts.\n# TYPE tern_prompt_seconds_total counter\n"
            "tern_prompt_seconds_total %.6f\n", t->prompt_s);
    put(&o, "# HELP tern_generation_seconds_total Time spent generating.\n# TYPE tern_generation_seconds_total counter\n"
            "tern_generation_seconds_total %.6f\n", t->gen_s);
    put(&o, "# HELP tern_prompt_tokens_per_second Prompt tokens per second over all requests.\n"
            "# TYPE tern_prompt_tokens_per_second gauge\ntern_prompt_tokens_per_second %.3f\n",
        t->prompt_s > 0 ? t->evaluated_tokens / t->prompt_s : 0.0);
    put(&o, "# HELP tern_generated_tokens_per_second Generated tokens per second over all requests.\n"
            "# TYPE tern_generated_tokens_per_second gauge\ntern_generated_tokens_per_second %.3f\n",
        t->gen_s > 0 ? t->gen_tokens / t->gen_s : 0.0);
    put(&o, "# HELP tern_request_duration_seconds Wall time of chat and completion requests.\n"
            "# TYPE tern_request_duration_seconds histogram\n");
    unsigned long long cum = 0;
    for (int b = 0; b < SRV_LAT_BUCKETS; b++) {
        cum += m->lat_bucket[b];
        put(&o, "tern_request_duration_seconds_bucket{le=\"%g\"} %llu\n", lat_le[b], cum);
    }
    cum += m->lat_bucket[SRV_LAT_BUCKETS];
    put(&o, "tern_request_duration_seconds_bucket{le=\"+Inf\"} %llu\n", cum);
    put(&o, "tern_request_duration_seconds_sum %.6f\ntern_request_duration_seconds_count %llu\n", m->lat_sum_s, cum);
    pthread_mutex_unlock(&m->mu);
    put(&o, "# HELP tern_queue_depth Requests waiting for a slot.\n# TYPE tern_queue_depth gauge\ntern_queue_depth %d\n",
        queued);
    put(&o, "# HELP tern_slots_busy Slots generating.\n# TYPE tern_slots_busy gauge\ntern_slots_busy %d\n", busy);
    put(&o, "# HELP tern_slots_total Slots.\n# TYPE tern_slots_total gauge\ntern_slots_total %d\n", n_slots);
    if (st) {
        put(&o, "# HELP tern_sched_rounds_total Scheduler rounds that ran the model.\n"
                "# TYPE tern_sched_rounds_total counter\ntern_sched_rounds_total %llu\n", st->rounds);
        put(&o, "# HELP tern_sched_passes_total Model passes (a prefill chunk or a batched decode step).\n"
                "# TYPE tern_sched_passes_total counter\ntern_sched_passes_total %llu\n", st->passes);
        put(&o, "# HELP tern_sched_tokens_total Tokens evaluated, by kind of pass.\n# TYPE tern_sched_tokens_total counter\n"
                "tern_sched_tokens_total{kind=\"prefill\"} %llu\ntern_sched_tokens_total{kind=\"decode\"} %llu\n",
            st->prefill_tokens, st->decode_tokens);
        put(&o, "# HELP tern_sched_seconds_total Time in model passes by kind of pass, and on the host choosing tokens (sample).\n"
                "# TYPE tern_sched_seconds_total counter\n"
                "tern_sched_seconds_total{kind=\"prefill\"} %.6f\ntern_sched_seconds_total{kind=\"decode\"} %.6f\n"
                "tern_sched_seconds_total{kind=\"sample\"} %.6f\n",
            st->prefill_s, st->decode_s, st->sample_s);
        put(&o, "# HELP tern_sched_tokens_per_round Tokens evaluated per scheduler round (all kinds).\n"
                "# TYPE tern_sched_tokens_per_round gauge\ntern_sched_tokens_per_round %.3f\n",
            st->rounds ? (double)(st->prefill_tokens + st->decode_tokens) / (double)st->rounds : 0.0);
        put(&o, "# HELP tern_decode_batch_size Sequences per batched decode pass.\n# TYPE tern_decode_batch_size histogram\n");
        unsigned long long c = 0;
        for (int b = 0; b < SRV_BATCH_BUCKETS; b++) {
            c += st->batch_bucket[b];
            put(&o, "tern_decode_batch_size_bucket{le=\"%d\"} %llu\n", SRV_BATCH_LE[b], c);
        }
        c += st->batch_bucket[SRV_BATCH_BUCKETS];
        put(&o, "tern_decode_batch_size_bucket{le=\"+Inf\"} %llu\ntern_decode_batch_size_sum %llu\n"
                "tern_decode_batch_size_count %llu\n", c, st->decode_tokens, c);
        put(&o, "# HELP tern_sched_prefill_budget_tokens Prompt tokens per round while a slot decodes (--prefill-budget).\n"
                "# TYPE tern_sched_prefill_budget_tokens gauge\ntern_sched_prefill_budget_tokens %d\n", st->prefill_budget);
        put(&o, "# HELP tern_sched_decode_batch_max Sequences per decode pass at most (--decode-batch).\n"
                "# TYPE tern_sched_decode_batch_max gauge\ntern_sched_decode_batch_max %d\n", st->decode_batch);
        put(&o, "# HELP tern_sched_refused_total Requests answered 503 for lack of free memory (--admit-free-mib).\n"
                "# TYPE tern_sched_refused_total counter\ntern_sched_refused_total{reason=\"memory\"} %llu\n",
            st->refused_memory);
        put(&o, "# HELP tern_spec_drafted_total Tokens drafted by speculative decoding (serve --spec).\n"
                "# TYPE tern_spec_drafted_total counter\ntern_spec_drafted_total %llu\n", st->spec_drafted);
        put(&o, "# HELP tern_spec_accepted_total Drafted tokens the model accepted.\n"
                "# TYPE tern_spec_accepted_total counter\ntern_spec_accepted_total %llu\n", st->spec_accepted);
        put(&o, "# HELP tern_spec_steps_total Verify passes (each gives its accepted drafts and one more token).\n"
                "# TYPE tern_spec_steps_total counter\ntern_spec_steps_total %llu\n", st->spec_steps);
        put(&o, "# HELP tern_spec_acceptance_rate Accepted / drafted tokens since start.\n"
                "# TYPE tern_spec_acceptance_rate gauge\ntern_spec_acceptance_rate %.4f\n",
            st->spec_drafted ? (double)st->spec_accepted / (double)st->spec_drafted : 0.0);
        put(&o, "# HELP tern_spec_tokens_per_step Tokens per verify pass (accepted drafts + 1).\n"
                "# TYPE tern_spec_tokens_per_step gauge\ntern_spec_tokens_per_step %.4f\n",
            st->spec_steps ? (double)(st->spec_accepted + st->spec_steps) / (double)st->spec_steps : 0.0);
        put(&o, "# HELP tern_backend_memory_free_bytes Memory the back-end can still give (device or host; 0: unknown).\n"
                "# TYPE tern_backend_memory_free_bytes gauge\ntern_backend_memory_free_bytes %llu\n",
            (unsigned long long)st->mem_free);
        put(&o, "# HELP tern_sched_admit_free_bytes Free memory a request needs to be admitted (0: no check).\n"
                "# TYPE tern_sched_admit_free_bytes gauge\ntern_sched_admit_free_bytes %llu\n",
            (unsigned long long)st->admit_free);
    }
    put(&o, "# HELP tern_prefix_cache_hit_ratio Share of prompt tokens taken from the prefix cache.\n"
            "# TYPE tern_prefix_cache_hit_ratio gauge\ntern_prefix_cache_hit_ratio %.6f\n",
        t->prompt_tokens ? (double)t->cached_tokens / (double)t->prompt_tokens : 0.0);
    if (snap && snap->used) {
        put(&o, "# HELP tern_prefix_cache_snapshots Recurrent-state snapshots the slots keep for the prefix cache.\n"
                "# TYPE tern_prefix_cache_snapshots gauge\ntern_prefix_cache_snapshots %d\n", snap->count);
        put(&o, "# HELP tern_prefix_cache_snapshot_bytes Memory the snapshots hold (host and device).\n"
                "# TYPE tern_prefix_cache_snapshot_bytes gauge\ntern_prefix_cache_snapshot_bytes %llu\n",
            (unsigned long long)snap->bytes);
        put(&o, "# HELP tern_prefix_cache_snapshot_budget_bytes The snapshots' memory budget (--prefix-cache-mib).\n"
                "# TYPE tern_prefix_cache_snapshot_budget_bytes gauge\ntern_prefix_cache_snapshot_budget_bytes %llu\n",
            (unsigned long long)snap->budget);
        put(&o, "# HELP tern_prefix_cache_snapshots_taken_total Snapshots taken.\n"
                "# TYPE tern_prefix_cache_snapshots_taken_total counter\ntern_prefix_cache_snapshots_taken_total %llu\n",
            snap->taken);
        put(&o, "# HELP tern_prefix_cache_snapshots_restored_total Requests that started from a snapshot.\n"
                "# TYPE tern_prefix_cache_snapshots_restored_total counter\n"
                "tern_prefix_cache_snapshots_restored_total %llu\n", snap->restored);
        put(&o, "# HELP tern_prefix_cache_snapshots_evicted_total Snapshots dropped to stay within the budget.\n"
                "# TYPE tern_prefix_cache_snapshots_evicted_total counter\n"
                "tern_prefix_cache_snapshots_evicted_total %llu\n", snap->evicted);
        put(&o, "# HELP tern_prefix_cache_snapshot_device_bytes Of the snapshots' memory, the device's (GPU).\n"
                "# TYPE tern_prefix_cache_snapshot_device_bytes gauge\ntern_prefix_cache_snapshot_device_bytes %llu\n",
            (unsigned long long)snap->backend_bytes);
        put(&o, "# HELP tern_prefix_cache_snapshots_skipped_total Snapshots not taken for lack of memory.\n"
                "# TYPE tern_prefix_cache_snapshots_skipped_total counter\n"
                "tern_prefix_cache_snapshots_skipped_total %llu\n", snap->skipped);
        put(&o, "# HELP tern_prefix_cache_snapshot_seconds_total Time taking and restoring snapshots (on a GPU: "
                "queueing the device copies).\n# TYPE tern_prefix_cache_snapshot_seconds_total counter\n"
                "tern_prefix_cache_snapshot_seconds_total{op=\"take\"} %.6f\n"
                "tern_prefix_cache_snapshot_seconds_total{op=\"restore\"} %.6f\n", snap->take_s, snap->restore_s);
    }
    return o.data;
}
