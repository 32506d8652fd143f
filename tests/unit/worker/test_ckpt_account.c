/* Unit tests of the checkpoint tiers for a rank that runs as another account (worker/ckpt_tiers.c;
 * docs/worker.md, "Running ranks as their user"), on a real loop and threadpool in a throwaway
 * directory, the account being uid/gid 65534 (`nobody`). The rank's HOT/JOB is the account's, so
 * the worker reads, writes and prunes it as the account (fs_as.h): a hard link to a root-only file,
 * a step directory that is a link into a root directory, a link among the steps a prune or a forget
 * removes — each planted as a hostile account would — reach nothing of root's. A restore reads the
 * hot tier as the account and hands it over as it is; a copy from elsewhere is copied into the
 * worker's own HOT/restored; no hot tier is an answer with no checkpoint and the reason; without an
 * account nothing changes hands. Needs root: exits 77 (skipped) otherwise. Every test ends with
 * uv_loop_close() == 0. */
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include <cmocka.h>

#include "ckpt_tiers.h"
#include "worker_test_util.h"

#define NOBODY 65534

typedef struct fx {
    uv_loop_t loop;
    char *root, *hot, *warm, *cold;
    tide_ckpt_tiers_t *t;
    /* the last restore's answer */
    int calls;
    int rc;
    int64_t step;
    char tier[16];
    char path[512];
    char why[512];
} fx_t;

static const tide_fs_account_t nobody = {NOBODY, NOBODY};

