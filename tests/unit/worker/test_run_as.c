/* Who a rank runs as (worker/run_as.c, and the switch in worker/launcher.c + worker/tide_exec.c).
 * Built twice: test_run_as checks every refusal rule of tide_run_as_decide against a fake account
 * lookup and the system lookup; test_run_as_switch (RUN_AS_SWITCH) starts real ranks through the
 * launcher as `nobody` and reads what they saw (id -u, id -G, HOME/USER/LOGNAME, TIDE_JOB_OWNER,
 * their log, TIDE_CKPT_DIR and the trainer socket, none of the job's environment in the root
 * helper), plus the launcher's refusals; it needs root and exits 77 (skipped) without it. Every wait
 * has a deadline; loops end leak-clean. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include <cmocka.h>

#include "config.h"
#include "datadir.h"
#include "launcher.h"
#include "run_as.h"
#include "worker_test_util.h"
#include "xmalloc.h"

static void assert_contains(const char *hay, const char *needle)
{
    if (!hay || !strstr(hay, needle)) {
        fprintf(stderr, "--- not found: '%s' in:\n%s\n---\n", needle, hay ? hay : "(null)");
        fail();
    }
}

#ifndef RUN_AS_SWITCH

/* --- the rules, on a fake lookup --- */

typedef struct fake_account {
    const char *name;
    uid_t uid;
    gid_t gid;
    const char *home;
    gid_t groups[4];
    size_t n_groups;
} fake_account_t;

static const fake_account_t accounts[] = {
    {"root", 0, 0, "/root", {0}, 1},
    {"toor", 0, 0, "/root", {0}, 1}, /* another name for uid 0 */
    {"alice", 1000, 1000, "/home/alice", {1000, 27, 44}, 3},
    {"bob", 1001, 1001, "/home/bob", {1001}, 1},
};

typedef struct fake_lookup {
    int calls;
    int fail_with; /* 0: answer from accounts[] */
} fake_lookup_t;

static int fake_lookup(void *ud, const char *name, tide_run_as_account_t *out)
{
    fake_lookup_t *f = ud;

    f->calls++;
    if (f->fail_with)
        return f->fail_with;
    for (size_t i = 0; i < sizeof(accounts) / sizeof(accounts[0]); i++) {
        const fake_account_t *a = &accounts[i];
        if (strcmp(a->name, name) != 0)
            continue;
        memset(out, 0, sizeof(*out));
        out->name = tide_xstrdup(a->name);
        out->uid = a->uid;
        out->gid = a->gid;
        out->home = tide_xstrdup(a->home);
        out->groups = tide_xcalloc(a->n_groups, sizeof(gid_t));
        memcpy(out->groups, a->groups, a->n_groups * sizeof(gid_t));
        out->n_groups = a->n_groups;
        return 0;
    }
    return -ENOENT;
}

/* One decision: its return code, and the refusal text in err. */
static int decide(const char *run_as, uid_t euid, bool allow_root, fake_lookup_t *f,
                  tide_run_as_t *ra, tide_error_t *err)
{
    tide_error_clear(err);
    return tide_run_as_decide(run_as, euid, allow_root, "node1", fake_lookup, f, ra, err);
}

static void test_root_worker_empty_run_as(void **state)
{
    fake_lookup_t f = {0, 0};
    tide_run_as_t ra;
    tide_error_t err;

    (void)state;
    /* "" is the worker's own account: root, refused without --allow-root-jobs. */
    assert_int_equal(decide("", 0, false, &f, &ra, &err), -EPERM);
    assert_contains(err.text, "would run as root");
    assert_contains(err.text, "--allow-root-jobs");
    assert_false(ra.do_switch);
    /* Allowed: runs as root, no switch. */
    assert_int_equal(decide("", 0, true, &f, &ra, &err), 0);
    assert_false(ra.do_switch);
    assert_int_equal(f.calls, 0); /* nothing to look up */
    tide_run_as_clear(&ra);
}

