/* tide.v1.ClusterService GetUsage and ListAudit (docs/security.md): GPU time per owner and pool, and the
 * newest audit entries. Reads only: answered at once (nothing in them waits for the store). A user's usage
 * report holds their own rows only; the audit log is for admin and read-only callers (authz.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit.h"
#include "authz.h"
#include "daemon.h"
#include "usage.h"

#include "tide/v1/cluster_service.pb-c.h"

#define AUDIT_DEFAULT 100
#define AUDIT_MAX     1000

static void get_usage(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    tide_daemon_t *d = tide_rpc_call_server_data(call);
    Tide__V1__GetUsageRequest *req = tide__v1__get_usage_request__unpack(NULL, len, data);
    const tide_rpc_identity_t *me = tide_rpc_call_identity(call);
    Tide__V1__UsageReport rep;
    const char *owner;

    if (!req) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, "request is not a valid tide.v1.GetUsageRequest");
        return;
    }
    owner = req->user;
    if (!tide_authz_sees_all(me)) {
        if (owner[0] && strcmp(owner, me->name) != 0) {
            char msg[200];
            snprintf(msg, sizeof(msg), "user: %s may only see their own usage", me->name);
            tide_rpc_call_finish(call, TIDE_GRPC_PERMISSION_DENIED, msg);
            goto done;
        }
        owner = me->name;
    }
    tide_daemon_now(d);
    tide_usage_report(d->usage, d->core, owner, req->pool, &rep, &d->arena);
    tide_rpc_call_send_pb(call, &rep.base);
    tide_rpc_call_finish(call, TIDE_GRPC_OK, NULL);
    tide_arena_reset(&d->arena);
done:
    tide__v1__get_usage_request__free_unpacked(req, NULL);
}

static void list_audit(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    tide_daemon_t *d = tide_rpc_call_server_data(call);
    Tide__V1__ListAuditRequest *req = tide__v1__list_audit_request__unpack(NULL, len, data);
    Tide__V1__ListAuditResponse resp = TIDE__V1__LIST_AUDIT_RESPONSE__INIT;
    const tide_audit_entry_t **found;
    size_t max, n;

    if (!req) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, "request is not a valid tide.v1.ListAuditRequest");
        return;
    }
    if (req->limit < 0) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, "limit must be >= 0");
        goto done;
    }
    max = req->limit == 0 ? AUDIT_DEFAULT : (size_t)(req->limit > AUDIT_MAX ? AUDIT_MAX : req->limit);
    found = tide_arena_calloc(&d->arena, max + 1, sizeof(*found));
    n = tide_audit_list(d->audit, req->after_seq, req->user, found, max);
    resp.entries = tide_arena_calloc(&d->arena, n + 1, sizeof(*resp.entries));
    for (size_t i = 0; i < n; i++) {
        const tide_audit_entry_t *e = found[i];
        Tide__V1__AuditEntry *pb = tide_arena_alloc(&d->arena, sizeof(*pb));
        tide__v1__audit_entry__init(pb);
        pb->seq = e->seq;
        pb->time_ms = e->time_ms;
        pb->user = (char *)e->user;
        pb->role = (char *)e->role;
        pb->peer = (char *)e->peer;
        pb->method = (char *)e->method;
        pb->target = (char *)e->target;
        pb->code = (char *)e->code;
        pb->message = e->message;
        resp.entries[resp.n_entries++] = pb;
    }
    tide_rpc_call_send_pb(call, &resp.base);
    tide_rpc_call_finish(call, TIDE_GRPC_OK, NULL);
    tide_arena_reset(&d->arena);
done:
    tide__v1__list_audit_request__free_unpacked(req, NULL);
}

const tide_rpc_method_t tide_svc_accounting[] = {
    {.path = "/tide.v1.ClusterService/GetUsage", .on_message = get_usage},
    {.path = "/tide.v1.ClusterService/ListAudit", .on_message = list_audit},
};
const size_t tide_svc_accounting_count = sizeof(tide_svc_accounting) / sizeof(tide_svc_accounting[0]);
