/* The tide-worker shell (see agent.h): turns transport callbacks, timers, signals and process exits
 * into core events, and carries out the core's ops. Invariants: at most one stream (a->call) is
 * current and callbacks of any other are ignored; the transport client is freed only outside its
 * own callbacks (in a timer), never re-entrantly; once done, every handle is closing and nothing is
 * started again. */
#include "agent.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "addr_list.h"
#include "ckpt_mirror.h"
#include "ckpt_tiers.h"
#include "clock.h"
#include "datadir.h"
#include "flush.h"
#include "launcher.h"
#include "log.h"
#include "logs.h"
#include "mpi.h"
#include "perturb.h"
#include "rpc_client.h"
#include "rpc_server.h"
#include "trainer_server.h"
#include "xmalloc.h"

#define CONNECT_PATH               "/tide.v1.WorkerService/Connect"
#define WELCOME_TIMEOUT_DEFAULT_MS 10000
#define DRAIN_TIMEOUT_DEFAULT_MS   2000
#define DRAIN_POLL_MS              10
#define REAP_WAIT_MS               5000
#define FORCE_AFTER_MS             1000
#define SOFT_STOP_KILL_MAX_MS      5000 /* SIGTERM -> SIGKILL after a soft stop, at most */
#define PROGRESS_MAX               16   /* ranks per heartbeat */
#define TRACK_MAX                  64   /* rank processes the device backend is told about */
#define AGENT_SOCK_NAME            "agent.sock"
#define HOT_SWEEP_EVERY_MS         (3600LL * 1000) /* the --ckpt-hot-ttl backstop runs at start, then hourly */
#define HOT_SWEEP_KEEP_MAX         256             /* running jobs passed to a sweep (more: no sweep this time) */

/* A rank's exit not reported yet (see held below). */
/* What a local rank's LaunchRank says about its checkpoints' other homes (docs/fault-tolerance.md,
 * "Checkpoint tiers"): its mirror peer, where its newest checkpoint may be, its generation's credential. */
typedef struct rank_peers {
    uint64_t id;
    char *job_id;
    int32_t generation, rank;
    int64_t resume_step;
    char *mirror;      /* "" : none */
    char *credential;  /* "" : none */
    char **sources;    /* restore_peers, then the mirror */
    size_t n_sources;
    bool as_other;     /* runs as another account than the worker's: restores hand their copy to `as` */
    bool account_unknown; /* its account could not be looked up again: nothing it reports is read */
    tide_fs_account_t as;
} rank_peers_t;

/* A reported checkpoint being tiered, and where its mirror goes: taken at the report, so the rank's last
 * checkpoint is mirrored even when the rank exits before its tiering ends (a drain, a predicted failure). */
typedef struct pending_mirror {
    char *job_id;
    int32_t generation, rank;
    int64_t step;
    char *mirror, *credential;
    bool as_other; /* the rank's account, when not the worker's: the put reads its files as it */
    tide_fs_account_t as;
} pending_mirror_t;
#define PENDING_MIRRORS_MAX 64 /* tierings that failed leave their entry: the oldest go */

/* A restore in progress that may fetch from a peer before it answers. */
typedef struct restore_req {
    tide_worker_agent_t *a;
    uint64_t token;
    char *job_id;
    int32_t generation, rank;
    int64_t resume_step;
    size_t next_source; /* the next peer to fetch from */
    char **sources;     /* copied from the rank's record */
    size_t n_sources;
    char *credential;
    char *fetch_error;  /* the last fetch's failure, for the reply */
    bool as_other;      /* the rank's account, when not the worker's (rank_peers_t) */
    tide_fs_account_t as;
} restore_req_t;

typedef struct held_exit {
    uint64_t id;
    int64_t exit_status;
    int term_signal;
} held_exit_t;

struct tide_worker_agent {
    uv_loop_t *loop;
    const tide_worker_config_t *cfg;
    char *exec_helper;
    tide_gpu_t *gpu;
    tide_hostio_t *hostio; /* NULL: network and storage unknown */
    const tide_perturb_t *perturb;
    int64_t start_mono_ms; /* perturbation times count from here */
    uv_timer_t slow;       /* the `slow` perturbation's duty cycle */
    double speed;          /* 1: full speed */
    bool slow_stopped;     /* ranks are SIGSTOPped right now */
    uint32_t welcome_timeout_ms, drain_timeout_ms;

    tide_worker_core_t *core;
    tide_launcher_t *launcher;
    tide_worker_logs_t *logs;
    tide_trainer_server_t *trainer;
    tide_flusher_t *flusher; /* durable checkpoint copies */
    tide_ckpt_tiers_t *tiers; /* hot/warm manifests, copies, restores */
    tide_ckpt_mirror_server_t *mirror;   /* WorkerCheckpoints on launcher_server: peers' hot mirrors */
    tide_ckpt_mirror_client_t *mirror_client;
    tide_rpc_method_t *server_methods;   /* WorkerLauncher + WorkerCheckpoints */
    rank_peers_t *peers;                 /* local ranks' checkpoint peers */
    size_t n_peers;
    restore_req_t **restores;            /* restores waiting on a search or a fetch */
    size_t n_restores;
    pending_mirror_t *pending;           /* oldest first */
    size_t n_pending;
    tide_worker_mpi_t *mpi;
    tide_rpc_server_t *launcher_server; /* WorkerLauncher (MPI daemons) */
    char *launcher_address;
    tide_rpc_client_t *client;
    tide_rpc_client_call_t *call; /* the current stream, or NULL */
    tide_addr_list_t schedulers;  /* --scheduler's replicas; cur is the one tried now */
    size_t cur;
    size_t misses;     /* addresses tried in this round: a full round backs off */
    bool standby_seen; /* a standby refused in this round */

    uv_timer_t heartbeat, reconnect, welcome, finish;
    uv_timer_t hot_sweep; /* --ckpt-hot-ttl: old hot copies of jobs nobody told us ended */
    uv_signal_t sigterm, sigint;
    bool signals;
    int open_handles;

    bool finishing; /* waiting for the stream to end before stopping */
    uint64_t finish_deadline;
    /* Exits held back until the rank's task completions went out (no stream when it ended): the
     * scheduler must commit its last tasks before it learns of the exit. */
    held_exit_t *held;
    size_t n_held;

    bool done; /* handles closing, nothing more happens */
    bool free_requested;
    int exit_code;
    uint64_t first_signal_ms; /* loop time of the first SIGTERM/SIGINT; 0: none yet */
};

/* The scheduler address tried or connected now. */
/* The longest wait before the next try after a standby refused (standby.c's message says so). */
#define STANDBY_RETRY_MAX_MS 1000
#define SCHED(a) ((a)->schedulers.addrs[(a)->cur])

static void stop_io(tide_worker_agent_t *a);
static void finish_soon(tide_worker_agent_t *a, int exit_code);
static void connect_now(tide_worker_agent_t *a);
static void on_reconnect(uv_timer_t *t);
static void release_held(tide_worker_agent_t *a, bool force);

/* --- the core's effects --- */

static int op_send(void *ud, const Tide__V1__WorkerMessage *msg)
{
    tide_worker_agent_t *a = ud;

    if (!a->call)
        return -ENOTCONN;
    return tide_rpc_client_call_send_pb(a->call, &msg->base);
}

/* --- checkpoint peers (docs/fault-tolerance.md, "Checkpoint tiers") --- */

static void peers_clear(rank_peers_t *p)
{
    free(p->job_id);
    free(p->mirror);
    free(p->credential);
    for (size_t i = 0; i < p->n_sources; i++)
        free(p->sources[i]);
    free(p->sources);
}

