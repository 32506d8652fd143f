/* Unit tests of the checkpoint tier store (worker/ckpt_store.c) in a throwaway directory under
 * $TMPDIR: manifests written and read back, verification of corrupt, truncated, missing and
 * hand-crafted bad copies, the search over tiers (tier order, newer steps, the resume bound, the
 * lineage bound, what it skipped), retention, and directory checkpoints against flush_copy's rule.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "ckpt_store.h"
#include "flush.h"
#include "worker_test_util.h"

/* --- files --- */

static int setup(void **state)
{
    (void)state;
    wt_scratch_begin("ckpt");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    wt_scratch_end();
    return 0;
}

static void write_str(const char *path, const char *s)
{
    wt_write_bytes(path, s, strlen(s));
}

static bool exists(const char *path)
{
    struct stat st;

    return lstat(path, &st) == 0;
}

/* Flips one byte of path at off. */
static void corrupt(const char *path, off_t off)
{
    int fd = open(path, O_RDWR);
    unsigned char c;

    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &c, 1, off), 1);
    c ^= 0x5a;
    assert_int_equal(pwrite(fd, &c, 1, off), 1);
    close(fd);
}

static void sha_hex(const void *data, size_t len, char *hex)
{
    uint8_t d[32];
    unsigned int dlen = 0;

    assert_true(EVP_Digest(data, len, d, &dlen, EVP_sha256(), NULL));
    for (int i = 0; i < 32; i++)
        sprintf(hex + 2 * i, "%02x", d[i]);
}

/* --- copies --- */

typedef struct content {
    const char *name;
    const char *data;
} content_t;

/* Makes ROOT/TIER/JOB/step-STEP/rank-RANK (TIER relative to the scratch root) with the given files and a
 * manifest for them. Returns the rank directory (lives until teardown). */
static char *make_copy(const char *tier, const char *job, int32_t gen, int64_t step, int32_t rank,
                       const content_t *files, size_t n)
{
    char *dir = wt_at("%s/%s/step-%lld/rank-%d", tier, job, (long long)step, (int)rank);
    tide_ckpt_meta_t meta;
    tide_error_t err = {{0}};

    wt_mkdirs(dir);
    for (size_t i = 0; i < n; i++)
        write_str(
            wt_at("%s/%s/step-%lld/rank-%d/%s", tier, job, (long long)step, (int)rank, files[i].name),
            files[i].data);
    assert_int_equal(tide_ckpt_meta_scan(dir, job, gen, step, rank, NULL, &meta, &err), 0);
    assert_int_equal(tide_ckpt_manifest_write(dir, &meta, &err), 0);
    tide_ckpt_meta_clear(&meta);
    return dir;
}

/* One file "ckpt.bin" whose content names where it is. */
static char *make_one(const char *tier, const char *job, int32_t gen, int64_t step, int32_t rank)
{
    char data[200];
    content_t c = {"ckpt.bin", data};

    snprintf(data, sizeof(data), "weights of %s step %lld rank %d gen %d in %s", job,
             (long long)step, (int)rank, (int)gen, tier);
    return make_copy(tier, job, gen, step, rank, &c, 1);
}

static char *write_manifest_text(const char *dir, const char *text)
{
    char *p = wt_at("%s/%s", dir + strlen(wt_scratch_root()) + 1, TIDE_CKPT_MANIFEST);

    write_str(p, text);
    return p;
}

/* --- manifests --- */

