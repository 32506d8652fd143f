/* The libuv shell of the gRPC server: listens, accepts, reads into the socket-free connection core
 * (server_conn.c), writes what it produces, and runs one uv timer for the core's timer heap. With TLS
 * (tls.c) every socket's bytes pass through its TLS connection: ciphertext in, plaintext to the core,
 * the core's output encrypted before it is written.
 * Invariants: at most one write per connection is in flight (its bytes live in sc->wbuf until it
 * completes); the core's output is taken only when no write is in flight, so its bound (and the read
 * pause) holds with TLS too; a core connection is freed only in its socket's close callback, never
 * under a handler's stack; the server is freed when its last handle has closed. */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "log.h"
#include "rpc_server.h"
#include "server_core.h"
#include "tls.h"
#include "xmalloc.h"

typedef struct sconn {
    tide_rpc_server_t *srv;
    uv_tcp_t tcp;
    tide__srv_conn_t *core;
    tide_tls_conn_t *tls; /* NULL: plaintext */
    tide_buf_t wbuf;
    tide_buf_t pbuf; /* TLS: the core's plaintext output on its way into tls (kept warm) */
    uv_write_t wreq;
    bool tls_checked; /* the first byte was looked at */
    bool tls_bye;     /* close_notify queued */
    bool writing;
    bool reading;
    bool closing;
    bool queued; /* in srv->flush */
    tide_list_t link;
    tide_list_t flush_link;
} sconn_t;

struct tide_rpc_server {
    uv_loop_t *loop;
    tide__srv_ctx_t ctx;
    uv_tcp_t *listener; /* NULL until listen; owned, freed in its close callback */
    uv_timer_t timer;
    uv_prepare_t prepare;
    bool listening;
    bool shut_down;
    bool freeing;
    int open_handles;
    int port;
    tide_list_t conns;
    tide_list_t flush;
    void (*close_cb)(void *ud);
    void *close_ud;
    tide_tls_ctx_t *tls;        /* a reference; NULL: plaintext */
    uint64_t plaintext_refused; /* TLS server: connections that did not start with a TLS record */
    tide_buf_t plain;           /* TLS: decrypted input, handed to a core and reused */
    uint8_t rbuf[64 << 10];
};

static void sconn_flush(sconn_t *sc);

static int64_t srv_now(void *ud)
{
    tide_rpc_server_t *s = ud;
    return (int64_t)uv_now(s->loop);
}

static void srv_timer_cb(uv_timer_t *t)
{
    tide_rpc_server_t *s = t->data;

    tide__srv_ctx_run_timers(&s->ctx, (int64_t)uv_now(s->loop));
}

static void srv_timers_changed(void *ud)
{
    tide_rpc_server_t *s = ud;
    int64_t next, now;

    if (s->freeing)
        return;
    next = tide__srv_ctx_next_timer(&s->ctx);
    if (next < 0) {
        uv_timer_stop(&s->timer);
        return;
    }
    now = (int64_t)uv_now(s->loop);
    uv_timer_start(&s->timer, srv_timer_cb, next > now ? (uint64_t)(next - now) : 0, 0);
}

static void prepare_cb(uv_prepare_t *p)
{
    tide_rpc_server_t *s = p->data;

    while (!tide_list_empty(&s->flush)) {
        sconn_t *sc = tide_list_entry(s->flush.next, sconn_t, flush_link);
        tide_list_remove(&sc->flush_link);
        sc->queued = false;
        sconn_flush(sc);
    }
    uv_prepare_stop(&s->prepare);
}

/* The core's hook: flush before the loop sleeps (batches writes; never re-enters the core). */
static void sconn_notify(void *ud)
{
    sconn_t *sc = ud;
    tide_rpc_server_t *s = sc->srv;

    if (sc->closing || sc->queued || s->freeing)
        return;
    sc->queued = true;
    tide_list_push_back(&s->flush, &sc->flush_link);
    uv_prepare_start(&s->prepare, prepare_cb);
}

