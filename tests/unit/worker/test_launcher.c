/* Unit tests of the rank launcher and the exec helper with real local processes (worker/launcher.c,
 * worker/tide_exec.c, worker/datadir.c): environment (a burst rank's too), workdir, log file, exit
 * codes and signals, stop with grace and SIGKILL of the whole group, spawn failures, leftover
 * records killed at startup, and the helper killing its group when its parent dies. Every wait has
 * a deadline; loops end leak-clean. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include <cmocka.h>

#include "datadir.h"
#include "launcher.h"
#include "worker_test_util.h"

#define WAIT_MS 15000

typedef struct fixture {
    char *tmp;
    char *data;
    uv_loop_t loop;
    tide_launcher_t *l;
    int n_exits;
    uint64_t exit_id[16];
    int64_t exit_status[16];
    int exit_signal[16];
} fixture_t;

static void on_exit_cb(uint64_t id, int64_t exit_status, int term_signal, void *ud)
{
    fixture_t *fx = ud;

    assert_true(fx->n_exits < 16);
    fx->exit_id[fx->n_exits] = id;
    fx->exit_status[fx->n_exits] = exit_status;
    fx->exit_signal[fx->n_exits] = term_signal;
    fx->n_exits++;
}

static void launcher_make(fixture_t *fx, const char *helper, tide_launcher_t **out)
{
    tide_launcher_config_t lc = {
        .exec_helper = helper,
        .data_dir = fx->data,
        .worker_id = "w1",
        .advertise = "127.0.0.1",
        .gpu_index = 4,
        .on_exit = on_exit_cb,
        .ud = fx,
    };
    tide_launcher_new(&fx->loop, &lc, out);
}

static int setup(void **state)
{
    fixture_t *fx = calloc(1, sizeof(*fx));

    fx->tmp = wt_tmpdir();
    assert_true(asprintf(&fx->data, "%s/data", fx->tmp) > 0);
    assert_int_equal(tide_worker_datadir_prepare(fx->data, NULL), 0);
    assert_int_equal(uv_loop_init(&fx->loop), 0);
    launcher_make(fx, TIDE_EXEC_PATH, &fx->l);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *fx = *state;

    tide_launcher_free(fx->l);
    assert_int_equal(wt_loop_finish(&fx->loop), 0);
    wt_rmrf(fx->tmp);
    free(fx->data);
    free(fx->tmp);
    free(fx);
    return 0;
}

typedef struct exits_cond {
    fixture_t *fx;
    int n;
} exits_cond_t;

static bool cond_exits(void *arg)
{
    exits_cond_t *c = arg;
    return c->fx->n_exits >= c->n;
}

static void wait_exits(fixture_t *fx, int n)
{
    exits_cond_t c = {fx, n};
    assert_true(wt_run_until(&fx->loop, cond_exits, &c, WAIT_MS));
}

/* A LaunchRank on the stack-ish: the caller keeps `cmd` and `env` alive. */
static void launch_init(Tide__V1__LaunchRank *l, const char *job, int gen, int rank, char **cmd,
                        size_t n_cmd)
{
    tide__v1__launch_rank__init(l);
    l->job_id = (char *)job;
    l->generation = gen;
    l->rank = rank;
    l->world_size = rank + 1;
    l->local_world_size = 1;
    l->command = cmd;
    l->n_command = n_cmd;
}

static char *log_of(fixture_t *fx, const char *job, int gen, int rank)
{
    char *path = tide_worker_log_path(fx->data, job, gen, rank);
    char *s = wt_read_file(path);

    free(path);
    return s;
}

static void assert_contains(const char *hay, const char *needle)
{
    if (!hay || !strstr(hay, needle))
        fail_msg("'%s' not found in:\n%s", needle, hay ? hay : "(null)");
}

