/* Who may do what (docs/security.md): the scheduler's authenticate hook (its own token is the identity
 * "admin"; the users file adds the others), the role each method needs, per-identity rate limits, job
 * ownership and the quotas checked at submission. Runs on the loop thread; O(1) per call but the quota
 * check, which walks the jobs of the core once per submission by a limited identity. */
#ifndef TIDE_SCHED_AUTHZ_H
#define TIDE_SCHED_AUTHZ_H

#include <stdbool.h>
#include <stdint.h>

#include "core.h"
#include "error.h"
#include "rpc_server.h"
#include "users.h"

typedef struct tide_authz tide_authz_t;

/* admin_token: the scheduler's own (NULL: no authentication at all, tests only); users_path: the users
 * file or NULL. A users file that cannot be read or parsed: -errno with err naming the file and field. */
int tide_authz_new(const char *admin_token, const char *users_path, tide_authz_t **out, tide_error_t *err);
void tide_authz_free(tide_authz_t *a);
/* Reads the users file again now (SIGHUP; also done by itself within 2 s of the file changing). On error
 * the identities in force stay, and -errno is returned with err saying why. 0 when unchanged or reloaded. */
int tide_authz_reload(tide_authz_t *a, bool force, tide_error_t *err);
size_t tide_authz_identities(const tide_authz_t *a);
uint64_t tide_authz_reload_errors(const tide_authz_t *a);
/* Counts the users files taken into force: when it moves, the daemon ends the open streams of identities
 * that are gone (tide_daemon_revoke). */
uint64_t tide_authz_generation(const tide_authz_t *a);

/* The server's authenticate hook (ud: the tide_authz_t). Decides the identity, then whether its role
 * may call path, then its rate limit. */
tide_grpc_code_t tide_authz_authenticate(void *ud, const char *authorization, const char *path,
                                         tide_rpc_identity_t *id, char *msg, size_t msg_size);

/* The identity's entry in the users file in force (NULL for "admin" and unknown names). Borrowed until
 * the next reload. */
const tide_user_t *tide_authz_user(const tide_authz_t *a, const char *name);

/* Whether the call's identity is still the one the users file in force names, in the same role (the call
 * was authenticated when it began; the file may have been reloaded since). The admin token and
 * unauthenticated setups always are. When not, msg says why. */
bool tide_authz_current(const tide_authz_t *a, const tide_rpc_identity_t *id, char *msg, size_t msg_size);
/* Whether the caller sees every job (admin, read-only, or no authentication), not only its own. */
bool tide_authz_sees_all(const tide_rpc_identity_t *id);
/* A job's owner as shown ("admin" for jobs of the scheduler's own token and older jobs). */
const char *tide_authz_owner(const tide_job_t *job);
/* Whether the caller may read (own = false) or change (own = true) job: admins, read-only callers for
 * reads, and its owner. When not, msg says so ("job 5 belongs to bob: alice may only cancel her own
 * jobs"; verb names the action). */
bool tide_authz_job(const tide_rpc_identity_t *id, const tide_job_t *job, const char *verb, char *msg,
                    size_t msg_size);

/* Submission by id of spec (owner and run_as are filled from the identity into spec, borrowed from a):
 * the identity's priority classes, pools, queued jobs and GPUs. Returns TIDE_GRPC_OK, or
 * PERMISSION_DENIED / RESOURCE_EXHAUSTED with msg naming the field or limit. */
tide_grpc_code_t tide_authz_submit(tide_authz_t *a, const tide_core_t *core, const tide_rpc_identity_t *id,
                                   tide_job_spec_t *spec, char *msg, size_t msg_size);
#endif
