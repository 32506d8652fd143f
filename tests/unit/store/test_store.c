/* The store tests only one backend can run: sqlite: (persistence across a reopen, WAL mode, the
 * one-process lock, bad paths, files that are not a tide store, a newer schema) and the mem: fake's
 * failure injection. What every backend shares is store_conformance.c (mem:, sqlite:, etcd). Each
 * test ends with uv_loop_close() == 0 and its throwaway directory removed. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>
#include <uv.h>

#include "store.h"
#include "store_test_util.h"

static int setup_sqlite(void **state)
{
    *state = st_fx_new("sqlite:");
    return 0;
}

static int setup_mem(void **state)
{
    *state = st_fx_new("mem:");
    return 0;
}

static int teardown(void **state)
{
    st_fx_free(*state);
    return 0;
}

/* --- sqlite only --- */

static void test_sqlite_persistence(void **state)
{
    st_fx_t *fx = *state;
    tide_store_batch_t *b = tide_store_batch_new();
    st_commit_res_t c;
    st_range_res_t r;

    st_put1(fx, "jobs/1", "one");
    tide_store_batch_put(b, "jobs/2", "two\0two", 7);
    tide_store_batch_put(b, "jobs/1", "uno", 3);
    st_commit_wait(fx, b, &c);
    assert_int_equal(c.rev, 2);
    st_close(fx);

    st_open(fx);
    st_range_wait(fx, "jobs/", &r);
    assert_int_equal(r.rev, 2);
    assert_int_equal(r.n, 2);
    st_assert_value(&r, "jobs/1", "uno");
    assert_int_equal(st_find(&r, "jobs/1")->create_rev, 1);
    assert_int_equal(st_find(&r, "jobs/1")->mod_rev, 2);
    assert_int_equal(st_find(&r, "jobs/2")->len, 7);
    assert_memory_equal(st_find(&r, "jobs/2")->value, "two\0two", 7);
    st_range_res_free(&r);
    assert_int_equal(st_put1(fx, "jobs/3", "three"), 3); /* the revision carries on */

    /* The file is in WAL mode (persistent in the file). */
    st_close(fx);
    sqlite3 *db;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open(fx->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    sqlite3_close(db);
    st_open(fx);
}

static void test_sqlite_busy(void **state)
{
    st_fx_t *fx = *state;
    tide_store_t *second = (tide_store_t *)0x1;
    tide_error_t err = {{0}};
    char want[64];

    assert_int_equal(tide_store_open(&fx->loop, fx->url, &second, &err), -EBUSY);
    assert_null(second);
    assert_non_null(strstr(err.text, fx->path));
    assert_non_null(strstr(err.text, "in use"));
    snprintf(want, sizeof(want), "(pid %ld)", (long)getpid());
    assert_non_null(strstr(err.text, want));

    /* Free again once the holder closes. */
    st_close(fx);
    st_open(fx);
}

static void test_sqlite_busy_other_process(void **state)
{
    st_fx_t *fx = *state;
    int ready[2], release[2];
    tide_error_t err = {{0}};
    tide_store_t *s = NULL;
    char want[256], byte;
    pid_t pid;
    int wstatus;

    st_close(fx);
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(release), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) { /* child: hold the store until the parent says so */
        uv_loop_t loop;
        int code = 0;
        close(ready[0]);
        close(release[1]);
        if (uv_loop_init(&loop) != 0 || tide_store_open(&loop, fx->url, &s, NULL) != 0)
            code = 1;
        if (write(ready[1], "r", 1) != 1)
            code = 2;
        if (read(release[0], &byte, 1) < 0)
            code = 3;
        tide_store_close(s);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        _exit(code);
    }
    close(ready[1]);
    close(release[0]);
    assert_int_equal(read(ready[0], &byte, 1), 1);

    assert_int_equal(tide_store_open(&fx->loop, fx->url, &s, &err), -EBUSY);
    snprintf(want, sizeof(want), "%s is in use by another process (pid %ld)", fx->path, (long)pid);
    assert_string_equal(err.text, want);

    close(release[1]);
    assert_int_equal(waitpid(pid, &wstatus, 0), pid);
    assert_true(WIFEXITED(wstatus));
    assert_int_equal(WEXITSTATUS(wstatus), 0);
    close(ready[0]);
    st_open(fx); /* the lock died with its holder */
}

