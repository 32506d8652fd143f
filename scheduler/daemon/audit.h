/* The audit log (docs/security.md, "Audit log"): one JSON line per changing call and per refused call —
 * when, who (identity, role, peer address), what (method and target), and the result (gRPC code and
 * message). Appended to a file (mode 0600) that SIGHUP reopens, so logrotate can move it. */
#ifndef TIDE_SCHED_AUDIT_H
#define TIDE_SCHED_AUDIT_H

#include <stdint.h>

#include "error.h"
#include "grpc_status.h"
#include "rpc_server.h"

typedef struct tide_audit tide_audit_t;

/* path NULL: no log (entries are only counted). -errno with err naming the path when it cannot be opened. */
int tide_audit_open(const char *path, tide_audit_t **out, tide_error_t *err);
/* Closes and opens the file again (after logrotate moved it); a failure is logged and entries are
 * dropped (counted) until the next reopen works. */
void tide_audit_reopen(tide_audit_t *a);
void tide_audit_free(tide_audit_t *a);
/* Whether a call to method (its full path) changes state, so is always logged. */
bool tide_audit_changes(const char *path);
/* One entry. wall_ms: Unix ms. target: what it was about ("job 5"); may be "". */
void tide_audit_write(tide_audit_t *a, int64_t wall_ms, const tide_rpc_identity_t *id, const char *peer,
                      const char *path, const char *target, tide_grpc_code_t code, const char *message);
uint64_t tide_audit_entries(const tide_audit_t *a);
uint64_t tide_audit_dropped(const tide_audit_t *a);

#endif
