/* tide-scheduler's shell around the core: the libuv loop, the gRPC services, the store and the group
 * commit. Private to scheduler/daemon.
 *
 * The one rule of this shell: nothing leaves the process before the store has the state it depends on.
 * Every core call is followed by tide_daemon_absorb(), which turns the core's actions into store writes
 * (added to the open batch) and outbox entries (worker messages, client replies, events) tagged with
 * that batch. Once per loop turn the open batch is committed; when the commit completes, the outbox
 * entries of that batch and earlier are released in order. */
#ifndef TIDE_DAEMON_H
#define TIDE_DAEMON_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "arena.h"
#include "core.h"
#include "list.h"
#include "rpc_server.h"
#include "store.h"

#include "tide/v1/types.pb-c.h"
#include "tide/v1/worker_service.pb-c.h"

#define TIDE_METRICS_GPU_LIMIT 4096

typedef struct tide_daemon_config {
    const char *listen;      /* "127.0.0.1:7070" */
    const char *data_dir;    /* created if missing */
    const char *store_url;   /* NULL: sqlite:DATA_DIR/state.db */
    const char *token_file;  /* NULL: DATA_DIR/token */
    const char *users_file;  /* --users: identities beside the admin token (authz.c); NULL: none */
    const char *audit_log;   /* --audit-log: NULL: DATA_DIR/audit.log; "-": none */
    /* --metrics-gpu-limit: /metrics carries the per-GPU families only while at most this many workers are
     * live (each adds ~16 series); 0 (unset): TIDE_METRICS_GPU_LIMIT; -1: never (the flag's 0) */
    int64_t metrics_gpu_limit;
    bool insecure_no_auth;   /* tests of the auth-less path only */
    /* TLS (docs/security.md, "TLS"): the flags' files, and the server context main.c builds from them
     * (borrowed; NULL: plaintext h2c). */
    const char *tls_cert, *tls_key, *tls_ca;
    bool tls_require_client_cert; /* --tls-require-client-cert: refuse clients without a certificate */
    bool insecure;                /* --insecure: plaintext allowed on a non-loopback --listen */
    tide_tls_ctx_t *tls;
    const char *ckpt_durable_dir; /* --ckpt-durable: sent in every FlushCheckpoint (made absolute);
                                     NULL: "" is sent and the workers' own --ckpt-durable applies.
                                     Copies happen only with core.ckpt_flush. */
    /* High availability (--store etcd://, ha.c). */
    const char *advertise;   /* HOST:PORT this replica is reached at when it leads; NULL: listen */
    int64_t lease_ttl_ms;    /* the leader's lease; 0: 3000 */
    int64_t store_wait_ms;   /* --store-wait: how long an unreachable etcd is tried at start; 0: not at all */
    const char *fence_key;   /* set by ha.c when this replica leads: every commit also compares ... */
    int64_t fence_rev;       /* ... fence_key's mod revision (the leadership key this replica wrote) */
    bool (*lease_valid)(void *ud); /* set with fence_key: false once the lease may have expired; then */
    void *lease_ud;                /* nothing more leaves the process and the leader steps down */
    tide_core_config_t core;
} tide_daemon_config_t;

typedef struct wstream wstream_t;   /* a worker's Connect stream (svc_workers.c) */
typedef struct watcher watcher_t;   /* a WatchEvents stream (events.c) */
typedef struct log_req log_req_t;   /* a GetJobLogs relay (logs_proxy.c) */

/* One kept event (events.c). */
typedef struct tide_event {
    uint64_t seq;
    int64_t time_ms;
    const char *type; /* static */
    char *job_id;     /* owned, may be NULL */
    char *worker_id;  /* owned, may be NULL */
    char *message;    /* owned */
} tide_event_t;

