/* Loop tests of the hot-tier peer mirror (worker/ckpt_mirror.c) on 127.0.0.1 with port 0: the
 * WorkerCheckpoints service on a real rpc server (its methods merged into a table whose server ud
 * is someone else's, as on the worker) and the client. A put then a fetch round trip, bitwise; a
 * corrupted or truncated stream from a raw client refused with nothing left; a peer that does not
 * listen; the limits; a stale generation; a fetch of a missing step; the token; pruning; a client
 * freed mid-transfer. Every test waits on conditions with a deadline and ends leak-clean. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <uv.h>

#include <cmocka.h>

#include "ckpt_mirror.h"
#include "rpc_client.h"
#include "rpc_server.h"
#include "tide/v1/worker_service.pb-c.h"
#include "worker_test_util.h"

#define WAIT_MS 30000
#define JOB     "job-m1"

typedef struct result {
    int done;
    int rc;
    tide_grpc_code_t code;
    char error[800];
    char path[512];
    uint64_t bytes;
    int64_t step;
    int32_t generation;
} result_t;

static struct {
    uv_loop_t loop;
    char root[256];
    char mirror[300], src[300], into[300];
    tide_rpc_server_t *srv;
    tide_rpc_method_t *methods;
    tide_ckpt_mirror_server_t *ms;
    tide_ckpt_mirror_client_t *mc;
    char addr[64];
    int other_ud; /* the server's ud: "another service's", as the worker's tide_worker_mpi_t */
} F;

/* --- files --- */

static int rm_cb(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)type;
    (void)ftw;
    return remove(path);
}

static void write_file(const char *dir, const char *name, size_t n, unsigned seed)
{
    char path[600];
    uint8_t *b = malloc(n ? n : 1);
    FILE *f;

    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        b[i] = (uint8_t)(seed >> 16);
    }
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
    free(b);
}

static uint8_t *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    uint8_t *b;
    long len;

    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    fseek(f, 0, SEEK_SET);
    b = malloc((size_t)len + 1);
    assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

static void assert_same_file(const char *a, const char *b)
{
    size_t na = 0, nb = 0;
    uint8_t *x = read_all(a, &na), *y = read_all(b, &nb);

    assert_non_null(x);
    assert_non_null(y);
    assert_int_equal(na, nb);
    assert_memory_equal(x, y, na);
    free(x);
    free(y);
}

/* Entries of dir (0 when it does not exist), "." and ".." left out. */
static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;

    if (!d)
        return 0;
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* A rank's checkpoint of (JOB, generation, step, rank) in src/ROOT-step-S-rank-R with its manifest
 * written; the files: a (big bytes), b (4 KiB), empty (0). */
static char *make_ckpt(int32_t generation, int64_t step, int32_t rank, size_t big,
                       tide_ckpt_meta_t *meta)
{
    char *dir = NULL;
    tide_error_t err = {{0}};

    assert_true(asprintf(&dir, "%s/%s-s%lld-r%d", F.src, JOB, (long long)step, (int)rank) > 0);
    assert_int_equal(mkdir(dir, 0755), 0);
    write_file(dir, "a.bin", big, (unsigned)(step * 7 + rank));
    write_file(dir, "b.bin", 4096, (unsigned)(step * 13 + rank + 1));
    write_file(dir, "empty", 0, 0);
    assert_int_equal(tide_ckpt_meta_scan(dir, JOB, generation, step, rank, NULL, meta, &err), 0);
    assert_int_equal(tide_ckpt_manifest_write(dir, meta, &err), 0);
    return dir;
}

/* --- the loop --- */

/* Runs the loop until cond(arg) holds or WAIT_MS pass (worker_test_util's, on the fixture's loop). */
static bool run_until(bool (*cond)(void *), void *arg)
{
    return wt_run_until(&F.loop, cond, arg, WAIT_MS);
}

static bool is_done(void *arg)
{
    return ((result_t *)arg)->done > 0;
}

static void wait_done(result_t *r)
{
    if (!run_until(is_done, r))
        fail_msg("timed out waiting for a transfer to end");
    assert_int_equal(r->done, 1);
}

