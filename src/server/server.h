/*
 * server.h - `tern serve`: an OpenAI-compatible HTTP server on libtern's public
 * API (include/tern.h) only. Three main parts, one file each (plus split.c: the streaming
 * reasoning / content splitter; compat.c: the Anthropic, Responses and llama-server shapes;
 * endpoints.c, constrain.c; embed.c, embed_run.c, http_embed.c: embeddings, --embedding):
 *
 *   request.c  untrusted JSON body -> srv_request (bounded, fuzzed), the
 *              response / SSE chunk / error JSON builders and the streaming
 *              reasoning/content splitter. No sockets, no model: unit-tested
 *              and fuzzed on its own.
 *   sched.c    the scheduler loop (tern serve's main thread): owns the model's sessions ("slots") and a
 *              bounded queue; interleaves the active slots token by token.
 *   http.c     libmicrohttpd glue: routing, auth, body limits, waiting on a
 *              job's channel, SSE streaming, client-disconnect detection;
 *              http_conn.c: the front door that accepts connections, answers a
 *              request line without a path with 400 and hands the rest to
 *              libmicrohttpd, the deadline watcher, start and stop.
 *
 * Data flow: a handler thread parses and tokenizes, creates a srv_job and
 * submits it; the scheduler produces text into the job's channel (mutex +
 * condition variable); the handler takes the text out and writes it to the
 * client. A job is reference counted (handler + scheduler).
 */
#ifndef TERN_SERVER_H
#define TERN_SERVER_H

#include "tern.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ----------------------------------------------------------------- requests */

typedef enum srv_kind { SRV_CHAT = 0, SRV_COMPLETION = 1 } srv_kind;

/* The API a request came in through (its field list and reply shape); generation runs the
 * same either way (compat.c translates the others to and from chat / completions). */
typedef enum srv_api {
    SRV_API_OPENAI = 0,             /* /v1/chat/completions, /v1/completions */
    SRV_API_NATIVE,                 /* llama-server's /completion and /infill */
    SRV_API_ANTHROPIC,              /* /v1/messages */
    SRV_API_RESPONSES               /* /v1/responses */
} srv_api;

/* One prompt of a completion request: text, or token ids (checked against the vocabulary by
 * the caller). */
typedef struct srv_prompt {
    char *text;                     /* NULL: ids */
    int32_t *ids;
    size_t n_ids;
} srv_prompt;
#define SRV_MAX_PROMPTS 8
#define SRV_MAX_CHOICES 16          /* prompts x n */
#define SRV_MAX_DRY_BREAKERS 32

/* Bounds applied by the parser (hostile input). */
#define SRV_MAX_MESSAGES 4096
#define SRV_MAX_STOP 16
#define SRV_MAX_STOP_LEN 256
#define SRV_MAX_TOOL_CALLS 64
#define SRV_MAX_TOKENS_LIMIT (1 << 24)

