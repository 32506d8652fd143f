/* The audit log file: JSON lines built with cJSON (so every string is escaped), appended and flushed one
 * by one; a write that fails is counted and the file is tried again at the next SIGHUP. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "audit.h"
#include "log.h"
#include "users.h"
#include "xmalloc.h"

#include "tide/v1/cluster_service.pb-c.h"

struct tide_audit {
    char *path;
    FILE *f;
    uint64_t entries, dropped;
    tide_audit_entry_t *ring; /* TIDE_AUDIT_KEEP; the newest n, oldest at head */
    size_t head, n;
    uint64_t next_seq;
    /* unauthenticated refusals: at most ANON_RATE lines a second in the file (bursts of ANON_BURST) */
    double anon_tokens;
    int64_t anon_at_ms;
    uint64_t anon_suppressed; /* since the last line written */
};

#define ANON_RATE  20.0
#define ANON_BURST 100.0

static FILE *open_log(const char *path, int *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    FILE *f;

    if (fd < 0) {
        *err = -errno;
        return NULL;
    }
    if (!(f = fdopen(fd, "a"))) {
        *err = -errno;
        close(fd);
    }
    return f;
}

int tide_audit_open(const char *path, tide_audit_t **out, tide_error_t *err)
{
    tide_audit_t *a = tide_xcalloc(1, sizeof(*a));
    int rc = 0;

    *out = NULL;
    a->ring = tide_xcalloc(TIDE_AUDIT_KEEP, sizeof(*a->ring));
    a->next_seq = 1;
    a->anon_tokens = ANON_BURST;
    if (path) {
        a->path = tide_xstrdup(path);
        if (!(a->f = open_log(path, &rc))) {
            tide_errprintf(err, "audit log %s: %s", path, strerror(-rc));
            tide_audit_free(a);
            return rc;
        }
    }
    *out = a;
    return 0;
}

void tide_audit_reopen(tide_audit_t *a)
{
    int rc = 0;

    if (!a || !a->path)
        return;
    if (a->f)
        fclose(a->f);
    if (!(a->f = open_log(a->path, &rc)))
        tide_err("audit log %s: cannot reopen (%s): entries are dropped until the next SIGHUP", a->path,
                 strerror(-rc));
}

void tide_audit_free(tide_audit_t *a)
{
    if (!a)
        return;
    if (a->f)
        fclose(a->f);
    for (size_t i = 0; i < TIDE_AUDIT_KEEP; i++)
        free(a->ring[i].message);
    free(a->ring);
    free(a->path);
    free(a);
}

/* The slot for a new newest entry (the oldest is dropped when full). */
static tide_audit_entry_t *ring_push(tide_audit_t *a)
{
    tide_audit_entry_t *e;

    if (a->n == TIDE_AUDIT_KEEP) {
        e = &a->ring[a->head];
        a->head = (a->head + 1) % TIDE_AUDIT_KEEP;
    } else {
        e = &a->ring[(a->head + a->n) % TIDE_AUDIT_KEEP];
        a->n++;
    }
    free(e->message);
    memset(e, 0, sizeof(*e));
    return e;
}

void tide_audit_restore(tide_audit_t *a, const tide_audit_entry_t *e)
{
    tide_audit_entry_t *slot;

    if (e->seq < a->next_seq)
        return;
    slot = ring_push(a);
    *slot = *e;
    slot->message = tide_xstrdup(e->message ? e->message : "");
    a->next_seq = e->seq + 1;
}

size_t tide_audit_list(const tide_audit_t *a, uint64_t after_seq, const char *user, const tide_audit_entry_t **out,
                       size_t max)
{
    size_t n = 0, i;

    if (after_seq == 0) {
        /* the newest max: walk back, then turn around */
        for (i = a->n; i > 0 && n < max; i--) {
            const tide_audit_entry_t *e = &a->ring[(a->head + i - 1) % TIDE_AUDIT_KEEP];
            if (!user || !user[0] || !strcmp(e->user, user))
                out[n++] = e;
        }
        for (i = 0; i < n / 2; i++) {
            const tide_audit_entry_t *t = out[i];
            out[i] = out[n - 1 - i];
            out[n - 1 - i] = t;
        }
        return n;
    }
    for (i = 0; i < a->n && n < max; i++) {
        const tide_audit_entry_t *e = &a->ring[(a->head + i) % TIDE_AUDIT_KEEP];
        if (e->seq > after_seq && (!user || !user[0] || !strcmp(e->user, user)))
            out[n++] = e;
    }
    return n;
}

uint8_t *tide_audit_pack(const tide_audit_entry_t *e, char *key, size_t key_size, size_t *len)
{
    Tide__V1__AuditEntry pb = TIDE__V1__AUDIT_ENTRY__INIT;
    uint8_t *buf;

    pb.seq = e->seq;
    pb.time_ms = e->time_ms;
    pb.user = (char *)e->user;
    pb.role = (char *)e->role;
    pb.peer = (char *)e->peer;
    pb.method = (char *)e->method;
    pb.target = (char *)e->target;
    pb.code = (char *)e->code;
    pb.message = e->message ? e->message : "";
    *len = tide__v1__audit_entry__get_packed_size(&pb);
    buf = tide_xmalloc(*len + 1);
    tide__v1__audit_entry__pack(&pb, buf);
    snprintf(key, key_size, "%s%020llu", TIDE_KEY_AUDIT, (unsigned long long)e->seq);
    return buf;
}

