/* The audit log (docs/security.md, "Audit log"): one JSON line per changing call and per refused call —
 * when, who (identity, role, peer address), what (method and target), and the result (gRPC code and
 * message). Appended to a file (mode 0600) that SIGHUP reopens, so logrotate can move it; the newest
 * TIDE_AUDIT_KEEP entries are also kept in memory, numbered, for ListAudit (the daemon stores the changing
 * calls' entries, so they survive restarts and failovers). */
#ifndef TIDE_SCHED_AUDIT_H
#define TIDE_SCHED_AUDIT_H

#include <stdint.h>

#include "error.h"
#include "grpc_status.h"
#include "rpc_server.h"

#define TIDE_AUDIT_KEEP 10000
#define TIDE_KEY_AUDIT  "audit/"

typedef struct tide_audit tide_audit_t;

typedef struct tide_audit_entry {
    uint64_t seq;
    int64_t time_ms;
    char user[64];
    char role[16];
    char peer[64];
    char method[48];
    char target[96];
    char code[24];
    char *message; /* owned */
} tide_audit_entry_t;

/* path NULL: no log (entries are only counted). -errno with err naming the path when it cannot be opened. */
int tide_audit_open(const char *path, tide_audit_t **out, tide_error_t *err);
/* Closes and opens the file again (after logrotate moved it); a failure is logged and entries are
 * dropped (counted) until the next reopen works. */
void tide_audit_reopen(tide_audit_t *a);
void tide_audit_free(tide_audit_t *a);
/* Whether a call to method (its full path) changes state, so is always logged. */
bool tide_audit_changes(const char *path);
/* One entry. From a known identity (id->name set): numbered after the newest kept, kept, written to the
 * file, and returned (valid until TIDE_AUDIT_KEEP more are written) for the daemon to store. From nobody
 * known (a missing, unknown or malformed token): the file only, unnumbered, at most 20 lines a second
 * (the next line written says how many were suppressed); returns NULL. wall_ms: Unix ms. target: what it was
 * about ("job 5"); may be "". */
const tide_audit_entry_t *tide_audit_write(tide_audit_t *a, int64_t wall_ms, const tide_rpc_identity_t *id,
                                           const char *peer, const char *path, const char *target,
                                           tide_grpc_code_t code, const char *message);
/* An entry read back from the store at start (in increasing seq; older or repeated ones are ignored). */
void tide_audit_restore(tide_audit_t *a, const tide_audit_entry_t *e);
/* Up to max kept entries after after_seq (0: the newest max), oldest first, only user's when user is set.
 * Returns how many were put in out. */
size_t tide_audit_list(const tide_audit_t *a, uint64_t after_seq, const char *user, const tide_audit_entry_t **out,
                       size_t max);
/* Packs e for the store (key: TIDE_KEY_AUDIT + 20-digit seq, into key). Returns malloc'd bytes, *len. */
uint8_t *tide_audit_pack(const tide_audit_entry_t *e, char *key, size_t key_size, size_t *len);
/* Unpacks a stored entry; -EINVAL when it is not a tide.v1.AuditEntry. e->message owned by the caller. */
int tide_audit_unpack(const void *value, size_t len, tide_audit_entry_t *e);
uint64_t tide_audit_entries(const tide_audit_t *a);
uint64_t tide_audit_dropped(const tide_audit_t *a);

#endif