static void test_root_worker_uid0_accounts(void **state)
{
    fake_lookup_t f = {0, 0};
    tide_run_as_t ra;
    tide_error_t err;

    (void)state;
    assert_int_equal(decide("root", 0, false, &f, &ra, &err), -EPERM);
    assert_contains(err.text, "user 'root' has uid 0");
    assert_contains(err.text, "--allow-root-jobs");
    assert_false(ra.do_switch);
    /* By uid, not by name. */
    assert_int_equal(decide("toor", 0, false, &f, &ra, &err), -EPERM);
    assert_contains(err.text, "user 'toor' has uid 0");
    /* Allowed: switched to it like any account (its groups and HOME). */
    assert_int_equal(decide("root", 0, true, &f, &ra, &err), 0);
    assert_true(ra.do_switch);
    assert_int_equal(ra.account.uid, 0);
    assert_string_equal(ra.account.home, "/root");
    tide_run_as_clear(&ra);
    assert_false(ra.do_switch);
    assert_null(ra.account.name);
}

static void test_root_worker_switches(void **state)
{
    fake_lookup_t f = {0, 0};
    tide_run_as_t ra;
    tide_error_t err;

    (void)state;
    for (int allow = 0; allow < 2; allow++) {
        assert_int_equal(decide("alice", 0, allow, &f, &ra, &err), 0);
        assert_true(ra.do_switch);
        assert_string_equal(ra.account.name, "alice");
        assert_int_equal(ra.account.uid, 1000);
        assert_int_equal(ra.account.gid, 1000);
        assert_string_equal(ra.account.home, "/home/alice");
        assert_int_equal(ra.account.n_groups, 3);
        assert_int_equal(ra.account.groups[0], 1000);
        assert_int_equal(ra.account.groups[1], 27);
        assert_int_equal(ra.account.groups[2], 44);
        tide_run_as_clear(&ra);
    }
}

static void test_unknown_account(void **state)
{
    fake_lookup_t f = {0, 0};
    tide_run_as_t ra;
    tide_error_t err;

    (void)state;
    /* The same words whoever the worker runs as. */
    assert_int_equal(decide("x", 0, false, &f, &ra, &err), -ENOENT);
    assert_string_equal(err.text, "user 'x' does not exist on node1");
    assert_false(ra.do_switch);
    assert_int_equal(decide("x", 0, true, &f, &ra, &err), -ENOENT);
    assert_string_equal(err.text, "user 'x' does not exist on node1");
    assert_int_equal(decide("x", 1000, false, &f, &ra, &err), -ENOENT);
    assert_string_equal(err.text, "user 'x' does not exist on node1");
    /* No node name: still a sentence. */
    tide_error_clear(&err);
    assert_int_equal(tide_run_as_decide("x", 0, false, NULL, fake_lookup, &f, &ra, &err), -ENOENT);
    assert_string_equal(err.text, "user 'x' does not exist on this node");
}

static void test_lookup_failure(void **state)
{
    fake_lookup_t f = {0, -EIO};
    tide_run_as_t ra;
    tide_error_t err;

    (void)state;
    assert_int_equal(decide("alice", 0, false, &f, &ra, &err), -EIO);
    assert_contains(err.text, "user 'alice': lookup failed on node1");
    assert_false(ra.do_switch);
}

static void test_non_root_worker(void **state)
{
    fake_lookup_t f = {0, 0};
    tide_run_as_t ra;
    tide_error_t err;

    (void)state;
    for (int allow = 0; allow < 2; allow++) {
        /* Its own account, by "" or by name: runs as it is, nothing to switch. */
        assert_int_equal(decide("", 1000, allow, &f, &ra, &err), 0);
        assert_false(ra.do_switch);
        assert_int_equal(decide("alice", 1000, allow, &f, &ra, &err), 0);
        assert_false(ra.do_switch);
        assert_null(ra.account.name); /* nothing left to free */
        /* Anyone else, root included: refused. */
        assert_int_equal(decide("bob", 1000, allow, &f, &ra, &err), -EPERM);
        assert_contains(err.text, "user 'bob' (uid 1001) is not the worker's own account (uid 1000)");
        assert_false(ra.do_switch);
        assert_int_equal(decide("root", 1000, allow, &f, &ra, &err), -EPERM);
        assert_contains(err.text, "user 'root' (uid 0) is not the worker's own account");
    }
}