/* account: what rank_account found (1: another account, `as`; 0: the worker's own; < 0: unknown). */
static void peers_add(tide_worker_agent_t *a, uint64_t id, const Tide__V1__LaunchRank *l, int account,
                      const tide_fs_account_t *as)
{
    rank_peers_t *p;

    if (l->burst)
        return;
    a->peers = tide_xrealloc(a->peers, (a->n_peers + 1) * sizeof(*a->peers));
    p = &a->peers[a->n_peers++];
    memset(p, 0, sizeof(*p));
    p->id = id;
    p->job_id = tide_xstrdup(l->job_id);
    p->generation = l->generation;
    p->rank = l->rank;
    p->resume_step = l->resume_step;
    p->mirror = tide_xstrdup(l->mirror_address ? l->mirror_address : "");
    p->credential = tide_xstrdup(l->mpi_credential ? l->mpi_credential : "");
    p->sources = tide_xcalloc(l->n_restore_peers + 2, sizeof(*p->sources));
    for (size_t i = 0; i < l->n_restore_peers; i++)
        if (l->restore_peers[i] && l->restore_peers[i][0])
            p->sources[p->n_sources++] = tide_xstrdup(l->restore_peers[i]);
    if (p->mirror[0])
        p->sources[p->n_sources++] = tide_xstrdup(p->mirror);
    /* What the worker reads in its place must be its account's (docs/worker.md, "Running ranks as
     * their user"). */
    p->as_other = account == 1;
    p->account_unknown = account < 0;
    p->as = *as;
}

/* The account rank `launch` runs as, by the launcher's rules (it started, so they passed): 1 another
 * than the worker's (*as), 0 the worker's own (*as: the worker's), or -errno when the lookup fails now
 * (then nothing the rank reports is read: fail closed). */
static int rank_account(tide_worker_agent_t *a, const Tide__V1__LaunchRank *launch,
                        tide_fs_account_t *as)
{
    int rc = a->launcher ? tide_launcher_account(a->launcher, launch, &as->uid, &as->gid, NULL) : 0;

    if (rc == 0) {
        as->uid = geteuid();
        as->gid = getegid();
    }
    if (rc < 0)
        tide_warn("job %s rank %d: its account cannot be looked up again: its checkpoint reports "
                  "will not be read",
                  launch->job_id, launch->rank);
    return rc;
}

static void peers_drop(tide_worker_agent_t *a, uint64_t id)
{
    for (size_t i = 0; i < a->n_peers; i++) {
        if (a->peers[i].id != id)
            continue;
        if (a->cfg->ckpt_hot && a->cfg->ckpt_hot[0]) {
            /* The rank's TIDE_CKPT_DIR, made at its launch: gone with it when it never saved there (memory in
             * /dev/shm is not for empty directories of ended jobs). */
            char *dir = tide_xasprintf("%s/%s", a->cfg->ckpt_hot, a->peers[i].job_id);
            (void)rmdir(dir);
            free(dir);
        }
        peers_clear(&a->peers[i]);
        a->peers[i] = a->peers[--a->n_peers];
        return;
    }
}

static const rank_peers_t *peers_find(const tide_worker_agent_t *a, const char *job_id, int32_t generation,
                                      int32_t rank)
{
    for (size_t i = 0; i < a->n_peers; i++) {
        const rank_peers_t *p = &a->peers[i];
        if (p->generation == generation && p->rank == rank && strcmp(p->job_id, job_id) == 0)
            return p;
    }
    return NULL;
}

static void on_mirror_put(void *ud, const tide_ckpt_mirror_result_t *res)
{
    char *what = ud;

    if (res->rc == 0)
        tide_info("%s: mirrored to the peer (%llu bytes, %s)", what, (unsigned long long)res->bytes, res->path);
    else if (res->rc != -ECANCELED)
        tide_warn("%s: not mirrored: %s; the warm and cold tiers keep it", what, res->error);
    free(what);
}

static void pending_free(pending_mirror_t *m)
{
    free(m->job_id);
    free(m->mirror);
    free(m->credential);
}

/* A checkpoint in the hot layout was reported: remember where its mirror goes. */
static void pending_add(tide_worker_agent_t *a, const char *job_id, int32_t generation, int32_t rank, int64_t step)
{
    const rank_peers_t *p = peers_find(a, job_id, generation, rank);
    pending_mirror_t *m;

    if (!p || !p->mirror[0] || !a->mirror_client)
        return;
    if (a->n_pending == PENDING_MIRRORS_MAX) {
        pending_free(&a->pending[0]);
        memmove(a->pending, a->pending + 1, (a->n_pending - 1) * sizeof(*a->pending));
        a->n_pending--;
    }
    a->pending = tide_xrealloc(a->pending, (a->n_pending + 1) * sizeof(*a->pending));
    m = &a->pending[a->n_pending++];
    m->job_id = tide_xstrdup(job_id);
    m->generation = generation;
    m->rank = rank;
    m->step = step;
    m->mirror = tide_xstrdup(p->mirror);
    m->credential = tide_xstrdup(p->credential);
    m->as_other = p->as_other;
    m->as = p->as;
}

/* A checkpoint has its manifest in hot: copy it to the rank's mirror peer on another node, so the loss of
 * this node does not lose it. */
static void on_tier_saved(void *ud, const char *rank_dir, const tide_ckpt_meta_t *meta)
{
    tide_worker_agent_t *a = ud;
    pending_mirror_t m;
    size_t i;
    char *what;

    for (i = 0; i < a->n_pending; i++)
        if (a->pending[i].generation == meta->generation && a->pending[i].rank == meta->rank &&
            a->pending[i].step == meta->step && strcmp(a->pending[i].job_id, meta->job) == 0)
            break;
    if (i == a->n_pending || !a->mirror_client)
        return;
    m = a->pending[i];
    memmove(a->pending + i, a->pending + i + 1, (a->n_pending - i - 1) * sizeof(*a->pending));
    a->n_pending--;
    what = tide_xasprintf("job %s rank %d step %lld", meta->job, meta->rank, (long long)meta->step);
    if (tide_ckpt_mirror_put(a->mirror_client, m.mirror, rank_dir, meta, m.credential[0] ? m.credential : NULL,
                             m.as_other ? &m.as : NULL, on_mirror_put, what) < 0) {
        tide_warn("%s: not mirrored: bad request", what);
        free(what);
    }
    pending_free(&m);
}

static int op_spawn(void *ud, uint64_t id, const Tide__V1__LaunchRank *launch,
                    tide_worker_spawned_t *out, tide_error_t *err)
{
    tide_worker_agent_t *a = ud;
    /* A burst rank of an MPI job is started directly, like any LAUNCHER_ENV rank: it is no part
     * of the job's mpirun, whose daemons and ranks it never touches (docs/worker.md, "Burst"). */
    int rc = launch->launcher == TIDE__V1__LAUNCHER__LAUNCHER_MPI && !launch->burst
                 ? (a->mpi ? tide_worker_mpi_spawn(a->mpi, id, launch, out, err) : -ESHUTDOWN)
                 : tide_launcher_spawn(a->launcher, id, launch, out, err);
    tide_fs_account_t as = {0, 0};
    int account = rc == 0 ? rank_account(a, launch, &as) : 0;

    /* Only the rank's account (or root) may speak for it on the trainer socket; an unknown account:
     * nobody but root. */
    if (rc == 0 && a->trainer) {
        tide_trainer_server_rank_add(a->trainer, id, launch->job_id, launch->generation,
                                     launch->rank, account < 0 ? (uid_t)-1 : as.uid);
        tide_trainer_server_rank_resume(a->trainer, id, launch->resume_step);
    }
    if (rc == 0) {
        peers_add(a, id, launch, account, &as);
        tide_ckpt_tiers_rank_started(a->tiers, id, launch->job_id); /* its copies stay while it runs */
    }
    if (rc == 0 && a->flusher)
        tide_flusher_rank_started(a->flusher, launch->job_id, launch->generation, launch->rank,
                                  launch->workdir);
    return rc;
}

/* A rank that uses the trainer SDK is asked to stop after its next step and gets SIGTERM only when
 * the grace period ends; any other rank gets SIGTERM now (docs/trainer-api.md). */
static void op_stop(void *ud, uint64_t id, uint32_t grace_ms)
{
    tide_worker_agent_t *a = ud;
    uint32_t kill_after = grace_ms < SOFT_STOP_KILL_MAX_MS ? grace_ms : SOFT_STOP_KILL_MAX_MS;

    bool soft = grace_ms > 0 && a->trainer &&
                tide_trainer_server_stop_after_step(a->trainer, id) == 0;

    /* An MPI rank's daemons go too; after a soft stop only once the rank had its chance to finish
     * its step (killing orted kills its ranks, and mpirun then aborts the job). */
    if (a->mpi)
        tide_worker_mpi_stop_daemons(a->mpi, id, soft ? grace_ms + kill_after : 0);
    if (a->mpi && tide_worker_mpi_is_virtual(a->mpi, id)) {
        if (soft)
            tide_worker_mpi_stop(a->mpi, id, grace_ms, kill_after);
        else
            tide_worker_mpi_stop(a->mpi, id, 0, grace_ms);
        return;
    }
    if (soft) {
        tide_launcher_stop_soft(a->launcher, id, grace_ms, kill_after);
        return;
    }
    tide_launcher_stop(a->launcher, id, grace_ms);
}

