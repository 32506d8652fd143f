/* MPI jobs on this worker (mpi.h, docs/mpi.md). Invariants: an MPI rank entry exists from its
 * LaunchRank until the rank is gone (rank_gone); a virtual rank's exit is reported exactly once
 * (from its rank-exec's "exited" line or its connection closing, or at a stop before it attached);
 * a daemon runs only while a rank of its (job, generation) runs here, and its StartDaemon call ends
 * when it exits (cancelling the call kills it). Attaches and StartDaemon calls that arrive before
 * their LaunchRank wait for it, up to wait_ms. */
#include "mpi.h"

#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include <cjson/cJSON.h>

#include "buf.h"
#include "datadir.h"
#include "list.h"
#include "log.h"
#include "xmalloc.h"

#define WAIT_DEFAULT_MS 30000
#define WAITERS_MAX     64          /* attaches and StartDaemons waiting for their LaunchRank */
#define ARGV_MAX        512         /* StartDaemon argv: entries */
#define ARGV_BYTES_MAX  (64 * 1024) /* and bytes */
#define START_DAEMON_PATH "/tide.v1.WorkerLauncher/StartDaemon"

typedef struct mpi_rank {
    tide_list_t link; /* m->ranks */
    uint64_t id;
    Tide__V1__LaunchRank *launch; /* an owned copy */
    bool is_virtual;
    tide_trainer_conn_t *conn; /* the attached rank-exec */
    int32_t pid;               /* its pid (SO_PEERCRED) */
    bool exit_known, reported;
    bool exit_pending; /* reported from the timer, never from inside a callback of ours */
    int64_t exit_status;
    int term_signal;
    uint64_t term_at, kill_at; /* loop ms of a pending SIGTERM / SIGKILL; 0: none */
} mpi_rank_t;

struct daemon {
    tide_list_t link; /* m->daemons */
    uint64_t id;
    char *job_id;
    int32_t generation;
    tide_rpc_call_t *call; /* NULL once the call closed */
    bool running;
    uint64_t kill_at; /* loop ms of a deferred stop; 0: none */
};

/* An attach or StartDaemon that waits for its LaunchRank. */
typedef struct waiter {
    tide_list_t link; /* m->waiting */
    uint64_t deadline;
    tide_trainer_conn_t *conn;          /* attach */
    tide_trainer_msg_t attach;          /* its fields (strings copied below) */
    char *job_id, *credential;
    tide_rpc_call_t *call;              /* StartDaemon */
    Tide__V1__StartDaemonRequest *req;
} waiter_t;

struct tide_worker_mpi {
    uv_loop_t *loop;
    char *data_dir, *worker_id, *rank_exec, *shim, *mpirun;
    char *tls_env[3]; /* "TIDE_TLS_CA=FILE" ... for mpirun's shims; NULL where not set */
    size_t n_tls_env;
    uint32_t wait_ms;
    tide_launcher_t *launcher;
    tide_worker_mpi_exit_cb on_exit;
    void *ud;
    tide_list_t ranks, daemons, waiting;
    size_t n_waiting;
    uint64_t next_daemon;
    uv_timer_t timer; /* waiters' deadlines and virtual ranks' stop signals */
    bool freeing;
};

static void rearm(tide_worker_mpi_t *m);
typedef struct daemon daemon_t;
static void daemon_kill(tide_worker_mpi_t *m, daemon_t *d);

void tide_worker_mpi_new(uv_loop_t *loop, const tide_worker_mpi_config_t *cfg,
                         tide_worker_mpi_t **out)
{
    tide_worker_mpi_t *m = tide_xcalloc(1, sizeof(*m));
    const char *env_mpirun = getenv("TIDE_MPIRUN");

    m->loop = loop;
    m->data_dir = tide_xstrdup(cfg->data_dir);
    m->worker_id = tide_xstrdup(cfg->worker_id ? cfg->worker_id : "");
    m->rank_exec = tide_xstrdup(cfg->rank_exec);
    m->shim = tide_xstrdup(cfg->shim);
    m->mpirun = tide_xstrdup(cfg->mpirun         ? cfg->mpirun
                             : env_mpirun && *env_mpirun ? env_mpirun
                                                         : "mpirun");
    m->wait_ms = cfg->wait_ms ? cfg->wait_ms : WAIT_DEFAULT_MS;
    if (cfg->tls_ca)
        m->tls_env[m->n_tls_env++] = tide_xasprintf("TIDE_TLS_CA=%s", cfg->tls_ca);
    if (cfg->tls_cert && cfg->tls_key) {
        m->tls_env[m->n_tls_env++] = tide_xasprintf("TIDE_TLS_CERT=%s", cfg->tls_cert);
        m->tls_env[m->n_tls_env++] = tide_xasprintf("TIDE_TLS_KEY=%s", cfg->tls_key);
    }
    m->launcher = cfg->launcher;
    m->on_exit = cfg->on_exit;
    m->ud = cfg->ud;
    tide_list_init(&m->ranks);
    tide_list_init(&m->daemons);
    tide_list_init(&m->waiting);
    uv_timer_init(loop, &m->timer);
    m->timer.data = m;
    *out = m;
}

/* --- helpers --- */

static Tide__V1__LaunchRank *launch_copy(const Tide__V1__LaunchRank *l)
{
    size_t n = tide__v1__launch_rank__get_packed_size(l);
    uint8_t *buf = tide_xmalloc(n ? n : 1);
    Tide__V1__LaunchRank *c;

    tide__v1__launch_rank__pack(l, buf);
    c = tide__v1__launch_rank__unpack(NULL, n, buf);
    free(buf);
    if (!c)
        abort(); /* our own bytes: cannot fail but on OOM */
    return c;
}

