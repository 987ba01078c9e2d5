/*
 * http_conn.c - the connections of `tern serve` (http.c answers the requests):
 * the listening socket and its front-door thread, the deadline watcher that cuts
 * connections past their header/body deadlines, and the server's start and stop.
 */
#define _GNU_SOURCE                 /* accept4, pipe2 */
#include "server/http_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <time.h>

/* ------------------------------------------------------ connection deadlines */

void srv_http_track_phase(struct MHD_Connection *conn, int phase) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    conn_track *t = ci ? ci->socket_context : NULL;
    if (!t) return;
    /* phase and since are read by the watcher under tmu; a torn read is harmless
     * but keep it tidy */
    __atomic_store_n(&t->phase, phase, __ATOMIC_RELAXED);
    double now = now_ms();
    memcpy(&t->since, &now, sizeof now);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    srv_http *h = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        conn_track *t = calloc(1, sizeof *t);
        if (!t) return;
        t->fd = conn_fd(conn);
        t->phase = PH_HEADERS;
        t->since = now_ms();
        pthread_mutex_lock(&h->tmu);
        /* the time spent at the front door counts against the header deadline */
        if (t->fd >= 0 && t->fd < FD_SETSIZE && h->accepted_at[t->fd] > 0) {
            t->since = h->accepted_at[t->fd];
            h->accepted_at[t->fd] = 0;
        }
        t->next = h->conns;
        if (h->conns) h->conns->prev = t;
        h->conns = t;
        pthread_mutex_unlock(&h->tmu);
        *socket_context = t;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn_track *t = *socket_context;
        if (!t) return;
        pthread_mutex_lock(&h->tmu);
        if (t->prev) t->prev->next = t->next; else h->conns = t->next;
        if (t->next) t->next->prev = t->prev;
        pthread_mutex_unlock(&h->tmu);
        free(t);
        *socket_context = NULL;
    }
}