static void on_done(void *ud, const tide_ckpt_mirror_result_t *res)
{
    result_t *r = ud;

    r->done++;
    r->rc = res->rc;
    r->code = res->code;
    snprintf(r->error, sizeof(r->error), "%s", res->error);
    snprintf(r->path, sizeof(r->path), "%s", res->path);
    r->bytes = res->bytes;
    if (res->meta) {
        r->step = res->meta->step;
        r->generation = res->meta->generation;
    }
}

/* --- fixture --- */

static uint32_t mirror_min_free; /* the next start_mirror's min_free_pct */

static void start_mirror(uint64_t max_bytes, uint32_t max_files, const char *token, int keep)
{
    tide_ckpt_mirror_server_config_t mcfg = {0};
    tide_rpc_server_config_t sc = {0};
    size_t n = 0;
    tide_error_t err = {{0}};

    mcfg.dir = F.mirror;
    mcfg.worker_id = "peer/gpu0";
    mcfg.token = token;
    mcfg.max_bytes = max_bytes;
    mcfg.max_files = max_files;
    mcfg.keep = keep;
    mcfg.min_free_pct = mirror_min_free;
    mirror_min_free = 0;
    assert_int_equal(tide_ckpt_mirror_server_new(&F.loop, &mcfg, &F.ms, &err), 0);
    /* As on the worker: the server's ud belongs to another service; the mirror is bound to it. */
    F.methods = tide_ckpt_mirror_methods_merge(NULL, 0, &n);
    assert_int_equal(n, tide_ckpt_mirror_methods_count);
    tide_ckpt_mirror_server_bind(F.ms, &F.other_ud);
    sc.methods = F.methods;
    sc.n_methods = n;
    sc.ud = &F.other_ud;
    assert_int_equal(tide_rpc_server_new(&F.loop, &sc, &F.srv, &err), 0);
    assert_int_equal(tide_rpc_server_listen(F.srv, "127.0.0.1:0", &err), 0);
    snprintf(F.addr, sizeof(F.addr), "127.0.0.1:%d", tide_rpc_server_port(F.srv));
}

static void start_client(const char *token)
{
    tide_ckpt_mirror_client_config_t cc = {0};

    cc.worker_id = "self/gpu1";
    cc.token = token;
    assert_int_equal(tide_ckpt_mirror_client_new(&F.loop, &cc, &F.mc), 0);
}

static int setup(void **state)
{
    (void)state;
    memset(&F, 0, sizeof(F));
    assert_int_equal(uv_loop_init(&F.loop), 0);
    snprintf(F.root, sizeof(F.root), "/tmp/tide-test-mirror-XXXXXX");
    assert_non_null(mkdtemp(F.root));
    snprintf(F.mirror, sizeof(F.mirror), "%s/mirror", F.root);
    snprintf(F.src, sizeof(F.src), "%s/src", F.root);
    snprintf(F.into, sizeof(F.into), "%s/hot", F.root);
    assert_int_equal(mkdir(F.src, 0755), 0);
    return 0;
}

static void walk_cb(uv_handle_t *h, void *arg)
{
    (void)arg;
    fprintf(stderr, "handle left open: type %d active %d\n", h->type, uv_is_active(h));
}