static mpi_rank_t *find_id(const tide_worker_mpi_t *m, uint64_t id)
{
    tide_list_t *pos;

    tide_list_for_each(pos, &m->ranks) {
        mpi_rank_t *r = tide_list_entry(pos, mpi_rank_t, link);
        if (r->id == id)
            return r;
    }
    return NULL;
}

static mpi_rank_t *find_rank(const tide_worker_mpi_t *m, const char *job_id, int64_t generation,
                             int64_t rank)
{
    tide_list_t *pos;

    tide_list_for_each(pos, &m->ranks) {
        mpi_rank_t *r = tide_list_entry(pos, mpi_rank_t, link);
        if (r->launch->generation == generation && (rank < 0 || r->launch->rank == rank) &&
            strcmp(r->launch->job_id, job_id) == 0)
            return r;
    }
    return NULL;
}

/* The newest generation of job_id running here, or -1. */
static int64_t newest_generation(const tide_worker_mpi_t *m, const char *job_id)
{
    int64_t best = -1;
    tide_list_t *pos;

    tide_list_for_each(pos, &m->ranks) {
        mpi_rank_t *r = tide_list_entry(pos, mpi_rank_t, link);
        if (r->launch->generation > best && strcmp(r->launch->job_id, job_id) == 0)
            best = r->launch->generation;
    }
    return best;
}