static void test_sqlite_bad_path(void **state)
{
    st_fx_t *fx = *state;
    tide_store_t *s = NULL;
    tide_error_t err = {{0}};
    char url[256], path[200];
    int rc;

    snprintf(path, sizeof(path), "%s/no/such/dir/state.db", fx->dir);
    snprintf(url, sizeof(url), "sqlite:%s", path);
    rc = tide_store_open(&fx->loop, url, &s, &err);
    assert_true(rc == -EIO || rc == -EINVAL);
    assert_null(s);
    assert_non_null(strstr(err.text, path));

    assert_int_equal(tide_store_open(&fx->loop, "sqlite:", &s, &err), -EINVAL);
    assert_non_null(strstr(err.text, "path"));

    /* A directory is not a database file. */
    snprintf(url, sizeof(url), "sqlite:%s", fx->dir);
    rc = tide_store_open(&fx->loop, url, &s, &err);
    assert_true(rc == -EIO || rc == -EINVAL);
    assert_non_null(strstr(err.text, fx->dir));
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_sqlite_not_a_store(void **state)
{
    st_fx_t *fx = *state;
    tide_store_t *s = NULL;
    tide_error_t err = {{0}};
    char url[256], path[200];
    sqlite3 *db;

    snprintf(path, sizeof(path), "%s/garbage.db", fx->dir);
    write_file(path,
               "this is not a SQLite file, it is long enough to have a header ............\n");
    snprintf(url, sizeof(url), "sqlite:%s", path);
    assert_int_equal(tide_store_open(&fx->loop, url, &s, &err), -EIO);
    assert_non_null(strstr(err.text, path));

    snprintf(path, sizeof(path), "%s/other.db", fx->dir);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "CREATE TABLE users(name TEXT)", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    snprintf(url, sizeof(url), "sqlite:%s", path);
    assert_int_equal(tide_store_open(&fx->loop, url, &s, &err), -EIO);
    assert_non_null(strstr(err.text, "not a tide store"));
}

static void test_sqlite_newer_schema(void **state)
{
    st_fx_t *fx = *state;
    tide_store_t *s = NULL;
    tide_error_t err = {{0}};
    sqlite3 *db;

    st_put1(fx, "jobs/1", "x");
    st_close(fx);
    assert_int_equal(sqlite3_open(fx->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "UPDATE meta SET value = 99 WHERE name = 'schema_version'",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);

    assert_int_equal(tide_store_open(&fx->loop, fx->url, &s, &err), -EIO);
    assert_null(s);
    assert_non_null(strstr(err.text, fx->path));
    assert_non_null(strstr(err.text, "schema version 99"));

    assert_int_equal(sqlite3_open(fx->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "UPDATE meta SET value = 1 WHERE name = 'schema_version'",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    st_open(fx);
}

static void test_sqlite_no_injection(void **state)
{
    st_fx_t *fx = *state;

    assert_int_equal(tide_store_mem_inject_failure(fx->s, -EIO, 1), -EINVAL);
}

/* --- mem only --- */

static void test_mem_inject_failure(void **state)
{
    st_fx_t *fx = *state;
    tide_store_batch_t *b;
    st_commit_res_t c;
    st_range_res_t r;

    st_put1(fx, "a", "1");
    assert_int_equal(tide_store_mem_inject_failure(fx->s, -EIO, 2), 0);
    for (int i = 0; i < 2; i++) {
        b = tide_store_batch_new();
        tide_store_batch_put(b, "a", "2", 1);
        tide_store_batch_put(b, "b", "2", 1);
        st_commit_wait(fx, b, &c);
        assert_int_equal(c.status, -EIO);
        assert_int_equal(c.rev, 1);
        assert_true(c.text[0] != '\0');
    }
    st_range_wait(fx, "", &r); /* reads are unaffected; nothing was written */
    assert_int_equal(r.n, 1);
    st_assert_value(&r, "a", "1");
    st_range_res_free(&r);

    assert_int_equal(st_put1(fx, "b", "3"), 2); /* the third commit goes through */
    assert_int_equal(tide_store_mem_inject_failure(fx->s, 1, 1), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sqlite_persistence, setup_sqlite, teardown),
        cmocka_unit_test_setup_teardown(test_sqlite_busy, setup_sqlite, teardown),
        cmocka_unit_test_setup_teardown(test_sqlite_busy_other_process, setup_sqlite, teardown),
        cmocka_unit_test_setup_teardown(test_sqlite_bad_path, setup_sqlite, teardown),
        cmocka_unit_test_setup_teardown(test_sqlite_not_a_store, setup_sqlite, teardown),
        cmocka_unit_test_setup_teardown(test_sqlite_newer_schema, setup_sqlite, teardown),
        cmocka_unit_test_setup_teardown(test_sqlite_no_injection, setup_sqlite, teardown),
        cmocka_unit_test_setup_teardown(test_mem_inject_failure, setup_mem, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