static int teardown(void **state)
{
    (void)state;
    tide_ckpt_mirror_client_free(F.mc);
    tide_ckpt_mirror_server_free(F.ms);
    tide_rpc_server_free(F.srv, NULL, NULL);
    uv_run(&F.loop, UV_RUN_DEFAULT);
    free(F.methods);
    if (uv_loop_close(&F.loop) != 0) {
        uv_walk(&F.loop, walk_cb, NULL);
        fail_msg("uv_loop_close != 0");
    }
    nftw(F.root, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

static char *mirror_rank(int64_t step, int32_t rank)
{
    return tide_ckpt_rank_dir(F.mirror, JOB, step, rank);
}

/* Nothing of JOB in the mirror: no copy, no temporary directory. */
static void assert_mirror_empty(void)
{
    char jobdir[400];

    snprintf(jobdir, sizeof(jobdir), "%s/%s", F.mirror, JOB);
    assert_int_equal(count_entries(jobdir), 0);
}

static void do_put(const char *dir, const tide_ckpt_meta_t *meta, result_t *r)
{
    memset(r, 0, sizeof(*r));
    assert_int_equal(tide_ckpt_mirror_put(F.mc, F.addr, dir, meta, NULL, NULL, on_done, r), 0);
    wait_done(r);
}

/* --- tests --- */

static void put_then_fetch_bitwise(void **state)
{
    tide_ckpt_meta_t meta = {0}, v = {0};
    tide_error_t err = {{0}};
    result_t r;
    char *dir, *copy, a[700], b[700];
    const char *names[] = {"a.bin", "b.bin", "empty", TIDE_CKPT_MANIFEST};

    (void)state;
    start_mirror(0, 0, NULL, 0);
    start_client(NULL);
    /* 9 MiB + a bit: many chunks, more than the 4 MiB the sender lets wait in the connection. */
    dir = make_ckpt(2, 5, 1, (9u << 20) + 12345, &meta);
    do_put(dir, &meta, &r);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.code, TIDE_GRPC_OK);
    assert_string_equal(r.error, "");
    copy = mirror_rank(5, 1);
    assert_string_equal(r.path, copy);
    assert_int_equal(r.bytes, (9u << 20) + 12345 + 4096);
    assert_int_equal(tide_ckpt_verify(copy, &v, &err), 0);
    assert_int_equal(v.generation, 2);
    assert_int_equal(v.step, 5);
    assert_int_equal(v.n_files, 3);
    tide_ckpt_meta_clear(&v);
    for (int i = 0; i < 3; i++) {
        snprintf(a, sizeof(a), "%s/%s", dir, names[i]);
        snprintf(b, sizeof(b), "%s/%s", copy, names[i]);
        assert_same_file(a, b);
    }
    /* Only the copy: no temporary directory left beside it. */
    {
        char jobdir[400];
        snprintf(jobdir, sizeof(jobdir), "%s/%s", F.mirror, JOB);
        assert_int_equal(count_entries(jobdir), 1);
    }

    /* Fetch it back into another tier: the same bytes, verified, in the ckpt_store layout. */
    memset(&r, 0, sizeof(r));
    assert_int_equal(
        tide_ckpt_mirror_fetch(F.mc, F.addr, JOB, 1, -1, -1, NULL, F.into, on_done, &r), 0);
    wait_done(&r);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.step, 5);
    assert_int_equal(r.generation, 2);
    free(copy);
    copy = tide_ckpt_rank_dir(F.into, JOB, 5, 1);
    assert_string_equal(r.path, copy);
    assert_int_equal(tide_ckpt_verify(copy, &v, &err), 0);
    tide_ckpt_meta_clear(&v);
    for (int i = 0; i < 3; i++) {
        snprintf(a, sizeof(a), "%s/%s", dir, names[i]);
        snprintf(b, sizeof(b), "%s/%s", copy, names[i]);
        assert_same_file(a, b);
    }
    free(copy);
    free(dir);
    tide_ckpt_meta_clear(&meta);
}

/* --- a raw client, to send what the real one never would --- */

typedef struct raw {
    int done;
    tide_grpc_code_t code;
    char msg[512];
} raw_t;

static void raw_msg(tide_rpc_client_call_t *call, const uint8_t *d, size_t n, void *ud)
{
    (void)call;
    (void)d;
    (void)n;
    (void)ud;
}

static void raw_status(tide_rpc_client_call_t *call, tide_grpc_code_t code, const char *message,
                       void *ud)
{
    raw_t *r = ud;

    (void)call;
    r->done++;
    r->code = code;
    snprintf(r->msg, sizeof(r->msg), "%s", message ? message : "");
}

static bool raw_done(void *arg)
{
    return ((raw_t *)arg)->done > 0;
}

/* Sends meta's header and then the files of dir; flip: the byte at this offset of the first file
 * is flipped in flight (-1: none); cut: stop after this many bytes of the first file (-1: all). */
