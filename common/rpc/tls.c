/* TLS over OpenSSL memory BIOs (see tls.h): no sockets here, ciphertext in and out through buffers.
 * Invariants: a connection fails once and for good (the first OpenSSL reason is kept as its error); the
 * peer CN is exposed only for a certificate that verified; plaintext written before the handshake is
 * held and encrypted, in order, as soon as it completes. */
#include "tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "xmalloc.h"

#define READ_CHUNK (16u << 10) /* one TLS record's plaintext at most */

/* TLS 1.2 suites HTTP/2 allows (RFC 9113 §9.2.2: ephemeral key exchange, AEAD); TLS 1.3's are all fine. */
#define TLS12_CIPHERS "ECDHE+AESGCM:ECDHE+CHACHA20:DHE+AESGCM:DHE+CHACHA20"

struct tide_tls_ctx {
    SSL_CTX *ssl;
    bool server;
    int refs;
};

struct tide_tls_conn {
    SSL *ssl;
    BIO *rbio; /* ciphertext from the peer; owned by ssl */
    BIO *wbio; /* ciphertext for the peer; owned by ssl */
    bool server;
    bool established;
    bool failed;
    bool close_sent;
    bool peer_closed;
    tide_buf_t held; /* plaintext written before the handshake completed */
    char alpn[32];
    char peer_cn[128];
    char error[256];
};

/* --- contexts --- */

/* The earliest queued OpenSSL reason ("no such file", "key values mismatch"), queue cleared. */
static void ssl_reason(char *out, size_t size)
{
    unsigned long e = ERR_get_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;

    snprintf(out, size, "%s", r ? r : "unknown OpenSSL error");
    ERR_clear_error();
}

/* Fails with a clear text when path cannot be opened (before OpenSSL's terser reasons). */
static int check_readable(const char *what, const char *path, tide_error_t *err)
{
    FILE *f = fopen(path, "r");
    int rc;

    if (f) {
        fclose(f);
        return 0;
    }
    rc = -errno;
    tide_errprintf(err, "TLS %s %s: cannot read it: %s", what, path, strerror(errno));
    return rc;
}

/* A client that offers http/1.1 (curl, browsers, Prometheus) gets it: /metrics and /healthz are HTTP/1.1
 * here, and HTTP/2 on this port is gRPC. gRPC clients offer only h2 (grpcio adds "grpc-exp") and get h2. */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                       unsigned int inlen, void *arg)
{
    static const char *const prefs[] = {"http/1.1", "h2"};

    (void)ssl;
    (void)arg;
    for (size_t p = 0; p < sizeof(prefs) / sizeof(prefs[0]); p++) {
        size_t plen = strlen(prefs[p]);
        for (unsigned int i = 0; i < inlen;) {
            unsigned int n = in[i];
            if (i + 1 + n > inlen)
                break;
            if (n == plen && memcmp(in + i + 1, prefs[p], n) == 0) {
                *out = in + i + 1;
                *outlen = (unsigned char)n;
                return SSL_TLSEXT_ERR_OK;
            }
            i += 1 + n;
        }
    }
    /* Nothing we speak: go on without ALPN; the connection's first bytes decide (docs/transport.md). */
    return SSL_TLSEXT_ERR_NOACK;
}

