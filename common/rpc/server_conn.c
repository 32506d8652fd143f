/* One server connection without a socket: sniffs the first bytes, then hands everything to the
 * HTTP/2 (h2_server_conn.c) or HTTP/1 (http1.c) side, and keeps the idle/keepalive timer.
 * Invariants: the kind is decided once; `out` holds bytes for the socket in order; once state
 * leaves OPEN it never returns. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h2_server_conn.h"
#include "http1.h"
#include "server_core.h"
#include "xmalloc.h"

void tide__srv_conn_notify(tide__srv_conn_t *c)
{
    if (c->notify && !c->dead)
        c->notify(c->shell);
}

void tide__srv_conn_close(tide__srv_conn_t *c, tide__conn_state_t how)
{
    if (how <= c->state)
        return;
    c->state = how;
    if (how == TIDE__CONN_CLOSE_AFTER_FLUSH && !c->dead) {
        /* A peer that stops reading cannot hold the connection open: give the flush a deadline. */
        tide__srv_timer_set(c->ctx, &c->tick, tide__srv_ctx_now(c->ctx) + c->ctx->idle_ms);
    }
    tide__srv_conn_notify(c);
}

static void tick_fired(tide__timer_t *t, int64_t now)
{
    tide__srv_conn_t *c = tide_container_of(t, tide__srv_conn_t, tick);
    int64_t next = -1;

    if (c->state != TIDE__CONN_OPEN) {
        /* The flush deadline passed. */
        tide__srv_conn_close(c, TIDE__CONN_ABORT);
        return;
    }
    switch (c->kind) {
    case TIDE__CONN_SNIFF:
        /* Nothing useful (no preface, no request line) within the idle time: half-open or
         * slowloris. */
        tide__srv_conn_close(c, TIDE__CONN_ABORT);
        return;
    case TIDE__CONN_HTTP1:
        /* No request answered within the idle time since the last one (or since the connection
         * opened): an idle keep-alive connection or a request that dribbles in. */
        if (now - c->idle_base >= c->ctx->idle_ms) {
            tide__srv_conn_close(c, TIDE__CONN_ABORT);
            return;
        }
        next = c->idle_base + c->ctx->idle_ms;
        break;
    case TIDE__CONN_H2:
        next = tide__h2_tick(c->h2, now);
        break;
    }
    if (next >= 0)
        tide__srv_timer_set(c->ctx, &c->tick, next);
}

tide__srv_conn_t *tide__srv_conn_new(tide__srv_ctx_t *ctx, const char *peer, void (*notify)(void *),
                                     void *shell)
{
    tide__srv_conn_t *c = tide_xcalloc(1, sizeof(*c));
    int64_t now = tide__srv_ctx_now(ctx);

    c->ctx = ctx;
    c->id = ctx->next_conn_id++;
    snprintf(c->peer, sizeof(c->peer), "%s", peer ? peer : "");
    c->kind = TIDE__CONN_SNIFF;
    c->state = TIDE__CONN_OPEN;
    tide_buf_init(&c->out);
    c->last_read = now;
    c->idle_base = now;
    c->notify = notify;
    c->shell = shell;
    tide__srv_timer_init(&c->tick, tick_fired);
    tide__srv_timer_set(ctx, &c->tick, now + ctx->idle_ms);
    return c;
}

void tide__srv_conn_free(tide__srv_conn_t *c)
{
    if (!c)
        return;
    c->dead = true;
    tide__srv_timer_clear(c->ctx, &c->tick);
    tide__h2_free(c->h2);
    tide__http1_free(c->h1);
    tide_buf_free(&c->out);
    free(c);
}

static int feed_kind(tide__srv_conn_t *c, const uint8_t *data, size_t len)
{
    int rc;

    if (c->kind == TIDE__CONN_H2)
        return tide__h2_feed(c->h2, data, len);
    rc = tide__http1_feed(c->h1, data, len);
    if (rc < 0 || tide__http1_done(c->h1))
        tide__srv_conn_close(c, TIDE__CONN_CLOSE_AFTER_FLUSH);
    return rc;
}