static void handle_closed(tide_rpc_server_t *s)
{
    if (--s->open_handles > 0 || !s->freeing)
        return;
    tide__srv_ctx_fini(&s->ctx);
    tide_tls_ctx_free(s->tls);
    tide_buf_free(&s->plain);
    void (*cb)(void *) = s->close_cb;
    void *ud = s->close_ud;
    free(s);
    if (cb)
        cb(ud);
}

static void sconn_closed(uv_handle_t *h)
{
    sconn_t *sc = h->data;
    tide_rpc_server_t *s = sc->srv;

    tide__srv_conn_free(sc->core); /* on_close runs here for open calls */
    tide_tls_conn_free(sc->tls);
    tide_buf_free(&sc->wbuf);
    tide_buf_free(&sc->pbuf);
    free(sc);
    handle_closed(s);
}

/* Moves the core's output into sc->wbuf, which must be empty: swapped as it is, or through TLS
 * (encrypted, with whatever handshake records and alerts TLS has queued). Returns the bytes to write. */
static size_t sconn_take(sconn_t *sc)
{
    if (!sc->tls)
        return tide__srv_conn_take_output(sc->core, &sc->wbuf);
    if (tide__srv_conn_take_output(sc->core, &sc->pbuf) > 0) {
        (void)tide_tls_conn_write(sc->tls, sc->pbuf.data, sc->pbuf.len, NULL); /* failure: seen in flush */
        sc->pbuf.len = 0;
    }
    return tide_tls_conn_take_output(sc->tls, &sc->wbuf);
}

static void sconn_close(sconn_t *sc)
{
    if (sc->closing)
        return;
    sc->closing = true;
    if (sc->queued) {
        tide_list_remove(&sc->flush_link);
        sc->queued = false;
    }
    tide_list_remove(&sc->link);
    if (!sc->writing) {
        /* Best effort for a last GOAWAY or error response; never blocks. */
        tide__srv_conn_pull(sc->core);
        if (sc->tls && !sc->tls_bye && tide_tls_conn_established(sc->tls)) {
            sc->tls_bye = true;
            if (tide__srv_conn_take_output(sc->core, &sc->pbuf) > 0) {
                (void)tide_tls_conn_write(sc->tls, sc->pbuf.data, sc->pbuf.len, NULL);
                sc->pbuf.len = 0;
            }
            tide_tls_conn_close_notify(sc->tls);
        }
        if (sconn_take(sc) > 0) {
            uv_buf_t b = uv_buf_init((char *)sc->wbuf.data, (unsigned)sc->wbuf.len);
            (void)uv_try_write((uv_stream_t *)&sc->tcp, &b, 1);
        }
    }
    uv_close((uv_handle_t *)&sc->tcp, sconn_closed);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    sconn_t *sc = h->data;

    (void)suggested;
    /* One read buffer per server: the core copies what it keeps before read_cb returns. */
    *buf = uv_buf_init((char *)sc->srv->rbuf, sizeof(sc->srv->rbuf));
}

/* TLS: ciphertext in, plaintext to the core. A connection that does not open with a TLS handshake
 * record (0x16) is closed at once and counted; a failed handshake is logged and closed once its alert
 * is written (sconn_flush). */
static void sconn_read_tls(sconn_t *sc, const uint8_t *data, size_t len)
{
    tide_rpc_server_t *s = sc->srv;
    tide__srv_conn_t *core = sc->core;
    bool was = tide_tls_conn_established(sc->tls);
    tide_error_t err;
    int rc;

    if (tide_tls_conn_failed(sc->tls))
        return;
    if (!sc->tls_checked) {
        sc->tls_checked = true;
        if (data[0] != 0x16) {
            s->plaintext_refused++;
            tide_info("closed a plaintext connection from %s: this server speaks TLS only", core->peer);
            tide__srv_conn_close(core, TIDE__CONN_ABORT);
            return;
        }
    }
    s->plain.len = 0;
    rc = tide_tls_conn_feed(sc->tls, data, len, &s->plain, &err);
    if (!was && tide_tls_conn_established(sc->tls))
        snprintf(core->peer_cn, sizeof(core->peer_cn), "%s", tide_tls_conn_peer_cn(sc->tls));
    if (s->plain.len > 0)
        tide__srv_conn_feed(core, s->plain.data, s->plain.len);
    if (rc < 0)
        tide_info("TLS with %s failed: %s", core->peer, err.text);
    else if (tide_tls_conn_peer_closed(sc->tls))
        tide__srv_conn_eof(core);
}

