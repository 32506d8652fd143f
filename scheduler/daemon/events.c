/* The event log: the newest events (a ring, in memory) and the WatchEvents streams that follow it. An
 * event enters the ring only once the state change behind it is durable. Sequence numbers keep growing
 * across restarts (their high-water mark is in the store); the events themselves do not survive one. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "authz.h"
#include "daemon.h"
#include "log.h"
#include "xmalloc.h"

#include "tide/v1/job_service.pb-c.h"

struct watcher {
    tide_list_t node;
    tide_daemon_t *d;
    tide_rpc_call_t *call;
    char *job_id; /* filter; NULL: every job */
    char *owner;  /* a user's watch: only events of its own jobs, and those about no job; NULL: all */
};

void tide_events_init(tide_daemon_t *d, size_t cap)
{
    d->ring = tide_xcalloc(cap, sizeof(*d->ring));
    d->ring_cap = cap;
    tide_list_init(&d->watchers);
}

static void event_clear(tide_event_t *ev)
{
    free(ev->job_id);
    free(ev->worker_id);
    free(ev->message);
    memset(ev, 0, sizeof(*ev));
}

void tide_events_free(tide_daemon_t *d)
{
    for (size_t i = 0; i < d->ring_len; i++)
        event_clear(&d->ring[(d->ring_head + i) % d->ring_cap]);
    free(d->ring);
    d->ring = NULL;
    d->ring_len = 0;
}

void tide_events_revoke(tide_daemon_t *d)
{
    tide_list_t *pos, *tmp;
    char msg[200];

    tide_list_for_each_safe(pos, tmp, &d->watchers) {
        watcher_t *w = tide_list_entry(pos, watcher_t, node);
        if (!tide_authz_current(d->authz, tide_rpc_call_identity(w->call), msg, sizeof(msg)))
            tide_rpc_call_finish(w->call, TIDE_GRPC_UNAUTHENTICATED, msg);
    }
}

static bool matches(const watcher_t *w, const tide_event_t *ev)
{
    if (w->owner && ev->job_id) {
        const tide_job_t *job = tide_core_job_find(w->d->core, ev->job_id);
        if (!job || strcmp(tide_authz_owner(job), w->owner) != 0)
            return false;
    }
    return !w->job_id || (ev->job_id && strcmp(ev->job_id, w->job_id) == 0);
}

/* Sends one event; false when the watcher is too slow and was ended. */
static bool send_event(watcher_t *w, const tide_event_t *ev)
{
    Tide__V1__Event pb = TIDE__V1__EVENT__INIT;

    pb.seq = ev->seq;
    pb.time_ms = ev->time_ms;
    pb.type = (char *)ev->type;
    pb.job_id = ev->job_id ? ev->job_id : "";
    pb.worker_id = ev->worker_id ? ev->worker_id : "";
    pb.message = ev->message ? ev->message : "";
    if (tide_rpc_call_send_pb(w->call, &pb.base) == -ENOBUFS) {
        tide_rpc_call_finish(w->call, TIDE_GRPC_RESOURCE_EXHAUSTED,
                             "this WatchEvents client reads too slowly; resume with since_seq");
        return false;
    }
    return true;
}

void tide_events_publish(tide_daemon_t *d, tide_event_t *ev)
{
    tide_event_t *slot;
    tide_list_t *pos, *tmp;

    if (d->ring_len == d->ring_cap) {
        event_clear(&d->ring[d->ring_head]);
        d->ring_head = (d->ring_head + 1) % d->ring_cap;
        d->ring_len--;
    }
    slot = &d->ring[(d->ring_head + d->ring_len) % d->ring_cap];
    *slot = *ev;
    d->ring_len++;
    tide_list_for_each_safe(pos, tmp, &d->watchers) {
        watcher_t *w = tide_list_entry(pos, watcher_t, node);
        if (matches(w, slot) && !send_event(w, slot))
            tide_list_remove(&w->node);
    }
}

static void watch_on_message(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    tide_daemon_t *d = tide_rpc_call_server_data(call);
    Tide__V1__WatchEventsRequest *req = tide__v1__watch_events_request__unpack(NULL, len, data);
    watcher_t *w;

    if (!req) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT,
                             "request is not a valid tide.v1.WatchEventsRequest");
        return;
    }
    w = tide_xcalloc(1, sizeof(*w));
    w->d = d;
    w->call = call;
    w->job_id = req->job_id[0] ? tide_xstrdup(req->job_id) : NULL;
    if (!tide_authz_sees_all(tide_rpc_call_identity(call)))
        w->owner = tide_xstrdup(tide_rpc_call_identity(call)->name);
    tide_list_init(&w->node);
    tide_rpc_call_set_data(call, w);
    for (size_t i = 0; i < d->ring_len; i++) {
        const tide_event_t *ev = &d->ring[(d->ring_head + i) % d->ring_cap];
        if (ev->seq > req->since_seq && matches(w, ev) && !send_event(w, ev))
            goto done;
    }
    if (!req->follow) {
        tide_rpc_call_finish(call, TIDE_GRPC_OK, NULL);
        goto done;
    }
    tide_list_push_back(&d->watchers, &w->node);
done:
    tide__v1__watch_events_request__free_unpacked(req, NULL);
}

static void watch_on_close(tide_rpc_call_t *call)
{
    watcher_t *w = tide_rpc_call_data(call);

    if (!w)
        return;
    tide_list_remove(&w->node);
    free(w->job_id);
    free(w->owner);
    free(w);
}

const tide_rpc_method_t tide_svc_watch_events = {
    .path = "/tide.v1.JobService/WatchEvents",
    .kind = TIDE_RPC_SERVER_STREAMING,
    .on_message = watch_on_message,
    .on_close = watch_on_close,
};
