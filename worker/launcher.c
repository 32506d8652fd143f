/* Rank processes (see launcher.h): uv_spawn of tide-exec as a new session, environment and log
 * file, the helper's "ok" report, the rank record, stop with grace, and exit reporting. Invariants:
 * every process this launcher started is in its list until its exit was seen, so none is left
 * unwatched; a record exists for every rank whose spawn returned 0 and is removed only by
 * tide_launcher_forget; the exit of a failed spawn is never reported; a rank that must run as
 * another account (run_as.h) is started only through the helper's switch, with its environment
 * passed on a descriptor so that none of it reaches a root process. */
#include "launcher.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "buf.h"
#include "datadir.h"
#include "list.h"
#include "log.h"
#include "xmalloc.h"

extern char **environ;

#define REPORT_TIMEOUT_DEFAULT_MS 5000

typedef struct proc {
    tide_list_t link;
    tide_launcher_t *l; /* NULL once the launcher is freed */
    uint64_t id;
    uv_process_t handle;
    uv_timer_t kill_timer;
    pid_t pid;
    bool failed;      /* the spawn failed after the helper started: its exit is not a rank's */
    bool mpi_runtime; /* mpirun or an MPI daemon (tide_launch_override_t.mpi_runtime) */
    uint64_t term_at; /* loop ms of a pending SIGTERM (soft stop); 0: none */
    uint64_t kill_at; /* loop ms of the pending SIGKILL; 0: none */
    int open_handles;
} proc_t;

struct tide_launcher {
    uv_loop_t *loop;
    char *exec_helper, *data_dir, *worker_id, *advertise, *agent_sock, *ckpt_hot, *node;
    int32_t gpu_index;
    uint32_t report_timeout_ms;
    bool refuse_root_jobs;
    tide_run_as_lookup_fn lookup;
    void *lookup_ud;
    tide_launcher_exit_cb on_exit;
    void *ud;
    tide_list_t procs;
};

void tide_launcher_new(uv_loop_t *loop, const tide_launcher_config_t *cfg, tide_launcher_t **out)
{
    tide_launcher_t *l = tide_xcalloc(1, sizeof(*l));

    l->loop = loop;
    l->exec_helper = tide_xstrdup(cfg->exec_helper);
    l->data_dir = tide_xstrdup(cfg->data_dir);
    l->worker_id = tide_xstrdup(cfg->worker_id ? cfg->worker_id : "");
    l->agent_sock = cfg->agent_sock ? tide_xstrdup(cfg->agent_sock) : NULL;
    l->ckpt_hot = cfg->ckpt_hot ? tide_xstrdup(cfg->ckpt_hot) : NULL;
    l->advertise = tide_xstrdup(cfg->advertise ? cfg->advertise : "");
    l->node = tide_xstrdup(cfg->node ? cfg->node : "");
    l->refuse_root_jobs = cfg->refuse_root_jobs;
    l->lookup = cfg->lookup ? cfg->lookup : tide_run_as_lookup_system;
    l->lookup_ud = cfg->lookup_ud;
    l->gpu_index = cfg->gpu_index;
    l->report_timeout_ms =
        cfg->report_timeout_ms ? cfg->report_timeout_ms : REPORT_TIMEOUT_DEFAULT_MS;
    l->on_exit = cfg->on_exit;
    l->ud = cfg->ud;
    tide_list_init(&l->procs);
    *out = l;
}

static void proc_close_cb(uv_handle_t *h)
{
    proc_t *p = h->data;

    if (--p->open_handles == 0)
        free(p);
}

static void proc_close(proc_t *p)
{
    uv_close((uv_handle_t *)&p->handle, proc_close_cb);
    uv_close((uv_handle_t *)&p->kill_timer, proc_close_cb);
}

void tide_launcher_free(tide_launcher_t *l)
{
    tide_list_t *pos, *tmp;

    if (!l)
        return;
    tide_list_for_each_safe(pos, tmp, &l->procs)
    {
        proc_t *p = tide_list_entry(pos, proc_t, link);
        /* Its exit still closes the handles, so no zombie is left behind. */
        kill(-p->pid, SIGKILL);
        p->l = NULL;
        tide_list_remove(&p->link);
    }
    free(l->exec_helper);
    free(l->data_dir);
    free(l->worker_id);
    free(l->agent_sock);
    free(l->ckpt_hot);
    free(l->advertise);
    free(l->node);
    free(l);
}

