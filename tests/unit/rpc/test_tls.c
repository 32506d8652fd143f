/* TLS (common/rpc/tls.c): certificates made here with the OpenSSL API (a CA, a server certificate for
 * 127.0.0.1 and localhost, a client certificate, an unrelated second CA) and written to a temporary
 * directory; two tide_tls_conn driven against each other in memory; then the libuv server and client
 * with TLS over 127.0.0.1 port 0 (leak-clean, uv_loop_close() == 0). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include <cmocka.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "grpc_status.h"
#include "rpc_client.h"
#include "rpc_server.h"
#include "tls.h"

#define WAIT_MS 10000

static char dir[64];
static char ca_pem[128], ca2_pem[128], srv_pem[128], srv_key[128], cli_pem[128], cli_key[128];
static char cli2_pem[128], cli2_key[128], missing[128];

/* ---- certificates ---- */

static EVP_PKEY *make_key(void)
{
    EVP_PKEY *k = EVP_EC_gen("P-256");
    assert_non_null(k);
    return k;
}

static void add_ext(X509 *cert, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509_EXTENSION *ext;

    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, cert, NULL, NULL, 0);
    ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    assert_non_null(ext);
    assert_int_equal(X509_add_ext(cert, ext, -1), 1);
    X509_EXTENSION_free(ext);
}

/* A certificate for cn signed by issuer (self-signed when issuer is NULL). san: "DNS:x,IP:y" or NULL. */
static X509 *make_cert(const char *cn, EVP_PKEY *key, X509 *issuer, EVP_PKEY *issuer_key, bool ca,
                       const char *san)
{
    static long serial = 1;
    X509 *c = X509_new();
    X509_NAME *name;

    assert_non_null(c);
    X509_set_version(c, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(c), serial++);
    X509_gmtime_adj(X509_getm_notBefore(c), -3600);
    X509_gmtime_adj(X509_getm_notAfter(c), 86400);
    X509_set_pubkey(c, key);
    name = X509_get_subject_name(c);
    X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, (const unsigned char *)"tide test", -1, -1, 0);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
    X509_set_issuer_name(c, issuer ? X509_get_subject_name(issuer) : name);
    if (ca) {
        add_ext(c, issuer ? issuer : c, NID_basic_constraints, "critical,CA:TRUE");
        add_ext(c, issuer ? issuer : c, NID_key_usage, "critical,keyCertSign,cRLSign");
        add_ext(c, issuer ? issuer : c, NID_subject_key_identifier, "hash");
    } else {
        add_ext(c, issuer, NID_basic_constraints, "critical,CA:FALSE");
        add_ext(c, issuer, NID_key_usage, "critical,digitalSignature,keyEncipherment");
        add_ext(c, issuer, NID_ext_key_usage, "serverAuth,clientAuth");
        if (san)
            add_ext(c, issuer, NID_subject_alt_name, san);
    }
    assert_true(X509_sign(c, issuer_key ? issuer_key : key, EVP_sha256()) > 0);
    return c;
}

static void write_cert(const char *path, X509 *c)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(PEM_write_X509(f, c), 1);
    fclose(f);
}

static void write_key(const char *path, EVP_PKEY *k)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL), 1);
    fclose(f);
}

