/* Test helpers for the worker's unit tests (see worker_test_util.h). */
#include "worker_test_util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "datadir.h"

char *wt_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    char *t;

    if (asprintf(&t, "%s/tide-worker-test-XXXXXX", base && *base ? base : "/tmp") < 0)
        abort();
    if (!mkdtemp(t))
        abort();
    return t;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void wt_rmrf(const char *path)
{
    nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

char *wt_read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 0, n;

    if (!f)
        return NULL;
    do {
        if (cap - len < 4096) {
            cap = cap ? cap * 2 : 8192;
            buf = realloc(buf, cap + 1);
            if (!buf)
                abort();
        }
        n = fread(buf + len, 1, cap - len, f);
        len += n;
    } while (n > 0);
    fclose(f);
    buf[len] = '\0';
    return buf;
}

void wt_write_file(const char *path, const char *content)
{
    FILE *f = fopen(path, "wb");

    if (!f)
        abort();
    fputs(content, f);
    fclose(f);
}

static void on_tick(uv_timer_t *t)
{
    (void)t;
}

bool wt_run_until(uv_loop_t *loop, bool (*cond)(void *), void *arg, int64_t timeout_ms)
{
    uv_timer_t tick;
    uint64_t deadline = uv_hrtime() / 1000000 + (uint64_t)timeout_ms;
    bool ok;

    uv_timer_init(loop, &tick);
    uv_timer_start(&tick, on_tick, 5, 5);
    while (!(ok = cond(arg)) && uv_hrtime() / 1000000 < deadline)
        uv_run(loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&tick, NULL);
    uv_run(loop, UV_RUN_NOWAIT); /* let the close finish */
    return ok;
}

bool wt_poll_until(bool (*cond)(void *), void *arg, int64_t timeout_ms)
{
    struct timespec ts = {0, 5 * 1000 * 1000};
    int64_t waited = 0;

    while (!cond(arg)) {
        if (waited >= timeout_ms)
            return false;
        nanosleep(&ts, NULL);
        waited += 5;
    }
    return true;
}

int wt_loop_finish(uv_loop_t *loop)
{
    uv_run(loop, UV_RUN_DEFAULT);
    return uv_loop_close(loop);
}

bool wt_proc_gone(pid_t pid)
{
    char state = '?';

    if (tide_proc_stat(pid, NULL, NULL, &state) < 0)
        return true;
    return state == 'Z' || state == 'X';
}

bool wt_cond_proc_gone(void *arg)
{
    return wt_proc_gone(*(pid_t *)arg);
}

bool wt_cond_file_nonempty(void *arg)
{
    char *s = wt_read_file(arg);
    bool ok = s && s[0] && strchr(s, '\n');

    free(s);
    return ok;
}

bool wt_cond_file_contains(void *arg)
{
    wt_file_needle_t *fn = arg;
    char *s = wt_read_file(fn->path);
    bool ok = s && strstr(s, fn->needle);

    free(s);
    return ok;
}

static char scratch_root[512];
static char *scratch_paths[1024]; /* wt_at's strings */
static size_t n_scratch_paths;

void wt_scratch_begin(const char *name)
{
    const char *tmp = getenv("TMPDIR");

    snprintf(scratch_root, sizeof(scratch_root), "%s/tide-test-%s-XXXXXX",
             tmp && tmp[0] ? tmp : "/tmp", name);
    assert_non_null(mkdtemp(scratch_root));
}

const char *wt_scratch_root(void)
{
    return scratch_root;
}

char *wt_at(const char *fmt, ...)
{
    char rel[400], *out;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(rel, sizeof(rel), fmt, ap);
    va_end(ap);
    assert_true(n_scratch_paths < sizeof(scratch_paths) / sizeof(scratch_paths[0]));
    assert_true(asprintf(&out, "%s/%s", scratch_root, rel) > 0);
    scratch_paths[n_scratch_paths++] = out;
    return out;
}

void wt_scratch_end(void)
{
    wt_rmrf(scratch_root);
    for (size_t i = 0; i < n_scratch_paths; i++)
        free(scratch_paths[i]);
    n_scratch_paths = 0;
    scratch_root[0] = '\0';
}

void wt_mkdirs(const char *path)
{
    char p[600];

    snprintf(p, sizeof(p), "%s", path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        assert_true(mkdir(p, 0755) == 0 || errno == EEXIST);
        *s = '/';
    }
    assert_true(mkdir(p, 0755) == 0 || errno == EEXIST);
}

void wt_write_bytes(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");

    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}
