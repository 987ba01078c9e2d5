/*
 * tok_internal.h - the tokenizer's in-memory vocabulary, shared by the core
 * (tokenizer.c: encode/decode) and the loaders (tok_load.c: GGUF keys
 * tokenizer.ggml.*, tokenizer.json). Not public API.
 *
 * Token strings are kept in two forms: `text` as stored in the file (BPE tokens
 * in the GPT-2 byte-mapped form, e.g. "Ġthe"; added tokens literal) and `bytes`
 * (what the token decodes to). Merges are keyed by the (left, right) token ids.
 */
#ifndef TERN_TEXT_TOK_INTERNAL_H
#define TERN_TEXT_TOK_INTERNAL_H

#include "core/common.h"

typedef struct tok_entry {
    uint32_t text_off, text_len;    /* into tern_tokenizer.pool */
    uint32_t bytes_off, bytes_len;  /* into tern_tokenizer.pool */
    uint8_t type;                   /* tern_token_type */
} tok_entry;

/* open-addressing hash slots */
typedef struct tok_slot { uint32_t hash; int32_t id; } tok_slot;
typedef struct merge_slot { uint64_t key; int32_t rank; int32_t result; } merge_slot; /* key 0 = empty */

struct tern_tokenizer {
    int32_t n_vocab;
    tok_entry *tok;                 /* [n_vocab] */
    char *pool; size_t pool_len, pool_cap;
    tok_slot *map; uint32_t map_cap;          /* text -> id */
    merge_slot *merges; uint32_t merges_cap;  /* (l,r) -> rank, result */
    int32_t n_merges;
    int32_t byte_id[256];           /* id of the single mapped char for each byte (-1 if absent) */
    int32_t *added; int32_t n_added;/* added token ids (control + user-defined), longest first */
    uint8_t added_first[256];       /* 1 if some added token starts with this byte */
    int32_t bos, eos, pad;
    uint8_t *eog;                   /* [n_vocab] flags */
    char pre[16];                   /* "qwen2" / "qwen35" */
    char *regex;                    /* the split regex (PCRE2 syntax) */
    void *re_code;                  /* pcre2_code_8 * */
    char *chat_template;
};

/* Split regexes (the Qwen2/Qwen3 one and the Qwen3.5 one with \p{M}). */
extern const char *const tern_tok_regex_qwen2;
extern const char *const tern_tok_regex_qwen35;

/* Builder used by the loaders. */
tern_status tern_tok_init(tern_tokenizer *t, int32_t n_vocab);
/* Set token id's stored text (mapped form unless added) and type. */
tern_status tern_tok_set(tern_tokenizer *t, int32_t id, const char *text, size_t len, int type);
/* Add merge "a b" (stored form) with the given rank; unknown parts are skipped. */
tern_status tern_tok_add_merge(tern_tokenizer *t, const char *a, size_t alen, const char *b,
                               size_t blen, int32_t rank);
/* Build the text -> id index (done on the first merge otherwise). */
tern_status tern_tok_index(tern_tokenizer *t);
/* After all tokens/merges are in: build indexes, compile the regex, eog flags. */
tern_status tern_tok_finish(tern_tokenizer *t, const char *name);
void tern_tok_destroy(tern_tokenizer *t);

/* Encode with added tokens matched everywhere except inside the given byte
 * ranges (sorted, disjoint [start, end) pairs), which are plain text; the BPE
 * itself runs over the whole text, so the ids equal HF's when the ranges hold no
 * added-token text. */
tern_status tern_tok_encode_plain_ranges(const tern_tokenizer *t, const char *text, size_t len,
                                         const size_t (*plain)[2], size_t n_plain, tern_tokens *out);

#endif
