/* gRPC status codes (https://grpc.github.io/grpc/core/md_doc_statuscodes.html) and their names. */
#ifndef TIDE_GRPC_STATUS_H
#define TIDE_GRPC_STATUS_H

typedef enum tide_grpc_code {
    TIDE_GRPC_OK = 0,
    TIDE_GRPC_CANCELLED = 1,
    TIDE_GRPC_UNKNOWN = 2,
    TIDE_GRPC_INVALID_ARGUMENT = 3,
    TIDE_GRPC_DEADLINE_EXCEEDED = 4,
    TIDE_GRPC_NOT_FOUND = 5,
    TIDE_GRPC_ALREADY_EXISTS = 6,
    TIDE_GRPC_PERMISSION_DENIED = 7,
    TIDE_GRPC_RESOURCE_EXHAUSTED = 8,
    TIDE_GRPC_FAILED_PRECONDITION = 9,
    TIDE_GRPC_ABORTED = 10,
    TIDE_GRPC_OUT_OF_RANGE = 11,
    TIDE_GRPC_UNIMPLEMENTED = 12,
    TIDE_GRPC_INTERNAL = 13,
    TIDE_GRPC_UNAVAILABLE = 14,
    TIDE_GRPC_DATA_LOSS = 15,
    TIDE_GRPC_UNAUTHENTICATED = 16,
} tide_grpc_code_t;

#define TIDE_GRPC_CODE_COUNT 17

/* "INVALID_ARGUMENT" etc.; "UNKNOWN" for values out of range. */
const char *tide_grpc_code_name(int code);

/* The code a client reports for a response without grpc-status, from its HTTP :status (the gRPC spec's
 * table: 400 INTERNAL, 401 UNAUTHENTICATED, 403 PERMISSION_DENIED, 404 UNIMPLEMENTED, 429/502/503/504
 * UNAVAILABLE, anything else, 200 included, UNKNOWN). */
tide_grpc_code_t tide_grpc_code_from_http(int http_status);

#endif