static void test_env_workdir_log_exit(void **state)
{
    fixture_t *fx = *state;
    char *cmd[] = {"/bin/sh", "-c",
                   ("env; echo cwd=$(pwd); echo to-stderr >&2; "
                    "if [ -e /proc/$$/fd/100 ]; then echo fd-leaked; fi; exit 7")};
    Tide__V1__LaunchRank__EnvEntry e1 = TIDE__V1__LAUNCH_RANK__ENV_ENTRY__INIT;
    Tide__V1__LaunchRank__EnvEntry e2 = TIDE__V1__LAUNCH_RANK__ENV_ENTRY__INIT;
    Tide__V1__LaunchRank__EnvEntry *envp[] = {&e1, &e2};
    int32_t gpus[] = {2, 5};
    Tide__V1__LaunchRank l;
    tide_worker_spawned_t sp;
    tide_error_t err;
    char *wd, *log, *rec_path, *rec, want[128];
    int leak;

    assert_true(asprintf(&wd, "%s/wd", fx->tmp) > 0);
    mkdir(wd, 0700);
    launch_init(&l, "j1", 3, 0, cmd, 3);
    l.world_size = 2;
    l.local_world_size = 2;
    l.restart_count = 1;
    l.max_restarts = 3;
    l.run_id = "run-9";
    l.node_gpu_indexes = gpus;
    l.n_node_gpu_indexes = 2;
    l.workdir = wd;
    e1.key = "FOO";
    e1.value = "bar";
    e2.key = "RANK"; /* tide's variables win over the job's */
    e2.value = "999";
    l.env = envp;
    l.n_env = 2;

    /* An fd the worker holds without close-on-exec must not reach the rank. */
    leak = open("/dev/null", O_RDONLY);
    assert_int_equal(dup2(leak, 100), 100);
    close(leak);
    assert_int_equal(tide_launcher_spawn(fx->l, 11, &l, &sp, &err), 0);
    close(100);
    assert_true(sp.pid > 1);
    assert_true(sp.master_port > 0 && sp.master_port < 65536);
    assert_int_equal(tide_launcher_running(fx->l), 1);
    /* The record is there before spawn returns. */
    assert_true(asprintf(&rec_path, "%s/ranks/j1.3.0", fx->data) > 0);
    rec = wt_read_file(rec_path);
    snprintf(want, sizeof(want), "pid %d\npgid %d\nstart_time ", sp.pid, sp.pid);
    assert_non_null(rec);
    assert_true(strncmp(rec, want, strlen(want)) == 0);
    free(rec);

    wait_exits(fx, 1);
    assert_int_equal(fx->exit_id[0], 11);
    assert_int_equal(fx->exit_status[0], 7);
    assert_int_equal(fx->exit_signal[0], 0);
    assert_int_equal(tide_launcher_running(fx->l), 0);

    log = log_of(fx, "j1", 3, 0);
    assert_contains(log, "\nRANK=0\n");
    assert_contains(log, "\nLOCAL_RANK=0\n");
    assert_contains(log, "\nWORLD_SIZE=2\n");
    assert_contains(log, "\nLOCAL_WORLD_SIZE=2\n");
    assert_contains(log, "\nGROUP_RANK=0\n");
    assert_contains(log, "\nROLE_RANK=0\n");
    assert_contains(log, "\nROLE_WORLD_SIZE=2\n");
    assert_contains(log, "\nMASTER_ADDR=127.0.0.1\n");
    snprintf(want, sizeof(want), "\nMASTER_PORT=%d\n", sp.master_port);
    assert_contains(log, want);
    assert_contains(log, "\nTORCHELASTIC_RESTART_COUNT=1\n");
    assert_contains(log, "\nTORCHELASTIC_MAX_RESTARTS=3\n");
    assert_contains(log, "\nTORCHELASTIC_RUN_ID=run-9\n");
    assert_contains(log, "\nTIDE_JOB_ID=j1\n");
    assert_contains(log, "\nTIDE_GENERATION=3\n");
    assert_contains(log, "\nTIDE_WORKER_ID=w1\n");
    assert_contains(log, "\nCUDA_VISIBLE_DEVICES=2,5\n");
    assert_contains(log, "\nFOO=bar\n");
    assert_null(strstr(log, "RANK=999"));
    assert_non_null(getenv("PATH"));
    assert_contains(log, "\nPATH="); /* the worker's own environment */
    snprintf(want, sizeof(want), "cwd=%s\n", wd);
    assert_contains(log, want);
    assert_contains(log, "to-stderr\n");
    assert_null(strstr(log, "fd-leaked"));
    free(log);

    /* The record stays until the exit is reported. */
    assert_true(access(rec_path, F_OK) == 0);
    tide_launcher_forget(fx->l, "j1", 3, 0);
    assert_true(access(rec_path, F_OK) < 0 && errno == ENOENT);
    free(rec_path);
    free(wd);
}

