/* Leader election over etcd's v3 gateway (ha.h). Every replica holds one lease and keeps it alive (a
 * keepalive every TTL/3, standbys too, so a lease is fresh the moment its replica wins); standbys campaign
 * every TTL/10. Invariant: this replica acts as leader only while it can prove its lease is alive:
 * valid_until is the send time of the last answered keepalive (or of the grant) plus the TTL etcd granted,
 * minus a margin; etcd expires the lease no earlier than that, so a standby can hold the key only after
 * this replica stopped. Every daemon write is fenced as well. */
#include "ha.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "base64.h"
#include "etcd_client.h"
#include "log.h"
#include "standby.h"
#include "xmalloc.h"

#define CALL_TIMEOUT_MS 2000
#define PROBE_TIMEOUT_MS 3000
#define RESIGN_TIMEOUT_MS 1000

typedef enum ha_state {
    HA_STANDBY = 0,
    HA_CLOSING_STANDBY, /* won: waiting for the standby's port to be free */
    HA_LEADER,
    HA_LOST,
} ha_state_t;

struct tide_ha {
    uv_loop_t *loop;
    tide_etcd_t *etcd;
    tide_standby_t *standby;
    char *listen, *advertise, *token;
    tide_tls_ctx_t *tls; /* borrowed (tide_ha_config_t) */
    char *key;     /* the leadership key's full etcd name (prefix + TIDE_KEY_LEADER) */
    char *key_b64; /* ... base64 */
    int64_t ttl_s, margin_ms, tick_ms;
    ha_state_t state;
    bool busy;      /* a campaign call (grant or txn) is in flight */
    bool ka_busy;   /* a keepalive is in flight */
    int revokes;    /* lease revokes in flight (tide_ha_resign waits for them) */
    bool freeing;
    int pending;    /* calls in flight (their callbacks still hold ha) */
    int open_handles;
    int64_t lease_id;
    uint64_t lease_sent_ms; /* when the grant that made lease_id was sent */
    uint64_t valid_until;   /* loop time until which the lease is surely alive */
    uint64_t ka_sent_ms;
    int64_t ka_lease; /* the lease the keepalive in flight is for */
    int64_t fence_rev;
    int64_t etcd_wait_ms;   /* see tide_ha_config_t */
    uint64_t started_ms;
    bool reached, gave_up;  /* etcd answered once; it never did within etcd_wait_ms */
    char *leader_seen; /* the holder last read, for log lines */
    uint64_t last_warn_ms;
    tide_daemon_t *d;
    uv_timer_t tick;  /* every TTL/10: keepalive when due, campaign (standby) */
    uv_timer_t guard; /* fires at valid_until */
};

/* "etcd://EP[,EP...][/PREFIX]": the endpoints and the key prefix, as the etcd store reads them. */
static int parse_url(const char *url, char **endpoints, char **prefix, tide_error_t *err)
{
    if (strncmp(url, "etcd:", 5) != 0) {
        tide_errprintf(err, "store URL \"%s\" is not etcd://HOST:PORT[,HOST:PORT...][/PREFIX]", url);
        return -EINVAL;
    }
    return tide_etcd_parse_location(url + 5, endpoints, prefix, err);
}

static uint64_t now_ms(const tide_ha_t *ha)
{
    return uv_now(ha->loop);
}

static void maybe_release(tide_ha_t *ha)
{
    if (ha->freeing && ha->pending == 0 && ha->open_handles == 0) {
        free(ha->listen);
        free(ha->advertise);
        free(ha->token);
        free(ha->key);
        free(ha->key_b64);
        free(ha->leader_seen);
        free(ha);
    }
}

static void on_handle_closed(uv_handle_t *h)
{
    tide_ha_t *ha = h->data;

    ha->open_handles--;
    maybe_release(ha);
}

/* The lease can no longer be proven alive. */
static void lose(tide_ha_t *ha, const char *why)
{
    if (ha->state == HA_LOST)
        return;
    ha->state = HA_LOST;
    uv_timer_stop(&ha->tick);
    uv_timer_stop(&ha->guard);
    if (ha->d)
        tide_daemon_step_down(ha->d, why);
    else
        tide_err("leadership lost before serving: %s", why);
}