static void *watcher_main(void *arg) {
    srv_http *h = arg;
    double hdr = (h->c.header_timeout_s > 0 ? h->c.header_timeout_s : 10) * 1e3;
    double body = (h->c.body_timeout_s > 0 ? h->c.body_timeout_s : 60) * 1e3;
    for (;;) {
        pthread_mutex_lock(&h->tmu);
        if (h->watcher_stop) { pthread_mutex_unlock(&h->tmu); break; }
        double now = now_ms();
        for (conn_track *t = h->conns; t; t = t->next) {
            int ph = __atomic_load_n(&t->phase, __ATOMIC_RELAXED);
            double since;
            memcpy(&since, &t->since, sizeof since);
            if (t->cut || t->fd < 0 || ph == PH_ANSWER) continue;
            if (now - since > (ph == PH_HEADERS ? hdr : body)) {
                shutdown(t->fd, SHUT_RDWR);     /* the connection's thread sees the end and closes it */
                t->cut = true;
            }
        }
        pthread_mutex_unlock(&h->tmu);
        struct timespec ts = {0, 200 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* ------------------------------------------------------------- front door */

/* libmicrohttpd 0.9.75 closes a connection whose request line has no space
 * (`GARBAGE`, `GET`) without any reply, and tells the application nothing. So
 * the server owns the listening socket (libmicrohttpd runs with
 * MHD_USE_NO_LISTEN_SOCKET): this thread accepts, and holds each new connection
 * until its first bytes, peeked and left in place, decide
 * (srv_request_line_verdict). A method and a target: the connection goes to
 * libmicrohttpd (MHD_add_connection), which reads the request from its first
 * byte as if it had accepted it. A line that can never be a request line gets a
 * complete 400 from here, and the connection is closed once the client has
 * closed its side (or after DOOR_LINGER_MS), so the reply is not lost to a
 * reset. A connection that shows no decision within --header-timeout-s of its
 * accept is closed without a reply, as the watcher cuts one inside
 * libmicrohttpd. */
enum {
    DOOR_RECHECK_MS = 25,           /* re-peek of a connection with undecided bytes */
    DOOR_LINGER_MS = 2000,          /* a refused connection: wait this long for the client to close */
    DOOR_BACKOFF_MS = 100,          /* accept() out of descriptors: pause accepting */
    DOOR_ACCEPT_BURST = 64,         /* accepts per round, then the held connections get their turn */
    DOOR_MAX_PENDING = 1024,
};

struct door_conn {
    int fd;
    bool partial;                   /* some bytes, no verdict: re-peeked every DOOR_RECHECK_MS (poll()
                                     * would report the unread bytes at once, forever) */
    bool closing;                   /* the 400 is out: reading what the client still sends until it closes */
    double since;                   /* ms: the accept (closing: the reply) */
    double next;                    /* ms: the next peek of a partial one */
    struct sockaddr_storage addr;
    socklen_t addr_len;
};

/* Give the socket to libmicrohttpd. It applies the connection and per-IP limits
 * and closes the socket itself when it cannot take it. */
static void door_handoff(srv_http *h, int fd, const struct sockaddr *addr, socklen_t addr_len, double accepted) {
    pthread_mutex_lock(&h->tmu);
    if (fd < FD_SETSIZE) h->accepted_at[fd] = accepted;
    pthread_mutex_unlock(&h->tmu);
    if (MHD_add_connection(h->d, fd, addr, addr_len) != MHD_YES) {
        /* (a connection refused later, in libmicrohttpd's thread, leaves its entry:
         * the next handoff of that fd number overwrites it) */
        pthread_mutex_lock(&h->tmu);
        if (fd < FD_SETSIZE) h->accepted_at[fd] = 0;
        pthread_mutex_unlock(&h->tmu);
    }
}

/* The 400 of a malformed request line: a whole HTTP/1.1 reply in the server's
 * error shape, then the write side closed. */
static void door_refuse(door_conn *c, double now) {
    char *body = srv_json_error(400, "malformed request line (expected: METHOD SP request-target SP HTTP/1.1)");
    char date[64];
    time_t t = time(NULL);
    struct tm tm;
    if (!gmtime_r(&t, &tm) || !strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm)) date[0] = 0;
    tern_str r = {0};
    char line[256];
    snprintf(line, sizeof line, "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n%s%s%sContent-Type: application/json\r\n"
             "Content-Length: %zu\r\n", date[0] ? "Date: " : "", date, date[0] ? "\r\n" : "", body ? strlen(body) : 0);
    tern_str_append(&r, line, strlen(line));
    if (srv_http_cors) {
        tern_str_append(&r, "Access-Control-Allow-Origin: ", 29);
        tern_str_append(&r, srv_http_cors, strlen(srv_http_cors));
        tern_str_append(&r, "\r\n", 2);
        if (strcmp(srv_http_cors, "*")) tern_str_append(&r, "Vary: Origin\r\n", 14);
    }
    tern_str_append(&r, "\r\n", 2);
    if (body) tern_str_append(&r, body, strlen(body));
    free(body);
    /* a few hundred bytes into an empty send buffer: one non-blocking send; if
     * it falls short the client gets a cut reply, and the connection closes anyway */
    if (r.data) send(c->fd, r.data, r.len, MSG_NOSIGNAL | MSG_DONTWAIT);
    tern_str_free(&r);
    shutdown(c->fd, SHUT_WR);
    c->closing = true;
    c->partial = false;
    c->since = now;
}

/* One step of a held connection (ev: its poll() events); true when it has left
 * the front door (handed over or closed). */
static bool door_step(srv_http *h, door_conn *c, short ev, double now, double hdr_ms) {
    if (c->closing) {
        if (ev) {
            char junk[4096];
            ssize_t r = 0;
            for (int k = 0; k < 16 && (r = recv(c->fd, junk, sizeof junk, MSG_DONTWAIT)) > 0; k++) {}
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) { close(c->fd); return true; }
        }
        if (now - c->since > DOOR_LINGER_MS) { close(c->fd); return true; }
        return false;
    }
    if (ev || (c->partial && now >= c->next)) {
        char b[SRV_REQLINE_PEEK];
        ssize_t r = recv(c->fd, b, sizeof b, MSG_PEEK | MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            close(c->fd);           /* gone before a request line: nobody to answer */
            return true;
        }
        if (r > 0) {
            /* HTTPS: the bytes are a TLS handshake, not a request line: libmicrohttpd's */
            srv_reqline v = h->tls ? SRV_REQLINE_VALID : srv_request_line_verdict(b, (size_t)r);
            if (v == SRV_REQLINE_VALID) {
                door_handoff(h, c->fd, (const struct sockaddr *)&c->addr, c->addr_len, c->since);
                return true;
            }
            if (v == SRV_REQLINE_INVALID) { door_refuse(c, now); return false; }
            c->partial = true;
            c->next = now + DOOR_RECHECK_MS;
        }
    }
    if (now - c->since > hdr_ms) { close(c->fd); return true; }   /* no request line in time */
    return false;
}

static void door_drop(srv_http *h, int k) { h->pend[k] = h->pend[--h->n_pend]; }

/* Held connections from the same address (IPv4 / IPv6 address, any port). */
static int door_same_ip(const srv_http *h, const struct sockaddr_storage *a) {
    int n = 0;
    for (int k = 0; k < h->n_pend; k++) {
        const struct sockaddr_storage *b = &h->pend[k].addr;
        if (a->ss_family != b->ss_family) continue;
        if (a->ss_family == AF_INET)
            n += !memcmp(&((const struct sockaddr_in *)a)->sin_addr, &((const struct sockaddr_in *)b)->sin_addr,
                         sizeof(struct in_addr));
        else if (a->ss_family == AF_INET6)
            n += !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr,
                         sizeof(struct in6_addr));
    }
    return n;
}