static void test_defaults_and_given_port(void **state)
{
    fixture_t *fx = *state;
    char *cmd[] = {"/bin/sh", "-c", "env; echo cwd=$(pwd)"};
    Tide__V1__LaunchRank l;
    tide_worker_spawned_t sp;
    tide_error_t err;
    char *log, want[256];

    /* Rank 1: MASTER_* as given; no GPU list: this worker's GPU; no workdir: the data dir. */
    launch_init(&l, "j2", 1, 1, cmd, 3);
    l.master_addr = "10.9.8.7";
    l.master_port = 29511;
    assert_int_equal(tide_launcher_spawn(fx->l, 1, &l, &sp, &err), 0);
    assert_int_equal(sp.master_port, 29511);
    wait_exits(fx, 1);
    assert_int_equal(fx->exit_status[0], 0);
    log = log_of(fx, "j2", 1, 1);
    assert_contains(log, "\nMASTER_ADDR=10.9.8.7\n");
    assert_contains(log, "\nMASTER_PORT=29511\n");
    assert_contains(log, "\nCUDA_VISIBLE_DEVICES=4\n");
    assert_contains(log, "\nTORCHELASTIC_RUN_ID=j2\n");
    snprintf(want, sizeof(want), "cwd=%s\n", fx->data);
    assert_contains(log, want);
    free(log);
}

/* Whether `name=` starts a line of log (the env output follows a first line of its own). */
static bool has_var(const char *log, const char *name)
{
    char needle[64];

    snprintf(needle, sizeof(needle), "\n%s=", name);
    return log && strstr(log, needle) != NULL;
}

/* A burst rank (LaunchRank.burst, docs/elastic.md "Burst"): TIDE_BURST, TIDE_BURST_INDEX (rank -
 * world_size) and TIDE_RANK, none of the member variables even when the worker's environment or the
 * job's env map has them, no MASTER_PORT picked; the job's env, workdir and TIDE_* as for any rank.
 * A member rank gets TIDE_RANK too, never an inherited TIDE_BURST. */
static void test_burst_env(void **state)
{
    fixture_t *fx = *state;
    static const char *const member[] = {
        "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
        "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
        "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID"};
    char *cmd[] = {"/bin/sh", "-c", "echo ---; env; echo cwd=$(pwd)"};
    Tide__V1__LaunchRank__EnvEntry e1 = TIDE__V1__LAUNCH_RANK__ENV_ENTRY__INIT;
    Tide__V1__LaunchRank__EnvEntry e2 = TIDE__V1__LAUNCH_RANK__ENV_ENTRY__INIT;
    Tide__V1__LaunchRank__EnvEntry *envp[] = {&e1, &e2};
    Tide__V1__LaunchRank l;
    tide_worker_spawned_t sp = {0, 0};
    tide_error_t err;
    char *log, *wd, want[256];

    assert_true(asprintf(&wd, "%s/wd", fx->tmp) > 0);
    mkdir(wd, 0700);
    /* what a worker started inside another launcher could inherit */
    setenv("WORLD_SIZE", "77", 1);
    setenv("MASTER_ADDR", "10.1.1.1", 1);
    setenv("TIDE_BURST", "1", 1);
    launch_init(&l, "jb", 4, 5, cmd, 3);
    l.world_size = 3;
    l.burst = true;
    l.launcher = TIDE__V1__LAUNCHER__LAUNCHER_MPI; /* the launcher starts it all the same */
    l.master_addr = "10.9.8.7";
    l.master_port = 29500;
    l.workdir = wd;
    e1.key = "FOO";
    e1.value = "bar";
    e2.key = "RANK"; /* even the job's own */
    e2.value = "999";
    l.env = envp;
    l.n_env = 2;
    assert_int_equal(tide_launcher_spawn(fx->l, 21, &l, &sp, &err), 0);
    assert_true(sp.pid > 1);
    assert_int_equal(sp.master_port, 0);
    wait_exits(fx, 1);
    assert_int_equal(fx->exit_id[0], 21);
    assert_int_equal(fx->exit_status[0], 0);
    log = log_of(fx, "jb", 4, 5);
    assert_contains(log, "\nTIDE_BURST=1\n");
    assert_contains(log, "\nTIDE_BURST_INDEX=2\n");
    assert_contains(log, "\nTIDE_RANK=5\n");
    assert_contains(log, "\nTIDE_JOB_ID=jb\n");
    assert_contains(log, "\nTIDE_GENERATION=4\n");
    assert_contains(log, "\nTIDE_WORKER_ID=w1\n");
    assert_contains(log, "\nCUDA_VISIBLE_DEVICES=4\n");
    assert_contains(log, "\nFOO=bar\n");
    snprintf(want, sizeof(want), "cwd=%s\n", wd);
    assert_contains(log, want);
    for (size_t i = 0; i < sizeof(member) / sizeof(member[0]); i++)
        if (has_var(log, member[i]))
            fail_msg("a burst rank got %s:\n%s", member[i], log);
    free(log);

    /* A member rank: TIDE_RANK beside RANK, no TIDE_BURST from the worker's environment. */
    launch_init(&l, "jb", 4, 1, cmd, 3);
    l.world_size = 3;
    l.master_port = 29500;
    assert_int_equal(tide_launcher_spawn(fx->l, 22, &l, &sp, &err), 0);
    assert_int_equal(sp.master_port, 29500);
    wait_exits(fx, 2);
    log = log_of(fx, "jb", 4, 1);
    assert_contains(log, "\nRANK=1\n");
    assert_contains(log, "\nTIDE_RANK=1\n");
    assert_contains(log, "\nWORLD_SIZE=3\n");
    assert_false(has_var(log, "TIDE_BURST"));
    assert_false(has_var(log, "TIDE_BURST_INDEX"));
    free(log);
    unsetenv("WORLD_SIZE");
    unsetenv("MASTER_ADDR");
    unsetenv("TIDE_BURST");
    free(wd);
}