static void test_round_trip(void **state)
{
    const char *data = "0123456789abcdef-checkpoint";
    char *dir = wt_at("hot/job-a/step-300/rank-0");
    tide_ckpt_file_t file = {"ckpt.bin", 0, ""};
    tide_ckpt_meta_t meta = {0}, back;
    tide_error_t err = {{0}};
    char hex[65], upper[65];

    (void)state;
    wt_mkdirs(dir);
    write_str(wt_at("hot/job-a/step-300/rank-0/ckpt.bin"), data);
    sha_hex(data, strlen(data), hex);
    /* The caller's sha in upper case is stored lowercased. */
    for (int i = 0; i < 65; i++)
        upper[i] = (char)(hex[i] >= 'a' && hex[i] <= 'f' ? hex[i] - 32 : hex[i]);
    memcpy(file.sha256, upper, sizeof(file.sha256));
    file.bytes = strlen(data);
    meta.job = "job-a";
    meta.generation = 7;
    meta.step = 300;
    meta.rank = 0;
    meta.files = &file;
    meta.n_files = 1;
    memcpy(meta.sha256, upper, sizeof(meta.sha256));
    meta.time_ms = 1700000000123;
    assert_int_equal(tide_ckpt_manifest_write(dir, &meta, &err), 0);
    assert_true(exists(wt_at("hot/job-a/step-300/rank-0/" TIDE_CKPT_MANIFEST)));

    assert_int_equal(tide_ckpt_verify(dir, &back, &err), 0);
    assert_string_equal(back.job, "job-a");
    assert_int_equal(back.generation, 7);
    assert_int_equal(back.step, 300);
    assert_int_equal(back.rank, 0);
    assert_int_equal(back.n_files, 1);
    assert_string_equal(back.files[0].name, "ckpt.bin");
    assert_int_equal(back.files[0].bytes, strlen(data));
    assert_string_equal(back.files[0].sha256, hex);
    assert_string_equal(back.sha256, hex);
    assert_int_equal(back.time_ms, 1700000000123);
    tide_ckpt_meta_clear(&back);
    tide_ckpt_meta_clear(NULL);

    /* No temporary manifest is left; the scan sees the same. time_ms 0 means now. */
    {
        tide_ckpt_meta_t scan;
        assert_int_equal(tide_ckpt_meta_scan(dir, "job-a", 7, 300, 0, upper, &scan, &err), 0);
        assert_int_equal(scan.n_files, 1); /* the manifest is not a checkpoint file */
        assert_string_equal(scan.files[0].sha256, hex);
        assert_string_equal(scan.sha256, hex);
        assert_int_equal(tide_ckpt_manifest_write(dir, &scan, &err), 0);
        tide_ckpt_meta_clear(&scan);
        assert_int_equal(tide_ckpt_verify(dir, &back, &err), 0);
        assert_true(back.time_ms > 1600000000000);
        tide_ckpt_meta_clear(&back);
    }
    /* A trainer sha that is not the file's: the files are not what it reported. */
    {
        tide_ckpt_meta_t scan;
        char other[65];
        sha_hex("x", 1, other);
        assert_int_equal(tide_ckpt_meta_scan(dir, "job-a", 7, 300, 0, other, &scan, &err),
                         -EBADMSG);
        assert_null(scan.job);
    }
    /* Only the manifest and the file are there. */
    {
        int n = 0;
        DIR *d = opendir(dir);
        struct dirent *de;
        assert_non_null(d);
        while ((de = readdir(d)))
            n += de->d_name[0] != '.';
        closedir(d);
        assert_int_equal(n, 2);
        d = opendir(dir);
        while ((de = readdir(d)))
            assert_true(strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
                        de->d_name[0] != '.');
        closedir(d);
    }
}

static void test_write_refuses_bad_meta(void **state)
{
    char *dir = wt_at("d");
    tide_ckpt_file_t files[2] = {{"ok.bin", 3, ""}, {"ok2.bin", 3, ""}};
    tide_ckpt_meta_t m = {.job = "job", .step = 1, .files = files, .n_files = 1};
    tide_error_t err = {{0}};
    const char *bad_names[] = {"../evil", "a/b", "..", ".", "", TIDE_CKPT_MANIFEST};

    (void)state;
    wt_mkdirs(dir);
    sha_hex("abc", 3, files[0].sha256);
    sha_hex("abc", 3, files[1].sha256);
    assert_int_equal(tide_ckpt_manifest_write(dir, &m, &err), 0);
    for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
        files[0].name = (char *)bad_names[i];
        tide_error_clear(&err);
        assert_int_equal(tide_ckpt_manifest_write(dir, &m, &err), -EINVAL);
        assert_non_null(strstr(err.text, "not a plain file name"));
    }
    files[0].name = "ok.bin";
    m.job = "../job";
    assert_int_equal(tide_ckpt_manifest_write(dir, &m, &err), -EINVAL);
    m.job = "job";
    files[0].bytes = TIDE_CKPT_MAX_FILE_BYTES + 1;
    assert_int_equal(tide_ckpt_manifest_write(dir, &m, &err), -EINVAL);
    assert_non_null(strstr(err.text, "absurd size"));
    files[0].bytes = 3;
    files[1].name = "ok.bin";
    m.n_files = 2;
    assert_int_equal(tide_ckpt_manifest_write(dir, &m, &err), -EINVAL);
    assert_non_null(strstr(err.text, "twice"));
    m.n_files = 0;
    assert_int_equal(tide_ckpt_manifest_write(dir, &m, &err), -EINVAL);
    m.n_files = 1;
    memcpy(files[0].sha256, "zz", 3);
    assert_int_equal(tide_ckpt_manifest_write(dir, &m, &err), -EINVAL);
    /* The manifest written first is still the one there. */
    {
        tide_ckpt_meta_t back;
        write_str(wt_at("d/ok.bin"), "abc");
        assert_int_equal(tide_ckpt_verify(dir, &back, &err), 0);
        assert_string_equal(back.files[0].name, "ok.bin");
        tide_ckpt_meta_clear(&back);
    }
    /* A directory that does not exist. */
    files[0].sha256[0] = '\0';
    sha_hex("abc", 3, files[0].sha256);
    assert_int_equal(tide_ckpt_manifest_write(wt_at("nope"), &m, &err), -ENOENT);
}

static void test_verify_corrupt_byte(void **state)
{
    char *dir = make_one("hot", "j", 1, 300, 0);
    tide_ckpt_meta_t m;
    tide_error_t err = {{0}};

    (void)state;
    assert_int_equal(tide_ckpt_verify(dir, &m, &err), 0);
    tide_ckpt_meta_clear(&m);
    corrupt(wt_at("hot/j/step-300/rank-0/ckpt.bin"), 5);
    assert_int_equal(tide_ckpt_verify(dir, &m, &err), -EBADMSG);
    assert_null(m.job);
    assert_non_null(strstr(err.text, "ckpt.bin"));
    assert_non_null(strstr(err.text, "sha256 mismatch"));
    assert_non_null(strstr(err.text, "manifest says"));
}