static char *at(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *at(const char *fmt, ...)
{
    char *p = NULL;
    va_list ap;

    va_start(ap, fmt);
    assert_true(vasprintf(&p, fmt, ap) > 0);
    va_end(ap);
    return p;
}

static void sha_hex(const char *data, size_t len, char hex[65])
{
    unsigned char md[32];
    unsigned int n = 0;

    EVP_Digest(data, len, md, &n, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

/* Owner of path (not following a link) is uid:gid. */
static void assert_owner(const char *path, uid_t uid, gid_t gid)
{
    struct stat st;

    if (lstat(path, &st) != 0)
        fail_msg("%s: %s", path, strerror(errno));
    if (st.st_uid != uid || st.st_gid != gid)
        fail_msg("%s: owned by %u:%u, expected %u:%u", path, (unsigned)st.st_uid,
                 (unsigned)st.st_gid, (unsigned)uid, (unsigned)gid);
}

static void tiers_new(fx_t *f, bool with_hot)
{
    tide_ckpt_tiers_config_t cfg;

    memset(&cfg, 0, sizeof(cfg));
    cfg.hot = with_hot ? f->hot : NULL;
    cfg.warm = with_hot ? f->warm : NULL;
    cfg.cold = f->cold;
    cfg.keep_hot = 2;
    cfg.keep_warm = 3;
    tide_ckpt_tiers_new(&f->loop, &cfg, &f->t);
}

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof(*f));

    assert_int_equal(uv_loop_init(&f->loop), 0);
    f->root = wt_tmpdir();
    assert_int_equal(chmod(f->root, 0755),
                     0); /* the ranks' accounts reach their HOT/JOB through it */
    f->hot = at("%s/hot", f->root);
    f->warm = at("%s/warm", f->root);
    f->cold = at("%s/cold", f->root);
    tiers_new(f, true);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;

    tide_ckpt_tiers_free(f->t);
    assert_int_equal(wt_loop_finish(&f->loop), 0);
    wt_rmrf(f->root);
    free(f->root);
    free(f->hot);
    free(f->warm);
    free(f->cold);
    free(f);
    return 0;
}

static bool idle(void *arg)
{
    fx_t *f = arg;

    return tide_ckpt_tiers_busy(f->t) == 0;
}

static bool answered(void *arg)
{
    fx_t *f = arg;

    return f->calls > 0;
}

static void on_found(void *ud, uint64_t token, int rc, const tide_ckpt_found_t *found,
                     const char *tier, const char *why)
{
    fx_t *f = ud;

    assert_int_equal(token, 42);
    f->calls++;
    f->rc = rc;
    f->step = rc == 0 ? found->meta.step : -1;
    snprintf(f->tier, sizeof(f->tier), "%s", tier);
    snprintf(f->path, sizeof(f->path), "%s", rc == 0 ? found->path : "");
    snprintf(f->why, sizeof(f->why), "%s", why ? why : "");
    if (rc == 0)
        assert_non_null(found->path);
    else
        assert_null(found->path);
}

static void restore(fx_t *f, const char *job, const tide_fs_account_t *as)
{
    f->calls = 0;
    tide_ckpt_tiers_restore(f->t, job, 1, 0, -1, as, 42, on_found, f);
    assert_int_equal(f->calls, 0); /* never inside the call */
    assert_true(wt_run_until(&f->loop, answered, f, 20000));
    assert_int_equal(f->calls, 1);
}

/* Owned by the account, as what its rank makes (chown: the test runs as root). */
static void give(const char *path)
{
    assert_int_equal(lchown(path, NOBODY, NOBODY), 0);
}

/* HOT/JOB as the launcher makes it for a rank that runs as the account, and HOT/JOB/step-S/rank-R
 * as the rank makes it. Returns the rank directory (caller frees). */
static char *rank_dir_as_account(fx_t *f, const char *job, int64_t step)
{
    char *jobdir = at("%s/%s", f->hot, job), *stepdir = at("%s/step-%lld", jobdir, (long long)step);
    char *dir = at("%s/rank-0", stepdir);

    wt_mkdirs(dir);
    assert_int_equal(chmod(f->hot, 0755), 0);
    give(jobdir);
    give(stepdir);
    give(dir);
    free(jobdir);
    free(stepdir);
    return dir;
}

/* A checkpoint of rank 0 written by the rank (as the account), reported and tiered with the account
 * (manifest in hot, copy in warm); returns the save's rc as the counters tell it (0 saved, -1 not).
 */
static int save_as(fx_t *f, const char *job, int64_t step, const char *content)
{
    char *dir = rank_dir_as_account(f, job, step), *file = at("%s/ckpt.bin", dir);
    uint64_t ok0 = 0, ok1 = 0;
    char hex[65];

    wt_write_file(file, content);
    give(file);
    sha_hex(content, strlen(content), hex);
    tide_ckpt_tiers_counts(f->t, &ok0, NULL);
    assert_int_equal(tide_ckpt_tiers_saved(f->t, job, 1, 0, step, dir, "", &nobody), 1);
    assert_true(wt_run_until(&f->loop, idle, f, 20000));
    tide_ckpt_tiers_counts(f->t, &ok1, NULL);
    free(file);
    free(dir);
    return ok1 == ok0 + 1 ? 0 : -1;
}

/* A checkpoint of rank 0 reported in the hot layout by a rank of the worker's own account (root)
 * and tiered. */
static void save(fx_t *f, const char *job, int64_t step, const char *content)
{
    char *dir = at("%s/%s/step-%lld/rank-0", f->hot, job, (long long)step);
    char *file = at("%s/ckpt.bin", dir);
    char hex[65];

    wt_mkdirs(dir);
    wt_write_file(file, content);
    sha_hex(content, strlen(content), hex);
    assert_int_equal(tide_ckpt_tiers_saved(f->t, job, 1, 0, step, file, hex, NULL), 1);
    assert_true(wt_run_until(&f->loop, idle, f, 20000));
    free(file);
    free(dir);
}

static bool exists(const char *path)
{
    struct stat st;

    return lstat(path, &st) == 0;
}

/* A save as the account: the manifest in HOT/JOB is written as the account (its file), the warm
 * copy as the worker (root's). */
static void test_save_as_account(void **state)
{
    fx_t *f = *state;
    char *man = at("%s/1/step-3/rank-0/tide-manifest.json", f->hot);
    char *warm = at("%s/1/step-3/rank-0/ckpt.bin", f->warm);
    char *got;

    assert_int_equal(save_as(f, "1", 3, "three"), 0);
    assert_owner(man, NOBODY, NOBODY);
    assert_owner(warm, 0, 0);
    got = wt_read_file(warm);
    assert_string_equal(got, "three");
    free(got);
    free(man);
    free(warm);
}

/* A hard link to a root-only file in the account's rank directory (a system without
 * protected_hardlinks lets the account make one): the save reads as the account, so it fails, and
 * the file's bytes reach neither the warm tier nor a manifest. */
static void test_save_hard_link_not_read(void **state)
{
    fx_t *f = *state;
    char *dir = rank_dir_as_account(f, "2", 4), *file = at("%s/ckpt.bin", dir);
    char *secret = at("%s/secret", f->root), *hard = at("%s/extra", dir);
    char *man = at("%s/tide-manifest.json", dir), *warm = at("%s/2/step-4", f->warm);
    uint64_t ok = 0, bad = 0;

    wt_write_file(file, "four");
    give(file);
    wt_write_file(secret, "root's only");
    assert_int_equal(chmod(secret, 0600), 0);
    assert_int_equal(link(secret, hard), 0);

    assert_int_equal(tide_ckpt_tiers_saved(f->t, "2", 1, 0, 4, dir, "", &nobody), 1);
    assert_true(wt_run_until(&f->loop, idle, f, 20000));
    tide_ckpt_tiers_counts(f->t, &ok, &bad);
    assert_int_equal(ok, 0);
    assert_int_equal(bad, 1);
    assert_false(exists(man));
    assert_false(exists(warm));
    /* The same report from the worker's own account (nothing to guard) is tiered. */
    assert_int_equal(tide_ckpt_tiers_saved(f->t, "2", 1, 0, 4, dir, "", NULL), 1);
    assert_true(wt_run_until(&f->loop, idle, f, 20000));
    tide_ckpt_tiers_counts(f->t, &ok, &bad);
    assert_int_equal(ok, 1);
    free(dir);
    free(file);
    free(secret);
    free(hard);
    free(man);
    free(warm);
}

/* The account swaps its step directory for a link into a root directory that holds a readable copy:
 * the manifest write, as the account, cannot land there, so root's directory gets nothing. */
static void test_save_step_link_not_written(void **state)
{
    fx_t *f = *state;
    char *jobdir = at("%s/3", f->hot), *step = at("%s/step-5", jobdir);
    char *victim = at("%s/victim", f->root), *vrank = at("%s/rank-0", victim);
    char *vfile = at("%s/ckpt.bin", vrank), *vman = at("%s/tide-manifest.json", vrank);
    char *report = at("%s/rank-0", step);
    uint64_t ok = 0, bad = 0;

    free(rank_dir_as_account(f, "3", 1)); /* HOT/3 is the account's */
    wt_mkdirs(vrank);
    wt_write_file(vfile, "five");
    assert_int_equal(symlink(victim, step), 0);
    give(step);

    assert_int_equal(tide_ckpt_tiers_saved(f->t, "3", 1, 0, 5, report, "", &nobody), 1);
    assert_true(wt_run_until(&f->loop, idle, f, 20000));
    tide_ckpt_tiers_counts(f->t, &ok, &bad);
    assert_int_equal(bad, 1);
    assert_false(exists(vman));
    assert_true(exists(vfile));
    free(jobdir);
    free(step);
    free(victim);
    free(vrank);
    free(vfile);
    free(vman);
    free(report);
}

/* Links among the steps a prune removes, and inside a job a forget removes: the links go, what they
 * point at stays. */
static void test_prune_and_forget_never_follow_links(void **state)
{
    fx_t *f = *state;
    char *victim = at("%s/victim", f->root), *vfile = at("%s/keep.bin", victim);
    char *old = at("%s/4/step-1", f->hot), *inner = at("%s/4/step-9/rank-0/link", f->hot);
    char *jobdir = at("%s/4", f->hot);

    wt_mkdirs(victim);
    wt_write_file(vfile, "root's");
    free(rank_dir_as_account(f, "4", 9));
    assert_int_equal(symlink(victim, old), 0); /* "step-1": the oldest, pruned first */
    give(old);
    assert_int_equal(symlink(victim, inner), 0);
    give(inner);
    /* keep_hot is 2: saving steps 10 and 11 prunes steps 1 and 9. */
    assert_int_equal(save_as(f, "4", 10, "ten"), 0);
    assert_int_equal(save_as(f, "4", 11, "eleven"), 0);
    assert_false(exists(old));
    assert_true(exists(vfile));

    free(rank_dir_as_account(f, "4", 12));
    free(inner);
    inner = at("%s/4/step-12/rank-0/link", f->hot);
    assert_int_equal(symlink(victim, inner), 0);
    give(inner);
    assert_int_equal(tide_ckpt_tiers_forget(f->t, "4"), 1);
    assert_true(wt_run_until(&f->loop, idle, f, 20000));
    assert_false(exists(jobdir));
    assert_true(exists(vfile));
    free(victim);
    free(vfile);
    free(old);
    free(inner);
    free(jobdir);
}

/* A warm copy is copied, verified, into the worker's own HOT/restored/JOB/step-S/rank-R: its files
 * become the account's (same bytes, 0600), its directories stay the worker's (the rank directory 0750
 * in the account's group, the others 0711), so the account can read the copy but change no entry the
 * worker later removes, and no other user lists or reads it; nothing is written into the account's
 * HOT/JOB. The warm copy stays the worker's alone (0600), and the next restore hands over again. */
static void test_warm_copy_handed_over(void **state)
{
    fx_t *f = *state;
    char *hotjob = at("%s/7", f->hot), *hotstep = at("%s/7/step-10", f->hot);
    char *rjob = at("%s/restored/7", f->hot), *rstep = at("%s/step-10", rjob);
    char *rrank = at("%s/rank-0", rstep), *rfile = at("%s/ckpt.bin", rrank);
    char *rman = at("%s/tide-manifest.json", rrank);
    char *warmrank = at("%s/7/step-10/rank-0", f->warm);
    char *warmfile = at("%s/ckpt.bin", warmrank), *got;
    tide_ckpt_meta_t meta;
    tide_error_t err;
    struct stat st;

    assert_int_equal(save_as(f, "7", 10, "ten steps of weights"), 0);
    wt_rmrf(hotstep); /* only warm has it now (the hot tier went with the node's memory) */
    assert_owner(hotjob, NOBODY, NOBODY);

    restore(f, "7", &nobody);
    assert_int_equal(f->rc, 0);
    assert_int_equal(f->step, 10);
    assert_string_equal(f->tier, "warm");
    assert_string_equal(f->path, rrank);
    got = wt_read_file(rfile);
    assert_string_equal(got, "ten steps of weights");
    free(got);
    assert_owner(rfile, NOBODY, NOBODY);
    assert_owner(rman, NOBODY, NOBODY);
    assert_owner(rjob, 0, 0);
    assert_owner(rstep, 0, 0);
    assert_owner(rrank, 0, NOBODY);
    assert_int_equal(stat(rrank, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0750);
    assert_int_equal(stat(rstep, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0711);
    assert_int_equal(stat(rjob, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0711);
    assert_int_equal(stat(rfile, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(stat(warmfile, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(lstat(hotstep, &st), -1); /* nothing written into the account's HOT/JOB */
    assert_owner(warmrank, 0, 0);
    assert_owner(warmfile, 0, 0);
    memset(&meta, 0, sizeof(meta));
    tide_error_clear(&err);
    assert_int_equal(tide_ckpt_verify(rrank, &meta, &err), 0);
    assert_int_equal(meta.step, 10);
    tide_ckpt_meta_clear(&meta);

    /* Restored again: the same place, replaced. */
    restore(f, "7", &nobody);
    assert_int_equal(f->rc, 0);
    assert_string_equal(f->path, rrank);
    /* The job's end takes the copies made for its restores too. */
    assert_int_equal(tide_ckpt_tiers_forget(f->t, "7"), 1);
    assert_true(wt_run_until(&f->loop, idle, f, 20000));
    assert_int_equal(lstat(rjob, &st), -1);
    free(hotjob);
    free(hotstep);
    free(rjob);
    free(rstep);
    free(rrank);
    free(rfile);
    free(rman);
    free(warmrank);
    free(warmfile);
}

/* The same restore without an account answers the warm path and changes nobody's files. */
static void test_no_account_nothing_changes(void **state)
{
    fx_t *f = *state;
    char *hotjob = at("%s/7", f->hot), *hotstep = at("%s/7/step-10", f->hot);
    char *warmrank = at("%s/7/step-10/rank-0", f->warm);
    char *warmfile = at("%s/ckpt.bin", warmrank);
    struct stat st;

    save(f, "7", 10, "ten steps of weights");
    wt_rmrf(hotstep);
    restore(f, "7", NULL);
    assert_int_equal(f->rc, 0);
    assert_string_equal(f->tier, "warm");
    assert_string_equal(f->path, warmrank);
    assert_int_equal(lstat(hotstep, &st), -1); /* nothing copied into hot */
    assert_owner(hotjob, 0, 0);
    assert_owner(warmrank, 0, 0);
    assert_owner(warmfile, 0, 0);
    free(hotjob);
    free(hotstep);
    free(warmrank);
    free(warmfile);
}

/* The rank's own hot copy is read as the account and answered as it is (nothing changes hands). A
 * hot copy the account cannot read — a file of root's in it — is passed over for the warm copy,
 * which is handed over; the worker itself (no account) would take the hot one. */
static void test_hot_copy_read_as_account(void **state)
{
    fx_t *f = *state;
    char *hotrank = at("%s/8/step-5/rank-0", f->hot), *hotfile = at("%s/ckpt.bin", hotrank);
    char *rrank = at("%s/restored/8/step-5/rank-0", f->hot);

    assert_int_equal(save_as(f, "8", 5, "five"), 0);
    restore(f, "8", &nobody);
    assert_int_equal(f->rc, 0);
    assert_int_equal(f->step, 5);
    assert_string_equal(f->tier, "hot");
    assert_string_equal(f->path, hotrank);
    assert_owner(hotfile, NOBODY, NOBODY);

    assert_int_equal(lchown(hotfile, 0, 0), 0);
    assert_int_equal(chmod(hotfile, 0600), 0);
    restore(f, "8", &nobody);
    assert_int_equal(f->rc, 0);
    assert_string_equal(f->tier, "warm");
    assert_string_equal(f->path, rrank);
    assert_owner(hotfile, 0, 0);
    restore(f, "8", NULL);
    assert_int_equal(f->rc, 0);
    assert_string_equal(f->tier, "hot");
    free(hotrank);
    free(hotfile);
    free(rrank);
}

/* No hot tier to copy a cold copy into: no checkpoint, and the reason. Without an account the cold
 * path is the answer. */
static void test_no_hot_tier(void **state)
{
    fx_t *f = *state;
    char *dir = at("%s/4/step-2/rank-0", f->cold), *file = at("%s/ckpt.bin", dir);
    tide_ckpt_meta_t meta;
    tide_error_t err;

    tide_ckpt_tiers_free(f->t);
    tiers_new(f, false);
    wt_mkdirs(dir);
    wt_write_file(file, "two");
    memset(&meta, 0, sizeof(meta));
    tide_error_clear(&err);
    assert_int_equal(tide_ckpt_meta_scan(dir, "4", 1, 2, 0, NULL, &meta, &err), 0);
    assert_int_equal(tide_ckpt_manifest_write(dir, &meta, &err), 0);
    tide_ckpt_meta_clear(&meta);

    restore(f, "4", &nobody);
    assert_int_equal(f->rc, -EACCES);
    assert_non_null(strstr(f->why, "no hot tier"));
    assert_string_equal(f->tier, "cold");
    assert_owner(file, 0, 0);

    restore(f, "4", NULL);
    assert_int_equal(f->rc, 0);
    assert_string_equal(f->tier, "cold");
    assert_string_equal(f->path, dir);
    free(dir);
    free(file);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_save_as_account, setup, teardown),
        cmocka_unit_test_setup_teardown(test_save_hard_link_not_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_save_step_link_not_written, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prune_and_forget_never_follow_links, setup, teardown),
        cmocka_unit_test_setup_teardown(test_warm_copy_handed_over, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_account_nothing_changes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hot_copy_read_as_account, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_hot_tier, setup, teardown),
    };

    if (geteuid() != 0) {
        fprintf(stderr, "test_ckpt_account: not root, skipped (acting as another account needs "
                        "root)\n");
        return 77;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