static void raw_put(const char *dir, const tide_ckpt_meta_t *meta, long flip, long cut, raw_t *r)
{
    tide_rpc_client_config_t cc = {0};
    tide_rpc_client_call_cbs_t cbs = {raw_msg, raw_status};
    tide_rpc_client_t *c;
    tide_rpc_client_call_t *call;
    Tide__V1__CheckpointChunk ch = TIDE__V1__CHECKPOINT_CHUNK__INIT;
    Tide__V1__CheckpointHeader h = TIDE__V1__CHECKPOINT_HEADER__INIT;
    Tide__V1__CheckpointFileInfo fi[8], *fp[8];
    tide_error_t err = {{0}};

    memset(r, 0, sizeof(*r));
    cc.hostport = F.addr;
    assert_int_equal(tide_rpc_client_new(&F.loop, &cc, &c, &err), 0);
    assert_int_equal(tide_rpc_client_call_start(c, TIDE_CKPT_MIRROR_PUT_PATH, 0, &cbs, r, &call),
                     0);
    h.job_id = meta->job;
    h.generation = meta->generation;
    h.step = meta->step;
    h.rank = meta->rank;
    h.sha256 = (char *)meta->sha256;
    h.n_files = meta->n_files;
    h.files = fp;
    for (size_t i = 0; i < meta->n_files; i++) {
        Tide__V1__CheckpointFileInfo init = TIDE__V1__CHECKPOINT_FILE_INFO__INIT;
        fi[i] = init;
        fi[i].name = meta->files[i].name;
        fi[i].bytes = meta->files[i].bytes;
        fi[i].sha256 = (char *)meta->files[i].sha256;
        fp[i] = &fi[i];
    }
    ch.chunk_case = TIDE__V1__CHECKPOINT_CHUNK__CHUNK_HEADER;
    ch.header = &h;
    assert_int_equal(tide_rpc_client_call_send_pb(call, &ch.base), 0);
    for (size_t i = 0; i < meta->n_files; i++) {
        char path[700];
        size_t n = 0, off = 0;
        uint8_t *b;
        snprintf(path, sizeof(path), "%s/%s", dir, meta->files[i].name);
        b = read_all(path, &n);
        assert_non_null(b);
        if (i == 0 && flip >= 0)
            b[flip] ^= 0x40;
        if (i == 0 && cut >= 0)
            n = (size_t)cut;
        while (off < n) {
            Tide__V1__CheckpointData d = TIDE__V1__CHECKPOINT_DATA__INIT;
            size_t len = n - off > TIDE_CKPT_MIRROR_CHUNK ? TIDE_CKPT_MIRROR_CHUNK : n - off;
            d.file_index = (uint32_t)i;
            d.offset = off;
            d.data.data = b + off;
            d.data.len = len;
            ch.chunk_case = TIDE__V1__CHECKPOINT_CHUNK__CHUNK_DATA;
            ch.data = &d;
            assert_int_equal(tide_rpc_client_call_send_pb(call, &ch.base), 0);
            off += len;
        }
        free(b);
        if (i == 0 && cut >= 0)
            break;
    }
    assert_int_equal(tide_rpc_client_call_close_send(call), 0);
    if (!run_until(raw_done, r))
        fail_msg("timed out waiting for the raw put's status");
    tide_rpc_client_free(c);
}

static void corrupted_chunk_refused(void **state)
{
    tide_ckpt_meta_t meta = {0};
    raw_t r;
    char *dir;

    (void)state;
    start_mirror(0, 0, NULL, 0);
    dir = make_ckpt(1, 3, 0, (2u << 20) + 100, &meta);
    raw_put(dir, &meta, (1 << 20) + 7, -1, &r); /* a byte of the second chunk */
    assert_int_equal(r.code, TIDE_GRPC_DATA_LOSS);
    assert_non_null(strstr(r.msg, "a.bin")); /* names the file */
    assert_mirror_empty();

    /* The same stream untouched is accepted (the refusal was the flipped byte). */
    raw_put(dir, &meta, -1, -1, &r);
    assert_int_equal(r.code, TIDE_GRPC_OK);
    {
        char *copy = mirror_rank(3, 0);
        assert_true(exists(copy));
        free(copy);
    }
    free(dir);
    tide_ckpt_meta_clear(&meta);
}

static void truncated_stream_refused(void **state)
{
    tide_ckpt_meta_t meta = {0};
    raw_t r;
    char *dir;

    (void)state;
    start_mirror(0, 0, NULL, 0);
    dir = make_ckpt(1, 3, 0, (2u << 20) + 100, &meta);
    raw_put(dir, &meta, -1, 1 << 20, &r); /* half of a.bin, then the end of the stream */
    assert_int_equal(r.code, TIDE_GRPC_INVALID_ARGUMENT);
    assert_non_null(strstr(r.msg, "truncated"));
    assert_mirror_empty();
    free(dir);
    tide_ckpt_meta_clear(&meta);
}

