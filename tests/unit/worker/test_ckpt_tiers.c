/* Unit tests of the worker's checkpoint tiers (worker/ckpt_tiers.c) on a real loop and threadpool
 * in a throwaway directory: which report paths are in the hot layout, a report becoming a manifest
 * in hot, a verified copy in warm and pruning of both tiers, a report whose sha does not match, the
 * restore search (tier order, a corrupt hot copy -> warm, the resume bound, nothing found), a
 * free with work under way, an ended job's forget (its hot and mirrored copies go, after its queued
 * save; other jobs' stay) and the --ckpt-hot-ttl sweep (old copies of jobs not running here go; the
 * age is faked with utimensat). Every test ends with uv_loop_close() == 0. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <openssl/evp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include <cmocka.h>

#include "ckpt_tiers.h"
#include "worker_test_util.h"

typedef struct fx {
    uv_loop_t loop;
    char *root, *hot, *warm;
    tide_ckpt_tiers_t *t;
    /* the last restore's answer */
    int calls;
    int rc;
    int64_t step;
    char tier[16];
    char path[512];
    int n_skipped;
    char skip0_tier[16];
    int64_t skip0_step;
    int skip0_rc;
} fx_t;

static void sha_hex(const char *data, size_t len, char hex[65])
{
    unsigned char md[32];
    unsigned int n = 0;

    EVP_Digest(data, len, md, &n, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

static void mkdirs(const char *path)
{
    char p[600];

    snprintf(p, sizeof(p), "%s", path);
    for (char *q = p + 1; *q; q++)
        if (*q == '/') {
            *q = '\0';
            mkdir(p, 0755);
            *q = '/';
        }
    mkdir(p, 0755);
}

static bool exists(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static bool exists(const char *fmt, ...)
{
    char p[600];
    struct stat st;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(p, sizeof(p), fmt, ap);
    va_end(ap);
    return stat(p, &st) == 0;
}

/* Writes HOT/job/step-S/rank-R/ckpt.bin with content; returns its path (caller frees), sha in hex. */
static char *write_ckpt(fx_t *f, const char *job, int64_t step, int rank, const char *content,
                        char hex[65])
{
    char *dir, *file;

    assert_true(asprintf(&dir, "%s/%s/step-%lld/rank-%d", f->hot, job, (long long)step, rank) > 0);
    mkdirs(dir);
    assert_true(asprintf(&file, "%s/ckpt.bin", dir) > 0);
    wt_write_file(file, content);
    sha_hex(content, strlen(content), hex);
    free(dir);
    return file;
}

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof(*f));
    tide_ckpt_tiers_config_t cfg;

    assert_int_equal(uv_loop_init(&f->loop), 0);
    f->root = wt_tmpdir();
    assert_true(asprintf(&f->hot, "%s/hot", f->root) > 0);
    assert_true(asprintf(&f->warm, "%s/warm", f->root) > 0);
    memset(&cfg, 0, sizeof(cfg));
    cfg.hot = f->hot;
    cfg.warm = f->warm;
    cfg.keep_hot = 2;
    cfg.keep_warm = 3;
    tide_ckpt_tiers_new(&f->loop, &cfg, &f->t);
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

    (void)why;
    assert_int_equal(token, 42);
    f->calls++;
    f->rc = rc;
    f->step = rc == 0 ? found->meta.step : -1;
    snprintf(f->tier, sizeof(f->tier), "%s", tier);
    snprintf(f->path, sizeof(f->path), "%s", rc == 0 ? found->path : "");
    f->n_skipped = (int)found->n_skipped;
    if (found->n_skipped) {
        snprintf(f->skip0_tier, sizeof(f->skip0_tier), "%s", found->skipped[0].tier);
        f->skip0_step = found->skipped[0].step;
        f->skip0_rc = found->skipped[0].rc;
    }
}

static void restore(fx_t *f, const char *job, int32_t gen, int rank, int64_t bound)
{
    f->calls = 0;
    tide_ckpt_tiers_restore(f->t, job, gen, rank, bound, NULL, 42, on_found, f);
    assert_int_equal(f->calls, 0); /* never inside the call */
    assert_true(wt_run_until(&f->loop, answered, f, 20000));
    assert_int_equal(f->calls, 1);
}

static void save(fx_t *f, const char *job, int64_t step, const char *content)
{
    char hex[65];
    char *file = write_ckpt(f, job, step, 0, content, hex);

    assert_int_equal(tide_ckpt_tiers_saved(f->t, job, 1, 0, step, file, hex, NULL), 1);
    free(file);
}

static void test_layout(void **state)
{
    (void)state;
    bool dir = false;

    assert_true(tide_ckpt_tiers_in_layout("/h", "j1", 5, 0, "/h/j1/step-5/rank-0", &dir));
    assert_true(dir);
    assert_true(tide_ckpt_tiers_in_layout("/h", "j1", 5, 0, "/h/j1/step-5/rank-0/", &dir));
    assert_true(tide_ckpt_tiers_in_layout("/h", "j1", 5, 0, "/h/j1/step-5/rank-0/m.bin", &dir));
    assert_false(dir);
    assert_false(tide_ckpt_tiers_in_layout("/h", "j1", 5, 0, "/h/j1/step-5/rank-0/a/b", NULL));
    assert_false(tide_ckpt_tiers_in_layout("/h", "j1", 5, 0, "/h/j1/step-5/rank-0/.tmp", NULL));
    assert_false(
        tide_ckpt_tiers_in_layout("/h", "j1", 5, 0, "/h/j1/step-5/rank-0/tide-manifest.json", NULL));
    assert_false(tide_ckpt_tiers_in_layout("/h", "j1", 5, 0, "/h/j1/step-6/rank-0", NULL));
    assert_false(tide_ckpt_tiers_in_layout("/h", "j1", 5, 0, "/h/j1/step-5/rank-01", NULL));
    assert_false(tide_ckpt_tiers_in_layout("/h", "j1", 5, 1, "/h/j1/step-5/rank-0", NULL));
    assert_false(tide_ckpt_tiers_in_layout("/h", "j1", 5, 0, "/h/j10/step-5/rank-0", NULL));
    assert_false(tide_ckpt_tiers_in_layout("/h", "j1", 5, 0, "/elsewhere/ckpt.bin", NULL));
    assert_false(tide_ckpt_tiers_in_layout("/h", "j1", 5, 0, "", NULL));
    assert_false(tide_ckpt_tiers_in_layout(NULL, "j1", 5, 0, "/h/j1/step-5/rank-0", NULL));
}

/* A report in the layout: manifest in hot, verified copy in warm; older steps pruned per tier. */
static void test_save_copies_and_prunes(void **state)
{
    fx_t *f = *state;
    uint64_t ok = 0, bad = 0;
    tide_ckpt_meta_t meta;
    tide_error_t err;
    char *dir;

    save(f, "job-a", 1, "one");
    save(f, "job-a", 2, "two");
    assert_true(wt_run_until(&f->loop, idle, f, 20000));
    save(f, "job-a", 3, "three");
    save(f, "job-a", 4, "four");
    assert_true(wt_run_until(&f->loop, idle, f, 20000));
    tide_ckpt_tiers_counts(f->t, &ok, &bad);
    assert_int_equal(ok, 4);
    assert_int_equal(bad, 0);
    /* hot keeps 2, warm keeps 3 */
    assert_false(exists("%s/job-a/step-2", f->hot));
    assert_true(exists("%s/job-a/step-3/rank-0/tide-manifest.json", f->hot));
    assert_true(exists("%s/job-a/step-4/rank-0/tide-manifest.json", f->hot));
    assert_false(exists("%s/job-a/step-1", f->warm));
    assert_true(exists("%s/job-a/step-2/rank-0/ckpt.bin", f->warm));
    assert_true(exists("%s/job-a/step-4/rank-0/tide-manifest.json", f->warm));
    /* the warm copy verifies and says who wrote it */
    assert_true(asprintf(&dir, "%s/job-a/step-4/rank-0", f->warm) > 0);
    memset(&meta, 0, sizeof(meta));
    tide_error_clear(&err);
    assert_int_equal(tide_ckpt_verify(dir, &meta, &err), 0);
    assert_string_equal(meta.job, "job-a");
    assert_int_equal(meta.step, 4);
    assert_int_equal(meta.generation, 1);
    assert_int_equal(meta.n_files, 1);
    assert_int_equal(meta.files[0].bytes, 4);
    tide_ckpt_meta_clear(&meta);
    free(dir);
}

/* Reports outside the layout are left alone; a report whose sha is not the file's is not tiered. */
static void test_save_refusals(void **state)
{
    fx_t *f = *state;
    uint64_t ok = 0, bad = 0;
    char hex[65];
    char *file = write_ckpt(f, "job-b", 7, 0, "seven", hex);

    assert_int_equal(tide_ckpt_tiers_saved(f->t, "job-b", 1, 0, 7, "/elsewhere/x.bin", hex, NULL), 0);
    assert_int_equal(tide_ckpt_tiers_saved(f->t, "job-b", 1, 0, 8, file, hex, NULL), 0); /* step */
    assert_int_equal(tide_ckpt_tiers_busy(f->t), 0);
    hex[0] = hex[0] == 'a' ? 'b' : 'a';
    assert_int_equal(tide_ckpt_tiers_saved(f->t, "job-b", 1, 0, 7, file, hex, NULL), 1);
    assert_true(wt_run_until(&f->loop, idle, f, 20000));
    tide_ckpt_tiers_counts(f->t, &ok, &bad);
    assert_int_equal(ok, 0);
    assert_int_equal(bad, 1);
    assert_false(exists("%s/job-b/step-7/rank-0/tide-manifest.json", f->hot));
    assert_false(exists("%s/job-b/step-7/rank-0", f->warm));
    free(file);
}

/* The search: hot first; a corrupt hot copy is skipped for warm's copy of the same step; the resume
 * bound; another rank finds nothing. */
static void test_restore(void **state)
{
    fx_t *f = *state;
    char *file;

    save(f, "job-c", 10, "ten");
    save(f, "job-c", 20, "twenty");
    assert_true(wt_run_until(&f->loop, idle, f, 20000));

    restore(f, "job-c", 2, 0, -1);
    assert_int_equal(f->rc, 0);
    assert_int_equal(f->step, 20);
    assert_string_equal(f->tier, "hot");
    assert_int_equal(f->n_skipped, 0);

    /* flip a byte of the newest hot copy */
    assert_true(asprintf(&file, "%s/job-c/step-20/rank-0/ckpt.bin", f->hot) > 0);
    wt_write_file(file, "twEnty");
    free(file);
    restore(f, "job-c", 2, 0, -1);
    assert_int_equal(f->rc, 0);
    assert_int_equal(f->step, 20);
    assert_string_equal(f->tier, "warm");
    assert_non_null(strstr(f->path, f->warm));
    assert_int_equal(f->n_skipped, 1);
    assert_string_equal(f->skip0_tier, "hot");
    assert_int_equal(f->skip0_step, 20);
    assert_int_equal(f->skip0_rc, -EBADMSG);

    /* the scheduler's resume step bounds the search */
    restore(f, "job-c", 2, 0, 15);
    assert_int_equal(f->rc, 0);
    assert_int_equal(f->step, 10);
    assert_string_equal(f->tier, "hot");

    /* a copy written by a later generation is not this lineage's */
    restore(f, "job-c", 0, 0, -1);
    assert_int_equal(f->rc, -ENOENT);

    restore(f, "job-c", 2, 3, -1);
    assert_int_equal(f->rc, -ENOENT);
    restore(f, "job-none", 2, 0, -1);
    assert_int_equal(f->rc, -ENOENT);
}

/* Freed with a save running and more queued, and a restore outstanding: no callback, no leak. */
static void test_free_busy(void **state)
{
    fx_t *f = *state;

    save(f, "job-d", 1, "a");
    save(f, "job-d", 2, "b");
    f->calls = 0;
    tide_ckpt_tiers_restore(f->t, "job-d", 1, 0, -1, NULL, 42, on_found, f);
    assert_true(tide_ckpt_tiers_busy(f->t) >= 2);
    tide_ckpt_tiers_free(f->t);
    f->t = NULL;
    assert_int_equal(wt_loop_finish(&f->loop), 0);
    assert_int_equal(f->calls, 0);
    assert_int_equal(uv_loop_init(&f->loop), 0); /* for teardown */
}

/* A file of a mirrored copy: HOT/mirror/job/step-S/rank-R/ckpt.bin. */
static void write_mirror(fx_t *f, const char *job, int64_t step, int rank, const char *content)
{
    char *dir, *file;

    assert_true(asprintf(&dir, "%s/mirror/%s/step-%lld/rank-%d", f->hot, job, (long long)step, rank) > 0);
    mkdirs(dir);
    assert_true(asprintf(&file, "%s/ckpt.bin", dir) > 0);
    wt_write_file(file, content);
    free(file);
    free(dir);
}

/* The ended job's HOT/JOB and HOT/mirror/JOB go, after its save queued before; other jobs' copies, the
 * mirror tier itself and bad ids are left alone. */
static void test_forget(void **state)
{
    fx_t *f = *state;
    uint64_t jobs = 0, bytes = 0;

    save(f, "job-a", 1, "a1");
    save(f, "job-a", 2, "a2");
    save(f, "job-b", 1, "b1");
    write_mirror(f, "job-a", 7, 1, "peer's a7");
    write_mirror(f, "job-b", 7, 1, "peer's b7");
    /* Queued behind the saves: they run first, so nothing of job-a is written after the forget. */
    assert_int_equal(tide_ckpt_tiers_forget(f->t, "job-a"), 1);
    assert_true(tide_ckpt_tiers_busy(f->t) >= 1);
    assert_true(wt_run_until(&f->loop, idle, f, 20000));
    assert_false(exists("%s/job-a", f->hot));
    assert_false(exists("%s/mirror/job-a", f->hot));
    assert_true(exists("%s/job-b/step-1/rank-0/ckpt.bin", f->hot));
    assert_true(exists("%s/mirror/job-b/step-7/rank-1/ckpt.bin", f->hot));
    assert_true(exists("%s/job-a/step-2/rank-0/ckpt.bin", f->warm)); /* warm keeps its own retention */
    tide_ckpt_tiers_forgotten(f->t, &jobs, &bytes);
    assert_int_equal(jobs, 1);
    assert_true(bytes >= strlen("a1") + strlen("a2") + strlen("peer's a7")); /* + the manifests */

    /* A job id that is no file name builds no path; "mirror" never takes the mirror tier with it. */
    assert_int_equal(tide_ckpt_tiers_forget(f->t, "../job-b"), -EINVAL);
    assert_int_equal(tide_ckpt_tiers_forget(f->t, ".hidden"), -EINVAL);
    assert_int_equal(tide_ckpt_tiers_forget(f->t, ""), -EINVAL);
    assert_int_equal(tide_ckpt_tiers_forget(f->t, "mirror"), 1);
    assert_int_equal(tide_ckpt_tiers_forget(f->t, "job-none"), 1);
    assert_true(wt_run_until(&f->loop, idle, f, 20000));
    assert_true(exists("%s/mirror/job-b/step-7/rank-1/ckpt.bin", f->hot));
    assert_true(exists("%s/job-b/step-1/rank-0/ckpt.bin", f->hot));
}

static struct timespec old_time;

static int age_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    struct timespec ts[2] = {old_time, old_time};

    (void)st;
    (void)type;
    (void)ftw;
    assert_int_equal(utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW), 0);
    return 0;
}