static void test_verify_truncated(void **state)
{
    char *dir = make_one("hot", "j", 1, 300, 0);
    tide_ckpt_meta_t m;
    tide_error_t err = {{0}};

    (void)state;
    assert_int_equal(truncate(wt_at("hot/j/step-300/rank-0/ckpt.bin"), 7), 0);
    assert_int_equal(tide_ckpt_verify(dir, &m, &err), -EBADMSG);
    assert_non_null(strstr(err.text, "ckpt.bin: 7 bytes, manifest says"));
    assert_non_null(strstr(err.text, "truncated"));
    /* Gone entirely. */
    assert_int_equal(unlink(wt_at("hot/j/step-300/rank-0/ckpt.bin")), 0);
    assert_int_equal(tide_ckpt_verify(dir, &m, &err), -EBADMSG);
    assert_non_null(strstr(err.text, "missing"));
    /* Replaced by a link to a file with the right content: not a copy of ours. */
    {
        char same[300];
        snprintf(same, sizeof(same), "weights of j step 300 rank 0 gen 1 in hot");
        write_str(wt_at("elsewhere"), same);
    }
    assert_int_equal(symlink(wt_at("elsewhere"), wt_at("hot/j/step-300/rank-0/ckpt.bin")), 0);
    assert_int_equal(tide_ckpt_verify(dir, &m, &err), -EBADMSG);
}

static void test_verify_missing_manifest(void **state)
{
    char *dir = wt_at("hot/j/step-1/rank-0");
    tide_ckpt_meta_t m;
    tide_error_t err = {{0}};

    (void)state;
    wt_mkdirs(dir);
    write_str(wt_at("hot/j/step-1/rank-0/ckpt.bin"), "data");
    assert_int_equal(tide_ckpt_verify(dir, &m, &err), -ENOENT);
    assert_non_null(strstr(err.text, "no manifest"));
    assert_int_equal(tide_ckpt_verify(wt_at("none"), &m, &err), -ENOENT);
}