static void op_forget(void *ud, uint64_t id, const char *job_id, int32_t generation, int32_t rank)
{
    tide_worker_agent_t *a = ud;

    tide_launcher_forget(a->launcher, job_id, generation, rank);
}

/* ForgetCheckpoints (the core deferred it while a rank of the job ran here): the job's hot copies and
 * the mirrors kept for it go, off the loop, after any save of it already queued. */
static void op_forget_checkpoints(void *ud, const char *job_id)
{
    tide_worker_agent_t *a = ud;
    size_t i = 0;

    if (a->tiers && tide_ckpt_tiers_forget(a->tiers, job_id) < 0) {
        tide_warn("ForgetCheckpoints: job id '%.64s' is not valid: ignored", job_id);
        return;
    }
    /* The job ended: its saves still on the tiers' queue go to no peer, and a peer's late copy is not
     * kept here (tide_ckpt_mirror_server_forget). */
    tide_ckpt_mirror_server_forget(a->mirror, job_id);
    while (i < a->n_pending) {
        if (strcmp(a->pending[i].job_id, job_id) != 0) {
            i++;
            continue;
        }
        pending_free(&a->pending[i]);
        memmove(a->pending + i, a->pending + i + 1, (a->n_pending - i - 1) * sizeof(*a->pending));
        a->n_pending--;
    }
}

/* The backstop for a ForgetCheckpoints this worker missed (it was not connected when the job ended):
 * hot copies of jobs with no rank here whose newest file is older than --ckpt-hot-ttl. */
static void on_hot_sweep(uv_timer_t *t)
{
    tide_worker_agent_t *a = t->data;
    const char *keep[HOT_SWEEP_KEEP_MAX];
    size_t n;

    if (a->done || !a->tiers)
        return;
    n = tide_worker_core_running_jobs(a->core, keep, HOT_SWEEP_KEEP_MAX);
    if (n > HOT_SWEEP_KEEP_MAX) {
        tide_warn("hot tier: %zu ranks run here, more than a sweep takes: no --ckpt-hot-ttl sweep this hour", n);
        return;
    }
    (void)tide_ckpt_tiers_sweep(a->tiers, a->cfg->ckpt_hot_ttl_ms, keep, n);
}

static void op_save_epoch(void *ud, uint64_t epoch)
{
    tide_worker_agent_t *a = ud;
    tide_error_t err;

    if (tide_worker_epoch_save(a->cfg->data_dir, epoch, &err) < 0)
        tide_warn("cannot persist epoch %llu: %s", (unsigned long long)epoch, err.text);
}

static void op_log_request(void *ud, const Tide__V1__LogRequest *req)
{
    tide_worker_agent_t *a = ud;

    tide_debug("log request %llu: job %s rank %d%s%s", (unsigned long long)req->request_id,
               req->job_id, req->rank, req->follow ? " follow" : "", req->cancel ? " cancel" : "");
    tide_worker_logs_request(a->logs, req);
}

static void op_trainer_command(void *ud, const Tide__V1__TrainerCommand *cmd)
{
    tide_worker_agent_t *a = ud;

    if (a->trainer && cmd->cmd_case == TIDE__V1__TRAINER_COMMAND__CMD_CHECKPOINT_NOW) {
        tide_info("job %s rank %d: checkpoint now (request %llu)", cmd->job_id, cmd->rank,
                  (unsigned long long)cmd->checkpoint_now->request_id);
        tide_trainer_server_checkpoint_now(a->trainer, cmd->job_id, cmd->generation, cmd->rank,
                                           cmd->checkpoint_now->request_id,
                                           cmd->checkpoint_now->deadline_unix_ms);
    }
}

/* FlushCheckpoint: copy that rank's checkpoint off the loop; FlushDone follows. */
static void op_flush(void *ud, const Tide__V1__FlushCheckpoint *req)
{
    tide_worker_agent_t *a = ud;

    if (a->flusher)
        tide_flusher_request(a->flusher, req);
}

static int flusher_send(void *ud, const Tide__V1__WorkerMessage *msg)
{
    tide_worker_agent_t *a = ud;

    return tide_worker_core_send(a->core, msg);
}

/* A trainer reported a checkpoint: remember it for a durable copy, tier it when it lies in the hot
 * layout (manifest, warm copy, pruning: off the loop, docs/worker.md "Checkpoint tiers"), and tell
 * the scheduler (only worth it on a live stream) without waiting for any of that. */
static void on_trainer_checkpoint(void *ud, const char *job_id, int32_t generation, int32_t rank,
                                  const tide_trainer_msg_t *m)
{
    tide_worker_agent_t *a = ud;
    Tide__V1__WorkerMessage msg = TIDE__V1__WORKER_MESSAGE__INIT;
    Tide__V1__CheckpointSaved cs = TIDE__V1__CHECKPOINT_SAVED__INIT;
    const tide_fs_account_t *as;
    const rank_peers_t *p;

    cs.job_id = (char *)job_id;
    cs.generation = generation;
    cs.rank = rank;
    cs.step = m->step;
    cs.path = (char *)m->path;
    cs.bytes = m->bytes;
    cs.sha256 = (char *)m->sha256;
    cs.request_id = (uint64_t)m->request;
    /* What the rank reported is read as its account when it runs as another (fs_as.h). A report from
     * a rank this worker has no record of is passed on but never read. */
    p = peers_find(a, job_id, generation, rank);
    if (p && p->account_unknown)
        p = NULL;
    as = p && p->as_other ? &p->as : NULL;
    if (!p)
        tide_warn("job %s generation %d rank %d: checkpoint of step %lld reported by a rank with no "
                  "record here: not copied", job_id, generation, rank, (long long)m->step);
    if (a->flusher && p) {
        /* A rank directory in hot gets a manifest beside the trainer's files: the durable copy of
         * the directory cannot match the trainer's sha any more (the manifest checks it). */
        bool is_dir = false;
        bool tiered = tide_ckpt_tiers_in_layout(a->cfg->ckpt_hot, job_id, m->step, rank,
                                                m->path, &is_dir);
        tide_flusher_saved(a->flusher, job_id, generation, rank, m->step, m->path, m->bytes,
                           tiered && is_dir ? "" : m->sha256, as);
    }
    if (a->tiers && p)
        if (tide_ckpt_tiers_saved(a->tiers, job_id, generation, rank, m->step, m->path, m->sha256,
                                  as) == 1)
            pending_add(a, job_id, generation, rank, m->step);
    msg.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_CHECKPOINT_SAVED;
    msg.checkpoint_saved = &cs;
    if (tide_worker_core_send(a->core, &msg) < 0)
        tide_warn("job %s rank %d: checkpoint of step %lld not reported (no scheduler stream)",
                  job_id, rank, (long long)m->step);
}

/* The `slow PERCENT` perturbation: the ranks' process groups (launched ones directly, never mpirun
 * or MPI daemons; attached MPI ranks through their tide-rank-exec) run speed x the period and stop
 * for the rest of each period. The period is as short as keeps each run phase at least 10 ms: 20 ms
 * at 50% and above, so that work of a few milliseconds (a micro-batch) really runs at that speed
 * rather than now at full speed, now frozen for longer than it takes; longer at lower speeds, where
 * a stop relayed through tide-rank-exec (a line, then a kill) must not arrive late relative to a
 * short run phase. */
static uint64_t slow_period_ms(double speed)
{
    double p = speed > 0 ? 10.0 / speed : 1000;
    return p < 20 ? 20 : p > 1000 ? 1000 : (uint64_t)(p + 0.5);
}

static void signal_ranks(tide_worker_agent_t *a, int sig)
{
    tide_launcher_signal_all(a->launcher, sig);
    if (a->mpi)
        tide_worker_mpi_signal_all(a->mpi, sig);
}

