/* Unit tests of a restore for a rank that runs as another account (worker/ckpt_tiers.c, hand_over;
 * docs/worker.md, "Running ranks as their user"), on a real loop and threadpool in a throwaway
 * directory: a warm copy is copied into HOT/JOB owned by the account (uid/gid 65534, `nobody`), a hot
 * copy written as root is chowned (links not followed, hard links refused), no hot tier is an answer
 * with no checkpoint and the reason, and without an account nothing changes hands. Needs root to
 * chown: exits 77 (skipped) otherwise. Every test ends with uv_loop_close() == 0. */
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

static const tide_ckpt_account_t nobody = {NOBODY, NOBODY};

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

static void restore(fx_t *f, const char *job, const tide_ckpt_account_t *as)
{
    f->calls = 0;
    tide_ckpt_tiers_restore(f->t, job, 1, 0, -1, as, 42, on_found, f);
    assert_int_equal(f->calls, 0); /* never inside the call */
    assert_true(wt_run_until(&f->loop, answered, f, 20000));
    assert_int_equal(f->calls, 1);
}

/* A checkpoint of rank 0 reported in the hot layout (written by the worker's account, root) and tiered
 * (manifest in hot, copy in warm). */
static void save(fx_t *f, const char *job, int64_t step, const char *content)
{
    char *dir = at("%s/%s/step-%lld/rank-0", f->hot, job, (long long)step);
    char *file = at("%s/ckpt.bin", dir);
    char hex[65];

    wt_mkdirs(dir);
    wt_write_file(file, content);
    sha_hex(content, strlen(content), hex);
    assert_int_equal(tide_ckpt_tiers_saved(f->t, job, 1, 0, step, file, hex), 1);
    assert_true(wt_run_until(&f->loop, idle, f, 20000));
    free(file);
    free(dir);
}

/* A warm copy is copied, verified, into the worker's own HOT/restored/JOB/step-S/rank-R: its files become the
 * account's (same bytes), its directories stay the worker's (0755), so the account can read the copy but change
 * no entry the worker later removes; nothing is written into the account's HOT/JOB. The warm copy stays the
 * worker's, and the next restore hands over again. */
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

    save(f, "7", 10, "ten steps of weights");
    wt_rmrf(hotstep); /* only warm has it now (the hot tier went with the node's memory) */
    assert_owner(hotjob, 0, 0);

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
    assert_owner(rrank, 0, 0);
    assert_int_equal(stat(rrank, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0755);
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

/* A hot copy written by the worker (a fetch from a peer lands so) is chowned in place: its step and
 * rank directories and files; a link in it is changed itself, never its target. */
static void test_hot_copy_chowned(void **state)
{
    fx_t *f = *state;
    char *hotstep = at("%s/8/step-5", f->hot), *hotrank = at("%s/rank-0", hotstep);
    char *hotfile = at("%s/ckpt.bin", hotrank), *hotman = at("%s/tide-manifest.json", hotrank);
    char *secret = at("%s/secret", f->root), *link = at("%s/link", hotrank);
    char *other = at("%s/rank-1", hotstep);

    save(f, "8", 5, "five");
    wt_write_file(secret, "root's");
    assert_int_equal(symlink(secret, link), 0);
    wt_mkdirs(other); /* another rank's copy in the same step: left alone */
    assert_owner(hotfile, 0, 0);

    restore(f, "8", &nobody);
    assert_int_equal(f->rc, 0);
    assert_int_equal(f->step, 5);
    assert_string_equal(f->tier, "hot");
    assert_string_equal(f->path, hotrank);
    assert_owner(hotstep, NOBODY, NOBODY);
    assert_owner(hotrank, NOBODY, NOBODY);
    assert_owner(hotfile, NOBODY, NOBODY);
    assert_owner(hotman, NOBODY, NOBODY);
    assert_owner(link, NOBODY, NOBODY);
    assert_owner(secret, 0, 0);
    assert_owner(other, 0, 0);
    free(hotstep);
    free(hotrank);
    free(hotfile);
    free(hotman);
    free(secret);
    free(link);
    free(other);
}

/* A file with another hard link in the copy could be anybody's: the copy is not handed over, and the
 * answer says why instead of naming a path. */
static void test_hard_link_refused(void **state)
{
    fx_t *f = *state;
    char *hotrank = at("%s/9/step-3/rank-0", f->hot);
    char *secret = at("%s/secret", f->root), *hard = at("%s/extra", hotrank);

    save(f, "9", 3, "three");
    wt_write_file(secret, "root's");
    assert_int_equal(link(secret, hard), 0);

    restore(f, "9", &nobody);
    assert_int_equal(f->rc, -EACCES);
    assert_string_equal(f->path, "");
    assert_non_null(strstr(f->why, "hard link"));
    assert_non_null(strstr(f->why, "65534"));
    assert_owner(secret, 0, 0);
    free(hotrank);
    free(secret);
    free(hard);
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
        cmocka_unit_test_setup_teardown(test_warm_copy_handed_over, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_account_nothing_changes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hot_copy_chowned, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hard_link_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_hot_tier, setup, teardown),
    };

    if (geteuid() != 0) {
        fprintf(stderr, "test_ckpt_handover: not root, skipped (handing a copy to another account "
                        "needs chown)\n");
        return 77;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