static int make_pki(void **state)
{
    EVP_PKEY *cak = make_key(), *ca2k = make_key(), *sk = make_key(), *ck = make_key(), *c2k = make_key();
    X509 *ca, *ca2, *srv, *cli, *cli2;

    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/tide-tls-test-XXXXXX");
    assert_non_null(mkdtemp(dir));
#define P(var, name) snprintf(var, sizeof(var), "%s/%s", dir, name)
    P(ca_pem, "ca.pem");
    P(ca2_pem, "ca2.pem");
    P(srv_pem, "server.pem");
    P(srv_key, "server.key");
    P(cli_pem, "client.pem");
    P(cli_key, "client.key");
    P(cli2_pem, "client2.pem");
    P(cli2_key, "client2.key");
    P(missing, "missing.pem");
#undef P
    ca = make_cert("tide test CA", cak, NULL, NULL, true, NULL);
    ca2 = make_cert("unrelated CA", ca2k, NULL, NULL, true, NULL);
    srv = make_cert("tide-scheduler", sk, ca, cak, false, "DNS:localhost,IP:127.0.0.1");
    cli = make_cert("worker-1", ck, ca, cak, false, NULL);
    cli2 = make_cert("intruder", c2k, ca2, ca2k, false, NULL);
    write_cert(ca_pem, ca);
    write_cert(ca2_pem, ca2);
    write_cert(srv_pem, srv);
    write_key(srv_key, sk);
    write_cert(cli_pem, cli);
    write_key(cli_key, ck);
    write_cert(cli2_pem, cli2);
    write_key(cli2_key, c2k);
    X509_free(ca);
    X509_free(ca2);
    X509_free(srv);
    X509_free(cli);
    X509_free(cli2);
    EVP_PKEY_free(cak);
    EVP_PKEY_free(ca2k);
    EVP_PKEY_free(sk);
    EVP_PKEY_free(ck);
    EVP_PKEY_free(c2k);
    return 0;
}

static int remove_pki(void **state)
{
    const char *files[] = {ca_pem, ca2_pem, srv_pem, srv_key, cli_pem, cli_key, cli2_pem, cli2_key};

    (void)state;
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        unlink(files[i]);
    rmdir(dir);
    return 0;
}

/* ---- in-memory pairs ---- */

static tide_tls_ctx_t *server_ctx(tide_tls_client_cert_t policy)
{
    tide_tls_config_t cfg = {.cert_file = srv_pem, .key_file = srv_key, .ca_file = ca_pem, .client_cert = policy};
    tide_tls_ctx_t *ctx = NULL;
    tide_error_t err;

    if (policy == TIDE_TLS_CLIENT_CERT_NONE)
        cfg.ca_file = NULL;
    assert_int_equal(tide_tls_ctx_new_server(&cfg, &ctx, &err), 0);
    return ctx;
}

static tide_tls_ctx_t *client_ctx(const char *ca, const char *cert, const char *key)
{
    tide_tls_config_t cfg = {.cert_file = cert, .key_file = key, .ca_file = ca};
    tide_tls_ctx_t *ctx = NULL;
    tide_error_t err;

    assert_int_equal(tide_tls_ctx_new_client(&cfg, &ctx, &err), 0);
    return ctx;
}

typedef struct pair {
    tide_tls_ctx_t *sctx, *cctx;
    tide_tls_conn_t *s, *c;
    tide_buf_t s_in, c_in; /* plaintext each side received */
    tide_buf_t wire;
    int s_rc, c_rc;
    tide_error_t s_err, c_err;
    size_t split; /* 0: whole; else feed ciphertext in pieces of this size */
} pair_t;

static void pair_open(pair_t *p, tide_tls_ctx_t *sctx, tide_tls_ctx_t *cctx, const char *host)
{
    tide_error_t err;

    memset(p, 0, sizeof(*p));
    p->sctx = sctx;
    p->cctx = cctx;
    assert_int_equal(tide_tls_conn_new(sctx, NULL, &p->s, &err), 0);
    assert_int_equal(tide_tls_conn_new(cctx, host, &p->c, &err), 0);
    assert_int_equal(tide_tls_conn_start(p->c, &err), 0);
}

static int feed_split(tide_tls_conn_t *to, const tide_buf_t *wire, size_t split, tide_buf_t *plain,
                      tide_error_t *err)
{
    size_t off = 0;
    int rc = 0;

    while (off < wire->len && rc == 0) {
        size_t n = split && split < wire->len - off ? split : wire->len - off;
        rc = tide_tls_conn_feed(to, wire->data + off, n, plain, err);
        off += n;
    }
    return rc;
}