size_t tide_launcher_running(const tide_launcher_t *l)
{
    const tide_list_t *pos;
    size_t n = 0;

    tide_list_for_each(pos, &l->procs)
    {
        if (!tide_list_entry(pos, proc_t, link)->failed)
            n++;
    }
    return n;
}

void tide_launcher_signal_all(tide_launcher_t *l, int sig)
{
    tide_list_t *pos;

    tide_list_for_each(pos, &l->procs)
    {
        proc_t *p = tide_list_entry(pos, proc_t, link);
        if (!p->failed && !p->mpi_runtime)
            kill(-p->pid, sig);
    }
}

size_t tide_launcher_pids(const tide_launcher_t *l, int32_t *out, size_t max)
{
    const tide_list_t *pos;
    size_t n = 0;

    tide_list_for_each(pos, &l->procs)
    {
        const proc_t *p = tide_list_entry(pos, proc_t, link);
        if (!p->failed && n < max)
            out[n++] = (int32_t)p->pid;
    }
    return n;
}

static proc_t *find(tide_launcher_t *l, uint64_t id)
{
    tide_list_t *pos;

    tide_list_for_each(pos, &l->procs)
    {
        proc_t *p = tide_list_entry(pos, proc_t, link);
        if (p->id == id && !p->failed)
            return p;
    }
    return NULL;
}

static void on_proc_exit(uv_process_t *h, int64_t exit_status, int term_signal)
{
    proc_t *p = h->data;
    tide_launcher_t *l = p->l;

    /* Whatever the command left in its group goes too. The group id is the helper's pid, which the
     * kernel does not hand out again while any member of the group is alive. */
    kill(-p->pid, SIGKILL);
    uv_timer_stop(&p->kill_timer);
    if (l)
        tide_list_remove(&p->link);
    if (l && !p->failed && l->on_exit)
        l->on_exit(p->id, exit_status, term_signal, l->ud); /* may free l */
    proc_close(p);
}

static void on_kill_timer(uv_timer_t *t);

/* Starts the timer for the earliest pending signal. */
static void arm(proc_t *p, uint64_t now)
{
    uint64_t next = p->term_at ? p->term_at : p->kill_at;

    if (next)
        uv_timer_start(&p->kill_timer, on_kill_timer, next > now ? next - now : 0, 0);
    else
        uv_timer_stop(&p->kill_timer);
}

static void on_kill_timer(uv_timer_t *t)
{
    proc_t *p = t->data;
    uint64_t now = uv_now(t->loop);

    if (p->term_at && now >= p->term_at) {
        p->term_at = 0;
        kill(-p->pid, SIGTERM);
        kill(-p->pid, SIGCONT); /* a rank stopped by a `slow` perturbation must see it */
    } else if (p->kill_at && now >= p->kill_at) {
        p->kill_at = 0;
        kill(-p->pid, SIGKILL);
    }
    arm(p, now);
}

int tide_launcher_stop(tide_launcher_t *l, uint64_t id, uint32_t grace_ms)
{
    proc_t *p = find(l, id);
    uint64_t now, at;

    if (!p)
        return -ENOENT;
    if (grace_ms == 0) {
        kill(-p->pid, SIGKILL);
        return 0;
    }
    kill(-p->pid, SIGTERM);
    kill(-p->pid, SIGCONT); /* a rank stopped by a `slow` perturbation must see it */
    now = uv_now(l->loop);
    at = now + grace_ms;
    p->term_at = 0;
    if (p->kill_at == 0 || at < p->kill_at)
        p->kill_at = at;
    arm(p, now);
    return 0;
}

int tide_launcher_stop_soft(tide_launcher_t *l, uint64_t id, uint32_t term_after_ms,
                            uint32_t grace_ms)
{
    proc_t *p = find(l, id);
    uint64_t now;

    if (!p)
        return -ENOENT;
    if (p->term_at || p->kill_at)
        return 0; /* a stop is already under way: never delay it */
    now = uv_now(l->loop);
    p->term_at = now + term_after_ms;
    p->kill_at = p->term_at + grace_ms;
    arm(p, now);
    return 0;
}

void tide_launcher_forget(tide_launcher_t *l, const char *job_id, int32_t generation, int32_t rank)
{
    if (tide_worker_job_id_valid(job_id))
        tide_worker_record_remove(l->data_dir, job_id, generation, rank);
}

