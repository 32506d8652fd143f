/* "sqlite:PATH": the default store, one SQLite file in WAL mode with synchronous=FULL, held by one
 * process at a time through an flock on PATH.lock. Invariants: each batch is one transaction
 * (compares checked, ops applied, the revision bumped once, or nothing at all); meta.revision
 * is the revision of the last batch that changed something, and the in-memory copy equals it
 * between requests. The SQLite work runs synchronously on the loop thread, from the completion
 * queue's idle handle (docs/store.md). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "store_private.h"
#include "xmalloc.h"

/* Bump when the tables change: a newer store is refused, an older one migrated at open. */
#define SCHEMA_VERSION 1
/* How long a write waits for an outside reader's checkpoint lock (an operator's sqlite3 shell). */
#define BUSY_TIMEOUT_MS 2000

typedef struct sql {
    tide__store_queue_t *q;
    sqlite3 *db;
    char *path;
    int lock_fd;
    int64_t revision;
    sqlite3_stmt *begin, *commit, *rollback;
    sqlite3_stmt *get_mod_rev, *put, *del, *set_rev;
    sqlite3_stmt *range_all, *range_from, *range_between;
} sql_t;

static const char *const schema_sql =
    "CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS kv(key TEXT PRIMARY KEY, value BLOB NOT NULL,"
    " create_rev INTEGER NOT NULL, mod_rev INTEGER NOT NULL) WITHOUT ROWID;"
    "INSERT OR IGNORE INTO meta(name, value) VALUES('schema_version', 1), ('revision', 0);";

/* Steps a statement that returns no row we need, then resets it. Returns the sqlite result code. */
static int step_reset(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);

    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc == SQLITE_ROW ? SQLITE_DONE : rc;
}

/* Runs a one-row, one-integer query; returns 0, 1 when there is no row, or -1 (err filled). */
static int query_int(sql_t *s, const char *sql, int64_t *out, tide_error_t *err)
{
    sqlite3_stmt *st = NULL;
    int rc;

    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
        goto error;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *out = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
        return 0;
    }
    if (rc != SQLITE_DONE)
        goto error;
    sqlite3_finalize(st);
    return 1;
error:
    tide_errprintf(err, "%s: %s", s->path, sqlite3_errmsg(s->db));
    sqlite3_finalize(st);
    return -1;
}

static int exec_sql(sql_t *s, const char *sql, tide_error_t *err)
{
    if (sqlite3_exec(s->db, sql, NULL, NULL, NULL) != SQLITE_OK) {
        tide_errprintf(err, "%s: %s", s->path, sqlite3_errmsg(s->db));
        return -1;
    }
    return 0;
}

/* Switches to WAL and checks that it took (it cannot on some file systems). */
static int set_wal(sql_t *s, tide_error_t *err)
{
    sqlite3_stmt *st = NULL;
    int rc = -1;

    if (sqlite3_prepare_v2(s->db, "PRAGMA journal_mode = WAL", -1, &st, NULL) != SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW) {
        tide_errprintf(err, "%s: %s", s->path, sqlite3_errmsg(s->db));
        goto done;
    }
    const char *mode = (const char *)sqlite3_column_text(st, 0);
    if (!mode || strcmp(mode, "wal") != 0) {
        tide_errprintf(err, "%s: cannot use the WAL journal (journal_mode is %s)", s->path,
                       mode ? mode : "unknown");
        goto done;
    }
    rc = 0;
done:
    sqlite3_finalize(st);
    return rc;
}

/* Takes the exclusive advisory lock on PATH.lock and writes our pid into it. */
static int take_lock(sql_t *s, tide_error_t *err)
{
    char *lock_path = tide_xasprintf("%s.lock", s->path);
    char pidbuf[32];
    int rc = 0;
    ssize_t n;

    s->lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (s->lock_fd < 0) {
        tide_errprintf(err, "cannot open the lock file %s: %s", lock_path, strerror(errno));
        rc = -EIO;
        goto done;
    }
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB) < 0) {
        if (errno != EWOULDBLOCK) {
            tide_errprintf(err, "cannot lock %s: %s", lock_path, strerror(errno));
            rc = -EIO;
            goto done;
        }
        n = pread(s->lock_fd, pidbuf, sizeof(pidbuf) - 1, 0);
        pidbuf[n > 0 ? n : 0] = '\0';
        long pid = strtol(pidbuf, NULL, 10);
        if (pid > 0)
            tide_errprintf(err, "%s is in use by another process (pid %ld)", s->path, pid);
        else
            tide_errprintf(err, "%s is in use by another process", s->path);
        rc = -EBUSY;
        goto done;
    }
    snprintf(pidbuf, sizeof(pidbuf), "%ld\n", (long)getpid());
    if (ftruncate(s->lock_fd, 0) < 0 || pwrite(s->lock_fd, pidbuf, strlen(pidbuf), 0) < 0) {
        tide_errprintf(err, "cannot write %s: %s", lock_path, strerror(errno));
        rc = -EIO;
    }