/* Moves ciphertext both ways until neither side has any. */
static void pump(pair_t *p)
{
    for (int round = 0; round < 100; round++) {
        bool moved = false;

        p->wire.len = 0;
        if (tide_tls_conn_take_output(p->c, &p->wire) > 0) {
            moved = true;
            if (p->s_rc == 0)
                p->s_rc = feed_split(p->s, &p->wire, p->split, &p->s_in, &p->s_err);
        }
        p->wire.len = 0;
        if (tide_tls_conn_take_output(p->s, &p->wire) > 0) {
            moved = true;
            if (p->c_rc == 0)
                p->c_rc = feed_split(p->c, &p->wire, p->split, &p->c_in, &p->c_err);
        }
        if (!moved)
            return;
    }
    fail_msg("TLS pair never went quiet");
}

static void pair_close(pair_t *p)
{
    tide_tls_conn_free(p->s);
    tide_tls_conn_free(p->c);
    tide_tls_ctx_free(p->sctx);
    tide_tls_ctx_free(p->cctx);
    tide_buf_free(&p->s_in);
    tide_buf_free(&p->c_in);
    tide_buf_free(&p->wire);
}

static void handshake_alpn_and_data(void **state)
{
    pair_t p;
    tide_error_t err;
    size_t big = 3u << 20;
    uint8_t *data = malloc(big);

    (void)state;
    for (size_t i = 0; i < big; i++)
        data[i] = (uint8_t)(i * 31 + (i >> 12));
    pair_open(&p, server_ctx(TIDE_TLS_CLIENT_CERT_NONE), client_ctx(ca_pem, NULL, NULL), "127.0.0.1");
    /* Written before the handshake: held, then sent in order. */
    assert_int_equal(tide_tls_conn_write(p.c, (const uint8_t *)"early ", 6, &err), 0);
    assert_false(tide_tls_conn_established(p.c));
    pump(&p);
    assert_int_equal(p.s_rc, 0);
    assert_int_equal(p.c_rc, 0);
    assert_true(tide_tls_conn_established(p.s));
    assert_true(tide_tls_conn_established(p.c));
    assert_string_equal(tide_tls_conn_alpn(p.c), "h2");
    assert_string_equal(tide_tls_conn_alpn(p.s), "h2");
    assert_string_equal(tide_tls_conn_peer_cn(p.s), ""); /* no client certificate */
    assert_string_equal(tide_tls_conn_peer_cn(p.c), "tide-scheduler");
    assert_int_equal(p.s_in.len, 6);
    assert_memory_equal(p.s_in.data, "early ", 6);

    /* Large both ways, fed whole and then in odd pieces that split records. */
    p.s_in.len = 0;
    assert_int_equal(tide_tls_conn_write(p.c, data, big, &err), 0);
    assert_int_equal(tide_tls_conn_write(p.s, data, big, &err), 0);
    pump(&p);
    assert_int_equal(p.s_in.len, big);
    assert_memory_equal(p.s_in.data, data, big);
    assert_int_equal(p.c_in.len, big);
    assert_memory_equal(p.c_in.data, data, big);
    p.s_in.len = p.c_in.len = 0;
    p.split = 7;
    assert_int_equal(tide_tls_conn_write(p.c, data, 100000, &err), 0);
    assert_int_equal(tide_tls_conn_write(p.c, data + 5, 3, &err), 0);
    assert_int_equal(tide_tls_conn_write(p.s, data + 11, 70001, &err), 0);
    pump(&p);
    assert_int_equal(p.s_rc, 0);
    assert_int_equal(p.c_rc, 0);
    assert_int_equal(p.s_in.len, 100003);
    assert_memory_equal(p.s_in.data, data, 100000);
    assert_memory_equal(p.s_in.data + 100000, data + 5, 3);
    assert_int_equal(p.c_in.len, 70001);
    assert_memory_equal(p.c_in.data, data + 11, 70001);

    /* close_notify reaches the peer; writing after it is refused. */
    tide_tls_conn_close_notify(p.c);
    assert_int_equal(tide_tls_conn_write(p.c, data, 1, &err), -EPIPE);
    pump(&p);
    assert_true(tide_tls_conn_peer_closed(p.s));
    pair_close(&p);
    free(data);
}

