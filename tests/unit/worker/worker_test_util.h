/* Helpers shared by the worker's unit tests: throwaway directories, waiting for a condition with a
 * deadline (never a fixed sleep), and process checks. */
#ifndef TIDE_WORKER_TEST_UTIL_H
#define TIDE_WORKER_TEST_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct uv_loop_s;

/* A new empty directory under $TMPDIR or /tmp. Caller frees (and removes it with wt_rmrf). */
char *wt_tmpdir(void);
/* rm -rf path. */
void wt_rmrf(const char *path);
/* The whole file as a string, or NULL. Caller frees. */
char *wt_read_file(const char *path);
/* Creates path with content. */
void wt_write_file(const char *path, const char *content);

/* The test's scratch directory, one at a time: wt_scratch_begin makes $TMPDIR/tide-test-NAME-XXXXXX (or
 * under /tmp), wt_at gives paths in it that live until wt_scratch_end, which removes the tree. */
void wt_scratch_begin(const char *name);
const char *wt_scratch_root(void);
char *wt_at(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void wt_scratch_end(void);
/* mkdir -p path (0755). */
void wt_mkdirs(const char *path);
/* Creates path with len bytes of data. */
void wt_write_bytes(const char *path, const void *data, size_t len);

/* Runs loop until cond(arg) holds or timeout_ms passes; returns cond's last value. A private timer
 * keeps the loop waking up, so conditions set outside callbacks are seen too. */
bool wt_run_until(struct uv_loop_s *loop, bool (*cond)(void *), void *arg, int64_t timeout_ms);
/* Polls cond(arg) (no loop) every few ms until it holds or timeout_ms passes. */
bool wt_poll_until(bool (*cond)(void *), void *arg, int64_t timeout_ms);
/* Runs the loop until nothing is left on it, then closes it; returns uv_loop_close's result. */
int wt_loop_finish(struct uv_loop_s *loop);

/* No such process, or a zombie (dead, holds nothing; orphans here may not be reaped by pid 1). */
bool wt_proc_gone(pid_t pid);
/* cond helper for wt_poll_until: arg is a pid_t *. */
bool wt_cond_proc_gone(void *arg);
/* cond helper: arg is a const char *path that exists and is non-empty. */
bool wt_cond_file_nonempty(void *arg);

typedef struct wt_file_needle {
    const char *path;
    const char *needle;
} wt_file_needle_t;
/* cond helper: arg is a wt_file_needle_t; the file contains the needle. */
bool wt_cond_file_contains(void *arg);

#endif