/* A parsed request. Every string is owned by the struct (srv_request_free). */
typedef struct srv_request {
    srv_kind kind;
    /* chat: messages as tern_chat_msg (content parts joined with "\n") */
    tern_chat_msg *msgs;
    size_t n_msgs;
    char *tools_json;               /* JSON array of tool definitions; NULL: none (or tool_choice "none") */
    int thinking;                   /* -1 model default, 0 off, 1 on (chat_template_kwargs.enable_thinking) */
    /* completion */
    char *prompt;                   /* prompts[0].text when that is text (NULL otherwise) */
    srv_prompt *prompts;            /* 'prompt': a string, token ids, or a list of either */
    size_t n_prompts;
    srv_api api;                    /* field list the body was checked against */
    /* common */
    int max_tokens;                 /* 0: not given (generate until end or full context) */
    tern_sampler_params sp;         /* sampler settings; fields below say which were given */
    bool temp_set, top_p_set, top_k_set, min_p_set, seed_set, repeat_set, freq_set, presence_set, last_n_set;
    char **stop;                    /* stop strings (non-empty, deduplicated order kept) */
    size_t n_stop;
    bool stream, include_usage;
    bool ignore_eos;                /* never sample an end-of-generation token */
    bool no_spec;                   /* "speculative": false: no speculative decoding (serve --spec) */
    bool cache_prompt;              /* llama.cpp's cache_prompt (default true): reuse a slot's prefix */
    int32_t *bias_ids;              /* logit_bias: ids (checked against the vocabulary by the caller) */
    float *bias;                    /* and the values added to their logits (-100 … 100) */
    size_t n_bias;
    int logprobs;                   /* -1: none; else the number of alternatives per token (top_logprobs) */
    /* constrained output (at most one of the three; srv_constraint_grammar builds the GBNF) */
    char *grammar;                  /* 'grammar': GBNF text */
    char *schema;                   /* response_format json_schema / json_object (+schema) / 'json_schema': schema JSON */
    int tool_force;                 /* 0: none; 1: tool_choice "required"; 2: a named function */
    char *tool_name;                /* tool_force 2 */
    int n;                          /* choices (1..SRV_MAX_N) */
    int n_probs;                    /* llama.cpp's n_probs (0: none): top_logprobs-style probabilities */
    char **dry_breakers;            /* dry_sequence_breakers (NULL: llama.cpp's "\n", ":", "\"", "*") */
    size_t n_dry_breakers;
    bool dry_breakers_set;
    char *samplers;                 /* 'samplers' joined with ';' (NULL: the default order) */
    char *input_prefix, *input_suffix; /* native API (/infill): the text around the gap (NULL: not given) */
} srv_request;
#define SRV_MAX_N 8
#define SRV_MAX_LOGIT_BIAS 1024
#define SRV_MAX_TOP_LOGPROBS 20
#define SRV_MAX_GRAMMAR (256 * 1024)

/* Parse a JSON body of `len` bytes for endpoint `kind`. Returns 0 on success,
 * else an HTTP status (400) with a one-line reason in err (err_len bytes).
 * *out is always safe to pass to srv_request_free afterwards. */
/* A body that is exactly one JSON value (whitespace around it allowed); NULL otherwise, with
 * *bad_at (if given) the 1-based byte where something follows the value (0: not JSON). */
struct cJSON *srv_json_parse_whole(const char *body, size_t len, size_t *bad_at);
int srv_parse_request(srv_kind kind, const char *body, size_t len, srv_request *out, char *err,
                      size_t err_len);
/* The same for a body of API api (SRV_API_OPENAI or SRV_API_NATIVE: the field lists differ). */
int srv_parse_request_api(srv_kind kind, srv_api api, const char *body, size_t len, srv_request *out, char *err,
                          size_t err_len);
