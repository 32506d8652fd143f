/* The store tests' fixture and awaiting helpers (store_test_util.h). Invariant: a helper that
 * starts an operation returns only once its callback has fired from the loop, never from inside the
 * call, and a fixture ends with its loop closed cleanly and its throwaway directory gone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "store_test_util.h"

/* --- fixture --- */

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;

    if (!d)
        return;
    while ((e = readdir(d)) != NULL) {
        char p[512];
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

st_fx_t *st_fx_new(const char *url)
{
    st_fx_t *fx = calloc(1, sizeof(*fx));
    const char *tmp = getenv("TMPDIR");
    st_range_res_t r;

    assert_non_null(fx);
    assert_int_equal(uv_loop_init(&fx->loop), 0);
    if (strcmp(url, "sqlite:") == 0) {
        snprintf(fx->dir, sizeof(fx->dir), "%s/tide-store-XXXXXX",
                 tmp && strlen(tmp) < 32 ? tmp : "/tmp");
        assert_non_null(mkdtemp(fx->dir));
        snprintf(fx->path, sizeof(fx->path), "%s/state.db", fx->dir);
        snprintf(fx->url, sizeof(fx->url), "sqlite:%s", fx->path);
    } else {
        snprintf(fx->url, sizeof(fx->url), "%s", url);
    }
    st_open(fx);
    st_range_wait(fx, "", &r);
    assert_int_equal(r.n, 0);
    fx->base = r.rev;
    st_range_res_free(&r);
    return fx;
}

void st_fx_free(st_fx_t *fx)
{
    if (!fx)
        return;
    st_close(fx);
    assert_int_equal(uv_loop_close(&fx->loop), 0);
    if (fx->dir[0])
        remove_dir(fx->dir);
    free(fx);
}

void st_open(st_fx_t *fx)
{
    tide_error_t err = {{0}};
    int rc = tide_store_open(&fx->loop, fx->url, &fx->s, &err);

    if (rc != 0)
        fail_msg("open %s: %d %s", fx->url, rc, err.text);
}

void st_close(st_fx_t *fx)
{
    tide_store_close(fx->s);
    fx->s = NULL;
    uv_run(&fx->loop, UV_RUN_DEFAULT);
}

/* --- awaiting callbacks --- */

/* Marks a completion done and copies its text: once only, and the text is never NULL. */
static void record(bool *done, char *text, size_t len, const char *errtext)
{
    assert_false(*done);
    assert_non_null(errtext);
    *done = true;
    snprintf(text, len, "%s", errtext);
}

void st_on_commit(int status, int64_t revision, const char *errtext, void *ud)
{
    st_commit_res_t *r = ud;

    record(&r->done, r->text, sizeof(r->text), errtext);
    r->status = status;
    r->rev = revision;
}

void st_on_range(int status, const tide_store_kv_t *kvs, size_t n, int64_t revision,
                 const char *errtext, void *ud)
{
    st_range_res_t *r = ud;

    record(&r->done, r->text, sizeof(r->text), errtext);
    r->status = status;
    r->rev = revision;
    r->n = n;
    r->kvs = calloc(n ? n : 1, sizeof(*r->kvs));
    for (size_t i = 0; i < n; i++) {
        assert_non_null(kvs[i].key);
        assert_non_null(kvs[i].value);
        r->kvs[i].key = strdup(kvs[i].key);
        r->kvs[i].value = malloc(kvs[i].value_len ? kvs[i].value_len : 1);
        memcpy(r->kvs[i].value, kvs[i].value, kvs[i].value_len);
        r->kvs[i].len = kvs[i].value_len;
        r->kvs[i].create_rev = kvs[i].create_rev;
        r->kvs[i].mod_rev = kvs[i].mod_rev;
    }
}

void st_range_res_free(st_range_res_t *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->kvs[i].key);
        free(r->kvs[i].value);
    }
    free(r->kvs);
    memset(r, 0, sizeof(*r));
}

void st_wait_for(st_fx_t *fx, const bool *flag)
{
    uint64_t deadline = uv_hrtime() + ST_DEADLINE_NS;

    while (!*flag) {
        assert_true(uv_hrtime() < deadline);
        uv_run(&fx->loop, UV_RUN_ONCE);
    }
}

void st_commit_wait(st_fx_t *fx, tide_store_batch_t *b, st_commit_res_t *res)
{
    memset(res, 0, sizeof(*res));
    assert_int_equal(tide_store_commit(fx->s, b, st_on_commit, res), 0);
    assert_false(res->done); /* never inline */
    st_wait_for(fx, &res->done);
}

void st_range_wait(st_fx_t *fx, const char *prefix, st_range_res_t *res)
{
    memset(res, 0, sizeof(*res));
    assert_int_equal(tide_store_range(fx->s, prefix, st_on_range, res), 0);
    assert_false(res->done);
    st_wait_for(fx, &res->done);
    if (res->status != 0)
        fail_msg("range \"%s\": %d %s", prefix, res->status, res->text);
}

int64_t st_put1(st_fx_t *fx, const char *key, const char *value)
{
    tide_store_batch_t *b = tide_store_batch_new();
    st_commit_res_t res;

    tide_store_batch_put(b, key, value, strlen(value));
    st_commit_wait(fx, b, &res);
    if (res.status != 0)
        fail_msg("put %s: %d %s", key, res.status, res.text);
    return res.rev;
}

/* --- looking at results --- */

const st_kv_t *st_find(const st_range_res_t *r, const char *key)
{
    for (size_t i = 0; i < r->n; i++) {
        if (strcmp(r->kvs[i].key, key) == 0)
            return &r->kvs[i];
    }
    return NULL;
}

void st_assert_value(const st_range_res_t *r, const char *key, const char *value)
{
    const st_kv_t *kv = st_find(r, key);

    if (!kv)
        fail_msg("key \"%s\" missing", key);
    assert_int_equal(kv->len, strlen(value));
    assert_memory_equal(kv->value, value, kv->len);
}

void st_fill(uint8_t *p, size_t len, uint32_t seed)
{
    for (size_t i = 0; i < len; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (uint8_t)(seed >> 16);
    }
}