static void on_guard(uv_timer_t *t)
{
    tide_ha_t *ha = t->data;

    if (ha->state == HA_LEADER || ha->state == HA_CLOSING_STANDBY)
        lose(ha, "the lease could not be renewed in time (etcd unreachable?)");
}

static void extend(tide_ha_t *ha, uint64_t sent_ms, int64_t ttl_s)
{
    uint64_t until = sent_ms + (uint64_t)ttl_s * 1000 - (uint64_t)ha->margin_ms;

    if (until > ha->valid_until)
        ha->valid_until = until;
    uv_timer_start(&ha->guard, on_guard, ha->valid_until > now_ms(ha) ? ha->valid_until - now_ms(ha) : 0, 0);
}

static void warn_limited(tide_ha_t *ha, const char *what, const char *errtext)
{
    if (ha->last_warn_ms && now_ms(ha) - ha->last_warn_ms < 5000)
        return;
    ha->last_warn_ms = now_ms(ha);
    tide_warn("leader election: %s: %s", what, errtext);
}

/* Every call's callback starts here (busy: its in-flight flag): false when the election is being freed
 * (nothing more to do). */
static bool call_returned(tide_ha_t *ha, bool *busy)
{
    ha->pending--;
    *busy = false;
    if (ha->freeing) {
        maybe_release(ha);
        return false;
    }
    return true;
}

/* --- leader: keepalives --- */

static void keepalive_cb(int status, const cJSON *resp, const char *errtext, void *ud)
{
    tide_ha_t *ha = ud;
    const cJSON *result;
    int64_t ttl = 0;

    if (!call_returned(ha, &ha->ka_busy) || ha->state == HA_LOST || ha->ka_lease != ha->lease_id)
        return; /* ... or it was for a lease a standby already replaced */
    result = status == 0 ? cJSON_GetObjectItemCaseSensitive(resp, "result") : NULL;
    if (!cJSON_IsObject(result)) {
        /* A failed call, or an answer without a result (an error the gateway streamed): the guard steps
         * a leader down if no keepalive succeeds in time; a standby takes a new lease then. */
        warn_limited(ha, "lease keepalive failed", status < 0 ? errtext : "no result in etcd's answer");
        return;
    }
    /* An expired lease's keepalive comes back without TTL. */
    if (tide_etcd_json_int64(result, "TTL", &ttl) < 0 || ttl <= 0) {
        if (ha->state == HA_STANDBY)
            ha->lease_id = 0; /* the next tick grants a new one */
        else
            lose(ha, "the lease expired");
        return;
    }
    extend(ha, ha->ka_sent_ms, ttl);
}

static void send_keepalive(tide_ha_t *ha)
{
    char body[96];

    if (ha->ka_busy || !ha->lease_id)
        return;
    snprintf(body, sizeof(body), "{\"ID\":\"%" PRId64 "\"}", ha->lease_id);
    ha->ka_sent_ms = now_ms(ha);
    ha->ka_lease = ha->lease_id;
    if (tide_etcd_call(ha->etcd, "/v3/lease/keepalive", body, CALL_TIMEOUT_MS, keepalive_cb, ha) == 0) {
        ha->ka_busy = true;
        ha->pending++;
    }
}

/* --- standby: campaigning --- */

static void on_standby_closed(void *ud)
{
    tide_ha_t *ha = ud;

    ha->open_handles--;
    if (ha->freeing) {
        maybe_release(ha);
        return;
    }
    if (ha->state == HA_CLOSING_STANDBY)
        ha->state = HA_LEADER;
    uv_stop(ha->loop); /* main starts the daemon from the top level, or starts over when HA_LOST */
}