static void handshake_byte_by_byte_localhost(void **state)
{
    pair_t p;

    (void)state;
    pair_open(&p, server_ctx(TIDE_TLS_CLIENT_CERT_NONE), client_ctx(ca_pem, NULL, NULL), "localhost");
    p.split = 1;
    pump(&p);
    assert_int_equal(p.c_rc, 0);
    assert_int_equal(p.s_rc, 0);
    assert_true(tide_tls_conn_established(p.c));
    assert_string_equal(tide_tls_conn_alpn(p.c), "h2");
    pair_close(&p);
}

static void wrong_ca_refused(void **state)
{
    pair_t p;

    (void)state;
    pair_open(&p, server_ctx(TIDE_TLS_CLIENT_CERT_NONE), client_ctx(ca2_pem, NULL, NULL), "127.0.0.1");
    pump(&p);
    assert_int_equal(p.c_rc, -EPROTO);
    assert_false(tide_tls_conn_established(p.c));
    assert_true(tide_tls_conn_failed(p.c));
    assert_string_equal(p.c_err.text, "certificate verify failed: unable to get local issuer certificate");
    assert_string_equal(tide_tls_conn_error(p.c), p.c_err.text);
    /* The server heard why (the client's alert). */
    assert_int_equal(p.s_rc, -EPROTO);
    assert_non_null(strstr(p.s_err.text, "unknown ca"));
    /* Failed for good. */
    assert_int_equal(tide_tls_conn_write(p.c, (const uint8_t *)"x", 1, NULL), -EPROTO);
    assert_int_equal(tide_tls_conn_feed(p.c, (const uint8_t *)"x", 1, &p.c_in, NULL), -EPROTO);
    pair_close(&p);
}

static void wrong_host_refused(void **state)
{
    pair_t p;

    (void)state;
    pair_open(&p, server_ctx(TIDE_TLS_CLIENT_CERT_NONE), client_ctx(ca_pem, NULL, NULL), "10.1.2.3");
    pump(&p);
    assert_int_equal(p.c_rc, -EPROTO);
    assert_string_equal(p.c_err.text, "certificate verify failed: IP address mismatch");
    pair_close(&p);

    pair_open(&p, server_ctx(TIDE_TLS_CLIENT_CERT_NONE), client_ctx(ca_pem, NULL, NULL), "sched.example.com");
    pump(&p);
    assert_int_equal(p.c_rc, -EPROTO);
    assert_string_equal(p.c_err.text, "certificate verify failed: hostname mismatch");
    pair_close(&p);
}

static void client_cert_required(void **state)
{
    pair_t p;

    (void)state;
    /* None presented: the server refuses, the client hears it. */
    pair_open(&p, server_ctx(TIDE_TLS_CLIENT_CERT_REQUIRE), client_ctx(ca_pem, NULL, NULL), "127.0.0.1");
    pump(&p);
    assert_int_equal(p.s_rc, -EPROTO);
    assert_non_null(strstr(p.s_err.text, "peer did not return a certificate"));
    assert_false(tide_tls_conn_established(p.s));
    assert_int_equal(p.c_rc, -EPROTO);
    assert_non_null(strstr(p.c_err.text, "certificate required"));
    pair_close(&p);

    /* One from another CA: refused with the reason. */
    pair_open(&p, server_ctx(TIDE_TLS_CLIENT_CERT_REQUIRE), client_ctx(ca_pem, cli2_pem, cli2_key), "127.0.0.1");
    pump(&p);
    assert_int_equal(p.s_rc, -EPROTO);
    assert_string_equal(p.s_err.text, "certificate verify failed: unable to get local issuer certificate");
    assert_string_equal(tide_tls_conn_peer_cn(p.s), "");
    pair_close(&p);

    /* The right one: accepted, its CN exposed. */
    pair_open(&p, server_ctx(TIDE_TLS_CLIENT_CERT_REQUIRE), client_ctx(ca_pem, cli_pem, cli_key), "127.0.0.1");
    pump(&p);
    assert_int_equal(p.s_rc, 0);
    assert_int_equal(p.c_rc, 0);
    assert_true(tide_tls_conn_established(p.s));
    assert_string_equal(tide_tls_conn_peer_cn(p.s), "worker-1");
    pair_close(&p);
}