static void peer_not_listening(void **state)
{
    tide_ckpt_meta_t meta = {0};
    struct sockaddr_in sa;
    int len = sizeof(sa);
    uv_tcp_t tcp;
    result_t r;
    char *dir;

    (void)state;
    start_client(NULL);
    /* A port that was free a moment ago and is closed now. */
    uv_tcp_init(&F.loop, &tcp);
    uv_ip4_addr("127.0.0.1", 0, &sa);
    assert_int_equal(uv_tcp_bind(&tcp, (const struct sockaddr *)&sa, 0), 0);
    assert_int_equal(uv_tcp_getsockname(&tcp, (struct sockaddr *)&sa, &len), 0);
    snprintf(F.addr, sizeof(F.addr), "127.0.0.1:%d", ntohs(sa.sin_port));
    uv_close((uv_handle_t *)&tcp, NULL);
    uv_run(&F.loop, UV_RUN_NOWAIT);

    dir = make_ckpt(1, 1, 0, 1000, &meta);
    do_put(dir, &meta, &r);
    assert_true(r.rc < 0);
    assert_int_equal(r.code, TIDE_GRPC_UNAVAILABLE);
    assert_non_null(strstr(r.error, F.addr)); /* names the peer */
    fprintf(stderr, "not listening: rc %d: %s\n", r.rc, r.error);

    memset(&r, 0, sizeof(r));
    assert_int_equal(
        tide_ckpt_mirror_fetch(F.mc, F.addr, JOB, 0, -1, -1, NULL, F.into, on_done, &r), 0);
    wait_done(&r);
    assert_int_equal(r.code, TIDE_GRPC_UNAVAILABLE);
    assert_int_equal(count_entries(F.into), 0);
    free(dir);
    tide_ckpt_meta_clear(&meta);
}

static void oversize_refused(void **state)
{
    tide_ckpt_meta_t meta = {0};
    result_t r;
    char *dir;

    (void)state;
    start_mirror(1u << 20, 2, NULL, 0); /* 1 MiB, 2 files */
    start_client(NULL);
    dir = make_ckpt(1, 1, 0, 3u << 20, &meta);
    do_put(dir, &meta, &r);
    assert_int_equal(r.code, TIDE_GRPC_RESOURCE_EXHAUSTED);
    assert_int_equal(r.rc, -EFBIG);
    assert_non_null(strstr(r.error, "files")); /* 3 files, the limit is 2 */
    assert_mirror_empty();
    tide_ckpt_meta_clear(&meta);

    /* Two files within the count but over the bytes. */
    {
        tide_error_t err = {{0}};
        char path[700];
        snprintf(path, sizeof(path), "%s/empty", dir);
        assert_int_equal(unlink(path), 0);
        snprintf(path, sizeof(path), "%s/%s", dir, TIDE_CKPT_MANIFEST);
        assert_int_equal(unlink(path), 0);
        assert_int_equal(tide_ckpt_meta_scan(dir, JOB, 1, 1, 0, NULL, &meta, &err), 0);
    }
    do_put(dir, &meta, &r);
    assert_int_equal(r.code, TIDE_GRPC_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(r.error, "bytes"));
    assert_mirror_empty();
    free(dir);
    tide_ckpt_meta_clear(&meta);
}

/* A copy that would leave less than min_free_pct of the filesystem free is refused, nothing of it kept. */
static void no_room_refused(void **state)
{
    tide_ckpt_meta_t meta = {0};
    struct statvfs sv;
    uint64_t pct;
    result_t r;
    char *dir;

    (void)state;
    {
        char parent[sizeof(F.mirror)];
        snprintf(parent, sizeof(parent), "%s", F.mirror);
        *strrchr(parent, '/') = '\0'; /* the mirror's directory is made by the server */
        assert_int_equal(statvfs(parent, &sv), 0);
    }
    pct = (uint64_t)sv.f_bavail * 100 / (sv.f_blocks ? sv.f_blocks : 1) + 1; /* more than is free */
    if (pct > 90) {
        skip(); /* an almost empty filesystem: the largest setting (90 %) leaves room */
        return;
    }
    mirror_min_free = (uint32_t)pct;
    start_mirror(0, 0, NULL, 0);
    start_client(NULL);
    dir = make_ckpt(1, 1, 0, 4096, &meta);
    do_put(dir, &meta, &r);
    assert_int_equal(r.code, TIDE_GRPC_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(r.error, "no room"));
    assert_mirror_empty();
    free(dir);
    tide_ckpt_meta_clear(&meta);
}