static void test_verify_bad_manifests(void **state)
{
    char *dir = wt_at("hot/j/step-1/rank-0");
    char sha[65], good[2048];
    tide_ckpt_meta_t m;
    tide_error_t err = {{0}};
    struct {
        const char *json; /* %s: the file's sha */
        const char *says;
    } cases[] = {
        {"{\"version\":1,\"job\":\"j\"", "not a JSON object"},
        {"[1,2]", "not a JSON object"},
        {"{\"version\":1,\"job\":\"j\",\"generation\":1,\"step\":1,\"rank\":0,\"sha256\":\"\","
         "\"time_ms\":1}",
         "missing field files"},
        {"{\"version\":1,\"generation\":1,\"step\":1,\"rank\":0,\"sha256\":\"\",\"time_ms\":1,"
         "\"files\":[{\"name\":\"ckpt.bin\",\"bytes\":4,\"sha256\":\"%s\"}]}",
         "missing field job"},
        {"{\"version\":1,\"job\":\"j\",\"generation\":1,\"step\":\"1\",\"rank\":0,\"sha256\":\"\","
         "\"time_ms\":1,\"files\":[{\"name\":\"ckpt.bin\",\"bytes\":4,\"sha256\":\"%s\"}]}",
         "field step is not an integer"},
        {"{\"version\":1,\"job\":\"j\",\"generation\":1,\"step\":1.5,\"rank\":0,\"sha256\":\"\","
         "\"time_ms\":1,\"files\":[{\"name\":\"ckpt.bin\",\"bytes\":4,\"sha256\":\"%s\"}]}",
         "field step is not an integer"},
        {"{\"version\":1,\"job\":\"j\",\"generation\":-1,\"step\":1,\"rank\":0,\"sha256\":\"\","
         "\"time_ms\":1,\"files\":[{\"name\":\"ckpt.bin\",\"bytes\":4,\"sha256\":\"%s\"}]}",
         "field generation"},
        {"{\"version\":2,\"job\":\"j\",\"generation\":1,\"step\":1,\"rank\":0,\"sha256\":\"\","
         "\"time_ms\":1,\"files\":[{\"name\":\"ckpt.bin\",\"bytes\":4,\"sha256\":\"%s\"}]}",
         "field version"},
        {"{\"version\":1,\"job\":\"j\",\"generation\":1,\"step\":1,\"rank\":0,\"sha256\":\"\","
         "\"time_ms\":1,\"files\":[{\"name\":\"ckpt.bin\",\"bytes\":1e300,\"sha256\":\"%s\"}]}",
         "field bytes"},
        {"{\"version\":1,\"job\":\"j\",\"generation\":1,\"step\":1,\"rank\":0,\"sha256\":\"\","
         "\"time_ms\":1,\"files\":[{\"name\":\"ckpt.bin\",\"bytes\":2251799813685248,"
         "\"sha256\":\"%s\"}]}",
         "field bytes"}, /* 2 PiB */
        {"{\"version\":1,\"job\":\"j\",\"generation\":1,\"step\":1,\"rank\":0,\"sha256\":\"\","
         "\"time_ms\":1,\"files\":[{\"name\":\"ckpt.bin\",\"bytes\":4,\"sha256\":\"abc\"}]}",
         "is not 64 hex digits"},
        {"{\"version\":1,\"job\":\"j\",\"generation\":1,\"step\":1,\"rank\":0,\"sha256\":\"\","
         "\"time_ms\":1,\"files\":[]}",
         "0 files"},
        {"{\"version\":1,\"job\":\"j\",\"generation\":1,\"step\":1,\"rank\":0,\"sha256\":\"\","
         "\"time_ms\":1,\"files\":[7]}",
         "files[0] is not an object"},
        {"{\"version\":1,\"job\":\"../j\",\"generation\":1,\"step\":1,\"rank\":0,\"sha256\":\"\","
         "\"time_ms\":1,\"files\":[{\"name\":\"ckpt.bin\",\"bytes\":4,\"sha256\":\"%s\"}]}",
         "not a valid job id"},
        {"{\"version\":1,\"job\":\"j\",\"generation\":1,\"step\":1,\"rank\":0,\"sha256\":\"\","
         "\"time_ms\":1,\"files\":[{\"name\":\"ckpt.bin\",\"bytes\":4,\"sha256\":\"%s\"},"
         "{\"name\":\"ckpt.bin\",\"bytes\":4,\"sha256\":\"%s\"}]}",
         "listed twice"},
    };

    (void)state;
    wt_mkdirs(dir);
    write_str(wt_at("hot/j/step-1/rank-0/ckpt.bin"), "data");
    sha_hex("data", 4, sha);
    /* The well-formed text verifies, so each failure below is the one change in it. */
    snprintf(good, sizeof(good),
             "{\"version\":1,\"job\":\"j\",\"generation\":1,\"step\":1,\"rank\":0,\"sha256\":\"\","
             "\"time_ms\":1,\"files\":[{\"name\":\"ckpt.bin\",\"bytes\":4,\"sha256\":\"%s\"}]}",
             sha);
    write_manifest_text(dir, good);
    assert_int_equal(tide_ckpt_verify(dir, &m, &err), 0);
    tide_ckpt_meta_clear(&m);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char text[2048];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        snprintf(text, sizeof(text), cases[i].json, sha, sha);
#pragma GCC diagnostic pop
        write_manifest_text(dir, text);
        tide_error_clear(&err);
        assert_int_equal(tide_ckpt_verify(dir, &m, &err), -EINVAL);
        assert_null(m.job);
        if (!strstr(err.text, cases[i].says))
            fail_msg("case %zu: '%s' does not say '%s'", i, err.text, cases[i].says);
    }
    /* A whole sha that matches neither the file nor the directory rule. */
    {
        char text[2048], other[65];
        sha_hex("other", 5, other);
        snprintf(text, sizeof(text),
                 "{\"version\":1,\"job\":\"j\",\"generation\":1,\"step\":1,\"rank\":0,"
                 "\"sha256\":\"%s\",\"time_ms\":1,\"files\":[{\"name\":\"ckpt.bin\",\"bytes\":4,"
                 "\"sha256\":\"%s\"}]}",
                 other, sha);
        write_manifest_text(dir, text);
        assert_int_equal(tide_ckpt_verify(dir, &m, &err), -EBADMSG);
    }
}

/* A manifest naming a file outside the rank directory, whose size and sha would match: refused for
 * the name, not for the content. */
static void test_path_traversal_refused(void **state)
{
    const char *names[] = {"../outside.bin", "../../outside.bin", "..", "sub/inner.bin",
                           "/abs.bin"};
    char *dir = wt_at("hot/j/step-1/rank-0");
    char sha[65];

    (void)state;
    wt_mkdirs(dir);
    wt_mkdirs(wt_at("hot/j/step-1/rank-0/sub"));
    write_str(wt_at("hot/j/step-1/outside.bin"), "secret");
    write_str(wt_at("hot/j/outside.bin"), "secret");
    write_str(wt_at("hot/j/step-1/rank-0/sub/inner.bin"), "secret");
    sha_hex("secret", 6, sha);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char text[1024];
        tide_ckpt_meta_t m;
        tide_error_t err = {{0}};
        snprintf(text, sizeof(text),
                 "{\"version\":1,\"job\":\"j\",\"generation\":1,\"step\":1,\"rank\":0,"
                 "\"sha256\":\"\",\"time_ms\":1,\"files\":[{\"name\":\"%s\",\"bytes\":6,"
                 "\"sha256\":\"%s\"}]}",
                 names[i], sha);
        write_manifest_text(dir, text);
        assert_int_equal(tide_ckpt_verify(dir, &m, &err), -EINVAL);
        if (!strstr(err.text, "not a plain file name"))
            fail_msg("%s: %s", names[i], err.text);
    }
}

/* --- the search --- */

typedef struct skips {
    int n;
    char text[16][300];
} skips_t;

