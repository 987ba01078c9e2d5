/*
 * http_embed.c - POST /v1/embeddings (OpenAI) and /embedding (llama-server's native shape)
 * of `tern serve --embedding`: parse and tokenize on the handler thread (embed.c), embed
 * on the embedding worker (embed_run.c), reply. With --no-embedding both answer 501.
 */
#include "server/http_internal.h"

#include <stdlib.h>

enum MHD_Result srv_http_embeddings(srv_http *h, struct MHD_Connection *conn, conn_state *cs) {
    srv_embedder *e = h->c.embedder;
    if (!e) return srv_http_send_error(conn, cs, 501, "embeddings are off: tern serve was started with --no-embedding");
    const bool native = cs->route == R_EMBEDDING_NATIVE;
    const int dim = srv_embedder_dim(e);
    char err[320];
    srv_embed_req r;
    int rc = srv_embed_parse(native, cs->body.data, cs->body.len, h->tok, tern_tokenizer_n_vocab(h->tok), dim,
                             srv_embedder_n_ctx(e), &r, err, sizeof err);
    if (rc) {
        srv_embed_req_free(&r);
        return srv_http_send_error(conn, cs, rc, err);
    }
    cs->n_prompt = r.n_tokens;
    float *vecs = malloc(r.n * (size_t)dim * sizeof *vecs);
    if (!vecs) {
        srv_embed_req_free(&r);
        return srv_http_send_error(conn, cs, 500, "out of memory");
    }
    rc = srv_embedder_run(e, &r, vecs, err, sizeof err);
    char *json = rc ? NULL : srv_embed_response(&r, vecs, dim, h->c.alias, native);
    free(vecs);
    srv_embed_req_free(&r);
    if (rc) return srv_http_send_error(conn, cs, rc, err);
    return srv_http_send_json(conn, cs, 200, json);
}