/* A put of a job that ended (its ForgetCheckpoints came first) is refused and nothing of it stored. */
static void ended_job_refused(void **state)
{
    tide_ckpt_meta_t meta = {0};
    result_t r;
    char *dir;

    (void)state;
    start_mirror(0, 0, NULL, 0);
    start_client(NULL);
    tide_ckpt_mirror_server_forget(F.ms, JOB);
    tide_ckpt_mirror_server_forget(F.ms, JOB); /* twice: still one entry */
    dir = make_ckpt(1, 1, 0, 4096, &meta);
    do_put(dir, &meta, &r);
    assert_int_equal(r.code, TIDE_GRPC_FAILED_PRECONDITION);
    assert_non_null(strstr(r.error, "ended"));
    assert_mirror_empty();
    free(dir);
    tide_ckpt_meta_clear(&meta);
}

static void stale_generation_refused(void **state)
{
    tide_ckpt_meta_t m3 = {0}, m2 = {0};
    result_t r;
    char *d3, *d2, *copy;

    (void)state;
    start_mirror(0, 0, NULL, 0);
    start_client(NULL);
    d3 = make_ckpt(3, 10, 0, 5000, &m3);
    do_put(d3, &m3, &r);
    assert_int_equal(r.rc, 0);
    /* A put from generation 2 (a deposed generation's rank still running) is refused. */
    d2 = make_ckpt(2, 11, 1, 5000, &m2);
    do_put(d2, &m2, &r);
    assert_int_equal(r.code, TIDE_GRPC_FAILED_PRECONDITION);
    assert_int_equal(r.rc, -ESTALE);
    assert_non_null(strstr(r.error, "stale"));
    copy = mirror_rank(11, 1);
    assert_false(exists(copy));
    free(copy);
    {
        char jobdir[400];
        snprintf(jobdir, sizeof(jobdir), "%s/%s", F.mirror, JOB);
        assert_int_equal(count_entries(jobdir), 1); /* step-10 only, no temporary left */
    }
    /* Also after a restart of the receiver (the check reads what is on disk). */
    tide_ckpt_mirror_server_free(F.ms);
    tide_rpc_server_free(F.srv, NULL, NULL);
    free(F.methods);
    F.ms = NULL;
    F.srv = NULL;
    F.methods = NULL;
    start_mirror(0, 0, NULL, 0);
    do_put(d2, &m2, &r);
    assert_int_equal(r.code, TIDE_GRPC_FAILED_PRECONDITION);
    /* The same generation is fine. */
    do_put(d3, &m3, &r);
    assert_int_equal(r.rc, 0);
    free(d3);
    free(d2);
    tide_ckpt_meta_clear(&m3);
    tide_ckpt_meta_clear(&m2);
}

static void fetch_missing_not_found(void **state)
{
    tide_ckpt_meta_t meta = {0};
    result_t r;
    char *dir;

    (void)state;
    start_mirror(0, 0, NULL, 0);
    start_client(NULL);
    memset(&r, 0, sizeof(r));
    assert_int_equal(
        tide_ckpt_mirror_fetch(F.mc, F.addr, JOB, 0, -1, -1, NULL, F.into, on_done, &r), 0);
    wait_done(&r);
    assert_int_equal(r.code, TIDE_GRPC_NOT_FOUND);
    assert_int_equal(r.rc, -ENOENT);
    assert_non_null(strstr(r.error, JOB));

    /* A copy at step 7 exists, but the bound is step 6: NOT_FOUND too; a rank without one too. */
    dir = make_ckpt(1, 7, 0, 2000, &meta);
    do_put(dir, &meta, &r);
    assert_int_equal(r.rc, 0);
    memset(&r, 0, sizeof(r));
    assert_int_equal(tide_ckpt_mirror_fetch(F.mc, F.addr, JOB, 0, 6, -1, NULL, F.into, on_done, &r),
                     0);
    wait_done(&r);
    assert_int_equal(r.code, TIDE_GRPC_NOT_FOUND);
    memset(&r, 0, sizeof(r));
    assert_int_equal(
        tide_ckpt_mirror_fetch(F.mc, F.addr, JOB, 4, -1, -1, NULL, F.into, on_done, &r), 0);
    wait_done(&r);
    assert_int_equal(r.code, TIDE_GRPC_NOT_FOUND);
    /* A generation below the copy's (the caller's lineage) does not see it either. */
    memset(&r, 0, sizeof(r));
    assert_int_equal(tide_ckpt_mirror_fetch(F.mc, F.addr, JOB, 0, 7, 0, NULL, F.into, on_done, &r),
                     0);
    wait_done(&r);
    assert_int_equal(r.code, TIDE_GRPC_NOT_FOUND);
    {
        char jobdir[400];
        snprintf(jobdir, sizeof(jobdir), "%s/%s", F.into, JOB);
        assert_int_equal(count_entries(jobdir), 0);
    }
    /* In bounds: found. */
    memset(&r, 0, sizeof(r));
    assert_int_equal(tide_ckpt_mirror_fetch(F.mc, F.addr, JOB, 0, 7, 1, NULL, F.into, on_done, &r),
                     0);
    wait_done(&r);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.step, 7);
    free(dir);
    tide_ckpt_meta_clear(&meta);
}