static void on_skip(void *ud, const tide_ckpt_skip_t *skip)
{
    skips_t *s = ud;

    if (s->n < 16)
        snprintf(s->text[s->n], sizeof(s->text[0]), "%s:%lld:%d:%s", skip->tier,
                 (long long)skip->step, skip->rc, skip->reason);
    s->n++;
}

static int find(const char *job, int32_t rank, int64_t resume, int32_t gen, tide_ckpt_found_t *f,
                skips_t *sk)
{
    tide_ckpt_tier_t tiers[] = {
        {"hot", wt_at("hot"), NULL},
        {"mirror", NULL, NULL},
        {"warm", wt_at("warm"), NULL},
        {"cold", wt_at("cold"), NULL}};
    tide_ckpt_search_t s = {tiers, 4, job, rank, resume, gen, on_skip, sk};
    tide_error_t err = {{0}};
    int rc;

    memset(sk, 0, sizeof(*sk));
    rc = tide_ckpt_find(&s, f, &err);
    if (rc == 0) {
        assert_string_equal(f->meta.job, job);
        assert_int_equal(f->meta.rank, rank);
    } else {
        assert_non_null(strstr(err.text, "no verified checkpoint"));
    }
    assert_int_equal((size_t)sk->n, f->n_skipped);
    return rc;
}

static void test_find_corrupt_uses_older_step(void **state)
{
    tide_ckpt_found_t f;
    skips_t sk;

    (void)state;
    make_one("hot", "j", 1, 200, 0);
    make_one("hot", "j", 1, 300, 0);
    assert_int_equal(find("j", 0, -1, -1, &f, &sk), 0);
    assert_int_equal(f.meta.step, 300);
    assert_int_equal(f.tier, 0);
    assert_string_equal(f.path, wt_at("hot/j/step-300/rank-0"));
    assert_int_equal(f.n_skipped, 0);
    tide_ckpt_found_clear(&f);

    corrupt(wt_at("hot/j/step-300/rank-0/ckpt.bin"), 0);
    assert_int_equal(find("j", 0, -1, -1, &f, &sk), 0);
    assert_int_equal(f.meta.step, 200);
    assert_int_equal(f.n_skipped, 1);
    assert_string_equal(f.skipped[0].tier, "hot");
    assert_int_equal(f.skipped[0].step, 300);
    assert_int_equal(f.skipped[0].rc, -EBADMSG);
    assert_non_null(strstr(f.skipped[0].reason, "rank-0/ckpt.bin: sha256 mismatch"));
    assert_non_null(strstr(sk.text[0], "hot:300:"));
    tide_ckpt_found_clear(&f);
    tide_ckpt_found_clear(NULL);

    /* Truncated too: nothing left. */
    assert_int_equal(truncate(wt_at("hot/j/step-200/rank-0/ckpt.bin"), 3), 0);
    assert_int_equal(find("j", 0, -1, -1, &f, &sk), -ENOENT);
    assert_null(f.path);
    assert_int_equal(f.n_skipped, 2);
    assert_int_equal(f.skipped[1].step, 200);
    assert_non_null(strstr(f.skipped[1].reason, "truncated"));
    tide_ckpt_found_clear(&f);
}

static void test_find_missing_and_bad_manifests_skipped(void **state)
{
    tide_ckpt_found_t f;
    skips_t sk;

    (void)state;
    make_one("hot", "j", 1, 100, 0);
    /* step 400: no manifest; 300: bad JSON; 250: another rank's copy in our place; 200: only rank
     * 1 there. */
    wt_mkdirs(wt_at("hot/j/step-400/rank-0"));
    write_str(wt_at("hot/j/step-400/rank-0/ckpt.bin"), "x");
    make_one("hot", "j", 1, 300, 0);
    write_str(wt_at("hot/j/step-300/rank-0/" TIDE_CKPT_MANIFEST), "{not json");
    make_one("hot", "j", 1, 250, 1);
    assert_int_equal(rename(wt_at("hot/j/step-250/rank-1"), wt_at("hot/j/step-250/rank-0")), 0);
    make_one("hot", "j", 1, 200, 1);
    /* Not steps: ignored without a word. */
    wt_mkdirs(wt_at("hot/j/.step-500"));
    wt_mkdirs(wt_at("hot/j/step-0500"));
    wt_mkdirs(wt_at("hot/j/step-x"));
    write_str(wt_at("hot/j/notes"), "n");

    assert_int_equal(find("j", 0, -1, -1, &f, &sk), 0);
    assert_int_equal(f.meta.step, 100);
    assert_int_equal(f.n_skipped, 4);
    assert_int_equal(f.skipped[0].step, 400);
    assert_int_equal(f.skipped[0].rc, -ENOENT);
    assert_non_null(strstr(f.skipped[0].reason, "no manifest"));
    assert_int_equal(f.skipped[1].step, 300);
    assert_int_equal(f.skipped[1].rc, -EINVAL);
    assert_int_equal(f.skipped[2].step, 250);
    assert_int_equal(f.skipped[2].rc, -ESTALE);
    assert_int_equal(f.skipped[3].step, 200);
    assert_int_equal(f.skipped[3].rc, -ENOENT);
    assert_non_null(strstr(f.skipped[3].reason, "no copy of rank 0"));
    tide_ckpt_found_clear(&f);

    /* Another job, or nothing at all. */
    assert_int_equal(find("other", 0, -1, -1, &f, &sk), -ENOENT);
    assert_int_equal(f.n_skipped, 0);
    tide_ckpt_found_clear(&f);
}