done:
    if (rc < 0 && s->lock_fd >= 0) {
        close(s->lock_fd);
        s->lock_fd = -1;
    }
    free(lock_path);
    return rc;
}

/* Makes the database file's directory entry durable (SQLite syncs it for the WAL, not the main
 * file). */
static void sync_dir(const char *path)
{
    char *copy = tide_xstrdup(path);
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(copy);
}

/* Creates the tables in a new file, checks the version of an existing one. */
static int check_schema(sql_t *s, tide_error_t *err)
{
    int64_t have_meta = 0, other_tables = 0, version = 0;

    if (exec_sql(s, "BEGIN IMMEDIATE", err) < 0)
        return -1;
    if (query_int(s, "SELECT count(*) FROM sqlite_schema WHERE type='table' AND name='meta'",
                  &have_meta, err) < 0 ||
        query_int(
            s,
            "SELECT count(*) FROM sqlite_schema WHERE type='table' AND name NOT IN ('meta','kv')",
            &other_tables, err) < 0)
        goto error;
    if (have_meta) {
        int rc = query_int(s, "SELECT value FROM meta WHERE name='schema_version'", &version, err);
        if (rc < 0)
            goto error;
        if (rc > 0 || version < 1) {
            tide_errprintf(err, "%s is not a tide store (no schema version in its meta table)",
                           s->path);
            goto error;
        }
        if (version > SCHEMA_VERSION) {
            tide_errprintf(err,
                           "%s has store schema version %" PRId64
                           ", newer than this tide understands "
                           "(%d); run a newer tide",
                           s->path, version, SCHEMA_VERSION);
            goto error;
        }
    } else if (other_tables) {
        tide_errprintf(err, "%s is a SQLite database but not a tide store", s->path);
        goto error;
    }
    if (exec_sql(s, schema_sql, err) < 0 || exec_sql(s, "COMMIT", err) < 0)
        goto error;
    return 0;
error:
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return -1;
}

static int prepare_all(sql_t *s, tide_error_t *err)
{
    static const struct {
        size_t off;
        const char *sql;
    } stmts[] = {
        {offsetof(sql_t, begin), "BEGIN IMMEDIATE"},
        {offsetof(sql_t, commit), "COMMIT"},
        {offsetof(sql_t, rollback), "ROLLBACK"},
        {offsetof(sql_t, get_mod_rev), "SELECT mod_rev FROM kv WHERE key = ?1"},
        {offsetof(sql_t, put),
         "INSERT INTO kv(key, value, create_rev, mod_rev) VALUES(?1, ?2, ?3, ?3) "
         "ON CONFLICT(key) DO UPDATE SET value = excluded.value, "
         "mod_rev = excluded.mod_rev"},
        {offsetof(sql_t, del), "DELETE FROM kv WHERE key = ?1"},
        {offsetof(sql_t, set_rev), "UPDATE meta SET value = ?1 WHERE name = 'revision'"},
        {offsetof(sql_t, range_all), "SELECT key, value, create_rev, mod_rev FROM kv ORDER BY key"},
        {offsetof(sql_t, range_from),
         "SELECT key, value, create_rev, mod_rev FROM kv WHERE key >= ?1 ORDER BY key"},
        {offsetof(sql_t, range_between), "SELECT key, value, create_rev, mod_rev FROM kv WHERE key "
                                         ">= ?1 AND key < ?2 ORDER BY key"},
    };

    for (size_t i = 0; i < sizeof(stmts) / sizeof(stmts[0]); i++) {
        sqlite3_stmt **st = (sqlite3_stmt **)((char *)s + stmts[i].off);
        if (sqlite3_prepare_v3(s->db, stmts[i].sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL) !=
            SQLITE_OK) {
            tide_errprintf(err, "%s: preparing \"%s\": %s", s->path, stmts[i].sql,
                           sqlite3_errmsg(s->db));
            return -1;
        }
    }
    return 0;
}