static void token_checked(void **state)
{
    tide_ckpt_meta_t meta = {0};
    result_t r;
    char *dir;

    (void)state;
    start_mirror(0, 0, "s3cret", 0);
    start_client("wrong");
    dir = make_ckpt(1, 1, 0, 1000, &meta);
    do_put(dir, &meta, &r);
    assert_int_equal(r.code, TIDE_GRPC_UNAUTHENTICATED);
    assert_int_equal(r.rc, -EACCES);
    assert_mirror_empty();
    tide_ckpt_mirror_client_free(F.mc);
    start_client("s3cret");
    do_put(dir, &meta, &r);
    assert_int_equal(r.rc, 0);
    free(dir);
    tide_ckpt_meta_clear(&meta);
}

static void prune_keeps_newest(void **state)
{
    result_t r;
    char *copy;

    (void)state;
    start_mirror(0, 0, NULL, 2);
    start_client(NULL);
    for (int64_t s = 1; s <= 4; s++) {
        tide_ckpt_meta_t meta = {0};
        char *dir = make_ckpt(1, s, 0, 3000, &meta);
        do_put(dir, &meta, &r);
        assert_int_equal(r.rc, 0);
        free(dir);
        tide_ckpt_meta_clear(&meta);
    }
    {
        tide_ckpt_meta_t meta = {0}; /* another rank's copy at step 1 stays (per (job, rank)) */
        char *dir = make_ckpt(1, 1, 1, 3000, &meta);
        do_put(dir, &meta, &r);
        assert_int_equal(r.rc, 0);
        free(dir);
        tide_ckpt_meta_clear(&meta);
    }
    for (int64_t s = 1; s <= 4; s++) {
        copy = mirror_rank(s, 0);
        assert_int_equal(exists(copy), s >= 3);
        free(copy);
    }
    copy = mirror_rank(1, 1);
    assert_true(exists(copy));
    free(copy);
}

static bool mirror_job_empty(void *arg)
{
    char jobdir[400];

    (void)arg;
    snprintf(jobdir, sizeof(jobdir), "%s/%s", F.mirror, JOB);
    return count_entries(jobdir) == 0;
}

static bool mirror_job_busy(void *arg)
{
    return !mirror_job_empty(arg);
}

static void client_freed_mid_put(void **state)
{
    tide_ckpt_meta_t meta = {0};
    result_t r;
    char *dir;

    (void)state;
    start_mirror(0, 0, NULL, 0);
    start_client(NULL);
    dir = make_ckpt(1, 2, 0, 16u << 20, &meta);
    memset(&r, 0, sizeof(r));
    assert_int_equal(tide_ckpt_mirror_put(F.mc, F.addr, dir, &meta, NULL, NULL, on_done, &r), 0);
    /* Once the receiver has begun its copy (its temporary directory exists), free the client. */
    if (!run_until(mirror_job_busy, NULL))
        fail_msg("the receiver never began");
    tide_ckpt_mirror_client_free(F.mc);
    F.mc = NULL;
    assert_int_equal(r.done, 1);
    assert_int_equal(r.rc, -ECANCELED);
    /* The receiver drops its partial copy once it sees the call end. */
    if (!run_until(mirror_job_empty, NULL))
        fail_msg("the receiver kept a partial copy");
    free(dir);
    tide_ckpt_meta_clear(&meta);
}