void srv_request_free(srv_request *r);
/* A client fault: the reason (printf-style) into err (en bytes, may be NULL); returns 400. */
int srv_fail(char *err, size_t en, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;


/* The GBNF text and start rule of a request's constraint for chat format fmt
 * (a tool call in the format's own markup; JSON Schema converted): 0 and *gbnf
 * filled (empty when the request has none), else 400 with err. constrain.c. */
int srv_constraint_grammar(const srv_request *r, tern_chat_format fmt, tern_str *gbnf, const char **root, char *err,
                           size_t en);

/* The start of a request line, as the front door of http.c sees it before
 * handing a connection to libmicrohttpd (which closes a line without a space,
 * `GARBAGE` or `GET`, without any reply). buf holds the first n bytes received
 * (at most SRV_REQLINE_PEEK are looked at). Empty lines before the request line
 * are skipped, as libmicrohttpd does (RFC 7230 3.5). VALID: a method of token
 * characters, one or more spaces and a first target byte, all within the first
 * SRV_REQLINE_PEEK bytes; INVALID: a non-token byte (CR, LF, tab, non-ASCII...)
 * in the method, an empty method, a line end before the target, or
 * SRV_REQLINE_PEEK bytes without a target; PENDING: more bytes needed. A
 * verdict other than PENDING never changes when more bytes are appended. */
#define SRV_REQLINE_PEEK 33
typedef enum srv_reqline { SRV_REQLINE_PENDING = 0, SRV_REQLINE_VALID, SRV_REQLINE_INVALID } srv_reqline;
srv_reqline srv_request_line_verdict(const char *buf, size_t n);

/* ------------------------------------------------------------- responses */

typedef enum srv_finish {
    SRV_FINISH_NONE = 0, SRV_FINISH_STOP, SRV_FINISH_LENGTH, SRV_FINISH_TOOL_CALLS,
    SRV_FINISH_CANCELLED, SRV_FINISH_ERROR
} srv_finish;
const char *srv_finish_str(srv_finish f);   /* "stop", "length", "tool_calls"; NULL for the rest */

/* Usage and timings of one finished request. */
typedef struct srv_usage {
    size_t prompt_tokens, completion_tokens;
    double prompt_ms, gen_ms;
    size_t cached_tokens;           /* prompt tokens taken from the slot's prefix cache (not evaluated) */
    size_t evaluated_tokens;        /* prompt tokens this request ran through the model (all its
                                     * choices: a choice sharing choice 0's evaluated prompt adds 0) */
} srv_usage;

/* Identity shared by every object of one response. */
typedef struct srv_resp_id {
    srv_kind kind;
    char id[48];                    /* "chatcmpl-..." / "cmpl-..." */
    long long created;              /* unix seconds */
    const char *model;
} srv_resp_id;

/* {"error":{"message","type","code"}} for an HTTP status. malloc'd. */
char *srv_json_error(int status, const char *message);
/* The whole non-streamed response. For chat, `reply` is the parsed text (content,
 * reasoning, tool calls; a non-empty tool call list makes finish "tool_calls").
 * For completions, `text` is the raw text. malloc'd. */
char *srv_json_response(const srv_resp_id *id, const char *text, const tern_chat_reply *reply,
                        srv_finish finish, const srv_usage *u);
/* One SSE event "data: {...}\n\n" (appended to out). Chat: role (first chunk),
 * content / reasoning deltas, tool calls, finish; completion: text, finish.
 * usage != NULL: the usage-only chunk of stream_options.include_usage (empty choices). */
typedef struct srv_delta {
    bool role;                      /* chat: {"role":"assistant","content":""} */
    const char *content;            /* NULL: absent */
    const char *reasoning;          /* NULL: absent */
    const tern_tool_call *tool_calls;
    size_t n_tool_calls;
    srv_finish finish;              /* NONE: null */
    int index;                      /* the choice (n > 1) */
    const void *logprobs;           /* a cJSON object: choices[i].logprobs (copied); NULL: none */
} srv_delta;
tern_status srv_sse_chunk(const srv_resp_id *id, const srv_delta *d, const srv_usage *usage, tern_str *out);

/* Streaming splitter: cuts generated chat text into reasoning and content
 * deltas so that their concatenation equals what tern_chat_parse gives for the
 * whole text (reasoning without surrounding newlines, content stripped) as
 * long as the reply holds no tool call; from "<tool_call>" on, content is held
 * back (the caller reports the parsed calls at the end). */
typedef struct srv_split {
    int state;                      /* internal */
    tern_str hold;                  /* undecided bytes */
    bool any_reasoning, any_content;
    bool tool;                      /* a <tool_call> was seen */
} srv_split;
void srv_split_init(srv_split *s, bool thinking_open);
/* Feed text; appends the decided parts to *content / *reasoning. */
tern_status srv_split_push(srv_split *s, const char *text, size_t len, tern_str *content, tern_str *reasoning);
/* End of text: flushes what is still held (trailing whitespace is dropped). */
tern_status srv_split_finish(srv_split *s, tern_str *content, tern_str *reasoning);
void srv_split_free(srv_split *s);

/* ------------------------------------------------- compat.c: other APIs */

/* An Anthropic (/v1/messages) or Responses (/v1/responses) body -> the equivalent chat
 * completions body (*out malloc'd): 0, else 400 with err (unknown fields included). */
int srv_compat_request(srv_api api, const char *body, size_t len, char **out, char *err, size_t en);
/* A non-streamed OpenAI reply (chat for ANTHROPIC / RESPONSES, completions for NATIVE) in the
 * API's shape; id: the reply's id. malloc'd (NULL: out of memory). */
char *srv_compat_reply(srv_api api, const char *openai_body, const char *id);
/* An error body in the API's shape. malloc'd. */
char *srv_compat_error(srv_api api, int status, const char *message);
/* Streaming: the OpenAI chunks of a reply (with the usage chunk) in, the API's events out. */
typedef struct srv_compat_stream {
    srv_api api;
    char id[64];
    bool started, usage_seen;
    int block;                      /* Anthropic: the open content block (0 none, 1 text, 2 thinking, 3 tool) */
    int index;                      /* Anthropic: its index */
    int seq;                        /* Responses: sequence_number */
    double created;
    size_t n_prompt, n_gen;
    tern_str text, reasoning;       /* everything streamed so far */
    struct cJSON *calls;            /* tool calls (chat chunk shape) */
    char *finish, *model;
} srv_compat_stream;
void srv_compat_stream_init(srv_compat_stream *st, srv_api api, const char *id, size_t n_prompt);
void srv_compat_stream_chunk(srv_compat_stream *st, const char *chunk_json, tern_str *out);
void srv_compat_stream_end(srv_compat_stream *st, tern_str *out);
void srv_compat_stream_error(srv_compat_stream *st, const char *message, tern_str *out);
void srv_compat_stream_free(srv_compat_stream *st);

/* ------------------------------------------------------------- scheduling */

/* One generated token's log-probability and its top alternatives (log-softmax
 * of the logits the sampler saw, before temperature). */
typedef struct srv_logprob {
    int32_t id;
    float lp;
    int n_top;
    int32_t top_id[SRV_MAX_TOP_LOGPROBS];
    float top_lp[SRV_MAX_TOP_LOGPROBS];
    size_t start;                   /* job text length before this token's text */
    size_t end;                     /* ... once its text is in (set by the scheduler; streamed
                                     * entries go out with the chunk that reaches `end`) */
} srv_logprob;
/* Fill e from logits[n_vocab] for the chosen id (top: how many alternatives). */
void srv_logprob_of(const float *logits, int n_vocab, int32_t id, int top, srv_logprob *e);

/* One request in flight. The handler fills the inputs, submits, then reads the
 * channel; the scheduler writes the channel. Reference counted (2 while queued
 * or running: handler + scheduler). */
typedef struct srv_job {
    /* inputs (read-only after submit) */
    tern_tokens prompt;
    tern_sampler_params sp;
    int max_tokens;                 /* 0: until end of generation / full context */
    bool stream;                    /* wake the handler for every piece of text (else only at the end) */
    bool ignore_eos;                /* end-of-generation tokens masked out before sampling */
    bool no_spec;                   /* no speculative decoding for this request */
    bool no_cache;                  /* cache_prompt: false: evaluate the whole prompt (no prefix reuse) */
    int32_t *bias_ids;              /* logit_bias, owned (moved from the request): logits[bias_ids[i]] += bias[i] */
    float *bias;
    size_t n_bias;
    int logprobs;                   /* -1: none; else record each token's logprob and this many alternatives */
    char **stop;                    /* owned (moved from the request) */
    size_t n_stop;
    tern_grammar *grammar;          /* constrained output (owned; NULL: none) */
    tern_grammar_matcher *gm;       /* its match state, used by the scheduler only (owned) */
    char *samplers;                 /* owned: sp.samplers points here */
    int32_t *dry_ids;               /* owned: sp.dry_breakers points here */
    struct srv_job *lead;           /* n > 1: choice 0's job (a reference), whose evaluated prompt
                                     * this choice copies instead of evaluating it again (NULL: none) */
    /* chat (or a raw prompt in ChatML): the prompt positions where a message ends (after its <|im_end|> and newline):
     * the first, the last but one and the last, ascending, below prompt.n (srv_job_chat_marks).
     * The prefill splits there and the prefix cache snapshots there (NULL: a raw prompt) */
    uint32_t *marks;
    int n_marks;
    bool chat;
    bool retry;                     /* set by the scheduler: the failure was for lack of memory,
                                     * not the request's: 503 with Retry-After */
    /* channel (guarded by mu) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    tern_str text;                  /* all text so far (complete UTF-8, stop strings cut) */
    size_t n_gen;                   /* tokens sampled */
    bool started;                   /* admitted to a slot */
    bool done;
    srv_finish finish;
    char error[256];                /* finish == ERROR: the reason */
    srv_usage usage;
    srv_logprob *lp;                /* logprobs >= 0: one entry per generated (non end) token */
    size_t n_lp, cap_lp;
    size_t n_lp_placed;             /* lp[0 .. n_lp_placed) have their `end` */
    int slot;                       /* slot id once admitted (-1 before) */
    /* set by the handler when the client went away; polled by the scheduler */
    tern_atomic_int cancel;         /* C11 atomic */
    int refs;                       /* guarded by mu */
} srv_job;

srv_job *srv_job_new(void);
/* Make f (not yet submitted) share lead's evaluated prompt (same prompt tokens): takes a
 * reference on lead. Submit lead first. */
void srv_job_follow(srv_job *f, srv_job *lead);
void srv_job_unref(srv_job *j);
/* Fill j->marks from its prompt's tokens (ChatML: a message ends after <|im_end|> and the
 * newline after it; in a chat prompt the template alone makes that token) and set j->chat:
 * chat (a chat request), or a raw prompt that holds such message ends (a client that
 * renders the template itself). */
void srv_job_chat_marks(srv_job *j, const tern_tokenizer *tok, bool chat);
void srv_job_cancel(srv_job *j);
/* Wait up to timeout_ms for text beyond *seen or the end; returns true when done.
 * Copies new text to *out (appends) and advances *seen. */
bool srv_job_wait(srv_job *j, int timeout_ms, size_t *seen, tern_str *out);

/* A fork-join pool (pool.c): srv_pool_run calls fn(ctx, i) for every i in [0, n) on the
 * caller and threads - 1 workers and returns when all are done. NULL or 1 thread: serial. */
typedef struct srv_pool srv_pool;
srv_pool *srv_pool_new(int threads);
int srv_pool_threads(const srv_pool *p);
void srv_pool_run(srv_pool *p, int n, void (*fn)(void *ctx, int i), void *ctx);
void srv_pool_free(srv_pool *p);

typedef struct srv_sched srv_sched;
typedef struct srv_sched_params {
    int n_parallel;                 /* slots (sessions) */
    int n_ctx;                      /* context per slot */
    int queue_cap;                  /* waiting requests beyond the busy slots */
    tern_cache_type cache_k, cache_v; /* KV cache types of the slots (0: default) */
    bool no_prefix_cache;           /* never continue a slot's session (--no-prefix-cache) */
    uint64_t snapshot_budget;       /* bytes of GDN state snapshots kept for the prefix cache, all
                                     * slots together (LRU; 0: none). Models with recurrent state only */
    int prefill_budget;             /* prompt tokens evaluated per round while any slot decodes (at
                                     * least one chunk; 0: one chunk), so a long prompt does not stall
                                     * the streams; with no slot decoding every prefill slot takes a chunk */
    int decode_batch;               /* decoding slots per batched pass (0: tern_model_batch_hint) */
    int sample_threads;             /* threads choosing the decoding slots' tokens each round
                                     * (0: min(8, online CPUs) on vocabularies of 32768+ tokens,
                                     * else the scheduler thread; 1: the scheduler thread alone) */
    uint64_t admit_free;            /* a request is admitted only while the back-end has this many
                                     * bytes free (tern_model_memory_free; else 503 with
                                     * Retry-After); 0: 256 MiB on a GPU, no check on the host */
    tern_drafter *drafter;          /* serve --spec ngram: speculative decoding for every request
                                     * that does not opt out (NULL: off). Prompt lookup keeps no
                                     * state, so the slots share it */
    tern_model *draft_model;        /* serve --spec draft:PATH (NULL: none): each slot gets a
                                     * drafter of its own on it (a draft session of n_ctx) */
    tern_tokenizer *draft_tok;      /* the three: the scheduler's once srv_sched_new succeeded
                                     * (freed by srv_sched_free), the caller's after a failure */
    int spec_k;                     /* --spec-k (0: 8) */
    int prefill_chunk;              /* the slots' prefill chunk (tern_session_params.n_chunk; 0: the
                                     * back-end's, 64 on the CPU, 512 on CUDA): every prompt is split
                                     * the same way whatever else runs, so replies do not depend on
                                     * the load, and a smaller chunk bounds the streams' stall */
} srv_sched_params;

/* Create the slots (sessions). The start-up fit check: n_parallel sessions and the snapshot
 * budget must fit the back-end's free memory (TERN_ERR_NOMEM, srv_sched_error() naming the
 * sizes). */
tern_status srv_sched_new(tern_model *m, const tern_tokenizer *tok, const srv_sched_params *p, srv_sched **out);
/* Why srv_sched_new failed on this thread (its own message, else tern_last_error()). */
const char *srv_sched_error(void);
/* fit.c: TERN_ERR_NOMEM (and srv_sched_error's message) when n_parallel sessions like s0 and
 * snap bytes of snapshots exceed free0, the back-end's free bytes before s0 was made (0:
 * unknown, no check); m NULL: clear the message. */
tern_status srv_sched_fit(const tern_model *m, const tern_session *s0, int n_parallel, uint64_t snap,
                          uint64_t free0);
/* The scheduler loop, on the calling thread, until srv_sched_stop: then every
 * running and waiting job ends (error "shutting down") and it returns. Run it
 * on a thread that outlives the model's use (the library keeps per-thread
 * scratch buffers that are released only at process exit). */
void srv_sched_run(srv_sched *s);
/* 0: queued; 503: queue full or shutting down; SRV_SUBMIT_MEMORY: the back-end has less
 * free memory than params.admit_free (also a 503 with Retry-After). Takes a reference on
 * success. */
#define SRV_SUBMIT_MEMORY 1
int srv_sched_submit(srv_sched *s, srv_job *j);
/* All n jobs queued together (one lock: the scheduler admits them in the same round,
 * so the choices of an n > 1 request find choice 0 still evaluating its prompt and copy
 * it), or none: 503 when the queue cannot take them all or the server is shutting down. */
int srv_sched_submit_all(srv_sched *s, srv_job *const *jobs, int n);
/* A snapshot of the slots for /slots; returns how many were written. */
typedef struct srv_slot_info {
    int id; bool busy; size_t n_prompt; int n_ctx; size_t n_cached;
    int n_snapshots;                /* prefix-cache snapshots the slot keeps */
} srv_slot_info;
int srv_sched_slots(srv_sched *s, srv_slot_info *out, int max);
/* Graceful end (any thread; returns at once): later submits and the waiting
 * jobs get "shutting down" (503); running jobs go on until they finish or
 * grace_ms has passed, then the loop ends as after srv_sched_stop. */
void srv_sched_drain(srv_sched *s, double grace_ms);
/* Ask the loop to end (any thread; returns at once). Later submits get 503. */
void srv_sched_stop(srv_sched *s);
/* After srv_sched_run returned (or when it never ran). */
void srv_sched_free(srv_sched *s);
void srv_sched_stats(srv_sched *s, int *busy, int *queued, int *n_slots, int *n_ctx);
/* Whether requests may continue a slot's session (not --no-prefix-cache). */
bool srv_sched_prefix_cache(const srv_sched *s);
/* Prefix-cache snapshots (models with recurrent state): how many are kept, their bytes,
 * the budget, and counters since start (taken, restored, evicted); whether the model
 * needs them (false: attention only, the KV cache is rewound instead). */
typedef struct srv_snap_stats {
    bool used;
    int count;
    uint64_t bytes, budget;
    unsigned long long taken, restored, evicted;
    uint64_t each;                  /* bytes of one snapshot (0 until the first is taken) */
    uint64_t backend_bytes;         /* of bytes, those in the back-end's device memory */
    double take_s, restore_s;       /* time spent taking and restoring them (on a GPU: queueing the
                                     * device copies) */
    unsigned long long skipped;     /* not taken: no memory for one */
} srv_snap_stats;
void srv_sched_snap_stats(srv_sched *s, srv_snap_stats *out);
/* The scheduler's rounds since start, for /metrics: model passes, the tokens and time of
 * prefill chunks and of decode passes, and the decode passes by batch size (bucket b counts
 * passes of at most SRV_BATCH_LE[b] rows; the last bucket is everything larger). */
#define SRV_BATCH_BUCKETS 9
extern const int SRV_BATCH_LE[SRV_BATCH_BUCKETS];
typedef struct srv_step_stats {
    unsigned long long rounds, passes;
    unsigned long long prefill_tokens, decode_tokens;
    double prefill_s, decode_s;
    double sample_s;                /* host time choosing tokens (sampling, stop rules, publishing) */
    unsigned long long batch_bucket[SRV_BATCH_BUCKETS + 1];
    size_t max_prefill_decoding;    /* the most prompt tokens one round evaluated while a slot decoded */
    /* the finished jobs' usage (every choice; cancelled and failed ones with what they
     * generated), counted before the job's end is published to its request */
    unsigned long long jobs, prompt_tokens, cached_tokens, evaluated_tokens, gen_tokens;
    double prompt_s, gen_s;
    int prefill_budget, decode_batch, chunk;  /* the settings in force */
    unsigned long long refused_memory;        /* requests answered 503 by admit_free */
    uint64_t mem_free;                        /* tern_model_memory_free when read (0: unknown) */
    uint64_t admit_free;                      /* the admission floor in force (0: none) */
    unsigned long long spec_drafted, spec_accepted, spec_steps; /* speculation: drafted, accepted, passes */
} srv_step_stats;
void srv_sched_step_stats(srv_sched *s, srv_step_stats *out);
/* KV cache bytes of all slots: in use now and at the full context; slot 0's session. */
void srv_sched_cache(srv_sched *s, uint64_t *now, uint64_t *max, const tern_session **slot0);

/* ------------------------------------------------------------------- http */

typedef struct srv_config {
    const char *host;
    int port;                       /* 0: any free port (the chosen one is printed) */
    const char *alias;              /* model id shown to clients */
    const char *api_key;            /* NULL: no auth */
    size_t max_body;
    bool quiet;                     /* no per-request log lines */
    int n_threads_http;             /* connection limit (0: 256) */
    int per_ip_limit;               /* connections per client address (0: no limit) */
    double header_timeout_s;        /* accept (or end of the last reply) to complete headers; 0: 10 s */
    double body_timeout_s;          /* complete headers to complete body; 0: 60 s */
    double sse_ping_s;              /* a stream with nothing to send for this long gets an SSE comment
                                     * line (": ping"), so the connection is never idle while a request
                                     * waits for its first token; 0: never */
    double idle_timeout_s;          /* libmicrohttpd closes a connection with nothing read or written
                                     * for this long (a non-streamed reply in the making is not idle;
                                     * a stream needs sse_ping_s below it); 0: 120 s */
    const char *cors_origin;        /* NULL: no CORS headers */
    int think_default;              /* -1: by chat format (on for qwen35), 0 off, 1 on */
    int default_max_tokens;         /* max_tokens when a request gives none (0: until end / full context) */
    /* sampling defaults when a request gives none (< 0: the built-in ones); the
     * model's general.sampling.* keys, read by `tern serve` */
    float default_temp, default_top_p, default_min_p, default_repeat_penalty;
    int default_top_k, default_penalty_last_n;
    float default_freq, default_presence; /* used when has_default_freq / _presence */
    bool has_default_freq, has_default_presence;
    const char *sampling_source;    /* for /props: "built-in", "model" (general.sampling.*), "flags", "model+flags" */
    const char *tls_key_pem;        /* HTTPS (--ssl-key-file / --ssl-cert-file): the PEM texts; NULL: plain HTTP */
    const char *tls_cert_pem;
    struct srv_embedder *embedder;  /* --embedding: /v1/embeddings and /embedding (NULL: they answer 501) */
    bool batch_invariant;           /* --batch-invariant (shown in /props) */
} srv_config;

typedef struct srv_http srv_http;
/* Start listening; *port_out gets the bound port. */
int srv_http_start(const srv_config *c, srv_sched *s, const tern_tokenizer *tok, srv_http **out, int *port_out,
                   char *err, size_t err_len);
/* Stop accepting connections (requests in flight go on). */
void srv_http_quiesce(srv_http *h);
/* ------------------------------------------------ endpoints.c (no sockets) */

/* Server-wide counters for /metrics (guarded by mu). */
#define SRV_LAT_BUCKETS 12
typedef struct srv_metrics {
    pthread_mutex_t mu;
    unsigned long long by_status[6];    /* 1xx..5xx by first digit, [0]: other */
    unsigned long long n_gen_requests;  /* chat + completions answered */
    unsigned long long lat_bucket[SRV_LAT_BUCKETS + 1];   /* cumulative at render time; +Inf last */
    double lat_sum_s;
} srv_metrics;
void srv_metrics_init(srv_metrics *m);
/* one answered request: its status class and, for chat and completions, its wall time (the
 * token figures come from the scheduler: srv_step_stats) */
void srv_metrics_record(srv_metrics *m, int status, bool generation, double wall_ms);
/* Prometheus text exposition (version 0.0.4); snap: the prefix-cache snapshots (NULL:
 * none shown). malloc'd. */
struct srv_snap_stats;
struct srv_step_stats;
char *srv_metrics_render(srv_metrics *m, int busy, int queued, int n_slots, const struct srv_snap_stats *snap,
                         const struct srv_step_stats *steps);
/* /tokenize {"content": str, "add_special"?: bool (match added tokens), "with_pieces"?: bool}
 * -> {"tokens": [ids] | [{"id","piece"}]}; /detokenize {"tokens": [ids]} -> {"content": str}.
 * 0 and a malloc'd JSON body in *out, else 400 with err. */
int srv_tokenize_json(const tern_tokenizer *tok, const char *body, size_t len, char **out, char *err, size_t en);
int srv_detokenize_json(const tern_tokenizer *tok, const char *body, size_t len, char **out, char *err, size_t en);

/* ------------------------------------------------ embed.c, embed_run.c: embeddings */

/* A parsed /v1/embeddings (OpenAI: input, model, encoding_format, dimensions, user) or
 * /embedding (llama-server: content or input, embd_normalize) body: the inputs as token
 * lists (text tokenized as plain text). Owned (srv_embed_req_free). */
#define SRV_MAX_EMBED_INPUTS 2048
typedef struct srv_embed_req {
    int32_t **ids;                  /* [n] token lists, each non-empty and within the context */
    size_t *n_ids;
    size_t n;
    size_t n_tokens;                /* all inputs' tokens (usage.prompt_tokens) */
    bool base64;                    /* encoding_format "base64": little-endian float32 bytes */
    bool normalize;                 /* Euclidean (default; embd_normalize -1: none) */
} srv_embed_req;
/* 0, or 400 with err naming the field. dim: the model's n_embd ('dimensions' must equal
 * it); n_ctx: the embedding session's context (the longest input). *r is always safe to
 * free afterwards. native: the /embedding shape (content accepted). */
int srv_embed_parse(bool native, const char *body, size_t len, const tern_tokenizer *tok, int n_vocab, int dim,
                    int n_ctx, srv_embed_req *r, char *err, size_t en);
void srv_embed_req_free(srv_embed_req *r);
/* The reply: OpenAI's {"object":"list","data":[{"object":"embedding","index","embedding"}],
 * "model","usage":{prompt_tokens,total_tokens}}, or native's [{"index","embedding":[[...]]}].
 * vecs: r->n rows of dim floats. malloc'd (NULL: out of memory). */
char *srv_embed_response(const srv_embed_req *r, const float *vecs, int dim, const char *model, bool native);

/* The worker thread that owns the embedding session (n_ctx tokens, the given cache
 * types; pooling MEAN, LAST or CLS), made at the first request (a failure then is that
 * request's 503, and the next request tries again). srv_embedder_run queues a request's inputs and waits:
 * out gets r->n rows of dim floats; 0, else an HTTP status and err. */
typedef struct srv_embedder srv_embedder;
tern_status srv_embedder_new(tern_model *m, int n_ctx, tern_cache_type ck, tern_cache_type cv, tern_pooling pooling,
                             srv_embedder **out);
int srv_embedder_run(srv_embedder *e, const srv_embed_req *r, float *out, char *err, size_t en);
int srv_embedder_dim(const srv_embedder *e);
int srv_embedder_n_ctx(const srv_embedder *e);
tern_pooling srv_embedder_pooling(const srv_embedder *e);
/* Ends the thread after the queued requests; frees the session. */
void srv_embedder_free(srv_embedder *e);

/* Wait until no request is being answered (at most timeout_ms); true when none is. */
bool srv_http_wait_idle(srv_http *h, int timeout_ms);
/* Close every connection and free. */
void srv_http_stop(srv_http *h);

#endif
