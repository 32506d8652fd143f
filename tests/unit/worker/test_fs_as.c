/* Unit tests of the worker's guards for files a rank's account owns: tide_fs_as_enter/leave
 * (fs_as.h: the calling thread, and only it, reads as the account; everything comes back) and
 * tide_fs_remove_tree (fsutil.h: a tree is removed without ever following a link, also while
 * another thread keeps swapping a directory of it for a link to a victim directory, as a hostile
 * account could during a prune or a forget). The fs_as cases need root (skipped otherwise); the
 * removal cases run as anyone. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "datadir.h"
#include "fs_as.h"
#include "fsutil.h"
#include "worker_test_util.h"

#define NOBODY 65534

static const tide_fs_account_t nobody = {NOBODY, NOBODY};

/* The calling thread's "Uid:"/"Gid:" fs field (the 4th) and "Groups:" line from
 * /proc/thread-self/status. */
typedef struct creds {
    unsigned fsuid, fsgid;
    char groups[256];
} creds_t;

static creds_t thread_creds(void)
{
    creds_t c = {0};
    char line[512];
    unsigned r, e, s;
    FILE *f = fopen("/proc/thread-self/status", "re");

    assert_non_null(f);
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "Uid:\t%u\t%u\t%u\t%u", &r, &e, &s, &c.fsuid) == 4)
            continue;
        if (sscanf(line, "Gid:\t%u\t%u\t%u\t%u", &r, &e, &s, &c.fsgid) == 4)
            continue;
        if (strncmp(line, "Groups:", 7) == 0)
            snprintf(c.groups, sizeof(c.groups), "%s", line + 7);
    }
    fclose(f);
    return c;
}

static bool can_read(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return false;
    close(fd);
    return true;
}

static void need_root(void)
{
    if (geteuid() != 0)
        skip();
}

typedef struct other {
    const char *secret;
    atomic_int phase; /* 1: the main thread is the account; 2: the other thread looked; 3: done */
    bool could_read;
    creds_t creds;
} other_t;

static void *other_thread(void *arg)
{
    other_t *o = arg;

    while (atomic_load(&o->phase) != 1)
        sched_yield();
    o->could_read = can_read(o->secret);
    o->creds = thread_creds();
    atomic_store(&o->phase, 2);
    return NULL;
}

static bool other_looked(void *arg)
{
    return atomic_load(&((other_t *)arg)->phase) == 2;
}

/* Between enter and leave the thread is the account for the file system (a root-only file cannot be
 * opened, its fsuid/fsgid and groups are the account's); another thread at the same time is not;
 * after leave everything is back. */
static void test_enter_is_per_thread(void **state)
{
    char *root, *secret;
    creds_t before, during, after;
    tide_fs_as_saved_t saved;
    other_t o;
    pthread_t th;

    (void)state;
    need_root();
    root = wt_tmpdir();
    assert_true(asprintf(&secret, "%s/secret", root) > 0);
    wt_write_file(secret, "root's");
    assert_int_equal(chmod(secret, 0600), 0);
    memset(&o, 0, sizeof(o));
    o.secret = secret;
    assert_int_equal(pthread_create(&th, NULL, other_thread, &o), 0);

    before = thread_creds();
    assert_true(can_read(secret));
    assert_int_equal(tide_fs_as_enter(&nobody, &saved), 0);
    during = thread_creds();
    assert_int_equal(during.fsuid, NOBODY);
    assert_int_equal(during.fsgid, NOBODY);
    assert_string_equal(during.groups, "\t65534 \n");
    assert_false(can_read(secret));
    atomic_store(&o.phase, 1);
    assert_true(wt_poll_until(other_looked, &o, 10000));
    assert_true(o.could_read);
    assert_int_equal(o.creds.fsuid, before.fsuid);
    assert_string_equal(o.creds.groups, before.groups);
    tide_fs_as_leave(&saved);
    after = thread_creds();
    assert_int_equal(after.fsuid, before.fsuid);
    assert_int_equal(after.fsgid, before.fsgid);
    assert_string_equal(after.groups, before.groups);
    assert_true(can_read(secret));
    assert_int_equal(pthread_join(th, NULL), 0);
    wt_rmrf(root);
    free(secret);
    free(root);
}