static void client_cert_optional(void **state)
{
    pair_t p;

    (void)state;
    pair_open(&p, server_ctx(TIDE_TLS_CLIENT_CERT_OPTIONAL), client_ctx(ca_pem, NULL, NULL), "127.0.0.1");
    pump(&p);
    assert_int_equal(p.s_rc, 0);
    assert_true(tide_tls_conn_established(p.s));
    assert_string_equal(tide_tls_conn_peer_cn(p.s), "");
    pair_close(&p);

    pair_open(&p, server_ctx(TIDE_TLS_CLIENT_CERT_OPTIONAL), client_ctx(ca_pem, cli_pem, cli_key), "127.0.0.1");
    pump(&p);
    assert_int_equal(p.s_rc, 0);
    assert_string_equal(tide_tls_conn_peer_cn(p.s), "worker-1");
    pair_close(&p);
}

static void garbage_refused(void **state)
{
    tide_tls_ctx_t *ctx = server_ctx(TIDE_TLS_CLIENT_CERT_NONE);
    tide_tls_conn_t *s;
    tide_buf_t plain = TIDE_BUF_INIT;
    tide_error_t err;
    const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";

    (void)state;
    assert_int_equal(tide_tls_conn_new(ctx, NULL, &s, &err), 0);
    assert_int_equal(tide_tls_conn_feed(s, (const uint8_t *)req, sizeof(req) - 1, &plain, &err), -EPROTO);
    assert_true(err.text[0] != '\0');
    assert_int_equal(plain.len, 0);
    tide_tls_conn_free(s);
    tide_tls_ctx_free(ctx);
    tide_buf_free(&plain);
}

static void context_errors_name_the_file(void **state)
{
    tide_tls_ctx_t *ctx = NULL;
    tide_error_t err;
    tide_tls_config_t cfg = {.cert_file = missing, .key_file = srv_key};

    (void)state;
    assert_int_equal(tide_tls_ctx_new_server(&cfg, &ctx, &err), -ENOENT);
    assert_null(ctx);
    assert_non_null(strstr(err.text, missing));
    assert_non_null(strstr(err.text, "No such file"));

    cfg.cert_file = srv_pem;
    cfg.key_file = cli_key; /* another certificate's key */
    assert_int_equal(tide_tls_ctx_new_server(&cfg, &ctx, &err), -EINVAL);
    assert_non_null(strstr(err.text, cli_key));
    assert_non_null(strstr(err.text, "does not match"));

    cfg.key_file = srv_key;
    cfg.ca_file = srv_key; /* not a certificate */
    cfg.client_cert = TIDE_TLS_CLIENT_CERT_REQUIRE;
    assert_int_equal(tide_tls_ctx_new_server(&cfg, &ctx, &err), -EINVAL);
    assert_non_null(strstr(err.text, srv_key));

    cfg.ca_file = NULL;
    assert_int_equal(tide_tls_ctx_new_server(&cfg, &ctx, &err), -EINVAL);
    assert_non_null(strstr(err.text, "--tls-ca"));

    cfg.ca_file = srv_pem; /* a leaf is a fine (if odd) CA file */
    cfg.key_file = NULL;
    assert_int_equal(tide_tls_ctx_new_server(&cfg, &ctx, &err), -EINVAL);

    memset(&cfg, 0, sizeof(cfg));
    assert_int_equal(tide_tls_ctx_new_client(&cfg, &ctx, &err), -EINVAL);
    assert_non_null(strstr(err.text, "--tls-ca"));
    cfg.ca_file = missing;
    assert_int_equal(tide_tls_ctx_new_client(&cfg, &ctx, &err), -ENOENT);
    assert_non_null(strstr(err.text, missing));
    assert_null(ctx);
}