/* This replica holds the leadership key at revision rev: close the standby, then main starts the daemon. */
static void won(tide_ha_t *ha, int64_t rev)
{
    ha->fence_rev = rev;
    tide_info("elected leader (lease %" PRIx64 ", %" PRId64 " s; leadership key %s at revision %" PRId64 ")",
              (uint64_t)ha->lease_id, ha->ttl_s, ha->key, ha->fence_rev);
    ha->state = HA_CLOSING_STANDBY;
    extend(ha, ha->lease_sent_ms, ha->ttl_s); /* arms the guard: from now on a late lease steps us down */
    ha->open_handles++; /* the standby's close, until on_standby_closed */
    tide_standby_free(ha->standby, on_standby_closed, ha);
    ha->standby = NULL;
}

static void txn_cb(int status, const cJSON *resp, const char *errtext, void *ud)
{
    tide_ha_t *ha = ud;
    const cJSON *responses, *first, *range, *kvs, *kv, *val;
    int64_t rev = 0, lease = 0;

    if (!call_returned(ha, &ha->busy) || ha->state != HA_STANDBY)
        return;
    if (status < 0) {
        warn_limited(ha, "campaign failed", errtext);
        return;
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(resp, "succeeded"))) {
        if (tide_etcd_json_int64(cJSON_GetObjectItemCaseSensitive(resp, "header"), "revision", &rev) < 0 ||
            rev <= 0) {
            warn_limited(ha, "campaign", "etcd's answer has no revision");
            return;
        }
        won(ha, rev);
        return;
    }
    /* Someone holds the key. */
    responses = cJSON_GetObjectItemCaseSensitive(resp, "responses");
    first = cJSON_IsArray(responses) ? cJSON_GetArrayItem(responses, 0) : NULL;
    range = first ? cJSON_GetObjectItemCaseSensitive(first, "response_range") : NULL;
    kvs = range ? cJSON_GetObjectItemCaseSensitive(range, "kvs") : NULL;
    kv = cJSON_IsArray(kvs) ? cJSON_GetArrayItem(kvs, 0) : NULL;
    if (!kv)
        return;
    /* Our own lease: an earlier txn of ours won but its answer was lost. */
    if (tide_etcd_json_int64(kv, "lease", &lease) == 0 && lease == ha->lease_id &&
        tide_etcd_json_int64(kv, "mod_revision", &rev) == 0 && rev > 0) {
        won(ha, rev);
        return;
    }
    /* Another replica: name it to our clients. */
    val = cJSON_GetObjectItemCaseSensitive(kv, "value");
    if (cJSON_IsString(val)) {
        uint8_t *addr = NULL;
        size_t len = 0;
        if (tide_etcd_unb64(val->valuestring, &addr, &len) == 0 && len > 0 && len < 256 &&
            !memchr(addr, '\0', len)) {
            if (!ha->leader_seen || strcmp(ha->leader_seen, (char *)addr) != 0) {
                tide_info("standing by: the leader is at %s", (char *)addr);
                free(ha->leader_seen);
                ha->leader_seen = tide_xstrdup((char *)addr);
            }
            tide_standby_set_leader(ha->standby, (char *)addr);
        }
        free(addr);
    }
}

/* The txn "create the key with our lease if it does not exist, else read it". */
static void send_txn(tide_ha_t *ha)
{
    char *addr_b64 = tide_base64_encode(ha->advertise, strlen(ha->advertise));
    char *body = tide_xasprintf("{\"compare\":[{\"key\":\"%s\",\"target\":\"CREATE\",\"result\":\"EQUAL\","
                                "\"create_revision\":\"0\"}],"
                                "\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%" PRId64
                                "\"}}],"
                                "\"failure\":[{\"request_range\":{\"key\":\"%s\"}}]}",
                                ha->key_b64, ha->key_b64, addr_b64, ha->lease_id, ha->key_b64);

    if (tide_etcd_call(ha->etcd, "/v3/kv/txn", body, CALL_TIMEOUT_MS, txn_cb, ha) == 0) {
        ha->busy = true;
        ha->pending++;
    }
    free(body);
    free(addr_b64);
}