static void test_find_lineage(void **state)
{
    tide_ckpt_found_t f;
    skips_t sk;

    (void)state;
    make_one("hot", "j", 3, 200, 0);
    make_one("hot", "j", 5, 300, 0);
    /* Generation 4 does not take generation 5's step 300. */
    assert_int_equal(find("j", 0, -1, 4, &f, &sk), 0);
    assert_int_equal(f.meta.step, 200);
    assert_int_equal(f.meta.generation, 3);
    assert_int_equal(f.n_skipped, 1);
    assert_int_equal(f.skipped[0].rc, -ESTALE);
    assert_non_null(strstr(f.skipped[0].reason, "generation 5"));
    tide_ckpt_found_clear(&f);
    /* Generation 5 and above (and "any") do. */
    assert_int_equal(find("j", 0, -1, 5, &f, &sk), 0);
    assert_int_equal(f.meta.step, 300);
    tide_ckpt_found_clear(&f);
    assert_int_equal(find("j", 0, -1, -1, &f, &sk), 0);
    assert_int_equal(f.meta.step, 300);
    tide_ckpt_found_clear(&f);
    /* Generation 2: nothing of its lineage. */
    assert_int_equal(find("j", 0, -1, 2, &f, &sk), -ENOENT);
    assert_int_equal(f.n_skipped, 2);
    tide_ckpt_found_clear(&f);
}

static void test_find_tier_order_same_step(void **state)
{
    tide_ckpt_found_t f;
    skips_t sk;

    (void)state;
    make_one("hot", "j", 1, 200, 0);
    make_one("hot", "j", 1, 300, 0);
    make_one("cold", "j", 1, 300, 0);
    make_one("warm", "j", 1, 300, 0);
    assert_int_equal(find("j", 0, -1, -1, &f, &sk), 0);
    assert_int_equal(f.meta.step, 300);
    assert_int_equal(f.tier, 0);
    tide_ckpt_found_clear(&f);
    /* Hot's copy of 300 is bad: warm's 300, not hot's 200 (and not cold's). */
    corrupt(wt_at("hot/j/step-300/rank-0/ckpt.bin"), 3);
    assert_int_equal(find("j", 0, -1, -1, &f, &sk), 0);
    assert_int_equal(f.meta.step, 300);
    assert_int_equal(f.tier, 2);
    assert_string_equal(f.path, wt_at("warm/j/step-300/rank-0"));
    assert_int_equal(f.n_skipped, 1);
    assert_string_equal(f.skipped[0].tier, "hot");
    tide_ckpt_found_clear(&f);
    /* Warm's too: cold's. */
    assert_int_equal(unlink(wt_at("warm/j/step-300/rank-0/ckpt.bin")), 0);
    assert_int_equal(find("j", 0, -1, -1, &f, &sk), 0);
    assert_int_equal(f.meta.step, 300);
    assert_int_equal(f.tier, 3);
    assert_int_equal(f.n_skipped, 2);
    assert_string_equal(f.skipped[1].tier, "warm");
    tide_ckpt_found_clear(&f);
}

static void test_find_newer_step_in_later_tier(void **state)
{
    tide_ckpt_found_t f;
    skips_t sk;

    (void)state;
    make_one("hot", "j", 1, 200, 0);
    make_one("cold", "j", 1, 300, 0);
    make_one("warm", "j", 1, 100, 0);
    assert_int_equal(find("j", 0, -1, -1, &f, &sk), 0);
    assert_int_equal(f.meta.step, 300);
    assert_int_equal(f.tier, 3);
    tide_ckpt_found_clear(&f);
}

static void test_find_resume_bound(void **state)
{
    tide_ckpt_found_t f;
    skips_t sk;

    (void)state;
    make_one("hot", "j", 1, 100, 0);
    make_one("warm", "j", 1, 200, 0);
    make_one("hot", "j", 1, 300, 0);
    assert_int_equal(find("j", 0, 250, -1, &f, &sk), 0);
    assert_int_equal(f.meta.step, 200);
    assert_int_equal(f.n_skipped, 0); /* 300 is not even a candidate */
    tide_ckpt_found_clear(&f);
    assert_int_equal(find("j", 0, 300, -1, &f, &sk), 0);
    assert_int_equal(f.meta.step, 300);
    tide_ckpt_found_clear(&f);
    assert_int_equal(find("j", 0, 100, -1, &f, &sk), 0);
    assert_int_equal(f.meta.step, 100);
    tide_ckpt_found_clear(&f);
    assert_int_equal(find("j", 0, 99, -1, &f, &sk), -ENOENT);
    tide_ckpt_found_clear(&f);
}