/* Constant-time comparison of two credentials. */
static bool cred_equal(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char d = la != lb || la == 0;

    for (size_t i = 0; i < la && i < lb; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

static bool host_is_loopback(const char *hostport)
{
    return strncmp(hostport, "127.", 4) == 0 || strncmp(hostport, "[::1]", 5) == 0 ||
           strncmp(hostport, "localhost:", 10) == 0;
}

/* The mpirun binary as found in PATH (or the absolute path given), or NULL. */
static char *which(const char *prog)
{
    const char *path = getenv("PATH");
    char *copy, *save = NULL, *dir, *found = NULL;

    if (strchr(prog, '/'))
        return access(prog, X_OK) == 0 ? tide_xstrdup(prog) : NULL;
    copy = tide_xstrdup(path && *path ? path : "/usr/local/bin:/usr/bin:/bin");
    for (dir = strtok_r(copy, ":", &save); dir && !found; dir = strtok_r(NULL, ":", &save)) {
        char *p = tide_xasprintf("%s/%s", dir, prog);
        if (access(p, X_OK) == 0)
            found = p;
        else
            free(p);
    }
    free(copy);
    return found;
}

/* A TMPDIR of its own for mpirun and for each node's daemon: simulated nodes on one machine would
 * otherwise share Open MPI's session directory and trip over each other. Created on demand; owned
 * by the job's account when the MPI runtime runs as one (ra), with DATA/mpi traversable. */
static char *session_dir(const tide_worker_mpi_t *m, const Tide__V1__LaunchRank *l,
                         const char *what, const tide_run_as_t *ra)
{
    char *base = tide_xasprintf("%s/mpi", m->data_dir);
    char *dir = tide_xasprintf("%s/%s.g%d.%s", base, l->job_id, l->generation, what);

    if (mkdir(base, 0700) < 0 && errno != EEXIST)
        tide_warn("mkdir %s: %s", base, strerror(errno));
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        tide_warn("mkdir %s: %s", dir, strerror(errno));
    if (ra && ra->do_switch) {
        if (chmod(base, 0711) < 0)
            tide_warn("chmod 0711 %s: %s", base, strerror(errno));
        if (lchown(dir, ra->account.uid, ra->account.gid) < 0)
            tide_warn("chown %s to %s: %s", dir, ra->account.name, strerror(errno));
    }
    free(base);
    return dir;
}

/* --- rank 0: mpirun --- */

static int spawn_mpirun(tide_worker_mpi_t *m, uint64_t id, const Tide__V1__LaunchRank *l,
                        const tide_run_as_t *ra, tide_worker_spawned_t *out, tide_error_t *err)
{
    tide_launch_override_t ov;
    tide_buf_t hosts = TIDE_BUF_INIT, launchers = TIDE_BUF_INIT;
    char **argv = NULL, *mpirun = which(m->mpirun), world[16], nhosts[16];
    char *env[6] = {NULL, NULL, NULL, NULL, NULL, NULL}, *tmp;
    bool loopback = true;
    size_t n = 0, i;
    int rc;

    if (!mpirun) {
        tide_errprintf(err, "--launcher mpi: %s not found in PATH (install Open MPI: apt-get install "
                            "openmpi-bin, or set TIDE_MPIRUN)", m->mpirun);
        return -ENOENT;
    }
    if (l->n_mpi_hosts == 0) {
        tide_errprintf(err, "--launcher mpi: the LaunchRank lists no MPI hosts");
        free(mpirun);
        return -EINVAL;
    }
    for (i = 0; i < l->n_mpi_hosts; i++) {
        const Tide__V1__MpiHost *h = l->mpi_hosts[i];
        tide_buf_printf(&hosts, "%s%s:%d", i ? "," : "", h->node, h->slots);
        tide_buf_printf(&launchers, "%s%s=%s", i ? "," : "", h->node, h->launcher_address);
        loopback = loopback && host_is_loopback(h->launcher_address);
    }
    snprintf(world, sizeof(world), "%d", l->world_size);
    snprintf(nhosts, sizeof(nhosts), "%zu", l->n_mpi_hosts);
    argv = tide_xcalloc(48 + l->n_command, sizeof(char *));
    argv[n++] = mpirun;
    /* mpirun, its daemons and so the ranks run as the job's account when it has one (the launcher
     * switches them, docs/worker.md "Running ranks as their user"): Open MPI's PMIx server takes
     * only clients of its own uid, so the runtime and the ranks share it. */
    if (ra->do_switch ? ra->account.uid == 0 : geteuid() == 0)
        argv[n++] = "--allow-run-as-root";
    argv[n++] = "-n";
    argv[n++] = world;
    argv[n++] = "-H";
    argv[n++] = (char *)tide_buf_cstr(&hosts);
    /* MPI rank r is tide rank r: hosts in rank order, slots filled in order. */
    argv[n++] = "--map-by";
    argv[n++] = "slot";
    argv[n++] = "--rank-by";
    argv[n++] = "slot";
    argv[n++] = "--bind-to";
    argv[n++] = "none";
    argv[n++] = "--stdin";
    argv[n++] = "none";
    if (l->workdir[0]) {
        argv[n++] = "-wdir";
        argv[n++] = l->workdir;
    }
    /* Every daemon through the shim, from mpirun itself (no tree spawn), attached to the shim's
     * call (no --daemonize), all at once (mpirun starts a new shim only when one ended). */
    argv[n++] = "--mca";
    argv[n++] = "plm_rsh_agent";
    argv[n++] = m->shim;
    argv[n++] = "--mca";
    argv[n++] = "plm_rsh_no_tree_spawn";
    argv[n++] = "1";
    argv[n++] = "--mca";
    argv[n++] = "orte_leave_session_attached";
    argv[n++] = "1";
    argv[n++] = "--mca";
    argv[n++] = "plm_rsh_num_concurrent";
    argv[n++] = nhosts;
    if (loopback) {
        /* Simulated nodes on one machine: shared memory between "hosts" that share a real host
         * name crashes, so use TCP on loopback (docs/mpi.md). */
        argv[n++] = "--mca";
        argv[n++] = "btl";
        argv[n++] = "self,tcp";
        argv[n++] = "--mca";
        argv[n++] = "btl_tcp_if_include";
        argv[n++] = "lo";
        argv[n++] = "--mca";
        argv[n++] = "oob_tcp_if_include";
        argv[n++] = "lo";
        /* ... and the ranks of all "nodes" share the machine's cores: do not busy-poll them. */
        argv[n++] = "--mca";
        argv[n++] = "mpi_yield_when_idle";
        argv[n++] = "1";
    }
    argv[n++] = m->rank_exec;
    argv[n++] = "--";
    for (i = 0; i < l->n_command; i++)
        argv[n++] = l->command[i];
    tmp = session_dir(m, l, "mpirun", ra);
    env[0] = tide_xasprintf("TIDE_MPI_LAUNCHERS=%s", tide_buf_cstr(&launchers));
    env[1] = tide_xasprintf("TIDE_MPI_CREDENTIAL=%s", l->mpi_credential);
    env[2] = tide_xasprintf("TMPDIR=%s", tmp);
    for (i = 0; i < m->n_tls_env; i++) /* the shim's StartDaemon calls (mpi_shim.c) */
        env[3 + i] = m->tls_env[i];
    free(tmp);
    memset(&ov, 0, sizeof(ov));
    ov.command = argv;
    ov.n_command = n;
    ov.env = (const char *const *)env;
    ov.n_env = 3 + m->n_tls_env;
    ov.record_rank = l->rank;
    ov.mpi_runtime = true;
    rc = tide_launcher_spawn_ex(m->launcher, id, l, &ov, out, err);
    free(env[0]);
    free(env[1]);
    free(env[2]);
    free(argv);
    free(mpirun);
    tide_buf_free(&hosts);
    tide_buf_free(&launchers);
    return rc;
}

/* --- waiters --- */

static void waiter_free(waiter_t *w, tide_worker_mpi_t *m)
{
    tide_list_remove(&w->link);
    m->n_waiting--;
    free(w->job_id);
    free(w->credential);
    if (w->req)
        tide__v1__start_daemon_request__free_unpacked(w->req, NULL);
    free(w);
}

static void attach_now(tide_worker_mpi_t *m, tide_trainer_conn_t *c, mpi_rank_t *r,
                       const char *credential);
static void start_daemon_now(tide_worker_mpi_t *m, tide_rpc_call_t *call,
                             const Tide__V1__StartDaemonRequest *req, mpi_rank_t *r);

static void attach_refuse(tide_trainer_conn_t *c, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void attach_refuse(tide_trainer_conn_t *c, const char *code, const char *fmt, ...)
{
    cJSON *o = cJSON_CreateObject();
    char msg[256], *line;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    tide_warn("tide-rank-exec attach refused: %s", msg);
    cJSON_AddStringToObject(o, "op", "error");
    cJSON_AddStringToObject(o, "code", code);
    cJSON_AddStringToObject(o, "message", msg);
    cJSON_AddStringToObject(o, "ref", "attach");
    line = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (line) {
        tide_buf_t b = TIDE_BUF_INIT;
        tide_buf_append_str(&b, line);
        tide_buf_append(&b, "\n", 1);
        tide_trainer_conn_send(c, b.data, b.len);
        tide_buf_free(&b);
        free(line);
    }
}

/* A LaunchRank arrived: serve the waiters it unblocks. */
static void serve_waiters(tide_worker_mpi_t *m)
{
    tide_list_t *pos, *tmp;

    tide_list_for_each_safe(pos, tmp, &m->waiting) {
        waiter_t *w = tide_list_entry(pos, waiter_t, link);
        mpi_rank_t *r;
        if (w->conn) {
            r = find_rank(m, w->job_id, w->attach.generation, w->attach.rank);
            if (r) {
                tide_trainer_conn_t *c = w->conn;
                char *cred = w->credential;
                w->credential = NULL;
                tide_trainer_conn_set_data(c, NULL);
                waiter_free(w, m);
                attach_now(m, c, r, cred);
                free(cred);
            }
        } else {
            r = find_rank(m, w->req->job_id, w->req->generation, -1);
            if (r) {
                tide_rpc_call_t *call = w->call;
                Tide__V1__StartDaemonRequest *req = w->req;
                w->req = NULL;
                tide_rpc_call_set_data(call, NULL);
                waiter_free(w, m);
                start_daemon_now(m, call, req, r);
                tide__v1__start_daemon_request__free_unpacked(req, NULL);
            }
        }
    }
}

/* --- virtual ranks --- */

/* Queues the exit of virtual rank r: the timer reports it, so the core never hears of it from
 * inside a call that is still using r (an attach, a stop, a spawn). */
static void report_exit(tide_worker_mpi_t *m, mpi_rank_t *r)
{
    if (r->reported || !r->is_virtual)
        return;
    r->reported = true;
    r->exit_pending = true;
    r->term_at = r->kill_at = 0;
    rearm(m);
}

static void send_signal_line(mpi_rank_t *r, int sig)
{
    char line[48];
    int n = snprintf(line, sizeof(line), "{\"op\":\"signal\",\"signal\":%d}\n", sig);

    if (r->conn)
        tide_trainer_conn_send(r->conn, line, (size_t)n);
}

void tide_worker_mpi_signal_all(tide_worker_mpi_t *m, int sig)
{
    tide_list_t *pos;

    tide_list_for_each(pos, &m->ranks) {
        mpi_rank_t *r = tide_list_entry(pos, mpi_rank_t, link);
        if (r->conn && !r->exit_known) /* attached: rank 0 too (mpirun's own rank-exec) */
            send_signal_line(r, sig);
    }
}

size_t tide_worker_mpi_pids(const tide_worker_mpi_t *m, int32_t *out, size_t max)
{
    const tide_list_t *pos;
    size_t n = 0;

    tide_list_for_each(pos, &m->ranks) {
        const mpi_rank_t *r = tide_list_entry(pos, mpi_rank_t, link);
        if (r->conn && r->pid > 0 && !r->exit_known && n < max)
            out[n++] = r->pid;
    }
    return n;
}

static void on_timer(uv_timer_t *t)
{
    tide_worker_mpi_t *m = t->data;
    uint64_t now = uv_now(m->loop);
    tide_list_t *pos, *tmp;

    tide_list_for_each_safe(pos, tmp, &m->waiting) {
        waiter_t *w = tide_list_entry(pos, waiter_t, link);
        if (now < w->deadline)
            continue;
        if (w->conn) {
            tide_trainer_conn_t *c = w->conn;
            char *job = w->job_id;
            long long gen = (long long)w->attach.generation, rank = (long long)w->attach.rank;
            /* Unlink first: refusing may close c, which looks for its waiter. */
            w->job_id = NULL;
            tide_trainer_conn_set_data(c, NULL);
            waiter_free(w, m);
            attach_refuse(c, "unknown_rank", "job %s generation %lld rank %lld does not run on worker %s",
                          job, gen, rank, m->worker_id);
            tide_trainer_conn_close(c);
            free(job);
        } else {
            char msg[256];
            snprintf(msg, sizeof(msg), "job %s generation %d runs no rank on worker %s",
                     w->req->job_id, w->req->generation, m->worker_id);
            tide_warn("StartDaemon from %s refused: %s", tide_rpc_call_peer(w->call), msg);
            tide_rpc_call_set_data(w->call, NULL);
            tide_rpc_call_finish(w->call, TIDE_GRPC_FAILED_PRECONDITION, msg);
            waiter_free(w, m);
        }
    }
    tide_list_for_each_safe(pos, tmp, &m->daemons) {
        daemon_t *d = tide_list_entry(pos, daemon_t, link);
        if (d->kill_at && now >= d->kill_at) {
            d->kill_at = 0;
            daemon_kill(m, d);
        }
    }
    tide_list_for_each_safe(pos, tmp, &m->ranks) {
        mpi_rank_t *r = tide_list_entry(pos, mpi_rank_t, link);
        if (r->exit_pending) {
            r->exit_pending = false;
            if (m->on_exit)
                m->on_exit(m->ud, r->id, r->exit_status, r->term_signal); /* may free r */
            continue;
        }
        if (r->term_at && now >= r->term_at) {
            r->term_at = 0;
            send_signal_line(r, SIGTERM);
            send_signal_line(r, SIGCONT); /* a rank stopped by a `slow` perturbation must see it */
        }
        if (r->kill_at && now >= r->kill_at) {
            r->kill_at = 0;
            if (r->pid > 0)
                kill(r->pid, SIGKILL); /* the rank dies with it (PR_SET_PDEATHSIG) */
        }
    }
    rearm(m);
}

static void rearm(tide_worker_mpi_t *m)
{
    uint64_t next = UINT64_MAX, now = uv_now(m->loop);
    tide_list_t *pos;

    if (m->freeing)
        return;
    tide_list_for_each(pos, &m->waiting) {
        waiter_t *w = tide_list_entry(pos, waiter_t, link);
        if (w->deadline < next)
            next = w->deadline;
    }
    tide_list_for_each(pos, &m->daemons) {
        daemon_t *d = tide_list_entry(pos, daemon_t, link);
        if (d->kill_at && d->kill_at < next)
            next = d->kill_at;
    }
    tide_list_for_each(pos, &m->ranks) {
        mpi_rank_t *r = tide_list_entry(pos, mpi_rank_t, link);
        if (r->exit_pending)
            next = now;
        if (r->term_at && r->term_at < next)
            next = r->term_at;
        if (r->kill_at && r->kill_at < next)
            next = r->kill_at;
    }
    if (next == UINT64_MAX)
        uv_timer_stop(&m->timer);
    else
        uv_timer_start(&m->timer, on_timer, next > now ? next - now : 0, 0);
}

int tide_worker_mpi_spawn(tide_worker_mpi_t *m, uint64_t id, const Tide__V1__LaunchRank *launch,
                          tide_worker_spawned_t *out, tide_error_t *err)
{
    mpi_rank_t *r;
    tide_run_as_t ra;
    int rc = 0;

    if (!launch->mpi_credential[0]) {
        tide_errprintf(err, "--launcher mpi: the LaunchRank carries no credential");
        return -EINVAL;
    }
    /* The account rules refuse a virtual rank here too, before its rank-exec can attach; for an
     * accepted one the worker's socket and the rank's log become the account's. */
    rc = tide_launcher_run_as(m->launcher, launch, &ra, err);
    if (rc < 0)
        return rc;
    if (launch->rank == 0) {
        rc = spawn_mpirun(m, id, launch, &ra, out, err);
        tide_run_as_clear(&ra);
        if (rc < 0)
            return rc;
    } else {
        tide_run_as_clear(&ra);
        out->pid = 0;
        out->master_port = launch->master_port;
    }
    r = tide_xcalloc(1, sizeof(*r));
    r->id = id;
    r->launch = launch_copy(launch);
    r->is_virtual = launch->rank != 0;
    r->pid = -1;
    tide_list_push_back(&m->ranks, &r->link);
    serve_waiters(m);
    rearm(m);
    return 0;
}

bool tide_worker_mpi_is_virtual(const tide_worker_mpi_t *m, uint64_t id)
{
    const mpi_rank_t *r = find_id(m, id);

    return r && r->is_virtual;
}

int tide_worker_mpi_stop(tide_worker_mpi_t *m, uint64_t id, uint32_t term_after_ms,
                         uint32_t grace_ms)
{
    mpi_rank_t *r = find_id(m, id);
    uint64_t now = uv_now(m->loop);

    if (!r || !r->is_virtual)
        return -ENOENT;
    if (r->reported)
        return 0;
    if (!r->conn) {
        /* Nothing runs yet: the rank is over now. */
        r->exit_status = 0;
        r->term_signal = SIGTERM;
        report_exit(m, r);
        return 0;
    }
    if (grace_ms == 0) {
        if (r->pid > 0)
            kill(r->pid, SIGKILL);
        return 0;
    }
    if (term_after_ms == 0) {
        send_signal_line(r, SIGTERM);
        send_signal_line(r, SIGCONT); /* a rank stopped by a `slow` perturbation must see it */
        r->term_at = 0;
    } else if (!r->term_at && !r->kill_at) {
        r->term_at = now + term_after_ms;
    }
    if (!r->kill_at || now + term_after_ms + grace_ms < r->kill_at)
        r->kill_at = now + term_after_ms + grace_ms;
    rearm(m);
    return 0;
}

#define DAEMON_KILL_GRACE_MS 2000

/* SIGTERM, then SIGKILL: orted tears its ranks down on SIGTERM (their rank-execs also lose their
 * workers' sockets when those ranks stop). */
static void daemon_kill(tide_worker_mpi_t *m, daemon_t *d)
{
    if (d->running)
        tide_launcher_stop(m->launcher, d->id, m->freeing ? 0 : DAEMON_KILL_GRACE_MS);
}

void tide_worker_mpi_stop_daemons(tide_worker_mpi_t *m, uint64_t id, uint32_t after_ms)
{
    mpi_rank_t *r = find_id(m, id);
    uint64_t at = uv_now(m->loop) + after_ms;
    tide_list_t *pos;

    if (!r)
        return;
    tide_list_for_each(pos, &m->daemons) {
        daemon_t *d = tide_list_entry(pos, daemon_t, link);
        if (d->generation != r->launch->generation || strcmp(d->job_id, r->launch->job_id) != 0)
            continue;
        if (after_ms == 0)
            daemon_kill(m, d);
        else if (!d->kill_at || at < d->kill_at)
            d->kill_at = at;
    }
    rearm(m);
}

void tide_worker_mpi_rank_gone(tide_worker_mpi_t *m, uint64_t id)
{
    mpi_rank_t *r = find_id(m, id);

    if (!r)
        return;
    if (r->conn) {
        tide_trainer_conn_t *c = r->conn;
        r->conn = NULL;
        tide_trainer_conn_set_data(c, NULL);
        tide_trainer_conn_close(c); /* its rank-exec kills the rank */
    }
    tide_list_remove(&r->link);
    tide__v1__launch_rank__free_unpacked(r->launch, NULL);
    free(r);
    rearm(m);
}

/* --- attach (tide-rank-exec) --- */

static void attach_now(tide_worker_mpi_t *m, tide_trainer_conn_t *c, mpi_rank_t *r,
                       const char *credential)
{
    cJSON *o, *env;
    char **kv, *log, *line;
    size_t n;
    tide_buf_t b = TIDE_BUF_INIT;
    tide_error_t err;

    if (!cred_equal(credential, r->launch->mpi_credential)) {
        attach_refuse(c, "bad_credential", "wrong credential for job %s generation %d",
                      r->launch->job_id, r->launch->generation);
        tide_trainer_conn_close(c);
        return;
    }
    if (r->conn) {
        attach_refuse(c, "bad_field", "job %s rank %d is already attached", r->launch->job_id,
                      r->launch->rank);
        tide_trainer_conn_close(c);
        return;
    }
    if (r->reported) {
        attach_refuse(c, "unknown_rank", "job %s rank %d was stopped", r->launch->job_id,
                      r->launch->rank);
        tide_trainer_conn_close(c);
        return;
    }
    r->conn = c;
    r->pid = tide_trainer_conn_pid(c);
    tide_trainer_conn_set_data(c, r);
    o = cJSON_CreateObject();
    env = cJSON_CreateObject();
    kv = tide_launcher_rank_env(m->launcher, r->launch, r->launch->master_port, &n);
    for (size_t i = 0; i < n; i++) {
        char *eq = strchr(kv[i], '=');
        if (!eq)
            continue;
        *eq = '\0';
        cJSON_AddStringToObject(env, kv[i], eq + 1);
        *eq = '=';
    }
    tide_launcher_env_free(kv, n);
    log = tide_worker_log_path(m->data_dir, r->launch->job_id, r->launch->generation,
                               r->launch->rank);
    /* The rank's log lives where the launcher would put it; rank-exec only appends to it. */
    if (tide_worker_log_dir_make(m->data_dir, r->launch->job_id, &err) < 0)
        tide_warn("%s", err.text);
    cJSON_AddStringToObject(o, "op", "attached");
    cJSON_AddStringToObject(o, "log", log);
    cJSON_AddItemToObject(o, "env", env);
    line = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    tide_buf_append_str(&b, line);
    tide_buf_append(&b, "\n", 1);
    tide_trainer_conn_send(c, b.data, b.len);
    tide_info("job %s rank %d attached (tide-rank-exec pid %d)", r->launch->job_id,
              r->launch->rank, r->pid);
    tide_buf_free(&b);
    free(line);
    free(log);
}

void tide_worker_mpi_on_attach(void *ud, tide_trainer_conn_t *c, const tide_trainer_msg_t *msg)
{
    tide_worker_mpi_t *m = ud;
    mpi_rank_t *r = find_rank(m, msg->job, msg->generation, msg->rank);
    waiter_t *w;

    if (r) {
        attach_now(m, c, r, msg->credential);
        return;
    }
    if (newest_generation(m, msg->job) > msg->generation) {
        attach_refuse(c, "bad_credential", "job %.64s generation %lld is over: its credential expired",
                      msg->job, (long long)msg->generation);
        tide_trainer_conn_close(c);
        return;
    }
    /* Its LaunchRank may still be on the way (the scheduler starts rank 0 first). */
    if (m->n_waiting >= WAITERS_MAX) {
        attach_refuse(c, "unknown_rank", "job %.64s rank %lld does not run on worker %s", msg->job,
                      (long long)msg->rank, m->worker_id);
        tide_trainer_conn_close(c);
        return;
    }
    w = tide_xcalloc(1, sizeof(*w));
    w->deadline = uv_now(m->loop) + m->wait_ms;
    w->conn = c;
    w->attach = *msg;
    w->job_id = tide_xstrdup(msg->job);
    w->credential = tide_xstrdup(msg->credential ? msg->credential : "");
    w->attach.job = w->attach.credential = w->attach.path = w->attach.sha256 = w->attach.sdk = NULL;
    w->attach.json_ = NULL;
    tide_trainer_conn_set_data(c, w);
    tide_list_push_back(&m->waiting, &w->link);
    m->n_waiting++;
    rearm(m);
}

void tide_worker_mpi_on_attach_exited(void *ud, tide_trainer_conn_t *c, int64_t status,
                                      int64_t signal)
{
    tide_worker_mpi_t *m = ud;
    mpi_rank_t *r = NULL;
    tide_list_t *pos;

    tide_list_for_each(pos, &m->ranks) {
        mpi_rank_t *x = tide_list_entry(pos, mpi_rank_t, link);
        if (x->conn == c)
            r = x;
    }
    if (!r)
        return;
    if (!r->exit_known) {
        r->exit_known = true;
        r->exit_status = status;
        r->term_signal = (int)signal;
        tide_info("job %s MPI rank %d exited: status %lld, signal %lld", r->launch->job_id,
                  r->launch->rank, (long long)status, (long long)signal);
    }
}

void tide_worker_mpi_on_attach_closed(void *ud, tide_trainer_conn_t *c)
{
    tide_worker_mpi_t *m = ud;
    tide_list_t *pos, *tmp;

    tide_list_for_each_safe(pos, tmp, &m->waiting) {
        waiter_t *w = tide_list_entry(pos, waiter_t, link);
        if (w->conn == c)
            waiter_free(w, m);
    }
    tide_list_for_each_safe(pos, tmp, &m->ranks) {
        mpi_rank_t *r = tide_list_entry(pos, mpi_rank_t, link);
        if (r->conn != c)
            continue;
        r->conn = NULL;
        if (!r->exit_known) {
            tide_warn("job %s MPI rank %d: tide-rank-exec went away without reporting an exit",
                      r->launch->job_id, r->launch->rank);
            r->exit_known = true;
            r->exit_status = 0;
            r->term_signal = SIGKILL;
        }
        report_exit(m, r); /* rank 0's exit is mpirun's: not reported from here */
    }
    rearm(m);
}

/* --- StartDaemon --- */

static daemon_t *find_daemon(const tide_worker_mpi_t *m, uint64_t id)
{
    tide_list_t *pos;

    tide_list_for_each(pos, &m->daemons) {
        daemon_t *d = tide_list_entry(pos, daemon_t, link);
        if (d->id == id)
            return d;
    }
    return NULL;
}

static void daemon_free(daemon_t *d)
{
    tide_list_remove(&d->link);
    free(d->job_id);
    free(d);
}

static void start_daemon_now(tide_worker_mpi_t *m, tide_rpc_call_t *call,
                             const Tide__V1__StartDaemonRequest *req, mpi_rank_t *r)
{
    const Tide__V1__LaunchRank *l = r->launch;
    const Tide__V1__MpiHost *host = NULL;
    Tide__V1__DaemonEvent ev = TIDE__V1__DAEMON_EVENT__INIT;
    tide_launch_override_t ov;
    tide_worker_spawned_t sp;
    tide_buf_t socks = TIDE_BUF_INIT;
    tide_error_t err;
    tide_run_as_t ra;
    char *env[3], *log, *tmp, msg[300];
    tide_list_t *pos;
    daemon_t *d;
    int rc;

    if (!cred_equal(req->credential, l->mpi_credential)) {
        tide_warn("StartDaemon from %s refused: wrong credential for job %s generation %d",
                  tide_rpc_call_peer(call), req->job_id, req->generation);
        tide_rpc_call_finish(call, TIDE_GRPC_PERMISSION_DENIED,
                             "wrong credential for this job's generation");
        return;
    }
    for (size_t i = 0; i < l->n_mpi_hosts; i++) {
        if (strcmp(l->mpi_hosts[i]->node, req->node) == 0)
            host = l->mpi_hosts[i];
    }
    if (!host || host->first_rank < 0 || host->first_rank != l->rank) {
        /* Only the worker of a node's first rank starts that node's daemon; find that one. */
        mpi_rank_t *first = NULL;
        tide_list_for_each(pos, &m->ranks) {
            mpi_rank_t *x = tide_list_entry(pos, mpi_rank_t, link);
            if (host && x->launch->rank == host->first_rank && x->launch->generation == l->generation &&
                strcmp(x->launch->job_id, l->job_id) == 0)
                first = x;
        }
        if (!first) {
            snprintf(msg, sizeof(msg), "node %.64s is not served by worker %s for job %s",
                     req->node, m->worker_id, req->job_id);
            tide_rpc_call_finish(call, TIDE_GRPC_FAILED_PRECONDITION, msg);
            return;
        }
        r = first;
        l = r->launch;
    }
    tide_list_for_each(pos, &m->daemons) {
        d = tide_list_entry(pos, daemon_t, link);
        if (d->running && d->generation == l->generation && strcmp(d->job_id, l->job_id) == 0) {
            tide_rpc_call_finish(call, TIDE_GRPC_ALREADY_EXISTS,
                                 "this job's daemon already runs on this node");
            return;
        }
    }
    for (size_t i = 0; i < host->n_agent_socks; i++)
        tide_buf_printf(&socks, "%s%s", i ? ":" : "", host->agent_socks[i]);
    env[0] = tide_xasprintf("TIDE_RANK_SOCKS=%s", tide_buf_cstr(&socks));
    env[1] = tide_xasprintf("TIDE_MPI_CREDENTIAL=%s", l->mpi_credential);
    if (tide_launcher_run_as(m->launcher, l, &ra, NULL) < 0)
        memset(&ra, 0, sizeof(ra)); /* the spawn below refuses it with the reason */
    tmp = session_dir(m, l, req->node, &ra);
    tide_run_as_clear(&ra);
    env[2] = tide_xasprintf("TMPDIR=%s", tmp);
    free(tmp);
    log = tide_xasprintf("%s/logs/%s/g%d.orted.log", m->data_dir, l->job_id, l->generation);
    memset(&ov, 0, sizeof(ov));
    ov.command = req->argv;
    ov.n_command = req->n_argv;
    ov.env = (const char *const *)env;
    ov.n_env = 3;
    ov.log_path = log;
    ov.record_rank = -1;
    ov.no_master_port = true;
    ov.mpi_runtime = true;
    d = tide_xcalloc(1, sizeof(*d));
    d->id = TIDE_WORKER_MPI_DAEMON_ID | ++m->next_daemon;
    d->job_id = tide_xstrdup(l->job_id);
    d->generation = l->generation;
    rc = tide_launcher_spawn_ex(m->launcher, d->id, l, &ov, &sp, &err);
    free(env[0]);
    free(env[1]);
    free(env[2]);
    free(log);
    tide_buf_free(&socks);
    if (rc < 0) {
        tide_warn("StartDaemon for job %s: %s", l->job_id, err.text);
        tide_rpc_call_finish(call, TIDE_GRPC_INTERNAL, err.text);
        free(d->job_id);
        free(d);
        return;
    }
    d->running = true;
    d->call = call;
    tide_list_push_back(&m->daemons, &d->link);
    tide_rpc_call_set_data(call, d);
    tide_info("started the MPI daemon of job %s generation %d for node %s (pid %d)", l->job_id,
              l->generation, req->node, sp.pid);
    ev.event_case = TIDE__V1__DAEMON_EVENT__EVENT_STARTED_PID;
    ev.started_pid = sp.pid;
    tide_rpc_call_send_pb(call, &ev.base);
}

/* "orted" (found in PATH when it runs), or a path to the same file as PATH's orted. */
static bool is_the_orted(const char *argv0)
{
    char *mine, *a = NULL, *b = NULL;
    bool same;

    if (!strchr(argv0, '/'))
        return true;
    mine = which("orted");
    a = mine ? realpath(mine, NULL) : NULL;
    b = realpath(argv0, NULL);
    same = a && b && strcmp(a, b) == 0;
    free(mine);
    free(a);
    free(b);
    return same;
}

static void start_daemon(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    tide_worker_mpi_t *m = tide_rpc_call_server_data(call);
    Tide__V1__StartDaemonRequest *req = tide__v1__start_daemon_request__unpack(NULL, len, data);
    mpi_rank_t *r;
    char *base, msg[200];
    waiter_t *w;

    if (!req) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT,
                             "request is not a valid tide.v1.StartDaemonRequest");
        return;
    }
    if (!req->job_id[0] || !req->credential[0] || !req->node[0]) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT,
                             !req->job_id[0] ? "job_id must not be empty"
                             : !req->node[0] ? "node must not be empty"
                                             : "credential must not be empty");
        goto done;
    }
    if (req->n_argv == 0) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, "argv must not be empty");
        goto done;
    }
    {
        size_t bytes = 0;
        for (size_t i = 0; i < req->n_argv; i++)
            bytes += strlen(req->argv[i]) + 1;
        if (req->n_argv > ARGV_MAX || bytes > ARGV_BYTES_MAX) {
            tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, "argv is too long");
            goto done;
        }
    }
    base = strrchr(req->argv[0], '/');
    base = base ? base + 1 : req->argv[0];
    if (strcmp(base, "orted") != 0 || !is_the_orted(req->argv[0])) {
        snprintf(msg, sizeof(msg), "argv[0] %.100s is not the Open MPI daemon (orted) of this node",
                 req->argv[0]);
        tide_warn("StartDaemon from %s refused: %s", tide_rpc_call_peer(call), msg);
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, msg);
        goto done;
    }
    r = find_rank(m, req->job_id, req->generation, -1);
    if (r) {
        start_daemon_now(m, call, req, r);
        goto done;
    }
    if (newest_generation(m, req->job_id) > req->generation) {
        /* An older generation's credential: it expired with its generation. */
        snprintf(msg, sizeof(msg), "job %.64s generation %d is over: its credential expired",
                 req->job_id, req->generation);
        tide_warn("StartDaemon from %s refused: %s", tide_rpc_call_peer(call), msg);
        tide_rpc_call_finish(call, TIDE_GRPC_PERMISSION_DENIED, msg);
        goto done;
    }
    if (m->n_waiting >= WAITERS_MAX) {
        snprintf(msg, sizeof(msg), "job %.64s generation %d runs no rank on worker %s", req->job_id,
                 req->generation, m->worker_id);
        tide_rpc_call_finish(call, TIDE_GRPC_FAILED_PRECONDITION, msg);
        goto done;
    }
    w = tide_xcalloc(1, sizeof(*w));
    w->deadline = uv_now(m->loop) + m->wait_ms;
    w->call = call;
    w->req = req;
    req = NULL;
    tide_rpc_call_set_data(call, w);
    tide_list_push_back(&m->waiting, &w->link);
    m->n_waiting++;
    rearm(m);