static void on_slow(uv_timer_t *t)
{
    tide_worker_agent_t *a = t->data;
    uint64_t period = slow_period_ms(a->speed), run = (uint64_t)(a->speed * (double)period + 0.5);

    if (a->done || !a->launcher)
        return;
    if (a->speed >= 1) {
        if (a->slow_stopped)
            signal_ranks(a, SIGCONT);
        a->slow_stopped = false;
        return;
    }
    a->slow_stopped = !a->slow_stopped;
    signal_ranks(a, a->slow_stopped ? SIGSTOP : SIGCONT);
    uv_timer_start(&a->slow, on_slow, a->slow_stopped ? period - run : run, 0);
}

static void set_speed(tide_worker_agent_t *a, double speed)
{
    if (speed == a->speed)
        return;
    tide_info("--perturb: ranks run at %.0f%% speed", 100 * speed);
    a->speed = speed;
    if (speed >= 1) {
        uv_timer_stop(&a->slow);
        on_slow(&a->slow); /* continues whatever is stopped */
    } else if (!uv_is_active((uv_handle_t *)&a->slow)) {
        a->slow_stopped = true; /* the next on_slow starts a run phase */
        on_slow(&a->slow);
    }
}

static void send_heartbeat(tide_worker_agent_t *a)
{
    Tide__V1__Telemetry tm = TIDE__V1__TELEMETRY__INIT;
    Tide__V1__RankProgress *progress[PROGRESS_MAX];
    size_t n_progress;
    tide_gpu_telemetry_t g;

    memset(&g, 0, sizeof(g));
    if (a->launcher) {
        int32_t pids[TRACK_MAX];
        size_t n = tide_launcher_pids(a->launcher, pids, TRACK_MAX);
        if (a->mpi)
            n += tide_worker_mpi_pids(a->mpi, pids + n, TRACK_MAX - n);
        tide_gpu_track(a->gpu, pids, n);
    }
    if (tide_gpu_read(a->gpu, tide_clock_mono_ms(), tide_worker_core_running(a->core) > 0, &g) ==
        0) {
        if (a->hostio) {
            tide_hostio_reading_t io;
            tide_hostio_read(a->hostio, tide_clock_mono_ms(), &io);
            g.net_util = io.net_util;
            g.storage_util = io.storage_util;
            g.known |= io.known;
        }
        if (a->perturb) {
            tide_perturb_state_t ps;
            tide_perturb_state_at(a->perturb, tide_clock_mono_ms() - a->start_mono_ms, &ps);
            if (ps.die) {
                /* A crash, not a shutdown: no goodbye; the ranks die with us (tide-exec). */
                tide_warn("--perturb: die");
                raise(SIGKILL);
            }
            set_speed(a, ps.speed);
            tide_perturb_apply(&ps, &g);
        }
        tm.gpu_util = g.gpu_util;
        tm.mem_used_bytes = g.mem_used_bytes;
        tm.mem_total_bytes = g.mem_total_bytes;
        tm.temperature_c = g.temperature_c;
        tm.power_w = g.power_w;
        tm.mem_bw_util = g.mem_bw_util;
        tm.sm_clock_mhz = g.sm_clock_mhz;
        tm.mem_clock_mhz = g.mem_clock_mhz;
        tm.throttle_reasons = g.throttle_reasons;
        tm.ecc_corrected = g.ecc_corrected;
        tm.ecc_uncorrected = g.ecc_uncorrected;
        tm.xid_count = g.xid_count;
        tm.last_xid = g.last_xid;
        tm.net_util = g.net_util;
        tm.storage_util = g.storage_util;
        tm.known = g.known;
    }
    n_progress = a->trainer ? tide_trainer_server_progress(a->trainer, (int64_t)(uv_hrtime() / 1000000),
                                                           progress, PROGRESS_MAX)
                            : 0;
    /* Task completions go out in batches, one per pool and heartbeat (docs/work-stealing.md). */
    if (a->trainer)
        tide_trainer_server_tasks_flush(a->trainer);
    tide_worker_core_heartbeat(a->core, &tm, progress, n_progress);
}

static void on_heartbeat(uv_timer_t *t)
{
    tide_worker_agent_t *a = t->data;

    send_heartbeat(a);
    if (a->n_held)
        release_held(a, false);
}

static void op_welcomed(void *ud, uint32_t interval_ms)
{
    tide_worker_agent_t *a = ud;

    uv_timer_stop(&a->welcome);
    tide_info("registered with %s as %s (heartbeat every %u ms)", SCHED(a), a->cfg->id,
              interval_ms);
    uv_timer_start(&a->heartbeat, on_heartbeat, interval_ms, interval_ms);
    if (a->flusher)
        tide_flusher_resend(a->flusher); /* copies that ended while no stream was up */
    if (a->trainer)
        tide_trainer_server_tasks_welcome(a->trainer); /* declarations, completions, steals */
}

static void op_end_stream(void *ud, const char *why)
{
    tide_worker_agent_t *a = ud;

    tide_warn("ending the stream to %s: %s", SCHED(a), why);
    if (a->call)
        tide_rpc_client_call_cancel(a->call); /* on_status(CANCELLED) follows from the loop */
}

/* ReleaseTasks / GiveTasks: the trainer socket holds the ranks' deques. */
static int op_tasks(void *ud, const Tide__V1__SchedulerMessage *msg)
{
    tide_worker_agent_t *a = ud;

    return a->trainer ? tide_trainer_server_tasks(a->trainer, msg) : -ENOENT;
}

static const tide_worker_core_ops_t core_ops = {
    .send = op_send,
    .spawn = op_spawn,
    .stop = op_stop,
    .forget = op_forget,
    .save_epoch = op_save_epoch,
    .log_request = op_log_request,
    .trainer_command = op_trainer_command,
    .flush = op_flush,
    .tasks = op_tasks,
    .forget_checkpoints = op_forget_checkpoints,
    .welcomed = op_welcomed,
    .end_stream = op_end_stream,
};

static void on_attach(void *ud, tide_trainer_conn_t *c, const tide_trainer_msg_t *m)
{
    tide_worker_agent_t *a = ud;

    if (a->mpi)
        tide_worker_mpi_on_attach(a->mpi, c, m);
    else
        tide_trainer_conn_close(c);
}

static void on_attach_exited(void *ud, tide_trainer_conn_t *c, int64_t status, int64_t signal)
{
    tide_worker_agent_t *a = ud;

    if (a->mpi)
        tide_worker_mpi_on_attach_exited(a->mpi, c, status, signal);
}

static void on_attach_closed(void *ud, tide_trainer_conn_t *c)
{
    tide_worker_agent_t *a = ud;

    if (a->mpi)
        tide_worker_mpi_on_attach_closed(a->mpi, c);
}

/* The task deques' messages (TasksDeclared, TasksDone, StealRequest, TasksReleased): only on a
 * welcomed stream; what cannot go now the deques send again after the next Welcome. */
static int on_trainer_send(void *ud, const Tide__V1__WorkerMessage *msg)
{
    tide_worker_agent_t *a = ud;

    return a->core ? tide_worker_core_send(a->core, msg) : -ENOTCONN;
}

static void restore_free(tide_worker_agent_t *a, restore_req_t *q)
{
    for (size_t i = 0; i < a->n_restores; i++) {
        if (a->restores[i] == q) {
            a->restores[i] = a->restores[--a->n_restores];
            break;
        }
    }
    for (size_t i = 0; i < q->n_sources; i++)
        free(q->sources[i]);
    free(q->sources);
    free(q->job_id);
    free(q->credential);
    free(q->fetch_error);
    free(q);
}

/* Answers the rank (docs/trainer-api.md, "Checkpoint tiers"). */
static void restore_reply(tide_worker_agent_t *a, restore_req_t *q, int rc, const tide_ckpt_found_t *found,
                          const char *tier, const char *why)
{
    tide_trainer_restore_skip_t skips[TIDE_CKPT_MAX_SKIPS];
    size_t n = found->n_skipped < TIDE_CKPT_MAX_SKIPS ? found->n_skipped : TIDE_CKPT_MAX_SKIPS;
    tide_buf_t out = TIDE_BUF_INIT;
    char *reason = NULL;

    for (size_t i = 0; i < n; i++) {
        const tide_ckpt_skip_t *k = &found->skipped[i];
        skips[i] = (tide_trainer_restore_skip_t){k->tier, k->step, k->reason};
        tide_warn("restore: skipped step %lld in %s: %s", (long long)k->step, k->tier, k->reason);
    }
    if (rc == 0) {
        tide_info("job %s rank %d restores step %lld from %s (%s)", found->meta.job,
                  found->meta.rank, (long long)found->meta.step, tier, found->path);
        tide_trainer_encode_restore(&out, found->meta.step, found->path, tier, NULL, skips, n);
    } else {
        reason = q->fetch_error ? tide_xasprintf("%s; %s", why, q->fetch_error) : tide_xstrdup(why);
        tide_info("restore: no checkpoint: %s", reason);
        tide_trainer_encode_restore(&out, -1, NULL, NULL, reason, skips, n);
    }
    if (a->trainer)
        tide_trainer_server_restore_reply(a->trainer, q->token, out.data, out.len);
    tide_buf_free(&out);
    free(reason);
    restore_free(a, q);
}