/* --- environment --- */

typedef struct env {
    char **kv; /* "NAME=VALUE", NULL-terminated */
    size_t n, cap;
} env_t;

static void env_set(env_t *e, const char *name, const char *value)
{
    size_t nl = strlen(name);
    char *s = tide_xasprintf("%s=%s", name, value);

    for (size_t i = 0; i < e->n; i++) {
        if (strncmp(e->kv[i], name, nl) == 0 && e->kv[i][nl] == '=') {
            free(e->kv[i]);
            e->kv[i] = s;
            return;
        }
    }
    if (e->n + 2 > e->cap) {
        e->cap = e->cap ? e->cap * 2 : 64;
        e->kv = tide_xrealloc(e->kv, e->cap * sizeof(char *));
    }
    e->kv[e->n++] = s;
    e->kv[e->n] = NULL;
}

static void env_unset(env_t *e, const char *name)
{
    size_t nl = strlen(name);

    for (size_t i = 0; i < e->n; i++) {
        if (strncmp(e->kv[i], name, nl) == 0 && e->kv[i][nl] == '=') {
            free(e->kv[i]);
            e->kv[i] = e->kv[--e->n];
            e->kv[e->n] = NULL;
            return;
        }
    }
}

static bool env_has(const env_t *e, const char *name)
{
    size_t nl = strlen(name);

    for (size_t i = 0; i < e->n; i++)
        if (strncmp(e->kv[i], name, nl) == 0 && e->kv[i][nl] == '=')
            return true;
    return false;
}

static void env_set_int(env_t *e, const char *name, long long v)
{
    char buf[32];

    snprintf(buf, sizeof(buf), "%lld", v);
    env_set(e, name, buf);
}

static void env_free(env_t *e)
{
    for (size_t i = 0; i < e->n; i++)
        free(e->kv[i]);
    free(e->kv);
}

/* mkdir -p (mode 0700 for what it creates). Returns 0 or -1 with errno. */
static int mkdir_parents(const char *path)
{
    char *p = tide_xstrdup(path);
    int rc = 0;

    for (char *q = p + 1;; q++) {
        if (*q != '/' && *q != '\0')
            continue;
        char c = *q;
        *q = '\0';
        if (mkdir(p, 0700) < 0 && errno != EEXIST) {
            rc = -1;
            break;
        }
        *q = c;
        if (!c)
            break;
    }
    {
        int saved = errno;
        free(p);
        errno = saved;
    }
    return rc;
}