static void door_accept(srv_http *h, double *backoff_until, double hdr_ms) {
    for (int k = 0; k < DOOR_ACCEPT_BURST; k++) {
        struct sockaddr_storage a;
        socklen_t al = sizeof a;
        int fd = accept4(h->listen_fd, (struct sockaddr *)&a, &al, SOCK_NONBLOCK | SOCK_CLOEXEC);
        double now = now_ms();
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            /* out of descriptors or memory: the backlog waits instead of poll() spinning on it */
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                *backoff_until = now + DOOR_BACKOFF_MS;
                return;
            }
            continue;               /* a connection that failed in the backlog (ECONNABORTED, EPROTO, ...) */
        }
        /* a full front door, or one address holding --per-ip-limit connections in it:
         * straight to libmicrohttpd, whose own limits apply (no 400 for garbage then) */
        if (h->n_pend == h->max_pend || (h->c.per_ip_limit > 0 && door_same_ip(h, &a) >= h->c.per_ip_limit)) {
            door_handoff(h, fd, (const struct sockaddr *)&a, al, now);
            continue;
        }
        door_conn *c = &h->pend[h->n_pend++];
        memset(c, 0, sizeof *c);
        c->fd = fd;
        c->since = now;
        memcpy(&c->addr, &a, al);
        c->addr_len = al;
        /* the request line is often in already: look now rather than after a poll() */
        if (door_step(h, c, POLLIN, now, hdr_ms)) door_drop(h, h->n_pend - 1);
    }
}

