/* Unit tests of the worker's durable checkpoint copies (worker/flush_copy.c, worker/flush.c) in a
 * throwaway directory: the copy's content and SHA-256, atomicity under an injected write failure, a
 * checksum mismatch, a directory checkpoint, a missing source; the copying thread's priorities; and
 * the flusher on a real libuv loop and threadpool (history, answers, queueing per rank, resend,
 * free while a copy runs, leak-clean). */
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
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <uv.h>

#include <cmocka.h>

#include "ckpt_store.h"
#include "flush.h"
#include "worker_test_util.h"

/* --- files --- */

static int setup(void **state)
{
    (void)state;
    wt_scratch_begin("flush");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    wt_scratch_end();
    return 0;
}

/* A file of n pseudo-random bytes (seeded). */
static uint8_t *make_data(size_t n, uint32_t seed)
{
    uint8_t *d = malloc(n ? n : 1);

    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        d[i] = (uint8_t)(seed >> 24);
    }
    return d;
}

static uint8_t *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf;
    long n;

    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc(n > 0 ? (size_t)n : 1);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void sha_hex(const void *data, size_t len, char *hex)
{
    uint8_t d[32];
    unsigned int n = 0;

    assert_true(EVP_Digest(data, len, d, &n, EVP_sha256(), NULL));
    for (int i = 0; i < 32; i++)
        sprintf(hex + 2 * i, "%02x", d[i]);
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Entries of dir whose name starts with '.' (temporary names), "." and ".." aside. */
static int hidden_entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;

    if (!d)
        return 0;
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] == '.' && strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

/* --- the copy --- */