static void restore_search(restore_req_t *q);

/* A fetch from a peer ended: search the tiers again (a fetched copy lands in hot), or try the next peer. */
static void on_restore_fetched(void *ud, const tide_ckpt_mirror_result_t *res)
{
    restore_req_t *q = ud;
    tide_worker_agent_t *a = q->a;

    if (a->done || !a->tiers) {
        restore_free(a, q); /* the worker stops: nobody to answer */
        return;
    }
    if (res->rc == 0) {
        /* Searched again next; while that is still short of the resume step, the other peers are asked too. */
        tide_info("job %s rank %d: fetched step %lld from a peer into hot", q->job_id, q->rank,
                  res->meta ? (long long)res->meta->step : -1LL);
    } else {
        free(q->fetch_error);
        q->fetch_error = tide_xasprintf("peer %s: %s", q->sources[q->next_source - 1], res->error);
        tide_warn("job %s rank %d: no copy from %s", q->job_id, q->rank, q->fetch_error);
    }
    restore_search(q);
}

/* The local tiers answered: good enough (the resume step, or no bound), else fetch from the next peer. */
static void on_restore_found(void *ud, uint64_t token, int rc, const tide_ckpt_found_t *found,
                             const char *tier, const char *why)
{
    restore_req_t *q = ud;
    tide_worker_agent_t *a = q->a;
    bool current = rc == 0 && (q->resume_step < 0 || found->meta.step >= q->resume_step);

    (void)token;
    if (rc == -EACCES) {
        /* Found, but the rank's account cannot be given it: another peer's copy would fare no better. */
        tide_warn("job %s rank %d: %s", q->job_id, q->rank, why);
        restore_reply(a, q, rc, found, tier, why);
        return;
    }
    while (!current && q->next_source < q->n_sources && a->mirror_client && a->tiers && a->cfg->ckpt_hot &&
           a->cfg->ckpt_hot[0]) {
        const char *peer = q->sources[q->next_source++];
        /* A rank of another account owns HOT/JOB: the root worker never writes through it (a link there could
         * send the copy anywhere). Its fetch lands in HOT/mirror (the worker's own), where the search finds it
         * and hands it over from a directory of the worker's (ckpt_tiers.c, hand_over). */
        char *into = q->as_other ? tide_xasprintf("%s/mirror", a->cfg->ckpt_hot) : tide_xstrdup(a->cfg->ckpt_hot);
        int frc;
        tide_info("job %s rank %d: %s locally; fetching from %s", q->job_id, q->rank,
                  rc == 0 ? "only an older checkpoint" : "no checkpoint", peer);
        frc = tide_ckpt_mirror_fetch(a->mirror_client, peer, q->job_id, q->rank, q->resume_step, q->generation,
                                     q->credential[0] ? q->credential : NULL, into, on_restore_fetched, q);
        free(into);
        if (frc == 0)
            return;
    }
    restore_reply(a, q, rc, found, tier, why);
}

static void restore_search(restore_req_t *q)
{
    tide_ckpt_tiers_restore(q->a->tiers, q->job_id, q->generation, q->rank, q->resume_step,
                            q->as_other ? &q->as : NULL, q->token, on_restore_found, q);
}

static void on_trainer_restore(void *ud, uint64_t token, const char *job_id, int32_t generation,
                               int32_t rank, int64_t resume_step)
{
    tide_worker_agent_t *a = ud;
    const rank_peers_t *p = peers_find(a, job_id, generation, rank);
    restore_req_t *q = tide_xcalloc(1, sizeof(*q));

    tide_info("job %s rank %d asks where to restore from (resume step %lld)", job_id, rank,
              (long long)resume_step);
    if (resume_step < 0) {
        /* The job has no complete checkpoint: whatever a tier holds under its id is partial, or another job's
         * from before a scheduler reset. */
        tide_ckpt_found_t none;
        memset(&none, 0, sizeof(none));
        q->a = a;
        q->token = token;
        q->job_id = tide_xstrdup(job_id);
        q->credential = tide_xstrdup("");
        q->sources = tide_xcalloc(1, sizeof(*q->sources));
        a->restores = tide_xrealloc(a->restores, (a->n_restores + 1) * sizeof(*a->restores));
        a->restores[a->n_restores++] = q;
        restore_reply(a, q, -ENOENT, &none, NULL, "the job has no complete checkpoint yet");
        return;
    }
    q->a = a;
    q->token = token;
    q->job_id = tide_xstrdup(job_id);
    q->generation = generation;
    q->rank = rank;
    q->resume_step = resume_step;
    q->credential = tide_xstrdup(p ? p->credential : "");
    if (p && p->as_other) {
        q->as_other = true;
        q->as = p->as;
    }
    q->sources = tide_xcalloc((p ? p->n_sources : 0) + 1, sizeof(*q->sources));
    for (size_t i = 0; p && i < p->n_sources; i++)
        q->sources[q->n_sources++] = tide_xstrdup(p->sources[i]);
    a->restores = tide_xrealloc(a->restores, (a->n_restores + 1) * sizeof(*a->restores));
    a->restores[a->n_restores++] = q;
    restore_search(q);
}

static const tide_trainer_server_ops_t trainer_ops = {
    .checkpoint = on_trainer_checkpoint,
    .send = on_trainer_send,
    .attach = on_attach,
    .attach_exited = on_attach_exited,
    .attach_closed = on_attach_closed,
    .restore = on_trainer_restore,
};

/* --- logs --- */

static size_t logs_queued(void *ud)
{
    tide_worker_agent_t *a = ud;

    return a->call ? tide_rpc_client_call_queued_bytes(a->call) : 0;
}

static bool logs_rank_running(void *ud, const char *job_id, int32_t generation, int32_t rank)
{
    tide_worker_agent_t *a = ud;

    return tide_worker_core_rank_running(a->core, job_id, generation, rank);
}

static const tide_worker_logs_ops_t logs_ops = {
    .send = op_send,
    .queued = logs_queued,
    .rank_running = logs_rank_running,
};

/* --- ranks --- */

static void maybe_finish_shutdown(tide_worker_agent_t *a)
{
    if (tide_worker_core_shutting_down(a->core) && !a->finishing && !a->done &&
        tide_worker_core_running(a->core) == 0)
        finish_soon(a, 0);
}

/* The exit goes to the core (RankExited now, or in the next hello). */
static void report_exit(tide_worker_agent_t *a, uint64_t id, int64_t exit_status, int term_signal)
{
    if (a->trainer)
        tide_trainer_server_rank_remove(a->trainer, id);
    tide_worker_core_rank_exited(a->core, id, exit_status, term_signal);
    tide_worker_logs_kick(a->logs);
}

/* Reports the held exits whose completions went out (all of them when force: shutting down). */
static void release_held(tide_worker_agent_t *a, bool force)
{
    size_t i = 0;

    while (i < a->n_held) {
        held_exit_t h = a->held[i];
        if (!force && a->trainer && tide_trainer_server_rank_unsent(a->trainer, h.id)) {
            i++;
            continue;
        }
        a->held[i] = a->held[--a->n_held];
        report_exit(a, h.id, h.exit_status, h.term_signal);
    }
    if (a->n_held == 0) {
        free(a->held);
        a->held = NULL;
    }
}