static void *door_main(void *arg) {
    srv_http *h = arg;
    double hdr_ms = (h->c.header_timeout_s > 0 ? h->c.header_timeout_s : 10) * 1e3;
    double backoff_until = 0;
    struct pollfd *pf = h->pfd;
    for (;;) {
        double now = now_ms(), wait = 1000;
        bool listening = now >= backoff_until;
        if (!listening) wait = backoff_until - now;
        pf[0] = (struct pollfd){.fd = h->wake[0], .events = POLLIN};
        pf[1] = (struct pollfd){.fd = listening ? h->listen_fd : -1, .events = POLLIN};
        for (int k = 0; k < h->n_pend; k++) {
            const door_conn *c = &h->pend[k];
            double due = c->since + (c->closing ? DOOR_LINGER_MS : hdr_ms);
            if (c->partial && c->next < due) due = c->next;
            if (due - now < wait) wait = due - now;
            /* a partial one is left out (a negative fd is ignored): it is peeked on its timer */
            pf[2 + k] = (struct pollfd){.fd = c->partial ? -1 : c->fd, .events = POLLIN};
        }
        int n = poll(pf, (nfds_t)(2 + h->n_pend), wait > 0 ? (int)wait + 1 : 0);
        if (n < 0 && errno != EINTR) {
            /* should not happen (EFAULT, EINVAL, ENOMEM): do not spin */
            struct timespec ts = {0, DOOR_BACKOFF_MS * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        if (n > 0 && pf[0].revents) break;   /* srv_http_quiesce / srv_http_stop */
        now = now_ms();
        /* downwards: door_drop moves the last one, already done, into slot k */
        for (int k = h->n_pend - 1; k >= 0; k--)
            if (door_step(h, &h->pend[k], n > 0 ? pf[2 + k].revents : 0, now, hdr_ms)) door_drop(h, k);
        if (n > 0 && pf[1].revents) door_accept(h, &backoff_until, hdr_ms);
    }
    /* stopping (shutdown): nothing new comes in. The undecided connections go to
     * libmicrohttpd, which serves them as it serves its own during the drain; the
     * refused ones are closed. */
    close(h->listen_fd);
    h->listen_fd = -1;
    for (int k = 0; k < h->n_pend; k++) {
        door_conn *c = &h->pend[k];
        if (c->closing) close(c->fd);
        else door_handoff(h, c->fd, (const struct sockaddr *)&c->addr, c->addr_len, c->since);
    }
    h->n_pend = 0;
    return NULL;
}

/* Stop accepting and end the thread (idempotent; quiesce and stop run one after
 * the other, never at once). */
static void door_stop(srv_http *h) {
    if (!h->door_on) return;
    h->door_on = false;
    while (write(h->wake[1], "x", 1) < 0 && errno == EINTR) {}
    pthread_join(h->door, NULL);
}

/* The listening socket on the resolved address, as libmicrohttpd made it
 * (SO_REUSEADDR; IPv6 only on an IPv6 address). */
static int door_listen(const struct addrinfo *ai, int *port_out, char *err, size_t en, const srv_config *c) {
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) { snprintf(err, en, "cannot create a socket: %s", strerror(errno)); return -1; }
    int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (ai->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, SOMAXCONN)) {
        snprintf(err, en, "cannot listen on %s:%d: %s", c->host, c->port, strerror(errno));
        close(fd);
        return -1;
    }
    struct sockaddr_storage a;
    socklen_t al = sizeof a;
    *port_out = c->port;
    if (!getsockname(fd, (struct sockaddr *)&a, &al))
        *port_out = a.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&a)->sin6_port)
                                            : ntohs(((struct sockaddr_in *)&a)->sin_port);
    return fd;
}

