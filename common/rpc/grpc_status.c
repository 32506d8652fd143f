/* gRPC status code names and the spec's HTTP-status-to-gRPC mapping
 * (doc/http-grpc-status-mapping.md). Pure tables: no state. */
#include "grpc_status.h"

static const char *const names[TIDE_GRPC_CODE_COUNT] = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};

const char *tide_grpc_code_name(int code)
{
    if (code < 0 || code >= TIDE_GRPC_CODE_COUNT)
        return "UNKNOWN";
    return names[code];
}

tide_grpc_code_t tide_grpc_code_from_http(int http_status)
{
    switch (http_status) {
    case 400:
        return TIDE_GRPC_INTERNAL;
    case 401:
        return TIDE_GRPC_UNAUTHENTICATED;
    case 403:
        return TIDE_GRPC_PERMISSION_DENIED;
    case 404:
        return TIDE_GRPC_UNIMPLEMENTED;
    case 429:
    case 502:
    case 503:
    case 504:
        return TIDE_GRPC_UNAVAILABLE;
    default:
        return TIDE_GRPC_UNKNOWN;
    }
}