static void plaintext_policy(void **state)
{
    tide_error_t err;

    (void)state;
    assert_true(tide_tls_hostport_is_loopback("127.0.0.1:7070"));
    assert_true(tide_tls_hostport_is_loopback("127.3.4.5:1"));
    assert_true(tide_tls_hostport_is_loopback("localhost:7070"));
    assert_true(tide_tls_hostport_is_loopback("[::1]:7070"));
    assert_false(tide_tls_hostport_is_loopback("0.0.0.0:7070"));
    assert_false(tide_tls_hostport_is_loopback("[::]:7070"));
    assert_false(tide_tls_hostport_is_loopback(":7070"));
    assert_false(tide_tls_hostport_is_loopback("10.0.0.1:7070"));
    assert_false(tide_tls_hostport_is_loopback("sched.example.com:7070"));
    assert_false(tide_tls_hostport_is_loopback("128.0.0.1:7070"));

    assert_int_equal(tide_tls_check_plaintext("127.0.0.1:7070", true, false, false, &err), 0);
    assert_int_equal(tide_tls_check_plaintext("0.0.0.0:7070", true, false, false, &err), -EPERM);
    assert_non_null(strstr(err.text, "0.0.0.0:7070"));
    assert_non_null(strstr(err.text, "--tls-cert"));
    assert_non_null(strstr(err.text, "--insecure"));
    assert_int_equal(tide_tls_check_plaintext("0.0.0.0:7070", true, true, false, &err), 0);
    assert_int_equal(tide_tls_check_plaintext("0.0.0.0:7070", true, false, true, &err), 0);
    assert_int_equal(tide_tls_check_plaintext("127.0.0.1:1,10.0.0.2:7070", false, false, false, &err), -EPERM);
    assert_non_null(strstr(err.text, "10.0.0.2:7070"));
    assert_non_null(strstr(err.text, "--tls-ca"));
    assert_int_equal(tide_tls_check_plaintext("127.0.0.1:1,localhost:2", false, false, false, &err), 0);
}

/* ---- the libuv server and client with TLS ---- */

typedef struct lfix {
    uv_loop_t loop;
    tide_rpc_server_t *srv;
    char addr[64];
    char last_cn[128];
    int messages;
    int srv_closed;
} lfix_t;

static lfix_t L;

static void l_unary(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    L.messages++;
    snprintf(L.last_cn, sizeof(L.last_cn), "%s", tide_rpc_call_peer_cn(call));
    tide_rpc_call_send(call, data, len);
    tide_rpc_call_finish(call, TIDE_GRPC_OK, NULL);
}

static void l_stream(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    (void)data;
    (void)len;
    L.messages++;
    for (int i = 0; i < 50; i++) {
        char m[32];
        int l = snprintf(m, sizeof(m), "item %d", i);
        assert_int_equal(tide_rpc_call_send(call, (const uint8_t *)m, (size_t)l), 0);
    }
    tide_rpc_call_finish(call, TIDE_GRPC_OK, NULL);
}

static const tide_rpc_method_t l_methods[] = {
    {"/t.Echo/Unary", TIDE_RPC_UNARY, false, l_unary, NULL, NULL},
    {"/t.Echo/Stream", TIDE_RPC_SERVER_STREAMING, false, l_stream, NULL, NULL},
};

typedef struct result {
    int done;
    tide_grpc_code_t code;
    char msg[256];
    int messages;
    size_t bytes;
    uint8_t first[64];
} result_t;

static void r_msg(tide_rpc_client_call_t *call, const uint8_t *data, size_t len, void *ud)
{
    result_t *r = ud;
    (void)call;
    if (r->messages++ == 0)
        memcpy(r->first, data, len < sizeof(r->first) ? len : sizeof(r->first));
    r->bytes += len;
}

static void r_status(tide_rpc_client_call_t *call, tide_grpc_code_t code, const char *message, void *ud)
{
    result_t *r = ud;
    (void)call;
    r->done++;
    r->code = code;
    snprintf(r->msg, sizeof(r->msg), "%s", message ? message : "");
}