static void test_signal_exit(void **state)
{
    fixture_t *fx = *state;
    char *cmd[] = {"/bin/sh", "-c", "kill -USR1 $$"};
    Tide__V1__LaunchRank l;
    tide_worker_spawned_t sp;
    tide_error_t err;

    launch_init(&l, "j3", 1, 0, cmd, 3);
    assert_int_equal(tide_launcher_spawn(fx->l, 5, &l, &sp, &err), 0);
    wait_exits(fx, 1);
    /* The helper dies of the same signal, so the worker sees it and reports 128+N. */
    assert_int_equal(fx->exit_signal[0], SIGUSR1);
    assert_int_equal(tide_worker_exit_code(fx->exit_status[0], fx->exit_signal[0]), 128 + SIGUSR1);
}

/* The rank's loop runs builtins only: see test_worker_agent.c's stop test for why. */
static void test_stop_trapped_term(void **state)
{
    fixture_t *fx = *state;
    char *cmd[] = {"/bin/sh", "-c",
                   "trap 'echo got-term; exit 0' TERM; echo ready; while :; do :; done"};
    Tide__V1__LaunchRank l;
    tide_worker_spawned_t sp;
    tide_error_t err;
    char *path = tide_worker_log_path(fx->data, "j4", 1, 0), *log;
    wt_file_needle_t ready = {path, "ready"};

    launch_init(&l, "j4", 1, 0, cmd, 3);
    assert_int_equal(tide_launcher_spawn(fx->l, 6, &l, &sp, &err), 0);
    assert_true(wt_poll_until(wt_cond_file_contains, &ready, WAIT_MS));
    assert_int_equal(tide_launcher_stop(fx->l, 6, 30000), 0);
    wait_exits(fx, 1);
    assert_int_equal(fx->exit_status[0], 0);
    assert_int_equal(fx->exit_signal[0], 0);
    log = wt_read_file(path);
    assert_contains(log, "got-term");
    free(log);
    free(path);
    assert_int_equal(tide_launcher_stop(fx->l, 6, 0), -ENOENT);
}

