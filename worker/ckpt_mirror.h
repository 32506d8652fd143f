/* The hot-tier peer mirror (issue 8 part 4; docs/fault-tolerance.md, "Checkpoint tiers"): the
 * WorkerCheckpoints service a worker serves on its --listen port beside WorkerLauncher, and the
 * client that pushes a rank's checkpoint to a peer (PutCheckpoint) or pulls one back
 * (FetchCheckpoint). A copy appears at TIERDIR/JOB/step-S/rank-R/ (the ckpt_store.h layout, so
 * tide_ckpt_find searches it as a tier) only through one rename of a temporary directory whose
 * files were all re-read and matched the manifest. Loop thread only; file I/O of whole files
 * (hashing, reads for sending, commits) runs on the libuv threadpool. */
#ifndef TIDE_WORKER_CKPT_MIRROR_H
#define TIDE_WORKER_CKPT_MIRROR_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt_store.h"
#include "error.h"
#include "grpc_status.h"
#include "rpc_server.h"

struct uv_loop_s;

#define TIDE_CKPT_MIRROR_PUT_PATH   "/tide.v1.WorkerCheckpoints/PutCheckpoint"
#define TIDE_CKPT_MIRROR_FETCH_PATH "/tide.v1.WorkerCheckpoints/FetchCheckpoint"
#define TIDE_CKPT_MIRROR_CHUNK      (1u << 20) /* data bytes per CheckpointData, at most */

/* --- the service (receiver) --- */

typedef struct tide_ckpt_mirror_server tide_ckpt_mirror_server_t;

/* Optional authorisation of a Put or Fetch by the generation's credential (the lead wires it to
 * the LaunchRank.mpi_credential the worker holds for job/generation). Strings borrowed for the
 * call. Returns 0 to accept, or -EPERM/-EACCES with a reason in err (PERMISSION_DENIED). */
typedef int (*tide_ckpt_mirror_authorize_cb)(void *ud, const char *job, int32_t generation,
                                             const char *credential, const char *peer_worker_id,
                                             tide_error_t *err);

typedef struct tide_ckpt_mirror_server_config {
    const char *dir;        /* MIRRORDIR (created when missing); copied */
    const char *worker_id;  /* this worker's id, in replies; copied */
    const char *token;      /* bearer token callers must send ("authorization: Bearer T"); NULL or
                               "": none (the worker's --token; tests). Copied */
    uint64_t max_bytes;     /* of one copy's files; 0: 64 GiB. More: RESOURCE_EXHAUSTED */
    uint32_t max_files;     /* of one copy; 0: 4096 (never above TIDE_CKPT_MAX_FILES) */
    int keep;               /* steps kept per (job, rank); 0: 2 */
    uint32_t max_transfers; /* puts and fetches at once; 0: 16. More: RESOURCE_EXHAUSTED */
    uint32_t min_free_pct;  /* a put that would leave less than this % of dir's filesystem free (the
                               copies being received counted in) is RESOURCE_EXHAUSTED; 0: no limit */
    tide_ckpt_mirror_authorize_cb authorize; /* NULL: the token alone authorises */
    void *ud;
} tide_ckpt_mirror_server_config_t;

/* Creates the service's state (no socket of its own). Returns 0 or -errno (-EINVAL: no dir or
 * worker id; a mkdir error) with err naming it. Caller frees with tide_ckpt_mirror_server_free. */
int tide_ckpt_mirror_server_new(struct uv_loop_s *loop, const tide_ckpt_mirror_server_config_t *cfg,
                                tide_ckpt_mirror_server_t **out, tide_error_t *err);
/* Ends its open calls (UNAVAILABLE), removes partial copies; the memory goes once threadpool work
 * and its handle are done (run the loop). NULL is fine. Either order with tide_rpc_server_free. */
void tide_ckpt_mirror_server_free(tide_ckpt_mirror_server_t *ms);

/* The job ended (ForgetCheckpoints): a later PutCheckpoint of it, a peer's last save still on its way,
 * is refused with FAILED_PRECONDITION instead of stored (the newest 256 ended jobs are remembered). job is
 * copied; NULL ms or job: nothing. */
void tide_ckpt_mirror_server_forget(tide_ckpt_mirror_server_t *ms, const char *job);

/* The service's methods read tide_rpc_call_server_data(call) and look the mirror up by it: by
 * default the key is ms itself (an rpc server whose ud is ms); bind makes it server_ud (borrowed)
 * instead, so the methods can share a server whose ud belongs to another service (the worker's,
 * whose ud is its tide_worker_mpi_t). One key per mirror; a key bound twice: the latest wins. */