static void run_until(int *flag)
{
    uint64_t deadline = uv_hrtime() + (uint64_t)WAIT_MS * 1000000;
    while (!*flag && uv_hrtime() < deadline)
        uv_run(&L.loop, UV_RUN_ONCE);
    assert_true(*flag);
}

static const tide_rpc_client_call_cbs_t r_cbs = {r_msg, r_status};

static tide_rpc_client_t *l_client(tide_tls_ctx_t *tls)
{
    tide_rpc_client_config_t cfg = {.hostport = L.addr, .token = "tok", .tls = tls};
    tide_rpc_client_t *c = NULL;
    tide_error_t err;

    assert_int_equal(tide_rpc_client_new(&L.loop, &cfg, &c, &err), 0);
    return c;
}

static int l_call(tide_rpc_client_t *c, const char *path, const char *body, result_t *r)
{
    tide_rpc_client_call_t *call;

    memset(r, 0, sizeof(*r));
    if (tide_rpc_client_call_start(c, path, 5000, &r_cbs, r, &call) < 0)
        return -1;
    tide_rpc_client_call_send(call, (const uint8_t *)body, strlen(body));
    tide_rpc_client_call_close_send(call);
    run_until(&r->done);
    return 0;
}

static void srv_freed(void *ud)
{
    (void)ud;
    L.srv_closed = 1;
}

static void loop_tls_server_and_client(void **state)
{
    tide_tls_ctx_t *sctx = server_ctx(TIDE_TLS_CLIENT_CERT_OPTIONAL);
    tide_tls_ctx_t *cctx = client_ctx(ca_pem, cli_pem, cli_key);
    tide_tls_ctx_t *anon = client_ctx(ca_pem, NULL, NULL);
    tide_tls_ctx_t *wrong = client_ctx(ca2_pem, NULL, NULL);
    tide_rpc_server_config_t scfg = {.methods = l_methods, .n_methods = 2, .token = "tok", .tls = sctx};
    tide_rpc_client_t *c, *p;
    tide_error_t err;
    result_t r;

    (void)state;
    memset(&L, 0, sizeof(L));
    assert_int_equal(uv_loop_init(&L.loop), 0);
    assert_int_equal(tide_rpc_server_new(&L.loop, &scfg, &L.srv, &err), 0);
    tide_tls_ctx_free(sctx); /* the server keeps its own reference */
    assert_int_equal(tide_rpc_server_listen(L.srv, "127.0.0.1:0", &err), 0);
    snprintf(L.addr, sizeof(L.addr), "127.0.0.1:%d", tide_rpc_server_port(L.srv));

    /* Unary and streaming over TLS, with the client certificate's CN seen per call. */
    c = l_client(cctx);
    assert_int_equal(l_call(c, "/t.Echo/Unary", "hello over tls", &r), 0);
    assert_int_equal(r.code, TIDE_GRPC_OK);
    assert_int_equal(r.messages, 1);
    assert_memory_equal(r.first, "hello over tls", 14);
    assert_string_equal(L.last_cn, "worker-1");
    assert_true(tide_rpc_client_connected(c));
    assert_int_equal(l_call(c, "/t.Echo/Stream", "go", &r), 0);
    assert_int_equal(r.code, TIDE_GRPC_OK);
    assert_int_equal(r.messages, 50);
    assert_memory_equal(r.first, "item 0", 6);
    {
        /* A large unary message both ways (many records). */
        size_t big = 1u << 20;
        char *body = malloc(big + 1);
        memset(body, 'x', big);
        body[big] = '\0';
        assert_int_equal(l_call(c, "/t.Echo/Unary", body, &r), 0);
        assert_int_equal(r.code, TIDE_GRPC_OK);
        assert_int_equal(r.bytes, big);
        free(body);
    }
    tide_rpc_client_free(c);

    /* Without a client certificate: still served (optional), no CN. */
    p = l_client(anon);
    assert_int_equal(l_call(p, "/t.Echo/Unary", "anon", &r), 0);
    assert_int_equal(r.code, TIDE_GRPC_OK);
    assert_string_equal(L.last_cn, "");
    tide_rpc_client_free(p);

    /* A plaintext client is closed at once and counted. */
    assert_int_equal(tide_rpc_server_plaintext_refused(L.srv), 0);
    p = l_client(NULL);
    assert_int_equal(l_call(p, "/t.Echo/Unary", "plain", &r), 0);
    assert_int_equal(r.code, TIDE_GRPC_UNAVAILABLE);
    assert_string_equal(r.msg, "connection closed by the server before it answered");
    assert_int_equal(tide_rpc_server_plaintext_refused(L.srv), 1);
    tide_rpc_client_free(p);

    /* The wrong CA: UNAVAILABLE with OpenSSL's reason. */
    p = l_client(wrong);
    assert_int_equal(l_call(p, "/t.Echo/Unary", "x", &r), 0);
    assert_int_equal(r.code, TIDE_GRPC_UNAVAILABLE);
    /* (The server sends its CA along, since it also holds it for client certificates.) */
    assert_non_null(strstr(r.msg, "certificate verify failed: self-signed certificate in certificate chain"));
    assert_non_null(strstr(r.msg, L.addr));
    tide_rpc_client_free(p);
    assert_int_equal(L.messages, 4);

    tide_rpc_server_free(L.srv, srv_freed, NULL);
    tide_tls_ctx_free(cctx);
    tide_tls_ctx_free(anon);
    tide_tls_ctx_free(wrong);
    for (int i = 0; i < 1000 && uv_run(&L.loop, UV_RUN_NOWAIT); i++)
        ;
    uv_run(&L.loop, UV_RUN_DEFAULT);
    assert_true(L.srv_closed);
    assert_int_equal(uv_loop_close(&L.loop), 0);
}

