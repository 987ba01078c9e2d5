/*
 * generate.c - the token loop: evaluate a prompt on a session, then sample,
 * stream and evaluate one token at a time until a stop rule fires:
 *   eog      the sampled id is an end-of-generation token (<|im_end|>, eos, ...)
 *   stop_string  the text contains one of the stop strings (cut before it)
 *   max_tokens   max_tokens ids were sampled
 *   context_full the next id would not fit in the session's context
 *   cancelled    *cancel became non-zero or on_text returned false
 * Streaming: token bytes pass through the UTF-8 hold-back of the streaming
 * detokenizer, then the longest tail that could still begin a stop string is
 * held back until it is decided.
 */
#include "core/common.h"

#include <string.h>

void tern_gen_result_free(tern_gen_result *r) {
    if (!r) return;
    tern_tokens_free(&r->tokens);
    tern_str_free(&r->text);
}

size_t tern_stop_scan(const char *text, size_t len, size_t before, const char *const *stop, size_t n_stop,
                      bool *matched) {
    size_t cut = len, held = 0;
    *matched = false;
    for (size_t k = 0; k < n_stop; k++) {
        size_t sl = strlen(stop[k]);
        if (!sl) continue;
        /* a new match ends after `before`: it starts at before - sl + 1 or later */
        for (size_t i = before >= sl ? before - sl + 1 : 0; i + sl <= len && i < cut; i++)
            if (!memcmp(text + i, stop[k], sl)) { cut = i; *matched = true; break; }
        /* the longest suffix that is a proper prefix of this stop string */
        for (size_t l = sl - 1; l > held; l--)
            if (l <= len && !memcmp(text + len - l, stop[k], l)) { held = l; break; }
    }
    return *matched ? cut : len - held;
}

tern_status tern_generate(tern_session *s, const tern_tokenizer *t, tern_sampler *smp, const int32_t *prompt,
                          size_t n_prompt, const tern_gen_params *p, tern_gen_result *r) {
    if (!s || !t || !smp || !r || (!prompt && n_prompt))
        return tern_fail(TERN_ERR_INVALID_ARG, "tern_generate: NULL argument");
    tern_gen_params def = {0};
    if (!p) p = &def;
    memset(r, 0, sizeof *r);
    tern_status st = tern_str_append(&r->text, "", 0);
    if (st) return st;
    double t0 = tern_now_s();
    if (n_prompt) {
        if ((size_t)tern_session_pos(s) + n_prompt > (size_t)tern_session_n_ctx(s))
            return tern_fail(TERN_ERR_CONTEXT_FULL, "generate: the prompt (%zu tokens) does not fit the context "
                             "(%d of %d positions used)", n_prompt, tern_session_pos(s), tern_session_n_ctx(s));
        if ((st = tern_session_eval(s, prompt, n_prompt, NULL))) return st;
    } else if (tern_session_pos(s) == 0) {
        return tern_fail(TERN_ERR_INVALID_ARG, "generate: empty prompt on an empty session");
    }
    r->n_prompt = n_prompt;
    for (size_t i = 0; i < n_prompt; i++) tern_sampler_accept(smp, prompt[i]); /* penalties see the prompt (HF) */
    double t1 = tern_now_s();
    r->prompt_s = t1 - t0;
    tern_detok_stream ds = {0};
    size_t emitted = 0;       /* bytes of r->text already passed to on_text */
    bool cancelled = false;
    r->reason = TERN_STOP_NONE;
    for (;;) {
        if (p->cancel && *p->cancel) { r->reason = TERN_STOP_CANCELLED; break; }
        if (p->max_tokens > 0 && r->tokens.n >= (size_t)p->max_tokens) { r->reason = TERN_STOP_MAX_TOKENS; break; }
        const float *logits = tern_session_logits(s);
        if (!logits) { st = tern_fail(TERN_ERR_INTERNAL, "generate: the session has no logits"); break; }
        int32_t id = tern_sampler_sample(smp, logits);
        tern_sampler_accept(smp, id);
        if ((st = tern_tokens_push(&r->tokens, id))) break;
        if (tern_token_is_eog(t, id)) { r->reason = TERN_STOP_EOG; break; }
        size_t before = r->text.len;
        if ((st = tern_detok_stream_push(&ds, t, id, &r->text))) break;
        bool stopped;
        size_t safe = tern_stop_scan(r->text.data, r->text.len, before, p->stop, p->n_stop, &stopped);
        if (stopped) { r->text.len = safe; r->text.data[safe] = 0; }
        if (safe > emitted && p->on_text) {
            if (!p->on_text(r->text.data + emitted, safe - emitted, p->user)) cancelled = true;
        }
        if (safe > emitted) emitted = safe;
        if (stopped) { r->reason = TERN_STOP_STRING; break; }
        if (cancelled) { r->reason = TERN_STOP_CANCELLED; break; }
        if (tern_session_pos(s) >= tern_session_n_ctx(s)) { r->reason = TERN_STOP_CONTEXT_FULL; break; }
        if ((st = tern_session_eval(s, &id, 1, NULL))) break;
    }
    if (!st && r->reason != TERN_STOP_STRING) {
        st = tern_detok_stream_flush(&ds, &r->text);
        if (!st && r->text.len > emitted && p->on_text && !cancelled)
            p->on_text(r->text.data + emitted, r->text.len - emitted, p->user);
    }
    r->gen_s = tern_now_s() - t1;
    return st;
}