int tide_audit_unpack(const void *value, size_t len, tide_audit_entry_t *e)
{
    Tide__V1__AuditEntry *pb = tide__v1__audit_entry__unpack(NULL, len, value);

    memset(e, 0, sizeof(*e));
    if (!pb || pb->seq == 0) {
        tide__v1__audit_entry__free_unpacked(pb, NULL);
        return -EINVAL;
    }
    e->seq = pb->seq;
    e->time_ms = pb->time_ms;
    snprintf(e->user, sizeof(e->user), "%s", pb->user);
    snprintf(e->role, sizeof(e->role), "%s", pb->role);
    snprintf(e->peer, sizeof(e->peer), "%s", pb->peer);
    snprintf(e->method, sizeof(e->method), "%s", pb->method);
    snprintf(e->target, sizeof(e->target), "%s", pb->target);
    snprintf(e->code, sizeof(e->code), "%s", pb->code);
    e->message = tide_xstrdup(pb->message);
    tide__v1__audit_entry__free_unpacked(pb, NULL);
    return 0;
}

bool tide_audit_changes(const char *path)
{
    static const char *const changing[] = {
        "/tide.v1.JobService/SubmitJob",        "/tide.v1.JobService/CancelJob",
        "/tide.v1.JobService/CheckpointJob",    "/tide.v1.JobService/ScaleJob",
        "/tide.v1.ClusterService/CordonWorker", "/tide.v1.ClusterService/UncordonWorker",
        "/tide.v1.ClusterService/DrainWorker",
    };
    for (size_t i = 0; i < sizeof(changing) / sizeof(changing[0]); i++)
        if (!strcmp(changing[i], path))
            return true;
    return false;
}

static void write_line(tide_audit_t *a, const tide_audit_entry_t *e)
{
    cJSON *o;
    char when[40], *line;
    time_t t = (time_t)(e->time_ms / 1000);
    struct tm tm;

    if (!a->path)
        return;
    if (!a->f) {
        a->dropped++;
        return;
    }
    gmtime_r(&t, &tm);
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + strlen(when), sizeof(when) - strlen(when), ".%03dZ", (int)(e->time_ms % 1000));
    o = cJSON_CreateObject();
    if (e->seq)
        cJSON_AddNumberToObject(o, "seq", (double)e->seq);
    cJSON_AddStringToObject(o, "time", when);
    cJSON_AddStringToObject(o, "user", e->user);
    cJSON_AddStringToObject(o, "role", e->role);
    cJSON_AddStringToObject(o, "peer", e->peer);
    cJSON_AddStringToObject(o, "method", e->method);
    cJSON_AddStringToObject(o, "target", e->target);
    cJSON_AddStringToObject(o, "code", e->code);
    cJSON_AddStringToObject(o, "message", e->message ? e->message : "");
    if (!e->seq && a->anon_suppressed) {
        cJSON_AddNumberToObject(o, "suppressed_before", (double)a->anon_suppressed);
        a->anon_suppressed = 0;
    }
    line = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!line || fprintf(a->f, "%s\n", line) < 0 || fflush(a->f) != 0)
        a->dropped++;
    free(line);
}

static void fill(tide_audit_entry_t *e, int64_t wall_ms, const tide_rpc_identity_t *id, const char *peer,
                 const char *path, const char *target, tide_grpc_code_t code, const char *message)
{
    const char *method = strrchr(path, '/');

    e->time_ms = wall_ms;
    snprintf(e->user, sizeof(e->user), "%s", id->name);
    snprintf(e->role, sizeof(e->role), "%s", tide_role_name((tide_role_t)id->role));
    snprintf(e->peer, sizeof(e->peer), "%s", peer ? peer : "");
    snprintf(e->method, sizeof(e->method), "%s", method ? method + 1 : path);
    snprintf(e->target, sizeof(e->target), "%s", target ? target : "");
    snprintf(e->code, sizeof(e->code), "%s", tide_grpc_code_name(code));
    e->message = tide_xstrdup(message ? message : "");
}

const tide_audit_entry_t *tide_audit_write(tide_audit_t *a, int64_t wall_ms, const tide_rpc_identity_t *id,
                                           const char *peer, const char *path, const char *target,
                                           tide_grpc_code_t code, const char *message)
{
    tide_audit_entry_t *e, anon;

    a->entries++;
    if (!id->name[0]) {
        /* Nobody we know: the file only, unnumbered, and at most ANON_RATE lines a second, so that a flood
         * of bad tokens can neither grow the file without bound nor push real entries out. */
        if (wall_ms > a->anon_at_ms) {
            a->anon_tokens += ANON_RATE * (double)(wall_ms - a->anon_at_ms) / 1000.0;
            if (a->anon_tokens > ANON_BURST)
                a->anon_tokens = ANON_BURST;
            a->anon_at_ms = wall_ms;
        }
        if (a->anon_tokens < 1) {
            a->anon_suppressed++;
            return NULL;
        }
        a->anon_tokens -= 1;
        memset(&anon, 0, sizeof(anon));
        fill(&anon, wall_ms, id, peer, path, target, code, message);
        write_line(a, &anon);
        free(anon.message);
        return NULL;
    }
    e = ring_push(a);
    e->seq = a->next_seq++;
    fill(e, wall_ms, id, peer, path, target, code, message);
    write_line(a, e);
    return e;
}

uint64_t tide_audit_entries(const tide_audit_t *a)
{
    return a ? a->entries : 0;
}

uint64_t tide_audit_dropped(const tide_audit_t *a)
{
    return a ? a->dropped : 0;
}