/* Every file and directory under path gets an mtime hours_ago in the past. */
static void age_tree(const char *path, int hours_ago)
{
    clock_gettime(CLOCK_REALTIME, &old_time);
    old_time.tv_sec -= (time_t)hours_ago * 3600;
    old_time.tv_nsec = 0;
    assert_int_equal(nftw(path, age_entry, 16, FTW_PHYS), 0);
}

/* The TTL backstop: copies (hot and mirrored) of jobs with no rank here whose newest file is older
 * than the TTL go; a job with one newer file, a running job and the TTL 0 (never) keep theirs. */
static void test_sweep_ttl(void **state)
{
    fx_t *f = *state;
    const char *keep[] = {"13"};
    char *p;
    uint64_t jobs = 0;

    save(f, "11", 3, "o3");
    save(f, "12", 3, "n3");
    save(f, "13", 3, "r3");
    save(f, "14", 3, "m3");
    write_mirror(f, "15", 9, 0, "old mirrored");
    write_mirror(f, "16", 9, 0, "new mirrored");
    assert_true(wt_run_until(&f->loop, idle, f, 20000));
    assert_true(asprintf(&p, "%s/11", f->hot) > 0);
    age_tree(p, 48);
    free(p);
    assert_true(asprintf(&p, "%s/13", f->hot) > 0);
    age_tree(p, 48);
    free(p);
    assert_true(asprintf(&p, "%s/mirror/15", f->hot) > 0);
    age_tree(p, 200); /* a mirrored job (it runs elsewhere) goes after 7 x the TTL */
    free(p);
    write_mirror(f, "17", 9, 0, "mirrored, a day and more old");
    assert_true(asprintf(&p, "%s/mirror/17", f->hot) > 0);
    age_tree(p, 30);
    free(p);
    save(f, "18", 3, "l3");
    assert_true(wt_run_until(&f->loop, idle, f, 20000));
    assert_true(asprintf(&p, "%s/18", f->hot) > 0);
    age_tree(p, 48);
    free(p);
    tide_ckpt_tiers_rank_started(f->t, 77, "18"); /* started after the keep list was taken */
    assert_true(asprintf(&p, "%s/notes/old", f->hot) > 0);
    mkdirs(p); /* not tide's: only job numbers are swept */
    free(p);
    assert_true(asprintf(&p, "%s/notes", f->hot) > 0);
    age_tree(p, 48);
    free(p);
    assert_true(asprintf(&p, "%s/14", f->hot) > 0);
    age_tree(p, 48);
    free(p);
    assert_true(asprintf(&p, "%s/14/step-3/rank-0/ckpt.bin", f->hot) > 0);
    assert_int_equal(utimensat(AT_FDCWD, p, NULL, 0), 0); /* one file is new: the job stays */
    free(p);
    assert_true(asprintf(&p, "%s/.gone-job-x-1-1/step-1", f->hot) > 0);
    mkdirs(p); /* a removal that a crash interrupted */
    free(p);

    assert_int_equal(tide_ckpt_tiers_sweep(f->t, 0, keep, 1), 0); /* 0: never */
    assert_int_equal(tide_ckpt_tiers_sweep(f->t, -1, keep, 1), -EINVAL);
    assert_int_equal(tide_ckpt_tiers_busy(f->t), 0);
    assert_int_equal(tide_ckpt_tiers_sweep(f->t, 72LL * 3600 * 1000, keep, 1), 1); /* nothing that old */
    assert_true(wt_run_until(&f->loop, idle, f, 20000));
    assert_true(exists("%s/11/step-3/rank-0/ckpt.bin", f->hot));
    assert_true(exists("%s/mirror/15/step-9/rank-0/ckpt.bin", f->hot));

    assert_int_equal(tide_ckpt_tiers_sweep(f->t, 24LL * 3600 * 1000, keep, 1), 1);
    assert_true(wt_run_until(&f->loop, idle, f, 20000));
    assert_false(exists("%s/11", f->hot));
    assert_false(exists("%s/mirror/15", f->hot));
    assert_false(exists("%s/.gone-job-x-1-1", f->hot));
    assert_true(exists("%s/12/step-3/rank-0/ckpt.bin", f->hot));
    assert_true(exists("%s/13/step-3/rank-0/ckpt.bin", f->hot));
    assert_true(exists("%s/14/step-3/rank-0/ckpt.bin", f->hot));
    assert_true(exists("%s/mirror/16/step-9/rank-0/ckpt.bin", f->hot));
    assert_true(exists("%s/mirror/17/step-9/rank-0/ckpt.bin", f->hot));
    assert_true(exists("%s/18/step-3/rank-0/ckpt.bin", f->hot));
    assert_true(exists("%s/notes/old", f->hot));
    assert_true(exists("%s/mirror", f->hot));
    assert_true(exists("%s/11/step-3/rank-0/ckpt.bin", f->warm)); /* warm is not the sweep's */
    tide_ckpt_tiers_forgotten(f->t, &jobs, NULL);
    assert_int_equal(jobs, 2);
    /* Its rank ended: the next sweep takes it. */
    tide_ckpt_tiers_rank_ended(f->t, 77);
    assert_int_equal(tide_ckpt_tiers_sweep(f->t, 24LL * 3600 * 1000, keep, 1), 1);
    assert_true(wt_run_until(&f->loop, idle, f, 20000));
    assert_false(exists("%s/18", f->hot));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test_setup_teardown(test_save_copies_and_prunes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_save_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restore, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_busy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forget, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sweep_ttl, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