static void test_find_bad_search(void **state)
{
    tide_ckpt_tier_t tiers[] = {{"hot", "/nonexistent-tier", NULL}};
    tide_ckpt_search_t s = {tiers, 1, "../j", 0, -1, -1, NULL, NULL};
    tide_ckpt_found_t f;
    tide_error_t err = {{0}};

    (void)state;
    assert_int_equal(tide_ckpt_find(&s, &f, &err), -EINVAL);
    s.job = "j";
    s.rank = -1;
    assert_int_equal(tide_ckpt_find(&s, &f, &err), -EINVAL);
    s.rank = 0;
    s.resume_step = -2;
    assert_int_equal(tide_ckpt_find(&s, &f, &err), -EINVAL);
    s.resume_step = -1;
    assert_int_equal(tide_ckpt_find(&s, &f, &err), -ENOENT);
    assert_non_null(strstr(err.text, "in hot"));
    tide_ckpt_found_clear(&f);
    /* More skips than the array holds: all counted, all reported to the callback. */
    for (int st = 1; st <= 12; st++) {
        char *d = make_one("hot", "j", 1, st, 0);
        char p[600];
        snprintf(p, sizeof(p), "%s/ckpt.bin", d);
        corrupt(p, 1);
    }
    {
        skips_t sk;
        assert_int_equal(find("j", 0, -1, -1, &f, &sk), -ENOENT);
        assert_int_equal(f.n_skipped, 12);
        assert_int_equal(sk.n, 12);
        assert_int_equal(f.skipped[0].step, 12);
        assert_int_equal(f.skipped[TIDE_CKPT_MAX_SKIPS - 1].step, 12 - TIDE_CKPT_MAX_SKIPS + 1);
        tide_ckpt_found_clear(&f);
    }
}

/* --- retention --- */

static void test_prune(void **state)
{
    const int64_t steps[] = {1, 2, 10, 100, 9};
    char *tier = wt_at("warm");
    tide_error_t err = {{0}};

    (void)state;
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
        make_one("warm", "j", 1, steps[i], 0);
    make_one("warm", "k", 1, 1, 0);
    wt_mkdirs(wt_at("warm/j/.step-500.tmp")); /* being written */
    wt_mkdirs(wt_at("warm/j/.step-7"
               ".del-1-1/rank-0")); /* a removal a crash interrupted */
    write_str(wt_at("warm/j/notes"), "kept");

    assert_int_equal(tide_ckpt_prune(tier, "j", 2, &err), 0);
    /* Numeric order: 100 and 10 stay (not "9", which sorts after "10" as text). */
    assert_true(exists(wt_at("warm/j/step-100/rank-0/ckpt.bin")));
    assert_true(exists(wt_at("warm/j/step-10/rank-0/ckpt.bin")));
    assert_false(exists(wt_at("warm/j/step-9")));
    assert_false(exists(wt_at("warm/j/step-2")));
    assert_false(exists(wt_at("warm/j/step-1")));
    assert_false(exists(wt_at("warm/j/.step-7.del-1-1")));
    assert_true(exists(wt_at("warm/j/.step-500.tmp")));
    assert_true(exists(wt_at("warm/j/notes")));
    assert_true(exists(wt_at("warm/k/step-1/rank-0/ckpt.bin"))); /* another job */
    /* Nothing else under j: no leftovers of the removal. */
    {
        DIR *d = opendir(wt_at("warm/j"));
        struct dirent *de;
        int n = 0;
        while ((de = readdir(d)))
            n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
        closedir(d);
        assert_int_equal(n, 4);
    }
    /* Again: nothing to do. keep 5 > present. */
    assert_int_equal(tide_ckpt_prune(tier, "j", 5, &err), 0);
    assert_true(exists(wt_at("warm/j/step-10")));
    assert_int_equal(tide_ckpt_prune(tier, "j", 0, &err), 0);
    assert_false(exists(wt_at("warm/j/step-100")));
    assert_false(exists(wt_at("warm/j/step-10")));
    assert_true(exists(wt_at("warm/j/.step-500.tmp")));
    /* A job with nothing in the tier, and bad arguments. */
    assert_int_equal(tide_ckpt_prune(tier, "none", 1, &err), 0);
    assert_int_equal(tide_ckpt_prune(tier, "../j", 1, &err), -EINVAL);
    assert_int_equal(tide_ckpt_prune(tier, "j", -1, &err), -EINVAL);
}

/* --- directory checkpoints --- */