static void read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    sconn_t *sc = stream->data;

    if (sc->closing)
        return;
    if (nread > 0) {
        if (sc->tls)
            sconn_read_tls(sc, (const uint8_t *)buf->base, (size_t)nread);
        else
            tide__srv_conn_feed(sc->core, (const uint8_t *)buf->base, (size_t)nread);
    } else if (nread < 0) {
        uv_read_stop(stream);
        sc->reading = false;
        if (nread == UV_EOF)
            tide__srv_conn_eof(sc->core);
        else
            tide__srv_conn_close(sc->core, TIDE__CONN_ABORT);
    }
    if (!sc->closing)
        sconn_flush(sc);
}

static void write_cb(uv_write_t *req, int status)
{
    sconn_t *sc = req->data;

    sc->writing = false;
    sc->wbuf.len = 0;
    if (sc->closing)
        return;
    if (status < 0) {
        tide__srv_conn_close(sc->core, TIDE__CONN_ABORT);
        sconn_close(sc);
        return;
    }
    sconn_flush(sc);
}

/* Writes what the core has, then applies its state: read pause/resume, close. */
static void sconn_flush(sconn_t *sc)
{
    tide__srv_conn_t *core = sc->core;

    if (sc->closing)
        return;
    if (!sc->writing) {
        tide__srv_conn_pull(core);
        if (sc->tls && !sc->tls_bye && core->state == TIDE__CONN_CLOSE_AFTER_FLUSH && core->out.len == 0 &&
            tide_tls_conn_established(sc->tls)) {
            /* The core has said everything (its last bytes went in an earlier write): close_notify. */
            sc->tls_bye = true;
            tide_tls_conn_close_notify(sc->tls);
        }
        if (sconn_take(sc) > 0) {
            uv_buf_t b = uv_buf_init((char *)sc->wbuf.data, (unsigned)sc->wbuf.len);
            sc->wreq.data = sc;
            if (uv_write(&sc->wreq, (uv_stream_t *)&sc->tcp, &b, 1, write_cb) != 0) {
                sc->wbuf.len = 0;
                sconn_close(sc);
                return;
            }
            sc->writing = true;
        }
    }
    if (core->state == TIDE__CONN_ABORT ||
        (core->state == TIDE__CONN_CLOSE_AFTER_FLUSH && !sc->writing && core->out.len == 0 &&
         (!sc->tls || sc->tls_bye || !tide_tls_conn_established(sc->tls))) ||
        (sc->tls && tide_tls_conn_failed(sc->tls) && !sc->writing)) {
        sconn_close(sc);
        return;
    }
    if (tide__srv_conn_wants_read(core)) {
        if (!sc->reading && uv_read_start((uv_stream_t *)&sc->tcp, alloc_cb, read_cb) == 0)
            sc->reading = true;
    } else if (sc->reading) {
        uv_read_stop((uv_stream_t *)&sc->tcp);
        sc->reading = false;
    }
}

static void format_peer(uv_tcp_t *tcp, char *out, size_t len)
{
    struct sockaddr_storage ss;
    int n = sizeof(ss);
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;

    if (uv_tcp_getpeername(tcp, (struct sockaddr *)&ss, &n) == 0) {
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *a = (struct sockaddr_in *)&ss;
            uv_ip4_name(a, ip, sizeof(ip));
            port = ntohs(a->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
            uv_ip6_name(a, ip, sizeof(ip));
            port = ntohs(a->sin6_port);
        }
    }
    if (strchr(ip, ':'))
        snprintf(out, len, "[%s]:%d", ip, port);
    else
        snprintf(out, len, "%s:%d", ip, port);
}

