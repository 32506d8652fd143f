/* TLS for tide's transport without sockets: OpenSSL 3 over memory BIOs. A context (server or client:
 * certificate chain, key, CA, client-certificate policy, ALPN "h2", TLS 1.2 at least) is shared by many
 * connections; a connection takes ciphertext in and gives plaintext out, takes plaintext in and gives
 * ciphertext out. rpc_server.c and rpc_client.c put it between the socket and HTTP/2 (docs/security.md).
 *
 * Threading: a context may be used from several threads (OpenSSL's SSL_CTX is); a connection from one. */
#ifndef TIDE_RPC_TLS_H
#define TIDE_RPC_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "error.h"

typedef struct tide_tls_ctx tide_tls_ctx_t;
typedef struct tide_tls_conn tide_tls_conn_t;

typedef enum tide_tls_client_cert {
    TIDE_TLS_CLIENT_CERT_NONE = 0, /* server: do not ask for one */
    TIDE_TLS_CLIENT_CERT_OPTIONAL, /* server: ask; verify one that is presented against ca_file */
    TIDE_TLS_CLIENT_CERT_REQUIRE,  /* server: refuse a connection without one signed by ca_file */
} tide_tls_client_cert_t;

typedef struct tide_tls_config {
    const char *cert_file; /* PEM certificate chain. Server: required. Client: optional (client cert) */
    const char *key_file;  /* PEM private key matching cert_file; required with it */
    const char *ca_file;   /* PEM CA certificates. Client: required (verifies the server). Server:
                              verifies client certificates (needed for OPTIONAL / REQUIRE) */
    tide_tls_client_cert_t client_cert; /* server only; OPTIONAL or REQUIRE need ca_file */
} tide_tls_config_t;

/* A server context: serves cert_file/key_file; ALPN "http/1.1" to a client that offers it (curl for
 * /metrics), else "h2" (gRPC clients offer only h2). Returns 0 or -errno
 * (-ENOENT, -EINVAL ...) with err naming the file that cannot be read or the key that does not match.
 * Caller owns *out (tide_tls_ctx_free). Strings are read now, not kept. */
int tide_tls_ctx_new_server(const tide_tls_config_t *cfg, tide_tls_ctx_t **out, tide_error_t *err);
/* A client context: verifies servers against ca_file, offers ALPN "h2", presents cert_file/key_file when
 * given. Returns 0 or -errno with err as above. */
int tide_tls_ctx_new_client(const tide_tls_config_t *cfg, tide_tls_ctx_t **out, tide_error_t *err);
/* One more reference (servers and clients keep one while they live). Returns ctx. */
tide_tls_ctx_t *tide_tls_ctx_ref(tide_tls_ctx_t *ctx);
/* Drops a reference; the context goes with the last. NULL is fine. */
void tide_tls_ctx_free(tide_tls_ctx_t *ctx);
bool tide_tls_ctx_is_server(const tide_tls_ctx_t *ctx);

/* A connection on ctx. Client: host is what the server's certificate must name (a DNS name, also sent
 * as SNI, or an IP literal, IPv6 without brackets), required. Server: host is ignored. Nothing is
 * sent yet: a client's ClientHello appears in the output after tide_tls_conn_start. Caller frees. */
int tide_tls_conn_new(tide_tls_ctx_t *ctx, const char *host, tide_tls_conn_t **out, tide_error_t *err);
/* Frees the connection (no close_notify: see tide_tls_conn_close_notify). NULL is fine. */
void tide_tls_conn_free(tide_tls_conn_t *c);
/* Starts the handshake: queues a client's ClientHello (nothing for a server). Returns 0 or -EPROTO. */
int tide_tls_conn_start(tide_tls_conn_t *c, tide_error_t *err);
/* Ciphertext from the peer (any split). Runs the handshake and appends whatever plaintext it carried to
 * plain (grown only when larger than ever before). Returns 0, or -EPROTO once the connection failed
 * (err says why, e.g. "certificate verify failed: unable to get local issuer certificate"; an alert for
 * the peer may be in the output). After -EPROTO every call fails the same way. */
int tide_tls_conn_feed(tide_tls_conn_t *c, const uint8_t *data, size_t len, tide_buf_t *plain,
                       tide_error_t *err);
/* Plaintext to send (copied): encrypted at once when the handshake is done, else held until it is.
 * Returns 0 or -EPROTO (failed connection) / -EPIPE (after close_notify). */
int tide_tls_conn_write(tide_tls_conn_t *c, const uint8_t *data, size_t len, tide_error_t *err);
/* Appends the ciphertext waiting for the socket to dst. Returns the number of bytes appended. */
size_t tide_tls_conn_take_output(tide_tls_conn_t *c, tide_buf_t *dst);
/* Ciphertext bytes waiting for the socket. */
size_t tide_tls_conn_pending_output(const tide_tls_conn_t *c);
/* Queues a close_notify alert (once); later writes fail with -EPIPE. */
void tide_tls_conn_close_notify(tide_tls_conn_t *c);

bool tide_tls_conn_established(const tide_tls_conn_t *c); /* handshake done, not failed */
bool tide_tls_conn_failed(const tide_tls_conn_t *c);
bool tide_tls_conn_peer_closed(const tide_tls_conn_t *c); /* the peer's close_notify arrived */
/* The protocol ALPN chose ("h2", "http/1.1"), "" when none. Borrowed from c. */
const char *tide_tls_conn_alpn(const tide_tls_conn_t *c);
/* The peer certificate's subject CN when the peer presented a certificate that verified, else "".
 * Borrowed from c. */
const char *tide_tls_conn_peer_cn(const tide_tls_conn_t *c);
/* The failure's text ("" while none). Borrowed from c. */
const char *tide_tls_conn_error(const tide_tls_conn_t *c);

/* --- policy helpers for the programs (no OpenSSL) --- */

/* True when hostport's host ("127.0.0.1:7070", "[::1]:7070", "localhost:7070") is a loopback address.
 * "0.0.0.0", "", "[::]" and every other host are not. */
bool tide_tls_hostport_is_loopback(const char *hostport);
/* The plaintext rule: a server listening (listening true) on, or a client connecting to, a non-loopback
 * hostport needs TLS unless insecure. Returns 0 when allowed, else -EPERM with err naming the address
 * and the flags to use. hostport may be a comma-separated list (every entry is checked). */
int tide_tls_check_plaintext(const char *hostport, bool listening, bool tls, bool insecure,
                             tide_error_t *err);

#endif
