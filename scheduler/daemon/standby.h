/* The server a standby replica runs while another one leads (standby.c): every tide call is refused with
 * UNAVAILABLE and a message naming the leader; grpc.health.v1 says SERVING for "" and NOT_SERVING for the
 * tide services; /metrics has tide_is_leader 0. */
#ifndef TIDE_SCHED_STANDBY_H
#define TIDE_SCHED_STANDBY_H

#include "error.h"
#include "tls.h"

struct uv_loop_s;
typedef struct tide_standby tide_standby_t;

/* Listens on listen ("HOST:PORT"); self is this replica's advertised address (for messages), token the
 * bearer token (NULL: none). Returns 0 or -errno with err naming the address; on failure *out is still
 * set and must be given to tide_standby_free. Strings are copied. */
int tide_standby_start(struct uv_loop_s *loop, const char *listen, const char *self, const char *token,
                       tide_tls_ctx_t *tls,
                       tide_standby_t **out, tide_error_t *err);
/* The leader's address to name in refusals (copied), NULL while none is known. NULL s is fine. */
void tide_standby_set_leader(tide_standby_t *s, const char *leader);
/* Closes the listener and every connection; done(ud) runs once the port is free (from the loop, or at once
 * when there was no listener). NULL s is fine (done runs at once). */
void tide_standby_free(tide_standby_t *s, void (*done)(void *ud), void *ud);

#endif