static void on_connection(uv_stream_t *server, int status)
{
    tide_rpc_server_t *s = server->data;
    sconn_t *sc;
    char peer[64];

    if (status < 0 || s->freeing || s->shut_down)
        return;
    sc = tide_xcalloc(1, sizeof(*sc));
    sc->srv = s;
    tide_list_init(&sc->link);
    tide_list_init(&sc->flush_link);
    uv_tcp_init(s->loop, &sc->tcp);
    sc->tcp.data = sc;
    s->open_handles++;
    tide_list_push_back(&s->conns, &sc->link);
    if (uv_accept(server, (uv_stream_t *)&sc->tcp) != 0) {
        sc->core = tide__srv_conn_new(&s->ctx, "?", sconn_notify, sc);
        sconn_close(sc);
        return;
    }
    uv_tcp_nodelay(&sc->tcp, 1);
    format_peer(&sc->tcp, peer, sizeof(peer));
    sc->core = tide__srv_conn_new(&s->ctx, peer, sconn_notify, sc);
    if (s->tls) {
        tide_error_t err;
        if (tide_tls_conn_new(s->tls, NULL, &sc->tls, &err) < 0) {
            tide_warn("TLS for %s: %s", peer, err.text);
            sconn_close(sc);
            return;
        }
    }
    if (uv_read_start((uv_stream_t *)&sc->tcp, alloc_cb, read_cb) == 0)
        sc->reading = true;
    else
        sconn_close(sc);
}

int tide_rpc_server_new(struct uv_loop_s *loop, const tide_rpc_server_config_t *cfg,
                        tide_rpc_server_t **out, tide_error_t *err)
{
    tide_rpc_server_t *s;
    size_t i;

    *out = NULL;
    if (!loop || !cfg || (cfg->n_methods && !cfg->methods)) {
        tide_errprintf(err, "rpc server: no loop or config");
        return -EINVAL;
    }
    for (i = 0; i < cfg->n_methods; i++) {
        const tide_rpc_method_t *m = &cfg->methods[i];
        if (!m->path || m->path[0] != '/' || !m->on_message || (int)m->kind < 0 ||
            m->kind > TIDE_RPC_BIDI_STREAMING) {
            tide_errprintf(err, "rpc server: method %zu (%s) needs a /path and on_message", i,
                           m->path ? m->path : "no path");
            return -EINVAL;
        }
    }
    if (cfg->tls && !tide_tls_ctx_is_server(cfg->tls)) {
        tide_errprintf(err, "rpc server: the TLS context is a client's");
        return -EINVAL;
    }
    s = tide_xcalloc(1, sizeof(*s));
    s->loop = loop;
    s->tls = tide_tls_ctx_ref(cfg->tls);
    tide_list_init(&s->conns);
    tide_list_init(&s->flush);
    tide__srv_ctx_init(&s->ctx, cfg, srv_now, srv_timers_changed, s);
    uv_timer_init(loop, &s->timer);
    s->timer.data = s;
    uv_prepare_init(loop, &s->prepare);
    s->prepare.data = s;
    s->open_handles = 2;
    *out = s;
    return 0;
}

static void listener_closed(uv_handle_t *h)
{
    tide_rpc_server_t *s = h->data;

    free(h);
    handle_closed(s);
}

static void close_listener(tide_rpc_server_t *s)
{
    if (!s->listener)
        return;
    uv_close((uv_handle_t *)s->listener, listener_closed);
    s->listener = NULL;
    s->listening = false;
}

static int parse_hostport(const char *hostport, char *host, size_t hostlen, char *port,
                          size_t portlen)
{
    const char *colon = strrchr(hostport, ':');
    const char *h = hostport;
    size_t n;

    if (!colon || !colon[1] || strlen(colon + 1) >= portlen)
        return -EINVAL;
    n = (size_t)(colon - hostport);
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
        h++;
        n -= 2;
    }
    if (n >= hostlen)
        return -EINVAL;
    memcpy(host, h, n);
    host[n] = '\0';
    strcpy(port, colon + 1);
    return 0;
}

