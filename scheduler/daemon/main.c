/* tide-scheduler: parses flags (flags.c), starts the daemon on a libuv loop and runs until SIGTERM/SIGINT.
 * A bad flag is one line on stderr and exit status 2; nothing starts. With --store etcd:// the replica
 * stands by until elected (ha.c); a leader that loses its lease starts over as a fresh standby. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "daemon.h"
#include "ha.h"
#include "flags.h"
#include "log.h"
#include "token.h"
#include "xmalloc.h"

/* What the signal handlers stop: the daemon while leading, the campaign while standing by. */
typedef struct run_ctx {
    uv_loop_t *loop;
    tide_daemon_t *d;
    bool stopping;
} run_ctx_t;

static void on_signal(uv_signal_t *h, int signum)
{
    run_ctx_t *ctx = h->data;

    if (ctx->stopping)
        return;
    ctx->stopping = true;
    if (ctx->d) {
        tide_info("signal %d: shutting down (running ranks keep running; a restart adopts them)", signum);
        tide_daemon_stop(ctx->d);
    } else {
        tide_info("signal %d: shutting down (standby)", signum);
        uv_stop(ctx->loop);
    }
}

static void on_sighup(uv_signal_t *h, int signum)
{
    run_ctx_t *ctx = h->data;

    (void)signum;
    if (ctx->d)
        tide_daemon_reload_users(ctx->d);
}

static void close_signal(uv_signal_t *s)
{
    if (!uv_is_closing((uv_handle_t *)s))
        uv_close((uv_handle_t *)s, NULL);
}

/* A leader that stepped down starts over as a fresh process (nothing of the old leader's state can
 * survive into the standby), waiting for etcd if it is away. */
static void start_over(char **argv)
{
    setenv("TIDE_HA_RESTARTED", "1", 1);
    tide_info("starting over as a standby");
    execv("/proc/self/exe", argv);
    tide_err("cannot start over (%s): exiting", strerror(errno));
}

int main(int argc, char **argv)
{
    tide_daemon_config_t cfg = {.listen = "127.0.0.1:7070"};
    tide_log_level_t level = TIDE_LOG_INFO;
    char *default_dir = tide_default_data_dir();
    uv_loop_t loop;
    uv_signal_t sigterm, sigint, sighup;
    run_ctx_t ctx = {.loop = &loop};
    tide_ha_t *ha = NULL;
    char *token = NULL;
    tide_daemon_t *d = NULL;
    tide_error_t err;
    bool stepped_down = false;
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
    if (cfg.tls_cert) {
        /* TLS: a certificate or key that cannot be used stops the start (exit 1) naming the file. */
        tide_tls_config_t tc = {.cert_file = cfg.tls_cert, .key_file = cfg.tls_key, .ca_file = cfg.tls_ca,
                                .client_cert = cfg.tls_require_client_cert ? TIDE_TLS_CLIENT_CERT_REQUIRE
                                               : cfg.tls_ca                ? TIDE_TLS_CLIENT_CERT_OPTIONAL
                                                                           : TIDE_TLS_CLIENT_CERT_NONE};
        if (tide_tls_ctx_new_server(&tc, &cfg.tls, &err) < 0) {
            fprintf(stderr, "tide-scheduler: %s\n", err.text);
            rc = 1;
            goto out;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    uv_loop_init(&loop);
    uv_signal_init(&loop, &sigterm);
    uv_signal_init(&loop, &sigint);
    sigterm.data = sigint.data = &ctx;
    uv_signal_start(&sigterm, on_signal, SIGTERM);
    uv_signal_start(&sigint, on_signal, SIGINT);
    uv_signal_init(&loop, &sighup);
    sighup.data = &ctx;
    uv_signal_start(&sighup, on_sighup, SIGHUP);

    if (cfg.store_url && strncmp(cfg.store_url, "etcd://", 7) == 0) {
        /* Several replicas: stand by until elected, then lead with every write fenced. */
        tide_ha_config_t hc = {.store_url = cfg.store_url, .listen = cfg.listen, .advertise = cfg.advertise,
                               .lease_ttl_ms = cfg.lease_ttl_ms,
                               .etcd_wait_ms = getenv("TIDE_HA_RESTARTED") ? -1 : cfg.store_wait_ms};
        if (cfg.token_file && (rc = tide_token_read(cfg.token_file, &token, &err)) < 0) {
            tide_err("cannot start: %s", err.text);
            rc = 1;
            goto close;
        }
        hc.token = token;
        hc.tls = cfg.tls;
        if ((rc = tide_ha_new(&loop, &hc, &ha, &err)) < 0 || (rc = tide_ha_campaign(ha, &err)) < 0) {
            tide_err("cannot start: %s", err.text);
            rc = 1;
            goto close;
        }
        while (!ctx.stopping && !tide_ha_elected(ha) && !tide_ha_lost(ha) && !tide_ha_gave_up(ha))
            uv_run(&loop, UV_RUN_DEFAULT);
        if (tide_ha_gave_up(ha) && !ctx.stopping) {
            rc = 1;
            goto close;
        }
        if (ctx.stopping || tide_ha_lost(ha)) {
            stepped_down = !ctx.stopping; /* lost between winning and serving: stand by again */
            rc = 0;
            goto close;
        }
        cfg.fence_key = tide_ha_fence_key(ha);
        cfg.fence_rev = tide_ha_fence_rev(ha);
        cfg.lease_valid = tide_ha_lease_valid;
        cfg.lease_ud = ha;
    }
    rc = tide_daemon_start(&loop, &cfg, &d, &err);
    if (rc < 0) {
        tide_err("cannot start: %s", err.text);
        /* Leadership lost or etcd away while reading the state: stand by again. */
        stepped_down = ha && (rc == -ECANCELED || rc == -EIO || rc == -ETIMEDOUT || rc == -ECONNREFUSED);
        rc = 1;
        goto close;
    }
    ctx.d = d;
    if (ctx.stopping) /* a signal while the daemon started (its own loop turns did not stop) */
        tide_daemon_stop(d);
    if (ha && !tide_ha_lead(ha, d))
        tide_daemon_step_down(d, "the lease was lost while starting");
    if (!d->failed)
        uv_run(&loop, UV_RUN_DEFAULT);
    rc = d->exit_code;
    stepped_down = rc == TIDE_DAEMON_STEPPED_DOWN;
close:
    /* Leadership held and given up on purpose (a signal, a daemon that could not start): hand it over now
     * rather than after the lease's TTL. */
    if (ha && !stepped_down)
        tide_ha_resign(ha);
    close_signal(&sigterm);
    close_signal(&sigint);
    close_signal(&sighup);
    tide_ha_free(ha);
    tide_daemon_free(d); /* also runs the loop until every handle closed */
    uv_run(&loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&loop) != 0)
        tide_warn("the loop still had handles at exit");
    if (token) {
        explicit_bzero(token, strlen(token));
        free(token);
    }
    if (stepped_down && !ctx.stopping)
        start_over(argv);
    tide_info("stopped");
out:
    tide_tls_ctx_free(cfg.tls);
    free(default_dir);
    return rc;
}