done:
    if (req)
        tide__v1__start_daemon_request__free_unpacked(req, NULL);
}

/* The call is over: a waiter is dropped, a daemon still running is killed. Which one the call's
 * data points at is told by the lists (a waiter or a daemon). */
static void start_daemon_closed(tide_rpc_call_t *call)
{
    tide_worker_mpi_t *m = tide_rpc_call_server_data(call);
    void *data = tide_rpc_call_data(call);
    tide_list_t *pos, *tmp;

    if (!data)
        return;
    tide_list_for_each_safe(pos, tmp, &m->waiting) {
        waiter_t *w = tide_list_entry(pos, waiter_t, link);
        if (w == data)
            waiter_free(w, m);
    }
    tide_list_for_each_safe(pos, tmp, &m->daemons) {
        daemon_t *d = tide_list_entry(pos, daemon_t, link);
        if (d != data)
            continue;
        d->call = NULL;
        if (d->running) {
            tide_warn("StartDaemon call of job %s closed: killing its daemon", d->job_id);
            daemon_kill(m, d);
        } else {
            daemon_free(d);
        }
    }
}

void tide_worker_mpi_daemon_exited(tide_worker_mpi_t *m, uint64_t id, int64_t exit_status,
                                   int term_signal)
{
    daemon_t *d = find_daemon(m, id);
    Tide__V1__DaemonEvent ev = TIDE__V1__DAEMON_EVENT__INIT;

    if (!d)
        return;
    d->running = false;
    tide_launcher_forget(m->launcher, d->job_id, d->generation, -1);
    ev.event_case = TIDE__V1__DAEMON_EVENT__EVENT_EXIT_CODE;
    ev.exit_code = tide_worker_exit_code(exit_status, term_signal);
    tide_info("the MPI daemon of job %s generation %d exited with %d", d->job_id, d->generation,
              ev.exit_code);
    if (d->call) {
        tide_rpc_call_t *call = d->call;
        d->call = NULL;
        tide_rpc_call_set_data(call, NULL);
        tide_rpc_call_send_pb(call, &ev.base);
        tide_rpc_call_finish(call, TIDE_GRPC_OK, NULL);
    }
    daemon_free(d);
}