static void grant_cb(int status, const cJSON *resp, const char *errtext, void *ud)
{
    tide_ha_t *ha = ud;
    int64_t id = 0, ttl = 0;

    if (!call_returned(ha, &ha->busy) || ha->state != HA_STANDBY)
        return;
    if (status < 0) {
        warn_limited(ha, "lease grant failed", errtext);
        return;
    }
    if (tide_etcd_json_int64(resp, "ID", &id) < 0 || id == 0 || tide_etcd_json_int64(resp, "TTL", &ttl) < 0 ||
        ttl <= 0) {
        warn_limited(ha, "lease grant", "etcd's answer has no lease");
        return;
    }
    ha->reached = true;
    ha->lease_id = id;
    ha->ttl_s = ttl;
    ha->valid_until = 0;
    extend(ha, ha->lease_sent_ms, ttl);
    ha->ka_sent_ms = ha->lease_sent_ms; /* the keepalives' pace counts from the grant */
    send_txn(ha); /* at once, however long the grant took */
}

/* One step of the campaign: a lease when we have none that is surely alive (a standby keeps its lease
 * alive too, so this is rare), then the txn at once; else the txn with the lease we have. */
static void campaign_step(tide_ha_t *ha)
{
    if (ha->busy || ha->state != HA_STANDBY)
        return;
    if (!ha->lease_id || now_ms(ha) >= ha->valid_until) {
        char grant[64];
        ha->lease_id = 0; /* expired, or soon: etcd drops it by itself */
        snprintf(grant, sizeof(grant), "{\"TTL\":\"%" PRId64 "\"}", ha->ttl_s);
        ha->lease_sent_ms = now_ms(ha);
        if (tide_etcd_call(ha->etcd, "/v3/lease/grant", grant, CALL_TIMEOUT_MS, grant_cb, ha) == 0) {
            ha->busy = true;
            ha->pending++;
        }
        return;
    }
    send_txn(ha);
}

static void on_tick(uv_timer_t *t)
{
    tide_ha_t *ha = t->data;

    if (ha->state == HA_LOST || ha->gave_up)
        return;
    if (!ha->reached && ha->etcd_wait_ms > 0 && now_ms(ha) - ha->started_ms >= (uint64_t)ha->etcd_wait_ms) {
        tide_err("etcd did not answer within --store-wait (%" PRId64 " s): giving up", ha->etcd_wait_ms / 1000);
        ha->gave_up = true;
        uv_stop(ha->loop);
        return;
    }
    /* Keepalives every TTL/3, counted from the last one sent: two may fail before the lease is at risk. */
    if (ha->lease_id && now_ms(ha) >= ha->ka_sent_ms + (uint64_t)ha->ttl_s * 1000 / 3)
        send_keepalive(ha);
    if (ha->state == HA_STANDBY)
        campaign_step(ha);
}

static void revoke_cb(int status, const cJSON *resp, const char *errtext, void *ud)
{
    tide_ha_t *ha = ud;

    (void)status;
    (void)resp;
    (void)errtext;
    ha->pending--;
    ha->revokes--;
    maybe_release(ha);
}

/* A lease we will not use: let etcd drop it now rather than at its TTL. */
static void revoke_quietly(tide_ha_t *ha, int64_t lease, int64_t timeout_ms)
{
    char body[96];

    snprintf(body, sizeof(body), "{\"ID\":\"%" PRId64 "\"}", lease);
    if (tide_etcd_call(ha->etcd, "/v3/lease/revoke", body, timeout_ms, revoke_cb, ha) == 0) {
        ha->pending++;
        ha->revokes++;
    }
}

/* --- public --- */