static void test_bad_names(void **state)
{
    static const char *const bad[] = {"a/b", "a:b", "-x", "a\nb", "a\x7f", "tab\there"};
    fake_lookup_t f = {0, 0};
    tide_run_as_t ra;
    tide_error_t err;
    char long_name[300];

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(decide(bad[i], 0, true, &f, &ra, &err), -EINVAL);
        assert_contains(err.text, "is not a valid user name");
        assert_false(ra.do_switch);
    }
    memset(long_name, 'a', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    assert_int_equal(decide(long_name, 0, true, &f, &ra, &err), -EINVAL);
    assert_int_equal(f.calls, 0); /* never handed to NSS */
    /* NULL is "". */
    assert_int_equal(decide(NULL, 0, true, &f, &ra, &err), 0);
    assert_int_equal(decide(NULL, 0, false, &f, &ra, &err), -EPERM);
}

static void test_system_lookup(void **state)
{
    tide_run_as_account_t a;
    bool has0 = false;

    (void)state;
    memset(&a, 0, sizeof(a));
    assert_int_equal(tide_run_as_lookup_system(NULL, "root", &a), 0);
    assert_string_equal(a.name, "root");
    assert_int_equal(a.uid, 0);
    assert_int_equal(a.gid, 0);
    assert_true(a.n_groups >= 1);
    for (size_t i = 0; i < a.n_groups; i++)
        has0 = has0 || a.groups[i] == 0;
    assert_true(has0); /* the primary group is among them */
    assert_non_null(a.home);
    tide_run_as_account_clear(&a);
    tide_run_as_account_clear(NULL);
    assert_int_equal(tide_run_as_lookup_system(NULL, "tide-no-such-user-zq", &a), -ENOENT);
    /* And through the rules. */
    {
        tide_run_as_t ra;
        tide_error_t err;
        tide_error_clear(&err);
        assert_int_equal(tide_run_as_decide("tide-no-such-user-zq", 0, false, "n7",
                                            tide_run_as_lookup_system, NULL, &ra, &err),
                         -ENOENT);
        assert_string_equal(err.text, "user 'tide-no-such-user-zq' does not exist on n7");
    }
}

