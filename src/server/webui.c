/*
 * webui.c - the web chat's files, served at / (index.html) and /webui/<name>.
 *
 * Each file is a byte array made at build time from src/server/webui/ and from
 * Debian's libjs-marked and libjs-highlight.js (CMakeLists.txt, cmake/embed.cmake;
 * a stub comment where a library was absent at configure time), so the page
 * loads nothing from the network. Replies carry an ETag (from the file's SHA-1)
 * and Cache-Control: no-cache: a browser revalidates and gets 304 while the
 * binary is the same. The page itself gets a Content-Security-Policy that allows
 * scripts, styles and connections from the server only and no inline script: a
 * second wall behind chat.js's sanitizing of the model's text.
 */
#include "server/http_internal.h"

#include <string.h>

#define WEBUI_FILE(sym)                                                                  \
    extern const unsigned char srv_webui_##sym[];                                        \
    extern const unsigned long srv_webui_##sym##_len;                                    \
    extern const char srv_webui_##sym##_etag[];
WEBUI_FILE(index_html)
WEBUI_FILE(chat_js)
WEBUI_FILE(chat_css)
WEBUI_FILE(marked_js)
WEBUI_FILE(hljs_js)
WEBUI_FILE(hljs_style_css)

typedef struct {
    const char *name, *type;
    const unsigned char *data;
    const unsigned long *len;
    const char *etag;
} webui_file;

#define F(name, type, sym) { name, type, srv_webui_##sym, &srv_webui_##sym##_len, srv_webui_##sym##_etag }
static const webui_file files[] = {
    F("index.html", "text/html; charset=utf-8", index_html),
    F("chat.js", "text/javascript; charset=utf-8", chat_js),
    F("chat.css", "text/css; charset=utf-8", chat_css),
    F("marked.min.js", "text/javascript; charset=utf-8", marked_js),
    F("highlight.min.js", "text/javascript; charset=utf-8", hljs_js),
    F("highlight.css", "text/css; charset=utf-8", hljs_style_css),
};
#undef F

static const webui_file *find(const char *name) {
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        if (!strcmp(files[i].name, name)) return &files[i];
    return NULL;
}

bool srv_webui_exists(const char *name) { return find(name) != NULL; }

enum MHD_Result srv_webui_send(struct MHD_Connection *conn, conn_state *cs, const char *name) {
    const webui_file *f = find(name);
    if (!f) return srv_http_send_error(conn, cs, 404, "unknown path");
    const char *inm = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "If-None-Match");
    int status = inm && strstr(inm, f->etag) ? 304 : 200;
    struct MHD_Response *r = MHD_create_response_from_buffer(status == 304 ? 0 : (size_t)*f->len, (void *)f->data,
                                                             MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    if (status == 200) MHD_add_response_header(r, "Content-Type", f->type);
    MHD_add_response_header(r, "ETag", f->etag);
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    if (f == &files[0])
        MHD_add_response_header(r, "Content-Security-Policy",
                                "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                                "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
                                "form-action 'none'; frame-ancestors 'none'");
    srv_http_add_cors(r);
    cs->status = status;
    srv_http_record(cs, status);
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}