static void on_rank_exit(uint64_t id, int64_t exit_status, int term_signal, void *ud)
{
    tide_worker_agent_t *a = ud;

    if (id & TIDE_WORKER_MPI_DAEMON_ID) {
        if (a->mpi)
            tide_worker_mpi_daemon_exited(a->mpi, id, exit_status, term_signal);
        return;
    }
    if (a->mpi)
        tide_worker_mpi_rank_gone(a->mpi, id);
    peers_drop(a, id);
    tide_ckpt_tiers_rank_ended(a->tiers, id);
    /* A rank that used the SDK: its last steps go out before its exit (a short run would otherwise
     * end between two heartbeats and show no progress at all), and so do its task completions
     * (the heartbeat flushes them), so the scheduler commits its last tasks before it hears of the
     * exit, which would make it run them again. */
    if (a->trainer && tide_trainer_server_rank_sdk(a->trainer, id))
        send_heartbeat(a);
    tide_info("rank process %llu exited: status %lld, signal %d", (unsigned long long)id,
              (long long)exit_status, term_signal);
    if (a->trainer && tide_trainer_server_rank_unsent(a->trainer, id) &&
        !tide_worker_core_shutting_down(a->core)) {
        /* No stream: the completions go with the next Welcome, the exit right after them. */
        tide_info("rank process %llu: its exit is reported once its task completions went out",
                  (unsigned long long)id);
        a->held = tide_xrealloc(a->held, (a->n_held + 1) * sizeof(*a->held));
        a->held[a->n_held++] = (held_exit_t){id, exit_status, term_signal};
        return;
    }
    report_exit(a, id, exit_status, term_signal);
    maybe_finish_shutdown(a);
}

/* A virtual MPI rank (no process of ours) ended: the same as a process exit. */
static void on_mpi_rank_exit(void *ud, uint64_t id, int64_t exit_status, int term_signal)
{
    on_rank_exit(id, exit_status, term_signal, ud);
}

/* --- the stream --- */

static void on_message(tide_rpc_client_call_t *call, const uint8_t *data, size_t len, void *ud)
{
    tide_worker_agent_t *a = ud;
    tide_error_t err;
    int rc;

    if (call != a->call || a->done)
        return;
    tide_error_clear(&err);
    rc = tide_worker_core_handle_bytes(a->core, data, len, &err);
    if (rc == 0 && err.text[0])
        tide_info("%s", err.text);
    else if (rc == -ESTALE)
        tide_debug("%s", err.text);
    else if (rc < 0)
        tide_warn("%s", err.text);
    /* A Welcome re-sent the held ranks' completions: their exits follow them now. */
    if (a->n_held && tide_worker_core_welcomed(a->core))
        release_held(a, false);
}

static void on_status(tide_rpc_client_call_t *call, tide_grpc_code_t code, const char *message,
                      void *ud)
{
    tide_worker_agent_t *a = ud;
    bool was_welcomed;
    tide_worker_next_t next;
    int64_t delay = 0;

    if (call != a->call || a->done)
        return;
    a->call = NULL;
    was_welcomed = tide_worker_core_welcomed(a->core);
    uv_timer_stop(&a->heartbeat);
    uv_timer_stop(&a->welcome);
    tide_worker_logs_reset(a->logs);
    next = tide_worker_core_stream_ended(a->core, code, message, &delay);
    switch (next) {
    case TIDE_WORKER_FATAL:
        tide_err("scheduler %s refused this worker: %s: %s", SCHED(a),
                 tide_grpc_code_name(code), message ? message : "");
        finish_soon(a, 1);
        break;
    case TIDE_WORKER_STAY_DOWN:
        tide_info("stream to %s ended: %s %s", SCHED(a), tide_grpc_code_name(code),
                  message ? message : "");
        if (a->finishing)
            finish_soon(a, a->exit_code);
        break;
    case TIDE_WORKER_RECONNECT: {
        const char *ended = SCHED(a);
        /* Several replicas: the next one may lead (a standby refuses with UNAVAILABLE). Each is tried at
         * once until a whole round failed; then the backoff applies, at most STANDBY_RETRY_MAX_MS when a
         * standby answered in that round (an election is under way or just over: look again soon). */
        if (a->schedulers.n > 1) {
            a->cur = (a->cur + 1) % a->schedulers.n;
            if (was_welcomed)
                a->misses = 0, a->standby_seen = false;
            a->standby_seen |= message && strstr(message, "is a standby") != NULL;
            if (++a->misses < a->schedulers.n) {
                delay = 0;
            } else {
                if (a->standby_seen && delay > STANDBY_RETRY_MAX_MS)
                    delay = STANDBY_RETRY_MAX_MS;
                a->misses = 0;
                a->standby_seen = false;
            }
        }
        tide_log(was_welcomed ? TIDE_LOG_WARN : TIDE_LOG_INFO,
                 "stream to %s ended: %s %s; reconnecting%s in %lld ms", ended, tide_grpc_code_name(code),
                 message ? message : "", a->schedulers.n > 1 ? " to the next replica" : "", (long long)delay);
        uv_timer_start(&a->reconnect, on_reconnect, (uint64_t)delay, 0);
        break;
    }
    }
}

static void on_client_state(tide_rpc_client_t *c, int status, const char *text, void *ud)
{
    tide_worker_agent_t *a = ud;

    if (c != a->client || a->done)
        return;
    if (status == 0)
        tide_debug("connected to %s", SCHED(a));
    else
        tide_debug("connection to %s: %s", SCHED(a), text ? text : uv_strerror(status));
}

static void on_welcome_timeout(uv_timer_t *t)
{
    tide_worker_agent_t *a = t->data;

    op_end_stream(a, "no Welcome in time");
}

static void connect_now(tide_worker_agent_t *a)
{
    tide_rpc_client_config_t cc;
    tide_rpc_client_call_cbs_t cbs = {on_message, on_status};
    tide_error_t err;
    int rc;

    tide_rpc_client_free(a->client); /* the previous attempt's, outside its callbacks */
    a->client = NULL;
    memset(&cc, 0, sizeof(cc));
    cc.hostport = SCHED(a);
    cc.token = a->cfg->token;
    cc.tls = a->cfg->tls_client; /* NULL: plaintext (a loopback scheduler or --insecure) */
    cc.on_state = on_client_state;
    cc.ud = a;
    tide_error_clear(&err);
    rc = tide_rpc_client_new(a->loop, &cc, &a->client, &err);
    if (rc == 0)
        rc = tide_rpc_client_call_start(a->client, CONNECT_PATH, 0, &cbs, a, &a->call);
    if (rc < 0) {
        int64_t delay = 0;
        tide_worker_next_t next;

        tide_warn("cannot connect to %s: %s", SCHED(a),
                  err.text[0] ? err.text : uv_strerror(rc));
        a->call = NULL;
        next = tide_worker_core_stream_ended(a->core, TIDE_GRPC_UNAVAILABLE, NULL, &delay);
        if (next == TIDE_WORKER_RECONNECT)
            uv_timer_start(&a->reconnect, on_reconnect, (uint64_t)delay, 0);
        return;
    }
    tide_debug("connecting to %s", SCHED(a));
    tide_worker_core_stream_opened(a->core);
    uv_timer_start(&a->welcome, on_welcome_timeout, a->welcome_timeout_ms, 0);
}

static void on_reconnect(uv_timer_t *t)
{
    tide_worker_agent_t *a = t->data;

    if (!a->done && !tide_worker_core_shutting_down(a->core))
        connect_now(a);
}

/* --- finishing --- */

static void on_finish_timer(uv_timer_t *t)
{
    tide_worker_agent_t *a = t->data;

    if (a->call && uv_now(a->loop) < a->finish_deadline) {
        uv_timer_start(&a->finish, on_finish_timer, DRAIN_POLL_MS, 0);
        return;
    }
    stop_io(a);
}

/* Ends with exit_code: lets the scheduler end a half-closed stream (bounded), then stops. Always
 * from a timer, so the transport is never freed inside its own callback. */
static void finish_soon(tide_worker_agent_t *a, int exit_code)
{
    if (a->done)
        return;
    if (!a->finishing) {
        a->finishing = true;
        a->exit_code = exit_code;
        a->finish_deadline = uv_now(a->loop) + (exit_code == 0 ? a->drain_timeout_ms : 0);
        if (a->call && exit_code == 0)
            tide_rpc_client_call_close_send(a->call);
    }
    uv_timer_start(&a->finish, on_finish_timer, 0, 0);
}

/* The agent's own memory, once its handles are closed. */
static void agent_release(tide_worker_agent_t *a)
{
    tide_worker_core_free(a->core);
    free(a->exec_helper);
    free(a->launcher_address);
    free(a->server_methods);
    free(a->held);
    tide_addr_list_free(&a->schedulers);
    free(a);
}

static void on_handle_closed(uv_handle_t *h)
{
    tide_worker_agent_t *a = h->data;

    if (--a->open_handles == 0 && a->free_requested)
        agent_release(a);
}