static void test_stop_ignored_term_kills_group(void **state)
{
    fixture_t *fx = *state;
    char *cmd[] = {"/bin/sh", "-c",
                   ("trap '' TERM; sh -c 'echo $$ > gc.tmp && mv gc.tmp gc.pid; exec sleep 1000' & "
                    "echo ready; wait")};
    Tide__V1__LaunchRank l;
    tide_worker_spawned_t sp;
    tide_error_t err;
    char *gc_path, *s;
    pid_t gc, helper;

    assert_true(asprintf(&gc_path, "%s/gc.pid", fx->data) > 0);
    launch_init(&l, "j5", 1, 0, cmd, 3);
    assert_int_equal(tide_launcher_spawn(fx->l, 7, &l, &sp, &err), 0);
    helper = sp.pid;
    assert_true(wt_poll_until(wt_cond_file_nonempty, gc_path, WAIT_MS));
    s = wt_read_file(gc_path);
    gc = (pid_t)atoi(s);
    free(s);
    assert_true(gc > 1);
    assert_false(wt_proc_gone(gc));

    /* SIGTERM is ignored by everyone in the group: SIGKILL after the grace takes all of them. */
    assert_int_equal(tide_launcher_stop(fx->l, 7, 300), 0);
    wait_exits(fx, 1);
    assert_int_equal(fx->exit_signal[0], SIGKILL);
    assert_int_equal(tide_worker_exit_code(fx->exit_status[0], fx->exit_signal[0]), 137);
    if (!wt_poll_until(wt_cond_proc_gone, &gc, WAIT_MS)) {
        kill(gc, SIGKILL); /* leave nothing behind, also when failing */
        fail_msg("grandchild %d survived the stop", (int)gc);
    }
    assert_true(wt_proc_gone(helper));
    free(gc_path);
}

static void test_leftover_in_group_killed_at_exit(void **state)
{
    fixture_t *fx = *state;
    char *cmd[] = {"/bin/sh", "-c",
                   ("sh -c 'echo $$ > st.tmp && mv st.tmp st.pid; exec sleep 1000' & "
                    "while [ ! -e st.pid ]; do sleep 0.01; done; exit 0")};
    Tide__V1__LaunchRank l;
    tide_worker_spawned_t sp;
    tide_error_t err;
    char *path, *s;
    pid_t straggler;

    /* The command exits leaving a child behind in its group: it goes with the rank. */
    launch_init(&l, "j6", 1, 0, cmd, 3);
    assert_int_equal(tide_launcher_spawn(fx->l, 8, &l, &sp, &err), 0);
    wait_exits(fx, 1);
    assert_int_equal(fx->exit_status[0], 0);
    assert_true(asprintf(&path, "%s/st.pid", fx->data) > 0);
    s = wt_read_file(path);
    assert_non_null(s);
    straggler = (pid_t)atoi(s);
    assert_true(straggler > 1);
    if (!wt_poll_until(wt_cond_proc_gone, &straggler, WAIT_MS)) {
        kill(straggler, SIGKILL);
        fail_msg("process %d left in the rank's group survived its exit", (int)straggler);
    }
    free(s);
    free(path);
}