static void sql_free(sql_t *s)
{
    sqlite3_stmt *all[] = {s->begin, s->commit,  s->rollback,  s->get_mod_rev, s->put,
                           s->del,   s->set_rev, s->range_all, s->range_from,  s->range_between};

    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        sqlite3_finalize(all[i]);
    sqlite3_close(s->db);
    if (s->lock_fd >= 0)
        close(s->lock_fd); /* releases the flock */
    free(s->path);
    free(s);
}

/* --- the work, run from the completion queue --- */

static int fail_io(sql_t *s, const char *what, tide_error_t *err)
{
    tide_errprintf(err, "%s: %s: %s", s->path, what, sqlite3_errmsg(s->db));
    return -EIO;
}

static int exec_commit(void *impl, const tide_store_batch_t *b, int64_t *revision,
                       tide_error_t *err)
{
    sql_t *s = impl;
    int64_t rev = s->revision + 1;
    bool changes = false;
    int rc = 0;

    *revision = s->revision;
    if (b->nops == 0 && b->ncmps == 0)
        return 0;
    if (step_reset(s->begin) != SQLITE_DONE)
        return fail_io(s, "BEGIN", err);

    for (size_t i = 0; i < b->ncmps; i++) {
        int64_t cur = 0;
        int src;

        sqlite3_bind_text(s->get_mod_rev, 1, b->cmps[i].key, -1, SQLITE_STATIC);
        src = sqlite3_step(s->get_mod_rev);
        if (src == SQLITE_ROW)
            cur = sqlite3_column_int64(s->get_mod_rev, 0);
        sqlite3_reset(s->get_mod_rev);
        sqlite3_clear_bindings(s->get_mod_rev);
        if (src != SQLITE_ROW && src != SQLITE_DONE) {
            rc = fail_io(s, "reading a compare's key", err);
            goto rollback;
        }
        if (cur != b->cmps[i].mod_rev) {
            tide_errprintf(err,
                           "compare failed: key \"%s\" has mod_rev %" PRId64 ", expected %" PRId64,
                           b->cmps[i].key, cur, b->cmps[i].mod_rev);
            rc = -ECANCELED;
            goto rollback;
        }
    }

    for (size_t i = 0; i < b->nops; i++) {
        const tide__store_op_t *op = &b->ops[i];
        sqlite3_stmt *st = op->kind == TIDE__STORE_PUT ? s->put : s->del;

        sqlite3_bind_text(st, 1, op->key, (int)op->key_len, SQLITE_STATIC);
        if (op->kind == TIDE__STORE_PUT) {
            /* value is never NULL, so an empty value binds as an empty blob, not SQL NULL */
            sqlite3_bind_blob64(st, 2, op->value, op->value_len, SQLITE_STATIC);
            sqlite3_bind_int64(st, 3, rev);
        }
        if (step_reset(st) != SQLITE_DONE) {
            rc = fail_io(s, op->kind == TIDE__STORE_PUT ? "writing a key" : "deleting a key", err);
            goto rollback;
        }
        changes = changes || op->kind == TIDE__STORE_PUT || sqlite3_changes(s->db) > 0;
    }
    if (!changes)
        goto rollback; /* like etcd: a batch that changes nothing does not bump the revision */

    sqlite3_bind_int64(s->set_rev, 1, rev);
    if (step_reset(s->set_rev) != SQLITE_DONE) {
        rc = fail_io(s, "writing the revision", err);
        goto rollback;
    }
    if (step_reset(s->commit) != SQLITE_DONE) {
        rc = fail_io(s, "COMMIT", err);
        goto rollback;
    }
    s->revision = rev;
    *revision = rev;
    return 0;
rollback:
    if (sqlite3_get_autocommit(s->db) == 0)
        step_reset(s->rollback);
    return rc;
}

/* The smallest string greater than every string with this prefix, or false when there is none. */
static bool prefix_end(const char *prefix, size_t len, char *out, size_t *out_len)
{
    while (len > 0 && (uint8_t)prefix[len - 1] == 0xff)
        len--;
    if (len == 0)
        return false;
    memcpy(out, prefix, len);
    out[len - 1] = (char)((uint8_t)out[len - 1] + 1);
    *out_len = len;
    return true;
}