int tide_rpc_server_listen(tide_rpc_server_t *s, const char *hostport, tide_error_t *err)
{
    char host[256], port[16];
    struct addrinfo hints, *res = NULL;
    struct sockaddr_storage ss;
    int n = sizeof(ss);
    int rc;

    if (s->listener || s->freeing || s->shut_down) {
        tide_errprintf(err, "rpc server: already listening");
        return -EALREADY;
    }
    if (!hostport || parse_hostport(hostport, host, sizeof(host), port, sizeof(port)) != 0) {
        tide_errprintf(err, "rpc server: bad listen address \"%s\" (want HOST:PORT)",
                       hostport ? hostport : "");
        return -EINVAL;
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    rc = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
    if (rc != 0) {
        tide_errprintf(err, "rpc server: cannot resolve %s: %s", hostport, gai_strerror(rc));
        return -EINVAL;
    }
    s->listener = tide_xcalloc(1, sizeof(*s->listener));
    uv_tcp_init(s->loop, s->listener);
    s->listener->data = s;
    s->open_handles++;
    rc = uv_tcp_bind(s->listener, res->ai_addr, 0);
    freeaddrinfo(res);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)s->listener, 511, on_connection);
    if (rc == 0)
        rc = uv_tcp_getsockname(s->listener, (struct sockaddr *)&ss, &n);
    if (rc != 0) {
        tide_errprintf(err, "rpc server: listen on %s: %s", hostport, uv_strerror(rc));
        close_listener(s);
        return rc;
    }
    s->listening = true;
    s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
    return 0;
}

int tide_rpc_server_port(const tide_rpc_server_t *s)
{
    return s && s->listening ? s->port : -1;
}

void tide_rpc_server_shutdown(tide_rpc_server_t *s)
{
    tide_list_t *pos, *tmp;

    if (!s || s->shut_down || s->freeing)
        return;
    s->shut_down = true;
    close_listener(s);
    tide_list_for_each_safe(pos, tmp, &s->conns)
    {
        sconn_t *sc = tide_list_entry(pos, sconn_t, link);
        tide__srv_conn_shutdown(sc->core);
        sconn_notify(sc);
    }
}

static void srv_handle_closed(uv_handle_t *h)
{
    handle_closed(h->data);
}

void tide_rpc_server_free(tide_rpc_server_t *s, void (*close_cb)(void *ud), void *ud)
{
    if (!s || s->freeing)
        return;
    s->close_cb = close_cb;
    s->close_ud = ud;
    close_listener(s);
    s->freeing = true;
    while (!tide_list_empty(&s->conns)) {
        sconn_t *sc = tide_list_entry(s->conns.next, sconn_t, link);
        tide__srv_conn_close(sc->core, TIDE__CONN_ABORT);
        sconn_close(sc);
    }
    uv_timer_stop(&s->timer);
    uv_prepare_stop(&s->prepare);
    uv_close((uv_handle_t *)&s->timer, srv_handle_closed);
    uv_close((uv_handle_t *)&s->prepare, srv_handle_closed);
}

uint64_t tide_rpc_server_plaintext_refused(const tide_rpc_server_t *s)
{
    return s ? s->plaintext_refused : 0;
}

void tide_rpc_server_foreach_stat(const tide_rpc_server_t *s,
                                  void (*fn)(const char *path, tide_grpc_code_t code,
                                             uint64_t count, void *ud),
                                  void *ud)
{
    size_t i;
    int code;

    if (!s || !fn)
        return;
    for (i = 0; i <= s->ctx.n_methods; i++) {
        const char *path = i < s->ctx.n_methods ? s->ctx.methods[i].path : "unknown";
        for (code = 0; code < TIDE_GRPC_CODE_COUNT; code++) {
            uint64_t n = s->ctx.stats[i][code];
            if (n)
                fn(path, (tide_grpc_code_t)code, n, ud);
        }
    }
}