/* No account, or root's: nothing changes (and leave is a no-op). */
static void test_no_switch(void **state)
{
    const tide_fs_account_t root_acc = {0, 0};
    creds_t before = thread_creds(), during;
    tide_fs_as_saved_t saved;

    (void)state;
    assert_int_equal(tide_fs_as_enter(NULL, &saved), 0);
    assert_false(saved.switched);
    tide_fs_as_leave(&saved);
    assert_int_equal(tide_fs_as_enter(&root_acc, &saved), 0);
    during = thread_creds();
    assert_int_equal(during.fsuid, before.fsuid);
    assert_string_equal(during.groups, before.groups);
    tide_fs_as_leave(&saved);
    tide_fs_as_leave(&saved); /* twice: still nothing */
}

/* A tree with links to a victim directory (a link to it, a link inside a subdirectory, a file's
 * hard link) is removed; the victim and its file stay. */
static void test_remove_tree_keeps_link_targets(void **state)
{
    char *root = wt_tmpdir(), *p;
    char victim[600], vfile[700], tree[600];

    (void)state;
    snprintf(victim, sizeof(victim), "%s/victim", root);
    snprintf(vfile, sizeof(vfile), "%s/keep.bin", victim);
    snprintf(tree, sizeof(tree), "%s/tree", root);
    wt_mkdirs(victim);
    wt_write_file(vfile, "keep");
    assert_true(asprintf(&p, "%s/a/b/c", tree) > 0);
    wt_mkdirs(p);
    free(p);
    assert_true(asprintf(&p, "%s/a/link", tree) > 0);
    assert_int_equal(symlink(victim, p), 0);
    free(p);
    assert_true(asprintf(&p, "%s/a/b/c/hard", tree) > 0);
    assert_int_equal(link(vfile, p), 0);
    free(p);
    assert_true(asprintf(&p, "%s/top-link", root) > 0);
    assert_int_equal(symlink(victim, p), 0);

    tide_fs_remove_tree(tree);
    assert_int_equal(access(tree, F_OK), -1);
    tide_fs_remove_tree(p); /* a link given itself: the link goes */
    assert_int_equal(faccessat(AT_FDCWD, p, F_OK, AT_SYMLINK_NOFOLLOW), -1);
    assert_int_equal(access(vfile, F_OK), 0);
    free(p);
    wt_rmrf(root);
    free(root);
}

typedef struct swapper {
    char dir[700], moved[700];
    const char *victim;
    atomic_int stop;
    unsigned long swaps;
} swapper_t;

/* The hostile account: moves the directory away and puts a link to the victim in its place, again
 * and again. */
static void *swap_thread(void *arg)
{
    swapper_t *s = arg;

    while (!atomic_load(&s->stop)) {
        if (rename(s->dir, s->moved) == 0 && symlink(s->victim, s->dir) == 0)
            s->swaps++;
        sched_yield();
    }
    return NULL;
}

/* The removal races a thread that swaps a directory of the tree for a link to a victim directory:
 * whatever the interleaving, the victim's files stay. */
static void test_remove_tree_races_a_link_swap(void **state)
{
    char *root = wt_tmpdir();
    char victim[600], name[800], tree[600];
    swapper_t s;
    pthread_t th;
    unsigned long rounds = 0;

    (void)state;
    snprintf(victim, sizeof(victim), "%s/victim", root);
    snprintf(tree, sizeof(tree), "%s/tree", root);
    wt_mkdirs(victim);
    for (int i = 0; i < 64; i++) {
        snprintf(name, sizeof(name), "%s/f%02d", victim, i);
        wt_write_file(name, "victim");
    }
    memset(&s, 0, sizeof(s));
    snprintf(s.dir, sizeof(s.dir), "%s/d", tree);
    snprintf(s.moved, sizeof(s.moved), "%s/moved", tree);
    s.victim = victim;
    for (rounds = 0; rounds < 200; rounds++) {
        wt_mkdirs(s.dir);
        for (int i = 0; i < 64; i++) {
            snprintf(name, sizeof(name), "%s/f%02d", s.dir, i);
            wt_write_file(name, "tree");
        }
        atomic_store(&s.stop, 0);
        assert_int_equal(pthread_create(&th, NULL, swap_thread, &s), 0);
        tide_fs_remove_tree(tree);
        atomic_store(&s.stop, 1);
        assert_int_equal(pthread_join(th, NULL), 0);
        for (int i = 0; i < 64; i++) {
            snprintf(name, sizeof(name), "%s/f%02d", victim, i);
            if (access(name, F_OK) != 0)
                fail_msg("round %lu: %s was removed through a link", rounds, name);
        }
        tide_fs_remove_tree(tree); /* what the swapper put back after the removal */
    }
    print_message("%lu rounds, %lu swaps\n", rounds, s.swaps);
    wt_rmrf(root);
    free(root);
}