/* What makes a process a member of a torchrun-style group: a burst rank gets none of them. */
static const char *const member_vars[] = {
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID"};

/* The worker's environment (when with_environ), then the job's env map, then tide's variables
 * (which win). A burst rank (LaunchRank.burst) gets TIDE_BURST and TIDE_BURST_INDEX in place of the
 * member variables. */
static void build_env(const tide_launcher_t *l, const Tide__V1__LaunchRank *r, int master_port,
                      bool with_environ, const tide_run_as_t *ra, env_t *e)
{
    tide_buf_t cvd = TIDE_BUF_INIT;

    for (char **p = with_environ ? environ : NULL; p && *p; p++) {
        const char *eq = strchr(*p, '=');
        char *name;
        if (!eq || eq == *p)
            continue;
        name = tide_xstrndup(*p, (size_t)(eq - *p));
        env_set(e, name, eq + 1);
        free(name);
    }
    for (size_t i = 0; i < r->n_env; i++)
        env_set(e, r->env[i]->key, r->env[i]->value);

    if (r->burst) {
        /* A lent worker's process is no member of the generation (docs/elastic.md, "Burst"):
         * nothing may make it join the generation's rendezvous, whatever the worker's environment
         * or the job's env map say. */
        for (size_t i = 0; i < sizeof(member_vars) / sizeof(member_vars[0]); i++)
            env_unset(e, member_vars[i]);
        env_set(e, "TIDE_BURST", "1");
        env_set_int(e, "TIDE_BURST_INDEX", (long long)r->rank - r->world_size);
    } else {
        env_unset(e, "TIDE_BURST");
        env_unset(e, "TIDE_BURST_INDEX");
        env_set_int(e, "RANK", r->rank);
        env_set_int(e, "LOCAL_RANK", r->local_rank);
        env_set_int(e, "WORLD_SIZE", r->world_size);
        env_set_int(e, "LOCAL_WORLD_SIZE", r->local_world_size > 0 ? r->local_world_size : 1);
        env_set_int(e, "GROUP_RANK", r->group_rank);
        env_set_int(e, "GROUP_WORLD_SIZE", r->group_world_size > 0 ? r->group_world_size : 1);
        env_set_int(e, "ROLE_RANK", r->rank);
        env_set_int(e, "ROLE_WORLD_SIZE", r->world_size);
        env_set(e, "MASTER_ADDR", r->master_addr[0] ? r->master_addr : l->advertise);
        env_set_int(e, "MASTER_PORT", master_port);
        env_set_int(e, "TORCHELASTIC_RESTART_COUNT", r->restart_count);
        env_set_int(e, "TORCHELASTIC_MAX_RESTARTS", r->max_restarts);
        env_set(e, "TORCHELASTIC_RUN_ID", r->run_id[0] ? r->run_id : r->job_id);
    }
    /* The SDK says hello with this (a burst rank has no RANK). */
    env_set_int(e, "TIDE_RANK", r->rank);
    env_set(e, "TIDE_JOB_ID", r->job_id);
    env_set_int(e, "TIDE_GENERATION", r->generation);
    env_set(e, "TIDE_WORKER_ID", l->worker_id);
    if (r->owner[0])
        env_set(e, "TIDE_JOB_OWNER", r->owner);
    else
        env_unset(e, "TIDE_JOB_OWNER"); /* never the worker's own, taken for the job's */
    if (ra && ra->do_switch) {
        env_set(e, "HOME", ra->account.home[0] ? ra->account.home : "/");
        env_set(e, "USER", ra->account.name);
        env_set(e, "LOGNAME", ra->account.name);
    }
    /* As torchrun does: several ranks on one node do not each start a thread per core. */
    if (!r->burst && r->local_world_size > 1 && !env_has(e, "OMP_NUM_THREADS"))
        env_set(e, "OMP_NUM_THREADS", "1");
    if (l->agent_sock)
        env_set(e, "TIDE_AGENT_SOCK", l->agent_sock);
    if (l->ckpt_hot) {
        /* The job's directory in the hot tier (docs/worker.md, "Checkpoint tiers"): the SDK's
         * ckpt_path makes step-S/rank-R under it. */
        char *dir = tide_xasprintf("%s/%s", l->ckpt_hot, r->job_id);
        if (mkdir_parents(dir) < 0)
            tide_warn("job %s: cannot create %s: %s (TIDE_CKPT_DIR set all the same)", r->job_id,
                      dir, strerror(errno));
        else if (ra && ra->do_switch && lchown(dir, ra->account.uid, ra->account.gid) < 0)
            tide_warn("job %s: chown %s to %s: %s", r->job_id, dir, ra->account.name,
                      strerror(errno));
        env_set(e, "TIDE_CKPT_DIR", dir);
        free(dir);
    }
    if (r->n_node_gpu_indexes == 0) {
        tide_buf_printf(&cvd, "%d", l->gpu_index);
    } else {
        for (size_t i = 0; i < r->n_node_gpu_indexes; i++)
            tide_buf_printf(&cvd, "%s%d", i ? "," : "", r->node_gpu_indexes[i]);
    }
    env_set(e, "CUDA_VISIBLE_DEVICES", tide_buf_cstr(&cvd));
    tide_buf_free(&cvd);
}

/* --- running as another account (run_as.h; docs/worker.md, "Running ranks as their user") --- */

/* Adds search permission for group and others to dir when the worker owns it, so that an account
 * reaches, by name, what is its own inside it, without listing the rest. */
static void make_traversable(const char *dir)
{
    struct stat st;

    if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
        return;
    if ((st.st_mode & 0011) != 0011 && chmod(dir, (st.st_mode & 07777) | 0011) < 0)
        tide_warn("chmod o+x %s: %s", dir, strerror(errno));
}

/* What the worker hands a rank that runs as account a, made usable by it. Best effort: what fails
 * is logged, and the rank then fails on it with the system's own message. */
static void grant(const tide_launcher_t *l, const Tide__V1__LaunchRank *r,
                  const tide_run_as_account_t *a)
{
    char *logs = tide_xasprintf("%s/logs", l->data_dir), *jd = NULL, *log = NULL;
    struct stat st;
    int fd;

    /* The data dir (0700) holds the trainer socket; logs/JOB the rank's log, which tide-rank-exec
     * opens by name for an MPI rank. Records, the epoch and other jobs' logs stay unreadable. */
    make_traversable(l->data_dir);
    if (tide_worker_log_dir_make(l->data_dir, r->job_id, NULL) == 0) {
        jd = tide_worker_log_dir(l->data_dir, r->job_id);
        make_traversable(logs);
        make_traversable(jd);
        log = tide_worker_log_path(l->data_dir, r->job_id, r->generation, r->rank);
        fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0 || fchown(fd, a->uid, a->gid) < 0)
            tide_warn("log %s for user %s: %s", log, a->name, strerror(errno));
        if (fd >= 0)
            close(fd);
    }
    if (l->agent_sock) {
        /* One account at a time can own the socket: the newest rank's. */
        if (lstat(l->agent_sock, &st) == 0 && st.st_uid != a->uid && st.st_uid != geteuid())
            tide_warn("trainer socket %s passes from uid %u to user %s: ranks of uid %u still "
                      "running here cannot reach it any more",
                      l->agent_sock, (unsigned)st.st_uid, a->name, (unsigned)st.st_uid);
        if (lchown(l->agent_sock, a->uid, a->gid) < 0)
            tide_warn("chown %s to %s: %s", l->agent_sock, a->name, strerror(errno));
    }
    if (l->ckpt_hot) {
        char *dir = tide_xasprintf("%s/%s", l->ckpt_hot, r->job_id);
        char *parent = tide_xstrdup(l->ckpt_hot), *slash = strrchr(parent, '/');
        char *mine = tide_xasprintf("tide-%u", (unsigned)geteuid());

        if (mkdir_parents(dir) < 0)
            tide_warn("job %s: cannot create %s: %s", r->job_id, dir, strerror(errno));
        else if (lchown(dir, a->uid, a->gid) < 0)
            tide_warn("chown %s to %s: %s", dir, a->name, strerror(errno));
        make_traversable(l->ckpt_hot);
        if (slash && slash != parent) {
            /* The default hot tier /dev/shm/tide-UID/ID: tide made tide-UID too. */
            *slash = '\0';
            slash = strrchr(parent, '/');
            if (slash && strcmp(slash + 1, mine) == 0)
                make_traversable(parent);
        }
        free(mine);
        free(parent);
        free(dir);
    }
    free(log);
    free(jd);
    free(logs);
}

