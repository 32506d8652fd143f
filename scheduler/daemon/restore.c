/* Startup: rebuilds the core from the store (jobs, worker cordons, counters) before the scheduler
 * serves anyone. A record that cannot be read stops the start: serving with part of the state would
 * break promises made to clients. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "audit.h"
#include "convert.h"
#include "usage.h"
#include "daemon.h"
#include "log.h"
#include "xmalloc.h"

#include "tide/v1/records.pb-c.h"

typedef struct restore_ctx {
    tide_daemon_t *d;
    bool done;
    int rc;
    tide_error_t *err;
    int jobs, workers;
} restore_ctx_t;

static uint64_t parse_u64(const tide_store_kv_t *kv)
{
    char buf[32];
    size_t n = kv->value_len < sizeof(buf) - 1 ? kv->value_len : sizeof(buf) - 1;
    memcpy(buf, kv->value, n);
    buf[n] = '\0';
    return strtoull(buf, NULL, 10);
}

static int restore_job(restore_ctx_t *c, const tide_store_kv_t *kv)
{
    tide_daemon_t *d = c->d;
    Tide__V1__Job *pb = tide__v1__job__unpack(NULL, kv->value_len, kv->value);
    tide_job_record_t rec;
    tide_job_spec_t spec;
    int rc;

    if (!pb) {
        tide_errprintf(c->err, "store record %s is not a tide.v1.Job", kv->key);
        return -EINVAL;
    }
    rc = tide_conv_record_from_pb(pb, &rec, &spec, &d->arena, c->err);
    if (rc == 0)
        rc = tide_core_job_restore(d->core, &rec, c->err);
    tide__v1__job__free_unpacked(pb, NULL);
    tide_arena_reset(&d->arena);
    c->jobs += rc == 0;
    return rc;
}

static void range_cb(int status, const tide_store_kv_t *kvs, size_t n, int64_t revision,
                     const char *errtext, void *ud)
{
    restore_ctx_t *c = ud;
    tide_daemon_t *d = c->d;

    (void)revision;
    c->done = true;
    if (status < 0) {
        tide_errprintf(c->err, "cannot read the store: %s", errtext);
        c->rc = status;
        return;
    }
    for (size_t i = 0; i < n && c->rc == 0; i++) {
        const tide_store_kv_t *kv = &kvs[i];
        if (strcmp(kv->key, TIDE_KEY_NEXT_SEQ) == 0) {
            tide_core_restore_meta(d->core, parse_u64(kv));
        } else if (strcmp(kv->key, TIDE_KEY_EPOCH) == 0) {
            d->epoch = parse_u64(kv);
        } else if (strcmp(kv->key, TIDE_KEY_EVENT_SEQ) == 0) {
            d->next_event_seq = parse_u64(kv);
        } else if (strcmp(kv->key, TIDE_KEY_LAUNCH_KEY) == 0 && d->cfg.fence_key) {
            if (kv->value_len < 32 || kv->value_len > 256 || memchr(kv->value, '\0', kv->value_len)) {
                tide_errprintf(c->err, "store record %s is not a secret", kv->key);
                c->rc = -EINVAL;
            } else {
                free(d->launch_key);
                d->launch_key = tide_xstrndup((const char *)kv->value, kv->value_len);
            }
        } else if (strncmp(kv->key, TIDE_KEY_WORKERS, strlen(TIDE_KEY_WORKERS)) == 0) {
            Tide__V1__WorkerRecord *w = tide__v1__worker_record__unpack(NULL, kv->value_len, kv->value);
            if (!w || !w->id[0]) {
                tide_errprintf(c->err, "store record %s is not a tide.v1.WorkerRecord", kv->key);
                c->rc = -EINVAL;
            } else {
                tide_core_worker_restore(d->core, w->id, w->cordoned, w->cordon_reason);
                c->workers++;
            }
            tide__v1__worker_record__free_unpacked(w, NULL);
        } else if (strncmp(kv->key, TIDE_KEY_JOBS, strlen(TIDE_KEY_JOBS)) == 0) {
            c->rc = restore_job(c, kv);
        } else if (strncmp(kv->key, TIDE_KEY_USAGE, strlen(TIDE_KEY_USAGE)) == 0) {
            c->rc = tide_usage_restore(d->usage, kv->key, kv->value, kv->value_len, c->err);
        } else if (strncmp(kv->key, TIDE_KEY_AUDIT, strlen(TIDE_KEY_AUDIT)) == 0) {
            /* the audit trail is a record, not state: one that cannot be read is skipped, not fatal */
            tide_audit_entry_t e;
            if (tide_audit_unpack(kv->value, kv->value_len, &e) == 0)
                tide_audit_restore(d->audit, &e);
            else
                tide_warn("store record %s is not a tide.v1.AuditEntry: skipped", kv->key);
            free(e.message);
        }
    }
}

int tide_daemon_restore(tide_daemon_t *d, tide_error_t *err)
{
    restore_ctx_t c = {.d = d, .err = err};
    int rc = tide_store_range(d->store, "", range_cb, &c);

    if (rc < 0) {
        tide_errprintf(err, "cannot read the store");
        return rc;
    }
    while (!c.done)
        uv_run(d->loop, UV_RUN_ONCE);
    if (c.rc < 0)
        return c.rc;
    if (d->next_event_seq == 0)
        d->next_event_seq = 1;
    tide_core_restore_done(d->core);
    tide_info("restored %d job(s) and %d worker record(s) from %s (leader epoch was %" PRIu64 ")",
              c.jobs, c.workers, d->store_url, d->epoch);
    tide_daemon_absorb(d);
    return 0;
}
