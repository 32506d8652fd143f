/* tide-scheduler: parses flags (flags.c), starts the daemon on a libuv loop and runs until SIGTERM/SIGINT.
 * A bad flag is one line on stderr and exit status 2; nothing starts. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "daemon.h"
#include "flags.h"
#include "log.h"
#include "token.h"
#include "xmalloc.h"

static void on_signal(uv_signal_t *h, int signum)
{
    tide_daemon_t *d = h->data;
    tide_info("signal %d: shutting down (running ranks keep running; a restart adopts them)", signum);
    tide_daemon_stop(d);
    uv_close((uv_handle_t *)h, NULL);
}

int main(int argc, char **argv)
{
    tide_daemon_config_t cfg = {.listen = "127.0.0.1:7070"};
    tide_log_level_t level = TIDE_LOG_INFO;
    char *default_dir = tide_default_data_dir();
    uv_loop_t loop;
    uv_signal_t sigterm, sigint;
    tide_daemon_t *d = NULL;
    tide_error_t err;
    int rc;

    tide_core_config_default(&cfg.core);
    cfg.data_dir = default_dir;
    rc = tide_sched_parse_args(argc, argv, &cfg, &level, stdout, &err);
    if (rc != 0) {
        if (rc < 0)
            fprintf(stderr, "tide-scheduler: %s\n", err.text);
        rc = rc < 0 ? 2 : 0;
        goto out;
    }
    tide_log_init("tide-scheduler", level);
    signal(SIGPIPE, SIG_IGN);
    uv_loop_init(&loop);
    rc = tide_daemon_start(&loop, &cfg, &d, &err);
    if (rc < 0) {
        tide_err("cannot start: %s", err.text);
        tide_daemon_free(d);
        uv_loop_close(&loop);
        rc = 1;
        goto out;
    }
    uv_signal_init(&loop, &sigterm);
    uv_signal_init(&loop, &sigint);
    sigterm.data = sigint.data = d;
    uv_signal_start(&sigterm, on_signal, SIGTERM);
    uv_signal_start(&sigint, on_signal, SIGINT);
    uv_run(&loop, UV_RUN_DEFAULT);
    rc = d->exit_code;
    if (!uv_is_closing((uv_handle_t *)&sigterm))
        uv_close((uv_handle_t *)&sigterm, NULL);
    if (!uv_is_closing((uv_handle_t *)&sigint))
        uv_close((uv_handle_t *)&sigint, NULL);
    tide_daemon_free(d);
    if (uv_loop_close(&loop) != 0)
        tide_warn("the loop still had handles at exit");
    tide_info("stopped");
out:
    free(default_dir);
    return rc;
}