int tide_launcher_run_as(tide_launcher_t *l, const Tide__V1__LaunchRank *launch,
                         tide_run_as_t *ra, tide_error_t *err)
{
    int rc = tide_run_as_decide(launch->run_as, geteuid(), !l->refuse_root_jobs, l->node,
                                l->lookup, l->lookup_ud, ra, err);

    if (rc == 0 && ra->do_switch)
        grant(l, launch, &ra->account);
    return rc;
}

int tide_launcher_account(tide_launcher_t *l, const Tide__V1__LaunchRank *launch, uid_t *uid,
                          gid_t *gid, tide_error_t *err)
{
    tide_run_as_t ra;
    int rc = tide_run_as_decide(launch->run_as, geteuid(), !l->refuse_root_jobs, l->node,
                                l->lookup, l->lookup_ud, &ra, err);

    if (rc < 0)
        return rc;
    rc = 0;
    if (ra.do_switch && ra.account.uid != geteuid()) {
        *uid = ra.account.uid;
        *gid = ra.account.gid;
        rc = 1;
    }
    tide_run_as_clear(&ra);
    return rc;
}

/* The rank's environment on a memfd (NUL-separated "K=V"), for the helper's --env-fd. Returns the
 * fd or -errno. */
static int env_memfd(const env_t *e)
{
    int fd = memfd_create("tide-rank-env", MFD_CLOEXEC), rc = 0;

    if (fd < 0)
        return -errno;
    for (size_t i = 0; i < e->n && rc == 0; i++) {
        const char *p = e->kv[i];
        size_t left = strlen(p) + 1;
        while (left > 0) {
            ssize_t w = write(fd, p, left);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0) {
                rc = -errno;
                break;
            }
            p += w;
            left -= (size_t)w;
        }
    }
    if (rc == 0 && lseek(fd, 0, SEEK_SET) < 0)
        rc = -errno;
    if (rc < 0) {
        close(fd);
        return rc;
    }
    return fd;
}

