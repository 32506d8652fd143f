/* Leader election for tide-scheduler replicas sharing one etcd (ha.c, docs/operations.md). A replica
 * stands by (standby.c answers its clients) and campaigns: it holds a lease of its own and creates the
 * leadership key TIDE_KEY_LEADER with it in a txn that succeeds only when the key is absent. The winner
 * keeps the lease alive; every store write of its daemon compares the key's mod revision (the fence), and
 * it steps down as soon as it cannot prove its lease is still valid. */
#ifndef TIDE_SCHED_HA_H
#define TIDE_SCHED_HA_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon.h"
#include "error.h"

struct uv_loop_s;
typedef struct tide_ha tide_ha_t;

/* The leadership key, relative to the store's prefix (the daemon's fence compares it). */
#define TIDE_KEY_LEADER "meta/leader"

typedef struct tide_ha_config {
    const char *store_url; /* "etcd://HOST:PORT[,...][/PREFIX]" */
    const char *listen;    /* where the standby (and then the leader) listens */
    const char *advertise; /* the address written into the leadership key; NULL: listen */
    const char *token;     /* the bearer token the standby checks; NULL: none */
    tide_tls_ctx_t *tls;   /* the standby server's TLS context (borrowed, must outlive ha); NULL: plaintext */
    int64_t lease_ttl_ms;  /* 0: 3000; rounded up to whole seconds (etcd's unit) */
    int64_t etcd_wait_ms;  /* an unreachable etcd at start: 0 is an error at once (checked in tide_ha_new),
                              > 0 is tried that long (then tide_ha_gave_up), < 0 for ever (after a
                              step-down) */
} tide_ha_config_t;

/* Parses the URL, connects the etcd client and, with etcd_wait_ms 0, checks that etcd answers (a few
 * seconds at most). Returns 0 with *out, or -EINVAL / -ECONNREFUSED / -ETIMEDOUT with err saying why
 * (*out NULL). Strings are copied. */
int tide_ha_new(struct uv_loop_s *loop, const tide_ha_config_t *cfg, tide_ha_t **out, tide_error_t *err);
/* Starts the standby server and the campaign. Once this replica won and the standby's port is free,
 * tide_ha_elected() turns true and the loop is stopped (uv_stop), so that main can start the daemon from
 * the top level. Returns 0 or -errno (the standby cannot listen) with err. */
int tide_ha_campaign(tide_ha_t *ha, tide_error_t *err);
bool tide_ha_elected(const tide_ha_t *ha);
/* etcd never answered within etcd_wait_ms: the loop was stopped; main exits with an error. */
bool tide_ha_gave_up(const tide_ha_t *ha);
/* The lease was lost (or given up) after this replica won: it must start over as a standby. The loop is
 * stopped when that happens before the daemon runs. */
bool tide_ha_lost(const tide_ha_t *ha);
/* The fence for tide_daemon_config_t once elected: the key (relative to the store prefix) and the mod
 * revision this replica's txn gave it. */
const char *tide_ha_fence_key(const tide_ha_t *ha);
int64_t tide_ha_fence_rev(const tide_ha_t *ha);
/* For tide_daemon_config_t.lease_valid (ud: the tide_ha_t): whether the lease is surely alive now. */
bool tide_ha_lease_valid(void *ud);
/* From now on a lost lease steps d down (tide_daemon_step_down). Returns false when the lease was already
 * lost (the caller steps down itself). */
bool tide_ha_lead(tide_ha_t *ha, tide_daemon_t *d);
/* A graceful end of leadership (also of a won election whose daemon did not start): revokes the lease so
 * that a standby takes over at once (waits at most 1 s for etcd, running the loop). Nothing when this
 * replica does not hold the lease. Call from the top level, not from a callback. */
void tide_ha_resign(tide_ha_t *ha);
/* Stops campaigning and keeping the lease alive, closes the standby server and the etcd client; the
 * memory goes once their handles closed (run the loop). NULL is fine. */
void tide_ha_free(tide_ha_t *ha);

#endif