/* A put for a rank that runs as another account opens its files as the account (fs_as.h): a file of
 * the copy the account cannot read fails the put, and the peer keeps nothing; readable, it goes. Root
 * only (the account is uid 65534). */
static void put_reads_as_account(void **state)
{
    const tide_fs_account_t nobody = {65534, 65534};
    tide_ckpt_meta_t meta = {0};
    char path[800];
    result_t r;
    char *dir;

    (void)state;
    if (geteuid() != 0)
        skip();
    assert_int_equal(chmod(F.root, 0755), 0);
    start_mirror(0, 0, NULL, 0);
    start_client(NULL);
    dir = make_ckpt(1, 3, 0, 1000, &meta);
    snprintf(path, sizeof(path), "%s/b.bin", dir);
    assert_int_equal(chmod(path, 0600), 0); /* root's, not the account's */
    memset(&r, 0, sizeof(r));
    assert_int_equal(tide_ckpt_mirror_put(F.mc, F.addr, dir, &meta, NULL, &nobody, on_done, &r), 0);
    wait_done(&r);
    assert_int_equal(r.rc, -EACCES);
    if (!run_until(mirror_job_empty, NULL))
        fail_msg("the receiver kept a partial copy");
    assert_int_equal(chmod(path, 0644), 0);
    memset(&r, 0, sizeof(r));
    assert_int_equal(tide_ckpt_mirror_put(F.mc, F.addr, dir, &meta, NULL, &nobody, on_done, &r), 0);
    wait_done(&r);
    assert_int_equal(r.rc, 0);
    free(dir);
    tide_ckpt_meta_clear(&meta);
}

/* A file of the copy swapped for a FIFO (a rank's account can do that in its own directory) fails the
 * put at once: it is never opened in a way that waits for a writer. */
static void put_refuses_a_fifo(void **state)
{
    tide_ckpt_meta_t meta = {0};
    char path[800];
    result_t r;
    char *dir;

    (void)state;
    start_mirror(0, 0, NULL, 0);
    start_client(NULL);
    dir = make_ckpt(1, 4, 0, 1000, &meta);
    snprintf(path, sizeof(path), "%s/b.bin", dir);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkfifo(path, 0644), 0);
    do_put(dir, &meta, &r);
    assert_int_equal(r.rc, -EINVAL);
    if (!run_until(mirror_job_empty, NULL))
        fail_msg("the receiver kept a partial copy");
    free(dir);
    tide_ckpt_meta_clear(&meta);
}

static void bad_arguments(void **state)
{
    tide_ckpt_meta_t meta = {0};
    result_t r = {0};

    (void)state;
    start_client(NULL);
    assert_int_equal(tide_ckpt_mirror_put(F.mc, "", "/x", &meta, NULL, NULL, on_done, &r), -EINVAL);
    assert_int_equal(tide_ckpt_mirror_put(F.mc, "127.0.0.1:1", "/x", &meta, NULL, NULL, on_done, &r),
                     -EINVAL); /* no files */
    assert_int_equal(
        tide_ckpt_mirror_fetch(F.mc, "127.0.0.1:1", "../x", 0, -1, -1, NULL, F.into, on_done, &r),
        -EINVAL);
    assert_int_equal(r.done, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(put_then_fetch_bitwise, setup, teardown),
        cmocka_unit_test_setup_teardown(corrupted_chunk_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(truncated_stream_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(peer_not_listening, setup, teardown),
        cmocka_unit_test_setup_teardown(oversize_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(no_room_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(ended_job_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(stale_generation_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(fetch_missing_not_found, setup, teardown),
        cmocka_unit_test_setup_teardown(token_checked, setup, teardown),
        cmocka_unit_test_setup_teardown(prune_keeps_newest, setup, teardown),
        cmocka_unit_test_setup_teardown(client_freed_mid_put, setup, teardown),
        cmocka_unit_test_setup_teardown(put_reads_as_account, setup, teardown),
        cmocka_unit_test_setup_teardown(put_refuses_a_fifo, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_arguments, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