/* A TLS client against a plaintext server: the handshake fails with a clear text, calls UNAVAILABLE. */
static void loop_tls_client_plaintext_server(void **state)
{
    tide_tls_ctx_t *cctx = client_ctx(ca_pem, NULL, NULL);
    tide_rpc_server_config_t scfg = {.methods = l_methods, .n_methods = 2, .token = "tok"};
    tide_rpc_client_t *c;
    tide_error_t err;
    result_t r;

    (void)state;
    memset(&L, 0, sizeof(L));
    assert_int_equal(uv_loop_init(&L.loop), 0);
    assert_int_equal(tide_rpc_server_new(&L.loop, &scfg, &L.srv, &err), 0);
    assert_int_equal(tide_rpc_server_listen(L.srv, "127.0.0.1:0", &err), 0);
    snprintf(L.addr, sizeof(L.addr), "127.0.0.1:%d", tide_rpc_server_port(L.srv));
    c = l_client(cctx);
    assert_int_equal(l_call(c, "/t.Echo/Unary", "x", &r), 0);
    assert_int_equal(r.code, TIDE_GRPC_UNAVAILABLE);
    assert_non_null(strstr(r.msg, "TLS handshake with"));
    assert_int_equal(L.messages, 0);
    tide_rpc_client_free(c);
    tide_rpc_server_free(L.srv, srv_freed, NULL);
    tide_tls_ctx_free(cctx);
    uv_run(&L.loop, UV_RUN_DEFAULT);
    assert_true(L.srv_closed);
    assert_int_equal(uv_loop_close(&L.loop), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(handshake_alpn_and_data),
        cmocka_unit_test(handshake_byte_by_byte_localhost),
        cmocka_unit_test(wrong_ca_refused),
        cmocka_unit_test(wrong_host_refused),
        cmocka_unit_test(client_cert_required),
        cmocka_unit_test(client_cert_optional),
        cmocka_unit_test(garbage_refused),
        cmocka_unit_test(context_errors_name_the_file),
        cmocka_unit_test(plaintext_policy),
        cmocka_unit_test(loop_tls_server_and_client),
        cmocka_unit_test(loop_tls_client_plaintext_server),
    };
    return cmocka_run_group_tests(tests, make_pki, remove_pki);
}
