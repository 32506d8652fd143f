/* The in-process tidectl runner of the command tests (cli_run.h): argv from varargs, output into memory
 * streams, the fake transport checked empty after each command. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli.h"
#include "cli_run.h"
#include "fake_rpc.h"

static int64_t fixed_now(void)
{
    return CLI_RUN_NOW_MS;
}

result_t cli_vrun(const cli_env_t *env, const char *first, va_list ap)
{
    char *argv[64];
    int argc = 0;
    result_t r;
    size_t err_len;
    FILE *out, *err;
    tide_cli_t cli;

    argv[argc++] = "tidectl";
    for (const char *a = first; a && argc < 63; a = va_arg(ap, const char *))
        argv[argc++] = (char *)a;
    argv[argc] = NULL;

    memset(&r, 0, sizeof(r));
    out = open_memstream(&r.out, &r.out_len);
    err = open_memstream(&r.err, &err_len);
    memset(&cli, 0, sizeof(cli));
    cli.out = out;
    cli.err = err;
    cli.env_scheduler = env->scheduler;
    cli.env_token = env->token;
    cli.env_insecure = env->insecure;
    cli.cwd = env->cwd ? env->cwd : "/home/u";
    cli.now_ms = env->now_ms ? env->now_ms : fixed_now;
    cli.err_tty = env->err_tty;
    cli.poll_interval_ms = 1;
    r.rc = tide_cli_main(&cli, argc, argv);
    tide_cli_cleanup(&cli);
    fclose(out);
    fclose(err);
    /* Every connection is gone and its loop closed when a command returns. */
    assert_int_equal(fake_rpc_live_clients(), 0);
    return r;
}

void result_free(result_t *r)
{
    free(r->out);
    free(r->err);
}

void expect_str(const char *got, const char *want)
{
    if (strcmp(got, want) != 0)
        print_error("want:\n%s\ngot:\n%s\n", want, got);
    assert_string_equal(got, want);
}