static void stop_io(tide_worker_agent_t *a)
{
    if (a->done)
        return;
    a->done = true;
    a->call = NULL; /* freeing the client fails it: that status is ignored */
    tide_rpc_client_free(a->client);
    a->client = NULL;
    if (a->slow_stopped && a->launcher)
        signal_ranks(a, SIGCONT); /* whatever survives us must not stay stopped */
    /* MPI first: it kills its daemons through the launcher and ends its calls on the server. */
    tide_worker_mpi_free(a->mpi);
    a->mpi = NULL;
    tide_rpc_server_free(a->launcher_server, NULL, NULL);
    a->launcher_server = NULL;
    tide_launcher_free(a->launcher);
    a->launcher = NULL;
    tide_worker_logs_free(a->logs);
    a->logs = NULL;
    tide_trainer_server_free(a->trainer);
    a->trainer = NULL;
    tide_flusher_free(a->flusher); /* a copy under way stops; the loop runs until it did */
    a->flusher = NULL;
    tide_ckpt_tiers_free(a->tiers); /* no callback any more; freed once its jobs ended */
    a->tiers = NULL;
    tide_ckpt_mirror_client_free(a->mirror_client); /* open transfers end (-ECANCELED) */
    a->mirror_client = NULL;
    tide_ckpt_mirror_server_free(a->mirror);
    a->mirror = NULL;
    if (a->cfg && a->cfg->ckpt_hot && a->cfg->ckpt_hot[0]) {
        /* An empty hot tier does not outlive the worker (on tmpfs it is a directory in memory nobody
         * would remove); anything still in it stays for the next worker's restores. */
        char *m = tide_xasprintf("%s/mirror", a->cfg->ckpt_hot);
        (void)rmdir(m);
        (void)rmdir(a->cfg->ckpt_hot);
        free(m);
    }
    while (a->n_restores > 0)
        restore_free(a, a->restores[0]); /* searches that will never answer */
    free(a->restores);
    a->restores = NULL;
    for (size_t i = 0; i < a->n_pending; i++)
        pending_free(&a->pending[i]);
    free(a->pending);
    a->pending = NULL;
    a->n_pending = 0;
    for (size_t i = 0; i < a->n_peers; i++)
        peers_clear(&a->peers[i]);
    free(a->peers);
    a->peers = NULL;
    a->n_peers = 0;
    uv_close((uv_handle_t *)&a->slow, on_handle_closed);
    uv_close((uv_handle_t *)&a->heartbeat, on_handle_closed);
    uv_close((uv_handle_t *)&a->reconnect, on_handle_closed);
    uv_close((uv_handle_t *)&a->welcome, on_handle_closed);
    uv_close((uv_handle_t *)&a->finish, on_handle_closed);
    uv_close((uv_handle_t *)&a->hot_sweep, on_handle_closed);
    if (a->signals) {
        uv_close((uv_handle_t *)&a->sigterm, on_handle_closed);
        uv_close((uv_handle_t *)&a->sigint, on_handle_closed);
    }
    tide_info("worker %s stops (exit status %d)", a->cfg->id, a->exit_code);
}

/* --- signals and the public API --- */

void tide_worker_agent_shutdown(tide_worker_agent_t *a, const char *reason, bool force)
{
    if (a->done)
        return;
    tide_info("shutting down (%s): stopping %zu rank(s)%s", reason,
              tide_worker_core_running(a->core), force ? " with SIGKILL" : "");
    uv_timer_stop(&a->reconnect);
    tide_worker_core_shutdown(a->core, reason, force);
    release_held(a, true); /* going down: their exits wait for no stream any more */
    maybe_finish_shutdown(a);
}

/* The first signal stops ranks with the grace; another one at least FORCE_AFTER_MS later kills
 * them. (Tools such as timeout(1) deliver one SIGTERM twice in a row: that is not a second
 * request.) */
static void on_signal(uv_signal_t *s, int signum)
{
    tide_worker_agent_t *a = s->data;
    uint64_t now = uv_now(a->loop);
    bool force = a->first_signal_ms && now - a->first_signal_ms >= FORCE_AFTER_MS;

    if (!a->first_signal_ms)
        a->first_signal_ms = now ? now : 1;
    else if (!force)
        return;
    tide_worker_agent_shutdown(a, signum == SIGINT ? "SIGINT" : "SIGTERM", force);
}

/* path if given, else `name` in exec_helper's directory. */
static char *sibling(const char *exec_helper, const char *path, const char *name)
{
    const char *slash = strrchr(exec_helper, '/');

    if (path)
        return tide_xstrdup(path);
    if (!slash)
        return tide_xstrdup(name);
    return tide_xasprintf("%.*s/%s", (int)(slash - exec_helper), exec_helper, name);
}