bool srv_http_wait_idle(srv_http *h, int timeout_ms) {
    if (!h) return true;
    double end = now_ms() + timeout_ms;
    while (__atomic_load_n(&h->active, __ATOMIC_RELAXED) > 0) {
        if (now_ms() >= end) return false;
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return true;
}

/* ------------------------------------------------------------------- start */

int srv_http_start(const srv_config *c, srv_sched *s, const tern_tokenizer *tok, srv_http **out, int *port_out,
                   char *err, size_t en) {
    *out = NULL;
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port[16];
    snprintf(port, sizeof port, "%d", c->port);
    int gr = getaddrinfo(c->host, port, &hints, &ai);
    if (gr || !ai) { snprintf(err, en, "cannot resolve host '%s': %s", c->host, gai_strerror(gr)); return 1; }
    int bound = c->port;
    int lfd = door_listen(ai, &bound, err, en, c);
    freeaddrinfo(ai);
    if (lfd < 0) return 1;
    srv_http *h = calloc(1, sizeof *h);
    unsigned limit = (unsigned)(c->n_threads_http > 0 ? c->n_threads_http : 256);
    /* the front door holds at most as many connections as libmicrohttpd (both
     * need descriptors, and libmicrohttpd takes none at or above FD_SETSIZE) */
    int max_pend = limit < DOOR_MAX_PENDING ? (int)limit : DOOR_MAX_PENDING;
    if (h) {
        h->pend = calloc((size_t)max_pend, sizeof *h->pend);
        h->pfd = calloc((size_t)max_pend + 2, sizeof *h->pfd);
    }
    bool mem = h && h->pend && h->pfd;
    if (!mem || pipe2(h->wake, O_NONBLOCK | O_CLOEXEC)) {
        if (mem) snprintf(err, en, "cannot create a pipe: %s", strerror(errno));
        else snprintf(err, en, "out of memory");
        if (h) { free(h->pend); free(h->pfd); }
        free(h);
        close(lfd);
        return 1;
    }
    h->listen_fd = lfd;
    h->max_pend = max_pend;
    h->c = *c;
    h->sched = s;
    h->tok = tok;
    h->fmt = tern_chat_format_for(tok);
    h->think_default = c->think_default < 0 ? h->fmt == TERN_CHAT_QWEN35 : c->think_default == 1;
    h->started = (long long)time(NULL);
    pthread_mutex_init(&h->tmu, NULL);
    srv_metrics_init(&h->metrics);
    srv_http_cors = c->cors_origin;
    /* no listening socket of its own: connections come from the front door
     * (MHD_add_connection from another thread needs MHD_USE_ITC) */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                     MHD_USE_NO_LISTEN_SOCKET;
    /* HTTPS: libmicrohttpd's TLS (GnuTLS) with the key and certificate given */
    struct MHD_OptionItem tls[3] = {{MHD_OPTION_END, 0, NULL}, {MHD_OPTION_END, 0, NULL}, {MHD_OPTION_END, 0, NULL}};
    h->tls = c->tls_key_pem && c->tls_cert_pem;
    if (h->tls) {
        flags |= MHD_USE_TLS;
        tls[0] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)c->tls_key_pem};
        tls[1] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)c->tls_cert_pem};
    }
    h->d = h->tls && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES ? NULL
         : MHD_start_daemon(flags, 0, NULL, NULL, srv_http_on_request, h,
                            MHD_OPTION_NOTIFY_COMPLETED, srv_http_on_completed, h,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
                            MHD_OPTION_CONNECTION_LIMIT, limit,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)(c->per_ip_limit > 0 ? c->per_ip_limit : 0),
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(c->idle_timeout_s > 0 ? c->idle_timeout_s : 120),
                            MHD_OPTION_THREAD_STACK_SIZE, (size_t)(1 << 20),
                            MHD_OPTION_ARRAY, tls,
                            MHD_OPTION_END);
    if (h->d) h->door_on = pthread_create(&h->door, NULL, door_main, h) == 0;
    if (!h->door_on) {
        snprintf(err, en, h->d ? "cannot start the accepting thread"
                          : h->tls && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES
                              ? "this libmicrohttpd has no TLS support (HTTPS)"
                          : h->tls ? "cannot start libmicrohttpd with TLS (is the key / certificate valid PEM?)"
                                   : "cannot start libmicrohttpd");
        if (h->d) MHD_stop_daemon(h->d);
        close(lfd);
        close(h->wake[0]);
        close(h->wake[1]);
        pthread_mutex_destroy(&h->tmu);
        pthread_mutex_destroy(&h->metrics.mu);
        free(h->pend);
        free(h->pfd);
        free(h);
        return 1;
    }
    h->watcher_on = pthread_create(&h->watcher, NULL, watcher_main, h) == 0;
    *port_out = bound;
    *out = h;
    return 0;
}

/* The listening socket closes at once (a new connection is refused by the
 * kernel); connections already accepted go on. */
void srv_http_quiesce(srv_http *h) {
    if (!h) return;
    door_stop(h);
}

void srv_http_stop(srv_http *h) {
    if (!h) return;
    door_stop(h);                   /* first: nothing is handed to libmicrohttpd after this */
    if (h->watcher_on) {
        pthread_mutex_lock(&h->tmu);
        h->watcher_stop = true;
        pthread_mutex_unlock(&h->tmu);
        pthread_join(h->watcher, NULL);
    }
    MHD_stop_daemon(h->d);
    close(h->wake[0]);
    close(h->wake[1]);
    free(h->pend);
    free(h->pfd);
    tern_token_trie_free(h->trie);
    pthread_mutex_destroy(&h->tmu);
    pthread_mutex_destroy(&h->metrics.mu);
    free(h);
}