const tide_rpc_method_t tide_worker_mpi_methods[] = {
    {.path = START_DAEMON_PATH,
     .kind = TIDE_RPC_SERVER_STREAMING,
     .no_auth = true, /* the credential authorises */
     .on_message = start_daemon,
     .on_close = start_daemon_closed},
};
const size_t tide_worker_mpi_methods_count =
    sizeof(tide_worker_mpi_methods) / sizeof(tide_worker_mpi_methods[0]);

static void on_timer_closed(uv_handle_t *h)
{
    tide_worker_mpi_t *m = h->data;

    free(m->data_dir);
    free(m->worker_id);
    free(m->rank_exec);
    free(m->shim);
    free(m->mpirun);
    for (size_t k = 0; k < m->n_tls_env; k++)
        free(m->tls_env[k]);
    free(m);
}

void tide_worker_mpi_free(tide_worker_mpi_t *m)
{
    tide_list_t *pos, *tmp;

    if (!m)
        return;
    m->freeing = true;
    tide_list_for_each_safe(pos, tmp, &m->waiting) {
        waiter_t *w = tide_list_entry(pos, waiter_t, link);
        if (w->call) {
            tide_rpc_call_set_data(w->call, NULL);
            tide_rpc_call_finish(w->call, TIDE_GRPC_UNAVAILABLE, "the worker is shutting down");
        }
        if (w->conn)
            tide_trainer_conn_set_data(w->conn, NULL);
        waiter_free(w, m);
    }
    tide_list_for_each_safe(pos, tmp, &m->daemons) {
        daemon_t *d = tide_list_entry(pos, daemon_t, link);
        daemon_kill(m, d);
        if (d->call) {
            tide_rpc_call_set_data(d->call, NULL);
            tide_rpc_call_finish(d->call, TIDE_GRPC_UNAVAILABLE, "the worker is shutting down");
        }
        daemon_free(d);
    }
    tide_list_for_each_safe(pos, tmp, &m->ranks) {
        mpi_rank_t *r = tide_list_entry(pos, mpi_rank_t, link);
        if (r->conn)
            tide_trainer_conn_set_data(r->conn, NULL);
        tide_list_remove(&r->link);
        tide__v1__launch_rank__free_unpacked(r->launch, NULL);
        free(r);
    }
    uv_close((uv_handle_t *)&m->timer, on_timer_closed);
}