/* A FIFO (or anything but a regular file) swapped in for a checkpoint file is refused at once, never
 * waited on for a writer; a regular file opens. */
static void test_open_regular_never_blocks(void **state)
{
    char *root = wt_tmpdir();
    char fifo[600], file[600];
    int fd;

    (void)state;
    snprintf(fifo, sizeof(fifo), "%s/fifo", root);
    snprintf(file, sizeof(file), "%s/file", root);
    assert_int_equal(mkfifo(fifo, 0644), 0);
    wt_write_file(file, "data");
    assert_int_equal(tide_fs_open_regular(AT_FDCWD, fifo), -EINVAL);
    assert_int_equal(tide_fs_open_regular(AT_FDCWD, root), -EINVAL);
    fd = tide_fs_open_regular(AT_FDCWD, file);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(tide_fs_open_regular(AT_FDCWD, "/nonexistent/x"), -ENOENT);
    wt_rmrf(root);
    free(root);
}

/* The hot tier is made when missing; one that another user could change — writable by others, a link,
 * (as root) somebody else's, or the default layout's tide-UID parent made by somebody else — is
 * refused, naming it. */
static void test_hot_dir_must_be_private(void **state)
{
    char *root = wt_tmpdir();
    char hot[700], parent[600], target[600];
    tide_error_t err;

    (void)state;
    snprintf(hot, sizeof(hot), "%s/a/hot", root);
    tide_error_clear(&err);
    assert_int_equal(tide_worker_hot_dir_prepare(hot, &err), 0);
    assert_int_equal(tide_worker_hot_dir_prepare(hot, &err), 0); /* again: it exists */
    assert_int_equal(chmod(hot, 0777), 0);
    assert_int_equal(tide_worker_hot_dir_prepare(hot, &err), -EPERM);
    assert_non_null(strstr(err.text, "writable by others"));
    assert_int_equal(chmod(hot, 0711), 0);
    assert_int_equal(tide_worker_hot_dir_prepare(hot, &err), 0);

    snprintf(target, sizeof(target), "%s/elsewhere", root);
    wt_mkdirs(target);
    snprintf(hot, sizeof(hot), "%s/link", root);
    assert_int_equal(symlink(target, hot), 0);
    tide_error_clear(&err);
    assert_int_equal(tide_worker_hot_dir_prepare(hot, &err), -EPERM);
    assert_non_null(strstr(err.text, "not a directory"));

    /* the default layout: DIR/tide-UID/ID, with tide-UID made by somebody else (0777 here) */
    snprintf(parent, sizeof(parent), "%s/tide-%u", root, (unsigned)getuid());
    wt_mkdirs(parent);
    assert_int_equal(chmod(parent, 0777), 0);
    snprintf(hot, sizeof(hot), "%s/node1-gpu0", parent);
    tide_error_clear(&err);
    assert_int_equal(tide_worker_hot_dir_prepare(hot, &err), -EPERM);
    assert_non_null(strstr(err.text, parent));
    if (geteuid() == 0) {
        assert_int_equal(chmod(parent, 0755), 0);
        assert_int_equal(lchown(parent, NOBODY, NOBODY), 0);
        tide_error_clear(&err);
        assert_int_equal(tide_worker_hot_dir_prepare(hot, &err), -EPERM);
        assert_non_null(strstr(err.text, "not this worker's own"));
    }
    assert_int_equal(tide_worker_hot_dir_prepare(NULL, &err), 0);
    wt_rmrf(root);
    free(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_enter_is_per_thread),
        cmocka_unit_test(test_no_switch),
        cmocka_unit_test(test_remove_tree_keeps_link_targets),
        cmocka_unit_test(test_remove_tree_races_a_link_swap),
        cmocka_unit_test(test_open_regular_never_blocks),
        cmocka_unit_test(test_hot_dir_must_be_private),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
