/* Shared by the tidectl command tests: runs "tidectl ARGS..." through tide_cli_main in process (against the
 * fake transport, fake_rpc.h) and captures what it prints; checks that no connection outlives the command. */
#ifndef TIDE_TEST_CLI_RUN_H
#define TIDE_TEST_CLI_RUN_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct result {
    int rc;
    char *out, *err;
    size_t out_len;
} result_t;

/* What the command sees of its environment (NULL: unset; cwd NULL: "/home/u"; now_ms NULL: a fixed clock). */
typedef struct cli_env {
    const char *scheduler, *token, *insecure, *cwd;
    int64_t (*now_ms)(void);
    bool err_tty;
} cli_env_t;

#define CLI_RUN_NOW_MS 1714564800000LL /* 2024-05-01 12:00:00 UTC: the fixed clock */

/* Runs tidectl with the NULL-terminated arguments in ap. Caller frees with result_free. */
result_t cli_vrun(const cli_env_t *env, const char *first, va_list ap);
void result_free(result_t *r);
/* assert_string_equal, printing both texts whole when they differ. */
void expect_str(const char *got, const char *want);

#endif