int tide_ha_new(uv_loop_t *loop, const tide_ha_config_t *cfg, tide_ha_t **out, tide_error_t *err)
{
    tide_ha_t *ha;
    char *endpoints = NULL, *prefix = NULL;
    int64_t ttl_ms = cfg->lease_ttl_ms > 0 ? cfg->lease_ttl_ms : 3000;
    int rc;

    *out = NULL;
    if ((rc = parse_url(cfg->store_url, &endpoints, &prefix, err)) < 0)
        return rc;
    ha = tide_xcalloc(1, sizeof(*ha));
    ha->loop = loop;
    ha->listen = tide_xstrdup(cfg->listen);
    ha->advertise = tide_xstrdup(cfg->advertise ? cfg->advertise : cfg->listen);
    ha->token = cfg->token ? tide_xstrdup(cfg->token) : NULL;
    ha->tls = cfg->tls;
    ha->key = tide_xasprintf("%s%s", prefix, TIDE_KEY_LEADER);
    ha->key_b64 = tide_base64_encode(ha->key, strlen(ha->key));
    ha->ttl_s = (ttl_ms + 999) / 1000;
    ha->margin_ms = ha->ttl_s * 1000 / 10;
    ha->tick_ms = ha->ttl_s * 1000 / 10;
    rc = tide_etcd_new(loop, endpoints, &ha->etcd, err);
    ha->etcd_wait_ms = cfg->etcd_wait_ms;
    if (rc == 0 && cfg->etcd_wait_ms == 0)
        rc = tide_etcd_probe(ha->etcd, PROBE_TIMEOUT_MS, err);
    free(endpoints);
    free(prefix);
    uv_timer_init(loop, &ha->tick);
    uv_timer_init(loop, &ha->guard);
    ha->tick.data = ha->guard.data = ha;
    ha->open_handles = 2;
    if (rc < 0) {
        tide_ha_free(ha);
        return rc;
    }
    *out = ha;
    return 0;
}

int tide_ha_campaign(tide_ha_t *ha, tide_error_t *err)
{
    int rc = tide_standby_start(ha->loop, ha->listen, ha->advertise, ha->token, ha->tls, &ha->standby, err);

    if (rc < 0)
        return rc;
    tide_info("standing by at %s (advertised as %s): campaigning for leadership, lease %" PRId64 " s",
              ha->listen, ha->advertise, ha->ttl_s);
    ha->started_ms = now_ms(ha);
    uv_timer_start(&ha->tick, on_tick, 0, (uint64_t)ha->tick_ms);
    return 0;
}

bool tide_ha_gave_up(const tide_ha_t *ha)
{
    return ha->gave_up;
}

bool tide_ha_elected(const tide_ha_t *ha)
{
    return ha->state == HA_LEADER;
}

const char *tide_ha_fence_key(const tide_ha_t *ha)
{
    (void)ha;
    return TIDE_KEY_LEADER;
}

int64_t tide_ha_fence_rev(const tide_ha_t *ha)
{
    return ha->fence_rev;
}

bool tide_ha_lead(tide_ha_t *ha, tide_daemon_t *d)
{
    if (ha->state != HA_LEADER)
        return false;
    ha->d = d;
    return true;
}

void tide_ha_resign(tide_ha_t *ha)
{
    if (!ha || (ha->state != HA_LEADER && ha->state != HA_CLOSING_STANDBY) || !ha->lease_id)
        return;
    ha->d = NULL;
    ha->state = HA_LOST;
    uv_timer_stop(&ha->tick);
    uv_timer_stop(&ha->guard);
    revoke_quietly(ha, ha->lease_id, RESIGN_TIMEOUT_MS); /* the call ends within its timeout */
    while (ha->revokes > 0)
        uv_run(ha->loop, UV_RUN_ONCE);
    tide_info("resigned: a standby takes over now");
}

bool tide_ha_lease_valid(void *ud)
{
    tide_ha_t *ha = ud;

    uv_update_time(ha->loop);
    return ha->state != HA_LOST && now_ms(ha) < ha->valid_until;
}

bool tide_ha_lost(const tide_ha_t *ha)
{
    return ha->state == HA_LOST;
}

void tide_ha_free(tide_ha_t *ha)
{
    if (!ha)
        return;
    ha->freeing = true;
    ha->d = NULL;
    uv_close((uv_handle_t *)&ha->tick, on_handle_closed);
    uv_close((uv_handle_t *)&ha->guard, on_handle_closed);
    tide_standby_free(ha->standby, NULL, NULL);
    ha->standby = NULL;
    tide_etcd_free(ha->etcd); /* pending calls complete with -ESHUTDOWN, then maybe_release */
    ha->etcd = NULL;
    maybe_release(ha);
}
