/* The standard grpc.health.v1.Health service (Check, Watch) that Kubernetes gRPC probes use, for the leader
 * (tide_svc_health) and for a standby (standby.c, through tide_svc_health_answer). Invariant: the answer
 * depends only on the service name and the replica's role, never on a token (probes carry none). */
#include <errno.h>
#include <string.h>

#include "daemon.h"
#include "grpc/health/v1/health.pb-c.h"

int tide_health_tide_service(const char *service)
{
    static const char *const names[] = {"tide.v1.JobService", "tide.v1.ClusterService", "tide.v1.WorkerService"};

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(service, names[i]) == 0)
            return 1;
    }
    return 0;
}

/* Check answers once and ends; Watch answers the current status and stays open (the status changes only
 * at shutdown, when the server's GOAWAY ends the stream). Per the health protocol, Check on an unknown
 * service is NOT_FOUND and Watch answers SERVICE_UNKNOWN. */
void tide_svc_health_answer(tide_rpc_call_t *call, const uint8_t *data, size_t len, bool watch,
                            int (*status_of)(const char *service, void *ud), void *ud)
{
    Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    Grpc__Health__V1__HealthCheckRequest *req = grpc__health__v1__health_check_request__unpack(NULL, len, data);
    int st;

    if (!req) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT,
                             "request is not a valid grpc.health.v1.HealthCheckRequest");
        return;
    }
    st = status_of(req->service, ud);
    grpc__health__v1__health_check_request__free_unpacked(req, NULL);
    if (st == -ENOENT && !watch) {
        tide_rpc_call_finish(call, TIDE_GRPC_NOT_FOUND, "unknown service");
        return;
    }
    resp.status = st == -ENOENT ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN
                                : (Grpc__Health__V1__HealthCheckResponse__ServingStatus)st;
    tide_rpc_call_send_pb(call, &resp.base);
    if (!watch)
        tide_rpc_call_finish(call, TIDE_GRPC_OK, NULL);
}

/* The leader: every service it knows serves until it shuts down. */
static int leader_status(const char *service, void *ud)
{
    tide_daemon_t *d = ud;

    if (service[0] && !tide_health_tide_service(service))
        return -ENOENT;
    return d->shutting_down ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
                            : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
}

static void health_check(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    tide_svc_health_answer(call, data, len, false, leader_status, tide_rpc_call_server_data(call));
}

static void health_watch(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    tide_svc_health_answer(call, data, len, true, leader_status, tide_rpc_call_server_data(call));
}

const tide_rpc_method_t tide_svc_health[] = {
    {.path = "/grpc.health.v1.Health/Check", .no_auth = true, .on_message = health_check},
    {.path = "/grpc.health.v1.Health/Watch", .kind = TIDE_RPC_SERVER_STREAMING, .no_auth = true,
     .on_message = health_watch},
};
const size_t tide_svc_health_count = sizeof(tide_svc_health) / sizeof(tide_svc_health[0]);