/* A free TCP port: bind port 0 on the advertised address (or any), read it, close. The rank binds
 * it moments later; the same race torchrun accepts. */
static int pick_port(const char *advertise, int *port, tide_error_t *err)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int fd = -1, rc = 0;

    memset(&ss, 0, sizeof(ss));
    if (inet_pton(AF_INET6, advertise, &((struct sockaddr_in6 *)&ss)->sin6_addr) == 1) {
        ss.ss_family = AF_INET6;
        len = sizeof(struct sockaddr_in6);
    } else {
        struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
        sin->sin_family = AF_INET;
        if (inet_pton(AF_INET, advertise, &sin->sin_addr) != 1)
            sin->sin_addr.s_addr = htonl(INADDR_ANY);
        len = sizeof(struct sockaddr_in);
    }
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&ss, len) < 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &len) < 0) {
        rc = -errno;
        tide_errprintf(err, "pick MASTER_PORT: %s", uv_strerror(rc));
        goto done;
    }
    *port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                           : ((struct sockaddr_in *)&ss)->sin_port);
done:
    if (fd >= 0)
        close(fd);
    return rc;
}

/* Reads the helper's one-line report (without the newline) within timeout_ms. -ETIMEDOUT or -errno.
 */
static int read_report(int fd, uint32_t timeout_ms, char *buf, size_t size)
{
    uint64_t deadline = uv_hrtime() / 1000000 + timeout_ms;
    size_t off = 0;

    while (off + 1 < size && !memchr(buf, '\n', off)) {
        uint64_t now = uv_hrtime() / 1000000;
        struct pollfd pfd = {fd, POLLIN, 0};
        ssize_t n;
        int r;

        if (now >= deadline)
            return -ETIMEDOUT;
        r = poll(&pfd, 1, (int)(deadline - now));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            return -ETIMEDOUT;
        n = read(fd, buf + off, size - 1 - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        off += (size_t)n;
    }
    buf[off] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    return 0;
}

static int open_log(const tide_launcher_t *l, const Tide__V1__LaunchRank *r, const char *log_path,
                    int *fd, tide_error_t *err)
{
    char *path = log_path ? tide_xstrdup(log_path)
                          : tide_worker_log_path(l->data_dir, r->job_id, r->generation, r->rank);
    int rc = tide_worker_log_dir_make(l->data_dir, r->job_id, err);

    if (rc < 0)
        goto done;
    *fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (*fd < 0) {
        rc = -errno;
        tide_errprintf(err, "log %s: %s", path, uv_strerror(rc));
    }
done:
    free(path);
    return rc;
}

char **tide_launcher_rank_env(const tide_launcher_t *l, const Tide__V1__LaunchRank *launch,
                              int master_port, size_t *n)
{
    env_t e = {NULL, 0, 0};

    tide_run_as_t ra;

    /* Decided again for the environment only (an MPI rank's attach): no refusal can be new here,
     * the spawn already passed it. */
    if (tide_run_as_decide(launch->run_as, geteuid(), !l->refuse_root_jobs, l->node, l->lookup,
                           l->lookup_ud, &ra, NULL) < 0)
        memset(&ra, 0, sizeof(ra));
    build_env(l, launch, master_port, false, &ra, &e);
    tide_run_as_clear(&ra);
    *n = e.n;
    return e.kv;
}

void tide_launcher_env_free(char **env, size_t n)
{
    env_t e = {env, n, n};

    env_free(&e);
}

int tide_launcher_spawn(tide_launcher_t *l, uint64_t id, const Tide__V1__LaunchRank *launch,
                        tide_worker_spawned_t *out, tide_error_t *err)
{
    return tide_launcher_spawn_ex(l, id, launch, NULL, out, err);
}

int tide_launcher_spawn_ex(tide_launcher_t *l, uint64_t id, const Tide__V1__LaunchRank *launch,
                           const tide_launch_override_t *ov, tide_worker_spawned_t *out,
                           tide_error_t *err)
{
    const char *workdir = launch->workdir[0] ? launch->workdir : l->data_dir;
    uv_process_options_t opts;
    uv_stdio_container_t stdio[5];
    tide_worker_record_t rec;
    tide_run_as_t ra;
    tide_buf_t groups = TIDE_BUF_INIT;
    env_t env = {NULL, 0, 0};
    char **args = NULL, parent[24], report[512], uid[16], gid[16];
    int master_port = launch->master_port, logfd = -1, envfd = -1, sp[2] = {-1, -1}, rc;
    proc_t *p = NULL;
    struct stat st;
    size_t na = 0;
    char *const *command = ov && ov->command ? ov->command : launch->command;
    size_t n_command = ov && ov->command ? ov->n_command : launch->n_command;
    int32_t record_rank = ov ? ov->record_rank : launch->rank;

    /* Refusals first: nothing is created or started for a rank that may not run. */
    rc = tide_launcher_run_as(l, launch, &ra, err);
    if (rc < 0)
        goto done;
    if (ra.do_switch && !launch->workdir[0]) {
        /* Not the data dir, which is the worker's: the account's home, else the root. */
        workdir = ra.account.home[0] && stat(ra.account.home, &st) == 0 && S_ISDIR(st.st_mode)
                      ? ra.account.home
                      : "/";
    }
    if (stat(workdir, &st) < 0) {
        rc = -errno;
        tide_errprintf(err, "workdir %s: %s", workdir, uv_strerror(rc));
        goto done;
    }
    if (!S_ISDIR(st.st_mode)) {
        rc = -ENOTDIR;
        tide_errprintf(err, "workdir %s: %s", workdir, uv_strerror(rc));
        goto done;
    }
    if (n_command == 0) {
        rc = -EINVAL;
        tide_errprintf(err, "spawn: empty command");
        goto done;
    }
    if (launch->burst)
        master_port = 0; /* no rendezvous */
    else if (launch->rank == 0 && master_port == 0 && !(ov && ov->no_master_port)) {
        rc = pick_port(l->advertise, &master_port, err);
        if (rc < 0)
            goto done;
    }
    rc = open_log(l, launch, ov ? ov->log_path : NULL, &logfd, err);
    if (rc < 0)
        goto done;
    if (ra.do_switch && fchown(logfd, ra.account.uid, ra.account.gid) < 0)
        tide_warn("job %s rank %d: chown of its log to %s: %s", launch->job_id, launch->rank,
                  ra.account.name, strerror(errno));
    if (pipe2(sp, O_CLOEXEC) < 0) {
        rc = -errno;
        tide_errprintf(err, "spawn %s: pipe: %s", command[0], uv_strerror(rc));
        goto done;
    }
    build_env(l, launch, master_port, true, &ra, &env);
    for (size_t i = 0; ov && i < ov->n_env; i++) {
        const char *eq = strchr(ov->env[i], '=');
        char *name;
        if (!eq || eq == ov->env[i])
            continue;
        name = tide_xstrndup(ov->env[i], (size_t)(eq - ov->env[i]));
        env_set(&env, name, eq + 1);
        free(name);
    }
    snprintf(parent, sizeof(parent), "%d", (int)uv_os_getpid());
    args = tide_xcalloc(n_command + 23, sizeof(char *));
    args[na++] = l->exec_helper;
    args[na++] = "--parent";
    args[na++] = parent;
    args[na++] = "--status-fd";
    args[na++] = "3";
    if (ra.do_switch) {
        envfd = env_memfd(&env);
        if (envfd < 0) {
            rc = envfd;
            envfd = -1;
            tide_errprintf(err, "spawn %s: the environment for user %s: %s", command[0],
                           ra.account.name, uv_strerror(rc));
            goto done;
        }
        snprintf(uid, sizeof(uid), "%u", (unsigned)ra.account.uid);
        snprintf(gid, sizeof(gid), "%u", (unsigned)ra.account.gid);
        for (size_t i = 0; i < ra.account.n_groups; i++)
            tide_buf_printf(&groups, "%s%u", i ? "," : "", (unsigned)ra.account.groups[i]);
        if (ra.account.n_groups == 0)
            tide_buf_printf(&groups, "%u", (unsigned)ra.account.gid);
        args[na++] = "--uid";
        args[na++] = uid;
        args[na++] = "--gid";
        args[na++] = gid;
        args[na++] = "--groups";
        args[na++] = (char *)tide_buf_cstr(&groups);
        args[na++] = "--user";
        args[na++] = ra.account.name;
        args[na++] = "--home";
        args[na++] = ra.account.home[0] ? ra.account.home : "/";
        args[na++] = "--env-fd";
        args[na++] = "4";
        args[na++] = "--chdir";
        args[na++] = (char *)workdir;
    }
    args[na++] = "--";
    for (size_t i = 0; i < n_command; i++)
        args[na++] = command[i];
    args[na] = NULL;

    memset(&opts, 0, sizeof(opts));
    stdio[0].flags = UV_IGNORE;
    stdio[1].flags = UV_INHERIT_FD;
    stdio[1].data.fd = logfd;
    stdio[2].flags = UV_INHERIT_FD;
    stdio[2].data.fd = logfd;
    stdio[3].flags = UV_INHERIT_FD;
    stdio[3].data.fd = sp[1];
    if (envfd >= 0) {
        stdio[4].flags = UV_INHERIT_FD;
        stdio[4].data.fd = envfd;
    }
    opts.file = l->exec_helper;
    opts.args = args;
    /* A rank switching accounts gets its environment from fd 4 in the helper's child: the helper
     * itself (root) runs with the worker's own, never the job's (LD_PRELOAD, ...). */
    opts.env = envfd >= 0 ? NULL : env.kv;
    opts.cwd = workdir;
    opts.flags = UV_PROCESS_DETACHED; /* setsid: the helper leads a new session and process group */
    opts.stdio = stdio;
    opts.stdio_count = envfd >= 0 ? 5 : 4;
    opts.exit_cb = on_proc_exit;

    p = tide_xcalloc(1, sizeof(*p));
    p->id = id;
    p->mpi_runtime = ov && ov->mpi_runtime;
    p->l = l;
    tide_list_init(&p->link);
    uv_timer_init(l->loop, &p->kill_timer);
    p->kill_timer.data = p;
    p->handle.data = p;
    p->open_handles = 2;
    rc = uv_spawn(l->loop, &p->handle, &opts);
    if (rc < 0) {
        tide_errprintf(err, "spawn %s: exec helper %s: %s", command[0], l->exec_helper,
                       uv_strerror(rc));
        proc_close(p); /* a handle that failed to spawn must still be closed */
        p = NULL;
        goto done;
    }
    p->pid = p->handle.pid;
    tide_list_push_back(&l->procs, &p->link);
    close(sp[1]);
    sp[1] = -1;
    close(logfd);
    logfd = -1;
    if (envfd >= 0) {
        close(envfd);
        envfd = -1;
    }

    rc = read_report(sp[0], l->report_timeout_ms, report, sizeof(report));
    if (rc < 0 || strcmp(report, "ok") != 0) {
        if (rc == -ETIMEDOUT)
            tide_errprintf(err, "spawn %s: exec helper did not report within %u ms",
                           command[0], l->report_timeout_ms);
        else if (rc == 0 && strncmp(report, "err ", 4) == 0)
            tide_errprintf(err, "%s", report + 4);
        else
            tide_errprintf(err, "spawn %s: exec helper exited without a report",
                           command[0]);
        kill(-p->pid, SIGKILL); /* no-op when it already exits 127 */
        p->failed = true;
        rc = rc < 0 ? rc : -ECHILD;
        goto done;
    }
    /* The helper cannot have been reaped yet (that happens on the loop), so /proc has it. */
    rec.pid = p->pid;
    rec.pgid = p->pid;
    rc = tide_proc_stat(p->pid, NULL, &rec.start_time, NULL);
    if (rc == 0)
        rc = tide_worker_record_write(l->data_dir, launch->job_id, launch->generation, record_rank,
                                      &rec, err);
    else
        tide_errprintf(err, "spawn %s: /proc/%d/stat: %s", command[0], (int)p->pid,
                       uv_strerror(rc));
    if (rc < 0) {
        /* Without a record a restarted worker could not clean it up: do not run it. */
        kill(-p->pid, SIGKILL);
        p->failed = true;
        goto done;
    }
    out->pid = p->pid;
    out->master_port = master_port;
done:
    if (sp[0] >= 0)
        close(sp[0]);
    if (sp[1] >= 0)
        close(sp[1]);
    if (logfd >= 0)
        close(logfd);
    if (envfd >= 0)
        close(envfd);
    free(args);
    env_free(&env);
    tide_buf_free(&groups);
    tide_run_as_clear(&ra);
    return rc;
}