static int ctx_new(const tide_tls_config_t *cfg, bool server, tide_tls_ctx_t **out, tide_error_t *err)
{
    static const unsigned char alpn_h2[] = {2, 'h', '2'};
    static const unsigned char sid_ctx[] = "tide";
    char reason[160];
    SSL_CTX *ssl = NULL;
    int rc = -EINVAL;

    *out = NULL;
    if (!cfg) {
        tide_errprintf(err, "TLS: no configuration");
        return -EINVAL;
    }
    if (server && (!cfg->cert_file || !cfg->key_file)) {
        tide_errprintf(err, "TLS server: needs a certificate and its key (--tls-cert FILE --tls-key FILE)");
        return -EINVAL;
    }
    if (!server && !cfg->ca_file) {
        tide_errprintf(err, "TLS client: needs the CA that signed the server's certificate (--tls-ca FILE)");
        return -EINVAL;
    }
    if (!!cfg->cert_file != !!cfg->key_file) {
        tide_errprintf(err, "TLS: %s given without %s", cfg->cert_file ? "--tls-cert" : "--tls-key",
                       cfg->cert_file ? "--tls-key" : "--tls-cert");
        return -EINVAL;
    }
    if (server && cfg->client_cert != TIDE_TLS_CLIENT_CERT_NONE && !cfg->ca_file) {
        tide_errprintf(err, "TLS server: verifying client certificates needs --tls-ca FILE");
        return -EINVAL;
    }
    ERR_clear_error();
    ssl = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    if (!ssl) {
        ssl_reason(reason, sizeof(reason));
        tide_errprintf(err, "TLS: cannot create a context: %s", reason);
        return -ENOMEM;
    }
    SSL_CTX_set_min_proto_version(ssl, TLS1_2_VERSION);
    SSL_CTX_set_options(ssl, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
    if (SSL_CTX_set_cipher_list(ssl, TLS12_CIPHERS) != 1) {
        ssl_reason(reason, sizeof(reason));
        tide_errprintf(err, "TLS: cipher list: %s", reason);
        goto fail;
    }
    if (cfg->cert_file) {
        if ((rc = check_readable("certificate", cfg->cert_file, err)) < 0 ||
            (rc = check_readable("key", cfg->key_file, err)) < 0)
            goto fail;
        rc = -EINVAL;
        if (SSL_CTX_use_certificate_chain_file(ssl, cfg->cert_file) != 1) {
            ssl_reason(reason, sizeof(reason));
            tide_errprintf(err, "TLS certificate %s: not a usable PEM certificate: %s", cfg->cert_file, reason);
            goto fail;
        }
        if (SSL_CTX_use_PrivateKey_file(ssl, cfg->key_file, SSL_FILETYPE_PEM) != 1) {
            ssl_reason(reason, sizeof(reason));
            if (strstr(reason, "mismatch"))
                tide_errprintf(err, "TLS key %s does not match the certificate %s: %s", cfg->key_file,
                               cfg->cert_file, reason);
            else
                tide_errprintf(err, "TLS key %s: not a usable PEM private key: %s", cfg->key_file, reason);
            goto fail;
        }
        if (SSL_CTX_check_private_key(ssl) != 1) {
            ssl_reason(reason, sizeof(reason));
            tide_errprintf(err, "TLS key %s does not match the certificate %s: %s", cfg->key_file, cfg->cert_file,
                           reason);
            goto fail;
        }
    }
    if (cfg->ca_file) {
        if ((rc = check_readable("CA", cfg->ca_file, err)) < 0)
            goto fail;
        rc = -EINVAL;
        if (SSL_CTX_load_verify_locations(ssl, cfg->ca_file, NULL) != 1) {
            ssl_reason(reason, sizeof(reason));
            tide_errprintf(err, "TLS CA %s: no usable PEM certificate in it: %s", cfg->ca_file, reason);
            goto fail;
        }
    }
    if (server) {
        SSL_CTX_set_alpn_select_cb(ssl, alpn_select, NULL);
        SSL_CTX_set_session_id_context(ssl, sid_ctx, sizeof(sid_ctx) - 1);
        if (cfg->client_cert != TIDE_TLS_CLIENT_CERT_NONE) {
            STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(cfg->ca_file);
            if (names)
                SSL_CTX_set_client_CA_list(ssl, names);
            ERR_clear_error();
            SSL_CTX_set_verify(ssl,
                               SSL_VERIFY_PEER | (cfg->client_cert == TIDE_TLS_CLIENT_CERT_REQUIRE
                                                      ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT
                                                      : 0),
                               NULL);
        } else {
            SSL_CTX_set_verify(ssl, SSL_VERIFY_NONE, NULL);
        }
    } else {
        SSL_CTX_set_verify(ssl, SSL_VERIFY_PEER, NULL);
        if (SSL_CTX_set_alpn_protos(ssl, alpn_h2, sizeof(alpn_h2)) != 0) {
            ssl_reason(reason, sizeof(reason));
            tide_errprintf(err, "TLS: ALPN: %s", reason);
            goto fail;
        }
    }
    *out = tide_xcalloc(1, sizeof(**out));
    (*out)->ssl = ssl;
    (*out)->server = server;
    (*out)->refs = 1;
    return 0;
fail:
    SSL_CTX_free(ssl);
    ERR_clear_error();
    return rc;
}

int tide_tls_ctx_new_server(const tide_tls_config_t *cfg, tide_tls_ctx_t **out, tide_error_t *err)
{
    return ctx_new(cfg, true, out, err);
}

int tide_tls_ctx_new_client(const tide_tls_config_t *cfg, tide_tls_ctx_t **out, tide_error_t *err)
{
    return ctx_new(cfg, false, out, err);
}

tide_tls_ctx_t *tide_tls_ctx_ref(tide_tls_ctx_t *ctx)
{
    if (ctx)
        __atomic_add_fetch(&ctx->refs, 1, __ATOMIC_RELAXED);
    return ctx;
}

void tide_tls_ctx_free(tide_tls_ctx_t *ctx)
{
    if (!ctx || __atomic_sub_fetch(&ctx->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    SSL_CTX_free(ctx->ssl);
    free(ctx);
}

bool tide_tls_ctx_is_server(const tide_tls_ctx_t *ctx)
{
    return ctx && ctx->server;
}

/* --- connections --- */

static bool is_ip_literal(const char *host)
{
    unsigned char buf[sizeof(struct in6_addr)];

    return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

int tide_tls_conn_new(tide_tls_ctx_t *ctx, const char *host, tide_tls_conn_t **out, tide_error_t *err)
{
    tide_tls_conn_t *c;
    char reason[160];

    *out = NULL;
    if (!ctx || (!ctx->server && (!host || !*host))) {
        tide_errprintf(err, "TLS: a client connection needs the server's host name");
        return -EINVAL;
    }
    c = tide_xcalloc(1, sizeof(*c));
    c->server = ctx->server;
    tide_buf_init(&c->held);
    ERR_clear_error();
    c->ssl = SSL_new(ctx->ssl);
    c->rbio = BIO_new(BIO_s_mem());
    c->wbio = BIO_new(BIO_s_mem());
    if (!c->ssl || !c->rbio || !c->wbio) {
        ssl_reason(reason, sizeof(reason));
        tide_errprintf(err, "TLS: cannot create a connection: %s", reason);
        BIO_free(c->rbio);
        BIO_free(c->wbio);
        SSL_free(c->ssl);
        free(c);
        return -ENOMEM;
    }
    /* An empty input BIO means "wait for more", not end of file. */
    BIO_set_mem_eof_return(c->rbio, -1);
    BIO_set_mem_eof_return(c->wbio, -1);
    SSL_set_bio(c->ssl, c->rbio, c->wbio);
    if (c->server) {
        SSL_set_accept_state(c->ssl);
    } else {
        X509_VERIFY_PARAM *vp = SSL_get0_param(c->ssl);
        int ok;
        SSL_set_connect_state(c->ssl);
        if (is_ip_literal(host)) {
            ok = X509_VERIFY_PARAM_set1_ip_asc(vp, host);
        } else {
            X509_VERIFY_PARAM_set_hostflags(vp, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
            ok = X509_VERIFY_PARAM_set1_host(vp, host, 0) && SSL_set_tlsext_host_name(c->ssl, host);
        }
        if (!ok) {
            ssl_reason(reason, sizeof(reason));
            tide_errprintf(err, "TLS: cannot verify against host \"%s\": %s", host, reason);
            tide_tls_conn_free(c);
            return -EINVAL;
        }
    }
    *out = c;
    return 0;
}

void tide_tls_conn_free(tide_tls_conn_t *c)
{
    if (!c)
        return;
    SSL_free(c->ssl); /* frees both BIOs */
    tide_buf_free(&c->held);
    free(c);
}

/* Marks the connection failed with OpenSSL's reason for ret (the verification's detail when a
 * certificate did not verify). Returns -EPROTO. */
static int fail(tide_tls_conn_t *c, int ret, tide_error_t *err)
{
    unsigned long e = ERR_peek_error();
    int sslerr = SSL_get_error(c->ssl, ret);

    if (e) {
        const char *r = ERR_reason_error_string(e);
        long vr = SSL_get_verify_result(c->ssl);
        if (ERR_GET_REASON(e) == SSL_R_CERTIFICATE_VERIFY_FAILED && vr != X509_V_OK)
            snprintf(c->error, sizeof(c->error), "%s: %s", r ? r : "certificate verify failed",
                     X509_verify_cert_error_string(vr));
        else
            snprintf(c->error, sizeof(c->error), "%s", r ? r : "unknown OpenSSL error");
    } else if (sslerr == SSL_ERROR_ZERO_RETURN) {
        snprintf(c->error, sizeof(c->error), "the peer closed the TLS connection");
    } else {
        snprintf(c->error, sizeof(c->error), "TLS error (SSL_get_error %d)", sslerr);
    }
    ERR_clear_error();
    c->failed = true;
    c->established = false;
    tide_errprintf(err, "%s", c->error);
    return -EPROTO;
}

static int write_now(tide_tls_conn_t *c, const uint8_t *data, size_t len, tide_error_t *err)
{
    while (len > 0) {
        int chunk = len > (1u << 30) ? (1 << 30) : (int)len;
        int n;

        ERR_clear_error();
        n = SSL_write(c->ssl, data, chunk);
        if (n <= 0)
            return fail(c, n, err);
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

static int on_established(tide_tls_conn_t *c, tide_error_t *err)
{
    const unsigned char *proto = NULL;
    unsigned int plen = 0;
    X509 *peer;

    SSL_get0_alpn_selected(c->ssl, &proto, &plen);
    if (plen >= sizeof(c->alpn))
        plen = 0;
    memcpy(c->alpn, proto ? (const char *)proto : "", plen);
    c->alpn[plen] = '\0';
    if (!c->server && strcmp(c->alpn, "h2") != 0) {
        snprintf(c->error, sizeof(c->error),
                 "the server did not agree to HTTP/2 (ALPN h2%s%s); is it a gRPC server with TLS?",
                 plen ? ", it chose " : "", c->alpn);
        c->failed = true;
        tide_errprintf(err, "%s", c->error);
        return -EPROTO;
    }
    peer = SSL_get0_peer_certificate(c->ssl);
    if (peer && SSL_get_verify_result(c->ssl) == X509_V_OK) {
        int n = X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, c->peer_cn,
                                          (int)sizeof(c->peer_cn));
        if (n < 0)
            c->peer_cn[0] = '\0';
    }
    c->established = true;
    if (c->held.len) {
        int rc = write_now(c, c->held.data, c->held.len, err);
        c->held.len = 0;
        if (rc < 0)
            return rc;
    }
    return 0;
}

int tide_tls_conn_start(tide_tls_conn_t *c, tide_error_t *err)
{
    int r, e;

    if (c->failed) {
        tide_errprintf(err, "%s", c->error);
        return -EPROTO;
    }
    if (c->server || c->established)
        return 0;
    ERR_clear_error();
    r = SSL_do_handshake(c->ssl);
    if (r == 1)
        return on_established(c, err);
    e = SSL_get_error(c->ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
        return 0;
    return fail(c, r, err);
}

int tide_tls_conn_feed(tide_tls_conn_t *c, const uint8_t *data, size_t len, tide_buf_t *plain,
                       tide_error_t *err)
{
    if (c->failed) {
        tide_errprintf(err, "%s", c->error);
        return -EPROTO;
    }
    while (len > 0) {
        int chunk = len > (1u << 30) ? (1 << 30) : (int)len;
        int n = BIO_write(c->rbio, data, chunk);
        if (n <= 0) {
            snprintf(c->error, sizeof(c->error), "TLS: cannot buffer input");
            c->failed = true;
            tide_errprintf(err, "%s", c->error);
            return -EPROTO;
        }
        data += n;
        len -= (size_t)n;
    }
    if (!c->established) {
        int r;
        ERR_clear_error();
        r = SSL_do_handshake(c->ssl);
        if (r != 1) {
            int e = SSL_get_error(c->ssl, r);
            if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
                return 0;
            return fail(c, r, err);
        }
        if (on_established(c, err) < 0)
            return -EPROTO;
    }
    for (;;) {
        uint8_t *p = tide_buf_reserve(plain, READ_CHUNK);
        int n, e;

        ERR_clear_error();
        n = SSL_read(c->ssl, p, READ_CHUNK);
        if (n > 0) {
            plain->len += (size_t)n;
            continue;
        }
        e = SSL_get_error(c->ssl, n);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
            return 0;
        if (e == SSL_ERROR_ZERO_RETURN) {
            c->peer_closed = true;
            return 0;
        }
        return fail(c, n, err);
    }
}

int tide_tls_conn_write(tide_tls_conn_t *c, const uint8_t *data, size_t len, tide_error_t *err)
{
    if (c->failed) {
        tide_errprintf(err, "%s", c->error);
        return -EPROTO;
    }
    if (c->close_sent) {
        tide_errprintf(err, "TLS: the connection is closing");
        return -EPIPE;
    }
    if (len == 0)
        return 0;
    if (!c->established) {
        tide_buf_append(&c->held, data, len);
        return 0;
    }
    return write_now(c, data, len, err);
}

size_t tide_tls_conn_take_output(tide_tls_conn_t *c, tide_buf_t *dst)
{
    size_t pending = BIO_ctrl_pending(c->wbio);
    uint8_t *p;
    int n;

    if (pending == 0)
        return 0;
    if (pending > (1u << 30))
        pending = 1u << 30;
    p = tide_buf_reserve(dst, pending);
    n = BIO_read(c->wbio, p, (int)pending);
    if (n <= 0)
        return 0;
    dst->len += (size_t)n;
    return (size_t)n;
}

size_t tide_tls_conn_pending_output(const tide_tls_conn_t *c)
{
    return BIO_ctrl_pending(c->wbio);
}

void tide_tls_conn_close_notify(tide_tls_conn_t *c)
{
    if (!c || c->close_sent)
        return;
    c->close_sent = true;
    if (c->established && !c->failed) {
        ERR_clear_error();
        (void)SSL_shutdown(c->ssl);
        ERR_clear_error();
    }
}

bool tide_tls_conn_established(const tide_tls_conn_t *c)
{
    return c->established && !c->failed;
}

bool tide_tls_conn_failed(const tide_tls_conn_t *c)
{
    return c->failed;
}

bool tide_tls_conn_peer_closed(const tide_tls_conn_t *c)
{
    return c->peer_closed;
}

const char *tide_tls_conn_alpn(const tide_tls_conn_t *c)
{
    return c->alpn;
}

const char *tide_tls_conn_peer_cn(const tide_tls_conn_t *c)
{
    return c->peer_cn;
}

const char *tide_tls_conn_error(const tide_tls_conn_t *c)
{
    return c->error;
}

/* --- policy helpers --- */

bool tide_tls_hostport_is_loopback(const char *hostport)
{
    char host[256];
    const char *colon;
    size_t n;
    struct in_addr a4;
    struct in6_addr a6;

    if (!hostport)
        return false;
    if (hostport[0] == '[') {
        const char *end = strchr(hostport, ']');
        if (!end)
            return false;
        n = (size_t)(end - hostport - 1);
        hostport++;
    } else {
        colon = strrchr(hostport, ':');
        n = colon ? (size_t)(colon - hostport) : strlen(hostport);
    }
    if (n == 0 || n >= sizeof(host))
        return false;
    memcpy(host, hostport, n);
    host[n] = '\0';
    if (strcasecmp(host, "localhost") == 0)
        return true;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1) {
        if (IN6_IS_ADDR_LOOPBACK(&a6))
            return true;
        return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
    }
    return false;
}

int tide_tls_check_plaintext(const char *hostport, bool listening, bool tls, bool insecure,
                             tide_error_t *err)
{
    const char *p = hostport ? hostport : "";

    if (tls || insecure)
        return 0;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        char one[300];

        snprintf(one, sizeof(one), "%.*s", (int)(n < sizeof(one) ? n : sizeof(one) - 1), p);
        if (one[0] && !tide_tls_hostport_is_loopback(one)) {
            if (listening)
                tide_errprintf(err,
                               "refusing to listen on %s without TLS: give --tls-cert FILE --tls-key FILE "
                               "(and --tls-ca FILE), or --insecure to serve plaintext on a non-loopback "
                               "address",
                               one);
            else
                tide_errprintf(err,
                               "refusing to connect to %s without TLS: give --tls-ca FILE (the CA that "
                               "signed its certificate), or --insecure to send plaintext over the network",
                               one);
            return -EPERM;
        }
        p += n;
        if (*p == ',')
            p++;
    }
    return 0;
}