static void test_spawn_failures(void **state)
{
    fixture_t *fx = *state;
    char *nocmd[] = {"no-such-command-xyz", "arg"};
    char *okcmd[] = {"/bin/true"};
    Tide__V1__LaunchRank l;
    tide_worker_spawned_t sp;
    tide_error_t err;
    tide_launcher_t *bad;
    char *file, *rec;
    char *notexec[1];

    /* No such command: the helper reports it; nothing runs, no record, no exit reported. */
    launch_init(&l, "j7", 1, 0, nocmd, 2);
    assert_int_equal(tide_launcher_spawn(fx->l, 1, &l, &sp, &err), -ECHILD);
    assert_string_equal(err.text, "spawn no-such-command-xyz: no such file or directory");
    assert_int_equal(tide_launcher_running(fx->l), 0);
    assert_true(asprintf(&rec, "%s/ranks/j7.1.0", fx->data) > 0);
    assert_true(access(rec, F_OK) < 0);
    free(rec);
    uv_run(&fx->loop, UV_RUN_DEFAULT); /* returns once the helper exited and closed */
    assert_int_equal(fx->n_exits, 0);

    /* Not executable. */
    assert_true(asprintf(&file, "%s/plain", fx->tmp) > 0);
    wt_write_file(file, "echo hi\n");
    chmod(file, 0644);
    notexec[0] = file;
    launch_init(&l, "j7", 2, 0, notexec, 1);
    assert_true(tide_launcher_spawn(fx->l, 2, &l, &sp, &err) < 0);
    assert_non_null(strstr(err.text, "permission denied"));
    uv_run(&fx->loop, UV_RUN_DEFAULT);

    /* Missing or bad workdir: refused before anything starts. */
    launch_init(&l, "j7", 3, 0, okcmd, 1);
    l.workdir = "/nonexistent-dir-xyz";
    assert_int_equal(tide_launcher_spawn(fx->l, 3, &l, &sp, &err), -ENOENT);
    assert_string_equal(err.text, "workdir /nonexistent-dir-xyz: no such file or directory");
    l.workdir = file;
    assert_int_equal(tide_launcher_spawn(fx->l, 4, &l, &sp, &err), -ENOTDIR);
    assert_non_null(strstr(err.text, "not a directory"));

    /* A missing exec helper. */
    launcher_make(fx, "/nonexistent/tide-exec", &bad);
    launch_init(&l, "j7", 4, 0, okcmd, 1);
    assert_true(tide_launcher_spawn(bad, 5, &l, &sp, &err) < 0);
    assert_non_null(strstr(err.text, "exec helper /nonexistent/tide-exec"));
    tide_launcher_free(bad);
    uv_run(&fx->loop, UV_RUN_DEFAULT);
    assert_int_equal(fx->n_exits, 0);
    free(file);
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;

    assert_non_null(d);
    while ((de = readdir(d)) != NULL)
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

static bool cond_pgid_is_pid(void *arg)
{
    pid_t pid = *(pid_t *)arg, pgid = 0;
    return tide_proc_stat(pid, &pgid, NULL, NULL) == 0 && pgid == pid;
}

static pid_t start_session_sleeper(void)
{
    pid_t p = fork();

    assert_true(p >= 0);
    if (p == 0) {
        setsid();
        execl("/bin/sleep", "sleep", "1000", (char *)NULL);
        _exit(127);
    }
    assert_true(wt_poll_until(cond_pgid_is_pid, &p, WAIT_MS));
    return p;
}

static void test_records_reaped_at_startup(void **state)
{
    fixture_t *fx = *state;
    tide_worker_record_t rec;
    tide_worker_reap_stats_t st;
    pid_t live, reused;
    char *path;
    int status;

    live = start_session_sleeper();
    reused = start_session_sleeper();
    rec.pid = rec.pgid = live;
    assert_int_equal(tide_proc_stat(live, NULL, &rec.start_time, NULL), 0);
    assert_int_equal(tide_worker_record_write(fx->data, "ja", 1, 0, &rec, NULL), 0);
    /* Same pid, other start time: the pid was reused by an unrelated process. Spared. */
    rec.pid = rec.pgid = reused;
    assert_int_equal(tide_proc_stat(reused, NULL, &rec.start_time, NULL), 0);
    rec.start_time += 1;
    assert_int_equal(tide_worker_record_write(fx->data, "jb", 1, 0, &rec, NULL), 0);
    /* Garbage, a record aimed at init, and a half-written temporary. */
    assert_true(asprintf(&path, "%s/ranks/jc.1.0", fx->data) > 0);
    wt_write_file(path, "nonsense");
    free(path);
    assert_true(asprintf(&path, "%s/ranks/jd.1.0", fx->data) > 0);
    wt_write_file(path, "pid 1\npgid 1\nstart_time 1\n");
    free(path);
    assert_true(asprintf(&path, "%s/ranks/je.1.0.tmp", fx->data) > 0);
    wt_write_file(path, "pid");
    free(path);

    assert_int_equal(tide_worker_records_reap(fx->data, 5000, &st, NULL), 0);
    assert_int_equal(st.killed, 1);
    assert_int_equal(st.stale, 1);
    assert_int_equal(st.invalid, 2);
    assert_int_equal(waitpid(live, &status, 0), live);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    assert_int_equal(waitpid(reused, &status, WNOHANG), 0); /* still running */
    assert_int_equal(kill(reused, 0), 0);

    /* Every record is gone. */
    assert_true(asprintf(&path, "%s/ranks", fx->data) > 0);
    assert_int_equal(count_entries(path), 0);
    free(path);
    kill(reused, SIGKILL);
    waitpid(reused, &status, 0);
}

static void test_epoch_file(void **state)
{
    fixture_t *fx = *state;
    uint64_t e = 99;
    char *path;
    tide_error_t err;

    assert_int_equal(tide_worker_epoch_load(fx->data, &e, NULL), 0);
    assert_int_equal(e, 0);
    assert_int_equal(tide_worker_epoch_save(fx->data, 12345678901ULL, NULL), 0);
    assert_int_equal(tide_worker_epoch_load(fx->data, &e, NULL), 0);
    assert_int_equal(e, 12345678901ULL);
    assert_true(asprintf(&path, "%s/epoch", fx->data) > 0);
    wt_write_file(path, "x1\n");
    assert_int_equal(tide_worker_epoch_load(fx->data, &e, &err), -EINVAL);
    assert_non_null(strstr(err.text, "not a number"));
    free(path);
}

static void test_datadir_mode(void **state)
{
    fixture_t *fx = *state;
    struct stat st;
    char *dir;

    assert_true(asprintf(&dir, "%s/a/b/c", fx->tmp) > 0);
    assert_int_equal(tide_worker_datadir_prepare(dir, NULL), 0);
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    free(dir);
}

/* The exec helper kills its group when the process that started it dies. */
static void test_exec_helper_parent_death(void **state)
{
    fixture_t *fx = *state;
    char *pidfile, *script, *s;
    pid_t parent, gc = 0, helper = 0;
    int status;

    assert_true(asprintf(&pidfile, "%s/pd.pid", fx->tmp) > 0);
    assert_true(asprintf(&script, "echo $$ $PPID > %s.tmp && mv %s.tmp %s; exec sleep 1000",
                         pidfile, pidfile, pidfile) > 0);
    parent = fork();
    assert_true(parent >= 0);
    if (parent == 0) {
        /* The throwaway parent: starts the helper, then waits to be killed. */
        pid_t h = fork();
        if (h == 0) {
            char ppid[16];
            snprintf(ppid, sizeof(ppid), "%d", (int)getppid());
            setsid();
            execl(TIDE_EXEC_PATH, "tide-exec", "--parent", ppid, "--", "/bin/sh", "-c", script,
                  (char *)NULL);
            _exit(127);
        }
        for (;;)
            pause();
    }
    assert_true(wt_poll_until(wt_cond_file_nonempty, pidfile, WAIT_MS));
    s = wt_read_file(pidfile);
    assert_int_equal(sscanf(s, "%d %d", &gc, &helper), 2);
    free(s);
    assert_false(wt_proc_gone(gc));
    assert_false(wt_proc_gone(helper));

    assert_int_equal(kill(parent, SIGKILL), 0);
    assert_int_equal(waitpid(parent, &status, 0), parent);
    if (!wt_poll_until(wt_cond_proc_gone, &gc, WAIT_MS) ||
        !wt_poll_until(wt_cond_proc_gone, &helper, WAIT_MS)) {
        kill(-helper, SIGKILL);
        kill(gc, SIGKILL);
        fail_msg("the helper's group outlived its parent");
    }
    free(script);
    free(pidfile);
}

/* A helper whose parent is already gone when it starts (the race PR_SET_PDEATHSIG cannot cover)
 * runs nothing. Bad usage exits 2. */
static void test_exec_helper_parent_gone_and_usage(void **state)
{
    fixture_t *fx = *state;
    char *marker;
    pid_t p;
    int status;

    assert_true(asprintf(&marker, "%s/ran", fx->tmp) > 0);
    p = fork();
    if (p == 0) {
        execl(TIDE_EXEC_PATH, "tide-exec", "--parent", "1", "--", "/usr/bin/touch", marker,
              (char *)NULL);
        _exit(127);
    }
    assert_int_equal(waitpid(p, &status, 0), p);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 1);
    assert_true(access(marker, F_OK) < 0);

    p = fork();
    if (p == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 2);
        execl(TIDE_EXEC_PATH, "tide-exec", "/bin/true", (char *)NULL);
        _exit(127);
    }
    assert_int_equal(waitpid(p, &status, 0), p);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 2);
    free(marker);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_env_workdir_log_exit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_defaults_and_given_port, setup, teardown),
        cmocka_unit_test_setup_teardown(test_burst_env, setup, teardown),
        cmocka_unit_test_setup_teardown(test_signal_exit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_trapped_term, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_ignored_term_kills_group, setup, teardown),
        cmocka_unit_test_setup_teardown(test_leftover_in_group_killed_at_exit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_spawn_failures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_records_reaped_at_startup, setup, teardown),
        cmocka_unit_test_setup_teardown(test_epoch_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_datadir_mode, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exec_helper_parent_death, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exec_helper_parent_gone_and_usage, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
