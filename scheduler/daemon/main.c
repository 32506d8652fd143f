/* tide-scheduler: parses flags, starts the daemon on a libuv loop and runs until SIGTERM/SIGINT. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "daemon.h"
#include "log.h"
#include "token.h"
#include "xmalloc.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tide-scheduler [--listen HOST:PORT] [--data-dir DIR] [--store URL] [--token-file FILE]\n"
            "                      [--log-level debug|info|warn|error] [--heartbeat-ms MS]\n"
            "                      [--reconnect-deadline-s S] [--stop-grace-s S] [--retention-s S]\n"
            "\n"
            "  --listen HOST:PORT     gRPC and HTTP (/healthz, /metrics) address (default 127.0.0.1:7070)\n"
            "  --data-dir DIR         state directory (default /var/lib/tide for root, else\n"
            "                         ~/.local/share/tide); holds state.db, token, scheduler.addr\n"
            "  --store URL            sqlite:PATH (default sqlite:DATA_DIR/state.db) or mem: (tests)\n"
            "  --token-file FILE      bearer token clients must send (default DATA_DIR/token, created\n"
            "                         with mode 0600 when missing)\n"
            "  --heartbeat-ms MS      worker heartbeat interval (default 500; SUSPECT after 2 missed,\n"
            "                         DEAD after 3)\n"
            "  --reconnect-deadline-s S  after a restart, how long workers have to re-register before\n"
            "                         their jobs fail (default 30)\n"
            "  --stop-grace-s S       SIGTERM to SIGKILL grace when stopping ranks (default 10)\n"
            "  --retention-s S        how long finished jobs are kept (default 604800 = 7 days)\n"
            "  --version              print the version\n");
}

static int parse_num(const char *flag, const char *s, int64_t min, int64_t max, int64_t *out)
{
    char *end = NULL;
    long long v;

    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno || !end || *end || end == s || v < min || v > max) {
        fprintf(stderr, "tide-scheduler: %s: \"%s\" is not a number from %lld to %lld\n", flag, s,
                (long long)min, (long long)max);
        return -EINVAL;
    }
    *out = v;
    return 0;
}

static void on_signal(uv_signal_t *h, int signum)
{
    tide_daemon_t *d = h->data;
    tide_info("signal %d: shutting down (running ranks keep running; a restart adopts them)", signum);
    tide_daemon_stop(d);
    uv_close((uv_handle_t *)h, NULL);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"data-dir", required_argument, NULL, 'd'},
        {"store", required_argument, NULL, 's'},
        {"token-file", required_argument, NULL, 't'},
        {"log-level", required_argument, NULL, 'L'},
        {"heartbeat-ms", required_argument, NULL, 'H'},
        {"reconnect-deadline-s", required_argument, NULL, 'R'},
        {"stop-grace-s", required_argument, NULL, 'G'},
        {"retention-s", required_argument, NULL, 'T'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    tide_daemon_config_t cfg = {.listen = "127.0.0.1:7070"};
    tide_log_level_t level = TIDE_LOG_INFO;
    char *default_dir = tide_default_data_dir();
    uv_loop_t loop;
    uv_signal_t sigterm, sigint;
    tide_daemon_t *d = NULL;
    tide_error_t err;
    int64_t v;
    int c, rc;

    tide_core_config_default(&cfg.core);
    cfg.data_dir = default_dir;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'l':
            cfg.listen = optarg;
            break;
        case 'd':
            cfg.data_dir = optarg;
            break;
        case 's':
            cfg.store_url = optarg;
            break;
        case 't':
            cfg.token_file = optarg;
            break;
        case 'L':
            if (tide_log_level_parse(optarg, &level) < 0) {
                fprintf(stderr, "tide-scheduler: --log-level: \"%s\" is not debug, info, warn or error\n",
                        optarg);
                goto usage;
            }
            break;
        case 'H':
            if (parse_num("--heartbeat-ms", optarg, 10, 60000, &v) < 0)
                goto usage;
            cfg.core.heartbeat_interval_ms = v;
            break;
        case 'R':
            if (parse_num("--reconnect-deadline-s", optarg, 1, 86400, &v) < 0)
                goto usage;
            cfg.core.reconnect_deadline_ms = v * 1000;
            break;
        case 'G':
            if (parse_num("--stop-grace-s", optarg, 0, 3600, &v) < 0)
                goto usage;
            cfg.core.stop_grace_ms = (uint32_t)(v * 1000);
            break;
        case 'T':
            if (parse_num("--retention-s", optarg, 0, 10LL * 365 * 86400, &v) < 0)
                goto usage;
            cfg.core.retention_ms = v * 1000;
            break;
        case 'h':
            usage(stdout);
            rc = 0;
            goto out;
        case 'V':
            printf("tide-scheduler %s\n", TIDE_VERSION);
            rc = 0;
            goto out;
        default:
            fprintf(stderr, "Try 'tide-scheduler --help'.\n");
            goto usage;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tide-scheduler: unexpected argument \"%s\"\nTry 'tide-scheduler --help'.\n",
                argv[optind]);
        goto usage;
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
    goto out;
usage:
    rc = 2;
out:
    free(default_dir);
    return rc;
}