static int exec_range(void *impl, const char *prefix, tide__store_kvs_t *out, int64_t *revision,
                      tide_error_t *err)
{
    sql_t *s = impl;
    size_t plen = strlen(prefix), end_len = 0;
    char *end = tide_xmalloc(plen + 1);
    sqlite3_stmt *st;
    int rc = 0, src;

    *revision = s->revision;
    if (plen == 0) {
        st = s->range_all;
    } else if (prefix_end(prefix, plen, end, &end_len)) {
        st = s->range_between;
        sqlite3_bind_text(st, 1, prefix, (int)plen, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, end, (int)end_len, SQLITE_STATIC);
    } else {
        st = s->range_from;
        sqlite3_bind_text(st, 1, prefix, (int)plen, SQLITE_STATIC);
    }
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        const char *key = (const char *)sqlite3_column_text(st, 0);
        size_t key_len = (size_t)sqlite3_column_bytes(st, 0);
        const void *value = sqlite3_column_blob(st, 1);
        size_t value_len = (size_t)sqlite3_column_bytes(st, 1);

        tide__store_kvs_add(out, key, key_len, value, value_len, sqlite3_column_int64(st, 2),
                            sqlite3_column_int64(st, 3));
    }
    if (src != SQLITE_DONE)
        rc = fail_io(s, "reading a range", err);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    free(end);
    return rc;
}

static int64_t exec_revision(void *impl)
{
    return ((const sql_t *)impl)->revision;
}

static const tide__store_exec_t sql_exec = {
    .commit = exec_commit,
    .range = exec_range,
    .revision = exec_revision,
};

/* --- ops --- */

static int sql_open(struct uv_loop_s *loop, const char *location, void **impl, tide_error_t *err)
{
    struct stat st;
    sql_t *s;
    int rc;

    if (location[0] == '\0') {
        tide_errprintf(err, "store URL \"sqlite:\" needs a path (sqlite:PATH)");
        return -EINVAL;
    }
    if (stat(location, &st) == 0 && S_ISDIR(st.st_mode)) {
        tide_errprintf(err, "%s is a directory, not a database file", location);
        return -EINVAL;
    }
    s = tide_xcalloc(1, sizeof(*s));
    s->lock_fd = -1;
    s->path = tide_xstrdup(location);

    rc = take_lock(s, err);
    if (rc < 0)
        goto error;
    rc = -EIO;
    if (sqlite3_open_v2(s->path, &s->db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK) {
        tide_errprintf(err, "cannot open %s: %s", s->path,
                       s->db ? sqlite3_errmsg(s->db) : "out of memory");
        goto error;
    }
    sqlite3_busy_timeout(s->db, BUSY_TIMEOUT_MS);
    /* The first statement reads the file: a file that is not a database fails here. */
    if (set_wal(s, err) < 0)
        goto error;
    if (exec_sql(s, "PRAGMA synchronous = FULL", err) < 0 || check_schema(s, err) < 0)
        goto error;
    sync_dir(s->path);
    if (query_int(s, "SELECT value FROM meta WHERE name = 'revision'", &s->revision, err) != 0) {
        tide_errprintf(err, "%s: the meta table has no revision", s->path);
        goto error;
    }
    if (prepare_all(s, err) < 0)
        goto error;
    rc = tide__store_queue_new(loop, &sql_exec, s, &s->q);
    if (rc < 0) {
        tide_errprintf(err, "%s: cannot set up the completion queue (%d)", s->path, rc);
        rc = -EIO;
        goto error;
    }
    *impl = s;
    return 0;
error:
    sql_free(s);
    return rc;
}

static void sql_close(void *impl)
{
    sql_t *s = impl;

    if (!s)
        return;
    tide__store_queue_close(s->q);
    sql_free(s);
}

static int sql_range(void *impl, const char *prefix, tide_store_range_cb cb, void *ud)
{
    tide__store_queue_range(((sql_t *)impl)->q, prefix, cb, ud);
    return 0;
}

static int sql_commit(void *impl, tide_store_batch_t *b, tide_store_commit_cb cb, void *ud)
{
    tide__store_queue_commit(((sql_t *)impl)->q, b, cb, ud, 0, NULL);
    return 0;
}

const tide_store_ops_t tide__store_sqlite_ops = {
    .scheme = "sqlite",
    .open = sql_open,
    .close = sql_close,
    .range = sql_range,
    .commit = sql_commit,
};