typedef struct tide_daemon {
    uv_loop_t *loop;
    tide_daemon_config_t cfg;
    char *data_dir;
    char *store_url;
    char *token;
    char *launch_key; /* secret for MPI credentials (DATA_DIR/launch.key) */
    char *durable_dir; /* absolute --ckpt-durable, or NULL */
    tide_core_t *core;
    tide_store_t *store;
    tide_rpc_server_t *server;
    tide_rpc_method_t *methods; /* the server's method table (owned) */
    struct tide_authz *authz;   /* who may do what (authz.c) */
    struct tide_audit *audit;   /* the audit log (audit.c) */
    struct tide_usage *usage;   /* GPU time of pruned jobs per owner and pool (usage.c) */
    uint64_t authz_generation;  /* the users file generation whose revocations were applied */
    uint64_t epoch;
    int64_t start_wall, start_mono;

    /* group commit (daemon.c) */
    tide_store_batch_t *batch;
    uint64_t open_no, done_no;
    bool inflight;
    bool failed;             /* a commit failed: nothing more is committed or released */
    tide_list_t outbox;
    struct dirty_job *dirty; /* jobs to write in the open batch, packed once each at commit time */
    uv_check_t check;
    uv_idle_t idle;          /* forces a non-blocking poll so a due tick runs after this turn's I/O */
    uv_timer_t timer;
    int64_t timer_at;
    bool tick_due;
    uint64_t last_check_ns, last_idle_ns; /* for measuring time the loop was busy, not idle */
    bool idle_metrics;                    /* uv_metrics_idle_time works on this loop */
    bool shutting_down;
    int exit_code;

    /* worker streams by id (svc_workers.c) */
    wstream_t *streams;
    struct worker_binding *worker_bindings; /* worker id -> the worker identity that registered it */
    uint64_t next_stream_id;

    /* events (events.c): a ring of the newest, and the watchers */
    tide_event_t *ring;
    size_t ring_cap, ring_len, ring_head; /* oldest at ring_head */
    uint64_t next_event_seq;
    uint64_t event_seq_persisted;
    tide_list_t watchers;

    /* log relays (logs_proxy.c) */
    log_req_t *log_reqs; /* by request id */
    uint64_t next_log_req;

    /* scratch for conversions on the loop thread; rx_arena holds unpacked worker messages */
    tide_arena_t arena;
    tide_arena_t rx_arena;

    /* counters for /metrics */
    uint64_t heartbeats_total;
    uint64_t steal_requests_total;        /* StealRequests received */
    uint64_t task_reports_rejected_total; /* task messages the core refused */
    uint64_t commits_total;
    uint64_t commit_ops_total;
} tide_daemon_t;

/* launch_mpi.c */
/* Fills the MPI fields of l (hosts, credential) for job's generation; arena memory. */
void tide_daemon_mpi_launch(tide_daemon_t *d, const tide_job_t *job, int32_t generation,
                            Tide__V1__LaunchRank *l);

/* daemon.c */
int tide_daemon_start(uv_loop_t *loop, const tide_daemon_config_t *cfg, tide_daemon_t **out,
                      tide_error_t *err);
/* Stops serving, commits what is pending, closes everything; the loop then ends. */
void tide_daemon_stop(tide_daemon_t *d);
/* The exit code of a leader that lost its leadership (main.c starts over as a standby). */
#define TIDE_DAEMON_STEPPED_DOWN 75
/* Leadership is lost (or can no longer be proven): commits and releases nothing more, stops the loop at
 * once, exit_code TIDE_DAEMON_STEPPED_DOWN. Idempotent. */
void tide_daemon_step_down(tide_daemon_t *d, const char *why);
void tide_daemon_free(tide_daemon_t *d);
/* SIGHUP: reads the users file again (a broken one is logged and the old identities stay) and reopens
 * the audit log. */
void tide_daemon_reload_users(tide_daemon_t *d);
/* Hands the core the current time. Call before every core event. */
void tide_daemon_now(tide_daemon_t *d);
/* Turns the core's pending actions into store writes and outbox entries, then clears them. */
void tide_daemon_absorb(tide_daemon_t *d);

/* Outbox entries released once the current batch is durable. */
/* A unary reply: msg packed now; sent when durable. The call may end before: then nothing is sent. */
void tide_daemon_reply(tide_daemon_t *d, tide_rpc_call_t *call, const ProtobufCMessage *msg);
/* A status (error or OK for streams) after the current batch. */
void tide_daemon_reply_status(tide_daemon_t *d, tide_rpc_call_t *call, tide_grpc_code_t code,
                              const char *message);
/* A message to a worker stream; packed now. */
void tide_daemon_to_worker(tide_daemon_t *d, uint64_t stream_id, const ProtobufCMessage *msg);
/* Every outbox entry for call is forgotten (the call ended). Each unary method's on_close calls it. */
void tide_daemon_forget_call(tide_daemon_t *d, tide_rpc_call_t *call);