void tide_ckpt_mirror_server_bind(tide_ckpt_mirror_server_t *ms, const void *server_ud);

/* The WorkerCheckpoints methods (no_auth: the mirror checks its own token and credential). */
extern const tide_rpc_method_t tide_ckpt_mirror_methods[];
extern const size_t tide_ckpt_mirror_methods_count;

/* A new table: base's n_base methods (copied), then tide_ckpt_mirror_methods. *n_out gets its
 * length. Caller frees the table after the rpc server that uses it is freed. */
tide_rpc_method_t *tide_ckpt_mirror_methods_merge(const tide_rpc_method_t *base, size_t n_base,
                                                  size_t *n_out);

/* --- the client (sender of puts, receiver of fetches) --- */

typedef struct tide_ckpt_mirror_client tide_ckpt_mirror_client_t;

typedef struct tide_ckpt_mirror_client_config {
    const char *worker_id;       /* sent as the sender's id; copied */
    const char *token;           /* bearer token for peers; NULL: none; copied */
    uint64_t max_bytes;          /* a fetched copy's limit; 0: 64 GiB */
    uint32_t max_files;          /* a fetched copy's limit; 0: 4096 */
    uint32_t connect_timeout_ms; /* 0: 5000 */
    int64_t timeout_ms;          /* whole transfer; 0: none */
    tide_tls_ctx_t *tls;         /* TLS client context for peers (borrowed, must outlive the client);
                                    NULL: plaintext */
} tide_ckpt_mirror_client_config_t;

/* The end of one put or fetch. Everything borrowed for the callback only. */
typedef struct tide_ckpt_mirror_result {
    int rc;                /* 0; -ECONNREFUSED / -ETIMEDOUT ... (peer unreachable), -ENOENT (fetch:
                              nothing to fetch), -EINVAL, -EACCES, -ESTALE (stale generation), -EFBIG
                              (a limit), -EBADMSG (did not verify), -ECANCELED, -EIO, other -errno */
    tide_grpc_code_t code; /* the call's status (OK on success) */
    const char *error;     /* "" on success, else what failed ("peer 127.0.0.1:1: ...") */
    const char *path;      /* put: the copy's path on the peer; fetch: the local rank dir */
    uint64_t bytes;        /* the copy's bytes */
    const tide_ckpt_meta_t *meta; /* fetch: the verified manifest of the local copy; put: NULL */
} tide_ckpt_mirror_result_t;

typedef void (*tide_ckpt_mirror_done_cb)(void *ud, const tide_ckpt_mirror_result_t *res);

/* Creates a client on loop; cfg copied. Returns 0 or -EINVAL. */
int tide_ckpt_mirror_client_new(struct uv_loop_s *loop, const tide_ckpt_mirror_client_config_t *cfg,
                                tide_ckpt_mirror_client_t **out);
/* Ends open transfers (their callbacks run inline with -ECANCELED; a fetch's partial copy is
 * removed, though one whose final commit already runs may still land);
 * memory goes once threadpool work and handles are done (run the loop). NULL is fine. */
void tide_ckpt_mirror_client_free(tide_ckpt_mirror_client_t *c);

/* Streams the files meta lists (borrowed; copied) from rank_dir to the peer at "HOST:PORT" (its
 * WorkerCheckpoints), reading them on the threadpool one chunk at a time and sending the next only
 * while less than a few MiB wait in the connection. credential: the generation's (NULL: none). as:
 * NULL, or the rank's account when it runs as another (copied): the files are opened with its
 * file-system identity (fs_as.h), since rank_dir is the account's. Returns 0 and cb fires once from
 * the loop later, or -EINVAL (bad arguments; cb never fires). */
int tide_ckpt_mirror_put(tide_ckpt_mirror_client_t *c, const char *peer, const char *rank_dir,
                         const tide_ckpt_meta_t *meta, const char *credential,
                         const tide_fs_account_t *as, tide_ckpt_mirror_done_cb cb, void *ud);

/* Fetches the peer's newest verified copy of (job, rank) with step <= max_step (-1: any) written by
 * a generation <= generation (-1: any) into the tier into_dir: INTO/JOB/step-S/rank-R/ through a
 * temporary '.' directory, verified, renamed into place (replacing an older copy of that step).
 * Returns 0 and cb fires once later (rc -ENOENT when the peer has none), or -EINVAL. */
int tide_ckpt_mirror_fetch(tide_ckpt_mirror_client_t *c, const char *peer, const char *job,
                           int32_t rank, int64_t max_step, int32_t generation,
                           const char *credential, const char *into_dir,
                           tide_ckpt_mirror_done_cb cb, void *ud);

#endif