static void test_directory_checkpoint(void **state)
{
    const content_t files[] = {
        {"model.pt", "model weights"}, {".metadata", "torch dcp index"}, {"optim.pt", "adam"}};
    char *src = wt_at("trainer/step-40");
    char *dir, expect[65], lines[1024] = "", sorted_hex[3][65];
    const char *sorted[] = {".metadata", "model.pt", "optim.pt"};
    const char *data_of[] = {"torch dcp index", "model weights", "adam"};
    tide_flush_copy_t req = {0};
    tide_flush_result_t res;
    tide_ckpt_meta_t meta, back;
    tide_ckpt_found_t f;
    tide_error_t err = {{0}};
    skips_t sk;

    (void)state;
    /* The directory rule computed here by hand: sha256sum's lines, sorted by name. */
    for (int i = 0; i < 3; i++) {
        sha_hex(data_of[i], strlen(data_of[i]), sorted_hex[i]);
        snprintf(lines + strlen(lines), sizeof(lines) - strlen(lines), "%s  %s\n", sorted_hex[i],
                 sorted[i]);
    }
    sha_hex(lines, strlen(lines), expect);

    /* flush_copy's sha of the trainer's directory agrees. */
    wt_mkdirs(src);
    for (int i = 0; i < 3; i++)
        write_str(wt_at("trainer/step-40/%s", files[i].name), files[i].data);
    req.src = src;
    req.dest_dir = wt_at("scratch");
    assert_int_equal(tide_flush_copy(&req, &res, &err), 0);
    assert_string_equal(res.sha256, expect);
    tide_flush_result_clear(&res);

    dir = make_copy("warm", "j", 2, 40, 1, files, 3);
    assert_int_equal(tide_ckpt_verify(dir, &back, &err), 0);
    assert_int_equal(back.n_files, 3);
    for (int i = 0; i < 3; i++) {
        assert_string_equal(back.files[i].name, sorted[i]);
        assert_string_equal(back.files[i].sha256, sorted_hex[i]);
    }
    assert_string_equal(back.sha256, expect);
    tide_ckpt_meta_clear(&back);
    /* The scan takes the trainer's directory sha and refuses another. */
    assert_int_equal(tide_ckpt_meta_scan(dir, "j", 2, 40, 1, expect, &meta, &err), 0);
    tide_ckpt_meta_clear(&meta);
    assert_int_equal(tide_ckpt_meta_scan(dir, "j", 2, 40, 1, sorted_hex[0], &meta, &err), -EBADMSG);

    assert_int_equal(find("j", 1, -1, -1, &f, &sk), 0);
    assert_int_equal(f.meta.n_files, 3);
    tide_ckpt_found_clear(&f);
    /* One of the three damaged: the copy is skipped, and the message names it. */
    corrupt(wt_at("warm/j/step-40/rank-1/optim.pt"), 2);
    assert_int_equal(find("j", 1, -1, -1, &f, &sk), -ENOENT);
    assert_non_null(strstr(f.skipped[0].reason, "rank-1/optim.pt"));
    tide_ckpt_found_clear(&f);
    /* An extra file the manifest does not list does not matter; a subdirectory is not scanned. */
    corrupt(wt_at("warm/j/step-40/rank-1/optim.pt"), 2);
    write_str(wt_at("warm/j/step-40/rank-1/extra"), "e");
    assert_int_equal(tide_ckpt_verify(dir, &back, &err), 0);
    tide_ckpt_meta_clear(&back);
}

/* --- threads --- */

typedef struct writer {
    const char *dir;
    int rc;
} writer_t;

static void *write_many(void *arg)
{
    writer_t *w = arg;
    tide_ckpt_meta_t m;
    tide_error_t err = {{0}};

    w->rc = tide_ckpt_meta_scan(w->dir, "j", 1, 5, 0, NULL, &m, &err);
    for (int i = 0; i < 50 && w->rc == 0; i++)
        w->rc = tide_ckpt_manifest_write(w->dir, &m, &err);
    tide_ckpt_meta_clear(&m);
    return NULL;
}

/* Writers on several threads replacing one manifest: each rename is whole, no temporary is left. */
static void test_concurrent_writers(void **state)
{
    char *dir = make_one("hot", "j", 1, 5, 0);
    pthread_t th[4];
    writer_t w[4];
    tide_ckpt_meta_t m;
    tide_error_t err = {{0}};
    DIR *d;
    struct dirent *de;

    (void)state;
    for (int i = 0; i < 4; i++) {
        w[i] = (writer_t){dir, -1};
        assert_int_equal(pthread_create(&th[i], NULL, write_many, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(w[i].rc, 0);
    }
    assert_int_equal(tide_ckpt_verify(dir, &m, &err), 0);
    tide_ckpt_meta_clear(&m);
    d = opendir(dir);
    while ((de = readdir(d)))
        assert_true(strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
                    de->d_name[0] != '.');
    closedir(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_refuses_bad_meta, setup, teardown),
        cmocka_unit_test_setup_teardown(test_verify_corrupt_byte, setup, teardown),
        cmocka_unit_test_setup_teardown(test_verify_truncated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_verify_missing_manifest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_verify_bad_manifests, setup, teardown),
        cmocka_unit_test_setup_teardown(test_path_traversal_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_find_corrupt_uses_older_step, setup, teardown),
        cmocka_unit_test_setup_teardown(test_find_missing_and_bad_manifests_skipped, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_find_lineage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_find_tier_order_same_step, setup, teardown),
        cmocka_unit_test_setup_teardown(test_find_newer_step_in_later_tier, setup, teardown),
        cmocka_unit_test_setup_teardown(test_find_resume_bound, setup, teardown),
        cmocka_unit_test_setup_teardown(test_find_bad_search, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prune, setup, teardown),
        cmocka_unit_test_setup_teardown(test_directory_checkpoint, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_writers, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