static void test_copy_file(void **state)
{
    size_t n = 3 * (1u << 20) + 12345, got = 0; /* more than one buffer */
    uint8_t *data = make_data(n, 7), *back;
    char hex[65], upper[65];
    tide_flush_copy_t req = {0};
    tide_flush_result_t res;
    tide_error_t err;

    (void)state;
    assert_int_equal(mkdir(wt_at("local"), 0755), 0);
    wt_write_bytes(wt_at("local/mlp-000000000005.ckpt"), data, n);
    sha_hex(data, n, hex);
    for (int i = 0; i < 65; i++)
        upper[i] = (char)(hex[i] >= 'a' && hex[i] <= 'f' ? hex[i] - 32 : hex[i]);
    req.src = wt_at("local/mlp-000000000005.ckpt");
    req.dest_dir = wt_at("durable/job-1/step-5"); /* three levels to create */
    req.expect_sha256 = upper;                 /* either case */
    assert_int_equal(tide_flush_copy(&req, &res, &err), 0);
    assert_string_equal(res.path, wt_at("durable/job-1/step-5/mlp-000000000005.ckpt"));
    assert_int_equal(res.bytes, n);
    assert_int_equal(res.files, 1);
    assert_string_equal(res.sha256, hex);
    back = read_file(res.path, &got);
    assert_non_null(back);
    assert_int_equal(got, n);
    assert_memory_equal(back, data, n);
    assert_int_equal(hidden_entries(wt_at("durable/job-1/step-5")), 0);
    free(back);
    tide_flush_result_clear(&res);

    /* Again, over the existing copy, with other content: replaced; no sha to compare. */
    data[0] ^= 1;
    wt_write_bytes(wt_at("local/mlp-000000000005.ckpt"), data, 10);
    req.expect_sha256 = NULL;
    assert_int_equal(tide_flush_copy(&req, &res, &err), 0);
    sha_hex(data, 10, hex);
    assert_string_equal(res.sha256, hex);
    back = read_file(res.path, &got);
    assert_int_equal(got, 10);
    assert_memory_equal(back, data, 10);
    free(back);
    tide_flush_result_clear(&res);

    /* An empty file is a checkpoint too. */
    wt_write_bytes(wt_at("local/empty"), "", 0);
    req.src = wt_at("local/empty");
    assert_int_equal(tide_flush_copy(&req, &res, &err), 0);
    assert_int_equal(res.bytes, 0);
    assert_string_equal(res.sha256,
                        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    tide_flush_result_clear(&res);
    free(data);
}

/* A write that fails half way: an error naming the destination, the previous copy untouched under
 * the final name, no temporary file. */
static void test_copy_atomic_on_failure(void **state)
{
    size_t n = 2 * (1u << 20) + 7, got = 0;
    uint8_t *old = make_data(100, 1), *data = make_data(n, 2), *back;
    tide_flush_copy_t req = {0};
    tide_flush_result_t res;
    tide_error_t err;

    (void)state;
    wt_write_bytes(wt_at("ck"), data, n);
    assert_int_equal(mkdir(wt_at("d"), 0755), 0);
    req.src = wt_at("ck");
    req.dest_dir = wt_at("d");
    req.fail_after = (1u << 20) + 5; /* inside the second buffer */

    /* No copy there before: none after. */
    assert_int_equal(tide_flush_copy(&req, &res, &err), -EIO);
    assert_non_null(strstr(err.text, wt_at("d/ck")));
    assert_non_null(strstr(err.text, strerror(EIO)));
    assert_false(exists(wt_at("d/ck")));
    assert_int_equal(hidden_entries(wt_at("d")), 0);
    assert_null(res.path);

    /* An older copy there: it stays, byte for byte. */
    wt_write_bytes(wt_at("d/ck"), old, 100);
    assert_int_equal(tide_flush_copy(&req, &res, &err), -EIO);
    back = read_file(wt_at("d/ck"), &got);
    assert_int_equal(got, 100);
    assert_memory_equal(back, old, 100);
    assert_int_equal(hidden_entries(wt_at("d")), 0);
    free(back);

    /* Failing at the very first byte too. */
    req.fail_after = 1;
    assert_int_equal(tide_flush_copy(&req, &res, &err), -EIO);
    assert_int_equal(hidden_entries(wt_at("d")), 0);
    free(old);
    free(data);
}

static void test_copy_sha_mismatch(void **state)
{
    uint8_t *data = make_data(5000, 3);
    char hex[65];
    tide_flush_copy_t req = {0};
    tide_flush_result_t res;
    tide_error_t err;

    (void)state;
    wt_write_bytes(wt_at("ck"), data, 5000);
    sha_hex(data, 4999, hex); /* the trainer hashed something else */
    req.src = wt_at("ck");
    req.dest_dir = wt_at("d/j/step-1");
    req.expect_sha256 = hex;
    assert_int_equal(tide_flush_copy(&req, &res, &err), -EBADMSG);
    assert_non_null(strstr(err.text, "differs from the trainer's"));
    assert_non_null(strstr(err.text, wt_at("ck")));
    assert_false(exists(wt_at("d/j/step-1/ck")));
    assert_int_equal(hidden_entries(wt_at("d/j/step-1")), 0);
    assert_null(res.path);
    free(data);
}

/* A directory checkpoint: its regular files (one level) go to DEST/BASENAME/; the sha is the one of
 * its sha256sum manifest; a second copy replaces the first as a whole; a failed one leaves the
 * first. */
static void test_copy_directory(void **state)
{
    static const char *names[] = {"b.bin", "a.bin", "c.bin"};
    uint8_t *parts[3];
    size_t sizes[3] = {70000, 1, 1500000}, got;
    char manifest[512] = "", hex[65], mhex[65];
    tide_flush_copy_t req = {0};
    tide_flush_result_t res;
    tide_error_t err;
    uint8_t *back;

    (void)state;
    assert_int_equal(mkdir(wt_at("ckdir"), 0755), 0);
    assert_int_equal(mkdir(wt_at("ckdir/sub"), 0755), 0); /* skipped: one level only */
    wt_write_bytes(wt_at("ckdir/sub/x"), "x", 1);
    for (int i = 0; i < 3; i++) {
        parts[i] = make_data(sizes[i], 10 + (uint32_t)i);
        wt_write_bytes(wt_at("ckdir/%s", names[i]), parts[i], sizes[i]);
    }
    assert_int_equal(symlink("/nonexistent", wt_at("ckdir/dangling")), 0); /* skipped */
    /* sorted by name: a, b, c */
    for (int k = 0, order[3] = {1, 0, 2}; k < 3; k++) {
        int i = order[k];
        sha_hex(parts[i], sizes[i], hex);
        snprintf(manifest + strlen(manifest), sizeof(manifest) - strlen(manifest), "%s  %s\n", hex,
                 names[i]);
    }
    sha_hex(manifest, strlen(manifest), mhex);

    req.src = wt_at("ckdir/"); /* a trailing slash names the same directory */
    req.dest_dir = wt_at("dur/j/step-9");
    req.expect_sha256 = mhex;
    assert_int_equal(tide_flush_copy(&req, &res, &err), 0);
    assert_string_equal(res.path, wt_at("dur/j/step-9/ckdir"));
    assert_string_equal(res.sha256, mhex);
    assert_int_equal(res.files, 3);
    assert_int_equal(res.bytes, sizes[0] + sizes[1] + sizes[2]);
    for (int i = 0; i < 3; i++) {
        back = read_file(wt_at("dur/j/step-9/ckdir/%s", names[i]), &got);
        assert_non_null(back);
        assert_int_equal(got, sizes[i]);
        assert_memory_equal(back, parts[i], sizes[i]);
        free(back);
    }
    assert_false(exists(wt_at("dur/j/step-9/ckdir/sub")));
    assert_false(exists(wt_at("dur/j/step-9/ckdir/dangling")));
    assert_int_equal(hidden_entries(wt_at("dur/j/step-9")), 0);
    tide_flush_result_clear(&res);

    /* A failed second copy leaves the first whole. */
    unlink(wt_at("ckdir/a.bin"));
    req.expect_sha256 = NULL;
    req.fail_after = 80000;
    assert_int_equal(tide_flush_copy(&req, &res, &err), -EIO);
    assert_true(exists(wt_at("dur/j/step-9/ckdir/a.bin")));
    assert_int_equal(hidden_entries(wt_at("dur/j/step-9")), 0);

    /* A good second copy replaces it as a whole (a.bin gone). */
    req.fail_after = 0;
    assert_int_equal(tide_flush_copy(&req, &res, &err), 0);
    assert_int_equal(res.files, 2);
    assert_false(exists(wt_at("dur/j/step-9/ckdir/a.bin")));
    assert_true(exists(wt_at("dur/j/step-9/ckdir/c.bin")));
    assert_int_equal(hidden_entries(wt_at("dur/j/step-9")), 0);
    tide_flush_result_clear(&res);
    for (int i = 0; i < 3; i++)
        free(parts[i]);
}

static void test_copy_bad_sources(void **state)
{
    tide_flush_copy_t req = {0};
    tide_flush_result_t res;
    tide_error_t err;
    atomic_int cancel = 1;
    uint8_t *data = make_data(100, 4);

    (void)state;
    req.src = wt_at("missing.ckpt");
    req.dest_dir = wt_at("d");
    assert_int_equal(tide_flush_copy(&req, &res, &err), -ENOENT);
    assert_non_null(strstr(err.text, wt_at("missing.ckpt")));
    assert_non_null(strstr(err.text, "No such file or directory"));
    assert_false(exists(wt_at("d/missing.ckpt")));

    req.src = "/";
    assert_int_equal(tide_flush_copy(&req, &res, &err), -EINVAL);
    assert_non_null(strstr(err.text, "names no file"));

    req.src = "/dev/null";
    assert_int_equal(tide_flush_copy(&req, &res, &err), -EINVAL);
    assert_non_null(strstr(err.text, "not a regular file or a directory"));

    /* A durable directory that cannot be made (a file is in the way). */
    wt_write_bytes(wt_at("ck"), data, 100);
    wt_write_bytes(wt_at("file"), "x", 1);
    req.src = wt_at("ck");
    req.dest_dir = wt_at("file/j/step-1");
    assert_int_equal(tide_flush_copy(&req, &res, &err), -ENOTDIR);
    assert_non_null(strstr(err.text, wt_at("file/j/step-1")));

    /* Cancelled (the worker is stopping): nothing left. */
    req.dest_dir = wt_at("d");
    req.cancel = &cancel;
    assert_int_equal(tide_flush_copy(&req, &res, &err), -ECANCELED);
    assert_false(exists(wt_at("d/ck")));
    assert_int_equal(hidden_entries(wt_at("d")), 0);
    free(data);
}

/* --- priorities --- */

typedef struct prio_seen {
    long io_lowered, io_restored;
    int nice_before, nice_lowered;
} prio_seen_t;

static void *prio_thread(void *arg)
{
    prio_seen_t *p = arg;
    tide_flush_priority_t saved;
    id_t tid = (id_t)syscall(SYS_gettid);

    p->nice_before = getpriority(PRIO_PROCESS, tid);
    tide_flush_priority_lower(&saved);
    p->io_lowered = syscall(SYS_ioprio_get, 1 /* IOPRIO_WHO_PROCESS */, 0);
    p->nice_lowered = getpriority(PRIO_PROCESS, tid);
    tide_flush_priority_restore(&saved);
    p->io_restored = syscall(SYS_ioprio_get, 1, 0);
    return NULL;
}

/* The copying thread runs in the idle I/O class at nice 19; only that thread, and its I/O class
 * goes back afterwards. */
static void test_priority(void **state)
{
    prio_seen_t p;
    pthread_t t;
    long io_main = syscall(SYS_ioprio_get, 1, 0);
    int nice_main = getpriority(PRIO_PROCESS, 0);

    (void)state;
    assert_int_equal(pthread_create(&t, NULL, prio_thread, &p), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(p.io_lowered >> 13, 3); /* IOPRIO_CLASS_IDLE */
    assert_int_equal(p.nice_lowered, 19);
    /* Back out of the idle class (to the saved value; its level may follow nice, which an
     * unprivileged thread cannot lower again). */
    assert_int_not_equal(p.io_restored >> 13, 3);
    assert_int_equal(syscall(SYS_ioprio_get, 1, 0), io_main);
    assert_int_equal(getpriority(PRIO_PROCESS, 0), nice_main);
}

/* --- the flusher --- */

#define MAX_SENT 16

typedef struct sink {
    Tide__V1__FlushDone *done[MAX_SENT];
    size_t n;
    int fail; /* -errno to return */
} sink_t;

static int sink_send(void *ud, const Tide__V1__WorkerMessage *msg)
{
    sink_t *s = ud;
    size_t len = tide__v1__worker_message__get_packed_size(msg);
    uint8_t *buf = malloc(len + 1);
    Tide__V1__WorkerMessage *m;

    if (s->fail) {
        free(buf);
        return s->fail;
    }
    assert_int_equal(msg->msg_case, TIDE__V1__WORKER_MESSAGE__MSG_FLUSH_DONE);
    tide__v1__worker_message__pack(msg, buf);
    m = tide__v1__worker_message__unpack(NULL, len, buf);
    free(buf);
    assert_true(s->n < MAX_SENT);
    s->done[s->n++] = m->flush_done;
    m->flush_done = NULL;
    m->msg_case = TIDE__V1__WORKER_MESSAGE__MSG__NOT_SET;
    tide__v1__worker_message__free_unpacked(m, NULL);
    return 0;
}

static void sink_clear(sink_t *s)
{
    for (size_t i = 0; i < s->n; i++)
        tide__v1__flush_done__free_unpacked(s->done[i], NULL);
    s->n = 0;
}

static void request(tide_flusher_t *f, const char *job, int32_t gen, int32_t rank, int64_t step,
                    const char *dir)
{
    Tide__V1__FlushCheckpoint r = TIDE__V1__FLUSH_CHECKPOINT__INIT;

    r.job_id = (char *)job;
    r.generation = gen;
    r.rank = rank;
    r.step = step;
    r.durable_dir = (char *)dir;
    tide_flusher_request(f, &r);
}

typedef struct rig {
    uv_loop_t loop;
    sink_t sink;
    tide_flusher_t *f;
} rig_t;

static void rig_start_hot(rig_t *r, const char *durable_override, uint64_t fail_after, const char *hot)
{
    tide_flusher_config_t cfg = {durable_override, wt_scratch_root(), fail_after, hot};
    tide_flusher_ops_t ops = {sink_send};

    memset(r, 0, sizeof(*r));
    assert_int_equal(uv_loop_init(&r->loop), 0);
    tide_flusher_new(&r->loop, &cfg, &ops, &r->sink, &r->f);
}

static void rig_start(rig_t *r, const char *durable_override, uint64_t fail_after)
{
    tide_flusher_config_t cfg = {durable_override, wt_scratch_root(), fail_after, NULL};
    tide_flusher_ops_t ops = {sink_send};

    memset(r, 0, sizeof(*r));
    assert_int_equal(uv_loop_init(&r->loop), 0);
    tide_flusher_new(&r->loop, &cfg, &ops, &r->sink, &r->f);
}

static void rig_stop(rig_t *r)
{
    tide_flusher_free(r->f);
    uv_run(&r->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&r->loop), 0);
    sink_clear(&r->sink);
}

/* The ranks' reports, then FlushCheckpoint: rank 0 copies its file, rank 1 (no path) answers ok
 * with 0 bytes, an unknown step and bad requests are refused by name. */
static void test_flusher_answers(void **state)
{
    rig_t r;
    uint8_t *data = make_data(200000, 5);
    char hex[65];
    const Tide__V1__FlushDone *d;

    (void)state;
    assert_int_equal(mkdir(wt_at("wd"), 0755), 0);
    assert_int_equal(mkdir(wt_at("wd/ck"), 0755), 0);
    wt_write_bytes(wt_at("wd/ck/model.ckpt"), data, 200000);
    sha_hex(data, 200000, hex);
    rig_start(&r, NULL, 0);
    tide_flusher_rank_started(r.f, "job-1", 1, 0, wt_at("wd"));
    for (int64_t s = 1; s <= 6; s++) /* only the newest few are kept */
        tide_flusher_saved(r.f, "job-1", 1, 0, s, "ck/model.ckpt", 200000, hex, NULL); /* relative */
    tide_flusher_saved(r.f, "job-1", 1, 1, 6, "", 0, "", NULL);

    request(r.f, "job-1", 1, 0, 6, wt_at("durable"));
    request(r.f, "job-1", 1, 1, 6, wt_at("durable"));
    assert_int_equal(r.sink.n, 1); /* rank 1 at once; rank 0 once its copy ends */
    uv_run(&r.loop, UV_RUN_DEFAULT);
    assert_int_equal(r.sink.n, 2);
    d = r.sink.done[0];
    assert_string_equal(d->job_id, "job-1");
    assert_int_equal(d->rank, 1);
    assert_true(d->ok);
    assert_int_equal(d->bytes, 0);
    assert_string_equal(d->durable_path, "");
    d = r.sink.done[1];
    assert_int_equal(d->rank, 0);
    assert_int_equal(d->generation, 1);
    assert_int_equal(d->step, 6);
    assert_true(d->ok);
    assert_string_equal(d->durable_path, wt_at("durable/job-1/step-6/rank-0/model.ckpt"));
    assert_int_equal(d->bytes, 200000);
    assert_string_equal(d->sha256, hex);
    assert_true(exists(wt_at("durable/job-1/step-6/rank-0/model.ckpt")));
    sink_clear(&r.sink);

    /* Refusals, each answered once with a reason. */
    request(r.f, "job-1", 1, 0, 1, wt_at("durable")); /* fell out of the history */
    request(r.f, "job-1", 2, 0, 6, wt_at("durable")); /* another generation */
    request(r.f, "job-9", 1, 0, 6, wt_at("durable")); /* never reported here */
    request(r.f, "../etc", 1, 0, 6, wt_at("durable"));
    request(r.f, "job-1", 1, 0, 6, "relative/dir");
    request(r.f, "job-1", 1, 0, 6, "");
    request(r.f, "job-1", 1, -1, 6, wt_at("durable"));
    assert_int_equal(r.sink.n, 7);
    for (size_t i = 0; i < 7; i++)
        assert_false(r.sink.done[i]->ok);
    assert_non_null(strstr(r.sink.done[0]->error, "reported no checkpoint of step 1"));
    assert_non_null(strstr(r.sink.done[1]->error, "generation 2 rank 0 reported no checkpoint"));
    assert_non_null(strstr(r.sink.done[2]->error, "job job-9"));
    assert_non_null(strstr(r.sink.done[3]->error, "invalid FlushCheckpoint"));
    assert_non_null(strstr(r.sink.done[4]->error, "'relative/dir' is not an absolute path"));
    assert_non_null(strstr(r.sink.done[5]->error, "no durable directory"));
    assert_non_null(strstr(r.sink.done[6]->error, "invalid FlushCheckpoint"));
    assert_int_equal(r.sink.done[6]->rank, -1);
    assert_int_equal(tide_flusher_busy(r.f), 0);
    rig_stop(&r);
    free(data);
}

/* A checkpoint in the hot tier's layout goes as its whole rank directory, manifest included, to the cold
 * tier's layout: a restore's search finds and verifies it there. */
static void test_flusher_tiered_layout(void **state)
{
    rig_t r;
    uint8_t *data = make_data(100000, 9);
    char hex[65];
    tide_ckpt_meta_t meta;
    tide_ckpt_tier_t cold = {"cold", NULL, NULL};
    tide_ckpt_search_t s;
    tide_ckpt_found_t found;
    tide_error_t err;
    const char *rank_dir;

    (void)state;
    assert_int_equal(mkdir(wt_at("hot"), 0755), 0);
    assert_int_equal(mkdir(wt_at("hot/job-1"), 0755), 0);
    assert_int_equal(mkdir(wt_at("hot/job-1/step-6"), 0755), 0);
    rank_dir = wt_at("hot/job-1/step-6/rank-0");
    assert_int_equal(mkdir(rank_dir, 0755), 0);
    wt_write_bytes(wt_at("hot/job-1/step-6/rank-0/model.ckpt"), data, 100000);
    sha_hex(data, 100000, hex);
    memset(&meta, 0, sizeof(meta));
    assert_int_equal(tide_ckpt_meta_scan(rank_dir, "job-1", 1, 6, 0, NULL, &meta, &err), 0);
    assert_int_equal(tide_ckpt_manifest_write(rank_dir, &meta, &err), 0);
    tide_ckpt_meta_clear(&meta);
    rig_start_hot(&r, NULL, 0, wt_at("hot"));
    tide_flusher_rank_started(r.f, "job-1", 1, 0, wt_at("wd"));
    tide_flusher_saved(r.f, "job-1", 1, 0, 6, wt_at("hot/job-1/step-6/rank-0/model.ckpt"), 100000, hex, NULL);
    request(r.f, "job-1", 1, 0, 6, wt_at("durable"));
    uv_run(&r.loop, UV_RUN_DEFAULT);
    assert_int_equal(r.sink.n, 1);
    assert_true(r.sink.done[0]->ok);
    assert_string_equal(r.sink.done[0]->durable_path, wt_at("durable/job-1/step-6/rank-0"));
    assert_true(exists(wt_at("durable/job-1/step-6/rank-0/model.ckpt")));
    assert_true(exists(wt_at("durable/job-1/step-6/rank-0/tide-manifest.json")));
    cold.dir = wt_at("durable");
    memset(&s, 0, sizeof(s));
    s.tiers = &cold;
    s.n_tiers = 1;
    s.job = "job-1";
    s.rank = 0;
    s.resume_step = -1;
    s.generation = -1;
    memset(&found, 0, sizeof(found));
    assert_int_equal(tide_ckpt_find(&s, &found, &err), 0);
    assert_int_equal(found.meta.step, 6);
    tide_ckpt_found_clear(&found);
    rig_stop(&r);
    free(data);
}

/* A copy that fails (checksum, missing file) is answered ok=false with the path and the reason. */
static void test_flusher_failures(void **state)
{
    rig_t r;
    char hex[65];

    (void)state;
    wt_write_bytes(wt_at("a.ckpt"), "abc", 3);
    sha_hex("abd", 3, hex);
    rig_start(&r, NULL, 0);
    tide_flusher_saved(r.f, "j", 3, 0, 10, wt_at("a.ckpt"), 3, hex, NULL);
    tide_flusher_saved(r.f, "j", 3, 0, 11, wt_at("gone.ckpt"), 3, hex, NULL);
    request(r.f, "j", 3, 0, 10, wt_at("dur"));
    request(r.f, "j", 3, 0, 11, wt_at("dur"));
    uv_run(&r.loop, UV_RUN_DEFAULT);
    assert_int_equal(r.sink.n, 2);
    assert_false(r.sink.done[0]->ok);
    assert_int_equal(r.sink.done[0]->step, 10);
    assert_non_null(strstr(r.sink.done[0]->error, "differs from the trainer's"));
    assert_false(exists(wt_at("dur/j/step-10/rank-0/a.ckpt")));
    assert_false(r.sink.done[1]->ok);
    assert_non_null(strstr(r.sink.done[1]->error, wt_at("gone.ckpt")));
    assert_non_null(strstr(r.sink.done[1]->error, "No such file or directory"));
    rig_stop(&r);

    /* The worker's own --ckpt-durable wins over the scheduler's; an injected failure is reported.
     */
    rig_start(&r, wt_at("mine"), 2);
    tide_flusher_saved(r.f, "j", 1, 0, 1, wt_at("a.ckpt"), 3, "", NULL);
    request(r.f, "j", 1, 0, 1, wt_at("theirs"));
    uv_run(&r.loop, UV_RUN_DEFAULT);
    assert_int_equal(r.sink.n, 1);
    assert_false(r.sink.done[0]->ok);
    assert_non_null(strstr(r.sink.done[0]->error, wt_at("mine/j/step-1/rank-0/a.ckpt")));
    assert_false(exists(wt_at("theirs")));
    assert_int_equal(hidden_entries(wt_at("mine/j/step-1")), 0);
    rig_stop(&r);
}

/* A rank that runs as another account reports a path: the copy reads it as the account (fs_as.h), so a
 * file the account cannot read — a root-only file it named — is not copied; a file it can read is. Root
 * only (the account is uid 65534). */
static void test_flusher_reads_as_account(void **state)
{
    const tide_fs_account_t nobody = {65534, 65534};
    rig_t r;

    (void)state;
    if (geteuid() != 0)
        skip();
    assert_int_equal(chmod(wt_scratch_root(), 0755), 0);
    wt_write_bytes(wt_at("root-only"), "secret", 6);
    assert_int_equal(chmod(wt_at("root-only"), 0600), 0);
    wt_write_bytes(wt_at("public"), "public", 6);
    rig_start(&r, NULL, 0);
    tide_flusher_saved(r.f, "j", 1, 0, 1, wt_at("root-only"), 6, "", &nobody);
    tide_flusher_saved(r.f, "j", 1, 0, 2, wt_at("public"), 6, "", &nobody);
    request(r.f, "j", 1, 0, 1, wt_at("dur"));
    request(r.f, "j", 1, 0, 2, wt_at("dur"));
    uv_run(&r.loop, UV_RUN_DEFAULT);
    assert_int_equal(r.sink.n, 2);
    assert_false(r.sink.done[0]->ok);
    assert_non_null(strstr(r.sink.done[0]->error, "Permission denied"));
    assert_false(exists(wt_at("dur/j/step-1/rank-0/root-only")));
    assert_true(r.sink.done[1]->ok);
    assert_true(exists(wt_at("dur/j/step-2/rank-0/public")));
    rig_stop(&r);
}

/* One copy per rank at a time: a second request for the same rank waits and is answered after the
 * first; the same request again while it runs gets no second answer; other ranks go their own way.
 */
static void test_flusher_queue_and_resend(void **state)
{
    rig_t r;
    uint8_t *data = make_data(4u << 20, 6);

    (void)state;
    wt_write_bytes(wt_at("big"), data, 4u << 20);
    wt_write_bytes(wt_at("small"), "s", 1);
    rig_start(&r, NULL, 0);
    tide_flusher_saved(r.f, "j", 1, 0, 1, wt_at("big"), 0, "", NULL);
    tide_flusher_saved(r.f, "j", 1, 0, 2, wt_at("small"), 0, "", NULL);
    request(r.f, "j", 1, 0, 1, wt_at("dur"));
    request(r.f, "j", 1, 0, 2, wt_at("dur"));
    request(r.f, "j", 1, 0, 1, wt_at("dur")); /* a duplicate of the running one */
    assert_int_equal(tide_flusher_busy(r.f), 2);
    uv_run(&r.loop, UV_RUN_DEFAULT);
    assert_int_equal(r.sink.n, 2);
    assert_int_equal(r.sink.done[0]->step, 1); /* the big one first, though it is slower */
    assert_int_equal(r.sink.done[1]->step, 2);
    assert_true(r.sink.done[0]->ok && r.sink.done[1]->ok);
    assert_int_equal(r.sink.done[0]->bytes, 4u << 20);
    sink_clear(&r.sink);

    /* No stream when the copy ends: the answer waits for the next welcome. */
    r.sink.fail = -ENOTCONN;
    request(r.f, "j", 1, 0, 2, wt_at("dur"));
    uv_run(&r.loop, UV_RUN_DEFAULT);
    assert_int_equal(r.sink.n, 0);
    tide_flusher_resend(r.f);
    assert_int_equal(r.sink.n, 0);
    r.sink.fail = 0;
    tide_flusher_resend(r.f);
    assert_int_equal(r.sink.n, 1);
    assert_true(r.sink.done[0]->ok);
    tide_flusher_resend(r.f);
    assert_int_equal(r.sink.n, 1);
    rig_stop(&r);
    free(data);
}

/* Freed while copies run and wait: nothing more is sent, nothing half-written stays, the loop ends
 * clean. */
static void test_flusher_free_while_copying(void **state)
{
    rig_t r;
    uint8_t *data = make_data(8u << 20, 8);

    (void)state;
    wt_write_bytes(wt_at("big"), data, 8u << 20);
    rig_start(&r, NULL, 0);
    for (int32_t rank = 0; rank < 6; rank++) {
        tide_flusher_saved(r.f, "j", 1, rank, 1, wt_at("big"), 0, "", NULL);
        tide_flusher_saved(r.f, "j", 1, rank, 2, wt_at("big"), 0, "", NULL);
        request(r.f, "j", 1, rank, 1, wt_at("dur%d", rank));
        request(r.f, "j", 1, rank, 2, wt_at("dur%d", rank));
    }
    assert_int_equal(tide_flusher_busy(r.f), 12);
    rig_stop(&r); /* frees, runs the loop dry, closes it */
    assert_int_equal(r.sink.n, 0);
    for (int rank = 0; rank < 6; rank++) {
        assert_int_equal(hidden_entries(wt_at("dur%d/j/step-1", rank)), 0);
        assert_false(exists(wt_at("dur%d/j/step-2", rank)));
    }
    free(data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_copy_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_atomic_on_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_sha_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_directory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_bad_sources, setup, teardown),
        cmocka_unit_test_setup_teardown(test_priority, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flusher_answers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flusher_tiered_layout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flusher_failures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flusher_reads_as_account, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flusher_queue_and_resend, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flusher_free_while_copying, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