int tide__srv_conn_feed(tide__srv_conn_t *c, const uint8_t *data, size_t len)
{
    int64_t now = tide__srv_ctx_now(c->ctx);
    int rc;

    if (c->state != TIDE__CONN_OPEN)
        return c->state == TIDE__CONN_ABORT ? -EPROTO : 0;
    c->last_read = now;
    if (c->kind == TIDE__CONN_SNIFF) {
        size_t take = sizeof(c->sniff) - c->sniff_len;
        if (take > len)
            take = len;
        memcpy(c->sniff + c->sniff_len, data, take);
        c->sniff_len += take;
        data += take;
        len -= take;
        switch (tide_sniff(c->sniff, c->sniff_len)) {
        case TIDE_SNIFF_NEED_MORE:
            return 0;
        case TIDE_SNIFF_GARBAGE:
            tide__srv_conn_close(c, TIDE__CONN_ABORT);
            return -EPROTO;
        case TIDE_SNIFF_HTTP2:
            c->kind = TIDE__CONN_H2;
            c->h2 = tide__h2_new(c);
            /* From now on the keepalive decides when the tick runs. */
            tide__srv_timer_set(c->ctx, &c->tick, now + c->ctx->keepalive_ms);
            break;
        case TIDE_SNIFF_HTTP1:
            c->kind = TIDE__CONN_HTTP1;
            c->h1 = tide__http1_new(c);
            break;
        }
        rc = feed_kind(c, c->sniff, c->sniff_len);
        if (rc < 0 || len == 0)
            goto done;
    }
    rc = feed_kind(c, data, len);
done:
    if (c->kind == TIDE__CONN_HTTP1 && tide__http1_answered(c->h1) != c->answered) {
        c->answered = tide__http1_answered(c->h1);
        c->idle_base = now;
    }
    tide__srv_conn_notify(c);
    return rc;
}

void tide__srv_conn_eof(tide__srv_conn_t *c)
{
    /* An HTTP/1 client may half-close after its request and still read the answer; anything else
     * without a reader is over. */
    if (c->kind == TIDE__CONN_HTTP1)
        tide__srv_conn_close(c, TIDE__CONN_CLOSE_AFTER_FLUSH);
    else
        tide__srv_conn_close(c, TIDE__CONN_ABORT);
}

void tide__srv_conn_pull(tide__srv_conn_t *c)
{
    if (c->state == TIDE__CONN_ABORT || c->dead)
        return;
    if (c->kind == TIDE__CONN_H2) {
        tide__h2_pull(c->h2);
    } else if (c->kind == TIDE__CONN_HTTP1 && tide__http1_stalled(c->h1)) {
        int64_t now = tide__srv_ctx_now(c->ctx);
        int rc = tide__http1_resume(c->h1);
        if (rc < 0 || tide__http1_done(c->h1))
            tide__srv_conn_close(c, TIDE__CONN_CLOSE_AFTER_FLUSH);
        if (tide__http1_answered(c->h1) != c->answered) {
            c->answered = tide__http1_answered(c->h1);
            c->idle_base = now;
        }
    }
}

size_t tide__srv_conn_take_output(tide__srv_conn_t *c, tide_buf_t *dst)
{
    tide_buf_t tmp = *dst;
    size_t n = c->out.len;

    tmp.len = 0;
    *dst = c->out;
    c->out = tmp;
    return n;
}

bool tide__srv_conn_wants_read(const tide__srv_conn_t *c)
{
    if (c->state != TIDE__CONN_OPEN || c->out.len >= TIDE_RPC_OUT_HIGH)
        return false;
    return !(c->kind == TIDE__CONN_HTTP1 && tide__http1_stalled(c->h1));
}

void tide__srv_conn_shutdown(tide__srv_conn_t *c)
{
    switch (c->kind) {
    case TIDE__CONN_SNIFF:
        tide__srv_conn_close(c, TIDE__CONN_ABORT);
        break;
    case TIDE__CONN_HTTP1:
        /* Requests are answered synchronously, so nothing is in flight between them. */
        tide__srv_conn_close(c, TIDE__CONN_CLOSE_AFTER_FLUSH);
        break;
    case TIDE__CONN_H2:
        tide__h2_shutdown(c->h2);
        break;
    }
}