int tide_worker_agent_new(uv_loop_t *loop, const tide_worker_agent_config_t *cfg,
                          tide_worker_agent_t **out, tide_error_t *err)
{
    const tide_worker_config_t *wc = cfg->cfg;
    const tide_gpu_info_t *gi = tide_gpu_info(cfg->gpu);
    tide_worker_core_config_t cc;
    tide_launcher_config_t lc;
    tide_trainer_server_config_t tc;
    tide_trainer_server_t *trainer = NULL;
    tide_worker_mpi_config_t mc;
    tide_rpc_server_config_t sc;
    char *sock_path, *rank_exec, *shim;
    tide_worker_logs_config_t logc;
    tide_worker_reap_stats_t reaped;
    tide_worker_agent_t *a;
    uint64_t epoch = 0, boot = 0;
    int rc;

    rc = tide_worker_datadir_prepare(wc->data_dir, err);
    if (rc < 0)
        return rc;
    /* Before registering: nothing a previous worker started may still hold the GPU. */
    rc = tide_worker_records_reap(wc->data_dir, REAP_WAIT_MS, &reaped, err);
    if (rc < 0)
        return rc;
    if (reaped.killed || reaped.stale || reaped.invalid)
        tide_warn("previous worker's ranks: %u killed, %u already gone, %u unreadable records",
                  reaped.killed, reaped.stale, reaped.invalid);
    rc = tide_worker_epoch_load(wc->data_dir, &epoch, err);
    if (rc < 0)
        return rc;
    rc = tide_worker_boot_next(wc->data_dir, tide_clock_wall_ms(), &boot, err);
    if (rc < 0)
        return rc;
    rc = tide_worker_hot_dir_prepare(wc->ckpt_hot, err);
    if (rc < 0)
        return rc;

    rank_exec = sibling(cfg->exec_helper, cfg->rank_exec, "tide-rank-exec");
    shim = sibling(cfg->exec_helper, cfg->mpi_shim, "tide-mpi-shim");
    a = tide_xcalloc(1, sizeof(*a));
    if ((rc = tide_addr_list_parse(wc->scheduler, NULL, &a->schedulers, err)) < 0) {
        free(a);
        goto done;
    }
    sock_path = tide_xasprintf("%s/%s", wc->data_dir, AGENT_SOCK_NAME);
    memset(&tc, 0, sizeof(tc));
    tc.path = sock_path;
    tc.worker_id = wc->id;
    tc.peak_flops = wc->peak_flops > 0 ? wc->peak_flops : gi->peak_flops;
    rc = tide_trainer_server_new(loop, &tc, &trainer_ops, a, &trainer, err);
    free(sock_path);
    if (rc < 0) {
        tide_addr_list_free(&a->schedulers);
        free(a);
        goto done;
    }
    a->trainer = trainer;
    a->perturb = cfg->perturb;
    a->start_mono_ms = tide_clock_mono_ms();
    a->loop = loop;
    a->cfg = wc;
    a->exec_helper = tide_xstrdup(cfg->exec_helper);
    a->gpu = cfg->gpu;
    a->hostio = cfg->hostio;
    a->welcome_timeout_ms =
        cfg->welcome_timeout_ms ? cfg->welcome_timeout_ms : WELCOME_TIMEOUT_DEFAULT_MS;
    a->drain_timeout_ms = cfg->drain_timeout_ms ? cfg->drain_timeout_ms : DRAIN_TIMEOUT_DEFAULT_MS;

    memset(&lc, 0, sizeof(lc));
    lc.exec_helper = cfg->exec_helper;
    lc.data_dir = wc->data_dir;
    lc.worker_id = wc->id;
    lc.advertise = wc->advertise;
    lc.gpu_index = wc->gpu_index;
    lc.agent_sock = tide_trainer_server_path(trainer);
    lc.ckpt_hot = wc->ckpt_hot;
    lc.refuse_root_jobs = !wc->allow_root_jobs; /* LaunchRank.run_as (worker/run_as.h) */
    lc.node = wc->node;
    lc.on_exit = on_rank_exit;
    lc.ud = a;
    tide_launcher_new(loop, &lc, &a->launcher);

    memset(&mc, 0, sizeof(mc));
    mc.data_dir = wc->data_dir;
    mc.worker_id = wc->id;
    mc.rank_exec = rank_exec;
    mc.shim = shim;
    mc.launcher = a->launcher;
    mc.tls_ca = wc->tls_ca;
    mc.tls_cert = wc->tls_cert;
    mc.tls_key = wc->tls_key;
    mc.on_exit = on_mpi_rank_exit;
    mc.ud = a;
    tide_worker_mpi_new(loop, &mc, &a->mpi);
    /* The worker's own gRPC server: WorkerLauncher (MPI daemons) and WorkerCheckpoints (peers' hot mirrors,
     * kept under HOT/mirror; docs/fault-tolerance.md, "Checkpoint tiers"). */
    rc = 0;
    if (wc->ckpt_hot && wc->ckpt_hot[0] && wc->token && wc->token[0]) {
        /* Only with a token: the mirror serves checkpoints to, and takes them from, whoever holds it. */
        tide_ckpt_mirror_server_config_t msc;
        char *mdir = tide_xasprintf("%s/mirror", wc->ckpt_hot);
        memset(&msc, 0, sizeof(msc));
        msc.dir = mdir;
        msc.worker_id = wc->id;
        msc.token = wc->token;
        msc.keep = wc->ckpt_keep_hot;
        msc.min_free_pct = (uint32_t)wc->ckpt_mirror_min_free;
        rc = tide_ckpt_mirror_server_new(loop, &msc, &a->mirror, err);
        free(mdir);
        if (rc == 0) {
            tide_ckpt_mirror_client_config_t mcc;
            memset(&mcc, 0, sizeof(mcc));
            mcc.worker_id = wc->id;
            mcc.token = wc->token;
            mcc.timeout_ms = 300000; /* a stalled peer must not hold a restore past the SDK's wait */
            mcc.tls = wc->tls_client;
            tide_ckpt_mirror_client_new(loop, &mcc, &a->mirror_client);
            tide_ckpt_mirror_server_bind(a->mirror, a->mpi);
        }
    }
    memset(&sc, 0, sizeof(sc));
    if (a->mirror) {
        size_t nm = 0;
        a->server_methods = tide_ckpt_mirror_methods_merge(tide_worker_mpi_methods, tide_worker_mpi_methods_count, &nm);
        sc.methods = a->server_methods;
        sc.n_methods = nm;
    } else {
        sc.methods = tide_worker_mpi_methods;
        sc.n_methods = tide_worker_mpi_methods_count;
    }
    sc.ud = a->mpi;
    sc.tls = wc->tls_server; /* NULL: plaintext (loopback or --insecure, config.c) */
    if (rc == 0)
        rc = tide_rpc_server_new(loop, &sc, &a->launcher_server, err);
    if (rc == 0)
        rc = tide_rpc_server_listen(a->launcher_server, wc->listen, err);
    if (rc < 0) {
        tide_ckpt_mirror_client_free(a->mirror_client);
        tide_ckpt_mirror_server_free(a->mirror);
        free(a->server_methods);
        tide_worker_mpi_free(a->mpi);
        tide_rpc_server_free(a->launcher_server, NULL, NULL);
        tide_launcher_free(a->launcher);
        tide_trainer_server_free(a->trainer);
        free(a->exec_helper);
        free(a);
        goto done;
    }
    a->launcher_address = tide_xasprintf("%s:%d", wc->advertise,
                                         tide_rpc_server_port(a->launcher_server));

    memset(&cc, 0, sizeof(cc));
    cc.worker_id = wc->id;
    cc.node = wc->node;
    cc.gpu_index = wc->gpu_index;
    cc.device = gi->device;
    cc.peak_flops = wc->peak_flops > 0 ? wc->peak_flops : gi->peak_flops;
    cc.memory_bytes = gi->memory_bytes;
    cc.labels = wc->labels;
    cc.n_labels = wc->n_labels;
    cc.address = wc->advertise;
    cc.launcher_address = a->launcher_address;
    cc.agent_sock = tide_trainer_server_path(trainer);
    cc.version = TIDE_VERSION;
    cc.max_epoch_seen = epoch;
    cc.stop_grace_ms = wc->stop_grace_ms;
    cc.seed = cfg->seed;
    cc.boot_id = boot;
    tide_worker_core_new(&cc, &core_ops, a, &a->core);
    {
        tide_flusher_config_t fc = {wc->ckpt_durable, wc->data_dir, 0, wc->ckpt_hot};
        tide_flusher_ops_t fo = {flusher_send};
        tide_flusher_new(loop, &fc, &fo, a, &a->flusher);
    }
    {
        tide_ckpt_tiers_config_t kc = {wc->ckpt_hot,       wc->ckpt_warm,      wc->ckpt_durable, wc->ckpt_keep_hot,
                                       wc->ckpt_keep_warm, on_tier_saved, a};
        tide_ckpt_tiers_new(loop, &kc, &a->tiers);
    }

    memset(&logc, 0, sizeof(logc));
    logc.data_dir = wc->data_dir;
    logc.worker_id = wc->id;
    logc.queue_limit = cfg->log_queue_limit;
    logc.follow_poll_ms = cfg->log_follow_poll_ms;
    tide_worker_logs_new(loop, &logc, &logs_ops, a, &a->logs);

    uv_timer_init(loop, &a->heartbeat);
    uv_timer_init(loop, &a->reconnect);
    uv_timer_init(loop, &a->welcome);
    uv_timer_init(loop, &a->finish);
    uv_timer_init(loop, &a->slow);
    uv_timer_init(loop, &a->hot_sweep);
    a->heartbeat.data = a->reconnect.data = a->welcome.data = a->finish.data = a->slow.data = a;
    a->hot_sweep.data = a;
    a->speed = 1;
    a->open_handles = 6;
    if (wc->ckpt_hot && wc->ckpt_hot[0] && wc->ckpt_hot_ttl_ms > 0)
        uv_timer_start(&a->hot_sweep, on_hot_sweep, 0, HOT_SWEEP_EVERY_MS);
    if (cfg->handle_signals) {
        a->signals = true;
        uv_signal_init(loop, &a->sigterm);
        uv_signal_init(loop, &a->sigint);
        a->sigterm.data = a->sigint.data = a;
        uv_signal_start(&a->sigterm, on_signal, SIGTERM);
        uv_signal_start(&a->sigint, on_signal, SIGINT);
        a->open_handles += 2;
    }
    tide_info("worker %s (%s, %s) data dir %s, max epoch %llu, MPI launcher on %s", wc->id,
              gi->device, wc->node, wc->data_dir, (unsigned long long)epoch, a->launcher_address);
    if (wc->slurm) {
        /* what srun gave this task, as it registers (its slurm.* labels) */
        const char *job = "?", *task = "?";
        for (size_t i = 0; i < wc->n_labels; i++) {
            if (strcmp(wc->labels[i].key, "slurm.job_id") == 0)
                job = wc->labels[i].value;
            else if (strcmp(wc->labels[i].key, "slurm.procid") == 0)
                task = wc->labels[i].value;
        }
        tide_info("in Slurm job %s as task %s: GPU %d of node %s", job, task, (int)wc->gpu_index, wc->node);
    }
    connect_now(a);
    *out = a;
done:
    free(rank_exec);
    free(shim);
    return rc;
}

bool tide_worker_agent_done(const tide_worker_agent_t *a)
{
    return a->done;
}

int tide_worker_agent_exit_code(const tide_worker_agent_t *a)
{
    return a->exit_code;
}

const tide_worker_core_t *tide_worker_agent_core(const tide_worker_agent_t *a)
{
    return a->core;
}

void tide_worker_agent_free(tide_worker_agent_t *a)
{
    if (!a)
        return;
    stop_io(a);
    a->free_requested = true;
    if (a->open_handles == 0)
        agent_release(a);
}
