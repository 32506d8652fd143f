/* Identities (docs/security.md): the scheduler's users file names each identity (a person, a team's
 * automation, a worker), its role, its tokens as SHA-256 digests (never the tokens themselves), and its
 * limits. A token is looked up by its digest in O(1). The table is immutable once parsed: a reload builds a
 * new one and swaps it. No I/O but tide_users_load; no clock (callers pass now). */
#ifndef TIDE_USERS_H
#define TIDE_USERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* The identity behind the scheduler's own token (--token-file / DATA_DIR/token): an admin. */
#define TIDE_ADMIN_IDENTITY "admin"
#define TIDE_USER_NAME_MAX  63
#define TIDE_USERS_FILE_MAX (16u << 20)

typedef enum tide_role {
    TIDE_ROLE_NONE = 0,
    TIDE_ROLE_ADMIN = 1,     /* everything */
    TIDE_ROLE_USER = 2,      /* submits; sees, cancels, scales, checkpoints and reads logs of its own jobs */
    TIDE_ROLE_WORKER = 3,    /* WorkerService.Connect only */
    TIDE_ROLE_READ_ONLY = 4, /* every read (jobs, logs, workers, events, usage, audit), no change */
} tide_role_t;

/* Priority classes in tide_prio_t's order (LOW, NORMAL, HIGH, CRITICAL): bit i allows class i. */
#define TIDE_USER_CLASSES_ALL 0xfu

typedef struct tide_user_pool {
    char *name;
    int32_t max_gpus; /* -1: no limit of its own */
} tide_user_pool_t;

typedef struct tide_user {
    char *name;
    tide_role_t role;
    char *unix_user;        /* "" : ranks run as the worker's own account */
    tide_user_pool_t *pools; /* n_pools == 0: any pool */
    size_t n_pools;
    unsigned classes;        /* allowed priority classes (bits, TIDE_USER_CLASSES_ALL by default) */
    int32_t max_gpus;        /* GPUs its unfinished jobs may ask for at once (max_workers); -1: no limit */
    int32_t max_queued_jobs; /* its PENDING jobs; -1: no limit */
    double rate_limit;       /* API calls per second (burst: twice that, at least 1); 0: no limit */
} tide_user_t;

typedef struct tide_users tide_users_t;

typedef enum tide_auth_result {
    TIDE_AUTH_OK = 0,
    TIDE_AUTH_UNKNOWN,  /* no identity has this token */
    TIDE_AUTH_EXPIRED,  /* *when: its expiry, Unix ms */
    TIDE_AUTH_REVOKED,
} tide_auth_result_t;

/* Parses a users file's JSON text (docs/security.md, "The users file"). Returns 0 with *out (free with
 * tide_users_free), or -EINVAL with err naming the entry and field ("users[2].tokens[0].sha256: must be 64
 * hex digits"). */
int tide_users_parse(const char *text, size_t len, tide_users_t **out, tide_error_t *err);
/* Reads path (at most TIDE_USERS_FILE_MAX bytes) and parses it; err names the path. */
int tide_users_load(const char *path, tide_users_t **out, tide_error_t *err);
void tide_users_free(tide_users_t *u);
size_t tide_users_count(const tide_users_t *u);

/* The identity a bearer token belongs to, at now_ms (Unix ms). TIDE_AUTH_OK: *user (borrowed from u, valid
 * until u is freed); EXPIRED: *user and *expired_ms set; REVOKED: *user set. */
tide_auth_result_t tide_users_authenticate(const tide_users_t *u, const char *token, int64_t now_ms,
                                           const tide_user_t **user, int64_t *expired_ms);
/* The identity named name, or NULL. Borrowed from u. */
const tide_user_t *tide_users_find(const tide_users_t *u, const char *name);
/* Whether user may submit to pool ("" : no pool named); *limit: that pool's own max_gpus or -1. */
bool tide_user_pool_allowed(const tide_user_t *user, const char *pool, int32_t *limit);

/* Whether s is a valid identity name (and unix_user): 1-63 letters, digits or ._@- . */
bool tide_user_name_valid(const char *s);
/* The lower-case hex SHA-256 of token, as the users file stores it. */
void tide_token_digest_hex(const char *token, char out[65]);
const char *tide_role_name(tide_role_t role);
/* "admin", "user", "worker", "read-only" (also "readonly"). Returns 0 or -EINVAL. */
int tide_role_parse(const char *s, tide_role_t *out);

#endif