/* tide-worker's flag: off unless given. */
static void test_config_flag(void **state)
{
    char *tmp = wt_tmpdir(), *data = NULL;
    char *base[] = {"tide-worker", "--scheduler", "127.0.0.1:1", "--advertise", "127.0.0.1",
                    "--data-dir", NULL, "--allow-root-jobs", NULL};
    tide_worker_config_t cfg;
    tide_error_t err;

    (void)state;
    assert_true(asprintf(&data, "%s/d", tmp) > 0);
    base[6] = data;
    tide_error_clear(&err);
    assert_int_equal(tide_worker_config_parse(7, base, &cfg, &err), 0);
    assert_false(cfg.allow_root_jobs);
    tide_worker_config_free(&cfg);
    assert_int_equal(tide_worker_config_parse(8, base, &cfg, &err), 0);
    assert_true(cfg.allow_root_jobs);
    tide_worker_config_free(&cfg);
    assert_non_null(strstr(tide_worker_usage(), "--allow-root-jobs"));
    wt_rmrf(tmp);
    free(data);
    free(tmp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_flag),
        cmocka_unit_test(test_root_worker_empty_run_as),
        cmocka_unit_test(test_root_worker_uid0_accounts),
        cmocka_unit_test(test_root_worker_switches),
        cmocka_unit_test(test_unknown_account),
        cmocka_unit_test(test_lookup_failure),
        cmocka_unit_test(test_non_root_worker),
        cmocka_unit_test(test_bad_names),
        cmocka_unit_test(test_system_lookup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else /* RUN_AS_SWITCH */

/* --- real ranks as `nobody` through the launcher and tide-exec --- */

#define WAIT_MS 15000

typedef struct fixture {
    char *tmp, *data, *hot, *sock;
    int sock_fd;
    uv_loop_t loop;
    tide_launcher_t *l;
    int n_exits;
    int64_t exit_status;
    tide_run_as_account_t nobody;
} fixture_t;

static void on_exit_cb(uint64_t id, int64_t exit_status, int term_signal, void *ud)
{
    fixture_t *fx = ud;

    (void)id;
    (void)term_signal;
    fx->n_exits++;
    fx->exit_status = exit_status;
}

static int setup(void **state)
{
    fixture_t *fx = calloc(1, sizeof(*fx));
    struct sockaddr_un sa;
    tide_launcher_config_t lc;

    assert_int_equal(tide_run_as_lookup_system(NULL, "nobody", &fx->nobody), 0);
    fx->tmp = wt_tmpdir();
    /* As /var/lib/tide/worker and /dev/shm are: the way down to the data dir is open. */
    assert_int_equal(chmod(fx->tmp, 0711), 0);
    assert_true(asprintf(&fx->data, "%s/data", fx->tmp) > 0);
    assert_true(asprintf(&fx->hot, "%s/shm/tide-0/n1-gpu0", fx->tmp) > 0);
    assert_int_equal(tide_worker_datadir_prepare(fx->data, NULL), 0);
    {
        /* Our /dev/shm, as open as the real one; tide makes tide-0/n1-gpu0 below it. */
        char *shm = NULL;
        assert_true(asprintf(&shm, "%s/shm", fx->tmp) > 0);
        assert_int_equal(mkdir(shm, 0700), 0);
        assert_int_equal(chmod(shm, 01777), 0);
        free(shm);
    }
    /* The trainer socket as trainer_server.c makes it: 0600, the worker's. */
    assert_true(asprintf(&fx->sock, "%s/agent.sock", fx->data) > 0);
    fx->sock_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", fx->sock);
    assert_int_equal(bind(fx->sock_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(chmod(fx->sock, 0600), 0);
    assert_int_equal(listen(fx->sock_fd, 8), 0);
    assert_int_equal(uv_loop_init(&fx->loop), 0);
    memset(&lc, 0, sizeof(lc));
    lc.exec_helper = TIDE_EXEC_PATH;
    lc.data_dir = fx->data;
    lc.worker_id = "n1/gpu0";
    lc.advertise = "127.0.0.1";
    lc.agent_sock = fx->sock;
    lc.ckpt_hot = fx->hot;
    lc.refuse_root_jobs = true; /* tide-worker without --allow-root-jobs */
    lc.node = "n1";
    lc.on_exit = on_exit_cb;
    lc.ud = fx;
    tide_launcher_new(&fx->loop, &lc, &fx->l);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *fx = *state;

    tide_launcher_free(fx->l);
    assert_int_equal(wt_loop_finish(&fx->loop), 0);
    close(fx->sock_fd);
    wt_rmrf(fx->tmp);
    tide_run_as_account_clear(&fx->nobody);
    free(fx->data);
    free(fx->hot);
    free(fx->sock);
    free(fx->tmp);
    free(fx);
    return 0;
}

static bool cond_exit(void *arg)
{
    return ((fixture_t *)arg)->n_exits > 0;
}

static void launch_init(Tide__V1__LaunchRank *l, const char *job, char **cmd, size_t n_cmd)
{
    tide__v1__launch_rank__init(l);
    l->job_id = (char *)job;
    l->generation = 3;
    l->rank = 0;
    l->world_size = 1;
    l->local_world_size = 1;
    l->command = cmd;
    l->n_command = n_cmd;
}

/* What the rank saw, one fact a line, then it waits (so that its helper can be looked at) until
 * the test stops it. */
static const char rank_script[] =
    "echo uid=$(id -u) gid=$(id -g) groups=$(id -G | tr ' ' ,)\n"
    "echo home=$HOME user=$USER logname=$LOGNAME owner=$TIDE_JOB_OWNER pwd=$(pwd)\n"
    "echo ldpath=${LD_LIBRARY_PATH:-none} mark=$TIDE_TEST_MARK\n"
    "echo to-log-by-name >> \"$RANK_LOG\" && echo log-by-name-ok\n"
    "mkdir -p \"$TIDE_CKPT_DIR/step-1/rank-0\" && echo x > \"$TIDE_CKPT_DIR/step-1/rank-0/m\" && "
    "echo ckpt-ok\n"
    "/usr/bin/python3 -c 'import os,socket; s=socket.socket(socket.AF_UNIX); "
    "s.connect(os.environ[\"TIDE_AGENT_SOCK\"]); print(\"sock-ok\")' 2>&1\n"
    "echo done\n"
    "exec sleep 60\n";

static void test_rank_runs_as_nobody(void **state)
{
    fixture_t *fx = *state;
    Tide__V1__LaunchRank l;
    Tide__V1__LaunchRank__EnvEntry e1 = TIDE__V1__LAUNCH_RANK__ENV_ENTRY__INIT;
    Tide__V1__LaunchRank__EnvEntry e2 = TIDE__V1__LAUNCH_RANK__ENV_ENTRY__INIT;
    Tide__V1__LaunchRank__EnvEntry e3 = TIDE__V1__LAUNCH_RANK__ENV_ENTRY__INIT;
    Tide__V1__LaunchRank__EnvEntry *envp[3] = {&e1, &e2, &e3};
    char *cmd[] = {"sh", "-c", (char *)rank_script};
    char *log = tide_worker_log_path(fx->data, "jr", 3, 0), *text, *ckpt, *file, *environ_path;
    char want[256], *helper_env;
    tide_worker_spawned_t out;
    tide_error_t err;
    wt_file_needle_t done = {log, "done\n"};
    struct stat st;

    (void)state;
    launch_init(&l, "jr", cmd, 3);
    l.run_as = "nobody";
    l.owner = "alice@example.org";
    e1.key = "RANK_LOG";
    e1.value = log;
    e2.key = "TIDE_TEST_MARK";
    e2.value = "job-env";
    /* The job's LD_* reach the rank only, never tide-exec, which runs as root. */
    e3.key = "LD_LIBRARY_PATH";
    e3.value = "/nonexistent/tide-test-lib";
    l.env = envp;
    l.n_env = 3;
    tide_error_clear(&err);
    assert_int_equal(tide_launcher_spawn(fx->l, 1, &l, &out, &err), 0);
    assert_true(wt_poll_until(wt_cond_file_contains, &done, WAIT_MS));

    /* The helper (the group leader) is still root and has none of the job's environment. */
    assert_true(asprintf(&environ_path, "/proc/%d/environ", out.pid) > 0);
    {
        int fd = open(environ_path, O_RDONLY | O_CLOEXEC);
        ssize_t n;
        size_t len = 0;
        helper_env = calloc(1, 1 << 20);
        assert_true(fd >= 0);
        while ((n = read(fd, helper_env + len, (1 << 20) - len)) > 0)
            len += (size_t)n;
        close(fd);
        assert_true(len > 0);
        assert_null(memmem(helper_env, len, "TIDE_TEST_MARK", 14));
        assert_null(memmem(helper_env, len, "tide-test-lib", 13));
        assert_int_equal(stat(environ_path, &st), 0);
        assert_int_equal(st.st_uid, 0);
    }
    free(helper_env);
    free(environ_path);

    text = wt_read_file(log);
    snprintf(want, sizeof(want), "uid=%u gid=%u groups=", (unsigned)fx->nobody.uid,
             (unsigned)fx->nobody.gid);
    assert_contains(text, want);
    {
        /* id -G: exactly the account's groups (root's 0 is gone). */
        char *g = strstr(text, "groups=") + 7;
        size_t len = strcspn(g, "\n");
        char groups[128] = "";
        for (size_t i = 0; i < fx->nobody.n_groups; i++)
            snprintf(groups + strlen(groups), sizeof(groups) - strlen(groups), "%s%u",
                     i ? "," : "", (unsigned)fx->nobody.groups[i]);
        assert_int_equal(len, strlen(groups));
        assert_memory_equal(g, groups, len);
    }
    snprintf(want, sizeof(want), "home=%s user=nobody logname=nobody owner=alice@example.org pwd=",
             fx->nobody.home);
    assert_contains(text, want);
    assert_contains(text, "ldpath=/nonexistent/tide-test-lib mark=job-env\n");
    assert_contains(text, "log-by-name-ok\n");
    assert_contains(text, "to-log-by-name\n");
    assert_contains(text, "ckpt-ok\n");
    assert_contains(text, "sock-ok\n");
    free(text);

    /* What the worker made for it is its own. */
    assert_int_equal(stat(log, &st), 0);
    assert_int_equal(st.st_uid, fx->nobody.uid);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_true(asprintf(&ckpt, "%s/jr", fx->hot) > 0);
    assert_int_equal(stat(ckpt, &st), 0);
    assert_int_equal(st.st_uid, fx->nobody.uid);
    assert_int_equal(st.st_mode & 0777, 0700);
    assert_true(asprintf(&file, "%s/step-1/rank-0/m", ckpt) > 0);
    assert_int_equal(stat(file, &st), 0);
    assert_int_equal(st.st_uid, fx->nobody.uid);
    assert_int_equal(stat(fx->sock, &st), 0);
    assert_int_equal(st.st_uid, fx->nobody.uid);
    assert_int_equal(st.st_mode & 0777, 0600); /* its account only, not everyone */
    /* The rest of the data dir stays closed: traversable, not listable. */
    assert_int_equal(stat(fx->data, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0711);
    free(file);
    free(ckpt);

    assert_int_equal(tide_launcher_stop(fx->l, 1, 0), 0);
    assert_true(wt_run_until(&fx->loop, cond_exit, fx, WAIT_MS));
    free(log);
}

static void test_refusals_start_nothing(void **state)
{
    fixture_t *fx = *state;
    Tide__V1__LaunchRank l;
    char *cmd[] = {"sh", "-c", "echo ran"};
    tide_worker_spawned_t out;
    tide_error_t err;
    char *log, *dir;
    struct stat st;

    launch_init(&l, "jx", cmd, 3);
    /* The worker runs as root without --allow-root-jobs. */
    l.run_as = "";
    tide_error_clear(&err);
    assert_int_equal(tide_launcher_spawn(fx->l, 1, &l, &out, &err), -EPERM);
    assert_contains(err.text, "would run as root");
    l.run_as = "root";
    tide_error_clear(&err);
    assert_int_equal(tide_launcher_spawn(fx->l, 2, &l, &out, &err), -EPERM);
    assert_contains(err.text, "user 'root' has uid 0");
    l.run_as = "tide-no-such-user-zq";
    tide_error_clear(&err);
    assert_int_equal(tide_launcher_spawn(fx->l, 3, &l, &out, &err), -ENOENT);
    assert_string_equal(err.text, "user 'tide-no-such-user-zq' does not exist on n1");
    assert_int_equal(tide_launcher_running(fx->l), 0);
    /* Nothing was made for them: no log, no checkpoint dir, no record. */
    log = tide_worker_log_path(fx->data, "jx", 3, 0);
    assert_int_not_equal(stat(log, &st), 0);
    assert_true(asprintf(&dir, "%s/jx", fx->hot) > 0);
    assert_int_not_equal(stat(dir, &st), 0);
    free(dir);
    assert_true(asprintf(&dir, "%s/ranks/jx.3.0", fx->data) > 0);
    assert_int_not_equal(stat(dir, &st), 0);
    free(dir);
    free(log);
    assert_int_equal(fx->n_exits, 0);
}

static void test_switch_failure_is_failed_start(void **state)
{
    fixture_t *fx = *state;
    Tide__V1__LaunchRank l;
    char *cmd[] = {"sh", "-c", "echo ran"};
    tide_worker_spawned_t out;
    tide_error_t err;
    char *closed;

    /* A workdir the account cannot enter: the rank does not start, as root or otherwise. */
    assert_true(asprintf(&closed, "%s/closed", fx->tmp) > 0);
    assert_int_equal(mkdir(closed, 0700), 0);
    launch_init(&l, "jw", cmd, 3);
    l.run_as = "nobody";
    l.workdir = closed;
    tide_error_clear(&err);
    assert_true(tide_launcher_spawn(fx->l, 1, &l, &out, &err) < 0);
    assert_contains(err.text, "workdir ");
    assert_contains(err.text, "permission denied (as user nobody)");
    assert_int_equal(tide_launcher_running(fx->l), 0);
    free(closed);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_rank_runs_as_nobody, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals_start_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_switch_failure_is_failed_start, setup, teardown),
    };

    if (geteuid() != 0) {
        fprintf(stderr, "test_run_as_switch: not root, skipped (a rank switches accounts only "
                        "under a root worker)\n");
        return 77;
    }
    {
        tide_run_as_account_t a;
        if (tide_run_as_lookup_system(NULL, "nobody", &a) < 0) {
            fprintf(stderr, "test_run_as_switch: no user 'nobody' here, skipped\n");
            return 77;
        }
        tide_run_as_account_clear(&a);
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