/* restore.c: reads the store into the core (before serving). */
int tide_daemon_restore(tide_daemon_t *d, tide_error_t *err);
/* Store keys. */
#define TIDE_KEY_JOBS "jobs/"
#define TIDE_KEY_WORKERS "workers/"
#define TIDE_KEY_NEXT_SEQ "meta/next_job_seq"
#define TIDE_KEY_EPOCH "meta/epoch"
#define TIDE_KEY_EVENT_SEQ "meta/event_seq"
#define TIDE_KEY_LAUNCH_KEY "meta/launch_key" /* HA: the MPI credentials' secret, shared by every replica */
/* "jobs/00000000000000000017" for job 17 (zero-padded so keys sort by job number). */
void tide_daemon_job_key(const char *id, char *buf, size_t len);

/* events.c */
void tide_events_init(tide_daemon_t *d, size_t cap);
void tide_events_free(tide_daemon_t *d);
/* Ends the event streams of identities the users file in force no longer has (UNAUTHENTICATED). */
void tide_events_revoke(tide_daemon_t *d);
/* Publishes one event (already durable) to the ring and the watchers. Takes ownership of ev's strings. */
void tide_events_publish(tide_daemon_t *d, tide_event_t *ev);
extern const tide_rpc_method_t tide_svc_watch_events;

/* The services' method tables (svc_*.c). */
extern const tide_rpc_method_t tide_svc_jobs[];
extern const size_t tide_svc_jobs_count;
extern const tide_rpc_method_t tide_svc_cluster[];
extern const size_t tide_svc_cluster_count;
/* svc_accounting.c: GetUsage, ListAudit */
extern const tide_rpc_method_t tide_svc_accounting[];
extern const size_t tide_svc_accounting_count;
extern const tide_rpc_method_t tide_svc_health[];
extern const size_t tide_svc_health_count;
/* svc_health.c: 1 when service names one of tide's services ("tide.v1.JobService", ...), else 0. */
int tide_health_tide_service(const char *service);
/* Answers a grpc.health.v1 Check (watch false) or Watch call from its request bytes: status_of(service, ud)
 * gives the serving status (a HealthCheckResponse ServingStatus) or -ENOENT for an unknown service. */
void tide_svc_health_answer(tide_rpc_call_t *call, const uint8_t *data, size_t len, bool watch,
                            int (*status_of)(const char *service, void *ud), void *ud);
extern const tide_rpc_method_t tide_svc_worker_connect;
extern const tide_rpc_method_t tide_svc_job_logs;

/* svc_workers.c */
/* The stream with that id, or NULL. */
wstream_t *tide_wstream_find(tide_daemon_t *d, uint64_t id);
/* Sends one SchedulerMessage now (stamped with the epoch). */
void tide_wstream_send(tide_daemon_t *d, uint64_t stream_id, const uint8_t *bytes, size_t len);
/* Ends the stream with a status. */
void tide_wstream_close(tide_daemon_t *d, uint64_t stream_id, tide_grpc_code_t code, const char *msg);
void tide_wstreams_free(tide_daemon_t *d);
/* Ends the worker streams of identities the users file in force no longer has (UNAUTHENTICATED). */
void tide_wstreams_revoke(tide_daemon_t *d);
/* The stream id a core conn handle stands for. */
static inline uint64_t tide_conn_id(void *conn)
{
    return (uint64_t)(uintptr_t)conn;
}
static inline void *tide_conn_handle(uint64_t id)
{
    return (void *)(uintptr_t)id;
}

/* logs_proxy.c */
/* LogData from a worker stream. */
void tide_logs_on_data(tide_daemon_t *d, uint64_t stream_id, const Tide__V1__LogData *ld);
/* A worker stream ended: its relays end. */
void tide_logs_on_stream_closed(tide_daemon_t *d, uint64_t stream_id);
void tide_logs_free(tide_daemon_t *d);
/* Ends the log relays of identities the users file in force no longer has (UNAUTHENTICATED). */
void tide_logs_revoke(tide_daemon_t *d);

/* http.c: GET /healthz and /metrics. */
/* The cluster's utilization, failure risk and health score (docs/metrics.md), as ClusterStatus and
 * /metrics report them. O(workers). */
void tide_daemon_health(tide_daemon_t *d, tide_health_input_t *in, tide_health_t *h);
int tide_daemon_http(const char *method, const char *path, tide_buf_t *body, const char **content_type,
                     void *ud);

/* Maps a negative errno from the core to a gRPC code. */
tide_grpc_code_t tide_daemon_code(int rc);

#endif
